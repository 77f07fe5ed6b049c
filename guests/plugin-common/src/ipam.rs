//! Running the network's IPAM plugin through the host (`delegate`), the
//! way the reference plugins do: same config, same environment, the
//! command set. A wasm IPAM plugin runs inside wasmcni; whatever it
//! reserves joins this invocation's journal, so a failed ADD releases it
//! without the explicit IPAM DEL the reference runs (and sometimes forgets).

use guest_sdk::cni::{CniResult, Command, Error};
use guest_sdk::delegate;
use guest_sdk::skel::Invocation;

/// The IPAM plugin type the config names (empty when none).
pub fn plugin_type(inv: &Invocation) -> &str {
    inv.conf
        .ipam
        .as_ref()
        .map(|i| i.plugin_type.as_str())
        .unwrap_or("")
}

/// ADD through the IPAM plugin; its result in the canonical model.
pub fn add(inv: &Invocation) -> Result<CniResult, Error> {
    delegate::add(plugin_type(inv), &inv.stdin, inv.version())
}

/// DEL, CHECK, GC or STATUS through the IPAM plugin.
pub fn exec(inv: &Invocation, command: Command) -> Result<(), Error> {
    delegate::exec(plugin_type(inv), command, &inv.stdin)
}

/// [`exec`] when the config names an IPAM plugin; nothing otherwise (an
/// interface plugin whose IPAM is optional).
pub fn exec_if_configured(inv: &Invocation, command: Command) -> Result<(), Error> {
    if plugin_type(inv).is_empty() {
        return Ok(());
    }
    exec(inv, command)
}

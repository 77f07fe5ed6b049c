//! Running another plugin (an IPAM plugin), as the reference plugins do
//! with `invoke.DelegateAdd`: the host runs it with this invocation's
//! environment and `CNI_COMMAND` set to the command given, in-process when
//! it is a wasm plugin. Its changes join this invocation's journal.
//!
//! # Capabilities
//! The plugin's policy must list the delegate (`delegates`, or
//! `native-delegates` for a native binary from `CNI_PATH`).
//!
//! # Example: delegation
//! An interface plugin's IPAM, as bridge and ptp do it: the config's
//! `"ipam": {"type": "host-local", ...}` is run with this invocation's
//! config and environment (the entry lists `"delegates": ["host-local"]`).
//! What a wasm delegate changes joins this invocation's journal, so a
//! failed ADD releases its addresses without the explicit IPAM DEL the
//! reference plugins run.
//!
//! ```no_run
//! use guest_sdk::cni::{CniResult, Command, Error};
//! use guest_sdk::delegate;
//! use guest_sdk::skel::Invocation;
//!
//! fn ipam_type(inv: &Invocation) -> Result<&str, Error> {
//!     match inv.conf.ipam.as_ref() {
//!         Some(ipam) if !ipam.plugin_type.is_empty() => Ok(ipam.plugin_type.as_str()),
//!         _ => Err(Error::invalid_config("an \"ipam\" section with a \"type\" is required")),
//!     }
//! }
//!
//! /// ADD: the addresses, gateways and routes to configure, read in the
//! /// config's version whatever version the delegate answered in.
//! fn add(inv: &Invocation) -> Result<CniResult, Error> {
//!     let result = delegate::add(ipam_type(inv)?, &inv.stdin, inv.version())?;
//!     // ... put result.ips on the interface, add result.routes ...
//!     Ok(result)
//! }
//!
//! /// DEL (and CHECK, GC, STATUS alike): the delegate's own; its error,
//! /// if any, is passed on unchanged.
//! fn del(inv: &Invocation) -> Result<(), Error> {
//!     delegate::exec(ipam_type(inv)?, Command::Del, &inv.stdin)
//! }
//! ```

use crate::bindings::wasmcni::plugin::delegate::{self as wit, DelegateError};
use crate::cni::{CniResult, Command, Error};
use crate::net::HostError;

/// Runs plugin `plugin_type` with `command` and `config` on stdin; returns
/// its stdout. A delegate that fails gives its own CNI error, unchanged
/// (as the reference passes on its IPAM's errors).
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn run(plugin_type: &str, command: Command, config: &[u8]) -> Result<String, Error> {
    if plugin_type.is_empty() {
        return Err(Error::internal("no plugin name provided"));
    }
    crate::require_host("delegate.run");
    let config = String::from_utf8_lossy(config);
    match wit::run(plugin_type, command.as_str(), &config) {
        Ok(out) => Ok(out),
        Err(DelegateError::Failed(stdout)) => Err(Error::from_plugin_output(&stdout)),
        Err(DelegateError::Host(code)) => Err(HostError {
            operation: "delegate.run",
            object: format!("{command} of plugin {plugin_type:?}"),
            code,
        }
        .into()),
    }
}

/// ADD through `plugin_type`; its result, converted from the version it
/// answered in (its `cniVersion`, else `version`).
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn add(plugin_type: &str, config: &[u8], version: &str) -> Result<CniResult, Error> {
    let out = run(plugin_type, Command::Add, config)?;
    let v: serde_json::Value = serde_json::from_str(&out)
        .map_err(|e| Error::decode(format!("decoding the result of {plugin_type}: {e}")))?;
    let answered = v
        .get("cniVersion")
        .and_then(|s| s.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(version)
        .to_owned();
    CniResult::from_json(&v, &answered)
}

/// DEL, CHECK, GC or STATUS through `plugin_type`.
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn exec(plugin_type: &str, command: Command, config: &[u8]) -> Result<(), Error> {
    run(plugin_type, command, config).map(drop)
}

//! What the standard plugins share (like containernetworking/plugins'
//! `pkg/`): veth setup, configuring an interface from a result, IPAM
//! delegation, MAC addresses, forwarding. Not part of the SDK third-party
//! authors build on; the standard plugins' own toolbox.
#![deny(missing_docs)]

pub mod check;
pub mod compat;
pub mod iface;
pub mod ipam;
pub mod lenient;
pub mod mac;
#[cfg(not(target_arch = "wasm32"))]
pub mod option_table;
pub mod stacked;
pub mod testing;
pub mod veth;

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::firewall::Rules;
use guest_sdk::net::{prefix, Netns};

/// `ipMasqBackend` (bridge, ptp; upstream v1.6+), checked by ADD as
/// upstream checks it, only with `ipMasq` set: `iptables` or `nftables`
/// (unset: upstream picks one). Either way wasmcni's masquerade is the
/// same nftables rule of its own (the firewall capability), as both of
/// upstream's backends masquerade alike; any other value is refused with
/// upstream's message.
pub fn check_ip_masq_backend(ip_masq: bool, backend: Option<&str>) -> Result<(), Error> {
    match backend {
        Some(b) if ip_masq && b != "iptables" && b != "nftables" => {
            Err(Error::internal(format!("unknown ipmasq backend {b:?}")))
        }
        _ => Ok(()),
    }
}

/// `ipMasq` (bridge, ptp): masquerades what each address of `result` sends
/// outside its subnet, in one firewall call in the node namespace `host`.
pub fn ip_masq(host: &Netns, result: &CniResult) -> Result<(), Error> {
    let prefixes = result
        .ips
        .iter()
        .map(|ip| prefix(ip.address.addr(), ip.address.prefix_len()))
        .collect();
    host.firewall_add(&Rules::Masquerade(prefixes))
        .map_err(|e| Error::internal(format!("failed to setup IP masquerade: {e}")))
}

/// Enables IP forwarding in `ns` for the families given, writing only when
/// it is not on already (`net.ipv4.ip_forward`,
/// `net.ipv6.conf.all.forwarding`), as the reference does.
pub fn enable_forwarding(ns: &Netns, v4: bool, v6: bool) -> Result<(), Error> {
    for (on, key) in [
        (v4, "net.ipv4.ip_forward"),
        (v6, "net.ipv6.conf.all.forwarding"),
    ] {
        if !on {
            continue;
        }
        let now = ns.sysctl(key)?;
        if now.trim() != "1" {
            ns.set_sysctl(key, "1")?;
        }
    }
    Ok(())
}

/// 32 random bits, from the WASI random source (through std's hasher
/// seeds, which wasm32-wasip2 draws from `wasi:random`).
pub fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(0x636e_6921);
    (h.finish() >> 16) as u32
}

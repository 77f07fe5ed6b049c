//! wasmcni's kernel layer: what the host asks of the Linux kernel on a
//! plugin's behalf, and nothing of why. Netlink by family ([`netlink`]:
//! rtnetlink links, addresses, routes, rules, neighbours, traffic control
//! and bridge VLANs; nftables and conntrack over netfilter sockets),
//! network namespace handles ([`netns`]), sysctls read and written inside
//! a namespace ([`sysctl`]), persistent tap devices ([`tuntap`]) and
//! gratuitous ARP ([`announce`]).
//!
//! It knows nothing of plugins, policy, attachments or records: the
//! capability layer of the `wasmcni` crate decides what may be done, and
//! calls this crate to do it. Cargo keeps the dependency one way.

#![deny(missing_docs)]

pub mod announce;
pub mod dhcp4;
pub mod netlink;
pub mod netns;
pub mod sysctl;
pub mod tuntap;

/// Held by this crate's tests that ask for a change to the kernel
/// ([`netlink::note_change`]) or that watch for one: the count of changes
/// is the process's, and the tests run on threads of one process.
#[cfg(test)]
pub(crate) fn changes_serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

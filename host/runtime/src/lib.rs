//! wasmcni's runtime: runs CNI plugins compiled to WASI Preview 2
//! components, performing every privileged operation on their behalf
//! through a narrow, policy-checked capability interface. The engine,
//! policy, audit and limits; the capability layer (`caps`: one module per
//! WIT interface, the authority model, the undo journal); attachment
//! records, plugin state and IPAM state; the runner, the chain runner and
//! GC. The kernel layer below it is `wasmcni-kernel`; the command line
//! above it is the `wasmcni` crate, the author tooling `wasmcni-tools`.
#![deny(missing_docs)]

pub mod attachment;
pub mod audit;
pub mod caps;
pub mod chain;
pub mod clock;
pub mod cni_error;
pub mod config;
pub mod conflist;
pub mod devices;
pub mod dhcp_wire;
pub mod engine;
mod exec;
mod fault;
pub mod gc;
pub mod ipam;
pub mod journal;
pub mod limits;
pub mod netavark;
pub mod netlock;
pub mod plugin_state;
pub mod plugins;
pub mod policy;
pub mod record;
pub mod runner;
pub mod session;
mod state_fs;
#[cfg(test)]
mod wit_compat;

// The kernel layer, a crate of its own (host/kernel), under the names the
// rest of the host has always used for it.
pub use wasmcni_kernel::{announce, dhcp4, netlink, netns, sysctl, tuntap};

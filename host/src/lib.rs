//! wasmcni: runs CNI plugins compiled to WASI Preview 2 components, as a
//! drop-in plugin binary, performing every privileged operation on their
//! behalf through a narrow, policy-checked capability interface.
#![deny(missing_docs)]

pub mod audit;
pub mod caps;
pub mod chain;
pub mod cli;
pub mod clock;
pub mod cni_error;
pub mod config;
pub mod conflist;
pub mod demo;
pub mod devices;
pub mod engine;
mod fault;
pub mod gc;
pub mod inspect;
pub mod install;
pub mod ipam;
pub mod journal;
pub mod limits;
pub mod netlock;
pub mod plugin_state;
pub mod plugins;
pub mod policy;
pub mod record;
pub mod runner;
pub mod scaffold;
pub mod suggest;
pub mod trial;

// The kernel layer, a crate of its own (host/kernel), under the names the
// rest of the host has always used for it.
pub use wasmcni_kernel::{announce, netlink, netns, sysctl, tuntap};

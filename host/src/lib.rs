//! wasmcni: runs CNI plugins compiled to WASI Preview 2 components, as a
//! drop-in plugin binary, performing every privileged operation on their
//! behalf through a narrow, policy-checked capability interface.
//!
//! This crate is the executable's: its command line ([`cli`]), `wasmcni
//! install` ([`install`]), `wasmcni uninstall` ([`uninstall`]) and
//! `wasmcni audit`/`inspect` ([`inspect`]). It
//! re-exports the layers below under their old paths: the runtime
//! (`wasmcni-runtime`: engine, policy, capabilities, records, runner,
//! chain runner, GC), the kernel layer (`wasmcni-kernel`, through the
//! runtime) and the author tooling (`wasmcni-tools`: new, try, policy
//! suggest, demo).
#![deny(missing_docs)]

pub mod chain_into;
pub mod cli;
pub mod dhcp_daemon;
pub mod distribute;
mod files;
pub mod inspect;
pub mod install;
pub mod uninstall;

pub use wasmcni_runtime::*;
pub use wasmcni_tools::{demo, scaffold, suggest, trial};

//! # wasmcni guest SDK
//!
//! Write CNI plugins in Rust, build them for `wasm32-wasip2`, and run them
//! under wasmcni. A plugin is a plain `fn main` that makes one call:
//!
//! ```ignore
//! use guest_sdk::cni::{CniResult, Error};
//! use guest_sdk::skel::{self, Invocation, Plugin};
//!
//! struct Mine;
//! impl Plugin for Mine {
//!     fn add(&self, inv: &Invocation) -> Result<CniResult, Error> { todo!() }
//!     fn check(&self, inv: &Invocation) -> Result<(), Error> { Ok(()) }
//!     fn del(&self, inv: &Invocation) -> Result<(), Error> { Ok(()) }
//! }
//!
//! fn main() {
//!     skel::run(Mine, "my plugin v1");
//! }
//! ```
//!
//! - [`cni`]: the CNI types for every spec version (0.1.0 – 1.1.0), with
//!   result conversion the way libcni does it, and the CNI error type.
//! - [`skel`]: the entry point, like Go's `skel.PluginMainFuncs`.
//! - [`net`]: typed wrappers over wasmcni's capability imports. The plugin
//!   has no other authority: no files, no sockets, no processes.
//! - [`ipam`]: IPAM reservation state kept by the host (host-local's
//!   on-disk layout), and [`delegate`]: running another plugin (IPAM)
//!   through the host.
#![deny(missing_docs)]

pub mod cni;
pub mod delegate;
pub mod ipam;
pub mod net;
pub mod skel;

/// Bindings generated from `wit/` (the `wasmcni:plugin/plugin` world).
#[allow(missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "wasmcni:plugin/plugin",
    });
}

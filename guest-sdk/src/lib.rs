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

/// Stops a host call where no wasmcni host can answer it: a native build
/// (`cargo test` of a plugin on the build machine). wit-bindgen's native
/// stand-ins for the imports are `extern "C"` functions whose body is
/// `unreachable!()`; a panic cannot unwind out of them, so the test process
/// would abort (SIGABRT) with no word of which call it was. Every handle
/// the SDK hands out (a [`net::Netns`], an [`ipam::Store`]) is made by one
/// of four calls, and [`delegate::run`] is the fifth way in: each calls
/// this first, so the first host call a native test reaches panics here,
/// as an ordinary, catchable test failure that says what to do.
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
#[inline(always)]
pub(crate) fn require_host(call: &'static str) {
    #[cfg(not(target_arch = "wasm32"))]
    panic!(
        "guest-sdk: `{call}` is a call to the wasmcni host, and this is a native build \
         ({arch}), where there is no host to answer it. Natively, unit-test the pure parts \
         of the plugin (config parsing, result building). Run the host calls under \
         wasmcni: build for wasm32-wasip2 (`cargo build --release`) and run the .wasm \
         with `wasmcni try PLUGIN.wasm --config CONF.json` (or `wasmcni run`).",
        arch = std::env::consts::ARCH,
    );
    #[cfg(target_arch = "wasm32")]
    let _ = call;
}

/// Bindings generated from `wit/` (the `wasmcni:plugin/plugin` world).
#[allow(missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "wasmcni:plugin/plugin",
        // Addresses, prefixes, routes and options compare by value.
        additional_derives: [PartialEq, Eq],
    });
}

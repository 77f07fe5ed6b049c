//! # guest-sdk: write CNI plugins that run under wasmcni
//!
//! A wasmcni plugin is a Rust binary built for `wasm32-wasip2` (a WASI
//! Preview 2 component). wasmcni runs it as a drop-in CNI plugin: the
//! runtime's `CNI_*` environment and config reach it as usual, and every
//! privileged thing it does is a host call that wasmcni checks against the
//! plugin's policy entry, performs, journals (undone if ADD fails) and
//! audits. The plugin has no other authority: no files, sockets or
//! processes. crates.io has this crate as `wasmcni-guest-sdk`; a plugin's
//! Cargo.toml names it `guest-sdk`, so the import is `guest_sdk`.
//!
//! ## Start
//! `wasmcni new NAME` makes a plugin crate (Cargo.toml, `.cargo/config.toml`
//! with the `wasm32-wasip2` target, `src/main.rs` with tests, a starter
//! policy entry). By hand, a crate depends on this one as:
//!
//! ```toml
//! [dependencies]
//! guest-sdk = { package = "wasmcni-guest-sdk", version = "0.1.0" }
//! ```
//!
//! ## A complete plugin
//! A chained plugin that sets the MTU of the container's interface. `main`
//! is one call; the config parsing is a pure function, tested natively.
//!
//! ```no_run
//! use guest_sdk::cni::{CniResult, Error, NetConf};
//! use guest_sdk::skel::{self, Invocation, Plugin};
//!
//! /// This plugin's key in the network config (`"mtu": 1400`).
//! #[derive(serde::Deserialize)]
//! struct Conf {
//!     mtu: u32,
//! }
//!
//! fn parse(conf: &NetConf) -> Result<Conf, Error> {
//!     conf.plugin_config() // code 7 naming the field when it is wrong
//! }
//!
//! struct MtuSetter;
//!
//! impl Plugin for MtuSetter {
//!     fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
//!         let conf = parse(&inv.conf)?;
//!         // prevResult (code 7 without one), the container's netns
//!         // (CNI_NETNS) and the link CNI_IFNAME there: needs `read`.
//!         let c = inv.container_interface()?;
//!         c.ns.set_mtu(c.link.index, conf.mtu)?; // needs `modify`; journaled, audited
//!         Ok(c.prev)
//!     }
//!     fn check(&self, inv: &Invocation) -> Result<(), Error> {
//!         let want = parse(&inv.conf)?.mtu;
//!         let have = inv.container_interface()?.link.mtu; // needs `read`
//!         if have != want {
//!             return Err(Error::internal(format!("MTU {have}, expected {want}")));
//!         }
//!         Ok(())
//!     }
//!     // DEL: the default (nothing to undo: the MTU goes with the
//!     // interface, and the interface with the plugin that made it).
//! }
//!
//! fn main() {
//!     skel::run(MtuSetter, "mtu-setter v1");
//! }
//! ```
//!
//! Only `add` is required: [`skel::Plugin`]'s CHECK, DEL, STATUS and GC
//! have defaults, and its docs say when each is right. CHECK's verifies
//! nothing of the container, so a plugin that changes anything writes its
//! own, as here.
//!
//! A host call that fails is a [`net::HostError`] naming the call, the
//! object and why (`link.set-mtu link #2 in the container netns: access
//! denied by wasmcni policy`); `?` turns it into a CNI error (code 999).
//! The repository's `examples/` hold this plugin (`mtu-setter`) and one that
//! needs the node's namespace (`host-proxy-arp`), each with its policy.
//!
//! ## Build, test, run
//! ```sh
//! cargo build --release                 # .cargo/config.toml: target wasm32-wasip2
//! cargo test --target host-tuple        # unit tests on the build machine
//! sudo wasmcni try target/wasm32-wasip2/release/mtu-setter.wasm --config conf.json
//! sudo wasmcni run target/wasm32-wasip2/release/mtu-setter.wasm --policy policy.json
//! ```
//!
//! Unit tests run natively, where there is no wasmcni host: keep the logic
//! worth testing in pure functions (config parsing, result building; the
//! [`cni`] types and [`skel::dispatch`] work natively). A host call reached
//! in a native test panics with a message that names the call and says to
//! run it under wasmcni (`wasmcni try`): an ordinary test failure, not the
//! abort of wit-bindgen's native stand-ins (see [`net`], "Native builds").
//!
//! A plugin runs with no authority until the node's policy has an entry
//! for it (`plugins.NAME` in `/etc/wasmcni/policy.json`), best pinned to
//! its build's sha256:
//!
//! ```json
//! {"plugins": {"mtu-setter": {"sha256": "…", "container": {"read": true, "modify": true}}}}
//! ```
//!
//! ## Modules
//! - [`cni`]: the CNI types for every spec version (0.1.0 – 1.1.0), with
//!   result conversion the way libcni does it, and the CNI error type.
//! - [`skel`]: the entry point, like Go's `skel.PluginMainFuncs`.
//! - [`net`]: typed wrappers over wasmcni's capability imports, and the
//!   conversions between `std`'s addresses and the WIT types.
//! - [`tc`]: rate limits on links (`traffic-control`), as methods of
//!   [`net::Netns`].
//! - [`firewall`]: nftables rules for the attachment (port mappings,
//!   masquerade, forward, isolation, MAC spoof checks), as methods of
//!   [`net::Netns`].
//! - [`ipam`]: IPAM reservation state kept by the host (host-local's
//!   on-disk layout), and [`delegate`]: running another plugin (IPAM)
//!   through the host.
//! - [`dhcp`]: DHCPv4 leases kept by wasmcni's DHCP daemon (the `dhcp`
//!   IPAM plugin).
//! - [`state`]: a small record per attachment the host keeps from ADD to
//!   DEL (what a plugin must remember to undo its changes on DEL).
//!
//! Two route types: [`cni::Route`] (also [`cni::ResultRoute`]) is a route
//! in a CNI result; [`net::Route`] (also [`net::KernelRoute`]) is one the
//! kernel holds. [`net::Route::from_result`] converts.
#![deny(missing_docs)]

pub mod cni;
pub mod delegate;
pub mod dhcp;
pub mod firewall;
pub mod ipam;
pub mod net;
pub mod skel;
pub mod state;
pub mod tc;

/// Stops a host call where no wasmcni host can answer it: a native build
/// (`cargo test` of a plugin on the build machine). wit-bindgen's native
/// stand-ins for the imports are `extern "C"` functions whose body is
/// `unreachable!()`; a panic cannot unwind out of them, so the test process
/// would abort (SIGABRT) with no word of which call it was. Every handle
/// the SDK hands out (a [`net::Netns`], an [`ipam::Store`]) is made by one
/// of four calls, and [`delegate::run`] and the [`state`] functions are
/// the other ways in: each calls this first, so the first host call a native test reaches panics here,
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
        path: "wit",
        world: "wasmcni:plugin/plugin",
        // Addresses, prefixes, routes and options compare by value.
        additional_derives: [PartialEq, Eq],
    });
}

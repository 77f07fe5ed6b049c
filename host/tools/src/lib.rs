//! wasmcni's author and operator tooling, on top of the runtime:
//! `wasmcni new` ([`scaffold`]), `wasmcni try` ([`trial`]), `wasmcni
//! policy suggest` ([`suggest`]) and `wasmcni demo` ([`demo`]). None of it
//! runs when a runtime calls a plugin.

#![deny(missing_docs)]

pub mod demo;
pub mod plugin_arg;
mod sandbox;
pub mod scaffold;
pub mod suggest;
pub mod trial;

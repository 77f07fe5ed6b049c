//! A small record per attachment that the host keeps for the plugin from
//! ADD to DEL: what a plugin must remember to undo its changes on DEL (the
//! `tuning` plugin keeps the MTU, MAC and flags it changed).
//!
//! The record is this plugin's, for the attachment the runtime invoked it
//! for (network, `CNI_CONTAINERID`, `CNI_IFNAME`): there is no way to name
//! another. Writes during ADD are undone if the ADD fails; the host
//! removes the record when the attachment's DEL succeeds, and GC removes
//! the records of attachments the runtime no longer holds. Keys are 1–64
//! bytes of `[A-Za-z0-9._-]`, values at most 4096 bytes, at most 32 keys.
//!
//! # Capabilities
//! Needs `"attachment-state": true` in the plugin's policy entry.
//!
//! # Example: plugin state
//! As the `tuning` plugin does: ADD changes the container interface's MTU
//! and keeps the old one; DEL puts it back (`read` and `modify` in the
//! container grant too).
//!
//! ```no_run
//! use guest_sdk::cni::{CniResult, Error};
//! use guest_sdk::net::Netns;
//! use guest_sdk::skel::Invocation;
//! use guest_sdk::state;
//!
//! fn add(inv: &Invocation) -> Result<CniResult, Error> {
//!     let c = inv.container_interface()?;
//!     state::set("old-mtu", &c.link.mtu.to_string())?; // undone if ADD fails
//!     c.ns.set_mtu(c.link.index, 9000)?;
//!     Ok(c.prev)
//! }
//!
//! fn del(inv: &Invocation) -> Result<(), Error> {
//!     // None: ADD never got that far, or this is DEL again.
//!     let Some(old) = state::get("old-mtu")? else { return Ok(()) };
//!     let mtu: u32 = old.parse().map_err(|_| Error::internal(format!("old MTU {old:?}")))?;
//!     // The namespace or the interface may be gone: nothing to restore.
//!     if let Ok(ns) = Netns::container() {
//!         if let Ok(link) = ns.link(&inv.env.ifname) {
//!             ns.set_mtu(link.index, mtu)?;
//!         }
//!     }
//!     state::remove("old-mtu")?; // the host drops the record after DEL anyway
//!     Ok(())
//! }
//! ```

use crate::bindings::wasmcni::plugin::attachment_state as wit;
use crate::net::HostError;

fn err(operation: &'static str, key: &str) -> impl FnOnce(crate::net::ErrorCode) -> HostError {
    let object = format!("key {key:?} of this attachment's record");
    move |code| HostError {
        operation,
        object,
        code,
    }
}

/// The value of `key`, if the record holds one.
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn get(key: &str) -> Result<Option<String>, HostError> {
    crate::require_host("attachment-state.get");
    wit::get(key).map_err(err("attachment-state.get", key))
}

/// Every key of the record, sorted.
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn keys() -> Result<Vec<String>, HostError> {
    crate::require_host("attachment-state.keys");
    wit::keys().map_err(|code| HostError {
        operation: "attachment-state.keys",
        object: "this attachment's record".into(),
        code,
    })
}

/// Sets `key` to `value` (the record is replaced atomically).
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn set(key: &str, value: &str) -> Result<(), HostError> {
    crate::require_host("attachment-state.set");
    wit::set(key, value).map_err(err("attachment-state.set", key))
}

/// Removes `key` (no error if absent).
#[cfg_attr(not(target_arch = "wasm32"), track_caller)]
pub fn remove(key: &str) -> Result<(), HostError> {
    crate::require_host("attachment-state.remove");
    wit::remove(key).map_err(err("attachment-state.remove", key))
}

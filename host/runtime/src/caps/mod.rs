//! The capability interfaces the host implements for plugins, one file per
//! WIT interface. Every call goes the same way ([`StoreData::cap`]): count
//! it against the budget, resolve the namespace handle, check the grant and
//! the invariants, act through netlink, journal the inverse, audit.
//!
//! The invariants that no policy can waive live here, next to the calls:
//! - a plugin acts only in the two namespaces it was given;
//! - in the host namespace it may modify, move or delete only links wasmcni
//!   created for this container (alias `wasmcni:<container id>`, see
//!   [`MARK_PREFIX`]) or links its grant names by pattern, and may use a
//!   `masters` link only as a master;
//! - host addresses only on such links; host routes only in the main table,
//!   through such links, and only wasmcni's own routes ([`RTPROT_WASMCNI`])
//!   through such links may be replaced or deleted;
//! - sysctls only under `net.` and under the grant's patterns; per-link
//!   host keys only for links the plugin may modify;
//! - during ADD a plugin deletes only links it created in the same call, so
//!   the journal can undo everything.
//!
//! The layers, each importing only those below it: [`bindings`] (the WIT
//! bindings, the error type, the resource handles), [`ctx`] (the
//! invocation context and how one call goes), the authority model and the
//! attachment's records (`authority`, `borrowed`, `owned`) and the undo
//! replay (`undo`), then one module per WIT interface. This file only
//! declares them and names what the rest of the host uses.

mod address;
mod args;
pub mod authority;
pub mod bindings;
mod borrowed;
pub mod catalog;
pub mod ctx;
pub mod delegate;
mod dhcp;
mod facts;
pub mod firewall;
mod holders;
mod ipam_store;
mod link;
mod netns;
mod owned;
mod route;
mod row;
mod stacked;
mod state;
mod sysctl;
mod traffic_control;
mod undo;

pub use bindings::{BudgetExceeded, CapError, Denial, NsHandle, StoreHandle};
pub use borrowed::DelCleanup;
pub use ctx::{
    add_address, add_attachment_state, add_delegate, add_dhcp, add_firewall, add_ipam_store,
    add_link, add_netns, add_route, add_sysctl, add_traffic_control, add_types, Command, Ctx,
    CtxParams, StoreData, RTPROT_WASMCNI,
};

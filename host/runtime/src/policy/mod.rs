//! Policy: the only place authority is granted to a plugin.
//!
//! Deny by default. An embedded default policy (`default-policy.json`)
//! grants each standard plugin what its job needs; a policy file can replace
//! the entry of any plugin (narrow or widen it), pin it to a sha256, and
//! set its limits. A plugin without an entry gets nothing: it runs, and
//! every capability call it makes is `access-denied`.
//!
//! A plugin's [`Grant`] is resolved once, when its invocation context is
//! created, and copied into it; capability implementations ask the grant
//! and never decide on their own. What no policy can waive (the ownership
//! invariants of the host namespace) lives in `caps`, next to the calls.
//!
//! The policy file is `$WASMCNI_POLICY` if set, else
//! `/etc/wasmcni/policy.json` if it exists. It must belong to root (or the
//! user running wasmcni) and not be writable by group or others, and so
//! must every directory on its path (as given, and as resolved through
//! symlinks), or it is refused: a policy anyone can edit or replace grants
//! nothing.
//!
//! Entries may also be files of their own: `$WASMCNI_POLICY_DIR`, else
//! `/etc/wasmcni/policy.d` if it exists, holds `NAME.json`, plugin
//! `NAME`'s entry (the object that would be `plugins.NAME` of the policy
//! file), as package managers drop them; the directory is checked as the
//! file is, and so is each entry file. Each entry is parsed when its plugin
//! runs: an invalid one (a typo, a bad pin, bad JSON, an untrusted file, or
//! an entry in both places) refuses that plugin alone, with an error naming
//! the file and the field; every other plugin runs.
//!
//! The files of this module, one idea each:
//! - `grant`: what a grant is: the rights in a namespace ([`NsGrant`],
//!   [`FirewallGrant`], [`LinkKind`], [`ConfigKey`], [`Pattern`]) and a
//!   plugin's whole authority ([`Grant`]);
//! - `entry`: one plugin's entry ([`Entry`]): parsed and checked, its
//!   grant, its pin;
//! - `load`: the effective policy ([`Policy`]): the embedded default, the
//!   policy file and the policy directory read, an entry resolved for a
//!   plugin, an entry file written;
//! - `trust`: the ownership and mode checks of every file and directory
//!   on a policy's path;
//! - `render`: a namespace grant as one line, for messages and listings;
//! - `error`: why a policy could not be used ([`PolicyError`]).

mod dhcp;
mod entry;
mod error;
mod grant;
mod load;
mod render;
mod trust;

pub use dhcp::{DhcpGrant, DEFAULT_DHCP_SOCKET};
pub use entry::Entry;
pub use error::PolicyError;
pub use grant::{
    ConfigKey, FirewallGrant, Grant, LinkKind, NsGrant, Pattern, DEFAULT_HOST_CALLS,
    DEFAULT_HOST_NAMES, DEFAULT_MAX_LINKS,
};
pub use load::{
    policy_dir, read_entry_file, write_entry_file, Policy, Source, DEFAULT_POLICY_DIR,
    DEFAULT_POLICY_FILE, EMBEDDED,
};
pub use trust::check_trusted_dir;

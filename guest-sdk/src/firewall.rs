//! Firewall rules for the attachment: typed wrappers over wasmcni's
//! `firewall` import, as methods of [`Netns`] (the node namespace's).
//!
//! A plugin says what it wants (port mappings to its container address,
//! masquerading, forward allowance, bridge isolation, a MAC spoof check);
//! the host builds the nftables rules in wasmcni's own tables, tags them
//! with the runtime's attachment, and removes them by that tag, so DEL
//! needs no `prevResult` and GC needs only the valid attachments.
//!
//! # Capabilities
//! Installing and removing need the host grant's `firewall.<kind>`
//! (`port-mappings`, `masquerade`, `forward`, `isolation`, `mac-spoof`);
//! checking needs `read`. The container address a rule names must be the
//! attachment's (its IPAM result or the runtime's `prevResult`). Installs
//! are journaled and undone if ADD fails; removal is refused during ADD.
//!
//! # Example: firewall
//! A port-mapping plugin: node port 8080 to port 80 of the container's
//! address (from `prevResult`), with hairpin masquerading. Needs
//! `firewall.port-mappings` in the host grant (and `read` for CHECK).
//!
//! ```no_run
//! use guest_sdk::cni::{Cidr, Error};
//! use guest_sdk::firewall::{PortMap, PortMapping, Protocol, RuleKind, Rules};
//! use guest_sdk::net::Netns;
//!
//! fn rules(container: Cidr) -> Rules {
//!     Rules::PortMap(vec![PortMap {
//!         container: container.into(), // 10.22.0.5/24: the address and its subnet
//!         mappings: vec![PortMapping {
//!             host_port: 8080,
//!             container_port: 80,
//!             protocol: Protocol::Tcp,
//!             host_ip: None, // any local address
//!         }],
//!         snat: true,
//!         masq_all: false,
//!         conditions: Vec::new(),
//!     }])
//! }
//!
//! /// ADD: installs (or replaces) the attachment's port maps.
//! fn add(container: Cidr) -> Result<(), Error> {
//!     Ok(Netns::host()?.firewall_add(&rules(container))?)
//! }
//!
//! /// CHECK: exactly those rules are there.
//! fn check(container: Cidr) -> Result<(), Error> {
//!     match Netns::host()?.firewall_check(&rules(container))? {
//!         true => Ok(()),
//!         false => Err(Error::internal("the port mappings are not as ADD left them")),
//!     }
//! }
//!
//! /// DEL: removes them by the attachment's tag: no `prevResult` needed.
//! fn del() -> Result<(), Error> {
//!     Netns::host()?.firewall_remove(&[RuleKind::PortMap])?; // how many: not needed
//!     Ok(())
//! }
//! ```

use crate::bindings::wasmcni::plugin::firewall;
use crate::net::{HostError, Netns};

pub use crate::bindings::wasmcni::plugin::firewall::{
    Condition, MacSpoof, NameMatch, PortMap, PortMapping, PrefixMatch, Protocol, RuleKind,
    RuleOptions, Rules,
};

fn what(r: &Rules) -> &'static str {
    match r {
        Rules::PortMap(_) => "port mappings",
        Rules::Masquerade(_) => "masquerade rule",
        Rules::Forward(_) => "forward rules",
        Rules::Isolation(_) => "bridge isolation rules",
        Rules::MacSpoof(_) => "MAC spoof check",
    }
}

impl Netns {
    /// Installs `rules` for the attachment (replacing its rules of the
    /// same kind).
    pub fn firewall_add(&self, rules: &Rules) -> Result<(), HostError> {
        firewall::add(&self.inner, rules).map_err(self.err("firewall.add", what(rules)))
    }

    /// [`Netns::firewall_add`] with `options`: with
    /// [`Rules::Isolation`], `isolate_within_bridge` also drops what the
    /// bridge forwards from one of its ports to another (the reference
    /// firewall's `ingressPolicy: "isolated"`).
    pub fn firewall_add_with(&self, rules: &Rules, options: RuleOptions) -> Result<(), HostError> {
        firewall::add_with(&self.inner, rules, options)
            .map_err(self.err("firewall.add-with", what(rules)))
    }

    /// Whether exactly the rules [`Netns::firewall_add`] installs for
    /// `rules` are there (CHECK).
    pub fn firewall_check(&self, rules: &Rules) -> Result<bool, HostError> {
        firewall::check(&self.inner, rules).map_err(self.err("firewall.check", what(rules)))
    }

    /// Removes the attachment's rules of `kinds`; how many. Nothing there
    /// is no error (DEL).
    pub fn firewall_remove(&self, kinds: &[RuleKind]) -> Result<u32, HostError> {
        firewall::remove(&self.inner, kinds)
            .map_err(self.err("firewall.remove", "the attachment's firewall rules"))
    }

    /// GC: removes the rules of `kinds` of this network's attachments the
    /// runtime no longer holds; how many.
    pub fn firewall_collect_garbage(&self, kinds: &[RuleKind]) -> Result<u32, HostError> {
        firewall::collect_garbage(&self.inner, kinds)
            .map_err(self.err("firewall.collect-garbage", "firewall rules"))
    }
}

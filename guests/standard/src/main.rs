//! The standard wasmcni plugins as one component.
//!
//! wasmcni runs it for every standard plugin, with the plugin's name as
//! the program name (`argv[0]`), as a multi-call binary is run; this runs
//! that plugin. What a run may do is the named plugin's policy entry, which
//! the host resolves from the same name before it starts the component:
//! the code of the other plugins carried here gives it no authority.
//!
//! Each plugin it carries is a library crate of its own (`guests/<name>`,
//! its `main`) and a dependency of this crate; host/runtime/build.rs reads
//! their names from this crate's Cargo.toml. A guest crate with a
//! `src/main.rs` (loopback) is a component of its own instead.

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::skel::{self, Invocation, Plugin};

/// Every standard plugin: its name and its `main`.
const PLUGINS: &[(&str, fn() -> !)] = &[
    ("bandwidth", bandwidth::main),
    ("bridge", bridge::main),
    ("dummy", dummy::main),
    ("firewall", firewall::main),
    ("host-device", host_device::main),
    ("host-local", host_local::main),
    ("ipvlan", ipvlan::main),
    ("macvlan", macvlan::main),
    ("portmap", portmap::main),
    ("ptp", ptp::main),
    ("sbr", sbr::main),
    ("static", static_ipam::main),
    ("tap", tap::main),
    ("tuning", tuning::main),
    ("vlan", vlan::main),
    ("vrf", vrf::main),
];

/// Run under a name that is no standard plugin's (wasmcni never does):
/// every command fails with a CNI error naming it.
struct Unknown(String);

impl Unknown {
    fn error(&self) -> Error {
        Error::internal(format!(
            "the standard plugins' component has no plugin named {:?}",
            self.0
        ))
    }
}

impl Plugin for Unknown {
    fn add(&self, _inv: &Invocation) -> Result<CniResult, Error> {
        Err(self.error())
    }
    fn check(&self, _inv: &Invocation) -> Result<(), Error> {
        Err(self.error())
    }
    fn del(&self, _inv: &Invocation) -> Result<(), Error> {
        Err(self.error())
    }
    fn status(&self, _inv: &Invocation) -> Result<(), Error> {
        Err(self.error())
    }
    fn gc(&self, _inv: &Invocation) -> Result<(), Error> {
        Err(self.error())
    }
}

fn main() {
    let name = std::env::args().next().unwrap_or_default();
    match PLUGINS.iter().find(|(n, _)| *n == name) {
        Some((_, main)) => main(),
        None => skel::run(Unknown(name), ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dispatch table and Cargo.toml's list (which the host reads) name
    /// the same plugins.
    #[test]
    fn every_dependency_is_dispatched() {
        let manifest = include_str!("../Cargo.toml");
        let deps: Vec<&str> = manifest
            .lines()
            .filter(|l| l.contains("path = \"../"))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let names: Vec<&str> = PLUGINS.iter().map(|(n, _)| *n).collect();
        assert_eq!(deps, names);
    }
}

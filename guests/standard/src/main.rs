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

use guest_sdk::cni::{Error, LATEST};

/// Every standard plugin: its name and its `main`.
const PLUGINS: &[(&str, fn() -> !)] = &[
    ("bandwidth", bandwidth::main),
    ("bridge", bridge::main),
    ("dhcp", dhcp::main),
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

fn main() {
    let name = std::env::args().next().unwrap_or_default();
    if let Some((_, main)) = PLUGINS.iter().find(|(n, _)| *n == name) {
        main();
    }
    // Run under another name (a copy of this component run by path, as
    // `wasmcni run FILE.wasm` runs it under the file's name): every
    // command fails, VERSION too, naming the plugins it carries.
    let names: Vec<&str> = PLUGINS.iter().map(|(n, _)| *n).collect();
    let e = Error::invalid_env(format!(
        "this is the standard plugins' component, run as {name:?}: it runs only as one of {}",
        names.join(", ")
    ));
    println!("{}", e.to_json(LATEST));
    std::process::exit(1);
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

//! The capability surface end to end: policy (S2), journal (S6), netns
//! confusion (S8), limits (S9), pinning, `wasmcni audit`.
//!
//! Every test runs wasmcni inside a "node" namespace of its own (`ip netns
//! exec`), which wasmcni treats as the host namespace, with a container
//! namespace beside it. The node has an "uplink" (a veth end with an
//! address, a route and a forwarding sysctl) that must survive every test
//! untouched: the snapshots compare links, addresses, routes (all tables)
//! and network sysctls of both namespaces.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::world::{policy_with, wide, World};
use support::{fixture, require_root, Invoke};

/// One S2 case: the call it is about, the grant (changed from `wide`), and
/// the ops whose last one is just outside the grant.
struct Case {
    call: &'static str,
    grant: Value,
    ops: Value,
    /// The command (ADD unless a case is about another).
    command: &'static str,
    /// Ops before the last set something up: the plugin then exits 1 so
    /// the journal takes the setup back, and the snapshot compares clean.
    undo_setup: bool,
}

impl Case {
    fn new(call: &'static str, grant: Value, ops: Value) -> Case {
        Case {
            call,
            grant,
            ops,
            command: "ADD",
            undo_setup: false,
        }
    }
}

/// A veth of the plugin's own in the host namespace (created, so owned).
fn own_veth() -> Value {
    json!({"call": "link.create-veth", "ns": "host", "name": "cnitestv9", "peer-ns": "container", "peer-name": "eth9"})
}

/// Cases for the invariants no policy waives, beyond one per function.
fn invariant_cases() -> Vec<Case> {
    let setup = |call, ops: Value| Case {
        undo_setup: true,
        ..Case::new(call, wide(), ops)
    };
    vec![
        // Rate limits with `traffic-control`: never on another
        // attachment's veth, nor on the node's own link; never removed
        // from them; and removing is a DEL's doing.
        Case::new(
            "traffic-control.limit-transmit",
            wide_tc(),
            json!([{"call": "traffic-control.limit-transmit", "ns": "host", "link": "other0",
                    "rate": 800000, "burst": 80000}]),
        ),
        Case::new(
            "traffic-control.limit-receive",
            wide_tc(),
            json!([{"call": "traffic-control.limit-receive", "ns": "host", "link": "other0",
                    "rate": 800000, "burst": 80000}]),
        ),
        Case::new(
            "traffic-control.limit-transmit",
            wide_tc(),
            json!([{"call": "traffic-control.limit-transmit", "ns": "host", "link": "uplink",
                    "rate": 800000, "burst": 80000}]),
        ),
        Case::new(
            "traffic-control.limit-receive",
            wide_tc(),
            json!([{"call": "traffic-control.limit-receive", "ns": "host", "link": "uplink",
                    "rate": 800000, "burst": 80000}]),
        ),
        Case {
            command: "DEL",
            ..Case::new(
                "traffic-control.remove-limits",
                wide_tc(),
                json!([{"call": "traffic-control.remove-limits", "ns": "host", "link": "uplink"}]),
            )
        },
        Case {
            command: "DEL",
            ..Case::new(
                "traffic-control.remove-limits",
                wide_tc(),
                json!([{"call": "traffic-control.remove-limits", "ns": "host", "link": "other0"}]),
            )
        },
        // Collecting other attachments' ifbs is a GC's doing only.
        Case {
            command: "DEL",
            ..Case::new(
                "traffic-control.collect-garbage",
                wide_tc(),
                json!([{"call": "traffic-control.collect-garbage", "ns": "host"}]),
            )
        },
        Case::new(
            "traffic-control.collect-garbage",
            wide_tc(),
            json!([{"call": "traffic-control.collect-garbage", "ns": "host"}]),
        ),
        // During ADD, even on a link of its own made in the same call.
        Case {
            undo_setup: true,
            ..Case::new(
                "traffic-control.remove-limits",
                wide_tc(),
                json!([own_veth(), {"call": "traffic-control.remove-limits", "ns": "host",
                        "link": "cnitestv9"}]),
            )
        },
        // Firewall rules: only for the attachment's own address (none is
        // in this config's IPAM result or prevResult), ...
        Case::new(
            "firewall.add",
            wide_fw(),
            json!([{"call": "firewall.add", "ns": "host", "rules": {"port-map": {
                "container": "10.70.0.5/24", "snat": true,
                "mappings": [{"host-port": 8080, "container-port": 80, "protocol": "tcp"}]}}}]),
        ),
        Case::new(
            "firewall.add",
            wide_fw(),
            json!([{"call": "firewall.add", "ns": "host", "rules": {"forward": "192.0.2.10"}}]),
        ),
        // ... only in the node namespace, ...
        Case::new(
            "firewall.add",
            wide_fw(),
            json!([{"call": "firewall.add", "ns": "container", "rules": {"masquerade": "10.70.0.5/24"}}]),
        ),
        // ... never a MAC check on the node's or another attachment's
        // link, never isolating a link that is no bridge, ...
        Case::new(
            "firewall.add",
            wide_fw(),
            json!([{"call": "firewall.add", "ns": "host", "link": "uplink",
                    "rules": {"mac-spoof": "02:00:00:00:00:01"}}]),
        ),
        Case::new(
            "firewall.add",
            wide_fw(),
            json!([{"call": "firewall.add", "ns": "host", "link": "other0",
                    "rules": {"mac-spoof": "02:00:00:00:00:01"}}]),
        ),
        Case::new(
            "firewall.add",
            wide_fw(),
            json!([{"call": "firewall.add", "ns": "host", "link": "cnibrfake",
                    "rules": {"isolation": true}}]),
        ),
        Case::new(
            "firewall.add-with",
            wide_fw(),
            json!([{"call": "firewall.add-with", "ns": "host", "link": "cnibrfake",
                    "rules": {"isolation": true}, "isolate-within-bridge": true}]),
        ),
        // ... installing is an ADD's doing, removing a DEL's, collecting
        // other attachments' rules a GC's.
        Case {
            command: "DEL",
            ..Case::new(
                "firewall.add",
                wide_fw(),
                json!([{"call": "firewall.add", "ns": "host", "rules": {"masquerade": "10.70.0.5/24"}}]),
            )
        },
        Case::new(
            "firewall.remove",
            wide_fw(),
            json!([{"call": "firewall.remove", "ns": "host", "kinds": ["port-map"]}]),
        ),
        Case {
            command: "DEL",
            ..Case::new(
                "firewall.collect-garbage",
                wide_fw(),
                json!([{"call": "firewall.collect-garbage", "ns": "host", "kinds": ["port-map"]}]),
            )
        },
        // Removing a kind the grant lacks.
        Case {
            command: "DEL",
            ..Case::new(
                "firewall.remove",
                {
                    let mut g = wide_fw();
                    g["host"]["firewall"]["mac-spoof"] = json!(false);
                    g
                },
                json!([{"call": "firewall.remove", "ns": "host", "kinds": ["port-map", "mac-spoof"]}]),
            )
        },
        // Replacing a node route through a link of the plugin's own.
        setup(
            "route.replace",
            json!([own_veth(), {"call": "route.replace", "ns": "host", "destination": "198.51.100.0/24", "gateway": "192.0.2.1", "link": "cnitestv9"}]),
        ),
        // A broad route through its own link would steer the node's traffic.
        setup(
            "route.add",
            json!([own_veth(), {"call": "route.add", "ns": "host", "destination": "0.0.0.0/1", "link": "cnitestv9"}]),
        ),
        // An address outside the grant's prefixes (the node's own network).
        setup(
            "address.add",
            json!([own_veth(), {"call": "address.add", "ns": "host", "link": "cnitestv9", "prefix": "192.0.2.11/24"}]),
        ),
        // The local table (the node's own addresses).
        setup(
            "route.replace",
            json!([own_veth(), {"call": "route.replace", "ns": "host", "destination": "192.0.2.10/32", "table": 255, "link": "cnitestv9"}]),
        ),
        // Enslaving its own link to the uplink changes the uplink.
        setup(
            "link.set-master",
            json!([own_veth(), {"call": "link.set-master", "ns": "host", "link": "cnitestv9", "master": "uplink"}]),
        ),
        // Another container's link (alias wasmcni:another-container).
        Case::new(
            "link.set-up",
            wide(),
            json!([{"call": "link.set-up", "ns": "host", "link": "other0", "up": true}]),
        ),
        Case::new(
            "link.move-to",
            wide(),
            json!([{"call": "link.move-to", "ns": "host", "link": "other0", "target": "container"}]),
        ),
        // Handing another attachment's link, or one of its own made
        // before this call, to the network.
        Case::new(
            "link.share",
            wide(),
            json!([{"call": "link.share", "ns": "host", "link": "other0"}]),
        ),
        // A shared link's VLANs are the network's.
        Case::new(
            "link.set-port-vlans",
            wide(),
            json!([{"call": "link.set-port-vlans", "ns": "host", "link": "cnishared0",
                    "vlans": [{"vid": 5}]}]),
        ),
        // `conf.*.forwarding` does not grant `conf.all.forwarding`.
        Case::new(
            "sysctl.set",
            wide(),
            json!([{"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.all.forwarding", "value": "1"}]),
        ),
        // A passthru macvlan would change its `masters` link.
        Case::new(
            "link.create-macvlan",
            wide(),
            json!([{"call": "link.create-macvlan", "ns": "container", "master-ns": "host", "master": "mst0", "mode": "passthru", "name": "mv0"}]),
        ),
        // A node address on a link the grant names: not wasmcni's to delete.
        Case::new(
            "address.delete",
            wide(),
            json!([{"call": "address.delete", "ns": "host", "link": "cnitestpre", "prefix": "10.77.0.1/24"}]),
        ),
        // Host link names the node or other tools need (`names`, default
        // veth*, cni*): created, renamed to, or moved in under.
        Case::new(
            "link.create-bridge",
            wide(),
            json!([{"call": "link.create-bridge", "ns": "host", "name": "eth1"}]),
        ),
        Case::new(
            "link.create-veth",
            wide(),
            json!([{"call": "link.create-veth", "ns": "container", "name": "eth0", "peer-ns": "host", "peer-name": "docker0"}]),
        ),
        setup(
            "link.set-name",
            json!([own_veth(), {"call": "link.set-name", "ns": "host", "link": "cnitestv9", "name": "eth7"}]),
        ),
        setup(
            "link.move-to",
            json!([
                {"call": "link.create-veth", "ns": "container", "name": "x9", "peer-ns": "container", "peer-name": "x9p"},
                {"call": "link.move-to", "ns": "container", "link": "x9", "target": "host", "new-name": "eth9"}
            ]),
        ),
        // A bridge the network's attachments share (network mark): never
        // down, re-MTU'd, re-MAC'd, deleted or stripped of its gateway.
        Case::new(
            "link.set-up",
            wide(),
            json!([{"call": "link.set-up", "ns": "host", "link": "cnishared0", "up": false}]),
        ),
        Case::new(
            "link.set-mtu",
            wide(),
            json!([{"call": "link.set-mtu", "ns": "host", "link": "cnishared0", "mtu": 1400}]),
        ),
        Case::new(
            "link.set-mac",
            wide(),
            json!([{"call": "link.set-mac", "ns": "host", "link": "cnishared0", "mac": "02:00:00:00:00:42"}]),
        ),
        Case::new(
            "link.delete",
            wide(),
            json!([{"call": "link.delete", "ns": "host", "link": "cnishared0"}]),
        ),
        Case::new(
            "address.delete",
            wide(),
            json!([{"call": "address.delete", "ns": "host", "link": "cnishared0", "prefix": "10.70.0.1/24"}]),
        ),
        // A link named like the grant's `bridges` that is no bridge.
        Case::new(
            "link.set-up",
            wide(),
            json!([{"call": "link.set-up", "ns": "host", "link": "cnibrfake", "up": true}]),
        ),
        // Host routes and addresses must not point at an address the
        // network's IPAM state reserves for another attachment.
        setup(
            "route.add",
            json!([{"call": "ipam.open", "data-dir": "@ipam"}, own_veth(),
                   {"call": "route.add", "ns": "host", "destination": "10.80.0.5/32", "link": "cnitestv9"}]),
        ),
        setup(
            "address.add",
            json!([{"call": "ipam.open", "data-dir": "@ipam"}, own_veth(),
                   {"call": "address.add", "ns": "host", "link": "cnitestv9", "prefix": "10.80.0.5/24"}]),
        ),
        // A CHECK delegates only CHECK.
        Case {
            command: "CHECK",
            ..Case::new(
                "delegate.run",
                wide(),
                json!([{"call": "delegate.run", "type": "scripted", "command": "ADD",
                        "config": {"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []}}]),
            )
        },
        // GC releases only reservations of attachments that are gone.
        Case {
            command: "GC",
            ..Case::new(
                "ipam-store.[method]store.release",
                wide(),
                json!([{"call": "ipam.open", "data-dir": "@ipam"},
                       {"call": "ipam.release", "address": "10.80.0.5"}]),
            )
        },
        // CHECK is read-only whatever the grant.
        Case {
            command: "CHECK",
            ..Case::new(
                "link.set-up",
                wide(),
                json!([{"call": "link.set-up", "ns": "container", "link": "lo", "up": true}]),
            )
        },
    ]
}

fn without(path: &[&str], key: &str) -> Value {
    let mut g = wide();
    let mut at = &mut g;
    for p in path {
        at = &mut at[*p];
    }
    at.as_object_mut().expect("object").remove(key);
    g
}

fn cases() -> Vec<Case> {
    let w = wide;
    let host = |call: &str, extra: Value| {
        let mut op = json!({"call": call, "ns": "host"});
        for (k, v) in extra.as_object().expect("object") {
            op[k] = v.clone();
        }
        json!([op])
    };
    vec![
        Case {
            call: "netns.host",
            grant: json!({"container": w()["container"]}),
            ops: json!([{"call": "link.list", "ns": "host"}]),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.get-by-name",
            grant: without(&["host"], "read"),
            ops: host("link.get-by-name", json!({"name": "uplink"})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.get-by-index",
            grant: without(&["host"], "read"),
            ops: host("link.get-by-index", json!({"index": 1})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.list",
            grant: without(&["host"], "read"),
            ops: host("link.list", json!({})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.find-devices",
            grant: without(&["host"], "read"),
            ops: host(
                "link.find-devices",
                json!({"kernel-path": "/sys/devices/virtual"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.port-vlans",
            grant: without(&["host"], "read"),
            // By index: a lookup by name would be the denied call.
            ops: host("link.port-vlans", json!({"link": 1})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.set-port-vlans",
            grant: w(),
            ops: host(
                "link.set-port-vlans",
                json!({"link": "uplink", "vlans": [{"vid": 5, "pvid": true, "untagged": true}]}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.share",
            grant: w(),
            ops: host("link.share", json!({"link": "cnitestpre"})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.create-veth",
            grant: {
                let mut g = w();
                g["host"]["create"] = json!(["bridge"]);
                g
            },
            ops: host(
                "link.create-veth",
                json!({"name": "cnitestv0", "peer-ns": "container", "peer-name": "eth0"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.create-bridge",
            grant: w(),
            ops: json!([{"call": "link.create-bridge", "ns": "container", "name": "br0"}]),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.create-dummy",
            grant: w(),
            ops: host("link.create-dummy", json!({"name": "cnitestd0"})),
            command: "ADD",
            undo_setup: false,
        },
        // `create` without `vrf` (the wide grant's lists none).
        Case::new(
            "link.create-vrf",
            w(),
            json!([{"call": "link.create-vrf", "ns": "container", "name": "vrf0", "table": 10}]),
        ),
        Case {
            call: "link.create-tap",
            grant: w(),
            ops: host("link.create-tap", json!({"name": "cnitestt0"})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.create-macvlan",
            grant: w(),
            ops: json!([{"call": "link.create-macvlan", "ns": "container", "master-ns": "host", "master": "uplink", "name": "mv0"}]),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.create-macvlan-with",
            grant: w(),
            ops: json!([{"call": "link.create-macvlan-with", "ns": "container", "master-ns": "host", "master": "uplink", "name": "mv0", "bc-queue-len": 333}]),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.create-ipvlan",
            grant: w(),
            ops: json!([{"call": "link.create-ipvlan", "ns": "container", "master-ns": "host", "master": "uplink", "name": "iv0"}]),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.create-vlan",
            grant: w(),
            ops: json!([{"call": "link.create-vlan", "ns": "container", "master-ns": "host", "master": "uplink", "name": "vl0", "vlan-id": 7}]),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.move-to",
            grant: w(),
            ops: host(
                "link.move-to",
                json!({"link": "uplink", "target": "container"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.set-up",
            grant: w(),
            ops: host("link.set-up", json!({"link": "uplink", "up": false})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.set-mtu",
            grant: w(),
            ops: host("link.set-mtu", json!({"link": "uplink", "mtu": 1280})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.set-mac",
            grant: w(),
            ops: host(
                "link.set-mac",
                json!({"link": "uplink", "mac": "02:00:00:00:00:01"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.set-master",
            grant: w(),
            ops: host(
                "link.set-master",
                json!({"link": "mst0", "master": "uplink"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.set-hairpin",
            grant: w(),
            ops: host("link.set-hairpin", json!({"link": "uplink", "on": true})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.set-port-isolated",
            grant: w(),
            ops: host(
                "link.set-port-isolated",
                json!({"link": "uplink", "on": true}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.set-promiscuous",
            grant: w(),
            ops: host(
                "link.set-promiscuous",
                json!({"link": "uplink", "on": true}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case::new(
            "link.set-allmulticast",
            w(),
            host(
                "link.set-allmulticast",
                json!({"link": "uplink", "on": true}),
            ),
        ),
        Case::new(
            "link.set-txqlen",
            w(),
            host("link.set-txqlen", json!({"link": "uplink", "txqlen": 7})),
        ),
        Case::new(
            "route.list-rules",
            without(&["host"], "read"),
            host("rule.list", json!({})),
        ),
        // Rules: never in the host namespace, whatever the grant.
        Case::new(
            "route.add-rule",
            w(),
            host("rule.add", json!({"source": "192.0.2.10/32", "table": 100})),
        ),
        Case::new(
            "route.delete-rule",
            w(),
            host("rule.delete", json!({"table": 254})),
        ),
        // ... and in the container's only with `routes`.
        Case::new(
            "route.add-rule",
            without(&["container"], "routes"),
            json!([{"call": "rule.add", "ns": "container", "source": "10.9.0.2/32", "table": 100}]),
        ),
        // The table lock: where rules may be added or VRFs created, so
        // never in the host namespace without `create: ["vrf"]` ...
        Case::new(
            "route.lock-tables",
            w(),
            host("route.lock-tables", json!({})),
        ),
        // ... nor in the container's without `routes` (nor "vrf").
        Case::new(
            "route.lock-tables",
            without(&["container"], "routes"),
            json!([{"call": "route.lock-tables", "ns": "container"}]),
        ),
        // Plugin state: only with `attachment-state`.
        Case::new(
            "attachment-state.get",
            w(),
            json!([{"call": "state.get", "key": "k"}]),
        ),
        Case::new(
            "attachment-state.keys",
            w(),
            json!([{"call": "state.keys"}]),
        ),
        Case::new(
            "attachment-state.set",
            w(),
            json!([{"call": "state.set", "key": "k", "value": "v"}]),
        ),
        Case::new(
            "attachment-state.remove",
            w(),
            json!([{"call": "state.remove", "key": "k"}]),
        ),
        // DHCP leases: only with `dhcp` (and then only through its socket).
        Case::new("dhcp.acquire", w(), json!([{"call": "dhcp.acquire"}])),
        Case::new("dhcp.current", w(), json!([{"call": "dhcp.current"}])),
        Case::new("dhcp.release", w(), json!([{"call": "dhcp.release"}])),
        Case::new("dhcp.listening", w(), json!([{"call": "dhcp.listening"}])),
        Case::new(
            "dhcp.acquire",
            {
                let mut g = w();
                g["dhcp"] = json!({"socket": "/run/wasmcni-test-none/dhcp.sock"});
                g
            },
            json!([{"call": "dhcp.acquire", "socket": "/run/cni/dhcp.sock"}]),
        ),
        Case {
            call: "link.set-name",
            grant: w(),
            ops: host("link.set-name", json!({"link": "mst0", "name": "renamed0"})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.set-alias",
            grant: w(),
            ops: host("link.set-alias", json!({"link": "mst0", "alias": "x"})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "link.delete",
            grant: w(),
            ops: host("link.delete", json!({"link": "uplink"})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "address.list",
            grant: without(&["host"], "read"),
            ops: host("address.list", json!({})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "address.add",
            grant: w(),
            ops: host(
                "address.add",
                json!({"link": "uplink", "prefix": "192.0.2.11/24"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "address.delete",
            grant: w(),
            ops: host(
                "address.delete",
                json!({"link": "uplink", "prefix": "192.0.2.10/24"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "address.announce",
            grant: w(),
            ops: host(
                "address.announce",
                json!({"link": "uplink", "address": "192.0.2.10"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "route.list",
            grant: without(&["host"], "read"),
            ops: host("route.list", json!({})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "route.add",
            grant: w(),
            ops: host(
                "route.add",
                json!({"destination": "203.0.113.0/24", "gateway": "192.0.2.1", "link": "uplink"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "route.replace",
            grant: w(),
            ops: host(
                "route.replace",
                json!({"destination": "198.51.100.0/24", "gateway": "192.0.2.2", "link": "uplink"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "route.delete",
            grant: w(),
            ops: host("route.delete", json!({"destination": "198.51.100.0/24"})),
            command: "ADD",
            undo_setup: false,
        },
        Case::new(
            "ipam-store.[static]store.open",
            without(&[], "ipam-roots"),
            json!([{"call": "ipam.open", "data-dir": "@ipam"}]),
        ),
        Case {
            command: "CHECK",
            ..Case::new(
                "ipam-store.[method]store.reserve",
                w(),
                json!([{"call": "ipam.open", "data-dir": "@ipam"},
                       {"call": "ipam.reserve", "address": "10.80.0.6", "range-id": "0"}]),
            )
        },
        Case::new(
            "ipam-store.[method]store.release",
            w(),
            json!([{"call": "ipam.open", "data-dir": "@ipam"},
                   {"call": "ipam.release", "address": "10.80.0.5"}]),
        ),
        Case {
            command: "CHECK",
            ..Case::new(
                "ipam-store.[method]store.release-owned",
                w(),
                json!([{"call": "ipam.open", "data-dir": "@ipam"},
                       {"call": "ipam.release-owned"}]),
            )
        },
        Case::new(
            "delegate.run",
            without(&[], "delegates"),
            json!([{"call": "delegate.run", "type": "scripted", "command": "ADD",
                    "config": {"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []}}]),
        ),
        Case {
            call: "sysctl.get",
            grant: w(),
            ops: host("sysctl.get", json!({"key": "net.ipv4.ip_forward"})),
            command: "ADD",
            undo_setup: false,
        },
        Case {
            call: "sysctl.set",
            grant: w(),
            ops: host(
                "sysctl.set",
                json!({"key": "net.ipv4.conf.uplink.forwarding", "value": "1"}),
            ),
            command: "ADD",
            undo_setup: false,
        },
        // No `traffic-control` (the wide grant has none) on a link the
        // plugin may otherwise modify.
        Case::new(
            "traffic-control.limit-transmit",
            w(),
            host(
                "traffic-control.limit-transmit",
                json!({"link": "cnitestpre", "rate": 800000, "burst": 80000}),
            ),
        ),
        Case::new(
            "traffic-control.limit-receive",
            w(),
            host(
                "traffic-control.limit-receive",
                json!({"link": "cnitestpre", "rate": 800000, "burst": 80000}),
            ),
        ),
        Case::new(
            "traffic-control.limits",
            without(&["host"], "read"),
            // By index: a lookup by name would be the denied call.
            host("traffic-control.limits", json!({"link": 1})),
        ),
        Case {
            command: "DEL",
            ..Case::new(
                "traffic-control.remove-limits",
                w(),
                host(
                    "traffic-control.remove-limits",
                    json!({"link": "cnitestpre"}),
                ),
            )
        },
        Case {
            command: "GC",
            ..Case::new(
                "traffic-control.collect-garbage",
                w(),
                host("traffic-control.collect-garbage", json!({})),
            )
        },
        // No `firewall` (the wide grant has none).
        Case::new(
            "firewall.add",
            w(),
            host(
                "firewall.add",
                json!({"rules": {"masquerade": "10.70.0.5/24"}}),
            ),
        ),
        Case::new(
            "firewall.add-with",
            w(),
            host(
                "firewall.add-with",
                json!({"link": "cnishared0", "rules": {"isolation": true},
                       "isolate-within-bridge": true}),
            ),
        ),
        Case::new(
            "firewall.check",
            without(&["host"], "read"),
            host(
                "firewall.check",
                json!({"rules": {"masquerade": "10.70.0.5/24"}}),
            ),
        ),
        Case {
            command: "DEL",
            ..Case::new(
                "firewall.remove",
                w(),
                host("firewall.remove", json!({"kinds": ["masquerade"]})),
            )
        },
        Case {
            command: "GC",
            ..Case::new(
                "firewall.collect-garbage",
                w(),
                host("firewall.collect-garbage", json!({"kinds": ["port-map"]})),
            )
        },
    ]
}

/// The wide grant with every `firewall` kind in the host namespace.
fn wide_fw() -> Value {
    let mut g = wide();
    g["host"]["firewall"] = json!({"port-mappings": true, "masquerade": true, "forward": true,
                                   "isolation": true, "mac-spoof": true});
    g
}

/// The wide grant with `traffic-control` in the host namespace.
fn wide_tc() -> Value {
    let mut g = wide();
    g["host"]["traffic-control"] = json!(true);
    g
}

/// Host functions that need no grant of their own: they touch nothing
/// (the namespace handles), or read through a store whose opening is gated.
const UNGATED: &[&str] = &[
    "netns.container",
    "netns.[method]netns.kind",
    "ipam-store.[method]store.last-reserved",
    "ipam-store.[method]store.list",
    "ipam-store.[method]store.owned",
];

#[test]
fn s2_every_host_function_just_outside_policy_is_denied_audited_and_harmless() {
    let mut cases = cases();
    // Every host function in the capability catalog has a case.
    for e in wasmcni::caps::catalog::entries() {
        assert!(
            UNGATED.contains(&e.call) || cases.iter().any(|c| c.call == e.call),
            "no S2 case for {}",
            e.call
        );
    }
    cases.extend(invariant_cases());
    let world = World::new("s2");
    for case in &cases {
        let before = world.snapshot();
        let _ = std::fs::remove_file(world.audit_path());
        let run = world.run(
            case.command,
            &policy_with(case.grant.clone()),
            &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": case.ops,
                    "exit": i32::from(case.undo_setup),
                    "cni.dev/valid-attachments": [{"containerID": "other-ctr", "ifname": "eth0"}]}),
            &[],
        );
        assert_eq!(
            run.code,
            i32::from(case.undo_setup),
            "{}: {run:?}",
            case.call
        );
        let report = run.json();
        let last = report["results"]
            .as_array()
            .and_then(|r| r.last())
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(last["error"], "access-denied", "{}: {report}", case.call);
        let audit = world.audit();
        assert!(
            audit.iter().any(|r| r["call"] == case.call
                && r["outcome"] == "denied"
                && r["plugin"] == "scripted"
                && r["command"] == case.command
                && r["container_id"] == "ctr-test-1"
                && r["ifname"] == "eth0"
                && r["sha256"].as_str().is_some_and(|s| s.len() == 64)),
            "{}: no denied audit record in {audit:#?}",
            case.call
        );
        support::assert_same(
            &before,
            &world.snapshot(),
            &format!("{}: kernel state changed", case.call),
        );
    }
}

#[test]
fn a_command_wasmcni_does_not_know_is_read_only_and_delegates_nothing() {
    // The plugin runs with it (its own skel refuses it); the host gives it
    // read-only authority and no delegation, and says so in its words.
    let world = World::new("unknown-cmd");
    let before = world.snapshot();
    let run = world.run(
        "FOO",
        &policy_with(wide()),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "exit": 1, "ops": [
            {"call": "link.set-up", "ns": "host", "link": "lo", "up": true},
            {"call": "delegate.run", "type": "scripted", "command": "FOO",
             "config": {"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []}},
            {"call": "delegate.run", "type": "scripted", "command": "ADD",
             "config": {"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []}}]}),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    let report = run.json();
    let errors: Vec<&Value> = report["results"]
        .as_array()
        .map(|r| r.iter().map(|r| &r["error"]).collect())
        .unwrap_or_default();
    assert_eq!(errors.len(), 3, "{report}");
    assert_eq!(errors[0], "access-denied", "{report}");
    assert!(
        errors[1]
            .as_str()
            .is_some_and(|e| e.contains("unknown CNI_COMMAND: \"FOO\"")),
        "{report}"
    );
    assert_eq!(errors[2], "access-denied", "{report}");
    // The refusals, as wasmcni explains the plugin's failure.
    for needle in [
        "a command other than ADD and DEL may not change the kernel: only ADD and DEL may \
         (a wasmcni invariant)",
        "a FOO may delegate only FOO (a wasmcni invariant)",
    ] {
        assert!(run.stderr.contains(needle), "{needle:?} not in {run:?}");
    }
    assert!(
        world.audit().iter().any(|r| r["command"] == "FOO"
            && r["call"] == "delegate.run"
            && r["outcome"] == "denied"),
        "{:#?}",
        world.audit()
    );
    support::assert_same(&before, &world.snapshot(), "an unknown command");
}

#[test]
fn during_add_only_links_created_in_the_same_call_can_be_deleted() {
    let world = World::new("del");
    world.ctr.ip(&[
        "link", "add", "pre0", "type", "veth", "peer", "name", "pre0p",
    ]);
    let before = world.snapshot();
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
            {"call": "link.delete", "ns": "container", "link": "pre0"},
            {"call": "link.create-veth", "ns": "container", "name": "new0", "peer-ns": "container", "peer-name": "new0p"},
            {"call": "link.delete", "ns": "container", "link": "new0"},
        ]}),
        &[],
    );
    let r = run.json();
    assert_eq!(r["results"][0]["error"], "access-denied", "{r}");
    assert!(r["results"][2].get("ok").is_some(), "{r}");
    support::assert_same(&before, &world.snapshot(), "");
    // DEL may delete what an earlier ADD left.
    let run = world.run(
        "DEL",
        &policy_with(wide()),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
            {"call": "link.delete", "ns": "container", "link": "pre0"},
        ]}),
        &[],
    );
    assert!(run.json()["results"][0].get("ok").is_some(), "{run:?}");
}

/// Hostile (issue 24, breach 11): a plugin with a veth `create` grant
/// makes pair after pair, so that the host's cleanup of them (DEL, GC)
/// delays every other call. One invocation keeps at most `max-links` links
/// it created (default 16, both namespaces together, each end of a pair
/// counted): a create past it is refused (`access-denied`, naming the
/// field), audited, and makes nothing; a link the plugin deleted again no
/// longer counts.
#[test]
fn a_plugin_keeps_no_more_links_than_max_links() {
    let world = World::new("maxl");
    let before = world.snapshot();
    let pair = |i: usize| {
        json!({"call": "link.create-veth", "ns": "host", "name": format!("cnitestm{i}"),
               "peer-ns": "container", "peer-name": format!("eth{i}")})
    };
    let denied_for_max_links = |call: &str| {
        world.audit().iter().any(|a| {
            a["call"] == call
                && a["outcome"] == "denied"
                && a["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("plugins.scripted.max-links"))
        })
    };

    // The default: 8 pairs, and not one more of 127.
    let _ = std::fs::remove_file(world.audit_path());
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "exit": 1,
                "ops": (0..127).map(pair).collect::<Vec<_>>()}),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    let r = run.json();
    let results = r["results"].as_array().expect("results");
    for (i, x) in results.iter().enumerate() {
        if i < 8 {
            assert!(x.get("ok").is_some(), "pair {i}: {x}");
        } else {
            assert_eq!(x["error"], "access-denied", "pair {i}: {x}");
        }
    }
    assert!(
        denied_for_max_links("link.create-veth"),
        "{:#?}",
        world.audit()
    );
    let made = world
        .audit()
        .iter()
        .filter(|a| a["call"] == "link.create-veth" && a["outcome"] == "ok")
        .count();
    assert_eq!(made, 8, "only the first 8 pairs were made");
    support::assert_same(&before, &world.snapshot(), "after the undone ADD");

    // `max-links: 4`: two pairs (one within the container); then no third
    // until the plugin deletes one.
    let mut g = wide();
    g["max-links"] = json!(4);
    let _ = std::fs::remove_file(world.audit_path());
    let inner = |i: usize| {
        json!({"call": "link.create-veth", "ns": "container", "name": format!("cnitestc{i}"),
               "peer-ns": "container", "peer-name": format!("cnitestc{i}p")})
    };
    let run = world.run(
        "ADD",
        &policy_with(g),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "exit": 1,
                "ops": [pair(0), inner(1), pair(1), inner(2),
                        {"call": "link.delete", "ns": "host", "link": "cnitestm0"},
                        pair(2), inner(3)]}),
        &[],
    );
    assert_eq!(run.code, 1, "{run:?}");
    let r = run.json();
    let outcome = |i: usize| {
        let x = &r["results"][i];
        x.get("ok")
            .map(|_| "ok".to_owned())
            .unwrap_or_else(|| x["error"].as_str().unwrap_or("?").to_owned())
    };
    let got: Vec<String> = (0..7).map(outcome).collect();
    assert_eq!(
        got,
        [
            "ok",
            "ok",
            "access-denied",
            "access-denied",
            "ok",
            "ok",
            "access-denied"
        ],
        "{r}"
    );
    assert!(
        denied_for_max_links("link.create-veth"),
        "{:#?}",
        world.audit()
    );
    support::assert_same(&before, &world.snapshot(), "after the second undone ADD");
}

/// Outside ADD a deletion returns before the kernel has freed the link
/// (its `rcu_barrier()` overlaps what the plugin does next), but never
/// before the link, its peer and their routes are gone: what the plugin
/// sees next is the state after the deletion.
#[test]
fn a_deletion_outside_add_is_complete_when_the_call_returns() {
    let world = World::new("dela");
    world.node.ip(&[
        "link",
        "add",
        "cnitestdv",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        world.ctr.path.to_str().unwrap(),
    ]);
    world.node.ip(&["link", "set", "cnitestdv", "up"]);
    world
        .node
        .ip(&["route", "add", "10.123.45.0/24", "dev", "cnitestdv"]);
    for _ in 0..3 {
        let run = world.run(
            "DEL",
            &policy_with(wide()),
            &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
                {"call": "route.list", "ns": "host"},
                {"call": "link.delete", "ns": "container", "link": "eth0"},
                {"call": "route.list", "ns": "host"},
                {"call": "link.get-by-name", "ns": "host", "name": "cnitestdv"},
                {"call": "link.get-by-name", "ns": "container", "name": "eth0"},
            ]}),
            &[],
        );
        let r = run.json();
        let results = &r["results"];
        assert!(results[1].get("ok").is_some(), "the deletion failed: {r}");
        let (before, after) = (
            results[0]["ok"].as_u64().expect("route count"),
            results[2]["ok"].as_u64().expect("route count"),
        );
        assert_eq!(after + 1, before, "the route through the peer is gone: {r}");
        assert_eq!(results[3]["error"], "not-found", "the peer is gone: {r}");
        assert_eq!(results[4]["error"], "not-found", "the link is gone: {r}");
        world.node.ip(&[
            "link",
            "add",
            "cnitestdv",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            world.ctr.path.to_str().unwrap(),
        ]);
        world.node.ip(&["link", "set", "cnitestdv", "up"]);
        world
            .node
            .ip(&["route", "add", "10.123.45.0/24", "dev", "cnitestdv"]);
    }
}

/// The S6 plugin's work: a bridge, a veth into the container, addresses,
/// routes, sysctls, moves, in both namespaces.
fn s6_ops() -> Value {
    let ops = json!([
        {"call": "link.create-bridge", "ns": "host", "name": "cnitest0", "mtu": 1400},
        {"call": "link.set-up", "ns": "host", "link": "cnitest0", "up": true},
        {"call": "address.add", "ns": "host", "link": "cnitest0", "prefix": "10.99.0.1/24"},
        {"call": "link.create-veth", "ns": "host", "name": "cnitestv0", "peer-ns": "container", "peer-name": "eth0", "mtu": 1400},
        {"call": "link.set-master", "ns": "host", "link": "cnitestv0", "master": "cnitest0"},
        {"call": "link.set-hairpin", "ns": "host", "link": "cnitestv0", "on": true},
        {"call": "link.set-up", "ns": "host", "link": "cnitestv0", "up": true},
        {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.cnitestv0.forwarding", "value": "1"},
        {"call": "route.add", "ns": "host", "destination": "10.98.0.0/24", "link": "cnitestv0"},
        {"call": "link.set-up", "ns": "container", "link": "eth0", "up": true},
        {"call": "address.add", "ns": "container", "link": "eth0", "prefix": "10.99.0.2/24"},
        {"call": "route.add", "ns": "container", "destination": "0.0.0.0/0", "gateway": "10.99.0.1", "link": "eth0"},
        {"call": "route.replace", "ns": "container", "destination": "10.97.0.0/16", "gateway": "10.99.0.1", "link": "eth0", "metric": 50},
        {"call": "link.set-mtu", "ns": "container", "link": "eth0", "mtu": 1300},
        {"call": "link.set-alias", "ns": "container", "link": "eth0", "alias": "pod"},
        {"call": "link.set-promiscuous", "ns": "container", "link": "lo", "on": true},
        {"call": "sysctl.set", "ns": "container", "key": "net.ipv4.conf.eth0.forwarding", "value": "1"},
        {"call": "link.create-veth", "ns": "container", "name": "d0", "peer-ns": "container", "peer-name": "d0p"},
        {"call": "link.move-to", "ns": "container", "link": "d0", "target": "host", "new-name": "cnitestd0"},
        {"call": "link.set-mac", "ns": "host", "link": "cnitestd0", "mac": "02:00:00:00:00:42"},
        {"call": "address.add", "ns": "host", "link": "cnitestd0", "prefix": "fd00:99::1/64", "no-dad": true},
        {"call": "address.delete", "ns": "container", "link": "lo", "prefix": "10.55.0.1/24"},
        {"call": "link.create-veth", "ns": "container", "name": "d1", "peer-ns": "container", "peer-name": "d1p"},
        {"call": "link.set-name", "ns": "container", "link": "d1", "name": "d2"},
        // Changes to what was there before the ADD (see `s6_world`).
        {"call": "link.set-mtu", "ns": "container", "link": "pre0", "mtu": 1280},
        {"call": "link.set-mac", "ns": "container", "link": "pre0", "mac": "02:00:00:00:00:77"},
        {"call": "link.set-alias", "ns": "container", "link": "pre0", "alias": "was-pre"},
        {"call": "link.set-promiscuous", "ns": "container", "link": "pre0", "on": true},
        {"call": "link.set-allmulticast", "ns": "container", "link": "pre0", "on": true},
        {"call": "link.set-txqlen", "ns": "container", "link": "pre0", "txqlen": 77},
        {"call": "rule.add", "ns": "container", "source": "10.60.0.1/32", "table": 100},
        {"call": "rule.delete", "ns": "container", "source": "10.60.0.9/32", "table": 90},
        {"call": "state.set", "key": "old-mtu", "value": "1500"},
        {"call": "state.set", "key": "gone", "value": "x"},
        {"call": "state.remove", "key": "gone"},
        {"call": "link.set-name", "ns": "container", "link": "pre0p", "name": "renamed0"},
        {"call": "route.replace", "ns": "container", "destination": "10.61.0.0/24", "gateway": "10.99.0.1", "link": "eth0"},
        {"call": "route.delete", "ns": "container", "destination": "10.62.0.0/24", "metric": 10},
        {"call": "address.delete", "ns": "container", "link": "pre0", "prefix": "10.60.0.1/24"},
        {"call": "link.set-up", "ns": "container", "link": "pre0", "up": false},
        {"call": "link.move-to", "ns": "container", "link": "renamed0", "target": "host", "new-name": "cnitestmv0"},
        {"call": "link.set-master", "ns": "host", "link": "cnitestpre", "master": "cnitest0"},
        {"call": "link.set-hairpin", "ns": "host", "link": "cnitestpre", "on": true},
        {"call": "link.set-port-isolated", "ns": "host", "link": "cnitestpre", "on": true},
        {"call": "link.set-mtu", "ns": "host", "link": "cnitestpre", "mtu": 1300},
        {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.cnitestpre.forwarding", "value": "1"},
        {"call": "address.add", "ns": "host", "link": "cnitestpre", "prefix": "10.78.0.1/24"},
        {"call": "address.delete", "ns": "host", "link": "cnitestpre", "prefix": "10.78.0.1/24"},
        {"call": "link.set-up", "ns": "host", "link": "cnitestpre", "up": false},
        {"call": "sysctl.set", "ns": "container", "key": "net.ipv4.conf.all.forwarding", "value": "1"},
        {"call": "sysctl.set", "ns": "host", "key": "net.ipv4.conf.all.forwarding", "value": "1"},
    ]);
    // IPAM state, and a delegate whose changes join the journal.
    let more = json!([
        {"call": "ipam.open", "data-dir": "@ipam"},
        {"call": "ipam.reserve", "address": "10.80.0.7", "range-id": "0"},
        {"call": "ipam.reserve", "address": "fd00:80::7", "range-id": "1"},
        {"call": "ipam.close"},
        {"call": "delegate.run", "type": "scripted", "command": "ADD", "config": {
            "cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
                {"call": "ipam.open", "data-dir": "@ipam"},
                {"call": "ipam.reserve", "address": "10.80.0.8", "range-id": "0"},
                {"call": "link.create-veth", "ns": "container", "name": "dg0", "peer-ns": "container", "peer-name": "dg0p"},
                {"call": "link.set-up", "ns": "container", "link": "lo", "up": false},
            ]}},
        {"call": "route.add", "ns": "host", "destination": "10.80.0.7/32", "link": "cnitestv0"},
    ]);
    let mut all = ops.as_array().cloned().unwrap_or_default();
    all.extend(more.as_array().cloned().unwrap_or_default());
    Value::Array(all)
}

/// A world with things already there for the S6 plugin to change: the
/// container's lo up with an extra address, a veth `pre0` with an address
/// and routes (the host side has `cnitestpre`, see `World::new`).
fn s6_world(tag: &str) -> World {
    let world = World::new(tag);
    // Hardened as many nodes are: writing `conf.all.forwarding` flips
    // `all.accept_redirects`, which the undo must set back too.
    world.node.sysctl("net.ipv4.conf.all.accept_redirects", "0");
    world.ctr.sysctl("net.ipv4.conf.all.accept_redirects", "0");
    let c = &world.ctr;
    c.ip(&["link", "set", "lo", "up"]);
    c.ip(&["addr", "add", "10.55.0.1/24", "dev", "lo"]);
    c.ip(&[
        "link", "add", "pre0", "type", "veth", "peer", "name", "pre0p",
    ]);
    c.ip(&["link", "set", "pre0", "up"]);
    c.ip(&["addr", "add", "10.60.0.1/24", "dev", "pre0"]);
    c.ip(&["route", "add", "10.61.0.0/24", "dev", "pre0"]);
    c.ip(&[
        "route",
        "add",
        "10.62.0.0/24",
        "via",
        "10.60.0.2",
        "dev",
        "pre0",
        "metric",
        "10",
    ]);
    c.ip(&["rule", "add", "from", "10.60.0.9", "table", "90"]);
    world
}

fn s6_grant() -> Value {
    let mut g = wide();
    g["host"]["create"] = json!(["veth", "bridge", "dummy"]);
    g["host"]["sysctls"] = json!(["net.ipv4.conf.*.forwarding", "net.ipv4.conf.all.forwarding"]);
    g["attachment-state"] = json!(true);
    g
}

#[test]
fn s6_a_failed_add_is_undone_after_every_host_call() {
    let world = s6_world("s6");
    let before = world.snapshot();
    let conf = |fail: Value| json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": s6_ops(), "fail": fail});
    let policy = policy_with(s6_grant());

    // The whole script succeeds and changes both namespaces...
    let ok = world.run("ADD", &policy, &conf(Value::Null), &[]);
    assert_eq!(ok.code, 0, "{ok:?}");
    let report = ok.json();
    for r in report["results"].as_array().expect("results") {
        assert!(r.get("ok").is_some(), "op failed in the full run: {report}");
    }
    let total = report["calls"].as_u64().expect("calls");
    assert!(total >= 30, "{report}");
    assert_ne!(before, world.snapshot());
    // ... so start over from a clean pair.
    drop(world);
    let world = s6_world("s6b");
    let before = world.snapshot();

    for k in 1..=total {
        for how in ["exit", "trap"] {
            let run = world.run("ADD", &policy, &conf(json!({"after": k, "how": how})), &[]);
            assert_ne!(run.code, 0, "k={k} {how}: {run:?}");
            let err = run.json();
            let want = if how == "exit" { 11 } else { 100 };
            assert_eq!(err["code"], want, "k={k} {how}: {run:?}");
            support::assert_same(
                &before,
                &world.snapshot(),
                &format!("k={k} {how}: state not restored"),
            );
        }
    }
    // Deadline: the plugin spins after its k-th call.
    for k in [1, total / 2, total] {
        let run = world.run(
            "ADD",
            &policy,
            &conf(json!({"after": k, "how": "loop"})),
            &[("WASMCNI_DEADLINE_MS", "1000")],
        );
        run.assert_cni_error(101, "deadline");
        support::assert_same(
            &before,
            &world.snapshot(),
            &format!("k={k} loop: state not restored"),
        );
        // ... or blocks in the host (a clock), or grows its memory.
        let run = world.run(
            "ADD",
            &policy,
            &conf(json!({"after": k, "how": "sleep"})),
            &[("WASMCNI_DEADLINE_MS", "500")],
        );
        run.assert_cni_error(101, "deadline");
        support::assert_same(
            &before,
            &world.snapshot(),
            &format!("k={k} sleep: state not restored"),
        );
        let run = world.run(
            "ADD",
            &policy,
            &conf(json!({"after": k, "how": "memory"})),
            &[],
        );
        run.assert_cni_error(102, "memory cap");
        support::assert_same(
            &before,
            &world.snapshot(),
            &format!("k={k} memory: state not restored"),
        );
    }
    // Every undo step is audited.
    assert!(world
        .audit()
        .iter()
        .any(|r| r["call"] == "journal.undo" && r["outcome"] == "ok"));
}

/// Whether node link `name` is an isolated bridge port.
fn isolated(world: &World, name: &str) -> bool {
    let out = world.node.ip(&["-j", "-d", "link", "show", name]);
    let v: Value = serde_json::from_str(&out).expect("ip -j");
    v[0]["linkinfo"]["info_slave_data"]["isolated"] == json!(true)
}

/// `link.set-port-isolated` (added in one commit touching only its WIT
/// file, its interface module, the SDK and this test, issue 25): it
/// isolates a node bridge port the grant names, and a failed ADD frees
/// it again.
#[test]
fn a_bridge_port_is_isolated_and_a_failed_adds_undo_frees_it() {
    let world = World::new("iso");
    world
        .node
        .ip(&["link", "add", "cnitestbr9", "type", "bridge"]);
    world
        .node
        .ip(&["link", "set", "cnitestpre", "master", "cnitestbr9"]);
    assert!(!isolated(&world, "cnitestpre"));
    let policy = policy_with(wide());
    let conf = |exit: i32| {
        json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "exit": exit, "ops": [
            {"call": "link.set-port-isolated", "ns": "host", "link": "cnitestpre", "on": true},
        ]})
    };
    let failed = world.run("ADD", &policy, &conf(1), &[]);
    assert_ne!(failed.code, 0, "{failed:?}");
    assert!(
        !isolated(&world, "cnitestpre"),
        "the failed ADD's undo left the port isolated"
    );
    let ok = world.run("ADD", &policy, &conf(0), &[]);
    assert_eq!(ok.code, 0, "{ok:?}");
    assert!(isolated(&world, "cnitestpre"), "{ok:?}");
    // Not a bridge port: the kernel's answer, and nothing changes.
    let not_a_port = world.run(
        "ADD",
        &policy,
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
            {"call": "link.set-port-isolated", "ns": "host", "link": "cnitestbr9", "on": true},
        ]}),
        &[],
    );
    let report = not_a_port.json();
    let last = report["results"].as_array().and_then(|r| r.last()).cloned();
    assert_eq!(
        last.unwrap_or(Value::Null)["error"],
        "not-supported",
        "{not_a_port:?}"
    );
}

#[test]
fn s8_netns_confusion_is_refused_and_touches_nothing() {
    let world = World::new("s8");
    let before = world.snapshot();
    let file = world.dir.path().join("not-a-netns");
    std::fs::write(&file, "x").expect("file");
    let link = world.dir.path().join("host-netns-link");
    std::os::unix::fs::symlink(&world.node.path, &link).expect("symlink");
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "link.create-veth", "ns": "container", "name": "x0", "peer-ns": "container", "peer-name": "x0p"}]})
    .to_string()
    .into_bytes();
    for (what, path) in [
        ("regular file", file.as_path()),
        ("symlink to the host netns", link.as_path()),
        ("the host's own netns", world.node.path.as_path()),
        ("/proc/self/ns/net", Path::new("/proc/self/ns/net")),
    ] {
        let run = Invoke::wasmcni_run(&fixture("scripted").display().to_string(), &conf)
            .cni("ADD", path, "eth0")
            .env(
                "WASMCNI_POLICY",
                world.policy(&policy_with(wide())).display().to_string(),
            )
            .in_netns(&world.node)
            .run();
        run.assert_cni_error(4, "");
        support::assert_same(&before, &world.snapshot(), what);
    }
    // A namespace the kernel will not let wasmcni open (here pid 1's: on
    // these machines it belongs to a process outside our reach) is refused
    // with a message that says so, not a bare errno. CHECK, and no ops:
    // nothing could change even where it opens.
    let check = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []})
        .to_string()
        .into_bytes();
    let run = Invoke::wasmcni_run(&fixture("scripted").display().to_string(), &check)
        .cni("CHECK", Path::new("/proc/1/ns/net"), "eth0")
        .in_netns(&world.node)
        .run();
    match std::fs::File::open("/proc/1/ns/net") {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            run.assert_cni_error(4, "cannot be opened: permission denied")
        }
        other => panic!("this test expects /proc/1/ns/net to be closed to root here: {other:?}"),
    }
}

#[test]
fn s9_limits_end_the_plugin_with_a_cni_error_and_undo() {
    let world = World::new("s9");
    let before = world.snapshot();
    let conf =
        |ops: Value| json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": ops});
    // 10^6 host calls hit the budget (default 10 000), after a change that
    // must be undone.
    let t = Instant::now();
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &conf(json!([
            {"call": "link.create-veth", "ns": "container", "name": "x0", "peer-ns": "container", "peer-name": "x0p"},
            {"call": "repeat", "n": 1_000_000, "op": {"call": "link.get-by-index", "ns": "container", "index": 1}},
        ])),
        &[],
    );
    run.assert_cni_error(104, "budget of 10000 host calls");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    support::assert_same(&before, &world.snapshot(), "");
    // A per-plugin budget from the policy.
    let mut g = wide();
    g["host-calls"] = json!(5);
    let run = world.run(
        "ADD",
        &policy_with(g),
        &conf(json!([{"call": "repeat", "n": 10, "op": {"call": "link.list", "ns": "container"}}])),
        &[],
    );
    run.assert_cni_error(104, "budget of 5 host calls");
    // A 1 GB string: the plugin cannot even build it under the memory cap.
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &conf(json!([{"call": "big-name", "ns": "container", "bytes": 1u64 << 30}])),
        &[],
    );
    run.assert_cni_error(102, "memory cap");
    // A 1 MiB name crosses the boundary and is refused by the host.
    let run = world.run(
        "ADD",
        &policy_with(wide()),
        &conf(json!([{"call": "big-name", "ns": "container", "bytes": 1u64 << 20}])),
        &[],
    );
    assert_eq!(
        run.json()["results"][0]["error"],
        "invalid-argument",
        "{run:?}"
    );
    // The deadline, from the policy, ends the plugin whether it spins in
    // wasm or sleeps an hour in the host: the spin's CPU time is bounded
    // (the deadline plus start-up; a loaded machine does not stretch it,
    // as it does wall time), and the sleep's wall time is far below the
    // hour.
    for how in ["loop", "sleep"] {
        let mut g = wide();
        g["deadline-ms"] = json!(500);
        let t = Instant::now();
        let (run, cpu) = world
            .spawn(
                "ADD",
                &policy_with(g),
                &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
                    {"call": "link.create-veth", "ns": "container", "name": "x1", "peer-ns": "container", "peer-name": "x1p"}],
                    "fail": {"after": 2, "how": how}}),
                &[],
            )
            .wait_cpu();
        run.assert_cni_error(101, "deadline of 500 ms");
        assert!(cpu < Duration::from_millis(1500), "{how}: CPU time {cpu:?}");
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{how}: {:?}",
            t.elapsed()
        );
        support::assert_same(&before, &world.snapshot(), how);
    }
}

/// Waits for `running` at most `limit`; a run still going then is killed
/// and the test fails: a plugin that spins past its deadline must not
/// hang the suite.
fn finish_within(running: support::Running, limit: Duration, what: &str) -> support::Run {
    let pid = running.pid();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(running.wait());
    });
    match rx.recv_timeout(limit) {
        Ok(run) => run,
        Err(_) => {
            // SAFETY: signals a process this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{what}: still running after {limit:?}, killed");
        }
    }
}

/// A deadline shorter than the plugin's first compile (an empty artifact
/// cache) still ends a plugin that spins in wasm: the deadline starts once
/// the component is loaded. (Armed before the load, the timer fired during
/// the compile, before the plugin's store existed, and the store, whose
/// epoch deadline counts from then, never trapped.)
#[test]
fn a_deadline_shorter_than_the_first_compile_still_ends_a_spinning_plugin() {
    let world = World::new("dlc");
    let cache = tempfile::tempdir().expect("tempdir");
    let mut g = wide();
    g["deadline-ms"] = json!(5);
    let running = world.spawn(
        "ADD",
        &policy_with(g),
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
            {"call": "link.list", "ns": "container"}],
            "fail": {"after": 1, "how": "loop"}}),
        &[("WASMCNI_CACHE_DIR", &cache.path().display().to_string())],
    );
    let run = finish_within(running, Duration::from_secs(60), "a cold first run");
    run.assert_cni_error(101, "deadline of 5 ms");
}

/// A delegate whose store is made after the process's deadline passed
/// (its first compile took longer than what was left) traps at once: its
/// epoch deadline would count from the epoch the timer already advanced,
/// and it would spin forever.
#[test]
fn a_delegate_made_after_the_deadline_passed_does_not_run_on() {
    let world = World::new("dld");
    let cache = tempfile::tempdir().expect("tempdir");
    let mut g = wide();
    g["delegates"] = json!(["hostile"]);
    g["deadline-ms"] = json!(100);
    let policy = json!({"plugins": {"scripted": g, "hostile": {}}});
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "delegate.run", "type": "hostile", "command": "ADD", "config": "@stdin"}]});
    let cache_dir = cache.path().display().to_string();
    // The scripted plugin's own artifact, so that its run starts at once.
    let warm = world.run(
        "DEL",
        &policy,
        &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []}),
        &[("WASMCNI_CACHE_DIR", &cache_dir)],
    );
    assert_eq!(warm.code, 0, "{warm:?}");
    let running = world.spawn(
        "ADD",
        &policy,
        &conf,
        &[("WASMCNI_CACHE_DIR", &cache_dir), ("CNI_ARGS", "MODE=loop")],
    );
    let run = finish_within(running, Duration::from_secs(60), "a late delegate");
    run.assert_cni_error(101, "deadline");
}

#[test]
fn a_pinned_plugin_runs_only_with_its_sha256() {
    let world = World::new("pin");
    let wasm = std::fs::read(fixture("scripted")).expect("fixture");
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&wasm))
    };
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []});
    let mut g = wide();
    g["sha256"] = json!("0".repeat(64));
    world
        .run("ADD", &policy_with(g.clone()), &conf, &[])
        .assert_cni_error(103, "pins it to");
    g["sha256"] = json!(digest);
    let run = world.run("ADD", &policy_with(g.clone()), &conf, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    // `--policy` names the file as well as $WASMCNI_POLICY does, and wins.
    g["sha256"] = json!("f".repeat(64));
    let stdin = conf.to_string().into_bytes();
    let run = Invoke::wasmcni_run(&fixture("scripted").display().to_string(), &stdin)
        .arg("--policy")
        .arg(world.policy(&policy_with(g)).display().to_string())
        .env("WASMCNI_POLICY", "/nonexistent/policy.json")
        .cni("ADD", &world.ctr.path, "eth0")
        .in_netns(&world.node)
        .run();
    run.assert_cni_error(103, "pins it to ffff");
}

#[test]
fn an_untrusted_or_malformed_policy_file_is_refused() {
    let world = World::new("pol");
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": []})
        .to_string()
        .into_bytes();
    let run_with = |path: &Path| {
        Invoke::wasmcni_run(&fixture("scripted").display().to_string(), &conf)
            .cni("ADD", &world.ctr.path, "eth0")
            .env("WASMCNI_POLICY", path.display().to_string())
            .in_netns(&world.node)
            .run()
    };
    let p = world.policy(&policy_with(wide()));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    run_with(&p).assert_cni_error(105, "not trusted");
    let bad = world.dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"plugins":{"scripted":{"container":{"raed":true}}}}"#,
    )
    .expect("write");
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    run_with(&bad).assert_cni_error(105, "raed");
    run_with(Path::new("/nonexistent/policy.json")).assert_cni_error(105, "policy");
    // A good file in a directory others may write (they could replace it),
    // or reached through a symlink in one, is not trusted either.
    let open_dir = world.dir.path().join("open");
    std::fs::create_dir(&open_dir).expect("mkdir");
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let inside = open_dir.join("policy.json");
    std::fs::copy(&p, &inside).expect("copy");
    std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    run_with(&inside).assert_cni_error(105, "writable by group or others (mode 1777)");
    let good = world.dir.path().join("good.json");
    std::fs::copy(&p, &good).expect("copy");
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let conf_ok = run_with(&good);
    assert_eq!(conf_ok.code, 0, "{conf_ok:?}");
    let link = open_dir.join("link.json");
    std::os::unix::fs::symlink(&good, &link).expect("symlink");
    run_with(&link).assert_cni_error(105, "is writable by group or others");
    // A symlink in a trusted directory that leads through an open one.
    let hop = world.dir.path().join("hop.json");
    std::os::unix::fs::symlink(&link, &hop).expect("symlink");
    run_with(&hop).assert_cni_error(105, "is writable by group or others");
    // A FIFO is refused at once, not waited on.
    let fifo = world.dir.path().join("fifo.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let t = Instant::now();
    run_with(&fifo).assert_cni_error(105, "not a regular file");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// A reader that stops early (`wasmcni audit bridge | head -1`) ends a
/// report command as it ends `cat`, by SIGPIPE: no panic on the failed
/// write.
#[test]
fn report_commands_end_quietly_when_the_reader_stops() {
    require_root();
    use std::os::unix::process::ExitStatusExt;
    for args in [
        &["audit", "bridge"][..],
        &["audit", "--json", "bridge"],
        &["list"],
        &["capabilities"],
    ] {
        // A pipe whose read end is closed before the command writes.
        // Close-on-exec: no process another test starts meanwhile keeps
        // a read end open.
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        drop(r);
        let out = std::process::Command::new(support::wasmcni())
            .args(args)
            .env_remove("WASMCNI_POLICY")
            .stdout(std::process::Stdio::from(w))
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}

#[test]
fn audit_shows_identity_imports_grants_and_refusals() {
    require_root();
    let out = std::process::Command::new(support::wasmcni())
        .args(["audit", "loopback"])
        .env("WASMCNI_POLICY", "/nonexistent-is-an-error")
        .output()
        .expect("run");
    assert!(
        !out.status.success(),
        "a missing explicit policy file is an error"
    );
    let out = std::process::Command::new(support::wasmcni())
        .args(["audit", "loopback"])
        .env_remove("WASMCNI_POLICY")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "plugin   loopback",
        "sha256 ",
        "wasmcni:plugin/link@0.1.0",
        "set-up",
        "container  read; modify",
        "host       none",
        "refused imports: none",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
    // The standard plugins' grants, as a reviewer sees them.
    for (plugin, needles) in [
        (
            "bridge",
            &[
                "wasmcni:plugin/delegate@0.1.0",
                "delegates  host-local, static, dhcp (native: none)",
                "dhcp       none",
                "create [veth, bridge]",
                "bridges [cni*]",
                "names [veth*, cni*]",
            ][..],
        ),
        (
            "dhcp",
            &[
                "wasmcni:plugin/dhcp@0.1.0",
                "dhcp       /run/wasmcni/dhcp.sock",
                "container  read; modify",
                "host       none",
            ][..],
        ),
        (
            "host-local",
            &[
                "wasmcni:plugin/ipam-store@0.1.0",
                "ipam state /var/lib/cni/networks",
                "container  nothing",
                "host       none",
            ][..],
        ),
    ] {
        let out = std::process::Command::new(support::wasmcni())
            .args(["audit", plugin])
            .env_remove("WASMCNI_POLICY")
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{plugin}: {text}");
        for needle in needles {
            assert!(
                text.contains(needle),
                "{plugin}: {needle:?} not in:\n{text}"
            );
        }
    }
    let out = std::process::Command::new(support::wasmcni())
        .args(["audit", "--json", &fixture("sockets").display().to_string()])
        .output()
        .expect("run");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let refused = v["refused-imports"].as_array().expect("list");
    assert!(
        refused
            .iter()
            .any(|i| i.as_str().is_some_and(|s| s.starts_with("wasi:sockets/"))),
        "{v}"
    );
    assert_eq!(v["policy"]["container"], "nothing", "{v}");
    // Issue 27 item 10: the origin is the file's path, not `File("...")`.
    assert_eq!(v["origin"], json!(fixture("sockets").display().to_string()));

    // The imports cross-checked against the grant: under an entry that
    // grants bridge only `container.read`, what it would be denied is
    // marked, naming the field; the WASI interfaces wasmcni provides are
    // one line.
    let dir = support::private_tempdir();
    let policy = dir.path().join("policy.json");
    std::fs::write(
        &policy,
        json!({"plugins": {"bridge": {"container": {"read": true}}}}).to_string(),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let out = std::process::Command::new(support::wasmcni())
        .args(["audit", "bridge"])
        .env("WASMCNI_POLICY", &policy)
        .env_remove("WASMCNI_POLICY_DIR")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for needle in [
        "origin   bundled",
        "-> DENIED: needs host",
        "-> DENIED: needs container.create: [veth] (the entry has no host grant)",
        "-> granted in the container only",
        "function(s) this policy denies",
        "WASI, as wasmcni provides it",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
    assert!(
        !text.contains("\n  wasi:cli/stdout"),
        "WASI is grouped: {text}"
    );
    // Under the default policy. bridge shares the standard component with
    // the other standard plugins but loopback, so its audit lists every
    // function that component imports: each one bridge is denied is granted
    // to another plugin the component carries (an import no plugin may call
    // would be dead weight, or a missing grant).
    let audit = |plugin: &str| -> Value {
        let out = std::process::Command::new(support::wasmcni())
            .args(["audit", "--json", plugin])
            .env_remove("WASMCNI_POLICY")
            .env_remove("WASMCNI_POLICY_DIR")
            .output()
            .expect("run");
        assert!(out.status.success(), "{plugin}: {out:?}");
        serde_json::from_slice(&out.stdout).expect("json")
    };
    // (interface.function, granted) of every wasmcni host function.
    let grants = |v: &Value| -> Vec<(String, bool)> {
        v["imports"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|i| {
                let iface = i["interface"].as_str().unwrap_or_default().to_owned();
                i["functions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(move |f| {
                        let g = f["grant"].as_str()?;
                        Some((
                            format!("{iface}.{}", f["function"].as_str()?),
                            !g.starts_with("DENIED"),
                        ))
                    })
            })
            .collect()
    };
    let v = audit("bridge");
    assert_eq!(v["component"], "standard", "{v}");
    let shared: Vec<String> = v["shared-with"]
        .as_array()
        .expect("shared-with")
        .iter()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    assert!(shared.iter().any(|n| n == "host-local"), "{shared:?}");
    assert!(!shared.iter().any(|n| n == "loopback"), "{shared:?}");
    let bridge = grants(&v);
    assert!(bridge.iter().any(|(_, granted)| *granted), "{v}");
    let mut denied: std::collections::BTreeSet<String> = bridge
        .into_iter()
        .filter(|(_, granted)| !granted)
        .map(|(f, _)| f)
        .collect();
    for other in &shared {
        for (f, granted) in grants(&audit(other)) {
            if granted {
                denied.remove(&f);
            }
        }
    }
    assert!(
        denied.is_empty(),
        "imported by the standard component, granted to none of its plugins: {denied:?}"
    );
    // loopback is a component of its own: it imports only what it calls,
    // and is denied none of it.
    let lo = audit("loopback");
    assert_eq!(lo["component"], "loopback", "{lo}");
    assert_eq!(lo["shared-with"], json!([]), "{lo}");
    let lo = grants(&lo);
    assert!(!lo.is_empty());
    assert!(lo.iter().all(|(_, granted)| *granted), "{lo:?}");
}

/// The reference's (and wasmcni's) `ifb` name for network `n`, container
/// `ctr-test-1`: `bwp` + 12 hex digits of SHA-512(network + container ID).
fn ifb_of_test_attachment() -> String {
    use sha2::Digest;
    let d = sha2::Sha512::digest(b"nctr-test-1");
    format!("bwp{}", &hex::encode(d)[..12])
}

/// traffic-control end to end through the scripted plugin: limits on the
/// plugin's own veth are installed, read back and (in DEL) removed with
/// the attachment's `ifb`; a link squatting the `ifb`'s name that is not
/// the attachment's is never used nor deleted, and nothing changes.
#[test]
fn traffic_control_installs_reads_back_and_removes_only_its_own() {
    let world = World::new("tc");
    let run = |command: &str, ops: Value| {
        world.run(
            command,
            &policy_with(wide_tc()),
            &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": ops}),
            &[],
        )
    };
    let add = run(
        "ADD",
        json!([own_veth(),
            {"call": "traffic-control.limit-transmit", "ns": "host", "link": "cnitestv9",
             "rate": 800000, "burst": 80000},
            {"call": "traffic-control.limit-receive", "ns": "host", "link": "cnitestv9",
             "rate": 1600000, "burst": 160000},
            {"call": "traffic-control.limits", "ns": "host", "link": "cnitestv9"},
            // A second root qdisc is refused, not replaced.
            {"call": "traffic-control.limit-transmit", "ns": "host", "link": "cnitestv9",
             "rate": 8000, "burst": 8000}]),
    );
    let r = add.json();
    assert_eq!(add.code, 0, "{add:?}");
    assert_eq!(
        r["results"][3]["ok"],
        "LinkLimits { transmit: Shaping::RateLimit(RateLimit { rate: 800000, burst: 80000 }), \
         receive: Shaping::RateLimit(RateLimit { rate: 1600000, burst: 160000 }) }",
        "{r}"
    );
    assert_eq!(r["results"][4]["error"], "already-exists", "{r}");
    let ifb = ifb_of_test_attachment();
    let tc = world.node.traffic_control().to_string();
    assert!(tc.contains("\"tbf\"") && tc.contains("\"ingress\""), "{tc}");
    assert!(tc.contains(&ifb), "{tc}");
    let link = world.node.ip(&["-d", "link", "show", &ifb]);
    assert!(
        link.contains("ifb") && link.contains("alias wasmcni:n:ctr-test-1:eth0"),
        "{link}"
    );
    // DEL removes both qdiscs and the ifb (and the host, the attachment's
    // veth its ADD recorded); a second DEL finds nothing.
    for round in 0..2 {
        let del = run(
            "DEL",
            json!([{"call": "traffic-control.remove-limits", "ns": "host", "link": "cnitestv9"}]),
        );
        assert_eq!(del.code, 0, "{del:?}");
        let result = &del.json()["results"][0];
        assert!(
            result.get("ok").is_some() || (round == 1 && result["error"] == "not-found"),
            "{del:?}"
        );
        let tc = world.node.traffic_control().to_string();
        assert!(
            !tc.contains("\"tbf\"") && !tc.contains("\"ingress\""),
            "{tc}"
        );
        let links = world.node.ip(&["link", "show"]);
        assert!(
            !links.contains(&ifb) && !links.contains("cnitestv9"),
            "{links}"
        );
    }
    // The rest needs the attachment's veth again: made by hand with the
    // attachment's mark (no record lists it, so no DEL takes it).
    world.node.ip(&[
        "link",
        "add",
        "cnitestv9",
        "type",
        "veth",
        "peer",
        "name",
        "eth9",
        "netns",
        &world.ctr.name,
    ]);
    world.node.ip(&[
        "link",
        "set",
        "cnitestv9",
        "alias",
        "wasmcni:n:ctr-test-1:eth0",
    ]);
    // Limits the kernel cannot hold in whole bytes are refused by the
    // host itself, whatever the plugin checked.
    let before = world.snapshot();
    let add = run(
        "ADD",
        json!([{"call": "traffic-control.limit-transmit", "ns": "host", "link": "cnitestv9",
                "rate": 7, "burst": 80000},
               {"call": "traffic-control.limit-receive", "ns": "host", "link": "cnitestv9",
                "rate": 80000, "burst": 34359738360u64}]),
    );
    let r = add.json();
    assert_eq!(r["results"][0]["error"], "invalid-argument", "{r}");
    assert_eq!(r["results"][1]["error"], "invalid-argument", "{r}");
    support::assert_same(&before, &world.snapshot(), "refused limits");
    // A link squatting the ifb's name: limit-receive fails and leaves
    // nothing, remove-limits refuses to delete it.
    world.node.ip(&["link", "add", &ifb, "type", "ifb"]);
    let before = world.snapshot();
    let add = run(
        "ADD",
        json!([{"call": "traffic-control.limit-receive", "ns": "host", "link": "cnitestv9",
                "rate": 1600000, "burst": 160000}]),
    );
    assert_eq!(
        add.json()["results"][0]["error"],
        "already-exists",
        "{add:?}"
    );
    support::assert_same(
        &before,
        &world.snapshot(),
        "limit-receive over a squatted ifb name",
    );
    let del = run(
        "DEL",
        json!([{"call": "traffic-control.remove-limits", "ns": "host"}]),
    );
    assert_eq!(
        del.json()["results"][0]["error"],
        "access-denied",
        "{del:?}"
    );
    support::assert_same(
        &before,
        &world.snapshot(),
        "remove-limits of a squatted ifb name",
    );
}

/// GC deletes exactly the ifbs of this network's attachments that are no
/// longer valid: not a valid attachment's, not another network's, not a
/// link that only carries a mark, not one named otherwise.
#[test]
fn traffic_control_gc_deletes_only_this_networks_stale_ifbs() {
    use sha2::Digest;
    let world = World::new("tcgc");
    let name = |net: &str, ctr: &str| {
        let d = sha2::Sha512::digest(format!("{net}{ctr}").as_bytes());
        format!("bwp{}", &hex::encode(d)[..12])
    };
    let add = |link: &str, kind: &str, alias: &str| {
        world.node.ip(&["link", "add", link, "type", kind]);
        world.node.ip(&["link", "set", link, "alias", alias]);
    };
    let stale = name("n", "gone-ctr");
    let valid = name("n", "other-ctr");
    let other_net = name("m", "gone-ctr");
    let not_ifb = name("n", "gone-ctr2");
    add(&stale, "ifb", "wasmcni:n:gone-ctr:eth0");
    add(&valid, "ifb", "wasmcni:n:other-ctr:eth0");
    add(&other_net, "ifb", "wasmcni:m:gone-ctr:eth0");
    add(&not_ifb, "veth", "wasmcni:n:gone-ctr2:eth0");
    // Marked for a stale attachment, but not under its ifb name.
    add("bwpmisnamed0", "ifb", "wasmcni:n:gone-ctr:eth0");
    let gc = |grant: Value| {
        world.run(
            "GC",
            &policy_with(grant),
            &json!({"cniVersion": "1.1.0", "name": "n", "type": "scripted",
                    "ops": [{"call": "traffic-control.collect-garbage", "ns": "host"}],
                    "cni.dev/valid-attachments": [{"containerID": "other-ctr", "ifname": "eth0"}]}),
            &[],
        )
    };
    let run = gc(wide_tc());
    assert_eq!(run.json()["results"][0]["ok"], 1, "{run:?}");
    let links = world.node.ip(&["link", "show"]);
    assert!(!links.contains(&stale), "{links}");
    for kept in [&valid, &other_net, &not_ifb, &"bwpmisnamed0".to_owned()] {
        assert!(links.contains(kept.as_str()), "{kept} deleted: {links}");
    }
    // Again: nothing left to collect.
    assert_eq!(gc(wide_tc()).json()["results"][0]["ok"], 0);
}

/// A runtime's W3C trace context (libcni passes `TRACEPARENT` to its
/// plugins) reaches every audit record of the invocation: the plugin's
/// calls, its delegate's (run in the same process) and the failed ADD's
/// undo. A malformed one is ignored, as the standard asks.
#[test]
fn the_trace_id_reaches_every_audit_record() {
    let world = World::new("trace");
    let (id, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let inner = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
        {"call": "link.create-veth", "ns": "container", "name": "tr0",
         "peer-ns": "container", "peer-name": "tr1"}]});
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "exit": 1,
        "ops": [{"call": "delegate.run", "type": "scripted", "command": "ADD", "config": inner}]});
    let before = world.snapshot();
    for (header, traced) in [
        (format!("00-{id}-{parent}-01"), true),
        (format!("00-{}-{parent}-01", id.to_uppercase()), false),
    ] {
        let _ = std::fs::remove_file(world.audit_path());
        let run = world.run(
            "ADD",
            &policy_with(wide()),
            &conf,
            &[("TRACEPARENT", header.as_str()), ("TRACESTATE", "k=v")],
        );
        assert_eq!(run.code, 1, "{run:?}");
        let audit = world.audit();
        let calls: Vec<&str> = audit.iter().filter_map(|r| r["call"].as_str()).collect();
        for call in ["delegate.run", "link.create-veth", "journal.undo"] {
            assert!(
                calls.contains(&call),
                "{header}: no {call} record: {calls:?}"
            );
        }
        for r in &audit {
            if traced {
                assert_eq!(
                    (r["trace_id"].as_str(), r["parent_id"].as_str()),
                    (Some(id), Some(parent)),
                    "{r}"
                );
            } else {
                assert!(
                    r.get("trace_id").is_none() && r.get("parent_id").is_none(),
                    "{r}"
                );
            }
        }
        support::assert_same(&before, &world.snapshot(), "after the failed ADD");
    }
}

//! The privileged primitives (host/kernel/src: netlink/, sysctl.rs, tuntap.rs,
//! announce.rs) against the real kernel. Every operation acts on a fresh
//! test namespace (`ip netns add`), opened with `NetNs::open_container`,
//! which refuses the test process's own namespace: nothing here touches
//! the machine's interfaces, addresses, routes or sysctls. Results are
//! checked with iproute2's JSON output and with the crate's own listings.

mod support;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Netns;
use wasmcni::netlink::{
    address_of, AddrFlags, AddrSpec, LinkOpts, Netlink, NlError, PortVlan, RouteAdd, RouteSpec,
    SubKind,
};
use wasmcni::netns::NetNs;
use wasmcni::{announce, sysctl, tuntap};

use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::route::{RouteAddress, RouteAttribute};
use netlink_packet_route::AddressFamily;

const MAC_A: [u8; 6] = [0x02, 0x00, 0x00, 0xaa, 0x00, 0x01];
const MAC_B: [u8; 6] = [0x02, 0x00, 0x00, 0xbb, 0x00, 0x02];
const MAC_C: [u8; 6] = [0x02, 0x00, 0x00, 0xcc, 0x00, 0x03];

/// `RT_SCOPE_LINK`, `RT_SCOPE_UNIVERSE`.
const SCOPE_LINK: u8 = 253;
const SCOPE_UNIVERSE: u8 = 0;
/// A protocol number of our own, so round trips show it is kept.
const PROTO: u8 = 77;

/// The verified handle of a test namespace and a socket inside it.
fn open(ns: &Netns) -> (NetNs, Netlink) {
    let handle = NetNs::open_container(&ns.path).expect("open test namespace");
    let nl = Netlink::open(&handle).expect("netlink socket in test namespace");
    (handle, nl)
}

/// `ip -n NS ARGS` as JSON.
fn json(ns: &Netns, args: &[&str]) -> Value {
    let s = ns.ip(args);
    if s.trim().is_empty() {
        Value::Array(vec![])
    } else {
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("ip {args:?}: {e}: {s}"))
    }
}

/// One link, as `ip -j -d link show dev NAME` reports it.
fn link(ns: &Netns, name: &str) -> Value {
    json(ns, &["-j", "-d", "link", "show", "dev", name])[0].clone()
}

/// Whether the namespace has a link called `name`.
fn has_link(ns: &Netns, name: &str) -> bool {
    json(ns, &["-j", "link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["ifname"] == name)
}

fn index(nl: &mut Netlink, name: &str) -> u32 {
    nl.link_by_name(name)
        .unwrap_or_else(|e| panic!("link {name}: {e}"))
        .header
        .index
}

fn mac(m: &[u8]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn link_mac(msg: &LinkMessage) -> Vec<u8> {
    msg.attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Address(m) => Some(m.clone()),
            _ => None,
        })
        .expect("link has a hardware address")
}

/// The errno of a failure that must happen.
fn errno<T: std::fmt::Debug>(r: Result<T, NlError>) -> i32 {
    r.expect_err("the kernel should have refused").errno()
}

fn os_errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("should have failed")
        .raw_os_error()
        .expect("an errno")
}

fn no_opts() -> LinkOpts {
    LinkOpts::default()
}

/// A veth pair with both ends here: an always-available Ethernet link
/// with carrier once both ends are up.
fn veth_here(nl: &mut Netlink, here: &NetNs, name: &str, peer: &str) -> u32 {
    nl.create_veth(name, &no_opts(), peer, here.fd(), None)
        .unwrap_or_else(|e| panic!("veth {name}/{peer}: {e}"));
    index(nl, name)
}

/// Whether the running kernel can do `ip link add ARGS` at all, asked
/// independently through iproute2 in a scratch namespace (which has a veth
/// pair `pp0`/`pp1` to put vlans and the like on). Kernels built without a
/// link kind answer EOPNOTSUPP, and wasmcni must then pass that on.
fn kernel_has(args: &[&str]) -> bool {
    let probe = Netns::new("nl-probe");
    probe.ip(&["link", "add", "pp0", "type", "veth", "peer", "name", "pp1"]);
    std::process::Command::new("ip")
        .args(["-n", &probe.name, "link", "add"])
        .args(args)
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn veth_peer_is_born_in_the_other_namespace() {
    let a = Netns::new("nl-veth-a");
    let b = Netns::new("nl-veth-b");
    let (_ha, mut nla) = open(&a);
    let (hb, mut nlb) = open(&b);

    let opts = LinkOpts {
        mtu: Some(1400),
        mac: Some(MAC_A.to_vec()),
        txqlen: None,
    };
    nla.create_veth("va", &opts, "vb", hb.fd(), Some(&MAC_B))
        .expect("create veth");

    let va = link(&a, "va");
    assert_eq!(va["mtu"], 1400);
    assert_eq!(va["address"], mac(&MAC_A));
    assert_eq!(va["linkinfo"]["info_kind"], "veth");
    let vb = link(&b, "vb");
    assert_eq!(vb["mtu"], 1400);
    assert_eq!(vb["address"], mac(&MAC_B));
    assert_eq!(vb["linkinfo"]["info_kind"], "veth");
    assert!(!has_link(&a, "vb"), "the peer must not be born here");
    assert!(!has_link(&b, "va"));
    // The crate's own view agrees.
    assert_eq!(link_mac(&nlb.link_by_name("vb").unwrap()), MAC_B);
    assert_eq!(link_mac(&nla.link_by_name("va").unwrap()), MAC_A);

    // Never reuse: the same name again, or a peer name taken over there.
    assert_eq!(
        errno(nla.create_veth("va", &no_opts(), "vb2", hb.fd(), None)),
        libc::EEXIST
    );
    assert_eq!(
        errno(nla.create_veth("va2", &no_opts(), "vb", hb.fd(), None)),
        libc::EEXIST
    );
    assert!(!has_link(&a, "va2"), "a failed veth must leave nothing");

    // Names the kernel would treat as templates or truncate, and bad MACs.
    for bad in ["", "bad%d", "a23456789012345x", "sp ace", "sl/ash", "nu\0l"] {
        assert_eq!(
            errno(nla.create_veth(bad, &no_opts(), "ok0", hb.fd(), None)),
            libc::EINVAL,
            "{bad:?}"
        );
        assert_eq!(
            errno(nla.create_veth("ok1", &no_opts(), bad, hb.fd(), None)),
            libc::EINVAL,
            "{bad:?}"
        );
    }
    let short_mac = LinkOpts {
        mtu: None,
        mac: Some(vec![2, 0, 0, 0, 1]),
        txqlen: None,
    };
    assert_eq!(
        errno(nla.create_veth("ok2", &short_mac, "ok3", hb.fd(), None)),
        libc::EINVAL
    );
    assert_eq!(
        errno(nla.create_veth("ok4", &no_opts(), "ok5", hb.fd(), Some(&[2, 0, 0]))),
        libc::EINVAL
    );
    let names: Vec<String> = json(&a, &["-j", "link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["lo", "va"], "nothing else was created");
}

#[test]
fn bridge_and_link_settings() {
    let a = Netns::new("nl-br");
    let (ha, mut nl) = open(&a);

    nl.create_bridge("br0", &no_opts(), false).unwrap();
    nl.create_bridge(
        "br1",
        &LinkOpts {
            mtu: Some(1450),
            mac: Some(MAC_C.to_vec()),
            txqlen: None,
        },
        false,
    )
    .unwrap();
    let br0 = link(&a, "br0");
    assert_eq!(br0["linkinfo"]["info_kind"], "bridge");
    assert_eq!(br0["linkinfo"]["info_data"]["vlan_filtering"], 0);
    let br1 = link(&a, "br1");
    assert_eq!(br1["mtu"], 1450);
    assert_eq!(br1["address"], mac(&MAC_C));
    assert_eq!(
        errno(nl.create_bridge("br0", &no_opts(), false)),
        libc::EEXIST
    );

    let br0 = index(&mut nl, "br0");
    let p0 = veth_here(&mut nl, &ha, "p0", "p0-peer");
    let p1 = veth_here(&mut nl, &ha, "p1", "p1-peer");

    // MTU, MAC.
    nl.set_mtu(p0, 1400).unwrap();
    assert_eq!(link(&a, "p0")["mtu"], 1400);
    assert_eq!(errno(nl.set_mtu(p0, 10)), libc::EINVAL);
    nl.set_mac(p0, &MAC_B).unwrap();
    assert_eq!(link(&a, "p0")["address"], mac(&MAC_B));
    assert_eq!(link_mac(&nl.link_by_index(p0).unwrap()), MAC_B);
    // A length other than the link's is refused, not truncated.
    assert_eq!(errno(nl.set_mac(p0, &[2, 0, 0, 0, 0, 1, 9])), libc::EINVAL);
    assert_eq!(errno(nl.set_mac(p0, &[2, 0, 0])), libc::EINVAL);
    assert_eq!(errno(nl.set_mac(p0, &[])), libc::EINVAL);
    assert_eq!(link(&a, "p0")["address"], mac(&MAC_B));
    // Not a unicast address.
    assert_eq!(errno(nl.set_mac(p0, &[0xff; 6])), libc::EADDRNOTAVAIL);

    // Master and hairpin.
    assert_eq!(nl.hairpin(p0).unwrap(), None, "not a port yet");
    nl.set_master(p0, Some(br0)).unwrap();
    assert_eq!(link(&a, "p0")["master"], "br0");
    assert_eq!(link(&a, "p0")["linkinfo"]["info_slave_kind"], "bridge");
    assert_eq!(nl.hairpin(p0).unwrap(), Some(false));
    nl.set_hairpin(p0, true).unwrap();
    assert_eq!(nl.hairpin(p0).unwrap(), Some(true));
    assert_eq!(
        link(&a, "p0")["linkinfo"]["info_slave_data"]["hairpin"],
        true
    );
    // A second port keeps its own setting.
    nl.set_master(p1, Some(br0)).unwrap();
    assert_eq!(nl.hairpin(p1).unwrap(), Some(false));
    assert_eq!(nl.hairpin(p0).unwrap(), Some(true));
    nl.set_hairpin(p0, false).unwrap();
    assert_eq!(nl.hairpin(p0).unwrap(), Some(false));
    assert_eq!(
        link(&a, "p0")["linkinfo"]["info_slave_data"]["hairpin"],
        false
    );
    // Not a port / no such link.
    let p0_peer = index(&mut nl, "p0-peer");
    assert_eq!(
        errno(nl.set_hairpin(p0_peer, true)),
        libc::EOPNOTSUPP,
        "hairpin on a link that is no bridge port"
    );
    assert_eq!(nl.hairpin(p0_peer).unwrap(), None);
    assert_eq!(nl.hairpin(br0).unwrap(), None, "the bridge is no port");
    assert_eq!(errno(nl.hairpin(99_999)), libc::ENODEV);
    assert_eq!(errno(nl.hairpin(0)), libc::ENODEV);
    assert_eq!(errno(nl.set_hairpin(99_999, true)), libc::ENODEV);

    nl.set_master(p0, None).unwrap();
    assert!(link(&a, "p0").get("master").is_none(), "nomaster");
    assert_eq!(nl.hairpin(p0).unwrap(), None);
    assert_eq!(link(&a, "p1")["master"], "br0", "the other port stays");
    // The kernel answers EINVAL for a master that does not exist.
    assert_eq!(errno(nl.set_master(p0, Some(99_999))), libc::EINVAL);
    assert_eq!(errno(nl.set_master(p0, Some(0))), libc::EINVAL);
    assert!(link(&a, "p0").get("master").is_none());
    // A bridge cannot be its own port.
    assert!(nl.set_master(br0, Some(br0)).is_err());

    // Promiscuous mode.
    nl.set_promisc(p1, true).unwrap();
    let l = link(&a, "p1");
    assert!(l["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "PROMISC"));
    assert!(nl
        .link_by_index(p1)
        .unwrap()
        .header
        .flags
        .contains(LinkFlags::Promisc));
    // (A bridge port is promiscuous anyway: the count is the bridge's
    // plus ours.)
    let count = l["promiscuity"].as_u64().unwrap();
    nl.set_promisc(p1, true).unwrap();
    assert_eq!(link(&a, "p1")["promiscuity"], count, "not counted twice");
    nl.set_promisc(p1, false).unwrap();
    let l = link(&a, "p1");
    assert!(!l["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "PROMISC"));
    assert_eq!(l["promiscuity"].as_u64().unwrap(), count - 1);
    let peer = index(&mut nl, "p1-peer");
    nl.set_promisc(peer, true).unwrap();
    assert_eq!(link(&a, "p1-peer")["promiscuity"], 1);
    nl.set_promisc(peer, false).unwrap();
    assert_eq!(link(&a, "p1-peer")["promiscuity"], 0);

    // Name and alias.
    nl.set_name(p1, "renamed").unwrap();
    assert!(has_link(&a, "renamed") && !has_link(&a, "p1"));
    assert_eq!(index(&mut nl, "renamed"), p1);
    assert_eq!(errno(nl.set_name(p1, "p0")), libc::EEXIST);
    assert_eq!(errno(nl.set_name(p1, "x%d")), libc::EINVAL);
    assert_eq!(errno(nl.set_name(p1, "")), libc::EINVAL);
    assert_eq!(errno(nl.set_name(p1, "a23456789012345x")), libc::EINVAL);
    nl.set_alias(p1, "a plugin's link").unwrap();
    assert_eq!(link(&a, "renamed")["ifalias"], "a plugin's link");
    nl.set_alias(p1, "").unwrap();
    assert!(
        link(&a, "renamed").get("ifalias").is_none(),
        "alias cleared"
    );
    nl.set_alias(p1, &"x".repeat(255)).unwrap();
    assert_eq!(link(&a, "renamed")["ifalias"], "x".repeat(255));
    assert_eq!(errno(nl.set_alias(p1, &"x".repeat(256))), libc::EINVAL);
    assert_eq!(errno(nl.set_alias(p1, "nu\0l")), libc::EINVAL);

    // Index 0 (or one negative as a C int) never falls back to a lookup
    // by name.
    assert_eq!(errno(nl.set_name(0, "renamed")), libc::ENODEV);
    assert_eq!(errno(nl.set_mtu(0, 1500)), libc::ENODEV);
    assert_eq!(errno(nl.set_mtu(u32::MAX, 1500)), libc::ENODEV);
    assert_eq!(errno(nl.delete_link(0)), libc::ENODEV);

    // Delete.
    nl.delete_link(p1).unwrap();
    assert!(!has_link(&a, "renamed"));
    assert!(!has_link(&a, "p1-peer"), "a veth goes with its peer");
    assert_eq!(errno(nl.delete_link(p1)), libc::ENODEV);
    assert_eq!(errno(nl.link_by_index(p1)), libc::ENODEV);
    assert_eq!(errno(nl.set_mtu(p1, 1500)), libc::ENODEV);
    nl.delete_link(br0).unwrap();
    assert!(!has_link(&a, "br0"));
}

/// Link kinds a kernel may be built without: created and checked where the
/// kernel has them, refused with EOPNOTSUPP (and nothing left behind)
/// where it has not. This machine's kernel has none of them: the refusals
/// are checked here, and the test runs again in tests/vm/, where the
/// kernel has them all.
#[test]
fn dummy_vlan_filtering_ipvlan_vlan() {
    kinds_here();
    let everywhere = ["dummy", "bridge-vlan", "ipvlan", "vlan"]
        .iter()
        .all(|k| support::vm::kernel_has(k));
    if support::vm::inside() {
        assert!(everywhere, "the VM's kernel lacks a link kind");
    } else if !everywhere {
        support::vm::rerun_this_test("dummy_vlan_filtering_ipvlan_vlan");
    }
}

fn kinds_here() {
    let a = Netns::new("nl-kinds-a");
    let b = Netns::new("nl-kinds-b");
    let (ha, mut nl) = open(&a);
    let (hb, _nlb) = open(&b);
    let m0 = veth_here(&mut nl, &ha, "m0", "m0-peer");

    let dummy = nl.create_dummy(
        "d0",
        &LinkOpts {
            mtu: Some(9000),
            mac: Some(MAC_A.to_vec()),
            txqlen: None,
        },
    );
    if kernel_has(&["pr0", "type", "dummy"]) {
        dummy.unwrap();
        let d0 = link(&a, "d0");
        assert_eq!(d0["linkinfo"]["info_kind"], "dummy");
        assert_eq!(d0["mtu"], 9000);
        assert_eq!(d0["address"], mac(&MAC_A));
        assert_eq!(errno(nl.create_dummy("d0", &no_opts())), libc::EEXIST);
    } else {
        assert_eq!(errno(dummy), libc::EOPNOTSUPP);
        assert!(!has_link(&a, "d0"));
    }

    let filtering = nl.create_bridge("br0", &no_opts(), true);
    if kernel_has(&["pr0", "type", "bridge", "vlan_filtering", "1"]) {
        filtering.unwrap();
        assert_eq!(
            link(&a, "br0")["linkinfo"]["info_data"]["vlan_filtering"],
            1
        );
    } else {
        assert_eq!(errno(filtering), libc::EOPNOTSUPP);
        assert!(!has_link(&a, "br0"));
    }

    // IPVLAN_MODE_L3 = 1, into the other namespace.
    let ipvlan = nl.create_sub(m0, SubKind::Ipvlan(1), "ipv0", &no_opts(), Some(hb.fd()));
    if kernel_has(&["pr0", "link", "pp0", "type", "ipvlan", "mode", "l3"]) {
        ipvlan.unwrap();
        let ipv0 = link(&b, "ipv0");
        assert_eq!(ipv0["linkinfo"]["info_kind"], "ipvlan");
        assert_eq!(ipv0["linkinfo"]["info_data"]["mode"], "l3");
        assert!(!has_link(&a, "ipv0"));
    } else {
        assert_eq!(errno(ipvlan), libc::EOPNOTSUPP);
        assert!(!has_link(&b, "ipv0"));
    }

    // 802.1Q vlan 100 here (a name with a dot), vlan 200 over there.
    let vlan = nl.create_sub(m0, SubKind::Vlan(100), "m0.100", &no_opts(), None);
    if kernel_has(&["pr0", "link", "pp0", "type", "vlan", "id", "5"]) {
        vlan.unwrap();
        let v = link(&a, "m0.100");
        assert_eq!(v["linkinfo"]["info_kind"], "vlan");
        assert_eq!(v["linkinfo"]["info_data"]["id"], 100);
        assert_eq!(v["linkinfo"]["info_data"]["protocol"], "802.1Q");
        nl.create_sub(m0, SubKind::Vlan(200), "eth0", &no_opts(), Some(hb.fd()))
            .unwrap();
        assert_eq!(link(&b, "eth0")["linkinfo"]["info_data"]["id"], 200);
        assert_eq!(
            errno(nl.create_sub(m0, SubKind::Vlan(100), "m0.x", &no_opts(), None)),
            libc::EEXIST,
            "vlan 100 already exists on m0"
        );
        assert_eq!(
            errno(nl.create_sub(m0, SubKind::Vlan(4095), "m0.y", &no_opts(), None)),
            libc::ERANGE
        );
    } else {
        assert_eq!(errno(vlan), libc::EOPNOTSUPP);
        assert!(!has_link(&a, "m0.100"));
    }
}

#[test]
fn macvlan_on_a_master() {
    let a = Netns::new("nl-sub-a");
    let b = Netns::new("nl-sub-b");
    let (ha, mut nl) = open(&a);
    let (hb, mut nlb) = open(&b);
    let m0 = veth_here(&mut nl, &ha, "m0", "m0-peer");

    // MACVLAN_MODE_BRIDGE = 4, into the other namespace.
    nl.create_sub(
        m0,
        SubKind::Macvlan(4, None),
        "mv0",
        &LinkOpts {
            mtu: Some(1400),
            mac: Some(MAC_A.to_vec()),
            txqlen: None,
        },
        Some(hb.fd()),
    )
    .unwrap();
    assert!(!has_link(&a, "mv0"));
    let mv0 = link(&b, "mv0");
    assert_eq!(mv0["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(mv0["linkinfo"]["info_data"]["mode"], "bridge");
    assert_eq!(mv0["mtu"], 1400);
    assert_eq!(mv0["address"], mac(&MAC_A));
    assert!(nlb.link_by_name("mv0").is_ok());

    // MACVLAN_MODE_PRIVATE = 1, here; MACVLAN_MODE_VEPA = 2.
    nl.create_sub(m0, SubKind::Macvlan(1, None), "mv1", &no_opts(), None)
        .unwrap();
    let mv1 = link(&a, "mv1");
    assert_eq!(mv1["linkinfo"]["info_data"]["mode"], "private");
    assert_eq!(mv1["link"], "m0");
    nl.create_sub(m0, SubKind::Macvlan(2, None), "mv2", &no_opts(), None)
        .unwrap();
    assert_eq!(link(&a, "mv2")["linkinfo"]["info_data"]["mode"], "vepa");

    // Failures.
    assert_eq!(
        errno(nl.create_sub(
            m0,
            SubKind::Macvlan(4, None),
            "mv0",
            &no_opts(),
            Some(hb.fd())
        )),
        libc::EEXIST,
        "the name is taken in the target"
    );
    assert_eq!(
        errno(nl.create_sub(m0, SubKind::Macvlan(4, None), "mv1", &no_opts(), None)),
        libc::EEXIST
    );
    assert_eq!(
        errno(nl.create_sub(99_999, SubKind::Macvlan(4, None), "mv9", &no_opts(), None)),
        libc::ENODEV
    );
    assert_eq!(
        errno(nl.create_sub(0, SubKind::Macvlan(4, None), "mv9", &no_opts(), None)),
        libc::ENODEV
    );
    assert_eq!(
        errno(nl.create_sub(m0, SubKind::Macvlan(3, None), "mv9", &no_opts(), None)),
        libc::EINVAL,
        "not a macvlan mode"
    );
    assert_eq!(
        errno(nl.create_sub(m0, SubKind::Macvlan(4, None), "mv%d", &no_opts(), None)),
        libc::EINVAL
    );
    assert!(!has_link(&a, "mv9") && !has_link(&a, "mv0"));
}

#[test]
fn set_netns_moves_and_renames() {
    let a = Netns::new("nl-mv-a");
    let b = Netns::new("nl-mv-b");
    let (ha, mut nla) = open(&a);
    let (hb, mut nlb) = open(&b);

    let x0 = veth_here(&mut nla, &ha, "x0", "x0-peer");
    let x1 = veth_here(&mut nla, &ha, "x1", "x1-peer");

    nla.set_netns(x0, hb.fd(), Some("eth7"), None).unwrap();
    assert!(!has_link(&a, "x0"));
    assert!(!has_link(&b, "x0"));
    assert_eq!(link(&b, "eth7")["linkinfo"]["info_kind"], "veth");
    assert!(has_link(&a, "x0-peer"), "the peer stays");

    nla.set_netns(x1, hb.fd(), None, None).unwrap();
    assert!(!has_link(&a, "x1"));
    assert!(has_link(&b, "x1"));

    // Back, with a clash: the name exists there.
    veth_here(&mut nla, &ha, "eth7", "eth7-peer");
    let eth7 = index(&mut nlb, "eth7");
    assert_eq!(
        errno(nlb.set_netns(eth7, ha.fd(), None, None)),
        libc::EEXIST,
        "name taken in the target"
    );
    assert!(has_link(&b, "eth7"), "a failed move leaves it in place");
    nlb.set_netns(eth7, ha.fd(), Some("eth8"), None).unwrap();
    assert!(has_link(&a, "eth8") && !has_link(&b, "eth7"));

    assert_eq!(
        errno(nla.set_netns(0, hb.fd(), Some("lo2"), None)),
        libc::ENODEV
    );
    assert_eq!(
        errno(nla.set_netns(99_999, hb.fd(), None, None)),
        libc::ENODEV
    );
    let eth8 = index(&mut nla, "eth8");
    assert_eq!(
        errno(nla.set_netns(eth8, hb.fd(), Some("a%d"), None)),
        libc::EINVAL
    );
    assert!(has_link(&a, "eth8"));

    // Some links are bound to their namespace (NETIF_F_NETNS_LOCAL).
    nla.create_bridge("br0", &no_opts(), false).unwrap();
    let br0 = index(&mut nla, "br0");
    assert_eq!(errno(nla.set_netns(br0, hb.fd(), None, None)), libc::EINVAL);
    let lo = index(&mut nla, "lo");
    assert_eq!(errno(nla.set_netns(lo, hb.fd(), None, None)), libc::EINVAL);
    assert!(has_link(&a, "br0") && has_link(&a, "lo"));
}

/// The address listing of `index`, as specs.
fn addr_specs(nl: &mut Netlink, index: u32) -> Vec<AddrSpec> {
    nl.addresses(None)
        .unwrap()
        .iter()
        .filter_map(AddrSpec::from_message)
        .filter(|s| s.index == index)
        .collect()
}

#[test]
fn addresses_add_list_delete() {
    let a = Netns::new("nl-addr");
    let (ha, mut nl) = open(&a);
    let d0 = veth_here(&mut nl, &ha, "d0", "d0-peer");
    nl.set_link_up(d0, true).unwrap();

    let v4 = AddrSpec {
        index: d0,
        addr: IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
        prefix_len: 24,
        flags: AddrFlags::default(),
        scope: SCOPE_UNIVERSE,
        broadcast: AddrSpec::default_broadcast(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 24),
        protocol: 0,
    };
    nl.add_address(&v4).unwrap();
    let v4_31 = AddrSpec {
        addr: IpAddr::V4(Ipv4Addr::new(10, 5, 0, 0)),
        prefix_len: 31,
        broadcast: None,
        protocol: 0,
        ..v4.clone()
    };
    nl.add_address(&v4_31).unwrap();
    let v4_32 = AddrSpec {
        addr: IpAddr::V4(Ipv4Addr::new(10, 6, 0, 1)),
        prefix_len: 32,
        flags: AddrFlags {
            no_dad: false,
            no_prefix_route: true,
        },
        scope: SCOPE_LINK,
        broadcast: None,
        protocol: 0,
        ..v4.clone()
    };
    nl.add_address(&v4_32).unwrap();
    let v6 = AddrSpec {
        index: d0,
        addr: IpAddr::V6("2001:db8::5".parse().unwrap()),
        prefix_len: 64,
        flags: AddrFlags {
            no_dad: true,
            no_prefix_route: false,
        },
        scope: SCOPE_UNIVERSE,
        broadcast: None,
        protocol: 0,
    };
    nl.add_address(&v6).unwrap();
    let v6_npr = AddrSpec {
        addr: IpAddr::V6("2001:db8:77::9".parse().unwrap()),
        flags: AddrFlags {
            no_dad: true,
            no_prefix_route: true,
        },
        ..v6.clone()
    };
    nl.add_address(&v6_npr).unwrap();

    let info = json(&a, &["-j", "addr", "show", "dev", "d0"])[0]["addr_info"].clone();
    let find = |local: &str| {
        info.as_array()
            .unwrap()
            .iter()
            .find(|i| i["local"] == local)
            .unwrap_or_else(|| panic!("{local} not listed: {info}"))
            .clone()
    };
    let a24 = find("10.1.2.3");
    assert_eq!(a24["prefixlen"], 24);
    assert_eq!(a24["broadcast"], "10.1.2.255");
    assert_eq!(a24["scope"], "global");
    assert!(
        find("10.5.0.0").get("broadcast").is_none(),
        "/31: no broadcast"
    );
    let a32 = find("10.6.0.1");
    assert!(a32.get("broadcast").is_none(), "/32: no broadcast");
    assert_eq!(a32["scope"], "link");
    assert_eq!(a32["noprefixroute"], true);
    let a6 = find("2001:db8::5");
    assert_eq!(a6["prefixlen"], 64);
    assert_eq!(a6["nodad"], true);
    assert!(a6.get("tentative").is_none(), "nodad: never tentative");
    let a6n = find("2001:db8:77::9");
    assert_eq!(a6n["noprefixroute"], true);
    // NOPREFIXROUTE: no route for its prefix.
    let r6 = a.ip(&["-6", "route", "show", "table", "all"]);
    assert!(r6.contains("2001:db8::/64"), "{r6}");
    assert!(!r6.contains("2001:db8:77::/64"), "{r6}");

    // The listing round-trips to exactly what was added.
    let specs = addr_specs(&mut nl, d0);
    for s in [&v4, &v4_31, &v4_32, &v6, &v6_npr] {
        assert!(specs.contains(s), "{s:?} not in {specs:?}");
    }
    // IPv4: IFA_LOCAL and IFA_ADDRESS are both the address.
    let msgs = nl.addresses(Some(AddressFamily::Inet)).unwrap();
    assert!(msgs
        .iter()
        .all(|m| address_of(m).is_some_and(|a| a.is_ipv4())));

    // Errors.
    assert_eq!(errno(nl.add_address(&v4)), libc::EEXIST);
    assert_eq!(errno(nl.add_address(&v6)), libc::EEXIST);
    assert_eq!(
        errno(nl.add_address(&AddrSpec {
            prefix_len: 33,
            ..v4.clone()
        })),
        libc::EINVAL
    );
    assert_eq!(
        errno(nl.add_address(&AddrSpec {
            prefix_len: 129,
            ..v6.clone()
        })),
        libc::EINVAL
    );
    assert_eq!(
        errno(nl.add_address(&AddrSpec {
            index: 99_999,
            addr: IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)),
            ..v4.clone()
        })),
        libc::ENODEV
    );
    assert_eq!(
        errno(nl.delete_address(d0, v4.addr, 16)),
        libc::EADDRNOTAVAIL,
        "wrong prefix length"
    );
    assert_eq!(
        errno(nl.delete_address(d0, "10.1.2.4".parse().unwrap(), 24)),
        libc::EADDRNOTAVAIL
    );
    assert_eq!(
        errno(nl.delete_address(d0, v6.addr, 48)),
        libc::EADDRNOTAVAIL
    );

    // Delete.
    nl.delete_address(d0, v4.addr, 24).unwrap();
    nl.delete_address(d0, v6.addr, 64).unwrap();
    let specs = addr_specs(&mut nl, d0);
    assert!(!specs.contains(&v4) && !specs.contains(&v6), "{specs:?}");
    assert!(specs.contains(&v4_32) && specs.contains(&v6_npr));
    assert_eq!(
        errno(nl.delete_address(d0, v4.addr, 24)),
        libc::EADDRNOTAVAIL
    );
    assert_eq!(
        errno(nl.delete_address(d0, v6.addr, 64)),
        libc::EADDRNOTAVAIL
    );
    let shown = a.ip(&["addr", "show", "dev", "d0"]);
    assert!(!shown.contains("10.1.2.3") && !shown.contains("2001:db8::5/"));
}

/// The unicast routes of the namespace, as specs.
fn route_specs(nl: &mut Netlink, family: Option<AddressFamily>) -> Vec<RouteSpec> {
    nl.routes(family)
        .unwrap()
        .iter()
        .filter_map(RouteSpec::from_message)
        .collect()
}

#[test]
fn routes_add_replace_list_delete() {
    let a = Netns::new("nl-route");
    let (ha, mut nl) = open(&a);
    let d0 = veth_here(&mut nl, &ha, "d0", "d0-peer");
    nl.set_link_up(d0, true).unwrap();
    let peer = index(&mut nl, "d0-peer");
    nl.set_link_up(peer, true).unwrap();
    let local4 = IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1));
    nl.add_address(&AddrSpec {
        index: d0,
        addr: local4,
        prefix_len: 24,
        flags: AddrFlags::default(),
        scope: SCOPE_UNIVERSE,
        broadcast: None,
        protocol: 0,
    })
    .unwrap();
    nl.add_address(&AddrSpec {
        index: d0,
        addr: IpAddr::V6("2001:db8::1".parse().unwrap()),
        prefix_len: 64,
        flags: AddrFlags {
            no_dad: true,
            no_prefix_route: false,
        },
        scope: SCOPE_UNIVERSE,
        broadcast: None,
        protocol: 0,
    })
    .unwrap();

    let base = RouteSpec {
        dst: IpAddr::V4(Ipv4Addr::new(192, 168, 50, 0)),
        dst_len: 24,
        gateway: Some(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 254))),
        oif: Some(d0),
        table: 254,
        metric: Some(100),
        scope: SCOPE_UNIVERSE,
        source: None,
        mtu: None,
        onlink: false,
        protocol: PROTO,
    };
    let in_table = RouteSpec {
        dst: IpAddr::V4(Ipv4Addr::new(192, 168, 60, 0)),
        table: 1000,
        metric: Some(7),
        source: Some(local4),
        mtu: Some(1300),
        ..base.clone()
    };
    let default_small_table = RouteSpec {
        dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        dst_len: 0,
        table: 100,
        metric: None,
        ..base.clone()
    };
    let onlink = RouteSpec {
        dst: IpAddr::V4(Ipv4Addr::new(172, 16, 0, 0)),
        dst_len: 16,
        gateway: Some(IpAddr::V4(Ipv4Addr::new(10, 200, 0, 1))),
        onlink: true,
        metric: None,
        ..base.clone()
    };
    let scope_link = RouteSpec {
        dst: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 0)),
        dst_len: 16,
        gateway: None,
        scope: SCOPE_LINK,
        metric: Some(5),
        ..base.clone()
    };
    let v6 = RouteSpec {
        dst: IpAddr::V6("2001:db8:1::".parse().unwrap()),
        dst_len: 48,
        gateway: Some(IpAddr::V6("2001:db8::fe".parse().unwrap())),
        oif: Some(d0),
        table: 254,
        metric: Some(512),
        scope: SCOPE_UNIVERSE,
        source: None,
        mtu: Some(1400),
        onlink: false,
        protocol: PROTO,
    };
    let v6_table = RouteSpec {
        dst: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        dst_len: 0,
        table: 4000,
        onlink: true,
        gateway: Some(IpAddr::V6("fe80::1".parse().unwrap())),
        mtu: None,
        ..v6.clone()
    };
    let all = [
        &base,
        &in_table,
        &default_small_table,
        &onlink,
        &scope_link,
        &v6,
        &v6_table,
    ];
    for r in all {
        nl.add_route(r, RouteAdd::Exclusive)
            .unwrap_or_else(|e| panic!("add {r:?}: {e}"));
    }

    // The listing of every table gives back exactly what was added,
    // protocol included.
    let specs = route_specs(&mut nl, None);
    for r in all {
        assert!(specs.contains(r), "{r:?} not in {specs:#?}");
    }
    // The family filter.
    let v4_only = route_specs(&mut nl, Some(AddressFamily::Inet));
    assert!(v4_only.iter().all(|s| s.dst.is_ipv4()));
    assert!(v4_only.contains(&in_table) && !v4_only.contains(&v6));
    let v6_only = route_specs(&mut nl, Some(AddressFamily::Inet6));
    assert!(v6_only.iter().all(|s| s.dst.is_ipv6()));
    assert!(v6_only.contains(&v6_table));
    // Local and broadcast routes (table local) are listed but are not
    // unicast routes.
    let raw = nl.routes(Some(AddressFamily::Inet)).unwrap();
    assert!(
        raw.len() > v4_only.len(),
        "local/broadcast routes are listed"
    );
    assert!(!v4_only
        .iter()
        .any(|s| s.dst == local4 && s.dst_len == 32 && s.table == 255));

    // What iproute2 sees.
    let t1000 = json(&a, &["-j", "route", "show", "table", "1000"]);
    let r = &t1000[0];
    assert_eq!(r["dst"], "192.168.60.0/24");
    assert_eq!(r["gateway"], "10.9.0.254");
    assert_eq!(r["prefsrc"], "10.9.0.1");
    assert_eq!(r["metric"], 7);
    assert_eq!(r["protocol"], PROTO.to_string());
    assert_eq!(r["metrics"][0]["mtu"], 1300);
    let t100 = json(&a, &["-j", "route", "show", "table", "100"]);
    assert_eq!(t100[0]["dst"], "default");
    let main = json(&a, &["-j", "route", "show", "172.16.0.0/16"]);
    assert_eq!(main[0]["flags"][0], "onlink");
    let main = json(&a, &["-j", "route", "show", "10.77.0.0/16"]);
    assert_eq!(main[0]["scope"], "link");
    let r6 = json(&a, &["-j", "-6", "route", "show", "2001:db8:1::/48"]);
    assert_eq!(r6[0]["gateway"], "2001:db8::fe");
    assert_eq!(r6[0]["metric"], 512);
    assert_eq!(r6[0]["metrics"][0]["mtu"], 1400);

    // Blackhole and multipath routes are listed, but are no unicast
    // routes in the model.
    a.ip(&["route", "add", "blackhole", "10.123.0.0/16"]);
    a.ip(&[
        "route",
        "add",
        "10.124.0.0/16",
        "nexthop",
        "via",
        "10.9.0.254",
        "dev",
        "d0",
        "nexthop",
        "via",
        "10.9.0.253",
        "dev",
        "d0",
    ]);
    for (dst, what) in [("10.123.0.0", "blackhole"), ("10.124.0.0", "multipath")] {
        let dst: Ipv4Addr = dst.parse().unwrap();
        let msgs: Vec<_> = nl
            .routes(Some(AddressFamily::Inet))
            .unwrap()
            .into_iter()
            .filter(|m| {
                m.attributes.iter().any(|at| {
                    matches!(at, RouteAttribute::Destination(RouteAddress::Inet(d)) if *d == dst)
                })
            })
            .collect();
        assert_eq!(msgs.len(), 1, "{what} route listed once");
        assert_eq!(RouteSpec::from_message(&msgs[0]), None, "{what}");
    }

    // No silent reuse; replace does.
    assert_eq!(
        errno(nl.add_route(&base, RouteAdd::Exclusive)),
        libc::EEXIST
    );
    assert_eq!(errno(nl.add_route(&v6, RouteAdd::Exclusive)), libc::EEXIST);
    let replaced = RouteSpec {
        gateway: Some(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 253))),
        mtu: Some(1280),
        ..base.clone()
    };
    nl.add_route(&replaced, RouteAdd::Replace).unwrap();
    let specs = route_specs(&mut nl, None);
    assert!(specs.contains(&replaced) && !specs.contains(&base));
    assert_eq!(
        specs
            .iter()
            .filter(|s| s.dst == base.dst && s.dst_len == 24)
            .count(),
        1,
        "replaced, not added"
    );
    let v6_replaced = RouteSpec {
        mtu: Some(1300),
        ..v6.clone()
    };
    nl.add_route(&v6_replaced, RouteAdd::Replace).unwrap();
    let specs = route_specs(&mut nl, Some(AddressFamily::Inet6));
    assert!(specs.contains(&v6_replaced) && !specs.contains(&v6));
    // Replace of a route that does not exist creates it.
    let fresh = RouteSpec {
        dst: IpAddr::V4(Ipv4Addr::new(192, 168, 70, 0)),
        ..base.clone()
    };
    nl.add_route(&fresh, RouteAdd::Replace).unwrap();
    assert!(route_specs(&mut nl, None).contains(&fresh));

    // Errors.
    let unreachable_gw = RouteSpec {
        dst: IpAddr::V4(Ipv4Addr::new(192, 168, 80, 0)),
        gateway: Some(IpAddr::V4(Ipv4Addr::new(10, 200, 0, 1))),
        ..base.clone()
    };
    assert_eq!(
        errno(nl.add_route(&unreachable_gw, RouteAdd::Exclusive)),
        libc::ENETUNREACH,
        "gateway not on link without onlink"
    );
    let mixed = RouteSpec {
        gateway: Some(IpAddr::V6("2001:db8::fe".parse().unwrap())),
        ..fresh.clone()
    };
    assert_eq!(
        errno(nl.add_route(&mixed, RouteAdd::Exclusive)),
        libc::EINVAL
    );
    assert_eq!(
        errno(nl.add_route(
            &RouteSpec {
                dst_len: 33,
                ..fresh.clone()
            },
            RouteAdd::Exclusive
        )),
        libc::EINVAL
    );
    assert_eq!(
        errno(nl.add_route(
            &RouteSpec {
                dst: IpAddr::V4(Ipv4Addr::new(192, 168, 90, 1)),
                ..fresh.clone()
            },
            RouteAdd::Exclusive
        )),
        libc::EINVAL,
        "host bits set"
    );
    assert_eq!(
        errno(nl.add_route(
            &RouteSpec {
                source: Some(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 99))),
                dst: IpAddr::V4(Ipv4Addr::new(192, 168, 91, 0)),
                ..fresh.clone()
            },
            RouteAdd::Exclusive
        )),
        libc::EINVAL,
        "prefsrc not a local address"
    );

    // Delete: each one, matched by dst/table/metric/gateway/oif.
    for r in [
        &replaced,
        &in_table,
        &default_small_table,
        &onlink,
        &scope_link,
        &fresh,
    ] {
        nl.delete_route(r)
            .unwrap_or_else(|e| panic!("delete {r:?}: {e}"));
    }
    nl.delete_route(&v6_replaced).unwrap();
    nl.delete_route(&v6_table).unwrap();
    let specs = route_specs(&mut nl, None);
    assert!(!specs.iter().any(|s| s.protocol == PROTO), "{specs:#?}");
    assert_eq!(errno(nl.delete_route(&in_table)), libc::ESRCH);
    assert_eq!(errno(nl.delete_route(&v6)), libc::ESRCH);
    // A delete that names a different metric or gateway matches nothing.
    nl.add_route(&base, RouteAdd::Exclusive).unwrap();
    assert_eq!(
        errno(nl.delete_route(&RouteSpec {
            metric: Some(101),
            ..base.clone()
        })),
        libc::ESRCH
    );
    assert_eq!(
        errno(nl.delete_route(&RouteSpec {
            gateway: Some(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 7))),
            ..base.clone()
        })),
        libc::ESRCH
    );
    assert!(route_specs(&mut nl, None).contains(&base));
    // Any scope and any protocol: a spec listing another protocol still
    // deletes it.
    nl.delete_route(&RouteSpec {
        protocol: 0,
        scope: SCOPE_LINK,
        ..base.clone()
    })
    .unwrap();
    assert!(!route_specs(&mut nl, None).contains(&base));
}

/// What `cat` inside the namespace reads (an independent check; `ip netns
/// exec` also mounts the namespace's own /sys).
fn cat_in(ns: &Netns, path: &str) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "cat", path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

#[test]
fn sysctl_read_write_inside_the_namespace() {
    let a = Netns::new("nl-sysctl");
    let (ha, mut nl) = open(&a);
    let host_forward = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();

    let before = sysctl::read(&ha, "net.ipv4.ip_forward").unwrap();
    assert!(before == "0" || before == "1", "{before:?}");
    let flipped = if before == "0" { "1" } else { "0" };
    sysctl::write(&ha, "net.ipv4.ip_forward", flipped).unwrap();
    assert_eq!(sysctl::read(&ha, "net.ipv4.ip_forward").unwrap(), flipped);
    assert_eq!(cat_in(&a, "/proc/sys/net/ipv4/ip_forward"), flipped);
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
        host_forward,
        "the host's own value is untouched"
    );

    // Per-link keys, including a link name with a dot (as a vlan's).
    nl.create_bridge("d0", &no_opts(), false).unwrap();
    nl.create_bridge("d0.100", &no_opts(), false).unwrap();
    sysctl::write(&ha, "net.ipv4.conf.d0/100.rp_filter", "2").unwrap();
    assert_eq!(
        sysctl::read(&ha, "net.ipv4.conf.d0/100.rp_filter").unwrap(),
        "2"
    );
    assert_eq!(cat_in(&a, "/proc/sys/net/ipv4/conf/d0.100/rp_filter"), "2");
    sysctl::write(&ha, "net.ipv6.conf.d0.disable_ipv6", "1").unwrap();
    assert_eq!(
        sysctl::read(&ha, "net.ipv6.conf.d0.disable_ipv6").unwrap(),
        "1"
    );
    assert_eq!(cat_in(&a, "/proc/sys/net/ipv6/conf/d0/disable_ipv6"), "1");
    // IPv4 settings wasmcni reads over netlink, and on a down link writes
    // over netlink when the value is 0 or 1 (others through /proc/sys):
    // the same values, the same errors.
    assert_eq!(
        sysctl::read(&ha, "net.ipv4.ip_forward").unwrap(),
        cat_in(&a, "/proc/sys/net/ipv4/ip_forward")
    );
    let mut prev = cat_in(&a, "/proc/sys/net/ipv4/conf/d0/arp_notify");
    for v in ["1", "0", "2", "-1"] {
        sysctl::write(&ha, "net.ipv4.conf.d0/100.arp_notify", v).unwrap();
        assert_eq!(cat_in(&a, "/proc/sys/net/ipv4/conf/d0.100/arp_notify"), v);
        assert_eq!(
            sysctl::read(&ha, "net.ipv4.conf.d0/100.arp_notify").unwrap(),
            v
        );
        assert_eq!(
            sysctl::exchange(&ha, "net.ipv4.conf.d0.arp_notify", v).unwrap(),
            prev
        );
        assert_eq!(cat_in(&a, "/proc/sys/net/ipv4/conf/d0/arp_notify"), v);
        prev = v.to_owned();
    }
    // Not the link's own name (an alternative one): not a /proc/sys
    // directory, so no setting.
    a.ip(&["link", "property", "add", "dev", "d0", "altname", "d0alt"]);
    for key in [
        "net.ipv4.conf.d0alt.arp_notify",
        "net.ipv4.conf.nosuch.arp_notify",
    ] {
        assert_eq!(
            sysctl::read(&ha, key).unwrap_err().kind(),
            io::ErrorKind::NotFound,
            "{key}"
        );
        assert_eq!(
            sysctl::write(&ha, key, "1").unwrap_err().kind(),
            io::ErrorKind::NotFound,
            "{key}"
        );
    }
    // What the kernel would parse differently goes to /proc/sys.
    assert_eq!(
        os_errno(sysctl::write(&ha, "net.ipv4.conf.d0.arp_notify", "x")),
        libc::EINVAL
    );
    assert_eq!(
        os_errno(sysctl::write(&ha, "net.ipv4.conf.d0.arp_notify", "+1")),
        libc::EINVAL
    );
    sysctl::write(&ha, "net.ipv4.conf.d0.arp_notify", "007").unwrap();
    assert_eq!(cat_in(&a, "/proc/sys/net/ipv4/conf/d0/arp_notify"), "7");
    // A multi-value key keeps its inner whitespace.
    let range = sysctl::read(&ha, "net.ipv4.ip_local_port_range").unwrap();
    assert!(range.contains('\t') && !range.ends_with('\n'), "{range:?}");

    // A link of the host namespace is not visible here.
    let e = sysctl::read(&ha, "net.ipv4.conf.no-such-link.forwarding").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    // The kernel's own refusal.
    assert_eq!(
        os_errno(sysctl::write(&ha, "net.ipv4.conf.d0.rp_filter", "x")),
        libc::EINVAL
    );

    // Keys that are not net.* keys or could leave /proc/sys/net.
    for bad in [
        "kernel.hostname",
        "net",
        "net.",
        ".net.ipv4.ip_forward",
        "net..ipv4",
        "net.ipv4.conf./.forwarding",
        "net.ipv4.conf.//.forwarding",
        "net.ipv4.conf.//.//.//.kernel.hostname",
        "net.ipv4.ip forward",
        "net.ipv4.ip_forward\n",
        "net.ipv4.*",
        "netx.ipv4.ip_forward",
        "NET.ipv4.ip_forward",
    ] {
        let e = sysctl::read(&ha, bad).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "read {bad:?}");
        let e = sysctl::write(&ha, bad, "1").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "write {bad:?}");
    }
    let e = sysctl::write(&ha, "net.ipv4.ip_forward", "1\n0").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(sysctl::read(&ha, "net.ipv4.ip_forward").unwrap(), flipped);
}

/// wasmcni writes an IPv4 setting of a link (`arp_notify`) over netlink
/// only while the link is down: on a link that is up, netlink's write also
/// announces a change of the link (`RTM_NEWLINK`; `NETDEV_CHANGE` inside the
/// kernel), which a write below /proc/sys does not. `ip monitor link` shows
/// which way each write went; links created as markers order its output.
/// The netlink calls themselves are asked directly too, so the sysctls'
/// results above cannot come from the /proc/sys fallback alone.
#[test]
fn ipv4_settings_go_over_netlink_only_on_links_that_are_down() {
    use std::io::BufRead;
    use std::sync::{Arc, Mutex};
    let a = Netns::new("nl-inetconf");
    let (ha, mut nl) = open(&a);
    nl.create_bridge("down0", &no_opts(), false).unwrap();
    nl.create_bridge("up0", &no_opts(), false).unwrap();
    a.ip(&["link", "set", "up0", "up"]);

    // The kernel's answers, asked directly.
    let (forwarding, was, up0) = ha
        .run_inside(|| {
            let mut here = Netlink::here().map_err(io::Error::other)?;
            let forwarding = here.ipv4_forwarding().map_err(io::Error::other)?;
            let down0 = here.inet_conf("down0").map_err(io::Error::other)?;
            assert!(!down0.up);
            here.set_inet_conf(down0.index, 22, 1)
                .map_err(io::Error::other)?;
            let up0 = here.inet_conf("up0").map_err(io::Error::other)?;
            assert!(up0.up);
            Ok((forwarding, down0.conf.map(|c| c.arp_notify), up0.index))
        })
        .unwrap();
    assert_eq!(
        forwarding.to_string(),
        cat_in(&a, "/proc/sys/net/ipv4/ip_forward")
    );
    assert_eq!(was, Some(0));
    assert_eq!(cat_in(&a, "/proc/sys/net/ipv4/conf/down0/arp_notify"), "1");

    let mut monitor = std::process::Command::new("ip")
        .args(["-n", &a.name, "-o", "monitor", "link"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("ip monitor");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = monitor.stdout.take().unwrap();
    let seen = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            seen.lock().unwrap().push(line);
        }
    });
    // Creates marker links until the monitor shows one: its position.
    let mut n = 0;
    let mut marker = |nl: &mut Netlink| -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let name = format!("mark{n}");
            n += 1;
            nl.create_bridge(&name, &no_opts(), false).unwrap();
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                if let Some(i) = lines
                    .lock()
                    .unwrap()
                    .iter()
                    .position(|l| l.contains(&format!(": {name}:")))
                {
                    return i;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(Instant::now() < deadline, "ip monitor showed no marker");
        }
    };
    let mentions = |from: usize, to: usize, link: &str| {
        lines.lock().unwrap()[from..to]
            .iter()
            .filter(|l| l.contains(&format!(": {link}:")))
            .count()
    };
    let m0 = marker(&mut nl);
    sysctl::write(&ha, "net.ipv4.conf.up0.arp_notify", "1").unwrap();
    assert_eq!(
        sysctl::exchange(&ha, "net.ipv4.conf.up0.arp_notify", "0").unwrap(),
        "1"
    );
    sysctl::write(&ha, "net.ipv4.conf.down0.arp_notify", "0").unwrap();
    let m1 = marker(&mut nl);
    // The control: netlink's own write on the up link is announced.
    ha.run_inside(|| {
        let mut here = Netlink::here().map_err(io::Error::other)?;
        here.set_inet_conf(up0, 22, 1).map_err(io::Error::other)
    })
    .unwrap();
    let m2 = marker(&mut nl);
    let _ = monitor.kill();
    let _ = monitor.wait();
    assert_eq!(
        mentions(m0, m1, "up0"),
        0,
        "a write of an up link's setting was announced (it went over netlink)"
    );
    assert!(
        mentions(m1, m2, "up0") > 0,
        "netlink's own write on an up link was not announced: the check above shows nothing"
    );
    assert_eq!(cat_in(&a, "/proc/sys/net/ipv4/conf/up0/arp_notify"), "1");
    assert_eq!(cat_in(&a, "/proc/sys/net/ipv4/conf/down0/arp_notify"), "0");
}

#[test]
fn tap_is_persistent() {
    let a = Netns::new("nl-tap");
    let (ha, mut nl) = open(&a);

    tuntap::create_tap(&ha, "tap0", false, Some(1000), Some(1001)).unwrap();
    tuntap::create_tap(&ha, "tap1", true, None, None).unwrap();
    let t0 = link(&a, "tap0");
    assert_eq!(t0["linkinfo"]["info_kind"], "tun");
    let d = &t0["linkinfo"]["info_data"];
    assert_eq!(d["type"], "tap");
    assert_eq!(d["pi"], false);
    assert_eq!(d["multi_queue"], false);
    assert_eq!(d["persist"], true);
    // TUNSETOWNER / TUNSETGROUP, as the tun driver reports them.
    assert_eq!(cat_in(&a, "/sys/class/net/tap0/owner"), "1000");
    assert_eq!(cat_in(&a, "/sys/class/net/tap0/group"), "1001");
    assert_eq!(cat_in(&a, "/sys/class/net/tap1/owner"), "-1");
    assert_eq!(cat_in(&a, "/sys/class/net/tap1/group"), "-1");
    let t1 = link(&a, "tap1");
    assert_eq!(t1["linkinfo"]["info_data"]["multi_queue"], true);
    assert_eq!(t1["linkinfo"]["info_data"]["persist"], true);
    assert!(nl.link_by_name("tap0").is_ok());

    // Never attach to an existing device.
    let e = tuntap::create_tap(&ha, "tap0", false, None, None).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    nl.create_bridge("br0", &no_opts(), false).unwrap();
    let e = tuntap::create_tap(&ha, "br0", false, None, None).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");

    for bad in ["", "tap%d", "a23456789012345x", "t p", "t/p", "t\0p"] {
        let e = tuntap::create_tap(&ha, bad, false, None, None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
    }
    let names: Vec<String> = json(&a, &["-j", "link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["lo", "tap0", "tap1", "br0"]);

    // Persistent: deletable like any link.
    let t0 = index(&mut nl, "tap0");
    nl.delete_link(t0).unwrap();
    assert!(!has_link(&a, "tap0"));
}

#[test]
fn gratuitous_arp_reaches_the_neighbour() {
    let a = Netns::new("nl-garp-a");
    let b = Netns::new("nl-garp-b");
    let (ha, mut nla) = open(&a);
    let (hb, mut nlb) = open(&b);
    let opts = LinkOpts {
        mtu: None,
        mac: Some(MAC_A.to_vec()),
        txqlen: None,
    };
    nla.create_veth("va", &opts, "vb", hb.fd(), Some(&MAC_B))
        .unwrap();
    let va = index(&mut nla, "va");
    let vb = index(&mut nlb, "vb");
    let addr = Ipv4Addr::new(10, 0, 0, 1);

    // Down: the kernel refuses to send.
    assert_eq!(
        os_errno(announce::gratuitous_arp(&ha, va, &MAC_A, addr)),
        libc::ENETDOWN
    );

    nla.set_link_up(va, true).unwrap();
    nlb.set_link_up(vb, true).unwrap();
    // The neighbour, on the same subnet, knows 10.0.0.1 at a stale
    // address; a gratuitous ARP moves it to ours. (With arp_accept off the
    // kernel only takes a gratuitous ARP into an existing entry, and not
    // without an address of its own on that link.)
    nlb.add_address(&AddrSpec {
        index: vb,
        addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        prefix_len: 24,
        flags: AddrFlags::default(),
        scope: SCOPE_UNIVERSE,
        broadcast: None,
        protocol: 0,
    })
    .unwrap();
    b.ip(&[
        "neigh",
        "add",
        "10.0.0.1",
        "lladdr",
        "02:00:00:00:00:99",
        "dev",
        "vb",
        "nud",
        "stale",
    ]);
    announce::gratuitous_arp(&ha, va, &MAC_A, addr).expect("gratuitous ARP");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = json(&b, &["-j", "neigh", "show", "dev", "vb"]);
        if n[0]["lladdr"] == mac(&MAC_A) {
            break;
        }
        assert!(Instant::now() < deadline, "neighbour not updated: {n}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let e = announce::gratuitous_arp(&ha, va, &MAC_A[..5], addr).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = announce::gratuitous_arp(&ha, va, &[0; 7], addr).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(
        os_errno(announce::gratuitous_arp(&ha, 99_999, &MAC_A, addr)),
        libc::ENODEV
    );
    assert_eq!(
        os_errno(announce::gratuitous_arp(&ha, 0, &MAC_A, addr)),
        libc::ENODEV
    );
    // The other side, from its own namespace.
    announce::gratuitous_arp(&hb, vb, &MAC_B, Ipv4Addr::new(10, 0, 0, 3))
        .expect("gratuitous ARP from the other namespace");
}

/// A deletion outside ADD (`delete_link_detached`, carried out by a child
/// process): the kernel's refusal comes back as the error, a deleted link
/// is gone when the call returns, and the child holds no descriptor of
/// ours (the caller's pipes reach EOF, its locks are free).
#[test]
fn a_detached_deletion_reports_refusals_and_holds_nothing() {
    use std::os::fd::AsRawFd;
    let a = Netns::new("nl-detach");
    let (ha, mut nl) = open(&a);
    // lo cannot be deleted: EOPNOTSUPP, from the child.
    assert_eq!(
        errno(Netlink::delete_link_detached(&ha, 1)),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        errno(Netlink::delete_link_detached(&ha, 999_999)),
        libc::ENODEV
    );
    // A lock held through a descriptor, and the write end of a pipe, open
    // while the deletion runs. The child closes its copies before it sends
    // the deletion, so before the call returns.
    let dir = support::private_tempdir();
    let lock = std::fs::File::create(dir.path().join("lock")).expect("lock file");
    // SAFETY: flock(2) on an open descriptor.
    assert_eq!(
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let p0 = veth_here(&mut nl, &ha, "dt0", "dt0-peer");
    Netlink::delete_link_detached(&ha, p0).expect("delete");
    assert!(!has_link(&a, "dt0") && !has_link(&a, "dt0-peer"));
    // Closed without unlocking: the lock lives as long as any copy of the
    // descriptor does. (Other tests of this binary spawn processes: a copy
    // may live in one for the instant between its fork and exec, hence a
    // few tries; the deleting child would hold them for the kernel's
    // rcu_barrier, milliseconds.)
    drop(lock);
    drop(wr);
    let again = std::fs::File::open(dir.path().join("lock")).expect("lock file");
    let free = |f: &std::fs::File| {
        (0..20).any(|_| {
            // SAFETY: flock(2) on an open descriptor.
            let ok = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
            if !ok {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            ok
        })
    };
    assert!(
        free(&again),
        "a copy of the locked descriptor outlived the call"
    );
    let hung_up = (0..20).any(|_| {
        let mut pfd = libc::pollfd {
            fd: rd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 0) };
        let ok = pfd.revents & libc::POLLHUP != 0;
        if !ok {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        ok
    });
    assert!(hung_up, "a copy of the pipe's write end outlived the call");
}

/// `bridge -n NS -j vlan show dev NAME`: the port's VLANs as the kernel
/// reports them to iproute2, as (vid, pvid, untagged), ranges expanded.
fn bridge_vlans(ns: &Netns, dev: &str) -> Vec<(u16, bool, bool)> {
    let out = std::process::Command::new("bridge")
        .args(["-n", &ns.name, "-j", "vlan", "show", "dev", dev])
        .output()
        .expect("iproute2's bridge");
    assert!(out.status.success(), "bridge vlan show dev {dev}: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bridge vlan show dev {dev}: {e}: {out:?}"));
    let mut vlans = Vec::new();
    for port in v.as_array().unwrap() {
        assert_eq!(port["ifname"], dev);
        for e in port["vlans"].as_array().unwrap() {
            let flags: Vec<&str> = e["flags"]
                .as_array()
                .map(|f| f.iter().map(|f| f.as_str().unwrap()).collect())
                .unwrap_or_default();
            let start = e["vlan"].as_u64().unwrap() as u16;
            let end = e
                .get("vlanEnd")
                .map_or(start, |x| x.as_u64().unwrap() as u16);
            for vid in start..=end {
                vlans.push((
                    vid,
                    flags.contains(&"PVID"),
                    flags.contains(&"Egress Untagged"),
                ));
            }
        }
    }
    vlans
}

/// Per-port bridge VLANs (`bridge vlan show|add|del dev PORT master`)
/// through [`Netlink`], checked against iproute2's `bridge`. This
/// machine's kernel has no bridge VLAN filtering: what it must do without
/// it (no entries, EOPNOTSUPP for an addition) is checked here, and the
/// test runs again in tests/vm/, whose kernel has it.
#[test]
fn bridge_port_vlans_are_read_added_and_deleted() {
    if support::vm::kernel_has("bridge-vlan") {
        port_vlans_with_filtering();
    } else {
        assert!(
            !support::vm::inside(),
            "the VM's kernel lacks bridge vlan filtering"
        );
        port_vlans_without_filtering();
        support::vm::rerun_this_test("bridge_port_vlans_are_read_added_and_deleted");
    }
}

fn pv(vid: u16, pvid: bool, untagged: bool) -> PortVlan {
    PortVlan {
        vid,
        pvid,
        untagged,
    }
}

fn port_vlans_with_filtering() {
    let a = Netns::new("nl-brvlan");
    let (_ha, mut nl) = open(&a);
    a.ip(&[
        "link",
        "add",
        "br0",
        "type",
        "bridge",
        "vlan_filtering",
        "1",
    ]);
    a.ip(&["link", "add", "br1", "type", "bridge"]);
    a.ip(&["link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
    a.ip(&["link", "set", "v0", "master", "br0"]);
    let (br0, br1) = (index(&mut nl, "br0"), index(&mut nl, "br1"));
    let (v0, v1) = (index(&mut nl, "v0"), index(&mut nl, "v1"));

    // The kernel's default: VID 1, PVID, egress untagged.
    assert_eq!(nl.port_vlans(v0).unwrap(), [pv(1, true, true)]);
    assert_eq!(bridge_vlans(&a, "v0"), [(1, true, true)]);

    nl.add_port_vlan(v0, &pv(100, true, true)).unwrap();
    // The PVID moved to 100; 1 stays, untagged.
    assert_eq!(
        nl.port_vlans(v0).unwrap(),
        [pv(1, false, true), pv(100, true, true)]
    );
    nl.add_port_vlan(v0, &pv(200, false, false)).unwrap();
    nl.del_port_vlan(v0, 1).unwrap();
    let want = [pv(100, true, true), pv(200, false, false)];
    assert_eq!(nl.port_vlans(v0).unwrap(), want);
    assert_eq!(
        bridge_vlans(&a, "v0"),
        [(100, true, true), (200, false, false)],
        "the kernel agrees"
    );
    // The entry is plain data (it crosses the WIT boundary and the journal).
    let json = serde_json::to_value(&want).unwrap();
    assert_eq!(
        json[0],
        serde_json::json!({"vid": 100, "pvid": true, "untagged": true})
    );
    assert_eq!(serde_json::from_value::<Vec<PortVlan>>(json).unwrap(), want);

    // Adding again changes the flags.
    nl.add_port_vlan(v0, &pv(200, false, true)).unwrap();
    assert_eq!(bridge_vlans(&a, "v0")[1], (200, false, true));
    nl.add_port_vlan(v0, &pv(200, false, false)).unwrap();
    assert_eq!(nl.port_vlans(v0).unwrap(), want);

    // A range (the kernel sends it compressed, begin and end): one entry
    // per VID.
    let st = std::process::Command::new("bridge")
        .args([
            "-n", &a.name, "vlan", "add", "dev", "v0", "vid", "300-310", "untagged", "master",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let vlans = nl.port_vlans(v0).unwrap();
    assert_eq!(vlans.len(), 2 + 11);
    assert_eq!(vlans[..2], want);
    assert!(vlans[2..]
        .iter()
        .zip(300..=310)
        .all(|(v, vid)| *v == pv(vid, false, true)));
    let ours: Vec<_> = vlans.iter().map(|v| (v.vid, v.pvid, v.untagged)).collect();
    assert_eq!(bridge_vlans(&a, "v0"), ours);
    for vid in 300..=310 {
        nl.del_port_vlan(v0, vid).unwrap();
    }
    assert_eq!(nl.port_vlans(v0).unwrap(), want);
    // The bridge ignores a VID the port does not have.
    nl.del_port_vlan(v0, 300).unwrap();
    assert_eq!(nl.port_vlans(v0).unwrap(), want);

    // Not a VLAN id: refused before anything is sent.
    for vid in [0, 4095, u16::MAX] {
        assert_eq!(
            errno(nl.add_port_vlan(v0, &pv(vid, false, false))),
            libc::EINVAL
        );
        assert_eq!(errno(nl.del_port_vlan(v0, vid)), libc::EINVAL);
    }
    assert_eq!(nl.port_vlans(v0).unwrap(), want);

    // Links that are no bridge port: the bridge itself, the free peer.
    assert_eq!(nl.port_vlans(br0).unwrap(), []);
    assert_eq!(nl.port_vlans(v1).unwrap(), []);
    assert_eq!(
        errno(nl.add_port_vlan(v1, &pv(100, false, false))),
        libc::EOPNOTSUPP
    );
    assert_eq!(errno(nl.del_port_vlan(v1, 100)), libc::EOPNOTSUPP);
    assert_eq!(errno(nl.port_vlans(99_999)), libc::ENODEV);
    assert_eq!(errno(nl.port_vlans(0)), libc::ENODEV);
    assert_eq!(
        errno(nl.add_port_vlan(0, &pv(5, false, false))),
        libc::ENODEV
    );

    // A port of a bridge that does not filter still has its entries.
    a.ip(&["link", "set", "v1", "master", "br1"]);
    assert_eq!(nl.port_vlans(v1).unwrap(), [pv(1, true, true)]);
    nl.add_port_vlan(v1, &pv(7, false, false)).unwrap();
    assert_eq!(bridge_vlans(&a, "v1"), [(1, true, true), (7, false, false)]);
    assert_eq!(nl.port_vlans(v0).unwrap(), want, "each port its own");

    assert_eq!(nl.bridge_vlan_filtering(br0).unwrap(), Some(true));
    assert_eq!(nl.bridge_vlan_filtering(br1).unwrap(), Some(false));
    assert_eq!(nl.bridge_vlan_filtering(v0).unwrap(), None);
    assert_eq!(errno(nl.bridge_vlan_filtering(99_999)), libc::ENODEV);
}

/// Without bridge VLAN filtering in the kernel: ports have no entries,
/// additions are refused, ids are still checked.
fn port_vlans_without_filtering() {
    let a = Netns::new("nl-brvlan-no");
    let (_ha, mut nl) = open(&a);
    a.ip(&["link", "add", "br0", "type", "bridge"]);
    a.ip(&["link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
    a.ip(&["link", "set", "v0", "master", "br0"]);
    let (br0, v0) = (index(&mut nl, "br0"), index(&mut nl, "v0"));
    assert_eq!(nl.port_vlans(v0).unwrap(), []);
    assert_eq!(bridge_vlans(&a, "v0"), []);
    assert_eq!(
        errno(nl.add_port_vlan(v0, &pv(100, true, true))),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        errno(nl.add_port_vlan(v0, &pv(0, false, false))),
        libc::EINVAL
    );
    assert_eq!(errno(nl.del_port_vlan(v0, 4095)), libc::EINVAL);
    assert_eq!(nl.bridge_vlan_filtering(br0).unwrap(), Some(false));
    assert_eq!(nl.bridge_vlan_filtering(v0).unwrap(), None);
}

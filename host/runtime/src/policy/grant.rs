//! What a grant is: the rights a plugin may hold in one namespace
//! ([`NsGrant`], with its firewall rules, [`FirewallGrant`]), the kinds,
//! config keys and name patterns they are stated in, and everything a
//! plugin may do in one invocation ([`Grant`]), with the defaults its
//! entry leaves out.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A kind of link a plugin may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkKind {
    /// A veth pair (both ends need the right in their namespaces).
    Veth,
    /// A bridge.
    Bridge,
    /// A dummy link.
    Dummy,
    /// A persistent tap device.
    Tap,
    /// A macvlan on a master link.
    Macvlan,
    /// An ipvlan on a master link.
    Ipvlan,
    /// An 802.1Q vlan on a master link.
    Vlan,
    /// A VRF device (an L3 master bound to a routing table).
    Vrf,
}

impl LinkKind {
    /// Every kind.
    pub const ALL: [LinkKind; 8] = [
        LinkKind::Veth,
        LinkKind::Bridge,
        LinkKind::Dummy,
        LinkKind::Tap,
        LinkKind::Macvlan,
        LinkKind::Ipvlan,
        LinkKind::Vlan,
        LinkKind::Vrf,
    ];

    /// The kind's name, as in the policy file.
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::Veth => "veth",
            LinkKind::Bridge => "bridge",
            LinkKind::Dummy => "dummy",
            LinkKind::Tap => "tap",
            LinkKind::Macvlan => "macvlan",
            LinkKind::Ipvlan => "ipvlan",
            LinkKind::Vlan => "vlan",
            LinkKind::Vrf => "vrf",
        }
    }
}

/// A key of the network config that names a device of the node, as the
/// reference `host-device` plugin reads it. A grant's `config-links` lists
/// the keys whose device the plugin may take (move, change) although
/// wasmcni did not create it: the runtime's config, which the host reads
/// itself, names the device, not the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigKey {
    /// `device`: the link of that name.
    #[serde(rename = "device")]
    Device,
    /// `hwaddr`: the first link with that hardware address.
    #[serde(rename = "hwaddr")]
    Hwaddr,
    /// `kernelpath`: the network devices of that sysfs device
    /// (`<kernelpath>/net/`, below `/sys/devices/`).
    #[serde(rename = "kernelpath")]
    Kernelpath,
    /// `pciBusID`: the network devices of that PCI device
    /// (`/sys/bus/pci/devices/<id>/net/`, or its `virtio*/net/`).
    #[serde(rename = "pciBusID")]
    PciBusId,
    /// `runtimeConfig.deviceID`: as `pciBusID`, set by the runtime (e.g.
    /// an SR-IOV device plugin's allocation).
    #[serde(rename = "runtimeConfig.deviceID")]
    DeviceId,
}

impl ConfigKey {
    /// The key, as in the config and the policy file.
    pub fn name(self) -> &'static str {
        match self {
            ConfigKey::Device => "device",
            ConfigKey::Hwaddr => "hwaddr",
            ConfigKey::Kernelpath => "kernelpath",
            ConfigKey::PciBusId => "pciBusID",
            ConfigKey::DeviceId => "runtimeConfig.deviceID",
        }
    }
}

/// A name pattern: `*` matches any run of characters, everything else
/// itself (`cni*`, `net.ipv6.conf.*.accept_ra`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pattern(pub String);

impl Pattern {
    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        glob_match(self.0.as_bytes(), name.as_bytes())
    }
}

/// `*`-only glob matching, iterative with one backtrack point (linear in
/// practice, never exponential).
fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pat.len() && pat[p] == b'*' {
            star = Some((p, i));
            p += 1;
        } else if p < pat.len() && pat[p] == s[i] {
            p += 1;
            i += 1;
        } else if let Some((sp, si)) = star {
            p = sp + 1;
            i = si + 1;
            star = Some((sp, si + 1));
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// What a plugin may do in one namespace. Every field defaults to nothing.
///
/// # Capabilities
/// - `read`: list and look up links, addresses and routes.
/// - `create`: create links of these kinds here.
/// - `modify`: change links (up/down, mtu, mac, master, hairpin, promisc,
///   name, alias) and delete them. In the host namespace only links
///   wasmcni created or links matching `links`.
/// - `move`: move links out of and into this namespace.
/// - `links`: (host) names of links the plugin may modify although wasmcni
///   did not create them, e.g. `cni*` bridges.
/// - `masters`: names of links the plugin may use as the master of a
///   macvlan / ipvlan / vlan, and never change.
/// - `bridges`: (host) names of bridges made by someone else (an admin)
///   that the plugin's network may share as wasmcni's own network bridges
///   are shared: bring up, add an address, enslave its own links; never
///   change otherwise or delete. Only links of kind bridge qualify.
/// - `addresses`, `routes`: add and delete them (host: only on links the
///   plugin may modify; routes only wasmcni's own).
/// - `announce`: send gratuitous ARP for an address of a link.
/// - `sysctls`: keys (patterns) the plugin may read and write.
/// - `traffic-control`: install and remove rate limits (`tbf` qdiscs, an
///   `ingress` qdisc redirecting to this attachment's `ifb`) on links (host:
///   only links the plugin may modify; only this attachment's `ifb`).
/// - `firewall`: (host) the nftables rules it may install for its
///   attachment, by kind ([`FirewallGrant`]); always in wasmcni's own
///   tables, tagged with the attachment, removed only by its DEL or GC.
/// - `names`: (host) the names the links it creates, moves into the host
///   namespace or renames there may take (default `veth*`, `cni*`), so a
///   plugin cannot squat a name the node or another tool needs (`eth1`,
///   `docker0`).
/// - `prefixes`: (host) the networks the addresses it adds and the
///   destinations of the routes it adds or replaces must lie in, e.g. the
///   cluster's pod range. Empty: none, so a plugin given `routes` on the
///   host cannot steer the node's traffic with a broad route (`0.0.0.0/1`).
/// - `config-links`: (host) keys of the network config (`device`,
///   `hwaddr`, `kernelpath`, `pciBusID`, `runtimeConfig.deviceID`): during
///   ADD the plugin may take (move out) the one node device the config
///   names by the first of them it sets, picked as the reference
///   `host-device` picks it. The host reads the runtime's config itself
///   (a delegate gets its caller's runtime config, not the one its caller
///   hands it), so the plugin cannot widen it; this is how one default
///   entry serves every `host-device` network without naming any node
///   device. The device comes back through the attachment record, not by
///   name.
/// - `config-vlans`: `link.set-port-vlans` may put a port into a VLAN it is
///   not in only if the network config names that VLAN, as the reference
///   `bridge` plugin reads it: `vlan`, every VLAN of `vlanTrunk` (`id`,
///   `minID`..`maxID`), and VLAN 1 when `vlanTrunk` names VLANs and `vlan`
///   is 0 (the trunk's native VLAN); a config the reference refuses names
///   none. The port may always keep (and re-flag) or leave VLANs it is in
///   (the bridge's default PVID the kernel gives a new port). Read by the
///   host from the runtime's config as `config-links` is (a delegate gets
///   its caller's runtime config), so a plugin on a bridge other networks'
///   or tenants' ports share cannot reach their VLANs. Without it, no new
///   VLAN at all.
/// - `adopt-peer` (host): the host end of the attachment's veth — the peer
///   of the link `CNI_IFNAME` in `CNI_NETNS`, when that is a veth whose
///   other end the kernel places in the host namespace (its
///   `IFLA_LINK_NETNSID` is the host's, asked of the kernel; never read from
///   `prevResult`) — is the plugin's to change as if `links` named it,
///   although a native plugin made it. For a wasmcni plugin chained after
///   the reference `bridge` or `ptp` (bandwidth shaping its host veth,
///   tuning, firewall). Only that one link: not the bridge it is enslaved
///   to, not another attachment's; it is not the attachment's to delete at
///   DEL (the plugin that made it does that), and nothing records it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct NsGrant {
    /// May list and look up links, addresses and routes.
    pub read: bool,
    /// Link kinds it may create here.
    pub create: Vec<LinkKind>,
    /// May change and delete links (host: only its own or `links`).
    pub modify: bool,
    /// May move links out of and into this namespace.
    #[serde(rename = "move")]
    pub move_links: bool,
    /// Links it may modify although wasmcni did not create them.
    pub links: Vec<Pattern>,
    /// Links it may use as a master, read-only.
    pub masters: Vec<Pattern>,
    /// (Host) bridges made by someone else that its network may share:
    /// bring up, give an address, enslave its own links; never change or
    /// delete.
    pub bridges: Vec<Pattern>,
    /// May add and delete addresses.
    pub addresses: bool,
    /// May add, replace and delete routes.
    pub routes: bool,
    /// May send gratuitous ARP.
    pub announce: bool,
    /// Sysctl keys it may read and write.
    pub sysctls: Vec<Pattern>,
    /// May install and remove rate limits (`traffic-control`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub traffic_control: bool,
    /// (Host) nftables rules it may install for its attachment
    /// (`firewall`).
    #[serde(skip_serializing_if = "FirewallGrant::is_empty")]
    pub firewall: FirewallGrant,
    /// (Host) networks its addresses and route destinations must lie in.
    pub prefixes: Vec<ipnet::IpNet>,
    /// (Host) names the links it creates, moves in or renames may take;
    /// absent: [`DEFAULT_HOST_NAMES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<Pattern>>,
    /// (Host) config keys whose device it may take as if `links` named it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_links: Vec<ConfigKey>,
    /// May put its ports into the VLANs the network config names.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub config_vlans: bool,
    /// (Host) The host end of the attachment's veth counts as the
    /// attachment's link although wasmcni did not create it: for a plugin
    /// chained after a native plugin that made the pair (bandwidth,
    /// tuning, firewall after the reference bridge or ptp).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub adopt_peer: bool,
}

/// Which firewall rules a plugin may install for its attachment (in the
/// host grant). Every field defaults to nothing.
///
/// # Capabilities
/// - `port-mappings`: DNAT of local host ports to the attachment's address
///   (only traffic to an address of the node), with hairpin and localhost
///   masquerading (and `route_localnet` on the interface towards it).
/// - `masquerade`: masquerade the attachment's address (ipMasq).
/// - `forward`: mark the attachment's forwarded traffic with
///   `forward-mark` (default `0x1000`), which wasmcni's FORWARD accept
///   lets through.
/// - `isolation`: isolate a bridge the attachment uses from other
///   isolated bridges.
/// - `mac-spoof`: drop frames from the attachment's host link whose source
///   MAC is not the container's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct FirewallGrant {
    /// May map host ports.
    pub port_mappings: bool,
    /// May masquerade.
    pub masquerade: bool,
    /// May allow forwarding.
    pub forward: bool,
    /// May isolate bridges.
    pub isolation: bool,
    /// May install MAC spoof checks.
    pub mac_spoof: bool,
    /// The mark bit(s) `forward` sets (none or 0: `0x1000`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward_mark: Option<u32>,
}

impl FirewallGrant {
    /// Whether it grants nothing.
    pub fn is_empty(&self) -> bool {
        *self == FirewallGrant::default()
    }
}

/// The names a plugin may give the links it creates, moves in or renames
/// in the host namespace when its grant has no `names`: host veth ends
/// (`veth` + random suffix, as the reference plugins name them) and `cni*`
/// bridges (`cni0`, podman's `cni-podman0`). Never a name the node's own
/// interfaces or other tools use (`eth*`, `docker0`, ...).
pub const DEFAULT_HOST_NAMES: &[&str] = &["veth*", "cni*"];

impl NsGrant {
    /// Every namespace-wide right (`read`, `create` of every kind,
    /// `modify`, `move`, `addresses`, `routes`, `announce`,
    /// `traffic-control`, `config-vlans`) and nothing else: no link,
    /// prefix, sysctl or firewall grant.
    pub fn every_right() -> NsGrant {
        NsGrant {
            read: true,
            create: LinkKind::ALL.to_vec(),
            modify: true,
            move_links: true,
            addresses: true,
            routes: true,
            announce: true,
            traffic_control: true,
            config_vlans: true,
            ..NsGrant::default()
        }
    }

    /// Whether links of `kind` may be created here.
    pub fn may_create(&self, kind: LinkKind) -> bool {
        self.create.contains(&kind)
    }

    /// Whether `name` matches one of the `links` patterns.
    pub fn names_link(&self, name: &str) -> bool {
        self.links.iter().any(|p| p.matches(name))
    }

    /// Whether `name` matches one of the `bridges` patterns.
    pub fn names_bridge(&self, name: &str) -> bool {
        self.bridges.iter().any(|p| p.matches(name))
    }

    /// Whether `name` matches one of the `masters` patterns.
    pub fn names_master(&self, name: &str) -> bool {
        self.masters.iter().any(|p| p.matches(name))
    }

    /// Whether `addr/len` lies inside one of the `prefixes`.
    pub fn covers(&self, addr: std::net::IpAddr, len: u8) -> bool {
        let Ok(net) = ipnet::IpNet::new(addr, len) else {
            return false;
        };
        self.prefixes.iter().any(|p| p.contains(&net.trunc()))
    }

    /// Whether a link this plugin makes in the host namespace may be
    /// called `name` (`names`, or [`DEFAULT_HOST_NAMES`]).
    pub fn may_name(&self, name: &str) -> bool {
        match &self.names {
            Some(patterns) => patterns.iter().any(|p| p.matches(name)),
            None => DEFAULT_HOST_NAMES
                .iter()
                .any(|p| Pattern((*p).to_owned()).matches(name)),
        }
    }

    /// The `names` patterns in effect, for messages.
    pub fn names_in_effect(&self) -> String {
        match &self.names {
            Some(patterns) => patterns
                .iter()
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            None => format!("{} (default)", DEFAULT_HOST_NAMES.join(", ")),
        }
    }

    /// Whether sysctl `key` matches one of the `sysctls` patterns.
    pub fn names_sysctl(&self, key: &str) -> bool {
        self.sysctls.iter().any(|p| p.matches(key))
    }
}

/// Everything a plugin may do in one invocation.
///
/// # Capabilities
/// This value *is* the plugin's authority: `container` applies in the
/// namespace from `CNI_NETNS`, `host` in the node's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    /// Rights in the container's namespace.
    pub container: NsGrant,
    /// Rights in the node's namespace, if any.
    pub host: Option<NsGrant>,
    /// Most capability calls one invocation may make.
    pub host_calls: u64,
    /// Most links one invocation may keep of those it created.
    pub max_links: u32,
    /// Directories under which it may keep IPAM state.
    pub ipam_roots: Vec<PathBuf>,
    /// Plugins it may run in-process as delegates.
    pub delegates: Vec<String>,
    /// Native plugins it may run as delegates.
    pub native_delegates: Vec<String>,
    /// Whether it may keep a record per attachment.
    pub attachment_state: bool,
    /// Addresses the operator vouches for as any attachment's own.
    pub static_ranges: Vec<ipnet::IpNet>,
    /// The DHCP daemon the host may talk to for it.
    pub dhcp: Option<super::dhcp::DhcpGrant>,
}

/// The default budget of capability calls per invocation.
pub const DEFAULT_HOST_CALLS: u64 = 10_000;

/// The default bound on the links one invocation keeps of those it
/// created (`max-links`). The standard plugins make at most three per ADD
/// (bridge: the bridge and a veth pair; ptp: a pair; bandwidth: an ifb;
/// macvlan, ipvlan, vlan, dummy, tap, vrf: one), a chain member counting
/// its own: 16 leaves them five times that, and makes a hostile plugin's
/// cleanup a matter of a few kernel batches.
pub const DEFAULT_MAX_LINKS: u32 = 16;

#[cfg(test)]
mod tests {
    use super::*;

    /// `LinkKind::ALL` lists every kind once (a kind added to the enum
    /// fails to compile here until it is placed).
    #[test]
    fn all_link_kinds_are_listed_once() {
        let place = |k: LinkKind| match k {
            LinkKind::Veth => 0,
            LinkKind::Bridge => 1,
            LinkKind::Dummy => 2,
            LinkKind::Tap => 3,
            LinkKind::Macvlan => 4,
            LinkKind::Ipvlan => 5,
            LinkKind::Vlan => 6,
            LinkKind::Vrf => 7,
        };
        for (i, k) in LinkKind::ALL.iter().enumerate() {
            assert_eq!(place(*k), i, "{k:?}");
        }
        assert_eq!(LinkKind::ALL.len(), 8);
    }
    use crate::policy::Policy;

    #[test]
    fn patterns() {
        let p = |s: &str| Pattern(s.to_owned());
        assert!(p("cni*").matches("cni0"));
        assert!(p("cni*").matches("cni"));
        assert!(!p("cni*").matches("eth0"));
        assert!(p("net.ipv6.conf.*.accept_ra").matches("net.ipv6.conf.veth1.accept_ra"));
        assert!(!p("net.ipv6.conf.*.accept_ra").matches("net.ipv6.conf.veth1.forwarding"));
        assert!(p("*").matches(""));
        assert!(p("a*b*c").matches("aXXbYYc"));
        assert!(!p("a*b*c").matches("aXXbYY"));
        assert!(p("eth0").matches("eth0") && !p("eth0").matches("eth01"));
        // Pathological input stays fast.
        let long = "a".repeat(10_000);
        assert!(!p("*a*a*a*a*a*b").matches(&long));
    }

    #[test]
    fn prefixes_cover_only_what_lies_inside() {
        let g: NsGrant = serde_json::from_str(r#"{"prefixes": ["10.22.0.0/16", "fd00:22::/48"]}"#)
            .expect("grant");
        let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("ip");
        assert!(g.covers(ip("10.22.3.4"), 24));
        assert!(g.covers(ip("10.22.0.1"), 32));
        assert!(!g.covers(ip("10.22.0.0"), 15));
        assert!(!g.covers(ip("0.0.0.0"), 1));
        assert!(!g.covers(ip("10.23.0.1"), 32));
        assert!(g.covers(ip("fd00:22::1"), 64));
        assert!(!g.covers(ip("fd00:23::1"), 64));
        assert!(!NsGrant::default().covers(ip("10.22.0.1"), 32));
        let e = Policy::parse(
            r#"{"plugins":{"x":{"host":{"prefixes":["10.0.0.0/33"]}}}}"#,
            "t",
        )
        .expect_err("bad prefix");
        assert!(e.to_string().contains("plugins.x.host.prefixes[0]"), "{e}");
    }
}

//! `wasmcni:plugin/firewall`: nftables rules for the attachment (see
//! `wit/firewall.wit` for the rule shapes and `docs/firewall-design.md`
//! for why they look so).
//!
//! The plugin names no table, chain or handle: the host builds every rule
//! from what the plugin asks for, tags it with the runtime's attachment
//! (`wasmcni n=<network> a=<attachment> k=<kind> r=<rule digest> ...`), and
//! removes by tag. DEL, the journal's undo and GC are one routine
//! ([`Ctx::firewall_remove_where`]): dump, pick the tagged rules, delete
//! them (and the attachment's chains, and the table when no attachment has
//! rules left) in one batch, computed against the ruleset generation it
//! read, retried if another writer got in between.

use super::ctx::Inverse;
use super::row::*;
use super::sysctl::SysctlUndo;
use crate::attachment::Attachment;
use crate::record::FwKind;
use crate::record::{FirewallRules, Owned};
use std::net::{IpAddr, Ipv4Addr};

use netlink_packet_netfilter::nftables::{MetaKey, Operator, Verdict};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use wasmtime::component::Resource;

use super::args::AuditArg;
use super::bindings::wasmcni::plugin::firewall::{
    Condition, Host, MacSpoof, NameMatch, PortMapping, PrefixMatch, Protocol, RuleKind,
    RuleOptions, Rules,
};
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::{ip_from_wit, prefix_from_wit};
use super::bindings::{CapError, NsHandle};
use super::ctx::{Command, Ctx, StoreData};
use crate::netlink::nft::{expr, BaseChain, Batch, Dumped, Family, HookPoint, NewRule, Nft};
use crate::netns::Kind;

impl FwKind {
    fn tag(self) -> &'static str {
        match self {
            FwKind::PortMap => "pm",
            FwKind::Masquerade => "mq",
            FwKind::Forward => "fw",
            FwKind::Isolation => "is",
            FwKind::MacSpoof => "ms",
        }
    }

    fn from_tag(s: &str) -> Option<FwKind> {
        [
            FwKind::PortMap,
            FwKind::Masquerade,
            FwKind::Forward,
            FwKind::Isolation,
            FwKind::MacSpoof,
        ]
        .into_iter()
        .find(|k| k.tag() == s)
    }

    /// The grant field that allows it.
    fn field(self) -> &'static str {
        match self {
            FwKind::PortMap => "port-mappings",
            FwKind::Masquerade => "masquerade",
            FwKind::Forward => "forward",
            FwKind::Isolation => "isolation",
            FwKind::MacSpoof => "mac-spoof",
        }
    }

    fn family(self) -> Family {
        match self {
            FwKind::MacSpoof => Family::Bridge,
            _ => Family::Inet,
        }
    }
}

impl From<RuleKind> for FwKind {
    fn from(k: RuleKind) -> Self {
        match k {
            RuleKind::PortMap => FwKind::PortMap,
            RuleKind::Masquerade => FwKind::Masquerade,
            RuleKind::Forward => FwKind::Forward,
            RuleKind::Isolation => FwKind::Isolation,
            RuleKind::MacSpoof => FwKind::MacSpoof,
        }
    }
}

fn kind_of(r: &Rules) -> FwKind {
    match r {
        Rules::PortMap(_) => FwKind::PortMap,
        Rules::Masquerade(_) => FwKind::Masquerade,
        Rules::Forward(_) => FwKind::Forward,
        Rules::Isolation(_) => FwKind::Isolation,
        Rules::MacSpoof(_) => FwKind::MacSpoof,
    }
}

/// The comment of the static entry rules (`fib daddr type local jump
/// hostports`), which belong to no attachment.
const ENTRY_COMMENT: &str = "wasmcni entry";
/// The default forward mark bit.
pub const DEFAULT_FORWARD_MARK: u32 = 0x1000;
/// Most port maps (container addresses) in one call.
const MAX_PORT_MAPS: usize = 8;
/// Most mappings in one port map.
pub(crate) const MAX_MAPPINGS: usize = 256;
/// Most prefixes or addresses of a masquerade or forward call.
const MAX_ADDRESSES: usize = 16;
/// Most kinds in a remove or collect-garbage call (there are five).
const MAX_KINDS: usize = 5;
/// Most conditions in one call.
const MAX_CONDITIONS: usize = 16;
/// How often a batch is recomputed when another writer changed the
/// ruleset between the dump and the commit.
const ATTEMPTS: usize = 8;

const NAT_PREROUTING: BaseChain = BaseChain {
    family: Family::Inet,
    name: "nat-prerouting",
    kind: "nat",
    hook: HookPoint::PreRouting,
    priority: -90,
};
const NAT_OUTPUT: BaseChain = BaseChain {
    family: Family::Inet,
    name: "nat-output",
    kind: "nat",
    hook: HookPoint::Output,
    priority: -90,
};
const NAT_POSTROUTING: BaseChain = BaseChain {
    family: Family::Inet,
    name: "nat-postrouting",
    kind: "nat",
    hook: HookPoint::PostRouting,
    priority: 110,
};
const FILTER_FORWARD: BaseChain = BaseChain {
    family: Family::Inet,
    name: "filter-forward",
    kind: "filter",
    hook: HookPoint::Forward,
    priority: -10,
};
const FILTER_INPUT: BaseChain = BaseChain {
    family: Family::Inet,
    name: "filter-input",
    kind: "filter",
    hook: HookPoint::Input,
    priority: -10,
};
const BRIDGE_PREROUTING: BaseChain = BaseChain {
    family: Family::Bridge,
    name: "prerouting",
    kind: "filter",
    hook: HookPoint::PreRouting,
    priority: -300,
};
const HOSTPORTS: &str = "hostports";
const ISOLATION: &str = "isolation";

/// Who a rule belongs to, as its comment says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// The network's hash (8 hex digits).
    pub net: String,
    /// The attachment's hash (16 hex digits).
    pub att: String,
    /// The kind.
    pub kind: FwKind,
    /// The rule's digest.
    pub rule: String,
    /// A `route_localnet` guard's interface, and whether `route_localnet`
    /// was 1 there before wasmcni's first port map set it (`lo=<0|1><name>`).
    pub localnet: Option<(String, bool)>,
}

impl Tag {
    /// The tag of a rule comment, if it is one of ours.
    pub fn parse(comment: &str) -> Option<Tag> {
        let mut it = comment.split(' ');
        if it.next()? != "wasmcni" {
            return None;
        }
        let mut field = |p: &str| it.next()?.strip_prefix(p).map(str::to_owned);
        let net = field("n=")?;
        let att = field("a=")?;
        let kind = FwKind::from_tag(&field("k=")?)?;
        let rule = field("r=")?;
        let localnet = it.next().and_then(|t| t.strip_prefix("lo=")).and_then(|t| {
            match t.split_at_checked(1)? {
                ("0", name) if valid_ifname(name) => Some((name.to_owned(), false)),
                ("1", name) if valid_ifname(name) => Some((name.to_owned(), true)),
                _ => None,
            }
        });
        Some(Tag {
            net,
            att,
            kind,
            rule,
            localnet,
        })
    }
}

fn hash_hex(parts: &[&str], bytes: usize) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..bytes])
}

/// The hashes an attachment's rules carry: (network, attachment).
pub fn attachment_hashes(network: &str, container_id: &str, ifname: &str) -> (String, String) {
    (
        hash_hex(&[network], 4),
        hash_hex(&[network, container_id, ifname], 8),
    )
}

/// The per-attachment port mapping chain.
fn pm_chain(att: &str) -> String {
    format!("a{att}-pm")
}

/// What one `add` installs.
#[derive(Default)]
struct Plan {
    /// Chains of the attachment (created empty, flushed when replaced).
    own_chains: Vec<(Family, String)>,
    rules: Vec<NewRule>,
    /// The node interfaces whose `route_localnet` must be 1, each with
    /// the index of its guard rule in `rules`.
    guards: Vec<(String, usize)>,
    /// UDP host ports it maps (IPv6, port): their conntrack entries go.
    udp: Vec<(bool, u16)>,
}

/// An address as bytes, and whether it is IPv6.
fn octets(ip: IpAddr) -> (Vec<u8>, bool) {
    match ip {
        IpAddr::V4(a) => (a.octets().to_vec(), false),
        IpAddr::V6(a) => (a.octets().to_vec(), true),
    }
}

fn mask_bytes(len: u8, v6: bool) -> Vec<u8> {
    let n: i32 = if v6 { 16 } else { 4 };
    (0..n)
        .map(|i| {
            let bits = (i32::from(len) - 8 * i).clamp(0, 8);
            (0xffu16 << (8 - bits)) as u8
        })
        .collect()
}

/// `meta nfproto ipv4|ipv6`.
fn nfproto(v6: bool) -> Vec<crate::netlink::nft::Expr> {
    vec![
        expr::meta(MetaKey::Nfproto),
        expr::eq(vec![if v6 { 10 } else { 2 }]),
    ]
}

/// `ip saddr|daddr [!=] prefix`.
fn addr_match(source: bool, ip: IpAddr, len: u8, negate: bool) -> Vec<crate::netlink::nft::Expr> {
    let (bytes, v6) = octets(ip);
    let (offset, n) = match (v6, source) {
        (false, true) => (12, 4),
        (false, false) => (16, 4),
        (true, true) => (8, 16),
        (true, false) => (24, 16),
    };
    let mask = mask_bytes(len, v6);
    let net: Vec<u8> = bytes.iter().zip(&mask).map(|(b, m)| b & m).collect();
    let op = if negate {
        Operator::NotEqual
    } else {
        Operator::Equal
    };
    let mut e = vec![expr::payload(expr::Base::Network, offset, n)];
    if u32::from(len) < n * 8 {
        e.push(expr::bitwise(mask, vec![0; n as usize]));
    }
    e.push(expr::cmp(op, net));
    e
}

/// `iifname|oifname [!=] NAME` (the 16-byte, NUL-padded name).
fn name_match(input: bool, name: &str, negate: bool) -> Vec<crate::netlink::nft::Expr> {
    let mut b = name.as_bytes().to_vec();
    b.resize(16, 0);
    let op = if negate {
        Operator::NotEqual
    } else {
        Operator::Equal
    };
    vec![
        expr::meta(if input {
            MetaKey::Iifname
        } else {
            MetaKey::Oifname
        }),
        expr::cmp(op, b),
    ]
}

/// `ct status & dnat [!=|==] 0`.
fn ct_dnat(dnat: bool) -> Vec<crate::netlink::nft::Expr> {
    vec![
        expr::ct(expr::CT_STATUS),
        expr::bitwise(
            expr::IPS_DST_NAT.to_ne_bytes().to_vec(),
            0u32.to_ne_bytes().to_vec(),
        ),
        expr::cmp(
            if dnat {
                Operator::NotEqual
            } else {
                Operator::Equal
            },
            0u32.to_ne_bytes().to_vec(),
        ),
    ]
}

use cni_spec::valid_ifname;

fn protocol_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

impl AuditArg for Rules {
    fn audit(&self) -> Value {
        rules_arg(self)
    }
}

/// The audit log's view of a rule request.
fn rules_arg(r: &Rules) -> Value {
    let prefix = |p: &super::bindings::wasmcni::plugin::types::IpPrefix| {
        format!("{}/{}", ip_from_wit(p.address), p.prefix_len)
    };
    // At most this many entries of a list are written out (with the count).
    const SHOWN: usize = 16;
    match r {
        Rules::PortMap(maps) => json!({
            "port-map": maps.iter().take(SHOWN).map(|pm| json!({
                "container": prefix(&pm.container),
                "mappings": pm.mappings.iter().take(32).map(|m| json!({
                    "host-port": m.host_port, "container-port": m.container_port,
                    "protocol": match m.protocol {
                        Protocol::Tcp => "tcp",
                        Protocol::Udp => "udp",
                        Protocol::Sctp => "sctp",
                    },
                    "host-ip": m.host_ip.map(|ip| ip_from_wit(ip).to_string()),
                })).collect::<Vec<_>>(),
                "mapping-count": pm.mappings.len(),
                "snat": pm.snat, "masq-all": pm.masq_all,
                "conditions": pm.conditions.len(),
            })).collect::<Vec<_>>(),
            "count": maps.len(),
        }),
        Rules::Masquerade(ps) => json!({
            "masquerade": ps.iter().take(SHOWN).map(prefix).collect::<Vec<_>>(),
            "count": ps.len(),
        }),
        Rules::Forward(ips) => json!({
            "forward": ips.iter().take(SHOWN).map(|ip| ip_from_wit(*ip).to_string())
                .collect::<Vec<_>>(),
            "count": ips.len(),
        }),
        Rules::Isolation(i) => json!({ "isolation": { "link": i } }),
        Rules::MacSpoof(m) => json!({ "mac-spoof": {
            "link": m.link,
            "mac": super::args::arg_str(&hex::encode(&m.mac)),
        } }),
    }
}

impl AuditArg for RuleOptions {
    fn audit(&self) -> Value {
        json!({ "isolate-within-bridge": self.isolate_within_bridge })
    }
}

/// `firewall.add`'s options: none.
const NO_OPTIONS: RuleOptions = RuleOptions {
    isolate_within_bridge: false,
};

impl AuditArg for Vec<RuleKind> {
    fn audit(&self) -> Value {
        kinds_arg(self)
    }
}

fn kinds_arg(kinds: &[RuleKind]) -> Value {
    Value::from(
        kinds
            .iter()
            .take(MAX_KINDS + 1)
            .map(|k| FwKind::from(*k).field())
            .collect::<Vec<_>>(),
    )
}

impl Ctx {
    /// The netfilter socket of the node namespace, opened on first use.
    fn nft(&mut self) -> Result<&mut Nft, CapError> {
        if self.nft.is_none() {
            self.open_host()?;
            let ns = self
                .ns(Kind::Host)
                .ok_or(CapError::Code(ErrorCode::NotFound))?;
            self.nft = Some(Nft::open(ns)?);
        }
        self.nft.as_mut().ok_or(CapError::Code(ErrorCode::NotFound))
    }

    /// The runtime's attachment's hashes (a delegate's are its runtime's).
    fn fw_hashes(&self) -> (String, String) {
        let (n, c, i) = &self.state_owner;
        attachment_hashes(n, c, i)
    }

    fn fw_comment(
        &self,
        kind: FwKind,
        rule_digest: &str,
        localnet: Option<(&str, bool)>,
    ) -> String {
        let (n, c, i) = &self.state_owner;
        let (nh, ah) = self.fw_hashes();
        let cid: String = c.chars().take(12).collect();
        let lo = localnet
            .map(|(name, was)| format!("lo={}{name} ", u8::from(was)))
            .unwrap_or_default();
        format!(
            "wasmcni n={nh} a={ah} k={} r={rule_digest} {lo}{n}/{cid}/{i}",
            kind.tag()
        )
    }

    /// Refuses a port mapping the runtime did not ask for: every one must
    /// be in the config's `runtimeConfig.portMappings`, read by the host.
    fn fw_requested(&self, m: &PortMapping) -> Result<(), CapError> {
        let proto = match m.protocol {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        };
        let host_ip = m.host_ip.map(ip_from_wit).filter(|a| !a.is_unspecified());
        let asked = self.attachment.port_mappings.iter().any(|r| {
            r.host_port == m.host_port
                && r.container_port == m.container_port
                && r.protocol == proto
                && r.host_ip == host_ip
        });
        if asked {
            return Ok(());
        }
        let on = host_ip.map(|a| format!(" on {a}")).unwrap_or_default();
        Err(CapError::denied(format!(
            "{proto} host port {}{on} to container port {} is not one of the runtime's \
             runtimeConfig.portMappings, so no plugin may map it (a wasmcni invariant)",
            m.host_port, m.container_port
        )))
    }

    /// Refuses unless the grant allows rules of `kind`, in the node
    /// namespace.
    fn fw_require(&self, ns: Kind, kind: FwKind) -> Result<(), CapError> {
        if ns != Kind::Host {
            return Err(CapError::denied(
                "firewall rules live in the node namespace only: pass the host handle \
                 (a wasmcni invariant)",
            ));
        }
        let g = &self.ns_grant(Kind::Host).firewall;
        let ok = match kind {
            FwKind::PortMap => g.port_mappings,
            FwKind::Masquerade => g.masquerade,
            FwKind::Forward => g.forward,
            FwKind::Isolation => g.isolation,
            FwKind::MacSpoof => g.mac_spoof,
        };
        if ok {
            Ok(())
        } else {
            Err(CapError::denied(format!(
                "{} is false",
                self.grant_field(Kind::Host, &format!("firewall.{}", kind.field()))
            )))
        }
    }

    /// Refuses an address that is not the attachment's own (S13,
    /// [`Ctx::check_own_address`]): a `prevResult` is what the plugins
    /// before this one in the chain returned, and a hostile one lists any
    /// address there (another container's, a LAN host's) or puts it on
    /// its own container interface first. Never a loopback, unspecified,
    /// multicast, link-local or IPv4-mapped address, whatever owns it: no
    /// rule names one as a container's (127.0.0.1 would map the runtime's
    /// host port onto the node's own loopback services).
    fn fw_own_address(&mut self, ip: IpAddr) -> Result<(), CapError> {
        if !unicast_container_address(ip) {
            return Err(CapError::denied(format!(
                "{ip} is a loopback, unspecified, multicast, link-local or IPv4-mapped \
                 address, never a container's in a firewall rule (a wasmcni invariant)"
            )));
        }
        self.check_own_address(ip, "a firewall rule's container address")
    }

    /// Admits `ip` as one more container address of a call: the
    /// attachment's ([`Ctx::fw_own_address`]) and not given before in it.
    fn fw_container(&mut self, seen: &mut Vec<IpAddr>, ip: IpAddr) -> Result<(), CapError> {
        if seen.contains(&ip) {
            return Err(ErrorCode::InvalidArgument.into());
        }
        seen.push(ip);
        self.fw_own_address(ip)
    }

    /// The rules `rules` stands for, checked.
    fn fw_plan(&mut self, rules: &Rules, options: &RuleOptions) -> Result<Plan, CapError> {
        if options.isolate_within_bridge && !matches!(rules, Rules::Isolation(_)) {
            return Err(ErrorCode::InvalidArgument.into());
        }
        let kind = kind_of(rules);
        let (_, att) = self.fw_hashes();
        let mut plan = Plan::default();
        let push = |plan: &mut Plan, chain: &str, exprs: Vec<crate::netlink::nft::Expr>| {
            plan.rules.push(NewRule {
                family: kind.family(),
                chain: chain.to_owned(),
                exprs,
                comment: String::new(),
            });
        };
        match rules {
            Rules::PortMap(maps) => {
                if maps.is_empty() {
                    return Err(ErrorCode::InvalidArgument.into());
                }
                if maps.len() > MAX_PORT_MAPS {
                    return Err(CapError::Limit(format!(
                        "{} port maps, more than the {MAX_PORT_MAPS} wasmcni accepts",
                        maps.len()
                    )));
                }
                let chain = pm_chain(&att);
                plan.own_chains.push((Family::Inet, chain.clone()));
                push(
                    &mut plan,
                    HOSTPORTS,
                    vec![expr::verdict(Verdict::Jump, Some(&chain))],
                );
                let mut seen: Vec<IpAddr> = Vec::new();
                for pm in maps {
                    let (cip, len) = prefix_from_wit(pm.container)?;
                    self.fw_container(&mut seen, cip)?;
                    let (cbytes, v6) = octets(cip);
                    if pm.mappings.is_empty() {
                        return Err(ErrorCode::InvalidArgument.into());
                    }
                    if pm.mappings.len() > MAX_MAPPINGS {
                        return Err(CapError::Limit(format!(
                            "{} port mappings, more than the {MAX_MAPPINGS} wasmcni accepts",
                            pm.mappings.len()
                        )));
                    }
                    if pm.conditions.len() > MAX_CONDITIONS {
                        return Err(CapError::Limit(format!(
                            "{} conditions, more than the {MAX_CONDITIONS} wasmcni accepts",
                            pm.conditions.len()
                        )));
                    }
                    let mut conds = Vec::new();
                    for c in &pm.conditions {
                        conds.extend(condition(c, v6)?);
                    }
                    for m in &pm.mappings {
                        if m.host_port == 0 || m.container_port == 0 {
                            return Err(ErrorCode::InvalidArgument.into());
                        }
                        self.fw_requested(m)?;
                        let host_ip = m.host_ip.map(ip_from_wit);
                        let mut e = nfproto(v6);
                        match host_ip {
                            // The reference skips a mapping whose host IP is of
                            // the other family.
                            Some(h) if h.is_ipv6() != v6 => continue,
                            Some(h) if !h.is_unspecified() => {
                                e.extend(addr_match(false, h, if v6 { 128 } else { 32 }, false))
                            }
                            _ => {}
                        }
                        e.extend(conds.iter().cloned());
                        e.push(expr::meta(MetaKey::L4Proto));
                        e.push(expr::eq(vec![protocol_number(m.protocol)]));
                        e.push(expr::payload(expr::Base::Transport, 2, 2));
                        e.push(expr::eq(m.host_port.to_be_bytes().to_vec()));
                        e.push(expr::immediate(false, cbytes.clone()));
                        e.push(expr::immediate(
                            true,
                            m.container_port.to_be_bytes().to_vec(),
                        ));
                        e.push(expr::dnat(v6));
                        push(&mut plan, &chain, e);
                        if matches!(m.protocol, Protocol::Udp)
                            && !plan.udp.contains(&(v6, m.host_port))
                        {
                            plan.udp.push((v6, m.host_port));
                        }
                    }
                    if pm.snat {
                        // Hairpin (from the container's subnet, or from
                        // anywhere with masqAll) and, for IPv4, the node's own
                        // 127.0.0.1: connections this chain DNATed to the
                        // container, masqueraded so the answer comes back.
                        let full = if v6 { 128 } else { 32 };
                        let mut sources: Vec<Option<(IpAddr, u8)>> = Vec::new();
                        if pm.masq_all {
                            sources.push(None);
                        } else {
                            sources.push(Some((cip, len)));
                            if !v6 {
                                sources.push(Some((IpAddr::V4(Ipv4Addr::LOCALHOST), 32)));
                            }
                        }
                        for src in sources {
                            let mut e = nfproto(v6);
                            e.extend(ct_dnat(true));
                            e.extend(addr_match(false, cip, full, false));
                            if let Some((ip, l)) = src {
                                e.extend(addr_match(true, ip, l, false));
                            }
                            e.push(expr::masq());
                            push(&mut plan, NAT_POSTROUTING.name, e);
                        }
                        if !v6 {
                            if let Some(ifname) = self.fw_route_link(cip)? {
                                // route_localnet lets 127/8 be routed through
                                // that interface: drop what arrives there for
                                // 127/8 unless this chain DNATed it
                                // (CVE-2020-8558).
                                let mut e = nfproto(false);
                                e.extend(name_match(true, &ifname, false));
                                e.extend(addr_match(
                                    false,
                                    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)),
                                    8,
                                    false,
                                ));
                                e.extend(ct_dnat(false));
                                e.push(expr::verdict(expr::DROP, None));
                                if !plan.guards.iter().any(|(g, _)| *g == ifname) {
                                    push(&mut plan, FILTER_INPUT.name, e);
                                    plan.guards.push((ifname, plan.rules.len() - 1));
                                }
                            }
                        }
                    }
                }
            }
            Rules::Masquerade(prefixes) => {
                fw_count(prefixes.len(), "prefixes")?;
                let mut seen: Vec<IpAddr> = Vec::new();
                for p in prefixes {
                    let (cip, len) = prefix_from_wit(*p)?;
                    self.fw_container(&mut seen, cip)?;
                    let v6 = cip.is_ipv6();
                    let full = if v6 { 128 } else { 32 };
                    let mut e = nfproto(v6);
                    e.extend(addr_match(true, cip, full, false));
                    e.extend(addr_match(false, cip, len, true));
                    if v6 {
                        e.extend(addr_match(false, "ff00::".parse().expect("ip"), 8, true));
                    } else {
                        e.extend(addr_match(
                            false,
                            IpAddr::V4(Ipv4Addr::new(224, 0, 0, 0)),
                            4,
                            true,
                        ));
                    }
                    e.push(expr::masq());
                    push(&mut plan, NAT_POSTROUTING.name, e);
                }
            }
            Rules::Forward(ips) => {
                fw_count(ips.len(), "addresses")?;
                let mut seen: Vec<IpAddr> = Vec::new();
                for ip in ips {
                    let cip = ip_from_wit(*ip);
                    self.fw_container(&mut seen, cip)?;
                    let v6 = cip.is_ipv6();
                    let full = if v6 { 128 } else { 32 };
                    let mark = match self.ns_grant(Kind::Host).firewall.forward_mark {
                        Some(m) if m != 0 => m,
                        _ => DEFAULT_FORWARD_MARK,
                    };
                    let set_mark = || {
                        vec![
                            expr::meta(MetaKey::Mark),
                            expr::bitwise(
                                (!mark).to_ne_bytes().to_vec(),
                                mark.to_ne_bytes().to_vec(),
                            ),
                            expr::meta_set(MetaKey::Mark),
                        ]
                    };
                    let mut e = nfproto(v6);
                    e.extend(addr_match(false, cip, full, false));
                    e.push(expr::ct(expr::CT_STATE));
                    e.push(expr::bitwise(
                        expr::CT_ESTABLISHED_RELATED.to_ne_bytes().to_vec(),
                        0u32.to_ne_bytes().to_vec(),
                    ));
                    e.push(expr::cmp(Operator::NotEqual, 0u32.to_ne_bytes().to_vec()));
                    e.extend(set_mark());
                    push(&mut plan, FILTER_FORWARD.name, e);
                    let mut e = nfproto(v6);
                    e.extend(addr_match(true, cip, full, false));
                    e.extend(set_mark());
                    push(&mut plan, FILTER_FORWARD.name, e);
                }
            }
            Rules::Isolation(index) => {
                let l = self.link(Kind::Host, *index)?;
                if l.kind.as_deref() != Some("bridge") {
                    return Err(CapError::denied(format!(
                        "host link {:?} (index {}) is not a bridge: only bridges are isolated",
                        l.name, l.index
                    )));
                }
                if !self.shared(Kind::Host, &l) {
                    self.check_host_link(Kind::Host, &l)?;
                }
                let mut e = name_match(true, &l.name, false);
                e.extend(name_match(false, &l.name, true));
                e.push(expr::verdict(Verdict::Jump, Some(ISOLATION)));
                push(&mut plan, FILTER_FORWARD.name, e);
                let mut e = name_match(false, &l.name, false);
                e.push(expr::verdict(expr::DROP, None));
                push(&mut plan, ISOLATION, e);
                if options.isolate_within_bridge {
                    // It concerns every port of the bridge, the admins'
                    // own too: the network's own bridge (its mark), or a
                    // link the grant names as `links`, not an unmarked
                    // bridge `bridges` lets it adopt.
                    if l.alias.as_deref() != Some(self.marks.1.as_str()) {
                        self.check_host_link(Kind::Host, &l)?;
                    }
                    let mut e = name_match(true, &l.name, false);
                    e.extend(name_match(false, &l.name, false));
                    e.push(expr::verdict(expr::DROP, None));
                    push(&mut plan, FILTER_FORWARD.name, e);
                }
            }
            Rules::MacSpoof(MacSpoof { link, mac }) => {
                if mac.len() != 6 || mac[0] & 1 == 1 {
                    return Err(ErrorCode::InvalidArgument.into());
                }
                let l = self.link(Kind::Host, *link)?;
                self.check_host_link(Kind::Host, &l)?;
                let mut e = name_match(true, &l.name, false);
                e.push(expr::payload(expr::Base::Link, 6, 6));
                e.push(expr::cmp(Operator::NotEqual, mac.clone()));
                e.push(expr::verdict(expr::DROP, None));
                push(&mut plan, BRIDGE_PREROUTING.name, e);
            }
        }
        for r in &mut plan.rules {
            let digest = r.digest();
            r.comment = self.fw_comment(kind, &digest, None);
        }
        Ok(plan)
    }

    /// The node interface the main table routes `ip` through (longest
    /// prefix), if any.
    fn fw_route_link(&mut self, ip: IpAddr) -> Result<Option<String>, CapError> {
        let nl = self.netlink(Kind::Host)?;
        let routes = nl.routes(Some(netlink_packet_route::AddressFamily::Inet))?;
        let best = routes
            .iter()
            .filter_map(crate::netlink::RouteSpec::from_message)
            .filter(|r| r.table == 254 && r.oif.is_some())
            .filter(|r| {
                ipnet::IpNet::new(r.dst, r.dst_len)
                    .map(|n| n.trunc().contains(&ip))
                    .unwrap_or(false)
            })
            .max_by_key(|r| r.dst_len);
        let Some(oif) = best.and_then(|r| r.oif) else {
            return Ok(None);
        };
        // Never an uplink, nor another attachment's or network's link
        // (S13): there the container is not behind a link of its own, and
        // localhost port maps are not offered, as with the reference,
        // which sets it only on the host interface of the result.
        if !self.localnet_link_ok(oif) {
            return Ok(None);
        }
        Ok(Some(self.link(Kind::Host, oif)?.name))
    }

    fn fw_add(&mut self, ns: Kind, rules: &Rules, options: &RuleOptions) -> Result<(), CapError> {
        let kind = kind_of(rules);
        self.fw_require(ns, kind)?;
        if self.command != Some(Command::Add) {
            return Err(CapError::denied(
                "firewall.add is an ADD's doing (a wasmcni invariant)",
            ));
        }
        let mut plan = self.fw_plan(rules, options)?;
        let (_, att) = self.fw_hashes();
        // route_localnet first, journaled, so that a failure of the batch
        // leaves it restored by the undo. Each guard rule records what
        // route_localnet was before wasmcni's first port map on that
        // interface set it (an earlier guard's record wins), so that the
        // last DEL puts it back.
        let mark = self.journal.len();
        if !plan.guards.is_empty() {
            let earlier: Vec<(String, bool)> = self
                .nft()?
                .rules(Family::Inet)?
                .iter()
                .filter_map(|d| Tag::parse(&d.comment)?.localnet)
                .collect();
            for (ifname, at) in plan.guards.clone() {
                let key = format!("net.ipv4.conf.{ifname}.route_localnet");
                let ns = self
                    .ns(Kind::Host)
                    .ok_or(CapError::Code(ErrorCode::NotFound))?;
                let old = crate::sysctl::read(ns, &key)?;
                let on = old.trim() == "1";
                let was = earlier
                    .iter()
                    .find(|(n, _)| *n == ifname)
                    .map_or(on, |(_, w)| *w);
                let digest = plan.rules[at].digest();
                plan.rules[at].comment = self.fw_comment(kind, &digest, Some((&ifname, was)));
                if !on {
                    crate::sysctl::write(ns, &key, "1")?;
                    self.journal.record(SysctlUndo::SetSysctl {
                        ns: Kind::Host,
                        key,
                        value: old.trim().to_owned(),
                    });
                }
            }
        }
        if let Err(e) = self.intend(crate::record::Owned {
            firewall: vec![crate::record::FirewallRules {
                attachment: att.clone(),
                kinds: vec![kind],
            }],
            ..crate::record::Owned::default()
        }) {
            self.undo_from(mark);
            return Err(e);
        }
        if let Err(e) = self.fw_install(kind, &plan, &att) {
            // A batch whose acknowledgement was lost may have been applied:
            // then it is journaled like one that succeeded.
            if self.fw_installed_any(kind, &plan, &att) {
                self.journal.record(FirewallUndo::FirewallRemove {
                    attachment: att,
                    kinds: vec![kind],
                });
            }
            // Nothing of the batch is there otherwise: put route_localnet
            // back now, whatever the plugin does next.
            self.undo_from(mark);
            return Err(e);
        }
        self.journal.record(FirewallUndo::FirewallRemove {
            attachment: att,
            kinds: vec![kind],
        });
        self.fw_flush_udp(&plan.udp);
        if kind == FwKind::Forward {
            self.fw_forward_accept()?;
        }
        Ok(())
    }

    /// The one rule wasmcni keeps outside its own tables, once per node
    /// and family: where an iptables `filter` table exists (legacy or nft;
    /// Docker and kube-proxy nodes set FORWARD to DROP, which an accept in
    /// wasmcni's chain cannot override), FORWARD starts with a jump to
    /// `WASMCNI-FORWARD`: first the admins' `CNI-ADMIN` (created empty if
    /// missing, never changed), then accept what carries the forward mark.
    /// Checked by netlink (iptables-nft) or `iptables -C` (legacy), and
    /// installed by `iptables` itself (it must be in iptables' dialect),
    /// so in practice once per node. Never undone: it lets through only
    /// what wasmcni's own rules mark.
    fn fw_forward_accept(&mut self) -> Result<(), CapError> {
        let mark = match self.ns_grant(Kind::Host).firewall.forward_mark {
            Some(m) if m != 0 => m,
            _ => DEFAULT_FORWARD_MARK,
        };
        for ipv6 in [false, true] {
            let (cmd, names) = if ipv6 {
                ("ip6tables", "/proc/net/ip6_tables_names")
            } else {
                ("iptables", "/proc/net/ip_tables_names")
            };
            let legacy_cmd = format!("{cmd}-legacy");
            // iptables-nft's table, read by netlink; legacy tables only
            // when they are in use (the kernel lists an empty `filter` in
            // every namespace).
            let nft = self
                .nft()?
                .jumps_to(ipv6, "filter", "FORWARD", FORWARD_CHAIN)?;
            let cmd = match nft {
                Some(true) => continue,
                Some(false) => cmd.to_owned(),
                None => {
                    let listed = std::fs::read_to_string(names)
                        .is_ok_and(|s| s.lines().any(|l| l.trim() == "filter"));
                    let in_use = listed
                        && iptables_output(&legacy_cmd, &["-S", "FORWARD"])
                            .is_ok_and(|out| out.lines().any(|l| l.trim() != "-P FORWARD ACCEPT"));
                    if !in_use {
                        continue;
                    }
                    let check = [
                        "-C",
                        "FORWARD",
                        "-m",
                        "comment",
                        "--comment",
                        "wasmcni",
                        "-j",
                        FORWARD_CHAIN,
                    ];
                    if iptables(&legacy_cmd, &check).is_ok() {
                        continue;
                    }
                    legacy_cmd
                }
            };
            let cmd = cmd.as_str();
            let mark = format!("{mark:#x}/{mark:#x}");
            // Creating a chain that exists fails: fine.
            let _ = iptables(cmd, &["-N", FORWARD_CHAIN]);
            let _ = iptables(cmd, &["-N", ADMIN_CHAIN]);
            let steps: [&[&str]; 4] = [
                &["-F", FORWARD_CHAIN],
                &["-A", FORWARD_CHAIN, "-j", ADMIN_CHAIN],
                &[
                    "-A",
                    FORWARD_CHAIN,
                    "-m",
                    "mark",
                    "--mark",
                    &mark,
                    "-j",
                    "ACCEPT",
                ],
                &[
                    "-I",
                    "FORWARD",
                    "1",
                    "-m",
                    "comment",
                    "--comment",
                    "wasmcni",
                    "-j",
                    FORWARD_CHAIN,
                ],
            ];
            for args in steps {
                iptables(cmd, args).map_err(|e| {
                    log::warn!("{cmd} {}: {e}", args.join(" "));
                    CapError::Code(ErrorCode::NotSupported)
                })?;
            }
        }
        Ok(())
    }

    /// Whether any of `plan`'s rules is there, tagged for the attachment
    /// (after a failed commit: whether it was applied after all).
    fn fw_installed_any(&mut self, kind: FwKind, plan: &Plan, att: &str) -> bool {
        self.firewall_any(&[kind], |d, t| {
            t.att == att
                && plan
                    .rules
                    .iter()
                    .any(|r| r.chain == d.chain && r.digest() == t.rule)
        })
    }

    /// Replaces the attachment's rules of `kind` with `plan`'s, with the
    /// skeleton, in one batch (recomputed if the ruleset changed meanwhile).
    fn fw_install(&mut self, kind: FwKind, plan: &Plan, att: &str) -> Result<(), CapError> {
        let family = kind.family();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let nft = self.nft()?;
            let generation = nft.generation()?;
            let existing = nft.rules(family)?;
            let chains = nft.chains(family)?;
            let mut b = Batch::default();
            // Replace what the attachment had of this kind.
            for d in &existing {
                if let Some(t) = Tag::parse(&d.comment) {
                    if t.att == att && t.kind == kind && !is_own_chain(&d.chain, att) {
                        b.delete_rule(family, &d.chain, d.handle);
                    }
                }
            }
            for (f, c) in &plan.own_chains {
                if chains.contains(c) {
                    b.flush_chain(*f, c);
                }
            }
            // The skeleton (idempotent), the entry rules if missing.
            b.table(family);
            match family {
                Family::Inet => {
                    for c in [
                        &NAT_PREROUTING,
                        &NAT_OUTPUT,
                        &NAT_POSTROUTING,
                        &FILTER_FORWARD,
                        &FILTER_INPUT,
                    ] {
                        b.base_chain(c);
                    }
                    b.chain(family, HOSTPORTS);
                    b.chain(family, ISOLATION);
                    for c in [&NAT_PREROUTING, &NAT_OUTPUT] {
                        let present = existing
                            .iter()
                            .any(|d| d.chain == c.name && d.comment == ENTRY_COMMENT);
                        if !present {
                            b.rule(&NewRule {
                                family,
                                chain: c.name.into(),
                                exprs: vec![
                                    expr::fib_daddr_type(),
                                    expr::eq(crate::netlink::nft::RTN_LOCAL.to_ne_bytes().to_vec()),
                                    expr::verdict(Verdict::Jump, Some(HOSTPORTS)),
                                ],
                                comment: ENTRY_COMMENT.into(),
                            });
                        }
                    }
                }
                Family::Bridge => b.base_chain(&BRIDGE_PREROUTING),
            }
            for (f, c) in &plan.own_chains {
                b.chain(*f, c);
            }
            for r in &plan.rules {
                b.rule(r);
            }
            match self.nft()?.commit(b, Some(generation)) {
                Ok(()) => break,
                Err(e) if e.errno() == libc::ERESTART && attempt < ATTEMPTS => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Deletes the UDP conntrack entries to these host ports, best effort
    /// (as the reference: a failure is logged, never fatal).
    fn fw_flush_udp(&mut self, ports: &[(bool, u16)]) {
        if ports.is_empty() {
            return;
        }
        let nft = match self.nft() {
            Ok(nft) => nft,
            Err(e) => {
                log::warn!("flushing UDP conntrack entries: {e:?}");
                return;
            }
        };
        let mut failed = false;
        for (v6, port) in ports {
            if let Err(e) = crate::netlink::conntrack::flush_udp_port(nft.socket(), *v6, *port) {
                log::warn!("flushing UDP conntrack entries to port {port}: {e}");
                failed = true;
            }
        }
        // The socket may hold what the failure left unread: given back (the
        // pool keeps it only once it is empty), a fresh one next time.
        if failed {
            self.nft = None;
        }
    }

    fn fw_check(&mut self, ns: Kind, rules: &Rules) -> Result<bool, CapError> {
        if ns != Kind::Host {
            return Err(CapError::denied(
                "firewall rules live in the node namespace only: pass the host handle \
                 (a wasmcni invariant)",
            ));
        }
        self.require(Kind::Host, |g| g.read, "read")?;
        let kind = kind_of(rules);
        let mut plans = vec![self.fw_plan(rules, &NO_OPTIONS)?];
        if matches!(rules, Rules::Isolation(_)) {
            // Or `add-with`'s, where the grant allows the option.
            let within = RuleOptions {
                isolate_within_bridge: true,
            };
            plans.extend(self.fw_plan(rules, &within).ok());
        }
        let (_, att) = self.fw_hashes();
        let nft = self.nft()?;
        let existing = nft.rules(kind.family())?;
        // By tag, not by the whole comment: a long network name is cut
        // short in it.
        let have: Vec<(&Dumped, Tag)> = existing
            .iter()
            .filter_map(|d| Some((d, Tag::parse(&d.comment)?)))
            .filter(|(_, t)| t.att == att && t.kind == kind)
            .collect();
        let all_there = |plan: &Plan| {
            have.len() == plan.rules.len()
                && plan.rules.iter().all(|r| {
                    let digest = r.digest();
                    have.iter()
                        .any(|(d, t)| d.chain == r.chain && t.rule == digest)
                })
        };
        let entries = kind != FwKind::PortMap
            || [NAT_PREROUTING.name, NAT_OUTPUT.name].iter().all(|c| {
                existing
                    .iter()
                    .any(|d| d.chain == *c && d.comment == ENTRY_COMMENT)
            });
        Ok(entries && plans.iter().any(all_there))
    }

    /// Whether any rule of one of `kinds` that `pick` chooses (by the rule
    /// and its tag) is installed. A table that cannot be read counts as
    /// yes: what asks keeps its entry or journals the batch.
    pub(super) fn firewall_any(
        &mut self,
        kinds: &[FwKind],
        pick: impl Fn(&Dumped, &Tag) -> bool,
    ) -> bool {
        for family in [Family::Inet, Family::Bridge] {
            if !kinds.iter().any(|k| k.family() == family) {
                continue;
            }
            let Ok(rules) = self.nft().and_then(|n| Ok(n.rules(family)?)) else {
                return true;
            };
            if rules.iter().any(|d| {
                Tag::parse(&d.comment).is_some_and(|t| kinds.contains(&t.kind) && pick(d, &t))
            }) {
                return true;
            }
        }
        false
    }

    /// Removes the rules whose tag `pick` selects, in both tables, each in
    /// one batch (with the attachment chains of the attachments it
    /// empties, and the whole table when no tagged rule is left); how many
    /// rules. Nothing to remove sends nothing.
    pub(super) fn firewall_remove_where(
        &mut self,
        pick: impl Fn(&Tag) -> bool,
    ) -> Result<u32, CapError> {
        let mut removed = 0;
        for family in [Family::Inet, Family::Bridge] {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let nft = self.nft()?;
                let generation = nft.generation()?;
                let existing = nft.rules(family)?;
                let chains = nft.chains(family)?;
                let mut victims = Vec::new();
                let mut others = 0;
                // Attachments whose port-map jump goes: their own chains go.
                let mut atts: Vec<String> = Vec::new();
                // route_localnet guards that go, and those that stay.
                let mut guards_gone: Vec<(String, bool)> = Vec::new();
                let mut guards_kept: Vec<String> = Vec::new();
                for d in &existing {
                    match Tag::parse(&d.comment) {
                        Some(t) if pick(&t) => {
                            if t.kind == FwKind::PortMap
                                && d.chain == HOSTPORTS
                                && !atts.contains(&t.att)
                            {
                                atts.push(t.att.clone());
                            }
                            if let Some(g) = t.localnet {
                                guards_gone.push(g);
                            }
                            victims.push(d.clone());
                        }
                        Some(t) => {
                            if let Some((name, _)) = t.localnet {
                                guards_kept.push(name);
                            }
                            others += 1;
                        }
                        None if d.comment == ENTRY_COMMENT => {}
                        None => others += 1,
                    }
                }
                if victims.is_empty() {
                    break;
                }
                let mut b = Batch::default();
                if others == 0 {
                    b.delete_table(family);
                } else {
                    let own = |c: &str| atts.iter().any(|a| is_own_chain(c, a));
                    for d in victims.iter().filter(|d| !own(&d.chain)) {
                        b.delete_rule(family, &d.chain, d.handle);
                    }
                    for c in chains.iter().filter(|c| own(c)) {
                        // Unreferenced now (the jump goes in this batch),
                        // and only that attachment's port-map rules live
                        // there.
                        b.flush_chain(family, c);
                        b.delete_chain(family, c);
                    }
                }
                match self.nft()?.commit(b, Some(generation)) {
                    Ok(()) => {
                        removed += victims.len() as u32;
                        let mut udp: Vec<(bool, u16)> =
                            victims.iter().filter_map(|v| v.udp_dnat).collect();
                        udp.dedup();
                        self.fw_flush_udp(&udp);
                        self.fw_restore_localnet(&guards_gone, &guards_kept);
                        break;
                    }
                    Err(e) if e.errno() == libc::ERESTART && attempt < ATTEMPTS => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(removed)
    }

    /// Puts `route_localnet` back to 0 on each interface whose last guard
    /// went, if wasmcni's first port map there had found it 0. Best
    /// effort: the interface may be gone.
    fn fw_restore_localnet(&mut self, gone: &[(String, bool)], kept: &[String]) {
        let Some(ns) = self.ns(Kind::Host) else {
            return;
        };
        let mut done: Vec<&str> = Vec::new();
        for (name, was) in gone {
            if *was || kept.contains(name) || done.contains(&name.as_str()) {
                continue;
            }
            done.push(name);
            let key = format!("net.ipv4.conf.{name}.route_localnet");
            if let Err(e) = crate::sysctl::write(ns, &key, "0") {
                log::debug!("{key}: {e:?}");
            }
        }
    }

    fn fw_kinds(&self, ns: Kind, kinds: &[RuleKind]) -> Result<Vec<FwKind>, CapError> {
        if kinds.len() > MAX_KINDS {
            return Err(CapError::Limit(format!(
                "{} kinds, more than the {MAX_KINDS} there are",
                kinds.len()
            )));
        }
        let mut out: Vec<FwKind> = Vec::new();
        for k in kinds {
            let k = FwKind::from(*k);
            if !out.contains(&k) {
                out.push(k);
            }
        }
        let kinds = out;
        if kinds.is_empty() {
            return Err(ErrorCode::InvalidArgument.into());
        }
        for k in &kinds {
            self.fw_require(ns, *k)?;
        }
        Ok(kinds)
    }

    fn fw_remove(&mut self, ns: Kind, kinds: &[RuleKind]) -> Result<u32, CapError> {
        let kinds = self.fw_kinds(ns, kinds)?;
        if self.command == Some(Command::Add) {
            return Err(CapError::denied(
                "firewall.remove is a DEL's doing: during ADD rules are only installed, and \
                 undone by the journal (a wasmcni invariant)",
            ));
        }
        let (_, att) = self.fw_hashes();
        if self.kept_for_live_incarnation("firewall.keep", json!({"attachment": att})) {
            return Ok(0);
        }
        self.firewall_remove_where(|t| t.att == att && kinds.contains(&t.kind))
    }

    fn fw_collect(&mut self, ns: Kind, kinds: &[RuleKind]) -> Result<u32, CapError> {
        let kinds = self.fw_kinds(ns, kinds)?;
        if self.command != Some(Command::Gc) {
            return Err(CapError::denied(
                "firewall.collect-garbage is a GC's doing (a wasmcni invariant)",
            ));
        }
        let network = self.state_owner.0.clone();
        let (net, _) = attachment_hashes(&network, "", "");
        let valid: Vec<String> = self
            .attachment
            .valid
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|o| attachment_hashes(&network, &o.container_id, &o.ifname).1)
            .collect();
        self.firewall_remove_where(|t| {
            t.net == net && !valid.contains(&t.att) && kinds.contains(&t.kind)
        })
    }
}

/// The iptables chain FORWARD jumps to ([`Ctx::fw_forward_accept`]).
const FORWARD_CHAIN: &str = "WASMCNI-FORWARD";

/// Whether `ip` can be a container's address in a rule: unicast, not
/// loopback, unspecified, link-local or IPv4-mapped.
fn unicast_container_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_link_local())
        }
        IpAddr::V6(a) => {
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || a.to_ipv4_mapped().is_some()
                || (a.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}
/// The admins' override chain (the reference firewall plugin's default
/// `iptablesAdminChainName`).
const ADMIN_CHAIN: &str = "CNI-ADMIN";

/// Runs `iptables`/`ip6tables` (waiting for its lock) in wasmcni's own
/// namespace, the node's.
///
/// # Ambient Authority
/// Executes the node's iptables binary; only for the static FORWARD rule.
fn iptables(cmd: &str, args: &[&str]) -> Result<(), String> {
    iptables_output(cmd, args).map(|_| ())
}

/// [`iptables`], returning what it printed.
fn iptables_output(cmd: &str, args: &[&str]) -> Result<String, String> {
    let exe = ["/usr/sbin/", "/sbin/", "/usr/bin/"]
        .iter()
        .map(|d| format!("{d}{cmd}"))
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| cmd.to_owned());
    let out = std::process::Command::new(&exe)
        .arg("-w")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{exe}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Refuses an empty list, or one longer than [`MAX_ADDRESSES`].
fn fw_count(n: usize, what: &str) -> Result<(), CapError> {
    if n == 0 {
        return Err(ErrorCode::InvalidArgument.into());
    }
    if n > MAX_ADDRESSES {
        return Err(CapError::Limit(format!(
            "{n} {what}, more than the {MAX_ADDRESSES} wasmcni accepts"
        )));
    }
    Ok(())
}

/// Whether `chain` is one of attachment `att`'s own chains.
fn is_own_chain(chain: &str, att: &str) -> bool {
    chain
        .strip_prefix('a')
        .and_then(|c| c.strip_prefix(att))
        .is_some_and(|rest| rest.starts_with('-'))
}

fn condition(c: &Condition, v6: bool) -> Result<Vec<crate::netlink::nft::Expr>, CapError> {
    let prefix = |source: bool, m: &PrefixMatch| {
        let (ip, len) = prefix_from_wit(m.prefix)?;
        if ip.is_ipv6() != v6 {
            return Err(CapError::Code(ErrorCode::InvalidArgument));
        }
        Ok(addr_match(source, ip, len, m.negate))
    };
    let name = |input: bool, m: &NameMatch| {
        if !valid_ifname(&m.name) {
            return Err(CapError::Code(ErrorCode::InvalidArgument));
        }
        Ok(name_match(input, &m.name, m.negate))
    };
    match c {
        Condition::Source(m) => prefix(true, m),
        Condition::Destination(m) => prefix(false, m),
        Condition::InInterface(m) => name(true, m),
        Condition::OutInterface(m) => name(false, m),
    }
}

impl Host for StoreData {
    fn add(&mut self, ns: Resource<NsHandle>, rules: Rules) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &rules);
        self.cap(&ADD, args, |c| c.fw_add(kind, &rules, &NO_OPTIONS))
    }

    fn add_with(
        &mut self,
        ns: Resource<NsHandle>,
        rules: Rules,
        options: RuleOptions,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &rules, &options);
        self.cap(&ADD_WITH, args, |c| c.fw_add(kind, &rules, &options))
    }

    fn check(&mut self, ns: Resource<NsHandle>, rules: Rules) -> Result<bool, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &rules);
        self.cap(&CHECK, args, |c| c.fw_check(kind, &rules))
    }

    fn remove(&mut self, ns: Resource<NsHandle>, kinds: Vec<RuleKind>) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &kinds);
        self.cap(&REMOVE, args, |c| c.fw_remove(kind, &kinds))
    }

    fn collect_garbage(
        &mut self,
        ns: Resource<NsHandle>,
        kinds: Vec<RuleKind>,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &kinds);
        self.cap(&COLLECT_GARBAGE, args, |c| c.fw_collect(kind, &kinds))
    }
}

/// How firewall rules are taken back (`firewall`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum FirewallUndo {
    /// Firewall rules were installed for an attachment: remove its rules
    /// of these kinds, found by their tag (no handle is kept, so the entry
    /// stays valid in another process), with the attachment's chains, and
    /// the tables once no attachment has rules left.
    FirewallRemove {
        /// The attachment's hash, as its rules' tags carry it.
        attachment: String,
        /// Which kinds.
        kinds: Vec<FwKind>,
    },
}

impl Inverse for FirewallUndo {
    fn apply(&self, ctx: &mut Ctx) -> Result<(), CapError> {
        let FirewallUndo::FirewallRemove { attachment, kinds } = self;
        ctx.firewall_remove_where(|t| t.att == *attachment && kinds.contains(&t.kind))
            .map(|_| ())
    }

    fn record(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn owned(&self, _attachment: &Attachment) -> Option<Owned> {
        let FirewallUndo::FirewallRemove { attachment, kinds } = self;
        Some(Owned {
            firewall: vec![FirewallRules {
                attachment: attachment.clone(),
                kinds: kinds.clone(),
            }],
            ..Owned::default()
        })
    }
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[&ADD, &ADD_WITH, &CHECK, &REMOVE, &COLLECT_GARBAGE];

/// `firewall.add`.
pub(super) const ADD: Entry = Entry {
    call: "firewall.add",
    args: &["ns", "rules"],
    authority: "install nftables rules for the attachment in wasmcni's own tables (`inet wasmcni`, `bridge wasmcni`), tagged with it, replacing its rules of the same kind (every address of the attachment, IPv4 and IPv6, in one call), in one batch: port mappings (DNAT entered only through `fib daddr type local`, at nat priority -90 after every iptables nat chain; hairpin/localhost masquerade; `route_localnet=1` on the node interface towards the container and a 127/8 guard there), masquerade, forward marks (and, once per node where an iptables `filter` table exists, the one rule outside wasmcni's tables: `FORWARD -j WASMCNI-FORWARD`, which runs `CNI-ADMIN` and accepts the mark, installed with `iptables`), bridge isolation, MAC spoof checks (`bridge wasmcni`); UDP conntrack entries to mapped ports flushed",
    policy: "host `firewall.<kind>` (`port-mappings`, `masquerade`, `forward`, `isolation`, `mac-spoof`); ADD only; the container address must be one the attachment owns (an IPAM delegate's result on the runtime's own config in this invocation, an address the attachment's records hold for this incarnation, or one inside the entry's `static-ranges`; never a prevResult's alone, nor what the container's namespace holds), and never a loopback, unspecified, multicast, link-local or IPv4-mapped address; every port mapping must be one of the runtime's `runtimeConfig.portMappings` (host port, container port, protocol, host IP), read by the host from stdin; links: own (isolation: or a bridge its network shares); never a table, chain or handle of the plugin's choosing",
    undo: "remove the attachment's rules of that kind by tag (and its chains; the tables once empty); the old `route_localnet` written back (a batch whose acknowledgement was lost is looked for and undone too); the static FORWARD rule stays",
    mutates: true,
    in_gc: false,
    needs: &[Grant::FirewallRules("rules")],
};

/// `firewall.add-with`.
pub(super) const ADD_WITH: Entry = Entry {
    call: "firewall.add-with",
    args: &["ns", "rules", "options"],
    authority: "`firewall.add`'s, and with `isolate-within-bridge` (isolation only) one more rule of the kind: drop what the bridge forwards from one of its ports to another, IPv4 and IPv6 (`iifname B oifname B drop` in wasmcni's forward chain; bridged traffic reaches it where `br_netfilter` passes it to IP filtering), which concerns every port of that bridge, as the reference firewall's `ingressPolicy: isolated` does",
    policy: "`firewall.add`'s: host `firewall.<kind>` for the rules' kind (`isolation` for the option); ADD only; addresses the attachment owns; links: own, or for isolation a bridge its network shares; with `isolate-within-bridge`: the network's own bridge (its mark) or a link `links` names, never an unmarked bridge only `bridges` matches",
    undo: "`firewall.add`'s: remove the attachment's rules of that kind by tag",
    mutates: true,
    in_gc: false,
    needs: &[Grant::FirewallRules("rules")],
};

/// `firewall.check`.
pub(super) const CHECK: Entry = Entry {
    call: "firewall.check",
    args: &["ns", "rules"],
    authority: "read wasmcni's nftables rules of the attachment",
    policy: "host `read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `firewall.remove`.
pub(super) const REMOVE: Entry = Entry {
    call: "firewall.remove",
    args: &["ns", "kinds"],
    authority: "delete the attachment's rules of the given kinds (by tag), its chains, and the tables once no attachment has rules left; `route_localnet` back to 0 on an interface whose last port map goes, if wasmcni's first port map there found it 0",
    policy: "host `firewall.<kind>` for each kind (at most 5); refused during ADD",
    undo: "none (refused during ADD)",
    mutates: true,
    in_gc: false,
    needs: &[Grant::FirewallKinds("kinds")],
};

/// `firewall.collect-garbage`.
pub(super) const COLLECT_GARBAGE: Entry = Entry {
    call: "firewall.collect-garbage",
    args: &["ns", "kinds"],
    authority: "delete the rules of the given kinds of this network's attachments that are not in `cni.dev/valid-attachments`",
    policy: "host `firewall.<kind>` for each kind (at most 5); GC only; only rules tagged with this network",
    undo: "none (GC only)",
    mutates: true,
    in_gc: true,
    needs: &[Grant::FirewallKinds("kinds")],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        let (n, a) = attachment_hashes("net", "c1", "eth0");
        assert_eq!((n.len(), a.len()), (8, 16));
        let c = format!("wasmcni n={n} a={a} k=pm r=0123abcd net/c1/eth0");
        let t = Tag::parse(&c).expect("tag");
        assert_eq!(t.att, a);
        assert_eq!(t.kind, FwKind::PortMap);
        assert!(Tag::parse("wasmcni entry").is_none());
        assert!(Tag::parse("wasmcni n=1 a=2 k=zz r=3").is_none());
        assert_ne!(a, attachment_hashes("net", "c1", "eth1").1);
        // No ambiguity from concatenation.
        assert_ne!(
            attachment_hashes("ne", "tc1", "eth0").1,
            attachment_hashes("net", "c1", "eth0").1
        );
    }

    #[test]
    fn own_chains_are_recognised() {
        assert!(is_own_chain("a0123456789abcdef-pm", "0123456789abcdef"));
        assert!(!is_own_chain("hostports", "0123456789abcdef"));
        assert!(!is_own_chain("a0123456789abcdefx-pm", "0123456789abcdef"));
    }

    #[test]
    fn masks() {
        assert_eq!(mask_bytes(24, false), vec![255, 255, 255, 0]);
        assert_eq!(mask_bytes(4, false), vec![0xf0, 0, 0, 0]);
        assert_eq!(mask_bytes(0, false), vec![0, 0, 0, 0]);
        assert_eq!(mask_bytes(9, true)[..3], [255, 0x80, 0]);
    }
}

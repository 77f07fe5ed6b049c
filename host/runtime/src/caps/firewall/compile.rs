//! The rule compiler: what a plugin's rule request (`rules`,
//! `wit/firewall.wit`) stands for, as nftables rules of
//! `crate::netlink::nft` (expressions, the chain each goes to, its tag)
//! ready for one batch ([`Plan`]); the request's bounds and conditions
//! checked on the way. What the request names is admitted by
//! `super::checks`; the batch is sent by `super::table`.

use std::net::{IpAddr, Ipv4Addr};

use netlink_packet_netfilter::nftables::{MetaKey, Operator, Verdict};

use super::chains::{
    BRIDGE_PREROUTING, FILTER_FORWARD, FILTER_INPUT, HOSTPORTS, ISOLATION, NAT_POSTROUTING,
};
use super::tag::{kind_of, pm_chain};
use crate::caps::bindings::wasmcni::plugin::firewall::{
    Condition, MacSpoof, NameMatch, PrefixMatch, Protocol, RuleOptions, Rules,
};
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::{ip_from_wit, prefix_from_wit, CapError};
use crate::caps::ctx::Ctx;
use crate::netlink::nft::{expr, Family, NewRule};
use crate::netns::Kind;

/// The default forward mark bit.
pub const DEFAULT_FORWARD_MARK: u32 = 0x1000;
/// Most port maps (container addresses) in one call.
const MAX_PORT_MAPS: usize = 8;
/// Most mappings in one port map.
pub(crate) const MAX_MAPPINGS: usize = 256;
/// Most prefixes or addresses of a masquerade or forward call.
const MAX_ADDRESSES: usize = 16;
/// Most conditions in one call.
const MAX_CONDITIONS: usize = 16;

/// What one `add` installs.
#[derive(Default)]
pub(super) struct Plan {
    /// Chains of the attachment (created empty, flushed when replaced).
    pub(super) own_chains: Vec<(Family, String)>,
    pub(super) rules: Vec<NewRule>,
    /// The node interfaces whose `route_localnet` must be 1, each with
    /// the index of its guard rule in `rules`.
    pub(super) guards: Vec<(String, usize)>,
    /// UDP host ports it maps (IPv6, port): their conntrack entries go.
    pub(super) udp: Vec<(bool, u16)>,
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

impl Ctx {
    /// The rules `rules` stands for, checked.
    pub(super) fn fw_plan(
        &mut self,
        rules: &Rules,
        options: &RuleOptions,
    ) -> Result<Plan, CapError> {
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
                crate::caps::authority::firewall::isolated_bridge(
                    &l.name,
                    l.index,
                    l.kind.as_deref(),
                )?;
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
                    if !self.view().network_marked(&l) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(mask_bytes(24, false), vec![255, 255, 255, 0]);
        assert_eq!(mask_bytes(4, false), vec![0xf0, 0, 0, 0]);
        assert_eq!(mask_bytes(0, false), vec![0, 0, 0, 0]);
        assert_eq!(mask_bytes(9, true)[..3], [255, 0x80, 0]);
    }
}

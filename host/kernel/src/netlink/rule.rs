//! Policy routing rules (what `ip rule list|add|del` does), over the same
//! rtnetlink socket as [`super::route`]: `RTM_GETRULE` / `RTM_NEWRULE` /
//! `RTM_DELRULE` with `FR_ACT_TO_TBL` rules only (a rule that sends
//! traffic to a table), which is all the CNI plugins make (`sbr`).

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use serde::{Deserialize, Serialize};

use super::route::{Netlink, NlError};

/// A rule that sends matching traffic to a routing table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleSpec {
    /// IPv4 (else IPv6).
    pub v4: bool,
    /// `FRA_PRIORITY` (none: the kernel picks one on add; matches any on
    /// delete).
    pub priority: Option<u32>,
    /// `FRA_SRC` and its prefix length.
    pub src: Option<(IpAddr, u8)>,
    /// `FRA_DST` and its prefix length.
    pub dst: Option<(IpAddr, u8)>,
    /// The table looked up.
    pub table: u32,
}

impl RuleSpec {
    /// The spec of a kernel rule, if it is a to-table rule of IPv4/IPv6.
    pub fn from_message(m: &RuleMessage) -> Option<RuleSpec> {
        if m.header.action != RuleAction::ToTable {
            return None;
        }
        let v4 = match m.header.family {
            AddressFamily::Inet => true,
            AddressFamily::Inet6 => false,
            _ => return None,
        };
        let mut spec = RuleSpec {
            v4,
            priority: None,
            src: None,
            dst: None,
            table: u32::from(m.header.table),
        };
        for a in &m.attributes {
            match a {
                RuleAttribute::Priority(p) => spec.priority = Some(*p),
                RuleAttribute::Source(ip) => spec.src = Some((*ip, m.header.src_len)),
                RuleAttribute::Destination(ip) => spec.dst = Some((*ip, m.header.dst_len)),
                RuleAttribute::Table(t) => spec.table = *t,
                // Another selector makes it a rule this interface cannot
                // describe (so could not delete or restore exactly).
                RuleAttribute::Iifname(_)
                | RuleAttribute::Oifname(_)
                | RuleAttribute::FwMark(_)
                | RuleAttribute::FwMask(_)
                | RuleAttribute::Goto(_)
                | RuleAttribute::UidRange(_)
                | RuleAttribute::IpProtocol(_)
                | RuleAttribute::SourcePortRange(_)
                | RuleAttribute::DestinationPortRange(_)
                | RuleAttribute::TunId(_)
                | RuleAttribute::L3MDev(true) => return None,
                // -1 (the kernel sends it with every rule) is unset.
                RuleAttribute::SuppressIfGroup(x) | RuleAttribute::SuppressPrefixLen(x)
                    if *x != u32::MAX =>
                {
                    return None
                }
                // Protocol, realm, and what this crate does not know
                // (newer kernels' attributes the kernel sends with every
                // rule).
                _ => {}
            }
        }
        Some(spec)
    }

    fn message(&self) -> Result<RuleMessage, NlError> {
        let family_ok =
            |ip: &IpAddr, len: u8| ip.is_ipv4() == self.v4 && len <= if self.v4 { 32 } else { 128 };
        if self.src.is_some_and(|(ip, len)| !family_ok(&ip, len))
            || self.dst.is_some_and(|(ip, len)| !family_ok(&ip, len))
            || self.table == 0
        {
            return Err(NlError::Kernel(libc::EINVAL));
        }
        let mut m = RuleMessage::default();
        m.header.family = if self.v4 {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        m.header.action = RuleAction::ToTable;
        m.header.table = u8::try_from(self.table).unwrap_or(0);
        m.attributes.push(RuleAttribute::Table(self.table));
        if let Some(p) = self.priority {
            m.attributes.push(RuleAttribute::Priority(p));
        }
        if let Some((ip, len)) = self.src {
            m.header.src_len = len;
            m.attributes.push(RuleAttribute::Source(ip));
        }
        if let Some((ip, len)) = self.dst {
            m.header.dst_len = len;
            m.attributes.push(RuleAttribute::Destination(ip));
        }
        Ok(m)
    }
}

impl Netlink {
    /// Every to-table rule of the family (both when none) that
    /// [`RuleSpec`] can describe.
    pub fn rules(&mut self, v4: Option<bool>) -> Result<Vec<RuleSpec>, NlError> {
        let mut out = Vec::new();
        for family in [true, false] {
            if v4.is_some_and(|f| f != family) {
                continue;
            }
            let family = if family {
                AddressFamily::Inet
            } else {
                AddressFamily::Inet6
            };
            out.extend(
                self.dump_rules(family)?
                    .iter()
                    .filter_map(RuleSpec::from_message),
            );
        }
        Ok(out)
    }

    /// Every rule of one family, as the kernel lists them.
    fn dump_rules(&mut self, family: AddressFamily) -> Result<Vec<RuleMessage>, NlError> {
        let mut msg = RuleMessage::default();
        msg.header.family = family;
        let answers = self.request(RouteNetlinkMessage::GetRule(msg), NLM_F_DUMP)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRule(r) => Some(r),
                _ => None,
            })
            .collect())
    }

    /// The `l3mdev` rules (`ip rule add l3mdev`, which the kernel adds in
    /// both families when the namespace's first VRF is made, and keeps).
    /// A kernel without IPv6 (`ipv6.disable=1`) has none of that family.
    pub fn l3mdev_rules(&mut self) -> Result<Vec<RuleMessage>, NlError> {
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let rules = match self.dump_rules(family) {
                Err(e) if family == AddressFamily::Inet6 && e.errno() == libc::EAFNOSUPPORT => {
                    continue
                }
                r => r?,
            };
            out.extend(
                rules
                    .into_iter()
                    .filter(|r| r.attributes.contains(&RuleAttribute::L3MDev(true))),
            );
        }
        Ok(out)
    }

    /// Which families have their `l3mdev` rule: (IPv4, IPv6).
    pub fn l3mdev_families(&mut self) -> Result<(bool, bool), NlError> {
        let rules = self.l3mdev_rules()?;
        let has = |f| rules.iter().any(|r| r.header.family == f);
        Ok((has(AddressFamily::Inet), has(AddressFamily::Inet6)))
    }

    /// Adds the `l3mdev` rules the kernel adds with a namespace's first
    /// VRF (`pref 1000 l3mdev protocol kernel`, both families), where they
    /// are missing: the kernel adds them once in a namespace's life, so a
    /// VRF made after they were deleted (by the undo of a failed ADD that
    /// made the first VRF) gets none from it.
    pub fn add_l3mdev_rules(&mut self) -> Result<(), NlError> {
        use netlink_packet_route::route::RouteProtocol;
        use netlink_packet_route::rule::RuleAction;
        let have = self.l3mdev_rules()?;
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            if have.iter().any(|r| r.header.family == family) {
                continue;
            }
            let mut m = RuleMessage::default();
            m.header.family = family;
            m.header.action = RuleAction::ToTable;
            m.attributes
                .push(RuleAttribute::Protocol(RouteProtocol::Kernel));
            m.attributes.push(RuleAttribute::L3MDev(true));
            m.attributes.push(RuleAttribute::Priority(1000));
            match self.request(
                RouteNetlinkMessage::NewRule(m),
                netlink_packet_core::NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            ) {
                // No IPv6 in this kernel: the kernel adds none either.
                Err(e) if family == AddressFamily::Inet6 && e.errno() == libc::EAFNOSUPPORT => {}
                r => {
                    r?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the `l3mdev` rules ([`Netlink::l3mdev_rules`]) of the
    /// families asked for (IPv4, IPv6).
    pub fn delete_l3mdev_rules(&mut self, v4: bool, v6: bool) -> Result<(), NlError> {
        for r in self.l3mdev_rules()? {
            let asked = match r.header.family {
                AddressFamily::Inet => v4,
                AddressFamily::Inet6 => v6,
                _ => false,
            };
            if !asked {
                continue;
            }
            self.request(
                RouteNetlinkMessage::DelRule(r),
                netlink_packet_core::NLM_F_ACK,
            )?;
        }
        Ok(())
    }

    /// Adds a rule (`NLM_F_CREATE | NLM_F_EXCL`: an equal rule is
    /// `EEXIST`).
    pub fn add_rule(&mut self, spec: &RuleSpec) -> Result<(), NlError> {
        let m = spec.message()?;
        self.request(
            RouteNetlinkMessage::NewRule(m),
            netlink_packet_core::NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )
        .map(drop)
    }

    /// Deletes the first rule that matches `spec`.
    pub fn delete_rule(&mut self, spec: &RuleSpec) -> Result<(), NlError> {
        let m = spec.message()?;
        self.request(
            RouteNetlinkMessage::DelRule(m),
            netlink_packet_core::NLM_F_ACK,
        )
        .map(drop)
    }
}

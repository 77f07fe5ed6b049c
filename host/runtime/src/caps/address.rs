//! `wasmcni:plugin/address`.

use super::row::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_route::address::{AddressFlags, AddressScope};
use netlink_packet_route::AddressFamily;
use serde_json::json;
use wasmtime::component::Resource;

use super::bindings::wasmcni::plugin::address::{AddressInfo, AddressOptions, Host};
use super::bindings::wasmcni::plugin::types::{ErrorCode, IpAddress, IpFamily, IpPrefix, Scope};
use super::bindings::{CapError, NsHandle};
use super::ctx::{ns_arg, Ctx, StoreData, RTPROT_WASMCNI};
use crate::inverse::Undo;
use crate::netlink::{address_flags, address_of, AddrFlags, AddrSpec};
use crate::netns::Kind;

/// A kernel address as its WIT value.
pub(crate) fn ip_to_wit(ip: IpAddr) -> IpAddress {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            IpAddress::Ipv4((o[0], o[1], o[2], o[3]))
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            IpAddress::Ipv6((s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]))
        }
    }
}

/// A WIT address as the kernel's.
pub(crate) fn ip_from_wit(ip: IpAddress) -> IpAddr {
    match ip {
        IpAddress::Ipv4((a, b, c, d)) => IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => {
            IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h))
        }
    }
}

/// A WIT prefix, checked: the length fits the family.
pub(crate) fn prefix_from_wit(p: IpPrefix) -> Result<(IpAddr, u8), CapError> {
    let ip = ip_from_wit(p.address);
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if p.prefix_len > max {
        return Err(ErrorCode::InvalidArgument.into());
    }
    Ok((ip, p.prefix_len))
}

/// `RT_SCOPE_*` value of a WIT scope.
pub(crate) fn scope_value(s: Scope) -> u8 {
    match s {
        Scope::Universe => 0,
        Scope::Site => 200,
        Scope::Link => 253,
        Scope::Host => 254,
        Scope::Nowhere => 255,
    }
}

/// WIT scope of an `RT_SCOPE_*` value.
pub(crate) fn scope_from_value(v: u8) -> Scope {
    match v {
        0 => Scope::Universe,
        200 => Scope::Site,
        253 => Scope::Link,
        254 => Scope::Host,
        _ => Scope::Nowhere,
    }
}

fn prefix_arg(ip: IpAddr, len: u8) -> String {
    format!("{ip}/{len}")
}

impl Ctx {
    /// Address changes: `addresses` granted, and in the host namespace only
    /// on a link the plugin may modify.
    /// Returns whether the link is only shared with the plugin (a bridge
    /// its network shares, see [`Ctx::shared`]): such a link may be given
    /// an address, and lose only one this invocation added.
    fn address_target(&mut self, kind: Kind, index: u32) -> Result<bool, CapError> {
        self.require(kind, |g| g.addresses, "addresses")?;
        let l = self.link(kind, index)?;
        if self.check_host_link(kind, &l).is_ok() {
            return Ok(false);
        }
        if self.shared(kind, &l) {
            return Ok(true);
        }
        self.check_host_link(kind, &l).map(|()| false)
    }

    /// A host address must lie in the grant's `prefixes` (and, as every
    /// address, cover no other attachment's reservation:
    /// [`Ctx::check_not_foreign_address`]).
    fn check_host_address(&self, ip: IpAddr, len: u8) -> Result<(), CapError> {
        if !self.ns_grant(Kind::Host).covers(ip, len) {
            return Err(CapError::denied(format!(
                "host address {ip}/{len} lies in none of {}",
                self.grant_field(Kind::Host, "prefixes")
            )));
        }
        Ok(())
    }

    fn find_address(
        &mut self,
        kind: Kind,
        index: u32,
        ip: IpAddr,
        len: u8,
    ) -> Result<Option<AddrSpec>, CapError> {
        let family = if ip.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        let msgs = self
            .netlink(kind)?
            .addresses_of(Some(family), Some(index))?;
        Ok(msgs
            .iter()
            .filter_map(AddrSpec::from_message)
            .find(|s| s.index == index && s.addr == ip && s.prefix_len == len))
    }
}

impl Host for StoreData {
    fn list(
        &mut self,
        ns: Resource<NsHandle>,
        link_index: Option<u32>,
        family: Option<IpFamily>,
    ) -> Result<Vec<AddressInfo>, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = json!({"ns": ns_arg(kind), "link-index": link_index, "family": family.map(|f| format!("{f:?}"))});
        self.cap(&LIST, args, |c| {
            c.require(kind, |g| g.read, "read")?;
            let nl = c.netlink(kind)?;
            if let Some(index) = link_index {
                nl.link_by_index(index)?;
            }
            let family = family.map(|f| match f {
                IpFamily::Ipv4 => AddressFamily::Inet,
                IpFamily::Ipv6 => AddressFamily::Inet6,
            });
            let msgs = nl.addresses_of(family, link_index)?;
            let mut out = Vec::with_capacity(msgs.len());
            for m in msgs {
                if link_index.is_some_and(|i| i != m.header.index) {
                    continue;
                }
                let Some(ip) = address_of(&m) else { continue };
                let flags = address_flags(&m);
                out.push(AddressInfo {
                    link_index: m.header.index,
                    prefix: IpPrefix {
                        address: ip_to_wit(ip),
                        prefix_len: m.header.prefix_len,
                    },
                    scope: match m.header.scope {
                        AddressScope::Universe => Scope::Universe,
                        AddressScope::Site => Scope::Site,
                        AddressScope::Link => Scope::Link,
                        AddressScope::Host => Scope::Host,
                        _ => Scope::Nowhere,
                    },
                    permanent: flags.contains(AddressFlags::Permanent),
                    tentative: flags.contains(AddressFlags::Tentative),
                    dad_failed: flags.contains(AddressFlags::Dadfailed),
                });
            }
            Ok(out)
        })
    }

    fn add(
        &mut self,
        ns: Resource<NsHandle>,
        link_index: u32,
        prefix: IpPrefix,
        options: AddressOptions,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let (ip, len) = (ip_from_wit(prefix.address), prefix.prefix_len);
        let args = json!({
            "ns": ns_arg(kind), "link-index": link_index, "prefix": prefix_arg(ip, len),
            "no-dad": options.no_dad, "no-prefix-route": options.no_prefix_route,
            "scope": options.scope.map(|s| format!("{s:?}")),
        });
        self.cap(&ADD, args, |c| {
            let (ip, len) = prefix_from_wit(prefix)?;
            let shared = c.address_target(kind, link_index)?;
            if kind == Kind::Host {
                c.check_host_address(ip, len)?;
            }
            // Another attachment's address would take its traffic (S13).
            let own_link = !shared && !c.network_link(kind, link_index);
            c.check_not_foreign_address(kind, ip, len, own_link)?;
            let spec = AddrSpec {
                index: link_index,
                addr: ip,
                prefix_len: len,
                flags: AddrFlags {
                    no_dad: options.no_dad,
                    no_prefix_route: options.no_prefix_route,
                },
                scope: options.scope.map(scope_value).unwrap_or(0),
                broadcast: AddrSpec::default_broadcast(ip, len),
                // Marks the host addresses wasmcni adds: only those may
                // be deleted there.
                protocol: if kind == Kind::Host {
                    RTPROT_WASMCNI
                } else {
                    0
                },
            };
            c.netlink(kind)?.add_address(&spec)?;
            c.journal.record(Undo::DeleteAddress { ns: kind, spec });
            Ok(())
        })
    }

    fn delete(
        &mut self,
        ns: Resource<NsHandle>,
        link_index: u32,
        prefix: IpPrefix,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let (ip, len) = (ip_from_wit(prefix.address), prefix.prefix_len);
        let args =
            json!({"ns": ns_arg(kind), "link-index": link_index, "prefix": prefix_arg(ip, len)});
        self.cap(&DELETE, args, |c| {
            let (ip, len) = prefix_from_wit(prefix)?;
            let shared = c.address_target(kind, link_index)?;
            let old = c
                .find_address(kind, link_index, ip, len)?
                .ok_or(CapError::Kernel(libc::EADDRNOTAVAIL))?;
            if kind == Kind::Host && old.protocol != RTPROT_WASMCNI {
                return Err(CapError::denied(format!(
                    "host address {ip}/{len} was not added by wasmcni, so it may not be \
                     deleted (a wasmcni invariant)"
                )));
            }
            if shared && !c.journal.added_address(kind, &old) {
                return Err(CapError::denied(format!(
                    "host address {ip}/{len} is on a bridge the network's attachments share; \
                     only an address this invocation added may be deleted there (a wasmcni \
                     invariant)"
                )));
            }
            // A primary address takes its secondaries and their routes along.
            c.preserving(kind, link_index, |c| {
                c.netlink(kind)?
                    .delete_address(link_index, ip, len)
                    .map_err(CapError::from)
            })?;
            c.journal.record(Undo::AddAddress {
                ns: kind,
                spec: old,
            });
            Ok(())
        })
    }

    fn announce(
        &mut self,
        ns: Resource<NsHandle>,
        link_index: u32,
        address: IpAddress,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let ip = ip_from_wit(address);
        let args = json!({"ns": ns_arg(kind), "link-index": link_index, "address": ip.to_string()});
        self.cap(&ANNOUNCE, args, |c| {
            c.require(kind, |g| g.announce, "announce")?;
            let l = c.link(kind, link_index)?;
            if !c.shared(kind, &l) {
                c.check_host_link(kind, &l)?;
            }
            let IpAddr::V4(v4) = ip else {
                return Err(ErrorCode::NotSupported.into());
            };
            if l.mac.len() != 6 {
                return Err(ErrorCode::NotSupported.into());
            }
            let msgs = c
                .netlink(kind)?
                .addresses_of(Some(AddressFamily::Inet), Some(link_index))?;
            let carries = msgs
                .iter()
                .any(|m| m.header.index == link_index && address_of(m) == Some(ip));
            if !carries {
                return Err(CapError::Kernel(libc::EADDRNOTAVAIL));
            }
            let ns = c.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
            crate::announce::gratuitous_arp(ns, link_index, &l.mac, v4)
                .map_err(|e| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EINVAL)))
        })
    }
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[&LIST, &ADD, &DELETE, &ANNOUNCE];

/// `address.list`.
pub(super) const LIST: Entry = Entry {
    call: "address.list",
    authority: "read addresses",
    policy: "`read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `address.add`.
pub(super) const ADD: Entry = Entry {
    call: "address.add",
    authority: "add an address to a link",
    policy: "`addresses`; the address never another attachment's reservation in any network's IPAM state; host: link own or `links`, address inside `prefixes`, and on an own link no connected prefix covering another attachment's reservation; marked IFA_PROTO 87",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Addresses), Grant::NodeLink("link-index", Ns::Call, LinkGrant::Shared), Grant::Prefix("prefix")],
};

/// `address.delete`.
pub(super) const DELETE: Entry = Entry {
    call: "address.delete",
    authority: "delete an address of a link",
    policy:
        "`addresses`; host: link own or `links`, and only addresses wasmcni added (IFA_PROTO 87)",
    undo: "add it back (with the link's other addresses and routes the kernel drops along)",
    mutates: true,
    in_gc: false,
    needs: &[
        Grant::Right(Ns::Call, Right::Addresses),
        Grant::NodeLink("link-index", Ns::Call, LinkGrant::Shared),
    ],
};

/// `address.announce`.
pub(super) const ANNOUNCE: Entry = Entry {
    call: "address.announce",
    authority: "send one gratuitous ARP from a link",
    policy: "`announce`; host: link own or `links`",
    undo: "none (a packet)",
    mutates: true,
    in_gc: false,
    needs: &[
        Grant::Right(Ns::Call, Right::Announce),
        Grant::NodeLink("link-index", Ns::Call, LinkGrant::Shared),
    ],
};

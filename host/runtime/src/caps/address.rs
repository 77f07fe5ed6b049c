//! `wasmcni:plugin/address`.

use super::ctx::Inverse;
use super::route::RouteUndo;
use super::row::*;
use crate::netlink::NlError;
use std::net::IpAddr;

use netlink_packet_route::address::{AddressFlags, AddressScope};
use netlink_packet_route::AddressFamily;
use serde_json::Value;
use wasmtime::component::Resource;

use super::args::{fields, AuditArg, Named};
use super::bindings::wasmcni::plugin::address::{AddressInfo, AddressOptions, Host};
use super::bindings::wasmcni::plugin::types::{ErrorCode, IpAddress, IpFamily, IpPrefix, Scope};
use super::bindings::{ip_from_wit, ip_to_wit, prefix_from_wit, scope_value, CapError, NsHandle};
use super::ctx::{Ctx, StoreData, RTPROT_WASMCNI};
use crate::netlink::{address_flags, address_of, AddrFlags, AddrSpec};
use crate::netns::Kind;

impl AuditArg for AddressOptions {
    fn audit(&self) -> Value {
        fields([
            ("no-dad", self.no_dad.audit()),
            ("no-prefix-route", self.no_prefix_route.audit()),
            ("scope", self.scope.map(Named).audit()),
        ])
    }
}

impl Ctx {
    /// Address changes: `addresses` granted, and in the host namespace only
    /// on a link the plugin may modify.
    /// Returns whether the link is only shared with the plugin (a bridge
    /// its network shares, see [`Ctx::shared`]): such a link may be given
    /// an address, and lose only one this invocation added.
    fn address_target(&mut self, kind: Kind, index: u32) -> Result<bool, CapError> {
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
        self.view().host_address(ip, len)
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

/// The host functions' work, one method per call.
impl Ctx {
    /// The addresses of the namespace, of one link if `link_index` names one.
    fn list_addresses(
        &mut self,
        kind: Kind,
        link_index: Option<u32>,
        family: Option<IpFamily>,
    ) -> Result<Vec<AddressInfo>, CapError> {
        let nl = self.netlink(kind)?;
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
    }

    /// Adds an address to a link the plugin may give one, journaling its removal.
    fn add_address(
        &mut self,
        kind: Kind,
        link_index: u32,
        prefix: IpPrefix,
        options: &AddressOptions,
    ) -> Result<(), CapError> {
        let (ip, len) = prefix_from_wit(prefix)?;
        let shared = self.address_target(kind, link_index)?;
        if kind == Kind::Host {
            self.check_host_address(ip, len)?;
        }
        // Another attachment's address would take its traffic (S13).
        let own_link = !shared && !self.network_link(kind, link_index);
        self.check_not_foreign_address(kind, ip, len, own_link)?;
        if kind == Kind::Container {
            self.check_not_node_address(ip)?;
        }
        // Its connected prefix is a route like any other (issue 49,
        // breach 5): a prefix over the node's LAN or another network's
        // subnet would take their traffic.
        if kind == Kind::Host && !options.no_prefix_route {
            let net = ipnet::IpNet::new(ip, len)
                .map_err(|_| CapError::Code(ErrorCode::InvalidArgument))?
                .trunc();
            if net.prefix_len() < net.max_prefix_len() {
                self.takes_no_route(kind, net, link_index, "host address's connected prefix")?;
            }
        }
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
        self.netlink(kind)?.add_address(&spec)?;
        self.journal
            .record(AddressUndo::DeleteAddress { ns: kind, spec });
        Ok(())
    }

    /// Deletes an address the plugin may delete, journaling its return.
    fn delete_address(
        &mut self,
        kind: Kind,
        link_index: u32,
        prefix: IpPrefix,
    ) -> Result<(), CapError> {
        let (ip, len) = prefix_from_wit(prefix)?;
        let shared = self.address_target(kind, link_index)?;
        let old = self
            .find_address(kind, link_index, ip, len)?
            .ok_or(CapError::Kernel(libc::EADDRNOTAVAIL))?;
        let added_here = shared && self.added_address(kind, &old);
        super::authority::address::delete(
            kind,
            ip,
            len,
            old.protocol == RTPROT_WASMCNI,
            shared,
            added_here,
        )?;
        // A primary address takes its secondaries and their routes along.
        self.preserving(kind, link_index, |c| {
            c.netlink(kind)?
                .delete_address(link_index, ip, len)
                .map_err(CapError::from)
        })?;
        self.journal.record(AddressUndo::AddAddress {
            ns: kind,
            spec: old,
        });
        Ok(())
    }

    /// Sends a gratuitous ARP for an IPv4 address the link carries.
    fn announce_address(
        &mut self,
        kind: Kind,
        link_index: u32,
        ip: IpAddr,
    ) -> Result<(), CapError> {
        let l = self.link(kind, link_index)?;
        if !self.shared(kind, &l) {
            self.check_host_link(kind, &l)?;
        }
        let IpAddr::V4(v4) = ip else {
            return Err(ErrorCode::NotSupported.into());
        };
        if l.mac.len() != 6 {
            return Err(ErrorCode::NotSupported.into());
        }
        let msgs = self
            .netlink(kind)?
            .addresses_of(Some(AddressFamily::Inet), Some(link_index))?;
        let carries = msgs
            .iter()
            .any(|m| m.header.index == link_index && address_of(m) == Some(ip));
        if !carries {
            return Err(CapError::Kernel(libc::EADDRNOTAVAIL));
        }
        let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
        crate::announce::gratuitous_arp(ns, link_index, &l.mac, v4)
            .map_err(|e| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EINVAL)))
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
        let args = (kind, link_index, family);
        self.cap(&LIST, args, |c| c.list_addresses(kind, link_index, family))
    }

    fn add(
        &mut self,
        ns: Resource<NsHandle>,
        link_index: u32,
        prefix: IpPrefix,
        options: AddressOptions,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&ADD, (kind, link_index, prefix, &options), |c| {
            c.add_address(kind, link_index, prefix, &options)
        })
    }

    fn delete(
        &mut self,
        ns: Resource<NsHandle>,
        link_index: u32,
        prefix: IpPrefix,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, link_index, prefix);
        self.cap(&DELETE, args, |c| {
            c.delete_address(kind, link_index, prefix)
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
        let args = (kind, link_index, address);
        self.cap(&ANNOUNCE, args, |c| {
            c.announce_address(kind, link_index, ip)
        })
    }
}

/// How a change to a link's addresses is taken back (`address`, and what
/// a link change makes the kernel flush, [`Ctx::preserve_link_state`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum AddressUndo {
    /// The kernel may add addresses to a link along with a change (a
    /// second link-local address for a new `addr_gen_mode`): after the
    /// change is reverted and its addresses are back, delete those not in
    /// `keep`.
    PruneAddresses {
        /// Where.
        ns: Kind,
        /// Which link.
        index: u32,
        /// Its addresses before the change.
        keep: Vec<AddrSpec>,
    },
    /// An address was added: delete it.
    DeleteAddress {
        /// Where.
        ns: Kind,
        /// What.
        spec: AddrSpec,
    },
    /// An address was deleted: add it back.
    AddAddress {
        /// Where.
        ns: Kind,
        /// What.
        spec: AddrSpec,
    },
}

impl Inverse for AddressUndo {
    fn apply(&self, ctx: &mut Ctx) -> Result<(), CapError> {
        let nl_err = |e: NlError| CapError::from(&e);
        match self {
            AddressUndo::DeleteAddress { ns, spec } => ctx
                .netlink(*ns)?
                .delete_address(spec.index, spec.addr, spec.prefix_len)
                .map_err(nl_err),
            AddressUndo::AddAddress { ns, spec } => {
                ctx.netlink(*ns)?.add_address(spec).map_err(nl_err)
            }
            AddressUndo::PruneAddresses { ns, index, keep } => {
                ctx.prune_addresses(*ns, *index, keep)
            }
        }
    }

    fn already_gone(&self, errno: i32) -> bool {
        match self {
            AddressUndo::DeleteAddress { .. } => {
                errno == libc::EADDRNOTAVAIL || errno == libc::ENODEV
            }
            // Put back by the kernel already (a link-local address when the
            // link came up).
            AddressUndo::AddAddress { .. } => errno == libc::EEXIST,
            AddressUndo::PruneAddresses { .. } => false,
        }
    }

    fn link_slot(&mut self) -> Option<(Kind, &mut u32)> {
        match self {
            AddressUndo::PruneAddresses { ns, index, .. } => Some((*ns, index)),
            AddressUndo::DeleteAddress { ns, spec } | AddressUndo::AddAddress { ns, spec } => {
                Some((*ns, &mut spec.index))
            }
        }
    }

    fn record(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn kept_for_other_holders(&self, ctx: &mut Ctx) -> Option<String> {
        match self {
            AddressUndo::PruneAddresses {
                ns: Kind::Host,
                index,
                ..
            } => ctx.shared_link_kept(*index),
            AddressUndo::DeleteAddress {
                ns: Kind::Host,
                spec,
            } => ctx.shared_link_kept(spec.index),
            _ => None,
        }
    }
}

impl Ctx {
    /// Journals what the kernel drops along with some changes to link
    /// `index` (setting it down flushes its routes, a small MTU drops its
    /// IPv6 addresses, deleting a primary address drops the secondaries,
    /// moving it drops both): the unicast routes through it, then its
    /// addresses, recorded before the change so the undo puts them back
    /// after reverting it (addresses first, then the routes that need them),
    /// and last removes addresses the kernel added meanwhile (a new
    /// `addr_gen_mode` makes a second link-local address). A route through
    /// the link that could not be put back as it was (multipath, nexthop
    /// object, source-specific, ...) makes the change refused: what cannot
    /// be undone is not done.
    pub(super) fn preserve_link_state(&mut self, kind: Kind, index: u32) -> Result<(), CapError> {
        let nl = self.netlink(kind)?;
        let routes = nl.routes(None)?;
        let addresses = nl.addresses(None)?;
        let unrestorable = routes
            .iter()
            .find(|m| {
                m.header.kind == netlink_packet_route::route::RouteType::Unicast
                    && crate::netlink::route_uses_link(m, index)
                    && crate::netlink::RouteSpec::from_message(m).is_none()
            })
            .map(|m| {
                crate::netlink::RouteKey::of_message(m)
                    .map(|k| format!("{}/{} table {}", k.dst, k.dst_len, k.table))
                    .unwrap_or_default()
            });
        super::authority::address::restorable_routes(index, unrestorable)?;
        let keep: Vec<crate::netlink::AddrSpec> = addresses
            .iter()
            .filter_map(crate::netlink::AddrSpec::from_message)
            .filter(|a| a.index == index)
            .collect();
        self.journal.record(AddressUndo::PruneAddresses {
            ns: kind,
            index,
            keep: keep.clone(),
        });
        for spec in routes
            .iter()
            .filter_map(crate::netlink::RouteSpec::from_message)
        {
            if spec.oif == Some(index) {
                self.journal.record(RouteUndo::AddRoute { ns: kind, spec });
            }
        }
        for spec in keep {
            self.journal
                .record(AddressUndo::AddAddress { ns: kind, spec });
        }
        Ok(())
    }

    /// Refuses a change that drops link `index`'s permanent neighbour
    /// entries (down, move): the journal does not keep them.
    pub(super) fn check_neighbours(&mut self, kind: Kind, index: u32) -> Result<(), CapError> {
        let n = self.netlink(kind)?.permanent_neighbours(index)?;
        super::authority::address::neighbours(index, n)
    }

    /// Journals every address and route of the namespace (a write of a
    /// setting for all links, like `conf.all.disable_ipv6`, may flush them
    /// anywhere), to be put back after the settings (each only if missing).
    pub(super) fn preserve_namespace_state(&mut self, kind: Kind) -> Result<(), CapError> {
        let nl = self.netlink(kind)?;
        let routes = nl.routes(None)?;
        let addresses = nl.addresses(None)?;
        for spec in routes
            .iter()
            .filter_map(crate::netlink::RouteSpec::from_message)
        {
            self.journal.record(RouteUndo::AddRoute { ns: kind, spec });
        }
        for spec in addresses
            .iter()
            .filter_map(crate::netlink::AddrSpec::from_message)
        {
            self.journal
                .record(AddressUndo::AddAddress { ns: kind, spec });
        }
        Ok(())
    }

    /// Runs the kernel change `f` to link `index` after journaling what it
    /// may flush ([`Ctx::preserve_link_state`]); if `f` fails, nothing
    /// changed, and what was journaled for it is dropped again.
    pub(super) fn preserving<T>(
        &mut self,
        kind: Kind,
        index: u32,
        f: impl FnOnce(&mut Ctx) -> Result<T, CapError>,
    ) -> Result<T, CapError> {
        if !self.journaling_for(kind, index) {
            return f(self);
        }
        let mark = self.journal.len();
        self.preserve_link_state(kind, index)?;
        let r = f(self);
        if r.is_err() {
            self.journal.truncate(mark);
        }
        r
    }

    /// Deletes the addresses of link `index` that are not in `keep`.
    pub(super) fn prune_addresses(
        &mut self,
        kind: crate::netns::Kind,
        index: u32,
        keep: &[crate::netlink::AddrSpec],
    ) -> Result<(), CapError> {
        let nl_err = |e: crate::netlink::NlError| CapError::from(&e);
        let nl = self.netlink(kind)?;
        let now: Vec<crate::netlink::AddrSpec> = nl
            .addresses(None)
            .map_err(nl_err)?
            .iter()
            .filter_map(crate::netlink::AddrSpec::from_message)
            .filter(|a| a.index == index)
            .collect();
        for a in now {
            let kept = keep
                .iter()
                .any(|k| k.addr == a.addr && k.prefix_len == a.prefix_len);
            if !kept {
                match nl.delete_address(index, a.addr, a.prefix_len) {
                    Ok(()) => {}
                    Err(e) if e.errno() == libc::EADDRNOTAVAIL => {}
                    Err(e) => return Err(nl_err(e)),
                }
            }
        }
        Ok(())
    }

    /// Whether this invocation added address `spec` in `ns` (the journal
    /// has its inverse).
    pub(super) fn added_address(&self, ns: Kind, spec: &AddrSpec) -> bool {
        self.journal.undos().any(|u| {
            matches!(u.as_any().downcast_ref::<AddressUndo>(),
                Some(AddressUndo::DeleteAddress { ns: n, spec: s })
                    if *n == ns && s.index == spec.index && s.addr == spec.addr
                        && s.prefix_len == spec.prefix_len)
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
    args: &["ns", "link-index", "family"],
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
    args: &["ns", "link-index", "prefix", "options"],
    authority: "add an address to a link",
    policy: "`addresses`; the address never another attachment's reservation in any network's IPAM state; host: link own or `links`, address inside `prefixes`, and on an own link no connected prefix covering another attachment's reservation; a connected prefix takes no route of the node's as `route.add`'s destination may not; marked IFA_PROTO 87",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Addresses), Grant::NodeLink("link-index", Ns::Call, LinkGrant::Shared), Grant::Prefix("prefix")],
};

/// `address.delete`.
pub(super) const DELETE: Entry = Entry {
    call: "address.delete",
    args: &["ns", "link-index", "prefix"],
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
    args: &["ns", "link-index", "address"],
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

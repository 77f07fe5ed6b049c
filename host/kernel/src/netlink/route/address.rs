//! Addresses: listed, modelled as a spec that adds one back exactly
//! (`AddrSpec`), added and deleted.

use std::net::{IpAddr, Ipv4Addr};

use netlink_packet_core::NLM_F_DUMP;
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressProtocol,
    AddressScope,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::error::{einval, NlError};
use super::socket::{Netlink, CREATE_EXCL};

impl Netlink {
    /// Every address in the namespace, of one family or both.
    pub fn addresses(
        &mut self,
        family: Option<AddressFamily>,
    ) -> Result<Vec<AddressMessage>, NlError> {
        self.addresses_of(family, None)
    }

    /// The addresses of link `index` (all links if `None`). The kernel
    /// dumps only that link's (strict checking, set at open; a kernel
    /// without it dumps all, filtered here): a node's other thousand links
    /// each carry an IPv6 link-local address.
    pub fn addresses_of(
        &mut self,
        family: Option<AddressFamily>,
        index: Option<u32>,
    ) -> Result<Vec<AddressMessage>, NlError> {
        let mut msg = AddressMessage::default();
        if let Some(f) = family {
            msg.header.family = f;
        }
        if let Some(i) = index {
            msg.header.index = i;
        }
        let answers = self.request(RouteNetlinkMessage::GetAddress(msg), NLM_F_DUMP)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) => Some(a),
                _ => None,
            })
            .filter(|a| index.is_none_or(|i| a.header.index == i))
            .collect())
    }

    /// Adds an address (`NLM_F_CREATE | NLM_F_EXCL`), with the broadcast
    /// address the spec gives (see [`AddrSpec::default_broadcast`]).
    pub fn add_address(&mut self, spec: &AddrSpec) -> Result<(), NlError> {
        let mut msg = address_message(spec.index, spec.addr, spec.prefix_len)?;
        msg.header.scope = AddressScope::from(spec.scope);
        if let (IpAddr::V4(_), Some(b)) = (spec.addr, spec.broadcast) {
            msg.attributes.push(AddressAttribute::Broadcast(b));
        }
        if spec.protocol != 0 {
            msg.attributes
                .push(AddressAttribute::Protocol(AddressProtocol::from(
                    spec.protocol,
                )));
        }
        let mut flags = AddressFlags::empty();
        if spec.flags.no_dad {
            flags |= AddressFlags::Nodad;
        }
        if spec.flags.no_prefix_route {
            flags |= AddressFlags::Noprefixroute;
        }
        // The header keeps the low 8 bits; IFA_FLAGS (which the kernel
        // prefers) carries all of them.
        msg.header.flags = AddressHeaderFlags::from_bits_retain((flags.bits() & 0xff) as u8);
        msg.attributes.push(AddressAttribute::Flags(flags));
        self.ack(RouteNetlinkMessage::NewAddress(msg), CREATE_EXCL)
    }

    /// Deletes an address.
    pub fn delete_address(
        &mut self,
        index: u32,
        addr: IpAddr,
        prefix_len: u8,
    ) -> Result<(), NlError> {
        let msg = address_message(index, addr, prefix_len)?;
        self.ack(RouteNetlinkMessage::DelAddress(msg), 0)
    }
}

/// The address an `ip addr` listing shows for an address message: the local
/// address if there is one (point-to-point links), else `IFA_ADDRESS`.
pub fn address_of(msg: &AddressMessage) -> Option<IpAddr> {
    let mut address = None;
    for attr in &msg.attributes {
        match attr {
            AddressAttribute::Local(a) => return Some(*a),
            AddressAttribute::Address(a) => address = Some(*a),
            _ => {}
        }
    }
    address
}

/// Address flags a plugin may ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AddrFlags {
    /// `IFA_F_NODAD`.
    pub no_dad: bool,
    /// `IFA_F_NOPREFIXROUTE`.
    pub no_prefix_route: bool,
}

/// An address as listed, enough to add it back exactly.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AddrSpec {
    /// Link index.
    pub index: u32,
    /// The address (`IFA_LOCAL`, else `IFA_ADDRESS`).
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
    /// Flags.
    pub flags: AddrFlags,
    /// `ifa_scope`.
    pub scope: u8,
    /// `IFA_BROADCAST` (IPv4), sent exactly as given.
    pub broadcast: Option<Ipv4Addr>,
    /// `IFA_PROTO`: who added it (0: unspecified). wasmcni marks the
    /// addresses it adds in the host namespace.
    pub protocol: u8,
}

/// An address's flags: `IFA_FLAGS` (32 bits) when present, which
/// supersedes the 8-bit header field.
pub fn address_flags(msg: &AddressMessage) -> AddressFlags {
    msg.attributes
        .iter()
        .find_map(|a| match a {
            AddressAttribute::Flags(f) => Some(*f),
            _ => None,
        })
        .unwrap_or_else(|| AddressFlags::from_bits_retain(u32::from(msg.header.flags.bits())))
}

impl AddrSpec {
    /// The spec of a kernel address message.
    pub fn from_message(msg: &AddressMessage) -> Option<AddrSpec> {
        let addr = address_of(msg)?;
        let flags = address_flags(msg);
        Some(AddrSpec {
            index: msg.header.index,
            addr,
            prefix_len: msg.header.prefix_len,
            flags: AddrFlags {
                no_dad: flags.contains(AddressFlags::Nodad),
                no_prefix_route: flags.contains(AddressFlags::Noprefixroute),
            },
            scope: u8::from(msg.header.scope),
            broadcast: msg.attributes.iter().find_map(|a| match a {
                AddressAttribute::Broadcast(b) => Some(*b),
                _ => None,
            }),
            protocol: msg
                .attributes
                .iter()
                .find_map(|a| match a {
                    AddressAttribute::Protocol(p) => Some(u8::from(*p)),
                    _ => None,
                })
                .unwrap_or(0),
        })
    }

    /// The broadcast address the reference plugins give an IPv4 address:
    /// the prefix's last address, none for /31 and /32 (and IPv6).
    pub fn default_broadcast(addr: IpAddr, prefix_len: u8) -> Option<Ipv4Addr> {
        match addr {
            IpAddr::V4(a) if prefix_len < 31 => Some(broadcast(a, prefix_len)),
            _ => None,
        }
    }
}

/// The broadcast address of `addr/prefix_len` (`prefix_len` <= 32).
fn broadcast(addr: Ipv4Addr, prefix_len: u8) -> Ipv4Addr {
    let host_bits = u32::MAX.checked_shr(u32::from(prefix_len)).unwrap_or(0);
    Ipv4Addr::from(u32::from(addr) | host_bits)
}

/// The family of `addr` and its longest prefix.
pub(in crate::netlink) fn family_of(addr: IpAddr) -> (AddressFamily, u8) {
    match addr {
        IpAddr::V4(_) => (AddressFamily::Inet, 32),
        IpAddr::V6(_) => (AddressFamily::Inet6, 128),
    }
}

/// An address message for `addr/prefix_len` on `index` (family, prefix,
/// `IFA_LOCAL` for IPv4 and `IFA_ADDRESS`).
fn address_message(index: u32, addr: IpAddr, prefix_len: u8) -> Result<AddressMessage, NlError> {
    let (family, max) = family_of(addr);
    if prefix_len > max {
        return einval();
    }
    let mut msg = AddressMessage::default();
    msg.header.family = family;
    msg.header.prefix_len = prefix_len;
    msg.header.index = index;
    if addr.is_ipv4() {
        msg.attributes.push(AddressAttribute::Local(addr));
    }
    msg.attributes.push(AddressAttribute::Address(addr));
    Ok(msg)
}

//! `wasmcni:plugin/address`.

use std::net::IpAddr;

use netlink_packet_route::address::AddressAttribute;
use netlink_packet_route::address::{AddressFlags, AddressScope};
use netlink_packet_route::AddressFamily;
use wasmtime::component::Resource;

use super::bindings::wasmcni::plugin::address::{AddressInfo, Host, Scope};
use super::bindings::wasmcni::plugin::types::{ErrorCode, IpAddress, IpFamily, IpPrefix};
use super::{CapError, NsHandle, StoreData};
use crate::netlink::address_of;

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

impl Host for StoreData {
    fn list(
        &mut self,
        ns: Resource<NsHandle>,
        link_index: Option<u32>,
        family: Option<IpFamily>,
    ) -> Result<Vec<AddressInfo>, CapError> {
        let kind = self.ns_kind(&ns)?;
        if !self.caps.ns_grant(kind).read {
            return Err(ErrorCode::AccessDenied.into());
        }
        let nl = self.caps.netlink(kind)?;
        if let Some(index) = link_index {
            nl.link_by_index(index).map_err(|e| CapError::from(&e))?;
        }
        let family = family.map(|f| match f {
            IpFamily::Ipv4 => AddressFamily::Inet,
            IpFamily::Ipv6 => AddressFamily::Inet6,
        });
        let msgs = nl.addresses(family).map_err(|e| CapError::from(&e))?;
        let mut out = Vec::with_capacity(msgs.len());
        for m in msgs {
            if link_index.is_some_and(|i| i != m.header.index) {
                continue;
            }
            let Some(ip) = address_of(&m) else { continue };
            // IFA_FLAGS (32 bits) supersedes the 8-bit header field when present.
            let flags = m
                .attributes
                .iter()
                .find_map(|a| match a {
                    AddressAttribute::Flags(f) => Some(*f),
                    _ => None,
                })
                .unwrap_or_else(|| {
                    AddressFlags::from_bits_retain(u32::from(m.header.flags.bits()))
                });
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
            });
        }
        Ok(out)
    }
}

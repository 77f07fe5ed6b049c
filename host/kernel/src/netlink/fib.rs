//! What the kernel's FIB answers for one address (`ip route get fibmatch
//! IP`), over the same rtnetlink socket as [`super::route`]: one request
//! and one answer, whatever the number of links, addresses and routes, so
//! a check made at every call does not grow with the node.

use std::net::IpAddr;

use netlink_packet_route::route::{RouteAttribute, RouteFlags, RouteMessage, RouteType};
use netlink_packet_route::RouteNetlinkMessage;

use super::route::{Netlink, NlError};

impl Netlink {
    /// The link that holds `ip` as one of this namespace's own addresses:
    /// the index of the link of the local route the FIB matches for it
    /// (`ip route get fibmatch IP` answering `local IP dev LINK`), `None`
    /// when the FIB's answer is not a local host route, or there is none.
    /// One request and one answer, whatever the number of links and
    /// addresses. An IPv4 address has its local route from the moment it
    /// is added; an IPv6 address only once it is usable (past duplicate
    /// address detection, on a link that is up).
    pub fn local_holder(&mut self, ip: IpAddr) -> Result<Option<u32>, NlError> {
        let (family, max) = super::route::family_of(ip);
        let mut msg = RouteMessage::default();
        msg.header.address_family = family;
        msg.header.destination_prefix_length = max;
        msg.header.flags = RouteFlags::FibMatch;
        msg.attributes.push(RouteAttribute::Destination(ip.into()));
        let answers = match self.request(RouteNetlinkMessage::GetRoute(msg), 0) {
            Ok(a) => a,
            // No route at all (unreachable): not a local address.
            Err(NlError::Kernel(e)) if e == libc::ENETUNREACH || e == libc::EHOSTUNREACH => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        Ok(answers.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r)
                if r.header.kind == RouteType::Local
                    && r.header.destination_prefix_length == max =>
            {
                r.attributes.iter().find_map(|a| match a {
                    RouteAttribute::Oif(i) => Some(*i),
                    _ => None,
                })
            }
            _ => None,
        }))
    }
}

impl Netlink {
    /// The route the FIB matches for `ip` (`ip route get fibmatch IP`):
    /// as the node routes it now, through its policy rules (the local
    /// table first: the node's own addresses answer with their local
    /// route), the most specific route covering it, with its table
    /// (`RTM_F_LOOKUP_TABLE`); `None` when none does; an error that
    /// [`is_reject_route`] knows where a reject route covers it. One
    /// request and one answer, whatever the number of routes.
    pub fn route_for(&mut self, ip: IpAddr) -> Result<Option<RouteMessage>, NlError> {
        let (family, max) = super::route::family_of(ip);
        let mut msg = RouteMessage::default();
        msg.header.address_family = family;
        msg.header.destination_prefix_length = max;
        // The table of the answer (IPv6 answers with it anyway, and its
        // strict check refuses the flag).
        msg.header.flags = if ip.is_ipv4() {
            RouteFlags::FibMatch | RouteFlags::LookupTable
        } else {
            RouteFlags::FibMatch
        };
        msg.attributes.push(RouteAttribute::Destination(ip.into()));
        let answers = match self.request(RouteNetlinkMessage::GetRoute(msg), 0) {
            Ok(a) => a,
            Err(NlError::Kernel(e)) if e == libc::ENETUNREACH => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(answers.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) => Some(r),
            _ => None,
        }))
    }
}

/// Whether `e`, an error of [`Netlink::route_for`], is the kernel's answer
/// for an address a reject route covers (a blackhole `EINVAL`, a
/// prohibit route `EACCES`, an unreachable one `EHOSTUNREACH`): the
/// lookup names no route then.
pub fn is_reject_route(e: &NlError) -> bool {
    matches!(e, NlError::Kernel(c) if [libc::EINVAL, libc::EACCES, libc::EHOSTUNREACH].contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::route::tests::{in_new_netns, ip};

    /// `local_holder` names the link of each of the namespace's own
    /// addresses (IPv4, IPv6, on a link that is down too for IPv4), and
    /// nothing for an address in a connected subnet, a broadcast address,
    /// an address with no route at all, or a whole local prefix (AnyIP).
    #[test]
    fn local_holder_names_the_link_of_an_own_address_only() {
        in_new_netns(Box::new(|| {
            ip(&["link", "add", "lh0", "type", "bridge"]);
            ip(&["link", "add", "lh1", "type", "bridge"]);
            ip(&["addr", "add", "10.31.0.1/24", "dev", "lh0"]);
            ip(&["addr", "add", "fd31::1/64", "dev", "lh0", "nodad"]);
            ip(&["link", "set", "lh0", "up"]);
            ip(&["addr", "add", "10.32.0.1/24", "dev", "lh1"]);
            ip(&["route", "add", "local", "10.33.0.0/16", "dev", "lo"]);
            let mut nl = Netlink::here().expect("a socket");
            let index =
                |nl: &mut Netlink, name: &str| nl.link_by_name(name).expect(name).header.index;
            let (lh0, lh1) = (index(&mut nl, "lh0"), index(&mut nl, "lh1"));
            let holder = |nl: &mut Netlink, ip: &str| nl.local_holder(ip.parse().unwrap()).unwrap();
            assert_eq!(holder(&mut nl, "10.31.0.1"), Some(lh0));
            assert_eq!(holder(&mut nl, "fd31::1"), Some(lh0));
            assert_eq!(holder(&mut nl, "10.32.0.1"), Some(lh1));
            for other in [
                "10.31.0.2",
                "10.31.0.255",
                "fd31::2",
                "192.0.2.1",
                "2001:db8::1",
                "10.33.1.1",
            ] {
                assert_eq!(holder(&mut nl, other), None, "{other}");
            }
        }));
    }

    /// `route_for` answers the most specific route covering an address,
    /// the local one for the node's own address, a reject route's error,
    /// and nothing where none covers it (no default route here).
    #[test]
    fn route_for_is_the_most_specific_route() {
        in_new_netns(Box::new(|| {
            ip(&["link", "add", "mr0", "type", "veth", "peer", "name", "mr0p"]);
            ip(&["link", "set", "mr0p", "up"]);
            ip(&["link", "set", "mr0", "up"]);
            ip(&["addr", "add", "10.31.0.1/24", "dev", "mr0"]);
            ip(&["addr", "add", "fd31::1/64", "dev", "mr0", "nodad"]);
            ip(&["route", "add", "10.40.0.0/16", "dev", "mr0"]);
            ip(&["route", "add", "10.40.7.0/24", "dev", "mr0"]);
            ip(&["route", "add", "blackhole", "10.50.0.0/24"]);
            let mut nl = Netlink::here().expect("a socket");
            let len = |nl: &mut Netlink, a: &str| {
                nl.route_for(a.parse().unwrap())
                    .unwrap_or_else(|e| panic!("{a}: {e:?}"))
                    .map(|r| (r.header.destination_prefix_length, r.header.kind))
            };
            assert_eq!(len(&mut nl, "10.31.0.5"), Some((24, RouteType::Unicast)));
            assert_eq!(len(&mut nl, "10.31.0.1"), Some((32, RouteType::Local)));
            assert_eq!(len(&mut nl, "10.40.1.1"), Some((16, RouteType::Unicast)));
            assert_eq!(len(&mut nl, "10.40.7.9"), Some((24, RouteType::Unicast)));
            let e = nl.route_for("10.50.0.9".parse().unwrap()).unwrap_err();
            assert!(is_reject_route(&e), "{e:?}");
            assert_eq!(len(&mut nl, "192.0.2.1"), None);
            assert_eq!(len(&mut nl, "fd31::5"), Some((64, RouteType::Unicast)));
            assert_eq!(len(&mut nl, "fd31::1"), Some((128, RouteType::Local)));
            ip(&["route", "add", "blackhole", "fd50::/64"]);
            let e = nl.route_for("fd50::9".parse().unwrap()).unwrap_err();
            assert!(is_reject_route(&e), "{e:?}");
            assert_eq!(len(&mut nl, "2001:db8::1"), None);
        }));
    }
}

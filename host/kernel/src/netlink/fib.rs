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
            // lh0 a veth whose peer is up: it has carrier, so its IPv6
            // address becomes usable (a bridge without ports may lose its
            // carrier at any moment after coming up, and its address
            // then waits: a CI run under load saw no local route).
            ip(&["link", "add", "lh0", "type", "veth", "peer", "name", "lh0p"]);
            ip(&["link", "add", "lh1", "type", "bridge"]);
            ip(&["addr", "add", "10.31.0.1/24", "dev", "lh0"]);
            ip(&["addr", "add", "fd31::1/64", "dev", "lh0", "nodad"]);
            ip(&["link", "set", "lh0p", "up"]);
            ip(&["link", "set", "lh0", "up"]);
            ip(&["addr", "add", "10.32.0.1/24", "dev", "lh1"]);
            ip(&["route", "add", "local", "10.33.0.0/16", "dev", "lo"]);
            let mut nl = Netlink::here().expect("a socket");
            let index =
                |nl: &mut Netlink, name: &str| nl.link_by_name(name).expect(name).header.index;
            let (lh0, lh1) = (index(&mut nl, "lh0"), index(&mut nl, "lh1"));
            let holder = |nl: &mut Netlink, ip: &str| nl.local_holder(ip.parse().unwrap()).unwrap();
            assert_eq!(holder(&mut nl, "10.31.0.1"), Some(lh0));
            // An IPv6 address has its local route once it is usable: the
            // link's carrier is noticed asynchronously (at most 5 s).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while holder(&mut nl, "fd31::1").is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
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
}

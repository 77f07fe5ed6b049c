//! IPv4 settings: a link's (`net.ipv4.conf.<name>.*`, read and written
//! through its `IFLA_AF_SPEC`) and the namespace's forwarding
//! (`RTM_GETNETCONF`).

use netlink_packet_core::{
    DefaultNla, NetlinkMessage, NetlinkPayload, NLA_F_NESTED, NLM_F_REQUEST,
};
use netlink_packet_route::link::{AfSpecInet, AfSpecUnspec, InetDevConf, LinkAttribute, LinkFlags};
use netlink_packet_route::RouteNetlinkMessage;

use super::error::NlError;
use super::link::{check_ifname, link_at, link_query};
use super::socket::Netlink;
use crate::netlink::raw;

impl Netlink {
    /// The index of link `name`, whether it is up, and its IPv4 settings
    /// (`net.ipv4.conf.<name>.*`), as its netlink answer carries them;
    /// `None` if it has none (IPv4 is off on it).
    pub fn inet_conf(&mut self, name: &str) -> Result<InetConf, NlError> {
        // Asked for anew (not from kept answers) and parsed in full: the
        // settings are in `IFLA_AF_SPEC`, which other readers leave out.
        // The link must have `name` as its own name: the kernel finds a
        // link by an alternative name too, `/proc/sys/net/*/conf` does not.
        check_ifname(name)?;
        let mut query = link_query();
        query
            .attributes
            .push(LinkAttribute::IfName(name.to_owned()));
        let answers = self.request(RouteNetlinkMessage::GetLink(query), 0)?;
        let raw = match answers.first() {
            Some(RouteNetlinkMessage::NewLink(_)) => self.buf.get(self.last_answer.clone()),
            _ => None,
        };
        let Some(raw) = raw else {
            return Err(NlError::Kernel(libc::ENODEV));
        };
        let full = NetlinkMessage::<RouteNetlinkMessage>::deserialize(raw)
            .map_err(|e| NlError::Decode(e.to_string()))?;
        let link = match full.payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l))
                if l.attributes
                    .iter()
                    .any(|a| matches!(a, LinkAttribute::IfName(n) if n == name)) =>
            {
                l
            }
            _ => return Err(NlError::Kernel(libc::ENODEV)),
        };
        let index = link.header.index;
        let up = link.header.flags.contains(LinkFlags::Up);
        let conf = link.attributes.into_iter().find_map(|a| match a {
            LinkAttribute::AfSpecUnspec(specs) => specs.into_iter().find_map(|s| match s {
                AfSpecUnspec::Inet(inet) => inet.into_iter().find_map(|i| match i {
                    AfSpecInet::DevConf(c) => Some(c),
                    _ => None,
                }),
                _ => None,
            }),
            _ => None,
        });
        Ok(InetConf { index, up, conf })
    }

    /// Sets IPv4 setting `id` (`IPV4_DEVCONF_*`) of link `index` to
    /// `value` (`IFLA_AF_SPEC` with `AF_INET`'s `IFLA_INET_CONF`, which the
    /// kernel stores where the sysctl does). Unlike a write of
    /// `net.ipv4.conf.<name>.<setting>`, on a link that is up it also
    /// announces a change of the link (`NETDEV_CHANGE`: routes, neighbours
    /// and multicast memberships are looked at again), and newer kernels
    /// bound some settings (`arp_notify` to 0 or 1).
    pub fn set_inet_conf(&mut self, index: u32, id: u16, value: i32) -> Result<(), NlError> {
        const IFLA_INET_CONF: u16 = 1 | NLA_F_NESTED;
        // The nests by hand: the crate's request form of IFLA_INET_CONF
        // leaves out every setting whose value is 0.
        let conf = raw::nla(IFLA_INET_CONF, &raw::nla(id, &value.to_ne_bytes()));
        let inet = raw::nla(libc::AF_INET as u16 | NLA_F_NESTED, &conf);
        let mut msg = link_at(index)?;
        msg.attributes.push(LinkAttribute::Other(DefaultNla::new(
            libc::IFLA_AF_SPEC | NLA_F_NESTED,
            inet,
        )));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// IPv4 forwarding of the namespace (`net.ipv4.ip_forward`, which is
    /// `net.ipv4.conf.all.forwarding`), by `RTM_GETNETCONF`.
    pub fn ipv4_forwarding(&mut self) -> Result<i32, NlError> {
        const NLMSG_ERROR: u16 = 2;
        const RTM_NEWNETCONF: u16 = 80;
        const RTM_GETNETCONF: u16 = 82;
        const NETCONFA_IFINDEX: u16 = 1;
        const NETCONFA_FORWARDING: u16 = 2;
        const NETCONFA_IFINDEX_ALL: i32 = -1;
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let ifindex = raw::nla(NETCONFA_IFINDEX, &NETCONFA_IFINDEX_ALL.to_ne_bytes());
        let req = raw::message(
            RTM_GETNETCONF,
            NLM_F_REQUEST,
            seq,
            libc::AF_INET as u8,
            &ifindex,
        );
        self.socket.send(&req, 0)?;
        let bad = |what: &str| NlError::Decode(format!("netconf answer: {what}"));
        loop {
            let n = self.socket.recv(&mut &mut self.buf[..], 0)?;
            let buf = &self.buf[..n];
            let mut off = 0;
            while off + 16 <= n {
                let word =
                    |i: usize| u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
                let len = word(off) as usize;
                if len < 16 || off + len > n {
                    return Err(bad("a short message"));
                }
                let ty = u16::from_ne_bytes([buf[off + 4], buf[off + 5]]);
                if word(off + 8) == seq {
                    // After the header, the error code or the 4-byte
                    // struct netconfmsg.
                    if len < 20 {
                        return Err(bad("a short message"));
                    }
                    return match ty {
                        NLMSG_ERROR => match word(off + 16) as i32 {
                            code if code < 0 => Err(NlError::Kernel(-code)),
                            _ => Err(bad("an acknowledgement")),
                        },
                        RTM_NEWNETCONF => raw::attributes(&buf[off + 20..off + len])
                            .into_iter()
                            .find(|(t, p, _)| *t == NETCONFA_FORWARDING && p.len() >= 4)
                            .map(|(_, p, _)| i32::from_ne_bytes([p[0], p[1], p[2], p[3]]))
                            .ok_or_else(|| bad("no forwarding")),
                        _ => Err(bad("an unexpected message")),
                    };
                }
                off += (len + 3) & !3;
            }
        }
    }
}

/// What [`Netlink::inet_conf`] found.
pub struct InetConf {
    /// The link's index.
    pub index: u32,
    /// Whether it is up (`IFF_UP`).
    pub up: bool,
    /// Its IPv4 settings; `None` without IPv4.
    pub conf: Option<InetDevConf>,
}

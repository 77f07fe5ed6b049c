//! How an rtnetlink answer is parsed: as the crate parses it, but a link
//! answer for the attributes wasmcni reads only.

use netlink_packet_core::{DecodeError, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

/// `RTM_NEWLINK`: the kernel's answer about a link (and its notice of one).
const RTM_NEWLINK: u16 = 16;

/// The link attributes wasmcni reads, the only ones a link answer is
/// parsed for ([`deserialize`]). `IFLA_AF_SPEC` only in an `AF_BRIDGE`
/// answer (a port's VLANs); [`Netlink::inet_conf`](super::Netlink::inet_conf),
/// the one reader of a link's IPv4 settings in it, parses its answer in
/// full.
const LINK_ATTRIBUTES_READ: [u16; 16] = [
    libc::IFLA_ADDRESS,
    libc::IFLA_IFNAME,
    libc::IFLA_MTU,
    libc::IFLA_LINK,
    libc::IFLA_MASTER,
    libc::IFLA_PROTINFO,
    libc::IFLA_TXQLEN,
    libc::IFLA_OPERSTATE,
    libc::IFLA_LINKINFO,
    libc::IFLA_IFALIAS,
    libc::IFLA_GROUP,
    libc::IFLA_LINK_NETNSID,
    libc::IFLA_NEW_IFINDEX,
    libc::IFLA_PERM_ADDRESS,
    libc::IFLA_PARENT_DEV_NAME,
    libc::IFLA_PARENT_DEV_BUS_NAME,
];

/// The first netlink message in `bytes`: as the crate parses it, except
/// that of a link answer only [`LINK_ATTRIBUTES_READ`] are parsed. A
/// veth's answer carries about 45 attributes (queue counts, offload
/// limits, carrier counters, XDP, every IPv4 and IPv6 setting), an ADD
/// reads about 40 answers, and parsing every attribute of each was about a
/// tenth of a bridge ADD's instructions (callgrind).
pub(super) fn deserialize(
    bytes: &[u8],
) -> Result<NetlinkMessage<RouteNetlinkMessage>, DecodeError> {
    use netlink_packet_core::{NetlinkBuffer, NlasIterator, Parseable, ParseableParametrized};
    use netlink_packet_route::link::LinkHeader;
    const LINK_HEADER_LEN: usize = std::mem::size_of::<libc::ifinfomsg>();
    let buf = NetlinkBuffer::new_checked(bytes)?;
    if buf.message_type() != RTM_NEWLINK {
        return NetlinkMessage::deserialize(bytes);
    }
    let header = NetlinkHeader::parse(&buf)?;
    let payload = buf.payload();
    let link = LinkHeader::parse(payload)?;
    let bridge = link.interface_family == AddressFamily::Bridge;
    let mut attributes = Vec::new();
    for nla in NlasIterator::new(payload.get(LINK_HEADER_LEN..).unwrap_or_default()) {
        let nla = nla?;
        let kind = nla.kind();
        if LINK_ATTRIBUTES_READ.contains(&kind) || (bridge && kind == libc::IFLA_AF_SPEC) {
            attributes.push(LinkAttribute::parse_with_param(
                &nla,
                link.interface_family,
            )?);
        }
    }
    let mut message = LinkMessage::default();
    message.header = link;
    message.attributes = attributes;
    Ok(NetlinkMessage::new(
        header,
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(message)),
    ))
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::Nla;

    use super::*;
    use crate::netlink::route::tests::{in_new_netns, ip};
    use crate::netlink::route::Netlink;

    /// A link answer is parsed for the attributes wasmcni reads only, and
    /// they come out as the crate's full parse of the same answer has them
    /// (a bridge, a port of it with an alias, its veth peer, `lo`). The
    /// IPv4 settings, which that parse leaves out, are still read
    /// ([`Netlink::inet_conf`]).
    #[test]
    fn a_link_answer_keeps_what_wasmcni_reads_as_the_full_parse_has_it() {
        in_new_netns(Box::new(|| {
            ip(&["link", "add", "tbr0", "type", "bridge"]);
            ip(&["link", "add", "tv0", "type", "veth", "peer", "name", "tv1"]);
            ip(&["link", "set", "tv0", "master", "tbr0", "alias", "a port"]);
            ip(&["link", "set", "tv0", "up"]);
            ip(&["link", "set", "tbr0", "up"]);
            let mut nl = Netlink::here().expect("a socket");
            for name in ["lo", "tbr0", "tv0", "tv1"] {
                let light = nl.link_by_name(name).expect("the link");
                let raw = nl.buf[nl.last_answer.clone()].to_vec();
                let full = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&raw)
                    .expect("a full parse")
                    .payload
                {
                    NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) => l,
                    other => panic!("not a link: {other:?}"),
                };
                assert!(
                    full.attributes.len() > light.attributes.len(),
                    "{name}: some left out"
                );
                let read: Vec<LinkAttribute> = full
                    .attributes
                    .into_iter()
                    .filter(|a| LINK_ATTRIBUTES_READ.contains(&a.kind()))
                    .collect();
                assert_eq!(light.header, full.header, "{name}");
                assert_eq!(light.attributes, read, "{name}");
                let has = |f: &dyn Fn(&LinkAttribute) -> bool| light.attributes.iter().any(f);
                assert!(has(&|a| matches!(a, LinkAttribute::IfName(n) if n == name)));
                assert!(has(&|a| matches!(a, LinkAttribute::Mtu(_))), "{name}");
                assert!(has(&|a| matches!(a, LinkAttribute::OperState(_))), "{name}");
                if name != "lo" {
                    assert!(has(&|a| matches!(a, LinkAttribute::LinkInfo(_))), "{name}");
                    assert!(has(&|a| matches!(a, LinkAttribute::Address(_))), "{name}");
                }
            }
            let port = nl.link_by_name("tv0").expect("tv0");
            let bridge = nl.link_by_name("tbr0").expect("tbr0").header.index;
            assert!(port.attributes.contains(&LinkAttribute::Controller(bridge)));
            assert!(port
                .attributes
                .contains(&LinkAttribute::IfAlias("a port".to_owned())));
            let conf = nl.inet_conf("tv0").expect("tv0's IPv4 settings");
            assert_eq!(conf.index, port.header.index);
            assert!(conf.conf.is_some(), "IFLA_AF_SPEC read in full");
            assert!(nl.inet_conf("tv9").is_err(), "no such link");
        }));
    }
}

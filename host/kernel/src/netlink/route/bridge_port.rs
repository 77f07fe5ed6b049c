//! A bridge port's settings (`IFLA_BRPORT_*`): its hairpin mode, and all
//! it can be given, read and given back.

use netlink_packet_core::{DefaultNla, Nla, NLA_TYPE_MASK, NLM_F_DUMP};
use netlink_packet_route::link::{
    InfoBridgePort, InfoPortData, LinkAttribute, LinkInfo, LinkMessage, LinkProtoInfoBridge,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::error::NlError;
use super::link::{check_index, link_at};
use super::socket::Netlink;

/// A bridge port's settings as raw `IFLA_BRPORT_*` (type, value) pairs.
pub type PortOptions = Vec<(u16, Vec<u8>)>;

/// `IFLA_BRPORT_MODE` (hairpin), inside a bridge port's `IFLA_PROTINFO`.
const IFLA_BRPORT_MODE: u16 = 4;
/// The `IFLA_BRPORT_*` settings a port can be given (priority, cost, mode,
/// guard, protect, fast leave, learning, unicast flood, proxy ARP, proxy
/// ARP wifi, multicast router, multicast flood, multicast to unicast,
/// vlan tunnel, broadcast flood, group forward mask, neighbour suppress,
/// isolated); the rest are state the bridge reports.
const WRITABLE_BRPORT: &[u16] = &[
    2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 25, 27, 28, 29, 30, 31, 32, 33,
];

impl Netlink {
    /// The bridge port's hairpin mode (`IFLA_BRPORT_MODE`), `None` if the
    /// link is not a bridge port: read from the link's own
    /// `IFLA_INFO_SLAVE_DATA` (one lookup, whatever the bridge's size).
    pub fn hairpin(&mut self, index: u32) -> Result<Option<bool>, NlError> {
        check_index(index)?;
        let msg = self.link_by_index(index)?;
        for attr in &msg.attributes {
            let LinkAttribute::LinkInfo(infos) = attr else {
                continue;
            };
            for info in infos {
                if let LinkInfo::PortData(InfoPortData::BridgePort(port)) = info {
                    return Ok(Some(
                        port.iter()
                            .any(|p| matches!(p, InfoBridgePort::HairpinMode(true))),
                    ));
                }
            }
        }
        Ok(None)
    }

    /// Sets hairpin mode on a bridge port (`AF_BRIDGE` `RTM_SETLINK` with
    /// `IFLA_PROTINFO`/`IFLA_BRPORT_MODE`).
    pub fn set_hairpin(&mut self, index: u32, on: bool) -> Result<(), NlError> {
        let mut msg = link_at(index)?;
        msg.header.interface_family = AddressFamily::Bridge;
        // netlink-packet-route 0.34 has no typed IFLA_BRPORT_MODE inside
        // IFLA_PROTINFO; the attribute is a plain u8. The enclosing
        // IFLA_PROTINFO carries NLA_F_NESTED, which the bridge requires
        // (without it the payload is read as a bare port state).
        msg.attributes.push(LinkAttribute::ProtoInfoBridge(vec![
            LinkProtoInfoBridge::Other(DefaultNla::new(IFLA_BRPORT_MODE, vec![u8::from(on)])),
        ]));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// The settings of bridge port `index` a port can be given back
    /// (`IFLA_BRPORT_*` inside `IFLA_PROTINFO`: hairpin, learning, flood,
    /// isolated, cost, priority, ...), as raw (type, value) pairs; `None`
    /// if it is not a bridge port.
    pub fn bridge_port(&mut self, index: u32) -> Result<Option<PortOptions>, NlError> {
        check_index(index)?;
        let mut req = LinkMessage::default();
        req.header.interface_family = AddressFamily::Bridge;
        let answers = self.request(RouteNetlinkMessage::GetLink(req), NLM_F_DUMP)?;
        let Some(port) = answers.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) if l.header.index == index => Some(l),
            _ => None,
        }) else {
            return Ok(None);
        };
        let mut out = Vec::new();
        for attr in &port.attributes {
            let LinkAttribute::ProtoInfoBridge(infos) = attr else {
                continue;
            };
            for info in infos {
                if let LinkProtoInfoBridge::Other(nla) = info {
                    let kind = nla.kind() & NLA_TYPE_MASK;
                    if WRITABLE_BRPORT.contains(&kind) {
                        let mut value = vec![0; nla.value_len()];
                        nla.emit_value(&mut value);
                        out.push((kind, value));
                    }
                }
            }
        }
        Ok(Some(out))
    }

    /// Gives bridge port `index` the settings `options` (from
    /// [`Netlink::bridge_port`]).
    pub fn set_bridge_port(
        &mut self,
        index: u32,
        options: &[(u16, Vec<u8>)],
    ) -> Result<(), NlError> {
        if options.is_empty() {
            return Ok(());
        }
        let mut msg = link_at(index)?;
        msg.header.interface_family = AddressFamily::Bridge;
        msg.attributes.push(LinkAttribute::ProtoInfoBridge(
            options
                .iter()
                .map(|(k, v)| LinkProtoInfoBridge::Other(DefaultNla::new(*k, v.clone())))
                .collect(),
        ));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }
}

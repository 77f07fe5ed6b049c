//! Per-port bridge VLAN entries (what `bridge vlan show|add|del dev PORT
//! master` does), over the same rtnetlink socket as [`super::route`]: the
//! `AF_BRIDGE` flavour of `RTM_GETLINK` / `RTM_SETLINK` / `RTM_DELLINK`
//! with `IFLA_AF_SPEC` carrying `IFLA_BRIDGE_VLAN_INFO`, and the bridge's
//! own `IFLA_BR_VLAN_FILTERING`.
//!
//! A kernel built without `CONFIG_BRIDGE_VLAN_FILTERING` keeps no VLAN
//! entries (a port lists none) and refuses to add or delete one
//! (EOPNOTSUPP).

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP};
use netlink_packet_route::link::{
    AfSpecBridge, BridgeFlag, BridgeVlanInfo, BridgeVlanInfoFlags, InfoBridge, InfoData, InfoKind,
    LinkAttribute, LinkExtentMask, LinkInfo, LinkMessage,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use serde::{Deserialize, Serialize};

use super::route::{check_index, Netlink, NlError};

/// One VLAN of a bridge port, as `bridge vlan show dev PORT` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortVlan {
    /// The VLAN id, 1..=4094.
    pub vid: u16,
    /// `BRIDGE_VLAN_INFO_PVID`: untagged frames the port receives go to
    /// this VLAN (a port has at most one).
    pub pvid: bool,
    /// `BRIDGE_VLAN_INFO_UNTAGGED`: the port sends this VLAN's frames
    /// without a tag.
    pub untagged: bool,
}

/// The highest VLAN id (`VLAN_VID_MASK` - 1: 4095 is reserved).
const MAX_VID: u16 = 4094;

impl PortVlan {
    /// The `IFLA_BRIDGE_VLAN_INFO` flags that add this entry.
    fn flags(&self) -> BridgeVlanInfoFlags {
        let mut flags = BridgeVlanInfoFlags::empty();
        if self.pvid {
            flags |= BridgeVlanInfoFlags::Pvid;
        }
        if self.untagged {
            flags |= BridgeVlanInfoFlags::Untagged;
        }
        flags
    }
}

impl Netlink {
    /// The VLAN entries of bridge port `index`, one per VID in ascending
    /// order, as `bridge vlan show dev PORT` reports them: an `AF_BRIDGE`
    /// `RTM_GETLINK` dump with `IFLA_EXT_MASK` =
    /// `RTEXT_FILTER_BRVLAN_COMPRESSED` (the kernel filters such a dump by
    /// nothing: the port's own message is picked here), its `IFLA_AF_SPEC`
    /// / `IFLA_BRIDGE_VLAN_INFO` entries read, ranges
    /// (`BRIDGE_VLAN_INFO_RANGE_BEGIN` .. `_END`) expanded. Empty if the
    /// link is no bridge port (a bridge itself included: its own entries
    /// are not a port's) or the kernel keeps no VLANs; ENODEV if there is
    /// no such link.
    pub fn port_vlans(&mut self, index: u32) -> Result<Vec<PortVlan>, NlError> {
        check_index(index)?;
        let mut req = LinkMessage::default();
        req.header.interface_family = AddressFamily::Bridge;
        req.attributes.push(LinkAttribute::ExtMask(vec![
            LinkExtentMask::BrvlanCompressed,
        ]));
        let answers = self.request(RouteNetlinkMessage::GetLink(req), NLM_F_DUMP)?;
        // The bridge answers for each of its ports (master side:
        // IFLA_MASTER is the bridge's index) and for itself (IFLA_MASTER
        // is then the bridge's own index, which is no port); a port whose
        // driver is itself a switch answers once more for itself, after
        // its bridge's answer.
        let port = answers.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l)
                if l.header.index == index
                    && l.attributes.iter().any(
                        |a| matches!(a, LinkAttribute::Controller(m) if *m != index && *m != 0),
                    ) =>
            {
                Some(l)
            }
            _ => None,
        });
        let Some(port) = port else {
            // ENODEV for a link that does not exist; else no port.
            self.link_by_index(index)?;
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut range_start: Option<u16> = None;
        let infos = port.attributes.iter().flat_map(|a| match a {
            LinkAttribute::AfSpecBridge(spec) => spec.as_slice(),
            _ => &[],
        });
        for info in infos {
            let AfSpecBridge::VlanInfo(BridgeVlanInfo { flags, vid }) = info else {
                continue;
            };
            let entry = |vid| PortVlan {
                vid,
                pvid: flags.contains(BridgeVlanInfoFlags::Pvid),
                untagged: flags.contains(BridgeVlanInfoFlags::Untagged),
            };
            if flags.contains(BridgeVlanInfoFlags::RangeBegin) {
                if range_start.replace(*vid).is_some() {
                    return Err(bad_range(*vid));
                }
            } else if flags.contains(BridgeVlanInfoFlags::RangeEnd) {
                match range_start.take() {
                    Some(start) if start <= *vid => out.extend((start..=*vid).map(entry)),
                    _ => return Err(bad_range(*vid)),
                }
            } else if range_start.is_some() {
                return Err(bad_range(*vid));
            } else {
                out.push(entry(*vid));
            }
        }
        if let Some(start) = range_start {
            return Err(bad_range(start));
        }
        out.sort_by_key(|v| v.vid);
        out.dedup_by_key(|v| v.vid);
        Ok(out)
    }

    /// Adds VLAN `v.vid` to bridge port `index`, or changes its flags if
    /// the port has it (`bridge vlan add dev PORT vid N [pvid] [untagged]
    /// master`): an `AF_BRIDGE` `RTM_SETLINK` whose `IFLA_AF_SPEC` holds
    /// `IFLA_BRIDGE_FLAGS` = `BRIDGE_FLAGS_MASTER` and
    /// `IFLA_BRIDGE_VLAN_INFO` {`PVID`|`UNTAGGED` as asked, vid}. A new PVID
    /// takes that role from the port's previous one. EINVAL for a VID
    /// outside 1..=4094 (nothing sent); EOPNOTSUPP if the link is no
    /// bridge port or the kernel has no bridge VLAN filtering.
    pub fn add_port_vlan(&mut self, index: u32, v: &PortVlan) -> Result<(), NlError> {
        let msg = port_vlan_message(index, v.vid, v.flags())?;
        self.request(RouteNetlinkMessage::SetLink(msg), NLM_F_ACK)
            .map(drop)
    }

    /// Removes VLAN `vid` from bridge port `index` (`bridge vlan del dev
    /// PORT vid N master`): an `AF_BRIDGE` `RTM_DELLINK` (which deletes no
    /// link: the bridge handles it) whose `IFLA_AF_SPEC` holds
    /// `IFLA_BRIDGE_FLAGS` = `BRIDGE_FLAGS_MASTER` and
    /// `IFLA_BRIDGE_VLAN_INFO` {0, vid}. EINVAL for a VID outside 1..=4094
    /// (nothing sent); EOPNOTSUPP if the link is no bridge port. The
    /// bridge ignores a VID the port does not have (`br_vlan_info` drops
    /// `nbp_vlan_delete`'s error): that succeeds, as does any deletion on
    /// a kernel without bridge VLAN filtering.
    pub fn del_port_vlan(&mut self, index: u32, vid: u16) -> Result<(), NlError> {
        let msg = port_vlan_message(index, vid, BridgeVlanInfoFlags::empty())?;
        self.request(RouteNetlinkMessage::DelLink(msg), NLM_F_ACK)
            .map(drop)
    }

    /// Makes the VLAN entries of bridge port `index` exactly `vlans`:
    /// deletes the VIDs not listed, then adds each listed entry whose
    /// flags differ from what the port has (the one with `pvid` last, so
    /// the PVID ends there).
    pub fn set_port_vlans(&mut self, index: u32, vlans: &[PortVlan]) -> Result<(), NlError> {
        let now = self.port_vlans(index)?;
        for old in &now {
            if !vlans.iter().any(|v| v.vid == old.vid) {
                self.del_port_vlan(index, old.vid)?;
            }
        }
        // The PVID first leaves the entry that has it (adding another
        // entry with the flag moves it there), then every entry is added
        // as asked (re-adding a VID replaces its flags).
        for v in vlans
            .iter()
            .filter(|v| !v.pvid)
            .chain(vlans.iter().filter(|v| v.pvid))
        {
            if !now.contains(v) {
                self.add_port_vlan(index, v)?;
            }
        }
        Ok(())
    }

    /// Whether bridge `index` filters by VLAN (`IFLA_BR_VLAN_FILTERING` in
    /// its `IFLA_LINKINFO` / `IFLA_INFO_DATA`, read with `RTM_GETLINK`);
    /// `None` if the link is no bridge. A bridge that does not report the
    /// attribute (a kernel without bridge VLAN filtering may not) does not
    /// filter: `Some(false)`.
    pub fn bridge_vlan_filtering(&mut self, index: u32) -> Result<Option<bool>, NlError> {
        check_index(index)?;
        let msg = self.link_by_index(index)?;
        let mut bridge = false;
        let mut filtering = false;
        for attr in &msg.attributes {
            let LinkAttribute::LinkInfo(infos) = attr else {
                continue;
            };
            for info in infos {
                match info {
                    LinkInfo::Kind(InfoKind::Bridge) => bridge = true,
                    LinkInfo::Data(InfoData::Bridge(data)) => {
                        for d in data {
                            if let InfoBridge::VlanFiltering(on) = d {
                                filtering = *on;
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(bridge.then_some(filtering))
    }
}

/// The `AF_BRIDGE` link message that adds or deletes VLAN `vid` (with
/// `flags`) on port `index`, through its bridge (`BRIDGE_FLAGS_MASTER`).
fn port_vlan_message(
    index: u32,
    vid: u16,
    flags: BridgeVlanInfoFlags,
) -> Result<LinkMessage, NlError> {
    // The kernel refuses these too (EINVAL); 0 and 4095 are no VLANs.
    if !(1..=MAX_VID).contains(&vid) {
        return Err(NlError::Kernel(libc::EINVAL));
    }
    check_index(index)?;
    let mut msg = LinkMessage::default();
    msg.header.interface_family = AddressFamily::Bridge;
    msg.header.index = index;
    msg.attributes.push(LinkAttribute::AfSpecBridge(vec![
        AfSpecBridge::Flags(BridgeFlag::Controller),
        AfSpecBridge::VlanInfo(BridgeVlanInfo { flags, vid }),
    ]));
    Ok(msg)
}

/// A VLAN range the kernel would never send (an end without a begin, a
/// begin without an end, an end below its begin).
fn bad_range(vid: u16) -> NlError {
    NlError::Decode(format!(
        "malformed IFLA_BRIDGE_VLAN_INFO range at VID {vid}"
    ))
}

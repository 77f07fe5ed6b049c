//! Links: reading them (kept answers, by index or name), creating each
//! kind wasmcni makes, and changing their settings.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::Ordering;

use netlink_packet_core::{DefaultNla, NLM_F_ACK, NLM_F_DUMP};
use netlink_packet_route::link::{
    InfoBridge, InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoVeth, InfoVlan, InfoVrf,
    IpVlanMode, LinkAttribute, LinkExtentMask, LinkFlags, LinkInfo, LinkMessage, MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::cache::{LinkCache, Which, CHANGES};
use super::error::{einval, NlError};
use super::socket::{Netlink, CREATE_EXCL};

impl Netlink {
    /// Every link in the namespace.
    pub fn links(&mut self) -> Result<Vec<LinkMessage>, NlError> {
        let answers = self.request(RouteNetlinkMessage::GetLink(link_query()), NLM_F_DUMP)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .collect())
    }

    /// Keeps each link answer (by index or by name) until this process
    /// asks for any change ([`CHANGES`]) or `on` is false again, and
    /// answers a request for the same link from it: one host call's checks
    /// and its action read one link several times. Off by default, and for
    /// every reader that waits for a link to change (the kernel changes a
    /// link's carrier and operational state on its own).
    pub fn keep_links(&mut self, on: bool) {
        self.links = LinkCache::new(on);
    }

    /// One link, by index.
    pub fn link_by_index(&mut self, index: u32) -> Result<LinkMessage, NlError> {
        if let Some(link) = self.links.find(Which::Index(index)) {
            return Ok(link);
        }
        let mut msg = link_query();
        msg.header.index = index;
        self.single_link(msg)
    }

    /// One link, by name (its own, or one of its alternative names).
    pub fn link_by_name(&mut self, name: &str) -> Result<LinkMessage, NlError> {
        if let Some(link) = self.links.find(Which::Name(name)) {
            return Ok(link);
        }
        let mut msg = link_query();
        msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
        self.single_link(msg)
    }

    fn single_link(&mut self, msg: LinkMessage) -> Result<LinkMessage, NlError> {
        let asked_at = CHANGES.load(Ordering::Relaxed);
        let answers = self.request(RouteNetlinkMessage::GetLink(msg), 0)?;
        let link = answers
            .into_iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .ok_or(NlError::Kernel(libc::ENODEV))?;
        if let Some(raw) = self.buf.get(self.last_answer.clone()) {
            self.links.keep(&link, raw, asked_at);
        }
        Ok(link)
    }

    /// Sets `IFF_UP` on a link, or clears it.
    pub fn set_link_up(&mut self, index: u32, up: bool) -> Result<(), NlError> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.header.change_mask = LinkFlags::Up;
        if up {
            msg.header.flags = LinkFlags::Up;
        }
        self.request(RouteNetlinkMessage::SetLink(msg), NLM_F_ACK)?;
        Ok(())
    }
}

/// A link request (`RTM_GETLINK`) that leaves the link's counters out of
/// the answer (`RTEXT_FILTER_SKIP_STATS`: `IFLA_STATS`, `IFLA_STATS64`,
/// IPv6's statistics; nothing here reads them): a third of a veth's answer,
/// which the kernel would fill and wasmcni parse on every read of a link.
pub(super) fn link_query() -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    msg
}

/// Attributes any new link may set.
#[derive(Debug, Clone, Default)]
pub struct LinkOpts {
    /// `IFLA_MTU`.
    pub mtu: Option<u32>,
    /// `IFLA_ADDRESS`.
    pub mac: Option<Vec<u8>>,
    /// `IFLA_TXQLEN`.
    pub txqlen: Option<u32>,
}

/// A link created on a master link.
#[derive(Debug, Clone, Copy)]
pub enum SubKind {
    /// macvlan, with `IFLA_MACVLAN_MODE` (`MACVLAN_MODE_*` value) and
    /// `IFLA_MACVLAN_BC_QUEUE_LEN` if given.
    Macvlan(u32, Option<u32>),
    /// ipvlan, with `IFLA_IPVLAN_MODE` (`IPVLAN_MODE_*` value).
    Ipvlan(u16),
    /// 802.1Q vlan with this id.
    Vlan(u16),
}

/// `IFLA_IFALIAS`.
const IFLA_IFALIAS: u16 = 20;
/// Longest alias the kernel keeps (`IFALIASZ` - 1).
const MAX_ALIAS: usize = 255;

/// A name the kernel will give a link exactly as written. The kernel
/// itself rejects most bad names (`dev_valid_name`), but it treats an empty
/// name or one containing `%` as a template ("veth%d" becomes "veth0"), and
/// a NUL would silently truncate the name: those must never reach it.
pub(super) fn check_ifname(name: &str) -> Result<(), NlError> {
    let valid = !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'%' || b == b'/' || b == b':' || b <= b' ' || b == 0x7f);
    if valid {
        Ok(())
    } else {
        einval()
    }
}

/// A link index the kernel will look up by index. Index 0 (or one that is
/// negative as the kernel's `int`) would make it fall back to looking the
/// link up by `IFLA_IFNAME`, i.e. act on some other link.
pub(in crate::netlink) fn check_index(index: u32) -> Result<(), NlError> {
    if index == 0 || i32::try_from(index).is_err() {
        Err(NlError::Kernel(libc::ENODEV))
    } else {
        Ok(())
    }
}

/// An Ethernet hardware address (every kind wasmcni creates is Ethernet).
fn check_ether(mac: &[u8]) -> Result<(), NlError> {
    if mac.len() == 6 {
        Ok(())
    } else {
        einval()
    }
}

/// A new-link message: name, MTU, hardware address.
fn new_link(
    name: &str,
    mtu: Option<u32>,
    mac: Option<&[u8]>,
    txqlen: Option<u32>,
) -> Result<LinkMessage, NlError> {
    check_ifname(name)?;
    let mut msg = LinkMessage::default();
    msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
    if let Some(mtu) = mtu {
        msg.attributes.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(q) = txqlen {
        msg.attributes.push(LinkAttribute::TxQueueLen(q));
    }
    if let Some(mac) = mac {
        check_ether(mac)?;
        msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
    }
    Ok(msg)
}

/// `IFLA_LINKINFO` with a kind and, optionally, its data.
fn link_info(kind: InfoKind, data: Option<InfoData>) -> LinkAttribute {
    let mut info = vec![LinkInfo::Kind(kind)];
    if let Some(d) = data {
        info.push(LinkInfo::Data(d));
    }
    LinkAttribute::LinkInfo(info)
}

/// A message addressing link `index` (for `RTM_SETLINK` and friends).
pub(super) fn link_at(index: u32) -> Result<LinkMessage, NlError> {
    check_index(index)?;
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    Ok(msg)
}

impl Netlink {
    /// Creates veth `name` here with its peer `peer` born in the namespace
    /// `peer_ns` (`IFLA_NET_NS_FD` in the peer's info). `opts.mtu` applies
    /// to both ends, `opts.mac` to `name`, `peer_mac` to the peer.
    pub fn create_veth(
        &mut self,
        name: &str,
        opts: &LinkOpts,
        peer: &str,
        peer_ns: BorrowedFd<'_>,
        peer_mac: Option<&[u8]>,
    ) -> Result<(), NlError> {
        let mut peer_msg = new_link(peer, opts.mtu, peer_mac, opts.txqlen)?;
        // The descriptor is borrowed for the whole (synchronous) request.
        peer_msg
            .attributes
            .push(LinkAttribute::NetNsFd(peer_ns.as_raw_fd()));
        let mut msg = new_link(name, opts.mtu, opts.mac.as_deref(), opts.txqlen)?;
        msg.attributes.push(link_info(
            InfoKind::Veth,
            Some(InfoData::Veth(InfoVeth::Peer(peer_msg))),
        ));
        self.ack(RouteNetlinkMessage::NewLink(msg), CREATE_EXCL)
    }

    /// Creates a bridge.
    pub fn create_bridge(
        &mut self,
        name: &str,
        opts: &LinkOpts,
        vlan_filtering: bool,
    ) -> Result<(), NlError> {
        let mut msg = new_link(name, opts.mtu, opts.mac.as_deref(), opts.txqlen)?;
        // Off is the kernel's default. IFLA_BR_VLAN_FILTERING is only sent
        // to turn it on: a kernel built without CONFIG_BRIDGE_VLAN_FILTERING
        // refuses the attribute (EOPNOTSUPP) whatever its value.
        let data = vlan_filtering.then(|| InfoData::Bridge(vec![InfoBridge::VlanFiltering(true)]));
        msg.attributes.push(link_info(InfoKind::Bridge, data));
        self.ack(RouteNetlinkMessage::NewLink(msg), CREATE_EXCL)
    }

    /// Creates a dummy link.
    pub fn create_dummy(&mut self, name: &str, opts: &LinkOpts) -> Result<(), NlError> {
        let mut msg = new_link(name, opts.mtu, opts.mac.as_deref(), opts.txqlen)?;
        msg.attributes.push(link_info(InfoKind::Dummy, None));
        self.ack(RouteNetlinkMessage::NewLink(msg), CREATE_EXCL)
    }

    /// Creates a VRF device bound to routing table `table`.
    pub fn create_vrf(&mut self, name: &str, table: u32, opts: &LinkOpts) -> Result<(), NlError> {
        let mut msg = new_link(name, opts.mtu, opts.mac.as_deref(), opts.txqlen)?;
        msg.attributes.push(link_info(
            InfoKind::Vrf,
            Some(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
        ));
        self.ack(RouteNetlinkMessage::NewLink(msg), CREATE_EXCL)
    }

    /// Creates an `ifb` link (down, as the kernel creates it).
    pub fn create_ifb(&mut self, name: &str, opts: &LinkOpts) -> Result<(), NlError> {
        let mut msg = new_link(name, opts.mtu, opts.mac.as_deref(), opts.txqlen)?;
        msg.attributes.push(link_info(InfoKind::Ifb, None));
        self.ack(RouteNetlinkMessage::NewLink(msg), CREATE_EXCL)
    }

    /// Creates a macvlan / ipvlan / vlan on `master` (a link of this
    /// socket's namespace), born in `target` (`IFLA_NET_NS_FD`) if given.
    pub fn create_sub(
        &mut self,
        master: u32,
        kind: SubKind,
        name: &str,
        opts: &LinkOpts,
        target: Option<BorrowedFd<'_>>,
    ) -> Result<(), NlError> {
        check_index(master)?;
        let mut msg = new_link(name, opts.mtu, opts.mac.as_deref(), opts.txqlen)?;
        msg.attributes.push(LinkAttribute::Link(master));
        if let Some(fd) = target {
            msg.attributes.push(LinkAttribute::NetNsFd(fd.as_raw_fd()));
        }
        let info = match kind {
            SubKind::Macvlan(mode, bc_queue_len) => {
                let mut data = vec![InfoMacVlan::Mode(MacVlanMode::from(mode))];
                data.extend(bc_queue_len.map(InfoMacVlan::BcQueueLen));
                link_info(InfoKind::MacVlan, Some(InfoData::MacVlan(data)))
            }
            SubKind::Ipvlan(mode) => link_info(
                InfoKind::IpVlan,
                Some(InfoData::IpVlan(vec![InfoIpVlan::Mode(IpVlanMode::from(
                    mode,
                ))])),
            ),
            SubKind::Vlan(id) => {
                link_info(InfoKind::Vlan, Some(InfoData::Vlan(vec![InfoVlan::Id(id)])))
            }
        };
        msg.attributes.push(info);
        self.ack(RouteNetlinkMessage::NewLink(msg), CREATE_EXCL)
    }

    /// Moves link `index` to namespace `target`, renamed to `new_name` if
    /// given, in one `RTM_NEWLINK` (`IFLA_NET_NS_FD` + `IFLA_IFNAME`). With
    /// `new_index` the kernel gives it that index in the target
    /// (`IFLA_NEW_IFINDEX`), so a link that goes back where it came from
    /// gets its old index back; that fails (EBUSY, EEXIST) if it is taken.
    pub fn set_netns(
        &mut self,
        index: u32,
        target: BorrowedFd<'_>,
        new_name: Option<&str>,
        new_index: Option<u32>,
    ) -> Result<(), NlError> {
        let mut msg = link_at(index)?;
        msg.attributes
            .push(LinkAttribute::NetNsFd(target.as_raw_fd()));
        if let Some(name) = new_name {
            check_ifname(name)?;
            msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
        }
        if let Some(i) = new_index {
            let i = i32::try_from(i).map_err(|_| NlError::Kernel(libc::EINVAL))?;
            msg.attributes.push(LinkAttribute::NewIfIndex(i));
        }
        // No NLM_F_CREATE: this only ever modifies the existing link.
        self.ack(RouteNetlinkMessage::NewLink(msg), 0)
    }

    /// Sets the MTU.
    pub fn set_mtu(&mut self, index: u32, mtu: u32) -> Result<(), NlError> {
        let mut msg = link_at(index)?;
        msg.attributes.push(LinkAttribute::Mtu(mtu));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Sets the hardware address.
    pub fn set_mac(&mut self, index: u32, mac: &[u8]) -> Result<(), NlError> {
        let mut msg = link_at(index)?;
        // The kernel copies exactly the link's address length from
        // IFLA_ADDRESS and ignores the rest: refuse a length that does not
        // match, instead of setting a truncated address.
        let current = self.link_by_index(index)?;
        let len = current.attributes.iter().find_map(|a| match a {
            LinkAttribute::Address(m) => Some(m.len()),
            _ => None,
        });
        if len.is_some_and(|l| l != mac.len()) || mac.is_empty() {
            return einval();
        }
        msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Enslaves to `master`, or frees (`None`: `IFLA_MASTER` = 0).
    pub fn set_master(&mut self, index: u32, master: Option<u32>) -> Result<(), NlError> {
        let mut msg = link_at(index)?;
        let master = match master {
            // 0 would free the link instead; the kernel answers EINVAL for
            // a master that does not exist, and so do we.
            Some(m) => {
                if check_index(m).is_err() {
                    return einval();
                }
                m
            }
            None => 0,
        };
        msg.attributes.push(LinkAttribute::Controller(master));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Sets or clears `IFF_PROMISC`.
    pub fn set_promisc(&mut self, index: u32, on: bool) -> Result<(), NlError> {
        let mut msg = link_at(index)?;
        msg.header.change_mask = LinkFlags::Promisc;
        if on {
            msg.header.flags = LinkFlags::Promisc;
        }
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Sets or clears `IFF_ALLMULTI`.
    pub fn set_allmulti(&mut self, index: u32, on: bool) -> Result<(), NlError> {
        let mut msg = link_at(index)?;
        msg.header.change_mask = LinkFlags::Allmulti;
        if on {
            msg.header.flags = LinkFlags::Allmulti;
        }
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Sets `IFLA_TXQLEN`.
    pub fn set_txqlen(&mut self, index: u32, txqlen: u32) -> Result<(), NlError> {
        if txqlen > i32::MAX as u32 {
            return einval();
        }
        let mut msg = link_at(index)?;
        msg.attributes.push(LinkAttribute::TxQueueLen(txqlen));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Renames.
    pub fn set_name(&mut self, index: u32, name: &str) -> Result<(), NlError> {
        check_ifname(name)?;
        let mut msg = link_at(index)?;
        msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Sets `IFLA_IFALIAS`; an empty alias clears it.
    pub fn set_alias(&mut self, index: u32, alias: &str) -> Result<(), NlError> {
        if alias.len() > MAX_ALIAS || alias.contains('\0') {
            return einval();
        }
        let mut msg = link_at(index)?;
        // Sent as iproute2 does, without a NUL: the kernel counts a NUL
        // against the 255-byte limit (ERANGE for a 255-byte alias sent as
        // `LinkAttribute::IfAlias`), and a zero-length IFLA_IFALIAS removes
        // the alias where "" with its NUL would set an empty one.
        msg.attributes.push(LinkAttribute::Other(DefaultNla::new(
            IFLA_IFALIAS,
            alias.as_bytes().to_vec(),
        )));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Sets a link's group (`IFLA_GROUP`).
    pub fn set_group(&mut self, index: u32, group: u32) -> Result<(), NlError> {
        let mut msg = link_at(index)?;
        msg.attributes.push(LinkAttribute::Group(group));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }
}

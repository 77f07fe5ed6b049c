//! A small typed, synchronous rtnetlink (`NETLINK_ROUTE`) client.
//!
//! Why synchronous (and not `rtnetlink`'s async API): every host call a
//! plugin makes is synchronous, one at a time, and every CNI invocation is a
//! fresh process, so start-up is the hot path. A blocking socket needs no
//! async runtime and no extra threads; `netlink-packet-route` still gives us
//! typed messages. The socket is created inside the namespace it acts on
//! ([`NetNs::run_inside`]) and stays bound to it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use netlink_packet_core::{
    DecodeError, DefaultNla, NetlinkHeader, NetlinkMessage, NetlinkPayload, Nla, NLA_F_NESTED,
    NLA_TYPE_MASK, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressProtocol,
    AddressScope,
};
use netlink_packet_route::link::{
    AfSpecInet, AfSpecUnspec, InetDevConf, InfoBridge, InfoBridgePort, InfoData, InfoIpVlan,
    InfoKind, InfoMacVlan, InfoPortData, InfoVeth, InfoVlan, InfoVrf, IpVlanMode, LinkAttribute,
    LinkExtentMask, LinkFlags, LinkInfo, LinkMessage, LinkProtoInfoBridge, MacVlanMode,
};
use netlink_packet_route::neighbour::{NeighbourMessage, NeighbourState};
use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteMetric,
    RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::raw;

use crate::netns::NetNs;

/// A netlink failure.
#[derive(Debug, thiserror::Error)]
pub enum NlError {
    /// The kernel answered with an errno.
    #[error("kernel: {}", io::Error::from_raw_os_error(*.0))]
    Kernel(i32),
    /// The socket failed.
    #[error("netlink socket: {0}")]
    Io(#[from] io::Error),
    /// The kernel's answer could not be decoded.
    #[error("netlink decode: {0}")]
    Decode(String),
}

impl NlError {
    /// The errno this failure stands for.
    pub fn errno(&self) -> i32 {
        match self {
            NlError::Kernel(e) => *e,
            NlError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            NlError::Decode(_) => libc::EIO,
        }
    }
}

/// A route-netlink socket bound inside one namespace.
pub struct Netlink {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
    links: LinkCache,
    /// Where in `buf` the last answer `request` took lies.
    last_answer: std::ops::Range<usize>,
}

/// How many changes to the kernel's links and their settings this process
/// has asked for: every rtnetlink request but a read ([`Netlink::request`])
/// and every change made another way ([`note_change`]). A kept link answer
/// stands only while this is what it was when the answer came.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// Notes a change this process makes to a link, or to what a link's answer
/// carries, other than by an rtnetlink request (a sysctl written through
/// `/proc/sys`, a tap device created by ioctl), or a moment after which
/// what other processes changed must be seen (a lock taken, a native
/// delegate run). Every link answer kept until now is dropped
/// ([`Netlink::keep_links`]).
pub fn note_change() {
    CHANGES.fetch_add(1, Ordering::Relaxed);
}

/// Link answers kept while a caller asks for it ([`Netlink::keep_links`]).
#[derive(Default)]
struct LinkCache {
    on: bool,
    /// [`CHANGES`] when `answers` were read.
    at: u64,
    answers: Vec<Kept>,
}

/// A kept link answer: the link's index, its own name, and the answer as
/// the kernel sent it. Kept as bytes and parsed again when asked for: a
/// copy of the parsed message costs about half its parse, and most
/// answers are not asked for again.
struct Kept {
    index: u32,
    name: Option<String>,
    raw: Vec<u8>,
}

/// Which link a request asks for.
#[derive(Clone, Copy)]
enum Which<'a> {
    Index(u32),
    /// Found by the link's own name only (the kernel also finds a link by
    /// an alternative name).
    Name(&'a str),
}

impl LinkCache {
    /// The kept answer for the link asked for, if no change was asked for
    /// since it came.
    fn find(&mut self, which: Which<'_>) -> Option<LinkMessage> {
        if !self.on {
            return None;
        }
        let now = CHANGES.load(Ordering::Relaxed);
        if self.at != now {
            self.answers.clear();
            self.at = now;
            return None;
        }
        let kept = self.answers.iter().find(|k| match which {
            Which::Index(i) => k.index == i,
            Which::Name(n) => k.name.as_deref() == Some(n),
        })?;
        link_answer(&kept.raw)
    }

    /// Keeps `link` (`raw`: as the kernel sent it), the answer to a
    /// request sent when [`CHANGES`] was `asked_at`: not if a change was
    /// noted since.
    fn keep(&mut self, link: &LinkMessage, raw: &[u8], asked_at: u64) {
        if !self.on || CHANGES.load(Ordering::Relaxed) != asked_at {
            return;
        }
        if self.at != asked_at {
            self.answers.clear();
            self.at = asked_at;
        }
        let index = link.header.index;
        self.answers.retain(|k| k.index != index);
        let name = link.attributes.iter().find_map(|a| match a {
            LinkAttribute::IfName(n) => Some(n.clone()),
            _ => None,
        });
        self.answers.push(Kept {
            index,
            name,
            raw: raw.to_vec(),
        });
    }
}

/// The link in a kept answer.
fn link_answer(raw: &[u8]) -> Option<LinkMessage> {
    match deserialize(raw).ok()?.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) => Some(l),
        _ => None,
    }
}

/// `RTM_NEWLINK`: the kernel's answer about a link (and its notice of one).
const RTM_NEWLINK: u16 = 16;

/// The link attributes wasmcni reads, the only ones a link answer is
/// parsed for ([`deserialize`]). `IFLA_AF_SPEC` only in an `AF_BRIDGE`
/// answer (a port's VLANs); [`Netlink::inet_conf`], the one reader of a
/// link's IPv4 settings in it, parses its answer in full.
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
fn deserialize(bytes: &[u8]) -> Result<NetlinkMessage<RouteNetlinkMessage>, DecodeError> {
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

/// Whether `msg` only reads.
fn is_read(msg: &RouteNetlinkMessage) -> bool {
    use RouteNetlinkMessage as M;
    matches!(
        msg,
        M::GetLink(_)
            | M::GetAddress(_)
            | M::GetAddrLabel(_)
            | M::GetNeighbour(_)
            | M::GetNeighbourTable(_)
            | M::GetRoute(_)
            | M::GetQueueDiscipline(_)
            | M::GetTrafficClass(_)
            | M::GetTrafficFilter(_)
            | M::GetTrafficAction(_)
            | M::GetTrafficChain(_)
            | M::GetStats(_)
            | M::GetNsId(_)
            | M::GetRule(_)
    )
}

impl Netlink {
    /// Opens a socket inside `ns`.
    pub fn open(ns: &NetNs) -> Result<Netlink, NlError> {
        let socket = ns.run_inside(socket_here)?;
        Ok(Netlink {
            socket,
            seq: 0,
            buf: vec![0; 32 * 1024],
            links: LinkCache::default(),
            last_answer: 0..0,
        })
    }

    /// A socket in the namespace the calling thread is in (inside a
    /// [`NetNs::run_inside`], that namespace's).
    pub fn here() -> Result<Netlink, NlError> {
        Ok(Netlink {
            socket: socket_here()?,
            seq: 0,
            buf: vec![0; 32 * 1024],
            links: LinkCache::default(),
            last_answer: 0..0,
        })
    }

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

    /// Sends one request and collects every answer until the kernel says it
    /// is done (a dump) or acknowledges it.
    pub(super) fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        if !is_read(&msg) {
            note_change();
        }
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = self.seq;
        let mut req = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        req.finalize();
        let mut out = vec![0; req.buffer_len()];
        req.serialize(&mut out);
        self.socket.send(&out, 0)?;

        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut answers = Vec::new();
        loop {
            let n = self.socket.recv(&mut &mut self.buf[..], 0)?;
            let mut offset = 0;
            while offset < n {
                let start = offset;
                let bytes = &self.buf[offset..n];
                let msg = deserialize(bytes).map_err(|e| NlError::Decode(e.to_string()))?;
                let len = msg.header.length as usize;
                if len == 0 {
                    return Err(NlError::Decode("zero-length netlink message".into()));
                }
                offset += (len + 3) & !3;
                if msg.header.sequence_number != self.seq {
                    continue;
                }
                match msg.payload {
                    NetlinkPayload::Done(_) => return Ok(answers),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            Some(code) => Err(NlError::Kernel(-code.get())),
                            None => Ok(answers),
                        }
                    }
                    NetlinkPayload::InnerMessage(m) => {
                        self.last_answer = start..start + len;
                        answers.push(m);
                        if !dump && flags & NLM_F_ACK == 0 {
                            return Ok(answers);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

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
        self.links = LinkCache {
            on,
            ..LinkCache::default()
        };
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

/// A link request (`RTM_GETLINK`) that leaves the link's counters out of
/// the answer (`RTEXT_FILTER_SKIP_STATS`: `IFLA_STATS`, `IFLA_STATS64`,
/// IPv6's statistics; nothing here reads them): a third of a veth's answer,
/// which the kernel would fill and wasmcni parse on every read of a link.
fn link_query() -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    msg
}

/// A route socket in the calling thread's namespace.
fn socket_here() -> io::Result<Socket> {
    let mut s = Socket::new(NETLINK_ROUTE)?;
    s.bind_auto()?;
    s.connect(&SocketAddr::new(0, 0))?;
    // Dumps filtered by the kernel (addresses of one link); an older
    // kernel without it dumps everything, filtered here.
    let _ = s.set_netlink_get_strict_chk(true);
    Ok(s)
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

// ---------------------------------------------------------------------------
// Mutating operations (the full capability surface). Each is one request,
// acknowledged by the kernel (NLM_F_ACK); creations use NLM_F_CREATE |
// NLM_F_EXCL so an existing object is never silently reused.
// ---------------------------------------------------------------------------

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

/// Address flags a plugin may ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AddrFlags {
    /// `IFA_F_NODAD`.
    pub no_dad: bool,
    /// `IFA_F_NOPREFIXROUTE`.
    pub no_prefix_route: bool,
}

/// A unicast route, as wasmcni models it (what the WIT `route` carries,
/// plus the protocol that marks wasmcni's own routes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RouteSpec {
    /// Destination address (network).
    pub dst: IpAddr,
    /// Destination prefix length.
    pub dst_len: u8,
    /// `RTA_GATEWAY`.
    pub gateway: Option<IpAddr>,
    /// `RTA_OIF`.
    pub oif: Option<u32>,
    /// Routing table (`RT_TABLE_MAIN` = 254 by default).
    pub table: u32,
    /// `RTA_PRIORITY`.
    pub metric: Option<u32>,
    /// `rtm_scope` (`RT_SCOPE_*` value).
    pub scope: u8,
    /// `RTA_PREFSRC`.
    pub source: Option<IpAddr>,
    /// `RTAX_MTU`.
    pub mtu: Option<u32>,
    /// `RTNH_F_ONLINK`.
    pub onlink: bool,
    /// `rtm_protocol`.
    pub protocol: u8,
}

impl RouteSpec {
    /// The spec of a kernel route message; `None` for anything that is not
    /// a unicast route (local, broadcast, multipath, ...).
    pub fn from_message(msg: &RouteMessage) -> Option<RouteSpec> {
        let h = &msg.header;
        // Only plain unicast routes fit the model. Source-specific (`from`)
        // and TOS routes would lose their selector; a route through a
        // nexthop object, an `RTA_VIA` (IPv4 via IPv6) gateway or with a
        // lightweight-tunnel encapsulation could not be added back as
        // modelled: such routes are not unicast routes in wasmcni's sense.
        if h.kind != RouteType::Unicast || h.source_prefix_length != 0 || h.tos != 0 {
            return None;
        }
        let family = h.address_family;
        let mut spec = RouteSpec {
            dst: unspecified(family)?,
            dst_len: h.destination_prefix_length,
            gateway: None,
            oif: None,
            table: u32::from(h.table),
            metric: None,
            scope: u8::from(h.scope),
            source: None,
            mtu: None,
            onlink: h.flags.contains(RouteFlags::Onlink),
            protocol: u8::from(h.protocol),
        };
        for attr in &msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => spec.dst = route_ip(a, family)?,
                RouteAttribute::Gateway(a) => spec.gateway = Some(route_ip(a, family)?),
                RouteAttribute::PrefSource(a) => spec.source = Some(route_ip(a, family)?),
                RouteAttribute::Oif(i) => spec.oif = Some(*i),
                RouteAttribute::Table(t) => spec.table = *t,
                RouteAttribute::Priority(p) => spec.metric = Some(*p),
                RouteAttribute::Metrics(metrics) => {
                    for m in metrics {
                        if let RouteMetric::Mtu(mtu) = m {
                            spec.mtu = Some(*mtu);
                        }
                    }
                }
                RouteAttribute::MultiPath(_)
                | RouteAttribute::Via(_)
                | RouteAttribute::NhId(_)
                | RouteAttribute::Encap(_)
                | RouteAttribute::EncapType(_)
                | RouteAttribute::Source(_) => return None,
                _ => {}
            }
        }
        Some(spec)
    }
}

/// Whether route `msg` goes through link `index` (its output link, or one
/// of its multipath next hops).
pub fn route_uses_link(msg: &RouteMessage, index: u32) -> bool {
    msg.attributes.iter().any(|a| match a {
        RouteAttribute::Oif(i) => *i == index,
        RouteAttribute::MultiPath(hops) => hops.iter().any(|h| h.interface_index == index),
        _ => false,
    })
}

/// What the kernel identifies a route by, whatever its type: table,
/// destination, TOS and metric (`fib_table_insert` / `ip6_ins_rt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteKey {
    /// Routing table.
    pub table: u32,
    /// Destination network.
    pub dst: IpAddr,
    /// Destination prefix length.
    pub dst_len: u8,
    /// `rtm_tos`.
    pub tos: u8,
    /// The metric, with the kernel's default (IPv6: 1024) filled in.
    pub metric: u32,
}

impl RouteKey {
    /// The key of any kernel route message (local, multipath, ... too).
    pub fn of_message(msg: &RouteMessage) -> Option<RouteKey> {
        let h = &msg.header;
        let family = h.address_family;
        let mut key = RouteKey {
            table: u32::from(h.table),
            dst: unspecified(family)?,
            dst_len: h.destination_prefix_length,
            tos: h.tos,
            metric: 0,
        };
        for attr in &msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => key.dst = route_ip(a, family)?,
                RouteAttribute::Table(t) => key.table = *t,
                RouteAttribute::Priority(p) => key.metric = *p,
                _ => {}
            }
        }
        if key.dst.is_ipv6() && key.metric == 0 {
            key.metric = 1024;
        }
        Some(key)
    }

    /// The key of a modelled route.
    pub fn of_spec(s: &RouteSpec) -> RouteKey {
        RouteKey {
            table: s.table,
            dst: s.dst,
            dst_len: s.dst_len,
            tos: 0,
            metric: s
                .metric
                .filter(|m| *m != 0 || s.dst.is_ipv4())
                .unwrap_or(if s.dst.is_ipv6() { 1024 } else { 0 }),
        }
    }
}

/// The all-zero address of an IP family.
fn unspecified(family: AddressFamily) -> Option<IpAddr> {
    match family {
        AddressFamily::Inet => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        AddressFamily::Inet6 => Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
        _ => None,
    }
}

/// A route attribute's address, if it is an IP address of `family`.
fn route_ip(a: &RouteAddress, family: AddressFamily) -> Option<IpAddr> {
    match (a, family) {
        (RouteAddress::Inet(v4), AddressFamily::Inet) => Some(IpAddr::V4(*v4)),
        (RouteAddress::Inet6(v6), AddressFamily::Inet6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// How [`Netlink::add_route`] treats routes with the same key (table,
/// destination, TOS, metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteAdd {
    /// `NLM_F_CREATE | NLM_F_EXCL`: fail (EEXIST) if any route has the key.
    Exclusive,
    /// `NLM_F_CREATE`: add beside routes with the same key through other
    /// links (IPv6 keeps an `fe80::/64` per link); EEXIST only if this very
    /// route is there.
    Append,
    /// `NLM_F_CREATE | NLM_F_REPLACE`: replace the route with the key.
    Replace,
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

/// `NLM_F_CREATE | NLM_F_EXCL`: create, never reuse.
const CREATE_EXCL: u16 = NLM_F_CREATE | NLM_F_EXCL;
/// `IFLA_IFALIAS`.
const IFLA_IFALIAS: u16 = 20;
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
/// Longest alias the kernel keeps (`IFALIASZ` - 1).
const MAX_ALIAS: usize = 255;

fn einval<T>() -> Result<T, NlError> {
    Err(NlError::Kernel(libc::EINVAL))
}

/// A name the kernel will give a link exactly as written. The kernel
/// itself rejects most bad names (`dev_valid_name`), but it treats an empty
/// name or one containing `%` as a template ("veth%d" becomes "veth0"), and
/// a NUL would silently truncate the name: those must never reach it.
fn check_ifname(name: &str) -> Result<(), NlError> {
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
pub(super) fn check_index(index: u32) -> Result<(), NlError> {
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
/// The multicast group of link notices (`RTNLGRP_LINK`).
const RTNLGRP_LINK: u32 = 1;

/// The netlink messages in `buf`, as far as they decode.
fn messages(buf: &[u8]) -> impl Iterator<Item = NetlinkMessage<RouteNetlinkMessage>> + '_ {
    let mut offset = 0;
    std::iter::from_fn(move || {
        let msg = deserialize(buf.get(offset..)?).ok()?;
        let len = msg.header.length as usize;
        if len == 0 {
            return None;
        }
        offset += (len + 3) & !3;
        Some(msg)
    })
}

/// Whether `buf` holds the kernel's notice that link `index` is gone.
fn deletes(buf: &[u8], index: u32) -> bool {
    messages(buf).any(|m| {
        matches!(m.payload,
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(ref l)) if l.header.index == index)
    })
}

/// Who carries out a detached deletion, and how its answer comes back.
enum Deleter {
    /// A child process; its answer (0 or an errno) comes through a pipe.
    Child(std::fs::File),
    /// A thread of this process.
    Thread(std::sync::mpsc::Receiver<Result<(), NlError>>),
}

impl Deleter {
    /// The deletion's answer, if it has come.
    fn try_result(&self) -> Option<Result<(), NlError>> {
        match self {
            Deleter::Child(pipe) => {
                let mut pfd = libc::pollfd {
                    fd: pipe.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                if unsafe { libc::poll(&mut pfd, 1, 0) } <= 0 {
                    return None;
                }
                Some(self.result())
            }
            Deleter::Thread(rx) => match rx.try_recv() {
                Ok(done) => Some(done),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(Err(NlError::Io(
                    io::Error::other("the deleting thread stopped"),
                ))),
                Err(std::sync::mpsc::TryRecvError::Empty) => None,
            },
        }
    }

    /// Waits for the deletion's answer.
    fn result(&self) -> Result<(), NlError> {
        match self {
            Deleter::Child(pipe) => {
                let mut code = [0u8; 4];
                let mut r = pipe;
                match io::Read::read_exact(&mut r, &mut code) {
                    Ok(()) => match i32::from_ne_bytes(code) {
                        0 => Ok(()),
                        errno => Err(NlError::Kernel(errno)),
                    },
                    Err(e) => Err(NlError::Io(io::Error::other(format!(
                        "the deleting process stopped: {e}"
                    )))),
                }
            }
            Deleter::Thread(rx) => rx.recv().unwrap_or_else(|_| {
                Err(NlError::Io(io::Error::other("the deleting thread stopped")))
            }),
        }
    }
}

/// Forks a child that sends `msg` (`RTM_DELLINK`) on `del`'s socket,
/// waits for the kernel's answer, writes it (0 or the errno, 4 bytes) to a
/// pipe and exits. Returns the pipe's read end, or `None` where `fork`
/// fails. The child makes system calls only (no allocation, no lock: the
/// parent has other threads) and closes every other descriptor first:
/// stdout and stderr (a runtime reads the plugin's output to EOF) and any
/// IPAM lock (a flock lives as long as any descriptor of it).
fn fork_deleter(del: &Netlink, msg: LinkMessage) -> Result<Option<std::fs::File>, NlError> {
    const NLMSG_ERROR: u16 = 2;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK;
    header.sequence_number = 1;
    let mut req = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::DelLink(msg)),
    );
    req.finalize();
    let mut out = vec![0u8; req.buffer_len()];
    req.serialize(&mut out);
    let sock = del.socket.as_raw_fd();
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| NlError::Io(io::Error::from(e)))?;
    let wr_fd = wr.as_raw_fd();
    let mut keep = [sock, wr_fd].map(|fd| u32::try_from(fd).unwrap_or(u32::MAX));
    keep.sort_unstable();
    // SAFETY: the child only makes async-signal-safe system calls on
    // memory prepared before the fork, then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        super::close_all_but(&keep);
        // SAFETY: system calls on descriptors and buffers owned here.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            let code: i32 = if libc::send(sock, out.as_ptr().cast(), out.len(), 0) < 0 {
                *libc::__errno_location()
            } else {
                let mut buf = [0u8; 4096];
                loop {
                    let n = libc::recv(sock, buf.as_mut_ptr().cast(), buf.len(), 0);
                    if n < 0 {
                        let e = *libc::__errno_location();
                        if e == libc::EINTR || e == libc::ENOBUFS {
                            continue;
                        }
                        break e;
                    }
                    // struct nlmsgerr after the header: `error` at 16.
                    let n = n as usize;
                    if n >= 20
                        && u16::from_ne_bytes([buf[4], buf[5]]) == NLMSG_ERROR
                        && u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]) == 1
                    {
                        break -i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
                    }
                }
            };
            let bytes = code.to_ne_bytes();
            libc::write(wr_fd, bytes.as_ptr().cast(), 4);
            libc::_exit(0);
        }
    }
    drop(wr);
    if pid < 0 {
        return Ok(None);
    }
    Ok(Some(std::fs::File::from(rd)))
}

/// Whether `buf` holds the answer to request `seq`.
fn answers(buf: &[u8], seq: u32) -> bool {
    messages(buf)
        .any(|m| m.header.sequence_number == seq && matches!(m.payload, NetlinkPayload::Error(_)))
}

fn link_at(index: u32) -> Result<LinkMessage, NlError> {
    check_index(index)?;
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    Ok(msg)
}

/// The broadcast address of `addr/prefix_len` (`prefix_len` <= 32).
fn broadcast(addr: Ipv4Addr, prefix_len: u8) -> Ipv4Addr {
    let host_bits = u32::MAX.checked_shr(u32::from(prefix_len)).unwrap_or(0);
    Ipv4Addr::from(u32::from(addr) | host_bits)
}

/// The family of `addr` and its longest prefix.
pub(super) fn family_of(addr: IpAddr) -> (AddressFamily, u8) {
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

/// A route message for `spec`: what adds it (`delete` false), or what
/// matches it for deletion (dst, table, metric, gateway, oif; any scope,
/// any protocol).
fn route_message(spec: &RouteSpec, delete: bool) -> Result<RouteMessage, NlError> {
    let (family, max) = family_of(spec.dst);
    if spec.dst_len > max {
        return einval();
    }
    // An address of the other family would be read by the kernel as a
    // (truncated) address of this one.
    let same_family = |a: &Option<IpAddr>| a.is_none_or(|a| a.is_ipv4() == spec.dst.is_ipv4());
    if !same_family(&spec.gateway) || (!delete && !same_family(&spec.source)) {
        return einval();
    }
    let mut msg = RouteMessage::default();
    let h = &mut msg.header;
    h.address_family = family;
    h.destination_prefix_length = spec.dst_len;
    // Tables above 255 only fit RTA_TABLE; the header then says UNSPEC.
    h.table = u8::try_from(spec.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
    h.kind = RouteType::Unicast;
    // A delete names the protocol exactly (so it never removes someone
    // else's route with the same destination); the scope is a wildcard.
    h.protocol = RouteProtocol::from(spec.protocol);
    if delete {
        h.scope = RouteScope::NoWhere;
    } else {
        h.scope = RouteScope::from(spec.scope);
        if spec.onlink {
            h.flags = RouteFlags::Onlink;
        }
    }
    let a = &mut msg.attributes;
    a.push(RouteAttribute::Table(spec.table));
    a.push(RouteAttribute::Destination(spec.dst.into()));
    if let Some(gw) = spec.gateway {
        a.push(RouteAttribute::Gateway(gw.into()));
    }
    if let Some(oif) = spec.oif {
        a.push(RouteAttribute::Oif(oif));
    }
    if let Some(metric) = spec.metric {
        a.push(RouteAttribute::Priority(metric));
    }
    if !delete {
        if let Some(src) = spec.source {
            a.push(RouteAttribute::PrefSource(src.into()));
        }
        if let Some(mtu) = spec.mtu {
            a.push(RouteAttribute::Metrics(vec![RouteMetric::Mtu(mtu)]));
        }
    }
    Ok(msg)
}

impl Netlink {
    /// Sends a request that only needs the kernel's acknowledgement.
    pub(super) fn ack(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<(), NlError> {
        self.request(msg, NLM_F_ACK | flags).map(drop)
    }

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

    /// The id this namespace gives namespace `other` (`RTM_GETNSID` with
    /// `NETNSA_FD`): how `IFLA_LINK_NETNSID` names it here. `None` if it
    /// has none.
    pub fn nsid_of(&mut self, other: BorrowedFd<'_>) -> Result<Option<i32>, NlError> {
        let fd = u32::try_from(other.as_raw_fd()).map_err(|_| NlError::Kernel(libc::EBADF))?;
        let mut msg = NsidMessage::default();
        msg.attributes.push(NsidAttribute::Fd(fd));
        let answers = self.request(RouteNetlinkMessage::GetNsId(msg), 0)?;
        Ok(answers.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewNsId(n) => n.attributes.into_iter().find_map(|a| match a {
                NsidAttribute::Id(id) if id >= 0 => Some(id),
                _ => None,
            }),
            _ => None,
        }))
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

    /// How many permanent neighbour entries (`ip neigh ... nud permanent`)
    /// link `index` has: the kernel drops them when the link goes down or
    /// moves.
    pub fn permanent_neighbours(&mut self, index: u32) -> Result<usize, NlError> {
        let answers = self.request(
            RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()),
            NLM_F_DUMP,
        )?;
        Ok(answers
            .iter()
            .filter(|m| {
                matches!(m, RouteNetlinkMessage::NewNeighbour(n)
                    if n.header.ifindex == index && n.header.state == NeighbourState::Permanent)
            })
            .count())
    }

    /// Deletes a link.
    pub fn delete_link(&mut self, index: u32) -> Result<(), NlError> {
        let msg = link_at(index)?;
        self.ack(RouteNetlinkMessage::DelLink(msg), 0)
    }

    /// Sets a link's group (`IFLA_GROUP`).
    pub fn set_group(&mut self, index: u32, group: u32) -> Result<(), NlError> {
        let mut msg = link_at(index)?;
        msg.attributes.push(LinkAttribute::Group(group));
        self.ack(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Deletes links `indexes` as one kernel batch, and fails (deleting
    /// nothing) where it cannot vouch that the batch holds them alone.
    ///
    /// The kernel deletes each link under its own RCU synchronisations
    /// (10–20 ms each here, a veth pair and its peer together); a request
    /// that names a link group instead (`RTM_DELLINK` with `IFLA_GROUP`, no
    /// index or name) unregisters every link of the group as one batch,
    /// paying them once. So the links are put in a group no link of the
    /// namespace is in (a random one, checked against a dump), the group
    /// is checked to hold exactly them (a second dump), and the group is
    /// deleted. Should another link turn up in it, or anything fail before
    /// the deletion, the links are put back in their groups and the error
    /// returned: the caller deletes them one by one. What can still reach
    /// the batch: a link someone puts in that same random group in the
    /// instant between the second dump and the deletion (only root can,
    /// and no one can know the group), and what the kernel takes along
    /// with a link as a single deletion would (a veth's peer, the
    /// macvlans on it). A link in `indexes` that is gone already is no
    /// error.
    pub fn delete_as_group(&mut self, indexes: &[u32]) -> Result<(), NlError> {
        use std::collections::{HashMap, HashSet};
        use std::hash::{BuildHasher, Hasher};
        let group_of = |m: &LinkMessage| {
            m.attributes
                .iter()
                .find_map(|a| match a {
                    LinkAttribute::Group(g) => Some(*g),
                    _ => None,
                })
                .unwrap_or(0)
        };
        let links = self.links()?;
        let in_use: HashSet<u32> = links.iter().map(group_of).collect();
        let old: HashMap<u32, u32> = links
            .iter()
            .filter(|m| indexes.contains(&m.header.index))
            .map(|m| (m.header.index, group_of(m)))
            .collect();
        if old.is_empty() {
            return Ok(());
        }
        // A fresh random group (0 is every link's, and the kernel refuses
        // to delete it).
        let mut group = 0;
        while group == 0 || in_use.contains(&group) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(group);
            group = h.finish() as u32;
        }
        let mut tagged = Vec::new();
        let mut result = Ok(());
        for &index in old.keys() {
            match self.set_group(index, group) {
                Ok(()) => tagged.push(index),
                // Gone since the dump.
                Err(NlError::Kernel(libc::ENODEV)) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() && !tagged.is_empty() {
            result = self.links().and_then(|now| {
                let members: HashSet<u32> = now
                    .iter()
                    .filter(|m| group_of(m) == group)
                    .map(|m| m.header.index)
                    .collect();
                // Some may have gone meanwhile; none may have come.
                if members.iter().all(|i| tagged.contains(i)) {
                    Ok(())
                } else {
                    Err(NlError::Kernel(libc::EBUSY))
                }
            });
            if result.is_ok() {
                let mut msg = LinkMessage::default();
                msg.attributes.push(LinkAttribute::Group(group));
                result = match self.ack(RouteNetlinkMessage::DelLink(msg), 0) {
                    // Every one gone meanwhile.
                    Err(NlError::Kernel(libc::ENODEV)) => Ok(()),
                    r => r,
                };
            }
        }
        if result.is_err() {
            for index in tagged {
                let _ = self.set_group(index, old[&index]);
            }
        }
        result
    }

    /// Deletes link `index` in `ns` and returns once the kernel has done
    /// it: the link, and what goes with it (a veth's peer, their addresses
    /// and routes), is out of every namespace. It does not wait for the
    /// kernel to free the link: the kernel acknowledges a deletion only
    /// after an `rcu_barrier()` (10–25 ms measured here, most of a DEL).
    /// A child process of its own (forked, it makes system calls only)
    /// sends the deletion and waits for that acknowledgement, so neither
    /// what the caller does next nor the plugin's exit waits for the
    /// barrier; the child closes every descriptor but its socket and a
    /// pipe first, so a runtime reading the plugin's output does not wait
    /// for it either, and holds no lock. Where `fork` fails, a thread does
    /// it (and the process then exits after the barrier).
    ///
    /// "Done" is the kernel's `RTM_DELLINK` notice for `index`, then one
    /// request that needs the RTNL lock, which the deleting call holds
    /// until every link of its batch is unregistered. A failed deletion
    /// returns its error, as [`Netlink::delete_link`] does.
    pub fn delete_link_detached(ns: &NetNs, index: u32) -> Result<(), NlError> {
        // The deletion is sent by a child, not through `request`.
        note_change();
        let msg = link_at(index)?;
        let mon = ns.run_inside(|| {
            let mut s = Socket::new(NETLINK_ROUTE)?;
            s.bind_auto()?;
            s.add_membership(RTNLGRP_LINK)?;
            Ok(s)
        })?;
        let mut del = Netlink::open(ns)?;
        let done = match fork_deleter(&del, msg.clone())? {
            Some(done) => Deleter::Child(done),
            None => {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                std::thread::Builder::new()
                    .name("wasmcni-delete".into())
                    .spawn(move || {
                        let _ = tx.send(del.ack(RouteNetlinkMessage::DelLink(msg), 0));
                    })?;
                Deleter::Thread(rx)
            }
        };
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            if let Some(done) = done.try_result() {
                return done;
            }
            // A failed deletion sends no notice; its answer is seen within
            // the millisecond.
            let mut pfd = libc::pollfd {
                fd: mon.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, 1) } <= 0 {
                continue;
            }
            match mon.recv(&mut &mut buf[..], libc::MSG_DONTWAIT) {
                Ok(n) if deletes(&buf[..n], index) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Notices lost (ENOBUFS) or the socket failed: wait for
                // the acknowledgement instead.
                Err(_) => return done.result(),
            }
        }
        // The notice is sent while the deleting call still unregisters its
        // batch under RTNL: a request that takes RTNL returns after it. A
        // link that does not exist, changed in no way: ENODEV, expected.
        let mut probe = NetlinkHeader::default();
        probe.flags = NLM_F_REQUEST | NLM_F_ACK;
        probe.sequence_number = 1;
        let mut nobody = LinkMessage::default();
        nobody.header.index = i32::MAX as u32;
        let mut req = NetlinkMessage::new(
            probe,
            NetlinkPayload::from(RouteNetlinkMessage::SetLink(nobody)),
        );
        req.finalize();
        let mut out = vec![0; req.buffer_len()];
        req.serialize(&mut out);
        mon.send_to(&out, &SocketAddr::new(0, 0), 0)?;
        loop {
            let n = match mon.recv(&mut &mut buf[..], 0) {
                Ok(n) => n,
                // Lost notices can push out nothing but notices.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                Err(e) => return Err(e.into()),
            };
            if answers(&buf[..n], 1) {
                return Ok(());
            }
        }
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

    /// Every route of every table, of one family or both.
    pub fn routes(&mut self, family: Option<AddressFamily>) -> Result<Vec<RouteMessage>, NlError> {
        let mut msg = RouteMessage::default();
        if let Some(f) = family {
            msg.header.address_family = f;
        }
        // rtm_table unspecified: the kernel dumps every table.
        let answers = self.request(RouteNetlinkMessage::GetRoute(msg), NLM_F_DUMP)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) => Some(r),
                _ => None,
            })
            .collect())
    }

    /// Adds a route as `mode` says.
    pub fn add_route(&mut self, spec: &RouteSpec, mode: RouteAdd) -> Result<(), NlError> {
        let msg = route_message(spec, false)?;
        let flags = match mode {
            RouteAdd::Exclusive => CREATE_EXCL,
            RouteAdd::Append => NLM_F_CREATE,
            RouteAdd::Replace => NLM_F_CREATE | NLM_F_REPLACE,
        };
        self.ack(RouteNetlinkMessage::NewRoute(msg), flags)
    }

    /// Deletes the route matching `spec` (dst, table, metric, gateway, oif).
    pub fn delete_route(&mut self, spec: &RouteSpec) -> Result<(), NlError> {
        let msg = route_message(spec, true)?;
        self.ack(RouteNetlinkMessage::DelRoute(msg), 0)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::process::Command;

    /// The MTU of `lo` as `nl` answers it: by name, or by `index`.
    fn lo_mtu(nl: &mut Netlink, index: Option<u32>) -> u32 {
        let link = match index {
            Some(i) => nl.link_by_index(i),
            None => nl.link_by_name("lo"),
        }
        .expect("lo");
        link.attributes
            .iter()
            .find_map(|a| match a {
                LinkAttribute::Mtu(m) => Some(*m),
                _ => None,
            })
            .expect("an MTU")
    }

    /// Sets `lo`'s MTU as another process would: wasmcni does not learn of it.
    fn ip_sets_lo_mtu(mtu: u32) {
        ip(&["link", "set", "lo", "mtu", &mtu.to_string()]);
    }

    /// Runs `f` on a thread of its own in a new network namespace (never
    /// the machine's); outside CI, not at all without root.
    pub(in crate::netlink) fn in_new_netns(f: Box<dyn FnOnce() + Send>) {
        std::thread::spawn(move || {
            if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                #[allow(clippy::disallowed_methods)] // CI decides: fail, not skip
                let ci = std::env::var_os("CI").is_some_and(|v| v == "true");
                assert!(!ci, "this test needs root (a network namespace): {e}");
                return;
            }
            f();
        })
        .join()
        .expect("the test thread");
    }

    /// `ip ARGS`, in the calling thread's namespace (a child forked by a
    /// thread is born in the thread's namespace), as another process
    /// would: wasmcni does not learn of it.
    pub(in crate::netlink) fn ip(args: &[&str]) {
        let st = Command::new("ip").args(args).status().expect("ip");
        assert!(st.success(), "ip {args:?}");
    }

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

    /// While kept, a link answer stands until this process asks for a
    /// change: through this socket or another (in another namespace), or
    /// by a sysctl written. Not kept, every read is the kernel's. In
    /// namespaces of the test's own (a thread's `unshare`), never the
    /// machine's; no other test of this crate asks for a change meanwhile
    /// ([`crate::changes_serial`]).
    #[test]
    fn kept_link_answers_stand_until_this_process_asks_for_a_change() {
        let _serial = crate::changes_serial();
        // A socket in a second namespace, to ask for a change through.
        let (tx, rx) = std::sync::mpsc::channel::<Netlink>();
        in_new_netns(Box::new(move || {
            tx.send(Netlink::here().expect("a socket")).unwrap();
        }));
        let Ok(mut other) = rx.try_recv() else {
            return; // not root, outside CI (asserted above)
        };
        in_new_netns(Box::new(move || {
            let mut nl = Netlink::here().expect("a socket");
            let lo = nl.link_by_name("lo").expect("lo").header.index;
            ip_sets_lo_mtu(1400);
            assert_eq!(lo_mtu(&mut nl, None), 1400, "not kept: the kernel's");
            nl.keep_links(true);
            assert_eq!(lo_mtu(&mut nl, None), 1400);
            ip_sets_lo_mtu(1300);
            assert_eq!(lo_mtu(&mut nl, None), 1400, "kept, by name");
            assert_eq!(lo_mtu(&mut nl, Some(lo)), 1400, "kept, by index");
            // A change asked for through another socket, in another
            // namespace, ends it (its lo: index 1 there too).
            other.set_link_up(1, true).expect("lo up there");
            assert_eq!(lo_mtu(&mut nl, Some(lo)), 1300, "after a change");
            ip_sets_lo_mtu(1200);
            assert_eq!(lo_mtu(&mut nl, None), 1300, "kept again");
            // So does a sysctl written.
            let ns = NetNs::open_container(std::path::Path::new("/proc/thread-self/ns/net"))
                .expect("the thread's namespace");
            crate::sysctl::write(&ns, "net.ipv4.ip_forward", "1").expect("a sysctl");
            assert_eq!(lo_mtu(&mut nl, None), 1200, "after a sysctl write");
            // And a request that was not a read, though the kernel
            // refused it.
            assert!(nl.set_link_up(u32::MAX, true).is_err(), "no such link");
            ip_sets_lo_mtu(1100);
            assert_eq!(lo_mtu(&mut nl, None), 1100, "after a refused change");
            nl.keep_links(false);
            ip_sets_lo_mtu(1000);
            assert_eq!(lo_mtu(&mut nl, Some(lo)), 1000, "not kept again");
        }));
    }
}

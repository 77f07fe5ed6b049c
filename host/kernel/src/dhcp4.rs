//! A DHCPv4 client (RFC 2131/2132) for one interface, over a packet
//! socket bound to it: DISCOVER/OFFER/REQUEST/ACK to acquire a lease,
//! REQUEST to renew (to the server, from the lease's address) or rebind
//! (broadcast), RELEASE. It works before the interface has an address
//! (the frames it sends carry their own IPv4 and UDP headers) and needs
//! no route. The socket belongs to the namespace it was created in:
//! create the [`Client`] inside the container's namespace
//! ([`crate::netns::NetNs::run_inside`], or a thread of its own that
//! entered it), then use it from anywhere.
//!
//! Only what a CNI lease needs is encoded: message type, client
//! identifier, requested address, server identifier, parameter request
//! list, the options a config provides verbatim; of an answer, the
//! address, subnet mask, routers, classless (121) and static (33) routes,
//! lease time, T1 and T2.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

const BOOTREQUEST: u8 = 1;
const BOOTREPLY: u8 = 2;
const MAGIC: [u8; 4] = [99, 130, 83, 99];
const CLIENT_PORT: u16 = 68;
/// The shortest time between renewals a server can ask for, in seconds.
const MIN_T1: u32 = 2;
const SERVER_PORT: u16 = 67;

/// DHCP message types (option 53).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MessageType {
    /// DHCPDISCOVER.
    Discover = 1,
    /// DHCPOFFER.
    Offer = 2,
    /// DHCPREQUEST.
    Request = 3,
    /// DHCPDECLINE.
    Decline = 4,
    /// DHCPACK.
    Ack = 5,
    /// DHCPNAK.
    Nak = 6,
    /// DHCPRELEASE.
    Release = 7,
}

impl MessageType {
    fn from_u8(v: u8) -> Option<MessageType> {
        Some(match v {
            1 => MessageType::Discover,
            2 => MessageType::Offer,
            3 => MessageType::Request,
            4 => MessageType::Decline,
            5 => MessageType::Ack,
            6 => MessageType::Nak,
            7 => MessageType::Release,
            _ => return None,
        })
    }
}

/// Option codes this client reads or writes.
pub mod code {
    /// Subnet mask.
    pub const SUBNET_MASK: u8 = 1;
    /// Routers.
    pub const ROUTER: u8 = 3;
    /// Domain name servers.
    pub const DNS: u8 = 6;
    /// Host name.
    pub const HOST_NAME: u8 = 12;
    /// Static routes (classful destinations).
    pub const STATIC_ROUTES: u8 = 33;
    /// Requested IP address.
    pub const REQUESTED_IP: u8 = 50;
    /// IP address lease time.
    pub const LEASE_TIME: u8 = 51;
    /// DHCP message type.
    pub const MESSAGE_TYPE: u8 = 53;
    /// Server identifier.
    pub const SERVER_ID: u8 = 54;
    /// Parameter request list.
    pub const PARAMETER_LIST: u8 = 55;
    /// Message (a NAK's reason).
    pub const MESSAGE: u8 = 56;
    /// Renewal (T1) time.
    pub const T1: u8 = 58;
    /// Rebinding (T2) time.
    pub const T2: u8 = 59;
    /// Vendor class identifier.
    pub const VENDOR_CLASS: u8 = 60;
    /// Client identifier.
    pub const CLIENT_ID: u8 = 61;
    /// User class.
    pub const USER_CLASS: u8 = 77;
    /// Classless static routes (RFC 3442).
    pub const CLASSLESS_ROUTES: u8 = 121;
}

/// A DHCP message (the BOOTP fields this client uses, and its options in
/// order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// BOOTREQUEST or BOOTREPLY.
    pub op: u8,
    /// Transaction ID.
    pub xid: u32,
    /// Flags (0x8000: broadcast).
    pub flags: u16,
    /// Client address (renewing, rebinding, releasing).
    pub ciaddr: Ipv4Addr,
    /// "Your" address: the one offered.
    pub yiaddr: Ipv4Addr,
    /// The client's hardware address.
    pub chaddr: [u8; 6],
    /// Options (code, value), without pad and end.
    pub options: Vec<(u8, Vec<u8>)>,
}

/// Why a message could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed DHCP message: {0}")]
pub struct Malformed(&'static str);

impl Message {
    /// The first value of option `code`.
    pub fn option(&self, code: u8) -> Option<&[u8]> {
        self.options
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, v)| v.as_slice())
    }

    /// Option 53.
    pub fn message_type(&self) -> Option<MessageType> {
        self.option(code::MESSAGE_TYPE)
            .and_then(|v| v.first())
            .and_then(|v| MessageType::from_u8(*v))
    }

    /// The BOOTP fixed part, the magic cookie, the options and END.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 236];
        b[0] = self.op;
        b[1] = 1; // Ethernet
        b[2] = 6;
        b[4..8].copy_from_slice(&self.xid.to_be_bytes());
        b[10..12].copy_from_slice(&self.flags.to_be_bytes());
        b[12..16].copy_from_slice(&self.ciaddr.octets());
        b[16..20].copy_from_slice(&self.yiaddr.octets());
        b[28..34].copy_from_slice(&self.chaddr);
        b.extend_from_slice(&MAGIC);
        for (c, v) in &self.options {
            // A value longer than 255 bytes is split into several
            // options of the same code (RFC 3396).
            for chunk in v.chunks(255) {
                b.push(*c);
                b.push(chunk.len() as u8);
                b.extend_from_slice(chunk);
            }
            if v.is_empty() {
                b.push(*c);
                b.push(0);
            }
        }
        b.push(255);
        // The minimum BOOTP message is 300 bytes; some servers want it.
        if b.len() < 300 {
            b.resize(300, 0);
        }
        b
    }

    /// Decodes a message (options of the same code concatenated, RFC
    /// 3396; the `sname`/`file` overload is not read).
    pub fn decode(b: &[u8]) -> Result<Message, Malformed> {
        if b.len() < 240 {
            return Err(Malformed("shorter than 240 bytes"));
        }
        if b[236..240] != MAGIC {
            return Err(Malformed("no magic cookie"));
        }
        let ip = |i: usize| Ipv4Addr::new(b[i], b[i + 1], b[i + 2], b[i + 3]);
        let mut chaddr = [0u8; 6];
        chaddr.copy_from_slice(&b[28..34]);
        let mut options: Vec<(u8, Vec<u8>)> = Vec::new();
        let mut i = 240;
        while i < b.len() {
            let c = b[i];
            if c == 0 {
                i += 1;
                continue;
            }
            if c == 255 {
                break;
            }
            let len = *b.get(i + 1).ok_or(Malformed("option without length"))? as usize;
            let v = b
                .get(i + 2..i + 2 + len)
                .ok_or(Malformed("option longer than the message"))?;
            match options.iter_mut().find(|(k, _)| *k == c) {
                Some((_, old)) => old.extend_from_slice(v),
                None => options.push((c, v.to_vec())),
            }
            i += 2 + len;
        }
        Ok(Message {
            op: b[0],
            xid: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            flags: u16::from_be_bytes([b[10], b[11]]),
            ciaddr: ip(12),
            yiaddr: ip(16),
            chaddr,
            options,
        })
    }
}

/// A route a lease gives.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Route {
    /// Destination network.
    pub dst: Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// The router (unspecified: on-link, RFC 3442).
    pub gw: Ipv4Addr,
}

/// A lease, as the server's ACK gave it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    /// The address.
    pub ip: Ipv4Addr,
    /// Its prefix length (option 1).
    pub prefix: u8,
    /// The first router (option 3).
    pub router: Option<Ipv4Addr>,
    /// Classless routes (option 121), else static routes (option 33).
    pub routes: Vec<Route>,
    /// Whether `routes` came from option 121 (then the router's default
    /// route is not implied, RFC 3442).
    pub classless: bool,
    /// Name servers (option 6).
    pub dns: Vec<Ipv4Addr>,
    /// The server that granted it (option 54).
    pub server: Ipv4Addr,
    /// The server's link-layer address (the ACK's source).
    pub server_mac: [u8; 6],
    /// Lease time, seconds.
    pub lease_secs: u32,
    /// Renewal time, seconds.
    pub t1_secs: u32,
    /// Rebinding time, seconds.
    pub t2_secs: u32,
}

/// What a client asks for and provides, besides its identifier.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Options {
    /// The client identifier (option 61), as the reference sends it.
    pub client_id: Vec<u8>,
    /// The parameter request list (option 55); empty: none sent.
    pub request: Vec<u8>,
    /// Options sent verbatim (code, value).
    pub provide: Vec<(u8, Vec<u8>)>,
    /// Whether to ask for broadcast answers (flag 0x8000).
    pub broadcast: bool,
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum DhcpError {
    /// No (acceptable) answer in time.
    #[error("no DHCP {what} from any server on {ifname} within {secs:.1} s")]
    Timeout {
        /// What was waited for ("offer", "ack").
        what: &'static str,
        /// The interface.
        ifname: String,
        /// How long it waited.
        secs: f64,
    },
    /// The server said no.
    #[error("the DHCP server {server} refused the request (NAK){}", .message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Nak {
        /// The server.
        server: Ipv4Addr,
        /// Its message (option 56).
        message: Option<String>,
    },
    /// The ACK lacks what a lease needs.
    #[error("the DHCP ACK from {0} has no subnet mask (option 1)")]
    NoMask(Ipv4Addr),
    /// A socket call failed.
    #[error("DHCP on {ifname}: {source}")]
    Io {
        /// The interface.
        ifname: String,
        /// The error.
        source: io::Error,
    },
}

/// A packet socket bound to one interface of the namespace it was
/// created in.
#[derive(Debug)]
pub struct Client {
    fd: OwnedFd,
    ifindex: i32,
    ifname: String,
    mac: [u8; 6],
}

fn last_os_error() -> io::Error {
    io::Error::last_os_error()
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain old data.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= r.ifr_name.len() || b.contains(&0) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, s) in r.ifr_name.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    Ok(r)
}

/// Classic BPF: the packet socket takes only IPv4 UDP to port 68 that is
/// not a later fragment (a packet socket of `SOCK_DGRAM` sees the packet
/// from its IP header), so the link's other traffic is not queued to it
/// while a lease waits for its renewal.
const CLIENT_FILTER: [(u16, u8, u8, u32); 9] = [
    (0x30, 0, 0, 9),        // ldb [9]: the IP protocol
    (0x15, 0, 6, 17),       // jeq UDP, else drop
    (0x28, 0, 0, 6),        // ldh [6]: flags and fragment offset
    (0x45, 4, 0, 0x1fff),   // jset a fragment offset: drop
    (0xb1, 0, 0, 0),        // ldxb 4*([0]&0xf): the IP header's length
    (0x48, 0, 0, 2),        // ldh [x+2]: the UDP destination port
    (0x15, 0, 1, 68),       // jeq 68, else drop
    (0x06, 0, 0, 0x4_0000), // ret: take it whole
    (0x06, 0, 0, 0),        // ret 0: drop
];

fn attach_client_filter(fd: &OwnedFd) -> io::Result<()> {
    let mut prog: Vec<libc::sock_filter> = CLIENT_FILTER
        .iter()
        .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
        .collect();
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: SO_ATTACH_FILTER copies the program the sock_fprog points
    // at (alive for the call).
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(last_os_error());
    }
    Ok(())
}

/// A server's text (a NAK's message) as it may reach a CNI error and a
/// log: printable ASCII only (anything else a `?`), at most 128
/// characters.
fn printable(v: &[u8]) -> String {
    v.iter()
        .take(128)
        .map(|&b| {
            if b == b' ' || b.is_ascii_graphic() {
                b as char
            } else {
                '?'
            }
        })
        .collect()
}

impl Client {
    /// Opens a packet socket on `ifname` in the calling thread's network
    /// namespace.
    pub fn open(ifname: &str) -> io::Result<Client> {
        let proto = (libc::ETH_P_IP as u16).to_be();
        // SAFETY: plain socket(2).
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                i32::from(proto),
            )
        };
        if raw < 0 {
            return Err(last_os_error());
        }
        // SAFETY: a new fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        attach_client_filter(&fd)?;
        let mut r = ifreq(ifname)?;
        // SAFETY: SIOCGIFINDEX fills ifr_ifindex of a valid ifreq.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFINDEX as libc::Ioctl, &mut r) } < 0 {
            return Err(last_os_error());
        }
        // SAFETY: the kernel filled the union's ifindex.
        let ifindex = unsafe { r.ifr_ifru.ifru_ifindex };
        let mut r = ifreq(ifname)?;
        // SAFETY: SIOCGIFHWADDR fills ifr_hwaddr of a valid ifreq.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR as libc::Ioctl, &mut r) } < 0 {
            return Err(last_os_error());
        }
        let mut mac = [0u8; 6];
        // SAFETY: the kernel filled the union's hwaddr.
        let hw = unsafe { r.ifr_ifru.ifru_hwaddr };
        for (d, s) in mac.iter_mut().zip(hw.sa_data.iter()) {
            *d = *s as u8;
        }
        // SAFETY: sockaddr_ll is plain old data.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto;
        sa.sll_ifindex = ifindex;
        // SAFETY: binds our socket to a sockaddr_ll of the right size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc < 0 {
            return Err(last_os_error());
        }
        Ok(Client {
            fd,
            ifindex,
            ifname: ifname.to_owned(),
            mac,
        })
    }

    /// The interface's hardware address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn io(&self, source: io::Error) -> DhcpError {
        DhcpError::Io {
            ifname: self.ifname.clone(),
            source,
        }
    }

    fn send(&self, m: &Message, src: Ipv4Addr, dst: Ipv4Addr, dst_mac: [u8; 6]) -> io::Result<()> {
        let frame = ip_udp(src, dst, &m.encode());
        // SAFETY: sockaddr_ll is plain old data.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = (libc::ETH_P_IP as u16).to_be();
        sa.sll_ifindex = self.ifindex;
        sa.sll_halen = 6;
        sa.sll_addr[..6].copy_from_slice(&dst_mac);
        // SAFETY: sends our buffer to a sockaddr_ll of the right size.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n < 0 {
            return Err(last_os_error());
        }
        Ok(())
    }

    /// The next BOOTREPLY for `xid` and this interface before `until`, with
    /// the source's link-layer address; none at `until`.
    fn receive(&self, xid: u32, until: Instant) -> io::Result<Option<(Message, [u8; 6])>> {
        let mut buf = vec![0u8; 4096];
        loop {
            let now = Instant::now();
            if now >= until {
                return Ok(None);
            }
            let ms = (until - now).as_millis().clamp(1, i32::MAX as u128) as i32;
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let e = last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if rc == 0 {
                continue;
            }
            // SAFETY: sockaddr_ll is plain old data.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: receives into our buffer and sockaddr.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut sa as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                let e = last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if sa.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let Some(payload) = udp_payload(&buf[..n as usize], CLIENT_PORT) else {
                continue;
            };
            let Ok(m) = Message::decode(payload) else {
                continue;
            };
            if m.op != BOOTREPLY || m.xid != xid || m.chaddr != self.mac {
                continue;
            }
            let mut from = [0u8; 6];
            from.copy_from_slice(&sa.sll_addr[..6]);
            return Ok(Some((m, from)));
        }
    }

    /// Sends `m` and retransmits it (1, 2, 4, ... s apart) until an answer
    /// `accept` takes arrives or `deadline` passes.
    fn exchange(
        &self,
        m: &Message,
        (src, dst, dst_mac): (Ipv4Addr, Ipv4Addr, [u8; 6]),
        deadline: Instant,
        what: &'static str,
        mut accept: impl FnMut(&Message) -> bool,
    ) -> Result<(Message, [u8; 6]), DhcpError> {
        let start = Instant::now();
        let mut wait = Duration::from_secs(1);
        loop {
            self.send(m, src, dst, dst_mac).map_err(|e| self.io(e))?;
            let until = (Instant::now() + wait).min(deadline);
            while let Some((reply, from)) = self.receive(m.xid, until).map_err(|e| self.io(e))? {
                if reply.message_type() == Some(MessageType::Nak) {
                    return Err(DhcpError::Nak {
                        server: server_id(&reply).unwrap_or(Ipv4Addr::UNSPECIFIED),
                        message: reply.option(code::MESSAGE).map(printable),
                    });
                }
                if accept(&reply) {
                    return Ok((reply, from));
                }
            }
            if Instant::now() >= deadline {
                return Err(DhcpError::Timeout {
                    what,
                    ifname: self.ifname.clone(),
                    secs: start.elapsed().as_secs_f64(),
                });
            }
            wait = (wait * 2).min(Duration::from_secs(8));
        }
    }

    fn request_message(&self, t: MessageType, xid: u32, opts: &Options) -> Message {
        let mut options = vec![(code::MESSAGE_TYPE, vec![t as u8])];
        if !opts.client_id.is_empty() {
            options.push((code::CLIENT_ID, opts.client_id.clone()));
        }
        if !opts.request.is_empty() && t != MessageType::Release {
            let mut list = opts.request.clone();
            for c in [code::LEASE_TIME, code::T1, code::T2] {
                if !list.contains(&c) {
                    list.push(c);
                }
            }
            options.push((code::PARAMETER_LIST, list));
        }
        if t != MessageType::Release {
            options.extend(opts.provide.iter().cloned());
        }
        Message {
            op: BOOTREQUEST,
            xid,
            flags: if opts.broadcast { 0x8000 } else { 0 },
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            chaddr: self.mac,
            options,
        }
    }

    /// Acquires a lease: DISCOVER, the first OFFER, REQUEST, ACK; all
    /// broadcast, until `deadline`.
    pub fn acquire(&self, opts: &Options, deadline: Instant) -> Result<Lease, DhcpError> {
        let xid = new_xid();
        let discover = self.request_message(MessageType::Discover, xid, opts);
        let (offer, _) = self.exchange(
            &discover,
            (Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, [0xff; 6]),
            deadline,
            "offer",
            |r| r.message_type() == Some(MessageType::Offer) && server_id(r).is_some(),
        )?;
        let server = server_id(&offer).unwrap_or(Ipv4Addr::UNSPECIFIED);
        let mut request = self.request_message(MessageType::Request, xid, opts);
        request
            .options
            .insert(1, (code::REQUESTED_IP, offer.yiaddr.octets().to_vec()));
        request
            .options
            .insert(2, (code::SERVER_ID, server.octets().to_vec()));
        let (ack, from) = self.exchange(
            &request,
            (Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, [0xff; 6]),
            deadline,
            "ack",
            |r| r.message_type() == Some(MessageType::Ack) && server_id(r) == Some(server),
        )?;
        lease_of(&ack, server, from)
    }

    /// Renews `lease`: a REQUEST from its address to its server
    /// (`rebind`: broadcast, to any server), until `deadline`.
    pub fn renew(
        &self,
        lease: &Lease,
        opts: &Options,
        rebind: bool,
        deadline: Instant,
    ) -> Result<Lease, DhcpError> {
        let xid = new_xid();
        let mut request = self.request_message(MessageType::Request, xid, opts);
        request.ciaddr = lease.ip;
        request.flags = 0;
        let (dst, mac) = if rebind {
            (Ipv4Addr::BROADCAST, [0xff; 6])
        } else {
            (lease.server, lease.server_mac)
        };
        let (ack, from) = self.exchange(&request, (lease.ip, dst, mac), deadline, "ack", |r| {
            r.message_type() == Some(MessageType::Ack) && r.yiaddr == lease.ip
        })?;
        lease_of(&ack, server_id(&ack).unwrap_or(lease.server), from)
    }

    /// Releases `lease` (one RELEASE to its server; no answer comes).
    pub fn release(&self, lease: &Lease, opts: &Options) -> Result<(), DhcpError> {
        let mut m = self.request_message(MessageType::Release, new_xid(), opts);
        m.ciaddr = lease.ip;
        m.flags = 0;
        m.options
            .insert(1, (code::SERVER_ID, lease.server.octets().to_vec()));
        self.send(&m, lease.ip, lease.server, lease.server_mac)
            .map_err(|e| self.io(e))
    }
}

fn server_id(m: &Message) -> Option<Ipv4Addr> {
    let v = m.option(code::SERVER_ID)?;
    (v.len() == 4).then(|| Ipv4Addr::new(v[0], v[1], v[2], v[3]))
}

fn u32_option(m: &Message, c: u8) -> Option<u32> {
    let v = m.option(c)?;
    (v.len() == 4).then(|| u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
}

fn addresses(v: &[u8]) -> Vec<Ipv4Addr> {
    v.chunks_exact(4)
        .map(|c| Ipv4Addr::new(c[0], c[1], c[2], c[3]))
        .collect()
}

/// The routes of option 121 (RFC 3442: width, significant octets, router).
pub fn classless_routes(mut v: &[u8]) -> Option<Vec<Route>> {
    let mut out = Vec::new();
    while let Some(&width) = v.first() {
        if width > 32 {
            return None;
        }
        let n = usize::from(width).div_ceil(8);
        let rest = v.get(1..1 + n + 4)?;
        let mut dst = [0u8; 4];
        dst[..n].copy_from_slice(&rest[..n]);
        let gw = Ipv4Addr::new(rest[n], rest[n + 1], rest[n + 2], rest[n + 3]);
        out.push(Route {
            dst: Ipv4Addr::from(dst),
            prefix: width,
            gw,
        });
        v = &v[1 + n + 4..];
    }
    Some(out)
}

/// The classful prefix length of `ip` (option 33's destinations).
fn classful(ip: Ipv4Addr) -> u8 {
    match ip.octets()[0] {
        0..=127 => 8,
        128..=191 => 16,
        _ => 24,
    }
}

fn lease_of(ack: &Message, server: Ipv4Addr, from: [u8; 6]) -> Result<Lease, DhcpError> {
    let mask = ack
        .option(code::SUBNET_MASK)
        .filter(|v| v.len() == 4)
        .ok_or(DhcpError::NoMask(server))?;
    let prefix = u32::from_be_bytes([mask[0], mask[1], mask[2], mask[3]]).count_ones() as u8;
    let router = ack
        .option(code::ROUTER)
        .and_then(|v| addresses(v).first().copied());
    let classless = ack
        .option(code::CLASSLESS_ROUTES)
        .and_then(classless_routes)
        .filter(|r| !r.is_empty());
    let (routes, is_classless) = match classless {
        Some(r) => (r, true),
        None => (
            ack.option(code::STATIC_ROUTES)
                .map(|v| {
                    v.chunks_exact(8)
                        .map(|c| {
                            let dst = Ipv4Addr::new(c[0], c[1], c[2], c[3]);
                            Route {
                                dst,
                                prefix: classful(dst),
                                gw: Ipv4Addr::new(c[4], c[5], c[6], c[7]),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default(),
            false,
        ),
    };
    let lease_secs = u32_option(ack, code::LEASE_TIME).unwrap_or(u32::MAX);
    Ok(Lease {
        ip: ack.yiaddr,
        prefix,
        router,
        routes,
        classless: is_classless,
        dns: ack.option(code::DNS).map(addresses).unwrap_or_default(),
        server,
        server_mac: from,
        lease_secs,
        // A server's T1 of 0 (or a lease of a second) would have the
        // daemon renew five times a second: at least MIN_T1 apart, T2
        // after T1.
        t1_secs: u32_option(ack, code::T1)
            .unwrap_or(lease_secs / 2)
            .max(MIN_T1),
        t2_secs: u32_option(ack, code::T2)
            .unwrap_or((lease_secs / 8).saturating_mul(7))
            .max(MIN_T1.saturating_add(1)),
    })
}

fn new_xid() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom into our buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ std::process::id())
            .unwrap_or(1)
    }
}

fn checksum(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += u32::from(w);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 packet carrying `payload` in UDP from port 68 to 67.
fn ip_udp(src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let total = 20 + udp_len;
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&[0x45, 0x10]);
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let c = checksum(&p, 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let mut udp = Vec::with_capacity(udp_len);
    udp.extend_from_slice(&CLIENT_PORT.to_be_bytes());
    udp.extend_from_slice(&SERVER_PORT.to_be_bytes());
    udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    let mut sum = 0u32;
    for c in pseudo.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    let c = match checksum(&udp, sum) {
        0 => 0xffff,
        c => c,
    };
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&udp);
    p
}

/// The UDP payload of an IPv4 packet to `port` (checksums unverified:
/// a frame from a veth peer may carry a partial one).
fn udp_payload(p: &[u8], port: u16) -> Option<&[u8]> {
    if p.len() < 20 || p[0] >> 4 != 4 || p[9] != 17 {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]])).min(p.len());
    let udp = p.get(ihl..total)?;
    if udp.len() < 8 || u16::from_be_bytes([udp[2], udp[3]]) != port {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([udp[4], udp[5]])).min(udp.len());
    udp.get(8..len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_text_reaches_an_error_printable_and_short() {
        assert_eq!(printable(b"no such lease"), "no such lease");
        assert_eq!(printable(b"a\x1b[2Jb\nc\xff"), "a?[2Jb?c?");
        assert_eq!(printable(&[b'x'; 300]).len(), 128);
    }

    #[test]
    fn a_message_survives_encoding() {
        let m = Message {
            op: BOOTREQUEST,
            xid: 0x1234_5678,
            flags: 0x8000,
            ciaddr: Ipv4Addr::new(10, 0, 0, 5),
            yiaddr: Ipv4Addr::UNSPECIFIED,
            chaddr: [2, 0, 0, 0, 0, 1],
            options: vec![
                (code::MESSAGE_TYPE, vec![1]),
                (code::CLIENT_ID, b"c/net/eth0".to_vec()),
                (code::PARAMETER_LIST, vec![1, 3]),
            ],
        };
        let b = m.encode();
        assert!(b.len() >= 300);
        assert_eq!(Message::decode(&b), Ok(m.clone()));
        assert_eq!(
            Message::decode(&b).ok().and_then(|m| m.message_type()),
            Some(MessageType::Discover)
        );
        assert!(Message::decode(&b[..100]).is_err());
        let mut bad = b.clone();
        bad[237] = 0;
        assert!(Message::decode(&bad).is_err());
        // An option running past the end.
        let mut cut = b[..243].to_vec();
        cut[240] = code::CLIENT_ID;
        cut[241] = 50;
        assert!(Message::decode(&cut).is_err());
    }

    #[test]
    fn classless_routes_as_rfc_3442_writes_them() {
        // 0.0.0.0/0 via 10.0.0.1; 10.17.0.0/16 via 10.0.0.2; 192.168.5.0/24 on-link.
        let v = [
            0, 10, 0, 0, 1, 16, 10, 17, 10, 0, 0, 2, 24, 192, 168, 5, 0, 0, 0, 0,
        ];
        let r = classless_routes(&v).expect("routes");
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].dst, r[0].prefix, r[0].gw),
            (Ipv4Addr::UNSPECIFIED, 0, Ipv4Addr::new(10, 0, 0, 1))
        );
        assert_eq!((r[1].dst, r[1].prefix), (Ipv4Addr::new(10, 17, 0, 0), 16));
        assert_eq!(
            (r[2].dst, r[2].gw),
            (Ipv4Addr::new(192, 168, 5, 0), Ipv4Addr::UNSPECIFIED)
        );
        assert!(classless_routes(&[33, 1, 2, 3, 4, 5, 6, 7, 8]).is_none());
        assert!(classless_routes(&[24, 1, 2]).is_none());
    }

    #[test]
    fn an_ack_becomes_a_lease() {
        let ack = Message {
            op: BOOTREPLY,
            xid: 1,
            flags: 0,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::new(10, 9, 0, 50),
            chaddr: [0; 6],
            options: vec![
                (code::MESSAGE_TYPE, vec![5]),
                (code::SERVER_ID, vec![10, 9, 0, 1]),
                (code::SUBNET_MASK, vec![255, 255, 255, 0]),
                (code::ROUTER, vec![10, 9, 0, 1, 10, 9, 0, 2]),
                (code::LEASE_TIME, 120u32.to_be_bytes().to_vec()),
                (code::T1, 5u32.to_be_bytes().to_vec()),
                (code::STATIC_ROUTES, vec![172, 16, 0, 0, 10, 9, 0, 3]),
            ],
        };
        let l = lease_of(&ack, Ipv4Addr::new(10, 9, 0, 1), [1; 6]).expect("lease");
        assert_eq!(
            (l.ip, l.prefix, l.router),
            (
                Ipv4Addr::new(10, 9, 0, 50),
                24,
                Some(Ipv4Addr::new(10, 9, 0, 1))
            )
        );
        assert_eq!((l.lease_secs, l.t1_secs, l.t2_secs), (120, 5, 105));
        assert_eq!(
            l.routes,
            vec![Route {
                dst: Ipv4Addr::new(172, 16, 0, 0),
                prefix: 16,
                gw: Ipv4Addr::new(10, 9, 0, 3)
            }]
        );
        assert!(!l.classless);
        let mut no_mask = ack.clone();
        no_mask.options.retain(|(c, _)| *c != code::SUBNET_MASK);
        assert!(matches!(
            lease_of(&no_mask, Ipv4Addr::new(10, 9, 0, 1), [1; 6]),
            Err(DhcpError::NoMask(_))
        ));
    }

    #[test]
    fn the_packet_round_trips_through_ip_and_udp() {
        let p = ip_udp(Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, b"hello");
        assert_eq!(checksum(&p[..20], 0), 0, "IP header checksum");
        let mut q = p.clone();
        q[22..24].copy_from_slice(&CLIENT_PORT.to_be_bytes());
        assert_eq!(udp_payload(&q, CLIENT_PORT), Some(&b"hello"[..]));
        assert_eq!(udp_payload(&p, CLIENT_PORT), None);
    }
}

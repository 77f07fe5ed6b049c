//! A small typed, synchronous rtnetlink client.
//!
//! Why synchronous (and not `rtnetlink`'s async API): every host call a
//! plugin makes is synchronous, one at a time, and every CNI invocation is a
//! fresh process, so start-up is the hot path. A blocking socket needs no
//! async runtime and no extra threads; `netlink-packet-route` still gives us
//! typed messages. The socket is created inside the namespace it acts on
//! ([`NetNs::run_inside`]) and stays bound to it.

use std::io;
use std::net::IpAddr;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

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
}

impl Netlink {
    /// Opens a socket inside `ns`.
    pub fn open(ns: &NetNs) -> Result<Netlink, NlError> {
        let socket = ns.run_inside(|| {
            let mut s = Socket::new(NETLINK_ROUTE)?;
            s.bind_auto()?;
            s.connect(&SocketAddr::new(0, 0))?;
            Ok(s)
        })?;
        Ok(Netlink {
            socket,
            seq: 0,
            buf: vec![0; 32 * 1024],
        })
    }

    /// Sends one request and collects every answer until the kernel says it
    /// is done (a dump) or acknowledges it.
    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NlError> {
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
                let bytes = &self.buf[offset..n];
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes)
                    .map_err(|e| NlError::Decode(e.to_string()))?;
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
        let answers = self.request(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            NLM_F_DUMP,
        )?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .collect())
    }

    /// One link, by index.
    pub fn link_by_index(&mut self, index: u32) -> Result<LinkMessage, NlError> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        self.single_link(msg)
    }

    /// One link, by name.
    pub fn link_by_name(&mut self, name: &str) -> Result<LinkMessage, NlError> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
        self.single_link(msg)
    }

    fn single_link(&mut self, msg: LinkMessage) -> Result<LinkMessage, NlError> {
        let answers = self.request(RouteNetlinkMessage::GetLink(msg), 0)?;
        answers
            .into_iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .ok_or(NlError::Kernel(libc::ENODEV))
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
        let mut msg = AddressMessage::default();
        if let Some(f) = family {
            msg.header.family = f;
        }
        let answers = self.request(RouteNetlinkMessage::GetAddress(msg), NLM_F_DUMP)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) => Some(a),
                _ => None,
            })
            .collect())
    }
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

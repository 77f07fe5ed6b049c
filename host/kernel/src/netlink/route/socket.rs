//! The route-netlink socket: opened in one namespace, it sends one
//! request at a time and collects its answers; a request that is not a
//! read counts as a change (it ends the kept link answers).

use std::io;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::cache::{note_change, LinkCache};
use super::decode::deserialize;
use super::error::NlError;

use crate::netns::NetNs;

/// A route-netlink socket bound inside one namespace.
pub struct Netlink {
    pub(super) socket: Socket,
    pub(super) seq: u32,
    pub(super) buf: Vec<u8>,
    pub(super) links: LinkCache,
    /// Where in `buf` the last answer `request` took lies.
    pub(super) last_answer: std::ops::Range<usize>,
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

    /// Sends one request and collects every answer until the kernel says it
    /// is done (a dump) or acknowledges it.
    pub(in crate::netlink) fn request(
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

    /// Sends a request that only needs the kernel's acknowledgement.
    pub(in crate::netlink) fn ack(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(), NlError> {
        self.request(msg, NLM_F_ACK | flags).map(drop)
    }
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

// ---------------------------------------------------------------------------
// Mutating operations (the full capability surface). Each is one request,
// acknowledged by the kernel (NLM_F_ACK); creations use NLM_F_CREATE |
// NLM_F_EXCL so an existing object is never silently reused.
// ---------------------------------------------------------------------------

/// `NLM_F_CREATE | NLM_F_EXCL`: create, never reuse.
pub(super) const CREATE_EXCL: u16 = NLM_F_CREATE | NLM_F_EXCL;

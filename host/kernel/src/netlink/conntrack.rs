//! Conntrack over ctnetlink: deleting the UDP entries to one destination
//! port, as the reference portmap does after mapping a UDP port
//! (`DeleteConntrackEntriesForDstPort`): a stale entry would keep sending
//! the port's traffic where it went before the mapping (or after it is
//! gone). Dump (`IPCTNL_MSG_CT_GET`), filter in user space by the original
//! tuple, delete each (`IPCTNL_MSG_CT_DELETE` with the original tuple and
//! zone). Raw messages: `netlink-packet-netfilter` types none of this.

use netlink_sys::Socket;

use super::{raw, NlError};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_ZONE: u16 = 18;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_DST_PORT: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;
/// Most entries deleted in one call.
const MAX_DELETIONS: usize = 4096;

/// A ctnetlink request of message type `ty`.
fn message(ty: u16, flags: u16, seq: u32, family: u8, attrs: &[u8]) -> Vec<u8> {
    raw::message((NFNL_SUBSYS_CTNETLINK << 8) | ty, flags, seq, family, attrs)
}

/// The original tuple (and zone) of an entry whose original tuple is UDP
/// to `port`, ready to send back in a delete.
fn victim(body: &[u8], port: u16) -> Option<Vec<u8>> {
    let mut orig = None;
    let mut zone = None;
    let mut hit = false;
    for (t, p, whole) in raw::attributes(body) {
        if t == CTA_TUPLE_ORIG {
            orig = Some(whole.to_vec());
            for (t2, p2, _) in raw::attributes(p) {
                if t2 == CTA_TUPLE_PROTO {
                    let (mut num, mut dport) = (0u8, 0u16);
                    for (t3, p3, _) in raw::attributes(p2) {
                        if t3 == CTA_PROTO_NUM && !p3.is_empty() {
                            num = p3[0];
                        }
                        if t3 == CTA_PROTO_DST_PORT && p3.len() >= 2 {
                            dport = u16::from_be_bytes([p3[0], p3[1]]);
                        }
                    }
                    hit = num == 17 && dport == port;
                }
            }
        } else if t == CTA_ZONE {
            zone = Some(whole.to_vec());
        }
    }
    let mut o = orig.filter(|_| hit)?;
    o[2..4].copy_from_slice(&(CTA_TUPLE_ORIG | NLA_F_NESTED).to_ne_bytes());
    if let Some(z) = zone {
        o.extend(z);
    }
    Some(o)
}

/// Deletes the UDP conntrack entries whose original destination port is
/// `port` (`ipv6`: of that family), through `socket`, a netfilter socket
/// of the namespace (the nftables one: a socket of its own would cost its
/// own wait at close, see `nfsock`); how many. Entries that expire
/// meanwhile are no error. Anything left unread before it starts (the
/// rest of a dump an error cut short) is read off first, and every answer
/// is matched by its sequence number (its own, from [`SEQ_BASE`]). After
/// an error the socket may hold unread answers: the caller drops it (its
/// return to the pool reads them off, or closes it).
pub fn flush_udp_port(socket: &Socket, ipv6: bool, port: u16) -> Result<usize, NlError> {
    if !super::nfsock::drained(socket) {
        return Err(NlError::Io(std::io::Error::other(
            "the netfilter socket holds unread answers",
        )));
    }
    flush(socket, ipv6, port)
}

/// Conntrack's sequence numbers on a shared socket: far above the
/// nftables user's, which count from 1.
const SEQ_BASE: u32 = 0x4354_0000;

/// The sequence number of the netlink message at `buf[off..]`.
fn seq_at(buf: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([buf[off + 8], buf[off + 9], buf[off + 10], buf[off + 11]])
}

fn flush(socket: &Socket, ipv6: bool, port: u16) -> Result<usize, NlError> {
    let family = if ipv6 { 10 } else { 2 };
    socket.send(
        &message(
            IPCTNL_MSG_CT_GET,
            NLM_F_REQUEST | NLM_F_DUMP,
            SEQ_BASE,
            family,
            &[],
        ),
        0,
    )?;
    let mut victims: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    'dump: loop {
        let n = socket.recv(&mut &mut buf[..], 0)?;
        let mut off = 0;
        while off + 16 <= n {
            let len =
                u32::from_ne_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]) as usize;
            let ty = u16::from_ne_bytes([buf[off + 4], buf[off + 5]]);
            if len < 16 || off + len > n {
                break;
            }
            if seq_at(&buf, off) != SEQ_BASE {
                // Not this dump's.
                off += (len + 3) & !3;
                continue;
            }
            match ty {
                NLMSG_DONE => break 'dump,
                NLMSG_ERROR => {
                    let code = if len >= 20 {
                        i32::from_ne_bytes([
                            buf[off + 16],
                            buf[off + 17],
                            buf[off + 18],
                            buf[off + 19],
                        ])
                    } else {
                        -libc::EIO
                    };
                    return Err(NlError::Kernel(-code));
                }
                _ if len >= 20 => {
                    if let Some(v) = victim(&buf[off + 20..off + len], port) {
                        if victims.len() < MAX_DELETIONS {
                            victims.push(v);
                        }
                    }
                }
                _ => {}
            }
            off += (len + 3) & !3;
        }
    }
    let mut deleted = 0;
    for (i, v) in victims.iter().enumerate() {
        let seq = SEQ_BASE.wrapping_add(1 + i as u32);
        socket.send(
            &message(
                IPCTNL_MSG_CT_DELETE,
                NLM_F_REQUEST | NLM_F_ACK,
                seq,
                family,
                v,
            ),
            0,
        )?;
        // Its acknowledgement (anything else is skipped).
        loop {
            let n = socket.recv(&mut &mut buf[..], 0)?;
            if n < 20 || seq_at(&buf, 0) != seq {
                continue;
            }
            if u16::from_ne_bytes([buf[4], buf[5]]) == NLMSG_ERROR {
                let code = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
                if code == 0 {
                    deleted += 1;
                } else if code != -libc::ENOENT {
                    return Err(NlError::Kernel(-code));
                }
            }
            break;
        }
    }
    Ok(deleted)
}

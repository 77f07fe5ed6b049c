//! Deleting links: one, several as one kernel batch (a link group), or
//! one without waiting for the kernel to free it (a child process sends
//! the deletion).

use std::io;
use std::os::fd::AsRawFd;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::cache::note_change;
use super::decode::deserialize;
use super::error::NlError;
use super::link::link_at;
use super::socket::Netlink;

use crate::netns::NetNs;

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
        crate::netlink::fds::close_all_but(&keep);
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

impl Netlink {
    /// Deletes a link.
    pub fn delete_link(&mut self, index: u32) -> Result<(), NlError> {
        let msg = link_at(index)?;
        self.ack(RouteNetlinkMessage::DelLink(msg), 0)
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
}

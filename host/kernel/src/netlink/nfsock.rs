//! Netfilter sockets, kept for the rest of the process: one per namespace,
//! lent to each user ([`lease`]) and taken back when it is done.
//!
//! Why not a socket per use: the kernel makes the close of a
//! `NETLINK_NETFILTER` socket that has sent anything wait for nf_tables'
//! pending destroy work in its namespace (the `NETLINK_URELEASE`
//! notifier, `nft_rcv_nl_event`, flushes it), and that work waits out an
//! RCU grace period after every commit. Measured with `strace -T` on
//! these machines: 7–18 ms per `close`. A chain of plugins in one process
//! (`wasmcni-chain`: the bridge's masquerade, portmap, firewall) opened
//! and closed a socket per member, and a portmap that maps UDP ports
//! opened a second one for conntrack: each close waited. (Conntrack now
//! goes through the nftables user's socket.) A kept socket
//! is closed by the process's exit: one wait per process, and shorter by
//! whatever the process still does after its last commit.
//!
//! A socket goes back to the pool only when nothing is left to read on it
//! (the rest of an abandoned dump, the acknowledgements of a batch whose
//! reader gave up): the next user starts clean, whatever the last one
//! left.

use std::sync::Mutex;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use super::NlError;
use crate::netns::NetNs;

/// The kept sockets, by the inode of their namespace. A socket holds its
/// namespace, so the inode cannot be reused while the socket is here.
static POOL: Mutex<Vec<(u64, Socket)>> = Mutex::new(Vec::new());

/// Most reads spent emptying a socket before it goes back; one still
/// talking after that is closed instead.
const DRAIN_READS: usize = 256;

/// A netfilter socket bound inside one namespace, back to the pool on
/// drop.
pub struct Lease {
    ns_ino: u64,
    socket: Option<Socket>,
}

impl std::ops::Deref for Lease {
    type Target = Socket;
    fn deref(&self) -> &Socket {
        // Only `drop` takes it.
        self.socket
            .as_ref()
            .expect("a lease holds its socket until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(socket) = self.socket.take() else {
            return;
        };
        if self.ns_ino == 0 || !drained(&socket) {
            return;
        }
        if let Ok(mut pool) = POOL.lock() {
            pool.push((self.ns_ino, socket));
        }
    }
}

/// A netfilter socket inside `ns`: a kept one, or a new one.
pub fn lease(ns: &NetNs) -> Result<Lease, NlError> {
    let ns_ino = ns.ino();
    if ns_ino != 0 {
        let kept = POOL.lock().ok().and_then(|mut pool| {
            let i = pool.iter().position(|(ino, _)| *ino == ns_ino)?;
            Some(pool.swap_remove(i).1)
        });
        if let Some(socket) = kept {
            return Ok(Lease {
                ns_ino,
                socket: Some(socket),
            });
        }
    }
    let socket = ns.run_inside(|| {
        let mut s = Socket::new(NETLINK_NETFILTER)?;
        s.bind_auto()?;
        s.connect(&SocketAddr::new(0, 0))?;
        // Room for the largest nftables batch (256 mappings with 16
        // conditions each, sent in one message) and for one
        // acknowledgement per change: a dropped acknowledgement would
        // leave the outcome of an applied batch unknown. Root may exceed
        // the sysctl limits.
        use nix::sys::socket::{setsockopt, sockopt};
        let size: usize = 4 << 20;
        if let Err(e) = setsockopt(&s, sockopt::SndBufForce, &size)
            .and_then(|()| setsockopt(&s, sockopt::RcvBufForce, &size))
        {
            log::debug!("netfilter socket buffers: {e}");
        }
        Ok(s)
    })?;
    Ok(Lease {
        ns_ino,
        socket: Some(socket),
    })
}

/// Reads whatever is left on `socket` without waiting: whether it is
/// empty now.
pub(super) fn drained(socket: &Socket) -> bool {
    // What is read is thrown away: a short buffer takes a whole datagram
    // off the socket all the same (the rest is truncated), and every lease's
    // return runs this, on the hot path.
    let mut buf = [0u8; 256];
    for _ in 0..DRAIN_READS {
        match socket.recv(&mut &mut buf[..], libc::MSG_DONTWAIT) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A socket comes back from the pool for the same namespace, emptied
    /// of what its last user left unread; a second lease while the first
    /// is out is a socket of its own. In a namespace of the test's own (a
    /// thread's `unshare`), never the machine's.
    #[test]
    fn a_lease_comes_back_emptied() {
        std::thread::spawn(|| {
            if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                #[allow(clippy::disallowed_methods)] // CI decides: fail, not skip
                let ci = std::env::var_os("CI").is_some_and(|v| v == "true");
                assert!(!ci, "this test needs root (a network namespace): {e}");
                return;
            }
            let ns = NetNs::open_container(std::path::Path::new("/proc/thread-self/ns/net"))
                .expect("the thread's namespace");
            let first = lease(&ns).expect("a netfilter socket");
            let fd = first.as_raw_fd();
            // A dump whose answer is left unread: the table list
            // (NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETTABLE, NLM_F_REQUEST
            // | NLM_F_DUMP).
            let mut req = [0u8; 20];
            req[0..4].copy_from_slice(&20u32.to_ne_bytes());
            req[4..6].copy_from_slice(&((10u16 << 8) | 1).to_ne_bytes());
            req[6..8].copy_from_slice(&(1u16 | 0x300).to_ne_bytes());
            req[8..12].copy_from_slice(&7u32.to_ne_bytes());
            first.send(&req, 0).expect("send");
            let mut buf = vec![0u8; 4096];
            std::thread::sleep(std::time::Duration::from_millis(10));
            drop(first);
            let again = lease(&ns).expect("lease");
            assert_eq!(again.as_raw_fd(), fd, "the kept socket");
            let left = again.recv(&mut &mut buf[..], libc::MSG_DONTWAIT);
            assert!(
                matches!(&left, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
                "something was left to read: {left:?}"
            );
            let other = lease(&ns).expect("lease");
            assert_ne!(other.as_raw_fd(), fd, "a second socket");
        })
        .join()
        .expect("the test's thread");
    }
}

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
//! goes through the nftables user's socket.) The kept sockets
//! outlive the process: at its end, [`close_kept_in_background`] hands
//! them to a child that closes them a grace period later: the process's
//! exit (what a runtime waits for) does not wait for them, and by then
//! the work of its commits is done, so the close does not hold the commit
//! lock that the next plugin's commit needs.
//!
//! A socket goes back to the pool only when nothing is left to read on it
//! (the rest of an abandoned dump, the acknowledgements of a batch whose
//! reader gave up): the next user starts clean, whatever the last one
//! left.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use super::NlError;
use crate::netns::NetNs;

/// The kept sockets, by the inode of their namespace. A socket holds its
/// namespace, so the inode cannot be reused while the socket is here.
static POOL: Mutex<Vec<(u64, Socket)>> = Mutex::new(Vec::new());

/// Every netfilter socket this process has open, kept or lent (a user may
/// never give its lease back: the process exits first), for
/// [`close_kept_in_background`]. A socket leaves it when it is closed.
static OPEN: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

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
        if self.ns_ino != 0 && drained(&socket) {
            if let Ok(mut pool) = POOL.lock() {
                pool.push((self.ns_ino, socket));
                return;
            }
        }
        // Closed here: out of the list first (its number may be reused).
        forget_open(socket.as_raw_fd());
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
    if let Ok(mut open) = OPEN.lock() {
        open.push(socket.as_raw_fd());
    }
    Ok(Lease {
        ns_ino,
        socket: Some(socket),
    })
}

/// Takes a socket about to be closed out of [`OPEN`].
fn forget_open(fd: RawFd) {
    if let Ok(mut open) = OPEN.lock() {
        open.retain(|&o| o != fd);
    }
}

/// Makes the release of this process's netfilter sockets someone else's
/// wait: for the end of the process, after its answer is written.
///
/// The last close of a netfilter socket, while nf_tables still has
/// destroy work pending from a commit (anyone's, in any namespace), runs
/// that work to its end under the namespace's commit lock (the kernel's
/// `NETLINK_URELEASE` notifier, `nft_rcv_nl_event`), and the work waits
/// out an RCU grace period: 7–18 ms on these machines. A process closes
/// its sockets in its exit, which a runtime waits for: 10–12 ms of every
/// portmap or firewall call. So a forked child takes copies of every
/// socket still open (in the pool, or in a lease its user never gave
/// back), closes every other descriptor (stdout and stderr, which a
/// runtime reads to EOF; any lock), waits out a grace period itself
/// (`membarrier`, which holds no lock: by then the work of this
/// process's commits is done, and its close has nothing to wait for, nor
/// a next commit for it), then waits for the parent to be gone (the end
/// of a pipe only the parent holds), so that the parent's exit drops
/// references that are not the last, and exits. What was committed is in
/// the kernel already; the work only frees old transactions. The child
/// makes system calls only (the process has other threads). Where no
/// socket was opened, or the fork fails, nothing changes. Returns the
/// child's pid.
pub fn close_kept_in_background() -> Option<libc::pid_t> {
    let open = OPEN.lock().map(|o| o.clone()).unwrap_or_default();
    if open.is_empty() {
        return None;
    }
    let (rd, wr) = nix::unistd::pipe().ok()?;
    let pid = hand_over(&open, rd)?;
    // Until the process exits: its close wakes the child.
    std::mem::forget(wr);
    Some(pid)
}

/// Forks a child that keeps `keep` and `gate` open, closes every other
/// descriptor, waits out an RCU grace period, then until `gate` reads
/// end-of-file, and exits. The parent's copy of `gate` is closed.
fn hand_over(keep: &[RawFd], gate: OwnedFd) -> Option<libc::pid_t> {
    let gate_fd = gate.as_raw_fd();
    let mut fds: Vec<u32> = keep
        .iter()
        .chain(std::iter::once(&gate_fd))
        .filter_map(|&fd| u32::try_from(fd).ok())
        .collect();
    fds.sort_unstable();
    fds.dedup();
    // SAFETY: the child makes system calls only, on memory made before the
    // fork, then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        super::fds::close_all_but(&fds);
        // SAFETY: `membarrier` waits (a kernel without it refuses at
        // once); the read blocks until the parent is gone (or fails); then
        // the child's exit closes the sockets.
        unsafe {
            const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;
            libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
            let mut b = 0u8;
            while libc::read(gate_fd, (&raw mut b).cast(), 1) != 0 {
                if *libc::__errno_location() != libc::EINTR {
                    break;
                }
            }
            libc::_exit(0);
        }
    }
    drop(gate);
    (pid > 0).then_some(pid)
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

    /// Runs `f` on a thread in a network namespace of its own (never the
    /// machine's). Without root it fails in CI and is skipped elsewhere.
    fn in_own_netns(f: impl FnOnce(NetNs) + Send + 'static) {
        std::thread::spawn(|| {
            if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                #[allow(clippy::disallowed_methods)] // CI decides: fail, not skip
                let ci = std::env::var_os("CI").is_some_and(|v| v == "true");
                assert!(!ci, "this test needs root (a network namespace): {e}");
                return;
            }
            f(
                NetNs::open_container(std::path::Path::new("/proc/thread-self/ns/net"))
                    .expect("the thread's namespace"),
            );
        })
        .join()
        .expect("the test's thread");
    }

    /// A socket comes back from the pool for the same namespace, emptied
    /// of what its last user left unread; a second lease while the first
    /// is out is a socket of its own. In a namespace of the test's own (a
    /// thread's `unshare`), never the machine's.
    #[test]
    fn a_lease_comes_back_emptied() {
        in_own_netns(|ns| {
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
        });
    }

    /// At the end of a process its sockets are handed to a child that has
    /// nothing else open (no stdout a runtime would wait on), and that
    /// stays until the parent's end of the gate closes. In a namespace of
    /// the test's own.
    #[test]
    fn a_child_takes_the_sockets_alone_and_waits_for_the_gate() {
        in_own_netns(|ns| {
            let (a, b) = (lease(&ns).expect("a socket"), lease(&ns).expect("a socket"));
            let (rd, wr) = nix::unistd::pipe().expect("a pipe");
            let want_gate = rd.as_raw_fd();
            let mut want = vec![a.as_raw_fd(), b.as_raw_fd(), want_gate];
            want.sort_unstable();
            let child = hand_over(&[a.as_raw_fd(), b.as_raw_fd()], rd).expect("a child");
            // Once it blocks in the gate's read (system call 0 on that
            // descriptor), it has closed the rest and waited out its grace
            // period; a child that did not wait for the gate never gets
            // there (it exits after the grace period).
            let gate = format!("0 {:#x} ", want_gate);
            let mut waited = 0;
            while !std::fs::read_to_string(format!("/proc/{child}/syscall"))
                .is_ok_and(|s| s.starts_with(&gate))
            {
                assert!(waited < 5000, "the child never waited on its gate");
                std::thread::sleep(std::time::Duration::from_millis(1));
                waited += 1;
            }
            let mut has: Vec<RawFd> = std::fs::read_dir(format!("/proc/{child}/fd"))
                .expect("the child's descriptors")
                .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
                .collect();
            has.sort_unstable();
            assert_eq!(
                has, want,
                "the child holds the sockets and its gate, nothing else"
            );
            drop((a, b));
            // The parent's end closes (its exit, here by hand): the child goes.
            drop(wr);
            let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None)
                .expect("the child");
            assert_eq!(
                status,
                nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(child), 0)
            );
        });
    }
}

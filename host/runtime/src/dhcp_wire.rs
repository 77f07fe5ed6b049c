//! What the host and wasmcni's DHCP daemon (`wasmcni dhcp-daemon`) say to
//! each other over the daemon's unix socket: one JSON request per
//! connection, with the container's network namespace attached to an
//! `acquire` as an open file (`SCM_RIGHTS`), and one JSON answer.
//!
//! The daemon never opens a namespace by a path a request names: it uses
//! the file it is handed (and, after a restart, reopens the recorded path
//! only if it is still the namespace it was handed: same device and
//! inode). It answers only root (`SO_PEERCRED`).

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use wasmcni_kernel::dhcp4::{Lease, Options, Route};

/// The longest request or answer, in bytes.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// A request to the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// Obtain (or return the held) lease of `client_id` on `ifname` in the
    /// namespace sent with the request.
    Acquire {
        /// `<container id>/<network>/<ifname>`, the host's.
        client_id: String,
        /// The interface in that namespace.
        ifname: String,
        /// The path the runtime named it by (`CNI_NETNS`): the daemon only
        /// compares it with the file it was handed, to notice when the
        /// runtime's namespace is gone and to resume after a restart.
        netns: PathBuf,
        /// What to ask for and send.
        options: Options,
        /// How long the exchange may take.
        timeout_ms: u64,
    },
    /// The lease held for `client_id`.
    Current {
        /// As for `Acquire`.
        client_id: String,
    },
    /// Release and forget the lease of `client_id` (none held: done).
    Release {
        /// As for `Acquire`.
        client_id: String,
    },
}

impl Request {
    /// The client the request is about.
    pub fn client_id(&self) -> &str {
        match self {
            Request::Acquire { client_id, .. }
            | Request::Current { client_id }
            | Request::Release { client_id } => client_id,
        }
    }
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Answer {
    /// The lease.
    Lease(Lease),
    /// Released (or none was held).
    Released,
    /// Why not, in words for the CNI error.
    Error(String),
}

/// Why the daemon could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Nothing listens on the socket.
    #[error("no DHCP daemon listens on {path} ({source}); start it with `wasmcni dhcp-daemon` or its systemd socket unit (wasmcni-dhcp.socket)")]
    NoDaemon {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The exchange failed or timed out.
    #[error("DHCP daemon on {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The answer was not one.
    #[error("DHCP daemon on {path}: unreadable answer: {msg}")]
    Garbled {
        /// The socket.
        path: PathBuf,
        /// What was wrong.
        msg: String,
    },
}

/// Sends `request` (with `netns`, if any) to the daemon on `socket` and
/// waits at most `timeout` for its answer.
pub fn call(
    socket: &Path,
    request: &Request,
    netns: Option<BorrowedFd<'_>>,
    timeout: Duration,
) -> Result<Answer, WireError> {
    let io_err = |source| WireError::Io {
        path: socket.to_owned(),
        source,
    };
    let start = std::time::Instant::now();
    let mut stream =
        connect(socket, timeout.min(CONNECT_TIMEOUT)).map_err(|source| WireError::NoDaemon {
            path: socket.to_owned(),
            source,
        })?;
    // One budget for the connection and the answer.
    let left = timeout
        .saturating_sub(start.elapsed())
        .max(Duration::from_millis(1));
    stream.set_read_timeout(Some(left)).map_err(io_err)?;
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(io_err)?;
    let mut body = serde_json::to_vec(request).map_err(|e| io_err(io::Error::other(e)))?;
    body.push(b'\n');
    send_with_fd(&stream, &body, netns.map(|f| f.as_raw_fd())).map_err(io_err)?;
    stream.shutdown(std::net::Shutdown::Write).map_err(io_err)?;
    let mut answer = Vec::new();
    (&mut stream)
        .take(MAX_MESSAGE as u64 + 1)
        .read_to_end(&mut answer)
        .map_err(|e| {
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                io_err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {:.1} s", timeout.as_secs_f64()),
                ))
            } else {
                io_err(e)
            }
        })?;
    serde_json::from_slice(&answer).map_err(|e| WireError::Garbled {
        path: socket.to_owned(),
        msg: e.to_string(),
    })
}

/// The most bytes of a client identifier (option 61 holds 255, less its
/// type byte).
pub const MAX_CLIENT_ID: usize = 254;

/// Whether a daemon listens on `socket`: a connection is accepted or
/// queued within 2 s (a daemon that stopped answering, with room in its
/// backlog, still counts).
pub fn listening(socket: &Path) -> Result<(), WireError> {
    connect(socket, Duration::from_secs(2))
        .map(drop)
        .map_err(|source| WireError::NoDaemon {
            path: socket.to_owned(),
            source,
        })
}

/// How long a connection may wait for a daemon that accepts none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to `socket`, waiting at most `timeout` while its backlog is
/// full (a daemon that stopped accepting: a blocking connect would wait
/// for ever).
fn connect(socket: &Path, timeout: Duration) -> io::Result<UnixStream> {
    use nix::errno::Errno;
    use nix::sys::socket::{
        connect, socket as new_socket, AddressFamily, SockFlag, SockType, UnixAddr,
    };
    let fd = new_socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    let addr = UnixAddr::new(socket)?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match connect(fd.as_raw_fd(), &addr) {
            Ok(()) => break,
            Err(Errno::EAGAIN) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(Errno::EAGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "accepted no connection within {:.1} s",
                        timeout.as_secs_f64()
                    ),
                ))
            }
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

fn send_with_fd(stream: &UnixStream, body: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds: Vec<RawFd> = fd.into_iter().collect();
    let cmsg: Vec<ControlMessage<'_>> = if fds.is_empty() {
        Vec::new()
    } else {
        vec![ControlMessage::ScmRights(&fds)]
    };
    let iov = [io::IoSlice::new(body)];
    let n = sendmsg::<()>(
        stream.as_raw_fd(),
        &iov,
        &cmsg,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)?;
    if n < body.len() {
        (&*stream).write_all(&body[n..])?;
    }
    Ok(())
}

/// The daemon's side: reads one request and the file sent with it.
pub fn receive(stream: &UnixStream) -> io::Result<(Request, Option<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut body = Vec::new();
    let mut fd = None;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut space = nix::cmsg_space!([RawFd; 2]);
        let (n, fds) = {
            let mut iov = [io::IoSliceMut::new(&mut buf)];
            let msg = recvmsg::<()>(
                stream.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(io::Error::from)?;
            let mut fds = Vec::new();
            for c in msg.cmsgs().map_err(io::Error::from)? {
                if let ControlMessageOwned::ScmRights(v) = c {
                    fds.extend(v);
                }
            }
            (msg.bytes, fds)
        };
        for raw in fds {
            // SAFETY: the kernel installed these fds in this process for us.
            let owned = unsafe { OwnedFd::from_raw_fd(raw) };
            if fd.is_none() {
                fd = Some(owned);
            }
        }
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
        if body.len() > MAX_MESSAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request too long",
            ));
        }
        if body.ends_with(b"\n") {
            break;
        }
    }
    let request =
        serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok((request, fd))
}

/// The daemon's side: writes the answer.
pub fn answer(mut stream: &UnixStream, answer: &Answer) -> io::Result<()> {
    let body = serde_json::to_vec(answer).map_err(io::Error::other)?;
    stream.write_all(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daemon that stopped accepting (its backlog full): the call ends
    /// with a clear error in bounded time, not a connect that waits for
    /// ever.
    #[test]
    fn a_daemon_that_accepts_nothing_is_given_up_on() {
        use nix::sys::socket::{
            bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dhcp.sock");
        let l = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        bind(l.as_raw_fd(), &UnixAddr::new(&path).expect("addr")).expect("bind");
        listen(&l, Backlog::new(0).expect("backlog")).expect("listen");
        // Fill the backlog (a queue of 0 still takes one).
        let mut held = Vec::new();
        while let Ok(s) = connect(&path, Duration::from_millis(50)) {
            held.push(s);
            assert!(held.len() < 1000, "the backlog never filled");
        }
        let start = std::time::Instant::now();
        let r = call(
            &path,
            &Request::Current {
                client_id: "c1/net/eth0".into(),
            },
            None,
            Duration::from_millis(300),
        );
        let took = start.elapsed();
        match r {
            Err(WireError::NoDaemon { source, .. }) => assert!(
                source
                    .to_string()
                    .contains("accepted no connection within 0.3 s"),
                "{source}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn a_request_and_its_namespace_cross_the_socket() {
        let (a, b) = UnixStream::pair().expect("pair");
        let file = std::fs::File::open("/proc/self/ns/net").expect("open");
        let req = Request::Acquire {
            client_id: "c1/net/eth0".into(),
            ifname: "eth0".into(),
            netns: "/run/netns/x".into(),
            options: Options {
                client_id: b"c1/net/eth0".to_vec(),
                request: vec![1, 3],
                provide: vec![(12, b"h".to_vec())],
                broadcast: false,
            },
            timeout_ms: 1000,
        };
        let mut body = serde_json::to_vec(&req).expect("json");
        body.push(b'\n');
        send_with_fd(&a, &body, Some(file.as_raw_fd())).expect("send");
        drop(a);
        let (got, fd) = receive(&b).expect("receive");
        assert_eq!(got, req);
        let fd = fd.expect("an fd");
        let m1 = nix::sys::stat::fstat(&fd).expect("fstat");
        let m2 = nix::sys::stat::fstat(&file).expect("fstat");
        assert_eq!((m1.st_dev, m1.st_ino), (m2.st_dev, m2.st_ino));
    }

    #[test]
    fn answers_read_back() {
        for a in [Answer::Released, Answer::Error("no offer".into())] {
            let j = serde_json::to_string(&a).expect("json");
            assert_eq!(serde_json::from_str::<Answer>(&j).expect("back"), a);
        }
    }
}

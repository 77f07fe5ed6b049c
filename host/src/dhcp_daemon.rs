//! `wasmcni dhcp-daemon`: the long-running part of the `dhcp` IPAM plugin.
//! It obtains DHCPv4 leases inside containers' network namespaces, renews
//! them for as long as each namespace lives, releases them on request
//! (the attachment's DEL) or when the namespace is gone, and keeps them
//! across its own restart.
//!
//! # Authority
//! The daemon acts only in namespaces it was handed: each `acquire`
//! carries the container's namespace as an open file (`SCM_RIGHTS`, from
//! the wasmcni invocation that opened and verified `CNI_NETNS`); the
//! daemon checks it is a network namespace and not its own, and that the
//! path the request names is that very namespace (same device and inode).
//! A thread of its own enters it and opens one packet socket on the one
//! interface named; nothing else is done there (no link, address or
//! route is changed: the plugin configures the interface through the
//! host). It answers only root (`SO_PEERCRED`) on a socket only root can
//! reach, and writes only below its state directory. After a restart it
//! reopens a recorded namespace path only if it is still the namespace it
//! was handed (nsfs, same device and inode), else it drops the lease.
//! Leases are keyed by the client identifier the host derives from the
//! attachment (`<container id>/<network>/<ifname>`), never by a plugin.
//!
//! # Lease persistence
//! One file per lease under the state directory (`<sha256 of the client
//! id>.json`, 0600, written atomically): the client identifier, interface,
//! the namespace's path, device and inode, the options, the lease and when
//! it was last renewed. At start every file is resumed (renewal continues
//! on the lease's own timers) or removed (its namespace is gone).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use wasmcni_runtime::dhcp4::{Client, DhcpError};
use wasmcni_runtime::dhcp_wire::{self, Answer, Lease, Options as DhcpOptions, Request};

/// What `wasmcni dhcp-daemon` was asked.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// The unix socket to listen on (ignored when systemd hands one over:
    /// LISTEN_FDS).
    #[arg(long, default_value = wasmcni_runtime::policy::DEFAULT_DHCP_SOCKET)]
    pub socket: PathBuf,
    /// Where the leases are kept.
    #[arg(long, default_value = "/var/lib/wasmcni/dhcp")]
    pub state_dir: PathBuf,
    /// Longest DHCP exchange for one request, in seconds (a request's own
    /// timeout, bounded by its CNI deadline, may be shorter).
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// How often, in seconds, to look whether a lease's namespace is
    /// gone (its path no longer names it).
    #[arg(long, default_value_t = 10.0)]
    pub check_interval: f64,
}

/// A lease as kept on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Kept {
    client_id: String,
    ifname: String,
    netns: PathBuf,
    dev: u64,
    ino: u64,
    options: DhcpOptions,
    lease: Lease,
    /// When the server last granted it (seconds since the epoch).
    granted_at: u64,
    /// The boot it was acquired in: a namespace's (device, inode) names
    /// it only within one boot (after a reboot the kernel hands the same
    /// numbers to new namespaces), so a lease of another boot is never
    /// resumed.
    #[serde(default)]
    boot_id: String,
}

enum Cmd {
    Release(mpsc::Sender<Result<(), String>>),
}

struct Held {
    tx: mpsc::Sender<Cmd>,
    kept: Arc<Mutex<Kept>>,
}

struct Daemon {
    opts: Options,
    own_netns: (u64, u64),
    held: Mutex<HashMap<String, Held>>,
    /// The leases being acquired: one acquire of a lease at a time (a
    /// second would start a second thread for it, and leak the first).
    acquiring: Mutex<HashSet<String>>,
}

/// An acquire under way, until dropped: by the request when it answers
/// from what is held, else by the lease's thread once its first exchange
/// is over (a request that gave up waiting does not end it).
struct Acquiring(Arc<Daemon>, String);

impl Drop for Acquiring {
    fn drop(&mut self) {
        self.0
            .acquiring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.1);
    }
}

/// What the thread of a lease being acquired answers, and holds.
struct First {
    /// The request's answer: the lease, or why not.
    answer: mpsc::Sender<Result<Lease, String>>,
    /// How long the first exchange may take.
    timeout: Duration,
    /// The lease's command channel, held once it is granted.
    held: mpsc::Sender<Cmd>,
    /// No other acquire of the key until the first exchange is over.
    _acquiring: Acquiring,
}

/// Tells the files a lease is written through apart (a renewal's thread
/// and a new acquire of the same lease may write at once).
static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("wasmcni dhcp-daemon: {msg}");
}

/// Runs the daemon until it is killed.
pub fn run(opts: &Options) -> anyhow::Result<()> {
    let own = fs::metadata("/proc/self/ns/net").context("/proc/self/ns/net")?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&opts.state_dir)
        .with_context(|| format!("creating {}", opts.state_dir.display()))?;
    let listener = listener(&opts.socket)?;
    let daemon = Arc::new(Daemon {
        opts: opts.clone(),
        own_netns: (own.dev(), own.ino()),
        held: Mutex::new(HashMap::new()),
        acquiring: Mutex::new(HashSet::new()),
    });
    daemon.resume();
    log(format!(
        "listening on {} (state in {})",
        opts.socket.display(),
        opts.state_dir.display()
    ));
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let d = daemon.clone();
        std::thread::spawn(move || d.serve(stream));
    }
    Ok(())
}

/// The socket systemd handed over (LISTEN_FDS, fd 3), or a new one at
/// `path` (0600; a stale socket file nothing listens on is replaced).
fn listener(path: &Path) -> anyhow::Result<UnixListener> {
    #[allow(clippy::disallowed_methods)] // systemd's protocol is environment variables
    let pid = std::env::var("LISTEN_PID").ok();
    #[allow(clippy::disallowed_methods)]
    let fds = std::env::var("LISTEN_FDS").ok();
    if pid.as_deref() == Some(&std::process::id().to_string()) {
        anyhow::ensure!(
            fds.as_deref() == Some("1"),
            "socket activation must hand over exactly one socket (LISTEN_FDS={fds:?})"
        );
        // SAFETY: systemd's protocol: fd 3 is the listening socket, ours.
        return Ok(unsafe { UnixListener::from_raw_fd(3) });
    }
    if let Some(dir) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        match UnixStream::connect(path) {
            Ok(_) => anyhow::bail!("a daemon already listens on {}", path.display()),
            Err(_) => {
                fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?
            }
        }
    }
    let l = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Checks that `fd` is a network namespace other than the daemon's own,
/// and returns its (device, inode).
fn verify_netns(fd: BorrowedFd<'_>, own: (u64, u64)) -> Result<(u64, u64), String> {
    let fs = nix::sys::statfs::fstatfs(fd).map_err(|e| format!("fstatfs: {e}"))?;
    if fs.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
        return Err("the file handed over is not a namespace".into());
    }
    // NS_GET_NSTYPE: _IO(0xb7, 0x3), see ioctl_ns(2).
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd.
    let t = unsafe { libc::ioctl(fd.as_raw_fd(), 0xb703) };
    if t != libc::CLONE_NEWNET {
        return Err("the namespace handed over is not a network namespace".into());
    }
    let st = nix::sys::stat::fstat(fd).map_err(|e| format!("fstat: {e}"))?;
    let id = (st.st_dev, st.st_ino);
    if id == own {
        return Err("the namespace handed over is the daemon's own (the node's)".into());
    }
    Ok(id)
}

/// The (device, inode) `path` names now, if any.
fn path_id(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl Daemon {
    fn file(&self, client_id: &str) -> PathBuf {
        let h = sha2::Sha256::digest(client_id.as_bytes());
        self.opts.state_dir.join(format!("{}.json", hex::encode(h)))
    }

    fn store(&self, k: &Kept) {
        let path = self.file(&k.client_id);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{n}"));
        let r = (|| -> io::Result<()> {
            let body = serde_json::to_vec_pretty(k).map_err(io::Error::other)?;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            io::Write::write_all(&mut f, &body)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)
        })();
        if let Err(e) = r {
            log(format!("{}: keeping the lease failed: {e}", path.display()));
        }
    }

    /// Whether the lease's file is `kept`'s to write or remove: no other
    /// lease of its key is held (a release that gave up waiting for this
    /// thread, then a new acquire of the key, would have one).
    fn is_mine(&self, client_id: &str, kept: &Arc<Mutex<Kept>>) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(client_id)
            .is_none_or(|h| Arc::ptr_eq(&h.kept, kept))
    }

    fn store_if_mine(&self, k: &Kept, kept: &Arc<Mutex<Kept>>) {
        if self.is_mine(&k.client_id, kept) {
            self.store(k);
        }
    }

    fn forget_if_mine(&self, client_id: &str, kept: &Arc<Mutex<Kept>>) {
        if self.is_mine(client_id, kept) {
            self.forget(client_id);
        }
    }

    fn forget(&self, client_id: &str) {
        let path = self.file(client_id);
        if let Err(e) = fs::remove_file(&path) {
            if e.kind() != io::ErrorKind::NotFound {
                log(format!("{}: {e}", path.display()));
            }
        }
    }

    /// Resumes the leases kept on disk whose namespaces are still the
    /// ones handed over; removes the others.
    fn resume(self: &Arc<Self>) {
        let Ok(dir) = fs::read_dir(&self.opts.state_dir) else {
            return;
        };
        // Writes a crash cut short go first: the leases' threads, started
        // below, write files of their own beside them.
        let mut kept_files = Vec::new();
        for e in dir.flatten() {
            let path = e.path();
            match path.extension().and_then(|x| x.to_str()) {
                Some("json") => kept_files.push(path),
                Some(x) if x.starts_with("tmp") => {
                    let _ = fs::remove_file(&path);
                }
                _ => {}
            }
        }
        for path in kept_files {
            let kept: Option<Kept> = fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let Some(kept) = kept else {
                log(format!("{}: unreadable, removed", path.display()));
                let _ = fs::remove_file(&path);
                continue;
            };
            let boot = wasmcni_runtime::record::boot_id().unwrap_or_default();
            let ns = fs::File::open(&kept.netns)
                .map_err(|e| e.to_string())
                .and_then(|f| {
                    if kept.boot_id.is_empty() || kept.boot_id != boot {
                        return Err("acquired in another boot".into());
                    }
                    let id = verify_netns(f.as_fd(), self.own_netns)?;
                    if id == (kept.dev, kept.ino) {
                        Ok(OwnedFd::from(f))
                    } else {
                        Err("another namespace now".into())
                    }
                });
            match ns {
                Ok(fd) => {
                    log(format!(
                        "resuming the lease of {} ({})",
                        kept.client_id, kept.lease.ip
                    ));
                    let id = kept.client_id.clone();
                    let (tx, rx) = mpsc::channel();
                    let kept = Arc::new(Mutex::new(kept));
                    self.held.lock().unwrap_or_else(|e| e.into_inner()).insert(
                        id,
                        Held {
                            tx,
                            kept: kept.clone(),
                        },
                    );
                    let d = self.clone();
                    std::thread::spawn(move || d.maintain(fd, kept, rx, None));
                }
                Err(why) => {
                    log(format!(
                        "{}: namespace {} gone ({why}): lease {} dropped",
                        kept.client_id,
                        kept.netns.display(),
                        kept.lease.ip
                    ));
                    let _ = fs::remove_file(&path);
                }
            }
        }
    }

    fn serve(self: Arc<Self>, stream: UnixStream) {
        let answer =
            match nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
            {
                Ok(c) if c.uid() == 0 => {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    match dhcp_wire::receive(&stream) {
                        Ok((req, fd)) => self.handle(req, fd),
                        Err(e) => Answer::Error(format!("unreadable request: {e}")),
                    }
                }
                Ok(_) => Answer::Error("the DHCP daemon answers only root".into()),
                Err(e) => Answer::Error(format!("SO_PEERCRED: {e}")),
            };
        let _ = dhcp_wire::answer(&stream, &answer);
    }

    fn handle(self: &Arc<Self>, req: Request, fd: Option<OwnedFd>) -> Answer {
        match req {
            Request::Acquire {
                client_id,
                ifname,
                netns,
                options,
                timeout_ms,
            } => {
                let Some(fd) = fd else {
                    return Answer::Error("acquire without a namespace".into());
                };
                self.acquire(client_id, ifname, netns, options, timeout_ms, fd)
            }
            Request::Current { client_id } => {
                let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
                match held.get(&client_id) {
                    Some(h) => Answer::Lease(
                        h.kept
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .lease
                            .clone(),
                    ),
                    None => Answer::Error(format!("no DHCP lease held for {client_id}")),
                }
            }
            Request::Release { client_id } => match self.release(&client_id) {
                Ok(()) => Answer::Released,
                Err(e) => Answer::Error(e),
            },
        }
    }

    fn release(&self, client_id: &str) -> Result<(), String> {
        let h = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(client_id);
        let Some(h) = h else {
            self.forget(client_id);
            return Ok(());
        };
        let (tx, rx) = mpsc::channel();
        if h.tx.send(Cmd::Release(tx)).is_err() {
            self.forget(client_id);
            return Ok(());
        }
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(r) => r,
            Err(_) => {
                self.forget(client_id);
                Ok(())
            }
        }
    }

    fn acquire(
        self: &Arc<Self>,
        client_id: String,
        ifname: String,
        netns: PathBuf,
        options: DhcpOptions,
        timeout_ms: u64,
        fd: OwnedFd,
    ) -> Answer {
        let id = match verify_netns(fd.as_fd(), self.own_netns) {
            Ok(id) => id,
            Err(e) => return Answer::Error(e),
        };
        if path_id(&netns) != Some(id) {
            return Answer::Error(format!(
                "{} does not name the namespace handed over",
                netns.display()
            ));
        }
        if ifname.is_empty() || ifname.len() > 15 || ifname.contains(['/', ':']) {
            return Answer::Error(format!("invalid interface name {ifname:?}"));
        }
        if options.client_id.len() > dhcp_wire::MAX_CLIENT_ID
            || options.provide.iter().any(|(_, v)| v.len() > 255)
        {
            return Answer::Error("an option longer than DHCP carries".into());
        }
        if !self
            .acquiring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(client_id.clone())
        {
            return Answer::Error(format!("an acquire of {client_id} is already under way"));
        }
        let acquiring = Acquiring(self.clone(), client_id.clone());
        // The lease this attachment holds in this namespace already; one
        // of an earlier incarnation (another namespace) is released first.
        let existing = {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.get(&client_id).map(|h| {
                let k = h.kept.lock().unwrap_or_else(|e| e.into_inner());
                ((k.dev, k.ino), k.ifname.clone(), k.lease.clone())
            })
        };
        if let Some((was, was_if, lease)) = existing {
            if was == id && was_if == ifname {
                return Answer::Lease(lease);
            }
            let _ = self.release(&client_id);
        }
        let timeout = Duration::from_millis(timeout_ms)
            .min(Duration::from_secs_f64(self.opts.timeout.max(0.1)));
        let kept = Arc::new(Mutex::new(Kept {
            client_id: client_id.clone(),
            ifname,
            netns,
            dev: id.0,
            ino: id.1,
            options,
            lease: placeholder_lease(),
            granted_at: 0,
            boot_id: wasmcni_runtime::record::boot_id().unwrap_or_default(),
        }));
        let (tx, rx) = mpsc::channel();
        let (first_tx, first_rx) = mpsc::channel();
        let d = self.clone();
        let first = First {
            answer: first_tx,
            timeout,
            held: tx,
            _acquiring: acquiring,
        };
        std::thread::spawn(move || d.maintain(fd, kept, rx, Some(first)));
        match first_rx.recv_timeout(timeout + Duration::from_secs(2)) {
            Ok(Ok(lease)) => Answer::Lease(lease),
            Ok(Err(e)) => Answer::Error(e),
            Err(_) => Answer::Error(format!(
                "no DHCP lease within {:.1} s",
                timeout.as_secs_f64()
            )),
        }
    }

    /// A lease's thread: enters the namespace, acquires (if `first`),
    /// renews on the lease's timers, releases when asked or when the
    /// namespace is gone.
    fn maintain(
        self: Arc<Self>,
        netns: OwnedFd,
        kept: Arc<Mutex<Kept>>,
        rx: mpsc::Receiver<Cmd>,
        first: Option<First>,
    ) {
        let snapshot = || kept.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let k = snapshot();
        let fail = |msg: String| {
            if let Some(f) = &first {
                let _ = f.answer.send(Err(msg));
            } else {
                log(format!("{}: {msg}", k.client_id));
            }
        };
        if let Err(e) = nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET) {
            return fail(format!("entering the namespace: {e}"));
        }
        let client = match Client::open(&k.ifname) {
            Ok(c) => c,
            Err(e) => {
                return fail(format!(
                    "DHCP on {} in the container namespace: {e}",
                    k.ifname
                ))
            }
        };
        if let Some(f) = first {
            match client.acquire(&k.options, Instant::now() + f.timeout) {
                Ok(lease) => {
                    let mut g = kept.lock().unwrap_or_else(|e| e.into_inner());
                    g.lease = lease.clone();
                    g.granted_at = now_secs();
                    self.store(&g);
                    drop(g);
                    log(format!(
                        "{}: leased {}/{} from {}",
                        k.client_id, lease.ip, lease.prefix, lease.server
                    ));
                    // Held before it is answered, while no other acquire
                    // of the key can start (`f` holds it).
                    self.held.lock().unwrap_or_else(|e| e.into_inner()).insert(
                        k.client_id.clone(),
                        Held {
                            tx: f.held,
                            kept: kept.clone(),
                        },
                    );
                    if f.answer.send(Ok(lease.clone())).is_err() {
                        // The request gave up meanwhile: give it back.
                        self.held
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&k.client_id);
                        let _ = client.release(&lease, &k.options);
                        self.forget(&k.client_id);
                        return;
                    }
                }
                Err(e) => {
                    let _ = f.answer.send(Err(e.to_string()));
                    return;
                }
            }
        }
        let check = Duration::from_secs_f64(self.opts.check_interval.max(0.1));
        let timeout = Duration::from_secs_f64(self.opts.timeout.max(0.1));
        let mut retry_at: Option<u64> = None;
        loop {
            let k = snapshot();
            let renew_at = retry_at.unwrap_or(k.granted_at + u64::from(k.lease.t1_secs));
            let wait = Duration::from_secs(renew_at.saturating_sub(now_secs())).min(check);
            match rx.recv_timeout(wait.max(Duration::from_millis(200))) {
                Ok(Cmd::Release(reply)) => {
                    let r = client
                        .release(&k.lease, &k.options)
                        .map_err(|e| e.to_string());
                    self.forget_if_mine(&k.client_id, &kept);
                    log(format!("{}: released {}", k.client_id, k.lease.ip));
                    // The interface may be gone already (DEL after the
                    // link): the lease is forgotten either way.
                    let _ = reply.send(match r {
                        Err(e) if !e.contains("No such device") => Err(e),
                        _ => Ok(()),
                    });
                    return;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if path_id(&k.netns) != Some((k.dev, k.ino)) {
                let _ = client.release(&k.lease, &k.options);
                self.forget_if_mine(&k.client_id, &kept);
                let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
                if held
                    .get(&k.client_id)
                    .is_some_and(|h| Arc::ptr_eq(&h.kept, &kept))
                {
                    held.remove(&k.client_id);
                }
                log(format!(
                    "{}: namespace {} gone: released {}",
                    k.client_id,
                    k.netns.display(),
                    k.lease.ip
                ));
                return;
            }
            let now = now_secs();
            if now < renew_at {
                continue;
            }
            let rebind = now >= k.granted_at + u64::from(k.lease.t2_secs);
            match client.renew(&k.lease, &k.options, rebind, Instant::now() + timeout) {
                Ok(lease) => {
                    let now = {
                        let mut g = kept.lock().unwrap_or_else(|e| e.into_inner());
                        g.lease = lease;
                        g.granted_at = now_secs();
                        g.clone()
                    };
                    // Not under the lease's lock: `held` is taken first
                    // elsewhere (a `current` request).
                    self.store_if_mine(&now, &kept);
                    retry_at = None;
                    log(format!("{}: renewed {}", k.client_id, now.lease.ip));
                }
                Err(e) => {
                    let expired = now >= k.granted_at + u64::from(k.lease.lease_secs);
                    log(format!(
                        "{}: renewing {} failed{}: {e}",
                        k.client_id,
                        k.lease.ip,
                        if expired {
                            " (the lease has expired)"
                        } else {
                            ""
                        }
                    ));
                    if matches!(e, DhcpError::Nak { .. }) {
                        log(format!(
                            "{}: the server refused the lease; it is no longer renewed",
                            k.client_id
                        ));
                    }
                    retry_at = Some(now_secs() + 5);
                }
            }
        }
    }
}

fn placeholder_lease() -> Lease {
    use std::net::Ipv4Addr;
    Lease {
        ip: Ipv4Addr::UNSPECIFIED,
        prefix: 0,
        router: None,
        routes: Vec::new(),
        classless: false,
        dns: Vec::new(),
        server: Ipv4Addr::UNSPECIFIED,
        server_mac: [0; 6],
        lease_secs: 0,
        t1_secs: 0,
        t2_secs: 0,
    }
}

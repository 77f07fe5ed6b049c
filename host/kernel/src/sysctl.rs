//! Network sysctls, read and written from inside a namespace.
//!
//! `/proc/sys/net` resolves to the network namespace of the task that opens
//! it, so every access happens inside the namespace
//! ([`NetNs::run_inside`]).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use netlink_packet_route::link::InetDevConf;

use crate::netlink::route::error::NlError;
use crate::netlink::route::socket::Netlink;
use crate::netns::NetNs;

/// The most a sysctl read returns (network sysctls are a few bytes; this
/// only bounds a surprise).
const MAX_VALUE: u64 = 64 * 1024;

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The `/proc/sys` path of dotted key `key`, which must be a `net.` key
/// made of `[A-Za-z0-9_/-]+` components; a `/` inside a component becomes
/// a `.` in the path (sysctl(8): `net.ipv4.conf.eth0/100.forwarding` is
/// `/proc/sys/net/ipv4/conf/eth0.100/forwarding`).
pub fn key_path(key: &str) -> io::Result<PathBuf> {
    let mut components = key.split('.');
    if components.next() != Some("net") {
        return Err(invalid(format!("sysctl key {key:?} is not a net.* key")));
    }
    let mut path = PathBuf::from("/proc/sys/net");
    let mut count = 0usize;
    for c in components {
        let valid = !c.is_empty()
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'/'));
        let name = c.replace('/', ".");
        // "/" and "//" would become "." and "..".
        if !valid || name == "." || name == ".." {
            return Err(invalid(format!("sysctl key {key:?}: bad component {c:?}")));
        }
        path.push(name);
        count += 1;
    }
    if count == 0 {
        return Err(invalid(format!("sysctl key {key:?} names no setting")));
    }
    Ok(path)
}

thread_local! {
    /// `/proc/sys/net/<dir>` (`ipv4`, `ipv6`, ...) of each namespace this
    /// thread has been in ([`crate::netns::inside`]), each opened once.
    /// Every namespace on the node has its own entry for these directories
    /// under the one `/proc/sys/net`, and a lookup compares them one by
    /// one: with 1000 namespaces an open of `/proc/sys/net/ipv4/...` took
    /// ~150 µs here, an open below a held `/proc/sys/net/ipv4` ~3 µs.
    static NET_DIRS: std::cell::RefCell<Vec<(Option<u64>, String, std::os::fd::OwnedFd)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Drops what this thread keeps for the namespace handle `id` (its held
/// directories and its route socket): the handle is gone.
pub(crate) fn forget(id: u64) {
    let _ = NET_DIRS.try_with(|d| d.borrow_mut().retain(|(ns, ..)| *ns != Some(id)));
    let _ = ROUTE.try_with(|r| r.borrow_mut().retain(|(ns, _)| *ns != Some(id)));
}

/// Opens `path` (a [`key_path`]) for reading or writing, in the namespace
/// of the calling thread, below a held `/proc/sys/net/<dir>`.
fn open_here(path: &Path, write: bool) -> io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let mut rest = path
        .strip_prefix("/proc/sys/net")
        .map_err(|_| invalid(format!("{} is not below /proc/sys/net", path.display())))?
        .components();
    let (Some(dir), rest) = (rest.next(), rest.as_path()) else {
        return File::open(path);
    };
    if rest.as_os_str().is_empty() {
        return File::options().read(!write).write(write).open(path);
    }
    let dir = dir.as_os_str().to_string_lossy().into_owned();
    let rest = std::ffi::CString::new(rest.as_os_str().as_bytes())
        .map_err(|_| invalid(format!("{} contains NUL", path.display())))?;
    let flags = libc::O_CLOEXEC
        | libc::O_NOFOLLOW
        | if write {
            libc::O_WRONLY
        } else {
            libc::O_RDONLY
        };
    let ns = crate::netns::inside();
    NET_DIRS.with(|dirs| {
        let mut dirs = dirs.borrow_mut();
        let at = match dirs.iter().position(|(n, d, _)| *n == ns && *d == dir) {
            Some(i) => i,
            None => {
                let f = File::options()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY)
                    .open(Path::new("/proc/sys/net").join(&dir))?;
                crate::netns::on_drop(forget);
                dirs.push((ns, dir, OwnedFd::from(f)));
                dirs.len() - 1
            }
        };
        // SAFETY: a valid directory descriptor and a NUL-terminated path.
        let fd = unsafe { libc::openat(dirs[at].2.as_raw_fd(), rest.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: openat returned a new descriptor that nothing else owns.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    })
}

thread_local! {
    /// A route socket of each namespace this thread has been in
    /// ([`crate::netns::inside`]), opened on first use (see [`by_netlink`]).
    static ROUTE: std::cell::RefCell<Vec<(Option<u64>, Netlink)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A setting read (and, for a link's, written) over netlink rather than
/// below `/proc/sys/net/ipv4`: the first lookup of that directory in a
/// process compares one entry per namespace on the node (about 1 ms each
/// with 2000 namespaces here), and an ADD made two (`ip_forward` in the
/// node, `arp_notify` in the container). The values are the sysctls' own
/// stores; a write goes this way only for a setting whose sysctl write does
/// nothing else in the kernel, on a link that is down (as a plugin's new
/// link is), and only where `/proc/sys` is mounted writable. Anything
/// netlink cannot answer (a link without IPv4, an old kernel) goes to
/// `/proc/sys` as before, which answers with its own error. A link renamed
/// between the lookup by name and the write by index keeps the write (a
/// sysctl open at that instant would have found the new holder of the
/// name); only root can rename links.
enum ByNetlink {
    /// `net.ipv4.ip_forward`.
    Forwarding,
    /// `net.ipv4.conf.<link>.<setting>`: the link, `IPV4_DEVCONF_*`, and
    /// the setting in the kernel's answer.
    InetConf { link: String, id: u16, get: Getter },
}

/// A setting's value in the kernel's IPv4 settings of a link.
type Getter = fn(&InetDevConf) -> i32;

/// How `key` (already checked by [`key_path`]) goes over netlink, if it
/// does.
fn by_netlink(key: &str) -> Option<ByNetlink> {
    const IPV4_DEVCONF_ARP_NOTIFY: u16 = 22;
    if key == "net.ipv4.ip_forward" {
        return Some(ByNetlink::Forwarding);
    }
    let (link, setting) = key.strip_prefix("net.ipv4.conf.")?.split_once('.')?;
    let (id, get): (u16, Getter) = match setting {
        "arp_notify" => (IPV4_DEVCONF_ARP_NOTIFY, |c| c.arp_notify),
        _ => return None,
    };
    // `all` and `default` are no links.
    (link != "all" && link != "default").then(|| ByNetlink::InetConf {
        link: link.replace('/', "."),
        id,
        get,
    })
}

/// Runs `f` on this thread's route socket of the namespace it is in.
fn with_route<T>(f: impl FnOnce(&mut Netlink) -> Result<T, NlError>) -> Option<T> {
    let ns = crate::netns::inside();
    ROUTE.with(|route| {
        let mut route = route.borrow_mut();
        let at = match route.iter().position(|(n, _)| *n == ns) {
            Some(i) => i,
            None => {
                crate::netns::on_drop(forget);
                route.push((ns, Netlink::here().ok()?));
                route.len() - 1
            }
        };
        f(&mut route[at].1).ok()
    })
}

/// [`read_here`] over netlink ([`by_netlink`]), if it can.
fn read_netlink(key: &str) -> Option<String> {
    let how = by_netlink(key)?;
    proc_sys()?;
    match how {
        ByNetlink::Forwarding => with_route(|nl| nl.ipv4_forwarding()).map(|v| v.to_string()),
        ByNetlink::InetConf { link, get, .. } => with_route(|nl| nl.inet_conf(&link))?
            .conf
            .map(|c| get(&c).to_string()),
    }
}

/// A link's setting `key` over netlink, if it goes that way, and `value`
/// as an `int`: one the kernel prints so (else `/proc/sys` parses it), 0
/// or 1 (newer kernels refuse other values over netlink), and only where
/// `/proc/sys` would take the write (netlink ignores a read-only mount).
fn inet_conf_write(key: &str, value: &str) -> Option<(String, u16, Getter, i32)> {
    let ByNetlink::InetConf { link, id, get } = by_netlink(key)? else {
        return None;
    };
    let v = value.parse::<i32>().ok()?;
    (v.to_string() == value && (0..=1).contains(&v) && proc_sys() == Some(true))
        .then_some((link, id, get, v))
}

/// Whether `/proc/sys` is mounted (`None`: it is not, or cannot be
/// asked) and writable, in this process's mount namespace. Netlink
/// answers and takes settings without it: where `/proc/sys` would refuse,
/// so must wasmcni.
fn proc_sys() -> Option<bool> {
    static STATE: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *STATE.get_or_init(|| {
        nix::sys::statvfs::statvfs("/proc/sys")
            .ok()
            .map(|s| !s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
    })
}

/// [`write_here`] over netlink, if it can: whether it did. Only on a link
/// that is down: on one that is up, netlink's write also announces a
/// change of the link (`NETDEV_CHANGE`), which the sysctl's does not.
fn write_netlink(key: &str, value: &str) -> bool {
    let Some((link, id, _, v)) = inet_conf_write(key, value) else {
        return false;
    };
    with_route(|nl| {
        let found = nl.inet_conf(&link)?;
        if found.up || found.conf.is_none() {
            return Err(NlError::Kernel(libc::EAGAIN));
        }
        nl.set_inet_conf(found.index, id, v)
    })
    .is_some()
}

/// [`exchange`]'s work over netlink, if it can (as [`write_netlink`]): one
/// answer for the link and its old value, then the change if it is one.
fn exchange_netlink(key: &str, value: &str) -> Option<String> {
    key_path(key).ok()?;
    let (link, id, get, v) = inet_conf_write(key, value)?;
    with_route(|nl| {
        let found = nl.inet_conf(&link)?;
        let conf = match found.conf {
            Some(c) if !found.up => c,
            _ => return Err(NlError::Kernel(libc::EAGAIN)),
        };
        let old = get(&conf);
        if old != v {
            nl.set_inet_conf(found.index, id, v)?;
        }
        Ok(old.to_string())
    })
}

/// Reads dotted key `key` (`net.ipv4.ip_forward`; a `/` inside a component
/// stands for a `.` in an interface name, as in sysctl(8)), without the
/// trailing newline.
pub fn read(ns: &NetNs, key: &str) -> io::Result<String> {
    let path = key_path(key)?;
    let key = key.to_owned();
    ns.run_inside(move || {
        if let Some(v) = read_netlink(&key) {
            return Ok(v);
        }
        let file = open_here(&path, false)?;
        let mut value = String::new();
        file.take(MAX_VALUE).read_to_string(&mut value)?;
        if value.ends_with('\n') {
            value.pop();
        }
        Ok(value)
    })
}

/// Writes `value` to `key` unless it has it already, on one trip into the
/// namespace; returns the value it had.
pub fn exchange(ns: &NetNs, key: &str, value: &str) -> io::Result<String> {
    if value.contains(['\n', '\0']) {
        return Err(invalid(format!(
            "sysctl value for {key:?} contains a newline or NUL"
        )));
    }
    let (key, value) = (key.to_owned(), value.to_owned());
    crate::netlink::route::cache::note_change();
    ns.run_inside(move || {
        if let Some(old) = exchange_netlink(&key, &value) {
            return Ok(old);
        }
        let old = read_here(&key).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("sysctl {key:?} cannot be read"),
            )
        })?;
        if old != value {
            write_here(&key, &value)?;
        }
        Ok(old)
    })
}

/// Writes `value` to dotted key `key`.
pub fn write(ns: &NetNs, key: &str, value: &str) -> io::Result<()> {
    if value.contains(['\n', '\0']) {
        return Err(invalid(format!(
            "sysctl value for {key:?} contains a newline or NUL"
        )));
    }
    let (key, value) = (key.to_owned(), value.to_owned());
    crate::netlink::route::cache::note_change();
    ns.run_inside(move || write_here(&key, &value))
}

/// Writes `value` to `key` in the namespace of the calling thread.
fn write_here(key: &str, value: &str) -> io::Result<()> {
    let path = key_path(key)?;
    if write_netlink(key, value) {
        return Ok(());
    }
    let mut data = Vec::with_capacity(value.len() + 1);
    data.extend_from_slice(value.as_bytes());
    data.push(b'\n');
    let mut file = open_here(&path, true)?;
    // One write: the kernel parses each write(2) to a sysctl as a whole.
    let n = file.write(&data)?;
    if n != data.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short write to {}", path.display()),
        ));
    }
    Ok(())
}

/// The dotted key of a `/proc/sys` path below `/proc/sys/net` (a `.` inside
/// a component becomes `/`, as in sysctl(8)).
fn path_key(path: &Path) -> Option<String> {
    let rest = path.strip_prefix("/proc/sys").ok()?;
    let parts: Vec<String> = rest
        .components()
        .map(|c| c.as_os_str().to_str().map(|s| s.replace('.', "/")))
        .collect::<Option<_>>()?;
    Some(parts.join("."))
}

/// Appends every readable, writable setting below `dir` (recursively) to
/// `out` as (dotted key, value). Settings that refuse to be read (e.g.
/// `stable_secret` while unset, write-only `flush`) are skipped.
fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            walk(&path, out);
        } else if meta.permissions().mode() & 0o600 == 0o600 {
            let (Some(key), Ok(file)) = (path_key(&path), File::open(&path)) else {
                continue;
            };
            let mut value = String::new();
            if file.take(MAX_VALUE).read_to_string(&mut value).is_ok() {
                if value.ends_with('\n') {
                    value.pop();
                }
                out.push((key, value));
            }
        }
    }
}

/// Every readable, writable network setting of the namespace: the whole
/// `/proc/sys/net` tree, sorted by key.
pub fn snapshot(ns: &NetNs) -> io::Result<Vec<(String, String)>> {
    ns.run_inside(|| Ok(snapshot_here()))
}

/// [`snapshot`] of the namespace of the calling thread.
fn snapshot_here() -> Vec<(String, String)> {
    let mut out = Vec::new();
    walk(Path::new("/proc/sys/net"), &mut out);
    out.sort();
    out
}

/// The per-link settings of link `name` (`net.{ipv4,ipv6,mpls}.conf.<name>`
/// and `net.{ipv4,ipv6}.neigh.<name>`), which the kernel drops and
/// recreates with the namespace's defaults when the link moves.
pub fn snapshot_link(ns: &NetNs, name: &str) -> io::Result<Vec<(String, String)>> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(invalid(format!("bad link name {name:?}")));
    }
    let name = name.to_owned();
    ns.run_inside(move || {
        let mut out = Vec::new();
        for dir in [
            "ipv4/conf",
            "ipv6/conf",
            "mpls/conf",
            "ipv4/neigh",
            "ipv6/neigh",
        ] {
            walk(&Path::new("/proc/sys/net").join(dir).join(&name), &mut out);
        }
        out.sort();
        Ok(out)
    })
}

/// The order in which settings must be written back so that a parent's
/// propagation does not undo a child's value: settings of no link first
/// (`ip_forward` rewrites every link's `forwarding`), then `all`, then
/// `default` (copied to links that never set theirs), then single links;
/// within each, `forwarding` first (IPv4 `all.forwarding` also rewrites
/// `all.accept_redirects`).
fn restore_rank(key: &str) -> (u8, bool) {
    let parts: Vec<&str> = key.split('.').collect();
    let level = match parts.as_slice() {
        ["net", _, "conf" | "neigh", "all", ..] => 1,
        ["net", _, "conf" | "neigh", "default", ..] => 2,
        ["net", _, "conf" | "neigh", _, _, ..] => 3,
        _ => 0,
    };
    let leaf = parts.last().copied().unwrap_or("");
    (level, !(leaf == "forwarding" || leaf == "ip_forward"))
}

/// One setting a write changed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    /// The dotted key.
    pub key: String,
    /// Its value before the write.
    pub before: String,
    /// Its value after.
    pub after: String,
}

/// The settings that differ between two snapshots of one namespace
/// (settings that appeared or vanished are no one's to restore).
pub fn changes(before: &[(String, String)], after: &[(String, String)]) -> Vec<Change> {
    let mut out = Vec::new();
    for (key, b) in before {
        if let Ok(i) = after.binary_search_by(|(k, _)| k.as_str().cmp(key)) {
            let a = &after[i].1;
            if a != b {
                out.push(Change {
                    key: key.clone(),
                    before: b.clone(),
                    after: a.clone(),
                });
            }
        }
    }
    out
}

/// Takes back the settings a write changed, compare-and-restore: a setting
/// still as the write left it is written back to its old value; one that
/// changed since (someone else's) is kept as it is now. Parents are written
/// first ([`restore_rank`]); any other setting a restoring write propagated
/// over is then put back as it was when the undo began, and the whole is
/// read back and repeated until it holds. Returns the settings that are not
/// as they should be.
pub fn restore_changes(ns: &NetNs, changes: &[Change]) -> io::Result<Vec<String>> {
    let changes = changes.to_vec();
    crate::netlink::route::cache::note_change();
    ns.run_inside(move || {
        let start = snapshot_here();
        let value_at = |snap: &[(String, String)], key: &str| -> Option<String> {
            snap.binary_search_by(|(k, _)| k.as_str().cmp(key))
                .ok()
                .map(|i| snap[i].1.clone())
        };
        // (key, the value it must end with)
        let mut targets: Vec<(String, String)> = Vec::new();
        for c in &changes {
            match value_at(&start, &c.key) {
                Some(now) if now == c.after => targets.push((c.key.clone(), c.before.clone())),
                Some(now) => {
                    log::warn!(
                        "sysctl {} changed since the plugin wrote it ({} -> {now}); kept",
                        c.key,
                        c.after
                    );
                    targets.push((c.key.clone(), now));
                }
                None => {}
            }
        }
        for _round in 0..4 {
            targets.sort_by(|(a, _), (b, _)| restore_rank(a).cmp(&restore_rank(b)).then(a.cmp(b)));
            for (k, v) in &targets {
                if read_here(k).is_some_and(|now| now != *v) {
                    let _ = write_here(k, v);
                }
            }
            // What the writes propagated over, beyond the targets: back
            // to how it was when the undo began.
            let now = snapshot_here();
            let mut collateral = Vec::new();
            for (k, v) in &now {
                if targets.iter().any(|(t, _)| t == k) {
                    continue;
                }
                if let Some(was) = value_at(&start, k) {
                    if &was != v {
                        collateral.push((k.clone(), was));
                    }
                }
            }
            let off = targets
                .iter()
                .any(|(k, v)| value_at(&now, k).is_some_and(|n| n != *v));
            if collateral.is_empty() && !off {
                break;
            }
            targets.extend(collateral);
        }
        Ok(targets
            .iter()
            .filter(|(k, v)| read_here(k).is_some_and(|now| now != *v))
            .map(|(k, _)| k.clone())
            .collect())
    })
}

/// Writes back the per-link settings of a link that came back from a move
/// (`values` from [`snapshot_link`]): those that differ, parents first,
/// as [`restore_changes`] does. Returns the settings that are not back.
pub fn restore(ns: &NetNs, values: &[(String, String)]) -> io::Result<Vec<String>> {
    // Every one of them is the link's own, and the move reset them: each is
    // restored whatever its value now.
    let mut targets: Vec<(String, String)> = values.to_vec();
    targets.sort_by_key(|(k, _)| restore_rank(k));
    crate::netlink::route::cache::note_change();
    ns.run_inside(move || {
        for _pass in 0..3 {
            let mut any = false;
            for (k, v) in &targets {
                if read_here(k).is_some_and(|now| now != *v) {
                    any = true;
                    let _ = write_here(k, v);
                }
            }
            if !any {
                break;
            }
        }
        Ok(targets
            .iter()
            .filter(|(k, v)| read_here(k).is_some_and(|now| now != *v))
            .map(|(k, _)| k.clone())
            .collect())
    })
}

/// Reads `key` in the namespace of the calling thread, without the
/// trailing newline; `None` if it cannot be read (gone, write-only).
fn read_here(key: &str) -> Option<String> {
    let path = key_path(key).ok()?;
    if let Some(v) = read_netlink(key) {
        return Some(v);
    }
    let mut v = String::new();
    open_here(&path, false)
        .ok()?
        .take(MAX_VALUE)
        .read_to_string(&mut v)
        .ok()?;
    if v.ends_with('\n') {
        v.pop();
    }
    Some(v)
}

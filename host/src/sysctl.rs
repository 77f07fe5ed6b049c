//! Network sysctls, read and written from inside a namespace.
//!
//! `/proc/sys/net` resolves to the network namespace of the task that opens
//! it, so every access happens on a thread that entered the namespace
//! ([`NetNs::run_inside`]).

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::PathBuf;

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

/// Reads dotted key `key` (`net.ipv4.ip_forward`; a `/` inside a component
/// stands for a `.` in an interface name, as in sysctl(8)), without the
/// trailing newline.
pub fn read(ns: &NetNs, key: &str) -> io::Result<String> {
    let path = key_path(key)?;
    ns.run_inside(move || {
        let file = File::open(&path)?;
        let mut value = String::new();
        file.take(MAX_VALUE).read_to_string(&mut value)?;
        if value.ends_with('\n') {
            value.pop();
        }
        Ok(value)
    })
}

/// Writes `value` to dotted key `key`.
pub fn write(ns: &NetNs, key: &str, value: &str) -> io::Result<()> {
    let path = key_path(key)?;
    if value.contains(['\n', '\0']) {
        return Err(invalid(format!(
            "sysctl value for {key:?} contains a newline or NUL"
        )));
    }
    let mut data = Vec::with_capacity(value.len() + 1);
    data.extend_from_slice(value.as_bytes());
    data.push(b'\n');
    ns.run_inside(move || {
        let mut file = File::options().write(true).open(&path)?;
        // One write: the kernel parses each write(2) to a sysctl as a whole.
        let n = file.write(&data)?;
        if n != data.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write to {}", path.display()),
            ));
        }
        Ok(())
    })
}

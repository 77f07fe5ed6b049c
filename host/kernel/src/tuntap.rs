//! Persistent tap devices (`/dev/net/tun`: rtnetlink cannot create them).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use crate::netns::NetNs;

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Checks the result of an `ioctl(2)`.
fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Creates persistent tap `name` in `ns` (`TUNSETIFF` with `IFF_TAP |
/// IFF_NO_PI` [| `IFF_MULTI_QUEUE`], then `TUNSETOWNER`/`TUNSETGROUP`,
/// then `TUNSETPERSIST`). The file descriptor is closed afterwards.
pub fn create_tap(
    ns: &NetNs,
    name: &str,
    multi_queue: bool,
    owner: Option<u32>,
    group: Option<u32>,
) -> io::Result<()> {
    // An empty name or one with '%' would be a template the kernel fills
    // in ("tap%d"); a NUL would truncate it.
    if name.is_empty()
        || name.len() >= libc::IFNAMSIZ
        || name
            .bytes()
            .any(|b| b == b'%' || b == b'/' || b == b':' || b <= b' ' || b == 0x7f)
        || name == "."
        || name == ".."
    {
        return Err(invalid(format!("bad tap name {name:?}")));
    }
    crate::netlink::note_change();
    ns.run_inside(move || {
        // The device is created in the namespace of the task calling
        // TUNSETIFF, which is this one.
        let tun = File::options()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?; // std opens with O_CLOEXEC
        let fd = tun.as_raw_fd();
        // SAFETY: ifreq is plain old data (a name array and a union of
        // integers and pointers); all-zero is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
            // c_char is i8 or u8 depending on the target: a bit-for-bit copy.
            *dst = src as libc::c_char;
        }
        // IFF_TUN_EXCL: fail (EBUSY) instead of attaching to an existing
        // device of that name, as every other creation fails on EEXIST.
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_TUN_EXCL;
        if multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        // ifr_flags is a C short and IFF_TUN_EXCL is its top bit: keep the low
        // 16 bits as they are (the kernel tests the same bit pattern).
        req.ifr_ifru.ifru_flags = (flags as u16) as libc::c_short;
        // SAFETY: fd is an open /dev/net/tun descriptor; TUNSETIFF reads
        // and writes a struct ifreq, which `req` is and which outlives the
        // call.
        check(unsafe { libc::ioctl(fd, libc::TUNSETIFF, &mut req as *mut libc::ifreq) }).map_err(
            |e| match e.raw_os_error() {
                Some(libc::EBUSY) => io::Error::from_raw_os_error(libc::EEXIST),
                _ => e,
            },
        )?;
        if let Some(uid) = owner {
            // SAFETY: TUNSETOWNER takes the uid by value; no memory is
            // passed.
            check(unsafe { libc::ioctl(fd, libc::TUNSETOWNER, libc::c_ulong::from(uid)) })?;
        }
        if let Some(gid) = group {
            // SAFETY: TUNSETGROUP takes the gid by value; no memory is
            // passed.
            check(unsafe { libc::ioctl(fd, libc::TUNSETGROUP, libc::c_ulong::from(gid)) })?;
        }
        // SAFETY: TUNSETPERSIST takes a flag by value; no memory is passed.
        check(unsafe { libc::ioctl(fd, libc::TUNSETPERSIST, libc::c_ulong::from(1u8)) })?;
        drop(tun);
        Ok(())
    })
}

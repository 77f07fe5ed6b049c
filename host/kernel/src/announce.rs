//! Gratuitous ARP: tells a link's neighbours where an IPv4 address lives.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::netns::NetNs;

/// `ETH_P_ARP` in network byte order, as `sll_protocol` and `socket(2)`
/// want it.
const ARP_BE: u16 = (libc::ETH_P_ARP as u16).to_be();

/// The 28-byte ARP request announcing `addr` at `mac` (Ethernet/IPv4,
/// sender = target = `addr`, target hardware address all zero).
fn arp_payload(mac: &[u8; 6], addr: Ipv4Addr) -> [u8; 28] {
    let mut p = [0u8; 28];
    p[0..2].copy_from_slice(&1u16.to_be_bytes()); // htype: Ethernet
    p[2..4].copy_from_slice(&0x0800u16.to_be_bytes()); // ptype: IPv4
    p[4] = 6; // hlen
    p[5] = 4; // plen
    p[6..8].copy_from_slice(&1u16.to_be_bytes()); // op: request
    p[8..14].copy_from_slice(mac); // sha
    p[14..18].copy_from_slice(&addr.octets()); // spa
                                               // tha (18..24) stays zero
    p[24..28].copy_from_slice(&addr.octets()); // tpa
    p
}

/// A link-layer address for link `index`, broadcast destination.
fn link_addr(index: i32, protocol: u16) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = protocol;
    sll.sll_ifindex = index;
    sll.sll_halen = 6;
    sll.sll_addr[..6].copy_from_slice(&[0xff; 6]);
    sll
}

/// Sends one gratuitous ARP request for `addr` out of link `index` (whose
/// hardware address is `mac`), from inside `ns` (an `AF_PACKET` socket
/// bound to the link, broadcast destination, sender = target = `addr`).
pub fn gratuitous_arp(ns: &NetNs, index: u32, mac: &[u8], addr: Ipv4Addr) -> io::Result<()> {
    let mac: [u8; 6] = mac.try_into().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("hardware address has {} bytes, not 6", mac.len()),
        )
    })?;
    let ifindex = i32::try_from(index)
        .ok()
        .filter(|i| *i > 0)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
    let payload = arp_payload(&mac, addr);
    ns.run_inside(move || {
        // SAFETY: plain socket(2) call; the result is checked below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::c_int::from(ARP_BE),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor socket(2) just returned to us and
        // nothing else owns it.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // Bind to the link: the socket only ever sees that link (and fails
        // here, ENODEV, if there is no such link in this namespace).
        let bind_addr = link_addr(ifindex, ARP_BE);
        // SAFETY: `bind_addr` is a valid sockaddr_ll of `len` bytes that
        // outlives the call.
        let ret = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                (&bind_addr as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
                len,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let dest = link_addr(ifindex, ARP_BE);
        // SAFETY: `payload` and `dest` are valid for the lengths given and
        // outlive the call.
        let sent = unsafe {
            libc::sendto(
                sock.as_raw_fd(),
                payload.as_ptr().cast::<libc::c_void>(),
                payload.len(),
                0,
                (&dest as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
                len,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        if usize::try_from(sent).ok() != Some(payload.len()) {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short gratuitous ARP send",
            ));
        }
        Ok(())
    })
}

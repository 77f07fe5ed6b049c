//! Link answers kept for the length of a host call, and the count of
//! changes this process asked for that ends them.

use std::sync::atomic::{AtomicU64, Ordering};

use netlink_packet_core::NetlinkPayload;
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::decode::deserialize;

/// How many changes to the kernel's links and their settings this process
/// has asked for: every rtnetlink request but a read
/// ([`Netlink::request`](super::Netlink::request)) and every change made
/// another way ([`note_change`]). A kept link answer stands only while
/// this is what it was when the answer came.
pub(super) static CHANGES: AtomicU64 = AtomicU64::new(0);

/// Notes a change this process makes to a link, or to what a link's answer
/// carries, other than by an rtnetlink request (a sysctl written through
/// `/proc/sys`, a tap device created by ioctl), or a moment after which
/// what other processes changed must be seen (a lock taken, a native
/// delegate run). Every link answer kept until now is dropped
/// ([`Netlink::keep_links`](super::Netlink::keep_links)).
pub fn note_change() {
    CHANGES.fetch_add(1, Ordering::Relaxed);
}

/// Link answers kept while a caller asks for it
/// ([`Netlink::keep_links`](super::Netlink::keep_links)).
#[derive(Default)]
pub(super) struct LinkCache {
    on: bool,
    /// [`CHANGES`] when `answers` were read.
    at: u64,
    answers: Vec<Kept>,
}

/// A kept link answer: the link's index, its own name, and the answer as
/// the kernel sent it. Kept as bytes and parsed again when asked for: a
/// copy of the parsed message costs about half its parse, and most
/// answers are not asked for again.
struct Kept {
    index: u32,
    name: Option<String>,
    raw: Vec<u8>,
}

/// Which link a request asks for.
#[derive(Clone, Copy)]
pub(super) enum Which<'a> {
    Index(u32),
    /// Found by the link's own name only (the kernel also finds a link by
    /// an alternative name).
    Name(&'a str),
}

impl LinkCache {
    /// An empty cache that keeps answers if `on`
    /// ([`Netlink::keep_links`](super::Netlink::keep_links)).
    pub(super) fn new(on: bool) -> LinkCache {
        LinkCache {
            on,
            ..LinkCache::default()
        }
    }

    /// The kept answer for the link asked for, if no change was asked for
    /// since it came.
    pub(super) fn find(&mut self, which: Which<'_>) -> Option<LinkMessage> {
        if !self.on {
            return None;
        }
        let now = CHANGES.load(Ordering::Relaxed);
        if self.at != now {
            self.answers.clear();
            self.at = now;
            return None;
        }
        let kept = self.answers.iter().find(|k| match which {
            Which::Index(i) => k.index == i,
            Which::Name(n) => k.name.as_deref() == Some(n),
        })?;
        link_answer(&kept.raw)
    }

    /// Keeps `link` (`raw`: as the kernel sent it), the answer to a
    /// request sent when [`CHANGES`] was `asked_at`: not if a change was
    /// noted since.
    pub(super) fn keep(&mut self, link: &LinkMessage, raw: &[u8], asked_at: u64) {
        if !self.on || CHANGES.load(Ordering::Relaxed) != asked_at {
            return;
        }
        if self.at != asked_at {
            self.answers.clear();
            self.at = asked_at;
        }
        let index = link.header.index;
        self.answers.retain(|k| k.index != index);
        let name = link.attributes.iter().find_map(|a| match a {
            LinkAttribute::IfName(n) => Some(n.clone()),
            _ => None,
        });
        self.answers.push(Kept {
            index,
            name,
            raw: raw.to_vec(),
        });
    }
}

/// The link in a kept answer.
fn link_answer(raw: &[u8]) -> Option<LinkMessage> {
    match deserialize(raw).ok()?.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) => Some(l),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_route::link::LinkAttribute;

    use crate::netlink::route::tests::{in_new_netns, ip};
    use crate::netlink::route::Netlink;
    use crate::netns::NetNs;

    /// The MTU of `lo` as `nl` answers it: by name, or by `index`.
    fn lo_mtu(nl: &mut Netlink, index: Option<u32>) -> u32 {
        let link = match index {
            Some(i) => nl.link_by_index(i),
            None => nl.link_by_name("lo"),
        }
        .expect("lo");
        link.attributes
            .iter()
            .find_map(|a| match a {
                LinkAttribute::Mtu(m) => Some(*m),
                _ => None,
            })
            .expect("an MTU")
    }

    /// Sets `lo`'s MTU as another process would: wasmcni does not learn of it.
    fn ip_sets_lo_mtu(mtu: u32) {
        ip(&["link", "set", "lo", "mtu", &mtu.to_string()]);
    }

    /// While kept, a link answer stands until this process asks for a
    /// change: through this socket or another (in another namespace), or
    /// by a sysctl written. Not kept, every read is the kernel's. In
    /// namespaces of the test's own (a thread's `unshare`), never the
    /// machine's; no other test of this crate asks for a change meanwhile
    /// ([`crate::changes_serial`]).
    #[test]
    fn kept_link_answers_stand_until_this_process_asks_for_a_change() {
        let _serial = crate::changes_serial();
        // A socket in a second namespace, to ask for a change through.
        let (tx, rx) = std::sync::mpsc::channel::<Netlink>();
        in_new_netns(Box::new(move || {
            tx.send(Netlink::here().expect("a socket")).unwrap();
        }));
        let Ok(mut other) = rx.try_recv() else {
            return; // not root, outside CI (asserted above)
        };
        in_new_netns(Box::new(move || {
            let mut nl = Netlink::here().expect("a socket");
            let lo = nl.link_by_name("lo").expect("lo").header.index;
            ip_sets_lo_mtu(1400);
            assert_eq!(lo_mtu(&mut nl, None), 1400, "not kept: the kernel's");
            nl.keep_links(true);
            assert_eq!(lo_mtu(&mut nl, None), 1400);
            ip_sets_lo_mtu(1300);
            assert_eq!(lo_mtu(&mut nl, None), 1400, "kept, by name");
            assert_eq!(lo_mtu(&mut nl, Some(lo)), 1400, "kept, by index");
            // A change asked for through another socket, in another
            // namespace, ends it (its lo: index 1 there too).
            other.set_link_up(1, true).expect("lo up there");
            assert_eq!(lo_mtu(&mut nl, Some(lo)), 1300, "after a change");
            ip_sets_lo_mtu(1200);
            assert_eq!(lo_mtu(&mut nl, None), 1300, "kept again");
            // So does a sysctl written.
            let ns = NetNs::open_container(std::path::Path::new("/proc/thread-self/ns/net"))
                .expect("the thread's namespace");
            crate::sysctl::write(&ns, "net.ipv4.ip_forward", "1").expect("a sysctl");
            assert_eq!(lo_mtu(&mut nl, None), 1200, "after a sysctl write");
            // And a request that was not a read, though the kernel
            // refused it.
            assert!(nl.set_link_up(u32::MAX, true).is_err(), "no such link");
            ip_sets_lo_mtu(1100);
            assert_eq!(lo_mtu(&mut nl, None), 1100, "after a refused change");
            nl.keep_links(false);
            ip_sets_lo_mtu(1000);
            assert_eq!(lo_mtu(&mut nl, Some(lo)), 1000, "not kept again");
        }));
    }
}

//! Allocation over a [`Store`]: which address each range set hands out
//! (round-robin, spec §2.7), requested addresses (§2.2), ADD over all range
//! sets with rollback (§2.6), and GC of reservations whose attachment is
//! gone.
//!
//! Everything here is pure logic over the [`Store`] trait: no host calls
//! of its own, so it is tested against an in-memory store.

use std::net::IpAddr;

use guest_sdk::cni::{Cidr, Error, GcAttachment, IpConfig};
use guest_sdk::ipam::Owner;

use crate::range::{next_ip, Range, RangeSet};
use crate::store::Store;

/// The addresses a range set offers, in the order they are tried: from
/// the one after `last` (the set's last reservation) to the end of its
/// range, then the following ranges, wrapping around, and `last` itself at
/// the very end; from the first range's start when there is no `last` in
/// the set. Each address of the set comes at most once, and a range's
/// gateway never.
#[derive(Debug, Clone)]
pub struct Candidates<'a> {
    ranges: &'a [Range],
    /// The range `cur` is in.
    index: usize,
    /// The address offered last (or the cursor to start after).
    cur: Option<IpAddr>,
    /// The first address offered: reaching it again ends the cycle.
    first: Option<IpAddr>,
    done: bool,
}

impl<'a> Candidates<'a> {
    /// The candidates of `set`, round-robin after `last`.
    pub fn new(set: &'a RangeSet, last: Option<IpAddr>) -> Candidates<'a> {
        let (index, cur) = match last.and_then(|ip| set.range_for(ip).map(|(i, _)| (i, ip))) {
            Some((i, ip)) => (i, Some(ip.to_canonical())),
            None => (0, None),
        };
        Candidates {
            ranges: set.ranges(),
            index,
            cur,
            first: None,
            done: false,
        }
    }
}

impl<'a> Iterator for Candidates<'a> {
    /// An address and the range it is in.
    type Item = (IpAddr, &'a Range);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let range = &self.ranges[self.index];
            let next = match self.cur {
                None => range.start,
                Some(cur) if cur == range.end => {
                    self.index = (self.index + 1) % self.ranges.len();
                    self.ranges[self.index].start
                }
                Some(cur) => next_ip(cur),
            };
            match self.first {
                None => self.first = Some(next),
                Some(first) if first == next => {
                    self.done = true;
                    break;
                }
                Some(_) => {}
            }
            self.cur = Some(next);
            let range = &self.ranges[self.index];
            if next != range.gateway {
                return Some((next, range));
            }
        }
        None
    }
}

fn ip_config(ip: IpAddr, range: &Range) -> Result<IpConfig, Error> {
    Ok(IpConfig {
        interface: None,
        address: Cidr::new(ip, range.subnet.prefix_len())?,
        gateway: Some(range.gateway),
    })
}

/// One address from range set `set` (index `set_id`) for this attachment
/// (container `container_id`): `requested` if given, else the next free
/// one. Errors are the reference's texts (without the
/// `failed to allocate for range N: ` prefix).
pub fn allocate_one<S: Store + ?Sized>(
    store: &mut S,
    set: &RangeSet,
    set_id: usize,
    requested: Option<IpAddr>,
    container_id: &str,
) -> Result<IpConfig, Error> {
    if let Some(ip) = requested {
        let Some((_, range)) = set.range_for(ip) else {
            return Err(Error::internal(format!("{ip} not in range set {set}")));
        };
        if ip == range.gateway {
            return Err(Error::internal(format!(
                "requested ip {ip} is subnet's gateway"
            )));
        }
        if !store.reserve(ip, set_id)? {
            return Err(Error::internal(format!(
                "requested IP address {ip} is not available in range set {set}"
            )));
        }
        return ip_config(ip, range);
    }

    // The spec forbids a second address from the same set for one
    // attachment. The reference reports the first such file in the
    // lexical order of its directory walk; sort the same way.
    let mut held: Vec<IpAddr> = store.owned()?;
    held.sort_by_cached_key(ToString::to_string);
    if let Some(ip) = held.into_iter().find(|ip| set.contains(*ip)) {
        return Err(Error::internal(format!(
            "{ip} has been allocated to {container_id}, duplicate allocation is not allowed"
        )));
    }

    // As the reference: a last reservation that cannot be read only costs
    // the round-robin position.
    let last = store.last_reserved(set_id).unwrap_or_else(|e| {
        eprintln!("Error retrieving last reserved ip: {e}");
        None
    });
    for (ip, range) in Candidates::new(set, last) {
        if store.reserve(ip, set_id)? {
            return ip_config(ip, range);
        }
    }
    Err(Error::internal(format!(
        "no IP addresses available in range set: {set}"
    )))
}

/// Whether every address `set` hands out is among `reserved` (STATUS:
/// the spec's "resources exhausted"): the count of distinct reserved
/// addresses in the set's ranges, gateways excepted, against the ranges'
/// size, without walking the ranges (an IPv6 range has 2^64 addresses).
pub fn exhausted(set: &RangeSet, reserved: &[IpAddr]) -> bool {
    let as_u128 = |ip: IpAddr| match ip.to_canonical() {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    };
    let mut free: u128 = 0;
    for r in set.ranges() {
        let (start, end) = (as_u128(r.start), as_u128(r.end));
        let size = end.saturating_sub(start).saturating_add(1);
        let gw = as_u128(r.gateway);
        let gateway_inside =
            r.gateway.is_ipv4() == r.start.is_ipv4() && (start..=end).contains(&gw);
        free = free.saturating_add(size - u128::from(gateway_inside));
    }
    let mut held: Vec<IpAddr> = reserved
        .iter()
        .map(|ip| ip.to_canonical())
        .filter(|ip| {
            set.range_for(*ip)
                .is_some_and(|(_, r)| *ip != r.gateway && *ip >= r.start && *ip <= r.end)
        })
        .collect();
    held.sort_unstable();
    held.dedup();
    held.len() as u128 >= free
}

/// ADD: one address from every range set, in order, for this attachment.
///
/// `requested` addresses (CNI_ARGS `IP`, `args.cni.ips`,
/// `runtimeConfig.ips`, in that order) go to the first set that contains
/// them; each set takes the first requested address (in the order given,
/// duplicates counted once) it contains. The reference picks from a Go
/// map, in random order; this is deterministic. A requested address no
/// set takes fails the ADD (`failed to allocate all requested IPs: …`).
///
/// On failure every address reserved by *this call* is released, and only
/// those. (The reference releases everything the attachment holds, so a
/// repeated ADD that fails also destroys the first ADD's allocation, spec
/// §2.6 "Surprising rollback consequence"; wasmcni deliberately does not.)
pub fn allocate<S: Store + ?Sized>(
    store: &mut S,
    sets: &[RangeSet],
    requested: &[IpAddr],
    container_id: &str,
) -> Result<Vec<IpConfig>, Error> {
    let mut pending: Vec<IpAddr> = Vec::with_capacity(requested.len());
    for ip in requested.iter().map(|ip| ip.to_canonical()) {
        if !pending.contains(&ip) {
            pending.push(ip);
        }
    }
    let mut ips: Vec<IpConfig> = Vec::with_capacity(sets.len());
    for (id, set) in sets.iter().enumerate() {
        let wanted = pending
            .iter()
            .position(|ip| set.contains(*ip))
            .map(|i| pending.remove(i));
        match allocate_one(store, set, id, wanted, container_id) {
            Ok(ip) => ips.push(ip),
            Err(mut e) => {
                rollback(store, &ips);
                e.msg = format!("failed to allocate for range {id}: {}", e.msg);
                return Err(e);
            }
        }
    }
    if !pending.is_empty() {
        rollback(store, &ips);
        let list: Vec<String> = pending.iter().map(ToString::to_string).collect();
        return Err(Error::internal(format!(
            "failed to allocate all requested IPs: {}",
            list.join(" ")
        )));
    }
    Ok(ips)
}

/// Releases what this ADD reserved, best effort (the host's journal also
/// releases them when the ADD fails).
fn rollback<S: Store + ?Sized>(store: &mut S, ips: &[IpConfig]) {
    for ip in ips {
        let _ = store.release(ip.address.addr());
    }
}

/// Whether `owner` is one of the `valid` attachments. A legacy
/// reservation (no ifname) is valid when any valid attachment has its
/// container ID.
pub fn is_valid(owner: &Owner, valid: &[GcAttachment]) -> bool {
    valid.iter().any(|a| {
        a.container_id == owner.container_id
            && (owner.ifname.is_empty() || a.ifname == owner.ifname)
    })
}

/// GC: releases every reservation whose holder is not in `valid`. Goes on
/// past a failed release and returns the first error.
pub fn release_stale<S: Store + ?Sized>(
    store: &mut S,
    valid: &[GcAttachment],
) -> Result<(), Error> {
    let mut first_error = None;
    for (ip, owner) in store.list()? {
        if is_valid(&owner, valid) {
            continue;
        }
        if let Err(e) = store.release(ip) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::RangeSpec;
    use crate::store::{owner, MemStore};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// `subnet[,start,end[,gateway]]`, empty parts absent.
    fn range(desc: &str) -> RangeSpec {
        let mut parts = desc.split(',');
        let (a, p) = parts.next().unwrap().split_once('/').unwrap();
        let mut opt = || parts.next().filter(|s| !s.is_empty()).map(ip);
        RangeSpec {
            subnet: Some((ip(a), p.parse().unwrap())),
            range_start: opt(),
            range_end: opt(),
            gateway: opt(),
        }
    }

    fn set(descs: &[&str]) -> RangeSet {
        let specs: Vec<RangeSpec> = descs.iter().map(|d| range(d)).collect();
        RangeSet::canonicalize(&specs).unwrap()
    }

    fn order(set: &RangeSet, last: Option<&str>) -> Vec<String> {
        Candidates::new(set, last.map(ip))
            .map(|(a, _)| a.to_string())
            .collect()
    }

    fn addrs(ips: &[IpConfig]) -> Vec<String> {
        ips.iter().map(|c| c.address.to_string()).collect()
    }

    fn add(
        store: &mut MemStore,
        sets: &[RangeSet],
        requested: &[&str],
    ) -> Result<Vec<String>, String> {
        let req: Vec<IpAddr> = requested.iter().map(|s| ip(s)).collect();
        allocate(store, sets, &req, "c1")
            .map(|v| addrs(&v))
            .map_err(|e| e.msg)
    }

    #[test]
    fn order_fresh_skips_gateway() {
        let s = set(&["10.1.0.0/29"]);
        assert_eq!(
            order(&s, None),
            ["10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"]
        );
        // A gateway elsewhere makes .1 allocatable.
        let s = set(&["10.1.0.0/29,,,10.1.0.6"]);
        assert_eq!(
            order(&s, None),
            ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5"]
        );
    }

    #[test]
    fn order_round_robin_wraps_and_ends_with_last() {
        let s = set(&["10.1.0.0/29"]);
        assert_eq!(
            order(&s, Some("10.1.0.4")),
            ["10.1.0.5", "10.1.0.6", "10.1.0.2", "10.1.0.3", "10.1.0.4"]
        );
        // The last address of the range: wrap at once.
        assert_eq!(order(&s, Some("10.1.0.6"))[0], "10.1.0.2");
        // A last reservation outside the set restarts at the beginning.
        assert_eq!(order(&s, Some("10.9.0.4"))[0], "10.1.0.2");
        assert_eq!(order(&s, Some("fd00::4"))[0], "10.1.0.2");
    }

    #[test]
    fn order_across_ranges() {
        let s = set(&[
            "10.20.0.0/24,10.20.0.1,10.20.0.3",
            "10.21.0.0/24,10.21.0.5,10.21.0.6,10.21.0.6",
        ]);
        assert_eq!(order(&s, None), ["10.20.0.2", "10.20.0.3", "10.21.0.5"]);
        assert_eq!(
            order(&s, Some("10.20.0.3")),
            ["10.21.0.5", "10.20.0.2", "10.20.0.3"]
        );
        assert_eq!(
            order(&s, Some("10.21.0.5")),
            ["10.20.0.2", "10.20.0.3", "10.21.0.5"]
        );
    }

    #[test]
    fn order_degenerate_ranges_terminate() {
        // Only the gateway: nothing to offer, with or without a cursor.
        let s = set(&["10.1.0.0/24,10.1.0.1,10.1.0.1"]);
        assert!(order(&s, None).is_empty());
        assert!(order(&s, Some("10.1.0.1")).is_empty());
        // One address that is not the gateway, cursor on it.
        let s = set(&["10.1.0.0/24,10.1.0.7,10.1.0.7"]);
        assert_eq!(order(&s, Some("10.1.0.7")), ["10.1.0.7"]);
    }

    #[test]
    fn order_v6_default_end_is_last_address() {
        let s = set(&["fd00::/126"]);
        assert_eq!(order(&s, None), ["fd00::2", "fd00::3"]);
        // A huge range is iterated lazily.
        let s = set(&["fd00:1::/64"]);
        let mut c = Candidates::new(&s, Some(ip("fd00:1::ffff:ffff:ffff:fffe")));
        assert_eq!(
            c.next().map(|x| x.0),
            Some(ip("fd00:1::ffff:ffff:ffff:ffff"))
        );
        assert_eq!(c.next().map(|x| x.0), Some(ip("fd00:1::2")));
    }

    #[test]
    fn allocates_round_robin_and_exhausts() {
        // Spec §2.7: range .1(gw)–.3 and .5–.6(gw .6).
        let sets = [set(&[
            "10.20.0.0/24,10.20.0.1,10.20.0.3",
            "10.21.0.0/24,10.21.0.5,10.21.0.6,10.21.0.6",
        ])];
        let mut st = MemStore::default();
        for (who, want) in [
            ("a", "10.20.0.2/24"),
            ("b", "10.20.0.3/24"),
            ("c", "10.21.0.5/24"),
        ] {
            st.me = Some(owner(who, "eth0"));
            assert_eq!(add(&mut st, &sets, &[]).unwrap(), [want]);
        }
        st.me = Some(owner("d", "eth0"));
        assert_eq!(
            add(&mut st, &sets, &[]).unwrap_err(),
            "failed to allocate for range 0: no IP addresses available in range set: 10.20.0.1-10.20.0.3,10.21.0.5-10.21.0.6"
        );
        // Free .3; last is 10.21.0.5: the next allocation wraps to .3.
        st.held.remove(&ip("10.20.0.3"));
        assert_eq!(add(&mut st, &sets, &[]).unwrap(), ["10.20.0.3/24"]);
        assert_eq!(st.last.get(&0), Some(&ip("10.20.0.3")));
    }

    #[test]
    fn v6_range_end_default() {
        let sets = [set(&["fd00::/126"])];
        let mut st = MemStore::default();
        for (who, want) in [
            ("a", Ok(vec!["fd00::2/126".to_string()])),
            ("b", Ok(vec!["fd00::3/126".to_string()])),
        ] {
            st.me = Some(owner(who, "eth0"));
            assert_eq!(add(&mut st, &sets, &[]), want);
        }
        st.me = Some(owner("c", "eth0"));
        assert_eq!(
            add(&mut st, &sets, &[]).unwrap_err(),
            "failed to allocate for range 0: no IP addresses available in range set: fd00::1-fd00::3"
        );
    }

    #[test]
    fn result_has_prefix_and_gateway() {
        let sets = [set(&["10.10.0.0/16,,,10.10.0.254"])];
        let mut st = MemStore::default();
        let ips = allocate(&mut st, &sets, &[], "c1").unwrap();
        assert_eq!(ips.len(), 1);
        assert_eq!(ips[0].address.to_string(), "10.10.0.1/16");
        assert_eq!(ips[0].gateway, Some(ip("10.10.0.254")));
        assert_eq!(ips[0].interface, None);
    }

    #[test]
    fn dual_stack_one_address_per_set() {
        let sets = [set(&["10.30.0.0/24"]), set(&["fd00:30::/64"])];
        let mut st = MemStore::default();
        assert_eq!(
            add(&mut st, &sets, &[]).unwrap(),
            ["10.30.0.2/24", "fd00:30::2/64"]
        );
        assert_eq!(st.last.get(&0), Some(&ip("10.30.0.2")));
        assert_eq!(st.last.get(&1), Some(&ip("fd00:30::2")));
        // Another interface of the same container gets new addresses.
        st.me = Some(owner("c1", "eth1"));
        assert_eq!(
            add(&mut st, &sets, &[]).unwrap(),
            ["10.30.0.3/24", "fd00:30::3/64"]
        );
    }

    #[test]
    fn duplicate_allocation_is_refused() {
        let sets = [set(&["10.10.0.0/24"])];
        let mut st = MemStore::default();
        add(&mut st, &sets, &[]).unwrap();
        assert_eq!(
            add(&mut st, &sets, &[]).unwrap_err(),
            "failed to allocate for range 0: 10.10.0.2 has been allocated to c1, duplicate allocation is not allowed"
        );
        // A legacy reservation (container ID only) counts for any ifname;
        // the first in lexical order is named.
        let mut st = MemStore::default();
        st.hold("10.10.0.9", owner("c1", ""));
        st.hold("10.10.0.10", owner("c1", ""));
        assert_eq!(
            add(&mut st, &sets, &[]).unwrap_err(),
            "failed to allocate for range 0: 10.10.0.10 has been allocated to c1, duplicate allocation is not allowed"
        );
        // Outside this set's ranges it does not count.
        let mut st = MemStore::default();
        st.hold("10.99.0.9", owner("c1", "eth0"));
        assert_eq!(add(&mut st, &sets, &[]).unwrap(), ["10.10.0.2/24"]);
    }

    #[test]
    fn requested_ips() {
        let sets = [set(&["10.10.0.0/24"]), set(&["fd00::/64"])];
        let mut st = MemStore::default();
        assert_eq!(
            add(&mut st, &sets, &["fd00::50", "10.10.0.7", "10.10.0.7"]).unwrap(),
            ["10.10.0.7/24", "fd00::50/64"]
        );
        assert_eq!(st.last.get(&0), Some(&ip("10.10.0.7")));
        // Held by someone: not available. No duplicate check for requests.
        st.me = Some(owner("c2", "eth0"));
        assert_eq!(
            add(&mut st, &sets, &["10.10.0.7"]).unwrap_err(),
            "failed to allocate for range 0: requested IP address 10.10.0.7 is not available in range set 10.10.0.1-10.10.0.254"
        );
        assert_eq!(
            add(&mut st, &sets, &["10.10.0.1"]).unwrap_err(),
            "failed to allocate for range 0: requested ip 10.10.0.1 is subnet's gateway"
        );
        // Outside every set, or two in one set: left over, in order given.
        assert_eq!(
            add(&mut st, &sets, &["10.99.0.1", "10.10.0.8", "10.10.0.9"]).unwrap_err(),
            "failed to allocate all requested IPs: 10.99.0.1 10.10.0.9"
        );
        // ... and what this ADD reserved is released again.
        assert!(!st.held.contains_key(&ip("10.10.0.8")));
        assert!(st.owned().unwrap().is_empty());
        // The broadcast address is past every range end: left over too.
        assert_eq!(
            add(&mut st, &sets, &["10.10.0.255"]).unwrap_err(),
            "failed to allocate all requested IPs: 10.10.0.255"
        );
    }

    #[test]
    fn requested_ip_picks_first_in_order() {
        let sets = [set(&["10.10.0.0/24"])];
        let mut st = MemStore::default();
        assert_eq!(
            add(&mut st, &sets, &["10.10.0.9", "10.10.0.8"]).unwrap_err(),
            "failed to allocate all requested IPs: 10.10.0.8"
        );
        assert!(st.held.is_empty());
    }

    #[test]
    fn rollback_releases_only_this_add() {
        // c1/eth0 already holds an address in set 1. A second ADD requests
        // one in set 0 (no duplicate check there), then fails set 1's
        // duplicate check: only the new set-0 address is released.
        let sets = [set(&["10.10.0.0/24"]), set(&["10.11.0.0/24"])];
        let mut st = MemStore::default();
        st.hold("10.11.0.2", owner("c1", "eth0"));
        st.hold("10.10.0.3", owner("other", "eth0"));
        assert_eq!(
            add(&mut st, &sets, &["10.10.0.5"]).unwrap_err(),
            "failed to allocate for range 1: 10.11.0.2 has been allocated to c1, duplicate allocation is not allowed"
        );
        assert_eq!(st.reserved_log, [ip("10.10.0.5")]);
        assert_eq!(st.held_ips(), ["10.10.0.3", "10.11.0.2"]);
    }

    #[test]
    fn rollback_on_exhaustion_of_a_later_set() {
        let sets = [set(&["10.10.0.0/24"]), set(&["10.11.0.0/30"])];
        let mut st = MemStore::default();
        st.hold("10.11.0.2", owner("x", "eth0"));
        assert_eq!(
            add(&mut st, &sets, &[]).unwrap_err(),
            "failed to allocate for range 1: no IP addresses available in range set: 10.11.0.1-10.11.0.2"
        );
        assert_eq!(st.held_ips(), ["10.11.0.2"]);
    }

    #[test]
    fn gc_releases_stale_only() {
        let mut st = MemStore::default();
        st.hold("10.0.0.2", owner("keep", "eth0"));
        st.hold("10.0.0.3", owner("keep", "eth1"));
        st.hold("10.0.0.4", owner("gone", "eth0"));
        st.hold("10.0.0.5", owner("keep", ""));
        st.hold("10.0.0.6", owner("gone", ""));
        let valid = [GcAttachment {
            container_id: "keep".into(),
            ifname: "eth0".into(),
        }];
        release_stale(&mut st, &valid).unwrap();
        assert_eq!(st.held_ips(), ["10.0.0.2", "10.0.0.5"]);
    }

    #[test]
    fn gc_goes_on_after_errors_and_reports_the_first() {
        let mut st = MemStore::default();
        for (a, who) in [("10.0.0.2", "a"), ("10.0.0.3", "b"), ("10.0.0.4", "c")] {
            st.hold(a, owner(who, "eth0"));
        }
        st.fail_release = vec![ip("10.0.0.2"), ip("10.0.0.3")];
        let e = release_stale(&mut st, &[]).unwrap_err();
        assert_eq!(e.msg, "cannot release 10.0.0.2");
        assert_eq!(st.held_ips(), ["10.0.0.2", "10.0.0.3"]);
    }
}

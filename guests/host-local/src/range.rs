//! Address ranges and range sets: canonicalization, containment, overlap.
//!
//! A [`Range`] is a subnet with the inclusive bounds addresses are handed
//! out from and its gateway; a [`RangeSet`] is a list of ranges of one
//! family from which one address is allocated per ADD. Validation follows
//! the reference `Range.Canonicalize` / `RangeSet.Canonicalize`, with its
//! error texts (spec §2.3 step 5).

use std::fmt;
use std::net::IpAddr;

use ipnet::{IpAdd, IpNet, IpSub};

/// A range as written in the config, before canonicalization: every field
/// optional, addresses as given (IPv4-mapped IPv6 already unmapped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSpec {
    /// `subnet`: address and prefix length as written (host bits kept).
    pub subnet: Option<(IpAddr, u8)>,
    /// `rangeStart`.
    pub range_start: Option<IpAddr>,
    /// `rangeEnd`.
    pub range_end: Option<IpAddr>,
    /// `gateway`.
    pub gateway: Option<IpAddr>,
}

/// A canonical range: every bound filled in and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The subnet (its network address: host bits are refused).
    pub subnet: IpNet,
    /// First address handed out (inclusive).
    pub start: IpAddr,
    /// Last address handed out (inclusive).
    pub end: IpAddr,
    /// The gateway: never handed out. Not checked to lie in the subnet,
    /// nor to be of its family (the reference does not check either).
    pub gateway: IpAddr,
}

/// The address after `ip` (saturating at the family's last address).
pub fn next_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4.saturating_add(1)),
        IpAddr::V6(v6) => IpAddr::V6(v6.saturating_add(1)),
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// Whether `ip` lies in `subnet` and, where given, within `[start, end]`.
fn within(subnet: &IpNet, start: Option<IpAddr>, end: Option<IpAddr>, ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    if !same_family(ip, subnet.addr()) || !subnet.contains(&ip) {
        return false;
    }
    start.is_none_or(|s| ip >= s) && end.is_none_or(|e| ip <= e)
}

impl Range {
    /// Validates `spec` and fills in its defaults, as the reference
    /// `Range.Canonicalize`:
    ///
    /// 1. a subnet is required (`IP <nil> not v4 nor v6`);
    /// 2. at least 4 addresses (`Network 10.1.0.0/31 too small to allocate
    ///    from`), and an IPv4-mapped IPv6 subnet is refused (`IPNet IP and
    ///    Mask version mismatch`);
    /// 3. no host bits (`Network has host bits set. ...`);
    /// 4. gateway: network + 1 if absent;
    /// 5. rangeStart: inside the subnet and not after an explicit rangeEnd
    ///    (`RangeStart … not in network …`), default network + 1;
    /// 6. rangeEnd: inside the subnet and not before rangeStart
    ///    (`RangeEnd … not in network …`), default the broadcast address − 1
    ///    for IPv4 and the last address of the subnet for IPv6.
    pub fn canonicalize(spec: &RangeSpec) -> Result<Range, String> {
        let Some((given, prefix)) = spec.subnet else {
            return Err("IP <nil> not v4 nor v6".into());
        };
        let addr = given.to_canonical();
        // An IPv4-mapped IPv6 subnet keeps its 128-bit mask in the reference,
        // so its size is judged on 128 bits and it then fails the family check.
        let bits = if given.is_ipv4() { 32 } else { 128 };
        if u32::from(prefix) > bits - 2 {
            return Err(format!(
                "Network {addr}/{prefix} too small to allocate from"
            ));
        }
        if addr != given {
            return Err("IPNet IP and Mask version mismatch".into());
        }
        let subnet = IpNet::new(addr, prefix).map_err(|_| "IPNet IP and Mask version mismatch")?;
        let network = subnet.network();
        if network != addr {
            return Err(format!(
                "Network has host bits set. For a subnet mask of length {prefix} the network address is {network}"
            ));
        }
        let subnet = subnet.trunc();
        let gateway = spec
            .gateway
            .map_or_else(|| next_ip(network), |ip| ip.to_canonical());

        let start = match spec.range_start.map(|ip| ip.to_canonical()) {
            Some(start) => {
                let end = spec.range_end.map(|ip| ip.to_canonical());
                if !within(&subnet, Some(start), end, start) {
                    return Err(format!("RangeStart {start} not in network {subnet}"));
                }
                start
            }
            None => next_ip(network),
        };
        let end = match spec.range_end.map(|ip| ip.to_canonical()) {
            Some(end) => {
                if !within(&subnet, Some(start), Some(end), end) {
                    return Err(format!("RangeEnd {end} not in network {subnet}"));
                }
                end
            }
            None => match subnet.broadcast() {
                IpAddr::V4(b) => IpAddr::V4(b.saturating_sub(1)),
                last => last,
            },
        };
        Ok(Range {
            subnet,
            start,
            end,
            gateway,
        })
    }

    /// Whether `ip` can be handed out from this range: same family, in the
    /// subnet, within `[start, end]` (the gateway is not excluded here).
    pub fn contains(&self, ip: IpAddr) -> bool {
        within(&self.subnet, Some(self.start), Some(self.end), ip)
    }

    /// Whether the two ranges share an address (never across families).
    pub fn overlaps(&self, other: &Range) -> bool {
        same_family(self.start, other.start)
            && (self.contains(other.start)
                || self.contains(other.end)
                || other.contains(self.start)
                || other.contains(self.end))
    }

    /// Whether this is an IPv4 range.
    pub fn is_ipv4(&self) -> bool {
        self.start.is_ipv4()
    }
}

impl fmt::Display for Range {
    /// `start-end`, as the reference prints a range in its messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// A canonical, non-empty list of ranges of one family that do not overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<Range>,
}

impl RangeSet {
    /// Canonicalizes every range in order (the first error wins), then
    /// checks the set: `empty range set`, `mixed address families` (checked
    /// after each range), `subnets A and B overlap`.
    pub fn canonicalize(specs: &[RangeSpec]) -> Result<RangeSet, String> {
        if specs.is_empty() {
            return Err("empty range set".into());
        }
        let mut ranges: Vec<Range> = Vec::with_capacity(specs.len());
        for spec in specs {
            let r = Range::canonicalize(spec)?;
            if ranges
                .first()
                .is_some_and(|first| first.is_ipv4() != r.is_ipv4())
            {
                return Err("mixed address families".into());
            }
            ranges.push(r);
        }
        for (i, a) in ranges.iter().enumerate() {
            if let Some(b) = ranges[i + 1..].iter().find(|b| a.overlaps(b)) {
                return Err(format!("subnets {a} and {b} overlap"));
            }
        }
        Ok(RangeSet { ranges })
    }

    /// The ranges, in config order (never empty).
    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// Whether this set hands out IPv4 addresses.
    pub fn is_ipv4(&self) -> bool {
        self.ranges[0].is_ipv4()
    }

    /// The first range that contains `ip`, and its index.
    pub fn range_for(&self, ip: IpAddr) -> Option<(usize, &Range)> {
        self.ranges.iter().enumerate().find(|(_, r)| r.contains(ip))
    }

    /// Whether some range of the set contains `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.range_for(ip).is_some()
    }

    /// Whether any range of this set overlaps any range of `other`.
    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.ranges
            .iter()
            .any(|a| other.ranges.iter().any(|b| a.overlaps(b)))
    }
}

impl fmt::Display for RangeSet {
    /// The ranges comma-joined: `10.1.0.1-10.1.0.254,10.2.0.1-10.2.0.254`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn spec(subnet: &str) -> RangeSpec {
        let (a, p) = subnet.split_once('/').unwrap();
        RangeSpec {
            subnet: Some((ip(a), p.parse().unwrap())),
            ..RangeSpec::default()
        }
    }

    #[test]
    fn defaults_v4() {
        let r = Range::canonicalize(&spec("10.1.0.0/24")).unwrap();
        assert_eq!(r.to_string(), "10.1.0.1-10.1.0.254");
        assert_eq!(r.gateway, ip("10.1.0.1"));
        assert_eq!(r.subnet.to_string(), "10.1.0.0/24");
    }

    #[test]
    fn defaults_v6_end_is_last_address() {
        let r = Range::canonicalize(&spec("fd00::/126")).unwrap();
        assert_eq!(r.to_string(), "fd00::1-fd00::3");
        assert_eq!(r.gateway, ip("fd00::1"));
    }

    #[test]
    fn errors_in_order() {
        assert_eq!(
            Range::canonicalize(&RangeSpec::default()).unwrap_err(),
            "IP <nil> not v4 nor v6"
        );
        assert_eq!(
            Range::canonicalize(&spec("10.1.0.0/31")).unwrap_err(),
            "Network 10.1.0.0/31 too small to allocate from"
        );
        assert_eq!(
            Range::canonicalize(&spec("fd00::/127")).unwrap_err(),
            "Network fd00::/127 too small to allocate from"
        );
        assert_eq!(
            Range::canonicalize(&spec("::ffff:10.1.0.0/120")).unwrap_err(),
            "IPNet IP and Mask version mismatch"
        );
        assert_eq!(
            Range::canonicalize(&spec("10.1.0.5/24")).unwrap_err(),
            "Network has host bits set. For a subnet mask of length 24 the network address is 10.1.0.0"
        );
    }

    #[test]
    fn start_and_end_bounds() {
        let mut s = spec("10.1.0.0/24");
        s.range_start = Some(ip("10.1.0.100"));
        s.range_end = Some(ip("10.1.0.50"));
        assert_eq!(
            Range::canonicalize(&s).unwrap_err(),
            "RangeStart 10.1.0.100 not in network 10.1.0.0/24"
        );
        s.range_start = Some(ip("10.2.0.1"));
        s.range_end = None;
        assert_eq!(
            Range::canonicalize(&s).unwrap_err(),
            "RangeStart 10.2.0.1 not in network 10.1.0.0/24"
        );
        s.range_start = Some(ip("fd00::1"));
        assert_eq!(
            Range::canonicalize(&s).unwrap_err(),
            "RangeStart fd00::1 not in network 10.1.0.0/24"
        );
        s.range_start = Some(ip("10.1.0.10"));
        s.range_end = Some(ip("10.1.1.1"));
        assert_eq!(
            Range::canonicalize(&s).unwrap_err(),
            "RangeEnd 10.1.1.1 not in network 10.1.0.0/24"
        );
        s.range_start = None;
        s.range_end = Some(ip("10.1.0.0"));
        assert_eq!(
            Range::canonicalize(&s).unwrap_err(),
            "RangeEnd 10.1.0.0 not in network 10.1.0.0/24"
        );
        // The network address itself may be an explicit start; the gateway
        // is not checked.
        s.range_start = Some(ip("10.1.0.0"));
        s.range_end = Some(ip("10.1.0.3"));
        s.gateway = Some(ip("1.2.3.4"));
        let r = Range::canonicalize(&s).unwrap();
        assert_eq!(r.to_string(), "10.1.0.0-10.1.0.3");
        assert_eq!(r.gateway, ip("1.2.3.4"));
    }

    #[test]
    fn mapped_addresses_are_unmapped() {
        let mut s = spec("10.1.0.0/24");
        s.range_start = Some(ip("::ffff:10.1.0.7"));
        s.gateway = Some(ip("::ffff:10.1.0.9"));
        let r = Range::canonicalize(&s).unwrap();
        assert_eq!(r.start, ip("10.1.0.7"));
        assert_eq!(r.gateway, ip("10.1.0.9"));
        assert!(r.contains(ip("::ffff:10.1.0.8")));
    }

    #[test]
    fn set_errors() {
        assert_eq!(RangeSet::canonicalize(&[]).unwrap_err(), "empty range set");
        assert_eq!(
            RangeSet::canonicalize(&[spec("10.1.0.0/24"), spec("fd00::/64")]).unwrap_err(),
            "mixed address families"
        );
        // A family mismatch is reported before a later range's own error.
        assert_eq!(
            RangeSet::canonicalize(&[spec("10.1.0.0/24"), spec("fd00::/64"), spec("10.0.0.0/31")])
                .unwrap_err(),
            "mixed address families"
        );
        assert_eq!(
            RangeSet::canonicalize(&[spec("10.1.0.0/24"), spec("10.1.0.0/16")]).unwrap_err(),
            "subnets 10.1.0.1-10.1.0.254 and 10.1.0.1-10.1.255.254 overlap"
        );
        let mut a = spec("10.1.0.0/24");
        a.range_end = Some(ip("10.1.0.99"));
        let mut b = spec("10.1.0.0/24");
        b.range_start = Some(ip("10.1.0.100"));
        let set = RangeSet::canonicalize(&[a, b]).unwrap();
        assert_eq!(set.to_string(), "10.1.0.1-10.1.0.99,10.1.0.100-10.1.0.254");
        assert_eq!(set.range_for(ip("10.1.0.100")).map(|(i, _)| i), Some(1));
        assert!(!set.contains(ip("10.1.0.255")));
    }

    #[test]
    fn set_overlap_ignores_other_family() {
        let v4 = RangeSet::canonicalize(&[spec("10.1.0.0/24")]).unwrap();
        let v6 = RangeSet::canonicalize(&[spec("fd00::/64")]).unwrap();
        let v4b = RangeSet::canonicalize(&[spec("10.1.0.0/25")]).unwrap();
        assert!(!v4.overlaps(&v6));
        assert!(v4.overlaps(&v4b));
        assert!(v4b.overlaps(&v4));
    }
}

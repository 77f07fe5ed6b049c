//! Traffic control over the rtnetlink socket of [`super::route`]: the few
//! qdiscs and the one filter the `traffic-control` capability installs
//! (`RTM_NEWQDISC` / `RTM_DELQDISC` / `RTM_GETQDISC`, `RTM_NEWTFILTER` /
//! `RTM_GETTFILTER`), and the token-bucket sizing of the reference
//! `bandwidth` plugin.
//!
//! `netlink-packet-route` has typed `ingress`, `u32` and `mirred` messages
//! but no `tbf`: its `TCA_OPTIONS` (`struct tc_tbf_qopt`, linux
//! `pkt_sched.h`) are encoded and decoded here.

use netlink_packet_core::{DefaultNla, Nla, NlasIterator, NLM_F_DUMP};
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionGeneric, TcActionMirrorOption, TcActionOption,
    TcActionType, TcAttribute, TcFilterU32Option, TcHandle, TcMessage, TcMirror,
    TcMirrorActionType, TcOption, TcU32Key, TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::route::{check_index, Netlink, NlError};

/// `TCA_TBF_PARMS`: `struct tc_tbf_qopt`.
const TCA_TBF_PARMS: u16 = 1;
/// `TCA_TBF_RATE64`: the rate when it does not fit 32 bits.
const TCA_TBF_RATE64: u16 = 4;
/// `sizeof(struct tc_tbf_qopt)`: two `tc_ratespec` (12 bytes) and three
/// `u32`.
const TBF_QOPT_LEN: usize = 36;
/// `ETH_P_ALL`, in network byte order as `tcm_info` carries it.
const ETH_P_ALL_BE: u16 = 0x0003_u16.to_be();

/// The queueing latency the reference sizes a bucket's queue for (ms).
const LATENCY_MS: f64 = 25.0;
/// `TIME_UNITS_PER_SEC` of iproute2 and the reference (microseconds).
const TIME_UNITS_PER_SEC: f64 = 1_000_000.0;
/// Scheduler ticks per microsecond: the kernel's ticks are 64 ns
/// (`PSCHED_SHIFT` 6; `/proc/net/psched` says `000003e8 00000040`, which
/// is what the reference reads, on every kernel since 2.6.31).
const TICKS_PER_USEC: f64 = 1000.0 / 64.0;

/// The handle of the root qdisc wasmcni installs (`1:`).
pub const TBF_HANDLE: TcHandle = TcHandle { major: 1, minor: 0 };
/// The handle of an `ingress` qdisc (`ffff:`).
pub const INGRESS_HANDLE: TcHandle = TcHandle {
    major: 0xffff,
    minor: 0,
};

/// Go's `uint32(f)` for a `float64` on amd64 (the reference's build): the
/// float truncated to an `int64` (`CVTTSD2SQ`, which gives `1 << 63` for
/// NaN and anything out of range), then its low 32 bits. Rust's `as u32`
/// saturates instead.
pub fn go_u32(f: f64) -> u32 {
    // 2^63: the first float out of `int64`'s range.
    const OUT: f64 = 9_223_372_036_854_775_808.0;
    if (-OUT..OUT).contains(&f) {
        f as i64 as u32
    } else {
        // NaN too.
        0
    }
}

/// A token bucket in the kernel's units, as `tc_tbf_qopt` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    /// Bytes per second.
    pub rate: u64,
    /// Bytes the queue holds at most.
    pub limit: u32,
    /// The bucket, as the time (scheduler ticks) it takes to fill at `rate`.
    pub buffer: u32,
}

impl Tbf {
    /// The bucket the reference `bandwidth` plugin installs for `rate`
    /// bits/s and `burst` bits: bytes per second, a buffer of `burst`
    /// bytes' worth of time, a queue of 25 ms at that rate plus the burst.
    /// None if either is below one byte or the burst is 4 GiB or more.
    ///
    /// The same arithmetic as the reference, overflow included: it
    /// converts each float to `uint32` as Go does on amd64 (truncated to
    /// a 64-bit integer, then its low 32 bits: [`go_u32`]) and adds in
    /// `uint32` (wrapping), so a rate of one byte per second, whose
    /// buffer overflows, gives the kernel the same bucket as the
    /// reference's, and a sum that wraps is accepted or refused by the
    /// kernel alike. (Saturating instead gave rate 8 a bucket of 274
    /// bytes where the reference's holds 35, and refused a rate of 2^40
    /// with a 2 GiB burst that the reference installs.)
    pub fn sized(rate_bits: u64, burst_bits: u64) -> Option<Tbf> {
        let rate = rate_bits / 8;
        let burst = burst_bits / 8;
        if rate == 0 || burst == 0 || burst >= u64::from(u32::MAX) {
            return None;
        }
        let burst = burst as u32;
        let usecs = go_u32(f64::from(burst) * TIME_UNITS_PER_SEC / rate as f64);
        let buffer = go_u32(f64::from(usecs) * TICKS_PER_USEC);
        let latency = TIME_UNITS_PER_SEC * (LATENCY_MS / 1000.0);
        let limit = go_u32(rate as f64 * latency / TIME_UNITS_PER_SEC).wrapping_add(burst);
        Some(Tbf {
            rate,
            limit,
            buffer,
        })
    }

    /// The (rate, burst) in bits that [`Tbf::sized`] turns into exactly
    /// this bucket, if any: the burst is the queue limit less 25 ms at the
    /// rate (in `uint32`, as [`Tbf::sized`] added them).
    pub fn as_sized(&self) -> Option<(u64, u64)> {
        let latency = TIME_UNITS_PER_SEC * (LATENCY_MS / 1000.0);
        let queue = go_u32(self.rate as f64 * latency / TIME_UNITS_PER_SEC);
        let burst = u64::from(self.limit.wrapping_sub(queue));
        let (rate_bits, burst_bits) = (self.rate.checked_mul(8)?, burst.checked_mul(8)?);
        (Tbf::sized(rate_bits, burst_bits) == Some(*self)).then_some((rate_bits, burst_bits))
    }

    /// `TCA_OPTIONS` of a `tbf` qdisc: `TCA_TBF_PARMS` (link-layer
    /// unaware, no rate table, no peak rate: as the reference sends it) and
    /// `TCA_TBF_RATE64` when the rate needs it.
    fn options(&self) -> Vec<TcOption> {
        let mut q = [0u8; TBF_QOPT_LEN];
        let rate32 = u32::try_from(self.rate).unwrap_or(u32::MAX);
        // tc_ratespec rate: cell_log u8, linklayer u8, overhead u16,
        // cell_align i16, mpu u16, rate u32.
        q[8..12].copy_from_slice(&rate32.to_ne_bytes());
        // peakrate (12..24) stays zero; then limit, buffer, mtu.
        q[24..28].copy_from_slice(&self.limit.to_ne_bytes());
        q[28..32].copy_from_slice(&self.buffer.to_ne_bytes());
        let mut out = vec![TcOption::Other(DefaultNla::new(TCA_TBF_PARMS, q.to_vec()))];
        if self.rate > u64::from(u32::MAX) {
            out.push(TcOption::Other(DefaultNla::new(
                TCA_TBF_RATE64,
                self.rate.to_ne_bytes().to_vec(),
            )));
        }
        out
    }

    /// Reads a `tbf` qdisc's bucket from its `TCA_OPTIONS` (which the
    /// parser keeps as one opaque attribute for a kind it does not know).
    fn from_options(options: &[TcOption]) -> Option<Tbf> {
        let mut parms = None;
        let mut rate64 = None;
        let mut visit = |kind: u16, value: &[u8]| match kind & 0x3fff {
            TCA_TBF_PARMS if value.len() >= TBF_QOPT_LEN => parms = Some(value.to_vec()),
            TCA_TBF_RATE64 if value.len() >= 8 => {
                rate64 = value[..8].try_into().ok().map(u64::from_ne_bytes)
            }
            _ => {}
        };
        for o in options {
            let TcOption::Other(nla) = o else { continue };
            let mut value = vec![0; nla.value_len()];
            nla.emit_value(&mut value);
            // TCA_OPTIONS itself (nested), or one of its members.
            if nla.kind() & 0x3fff == 2 {
                for inner in NlasIterator::new(&value[..]).flatten() {
                    visit(inner.kind(), inner.value());
                }
            } else {
                visit(nla.kind(), &value);
            }
        }
        let p = parms?;
        let u32_at = |i: usize| p[i..i + 4].try_into().ok().map(u32::from_ne_bytes);
        Some(Tbf {
            rate: rate64.unwrap_or(u64::from(u32_at(8)?)),
            limit: u32_at(24)?,
            buffer: u32_at(28)?,
        })
    }
}

/// A qdisc as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    /// `TCA_KIND`.
    pub kind: String,
    /// Its handle (0: a default qdisc the kernel attached).
    pub handle: TcHandle,
    /// Its bucket, for a `tbf`.
    pub tbf: Option<Tbf>,
}

fn qdisc_msg(index: u32, parent: TcHandle, handle: TcHandle) -> Result<TcMessage, NlError> {
    check_index(index)?;
    let mut msg = TcMessage::default();
    msg.header.index = i32::try_from(index).map_err(|_| NlError::Kernel(libc::EINVAL))?;
    msg.header.parent = parent;
    msg.header.handle = handle;
    Ok(msg)
}

impl Netlink {
    /// The qdiscs of link `index` attached at `parent` (root or ingress).
    fn qdiscs_at(&mut self, index: u32, parent: TcHandle) -> Result<Vec<Qdisc>, NlError> {
        let req = qdisc_msg(index, TcHandle::UNSPEC, TcHandle::UNSPEC)?;
        let answers = self.request(RouteNetlinkMessage::GetQueueDiscipline(req), NLM_F_DUMP)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewQueueDiscipline(q)
                    if q.header.index as u32 == index && q.header.parent == parent =>
                {
                    Some(q)
                }
                _ => None,
            })
            .map(|q| {
                let kind = q
                    .attributes
                    .iter()
                    .find_map(|a| match a {
                        TcAttribute::Kind(k) => Some(k.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                let tbf = (kind == "tbf")
                    .then(|| {
                        q.attributes.iter().find_map(|a| match a {
                            TcAttribute::Options(o) => Tbf::from_options(o),
                            _ => None,
                        })
                    })
                    .flatten();
                Qdisc {
                    kind,
                    handle: q.header.handle,
                    tbf,
                }
            })
            .collect())
    }

    /// The root qdisc of link `index`, if it has one (a link that is down
    /// may have none yet).
    pub fn root_qdisc(&mut self, index: u32) -> Result<Option<Qdisc>, NlError> {
        Ok(self.qdiscs_at(index, TcHandle::ROOT)?.into_iter().next())
    }

    /// The `ingress` (or `clsact`) qdisc of link `index`, if any.
    pub fn ingress_qdisc(&mut self, index: u32) -> Result<Option<Qdisc>, NlError> {
        Ok(self.qdiscs_at(index, TcHandle::INGRESS)?.into_iter().next())
    }

    /// Installs `tbf` as link `index`'s root qdisc, handle `1:`. Fails with
    /// EEXIST if the link has a root qdisc other than the kernel's default
    /// (no `NLM_F_REPLACE`).
    pub fn add_tbf(&mut self, index: u32, tbf: &Tbf) -> Result<(), NlError> {
        let mut msg = qdisc_msg(index, TcHandle::ROOT, TBF_HANDLE)?;
        msg.attributes.push(TcAttribute::Kind("tbf".into()));
        msg.attributes.push(TcAttribute::Options(tbf.options()));
        self.ack(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            netlink_packet_core::NLM_F_CREATE | netlink_packet_core::NLM_F_EXCL,
        )
    }

    /// Adds the `ingress` qdisc (`ffff:`) to link `index`; EEXIST if it
    /// has one.
    pub fn add_ingress(&mut self, index: u32) -> Result<(), NlError> {
        let mut msg = qdisc_msg(index, TcHandle::INGRESS, INGRESS_HANDLE)?;
        msg.attributes.push(TcAttribute::Kind("ingress".into()));
        msg.attributes.push(TcAttribute::Options(Vec::new()));
        self.ack(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            netlink_packet_core::NLM_F_CREATE | netlink_packet_core::NLM_F_EXCL,
        )
    }

    /// Deletes the qdisc `handle` at `parent` of link `index`.
    pub fn delete_qdisc(
        &mut self,
        index: u32,
        parent: TcHandle,
        handle: TcHandle,
    ) -> Result<(), NlError> {
        let msg = qdisc_msg(index, parent, handle)?;
        self.ack(RouteNetlinkMessage::DelQueueDiscipline(msg), 0)
    }

    /// Adds to link `index`'s `ingress` qdisc a `u32` filter (priority 1,
    /// every protocol) that matches every packet and redirects it to the
    /// egress of link `to`: `tc filter add dev LINK parent ffff: protocol
    /// all prio 1 u32 match u32 0 0 flowid 1:1 action mirred egress
    /// redirect dev TO`. The reference's netlink library sends the
    /// redirect twice (its `RedirIndex` shorthand and the action it is
    /// given: the first steals the packet, the second never runs); so does
    /// this, so that the kernel holds the same filter as with the
    /// reference.
    pub fn add_redirect(&mut self, index: u32, to: u32) -> Result<(), NlError> {
        check_index(to)?;
        let mut msg = qdisc_msg(index, INGRESS_HANDLE, TcHandle::UNSPEC)?;
        msg.header.info = (1u32 << 16) | u32::from(ETH_P_ALL_BE);
        let mut key = TcU32Key::default();
        key.mask = 0;
        key.val = 0;
        let mut sel = TcU32Selector::default();
        sel.flags = TcU32SelectorFlags::Terminal;
        sel.nkeys = 1;
        sel.keys = vec![key];
        let mirred = |tab: u16, action: TcActionType| {
            let mut generic = TcActionGeneric::default();
            generic.action = action;
            let mut a = TcAction::default();
            a.tab = tab;
            a.attributes = vec![
                TcActionAttribute::Kind("mirred".into()),
                TcActionAttribute::Options(vec![TcActionOption::Mirror(
                    TcActionMirrorOption::Parms({
                        let mut m = TcMirror::default();
                        m.generic = generic;
                        m.eaction = TcMirrorActionType::EgressRedir;
                        m.ifindex = to;
                        m
                    }),
                )]),
            ];
            a
        };
        msg.attributes.push(TcAttribute::Kind("u32".into()));
        msg.attributes.push(TcAttribute::Options(vec![
            TcOption::U32(TcFilterU32Option::Selector(sel)),
            TcOption::U32(TcFilterU32Option::ClassId(TcHandle { major: 1, minor: 1 })),
            TcOption::U32(TcFilterU32Option::Action(vec![
                mirred(1, TcActionType::Stolen),
                mirred(2, TcActionType::Ok),
            ])),
        ]));
        self.ack(
            RouteNetlinkMessage::NewTrafficFilter(msg),
            netlink_packet_core::NLM_F_CREATE | netlink_packet_core::NLM_F_EXCL,
        )
    }

    /// The links that `u32` filters on link `index`'s `ingress` qdisc
    /// redirect to (`mirred egress redirect`), in order.
    pub fn ingress_redirects(&mut self, index: u32) -> Result<Vec<u32>, NlError> {
        let req = qdisc_msg(index, INGRESS_HANDLE, TcHandle::UNSPEC)?;
        let answers = self.request(RouteNetlinkMessage::GetTrafficFilter(req), NLM_F_DUMP)?;
        let mut out = Vec::new();
        for m in answers {
            let RouteNetlinkMessage::NewTrafficFilter(f) = m else {
                continue;
            };
            if f.header.index as u32 != index {
                continue;
            }
            for a in &f.attributes {
                let TcAttribute::Options(opts) = a else {
                    continue;
                };
                for o in opts {
                    let TcOption::U32(TcFilterU32Option::Action(actions)) = o else {
                        continue;
                    };
                    for act in actions {
                        for aa in &act.attributes {
                            let TcActionAttribute::Options(ao) = aa else {
                                continue;
                            };
                            for x in ao {
                                if let TcActionOption::Mirror(TcActionMirrorOption::Parms(p)) = x {
                                    if p.eaction == TcMirrorActionType::EgressRedir {
                                        out.push(p.ifindex);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The attributes nested in `bytes` (for the tests).
#[cfg(test)]
fn nested(bytes: &[u8]) -> Vec<(u16, Vec<u8>)> {
    NlasIterator::new(bytes)
        .flatten()
        .map(|n| (n.kind(), n.value().to_vec()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;

    #[test]
    fn sized_as_the_reference() {
        // 800 kbit/s, 80 kbit: `tc` shows rate 100000 B/s, burst 10000 B,
        // latency 25 ms for the reference's qdisc.
        let t = Tbf::sized(800_000, 80_000).expect("valid");
        assert_eq!(t.rate, 100_000);
        assert_eq!(t.limit, 2_500 + 10_000);
        assert_eq!(t.buffer, 1_562_500); // 100 ms in 64 ns ticks
        assert_eq!(t.as_sized(), Some((800_000, 80_000)));
        // Bits below a byte are dropped.
        assert_eq!(
            t.as_sized(),
            Tbf::sized(800_007, 80_007).and_then(|t| t.as_sized())
        );
        assert_eq!(Tbf::sized(7, 80_000), None);
        assert_eq!(Tbf::sized(800_000, 7), None);
        assert_eq!(Tbf::sized(800_000, u64::from(u32::MAX) * 8), None);
        // A bucket sized otherwise is not one of ours.
        let other = Tbf {
            buffer: t.buffer + 1,
            ..t
        };
        assert_eq!(other.as_sized(), None);
    }

    /// Overflow as the reference overflows (Go's conversions on amd64):
    /// the buckets `tc` shows for the reference's qdiscs.
    #[test]
    fn sized_as_the_reference_where_its_arithmetic_overflows() {
        assert_eq!(go_u32(1e10), 1_410_065_408);
        assert_eq!(go_u32(-1.0), u32::MAX);
        assert_eq!(go_u32(f64::NAN), 0);
        assert_eq!(go_u32(1e19), 0);
        assert_eq!(go_u32(4_294_967_296.5), 0);
        assert_eq!(go_u32(0.99), 0);
        // 8 bit/s (1 B/s), 80 kbit: the buffer's microseconds (10^10) and
        // ticks wrap; `tc` shows the reference's as `burst 35b`.
        let t = Tbf::sized(8, 80_000).expect("valid");
        assert_eq!((t.rate, t.limit, t.buffer), (1, 10_000, 557_435_520));
        assert_eq!(t.as_sized(), Some((8, 80_000)));
        // 2^40 bit/s with a 2 GiB burst: the queue limit's sum wraps.
        let t = Tbf::sized(1 << 40, (1 << 34) - 8).expect("valid");
        assert_eq!(
            (t.rate, t.limit, t.buffer),
            (1 << 37, 1_288_490_187, 244_125)
        );
        assert_eq!(t.as_sized(), Some((1 << 40, (1 << 34) - 8)));
    }

    #[test]
    fn options_round_trip() {
        for t in [
            Tbf::sized(800_000, 80_000).expect("valid"),
            Tbf::sized(80_000_000_000, 8_000_000).expect("valid"),
        ] {
            let opts = t.options();
            assert_eq!(Tbf::from_options(&opts), Some(t));
            // As the kernel sends it back: one nested TCA_OPTIONS.
            let mut inner = Vec::new();
            for o in &opts {
                let mut b = vec![0; o.buffer_len()];
                o.emit(&mut b);
                inner.extend_from_slice(&b);
            }
            let wrapped = TcOption::Other(DefaultNla::new(2 | 0x8000, inner.clone()));
            assert_eq!(Tbf::from_options(&[wrapped]), Some(t));
            assert_eq!(nested(&inner).len(), opts.len());
        }
    }
}

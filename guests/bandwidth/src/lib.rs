//! The CNI `bandwidth` plugin for wasmcni.
//!
//! Behaves like the reference (containernetworking/plugins
//! `plugins/meta/bandwidth`, 1.1.1): a chained plugin that limits the
//! container's traffic on the host side of its veth. `ingressRate` /
//! `ingressBurst` (traffic to the container) become a token bucket on what
//! the host veth sends; `egressRate` / `egressBurst` (traffic from the
//! container) one on what it receives, redirected to an `ifb` device
//! (`bwp…`, which the result lists). Rates are bits per second, bursts
//! bits; the keys may instead come from the runtime (`runtimeConfig.
//! bandwidth`, capability `bandwidth`), used only when the config sets
//! none of the four. A rate needs its burst and a burst its rate; a burst
//! must be below 4 GiB (32 Gbit).
//!
//! The host veth is found as the reference finds it: the peer of
//! `CNI_IFNAME` in the container, which must be a host interface of the
//! prevResult. CHECK reads the limits back; DEL removes the attachment's
//! `ifb` (the host veth, with its qdiscs, goes with the main plugin's DEL),
//! and succeeds when there is nothing to remove or the namespace is gone.
//! GC (which the reference lacks) deletes the `ifb`s of the network's
//! attachments that are not in `cni.dev/valid-attachments`.
//!
//! Unlike the reference, a failed ADD leaves nothing behind (the journal
//! removes qdiscs and `ifb`), and errors name the offending key.

use guest_sdk::cni::{CniResult, Error, Interface};
use guest_sdk::net::Netns;
use guest_sdk::skel::{self, Invocation, Plugin};
use guest_sdk::tc::{RateLimit, Shaping};
use plugin_common::mac;
use serde::Deserialize;
use serde_json::Value;

/// The four keys of the CNI bandwidth convention, bits per second and bits
/// (0: not set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Bandwidth {
    ingress_rate: u64,
    ingress_burst: u64,
    egress_rate: u64,
    egress_burst: u64,
}

/// The largest burst the reference accepts: below 4 GiB, in bits.
const MAX_BURST_BYTES: u64 = u32::MAX as u64;

/// The four keys as a config or `runtimeConfig.bandwidth` gives them,
/// decoded through the SDK (keys as Go matches them: containerd sends
/// `{"IngressRate": .., "IngressBurst": .., "EgressRate": ..,
/// "EgressBurst": ..}`; `null` as absent), each value checked below.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeysJson {
    #[serde(default)]
    ingress_rate: Option<Value>,
    #[serde(default)]
    ingress_burst: Option<Value>,
    #[serde(default)]
    egress_rate: Option<Value>,
    #[serde(default)]
    egress_burst: Option<Value>,
}

/// The `runtimeConfig` key bandwidth reads (the config's own keys are a
/// [`KeysJson`] of the whole config).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuntimeJson {
    #[serde(default)]
    runtime_config: Option<RuntimeConfigJson>,
}

#[derive(Debug, Default, Deserialize)]
struct RuntimeConfigJson {
    #[serde(default)]
    bandwidth: Option<KeysJson>,
}

impl KeysJson {
    fn keys(&self) -> [&Option<Value>; 4] {
        [
            &self.ingress_rate,
            &self.ingress_burst,
            &self.egress_rate,
            &self.egress_burst,
        ]
    }
}

impl Bandwidth {
    fn is_zero(&self) -> bool {
        *self == Bandwidth::default()
    }

    /// The keys of `keys` (`at` names where in errors), or `None` if none
    /// is set.
    fn from_keys(keys: [&Option<Value>; 4], at: &str) -> Result<Option<Bandwidth>, Error> {
        let names = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];
        if keys.iter().all(|k| k.is_none()) {
            return Ok(None);
        }
        let mut v = [0u64; 4];
        for ((slot, key), given) in v.iter_mut().zip(names).zip(keys) {
            *slot = match given {
                None | Some(Value::Null) => 0,
                Some(x) => x.as_u64().ok_or_else(|| {
                    Error::internal(format!(
                        "failed to parse network configuration: {at}{key} must be a \
                         non-negative integer (bits{}), got {x}",
                        if key.ends_with("Rate") {
                            " per second"
                        } else {
                            ""
                        }
                    ))
                })?,
            };
        }
        Ok(Some(Bandwidth {
            ingress_rate: v[0],
            ingress_burst: v[1],
            egress_rate: v[2],
            egress_burst: v[3],
        }))
    }

    /// The reference's checks of one direction, naming the keys.
    fn validate(&self, at: &str) -> Result<(), Error> {
        for (dir, rate, burst) in [
            ("ingress", self.ingress_rate, self.ingress_burst),
            ("egress", self.egress_rate, self.egress_burst),
        ] {
            let (rk, bk) = (format!("{at}{dir}Rate"), format!("{at}{dir}Burst"));
            if burst == 0 && rate != 0 {
                return Err(Error::internal(format!(
                    "{rk} is set but {bk} is not: if rate is set, burst must also be set"
                )));
            }
            if rate == 0 && burst != 0 {
                return Err(Error::internal(format!(
                    "{bk} is set but {rk} is not: if burst is set, rate must also be set"
                )));
            }
            if burst / 8 >= MAX_BURST_BYTES {
                return Err(Error::internal(format!(
                    "{bk} is {burst} bits: burst cannot be more than 4GB"
                )));
            }
            // The kernel keeps whole bytes.
            if rate != 0 && rate < 8 {
                return Err(Error::internal(format!(
                    "{rk} is {rate} bits per second: the rate must be at least 8 (one byte)"
                )));
            }
            if burst != 0 && burst < 8 {
                return Err(Error::internal(format!(
                    "{bk} is {burst} bits: the burst must be at least 8 (one byte)"
                )));
            }
        }
        Ok(())
    }
}

/// The limits the config asks for: its own keys, else the runtime's
/// (`runtimeConfig.bandwidth`), validated; `None` when neither sets any.
/// (ADD and CHECK; DEL reads none of it.)
fn parse(inv: &Invocation) -> Result<Option<Bandwidth>, Error> {
    let decode_err = |e: Error| {
        let why = e
            .msg
            .strip_prefix("invalid network config: ")
            .unwrap_or(&e.msg)
            .to_owned();
        Error::internal(format!("failed to parse network configuration: {why}"))
    };
    let own: KeysJson = inv.conf.plugin_config().map_err(decode_err)?;
    let rt: RuntimeJson = inv.conf.plugin_config().map_err(decode_err)?;
    let own = Bandwidth::from_keys(own.keys(), "")?;
    // The runtime's keys must decode even where the config's win, as in
    // the reference (which decodes the whole config first).
    let at = "runtimeConfig.bandwidth.";
    let runtime = match rt.runtime_config.and_then(|r| r.bandwidth) {
        None => None,
        Some(k) => Some(Bandwidth::from_keys(k.keys(), at)?.unwrap_or_default()),
    };
    if let Some(b) = own {
        b.validate("")?;
        return Ok(Some(b));
    }
    match runtime {
        None => Ok(None),
        Some(b) => {
            b.validate(at)?;
            Ok(Some(b))
        }
    }
}

/// The host side of the container's veth: the peer of `CNI_IFNAME`, which
/// must be a host interface of the prevResult. Its index and name.
fn host_interface(
    inv: &Invocation,
    prev: &CniResult,
    host: &Netns,
) -> Result<(u32, String), Error> {
    if prev.interfaces.is_empty() {
        return Err(Error::internal("no interfaces provided"));
    }
    let ifname = &inv.env.ifname;
    let container = Netns::container()
        .map_err(|e| Error::internal(format!("failed to open netns {:?}: {e}", inv.env.netns)))?;
    let peer = match container.link(ifname) {
        Ok(l) if l.kind.as_deref() == Some("veth") => l.parent_index.unwrap_or(0),
        Ok(_) => 0,
        Err(e) => {
            return Err(Error::internal(format!(
                "container interface {ifname} has no veth peer: {e}"
            )))
        }
    };
    if peer == 0 {
        return Err(Error::internal(format!(
            "container interface {ifname} has no veth peer: it is not a veth"
        )));
    }
    let link = host
        .link_by_index(peer)
        .map_err(|_| Error::internal(format!("veth peer with index {peer} is not in host ns")))?;
    if prev
        .interfaces
        .iter()
        .any(|i| i.sandbox.is_empty() && i.name == link.name)
    {
        Ok((link.index, link.name))
    } else {
        Err(Error::internal(
            "no veth peer of container interface found in host ns",
        ))
    }
}

/// Compares what is installed in one direction with what is configured
/// (the kernel keeps whole bytes).
fn check_direction(what: &str, have: &Shaping, rate: u64, burst: u64) -> Result<(), Error> {
    match have {
        Shaping::None => Err(Error::internal(format!("{what}: Failed to find qdisc"))),
        Shaping::Other(kind) => Err(Error::internal(format!(
            "{what}: found a {kind} qdisc where the rate limit should be"
        ))),
        Shaping::RateLimit(l) if l.rate != rate / 8 * 8 => {
            Err(Error::internal(format!("{what}: Rate doesn't match")))
        }
        Shaping::RateLimit(l) if l.burst != burst / 8 * 8 => {
            Err(Error::internal(format!("{what}: Limit doesn't match")))
        }
        Shaping::RateLimit(_) => Ok(()),
    }
}

/// At DEL: the host veth as ADD found it (the prevResult's host
/// interface that is the peer of `CNI_IFNAME`), if it is still there and
/// has limits of this plugin's shape on it. None when anything is
/// missing (no prevResult, as before 0.4.0; the container's namespace
/// gone; the veth gone with it): then there is nothing on it to remove.
fn limited_host_veth(inv: &Invocation, host: &Netns) -> Option<u32> {
    let prev = inv.prev_result().ok()??;
    let (index, _) = host_interface(inv, &prev, host).ok()?;
    let limits = host.limits(index).ok()?;
    let ours = |s: &Shaping| matches!(s, Shaping::RateLimit(_));
    (ours(&limits.transmit) || ours(&limits.receive)).then_some(index)
}

fn host_ns() -> Result<Netns, Error> {
    Ok(Netns::host()?)
}

struct BandwidthPlugin;

impl Plugin for BandwidthPlugin {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let bw = parse(inv)?;
        let prev = inv.prev_result()?;
        let bw = match bw {
            Some(b) if !b.is_zero() => b,
            _ => return prev.ok_or_else(|| Error::internal("must be called as chained plugin")),
        };
        let mut result = prev.ok_or_else(|| Error::internal("must be called as chained plugin"))?;
        let host = host_ns()?;
        let (index, _name) = host_interface(inv, &result, &host)?;
        if bw.ingress_rate > 0 && bw.ingress_burst > 0 {
            host.limit_transmit(
                index,
                RateLimit {
                    rate: bw.ingress_rate,
                    burst: bw.ingress_burst,
                },
            )?;
        }
        if bw.egress_rate > 0 && bw.egress_burst > 0 {
            let ifb = host.limit_receive(
                index,
                RateLimit {
                    rate: bw.egress_rate,
                    burst: bw.egress_burst,
                },
            )?;
            let link = host.link_by_index(ifb)?;
            result.interfaces.push(Interface {
                mac: mac::format(&link.mac),
                ..Interface::new(link.name)
            });
        }
        Ok(result)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let bw = parse(inv)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("must be called as a chained plugin"))?;
        let host = host_ns()?;
        let (index, _name) = host_interface(inv, &prev, &host)?;
        let bw = match bw {
            Some(b) if !b.is_zero() => b,
            _ => return Ok(()),
        };
        let limits = host.limits(index)?;
        if bw.ingress_rate > 0 && bw.ingress_burst > 0 {
            check_direction(
                "ingress",
                &limits.transmit,
                bw.ingress_rate,
                bw.ingress_burst,
            )?;
        }
        if bw.egress_rate > 0 && bw.egress_burst > 0 {
            check_direction("egress", &limits.receive, bw.egress_rate, bw.egress_burst)?;
        }
        Ok(())
    }

    /// Removes the attachment's `ifb`, and the limits on the host veth
    /// while it is there, and reads none of the limits in the config: a
    /// config ADD refuses (a rate without its burst, a burst under one
    /// byte) cannot stop it. (The reference's DEL validates the config,
    /// and leaves the `tbf` on the host veth to the main plugin's DEL,
    /// which deletes the veth: where the veth outlives it, the limits
    /// stayed on it.)
    ///
    /// A veth whose limits this plugin may not remove (a native plugin's
    /// veth from before wasmcni, limited by the reference's bandwidth) is
    /// left as the reference's DEL leaves it: the `ifb` alone, so the DEL
    /// completes wherever the reference's would.
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        let host = host_ns()?;
        if let Some(index) = limited_host_veth(inv, &host) {
            if host.remove_limits(Some(index)).is_ok() {
                return Ok(());
            }
        }
        host.remove_limits(None)?;
        Ok(())
    }

    /// GC (spec 1.1, which the reference 1.1.1 lacks): the `ifb`s of the
    /// network's attachments that are gone.
    fn gc(&self, _inv: &Invocation) -> Result<(), Error> {
        host_ns()?.collect_garbage()?;
        Ok(())
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `bandwidth`).
pub fn main() -> ! {
    skel::run(BandwidthPlugin, "CNI bandwidth plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inv(command: guest_sdk::cni::Command, extra: Value) -> Invocation {
        let mut c = json!({"cniVersion": "1.0.0", "type": "bandwidth"});
        for (k, v) in extra.as_object().expect("object") {
            c[k] = v.clone();
        }
        plugin_common::testing::invocation(command, "", c)
    }

    fn bw(v: Value) -> Result<Option<Bandwidth>, Error> {
        parse(&inv(guest_sdk::cni::Command::Add, v))
    }

    #[test]
    fn keys_and_errors() {
        assert_eq!(bw(json!({"name": "x"})).expect("ok"), None);
        assert_eq!(bw(json!({"ingressRate": null})).expect("ok"), None);
        let b = bw(json!({"ingressRate": 800000, "ingressBurst": 80000}))
            .expect("ok")
            .expect("set");
        assert_eq!(
            (b.ingress_rate, b.ingress_burst, b.egress_rate),
            (800000, 80000, 0)
        );
        for (conf, words) in [
            (
                json!({"ingressRate": 1000}),
                vec!["ingressRate", "ingressBurst", "burst must also be set"],
            ),
            (
                json!({"egressBurst": 1000}),
                vec!["egressBurst", "egressRate", "rate must also be set"],
            ),
            (
                json!({"egressRate": -1, "egressBurst": 8}),
                vec!["egressRate", "non-negative"],
            ),
            (
                json!({"ingressRate": "fast", "ingressBurst": 8}),
                vec!["ingressRate"],
            ),
            (
                json!({"ingressRate": 8, "ingressBurst": 34359738360u64}),
                vec!["ingressBurst", "4GB"],
            ),
            (
                json!({"ingressRate": 7, "ingressBurst": 80}),
                vec!["ingressRate", "at least 8"],
            ),
            (
                json!({"ingressRate": 80, "ingressBurst": 7}),
                vec!["ingressBurst", "at least 8"],
            ),
        ] {
            let e = bw(conf.clone()).expect_err(&conf.to_string());
            assert_eq!(e.code, 999, "{conf}: {e:?}");
            for w in words {
                assert!(e.msg.contains(w), "{conf}: {:?} lacks {w:?}", e.msg);
            }
        }
    }

    #[test]
    fn runtime_bandwidth_with_go_field_names() {
        // containerd marshals its BandWidth struct without json tags.
        let b = bw(json!({"runtimeConfig": {"bandwidth": {
            "IngressRate": 800000, "IngressBurst": 80000, "EgressRate": 0, "EgressBurst": 0}}}))
        .expect("ok")
        .expect("set");
        assert_eq!((b.ingress_rate, b.ingress_burst), (800000, 80000));
        // The config's own keys win.
        let b = bw(json!({"egressRate": 1000, "egressBurst": 800,
                          "runtimeConfig": {"bandwidth": {"IngressRate": 8, "IngressBurst": 8}}}))
        .expect("ok")
        .expect("set");
        assert_eq!((b.ingress_rate, b.egress_rate), (0, 1000));
        // Mistyped runtime keys fail even where the config's win.
        let e = bw(json!({"egressRate": 1000, "egressBurst": 800,
                          "runtimeConfig": {"bandwidth": {"ingressRate": true}}}))
        .expect_err("mistyped");
        assert!(
            e.msg.contains("runtimeConfig.bandwidth.ingressRate"),
            "{}",
            e.msg
        );
        let e = bw(json!({"runtimeConfig": {"bandwidth": 5}})).expect_err("not an object");
        assert_eq!(e.code, 999);
        assert!(e.msg.contains("runtimeConfig.bandwidth"), "{}", e.msg);
    }

    #[test]
    fn del_reads_no_config() {
        use plugin_common::testing::{reach, Reached};
        for extra in [
            json!({"ingressRate": 800000, "ingressBurst": 7}),
            json!({"ingressRate": 800000}),
            json!({"egressRate": -1, "egressBurst": "x"}),
            json!({"runtimeConfig": {"bandwidth": {"EgressBurst": 4}}}),
        ] {
            assert!(bw(extra.clone()).is_err(), "{extra}: ADD accepts it");
            let del = inv(guest_sdk::cni::Command::Del, extra.clone());
            assert_eq!(
                reach(|| BandwidthPlugin.del(&del)),
                Reached::HostCall("netns.host".into()),
                "{extra}"
            );
        }
    }
}

/// docs/reference-options.md's `bandwidth` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "bandwidth",
            &[
                (
                    "",
                    [keys_of::<KeysJson>(), keys_of::<RuntimeJson>()].concat(),
                ),
                ("runtimeConfig.", keys_of::<RuntimeConfigJson>()),
            ],
        );
    }
}

//! The host-local configuration: parsing, canonicalization and validation
//! of the `ipam` section and the requested addresses, in the reference's
//! order and with its error texts (spec §2.1–2.3). All errors are code 999,
//! as a plain Go error becomes in the reference skel.
//!
//! Schema (only the keys host-local reads; others are ignored):
//!
//! ```text
//! name, cniVersion,
//! runtimeConfig: { ipRanges: [[Range]], ips: ["IP" | "IP/len"] },
//! args: { cni: { ips: ["IP" | "IP/len"] } },
//! ipam: { subnet, rangeStart, rangeEnd, gateway,   (one Range, "short form")
//!         ranges: [[Range]], routes: [{dst, gw?}], dataDir, resolvConf,
//!         dns }                                     (wasmcni extension)
//! Range = { subnet, rangeStart?, rangeEnd?, gateway? }
//! ```
//!
//! Decoded through the SDK ([`compat::decode`]) as the reference's Go
//! `encoding/json` decodes: keys match exactly, then case-insensitively
//! (containerd sends `runtimeConfig.ipRanges` with Go's field names,
//! `{"Subnet": …}`), `null` is absent.
//!
//! DEL and GC read only where the reservations are ([`reservations`]):
//! ranges, routes and requested addresses matter to ADD alone.

use std::net::IpAddr;

use guest_sdk::cni::version::Version;
use guest_sdk::cni::{CniArgs, Dns, Error, NetConf, Route};
use serde::{Deserialize, Deserializer};

use crate::range::{RangeSet, RangeSpec};
use plugin_common::compat::{self, de_ip, parse_cidr, RouteJson};

/// The `CNI_ARGS` keys host-local knows (besides `IgnoreUnknown`).
const KNOWN_ARGS: &[&str] = &["IP"];

/// A validated host-local configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamConfig {
    /// The range sets, in their final order: `runtimeConfig.ipRanges`, the
    /// short form, `ipam.ranges`. A set's index is its range id (in the
    /// store's `last_reserved_ip.N` and in error messages).
    pub range_sets: Vec<RangeSet>,
    /// Requested addresses: CNI_ARGS `IP`, `args.cni.ips`,
    /// `runtimeConfig.ips`, in that order (masks dropped).
    pub requested: Vec<IpAddr>,
    /// `ipam.routes`, passed to the result verbatim.
    pub routes: Vec<Route>,
    /// `ipam.dataDir` (`None`: the host's default, `/var/lib/cni/networks`).
    pub data_dir: Option<String>,
    /// `ipam.resolvConf`, see [`IpamConfig::result_dns`].
    pub resolv_conf: Option<String>,
    /// `ipam.dns` (not in the reference), see [`IpamConfig::result_dns`].
    pub dns: Dns,
}

impl IpamConfig {
    /// The `dns` of the ADD result: `ipam.dns`, or empty.
    ///
    /// The reference reads a resolv.conf-format file named by
    /// `resolvConf`. A wasmcni plugin has no file access, so when
    /// `resolvConf` is set this is an error (code 2, unsupported field)
    /// rather than silently returning no DNS; `ipam.dns` is the
    /// replacement. Only ADD calls this (like the reference, which reads the
    /// file only on ADD): DEL, CHECK and GC work with such a config, so
    /// addresses allocated by the native plugin can still be released.
    pub fn result_dns(&self) -> Result<Dns, Error> {
        if self.resolv_conf.is_some() {
            return Err(Error::unsupported_field(
                "resolvConf is not supported by wasmcni's host-local: a plugin has no file access (set dns in the network config instead)",
            ));
        }
        Ok(self.dns.clone())
    }
}

/// Where DEL and GC find this attachment's reservations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservations {
    /// Under `ipam.dataDir` (`None`: the host's default).
    In(Option<String>),
    /// Nowhere: `ipam.dataDir` is not a string, so no ADD of this config
    /// reserved anything.
    Nowhere,
}

/// What DEL and GC read of the config: the data directory, on its own.
/// Only a config without an `ipam` section fails (`IPAM config missing
/// 'ipam' key`, as the reference's DEL); ranges, routes, requested
/// addresses and `CNI_ARGS`, which ADD checks, are not read.
pub fn reservations(conf: &NetConf) -> Result<Reservations, Error> {
    #[derive(Deserialize, Default)]
    struct Net {
        #[serde(default)]
        ipam: Option<Ipam>,
    }
    #[derive(Deserialize, Default)]
    struct Ipam {
        #[serde(default, rename = "dataDir")]
        data_dir: Option<serde_json::Value>,
    }
    // Nothing in these types can fail to decode but a non-object `ipam`,
    // which the SDK leaves out of a DEL's config.
    let net: Net = conf.plugin_config().unwrap_or_default();
    let Some(ipam) = net.ipam else {
        return Err(Error::internal("IPAM config missing 'ipam' key"));
    };
    Ok(match ipam.data_dir {
        None | Some(serde_json::Value::Null) => Reservations::In(None),
        Some(serde_json::Value::String(d)) => Reservations::In(Some(d).filter(|d| !d.is_empty())),
        Some(_) => Reservations::Nowhere,
    })
}

/// Parses and validates the config with the invocation's `CNI_ARGS`, for
/// a config of (effective) version `cni_version`.
///
/// Order, as the reference `LoadIPAMConfig`: JSON decoding (bad addresses
/// fail here: `invalid CIDR address: foo`, `invalid IP address: zz`,
/// `invalid IP address zz` for requested ones), `IPAM config missing 'ipam'
/// key`, CNI_ARGS, `cannot understand ip: …`, `no IP ranges specified`,
/// each range set (`invalid range set N: …`), more than one set per
/// family before 0.3.0, overlapping sets (`range set I overlaps with J`).
pub fn load(conf: &NetConf, args: &CniArgs, cni_version: &str) -> Result<IpamConfig, Error> {
    let net: NetJson = compat::decode(conf)?;
    let Some(ipam) = net.ipam else {
        return Err(Error::internal("IPAM config missing 'ipam' key"));
    };
    let runtime = net.runtime_config.unwrap_or_default();

    let mut requested: Vec<Option<IpAddr>> = Vec::new();
    if let Some(ip) = ip_from_args(args)? {
        requested.push(Some(ip));
    }
    if let Some(ips) = net.args.and_then(|a| a.cni).and_then(|c| c.ips) {
        requested.extend(ips.into_iter().map(|r| r.0));
    }
    requested.extend(runtime.ips.unwrap_or_default().into_iter().map(|r| r.0));
    let requested = requested
        .into_iter()
        .map(|ip| ip.ok_or_else(|| Error::internal("cannot understand ip: IP <nil> not v4 nor v6")))
        .collect::<Result<Vec<IpAddr>, Error>>()?;

    let mut specs: Vec<Vec<RangeSpec>> = Vec::new();
    specs.extend(
        runtime
            .ip_ranges
            .unwrap_or_default()
            .into_iter()
            .map(range_set_spec),
    );
    if ipam.subnet.is_some() {
        specs.push(vec![ipam.short_form()]);
    }
    specs.extend(
        ipam.ranges
            .unwrap_or_default()
            .into_iter()
            .map(range_set_spec),
    );
    if specs.is_empty() {
        return Err(Error::internal("no IP ranges specified"));
    }

    let mut range_sets = Vec::with_capacity(specs.len());
    for (i, set) in specs.iter().enumerate() {
        let set = RangeSet::canonicalize(set)
            .map_err(|e| Error::internal(format!("invalid range set {i}: {e}")))?;
        range_sets.push(set);
    }
    check_per_family(range_sets.iter().map(RangeSet::is_ipv4), cni_version)?;
    for (i, a) in range_sets.iter().enumerate() {
        if let Some(j) = range_sets[i + 1..].iter().position(|b| a.overlaps(b)) {
            return Err(Error::internal(format!(
                "range set {i} overlaps with {}",
                i + j + 1
            )));
        }
    }

    Ok(IpamConfig {
        range_sets,
        requested,
        routes: ipam
            .routes
            .unwrap_or_default()
            .into_iter()
            .map(Route::from)
            .collect(),
        data_dir: ipam.data_dir.filter(|d| !d.is_empty()),
        resolv_conf: ipam.resolv_conf.filter(|r| !r.is_empty()),
        dns: ipam.dns.unwrap_or_default(),
    })
}

/// Spec versions before 0.3.0 carry one address per family: more is
/// `CNI version V does not support more than 1 address per family`.
/// `families` yields true for IPv4, false for IPv6.
fn check_per_family(families: impl Iterator<Item = bool>, cni_version: &str) -> Result<(), Error> {
    let (mut v4, mut v6) = (0, 0);
    for is_v4 in families {
        if is_v4 {
            v4 += 1;
        } else {
            v6 += 1;
        }
    }
    let legacy = Version::parse(cni_version).map_or(true, |v| v < Version::new(0, 3, 0));
    if (v4 > 1 || v6 > 1) && legacy {
        return Err(Error::internal(format!(
            "CNI version {cni_version} does not support more than 1 address per family"
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// CNI_ARGS and requested addresses

/// The requested address in `CNI_ARGS` (`IP=10.0.0.5` or `IP=10.0.0.5/24`;
/// empty: none; repeated: the last), with the reference's texts, e.g.
/// `ARGS: error parsing value of pair "IP=foo": invalid IP address foo`
/// (see [`compat::load_args`]).
fn ip_from_args(args: &CniArgs) -> Result<Option<IpAddr>, Error> {
    let mut ip = None;
    compat::load_args(args, KNOWN_ARGS, |_, value| {
        ip = match value {
            "" => None,
            v => Some(parse_requested(v)?),
        };
        Ok(())
    })?;
    Ok(ip)
}

/// A requested address: `IP` or `IP/len` (the length is dropped); else
/// `invalid IP address ⟨s⟩` (no colon: the reference's `ip.IP` parser).
fn parse_requested(s: &str) -> Result<IpAddr, String> {
    let ip = if s.contains('/') {
        parse_cidr(s).map(|(ip, _)| ip)
    } else {
        s.parse().ok()
    };
    ip.map(|ip| ip.to_canonical())
        .ok_or_else(|| format!("invalid IP address {s}"))
}

/// A range's `subnet`: `invalid CIDR address: ⟨s⟩`.
fn de_subnet<'de, D: Deserializer<'de>>(d: D) -> Result<Option<(IpAddr, u8)>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) => parse_cidr(&s)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid CIDR address: {s}"))),
    }
}

// ---------------------------------------------------------------------------
// JSON shapes

#[derive(Deserialize)]
struct NetJson {
    #[serde(default)]
    ipam: Option<IpamJson>,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: Option<RuntimeConfigJson>,
    #[serde(default)]
    args: Option<ArgsJson>,
}

#[derive(Deserialize, Default)]
struct RuntimeConfigJson {
    #[serde(default, rename = "ipRanges")]
    ip_ranges: Option<Vec<Option<Vec<RangeJson>>>>,
    #[serde(default)]
    ips: Option<Vec<RequestedJson>>,
}

#[derive(Deserialize)]
struct ArgsJson {
    #[serde(default)]
    cni: Option<CniArgsJson>,
}

#[derive(Deserialize)]
struct CniArgsJson {
    #[serde(default)]
    ips: Option<Vec<RequestedJson>>,
}

/// A requested address; `None` for `""` or `null` (Go's nil IP, refused
/// later with `cannot understand ip: …`).
struct RequestedJson(Option<IpAddr>);

impl<'de> Deserialize<'de> for RequestedJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RequestedJson, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(RequestedJson(None)),
            Some(s) if s.is_empty() => Ok(RequestedJson(None)),
            Some(s) => parse_requested(&s)
                .map(|ip| RequestedJson(Some(ip)))
                .map_err(serde::de::Error::custom),
        }
    }
}

#[derive(Deserialize, Default)]
struct RangeJson {
    #[serde(default, deserialize_with = "de_subnet")]
    subnet: Option<(IpAddr, u8)>,
    #[serde(default, rename = "rangeStart", deserialize_with = "de_ip")]
    range_start: Option<IpAddr>,
    #[serde(default, rename = "rangeEnd", deserialize_with = "de_ip")]
    range_end: Option<IpAddr>,
    #[serde(default, deserialize_with = "de_ip")]
    gateway: Option<IpAddr>,
}

impl RangeJson {
    fn to_spec(&self) -> RangeSpec {
        RangeSpec {
            subnet: self.subnet,
            range_start: self.range_start,
            range_end: self.range_end,
            gateway: self.gateway,
        }
    }
}

fn range_set_spec(set: Option<Vec<RangeJson>>) -> Vec<RangeSpec> {
    set.unwrap_or_default()
        .iter()
        .map(RangeJson::to_spec)
        .collect()
}

/// The `ipam` section. The short form's keys (one range written into
/// `ipam` itself) are its own fields, not a flattened [`RangeJson`]: a
/// flattened struct's keys would match exactly only.
#[derive(Deserialize)]
struct IpamJson {
    #[serde(default, deserialize_with = "de_subnet")]
    subnet: Option<(IpAddr, u8)>,
    #[serde(default, rename = "rangeStart", deserialize_with = "de_ip")]
    range_start: Option<IpAddr>,
    #[serde(default, rename = "rangeEnd", deserialize_with = "de_ip")]
    range_end: Option<IpAddr>,
    #[serde(default, deserialize_with = "de_ip")]
    gateway: Option<IpAddr>,
    #[serde(default)]
    ranges: Option<Vec<Option<Vec<RangeJson>>>>,
    #[serde(default)]
    routes: Option<Vec<RouteJson>>,
    #[serde(default, rename = "dataDir")]
    data_dir: Option<String>,
    #[serde(default, rename = "resolvConf")]
    resolv_conf: Option<String>,
    #[serde(default)]
    dns: Option<Dns>,
}

impl IpamJson {
    /// The short form's range.
    fn short_form(&self) -> RangeSpec {
        RangeSpec {
            subnet: self.subnet,
            range_start: self.range_start,
            range_end: self.range_end,
            gateway: self.gateway,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn net_conf(mut v: serde_json::Value) -> NetConf {
        for (k, x) in [("cniVersion", "1.0.0"), ("type", "host-local")] {
            if v.get(k).is_none() {
                v[k] = x.into();
            }
        }
        NetConf::from_value(v).unwrap()
    }

    fn load_json(v: serde_json::Value, args: &str, version: &str) -> Result<IpamConfig, String> {
        let args = CniArgs::parse(args).unwrap();
        load(&net_conf(v), &args, version).map_err(|e| {
            assert_eq!(e.code, 999, "{}", e.msg);
            e.msg
        })
    }

    fn err(ipam: serde_json::Value) -> String {
        load_json(json!({"name": "n", "ipam": ipam}), "", "1.0.0").unwrap_err()
    }

    fn sets(c: &IpamConfig) -> Vec<String> {
        c.range_sets.iter().map(ToString::to_string).collect()
    }

    fn ips(c: &IpamConfig) -> Vec<String> {
        c.requested.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn short_form() {
        let c = load_json(
            json!({"name": "n", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24",
                   "rangeStart": "10.1.0.10", "rangeEnd": "10.1.0.20", "gateway": "10.1.0.254"}}),
            "",
            "1.0.0",
        )
        .unwrap();
        assert_eq!(sets(&c), ["10.1.0.10-10.1.0.20"]);
        assert_eq!(
            c.range_sets[0].ranges()[0].gateway.to_string(),
            "10.1.0.254"
        );
        assert_eq!(c.data_dir, None);
        assert!(c.routes.is_empty());
        assert!(c.requested.is_empty());
    }

    #[test]
    fn short_form_without_subnet_is_ignored() {
        assert_eq!(
            err(json!({"rangeStart": "10.1.0.10", "gateway": "10.1.0.1"})),
            "no IP ranges specified"
        );
    }

    #[test]
    fn final_range_order() {
        let c = load_json(
            json!({"name": "n",
                   "runtimeConfig": {"ipRanges": [[{"subnet": "10.3.0.0/24"}], [{"subnet": "fd03::/64"}]]},
                   "ipam": {"subnet": "10.1.0.0/24",
                            "ranges": [[{"subnet": "10.2.0.0/24"}, {"subnet": "10.2.1.0/24"}], [{"subnet": "fd00::/120"}]]}}),
            "",
            "1.0.0",
        )
        .unwrap();
        assert_eq!(
            sets(&c),
            [
                "10.3.0.1-10.3.0.254",
                "fd03::1-fd03::ffff:ffff:ffff:ffff",
                "10.1.0.1-10.1.0.254",
                "10.2.0.1-10.2.0.254,10.2.1.1-10.2.1.254",
                "fd00::1-fd00::ff"
            ]
        );
    }

    #[test]
    fn other_keys() {
        let c = load_json(
            json!({"name": "n", "ipam": {"subnet": "10.1.0.0/24", "dataDir": "/run/ipam",
                   "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.0.0.5/24", "gw": "10.1.0.9"}, {"dst": "::/0", "gw": "fd00::1", "mtu": 1400}],
                   "dns": {"nameservers": ["1.1.1.1"], "domain": "example"}}}),
            "",
            "1.1.0",
        )
        .unwrap();
        assert_eq!(c.data_dir.as_deref(), Some("/run/ipam"));
        let routes: Vec<String> = c
            .routes
            .iter()
            .map(|r| format!("{} {:?} {:?}", r.dst, r.gw.map(|g| g.to_string()), r.mtu))
            .collect();
        assert_eq!(
            routes,
            [
                "0.0.0.0/0 None None",
                "10.0.0.5/24 Some(\"10.1.0.9\") None",
                "::/0 Some(\"fd00::1\") Some(1400)"
            ]
        );
        assert_eq!(c.result_dns().unwrap().nameservers, ["1.1.1.1"]);
        assert_eq!(c.result_dns().unwrap().domain, "example");
        // Empty dataDir and resolvConf count as absent.
        let c = load_json(
            json!({"name": "n", "ipam": {"subnet": "10.1.0.0/24", "dataDir": "", "resolvConf": ""}}),
            "",
            "1.0.0",
        )
        .unwrap();
        assert_eq!(c.data_dir, None);
        assert_eq!(c.result_dns().unwrap(), Dns::default());
    }

    #[test]
    fn resolv_conf_is_refused_on_use_only() {
        let c = load_json(
            json!({"name": "n", "ipam": {"subnet": "10.1.0.0/24", "resolvConf": "/etc/resolv.conf"}}),
            "",
            "1.0.0",
        )
        .unwrap();
        let e = c.result_dns().unwrap_err();
        assert_eq!(e.code, 2);
        assert_eq!(
            e.msg,
            "resolvConf is not supported by wasmcni's host-local: a plugin has no file access (set dns in the network config instead)"
        );
    }

    #[test]
    fn decode_errors() {
        assert_eq!(err(json!({"subnet": "foo"})), "invalid CIDR address: foo");
        assert_eq!(
            err(json!({"subnet": "10.0.0.0/33"})),
            "invalid CIDR address: 10.0.0.0/33"
        );
        assert_eq!(
            err(json!({"subnet": "10.0.0.0/+8"})),
            "invalid CIDR address: 10.0.0.0/+8"
        );
        assert_eq!(
            err(json!({"subnet": "10.1.0.0/24", "rangeStart": "zz"})),
            "invalid IP address: zz"
        );
        assert_eq!(
            err(json!({"subnet": "10.1.0.0/24", "gateway": "10.01.0.1"})),
            "invalid IP address: 10.01.0.1"
        );
        assert_eq!(
            err(json!({"ranges": [[{"subnet": "10.1.0.0/24", "rangeEnd": "x"}]]})),
            "invalid IP address: x"
        );
        assert_eq!(
            err(json!({"subnet": "10.1.0.0/24", "routes": [{"dst": "zz"}]})),
            "invalid CIDR address: zz"
        );
        assert_eq!(
            load_json(
                json!({"name": "n", "ipam": {"subnet": "10.1.0.0/24"}, "runtimeConfig": {"ips": ["zz"]}}),
                "",
                "1.0.0"
            )
            .unwrap_err(),
            "invalid IP address zz"
        );
        // Decoding comes before the ipam check.
        assert_eq!(
            load_json(
                json!({"name": "n", "args": {"cni": {"ips": ["1.2.3.4/99"]}}}),
                "",
                "1.0.0"
            )
            .unwrap_err(),
            "invalid IP address 1.2.3.4/99"
        );
    }

    #[test]
    fn missing_ipam() {
        assert_eq!(
            load_json(json!({"name": "n"}), "", "1.0.0").unwrap_err(),
            "IPAM config missing 'ipam' key"
        );
        assert_eq!(
            load_json(json!({"name": "n", "ipam": null}), "IP=zz", "1.0.0").unwrap_err(),
            "IPAM config missing 'ipam' key"
        );
    }

    #[test]
    fn requested_ips_in_order() {
        let c = load_json(
            json!({"name": "n", "ipam": {"subnet": "10.1.0.0/24"},
                   "args": {"cni": {"ips": ["10.1.0.7/16", "::ffff:10.1.0.8"]}},
                   "runtimeConfig": {"ips": ["fd00::9"]}}),
            "IgnoreUnknown=1;FOO=bar;IP=10.1.0.5/24",
            "1.0.0",
        )
        .unwrap();
        assert_eq!(ips(&c), ["10.1.0.5", "10.1.0.7", "10.1.0.8", "fd00::9"]);
        // An empty IP= requests nothing.
        let c = load_json(
            json!({"name": "n", "ipam": {"subnet": "10.1.0.0/24"}}),
            "IP=",
            "1.0.0",
        )
        .unwrap();
        assert!(c.requested.is_empty());
    }

    #[test]
    fn cni_args_errors() {
        let ipam = json!({"name": "n", "ipam": {"subnet": "10.1.0.0/24"}});
        assert_eq!(
            load_json(ipam.clone(), "IP=foo", "1.0.0").unwrap_err(),
            "ARGS: error parsing value of pair \"IP=foo\": invalid IP address foo"
        );
        assert_eq!(
            load_json(ipam.clone(), "IgnoreUnknown=YES", "1.0.0").unwrap_err(),
            "ARGS: error parsing value of pair \"IgnoreUnknown=YES\": boolean unmarshal error: invalid input yes"
        );
        assert_eq!(
            load_json(ipam.clone(), "FOO=bar;IP=10.1.0.5;X=y", "1.0.0").unwrap_err(),
            "ARGS: unknown args [\"FOO=bar\" \"X=y\"]"
        );
        // Keys are case-sensitive.
        assert_eq!(
            load_json(ipam.clone(), "ip=10.1.0.5", "1.0.0").unwrap_err(),
            "ARGS: unknown args [\"ip=10.1.0.5\"]"
        );
        // A bad value is reported before unknown keys.
        assert_eq!(
            load_json(ipam.clone(), "FOO=bar;IP=zz", "1.0.0").unwrap_err(),
            "ARGS: error parsing value of pair \"IP=zz\": invalid IP address zz"
        );
        assert!(load_json(ipam, "FOO=bar;IgnoreUnknown=true", "1.0.0").is_ok());
    }

    #[test]
    fn empty_requested_ip() {
        assert_eq!(
            load_json(
                json!({"name": "n", "ipam": {"subnet": "10.1.0.0/24"}, "runtimeConfig": {"ips": [""]}}),
                "",
                "1.0.0"
            )
            .unwrap_err(),
            "cannot understand ip: IP <nil> not v4 nor v6"
        );
    }

    #[test]
    fn range_set_errors() {
        assert_eq!(err(json!({"type": "host-local"})), "no IP ranges specified");
        assert_eq!(err(json!({"ranges": []})), "no IP ranges specified");
        assert_eq!(
            err(json!({"ranges": [[]]})),
            "invalid range set 0: empty range set"
        );
        assert_eq!(
            err(json!({"ranges": [null]})),
            "invalid range set 0: empty range set"
        );
        assert_eq!(
            err(json!({"ranges": [[{"gateway": "10.1.0.1"}]]})),
            "invalid range set 0: IP <nil> not v4 nor v6"
        );
        assert_eq!(
            err(json!({"subnet": "10.1.0.0/31"})),
            "invalid range set 0: Network 10.1.0.0/31 too small to allocate from"
        );
        assert_eq!(
            err(json!({"subnet": "10.1.0.0/32"})),
            "invalid range set 0: Network 10.1.0.0/32 too small to allocate from"
        );
        assert_eq!(
            err(json!({"subnet": "fd00::/128"})),
            "invalid range set 0: Network fd00::/128 too small to allocate from"
        );
        assert_eq!(
            err(json!({"subnet": "::ffff:10.1.0.0/120"})),
            "invalid range set 0: IPNet IP and Mask version mismatch"
        );
        assert_eq!(
            err(json!({"subnet": "10.1.0.1/24"})),
            "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 10.1.0.0"
        );
        assert_eq!(
            err(json!({"subnet": "10.1.0.0/24", "rangeStart": "10.2.0.1"})),
            "invalid range set 0: RangeStart 10.2.0.1 not in network 10.1.0.0/24"
        );
        assert_eq!(
            err(
                json!({"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.100", "rangeEnd": "10.1.0.50"})
            ),
            "invalid range set 0: RangeStart 10.1.0.100 not in network 10.1.0.0/24"
        );
        assert_eq!(
            err(json!({"subnet": "10.1.0.0/24", "rangeEnd": "10.1.1.50"})),
            "invalid range set 0: RangeEnd 10.1.1.50 not in network 10.1.0.0/24"
        );
        assert_eq!(
            err(json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "fd00::/64"}]]})),
            "invalid range set 0: mixed address families"
        );
        assert_eq!(
            err(json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "10.1.0.0/16"}]]})),
            "invalid range set 0: subnets 10.1.0.1-10.1.0.254 and 10.1.0.1-10.1.255.254 overlap"
        );
        // The index is the position in the final list.
        assert_eq!(
            err(json!({"subnet": "10.1.0.0/24", "ranges": [[{"subnet": "10.2.0.0/24"}], [{"subnet": "10.3.0.1/24"}]]})),
            "invalid range set 2: Network has host bits set. For a subnet mask of length 24 the network address is 10.3.0.0"
        );
        // A gateway outside the subnet (or of the other family) is accepted.
        assert!(load_json(
            json!({"name": "n", "ipam": {"subnet": "10.1.0.0/24", "gateway": "1.2.3.4"}}),
            "",
            "1.0.0"
        )
        .is_ok());
    }

    #[test]
    fn range_sets_must_not_overlap() {
        assert_eq!(
            err(
                json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "fd00::/64"}], [{"subnet": "10.1.0.0/16"}]]})
            ),
            "range set 0 overlaps with 2"
        );
        assert_eq!(
            err(
                json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "fd00::/64"}], [{"subnet": "fd00::/120"}]]})
            ),
            "range set 1 overlaps with 2"
        );
        // Disjoint bounds in one subnet do not overlap.
        assert!(load_json(
            json!({"name": "n", "ipam": {"ranges": [[{"subnet": "10.1.0.0/24", "rangeEnd": "10.1.0.9"}],
                                                    [{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.10"}]]}}),
            "",
            "0.4.0"
        )
        .is_ok());
    }

    #[test]
    fn one_address_per_family_before_0_3_0() {
        let two_v4 = json!({"name": "n", "ipam": {"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.2.0.0/24"}]]}});
        for v in ["0.1.0", "0.2.0"] {
            assert_eq!(
                load_json(two_v4.clone(), "", v).unwrap_err(),
                format!("CNI version {v} does not support more than 1 address per family")
            );
        }
        assert!(load_json(two_v4, "", "0.3.0").is_ok());
        let dual = json!({"name": "n", "ipam": {"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "fd00::/64"}]]}});
        assert!(load_json(dual, "", "0.2.0").is_ok());
        // Checked before overlaps between sets.
        let same = json!({"name": "n", "ipam": {"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/24"}]]}});
        assert_eq!(
            load_json(same.clone(), "", "0.2.0").unwrap_err(),
            "CNI version 0.2.0 does not support more than 1 address per family"
        );
        assert_eq!(
            load_json(same, "", "1.0.0").unwrap_err(),
            "range set 0 overlaps with 1"
        );
    }
}

/// docs/reference-options.md's `host-local` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "host-local",
            &[
                ("", keys_of::<NetJson>()),
                ("ipam.", keys_of::<IpamJson>()),
                ("ipam.ranges[][].", keys_of::<RangeJson>()),
                ("runtimeConfig.", keys_of::<RuntimeConfigJson>()),
                ("args.cni.", keys_of::<CniArgsJson>()),
            ],
        );
    }
}

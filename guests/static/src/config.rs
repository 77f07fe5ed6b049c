//! The static configuration: the addresses to hand out, assembled from the
//! config, `CNI_ARGS`, `args.cni.ips` and `runtimeConfig.ips` in the
//! reference's order and with its error texts (spec §3.1–3.2). All errors
//! are code 999, as a plain Go error becomes in the reference skel.
//!
//! Schema (only the keys static reads; others are ignored):
//!
//! ```text
//! name, cniVersion,
//! runtimeConfig: { ips: ["IP/len"] },
//! args: { cni: { ips: ["IP/len"] } },
//! ipam: { addresses: [{address: "IP/len", gateway?: IP}],
//!         routes: [{dst, gw?}], dns: {nameservers, domain, search, options} }
//! ```
//!
//! Decoded through the SDK ([`compat::decode`]) as the reference's Go
//! `encoding/json` decodes: keys match exactly, then case-insensitively,
//! and `null` is absent.

use std::net::IpAddr;

use guest_sdk::cni::version::Version;
use guest_sdk::cni::{Cidr, CniArgs, Dns, Error, NetConf, Route};
use ipnet::IpNet;
use serde::Deserialize;

use plugin_common::compat::{self, de_ip, parse_cidr, RouteJson};

/// The `CNI_ARGS` keys static knows (besides `IgnoreUnknown`).
const KNOWN_ARGS: &[&str] = &["IP", "GATEWAY"];

/// One address to hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    /// The address and prefix length, host bits kept (`10.80.0.5/24`).
    pub address: Cidr,
    /// Its gateway, if any (not checked against the subnet or family, as
    /// in the reference).
    pub gateway: Option<IpAddr>,
}

impl Address {
    /// Whether `ip` lies in this address's subnet.
    fn subnet_contains(&self, ip: IpAddr) -> bool {
        IpNet::new(self.address.addr(), self.address.prefix_len())
            .is_ok_and(|net| net.contains(&ip))
    }
}

/// A validated static configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticConfig {
    /// The addresses, in order.
    pub addresses: Vec<Address>,
    /// `ipam.routes`, verbatim.
    pub routes: Vec<Route>,
    /// `ipam.dns`.
    pub dns: Dns,
}

/// An entry of the address list while it is assembled: the config's own
/// addresses are parsed only at the end, so an invalid one is reported
/// only if nothing replaced it.
enum Entry {
    Unparsed {
        text: String,
        gateway: Option<IpAddr>,
    },
    Parsed(Address),
}

fn address(ip: IpAddr, prefix: u8) -> Result<Address, Error> {
    Ok(Address {
        address: Cidr::new(ip, prefix)?,
        gateway: None,
    })
}

/// `ips` entries (`args.cni.ips`, `runtimeConfig.ips`): CIDRs, no gateway.
fn ips_entries(ips: Vec<Option<String>>) -> Result<Vec<Entry>, Error> {
    ips.into_iter()
        .map(|s| {
            let s = s.unwrap_or_default();
            let (ip, prefix) = parse_cidr(&s).ok_or_else(|| {
                Error::internal(format!(
                    "an entry in the 'ips' field is NOT in CIDR notation, got: '{s}'"
                ))
            })?;
            address(ip, prefix).map(Entry::Parsed)
        })
        .collect()
}

/// Parses the config with the invocation's `CNI_ARGS`, for a config of
/// (effective) version `cni_version`.
///
/// The address list, in order (spec §3.2):
/// 1. `ipam.addresses` (parsed last, step 6);
/// 2. CNI_ARGS `IP=a,b` appended (each trimmed; `the 'ip' field is
///    expected to be in CIDR notation, got: '…'`);
/// 3. CNI_ARGS `GATEWAY=g,h`: each gateway goes to every address *from
///    CNI_ARGS* whose subnet contains it, the last match winning
///    (`invalid gateway address: …`, untrimmed);
/// 4. `args.cni.ips`, when non-empty, replaces the list;
/// 5. `runtimeConfig.ips`, when non-empty, replaces it again (both: `an
///    entry in the 'ips' field is NOT in CIDR notation, got: '…'`);
/// 6. the config's own addresses are parsed (`the 'address' field is
///    expected to be in CIDR notation, got: '…'`);
/// 7. at most one address per family before 0.3.0.
pub fn load(conf: &NetConf, args: &CniArgs, cni_version: &str) -> Result<StaticConfig, Error> {
    let net: NetJson = compat::decode(conf)?;
    let Some(ipam) = net.ipam else {
        return Err(Error::internal("IPAM config missing 'ipam' key"));
    };

    let mut entries: Vec<Entry> = ipam
        .addresses
        .unwrap_or_default()
        .into_iter()
        .map(|a| Entry::Unparsed {
            text: a.address.unwrap_or_default(),
            gateway: a.gateway,
        })
        .collect();

    let (mut ip_arg, mut gateway_arg) = (String::new(), String::new());
    compat::load_args(args, KNOWN_ARGS, |key, value| {
        match key {
            "IP" => ip_arg = value.to_owned(),
            _ => gateway_arg = value.to_owned(),
        }
        Ok(())
    })?;
    if !ip_arg.is_empty() {
        for item in ip_arg.split(',') {
            let item = item.trim();
            let (ip, prefix) = parse_cidr(item).ok_or_else(|| {
                Error::internal(format!(
                    "the 'ip' field is expected to be in CIDR notation, got: '{item}'"
                ))
            })?;
            entries.push(Entry::Parsed(address(ip, prefix)?));
        }
    }
    if !gateway_arg.is_empty() {
        for item in gateway_arg.split(',') {
            let gateway = item
                .trim()
                .parse::<IpAddr>()
                .map_err(|_| Error::internal(format!("invalid gateway address: {item}")))?
                .to_canonical();
            for entry in &mut entries {
                if let Entry::Parsed(a) = entry {
                    if a.subnet_contains(gateway) {
                        a.gateway = Some(gateway);
                    }
                }
            }
        }
    }

    let cni_ips = net.args.and_then(|a| a.cni).and_then(|c| c.ips);
    if let Some(ips) = cni_ips.filter(|v| !v.is_empty()) {
        entries = ips_entries(ips)?;
    }
    let runtime_ips = net.runtime_config.and_then(|r| r.ips);
    if let Some(ips) = runtime_ips.filter(|v| !v.is_empty()) {
        entries = ips_entries(ips)?;
    }

    let addresses = entries
        .into_iter()
        .map(|entry| match entry {
            Entry::Parsed(a) => Ok(a),
            Entry::Unparsed { text, gateway } => {
                let (ip, prefix) = parse_cidr(&text).ok_or_else(|| {
                    Error::internal(format!(
                        "the 'address' field is expected to be in CIDR notation, got: '{text}'"
                    ))
                })?;
                Ok(Address {
                    gateway,
                    ..address(ip, prefix)?
                })
            }
        })
        .collect::<Result<Vec<Address>, Error>>()?;
    check_per_family(&addresses, cni_version)?;

    Ok(StaticConfig {
        addresses,
        routes: ipam
            .routes
            .unwrap_or_default()
            .into_iter()
            .map(Route::from)
            .collect(),
        dns: ipam.dns.unwrap_or_default(),
    })
}

/// Spec versions before 0.3.0 carry one address per family: more is
/// `CNI version V does not support more than 1 address per family`.
fn check_per_family(addresses: &[Address], cni_version: &str) -> Result<(), Error> {
    let v4 = addresses.iter().filter(|a| a.address.is_ipv4()).count();
    let v6 = addresses.len() - v4;
    let legacy = Version::parse(cni_version).map_or(true, |v| v < Version::new(0, 3, 0));
    if (v4 > 1 || v6 > 1) && legacy {
        return Err(Error::internal(format!(
            "CNI version {cni_version} does not support more than 1 address per family"
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// JSON shapes

#[derive(Deserialize)]
struct NetJson {
    #[serde(default)]
    ipam: Option<IpamJson>,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: Option<IpsJson>,
    #[serde(default)]
    args: Option<ArgsJson>,
}

#[derive(Deserialize)]
struct IpsJson {
    #[serde(default)]
    ips: Option<Vec<Option<String>>>,
}

#[derive(Deserialize)]
struct ArgsJson {
    #[serde(default)]
    cni: Option<IpsJson>,
}

#[derive(Deserialize)]
struct IpamJson {
    #[serde(default)]
    addresses: Option<Vec<AddressJson>>,
    #[serde(default)]
    routes: Option<Vec<RouteJson>>,
    #[serde(default)]
    dns: Option<Dns>,
}

#[derive(Deserialize)]
struct AddressJson {
    #[serde(default)]
    address: Option<String>,
    #[serde(default, deserialize_with = "de_ip")]
    gateway: Option<IpAddr>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load_json(v: serde_json::Value, args: &str, version: &str) -> Result<StaticConfig, String> {
        let args = CniArgs::parse(args).unwrap();
        let mut v = v;
        for (k, x) in [("cniVersion", "1.0.0"), ("type", "static")] {
            if v.get(k).is_none() {
                v[k] = x.into();
            }
        }
        let conf = NetConf::from_value(v).unwrap();
        load(&conf, &args, version).map_err(|e| {
            assert_eq!(e.code, 999, "{}", e.msg);
            e.msg
        })
    }

    /// `address gateway` of every address.
    fn addrs(c: &StaticConfig) -> Vec<String> {
        c.addresses
            .iter()
            .map(|a| match a.gateway {
                Some(g) => format!("{} {g}", a.address),
                None => a.address.to_string(),
            })
            .collect()
    }

    fn with_ipam(ipam: serde_json::Value) -> serde_json::Value {
        json!({"name": "n", "ipam": ipam})
    }

    #[test]
    fn config_addresses() {
        let c = load_json(
            with_ipam(json!({"type": "static",
                "addresses": [{"address": "10.80.0.5/24", "gateway": "10.80.0.1"}, {"address": "fd00::5/64"}],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.5/16", "gw": "10.80.0.254"}],
                "dns": {"nameservers": ["10.80.0.53"], "search": ["a"]}})),
            "",
            "1.0.0",
        )
        .unwrap();
        assert_eq!(addrs(&c), ["10.80.0.5/24 10.80.0.1", "fd00::5/64"]);
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.routes[1].dst.to_string(), "10.9.0.5/16");
        assert_eq!(c.dns.nameservers, ["10.80.0.53"]);
        // No addresses at all is fine here.
        let c = load_json(with_ipam(json!({})), "", "0.2.0").unwrap();
        assert!(c.addresses.is_empty());
    }

    #[test]
    fn cni_args_append_and_gateways() {
        let c = load_json(
            with_ipam(json!({"addresses": [{"address": "10.80.0.5/24"}]})),
            "IP=10.81.0.5/24, 10.82.0.5/16 ,fd00::5/64;GATEWAY=10.81.0.1,10.80.0.1, 10.82.9.9,fd00::1",
            "1.0.0",
        )
        .unwrap();
        // The config's address gets no gateway from CNI_ARGS.
        assert_eq!(
            addrs(&c),
            [
                "10.80.0.5/24",
                "10.81.0.5/24 10.81.0.1",
                "10.82.0.5/16 10.82.9.9",
                "fd00::5/64 fd00::1"
            ]
        );
        // The last matching gateway wins.
        let c = load_json(
            with_ipam(json!({})),
            "IP=10.81.0.5/16;GATEWAY=10.81.0.1,10.81.1.1",
            "1.0.0",
        )
        .unwrap();
        assert_eq!(addrs(&c), ["10.81.0.5/16 10.81.1.1"]);
        // Empty values mean nothing.
        let c = load_json(with_ipam(json!({})), "IP=;GATEWAY=", "1.0.0").unwrap();
        assert!(c.addresses.is_empty());
    }

    #[test]
    fn cni_args_errors() {
        let n = with_ipam(json!({}));
        assert_eq!(
            load_json(n.clone(), "IP=10.81.0.5", "1.0.0").unwrap_err(),
            "the 'ip' field is expected to be in CIDR notation, got: '10.81.0.5'"
        );
        assert_eq!(
            load_json(n.clone(), "IP=10.81.0.5/24,", "1.0.0").unwrap_err(),
            "the 'ip' field is expected to be in CIDR notation, got: ''"
        );
        assert_eq!(
            load_json(n.clone(), "IP=10.81.0.5/24;GATEWAY=10.81.0.1, zz", "1.0.0").unwrap_err(),
            "invalid gateway address:  zz"
        );
        assert_eq!(
            load_json(n.clone(), "FOO=bar;IP=10.81.0.5/24;ip=x", "1.0.0").unwrap_err(),
            "ARGS: unknown args [\"FOO=bar\" \"ip=x\"]"
        );
        assert_eq!(
            load_json(n.clone(), "IgnoreUnknown=maybe", "1.0.0").unwrap_err(),
            "ARGS: error parsing value of pair \"IgnoreUnknown=maybe\": boolean unmarshal error: invalid input maybe"
        );
        assert!(load_json(n, "FOO=bar;IgnoreUnknown=1", "1.0.0").is_ok());
    }

    #[test]
    fn args_and_runtime_ips_replace() {
        let base = json!({"name": "n",
            "ipam": {"addresses": [{"address": "not-a-cidr"}]},
            "args": {"cni": {"ips": ["10.82.0.5/24"]}}});
        // args.cni.ips replaces the config's (invalid, never parsed) address
        // and the CNI_ARGS ones.
        let c = load_json(base.clone(), "IP=10.81.0.5/24;GATEWAY=10.81.0.1", "1.0.0").unwrap();
        assert_eq!(addrs(&c), ["10.82.0.5/24"]);
        let mut rt = base;
        rt["runtimeConfig"] = json!({"ips": ["10.83.0.5/24", "fd00::83/64"]});
        let c = load_json(rt.clone(), "", "1.0.0").unwrap();
        assert_eq!(addrs(&c), ["10.83.0.5/24", "fd00::83/64"]);
        // Empty lists replace nothing.
        rt["runtimeConfig"] = json!({"ips": []});
        rt["args"] = json!({"cni": {"ips": []}});
        assert_eq!(
            load_json(rt, "", "1.0.0").unwrap_err(),
            "the 'address' field is expected to be in CIDR notation, got: 'not-a-cidr'"
        );
    }

    #[test]
    fn ips_errors() {
        assert_eq!(
            load_json(
                json!({"name": "n", "ipam": {}, "args": {"cni": {"ips": ["10.82.0.5"]}}}),
                "",
                "1.0.0"
            )
            .unwrap_err(),
            "an entry in the 'ips' field is NOT in CIDR notation, got: '10.82.0.5'"
        );
        assert_eq!(
            load_json(
                json!({"name": "n", "ipam": {}, "runtimeConfig": {"ips": ["x/24"]}}),
                "",
                "1.0.0"
            )
            .unwrap_err(),
            "an entry in the 'ips' field is NOT in CIDR notation, got: 'x/24'"
        );
    }

    #[test]
    fn config_errors() {
        assert_eq!(
            load_json(json!({"name": "n"}), "", "1.0.0").unwrap_err(),
            "IPAM config missing 'ipam' key"
        );
        assert_eq!(
            load_json(
                with_ipam(json!({"addresses": [{"address": "10.80.0.5"}]})),
                "",
                "1.0.0"
            )
            .unwrap_err(),
            "the 'address' field is expected to be in CIDR notation, got: '10.80.0.5'"
        );
        assert_eq!(
            load_json(
                with_ipam(json!({"addresses": [{"address": "10.80.0.5/24", "gateway": "zz"}]})),
                "",
                "1.0.0"
            )
            .unwrap_err(),
            "invalid IP address: zz"
        );
        assert_eq!(
            load_json(
                with_ipam(json!({"routes": [{"dst": "10.0.0.0"}]})),
                "",
                "1.0.0"
            )
            .unwrap_err(),
            "invalid CIDR address: 10.0.0.0"
        );
        // The gateway is not checked against the subnet.
        let c = load_json(
            with_ipam(json!({"addresses": [{"address": "10.80.0.5/24", "gateway": "fd00::1"}]})),
            "",
            "1.0.0",
        )
        .unwrap();
        assert_eq!(addrs(&c), ["10.80.0.5/24 fd00::1"]);
    }

    #[test]
    fn one_address_per_family_before_0_3_0() {
        let two = with_ipam(
            json!({"addresses": [{"address": "10.80.0.5/24"}, {"address": "10.81.0.5/24"}]}),
        );
        for v in ["0.1.0", "0.2.0"] {
            assert_eq!(
                load_json(two.clone(), "", v).unwrap_err(),
                format!("CNI version {v} does not support more than 1 address per family")
            );
        }
        assert!(load_json(two, "", "0.3.0").is_ok());
        let dual = with_ipam(
            json!({"addresses": [{"address": "10.80.0.5/24"}, {"address": "fd00::5/64"}]}),
        );
        assert!(load_json(dual, "", "0.2.0").is_ok());
    }
}

/// docs/reference-options.md's `static` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "static",
            &[
                ("", keys_of::<NetJson>()),
                ("ipam.", keys_of::<IpamJson>()),
                ("ipam.addresses[].", keys_of::<AddressJson>()),
                ("runtimeConfig.", keys_of::<IpsJson>()),
                ("args.cni.", keys_of::<IpsJson>()),
            ],
        );
    }
}

//! Reading config values the way the reference Go IPAM plugins do, with
//! their error texts: addresses (`net.ParseIP`, `net.ParseCIDR`), routes
//! (`types.Route`) and `CNI_ARGS` (`types.LoadArgs`).
//!
//! Shared by the IPAM plugins (`host-local`, `static`).

use std::net::IpAddr;

use guest_sdk::cni::{Cidr, CniArgs, Error, NetConf, Route};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// The config decoded into `T` the way the reference's `json.Unmarshal`
/// does (through the SDK: keys matched exactly, then case-insensitively;
/// `null` as absent), a failure as the reference reports it: code 999
/// with the decoder's message only (`invalid CIDR address: foo`), not the
/// SDK's `invalid network config: field "…": ` around it.
pub fn decode<T: DeserializeOwned>(conf: &NetConf) -> Result<T, Error> {
    conf.plugin_config()
        .map_err(|e| Error::internal(decode_message(&e.msg)))
}

/// The decoder's own message in an error of [`NetConf::plugin_config`].
fn decode_message(msg: &str) -> String {
    let msg = msg.strip_prefix("invalid network config: ").unwrap_or(msg);
    if let Some(rest) = msg.strip_prefix("field \"") {
        if let Some(at) = rest.find("\": ") {
            return rest[at + 3..].to_owned();
        }
    }
    msg.to_owned()
}

/// `addr/len` as Go's `net.ParseCIDR`: the address as given (host bits
/// kept), a decimal prefix length up to the family's bits.
pub fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, prefix) = s.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix: u8 = prefix.parse().ok()?;
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    (prefix <= bits).then_some((addr, prefix))
}

/// A `net.IP` field: absent, `null` or `""` → `None`; else an address
/// (IPv4-mapped IPv6 becomes IPv4), or `invalid IP address: ⟨s⟩`.
pub fn de_ip<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => s
            .parse::<IpAddr>()
            .map(|ip| Some(ip.to_canonical()))
            .map_err(|_| serde::de::Error::custom(format!("invalid IP address: {s}"))),
    }
}

/// A `types.IPNet` field (route `dst`): `invalid CIDR address: ⟨s⟩`.
fn de_dst<'de, D: Deserializer<'de>>(d: D) -> Result<Cidr, D::Error> {
    let s = String::deserialize(d)?;
    let invalid = || serde::de::Error::custom(format!("invalid CIDR address: {s}"));
    let (addr, prefix) = parse_cidr(&s).ok_or_else(invalid)?;
    Cidr::new(addr, prefix).map_err(|_| invalid())
}

/// A route of `ipam.routes`, as given (`dst` keeps its host bits; the spec
/// 1.1 attributes pass through too).
#[derive(Deserialize)]
pub struct RouteJson {
    #[serde(deserialize_with = "de_dst")]
    dst: Cidr,
    #[serde(default, deserialize_with = "de_ip")]
    gw: Option<IpAddr>,
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default)]
    advmss: Option<u32>,
    #[serde(default)]
    priority: Option<u32>,
    #[serde(default)]
    table: Option<u32>,
    #[serde(default)]
    scope: Option<u8>,
}

impl From<RouteJson> for Route {
    fn from(r: RouteJson) -> Route {
        Route {
            dst: r.dst,
            gw: r.gw,
            mtu: r.mtu,
            advmss: r.advmss,
            priority: r.priority,
            table: r.table,
            scope: r.scope,
        }
    }
}

/// Walks `CNI_ARGS` as the reference `types.LoadArgs` into a struct with
/// the fields `known` (plus `IgnoreUnknown`): in order, a malformed piece
/// fails with `ARGS: invalid pair "⟨piece⟩"` (the SDK sets such pieces
/// aside on every command: the Go skel does not read `CNI_ARGS`), each
/// known pair is handed to `set` (its error becomes `ARGS: error parsing
/// value of pair "K=V": ⟨error⟩`) and each `IgnoreUnknown` value must be
/// `1`, `true`, `0` or `false` in any case; then keys that are not known
/// fail with `ARGS: unknown args ["FOO=bar" "X=y"]` unless `IgnoreUnknown`
/// is true ([`CniArgs::check_known`]). Keys are case-sensitive. All errors
/// are code 999, as plain errors in the reference.
pub fn load_args(
    args: &CniArgs,
    known: &[&str],
    mut set: impl FnMut(&str, &str) -> Result<(), String>,
) -> Result<(), Error> {
    let value_error = |key: &str, value: &str, why: &str| {
        let pair = format!("{key}={value}");
        Error::internal(format!("ARGS: error parsing value of pair {pair:?}: {why}"))
    };
    let malformed_at = |i: usize| {
        args.malformed()
            .iter()
            .find(|(at, _)| *at == i)
            .map(|(_, piece)| Error::internal(format!("ARGS: invalid pair {piece:?}")))
    };
    for (i, (key, value)) in args.iter().enumerate() {
        if let Some(e) = malformed_at(i) {
            return Err(e);
        }
        if key == "IgnoreUnknown" {
            let lower = value.to_ascii_lowercase();
            if !matches!(lower.as_str(), "1" | "true" | "0" | "false") {
                let why = format!("boolean unmarshal error: invalid input {lower}");
                return Err(value_error(key, value, &why));
            }
        } else if known.contains(&key) {
            set(key, value).map_err(|why| value_error(key, value, &why))?;
        }
    }
    if let Some(e) = malformed_at(args.len()) {
        return Err(e);
    }
    args.check_known(known).map_err(|_| {
        let unknown: Vec<String> = args
            .iter()
            .filter(|(k, _)| *k != "IgnoreUnknown" && !known.contains(k))
            .map(|(k, v)| format!("{:?}", format!("{k}={v}")))
            .collect();
        Error::internal(format!("ARGS: unknown args [{}]", unknown.join(" ")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_like_go() {
        assert_eq!(
            parse_cidr("10.0.0.5/24"),
            Some(("10.0.0.5".parse().unwrap(), 24))
        );
        assert_eq!(parse_cidr("fd00::/128").map(|c| c.1), Some(128));
        for bad in [
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0.0/33",
            "10.0.0.0/+8",
            "10.0.0.0/ 8",
            "fd00::/129",
            "x/8",
            "10.01.0.0/16",
        ] {
            assert_eq!(parse_cidr(bad), None, "{bad}");
        }
    }

    #[test]
    fn decode_errors_keep_the_decoders_message() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Ipam {
            #[serde(deserialize_with = "de_dst")]
            subnet: Cidr,
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Conf {
            ipam: Ipam,
        }
        let conf = NetConf::from_value(serde_json::json!({
            "cniVersion": "1.0.0", "name": "n", "type": "t",
            "ipam": {"type": "x", "subnet": "foo"}
        }))
        .unwrap();
        let e = decode::<Conf>(&conf).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (999, "invalid CIDR address: foo"));
        assert_eq!(decode_message("missing field `x`"), "missing field `x`");
    }

    #[test]
    fn malformed_pieces_fail_where_go_meets_them() {
        let args = CniArgs::parse_lenient("IP=x;;B=2");
        let e = load_args(&args, &["IP"], |_, _| Err("bad".into())).unwrap_err();
        assert_eq!(e.msg, "ARGS: error parsing value of pair \"IP=x\": bad");
        let e = load_args(&args, &["IP"], |_, _| Ok(())).unwrap_err();
        assert_eq!(e.msg, "ARGS: invalid pair \"\"");
        let e = load_args(&CniArgs::parse_lenient("A=1;x"), &["A"], |_, _| Ok(())).unwrap_err();
        assert_eq!(e.msg, "ARGS: invalid pair \"x\"");
        // An empty key is an unknown argument, as in Go.
        let e = load_args(&CniArgs::parse_lenient("=v"), &[], |_, _| Ok(())).unwrap_err();
        assert_eq!(e.msg, "ARGS: unknown args [\"=v\"]");
    }

    #[test]
    fn args_walk() {
        let args = CniArgs::parse("IgnoreUnknown=False;A=1;B=2;A=3").unwrap();
        let mut seen = Vec::new();
        let r = load_args(&args, &["A"], |k, v| {
            seen.push(format!("{k}={v}"));
            Ok(())
        });
        assert_eq!(seen, ["A=1", "A=3"]);
        assert_eq!(r.unwrap_err().msg, "ARGS: unknown args [\"B=2\"]");
        let args = CniArgs::parse("A=x").unwrap();
        let e = load_args(&args, &["A"], |_, v| Err(format!("bad {v}"))).unwrap_err();
        assert_eq!(e.code, 999);
        assert_eq!(e.msg, "ARGS: error parsing value of pair \"A=x\": bad x");
    }
}

//! The CNI `static` IPAM plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins 1.1.1,
//! `plugins/ipam/static`): ADD returns the configured addresses, routes and
//! DNS (see [`config`] for where addresses come from); CHECK compares the
//! configured addresses with the `prevResult`; DEL, GC and STATUS have
//! nothing to do, as the plugin holds no state. It makes no host calls.
//!
//! Where this deliberately differs from the reference: GC and STATUS
//! (spec 1.1) succeed.
mod config;

use guest_sdk::cni::{CniResult, Error, IpConfig};
use guest_sdk::skel::{self, Invocation, Plugin};

use crate::config::StaticConfig;

/// The configuration of an invocation.
fn load(inv: &Invocation) -> Result<StaticConfig, Error> {
    config::load(&inv.conf, &inv.env.args, inv.version())
}

/// The ADD result: the addresses with their gateways, the routes and DNS
/// of the config; no interfaces.
fn result(conf: StaticConfig) -> CniResult {
    CniResult {
        interfaces: Vec::new(),
        ips: conf
            .addresses
            .iter()
            .map(|a| IpConfig {
                interface: None,
                address: a.address,
                gateway: a.gateway,
            })
            .collect(),
        routes: conf.routes,
        dns: conf.dns,
    }
}

/// CHECK against the previous result: for each configured address, the
/// first `prevResult` address with the same IP (prefix ignored) must have
/// the configured gateway, if one is configured. A configured address
/// missing from the previous result is not an error (as in the reference).
fn check_prev(conf: &StaticConfig, prev: &CniResult, ifname: &str) -> Result<(), Error> {
    for want in &conf.addresses {
        let ip = want.address.addr();
        let Some(found) = prev.ips.iter().find(|p| p.address.addr() == ip) else {
            continue;
        };
        if want.gateway.is_some() && want.gateway != found.gateway {
            return Err(Error::internal(format!(
                "static: Failed to match addr {ip} on interface {ifname}"
            )));
        }
    }
    Ok(())
}

struct Static;

impl Plugin for Static {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        Ok(result(load(inv)?))
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let conf = load(inv)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("Required prevResult missing"))?;
        check_prev(&conf, &prev, &inv.env.ifname)
    }

    /// Nothing to release; the config is not even read (as the reference).
    fn del(&self, _inv: &Invocation) -> Result<(), Error> {
        Ok(())
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `static`).
pub fn main() -> ! {
    skel::run(Static, "CNI static plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest_sdk::skel::{dispatch, Outcome};
    use serde_json::{json, Value};

    fn run(command: &str, args: &str, conf: &Value) -> Outcome {
        let env = [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args),
            ("CNI_PATH", "/opt/cni/bin"),
        ];
        let lookup = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
                .filter(|v| !v.is_empty())
        };
        dispatch(&Static, lookup, conf.to_string().as_bytes())
    }

    fn ok_json(o: &Outcome) -> Value {
        assert_eq!(o.code, 0, "{}", o.stdout);
        serde_json::from_str(&o.stdout).unwrap()
    }

    fn err_msg(o: &Outcome) -> (u64, String) {
        assert_ne!(o.code, 0, "{}", o.stdout);
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        (
            v["code"].as_u64().unwrap(),
            v["msg"].as_str().unwrap().to_owned(),
        )
    }

    fn conf(version: &str, ipam: Value) -> Value {
        json!({"cniVersion": version, "name": "net1", "type": "static", "ipam": ipam})
    }

    fn ipam() -> Value {
        json!({"type": "static",
               "addresses": [{"address": "10.80.0.5/24", "gateway": "10.80.0.1"},
                             {"address": "fd00::5/64"}],
               "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}],
               "dns": {"nameservers": ["10.80.0.53"], "domain": "example.com"}})
    }

    #[test]
    fn add_1_0_0() {
        let out = run("ADD", "", &conf("1.0.0", ipam()));
        assert_eq!(
            ok_json(&out),
            json!({"cniVersion": "1.0.0",
                   "ips": [{"address": "10.80.0.5/24", "gateway": "10.80.0.1"}, {"address": "fd00::5/64"}],
                   "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}],
                   "dns": {"nameservers": ["10.80.0.53"], "domain": "example.com"}})
        );
    }

    #[test]
    fn add_0_4_0_and_0_2_0() {
        let out = run("ADD", "", &conf("0.4.0", ipam()));
        assert_eq!(
            ok_json(&out)["ips"],
            json!([{"version": "4", "address": "10.80.0.5/24", "gateway": "10.80.0.1"},
                   {"version": "6", "address": "fd00::5/64"}])
        );
        let out = run("ADD", "", &conf("0.2.0", ipam()));
        assert_eq!(
            ok_json(&out),
            json!({"cniVersion": "0.2.0",
                   "ip4": {"ip": "10.80.0.5/24", "gateway": "10.80.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
                   "ip6": {"ip": "fd00::5/64", "routes": [{"dst": "::/0", "gw": "fd00::1"}]},
                   "dns": {"nameservers": ["10.80.0.53"], "domain": "example.com"}})
        );
    }

    #[test]
    fn add_without_addresses() {
        let out = run("ADD", "", &conf("0.4.0", json!({"type": "static"})));
        assert_eq!(ok_json(&out), json!({"cniVersion": "0.4.0", "dns": {}}));
        // The SDK's conversion refuses a 0.2.0 result without addresses
        // (the reference: `cannot convert: no valid IP addresses`).
        let out = run("ADD", "", &conf("0.2.0", json!({"type": "static"})));
        let (code, msg) = err_msg(&out);
        assert_eq!(code, 999);
        assert!(msg.ends_with("no valid IP addresses"), "{msg}");
    }

    #[test]
    fn add_errors() {
        let out = run(
            "ADD",
            "",
            &json!({"cniVersion": "1.0.0", "name": "n", "type": "static"}),
        );
        assert_eq!(
            err_msg(&out),
            (999, "IPAM config missing 'ipam' key".to_string())
        );
        let out = run("ADD", "IP=10.81.0.5", &conf("1.0.0", json!({})));
        assert_eq!(
            err_msg(&out).1,
            "the 'ip' field is expected to be in CIDR notation, got: '10.81.0.5'"
        );
        let two = json!({"addresses": [{"address": "10.80.0.5/24"}, {"address": "10.81.0.5/24"}]});
        let out = run("ADD", "", &conf("0.2.0", two));
        assert_eq!(
            err_msg(&out).1,
            "CNI version 0.2.0 does not support more than 1 address per family"
        );
    }

    #[test]
    fn del_always_succeeds() {
        let out = run(
            "DEL",
            "",
            &json!({"cniVersion": "1.0.0", "name": "n", "type": "static"}),
        );
        assert_eq!(
            out,
            Outcome {
                stdout: String::new(),
                code: 0
            }
        );
        let out = run(
            "DEL",
            "FOO=bar",
            &conf("1.0.0", json!({"addresses": [{"address": "bad"}]})),
        );
        assert_eq!(out.code, 0);
        // CNI_ARGS that are no pairs (the reference's skel does not read
        // them; its DEL reads nothing), and sections of the wrong type.
        for args in [";", "IP", "IP=1=2"] {
            let out = run("DEL", args, &conf("1.0.0", ipam()));
            assert_eq!(out.code, 0, "{args:?}: {}", out.stdout);
            assert_ne!(run("ADD", args, &conf("1.0.0", ipam())).code, 0, "{args:?}");
        }
        let mut c = conf("1.0.0", json!("static"));
        c["runtimeConfig"] = json!({"ips": "10.1.0.5/24"});
        c["args"] = json!([]);
        assert_eq!(run("DEL", "", &c).code, 0);
        assert_ne!(run("ADD", "", &c).code, 0);
    }

    #[test]
    fn gc_and_status_succeed() {
        for cmd in ["GC", "STATUS"] {
            let out = run(cmd, "", &conf("1.1.0", json!({})));
            assert_eq!(out.code, 0, "{cmd}: {}", out.stdout);
        }
    }

    fn with_prev(mut c: Value, prev: Value) -> Value {
        c["prevResult"] = prev;
        c
    }

    #[test]
    fn check() {
        let c = conf("1.0.0", ipam());
        assert_eq!(
            err_msg(&run("CHECK", "", &c)),
            (999, "Required prevResult missing".to_string())
        );
        // Matching addresses (prefix ignored), one missing: fine.
        let prev = json!({"cniVersion": "1.0.0",
                          "ips": [{"address": "10.80.0.5/16", "gateway": "10.80.0.1"}]});
        assert_eq!(run("CHECK", "", &with_prev(c.clone(), prev)).code, 0);
        // No gateway configured: any gateway matches.
        let prev = json!({"cniVersion": "1.0.0",
                          "ips": [{"address": "fd00::5/64", "gateway": "fd00::99"}]});
        assert_eq!(run("CHECK", "", &with_prev(c.clone(), prev)).code, 0);
        // A different (or missing) gateway fails.
        for gw in [json!("10.80.0.2"), Value::Null] {
            let mut ip = json!({"address": "10.80.0.5/24"});
            if !gw.is_null() {
                ip["gateway"] = gw;
            }
            let prev = json!({"cniVersion": "1.0.0", "ips": [ip]});
            assert_eq!(
                err_msg(&run("CHECK", "", &with_prev(c.clone(), prev))),
                (
                    999,
                    "static: Failed to match addr 10.80.0.5 on interface eth0".to_string()
                )
            );
        }
        // Only the first address with the same IP counts.
        let prev = json!({"cniVersion": "1.0.0",
                          "ips": [{"address": "10.80.0.5/24", "gateway": "10.80.0.1"},
                                  {"address": "10.80.0.5/24", "gateway": "10.80.0.9"}]});
        assert_eq!(run("CHECK", "", &with_prev(c.clone(), prev)).code, 0);
        // The config is validated first.
        let bad = with_prev(
            conf("1.0.0", json!({"addresses": [{"address": "x"}]})),
            json!({}),
        );
        assert_eq!(
            err_msg(&run("CHECK", "", &bad)).1,
            "the 'address' field is expected to be in CIDR notation, got: 'x'"
        );
    }
}

//! The CNI `host-local` IPAM plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins 1.1.1,
//! `plugins/ipam/host-local`): addresses are allocated from range sets,
//! round-robin, one per set, and recorded in the node's reference on-disk
//! layout (`<dataDir>/<network>/<address>`), kept by the host's
//! `ipam-store` capability, so native and wasm host-local can share a node.
//!
//! - [`config`]: the configuration and its validation;
//! - [`range`]: ranges and range sets;
//! - [`allocator`]: allocation, rollback and GC over a [`store::Store`];
//! - [`store`]: the store trait and the host's implementation.
//!
//! Where this deliberately differs from the reference:
//! - requested addresses are matched to range sets in the order given (the
//!   reference iterates a Go map, in random order);
//! - a failed ADD releases only what it reserved (the reference releases
//!   all of the attachment's addresses, even those of an earlier ADD);
//! - the store stays locked for the whole ADD (the reference locks per
//!   range set);
//! - `resolvConf` cannot be read (no file access): it is an error on ADD,
//!   and `ipam.dns` gives the result's DNS instead;
//! - GC and STATUS (spec 1.1) are implemented;
//! - DEL and GC read only the data directory ([`config::reservations`]):
//!   a config ADD refuses (bad ranges, `CNI_ARGS`, requested addresses)
//!   still has its attachment's addresses released, and a data directory
//!   the host refuses (outside the policy's `ipam-roots`) holds nothing to
//!   release (the reference's DEL fails on the former, and would create
//!   the latter).

mod allocator;
mod config;
mod range;
mod store;

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::skel::{self, Invocation, Plugin};

use crate::config::{IpamConfig, Reservations};
use crate::store::{HostStore, Store};

/// The configuration of an invocation.
fn load(inv: &Invocation) -> Result<IpamConfig, Error> {
    config::load(&inv.conf, &inv.env.args, inv.version())
}

/// ADD: one address per range set (see [`allocator::allocate`]), the
/// configured routes and DNS. `open` opens the store under a data dir.
fn add<S: Store>(
    inv: &Invocation,
    open: impl FnOnce(Option<&str>) -> Result<S, Error>,
) -> Result<CniResult, Error> {
    let conf = load(inv)?;
    let dns = conf.result_dns()?;
    // One lock for the whole ADD: the sets are allocated atomically.
    let mut store = open(conf.data_dir.as_deref())?;
    let ips = allocator::allocate(
        &mut store,
        &conf.range_sets,
        &conf.requested,
        &inv.env.container_id,
    )?;
    Ok(CniResult {
        interfaces: Vec::new(),
        ips,
        routes: conf.routes,
        dns,
    })
}

/// DEL: releases every address of this attachment (also those of legacy
/// reservations naming only its container ID); nothing held is fine.
/// Reads only where the reservations are ([`config::reservations`]);
/// `open` gives `None` for a directory the host refuses, which holds
/// nothing to release.
fn del<S: Store>(
    inv: &Invocation,
    open: impl FnOnce(Option<&str>) -> Result<Option<S>, Error>,
) -> Result<(), Error> {
    let Reservations::In(dir) = config::reservations(&inv.conf)? else {
        return Ok(());
    };
    match open(dir.as_deref())? {
        Some(mut store) => store.release_owned(),
        None => Ok(()),
    }
}

/// CHECK: this attachment holds at least one address (which ones is not
/// checked, as in the reference).
fn check<S: Store>(
    inv: &Invocation,
    open: impl FnOnce(Option<&str>) -> Result<S, Error>,
) -> Result<(), Error> {
    let conf = load(inv)?;
    if open(conf.data_dir.as_deref())?.owned()?.is_empty() {
        return Err(Error::internal(format!(
            "host-local: Failed to find address added by container {}",
            inv.env.container_id
        )));
    }
    Ok(())
}

/// GC: releases the reservations of attachments not in
/// `cni.dev/valid-attachments`. Without that list there is nothing to go
/// by, and nothing is released. Reads the config as DEL does.
fn gc<S: Store>(
    inv: &Invocation,
    open: impl FnOnce(Option<&str>) -> Result<Option<S>, Error>,
) -> Result<(), Error> {
    let Reservations::In(dir) = config::reservations(&inv.conf)? else {
        return Ok(());
    };
    let Some(valid) = inv.conf.valid_attachments()? else {
        return Ok(());
    };
    match open(dir.as_deref())? {
        Some(mut store) => allocator::release_stale(&mut store, &valid),
        None => Ok(()),
    }
}

/// STATUS: ready when the config is valid, its store can be opened (the
/// data directory is granted and usable) and every range set has an
/// address left; otherwise code 50 (not available: it cannot serve ADD),
/// as the spec asks of a plugin whose resources (IP addresses) are
/// exhausted.
fn status<S: Store>(
    inv: &Invocation,
    open: impl FnOnce(Option<&str>) -> Result<S, Error>,
) -> Result<(), Error> {
    let conf = load(inv)?;
    let not_ready = |e: Error| Error::not_ready(e.msg).with_details(e.details);
    let store = open(conf.data_dir.as_deref()).map_err(not_ready)?;
    let reserved: Vec<_> = store
        .list()
        .map_err(not_ready)?
        .into_iter()
        .map(|(ip, _)| ip)
        .collect();
    match conf
        .range_sets
        .iter()
        .find(|set| allocator::exhausted(set, &reserved))
    {
        Some(set) => Err(Error::not_ready(format!(
            "no IP addresses available in range set: {set}"
        ))),
        None => Ok(()),
    }
}

struct HostLocal;

impl Plugin for HostLocal {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        add(inv, HostStore::open)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        check(inv, HostStore::open)
    }

    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        del(inv, HostStore::open_existing)
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        status(inv, HostStore::open)
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        gc(inv, HostStore::open_existing)
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `host-local`).
pub fn main() -> ! {
    skel::run(HostLocal, "CNI host-local plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{owner, MemStore};
    use guest_sdk::cni::{CniArgs, Command, Env};
    use serde_json::json;

    fn inv(
        command: Command,
        id: &str,
        ifname: &str,
        args: &str,
        conf: serde_json::Value,
    ) -> Invocation {
        let stdin = conf.to_string().into_bytes();
        Invocation {
            env: Env {
                command,
                container_id: id.into(),
                netns: "/run/netns/x".into(),
                ifname: ifname.into(),
                // As the SDK reads them: never refused (host-local reads
                // them as the reference's `types.LoadArgs` does).
                args: CniArgs::parse_lenient(args),
                path: "/opt/cni/bin".into(),
            },
            conf: guest_sdk::skel::parse_conf(command, &stdin).unwrap(),
            stdin,
        }
    }

    /// An opener over `mem` acting for the invocation's attachment, which
    /// records the data dir it was given.
    fn opener<'a>(
        mem: &'a mut MemStore,
        inv: &Invocation,
        seen: &'a mut Option<Option<String>>,
    ) -> impl FnOnce(Option<&str>) -> Result<&'a mut MemStore, Error> {
        mem.me = Some(owner(&inv.env.container_id, &inv.env.ifname));
        move |dir| {
            *seen = Some(dir.map(str::to_owned));
            Ok(mem)
        }
    }

    /// An opener for DEL and GC, which may find no store (`None`).
    fn some<S>(
        open: impl FnOnce(Option<&str>) -> Result<S, Error>,
    ) -> impl FnOnce(Option<&str>) -> Result<Option<S>, Error> {
        move |dir| open(dir).map(Some)
    }

    fn run_add(mem: &mut MemStore, inv: &Invocation) -> Result<String, Error> {
        let mut seen = None;
        add(inv, opener(mem, inv, &mut seen)).and_then(|r| r.to_json_string(inv.version()))
    }

    fn conf(version: &str, ipam: serde_json::Value) -> serde_json::Value {
        json!({"cniVersion": version, "name": "net1", "type": "host-local", "ipam": ipam})
    }

    #[test]
    fn add_result_1_0_0() {
        // Spec §2.11, with ipam.dns in place of resolvConf.
        let c = conf(
            "1.0.0",
            json!({"type": "host-local",
                   "ranges": [[{"subnet": "10.30.0.0/24"}], [{"subnet": "fd00:30::/64"}]],
                   "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00:30::99"}],
                   "dns": {"nameservers": ["1.1.1.1", "8.8.8.8"], "domain": "example.com"}}),
        );
        let mut mem = MemStore::default();
        let out = run_add(&mut mem, &inv(Command::Add, "c1", "eth0", "", c)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!({"cniVersion": "1.0.0",
                   "ips": [{"address": "10.30.0.2/24", "gateway": "10.30.0.1"},
                           {"address": "fd00:30::2/64", "gateway": "fd00:30::1"}],
                   "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00:30::99"}],
                   "dns": {"nameservers": ["1.1.1.1", "8.8.8.8"], "domain": "example.com"}})
        );
    }

    #[test]
    fn add_result_0_3_1_and_0_2_0() {
        let ipam = json!({"subnet": "10.30.0.0/24", "routes": [{"dst": "0.0.0.0/0"}]});
        let mut mem = MemStore::default();
        let out = run_add(
            &mut mem,
            &inv(Command::Add, "c1", "eth0", "", conf("0.3.1", ipam.clone())),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!({"cniVersion": "0.3.1",
                   "ips": [{"version": "4", "address": "10.30.0.2/24", "gateway": "10.30.0.1"}],
                   "routes": [{"dst": "0.0.0.0/0"}], "dns": {}})
        );
        let out = run_add(
            &mut mem,
            &inv(Command::Add, "c2", "eth0", "", conf("0.2.0", ipam)),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!({"cniVersion": "0.2.0",
                   "ip4": {"ip": "10.30.0.3/24", "gateway": "10.30.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
                   "dns": {}})
        );
    }

    #[test]
    fn add_passes_data_dir_and_refuses_resolv_conf() {
        let mut mem = MemStore::default();
        let mut seen = None;
        let i = inv(
            Command::Add,
            "c1",
            "eth0",
            "",
            conf(
                "1.0.0",
                json!({"subnet": "10.1.0.0/24", "dataDir": "/run/x"}),
            ),
        );
        add(&i, opener(&mut mem, &i, &mut seen)).unwrap();
        assert_eq!(seen, Some(Some("/run/x".to_string())));

        let i = inv(
            Command::Add,
            "c1",
            "eth0",
            "",
            conf(
                "1.0.0",
                json!({"subnet": "10.1.0.0/24", "resolvConf": "/etc/resolv.conf"}),
            ),
        );
        let mut seen = None;
        let e = add(&i, opener(&mut mem, &i, &mut seen)).unwrap_err();
        assert_eq!(e.code, 2);
        // Refused before the store is touched.
        assert_eq!(seen, None);
        // DEL of such a config still works.
        let i = inv(
            Command::Del,
            "c1",
            "eth0",
            "",
            conf(
                "1.0.0",
                json!({"subnet": "10.1.0.0/24", "resolvConf": "/etc/resolv.conf"}),
            ),
        );
        del(&i, some(opener(&mut mem, &i, &mut None))).unwrap();
        assert!(mem.held.is_empty());
    }

    #[test]
    fn add_with_requested_ip_from_cni_args() {
        let mut mem = MemStore::default();
        let i = inv(
            Command::Add,
            "c1",
            "eth0",
            "IP=10.1.0.77",
            conf("1.0.0", json!({"subnet": "10.1.0.0/24"})),
        );
        let out = run_add(&mut mem, &i).unwrap();
        assert!(out.contains("\"10.1.0.77/24\""), "{out}");
        let i = inv(
            Command::Add,
            "c2",
            "eth0",
            "IP=10.9.0.1",
            conf("1.0.0", json!({"subnet": "10.1.0.0/24"})),
        );
        assert_eq!(
            run_add(&mut mem, &i).unwrap_err().msg,
            "failed to allocate all requested IPs: 10.9.0.1"
        );
    }

    #[test]
    fn del_and_check() {
        let c = conf("1.0.0", json!({"subnet": "10.1.0.0/24"}));
        let mut mem = MemStore::default();
        mem.hold("10.1.0.50", owner("other", "eth0"));
        let chk = inv(Command::Check, "c1", "eth0", "", c.clone());
        assert_eq!(
            check(&chk, opener(&mut mem, &chk, &mut None))
                .unwrap_err()
                .msg,
            "host-local: Failed to find address added by container c1"
        );
        run_add(&mut mem, &inv(Command::Add, "c1", "eth0", "", c.clone())).unwrap();
        check(&chk, opener(&mut mem, &chk, &mut None)).unwrap();
        let d = inv(Command::Del, "c1", "eth0", "", c.clone());
        del(&d, some(opener(&mut mem, &d, &mut None))).unwrap();
        assert_eq!(mem.held_ips(), ["10.1.0.50"]);
        // Nothing held: DEL still succeeds.
        del(&d, some(opener(&mut mem, &d, &mut None))).unwrap();
        // A legacy reservation (container ID only) satisfies CHECK.
        mem.hold("10.1.0.60", owner("c1", ""));
        check(&chk, opener(&mut mem, &chk, &mut None)).unwrap();
        // A config without an `ipam` section fails DEL, as the
        // reference's (no ADD of it can have reserved anything).
        let bad = inv(
            Command::Del,
            "c1",
            "eth0",
            "",
            json!({"cniVersion": "1.0.0", "name": "n", "type": "host-local"}),
        );
        assert_eq!(
            del(&bad, some(opener(&mut mem, &bad, &mut None)))
                .unwrap_err()
                .msg,
            "IPAM config missing 'ipam' key"
        );
    }

    #[test]
    fn del_releases_the_addresses_of_configs_add_refuses() {
        let ok = json!({"subnet": "10.1.0.0/24", "dataDir": "/run/x"});
        for (ipam, args, extra) in [
            // A range ADD refuses, overlapping sets, no range at all.
            (
                json!({"ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "10.2.0.9"}]]}),
                "",
                json!({}),
            ),
            (
                json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/16"}]]}),
                "",
                json!({}),
            ),
            (
                json!({"subnet": "foo", "routes": [{"dst": "x"}]}),
                "",
                json!({}),
            ),
            (json!({}), "", json!({})),
            // Requested addresses ADD cannot read, in every place.
            (ok.clone(), "IP=zz", json!({})),
            (ok.clone(), "FOO=bar", json!({})),
            (ok.clone(), ";", json!({})),
            (
                ok.clone(),
                "",
                json!({"runtimeConfig": {"ips": ["zz"], "ipRanges": 5}}),
            ),
            (ok.clone(), "", json!({"args": {"cni": {"ips": [""]}}})),
            (ok.clone(), "", json!({"args": "x"})),
        ] {
            let mut c = conf("1.0.0", ipam.clone());
            c["ipam"]["type"] = json!("host-local");
            for (k, v) in extra.as_object().unwrap() {
                c[k] = v.clone();
            }
            let what = format!("{ipam} {args:?} {extra}");
            let mut mem = MemStore::default();
            mem.hold("10.1.0.7", owner("c1", "eth0"));
            mem.hold("10.1.0.8", owner("c2", "eth0"));
            // ADD refuses it: the SDK (the config's sections), or
            // host-local's own checks (CNI_ARGS among them).
            let stdin = c.to_string().into_bytes();
            let refused = match guest_sdk::skel::parse_conf(Command::Add, &stdin) {
                Ok(_) => load(&inv(Command::Add, "c1", "eth0", args, c.clone())).is_err(),
                Err(_) => true,
            };
            assert!(refused, "{what}: ADD accepts it");
            let d = inv(Command::Del, "c1", "eth0", args, c);
            let mut seen = None;
            del(&d, some(opener(&mut mem, &d, &mut seen)))
                .unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(mem.held_ips(), ["10.1.0.8"], "{what}");
            let want = ipam["dataDir"].as_str().map(str::to_owned);
            assert_eq!(seen, Some(want), "{what}");
        }
    }

    #[test]
    fn del_finds_nothing_where_no_add_reserved() {
        let mut mem = MemStore::default();
        mem.hold("10.1.0.7", owner("c1", "eth0"));
        // A data dir that is no string: nothing opened, nothing released.
        let d = inv(
            Command::Del,
            "c1",
            "eth0",
            "",
            conf("1.0.0", json!({"subnet": "10.1.0.0/24", "dataDir": 5})),
        );
        let mut seen = None;
        del(&d, some(opener(&mut mem, &d, &mut seen))).unwrap();
        assert_eq!(seen, None);
        assert_eq!(mem.held_ips(), ["10.1.0.7"]);
        // A data dir the host refuses (outside the policy's roots).
        let d = inv(
            Command::Del,
            "c1",
            "eth0",
            "",
            conf(
                "1.0.0",
                json!({"subnet": "10.1.0.0/24", "dataDir": "/elsewhere"}),
            ),
        );
        del(&d, |_| -> Result<Option<MemStore>, Error> { Ok(None) }).unwrap();
        let g = inv(
            Command::Gc,
            "",
            "",
            "",
            json!({"cniVersion": "1.1.0", "name": "net1", "type": "host-local",
                   "ipam": {"dataDir": "/elsewhere"},
                   "cni.dev/valid-attachments": []}),
        );
        gc(&g, |_| -> Result<Option<MemStore>, Error> { Ok(None) }).unwrap();
        // Other failures of the store still fail DEL.
        let e = del(&d, |_| -> Result<Option<MemStore>, Error> {
            Err(Error::internal(
                "ipam-store.open IPAM state in /x: not a directory",
            ))
        })
        .unwrap_err();
        assert_eq!(e.msg, "ipam-store.open IPAM state in /x: not a directory");
    }

    #[test]
    fn runtime_ranges_with_go_field_names() {
        // containerd marshals its IPRanges without json tags.
        let mut c = conf("1.0.0", json!({"type": "host-local"}));
        c["runtimeConfig"] =
            json!({"ipRanges": [[{"Subnet": "10.9.0.0/24", "RangeStart": "10.9.0.50"}]]});
        let mut mem = MemStore::default();
        let out = run_add(&mut mem, &inv(Command::Add, "c1", "eth0", "", c)).unwrap();
        assert!(out.contains("\"10.9.0.50/24\""), "{out}");
    }

    #[test]
    fn gc_uses_valid_attachments() {
        let mut mem = MemStore::default();
        mem.hold("10.1.0.2", owner("keep", "eth0"));
        mem.hold("10.1.0.3", owner("gone", "eth0"));
        let mut c = conf("1.1.0", json!({"subnet": "10.1.0.0/24"}));
        // Without the list nothing is released.
        let g = inv(Command::Gc, "", "", "", c.clone());
        gc(&g, some(opener(&mut mem, &g, &mut None))).unwrap();
        assert_eq!(mem.held_ips(), ["10.1.0.2", "10.1.0.3"]);
        c["cni.dev/valid-attachments"] = json!([{"containerID": "keep", "ifname": "eth0"}]);
        let g = inv(Command::Gc, "", "", "", c);
        gc(&g, some(opener(&mut mem, &g, &mut None))).unwrap();
        assert_eq!(mem.held_ips(), ["10.1.0.2"]);
    }

    #[test]
    fn status_reports_not_ready() {
        let c = conf("1.1.0", json!({"subnet": "10.1.0.0/24"}));
        let s = inv(Command::Status, "", "", "", c);
        let mut mem = MemStore::default();
        status(&s, opener(&mut mem, &s, &mut None)).unwrap();
        let e = status(&s, |_| -> Result<MemStore, Error> {
            Err(Error::internal(
                "ipam-store.open IPAM state in /x: access denied by wasmcni policy",
            ))
        })
        .unwrap_err();
        assert_eq!(e.code, 50);
        assert_eq!(
            e.msg,
            "ipam-store.open IPAM state in /x: access denied by wasmcni policy"
        );
    }

    /// The spec after 1.1.0: a plugin whose addresses are exhausted
    /// answers STATUS with 50; one address left is ready.
    #[test]
    fn status_reports_exhausted_ranges() {
        // .1 (and fd00::1) is the gateway: two addresses per set, as in
        // the message of an ADD that finds none.
        let c = conf(
            "1.1.0",
            json!({"type": "host-local",
                   "ranges": [[{"subnet": "10.1.0.0/29", "rangeEnd": "10.1.0.3"}],
                              [{"subnet": "fd00::/120", "rangeEnd": "fd00::3"}]]}),
        );
        let s = inv(Command::Status, "", "", "", c.clone());
        let mut mem = MemStore::default();
        status(&s, opener(&mut mem, &s, &mut None)).unwrap();
        for id in ["a", "b"] {
            let a = inv(Command::Add, id, "eth0", "", c.clone());
            add(&a, opener(&mut mem, &a, &mut None)).unwrap();
        }
        assert_eq!(
            mem.held_ips(),
            ["10.1.0.2", "10.1.0.3", "fd00::2", "fd00::3"]
        );
        let e = status(&s, opener(&mut mem, &s, &mut None)).unwrap_err();
        assert_eq!(e.code, 50, "{e:?}");
        assert_eq!(
            e.msg,
            "no IP addresses available in range set: 10.1.0.1-10.1.0.3"
        );
        let d = inv(Command::Del, "a", "eth0", "", c.clone());
        del(&d, some(opener(&mut mem, &d, &mut None))).unwrap();
        status(&s, opener(&mut mem, &s, &mut None)).unwrap();
    }
}

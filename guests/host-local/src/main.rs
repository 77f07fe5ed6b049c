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
//! - JSON keys match exactly (Go also accepts other cases).

mod allocator;
mod config;
mod range;
mod store;

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::skel::{self, Invocation, Plugin};

use crate::config::IpamConfig;
use crate::store::{HostStore, Store};

/// The configuration of an invocation.
fn load(inv: &Invocation) -> Result<IpamConfig, Error> {
    config::load(&inv.stdin, &inv.env.args, inv.version())
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
/// reservations naming only its container ID); nothing held is fine. An
/// invalid config fails, as in the reference.
fn del<S: Store>(
    inv: &Invocation,
    open: impl FnOnce(Option<&str>) -> Result<S, Error>,
) -> Result<(), Error> {
    let conf = load(inv)?;
    open(conf.data_dir.as_deref())?.release_owned()
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
/// by, and nothing is released.
fn gc<S: Store>(
    inv: &Invocation,
    open: impl FnOnce(Option<&str>) -> Result<S, Error>,
) -> Result<(), Error> {
    let conf = load(inv)?;
    let Some(valid) = inv.conf.valid_attachments()? else {
        return Ok(());
    };
    let mut store = open(conf.data_dir.as_deref())?;
    allocator::release_stale(&mut store, &valid)
}

/// STATUS: ready when the config is valid and its store can be opened
/// (the data directory is granted and usable); a store that cannot be
/// opened is code 50 (not ready).
fn status<S: Store>(
    inv: &Invocation,
    open: impl FnOnce(Option<&str>) -> Result<S, Error>,
) -> Result<(), Error> {
    let conf = load(inv)?;
    open(conf.data_dir.as_deref())
        .map(drop)
        .map_err(|e| Error::not_ready(e.msg).with_details(e.details))
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
        del(inv, HostStore::open)
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        status(inv, HostStore::open)
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        gc(inv, HostStore::open)
    }
}

fn main() {
    skel::run(HostLocal, "CNI host-local plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{owner, MemStore};
    use guest_sdk::cni::{CniArgs, Command, Env, NetConf};
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
                args: CniArgs::parse(args).unwrap(),
                path: "/opt/cni/bin".into(),
            },
            conf: NetConf::parse(&stdin).unwrap(),
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
        del(&i, opener(&mut mem, &i, &mut None)).unwrap();
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
        del(&d, opener(&mut mem, &d, &mut None)).unwrap();
        assert_eq!(mem.held_ips(), ["10.1.0.50"]);
        // Nothing held: DEL still succeeds.
        del(&d, opener(&mut mem, &d, &mut None)).unwrap();
        // A legacy reservation (container ID only) satisfies CHECK.
        mem.hold("10.1.0.60", owner("c1", ""));
        check(&chk, opener(&mut mem, &chk, &mut None)).unwrap();
        // An invalid config fails DEL, as in the reference.
        let bad = inv(
            Command::Del,
            "c1",
            "eth0",
            "",
            json!({"cniVersion": "1.0.0", "name": "n", "type": "host-local"}),
        );
        assert_eq!(
            del(&bad, opener(&mut mem, &bad, &mut None))
                .unwrap_err()
                .msg,
            "IPAM config missing 'ipam' key"
        );
    }

    #[test]
    fn gc_uses_valid_attachments() {
        let mut mem = MemStore::default();
        mem.hold("10.1.0.2", owner("keep", "eth0"));
        mem.hold("10.1.0.3", owner("gone", "eth0"));
        let mut c = conf("1.1.0", json!({"subnet": "10.1.0.0/24"}));
        // Without the list nothing is released.
        let g = inv(Command::Gc, "", "", "", c.clone());
        gc(&g, opener(&mut mem, &g, &mut None)).unwrap();
        assert_eq!(mem.held_ips(), ["10.1.0.2", "10.1.0.3"]);
        c["cni.dev/valid-attachments"] = json!([{"containerID": "keep", "ifname": "eth0"}]);
        let g = inv(Command::Gc, "", "", "", c);
        gc(&g, opener(&mut mem, &g, &mut None)).unwrap();
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
}

//! The CNI `tuning` meta plugin for wasmcni.
//!
//! Behaves like the reference (containernetworking/plugins
//! `plugins/meta/tuning`): a chained plugin that sets network sysctls of
//! the container's namespace (`sysctl`, `IFNAME` in a key standing for
//! `CNI_IFNAME`) and the container interface's `mac`, `promisc`, `mtu`,
//! `allmulti` and `txQLen` (upstream's, newer than Debian's 1.1.1), with
//! `runtimeConfig.mac`, `MAC=` in `CNI_ARGS` and `args.cni.*` overriding
//! the config as upstream does. It passes its prevResult on, with the
//! interface's new MAC. DEL restores the interface values ADD changed
//! (MAC, MTU, promiscuity, all-multicast, queue length), as upstream does;
//! sysctls go with the namespace.
//!
//! Unlike the reference, the values to restore are not a file the plugin
//! writes (`dataDir`, accepted and unused) but its `attachment-state`
//! record, which the host keeps per attachment, undoes with a failed ADD,
//! and removes after DEL and in GC; and a failed ADD leaves nothing
//! changed (wasmcni's journal restores the sysctls and the interface).
//! Sysctls are confined by the policy's `container.sysctls` patterns (the
//! counterpart of the reference's `/etc/cni/tuning/allowlist.conf`).

use std::collections::BTreeMap;

use guest_sdk::cni::{CniResult, Error};
use guest_sdk::net::{LinkInfo, Netns};
use guest_sdk::skel::{self, Invocation, Plugin};
use guest_sdk::state;
use plugin_common::{compat, iface, mac};
use serde::{Deserialize, Serialize};

/// The record key of the values to restore on DEL.
const BACKUP: &str = "restore";

/// The config keys tuning reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conf {
    #[serde(default)]
    sysctl: BTreeMap<String, String>,
    #[serde(default)]
    mac: String,
    #[serde(default)]
    promisc: bool,
    #[serde(default)]
    mtu: u32,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(default, rename = "txQLen")]
    txqlen: Option<u32>,
    /// The reference's backup directory; wasmcni keeps the backup itself.
    #[serde(default, rename = "dataDir")]
    _data_dir: Option<String>,
    #[serde(default)]
    runtime_config: RuntimeConfig,
    #[serde(default)]
    args: Option<Args>,
}

#[derive(Debug, Default, Deserialize)]
struct RuntimeConfig {
    #[serde(default)]
    mac: String,
}

#[derive(Debug, Default, Deserialize)]
struct Args {
    #[serde(default)]
    cni: Option<ArgsCni>,
}

/// `args.cni`: per-attachment overrides.
#[derive(Debug, Default, Deserialize)]
struct ArgsCni {
    sysctl: Option<BTreeMap<String, String>>,
    mac: Option<String>,
    promisc: Option<bool>,
    mtu: Option<u32>,
    allmulti: Option<bool>,
    #[serde(rename = "txQLen")]
    txqlen: Option<u32>,
}

/// The values ADD changed, as they were: what DEL restores.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Backup {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    promisc: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allmulti: Option<bool>,
    #[serde(default, rename = "txQLen", skip_serializing_if = "Option::is_none")]
    txqlen: Option<u32>,
}

/// The settings in force for this invocation, overrides applied in the
/// reference's order: the config, `MAC=` in `CNI_ARGS`, `runtimeConfig.mac`,
/// then `args.cni`.
fn settings(inv: &Invocation) -> Result<Conf, Error> {
    let mut conf: Conf = inv.conf.plugin_config()?;
    if !inv.env.args.is_empty() {
        let mut arg = String::new();
        compat::load_args(&inv.env.args, &["MAC"], |_, v| {
            arg = v.to_owned();
            Ok(())
        })?;
        if !arg.is_empty() {
            conf.mac = arg;
        }
    }
    if !conf.runtime_config.mac.is_empty() {
        conf.mac = std::mem::take(&mut conf.runtime_config.mac);
    }
    if let Some(a) = conf.args.take().and_then(|a| a.cni) {
        if let Some(s) = a.sysctl {
            conf.sysctl.extend(s);
        }
        if let Some(m) = a.mac {
            conf.mac = m;
        }
        if let Some(p) = a.promisc {
            conf.promisc = p;
        }
        if let Some(m) = a.mtu {
            conf.mtu = m;
        }
        if a.allmulti.is_some() {
            conf.allmulti = a.allmulti;
        }
        if a.txqlen.is_some() {
            conf.txqlen = a.txqlen;
        }
    }
    Ok(conf)
}

/// The dotted key wasmcni's sysctl interface takes for a tuning key, and
/// the path the reference would write (for messages): `.` and `/` both
/// separate components, the first `IFNAME` stands for `ifname` (whose own
/// dots stay inside its component, written `/` in a dotted key). Keys
/// outside `net.` are refused with the reference's text.
fn sysctl_key(key: &str, ifname: &str) -> Result<(String, String), Error> {
    const DOT: char = '\u{1}';
    let path = key.replace('.', "/");
    let path = path.replacen("IFNAME", &ifname.replace('.', &DOT.to_string()), 1);
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let invalid = || {
        Error::internal(format!(
            "invalid net sysctl key: {:?}",
            path.replace(DOT, ".")
        ))
    };
    if parts.first() != Some(&"net")
        || parts.len() < 2
        || parts
            .iter()
            .any(|p| matches!(p.replace(DOT, ".").as_str(), "." | ".."))
    {
        return Err(invalid());
    }
    let dotted = parts
        .iter()
        .map(|p| p.replace(DOT, "/"))
        .collect::<Vec<_>>()
        .join(".");
    let file = format!("/proc/sys/{}", parts.join("/").replace(DOT, "."));
    Ok((dotted, file))
}

/// The container's link `CNI_IFNAME`, with the reference's text.
fn container_link(ns: &Netns, ifname: &str) -> Result<LinkInfo, Error> {
    ns.link(ifname)
        .map_err(|e| Error::internal(format!("failed to get {ifname:?}: {e}")))
}

struct Tuning;

impl Plugin for Tuning {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let conf = settings(inv)?;
        if inv.env.ifname.contains('/') {
            return Err(Error::internal(format!(
                "Interface name ({}) contains an invalid character /",
                inv.env.ifname
            )));
        }
        let mut prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("Required prevResult missing"))?;
        // Every key and the MAC are checked before anything changes.
        let keys = conf
            .sysctl
            .iter()
            .map(|(k, v)| Ok((sysctl_key(k, &inv.env.ifname)?.0, v.clone())))
            .collect::<Result<Vec<_>, Error>>()?;
        let new_mac = if conf.mac.is_empty() {
            None
        } else {
            Some(mac::parse(&conf.mac).map_err(|e| {
                Error::internal(format!("invalid args {} for MAC addr: {}", conf.mac, e.msg))
            })?)
        };
        let ns = iface::open_container(inv)?;
        // An empty value (`null` in the config, as Go stores it in a map)
        // writes nothing: the reference's zero-length write changes
        // nothing and succeeds.
        for (key, value) in keys.iter().filter(|(_, v)| !v.is_empty()) {
            ns.set_sysctl(key, value)?;
        }
        let ifname = &inv.env.ifname;
        let changes = new_mac.is_some()
            || conf.mtu != 0
            || conf.promisc
            || conf.allmulti.is_some()
            || conf.txqlen.is_some();
        if !changes {
            return Ok(prev);
        }
        let link = container_link(&ns, ifname)?;
        let backup = Backup {
            mac: new_mac.as_ref().map(|_| mac::format(&link.mac)),
            promisc: conf.promisc.then_some(link.promiscuous),
            mtu: (conf.mtu != 0).then_some(link.mtu),
            allmulti: conf.allmulti.map(|_| link.allmulticast),
            txqlen: conf.txqlen.map(|_| link.txqlen),
        };
        let text = serde_json::to_string(&backup)
            .map_err(|e| Error::internal(format!("failed to encode the values to restore: {e}")))?;
        state::set(BACKUP, &text)?;
        if let Some(m) = &new_mac {
            ns.set_mac(link.index, m)?;
            let formatted = mac::format(m);
            for i in prev.interfaces.iter_mut().filter(|i| i.name == *ifname) {
                i.mac = formatted.clone();
            }
        }
        if conf.promisc {
            ns.set_promiscuous(link.index, true)?;
        }
        if conf.mtu != 0 {
            ns.set_mtu(link.index, conf.mtu)?;
        }
        if let Some(on) = conf.allmulti {
            ns.set_allmulticast(link.index, on)?;
        }
        if let Some(q) = conf.txqlen {
            ns.set_txqlen(link.index, q)?;
        }
        Ok(prev)
    }

    /// Restores what ADD changed; never fails for a namespace, link or
    /// record that is gone (the reference ignores every error of its
    /// DEL). Reads nothing of the config: what to restore is in the
    /// record, so a config ADD refuses (a `txQLen` or `mtu` out of range,
    /// bad `CNI_ARGS`) cannot stop it.
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        let Some(text) = state::get(BACKUP).ok().flatten() else {
            return Ok(());
        };
        let Ok(backup) = serde_json::from_str::<Backup>(&text) else {
            return Ok(());
        };
        if inv.env.netns.is_empty() {
            return Ok(());
        }
        let Ok(ns) = Netns::container() else {
            return Ok(());
        };
        let Ok(link) = ns.link(&inv.env.ifname) else {
            return Ok(());
        };
        let mut failed = Vec::new();
        if let Some(mtu) = backup.mtu {
            if let Err(e) = ns.set_mtu(link.index, mtu) {
                failed.push(format!("failed to restore MTU: {e}"));
            }
        }
        if let Some(m) = &backup.mac {
            let r = mac::parse(m).and_then(|m| ns.set_mac(link.index, &m).map_err(Error::from));
            if let Err(e) = r {
                failed.push(format!("failed to restore MAC address: {}", e.msg));
            }
        }
        if let Some(p) = backup.promisc {
            if let Err(e) = ns.set_promiscuous(link.index, p) {
                failed.push(format!("failed to restore promiscuous mode: {e}"));
            }
        }
        if let Some(a) = backup.allmulti {
            if let Err(e) = ns.set_allmulticast(link.index, a) {
                failed.push(format!("failed to restore all-multicast mode: {e}"));
            }
        }
        if let Some(q) = backup.txqlen {
            if let Err(e) = ns.set_txqlen(link.index, q) {
                failed.push(format!("failed to restore transmit queue length: {e}"));
            }
        }
        // The reference reports nothing of these (its DEL always
        // succeeds); they go to stderr, and the record stays for a retry.
        if !failed.is_empty() {
            eprintln!("tuning: {}", failed.join("; "));
            return Ok(());
        }
        let _ = state::remove(BACKUP);
        Ok(())
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let conf = settings(inv)?;
        inv.prev_result()?
            .ok_or_else(|| Error::internal("Required prevResult missing"))?;
        let ns = iface::open_container(inv)?;
        for (key, want) in &conf.sysctl {
            let (dotted, file) = sysctl_key(key, &inv.env.ifname)?;
            let have = ns.sysctl(&dotted)?;
            let have = have.trim_end_matches('\n');
            if have != want {
                return Err(Error::internal(format!(
                    "Error: Tuning configured value of {file} is {want}, current value is {have}"
                )));
            }
        }
        let ifname = &inv.env.ifname;
        let link = ns
            .link(ifname)
            .map_err(|_| Error::internal(format!("Cannot find container link {ifname}")))?;
        if !conf.mac.is_empty() {
            let have = mac::format(&link.mac);
            let want = mac::parse(&conf.mac)
                .map(|m| mac::format(&m))
                .unwrap_or_else(|_| conf.mac.clone());
            if want != have {
                return Err(Error::internal(format!(
                    "Error: Tuning configured Ethernet of {ifname} is {}, current value is {have}",
                    conf.mac
                )));
            }
        }
        if conf.promisc != link.promiscuous {
            return Err(Error::internal(format!(
                "Error: Tuning link {ifname} configured promisc is {}, current value is {}",
                conf.promisc,
                u8::from(link.promiscuous)
            )));
        }
        if conf.mtu != 0 && conf.mtu != link.mtu {
            return Err(Error::internal(format!(
                "Error: Tuning configured MTU of {ifname} is {}, current value is {}",
                conf.mtu, link.mtu
            )));
        }
        if let Some(want) = conf.allmulti {
            if want != link.allmulticast {
                return Err(Error::internal(format!(
                    "Error: Tuning configured all-multicast mode of {ifname} is {want}, current value is {}",
                    link.allmulticast
                )));
            }
        }
        if let Some(want) = conf.txqlen {
            if want != link.txqlen {
                return Err(Error::internal(format!(
                    "Error: Tuning configured Transmit Queue Length of {ifname} is {want}, current value is {}",
                    link.txqlen
                )));
            }
        }
        Ok(())
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `tuning`).
pub fn main() -> ! {
    skel::run(Tuning, "CNI tuning plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_keys_map_like_the_reference() {
        let k = |key: &str, ifname: &str| sysctl_key(key, ifname);
        assert_eq!(
            k("net.ipv4.conf.IFNAME.rp_filter", "eth0").unwrap(),
            (
                "net.ipv4.conf.eth0.rp_filter".to_owned(),
                "/proc/sys/net/ipv4/conf/eth0/rp_filter".to_owned()
            )
        );
        // An ifname with a dot stays one component.
        assert_eq!(
            k("net.ipv4.conf.IFNAME.rp_filter", "eth0.100").unwrap(),
            (
                "net.ipv4.conf.eth0/100.rp_filter".to_owned(),
                "/proc/sys/net/ipv4/conf/eth0.100/rp_filter".to_owned()
            )
        );
        assert_eq!(
            k("net/core/somaxconn", "eth0").unwrap().0,
            "net.core.somaxconn"
        );
        for bad in [
            "kernel.hostname",
            "net",
            "kernel/../net/x",
            "",
            "..kernel.x",
            "fs.file-max",
        ] {
            let e = k(bad, "eth0").unwrap_err();
            assert!(
                e.msg.starts_with("invalid net sysctl key"),
                "{bad}: {}",
                e.msg
            );
        }
    }

    /// The settings a config gives (no `CNI_ARGS`).
    fn settings_of(conf: serde_json::Value) -> Conf {
        let conf = guest_sdk::cni::NetConf::from_value(conf).expect("conf");
        let inv = Invocation {
            env: guest_sdk::cni::Env::from_lookup(|k| match k {
                "CNI_COMMAND" => Some("VERSION".into()),
                _ => None,
            })
            .expect("env"),
            conf,
            stdin: Vec::new(),
        };
        settings(&inv).expect("settings")
    }

    #[test]
    fn overrides_apply_in_the_reference_order() {
        let conf = serde_json::json!({
            "cniVersion": "1.0.0", "name": "n", "type": "tuning",
            "mac": "02:00:00:00:00:01", "mtu": 1400, "sysctl": {"net.core.somaxconn": "500"},
            "runtimeConfig": {"mac": "02:00:00:00:00:02"},
            "args": {"cni": {"mtu": 1300, "sysctl": {"net.ipv4.ip_forward": "1"}}}
        });
        let s = settings_of(conf);
        assert_eq!(s.mac, "02:00:00:00:00:02");
        assert_eq!(s.mtu, 1300);
        assert_eq!(s.sysctl.len(), 2);
    }

    /// Each `args.cni` key overrides its config key (upstream v1.9.1's
    /// `tuning.go`: mac, promisc, mtu, allmulti, txQLen, sysctl merged).
    #[test]
    fn args_cni_overrides_each_setting() {
        let conf = serde_json::json!({
            "cniVersion": "1.0.0", "name": "n", "type": "tuning",
            "mac": "02:00:00:00:00:01", "promisc": false, "allmulti": false, "txQLen": 100,
            "args": {"cni": {"mac": "02:00:00:00:00:03", "promisc": true, "allmulti": true,
                             "txQLen": 2000}}
        });
        let s = settings_of(conf);
        assert_eq!(s.mac, "02:00:00:00:00:03");
        assert!(s.promisc);
        assert_eq!(s.allmulti, Some(true));
        assert_eq!(s.txqlen, Some(2000));
    }

    #[test]
    fn del_reads_no_config() {
        use plugin_common::testing::{invocation, reach, Reached};
        use serde_json::json;
        for (extra, args) in [
            (json!({"txQLen": -1}), ""),
            (json!({"mtu": -1, "promisc": "yes"}), ""),
            (json!({"sysctl": {"net.core.somaxconn": 5}}), ""),
            (json!({"args": {"cni": {"mtu": "big"}}}), ""),
            (json!({}), "FOO=bar"),
            (json!({}), ";"),
        ] {
            let mut c = json!({"type": "tuning"});
            for (k, v) in extra.as_object().expect("object") {
                c[k] = v.clone();
            }
            let add = invocation(guest_sdk::cni::Command::Add, args, c.clone());
            assert!(settings(&add).is_err(), "{extra} {args:?}: ADD accepts it");
            let del = invocation(guest_sdk::cni::Command::Del, args, c);
            assert_eq!(
                reach(|| Tuning.del(&del)),
                Reached::HostCall("attachment-state.get".into()),
                "{extra} {args:?}"
            );
        }
    }

    #[test]
    fn a_backup_round_trips_and_names_only_what_changed() {
        let b = Backup {
            mtu: Some(1500),
            ..Backup::default()
        };
        let text = serde_json::to_string(&b).expect("json");
        assert_eq!(text, r#"{"mtu":1500}"#);
        assert_eq!(serde_json::from_str::<Backup>(&text).expect("back"), b);
    }
}

/// docs/reference-options.md's `tuning` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "tuning",
            &[
                ("", keys_of::<Conf>()),
                ("runtimeConfig.", keys_of::<RuntimeConfig>()),
                ("args.cni.", keys_of::<ArgsCni>()),
            ],
        );
    }
}

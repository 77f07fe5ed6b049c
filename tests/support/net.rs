//! A one-network sandbox for running standard plugins through the real
//! libcni (tests/libcni/) and an installed wasmcni bin dir, and reading
//! what they did.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::cni::{bin_dir, Call, Drive};
use super::Netns;

/// A node (the plugins' host namespace), a container, and a private
/// directory holding the IPAM data, libcni's cache and the policy file.
/// The policy names host-local only (its data root): `tap` and `dummy`
/// run under their default-policy entries.
pub struct Net {
    /// The node: the plugins' host namespace.
    pub node: Netns,
    /// The container.
    pub ctr: Netns,
    /// IPAM data, libcni's cache, the policy file.
    pub dir: tempfile::TempDir,
    /// wasmcni's settings for the run.
    pub env: Vec<(String, String)>,
}

impl Net {
    pub fn new(tag: &str) -> Net {
        let node = Netns::new(&format!("{tag}n"));
        node.ip(&["link", "set", "lo", "up"]);
        let ctr = Netns::new(&format!("{tag}c"));
        let dir = super::private_tempdir();
        let policy = dir.path().join("policy.json");
        std::fs::write(
            &policy,
            json!({"plugins": {"host-local": {"ipam-roots": [dir.path().join("data")]}}})
                .to_string(),
        )
        .expect("policy");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let env = vec![
            ("WASMCNI_POLICY".into(), policy.display().to_string()),
            (
                "WASMCNI_AUDIT".into(),
                dir.path().join("audit.jsonl").display().to_string(),
            ),
            (
                "WASMCNI_STATE_DIR".into(),
                dir.path().join("state").display().to_string(),
            ),
        ];
        Net {
            node,
            ctr,
            dir,
            env,
        }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Writes a one-plugin conflist; `"@data"` stands for the IPAM data dir.
    pub fn conflist(&self, version: &str, plugin: &Value) -> PathBuf {
        let text = json!({"cniVersion": version, "name": "devnet", "plugins": [plugin]})
            .to_string()
            .replace(
                "\"@data\"",
                &Value::from(self.data().display().to_string()).to_string(),
            );
        let p = self.dir.path().join("net.conflist");
        std::fs::write(&p, text).expect("conflist");
        p
    }

    pub fn call(
        &self,
        cmd: &str,
        conflist: &Path,
        netns: &Path,
        args: &str,
        capargs: &str,
    ) -> Drive {
        Call {
            node: &self.node,
            bin: bin_dir(),
            cmd,
            conflist,
            netns,
            cid: "ctr0",
            ifname: "eth0",
            cache: &self.dir.path().join("cache"),
            args,
            capargs,
            env: &self.env,
        }
        .run()
    }

    /// `ip -d -j link show eth0` in the container.
    pub fn eth0(&self) -> Value {
        let s = self.ctr.ip(&["-d", "-j", "link", "show", "eth0"]);
        serde_json::from_str::<Value>(&s).expect("ip -j")[0].clone()
    }

    pub fn has_eth0(&self) -> bool {
        self.ctr.ip(&["-j", "link", "show"]).contains("\"eth0\"")
    }

    /// The addresses of eth0 as `addr/len`, IPv4 only.
    pub fn eth0_v4(&self) -> Vec<String> {
        let s = self.ctr.ip(&["-4", "-j", "addr", "show", "eth0"]);
        let v: Value = serde_json::from_str(&s).expect("ip -j");
        v[0]["addr_info"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|i| format!("{}/{}", i["local"].as_str().unwrap(), i["prefixlen"]))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// IPv4 routes of the container's main table as `dst via gw dev`.
    pub fn routes_v4(&self) -> Vec<String> {
        let s = self.ctr.ip(&["-4", "-j", "route", "show", "table", "main"]);
        let v: Value = serde_json::from_str(&s).expect("ip -j");
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{} via {} dev {}",
                    r["dst"].as_str().unwrap(),
                    r["gateway"].as_str().unwrap_or("-"),
                    r["dev"].as_str().unwrap()
                )
            })
            .collect()
    }

    /// The IPAM reservations of the network (file names other than the
    /// lock and last-reserved records).
    pub fn reservations(&self) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(self.data().join("devnet"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    /// DEL succeeds, twice, and once more with the namespace gone.
    pub fn del_is_idempotent(&self, conflist: &Path, args: &str, capargs: &str) {
        for _ in 0..2 {
            let d = self.call("del", conflist, &self.ctr.path, args, capargs);
            assert_eq!(d.code, 0, "DEL: {d:?}");
            assert!(!self.has_eth0(), "eth0 left after DEL");
            assert!(self.reservations().is_empty(), "{:?}", self.reservations());
        }
        let gone = PathBuf::from(format!("/run/netns/wcni-gone-{}", std::process::id()));
        let d = self.call("del", conflist, &gone, args, capargs);
        assert_eq!(d.code, 0, "DEL with the namespace gone: {d:?}");
    }
}

//! A sandboxed node for capability tests: a "node" namespace wasmcni
//! treats as the host namespace (`ip netns exec`), with an uplink, a route
//! and other containers' links that must survive every test untouched, and
//! a container namespace beside it.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::{fixture, require_root, Invoke, Netns, Run, Running};

/// A node (acting as the host namespace) with its uplink, and a container.
pub struct World {
    /// The node: wasmcni's host namespace.
    pub node: Netns,
    /// The container.
    pub ctr: Netns,
    /// Policy files and the audit log (in target/, under directories only
    /// root can write, as wasmcni requires of a policy's path).
    pub dir: tempfile::TempDir,
}

impl World {
    pub fn new(tag: &str) -> World {
        require_root();
        let node = Netns::new(&format!("{tag}-n"));
        let ctr = Netns::new(&format!("{tag}-c"));
        // This kernel has no dummy links: veth pairs stand in.
        node.ip(&[
            "link", "add", "uplink", "type", "veth", "peer", "name", "uplinkp",
        ]);
        node.ip(&["link", "set", "uplink", "up"]);
        node.ip(&["addr", "add", "192.0.2.10/24", "dev", "uplink"]);
        node.ip(&[
            "route",
            "add",
            "198.51.100.0/24",
            "via",
            "192.0.2.1",
            "dev",
            "uplink",
        ]);
        node.ip(&[
            "link", "add", "mst0", "type", "veth", "peer", "name", "mst0p",
        ]);
        node.ip(&["link", "set", "lo", "up"]);
        // Another container's link, as wasmcni marks them.
        node.ip(&[
            "link", "add", "other0", "type", "veth", "peer", "name", "other0p",
        ]);
        node.ip(&[
            "link",
            "set",
            "other0",
            "alias",
            "wasmcni:another-container",
        ]);
        // A link the wide grant names by pattern, pre-existing and up.
        node.ip(&[
            "link",
            "add",
            "cnitestpre",
            "type",
            "veth",
            "peer",
            "name",
            "cnitestprep",
        ]);
        node.ip(&["link", "set", "cnitestpre", "up"]);
        node.ip(&["addr", "add", "10.77.0.1/24", "dev", "cnitestpre"]);
        // A veth whose name fits the `bridges` pattern: not a bridge.
        node.ip(&[
            "link",
            "add",
            "cnibrfake",
            "type",
            "veth",
            "peer",
            "name",
            "cnibrfakep",
        ]);
        let dir = super::private_tempdir();
        // Another attachment's reservation in the network's IPAM state.
        let net = dir.path().join("ipam").join("n");
        std::fs::create_dir_all(&net).expect("ipam dir");
        std::fs::write(net.join("10.80.0.5"), "other-ctr\r\neth0").expect("reservation");
        std::fs::write(net.join("lock"), "").expect("lock file");
        let world = World { node, ctr, dir };
        // The network's shared bridge, made by an earlier ADD (so it
        // carries the network's mark) with the gateway address on it.
        let run = world.run(
            "ADD",
            &policy_with(wide()),
            &json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [
                {"call": "link.create-bridge", "ns": "host", "name": "cnishared0"},
                {"call": "address.add", "ns": "host", "link": "cnishared0", "prefix": "10.70.0.1/24"},
            ]}),
            &[],
        );
        assert_eq!(run.code, 0, "setting up the shared bridge: {run:?}");
        let _ = std::fs::remove_file(world.audit_path());
        world.wait_for_link_watch(&["uplink", "cnitestpre"]);
        world
    }

    /// Waits (at most 5 s) until the kernel's link watch has given each of
    /// the node's `links` that is up its carrier state: a veth set up with
    /// its peer down reports `UNKNOWN`, then `LOWERLAYERDOWN` and
    /// `NO-CARRIER` up to a second later (longer under the VM's emulation),
    /// and a snapshot taken in between differs from every later one for
    /// nobody's doing (a CI run's fault sweep failed on it at its first
    /// host call).
    fn wait_for_link_watch(&self, links: &[&str]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let settled = |name: &str| {
            let out = self.node.ip(&["-j", "link", "show", "dev", name]);
            let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
            let l = &v[0];
            let up = l["flags"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "UP"));
            !up || l["operstate"] != "UNKNOWN"
        };
        while !links.iter().all(|l| settled(l)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Waits (at most 5 s) until each of the node's `links` reports
    /// carrier (`operstate` UP): a veth whose peer was set up after it
    /// shows `NO-CARRIER` until the link watch runs, up to a second later
    /// (longer on a loaded machine), and a snapshot taken in between
    /// differs from every later one for nobody's doing.
    pub fn wait_for_carrier(&self, links: &[&str]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let carrier = |name: &str| {
            let out = self.node.ip(&["-j", "link", "show", "dev", name]);
            let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
            v[0]["operstate"] == "UP"
        };
        while !links.iter().all(|l| carrier(l)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Everything a plugin could change: both namespaces (links,
    /// addresses, routes, the `net.` settings tree), the IPAM state
    /// (every file under the state root, with its contents) and the
    /// attachment records.
    pub fn snapshot(&self) -> Value {
        let mut files = serde_json::Map::new();
        fn walk(
            dir: &std::path::Path,
            base: &std::path::Path,
            out: &mut serde_json::Map<String, Value>,
        ) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, base, out);
                } else {
                    let rel = p
                        .strip_prefix(base)
                        .expect("under base")
                        .display()
                        .to_string();
                    let data = std::fs::read(&p).unwrap_or_default();
                    out.insert(
                        rel,
                        Value::from(String::from_utf8_lossy(&data).into_owned()),
                    );
                }
            }
        }
        walk(&self.ipam_dir(), &self.ipam_dir(), &mut files);
        let mut records = serde_json::Map::new();
        walk(&self.state_dir(), &self.state_dir(), &mut records);
        // Which boot the records were last reconciled for, and which IPAM
        // state directories the node has: the host's bookkeeping, not
        // state of any attachment.
        records.remove("boot-id");
        records.remove("ipam-stores");
        // The IPAM owner index: a cache of the IPAM state (above), checked
        // against it by every call that reads it.
        records.retain(|k, _| !k.starts_with("ipam-index/"));
        let mut node = self.node.full_snapshot();
        let mut ctr = self.ctr.full_snapshot();
        // The firewall capability's nftables rules (not in the
        // differential snapshots: the reference writes iptables rules).
        node["nft"] = self.node.nftables();
        ctr["nft"] = self.ctr.nftables();
        json!({"node": node, "ctr": ctr, "ipam": files, "records": records})
    }

    pub fn audit_path(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    /// Runs the bundled `plugin` for container `cid` with `ctr` as its
    /// namespace (the node is the world's): its default-policy entry
    /// (host-local confined to the world's IPAM dir), the world's audit log
    /// and state dir.
    pub fn run_bundled(
        &self,
        ctr: &Netns,
        plugin: &str,
        command: &str,
        conf: &Value,
        cid: &str,
    ) -> Run {
        self.run_bundled_with(ctr, plugin, command, conf, cid, &json!({}))
    }

    /// [`World::run_bundled`] with more policy entries (`entries`:
    /// plugin name → entry).
    pub fn run_bundled_with(
        &self,
        ctr: &Netns,
        plugin: &str,
        command: &str,
        conf: &Value,
        cid: &str,
        entries: &Value,
    ) -> Run {
        let stdin = conf.to_string().into_bytes();
        self.bundled(ctr, plugin, command, &stdin, cid, entries)
            .run()
    }

    /// The invocation [`World::run_bundled_with`] runs (its config as
    /// `stdin`), to give more environment or to start in the background
    /// ([`Invoke::spawn`]).
    pub fn bundled<'a>(
        &self,
        ctr: &Netns,
        plugin: &str,
        command: &str,
        stdin: &'a [u8],
        cid: &str,
        entries: &Value,
    ) -> Invoke<'a> {
        let mut policy = json!({"plugins": {"host-local": {"ipam-roots": [self.ipam_dir()]}}});
        for (k, v) in entries.as_object().into_iter().flatten() {
            policy["plugins"][k] = v.clone();
        }
        Invoke::wasmcni_run(plugin, stdin)
            .cni(command, &ctr.path, "eth0")
            .env("CNI_CONTAINERID", cid)
            .env("WASMCNI_POLICY", self.policy(&policy).display().to_string())
            .env("WASMCNI_AUDIT", self.audit_path().display().to_string())
            .env("WASMCNI_STATE_DIR", self.state_dir().display().to_string())
            .in_netns(&self.node)
    }

    /// Writes `policy` (0600) and returns its path.
    pub fn policy(&self, policy: &Value) -> PathBuf {
        let p = self.dir.path().join("policy.json");
        std::fs::write(&p, self.substitute(policy).to_string()).expect("write policy");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        p
    }

    /// The IPAM state root of this world: `"@ipam"` in a policy or config
    /// stands for it.
    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.path().join("ipam")
    }

    /// `v` with every `"@ipam"` string replaced by [`World::ipam_dir`].
    fn substitute(&self, v: &Value) -> Value {
        let text = v.to_string().replace(
            "\"@ipam\"",
            &Value::from(self.ipam_dir().display().to_string()).to_string(),
        );
        serde_json::from_str(&text).expect("json")
    }

    /// Runs the scripted fixture with `conf` under `policy`. Delegates are
    /// looked up among the test fixtures (`scripted` can delegate to
    /// itself).
    pub fn run(&self, command: &str, policy: &Value, conf: &Value, extra: &[(&str, &str)]) -> Run {
        self.spawn(command, policy, conf, extra).wait()
    }

    /// [`World::run`], started; the test waits ([`Running::finish`]).
    pub fn spawn(
        &self,
        command: &str,
        policy: &Value,
        conf: &Value,
        extra: &[(&str, &str)],
    ) -> Running {
        let stdin: &'static [u8] = Box::leak(
            self.substitute(conf)
                .to_string()
                .into_bytes()
                .into_boxed_slice(),
        );
        let fx = fixture("scripted");
        let fixtures = fx.parent().expect("fixture dir").display().to_string();
        let mut inv = Invoke::wasmcni_run(&fx.display().to_string(), stdin)
            .cni(command, &self.ctr.path, "eth0")
            .env("WASMCNI_POLICY", self.policy(policy).display().to_string())
            .env("WASMCNI_AUDIT", self.audit_path().display().to_string())
            .env("WASMCNI_STATE_DIR", self.state_dir().display().to_string())
            .env("WASMCNI_PLUGIN_DIR", fixtures)
            .in_netns(&self.node);
        for (k, v) in extra {
            inv = inv.env(k, v);
        }
        inv.spawn()
    }

    /// The state root of this world's attachment records.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.audit_path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect()
    }
}

/// A wide grant: what the S2 cases step just outside of.
pub fn wide() -> Value {
    json!({
        "ipam-roots": ["@ipam"],
        "delegates": ["scripted"],
        "container": {
            "read": true, "modify": true, "move": true, "addresses": true, "routes": true,
            "announce": true, "create": ["veth", "dummy", "macvlan", "ipvlan", "vlan"],
            "sysctls": ["net.ipv4.conf.*.forwarding"]
        },
        "host": {
            "read": true, "modify": true, "move": true, "addresses": true, "routes": true,
            "announce": true, "create": ["veth", "bridge"], "links": ["cnitest*"],
            "masters": ["mst*"], "bridges": ["cnibr*"],
            "sysctls": ["net.ipv4.conf.*.forwarding"],
            "prefixes": ["10.0.0.0/8", "fd00::/8"]
        }
    })
}

/// The embedded default-policy entry of `plugin` (host/runtime/src/default-policy.json).
pub fn default_entry(plugin: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("runtime/src/default-policy.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let e = v["plugins"][plugin].clone();
    assert!(e.is_object(), "no default-policy entry for {plugin}");
    e
}

/// Whether a record's text holds nothing but what an ADD adopted.
fn only_adopted(text: &Value) -> bool {
    let Some(r) = text
        .as_str()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
    else {
        return false;
    };
    r.get("adopted").is_some()
        && r["borrowed"].as_array().is_some_and(Vec::is_empty)
        && ["owned", "addresses", "uncovered"]
            .iter()
            .all(|k| r.get(*k).is_none())
}

/// S2 under one grant: the scripted plugin holding `entry` (as plugin
/// `who`, for messages) runs `op` in an ADD; the call must return
/// `access-denied`, leave an audit record `audited` accepts, and change
/// nothing anywhere.
pub fn assert_denied(
    world: &World,
    who: &str,
    entry: &Value,
    op: &Value,
    audited: impl Fn(&Value) -> bool,
) {
    assert_denied_with(world, who, entry, &json!({}), op, audited)
}

/// [`assert_denied`] with more keys in the network config (`conf`).
pub fn assert_denied_with(
    world: &World,
    who: &str,
    entry: &Value,
    conf: &Value,
    op: &Value,
    audited: impl Fn(&Value) -> bool,
) {
    let before = world.snapshot();
    let _ = std::fs::remove_file(world.audit_path());
    let mut config = json!({"cniVersion": "1.0.0", "name": "n", "type": "scripted", "ops": [op]});
    for (k, v) in conf.as_object().into_iter().flatten() {
        config[k] = v.clone();
    }
    let run = world.run("ADD", &policy_with(entry.clone()), &config, &[]);
    assert_eq!(run.code, 0, "{who} {op}: {run:?}");
    let report = run.json();
    let last = report["results"].as_array().and_then(|r| r.last()).cloned();
    assert_eq!(
        last.as_ref().map(|l| &l["error"]),
        Some(&json!("access-denied")),
        "{who} {op}: {report}"
    );
    assert!(
        world
            .audit()
            .iter()
            .any(|r| r["outcome"] == "denied" && audited(r)),
        "{who} {op}: no denied audit record"
    );
    let mut after = world.snapshot();
    // What an ADD under an `adopt-peer` grant adopted is recorded, a
    // refused call or not (issue 49, breach 1): the ADD's, not the call's.
    if let Some(records) = after["records"].as_object_mut() {
        records.retain(|k, text| before["records"].get(k).is_some() || !only_adopted(text));
    }
    super::assert_same(&before, &after, &format!("{who} {op}: state changed"));
}

pub fn policy_with(entry: Value) -> Value {
    json!({"plugins": {"scripted": entry}})
}

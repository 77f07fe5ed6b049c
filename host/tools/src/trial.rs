//! `wasmcni try`: runs a plugin's ADD, CHECK, DEL, DEL in a throwaway
//! sandbox, the way a runtime would, and shows every capability call it
//! made and the grant each needed.
//!
//! The process first moves into new network and mount namespaces (as
//! `wasmcni demo` does), so nothing it does reaches the machine: the
//! sandbox's own network namespace plays the node, a container namespace
//! is made inside it, and a fresh tmpfs covers `/run` (the sandbox's
//! working directory: policy, audit log, artifact cache, attachment
//! records, locks) and the IPAM data directories (so host-local keeps its
//! state where it would on a node, but in memory). The plugin runs through
//! the runner exactly as a runtime executes it: wasmcni executed as the
//! plugin (multi-call), with the `CNI_*` environment and the config on
//! stdin; a conflist's standard plugins before it run first, as a chain.
//! When the process ends, the namespaces and everything in them are gone.
//!
//! By default the plugin runs under a learning policy that grants it
//! everything inside the sandbox (safe: the sandbox is thrown away), so the
//! run shows what it needs; `--policy FILE` applies a real policy file
//! instead, to check an entry before installing it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use netlink_packet_route::link::{LinkAttribute, LinkInfo, LinkMessage};
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use serde_json::{json, Map, Value};

use crate::suggest::{self, NodeLink};
use wasmcni_runtime::audit::Logged;
use wasmcni_runtime::netlink::{AddrFlags, AddrSpec, LinkOpts, Netlink};
use wasmcni_runtime::netns::NetNs;
use wasmcni_runtime::plugins::{self, Origin, Plugin};
use wasmcni_runtime::policy::{ConfigKey, Entry, LinkKind, NsGrant, Pattern, Policy};

/// The sandbox's working directory, on the tmpfs that covers `/run`
/// inside it.
const BASE: &str = "/run/wasmcni-try";

/// What `wasmcni try` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// A plugin name, or a path ending in `.wasm`.
    pub plugin: String,
    /// The network config (default: a minimal one of the plugin's type).
    pub config: Option<PathBuf>,
    /// A `prevResult` for a chained plugin's ADD.
    pub prev_result: Option<PathBuf>,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// A policy to apply instead of the learning policy: a policy document,
    /// or the plugin's entry as a policy.d file holds it.
    pub policy: Option<PathBuf>,
    /// Print JSON.
    pub json: bool,
    /// Write the run's audit records (annotated) to this file.
    pub audit_out: Option<PathBuf>,
    /// Print the suggested policy entry, and verify it.
    pub suggest: bool,
    /// Links to make in the sandbox's node namespace first (`NAME` or
    /// `NAME:bridge`).
    pub host_links: Vec<String>,
}

use cni_spec::valid_ifname;

fn read_json(path: &Path, what: &str) -> anyhow::Result<Value> {
    let text = fs::read_to_string(path)
        .with_context(|| format!("reading the {what} {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("the {what} {} is not valid JSON", path.display()))
}

/// One plugin's network config.
type Config = Map<String, Value>;

/// The network config for plugin `name`: the file's (a network config, or
/// the entry of type `name` of a conflist, which inherits its `name` and
/// `cniVersion` as libcni does), else a minimal one; and the configs of the
/// plugins before it in a conflist (they run first, as a chain).
fn network_config(file: Option<&Path>, name: &str) -> anyhow::Result<(Config, Vec<Config>)> {
    let Some(path) = file else {
        let v = json!({"cniVersion": "1.1.0", "name": "try", "type": name});
        return Ok((v.as_object().cloned().unwrap_or_default(), Vec::new()));
    };
    let mut before = Vec::new();
    let v = read_json(path, "network config")?;
    let Value::Object(mut conf) = v else {
        bail!("the network config {} is not a JSON object", path.display());
    };
    if let Some(list) = conf.get("plugins").and_then(Value::as_array).cloned() {
        let at = list
            .iter()
            .position(|p| p.get("type").and_then(Value::as_str) == Some(name))
            .ok_or_else(|| {
                anyhow!(
                    "the conflist {} has no plugin of type {name:?}",
                    path.display()
                )
            })?;
        let inherit = |i: usize| -> anyhow::Result<Map<String, Value>> {
            let mut one = list[i].as_object().cloned().ok_or_else(|| {
                anyhow!(
                    "the conflist {}: plugins[{i}] is not an object",
                    path.display()
                )
            })?;
            for k in ["name", "cniVersion"] {
                if let Some(v) = conf.get(k) {
                    one.insert(k.to_owned(), v.clone());
                }
            }
            Ok(one)
        };
        for i in 0..at {
            let one = inherit(i)?;
            let t = one.get("type").and_then(Value::as_str).unwrap_or("");
            if !plugins::bundled().any(|p| p.name() == t) {
                bail!(
                    "the conflist {}: plugins[{i}] (type {t:?}) runs before {name:?} but is \
                     not a standard plugin; give its result with --prev-result instead",
                    path.display()
                );
            }
            before.push(one);
        }
        conf = inherit(at)?;
    }
    match conf.get("type") {
        None => {
            conf.insert("type".into(), Value::from(name));
        }
        Some(Value::String(t)) if t == name => {}
        Some(t) => bail!(
            "the network config {} has \"type\": {t}, but the plugin tried is {name:?}",
            path.display()
        ),
    }
    for k in ["cniVersion", "name"] {
        if !conf.get(k).is_some_and(Value::is_string) {
            bail!("the network config {} has no string {k:?}", path.display());
        }
    }
    Ok((conf, before))
}

/// Every absolute `dataDir` / `data-dir` string in the config.
fn data_dirs(v: &Value, out: &mut Vec<PathBuf>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "dataDir" || k == "data-dir" {
                    if let Some(s) = x.as_str().filter(|s| s.starts_with('/')) {
                        out.push(PathBuf::from(s));
                    }
                }
                data_dirs(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| data_dirs(x, out)),
        _ => {}
    }
}

/// The learning policy's entry: everything, inside the sandbox.
///
/// # Capabilities
/// Every right in both namespaces (any link, name, prefix and `net.`
/// sysctl; every link kind; every standard plugin as a delegate), and IPAM
/// state under `ipam_roots`. It is only ever written into the sandbox's own
/// policy file, and `ipam_roots` are only directories the sandbox covers
/// with a tmpfs ([`enter_sandbox`]): what it grants reaches nothing of the
/// machine.
fn learning_entry(ipam_roots: &[PathBuf]) -> Entry {
    let all = |host: bool| NsGrant {
        read: true,
        create: vec![
            LinkKind::Veth,
            LinkKind::Bridge,
            LinkKind::Dummy,
            LinkKind::Tap,
            LinkKind::Macvlan,
            LinkKind::Ipvlan,
            LinkKind::Vlan,
            LinkKind::Vrf,
        ],
        modify: true,
        move_links: true,
        links: vec![Pattern("*".into())],
        masters: vec![Pattern("*".into())],
        bridges: vec![Pattern("*".into())],
        addresses: true,
        routes: true,
        announce: true,
        traffic_control: true,
        firewall: wasmcni_runtime::policy::FirewallGrant {
            port_mappings: true,
            masquerade: true,
            forward: true,
            isolation: true,
            mac_spoof: true,
            forward_mark: None,
        },
        // `conf.all.X` in the host needs a pattern naming `all` literally.
        sysctls: [
            "net.*",
            "net.*.conf.all.*",
            "net.*.conf.default.*",
            "net.*.neigh.all.*",
            "net.*.neigh.default.*",
        ]
        .iter()
        .map(|p| Pattern((*p).to_owned()))
        .collect(),
        prefixes: if host {
            vec![
                "0.0.0.0/0".parse().unwrap_or_default(),
                "::/0".parse().unwrap_or_default(),
            ]
        } else {
            Vec::new()
        },
        names: host.then(|| vec![Pattern("*".into())]),
        config_links: if host {
            vec![
                ConfigKey::Device,
                ConfigKey::Hwaddr,
                ConfigKey::Kernelpath,
                ConfigKey::PciBusId,
                ConfigKey::DeviceId,
            ]
        } else {
            Vec::new()
        },
        config_vlans: true,
        adopt_peer: host,
    };
    Entry {
        container: all(false),
        host: Some(all(true)),
        ipam_roots: ipam_roots.to_vec(),
        delegates: plugins::bundled().map(|p| p.name().to_owned()).collect(),
        ..Entry::default()
    }
}

/// A link to make in the sandbox's node namespace.
#[derive(Debug, Clone)]
struct HostLink {
    name: String,
    bridge: bool,
}

fn parse_host_link(spec: &str) -> anyhow::Result<HostLink> {
    let (name, kind) = spec.split_once(':').unwrap_or((spec, "veth"));
    if !valid_ifname(name) {
        bail!("--host-link {spec:?}: {name:?} is not a valid interface name");
    }
    let bridge = match kind {
        "bridge" => true,
        "veth" => false,
        other => bail!("--host-link {spec:?}: kind {other:?} is not `veth` or `bridge`"),
    };
    Ok(HostLink {
        name: name.to_owned(),
        bridge,
    })
}

/// A fresh random-looking container ID (64 hex digits, as runtimes make).
fn container_id(salt: &str) -> String {
    use sha2::{Digest, Sha256};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    hex::encode(Sha256::digest(format!(
        "{}-{nanos}-{salt}",
        std::process::id()
    )))
}

/// Precompiled artifacts of `names` (component name, sha256) from the
/// default cache, when it is as trusted as the runner requires (owned by
/// root or us, not writable by group or others), so the sandbox need not
/// compile them again.
fn seed_artifacts(names: &[(String, String)]) -> Vec<(String, Vec<u8>)> {
    let Some(cache) = wasmcni_runtime::engine::ArtifactCache::default_location() else {
        return Vec::new();
    };
    let euid = nix::unistd::geteuid().as_raw();
    let trusted = |m: &fs::Metadata| (m.uid() == 0 || m.uid() == euid) && m.mode() & 0o022 == 0;
    if !fs::metadata(cache.dir()).is_ok_and(|m| m.is_dir() && trusted(&m)) {
        return Vec::new();
    }
    let Ok(dir) = fs::read_dir(cache.dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let wanted = names.iter().any(|(n, sha)| {
            file.starts_with(&format!("{n}-{}-", &sha[..16.min(sha.len())]))
                && file.ends_with(".cwasm")
        });
        let ok = e
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_file() && trusted(&m));
        if wanted && ok {
            if let Ok(bytes) = fs::read(e.path()) {
                out.push((file, bytes));
            }
        }
    }
    out
}

/// Enters the sandbox: new network and mount namespaces, a tmpfs over
/// `/run`, and one over each IPAM data dir (its deepest existing
/// ancestor), refusing one that would hide `keep` (the executable).
fn enter_sandbox(ipam_dirs: &[PathBuf], keep: &Path) -> anyhow::Result<()> {
    unshare(CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS).context(
        "entering a sandbox (new network and mount namespaces) needs root or CAP_SYS_ADMIN",
    )?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making mounts private in the sandbox")?;
    let tmpfs = |at: &Path| {
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("size=512m,mode=0755"),
        )
        .with_context(|| format!("mounting a tmpfs over {} in the sandbox", at.display()))
    };
    if keep.starts_with("/run") {
        bail!(
            "the wasmcni executable {} lies under /run, which the sandbox covers",
            keep.display()
        );
    }
    tmpfs(Path::new("/run"))?;
    let mut covered = vec![PathBuf::from("/run")];
    for dir in ipam_dirs {
        let mut at = dir.clone();
        while !at.exists() {
            if !at.pop() {
                break;
            }
        }
        let at = at
            .canonicalize()
            .with_context(|| format!("resolving {}", at.display()))?;
        if !covered.iter().any(|c| at.starts_with(c)) {
            let system = ["/proc", "/sys", "/dev"].iter().any(|s| at.starts_with(s));
            if at == Path::new("/") || system || keep.starts_with(&at) {
                bail!(
                    "the IPAM data dir {} cannot be kept in the sandbox: covering {} would \
                     hide the system or the wasmcni executable (use a dataDir elsewhere)",
                    dir.display(),
                    at.display()
                );
            }
            tmpfs(&at)?;
            covered.push(at);
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .with_context(|| format!("creating {} in the sandbox", dir.display()))?;
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(BASE)
        .with_context(|| format!("creating {BASE} in the sandbox"))?;
    Ok(())
}

fn link_name_kind(m: &LinkMessage) -> NodeLink {
    let mut l = NodeLink {
        name: String::new(),
        kind: None,
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => l.name = n.clone(),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        l.kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    l
}

/// Prepares the sandbox's node: `lo` up, the `--host-link` links, and
/// returns every link it has (what the plugin did not create).
fn prepare_node(links: &[HostLink]) -> anyhow::Result<std::collections::BTreeMap<u32, NodeLink>> {
    let node = NetNs::open_host()?;
    let mut nl = Netlink::open(&node)?;
    let lo = nl.link_by_name("lo")?.header.index;
    nl.set_link_up(lo, true)?;
    for (i, l) in links.iter().enumerate() {
        if l.bridge {
            nl.create_bridge(&l.name, &LinkOpts::default(), false)
        } else {
            nl.create_veth(
                &l.name,
                &LinkOpts::default(),
                &format!("tryp{i}"),
                node.fd(),
                None,
            )
        }
        .with_context(|| format!("creating --host-link {} in the sandbox", l.name))?;
        let index = nl.link_by_name(&l.name)?.header.index;
        nl.set_link_up(index, true)?;
    }
    Ok(nl
        .links()?
        .iter()
        .map(|m| (m.header.index, link_name_kind(m)))
        .collect())
}

/// Makes, in the container, the interfaces a `prevResult` says are there
/// (veth pairs whose peers stay in the node), with their addresses.
fn prepare_container(netns: &Path, prev: &Value) -> anyhow::Result<()> {
    let ctr = NetNs::open_container(netns)?;
    let node = NetNs::open_host()?;
    let mut nl = Netlink::open(&ctr)?;
    let ifaces = prev
        .get("interfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // Peer names unique in the node across containers (the verification
    // makes a second one).
    static CONTAINERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let k = CONTAINERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    for (i, iface) in ifaces.iter().enumerate() {
        let peer = format!("try{k}c{i}");
        let sandbox = iface.get("sandbox").and_then(Value::as_str).unwrap_or("");
        let Some(name) = iface.get("name").and_then(Value::as_str) else {
            continue;
        };
        if sandbox.is_empty() {
            continue;
        }
        if !valid_ifname(name) {
            bail!("--prev-result: interfaces[{i}].name {name:?} is not a valid interface name");
        }
        let mac = iface
            .get("mac")
            .and_then(Value::as_str)
            .map(|m| {
                m.split(':')
                    .map(|b| u8::from_str_radix(b, 16))
                    .collect::<Result<Vec<u8>, _>>()
            })
            .transpose()
            .map_err(|_| anyhow!("--prev-result: interfaces[{i}].mac is not a MAC address"))?;
        nl.create_veth(
            name,
            &LinkOpts {
                mac,
                ..LinkOpts::default()
            },
            &peer,
            node.fd(),
            None,
        )
        .with_context(|| format!("creating {name} (from --prev-result) in the container"))?;
        let index = nl.link_by_name(name)?.header.index;
        nl.set_link_up(index, true)?;
        let mut node_nl = Netlink::open(&node)?;
        let peer = node_nl.link_by_name(&peer)?.header.index;
        node_nl.set_link_up(peer, true)?;
        for ip in prev
            .get("ips")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if ip.get("interface").and_then(Value::as_u64) != Some(i as u64) {
                continue;
            }
            let Some((addr, len)) = ip
                .get("address")
                .and_then(Value::as_str)
                .and_then(|a| a.split_once('/'))
                .and_then(|(a, l)| Some((a.parse().ok()?, l.parse::<u8>().ok()?)))
            else {
                bail!("--prev-result: an ips[].address of interface {i} is not ADDRESS/LENGTH");
            };
            nl.add_address(&AddrSpec {
                index,
                addr,
                prefix_len: len,
                flags: AddrFlags {
                    no_dad: true,
                    no_prefix_route: false,
                },
                scope: 0,
                broadcast: AddrSpec::default_broadcast(addr, len),
                protocol: 0,
            })
            .with_context(|| format!("adding {addr}/{len} to {name} in the container"))?;
        }
    }
    Ok(())
}

/// One CNI command's run.
#[derive(Debug, Clone)]
struct Step {
    /// The plugin it ran (the one tried, or one before it in a conflist).
    plugin: String,
    command: String,
    code: i32,
    stdout: String,
    stderr: String,
    ms: f64,
    records: Vec<Logged>,
}

/// How to run the plugin inside the sandbox.
struct Runner {
    exe: PathBuf,
    /// argv[0] and extra arguments.
    argv0: PathBuf,
    args: Vec<String>,
    netns: PathBuf,
    ifname: String,
    container_id: String,
    policy: PathBuf,
    audit: PathBuf,
    read: u64,
    node_links: std::collections::BTreeMap<u32, NodeLink>,
}

impl Runner {
    /// Runs the plugin tried.
    fn run(&mut self, command: &str, config: &Value) -> anyhow::Result<Step> {
        let (argv0, args) = (self.argv0.clone(), self.args.clone());
        self.run_as(&argv0, &args, command, config)
    }

    /// Runs the standard plugin `config` names (one before the plugin
    /// tried in a conflist), as a runtime would.
    fn run_before(&mut self, command: &str, config: &Map<String, Value>) -> anyhow::Result<Step> {
        let t = config.get("type").and_then(Value::as_str).unwrap_or("");
        let argv0 = Path::new(BASE).join("bin").join(t);
        self.run_as(&argv0, &[], command, &Value::Object(config.clone()))
    }

    fn run_as(
        &mut self,
        argv0: &Path,
        args: &[String],
        command: &str,
        config: &Value,
    ) -> anyhow::Result<Step> {
        let base = Path::new(BASE);
        let mut cmd = Command::new(&self.exe);
        cmd.arg0(argv0)
            .args(args)
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_NETNS", &self.netns)
            .env("CNI_IFNAME", &self.ifname)
            .env("CNI_PATH", base.join("bin"))
            .env("WASMCNI_POLICY", &self.policy)
            .env("WASMCNI_POLICY_DIR", base.join("policy.d"))
            .env("WASMCNI_AUDIT", &self.audit)
            .env("WASMCNI_CACHE_DIR", base.join("cache"))
            .env("WASMCNI_STATE_DIR", base.join("state"))
            .env("WASMCNI_RUN_DIR", base.join("run"))
            .env("WASMCNI_PLUGIN_DIR", base.join("plugins"));
        for (k, v) in wasmcni_runtime::config::get().passed_to_children() {
            cmd.env(k, v);
        }
        let start = Instant::now();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running the plugin")?;
        child
            .stdin
            .take()
            .context("the plugin's stdin")?
            .write_all(config.to_string().as_bytes())?;
        let out = child.wait_with_output()?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let text = fs::read(&self.audit).unwrap_or_default();
        let new = text
            .get(usize::try_from(self.read).unwrap_or(usize::MAX)..)
            .unwrap_or_default();
        self.read = text.len() as u64;
        let (mut records, _) = wasmcni_runtime::audit::read_log(&String::from_utf8_lossy(new));
        for r in &mut records {
            annotate(r, &self.node_links);
        }
        Ok(Step {
            plugin: config
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            command: command.to_owned(),
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            ms,
            records,
        })
    }

    /// ADD, CHECK, DEL, DEL as a runtime sends them: CHECK and the first
    /// DEL get the ADD's result as `prevResult` (libcni's cached result),
    /// the second DEL none (the cache is gone). After a failed ADD,
    /// CHECK is skipped and the DELs clean up. The plugins `before` it in
    /// a conflist run first (ADD, each result the next one's
    /// `prevResult`), and their DELs in reverse order after its first DEL.
    fn sequence(
        &mut self,
        config: &Map<String, Value>,
        before: &[Map<String, Value>],
    ) -> anyhow::Result<Vec<Step>> {
        let mut steps = Vec::new();
        let mut config = config.clone();
        let mut prev: Option<Value> = None;
        let mut ran = Vec::new();
        for b in before {
            let mut c = b.clone();
            if let Some(p) = &prev {
                c.insert("prevResult".into(), p.clone());
            }
            let add = self.run_before("ADD", &c)?;
            let ok = add.code == 0;
            prev = serde_json::from_str::<Value>(&add.stdout)
                .ok()
                .filter(|v| ok && v.is_object());
            steps.push(add);
            ran.push(c);
            if !ok {
                break;
            }
        }
        let chain_ok = steps.iter().all(|s| s.code == 0);
        if let Some(p) = &prev {
            config.insert("prevResult".into(), p.clone());
        }
        let mut mine = self.sequence_one(&config, chain_ok)?;
        let last = mine.pop();
        steps.extend(mine);
        for c in ran.iter().rev() {
            steps.push(self.run_before("DEL", c)?);
        }
        steps.extend(last);
        Ok(steps)
    }

    /// The plugin's own ADD, CHECK, DEL, DEL (none but the DELs when the
    /// plugins before it failed).
    fn sequence_one(
        &mut self,
        config: &Map<String, Value>,
        chain_ok: bool,
    ) -> anyhow::Result<Vec<Step>> {
        let mut steps = Vec::new();
        if !chain_ok {
            let mut plain = config.clone();
            plain.remove("prevResult");
            steps.push(self.run("DEL", &Value::Object(plain.clone()))?);
            steps.push(self.run("DEL", &Value::Object(plain))?);
            return Ok(steps);
        }
        let add = self.run("ADD", &Value::Object(config.clone()))?;
        let result = (add.code == 0)
            .then(|| serde_json::from_str::<Value>(&add.stdout).ok())
            .flatten()
            .filter(Value::is_object);
        steps.push(add);
        let mut cached = config.clone();
        match result {
            Some(r) => {
                cached.insert("prevResult".into(), r);
            }
            None => {
                cached.remove("prevResult");
            }
        }
        if steps[0].code == 0 {
            steps.push(self.run("CHECK", &Value::Object(cached.clone()))?);
        }
        steps.push(self.run("DEL", &Value::Object(cached))?);
        let mut plain = config.clone();
        plain.remove("prevResult");
        steps.push(self.run("DEL", &Value::Object(plain))?);
        Ok(steps)
    }
}

/// Adds to a host-namespace record the node links (those the plugin did
/// not create) it refers to, by index, as `node-links`.
fn annotate(r: &mut Logged, node: &std::collections::BTreeMap<u32, NodeLink>) {
    let a = &r.args;
    let host = |k: &str| a.get(k).and_then(Value::as_str) == Some("host");
    let mut refs: Vec<u32> = Vec::new();
    let mut idx = |v: &Value| {
        if let Some(i) = v.as_u64().and_then(|i| u32::try_from(i).ok()) {
            refs.push(i);
        }
    };
    if host("ns") {
        idx(&a["index"]);
        idx(&a["link-index"]);
        idx(&a["route"]["link-index"]);
        if r.call == "link.set-master" {
            idx(&a["master"]);
        }
    }
    if host("master-ns") {
        idx(&a["master"]);
    }
    let mut m = Map::new();
    for i in refs {
        if let Some(l) = node.get(&i) {
            m.insert(
                i.to_string(),
                serde_json::to_value(l).unwrap_or(Value::Null),
            );
        }
    }
    if host("ns") && r.call.starts_with("sysctl.") {
        let key = a.get("key").and_then(Value::as_str).unwrap_or("");
        for (i, l) in node {
            if key
                .split('.')
                .nth(3)
                .map(|c| c.replace('/', "."))
                .as_deref()
                == Some(&l.name)
            {
                m.insert(
                    i.to_string(),
                    serde_json::to_value(l).unwrap_or(Value::Null),
                );
            }
        }
    }
    if !m.is_empty() {
        r.extra.insert("node-links".into(), Value::Object(m));
    }
}

/// A policy given with `--policy`.
enum GivenPolicy {
    /// A policy document (`{"plugins": {...}}`), as policy.json.
    Document(String),
    /// One plugin's entry, as a policy.d file (`NAME.json`).
    Entry(String),
}

impl GivenPolicy {
    /// Every `ipam-roots` directory it grants (any plugin's: a delegate
    /// keeps IPAM state under its own entry's).
    fn ipam_roots(&self, name: &str) -> Vec<PathBuf> {
        match self {
            GivenPolicy::Document(t) => Policy::parse(t, "policy")
                .map(|p| {
                    p.names()
                        .iter()
                        .flat_map(|n| p.entry(n).ipam_roots)
                        .collect()
                })
                .unwrap_or_default(),
            GivenPolicy::Entry(t) => serde_json::from_str::<Value>(t)
                .ok()
                .and_then(|v| Entry::from_value(name, &v, "entry").ok())
                .map(|e| e.ipam_roots)
                .unwrap_or_default(),
        }
    }
}

/// Reads and checks `--policy`: a policy document, or the plugin's entry
/// as a policy.d file holds it; errors name the file and the field.
fn read_policy(path: &Path, name: &str) -> anyhow::Result<GivenPolicy> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let origin = path.display().to_string();
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("the policy {origin} is not valid JSON"))?;
    if v.get("plugins").is_some() {
        Policy::parse(&text, &origin).map_err(|e| anyhow!("{e}"))?;
        Ok(GivenPolicy::Document(text))
    } else {
        Entry::from_value(name, &v, &origin).map_err(|e| anyhow!("{e}"))?;
        Ok(GivenPolicy::Entry(text))
    }
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// The arguments of a call, short: `key=value` for each that is set.
fn args_summary(a: &Value) -> String {
    match a {
        Value::Object(m) => m
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                Value::Object(_) => format!("{k}={{{}}}", args_summary(v)),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

fn outcome_text(r: &Logged) -> String {
    match r.outcome.as_str() {
        "ok" => "ok".into(),
        "error" => format!(
            "error {}{}",
            r.error.as_deref().unwrap_or(""),
            r.errno.map(|e| format!(" (errno {e})")).unwrap_or_default()
        ),
        o => format!("{o}: {}", r.reason.as_deref().unwrap_or("")),
    }
}

fn indent(s: &str, by: &str) -> String {
    s.lines()
        .map(|l| format!("{by}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn pretty(stdout: &str) -> String {
    serde_json::from_str::<Value>(stdout)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| stdout.trim().to_owned())
}

/// Everything `try` reads from outside the sandbox, read before it
/// covers parts of the file system.
struct Inputs {
    plugin: Plugin,
    config: Map<String, Value>,
    /// The standard plugins before it in a conflist.
    before: Vec<Map<String, Value>>,
    prev: Option<Value>,
    given: Option<GivenPolicy>,
    host_links: Vec<HostLink>,
    /// The IPAM data dirs the sandbox covers: the default, the config's,
    /// and (`--policy`) every `ipam-roots` the policy grants.
    ipam_dirs: Vec<PathBuf>,
    /// The standard IPAM plugins the configs name.
    ipam_types: Vec<String>,
    audit_out: Option<fs::File>,
    artifacts: Vec<(String, Vec<u8>)>,
    exe: PathBuf,
}

impl Inputs {
    fn read(o: &Options) -> anyhow::Result<Inputs> {
        let plugin = crate::plugin_arg::resolve(&o.plugin)?;
        let name = plugin.name().to_owned();
        if !valid_ifname(&o.ifname) {
            bail!("--ifname {:?} is not a valid interface name", o.ifname);
        }
        let (mut config, before) = network_config(o.config.as_deref(), &name)?;
        let prev = match &o.prev_result {
            Some(_) if !before.is_empty() => bail!(
                "--prev-result and a conflist with plugins before {name:?}: the result of \
                 those is its prevResult; give one or the other"
            ),
            Some(p) => {
                let v = read_json(p, "prevResult")?;
                if !v.is_object() {
                    bail!("the prevResult {} is not a JSON object", p.display());
                }
                config.insert("prevResult".into(), v.clone());
                Some(v)
            }
            None => None,
        };
        let given = match &o.policy {
            Some(p) => Some(read_policy(p, &name)?),
            None => None,
        };
        let host_links = o
            .host_links
            .iter()
            .map(|s| parse_host_link(s))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut ipam_dirs = vec![PathBuf::from(wasmcni_runtime::ipam::DEFAULT_DATA_DIR)];
        for c in before.iter().chain([&config]) {
            data_dirs(&Value::Object(c.clone()), &mut ipam_dirs);
        }
        if let Some(g) = &given {
            ipam_dirs.extend(g.ipam_roots(&name));
        }
        let mut seen = Vec::new();
        ipam_dirs.retain(|d| {
            let new = !seen.contains(d);
            seen.push(d.clone());
            new
        });
        let audit_out = match &o.audit_out {
            Some(p) => Some(
                fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(p)
                    .with_context(|| format!("creating {}", p.display()))?,
            ),
            None => None,
        };
        let mut ipam_types: Vec<String> = Vec::new();
        for c in before.iter().chain([&config]) {
            let t = c
                .get("ipam")
                .and_then(|i| i.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if t != name
                && plugins::bundled().any(|p| p.name() == t)
                && !ipam_types.iter().any(|x| x == t)
            {
                ipam_types.push(t.to_owned());
            }
        }
        // By component (every standard plugin's is the standard component).
        let mut seeds = vec![(
            plugin.component_name().to_owned(),
            plugin.sha256().to_owned(),
        )];
        for p in plugins::bundled() {
            let used = ipam_types.iter().any(|t| t == p.name())
                || before
                    .iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some(p.name()));
            if used {
                seeds.push((p.component_name().to_owned(), p.sha256().to_owned()));
            }
        }
        Ok(Inputs {
            artifacts: seed_artifacts(&seeds),
            exe: std::env::current_exe().context("finding the wasmcni executable")?,
            plugin,
            config,
            before,
            prev,
            given,
            host_links,
            ipam_dirs,
            ipam_types,
            audit_out,
        })
    }

    /// The policy documents of the run and of its verification: the plugin
    /// gets `entry` (none: the given policy's); a bundled IPAM delegate the
    /// config names keeps its own entry, with the covered data dirs as IPAM
    /// roots (unless a given policy says otherwise).
    fn policy(&self, entry: Option<Value>) -> anyhow::Result<String> {
        let name = self.plugin.name();
        let mut doc = match &self.given {
            Some(GivenPolicy::Document(t)) => serde_json::from_str::<Value>(t)?,
            _ => json!({"plugins": {}}),
        };
        let plugins = doc
            .get_mut("plugins")
            .and_then(Value::as_object_mut)
            .context("the policy document has no plugins object")?;
        if self.given.is_none() {
            for t in &self.ipam_types {
                let mut e = Policy::embedded().entry(t);
                for d in &self.ipam_dirs {
                    if !e.ipam_roots.contains(d) {
                        e.ipam_roots.push(d.clone());
                    }
                }
                plugins.insert(t.clone(), serde_json::to_value(&e)?);
            }
        }
        if let Some(e) = entry {
            plugins.insert(name.to_owned(), e);
        }
        Ok(doc.to_string())
    }
}

/// Sets the sandbox up (its directories, the plugin, the node's links,
/// the container, the policy) and returns how to run the plugin there.
fn set_up(inp: &Inputs, ifname: &str) -> anyhow::Result<Runner> {
    let base = Path::new(BASE);
    for d in ["bin", "cache", "state", "run", "plugins", "policy.d"] {
        fs::DirBuilder::new().mode(0o700).create(base.join(d))?;
    }
    for (file, bytes) in &inp.artifacts {
        let p = base.join("cache").join(file);
        fs::write(&p, bytes)?;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600))?;
    }
    let name = inp.plugin.name();
    let (argv0, args) = if *inp.plugin.origin() == Origin::Bundled {
        (base.join("bin").join(name), Vec::new())
    } else {
        let file = base.join("plugins").join(format!("{name}.wasm"));
        fs::write(&file, inp.plugin.wasm())?;
        if plugins::bundled().any(|p| p.name() == name) {
            // A file named like a standard plugin: by path, as `wasmcni run`.
            (
                PathBuf::from(wasmcni_runtime::plugins::SELF_NAME),
                vec!["run".into(), file.display().to_string()],
            )
        } else {
            // Multi-call, found in the (sandbox's) plugin directory.
            (base.join("bin").join(name), Vec::new())
        }
    };
    let node_links = prepare_node(&inp.host_links)?;
    let netns = base.join("container-netns");
    crate::demo::make_netns(&netns)?;
    if let Some(prev) = &inp.prev {
        prepare_container(&netns, prev)?;
    }
    // The machine's policy directory never applies in the sandbox; an
    // entry file given with --policy is the sandbox's.
    let policy = base.join("policy.json");
    let entry = match &inp.given {
        Some(GivenPolicy::Entry(t)) => {
            write_private(&base.join("policy.d").join(format!("{name}.json")), t)?;
            None
        }
        Some(GivenPolicy::Document(_)) => None,
        None => Some(serde_json::to_value(learning_entry(&inp.ipam_dirs))?),
    };
    write_private(&policy, &inp.policy(entry)?)?;
    Ok(Runner {
        exe: inp.exe.clone(),
        argv0,
        args,
        netns,
        ifname: ifname.to_owned(),
        container_id: container_id("try"),
        policy,
        audit: base.join("audit.jsonl"),
        read: 0,
        node_links,
    })
}

/// Runs the sequence again under the suggested entry alone, in a new
/// container with a new container ID.
fn verify(runner: &mut Runner, inp: &Inputs, entry: &Entry) -> anyhow::Result<Vec<Step>> {
    // The suggestion may grant a data dir the learning run refused (one the
    // config does not name, so the sandbox never covered it): running under
    // it would write to the machine's disk.
    let outside = uncovered_roots(&entry.ipam_roots, &inp.ipam_dirs);
    if !outside.is_empty() {
        bail!(
            "not verified: the suggested entry grants IPAM data dirs the sandbox does not \
             cover ({}); the plugin opened data dirs its config does not name, which the \
             learning run refused. Name them in the config (dataDir) and try again, or \
             leave them out of the entry",
            outside
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let base = Path::new(BASE);
    let name = inp.plugin.name();
    let path = base.join("policy-suggested.json");
    write_private(&path, &inp.policy(Some(suggest::entry_json(entry)))?)?;
    let _ = fs::remove_file(base.join("policy.d").join(format!("{name}.json")));
    let netns = base.join("container-netns-2");
    crate::demo::make_netns(&netns)?;
    if let Some(prev) = &inp.prev {
        prepare_container(&netns, prev)?;
    }
    runner.netns = netns;
    runner.policy = path;
    runner.container_id = container_id("verify");
    runner.sequence(&inp.config, &inp.before)
}

/// The roots in `roots` that lie under none of the covered data dirs (a
/// root with `.` or `..` components counts as outside, whatever it says).
fn uncovered_roots<'a>(roots: &'a [PathBuf], covered: &[PathBuf]) -> Vec<&'a PathBuf> {
    use std::path::Component;
    roots
        .iter()
        .filter(|r| {
            let plain = r
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            !plain || !covered.iter().any(|d| r.starts_with(d))
        })
        .collect()
}

/// `COMMAND (exit CODE)` of each step that failed.
fn failures(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .filter(|s| s.code != 0)
        .map(|s| format!("{} {} (exit {})", s.plugin, s.command, s.code))
        .collect()
}

/// Runs `wasmcni try`.
pub fn run(o: Options) -> anyhow::Result<()> {
    let mut inp = Inputs::read(&o)?;
    enter_sandbox(&inp.ipam_dirs, &inp.exe)?;
    let mut runner = set_up(&inp, &o.ifname)?;
    let container_id = runner.container_id.clone();
    let steps = runner.sequence(&inp.config, &inp.before)?;
    let name = inp.plugin.name().to_owned();
    let records: Vec<Logged> = steps.iter().flat_map(|s| s.records.clone()).collect();
    if let Some(f) = inp.audit_out.as_mut() {
        for r in &records {
            writeln!(f, "{}", serde_json::to_string(r)?)?;
        }
    }
    let mine: Vec<Logged> = records
        .into_iter()
        .filter(|r| r.plugin == name && r.sha256 == inp.plugin.sha256())
        .collect();
    let suggestion = if o.suggest {
        let (entry, notes) = suggest::derive(&mine, inp.plugin.sha256());
        let check = verify(&mut runner, &inp, &entry)?;
        Some((entry, notes, check))
    } else {
        None
    };
    let report = Report {
        plugin: &inp.plugin,
        learning: inp.given.is_none(),
        policy: o.policy.as_deref(),
        config: &inp.config,
        ifname: &o.ifname,
        container_id: &container_id,
        steps: &steps,
        mine: &mine,
        suggestion: suggestion.as_ref(),
    };
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        report.text()?;
    }
    let failed = failures(&steps);
    if !failed.is_empty() {
        bail!("{} failed", failed.join(", "));
    }
    if let Some((_, _, check)) = &suggestion {
        let failed = failures(check);
        if !failed.is_empty() {
            bail!(
                "under the suggested entry for {name} alone, {} failed: the plugin needed more \
                 than in the first run (see the calls above)",
                failed.join(", ")
            );
        }
    }
    Ok(())
}

struct Report<'a> {
    plugin: &'a Plugin,
    learning: bool,
    policy: Option<&'a Path>,
    config: &'a Map<String, Value>,
    ifname: &'a str,
    container_id: &'a str,
    steps: &'a [Step],
    mine: &'a [Logged],
    suggestion: Option<&'a (Entry, Vec<String>, Vec<Step>)>,
}

impl Report<'_> {
    /// The distinct grants the plugin's own calls needed.
    fn needed(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.mine {
            for n in suggest::needs(r) {
                let s = n.to_string();
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        out
    }

    fn call_json(&self, r: &Logged) -> Value {
        let mut v = json!({
            "plugin": r.plugin, "call": r.call, "args": r.args, "outcome": r.outcome,
            "needs": suggest::needs(r).iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        });
        for (k, x) in [("reason", &r.reason), ("error", &r.error)] {
            if let Some(x) = x {
                v[k] = Value::from(x.clone());
            }
        }
        v
    }

    fn step_json(&self, s: &Step) -> Value {
        json!({
            "plugin": s.plugin, "command": s.command, "exit": s.code,
            "ms": (s.ms * 10.0).round() / 10.0,
            "stdout": serde_json::from_str::<Value>(&s.stdout)
                .unwrap_or_else(|_| Value::from(s.stdout.clone())),
            "stderr": s.stderr,
            "calls": s.records.iter().map(|r| self.call_json(r)).collect::<Vec<_>>(),
        })
    }

    fn json(&self) -> Value {
        let mut v = json!({
            "plugin": {"name": self.plugin.name(), "sha256": self.plugin.sha256(),
                       "bundled": *self.plugin.origin() == Origin::Bundled},
            "policy": if self.learning { Value::from("learning") }
                      else { Value::from(self.policy.map(|p| p.display().to_string())) },
            "container-id": self.container_id, "ifname": self.ifname,
            "config": self.config,
            "steps": self.steps.iter().map(|s| self.step_json(s)).collect::<Vec<_>>(),
            "needs": self.needed(),
        });
        if let Some((entry, notes, check)) = self.suggestion {
            v["suggestion"] = json!({
                "entry": suggest::entry_json(entry), "notes": notes,
                "verified": check.iter().all(|s| s.code == 0),
                "steps": check.iter().map(|s| self.step_json(s)).collect::<Vec<_>>(),
            });
        }
        v
    }

    fn print_step(&self, s: &Step) {
        let name = self.plugin.name();
        let note = if s.plugin == name {
            String::new()
        } else {
            format!("   ({} comes before {name} in the conflist)", s.plugin)
        };
        println!(
            "$ CNI_COMMAND={} {} < config   -> exit {}, {:.1} ms{note}",
            s.command, s.plugin, s.code, s.ms
        );
        let out = pretty(&s.stdout);
        if !out.is_empty() {
            println!("{}", indent(&out, "  "));
        }
        if !s.stderr.trim().is_empty() {
            println!("  stderr:\n{}", indent(s.stderr.trim_end(), "    "));
        }
        if s.records.is_empty() {
            println!("  calls: none");
        } else {
            println!("  calls:");
        }
        for r in &s.records {
            let who = if r.plugin == name {
                String::new()
            } else {
                format!("[{}] ", r.plugin)
            };
            let needs: Vec<String> = suggest::needs(r).iter().map(|n| n.to_string()).collect();
            let needs = if needs.is_empty() {
                String::new()
            } else if r.plugin == name {
                format!("\n      needs {}", needs.join(", "))
            } else {
                format!(
                    "\n      needs (in {}'s entry) {}",
                    r.plugin,
                    needs.join(", ")
                )
            };
            println!(
                "    {who}{} {}  -> {}{needs}",
                r.call,
                args_summary(&r.args),
                outcome_text(r)
            );
        }
        println!();
    }

    fn text(&self) -> anyhow::Result<()> {
        let p = self.plugin;
        println!(
            "wasmcni try: plugin {:?} ({}, sha256 {}) in a throwaway sandbox (own network and \
             mount namespaces: the machine's network and files are not touched)",
            p.name(),
            match p.origin() {
                Origin::Bundled => "bundled".to_owned(),
                Origin::File(f) => f.display().to_string(),
            },
            p.sha256()
        );
        if self.learning {
            println!(
                "policy: learning (the plugin may do anything inside the sandbox, so the run \
                 shows what it needs)"
            );
        } else if let Some(f) = self.policy {
            println!("policy: {} (as on a node)", f.display());
        }
        println!(
            "CNI_CONTAINERID={} CNI_IFNAME={}\nnetwork config:\n{}\n",
            self.container_id,
            self.ifname,
            indent(
                &serde_json::to_string_pretty(&Value::Object(self.config.clone()))?,
                "  "
            )
        );
        for s in self.steps {
            self.print_step(s);
        }
        let needed = self.needed();
        println!(
            "summary: {}",
            self.steps
                .iter()
                .map(|s| format!(
                    "{}{} {}",
                    if s.plugin == p.name() {
                        String::new()
                    } else {
                        format!("{} ", s.plugin)
                    },
                    s.command,
                    if s.code == 0 { "ok" } else { "FAILED" }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if needed.is_empty() {
            println!("grants needed: none");
        } else {
            println!("grants needed (plugins.{}.*):", p.name());
            for n in &needed {
                println!("  {n}");
            }
        }
        if let Some((entry, notes, check)) = self.suggestion {
            println!();
            suggest::print_suggestion(p.name(), entry, notes, self.mine.len(), true)?;
            let ok = check.iter().all(|s| s.code == 0);
            println!(
                "verified: {} under this entry alone, in a new container with a new container ID",
                if ok {
                    "ADD, CHECK, DEL, DEL pass"
                } else {
                    "FAILED"
                }
            );
            if !ok {
                for s in check {
                    self.print_step(s);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs() {
        let (c, _) = network_config(None, "loopback").expect("default");
        assert_eq!(c["type"], "loopback");
        assert_eq!(c["cniVersion"], "1.1.0");
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.json");
        fs::write(
            &f,
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"mtu","mtu":1400}]}"#,
        )
        .expect("write");
        let (c, before) = network_config(Some(&f), "mtu").expect("from a conflist");
        assert_eq!(c["mtu"], 1400);
        assert_eq!(c["name"], "n");
        assert_eq!(before.len(), 1);
        assert_eq!(before[0]["type"], "bridge");
        assert_eq!(before[0]["cniVersion"], "1.0.0");
        fs::write(
            &f,
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"flannel"},{"type":"mtu"}]}"#,
        )
        .expect("write");
        let e = network_config(Some(&f), "mtu").expect_err("not standard");
        assert!(e.to_string().contains("--prev-result"), "{e}");
        fs::write(
            &f,
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"mtu","mtu":1400}]}"#,
        )
        .expect("write");
        let e = network_config(Some(&f), "ptp").expect_err("no such plugin");
        assert!(e.to_string().contains("no plugin of type \"ptp\""), "{e}");
        fs::write(&f, r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#).expect("write");
        let e = network_config(Some(&f), "mtu").expect_err("other type");
        assert!(e.to_string().contains("\"bridge\""), "{e}");
        fs::write(&f, r#"{"name":"n"}"#).expect("write");
        let e = network_config(Some(&f), "mtu").expect_err("no version");
        assert!(e.to_string().contains("cniVersion"), "{e}");
        fs::write(&f, "[1]").expect("write");
        assert!(network_config(Some(&f), "mtu").is_err());
    }

    #[test]
    fn roots_outside_the_covered_dirs_are_found() {
        let covered = [PathBuf::from("/var/lib/cni/networks"), PathBuf::from("/d")];
        let roots = [
            PathBuf::from("/var/lib/cni/networks"),
            PathBuf::from("/d/sub"),
            PathBuf::from("/etc"),
            PathBuf::from("/var/lib/cni/networks/../../../etc"),
            PathBuf::from("/dx"),
        ];
        let out: Vec<_> = uncovered_roots(&roots, &covered);
        assert_eq!(out, [&roots[2], &roots[3], &roots[4]]);
    }

    #[test]
    fn data_dirs_are_found_anywhere() {
        let mut out = Vec::new();
        data_dirs(
            &json!({"ipam": {"type": "host-local", "dataDir": "/var/lib/x"}, "dataDir": "rel"}),
            &mut out,
        );
        assert_eq!(out, vec![PathBuf::from("/var/lib/x")]);
    }

    #[test]
    fn the_learning_policy_parses_and_grants_everything() {
        let e = learning_entry(&[PathBuf::from("/var/lib/cni/networks")]);
        let doc = json!({"plugins": {"p": e}}).to_string();
        let p = Policy::parse(&doc, "learning").expect("parses");
        let g = p.entry("p").grant();
        let h = g.host.expect("host");
        assert!(h.may_name("eth0") && h.names_link("eth0") && h.names_master("x"));
        assert!(h.covers("8.8.8.8".parse().expect("ip"), 32));
        assert!(h
            .sysctls
            .iter()
            .any(|p| p.0.contains(".all.") && p.matches("net.ipv4.conf.all.forwarding")));
        assert!(g.delegates.iter().any(|d| d == "host-local"));
    }

    #[test]
    fn a_given_policy_s_ipam_roots_are_covered_too() {
        let doc = GivenPolicy::Document(
            json!({"plugins": {"p": {"ipam-roots": ["/var/lib/a"]},
                               "host-local": {"ipam-roots": ["/srv/b"]}}})
            .to_string(),
        );
        let mut roots = doc.ipam_roots("p");
        roots.sort();
        assert_eq!(
            roots,
            [PathBuf::from("/srv/b"), PathBuf::from("/var/lib/a")]
        );
        let entry = GivenPolicy::Entry(json!({"ipam-roots": ["/var/lib/c"]}).to_string());
        assert_eq!(entry.ipam_roots("p"), [PathBuf::from("/var/lib/c")]);
    }

    #[test]
    fn host_links() {
        assert!(parse_host_link("eth9").is_ok_and(|l| !l.bridge));
        assert!(parse_host_link("br0:bridge").is_ok_and(|l| l.bridge));
        assert!(parse_host_link("br0:vxlan").is_err());
        assert!(parse_host_link("a/b").is_err());
    }

    #[test]
    fn annotation_names_node_links_only_in_the_host() {
        let node = std::collections::BTreeMap::from([(
            2,
            NodeLink {
                name: "uplink".into(),
                kind: Some("veth".into()),
            },
        )]);
        let mut r = Logged {
            call: "link.set-up".into(),
            args: json!({"ns": "container", "index": 2}),
            ..Logged::default()
        };
        annotate(&mut r, &node);
        assert!(r.extra.is_empty());
        r.args = json!({"ns": "host", "index": 2});
        annotate(&mut r, &node);
        assert_eq!(r.extra["node-links"]["2"]["name"], "uplink");
        let mut s = Logged {
            call: "sysctl.set".into(),
            args: json!({"ns": "host", "key": "net.ipv4.conf.uplink.forwarding"}),
            ..Logged::default()
        };
        annotate(&mut s, &node);
        assert_eq!(s.extra["node-links"]["2"]["name"], "uplink");
    }
}

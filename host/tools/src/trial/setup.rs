//! The sandbox set up for a run: `/run` and the IPAM data dirs covered
//! with a tmpfs, the node's links, a container (with the interfaces a
//! `prevResult` says are there), and the sandbox's own directories, plugin
//! and policy.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use cni_spec::valid_ifname;
use netlink_packet_route::link::{LinkAttribute, LinkInfo, LinkMessage};
use nix::mount::{mount, MsFlags};
use serde_json::Value;

use super::inputs::{HostLink, Inputs};
use super::policy::{learning_entry, GivenPolicy};
use super::runner::Runner;
use super::BASE;
use crate::sandbox;
use crate::suggest::NodeLink;
use wasmcni_runtime::netlink::{AddrFlags, AddrSpec, LinkOpts, Netlink};
use wasmcni_runtime::netns::NetNs;
use wasmcni_runtime::plugins::{self, Origin};

/// A fresh random-looking container ID (64 hex digits, as runtimes make).
pub(super) fn container_id(salt: &str) -> String {
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

/// Enters the sandbox: new network and mount namespaces, a tmpfs over
/// `/run`, and one over each IPAM data dir (its deepest existing
/// ancestor), refusing one that would hide `keep` (the executable).
pub(super) fn enter_sandbox(ipam_dirs: &[PathBuf], keep: &Path) -> anyhow::Result<()> {
    sandbox::enter()?;
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
pub(super) fn prepare_container(netns: &Path, prev: &Value) -> anyhow::Result<()> {
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

pub(super) fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// Sets the sandbox up (its directories, the plugin, the node's links,
/// the container, the policy) and returns how to run the plugin there.
pub(super) fn set_up(inp: &Inputs, ifname: &str) -> anyhow::Result<Runner> {
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
    sandbox::make_netns(&netns)?;
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

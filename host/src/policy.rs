//! Policy: the only place authority is granted to a plugin.
//!
//! Deny by default. An embedded default policy (`default-policy.json`)
//! grants each standard plugin what its job needs; a policy file can replace
//! the entry of any plugin (narrow or widen it), pin it to a sha256, and
//! set its limits. A plugin without an entry gets nothing: it runs, and
//! every capability call it makes is `access-denied`.
//!
//! A plugin's [`Grant`] is resolved once, when its invocation context is
//! created, and copied into it; capability implementations ask the grant
//! and never decide on their own. What no policy can waive (the ownership
//! invariants of the host namespace) lives in `caps`, next to the calls.
//!
//! The policy file is `$WASMCNI_POLICY` if set, else
//! `/etc/wasmcni/policy.json` if it exists. It must belong to root (or the
//! user running wasmcni) and not be writable by group or others, and so
//! must every directory on its path (as given, and as resolved through
//! symlinks), or it is refused: a policy anyone can edit or replace grants
//! nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The documented default location of the policy file.
pub const DEFAULT_POLICY_FILE: &str = "/etc/wasmcni/policy.json";

/// The embedded default policy.
pub const EMBEDDED: &str = include_str!("default-policy.json");

/// The largest policy file wasmcni reads.
const MAX_POLICY_FILE: u64 = 1 << 20;

/// A kind of link a plugin may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkKind {
    /// A veth pair (both ends need the right in their namespaces).
    Veth,
    /// A bridge.
    Bridge,
    /// A dummy link.
    Dummy,
    /// A persistent tap device.
    Tap,
    /// A macvlan on a master link.
    Macvlan,
    /// An ipvlan on a master link.
    Ipvlan,
    /// An 802.1Q vlan on a master link.
    Vlan,
}

impl LinkKind {
    /// The kind's name, as in the policy file.
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::Veth => "veth",
            LinkKind::Bridge => "bridge",
            LinkKind::Dummy => "dummy",
            LinkKind::Tap => "tap",
            LinkKind::Macvlan => "macvlan",
            LinkKind::Ipvlan => "ipvlan",
            LinkKind::Vlan => "vlan",
        }
    }
}

/// A key of the network config that names a device of the node, as the
/// reference `host-device` plugin reads it. A grant's `config-links` lists
/// the keys whose device the plugin may take (move, change) although
/// wasmcni did not create it: the runtime's config, which the host reads
/// itself, names the device, not the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigKey {
    /// `device`: the link of that name.
    #[serde(rename = "device")]
    Device,
    /// `hwaddr`: the first link with that hardware address.
    #[serde(rename = "hwaddr")]
    Hwaddr,
    /// `kernelpath`: the network devices of that sysfs device
    /// (`<kernelpath>/net/`, below `/sys/devices/`).
    #[serde(rename = "kernelpath")]
    Kernelpath,
    /// `pciBusID`: the network devices of that PCI device
    /// (`/sys/bus/pci/devices/<id>/net/`, or its `virtio*/net/`).
    #[serde(rename = "pciBusID")]
    PciBusId,
    /// `runtimeConfig.deviceID`: as `pciBusID`, set by the runtime (e.g.
    /// an SR-IOV device plugin's allocation).
    #[serde(rename = "runtimeConfig.deviceID")]
    DeviceId,
}

impl ConfigKey {
    /// The key, as in the config and the policy file.
    pub fn name(self) -> &'static str {
        match self {
            ConfigKey::Device => "device",
            ConfigKey::Hwaddr => "hwaddr",
            ConfigKey::Kernelpath => "kernelpath",
            ConfigKey::PciBusId => "pciBusID",
            ConfigKey::DeviceId => "runtimeConfig.deviceID",
        }
    }
}

/// A name pattern: `*` matches any run of characters, everything else
/// itself (`cni*`, `net.ipv6.conf.*.accept_ra`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pattern(pub String);

impl Pattern {
    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        glob_match(self.0.as_bytes(), name.as_bytes())
    }
}

/// `*`-only glob matching, iterative with one backtrack point (linear in
/// practice, never exponential).
fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pat.len() && pat[p] == b'*' {
            star = Some((p, i));
            p += 1;
        } else if p < pat.len() && pat[p] == s[i] {
            p += 1;
            i += 1;
        } else if let Some((sp, si)) = star {
            p = sp + 1;
            i = si + 1;
            star = Some((sp, si + 1));
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// What a plugin may do in one namespace. Every field defaults to nothing.
///
/// # Capabilities
/// - `read`: list and look up links, addresses and routes.
/// - `create`: create links of these kinds here.
/// - `modify`: change links (up/down, mtu, mac, master, hairpin, promisc,
///   name, alias) and delete them. In the host namespace only links
///   wasmcni created or links matching `links`.
/// - `move`: move links out of and into this namespace.
/// - `links`: (host) names of links the plugin may modify although wasmcni
///   did not create them, e.g. `cni*` bridges.
/// - `masters`: names of links the plugin may use as the master of a
///   macvlan / ipvlan / vlan, and never change.
/// - `bridges`: (host) names of bridges made by someone else (an admin)
///   that the plugin's network may share as wasmcni's own network bridges
///   are shared: bring up, add an address, enslave its own links; never
///   change otherwise or delete. Only links of kind bridge qualify.
/// - `addresses`, `routes`: add and delete them (host: only on links the
///   plugin may modify; routes only wasmcni's own).
/// - `announce`: send gratuitous ARP for an address of a link.
/// - `sysctls`: keys (patterns) the plugin may read and write.
/// - `names`: (host) the names the links it creates, moves into the host
///   namespace or renames there may take (default `veth*`, `cni*`), so a
///   plugin cannot squat a name the node or another tool needs (`eth1`,
///   `docker0`).
/// - `prefixes`: (host) the networks the addresses it adds and the
///   destinations of the routes it adds or replaces must lie in, e.g. the
///   cluster's pod range. Empty: none, so a plugin given `routes` on the
///   host cannot steer the node's traffic with a broad route (`0.0.0.0/1`).
/// - `config-links`: (host) keys of the network config (`device`,
///   `hwaddr`, `kernelpath`, `pciBusID`, `runtimeConfig.deviceID`): during
///   ADD the plugin may take (move out) the one node device the config
///   names by the first of them it sets, picked as the reference
///   `host-device` picks it. The host reads the runtime's config itself
///   (a delegate gets its caller's runtime config, not the one its caller
///   hands it), so the plugin cannot widen it; this is how one default
///   entry serves every `host-device` network without naming any node
///   device. The device comes back through the attachment record, not by
///   name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct NsGrant {
    /// May list and look up links, addresses and routes.
    pub read: bool,
    /// Link kinds it may create here.
    pub create: Vec<LinkKind>,
    /// May change and delete links (host: only its own or `links`).
    pub modify: bool,
    /// May move links out of and into this namespace.
    #[serde(rename = "move")]
    pub move_links: bool,
    /// Links it may modify although wasmcni did not create them.
    pub links: Vec<Pattern>,
    /// Links it may use as a master, read-only.
    pub masters: Vec<Pattern>,
    /// (Host) bridges made by someone else that its network may share:
    /// bring up, give an address, enslave its own links; never change or
    /// delete.
    pub bridges: Vec<Pattern>,
    /// May add and delete addresses.
    pub addresses: bool,
    /// May add, replace and delete routes.
    pub routes: bool,
    /// May send gratuitous ARP.
    pub announce: bool,
    /// Sysctl keys it may read and write.
    pub sysctls: Vec<Pattern>,
    /// (Host) networks its addresses and route destinations must lie in.
    pub prefixes: Vec<ipnet::IpNet>,
    /// (Host) names the links it creates, moves in or renames may take;
    /// absent: [`DEFAULT_HOST_NAMES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<Pattern>>,
    /// (Host) config keys whose device it may take as if `links` named it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_links: Vec<ConfigKey>,
}

/// The names a plugin may give the links it creates, moves in or renames
/// in the host namespace when its grant has no `names`: host veth ends
/// (`veth` + random suffix, as the reference plugins name them) and `cni*`
/// bridges (`cni0`, podman's `cni-podman0`). Never a name the node's own
/// interfaces or other tools use (`eth*`, `docker0`, ...).
pub const DEFAULT_HOST_NAMES: &[&str] = &["veth*", "cni*"];

impl NsGrant {
    /// Whether links of `kind` may be created here.
    pub fn may_create(&self, kind: LinkKind) -> bool {
        self.create.contains(&kind)
    }

    /// Whether `name` matches one of the `links` patterns.
    pub fn names_link(&self, name: &str) -> bool {
        self.links.iter().any(|p| p.matches(name))
    }

    /// Whether `name` matches one of the `bridges` patterns.
    pub fn names_bridge(&self, name: &str) -> bool {
        self.bridges.iter().any(|p| p.matches(name))
    }

    /// Whether `name` matches one of the `masters` patterns.
    pub fn names_master(&self, name: &str) -> bool {
        self.masters.iter().any(|p| p.matches(name))
    }

    /// Whether `addr/len` lies inside one of the `prefixes`.
    pub fn covers(&self, addr: std::net::IpAddr, len: u8) -> bool {
        let Ok(net) = ipnet::IpNet::new(addr, len) else {
            return false;
        };
        self.prefixes.iter().any(|p| p.contains(&net.trunc()))
    }

    /// Whether a link this plugin makes in the host namespace may be
    /// called `name` (`names`, or [`DEFAULT_HOST_NAMES`]).
    pub fn may_name(&self, name: &str) -> bool {
        match &self.names {
            Some(patterns) => patterns.iter().any(|p| p.matches(name)),
            None => DEFAULT_HOST_NAMES
                .iter()
                .any(|p| Pattern((*p).to_owned()).matches(name)),
        }
    }

    /// The `names` patterns in effect, for messages.
    pub fn names_in_effect(&self) -> String {
        match &self.names {
            Some(patterns) => patterns
                .iter()
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            None => format!("{} (default)", DEFAULT_HOST_NAMES.join(", ")),
        }
    }

    /// Whether sysctl `key` matches one of the `sysctls` patterns.
    pub fn names_sysctl(&self, key: &str) -> bool {
        self.sysctls.iter().any(|p| p.matches(key))
    }
}

/// One plugin's entry in a policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Entry {
    /// If set, only a plugin with this sha256 (lowercase hex) may run.
    pub sha256: Option<String>,
    /// Wall-clock deadline in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Linear-memory cap in MiB.
    pub memory_mb: Option<u64>,
    /// Most capability calls one invocation may make.
    pub host_calls: Option<u64>,
    /// Rights in the container's namespace.
    pub container: NsGrant,
    /// Rights in the node's namespace; none means the plugin cannot even
    /// obtain a handle to it.
    pub host: Option<NsGrant>,
    /// Directories under which it may keep IPAM state (`ipam-store`);
    /// none: no IPAM state at all.
    pub ipam_roots: Vec<PathBuf>,
    /// Plugins it may run as delegates (in-process, as wasm).
    pub delegates: Vec<String>,
    /// Native plugins from `CNI_PATH` it may run as delegates (for those
    /// that cannot be wasm, like `dhcp`).
    pub native_delegates: Vec<String>,
}

/// A policy document: an entry per plugin name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Entries by plugin name.
    pub plugins: BTreeMap<String, Entry>,
    /// The names whose entry comes from the policy file (the others are
    /// embedded defaults, which apply to the bundled plugins only).
    #[serde(skip)]
    pub from_file: std::collections::BTreeSet<String>,
}

/// Everything a plugin may do in one invocation.
///
/// # Capabilities
/// This value *is* the plugin's authority: `container` applies in the
/// namespace from `CNI_NETNS`, `host` in the node's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    /// Rights in the container's namespace.
    pub container: NsGrant,
    /// Rights in the node's namespace, if any.
    pub host: Option<NsGrant>,
    /// Most capability calls one invocation may make.
    pub host_calls: u64,
    /// Directories under which it may keep IPAM state.
    pub ipam_roots: Vec<PathBuf>,
    /// Plugins it may run in-process as delegates.
    pub delegates: Vec<String>,
    /// Native plugins it may run as delegates.
    pub native_delegates: Vec<String>,
}

/// The default budget of capability calls per invocation.
pub const DEFAULT_HOST_CALLS: u64 = 10_000;

/// Why a policy could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("policy file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not ours, or others may write it.
    #[error("policy file {path} is not trusted: {why}")]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The document is malformed.
    #[error("policy {origin}: {msg}")]
    Invalid {
        /// Where it came from.
        origin: String,
        /// What is wrong (serde names the field and position).
        msg: String,
    },
}

impl Policy {
    /// Parses a policy document.
    pub fn parse(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        // The error names the field it is about (`plugins.x.host.prefixes[0]`).
        let de = &mut serde_json::Deserializer::from_str(text);
        let policy: Policy =
            serde_path_to_error::deserialize(de).map_err(|e| PolicyError::Invalid {
                origin: origin.to_owned(),
                msg: e.to_string(),
            })?;
        for (name, entry) in &policy.plugins {
            if let Some(pin) = &entry.sha256 {
                if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(PolicyError::Invalid {
                        origin: origin.to_owned(),
                        msg: format!("plugins.{name}.sha256 must be 64 hex digits, got {pin:?}"),
                    });
                }
            }
            for (i, root) in entry.ipam_roots.iter().enumerate() {
                let plain = root.is_absolute()
                    && root.components().all(|c| {
                        matches!(
                            c,
                            std::path::Component::RootDir | std::path::Component::Normal(_)
                        )
                    });
                if !plain {
                    return Err(PolicyError::Invalid {
                        origin: origin.to_owned(),
                        msg: format!(
                            "plugins.{name}.ipam-roots[{i}] must be an absolute path without `.` or `..`, got {root:?}"
                        ),
                    });
                }
            }
            for (field, list) in [
                ("delegates", &entry.delegates),
                ("native-delegates", &entry.native_delegates),
            ] {
                if let Some((i, bad)) = list
                    .iter()
                    .enumerate()
                    .find(|(_, d)| !crate::plugins::valid_name(d))
                {
                    return Err(PolicyError::Invalid {
                        origin: origin.to_owned(),
                        msg: format!("plugins.{name}.{field}[{i}]: invalid plugin name {bad:?}"),
                    });
                }
            }
            for (field, value) in [
                ("deadline-ms", entry.deadline_ms),
                ("memory-mb", entry.memory_mb),
                ("host-calls", entry.host_calls),
            ] {
                if value == Some(0) {
                    return Err(PolicyError::Invalid {
                        origin: origin.to_owned(),
                        msg: format!("plugins.{name}.{field} must be positive"),
                    });
                }
            }
        }
        Ok(policy)
    }

    /// The embedded default policy.
    pub fn embedded() -> Policy {
        // The embedded document is checked by a unit test; an error here
        // would be a build defect, so fall back to denying everything.
        Policy::parse(EMBEDDED, "embedded").unwrap_or_default()
    }

    /// The effective policy: the embedded one, with every entry of the
    /// policy file (`file` (`--policy`), else `$WASMCNI_POLICY`, else
    /// [`DEFAULT_POLICY_FILE`] if it exists) replacing the embedded entry of
    /// the same plugin. A file named explicitly must exist.
    pub fn load(file: Option<&Path>) -> Result<Policy, PolicyError> {
        let mut policy = Policy::embedded();
        let (path, required) = match (file, std::env::var_os("WASMCNI_POLICY")) {
            (Some(f), _) => (f.to_owned(), true),
            (None, Some(p)) => (PathBuf::from(p), true),
            (None, None) => (PathBuf::from(DEFAULT_POLICY_FILE), false),
        };
        if let Some(file) = read_trusted(&path, required)? {
            let overlay = Policy::parse(&file, &path.display().to_string())?;
            policy.from_file.extend(overlay.plugins.keys().cloned());
            policy.plugins.extend(overlay.plugins);
        }
        Ok(policy)
    }

    /// The entry for plugin `name` (deny-all if none).
    pub fn entry(&self, name: &str) -> Entry {
        self.plugins.get(name).cloned().unwrap_or_default()
    }

    /// The entry for a plugin: the policy file's if it names it; else the
    /// embedded default, but only for the plugin carried in wasmcni (a
    /// `bridge.wasm` from elsewhere does not inherit the standard bridge's
    /// grant); else deny-all.
    pub fn entry_for(&self, name: &str, bundled: bool) -> Entry {
        if self.from_file.contains(name) || bundled {
            self.entry(name)
        } else {
            Entry::default()
        }
    }
}

impl Entry {
    /// The grant this entry gives.
    pub fn grant(&self) -> Grant {
        Grant {
            container: self.container.clone(),
            host: self.host.clone(),
            host_calls: self.host_calls.unwrap_or(DEFAULT_HOST_CALLS),
            ipam_roots: self.ipam_roots.clone(),
            delegates: self.delegates.clone(),
            native_delegates: self.native_delegates.clone(),
        }
    }

    /// Refuses a plugin whose sha256 differs from the pin.
    pub fn check_pin(&self, sha256: &str) -> Result<(), String> {
        match &self.sha256 {
            Some(pin) if !pin.eq_ignore_ascii_case(sha256) => Err(format!(
                "its sha256 is {sha256} but the policy pins it to {pin}"
            )),
            _ => Ok(()),
        }
    }
}

/// Reads a policy file if it is trusted. A missing file is `None` unless
/// `required`.
fn read_trusted(path: &Path, required: bool) -> Result<Option<String>, PolicyError> {
    let io = |source| PolicyError::Io {
        path: path.to_owned(),
        source,
    };
    let untrusted = |why: String| PolicyError::Untrusted {
        path: path.to_owned(),
        why,
    };
    // As sshd's StrictModes: whoever can write a directory on the way to
    // the file can replace it (or a symlink to it), so every directory the
    // path passes through, following each symlink, must be as trusted as
    // the file; checked before the file is opened.
    let absolute = std::path::absolute(path).map_err(io)?;
    let real = match resolve_trusted(&absolute) {
        Ok(p) => p,
        Err(Resolve::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && !required => {
            return Ok(None)
        }
        Err(Resolve::Io(e)) => return Err(io(e)),
        Err(Resolve::Untrusted(why)) => return Err(untrusted(why)),
    };
    // Never blocks (a FIFO), never follows a symlink put there since.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(&real)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(untrusted("not a regular file".into()));
    }
    trusted_owner("the file", meta.uid(), meta.mode()).map_err(untrusted)?;
    if meta.len() > MAX_POLICY_FILE {
        return Err(untrusted(format!("larger than {MAX_POLICY_FILE} bytes")));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_POLICY_FILE), &mut text)
        .map_err(io)?;
    Ok(Some(text))
}

/// Why a path could not be resolved.
enum Resolve {
    Io(std::io::Error),
    Untrusted(String),
}

/// Resolves absolute `path` component by component, following symlinks
/// (at most 40), and checks every directory it passes through, those a
/// symlink leads through included. Returns the path without symlinks.
fn resolve_trusted(path: &Path) -> Result<PathBuf, Resolve> {
    use std::path::Component;
    let mut pending: Vec<std::ffi::OsString> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut at = PathBuf::from("/");
    let mut hops = 0;
    let check_dir = |dir: &Path| -> Result<(), Resolve> {
        let meta = std::fs::metadata(dir).map_err(Resolve::Io)?;
        trusted_owner(
            &format!("directory {}", dir.display()),
            meta.uid(),
            meta.mode(),
        )
        .map_err(Resolve::Untrusted)
    };
    check_dir(&at)?;
    while let Some(name) = pending.pop() {
        if name == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let meta = std::fs::symlink_metadata(&next).map_err(Resolve::Io)?;
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                return Err(Resolve::Untrusted("too many symlinks".into()));
            }
            let target = std::fs::read_link(&next).map_err(Resolve::Io)?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            for c in target.components().rev() {
                match c {
                    Component::Normal(n) => pending.push(n.to_owned()),
                    Component::ParentDir => pending.push("..".into()),
                    _ => {}
                }
            }
            continue;
        }
        at = next;
        if meta.is_dir() {
            check_dir(&at)?;
        }
    }
    Ok(at)
}

/// Whether `uid` and `mode` are those of a file only root (or the user
/// running wasmcni) can change; the reason if not.
fn trusted_owner(what: &str, uid: u32, mode: u32) -> Result<(), String> {
    let euid = nix::unistd::geteuid().as_raw();
    if uid != 0 && uid != euid {
        return Err(format!("{what} is owned by uid {uid}"));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "{what} is writable by group or others (mode {:o})",
            mode & 0o7777
        ));
    }
    Ok(())
}

impl fmt::Display for NsGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        let mut flag = |on: bool, name: &str| {
            if on {
                parts.push(name.to_owned());
            }
        };
        flag(self.read, "read");
        flag(self.modify, "modify");
        flag(self.move_links, "move");
        flag(self.addresses, "addresses");
        flag(self.routes, "routes");
        flag(self.announce, "announce");
        let list = |v: &[Pattern]| {
            v.iter()
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.create.is_empty() {
            let kinds: Vec<&str> = self.create.iter().map(|k| k.name()).collect();
            parts.push(format!("create [{}]", kinds.join(", ")));
        }
        if !self.links.is_empty() {
            parts.push(format!("links [{}]", list(&self.links)));
        }
        if !self.masters.is_empty() {
            parts.push(format!("masters [{}]", list(&self.masters)));
        }
        if !self.bridges.is_empty() {
            parts.push(format!("bridges [{}]", list(&self.bridges)));
        }
        if !self.sysctls.is_empty() {
            parts.push(format!("sysctls [{}]", list(&self.sysctls)));
        }
        if !self.prefixes.is_empty() {
            let p: Vec<String> = self.prefixes.iter().map(|p| p.to_string()).collect();
            parts.push(format!("prefixes [{}]", p.join(", ")));
        }
        if let Some(names) = &self.names {
            parts.push(format!("names [{}]", list(names)));
        }
        if !self.config_links.is_empty() {
            let keys: Vec<&str> = self.config_links.iter().map(|k| k.name()).collect();
            parts.push(format!("config-links [{}]", keys.join(", ")));
        }
        if parts.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_policy_parses() {
        let p = Policy::parse(EMBEDDED, "embedded").expect("embedded policy");
        assert!(p.plugins.contains_key("loopback"));
    }

    #[test]
    fn loopback_gets_nothing_on_the_host() {
        let g = Policy::embedded().entry("loopback").grant();
        assert!(g.host.is_none());
        assert!(g.container.modify && g.container.read);
        assert!(g.container.create.is_empty());
    }

    #[test]
    fn embedded_grants_only_go_to_bundled_plugins() {
        let p = Policy::embedded();
        assert!(p.entry_for("loopback", true).container.modify);
        assert_eq!(p.entry_for("loopback", false), Entry::default());
        let mut q = p.clone();
        q.from_file.insert("loopback".into());
        assert!(q.entry_for("loopback", false).container.modify);
    }

    #[test]
    fn unknown_plugins_get_nothing() {
        let g = Policy::embedded().entry("third-party").grant();
        assert_eq!(g.container, NsGrant::default());
        assert!(g.host.is_none());
    }

    #[test]
    fn patterns() {
        let p = |s: &str| Pattern(s.to_owned());
        assert!(p("cni*").matches("cni0"));
        assert!(p("cni*").matches("cni"));
        assert!(!p("cni*").matches("eth0"));
        assert!(p("net.ipv6.conf.*.accept_ra").matches("net.ipv6.conf.veth1.accept_ra"));
        assert!(!p("net.ipv6.conf.*.accept_ra").matches("net.ipv6.conf.veth1.forwarding"));
        assert!(p("*").matches(""));
        assert!(p("a*b*c").matches("aXXbYYc"));
        assert!(!p("a*b*c").matches("aXXbYY"));
        assert!(p("eth0").matches("eth0") && !p("eth0").matches("eth01"));
        // Pathological input stays fast.
        let long = "a".repeat(10_000);
        assert!(!p("*a*a*a*a*a*b").matches(&long));
    }

    #[test]
    fn malformed_policies_name_the_field() {
        let e = Policy::parse(r#"{"plugins":{"x":{"container":{"raed":true}}}}"#, "t")
            .expect_err("unknown field");
        assert!(e.to_string().contains("raed"), "{e}");
        let e = Policy::parse(r#"{"plugins":{"x":{"sha256":"abc"}}}"#, "t").expect_err("pin");
        assert!(e.to_string().contains("plugins.x.sha256"), "{e}");
        let e = Policy::parse(r#"{"plugins":{"x":{"host-calls":0}}}"#, "t").expect_err("zero");
        assert!(e.to_string().contains("host-calls"), "{e}");
        let e = Policy::parse(
            r#"{"plugins":{"x":{"container":{"create":["vxlan"]}}}}"#,
            "t",
        )
        .expect_err("kind");
        assert!(e.to_string().contains("vxlan"), "{e}");
    }

    #[test]
    fn prefixes_cover_only_what_lies_inside() {
        let g: NsGrant = serde_json::from_str(r#"{"prefixes": ["10.22.0.0/16", "fd00:22::/48"]}"#)
            .expect("grant");
        let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("ip");
        assert!(g.covers(ip("10.22.3.4"), 24));
        assert!(g.covers(ip("10.22.0.1"), 32));
        assert!(!g.covers(ip("10.22.0.0"), 15));
        assert!(!g.covers(ip("0.0.0.0"), 1));
        assert!(!g.covers(ip("10.23.0.1"), 32));
        assert!(g.covers(ip("fd00:22::1"), 64));
        assert!(!g.covers(ip("fd00:23::1"), 64));
        assert!(!NsGrant::default().covers(ip("10.22.0.1"), 32));
        let e = Policy::parse(
            r#"{"plugins":{"x":{"host":{"prefixes":["10.0.0.0/33"]}}}}"#,
            "t",
        )
        .expect_err("bad prefix");
        assert!(e.to_string().contains("plugins.x.host.prefixes[0]"), "{e}");
    }

    #[test]
    fn pins() {
        let mut e = Entry::default();
        assert!(e.check_pin("ab").is_ok());
        e.sha256 = Some("AB".repeat(32));
        assert!(e.check_pin(&"ab".repeat(32)).is_ok());
        assert!(e.check_pin(&"cd".repeat(32)).is_err());
    }
}

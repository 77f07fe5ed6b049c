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
//!
//! Entries may also be files of their own: `$WASMCNI_POLICY_DIR`, else
//! `/etc/wasmcni/policy.d` if it exists, holds `NAME.json`, plugin
//! `NAME`'s entry (the object that would be `plugins.NAME` of the policy
//! file), as package managers drop them; the directory is checked as the
//! file is, and so is each entry file. Each entry is parsed when its plugin
//! runs: an invalid one (a typo, a bad pin, bad JSON, an untrusted file, or
//! an entry in both places) refuses that plugin alone, with an error naming
//! the file and the field; every other plugin runs.

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The documented default location of the policy file.
pub const DEFAULT_POLICY_FILE: &str = "/etc/wasmcni/policy.json";

/// The documented default location of the policy directory.
pub const DEFAULT_POLICY_DIR: &str = "/etc/wasmcni/policy.d";

/// The most entries wasmcni reads in the policy directory.
const MAX_POLICY_DIR_FILES: usize = 4096;

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
    /// A VRF device (an L3 master bound to a routing table).
    Vrf,
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
            LinkKind::Vrf => "vrf",
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
/// - `traffic-control`: install and remove rate limits (`tbf` qdiscs, an
///   `ingress` qdisc redirecting to this attachment's `ifb`) on links (host:
///   only links the plugin may modify; only this attachment's `ifb`).
/// - `firewall`: (host) the nftables rules it may install for its
///   attachment, by kind ([`FirewallGrant`]); always in wasmcni's own
///   tables, tagged with the attachment, removed only by its DEL or GC.
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
/// - `config-vlans`: `link.set-port-vlans` may put a port into a VLAN it is
///   not in only if the network config names that VLAN, as the reference
///   `bridge` plugin reads it: `vlan`, every VLAN of `vlanTrunk` (`id`,
///   `minID`..`maxID`), and VLAN 1 when `vlanTrunk` names VLANs and `vlan`
///   is 0 (the trunk's native VLAN); a config the reference refuses names
///   none. The port may always keep (and re-flag) or leave VLANs it is in
///   (the bridge's default PVID the kernel gives a new port). Read by the
///   host from the runtime's config as `config-links` is (a delegate gets
///   its caller's runtime config), so a plugin on a bridge other networks'
///   or tenants' ports share cannot reach their VLANs. Without it, no new
///   VLAN at all.
/// - `adopt-peer` (host): the host end of the attachment's veth — the peer
///   of the link `CNI_IFNAME` in `CNI_NETNS`, when that is a veth whose
///   other end the kernel places in the host namespace (its
///   `IFLA_LINK_NETNSID` is the host's, asked of the kernel; never read from
///   `prevResult`) — is the plugin's to change as if `links` named it,
///   although a native plugin made it. For a wasmcni plugin chained after
///   the reference `bridge` or `ptp` (bandwidth shaping its host veth,
///   tuning, firewall). Only that one link: not the bridge it is enslaved
///   to, not another attachment's; it is not the attachment's to delete at
///   DEL (the plugin that made it does that), and nothing records it.
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
    /// May install and remove rate limits (`traffic-control`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub traffic_control: bool,
    /// (Host) nftables rules it may install for its attachment
    /// (`firewall`).
    #[serde(skip_serializing_if = "FirewallGrant::is_empty")]
    pub firewall: FirewallGrant,
    /// (Host) networks its addresses and route destinations must lie in.
    pub prefixes: Vec<ipnet::IpNet>,
    /// (Host) names the links it creates, moves in or renames may take;
    /// absent: [`DEFAULT_HOST_NAMES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<Pattern>>,
    /// (Host) config keys whose device it may take as if `links` named it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_links: Vec<ConfigKey>,
    /// May put its ports into the VLANs the network config names.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub config_vlans: bool,
    /// (Host) The host end of the attachment's veth counts as the
    /// attachment's link although wasmcni did not create it: for a plugin
    /// chained after a native plugin that made the pair (bandwidth,
    /// tuning, firewall after the reference bridge or ptp).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub adopt_peer: bool,
}

/// Which firewall rules a plugin may install for its attachment (in the
/// host grant). Every field defaults to nothing.
///
/// # Capabilities
/// - `port-mappings`: DNAT of local host ports to the attachment's address
///   (only traffic to an address of the node), with hairpin and localhost
///   masquerading (and `route_localnet` on the interface towards it).
/// - `masquerade`: masquerade the attachment's address (ipMasq).
/// - `forward`: mark the attachment's forwarded traffic with
///   `forward-mark` (default `0x1000`), which wasmcni's FORWARD accept
///   lets through.
/// - `isolation`: isolate a bridge the attachment uses from other
///   isolated bridges.
/// - `mac-spoof`: drop frames from the attachment's host link whose source
///   MAC is not the container's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct FirewallGrant {
    /// May map host ports.
    pub port_mappings: bool,
    /// May masquerade.
    pub masquerade: bool,
    /// May allow forwarding.
    pub forward: bool,
    /// May isolate bridges.
    pub isolation: bool,
    /// May install MAC spoof checks.
    pub mac_spoof: bool,
    /// The mark bit(s) `forward` sets (none or 0: `0x1000`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward_mark: Option<u32>,
}

impl FirewallGrant {
    /// Whether it grants nothing.
    pub fn is_empty(&self) -> bool {
        *self == FirewallGrant::default()
    }
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
    /// Most links one invocation may keep of those it created, both
    /// namespaces together, each end of a veth pair counted (absent:
    /// [`DEFAULT_MAX_LINKS`]). Every link a plugin makes is the host's to
    /// remove at the attachment's DEL or GC, which holds up every other
    /// call of the network; the bound keeps that work small.
    pub max_links: Option<u32>,
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
    /// Whether it may keep a record per attachment (`attachment-state`).
    pub attachment_state: bool,
    /// Addresses the operator vouches for as the attachment's own (S13),
    /// beside those the host saw reserved for it or given by the
    /// runtime's config: for an IPAM the host cannot see (a native
    /// `dhcp`), or a chain whose addresses come from a plugin that is not
    /// wasmcni's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub static_ranges: Vec<ipnet::IpNet>,
}

/// Where a plugin's policy entry comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The embedded default policy (it applies to the bundled plugin of
    /// that name only).
    Embedded,
    /// `plugins.NAME` of the policy file.
    File(PathBuf),
    /// `NAME.json` in the policy directory.
    Dir(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Embedded => f.write_str("embedded default"),
            Source::File(p) | Source::Dir(p) => write!(f, "{}", p.display()),
        }
    }
}

/// An entry of the policy file or directory, as loaded: parsed and
/// checked only when its plugin asks for it, so that a broken entry
/// breaks that plugin alone.
#[derive(Debug, Clone, PartialEq)]
enum Overlay {
    /// `plugins.NAME` of the policy file: its JSON.
    File { path: PathBuf, value: Value },
    /// `NAME.json` in the policy directory (read when asked for).
    Dir { path: PathBuf },
    /// Both: ambiguous, so the plugin gets nothing and is refused.
    Both { file: PathBuf, dir: PathBuf },
}

/// The effective policy: the embedded defaults, the policy file's entries
/// and the policy directory's, by plugin name. Entries are kept as JSON
/// and parsed when a plugin's entry is asked for ([`Policy::resolve`]):
/// a run parses only its own plugin's entry, and a typo in one entry
/// refuses that plugin only.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// The embedded (or parsed-document) entries, applying to bundled
    /// plugins only: each its JSON text, parsed when asked for.
    embedded: BTreeMap<String, String>,
    /// The policy file's and directory's entries, applying to any plugin
    /// of that name.
    overlay: BTreeMap<String, Overlay>,
    /// `*.json` files in the policy directory whose stem is not a plugin
    /// name (ignored; `wasmcni list` reports them).
    stray: Vec<PathBuf>,
}

/// A policy document: each entry as `T`, its JSON text
/// (`&RawValue`, [`parse_document`]) or its value ([`entry_values`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document<T> {
    plugins: BTreeMap<String, T>,
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
    /// Most links one invocation may keep of those it created.
    pub max_links: u32,
    /// Directories under which it may keep IPAM state.
    pub ipam_roots: Vec<PathBuf>,
    /// Plugins it may run in-process as delegates.
    pub delegates: Vec<String>,
    /// Native plugins it may run as delegates.
    pub native_delegates: Vec<String>,
    /// Whether it may keep a record per attachment.
    pub attachment_state: bool,
    /// Addresses the operator vouches for as any attachment's own.
    pub static_ranges: Vec<ipnet::IpNet>,
}

/// The default budget of capability calls per invocation.
pub const DEFAULT_HOST_CALLS: u64 = 10_000;

/// The default bound on the links one invocation keeps of those it
/// created (`max-links`). The standard plugins make at most three per ADD
/// (bridge: the bridge and a veth pair; ptp: a pair; bandwidth: an ifb;
/// macvlan, ipvlan, vlan, dummy, tap, vrf: one), a chain member counting
/// its own: 16 leaves them five times that, and makes a hostile plugin's
/// cleanup a matter of a few kernel batches.
pub const DEFAULT_MAX_LINKS: u32 = 16;

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
    /// A plugin has an entry in the policy file and in the policy
    /// directory.
    #[error("policy: plugin {name:?} has an entry both in {} (plugins.{name}) and in {}; remove one", file.display(), dir.display())]
    Ambiguous {
        /// The plugin.
        name: String,
        /// The policy file.
        file: PathBuf,
        /// Its file in the policy directory.
        dir: PathBuf,
    },
}

impl Policy {
    /// Parses a policy document and checks every entry in it (the first
    /// bad one is the error). The entries apply to the bundled plugins of
    /// their names, as the embedded defaults do.
    pub fn parse(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        let embedded = parse_document(text, origin)?;
        for (name, value) in &entry_values(&embedded, text, origin)? {
            Entry::from_value(name, value, origin)?;
        }
        Ok(Policy {
            embedded,
            ..Policy::default()
        })
    }

    /// The embedded default policy.
    pub fn embedded() -> Policy {
        // Only the top level is parsed here (every run pays for it; parsing
        // every entry was 7% of a warm loopback run's instructions); each
        // entry is parsed when asked for. The whole document is checked by
        // a unit test; an error here would be a build defect, so fall back
        // to denying everything.
        Policy {
            embedded: parse_document(EMBEDDED, "embedded").unwrap_or_default(),
            ..Policy::default()
        }
    }

    /// The effective policy: the embedded one, with every entry of the
    /// policy file (`file` (`--policy`), else `$WASMCNI_POLICY`, else
    /// [`DEFAULT_POLICY_FILE`] if it exists) and every `NAME.json` of the
    /// policy directory ([`policy_dir`]) replacing the embedded entry of
    /// the same plugin. A file or directory named explicitly must exist.
    ///
    /// Errors here refuse every plugin: a policy file that is untrusted,
    /// not JSON, or has unknown top-level fields; a policy directory that
    /// is untrusted or unreadable. An entry's own errors (its fields, its
    /// file's trust, its JSON; a plugin with an entry in both places) are
    /// reported by [`Policy::resolve`] for that plugin alone.
    pub fn load(file: Option<&Path>) -> Result<Policy, PolicyError> {
        let mut policy = Policy::embedded();
        let (path, required) = match (file, &crate::config::get().policy) {
            (Some(f), _) => (f.to_owned(), true),
            (None, Some(p)) => (p.clone(), true),
            (None, None) => (PathBuf::from(DEFAULT_POLICY_FILE), false),
        };
        if let Some(text) = read_trusted(&path, required)? {
            let origin = path.display().to_string();
            let entries = parse_document(&text, &origin)?;
            for (name, value) in entry_values(&entries, &text, &origin)? {
                policy.overlay.insert(
                    name,
                    Overlay::File {
                        path: path.clone(),
                        value,
                    },
                );
            }
        }
        let explicit = crate::config::get().policy_dir.is_some();
        if let Some(dir) = policy_dir() {
            policy.add_dir(&dir, explicit)?;
        }
        Ok(policy)
    }

    /// Adds the entries of policy directory `dir` (each `NAME.json` is
    /// only noted here, and read when asked for).
    fn add_dir(&mut self, dir: &Path, required: bool) -> Result<(), PolicyError> {
        let io = |source| PolicyError::Io {
            path: dir.to_owned(),
            source,
        };
        let absolute = std::path::absolute(dir).map_err(io)?;
        let real = match resolve_trusted(&absolute) {
            Ok(p) => p,
            Err(Resolve::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(())
            }
            Err(Resolve::Io(e)) => return Err(io(e)),
            Err(Resolve::Untrusted(why)) => {
                return Err(PolicyError::Untrusted {
                    path: dir.to_owned(),
                    why,
                })
            }
        };
        // resolve_trusted checked it, if it is a directory.
        if !std::fs::metadata(&real).map_err(io)?.is_dir() {
            return Err(PolicyError::Untrusted {
                path: dir.to_owned(),
                why: "not a directory".into(),
            });
        }
        for (n, item) in std::fs::read_dir(&real).map_err(io)?.enumerate() {
            if n >= MAX_POLICY_DIR_FILES {
                return Err(PolicyError::Untrusted {
                    path: dir.to_owned(),
                    why: format!("holds more than {MAX_POLICY_DIR_FILES} files"),
                });
            }
            let item = item.map_err(io)?;
            let file_name = item.file_name();
            let Some(stem) = file_name.to_str().and_then(|f| f.strip_suffix(".json")) else {
                continue;
            };
            let path = absolute.join(&file_name);
            if !crate::plugins::valid_name(stem) {
                self.stray.push(path);
                continue;
            }
            let slot = match self.overlay.remove(stem) {
                Some(Overlay::File { path: file, .. }) => Overlay::Both { file, dir: path },
                _ => Overlay::Dir { path },
            };
            self.overlay.insert(stem.to_owned(), slot);
        }
        self.stray.sort();
        Ok(())
    }

    /// The entry for plugin `name`, checked: the policy file's or the
    /// policy directory's if either names it; else the embedded default,
    /// but only for the plugin carried in wasmcni (`bundled`: a
    /// `bridge.wasm` from elsewhere does not inherit the standard bridge's
    /// grant); else deny-all. An entry that is invalid, in an untrusted
    /// file, or defined in both places is an error for this plugin.
    pub fn resolve(&self, name: &str, bundled: bool) -> Result<Entry, PolicyError> {
        match self.overlay.get(name) {
            Some(Overlay::File { path, value }) => {
                Entry::from_value(name, value, &path.display().to_string())
            }
            Some(Overlay::Dir { path }) => read_entry_file(name, path),
            Some(Overlay::Both { file, dir }) => Err(PolicyError::Ambiguous {
                name: name.to_owned(),
                file: file.clone(),
                dir: dir.clone(),
            }),
            None => match self.embedded.get(name) {
                Some(text) if bundled => entry_from_text(name, text, "embedded"),
                _ => Ok(Entry::default()),
            },
        }
    }

    /// Where the entry [`Policy::resolve`] would use comes from; `None`:
    /// there is none, and the plugin has no authority.
    pub fn source(&self, name: &str, bundled: bool) -> Option<Source> {
        match self.overlay.get(name) {
            Some(Overlay::File { path, .. }) => Some(Source::File(path.clone())),
            Some(Overlay::Dir { path }) | Some(Overlay::Both { dir: path, .. }) => {
                Some(Source::Dir(path.clone()))
            }
            None if bundled && self.embedded.contains_key(name) => Some(Source::Embedded),
            None => None,
        }
    }

    /// Every plugin name with an entry (embedded, file or directory).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .embedded
            .keys()
            .chain(self.overlay.keys())
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// `*.json` files in the policy directory whose stem is not a valid
    /// plugin name: they apply to nothing.
    pub fn stray_files(&self) -> &[PathBuf] {
        &self.stray
    }

    /// The entry for plugin `name` as if it were bundled (deny-all if it
    /// has none, or an invalid one).
    pub fn entry(&self, name: &str) -> Entry {
        self.resolve(name, true).unwrap_or_default()
    }

    /// [`Policy::resolve`], with an invalid entry giving nothing (deny-all)
    /// instead of an error. Runs use `resolve`, which refuses such a plugin.
    pub fn entry_for(&self, name: &str, bundled: bool) -> Entry {
        self.resolve(name, bundled).unwrap_or_default()
    }
}

/// Parses the top level of a policy document: JSON, and an object with
/// exactly `plugins`, itself an object.
/// Each entry is kept as its JSON text (checked as JSON, not parsed).
fn parse_document(text: &str, origin: &str) -> Result<BTreeMap<String, String>, PolicyError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let doc: Document<&serde_json::value::RawValue> = serde_path_to_error::deserialize(de)
        .map_err(|e| PolicyError::Invalid {
            origin: origin.to_owned(),
            msg: e.to_string(),
        })?;
    Ok(doc
        .plugins
        .into_iter()
        .map(|(name, raw)| (name, raw.get().to_owned()))
        .collect())
}

/// The entries of document `text` ([`parse_document`]'s `entries`) as
/// values. The top-level read checks an entry's syntax but lets through
/// what only a full parse refuses (a number out of range, a lone
/// surrogate); such a document fails with the full parse's own error: the
/// path of the value and its position in the document.
fn entry_values(
    entries: &BTreeMap<String, String>,
    text: &str,
    origin: &str,
) -> Result<BTreeMap<String, Value>, PolicyError> {
    let values: Result<BTreeMap<String, Value>, _> = entries
        .iter()
        .map(|(name, entry)| serde_json::from_str(entry).map(|v| (name.clone(), v)))
        .collect();
    values.map_err(|e| {
        let de = &mut serde_json::Deserializer::from_str(text);
        let msg = match serde_path_to_error::deserialize::<_, Document<Value>>(de) {
            Err(full) => full.to_string(),
            // Not expected: the entry's own error.
            Ok(_) => format!("plugins: {e}"),
        };
        PolicyError::Invalid {
            origin: origin.to_owned(),
            msg,
        }
    })
}

/// An embedded entry's JSON text ([`parse_document`]), parsed and checked
/// (the whole embedded document is checked by a unit test).
fn entry_from_text(name: &str, text: &str, origin: &str) -> Result<Entry, PolicyError> {
    let value: Value = serde_json::from_str(text).map_err(|e| PolicyError::Invalid {
        origin: origin.to_owned(),
        msg: format!("plugins.{name}: {e}"),
    })?;
    Entry::from_value(name, &value, origin)
}

/// Reads and checks `NAME.json` of the policy directory (as a run does:
/// a file others could write is refused).
pub fn read_entry_file(name: &str, path: &Path) -> Result<Entry, PolicyError> {
    let origin = path.display().to_string();
    // Present when the directory was listed; gone since is an error too.
    let text = read_trusted(path, true)?.unwrap_or_default();
    let value: Value = serde_json::from_str(&text).map_err(|e| PolicyError::Invalid {
        origin: origin.clone(),
        msg: format!("plugins.{name}: not a JSON object: {e}"),
    })?;
    Entry::from_value(name, &value, &origin)
}

/// The policy directory: `$WASMCNI_POLICY_DIR` if set (it must then
/// exist), else [`DEFAULT_POLICY_DIR`] if it exists, else none. Each
/// `NAME.json` in it holds plugin `NAME`'s entry (the object that would be
/// `plugins.NAME` in the policy file), as package managers drop files.
pub fn policy_dir() -> Option<PathBuf> {
    match &crate::config::get().policy_dir {
        Some(d) => Some(d.clone()),
        None => {
            let d = Path::new(DEFAULT_POLICY_DIR);
            d.exists().then(|| d.to_owned())
        }
    }
}

/// Writes plugin `name`'s entry into policy directory `dir` as
/// `NAME.json` (creating `dir`, mode 0755, if missing): `entry_json` (the
/// object that would be `plugins.NAME` in the policy file) with its
/// `sha256` pin set to `sha256`, checked as a run would check it, written
/// atomically (temporary file, then rename) with mode 0644, owned by the
/// user running wasmcni (root on a node). The directory must be trusted
/// as [`Policy::load`] requires, or nothing is written. Returns the path.
pub fn write_entry_file(
    dir: &Path,
    name: &str,
    entry_json: &Value,
    sha256: &str,
) -> Result<PathBuf, PolicyError> {
    let path = dir.join(format!("{name}.json"));
    let origin = path.display().to_string();
    let invalid = |msg: String| PolicyError::Invalid {
        origin: origin.clone(),
        msg,
    };
    if !crate::plugins::valid_name(name) {
        return Err(invalid(format!("invalid plugin name {name:?}")));
    }
    let Value::Object(mut map) = entry_json.clone() else {
        return Err(invalid(format!("plugins.{name} must be a JSON object")));
    };
    map.insert("sha256".into(), Value::from(sha256.to_ascii_lowercase()));
    let value = Value::Object(map);
    Entry::from_value(name, &value, &origin)?;
    let io = |p: &Path| {
        let p = p.to_owned();
        move |source| PolicyError::Io { path: p, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(io(dir))?;
    let absolute = std::path::absolute(dir).map_err(io(dir))?;
    match resolve_trusted(&absolute) {
        Ok(_) => {}
        Err(Resolve::Io(e)) => return Err(io(dir)(e)),
        Err(Resolve::Untrusted(why)) => {
            return Err(PolicyError::Untrusted {
                path: dir.to_owned(),
                why,
            })
        }
    }
    let mut text = serde_json::to_string_pretty(&value).map_err(|e| invalid(e.to_string()))?;
    text.push('\n');
    let tmp = dir.join(format!(".{name}.json.tmp{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        // Exactly 0644, whatever the umask.
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(&path)(e));
    }
    Ok(path)
}

impl Entry {
    /// Parses and checks plugin `name`'s entry from its JSON; errors name
    /// `origin` and the field (`plugins.NAME.container.modify`).
    pub fn from_value(name: &str, value: &Value, origin: &str) -> Result<Entry, PolicyError> {
        if !value.is_object() {
            return Err(PolicyError::Invalid {
                origin: origin.to_owned(),
                msg: format!(
                    "plugins.{name} must be a JSON object, not {}",
                    match value {
                        Value::Array(_) => "an array",
                        Value::String(_) => "a string",
                        Value::Number(_) => "a number",
                        Value::Bool(_) => "a boolean",
                        _ => "null",
                    }
                ),
            });
        }
        let entry: Entry = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let msg = match path.as_str() {
                "." => format!("plugins.{name}: {}", e.inner()),
                p if p.starts_with('[') => format!("plugins.{name}{p}: {}", e.inner()),
                p => format!("plugins.{name}.{p}: {}", e.inner()),
            };
            PolicyError::Invalid {
                origin: origin.to_owned(),
                msg,
            }
        })?;
        entry.check(name, origin)?;
        Ok(entry)
    }

    /// What serde cannot check: the pin's form, plain IPAM roots, plugin
    /// names, positive limits.
    fn check(&self, name: &str, origin: &str) -> Result<(), PolicyError> {
        let invalid = |msg: String| PolicyError::Invalid {
            origin: origin.to_owned(),
            msg,
        };
        if let Some(pin) = &self.sha256 {
            if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid(format!(
                    "plugins.{name}.sha256 must be 64 hex digits, got {pin:?}"
                )));
            }
        }
        for (i, root) in self.ipam_roots.iter().enumerate() {
            let plain = root.is_absolute()
                && root.components().all(|c| {
                    matches!(
                        c,
                        std::path::Component::RootDir | std::path::Component::Normal(_)
                    )
                });
            if !plain {
                return Err(invalid(format!(
                    "plugins.{name}.ipam-roots[{i}] must be an absolute path without `.` or `..`, got {root:?}"
                )));
            }
        }
        for (field, list) in [
            ("delegates", &self.delegates),
            ("native-delegates", &self.native_delegates),
        ] {
            if let Some((i, bad)) = list
                .iter()
                .enumerate()
                .find(|(_, d)| !crate::plugins::valid_name(d))
            {
                return Err(invalid(format!(
                    "plugins.{name}.{field}[{i}]: invalid plugin name {bad:?}"
                )));
            }
        }
        for (field, value) in [
            ("deadline-ms", self.deadline_ms),
            ("memory-mb", self.memory_mb),
            ("host-calls", self.host_calls),
            ("max-links", self.max_links.map(u64::from)),
        ] {
            if value == Some(0) {
                return Err(invalid(format!("plugins.{name}.{field} must be positive")));
            }
        }
        Ok(())
    }
}

impl Entry {
    /// The grant this entry gives.
    pub fn grant(&self) -> Grant {
        Grant {
            container: self.container.clone(),
            host: self.host.clone(),
            host_calls: self.host_calls.unwrap_or(DEFAULT_HOST_CALLS),
            max_links: self.max_links.unwrap_or(DEFAULT_MAX_LINKS),
            ipam_roots: self.ipam_roots.clone(),
            delegates: self.delegates.clone(),
            native_delegates: self.native_delegates.clone(),
            attachment_state: self.attachment_state,
            static_ranges: self.static_ranges.clone(),
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

/// Whether directory `path` (or, while it does not exist yet, the nearest
/// directory above it) and every directory on the way to it, symlinks
/// followed, are root's (or the user's running wasmcni) and not writable
/// by group or others, as for a policy file: the reason if not.
pub fn check_trusted_dir(path: &Path) -> Result<(), String> {
    let mut at = path.to_path_buf();
    while !at.exists() {
        if !at.pop() {
            break;
        }
    }
    match resolve_trusted(&at) {
        Ok(_) => Ok(()),
        Err(Resolve::Untrusted(why)) => Err(why),
        Err(Resolve::Io(e)) => Err(format!("{}: {e}", at.display())),
    }
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
        flag(self.traffic_control, "traffic-control");
        flag(self.config_vlans, "config-vlans");
        flag(self.adopt_peer, "adopt-peer");
        flag(self.firewall.port_mappings, "firewall.port-mappings");
        flag(self.firewall.masquerade, "firewall.masquerade");
        flag(self.firewall.forward, "firewall.forward");
        flag(self.firewall.isolation, "firewall.isolation");
        flag(self.firewall.mac_spoof, "firewall.mac-spoof");
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
        assert!(p.names().iter().any(|n| n == "loopback"));
        assert_eq!(Policy::embedded(), p);
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
        q.overlay.insert(
            "loopback".into(),
            Overlay::File {
                path: "/p.json".into(),
                value: serde_json::json!({"container": {"modify": true}}),
            },
        );
        assert!(q.entry_for("loopback", false).container.modify);
        assert_eq!(
            q.source("loopback", false),
            Some(Source::File("/p.json".into()))
        );
        assert_eq!(p.source("loopback", true), Some(Source::Embedded));
        assert_eq!(p.source("loopback", false), None);
    }

    #[test]
    fn a_bad_entry_breaks_only_its_plugin() {
        let text = r#"{"plugins":{"good":{"container":{"read":true}},
                       "typo":{"container":{"modfiy":true}}}}"#;
        let mut p = Policy::embedded();
        let entries = parse_document(text, "/etc/p.json").expect("top level");
        for (name, value) in entry_values(&entries, text, "/etc/p.json").expect("values") {
            p.overlay.insert(
                name,
                Overlay::File {
                    path: "/etc/p.json".into(),
                    value,
                },
            );
        }
        assert!(p.resolve("good", false).expect("good").container.read);
        assert!(
            p.resolve("loopback", true)
                .expect("bundled")
                .container
                .modify
        );
        let e = p.resolve("typo", false).expect_err("typo").to_string();
        assert!(
            e.contains("/etc/p.json") && e.contains("plugins.typo.container.modfiy: unknown field"),
            "{e}"
        );
        assert_eq!(p.entry_for("typo", false), Entry::default());
        // What is not a policy at all, or has unknown top-level fields,
        // still fails as a whole.
        for bad in [
            "not json",
            r#"{"plugins":{}, "plugin":{}}"#,
            r#"{"plugins":[]}"#,
        ] {
            assert!(parse_document(bad, "t").is_err(), "{bad}");
        }
        // What only a full parse refuses, inside an entry, fails the whole
        // document with the full parse's path and position.
        for (bad, path, what) in [
            (
                "{\"plugins\":{\"x\":{\"a\":1e999}}}",
                "plugins.x.a",
                "number out of range at line 1 column 26",
            ),
            (
                "{\"plugins\":{\"x\":{\"a\":\"\\ud800\"}}}",
                "plugins.x.a",
                "hex escape at line 1 column 29",
            ),
        ] {
            let entries = parse_document(bad, "t").expect("syntax only");
            let e = entry_values(&entries, bad, "t").expect_err(bad).to_string();
            assert!(e.contains(path) && e.contains(what), "{bad}: {e}");
            let e = Policy::parse(bad, "t").expect_err(bad).to_string();
            assert!(e.contains(path) && e.contains(what), "{bad}: {e}");
        }
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
        let e = Policy::parse(r#"{"plugins":{"x":{"max-links":0}}}"#, "t").expect_err("zero");
        assert!(e.to_string().contains("plugins.x.max-links"), "{e}");
        Policy::parse(r#"{"plugins":{"x":{"max-links":3}}}"#, "t").expect("a bound");
        assert_eq!(Entry::default().grant().max_links, DEFAULT_MAX_LINKS);
        let e = Policy::parse(
            r#"{"plugins":{"x":{"container":{"create":["vxlan"]}}}}"#,
            "t",
        )
        .expect_err("kind");
        assert!(e.to_string().contains("vxlan"), "{e}");
        let e = Policy::parse(
            r#"{"plugins":{"x":{"host":{"firewall":{"port-mapings":true}}}}}"#,
            "t",
        )
        .expect_err("firewall field");
        assert!(e.to_string().contains("port-mapings"), "{e}");
    }

    #[test]
    fn firewall_grants_parse_and_print() {
        let g: NsGrant =
            serde_json::from_str(r#"{"firewall": {"port-mappings": true, "forward-mark": 4096}}"#)
                .expect("grant");
        assert!(g.firewall.port_mappings && !g.firewall.masquerade);
        assert_eq!(g.firewall.forward_mark, Some(4096));
        assert!(g.to_string().contains("firewall.port-mappings"), "{g}");
        let empty: NsGrant = serde_json::from_str("{}").expect("grant");
        assert!(empty.firewall.is_empty());
        assert!(!serde_json::to_string(&empty)
            .expect("json")
            .contains("firewall"));
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

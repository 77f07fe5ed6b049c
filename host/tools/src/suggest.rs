//! `wasmcni policy suggest`: the narrowest policy entry under which the
//! calls a plugin was seen making pass, as SELinux's `audit2allow` derives
//! rules from denials.
//!
//! Input is audit records (`audit::Logged`): the node's audit log, or the
//! log of a `wasmcni try` run. Every call the plugin made counts, allowed
//! or denied by its policy (a denied call is what the run needed); a call
//! refused by an invariant no policy waives (a CHECK that writes, a DEL of
//! another attachment's link) and a call over a limit do not. Each call
//! maps to the grant it needs ([`Need`], shown by `try` as a policy field
//! path), as its row of the capability catalog
//! (`wasmcni_runtime::caps::catalog`, [`Grant`]) says and its record's
//! arguments fill in, and the entry is their union:
//! - rights per namespace (`read`, `modify`, `move`, `addresses`, ...) and
//!   the link kinds it created;
//! - host `names` of the links it created, moved in or renamed: exact,
//!   except a part taken from the container ID or a random hex suffix
//!   (as `veth1a2b3c4d`), which becomes `*`, but never a pattern with
//!   a literal start under 3 characters or one that matches a node link
//!   (`eth*`): such a name stays exact;
//! - host `prefixes`: the networks of the addresses and route
//!   destinations it used, exactly;
//! - `sysctls`: the keys, exactly, except the link in a per-link key when
//!   it is the runtime's `CNI_IFNAME` (container namespace only) or
//!   generalized as `names` are;
//! - host `links` / `masters` / `bridges`: node links it used that it did
//!   not create, by name. A node's audit log records links by index, so
//!   these are known from denials (the reason names the link) or from a
//!   `try` run (whose records carry `node-links`);
//! - `ipam-roots` (the data dirs it opened) and `delegates`.
//!
//! A record is input to trust: a name or path in it that could not be a
//! link name (or holds the pattern character `*`), an IPAM root that is
//! not a plain absolute path, is left out with a note. A grant only
//! refused calls needed stays in the entry but leads the notes.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::Value;

use wasmcni_runtime::audit::Logged;
use wasmcni_runtime::caps::catalog::{self, Grant, LinkGrant, Ns, Right};
use wasmcni_runtime::netns::Kind;
use wasmcni_runtime::policy::{Entry, LinkKind, NsGrant, Pattern};

/// One grant a call needed, as a policy field path and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// A host entry at all (`host: {}`): a handle to the node namespace.
    Host,
    /// `read`.
    Read(Kind),
    /// `create: [kind]`.
    Create(Kind, LinkKind),
    /// `modify`.
    Modify(Kind),
    /// `move`.
    Move(Kind),
    /// `addresses`.
    Addresses(Kind),
    /// `routes`.
    Routes(Kind),
    /// `announce`.
    Announce(Kind),
    /// `traffic-control`.
    TrafficControl(Kind),
    /// `config-vlans`.
    ConfigVlans(Kind),
    /// `host.firewall.<kind>` (`port-mappings`, `masquerade`, ...).
    Firewall(String),
    /// `sysctls: [pattern]`.
    Sysctl(Kind, String),
    /// `host.names: [pattern]`.
    Name(String),
    /// A host link name the record does not tell (a link moved into the
    /// node under its own name): `names` cannot be derived.
    UnknownName,
    /// `host.prefixes: [network]`.
    Prefix(ipnet::IpNet),
    /// `host.links: [name]`.
    Links(String),
    /// `host.masters: [name]`.
    Masters(String),
    /// `host.bridges: [name]`.
    Bridges(String),
    /// `ipam-roots: [dir]`.
    IpamRoot(PathBuf),
    /// `delegates: [name]`.
    Delegate(String),
    /// `attachment-state`.
    AttachmentState,
}

fn ns_name(k: Kind) -> &'static str {
    match k {
        Kind::Container => "container",
        Kind::Host => "host",
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        match self {
            Need::Host => write!(f, "host"),
            Need::Read(k) => write!(f, "{}.read", ns_name(*k)),
            Need::Create(k, kind) => write!(f, "{}.create: [{}]", ns_name(*k), q(kind.name())),
            Need::Modify(k) => write!(f, "{}.modify", ns_name(*k)),
            Need::Move(k) => write!(f, "{}.move", ns_name(*k)),
            Need::Addresses(k) => write!(f, "{}.addresses", ns_name(*k)),
            Need::Routes(k) => write!(f, "{}.routes", ns_name(*k)),
            Need::Announce(k) => write!(f, "{}.announce", ns_name(*k)),
            Need::TrafficControl(k) => write!(f, "{}.traffic-control", ns_name(*k)),
            Need::ConfigVlans(k) => write!(f, "{}.config-vlans", ns_name(*k)),
            Need::Firewall(field) => write!(f, "host.firewall.{field}"),
            Need::Sysctl(k, p) => write!(f, "{}.sysctls: [{}]", ns_name(*k), q(p)),
            Need::Name(p) => write!(f, "host.names: [{}]", q(p)),
            Need::UnknownName => write!(f, "host.names: [the link's name]"),
            Need::Prefix(n) => write!(f, "host.prefixes: [{}]", q(&n.to_string())),
            Need::Links(n) => write!(f, "host.links: [{}]", q(n)),
            Need::Masters(n) => write!(f, "host.masters: [{}]", q(n)),
            Need::Bridges(n) => write!(f, "host.bridges: [{}]", q(n)),
            Need::IpamRoot(p) => write!(f, "ipam-roots: [{}]", q(&p.display().to_string())),
            Need::Delegate(n) => write!(f, "delegates: [{}]", q(n)),
            Need::AttachmentState => write!(f, "attachment-state"),
        }
    }
}

/// A node link the plugin did not create, as `wasmcni try` annotates its
/// records (`node-links`: index → name and kind).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeLink {
    /// Its name.
    pub name: String,
    /// Its kind (`bridge`, `veth`, ...), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// Whether a record counts toward the suggestion: the call ran, failed in
/// the kernel, or was denied by the policy. A denial by an invariant (its
/// reason names no grant) or by a limit does not: no entry would change it.
pub fn counts(r: &Logged) -> bool {
    // The host's own steps (undo, attachment records, GC), not the
    // plugin's calls.
    if ["journal.", "record.", "gc.", "host."]
        .iter()
        .any(|p| r.call.starts_with(p))
    {
        return false;
    }
    match r.outcome.as_str() {
        "ok" | "error" => true,
        // A policy denial names the field (`plugins.NAME.container.modify
        // is false`; before, "the policy grants no ..."); an invariant's
        // says so.
        "denied" => r.reason.as_deref().is_some_and(|why| {
            !why.contains("wasmcni invariant")
                && ["plugins.", "policy", "grant", "pattern"]
                    .iter()
                    .any(|w| why.contains(w))
        }),
        _ => false,
    }
}

fn kind_of(v: &Value) -> Option<Kind> {
    match v.as_str()? {
        "container" => Some(Kind::Container),
        "host" => Some(Kind::Host),
        _ => None,
    }
}

fn index_of(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|i| u32::try_from(i).ok())
}

/// The node link at `index` (host namespace), if the record says it is one
/// the plugin did not create: from `try`'s `node-links`, else from a
/// denial's reason (`host link "eth0" (index 3) ...`).
fn node_link(r: &Logged, index: Option<u32>) -> Option<NodeLink> {
    let index = index?;
    if let Some(l) = r
        .extra
        .get("node-links")
        .and_then(|m| m.get(index.to_string()))
        .and_then(|v| serde_json::from_value::<NodeLink>(v.clone()).ok())
    {
        return Some(l);
    }
    let why = r.reason.as_deref()?;
    let name = quoted_after(why, "host link ")?;
    // The reason is about this link if it names its index, or names none.
    let about = match why.find("(index ") {
        Some(at) => why[at + 7..].starts_with(&format!("{index})")),
        None => true,
    };
    about.then_some(NodeLink { name, kind: None })
}

/// The node link called `name`, from `try`'s `node-links`.
fn node_link_named(r: &Logged, name: &str) -> Option<NodeLink> {
    r.extra
        .get("node-links")?
        .as_object()?
        .values()
        .filter_map(|v| serde_json::from_value::<NodeLink>(v.clone()).ok())
        .find(|l| l.name == name)
}

/// The JSON string quoted right after `prefix` in `text` (a reason's
/// `{:?}`-formatted link name).
fn quoted_after(text: &str, prefix: &str) -> Option<String> {
    let at = text.find(&format!("{prefix}\""))? + prefix.len();
    let mut de = serde_json::Deserializer::from_str(&text[at..]).into_iter::<String>();
    de.next()?.ok()
}

/// The shortest literal start a generalized name may keep before its
/// first `*`: `veth*`, `tap*`, never `*` or `c-*`.
const MIN_LITERAL: usize = 3;

/// Names node interfaces commonly have: a generalized name that matches
/// one of them (`eth*`, `ens*`) would let the plugin touch the node's own
/// devices, so the exact name is kept instead.
const NODE_NAMES: &[&str] = &[
    "eth0", "eth1", "ens3", "ens33", "enp0s3", "eno1", "enx0", "wlan0", "wlp2s0", "bond0", "team0",
    "ib0", "lo", "docker0",
];

/// A name with the parts a plugin derives from its invocation made `*`:
/// a run of at least 6 characters of the container ID's start, or a
/// trailing random-looking hex suffix (6 or more hex digits after a
/// non-hex prefix, as `veth1a2b3c4d`). Never broader than a literal start
/// of [`MIN_LITERAL`] characters and `*`, nor matching a usual node
/// interface name: such a name stays exact.
pub fn generalize(name: &str, container_id: &str) -> String {
    generalize_checked(name, container_id, &[]).0
}

/// [`generalize`], also refusing a pattern that matches one of
/// `node_links` (the node's links the record names), with a note when
/// a pattern was refused.
fn generalize_checked(
    name: &str,
    container_id: &str,
    node_links: &[String],
) -> (String, Option<String>) {
    let general = generalize_raw(name, container_id);
    if general == name {
        return (general, None);
    }
    let literal = general.split('*').next().unwrap_or("");
    let why = if literal.chars().count() < MIN_LITERAL {
        Some(format!(
            "its literal start {literal:?} is shorter than {MIN_LITERAL} characters"
        ))
    } else {
        let p = Pattern(general.clone());
        node_links
            .iter()
            .map(String::as_str)
            .chain(NODE_NAMES.iter().copied())
            .find(|n| *n != name && p.matches(n))
            .map(|n| format!("it would match the node link name {n:?}"))
    };
    match why {
        Some(why) => (
            name.to_owned(),
            Some(format!(
                "host link name {name:?} kept exact, not generalized to {general:?}: {why}; \
                 the entry covers only this name"
            )),
        ),
        None => (general, None),
    }
}

fn generalize_raw(name: &str, container_id: &str) -> String {
    const MIN: usize = 6;
    let mut out = name.to_owned();
    let cid = container_id.as_bytes();
    for k in (MIN..=cid.len().min(name.len())).rev() {
        let Ok(part) = std::str::from_utf8(&cid[..k]) else {
            continue;
        };
        if let Some(at) = name.find(part) {
            out = format!("{}*{}", &name[..at], &name[at + k..]);
            break;
        }
    }
    if out.contains('*') {
        return out;
    }
    let hex_tail = out
        .bytes()
        .rev()
        .take_while(|b| b.is_ascii_hexdigit())
        .count();
    if hex_tail >= MIN && hex_tail < out.len() {
        out.truncate(out.len() - hex_tail);
        out.push('*');
    }
    out
}

/// The names of the node links `try` recorded in `r` (`node-links`).
fn node_link_names(r: &Logged) -> Vec<String> {
    r.extra
        .get("node-links")
        .and_then(Value::as_object)
        .map(|m| {
            m.values()
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Why `name`, taken from a record, cannot be granted as a link name:
/// it is no valid Linux interface name (1 to 15 bytes, no `/`, `:` or
/// white space, not `.` or `..`) or holds the pattern character `*`.
fn bad_link_name(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 15 {
        Some("is not 1 to 15 bytes long")
    } else if name == "." || name == ".." {
        Some("is `.` or `..`")
    } else if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
    {
        Some("holds `/`, `:`, white space or a control character")
    } else if name.contains('*') {
        Some("holds the pattern character `*`")
    } else {
        None
    }
}

/// Why `dir`, taken from a record, cannot be granted as an IPAM root: it
/// is not an absolute path of normal components below `/`.
fn bad_ipam_root(dir: &str) -> Option<&'static str> {
    let Some(rest) = dir.strip_prefix('/') else {
        return Some("is not an absolute path");
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        Some("is the root directory")
    } else if rest
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        Some("has an empty, `.` or `..` component")
    } else if dir.chars().any(char::is_control) {
        Some("holds a control character")
    } else {
        None
    }
}

/// Why `key`, taken from a record, cannot be granted as a sysctl pattern.
fn bad_sysctl_key(key: &str) -> Option<&'static str> {
    if key.contains('*') {
        Some("holds the pattern character `*`")
    } else if key.split('.').any(str::is_empty)
        || key.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        Some("has an empty part, white space or a control character")
    } else if sysctl_link(key).is_some_and(|l| bad_link_name(&l).is_some()) {
        Some("names no valid link")
    } else {
        None
    }
}

/// A sysctl key with the link of a per-link key generalized: in the
/// container namespace `*` for the runtime's interface name (the
/// namespace is the pod's own), else as [`generalize`]. In the host
/// namespace `CNI_IFNAME` names no node link, so it stays exact there.
fn sysctl_pattern(key: &str, kind: Kind, r: &Logged, notes: &mut Vec<String>) -> String {
    let parts: Vec<&str> = key.split('.').collect();
    if let ["net", proto, section @ ("conf" | "neigh"), link, rest @ ..] = parts.as_slice() {
        if *link != "all" && *link != "default" && !rest.is_empty() {
            let name = link.replace('/', ".");
            let general = if kind == Kind::Container && !r.ifname.is_empty() && name == r.ifname {
                "*".to_owned()
            } else {
                let (g, note) = generalize_checked(&name, &r.container_id, &node_link_names(r));
                if let Some(n) = note {
                    push(notes, n);
                }
                g.replace('.', "/")
            };
            return format!("net.{proto}.{section}.{general}.{}", rest.join("."));
        }
    }
    key.to_owned()
}

/// The link a per-link sysctl key names, if it is one.
fn sysctl_link(key: &str) -> Option<String> {
    let parts: Vec<&str> = key.split('.').collect();
    match parts.as_slice() {
        ["net", _, "conf" | "neigh", link, _, ..] if *link != "all" && *link != "default" => {
            Some(link.replace('/', "."))
        }
        _ => None,
    }
}

/// `l` if its name may be granted, else `None` and a note.
fn checked(l: Option<NodeLink>, notes: &mut Vec<String>) -> Option<NodeLink> {
    let l = l?;
    match bad_link_name(&l.name) {
        None => Some(l),
        Some(why) => {
            push(
                notes,
                format!(
                    "node link name {:?} from the log {why}: left out of the entry",
                    l.name
                ),
            );
            None
        }
    }
}
/// What a call on a node link the plugin did not create needs: `bridges`
/// when it is a bridge and the call is one a shared bridge takes
/// (`shareable`), else `links`.
fn foreign(l: NodeLink, shareable: bool) -> Need {
    if shareable && l.kind.as_deref() == Some("bridge") {
        Need::Bridges(l.name)
    } else {
        Need::Links(l.name)
    }
}

/// The grants record `r` needed (empty for one that does not count).
pub fn needs(r: &Logged) -> Vec<Need> {
    needs_noted(r).0
}

/// The firewall kinds a policy grants (`host.firewall.<kind>`).
const FIREWALL_KINDS: &[&str] = &[
    "port-mappings",
    "masquerade",
    "forward",
    "isolation",
    "mac-spoof",
];

/// The argument at `path` of a record's `args` (a dot goes into an
/// object: `route.destination`), `null` when absent.
fn arg<'a>(args: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(args, |v, k| &v[k])
}

/// A right in namespace `k` as the grant it needs.
fn right_need(k: Kind, right: Right) -> Need {
    match right {
        Right::Read => Need::Read(k),
        Right::Create(what) => Need::Create(k, what),
        Right::Modify => Need::Modify(k),
        Right::Move => Need::Move(k),
        Right::Addresses => Need::Addresses(k),
        Right::Routes => Need::Routes(k),
        Right::Announce => Need::Announce(k),
        Right::TrafficControl => Need::TrafficControl(k),
        Right::ConfigVlans => Need::ConfigVlans(k),
    }
}

/// [`needs`], and notes on names generalized, kept exact or left out
/// because the record's value may not become a grant. What a call needs
/// is its capability catalog row's [`Grant`]s, read from the record's
/// arguments: a call the catalog does not know needs nothing.
fn needs_noted(r: &Logged) -> (Vec<Need>, Vec<String>) {
    if !counts(r) {
        return (Vec::new(), Vec::new());
    }
    let Some(row) = catalog::entry(&r.call) else {
        return (Vec::new(), Vec::new());
    };
    let mut notes: Vec<String> = Vec::new();
    let a = &r.args;
    let s = |k: &str| arg(a, k).as_str().unwrap_or("");
    let on = |k: &str| arg(a, k).as_bool().unwrap_or(false);
    let mut out = Vec::new();
    // The namespace the call acts in; `netns.host` names none, and acts
    // in the host's. Only `netns.host` needs the host entry alone: any
    // host field implies one.
    let kind = kind_of(&a["ns"]).or(row.needs.contains(&Grant::HostEntry).then_some(Kind::Host));
    let ns_of = |ns: Ns| match ns {
        Ns::Call => kind,
        Ns::Arg(k) => kind_of(arg(a, k)),
    };
    let nodes = node_link_names(r);
    let name = |out: &mut Vec<Need>, notes: &mut Vec<String>, k: Kind, n: Option<&str>| {
        if k != Kind::Host {
            return;
        }
        let Some(n) = n.filter(|n| !n.is_empty()) else {
            out.push(Need::UnknownName);
            return;
        };
        if let Some(why) = bad_link_name(n) {
            push(
                notes,
                format!("host link name {n:?} from the log {why}: no `names` grant for it"),
            );
            return;
        }
        let (general, note) = generalize_checked(n, &r.container_id, &nodes);
        match note {
            Some(note) => push(notes, note),
            None if general != n => push(
                notes,
                format!("host link name {n:?} became the pattern {general:?}"),
            ),
            None => {}
        }
        out.push(Need::Name(general));
    };
    for grant in row.needs {
        match (kind, *grant) {
            // Grants about no namespace, from a record that names none.
            (None, Grant::Delegate(k)) => {
                let t = s(k);
                if wasmcni_runtime::plugins::valid_name(t) {
                    out.push(Need::Delegate(t.to_owned()));
                } else if !t.is_empty() {
                    push(
                        &mut notes,
                        format!("delegate {t:?} from the log is no valid plugin name: left out"),
                    );
                }
            }
            (None, Grant::AttachmentState) => out.push(Need::AttachmentState),
            (None, Grant::IpamRoot(k)) => {
                let dir = arg(a, k)
                    .as_str()
                    .unwrap_or(wasmcni_runtime::ipam::DEFAULT_DATA_DIR);
                match bad_ipam_root(dir) {
                    None => out.push(Need::IpamRoot(PathBuf::from(dir))),
                    Some(why) => push(
                        &mut notes,
                        format!("IPAM data dir {dir:?} from the log {why}: left out"),
                    ),
                }
            }
            (None, _)
            | (Some(_), Grant::Delegate(_) | Grant::AttachmentState | Grant::IpamRoot(_)) => {}
            // Grants about a namespace, from a record that names it.
            (Some(_), Grant::HostEntry) => out.push(Need::Host),
            (Some(_), Grant::Right(ns, right)) => {
                if let Some(k) = ns_of(ns) {
                    out.push(right_need(k, right));
                }
            }
            // Rules or VRFs take tables: `routes` where rules may be added
            // (the container namespace), else the right to create a VRF.
            (Some(kind), Grant::Tables) => out.push(match kind {
                Kind::Container => Need::Routes(kind),
                Kind::Host => Need::Create(kind, LinkKind::Vrf),
            }),
            (Some(_), Grant::NewName(k, ns)) => {
                if let Some(at) = ns_of(ns) {
                    name(&mut out, &mut notes, at, arg(a, k).as_str());
                }
            }
            (Some(_), Grant::NodeLink(index, ns, use_)) => {
                if ns_of(ns) != Some(Kind::Host) {
                    continue;
                }
                if let Some(l) = checked(node_link(r, index_of(arg(a, index))), &mut notes) {
                    out.push(match use_ {
                        LinkGrant::Links => Need::Links(l.name),
                        LinkGrant::Masters => Need::Masters(l.name),
                        LinkGrant::Shared => foreign(l, true),
                        LinkGrant::SharedIf(b) => foreign(l, on(b)),
                    });
                }
            }
            (Some(kind), Grant::Prefix(k)) => {
                if kind == Kind::Host {
                    if let Some(net) = prefix(s(k)) {
                        out.push(Need::Prefix(net));
                    }
                }
            }
            (Some(_), Grant::FirewallRules(k)) => {
                let field = match arg(a, k).as_object().and_then(|o| o.keys().next()) {
                    Some(k) if k == "port-map" => "port-mappings",
                    Some(k) => k.as_str(),
                    None => "",
                };
                if FIREWALL_KINDS.contains(&field) {
                    out.push(Need::Firewall(field.to_owned()));
                }
            }
            (Some(_), Grant::FirewallKinds(k)) => {
                for k in arg(a, k).as_array().into_iter().flatten() {
                    if let Some(k) = k.as_str().filter(|k| FIREWALL_KINDS.contains(k)) {
                        out.push(Need::Firewall(k.to_owned()));
                    }
                }
            }
            (Some(kind), Grant::Sysctl(k, shared)) => {
                let key = s(k);
                if key.is_empty() {
                    // No key: nothing to grant.
                } else if let Some(why) = bad_sysctl_key(key) {
                    push(
                        &mut notes,
                        format!("sysctl key {key:?} from the log {why}: left out"),
                    );
                } else {
                    out.push(Need::Sysctl(kind, sysctl_pattern(key, kind, r, &mut notes)));
                    if kind == Kind::Host {
                        if let Some(link) = sysctl_link(key) {
                            let known = node_link_named(r, &link).or_else(|| {
                                let why = r.reason.as_deref()?;
                                quoted_after(why, "host link ")
                                    .filter(|n| *n == link)
                                    .map(|name| NodeLink { name, kind: None })
                            });
                            if let Some(l) = checked(known, &mut notes) {
                                out.push(foreign(l, shared));
                            }
                        }
                    }
                }
            }
        }
    }
    (out, notes)
}
/// `addr/len` as its network (`10.1.0.1/24` → `10.1.0.0/24`).
fn prefix(s: &str) -> Option<ipnet::IpNet> {
    let (ip, len) = s.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    ipnet::IpNet::new(ip, len.parse().ok()?)
        .ok()
        .map(|n| n.trunc())
}

/// The entry the needs of `records` add up to, pinned to `sha256`, and
/// notes on what was generalized, left out or could not be derived. A
/// grant that only calls the policy refused needed (no allowed call did)
/// stays in the entry, as `audit2allow` keeps it, but is named first in
/// the notes: a plugin can make refused calls on purpose.
pub fn derive(records: &[Logged], sha256: &str) -> (Entry, Vec<String>) {
    let mut e = Entry {
        sha256: Some(sha256.to_owned()),
        ..Entry::default()
    };
    let mut notes = Vec::new();
    let mut names: Vec<Pattern> = Vec::new();
    let mut unknown_name = false;
    let mut allowed: Vec<Need> = Vec::new();
    let mut refused: Vec<Need> = Vec::new();
    for r in records {
        let (needs, found) = needs_noted(r);
        for n in found {
            push(&mut notes, n);
        }
        let ran = matches!(r.outcome.as_str(), "ok" | "error");
        for need in needs {
            push(if ran { &mut allowed } else { &mut refused }, need.clone());
            apply(&mut e, &mut names, &mut unknown_name, need);
        }
    }
    let host_allowed = allowed.iter().any(|n| need_kind(n) == Some(Kind::Host));
    let mut only_refused: Vec<String> = refused
        .iter()
        .filter(|n| !allowed.contains(n))
        .filter(|n| !matches!(n, Need::Prefix(_)))
        .filter(|n| !(**n == Need::Host && host_allowed))
        .map(Need::to_string)
        .collect();
    if let Some(h) = e.host.as_mut() {
        h.prefixes = minimal_prefixes(std::mem::take(&mut h.prefixes));
        for p in &h.prefixes {
            // A prefix only an allowed call needed is the grant itself; one
            // that swallowed them came from a refused call.
            if !allowed.contains(&Need::Prefix(*p)) {
                only_refused.push(Need::Prefix(*p).to_string());
            }
            let wide = match p {
                ipnet::IpNet::V4(n) => n.prefix_len() < 8,
                ipnet::IpNet::V6(n) => n.prefix_len() < 16,
            };
            if wide {
                notes.push(format!(
                    "host prefix {p} is wide: with it the plugin may route much of the node's \
                     traffic; narrow it to the pod range if the plugin allows"
                ));
            }
        }
        // `names` matters only where links are made, moved in or renamed.
        if !h.create.is_empty() || h.move_links || h.modify {
            if unknown_name {
                notes.push(
                    "a link moved into the node under its own name: `names` left at its \
                     default (veth*, cni*); name it if the link is called otherwise"
                        .into(),
                );
            } else {
                h.names = Some(names);
            }
        }
    }
    let first: Vec<String> = only_refused
        .into_iter()
        .map(|g| {
            format!(
                "{g} only from refused calls: the plugin was denied it; grant it only if it \
                 needs it"
            )
        })
        .collect();
    notes.splice(0..0, first);
    (e, notes)
}

/// The namespace a need is about, if one.
fn need_kind(n: &Need) -> Option<Kind> {
    match n {
        Need::Read(k)
        | Need::Create(k, _)
        | Need::Modify(k)
        | Need::Move(k)
        | Need::Addresses(k)
        | Need::Routes(k)
        | Need::Announce(k)
        | Need::TrafficControl(k)
        | Need::ConfigVlans(k)
        | Need::Sysctl(k, _) => Some(*k),
        Need::Host
        | Need::Name(_)
        | Need::UnknownName
        | Need::Prefix(_)
        | Need::Links(_)
        | Need::Masters(_)
        | Need::Bridges(_)
        | Need::Firewall(_) => Some(Kind::Host),
        Need::IpamRoot(_) | Need::Delegate(_) | Need::AttachmentState => None,
    }
}
fn push<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

fn apply(e: &mut Entry, names: &mut Vec<Pattern>, unknown_name: &mut bool, need: Need) {
    fn g(e: &mut Entry, k: Kind) -> &mut NsGrant {
        match k {
            Kind::Container => &mut e.container,
            Kind::Host => e.host.get_or_insert_with(NsGrant::default),
        }
    }
    match need {
        Need::Host => {
            g(e, Kind::Host);
        }
        Need::Read(k) => g(e, k).read = true,
        Need::Create(k, kind) => push(&mut g(e, k).create, kind),
        Need::Modify(k) => g(e, k).modify = true,
        Need::Move(k) => g(e, k).move_links = true,
        Need::Addresses(k) => g(e, k).addresses = true,
        Need::Routes(k) => g(e, k).routes = true,
        Need::Announce(k) => g(e, k).announce = true,
        Need::TrafficControl(k) => g(e, k).traffic_control = true,
        Need::ConfigVlans(k) => g(e, k).config_vlans = true,
        Need::Firewall(field) => {
            let f = &mut g(e, Kind::Host).firewall;
            match field.as_str() {
                "port-mappings" => f.port_mappings = true,
                "masquerade" => f.masquerade = true,
                "forward" => f.forward = true,
                "isolation" => f.isolation = true,
                "mac-spoof" => f.mac_spoof = true,
                _ => {}
            }
        }
        Need::Sysctl(k, p) => push(&mut g(e, k).sysctls, Pattern(p)),
        Need::Name(p) => {
            g(e, Kind::Host);
            push(names, Pattern(p));
        }
        Need::UnknownName => {
            g(e, Kind::Host);
            *unknown_name = true;
        }
        Need::Prefix(n) => push(&mut g(e, Kind::Host).prefixes, n),
        Need::Links(n) => push(&mut g(e, Kind::Host).links, Pattern(n)),
        Need::Masters(n) => push(&mut g(e, Kind::Host).masters, Pattern(n)),
        Need::Bridges(n) => push(&mut g(e, Kind::Host).bridges, Pattern(n)),
        Need::IpamRoot(p) => push(&mut e.ipam_roots, p),
        Need::Delegate(n) => push(&mut e.delegates, n),
        Need::AttachmentState => e.attachment_state = true,
    }
}

/// The prefixes not inside another of them, sorted.
fn minimal_prefixes(mut v: Vec<ipnet::IpNet>) -> Vec<ipnet::IpNet> {
    v.sort();
    v.dedup();
    let all = v.clone();
    v.retain(|n| !all.iter().any(|o| o != n && o.contains(n)));
    v
}

/// `entry` as the JSON of a policy entry, without the fields that grant
/// nothing (a `names` list stays, empty or not: absent means the default).
pub fn entry_json(entry: &Entry) -> Value {
    let mut v = serde_json::to_value(entry).unwrap_or(Value::Null);
    fn prune(v: &mut Value, keep_names: bool) {
        if let Value::Object(m) = v {
            m.retain(|k, x| match x {
                Value::Null | Value::Bool(false) => false,
                Value::Array(a) if a.is_empty() => keep_names && k == "names",
                _ => true,
            });
        }
    }
    prune(&mut v, false);
    if let Value::Object(m) = &mut v {
        for ns in ["container", "host"] {
            if let Some(g) = m.get_mut(ns) {
                prune(g, true);
            }
        }
        if m.get("container")
            .is_some_and(|c| c == &serde_json::json!({}))
        {
            m.remove("container");
        }
    }
    v
}

/// Where `policy suggest` reads records by default: `$WASMCNI_AUDIT` when
/// it names a file, else [`wasmcni_runtime::audit::DEFAULT_AUDIT_FILE`].
fn default_log() -> PathBuf {
    match wasmcni_runtime::audit::Sink::from_env() {
        wasmcni_runtime::audit::Sink::File(p) => p,
        _ => PathBuf::from(wasmcni_runtime::audit::DEFAULT_AUDIT_FILE),
    }
}

/// The records of `plugin` (by name and sha256) in `records`, or an error
/// that says what the log holds instead.
pub fn select(
    records: Vec<Logged>,
    name: &str,
    sha256: &str,
    origin: &str,
) -> anyhow::Result<Vec<Logged>> {
    let mut other_pins: Vec<String> = Vec::new();
    let mine: Vec<Logged> = records
        .into_iter()
        .filter(|r| {
            if r.plugin != name {
                return false;
            }
            if !r.sha256.eq_ignore_ascii_case(sha256) {
                push(&mut other_pins, r.sha256.clone());
                return false;
            }
            true
        })
        .collect();
    if mine.is_empty() {
        if other_pins.is_empty() {
            bail!(
                "{origin} has no record of plugin {name:?}: run it (e.g. `wasmcni try {name} \
                 --audit-out FILE`, then `--from-try FILE`) and suggest again"
            );
        }
        bail!(
            "{origin} has records of plugin {name:?} only for other builds (sha256 {}), not \
             sha256 {sha256}: run this build (`wasmcni try`) and suggest again",
            other_pins.join(", ")
        );
    }
    Ok(mine)
}

/// `wasmcni policy suggest PLUGIN`: prints the entry as JSON (stdout) and
/// notes (stderr).
pub fn run(plugin: &str, audit: Option<&Path>, from_try: Option<&Path>) -> anyhow::Result<()> {
    let p = crate::plugin_arg::resolve(plugin)?;
    let path = from_try
        .or(audit)
        .map(Path::to_owned)
        .unwrap_or_else(default_log);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading audit records from {}", path.display()))?;
    let (records, skipped) = wasmcni_runtime::audit::read_log(&text);
    if skipped > 0 {
        eprintln!(
            "wasmcni: skipped {skipped} lines of {} that are not audit records",
            path.display()
        );
    }
    let mine = select(records, p.name(), p.sha256(), &path.display().to_string())?;
    let (entry, notes) = derive(&mine, p.sha256());
    print_suggestion(p.name(), &entry, &notes, mine.len(), false)
}

/// Prints a suggested entry: JSON on stdout, the rest on stderr (or, in
/// `try`'s text report, `inline`, on stdout as well).
pub(crate) fn print_suggestion(
    name: &str,
    entry: &Entry,
    notes: &[String],
    from: usize,
    inline: bool,
) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(&entry_json(entry))?;
    let mut head = vec![format!(
        "suggested policy entry for {name:?} from {from} audited calls: save it as \
         /etc/wasmcni/policy.d/{name}.json (or as plugins.{name} in /etc/wasmcni/policy.json)"
    )];
    head.extend(notes.iter().map(|n| format!("note: {n}")));
    for line in head {
        if inline {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
    }
    println!("{json}");
    Ok(())
}

/// Counts records by call, for `try`'s summary.
pub fn calls_by_name(records: &[Logged]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in records {
        *m.entry(r.call.clone()).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wasmcni_runtime::policy::Policy;

    const SHA: &str = "ab";

    fn rec(command: &str, call: &str, args: Value, outcome: &str, reason: Option<&str>) -> Logged {
        Logged {
            plugin: "mine".into(),
            sha256: SHA.repeat(32),
            container_id: "0123456789abcdef0123456789abcdef".into(),
            ifname: "eth0".into(),
            command: command.into(),
            call: call.into(),
            args,
            outcome: outcome.into(),
            reason: reason.map(str::to_owned),
            ..Logged::default()
        }
    }

    fn ok(call: &str, args: Value) -> Logged {
        rec("ADD", call, args, "ok", None)
    }

    /// The suggestion, through the policy parser: what a policy file with
    /// it would grant.
    fn parsed(records: &[Logged]) -> Entry {
        let (e, _) = derive(records, &SHA.repeat(32));
        // As a policy.d file holds it, and as plugins.NAME of policy.json.
        let json = entry_json(&e);
        let back = Entry::from_value("mine", &json, "mine.json").expect("the entry parses");
        assert_eq!(back, e, "the JSON holds the whole entry: {json}");
        let doc = json!({"plugins": {"mine": json}}).to_string();
        let p = Policy::parse(&doc, "suggestion").expect("the suggestion parses");
        assert_eq!(p.entry("mine"), e);
        back
    }

    #[test]
    fn loopback_needs_read_and_modify_in_the_container_only() {
        let e = parsed(&[
            ok("netns.container", json!({})),
            ok("link.get-by-name", json!({"ns": "container", "name": "lo"})),
            ok(
                "link.set-up",
                json!({"ns": "container", "index": 1, "up": true}),
            ),
            rec(
                "CHECK",
                "link.set-up",
                json!({"ns": "container", "index": 1, "up": true}),
                "denied",
                Some("only ADD and DEL may change the kernel"),
            ),
        ]);
        assert!(e.container.read && e.container.modify);
        assert!(!e.container.addresses && e.container.create.is_empty());
        assert!(e.host.is_none());
        assert_eq!(e.sha256.as_deref(), Some(SHA.repeat(32).as_str()));
        assert!(e.ipam_roots.is_empty() && e.delegates.is_empty());
    }

    #[test]
    fn bandwidth_needs_traffic_control_on_the_host_and_read() {
        let limit = json!({"rate": 800000, "burst": 80000});
        let e = parsed(&[
            ok("netns.host", json!({})),
            ok(
                "link.get-by-name",
                json!({"ns": "container", "name": "eth0"}),
            ),
            ok("link.get-by-index", json!({"ns": "host", "index": 7})),
            ok(
                "traffic-control.limit-transmit",
                json!({"ns": "host", "index": 7, "limit": limit}),
            ),
            ok(
                "traffic-control.limit-receive",
                json!({"ns": "host", "index": 7, "limit": limit}),
            ),
            rec(
                "CHECK",
                "traffic-control.limits",
                json!({"ns": "host", "index": 7}),
                "ok",
                None,
            ),
            rec(
                "DEL",
                "traffic-control.remove-limits",
                json!({"ns": "host", "index": null}),
                "ok",
                None,
            ),
        ]);
        let host = e.host.expect("a host grant");
        assert!(host.traffic_control && host.read, "{host}");
        assert!(!host.modify && host.links.is_empty(), "{host}");
        assert!(e.container.read && !e.container.traffic_control);
    }

    #[test]
    fn policy_denials_count_invariant_denials_and_limits_do_not() {
        let denied = rec(
            "ADD",
            "address.add",
            json!({"ns": "container", "link-index": 2, "prefix": "10.1.0.2/24"}),
            "denied",
            Some("the policy grants no `addresses` in the container namespace"),
        );
        assert!(counts(&denied));
        let invariant = rec(
            "ADD",
            "link.delete",
            json!({"ns": "container", "index": 2}),
            "denied",
            Some("during ADD a plugin may delete only links it created in the same call"),
        );
        assert!(!counts(&invariant));
        // As reasons name fields and invariants now.
        let field = rec(
            "ADD",
            "link.set-mtu",
            json!({"ns": "container", "index": 2, "mtu": 1400}),
            "denied",
            Some("plugins.mine.container.modify is false"),
        );
        assert!(counts(&field));
        let marked = rec(
            "ADD",
            "link.delete",
            json!({"ns": "host", "index": 2}),
            "denied",
            Some(
                "host link \"veth1\" (index 2) belongs to another attachment (a wasmcni invariant)",
            ),
        );
        assert!(!counts(&marked));
        let limit = rec(
            "ADD",
            "link.list",
            json!({"ns": "container"}),
            "limit-exceeded",
            Some("budget"),
        );
        assert!(!counts(&limit));
        let undo = ok("journal.undo", json!({"undo": "x"}));
        assert!(!counts(&undo));
        let e = parsed(&[denied, invariant, limit, undo, field, marked]);
        assert!(e.container.addresses && e.container.modify && !e.container.read);
        assert!(e.host.is_none(), "{e:?}");
    }

    #[test]
    fn host_calls_give_names_prefixes_and_sysctls() {
        let e = parsed(&[
            ok("netns.host", json!({})),
            ok(
                "link.create-veth",
                json!({"ns": "host", "name": "veth1a2b3c4d", "peer-ns": "container",
                       "peer-name": "eth0"}),
            ),
            ok("link.create-bridge", json!({"ns": "host", "name": "cni0"})),
            ok(
                "address.add",
                json!({"ns": "host", "link-index": 5, "prefix": "10.22.0.1/24"}),
            ),
            ok(
                "route.add",
                json!({"ns": "host", "route": {"destination": "10.22.0.7/32", "link-index": 5}}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.ip_forward", "value": "1"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "container", "key": "net.ipv6.conf.eth0.disable_ipv6", "value": "0"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv6.conf.veth1a2b3c4d.accept_ra", "value": "0"}),
            ),
        ]);
        let h = e.host.expect("host grant");
        assert_eq!(h.create, vec![LinkKind::Veth, LinkKind::Bridge]);
        assert_eq!(
            h.names,
            Some(vec![Pattern("veth*".into()), Pattern("cni0".into())])
        );
        assert!(h.addresses && h.routes && !h.modify && !h.read);
        // The /32 lies inside the /24: one prefix covers both.
        assert_eq!(h.prefixes, vec!["10.22.0.0/24".parse().expect("net")]);
        assert_eq!(
            h.sysctls,
            vec![
                Pattern("net.ipv4.ip_forward".into()),
                Pattern("net.ipv6.conf.veth*.accept_ra".into())
            ]
        );
        assert_eq!(e.container.create, vec![LinkKind::Veth]);
        assert_eq!(
            e.container.sysctls,
            vec![Pattern("net.ipv6.conf.*.disable_ipv6".into())]
        );
        // Sufficient: every observed value passes the grant's own checks.
        assert!(h.may_name("veth99aabbcc") && h.may_name("cni0") && !h.may_name("cni1"));
        assert!(!h.may_name("eth1"));
        assert!(h.covers("10.22.0.7".parse().expect("ip"), 32));
        assert!(!h.covers("10.23.0.1".parse().expect("ip"), 32));
        assert!(h.names_sysctl("net.ipv4.ip_forward"));
        assert!(!h.names_sysctl("net.ipv4.conf.all.forwarding"));
    }

    #[test]
    fn node_links_become_links_masters_and_bridges() {
        let mut master = ok(
            "link.create-macvlan",
            json!({"master-ns": "host", "master": 2, "ns": "container", "name": "eth0"}),
        );
        master.extra.insert(
            "node-links".into(),
            json!({"2": {"name": "uplink0", "kind": "veth"}}),
        );
        let mut enslave = ok(
            "link.set-master",
            json!({"ns": "host", "index": 9, "master": 3}),
        );
        enslave.extra.insert(
            "node-links".into(),
            json!({"3": {"name": "br-admin", "kind": "bridge"}}),
        );
        // From a node's log: the denial names the link.
        let denied = rec(
            "ADD",
            "link.set-mtu",
            json!({"ns": "host", "index": 4, "mtu": 9000}),
            "denied",
            Some("host link \"eth9\" (index 4) was not created by wasmcni and matches no `links` pattern"),
        );
        // And as a node's log words it now.
        let denied_now = rec(
            "ADD",
            "link.create-vlan",
            json!({"master-ns": "host", "master": 5, "ns": "container", "name": "eth0.5"}),
            "denied",
            Some("host link \"bond0\" matches none of plugins.mine.host.masters (nor of plugins.mine.host.links)"),
        );
        let e = parsed(&[master, enslave, denied, denied_now]);
        let h = e.host.expect("host");
        assert_eq!(
            h.masters,
            vec![Pattern("uplink0".into()), Pattern("bond0".into())]
        );
        assert_eq!(h.bridges, vec![Pattern("br-admin".into())]);
        assert_eq!(h.links, vec![Pattern("eth9".into())]);
        assert!(h.modify && !h.read);
        assert_eq!(e.container.create, vec![LinkKind::Macvlan, LinkKind::Vlan]);
        // A plugin that modifies links but created none: names stays empty.
        assert_eq!(h.names, Some(vec![]));
    }

    #[test]
    fn wide_host_prefixes_are_noted() {
        let (e, notes) = derive(
            &[ok(
                "route.add",
                json!({"ns": "host", "route": {"destination": "0.0.0.0/0", "link-index": 5}}),
            )],
            &SHA.repeat(32),
        );
        assert_eq!(
            e.host.expect("host").prefixes,
            vec!["0.0.0.0/0".parse::<ipnet::IpNet>().expect("net")]
        );
        assert!(
            notes.iter().any(|n| n.contains("0.0.0.0/0 is wide")),
            "{notes:?}"
        );
    }

    #[test]
    fn attachment_state_and_the_tuning_setters() {
        let e = parsed(&[
            ok(
                "attachment-state.set",
                json!({"key": "restore", "value": {"bytes": 12}}),
            ),
            ok(
                "link.set-txqlen",
                json!({"ns": "container", "index": 2, "txqlen": 5}),
            ),
        ]);
        assert!(e.attachment_state);
        assert!(e.container.modify);
        assert!(!parsed(&[]).attachment_state);
    }

    #[test]
    fn rules_and_the_table_lock() {
        let e = parsed(&[
            ok("route.lock-tables", json!({"ns": "container"})),
            ok("route.list-rules", json!({"ns": "container"})),
            ok(
                "route.add-rule",
                json!({"ns": "container", "rule": {"table": 100}}),
            ),
        ]);
        assert!(e.container.read && e.container.routes, "{}", e.container);
        assert!(e.host.is_none());
        // A VRF's table in the node namespace, where no rule may be added.
        let e = parsed(&[
            ok("netns.host", json!({})),
            ok("route.lock-tables", json!({"ns": "host"})),
        ]);
        let host = e.host.expect("a host grant");
        assert!(!host.routes && host.may_create(LinkKind::Vrf), "{host}");
    }

    #[test]
    fn ipam_and_delegates() {
        let e = parsed(&[
            ok("ipam-store.[static]store.open", json!({"data-dir": null})),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "/var/lib/mine"}),
            ),
            ok(
                "delegate.run",
                json!({"plugin-type": "host-local", "command": "ADD"}),
            ),
        ]);
        assert_eq!(
            e.ipam_roots,
            vec![
                PathBuf::from(wasmcni_runtime::ipam::DEFAULT_DATA_DIR),
                PathBuf::from("/var/lib/mine")
            ]
        );
        assert_eq!(e.delegates, vec!["host-local".to_owned()]);
    }

    #[test]
    fn moved_in_links_without_a_name_keep_the_default_names() {
        let (e, notes) = derive(
            &[ok(
                "link.move-to",
                json!({"ns": "container", "index": 3, "target": "host", "new-name": null}),
            )],
            &SHA.repeat(32),
        );
        let h = e.host.expect("host");
        assert!(h.move_links && e.container.move_links);
        assert_eq!(h.names, None);
        assert!(notes.iter().any(|n| n.contains("default")), "{notes:?}");
    }

    #[test]
    fn a_call_the_catalog_does_not_know_needs_nothing() {
        // What a call needs comes from its capability catalog row alone.
        let unknown = ok(
            "link.set-everything",
            json!({"ns": "host", "index": 2, "name": "veth1a2b3c4d"}),
        );
        assert_eq!(needs_noted(&unknown), (Vec::new(), Vec::new()));
        let e = parsed(&[unknown]);
        assert!(e.host.is_none() && e.container == NsGrant::default());
        // Its catalog row is what makes a known call count.
        let known = ok("link.set-up", json!({"ns": "host", "index": 2, "up": true}));
        assert_eq!(needs(&known), vec![Need::Modify(Kind::Host)]);
    }

    #[test]
    fn generalization() {
        let cid = "0123456789abcdef";
        assert_eq!(generalize("veth1a2b3c4d", cid), "veth*");
        assert_eq!(generalize("tap01234567", cid), "tap*");
        assert_eq!(generalize("cni-012345-x", cid), "cni-*-x");
        // Never broader than a 3-character literal start and `*`.
        assert_eq!(generalize("c-012345-x", cid), "c-012345-x");
        assert_eq!(generalize("0123456789", cid), "0123456789");
        assert_eq!(generalize("ab1a2b3c4d", cid), "ab1a2b3c4d");
        // Nor one that matches a node interface.
        assert_eq!(generalize("eth012345", cid), "eth012345");
        assert_eq!(generalize("ens1a2b3c4d", cid), "ens1a2b3c4d");
        assert_eq!(generalize("cni0", cid), "cni0");
        assert_eq!(generalize("eth0", cid), "eth0");
        // All hex: no prefix to keep, so it stays exact.
        assert_eq!(generalize("deadbeef", cid), "deadbeef");
        assert_eq!(generalize("br-12345", cid), "br-12345");
    }

    #[test]
    fn records_of_other_plugins_and_builds_are_not_used() {
        let mut other = ok("link.list", json!({"ns": "container"}));
        other.plugin = "theirs".into();
        let mut rebuilt = ok("link.list", json!({"ns": "container"}));
        rebuilt.sha256 = "cd".repeat(32);
        let e = select(vec![other.clone()], "mine", &SHA.repeat(32), "log").expect_err("none");
        assert!(e.to_string().contains("no record"), "{e}");
        let e = select(vec![rebuilt.clone()], "mine", &SHA.repeat(32), "log").expect_err("pin");
        assert!(e.to_string().contains(&"cd".repeat(32)), "{e}");
        let mine = ok("link.list", json!({"ns": "container"}));
        let got = select(vec![other, rebuilt, mine], "mine", &SHA.repeat(32), "log").expect("one");
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn empty_runs_give_an_empty_valid_entry() {
        let e = parsed(&[ok("netns.container", json!({}))]);
        assert_eq!(e.container, NsGrant::default());
        let v = entry_json(&e);
        assert_eq!(v, json!({"sha256": SHA.repeat(32)}));
    }

    #[test]
    fn grants_only_refused_calls_needed_are_noted_first() {
        let denied = rec(
            "ADD",
            "link.set-up",
            json!({"ns": "host", "index": 2, "up": true}),
            "denied",
            Some("host link \"eth0\" (index 2) was not created by wasmcni and matches none of plugins.mine.host.links"),
        );
        let wide = rec(
            "ADD",
            "route.add",
            json!({"ns": "host", "route": {"destination": "10.0.0.0/8"}}),
            "denied",
            Some("plugins.mine.host.routes is false"),
        );
        let store = rec(
            "ADD",
            "ipam-store.[static]store.open",
            json!({"data-dir": "/etc"}),
            "denied",
            Some("IPAM data dir /etc lies under none of plugins.mine.ipam-roots"),
        );
        let records = [
            ok(
                "link.set-up",
                json!({"ns": "container", "index": 1, "up": true}),
            ),
            ok("netns.host", json!({})),
            ok(
                "address.add",
                json!({"ns": "host", "link-index": 9, "prefix": "10.1.2.3/32"}),
            ),
            denied,
            wide,
            store,
        ];
        let e = parsed(&records);
        let h = e.host.clone().expect("host");
        // Kept, as audit2allow keeps them ...
        assert_eq!(h.links, vec![Pattern("eth0".into())]);
        assert!(h.modify && h.routes && e.container.modify);
        assert_eq!(e.ipam_roots, vec![PathBuf::from("/etc")]);
        assert_eq!(h.prefixes, vec!["10.0.0.0/8".parse().expect("net")]);
        // ... but named, first.
        let (_, notes) = derive(&records, &SHA.repeat(32));
        let refused: Vec<&String> = notes
            .iter()
            .take_while(|n| n.contains("only from refused calls"))
            .collect();
        for g in [
            "host.links: [\"eth0\"]",
            "host.modify",
            "host.routes",
            "host.prefixes: [\"10.0.0.0/8\"]",
            "ipam-roots: [\"/etc\"]",
        ] {
            assert!(
                refused.iter().any(|n| n.starts_with(&format!("{g} only"))),
                "{g} not noted first: {notes:?}"
            );
        }
        assert!(
            refused[0].ends_with("the plugin was denied it; grant it only if it needs it"),
            "{notes:?}"
        );
        // What an allowed call needed is not flagged (nor the host entry
        // an allowed host call implies).
        for g in ["container.modify", "host only", "host.addresses"] {
            assert!(!notes.iter().any(|n| n.starts_with(g)), "{g}: {notes:?}");
        }
        assert_eq!(refused.len(), 5, "{notes:?}");
    }

    #[test]
    fn names_and_paths_from_the_log_are_checked_before_they_become_grants() {
        let mut star = ok(
            "link.set-up",
            json!({"ns": "host", "index": 4, "up": false}),
        );
        star.extra
            .insert("node-links".into(), json!({"4": {"name": "*"}}));
        let mut long = ok(
            "link.set-mtu",
            json!({"ns": "host", "index": 5, "mtu": 1400}),
        );
        long.extra.insert(
            "node-links".into(),
            json!({"5": {"name": "a-name-longer-than-15"}}),
        );
        let spaced = rec(
            "ADD",
            "link.set-mtu",
            json!({"ns": "host", "index": 6, "mtu": 1400}),
            "denied",
            Some("host link \"a b\" (index 6) matches none of plugins.mine.host.links"),
        );
        let records = [
            star,
            long,
            spaced,
            ok("link.create-dummy", json!({"ns": "host", "name": "*"})),
            ok("link.create-dummy", json!({"ns": "host", "name": ".."})),
            ok("link.create-dummy", json!({"ns": "host", "name": "dummy0"})),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.conf.*.forwarding", "value": "1"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.conf.dummy0.forwarding", "value": "1"}),
            ),
            ok("ipam-store.[static]store.open", json!({"data-dir": "/"})),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "var/lib"}),
            ),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "/var/lib/cni/../../../etc"}),
            ),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "/var/lib/./x"}),
            ),
            ok(
                "ipam-store.[static]store.open",
                json!({"data-dir": "/var/lib/mine"}),
            ),
            ok("delegate.run", json!({"plugin-type": "../../bin/sh"})),
            ok("delegate.run", json!({"plugin-type": "host-local"})),
        ];
        let e = parsed(&records);
        let h = e.host.expect("host");
        assert!(h.links.is_empty() && h.bridges.is_empty(), "{:?}", h.links);
        assert_eq!(h.names, Some(vec![Pattern("dummy0".into())]));
        assert_eq!(
            h.sysctls,
            vec![Pattern("net.ipv4.conf.dummy0.forwarding".into())]
        );
        assert_eq!(e.ipam_roots, vec![PathBuf::from("/var/lib/mine")]);
        assert_eq!(e.delegates, vec!["host-local".to_owned()]);
        let (_, notes) = derive(&records, &SHA.repeat(32));
        for bad in [
            "\"*\"",
            "\"a-name-longer-than-15\"",
            "\"a b\"",
            "\"..\"",
            "\"net.ipv4.conf.*.forwarding\"",
            "\"/\"",
            "\"var/lib\"",
            "\"/var/lib/cni/../../../etc\"",
            "\"/var/lib/./x\"",
            "\"../../bin/sh\"",
        ] {
            assert!(
                notes
                    .iter()
                    .any(|n| n.contains(bad) && n.contains("left out")
                        || n.contains(bad) && n.contains("no `names` grant")),
                "{bad}: {notes:?}"
            );
        }
    }

    #[test]
    fn generalization_that_would_be_too_broad_keeps_the_name_with_a_note() {
        let mut node = ok(
            "link.create-veth",
            json!({"ns": "host", "name": "upl1a2b3c4d", "peer-ns": "container", "peer-name": "eth0"}),
        );
        // `upl*` would match the node's `uplink0`.
        node.extra
            .insert("node-links".into(), json!({"2": {"name": "uplink0"}}));
        let records = [
            node,
            ok(
                "link.create-dummy",
                json!({"ns": "host", "name": "0123456789ab"}),
            ),
            ok(
                "link.create-dummy",
                json!({"ns": "host", "name": "eth0123456"}),
            ),
            ok(
                "link.create-dummy",
                json!({"ns": "host", "name": "veth1a2b3c4d"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.conf.c-012345.proxy_arp", "value": "1"}),
            ),
        ];
        let e = parsed(&records);
        let h = e.host.expect("host");
        assert_eq!(
            h.names,
            Some(vec![
                Pattern("upl1a2b3c4d".into()),
                Pattern("0123456789ab".into()),
                Pattern("eth0123456".into()),
                Pattern("veth*".into()),
            ])
        );
        assert_eq!(
            h.sysctls,
            vec![Pattern("net.ipv4.conf.c-012345.proxy_arp".into())]
        );
        for n in h.names.iter().flatten().chain(&h.sysctls) {
            let literal = n.0.split('*').next().unwrap_or("");
            assert!(!n.0.contains('*') || literal.len() >= 3, "{n:?}");
        }
        let (_, notes) = derive(&records, &SHA.repeat(32));
        for (name, why) in [
            ("upl1a2b3c4d", "\"uplink0\""),
            ("0123456789ab", "shorter than 3"),
            ("eth0123456", "node link name"),
            ("c-012345", "shorter than 3"),
        ] {
            assert!(
                notes
                    .iter()
                    .any(|n| n.contains(&format!("{name:?} kept exact")) && n.contains(why)),
                "{name}: {notes:?}"
            );
        }
        assert!(
            notes
                .iter()
                .any(|n| n.contains("\"veth1a2b3c4d\" became the pattern \"veth*\"")),
            "{notes:?}"
        );
    }

    #[test]
    fn cni_ifname_becomes_a_star_in_the_container_namespace_only() {
        // The runtime's CNI_IFNAME is eth0, as a node uplink often is too.
        let records = [
            ok(
                "sysctl.set",
                json!({"ns": "host", "key": "net.ipv4.conf.eth0.proxy_arp", "value": "1"}),
            ),
            ok(
                "sysctl.set",
                json!({"ns": "container", "key": "net.ipv4.conf.eth0.arp_notify", "value": "1"}),
            ),
        ];
        let e = parsed(&records);
        assert_eq!(
            e.host.expect("host").sysctls,
            vec![Pattern("net.ipv4.conf.eth0.proxy_arp".into())]
        );
        assert_eq!(
            e.container.sysctls,
            vec![Pattern("net.ipv4.conf.*.arp_notify".into())]
        );
    }
}

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
//! path), and the entry is their union:
//! - rights per namespace (`read`, `modify`, `move`, `addresses`, ...) and
//!   the link kinds it created;
//! - host `names` of the links it created, moved in or renamed: exact,
//!   except a part taken from the container ID or a random hex suffix
//!   (as `veth1a2b3c4d`), which becomes `*`;
//! - host `prefixes`: the networks of the addresses and route
//!   destinations it used, exactly;
//! - `sysctls`: the keys, exactly, except the link in a per-link key when
//!   it is the runtime's `CNI_IFNAME` or generalized as `names` are;
//! - host `links` / `masters` / `bridges`: node links it used that it did
//!   not create, by name. A node's audit log records links by index, so
//!   these are known from denials (the reason names the link) or from a
//!   `try` run (whose records carry `node-links`);
//! - `ipam-roots` (the data dirs it opened) and `delegates`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::Value;

use crate::audit::Logged;
use crate::netns::Kind;
use crate::policy::{Entry, LinkKind, NsGrant, Pattern};

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
            Need::Sysctl(k, p) => write!(f, "{}.sysctls: [{}]", ns_name(*k), q(p)),
            Need::Name(p) => write!(f, "host.names: [{}]", q(p)),
            Need::UnknownName => write!(f, "host.names: [the link's name]"),
            Need::Prefix(n) => write!(f, "host.prefixes: [{}]", q(&n.to_string())),
            Need::Links(n) => write!(f, "host.links: [{}]", q(n)),
            Need::Masters(n) => write!(f, "host.masters: [{}]", q(n)),
            Need::Bridges(n) => write!(f, "host.bridges: [{}]", q(n)),
            Need::IpamRoot(p) => write!(f, "ipam-roots: [{}]", q(&p.display().to_string())),
            Need::Delegate(n) => write!(f, "delegates: [{}]", q(n)),
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
    if r.call.starts_with("journal.") {
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

/// A name with the parts a plugin derives from its invocation made `*`:
/// a run of at least 6 characters of the container ID's start, or a
/// trailing random-looking hex suffix (6 or more hex digits after a
/// non-hex prefix, as `veth1a2b3c4d`).
pub fn generalize(name: &str, container_id: &str) -> String {
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

/// A sysctl key with the link of a per-link key generalized: `*` for the
/// runtime's interface name, else as [`generalize`].
fn sysctl_pattern(key: &str, r: &Logged) -> String {
    let parts: Vec<&str> = key.split('.').collect();
    if let ["net", proto, section @ ("conf" | "neigh"), link, rest @ ..] = parts.as_slice() {
        if *link != "all" && *link != "default" && !rest.is_empty() {
            let name = link.replace('/', ".");
            let general = if !r.ifname.is_empty() && name == r.ifname {
                "*".to_owned()
            } else {
                generalize(&name, &r.container_id).replace('.', "/")
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
    if !counts(r) {
        return Vec::new();
    }
    let a = &r.args;
    let s = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("");
    let mut out = Vec::new();
    let Some(kind) = kind_of(&a["ns"]).or(match r.call.as_str() {
        "netns.host" => Some(Kind::Host),
        _ => None,
    }) else {
        // Calls without a namespace.
        match r.call.as_str() {
            "delegate.run" => {
                let t = s("plugin-type");
                if !t.is_empty() {
                    out.push(Need::Delegate(t.to_owned()));
                }
            }
            "ipam-store.[static]store.open" => {
                let dir = a
                    .get("data-dir")
                    .and_then(Value::as_str)
                    .unwrap_or(crate::ipam::DEFAULT_DATA_DIR);
                out.push(Need::IpamRoot(PathBuf::from(dir)));
            }
            _ => {}
        }
        return out;
    };
    // Any host field implies a host entry; only `netns.host` needs the
    // entry alone.
    let host = kind == Kind::Host;
    let index = index_of(&a["index"]);
    let name = |out: &mut Vec<Need>, k: Kind, n: Option<&str>| {
        if k == Kind::Host {
            out.push(match n {
                Some(n) if !n.is_empty() => Need::Name(generalize(n, &r.container_id)),
                _ => Need::UnknownName,
            });
        }
    };
    let on = |k: &str| a.get(k).and_then(Value::as_bool).unwrap_or(false);
    match r.call.as_str() {
        "netns.host" => out.push(Need::Host),
        "link.get-by-name" | "link.get-by-index" | "link.list" | "link.find-devices"
        | "link.port-vlans" | "address.list" | "route.list" => out.push(Need::Read(kind)),
        "link.create-veth" => {
            out.push(Need::Create(kind, LinkKind::Veth));
            name(&mut out, kind, Some(s("name")));
            if let Some(peer) = kind_of(&a["peer-ns"]) {
                out.push(Need::Create(peer, LinkKind::Veth));
                name(&mut out, peer, Some(s("peer-name")));
            }
        }
        "link.create-bridge" | "link.create-dummy" | "link.create-tap" => {
            let what = match r.call.as_str() {
                "link.create-bridge" => LinkKind::Bridge,
                "link.create-dummy" => LinkKind::Dummy,
                _ => LinkKind::Tap,
            };
            out.push(Need::Create(kind, what));
            name(&mut out, kind, Some(s("name")));
        }
        "link.create-macvlan" | "link.create-ipvlan" | "link.create-vlan" => {
            let what = match r.call.as_str() {
                "link.create-macvlan" => LinkKind::Macvlan,
                "link.create-ipvlan" => LinkKind::Ipvlan,
                _ => LinkKind::Vlan,
            };
            out.push(Need::Create(kind, what));
            name(&mut out, kind, Some(s("name")));
            if kind_of(&a["master-ns"]) == Some(Kind::Host) {
                if let Some(m) = node_link(r, index_of(&a["master"])) {
                    out.push(Need::Masters(m.name));
                }
            }
        }
        "link.move-to" => {
            out.push(Need::Move(kind));
            if let Some(target) = kind_of(&a["target"]) {
                out.push(Need::Move(target));
                let new = a.get("new-name").and_then(Value::as_str);
                name(&mut out, target, new);
            }
            if host {
                if let Some(l) = node_link(r, index) {
                    out.push(Need::Links(l.name));
                }
            }
        }
        "link.set-up"
        | "link.set-promiscuous"
        | "link.set-mac"
        | "link.set-master"
        | "link.set-mtu"
        | "link.set-hairpin"
        | "link.set-name"
        | "link.set-alias"
        | "link.delete"
        | "link.set-port-vlans"
        | "link.share" => {
            out.push(Need::Modify(kind));
            if host {
                let shareable = match r.call.as_str() {
                    "link.set-up" => on("up"),
                    "link.set-promiscuous" => on("on"),
                    _ => false,
                };
                if let Some(l) = node_link(r, index) {
                    out.push(foreign(l, shareable));
                }
                if r.call == "link.set-master" {
                    if let Some(m) = node_link(r, index_of(&a["master"])) {
                        out.push(foreign(m, true));
                    }
                }
            }
            if r.call == "link.set-name" {
                name(&mut out, kind, Some(s("name")));
            }
        }
        "address.add" | "address.delete" | "address.announce" => {
            out.push(if r.call == "address.announce" {
                Need::Announce(kind)
            } else {
                Need::Addresses(kind)
            });
            if host {
                if let Some(l) = node_link(r, index_of(&a["link-index"])) {
                    out.push(foreign(l, true));
                }
                if r.call == "address.add" {
                    if let Some(net) = prefix(s("prefix")) {
                        out.push(Need::Prefix(net));
                    }
                }
            }
        }
        "route.add" | "route.replace" | "route.delete" => {
            out.push(Need::Routes(kind));
            if host && r.call != "route.delete" {
                let route = &a["route"];
                if let Some(net) = route
                    .get("destination")
                    .and_then(Value::as_str)
                    .and_then(prefix)
                {
                    out.push(Need::Prefix(net));
                }
                if let Some(l) = node_link(r, index_of(&route["link-index"])) {
                    out.push(Need::Links(l.name));
                }
            }
        }
        "sysctl.get" | "sysctl.set" => {
            let key = s("key");
            if !key.is_empty() {
                out.push(Need::Sysctl(kind, sysctl_pattern(key, r)));
                if host {
                    if let Some(link) = sysctl_link(key) {
                        let known = node_link_named(r, &link).or_else(|| {
                            let why = r.reason.as_deref()?;
                            quoted_after(why, "host link ")
                                .filter(|n| *n == link)
                                .map(|name| NodeLink { name, kind: None })
                        });
                        if let Some(l) = known {
                            out.push(foreign(l, r.call == "sysctl.get"));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    out
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
/// notes on what was generalized or could not be derived.
pub fn derive(records: &[Logged], sha256: &str) -> (Entry, Vec<String>) {
    let mut e = Entry {
        sha256: Some(sha256.to_owned()),
        ..Entry::default()
    };
    let mut notes = Vec::new();
    let mut names: Vec<Pattern> = Vec::new();
    let mut unknown_name = false;
    for r in records {
        for need in needs(r) {
            apply(&mut e, &mut names, &mut unknown_name, need);
        }
        for (raw, general) in generalized_names(r) {
            let note = format!("host link name {raw:?} became the pattern {general:?}");
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    if let Some(h) = e.host.as_mut() {
        h.prefixes = minimal_prefixes(std::mem::take(&mut h.prefixes));
        for p in &h.prefixes {
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
    (e, notes)
}

/// The host link names in `r` that [`generalize`] changed.
fn generalized_names(r: &Logged) -> Vec<(String, String)> {
    let a = &r.args;
    let mut out = Vec::new();
    let mut check = |ns: &Value, key: &str| {
        if kind_of(ns) == Some(Kind::Host) {
            if let Some(n) = a.get(key).and_then(Value::as_str) {
                let g = generalize(n, &r.container_id);
                if g != n {
                    out.push((n.to_owned(), g));
                }
            }
        }
    };
    if counts(r) && r.call.starts_with("link.") {
        check(&a["ns"], "name");
        check(&a["peer-ns"], "peer-name");
        check(&a["target"], "new-name");
    }
    out
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
/// it names a file, else [`crate::audit::DEFAULT_AUDIT_FILE`].
fn default_log() -> PathBuf {
    match crate::audit::Sink::from_env() {
        crate::audit::Sink::File(p) => p,
        _ => PathBuf::from(crate::audit::DEFAULT_AUDIT_FILE),
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
    let p = crate::trial::resolve_plugin(plugin)?;
    let path = from_try
        .or(audit)
        .map(Path::to_owned)
        .unwrap_or_else(default_log);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading audit records from {}", path.display()))?;
    let (records, skipped) = crate::audit::read_log(&text);
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
    use crate::policy::Policy;
    use serde_json::json;

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
                PathBuf::from(crate::ipam::DEFAULT_DATA_DIR),
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
    fn generalization() {
        let cid = "0123456789abcdef";
        assert_eq!(generalize("veth1a2b3c4d", cid), "veth*");
        assert_eq!(generalize("tap01234567", cid), "tap*");
        assert_eq!(generalize("c-012345-x", cid), "c-*-x");
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
}

//! What one audit record needs: whether it counts, and the grants of its
//! call's capability catalog row, filled in from its arguments.

use std::net::IpAddr;
use std::path::PathBuf;

use serde_json::Value;

use wasmcni_runtime::audit::{Logged, RefusedBy};
use wasmcni_runtime::caps::catalog::{self, Grant, LinkGrant, Ns, Right};
use wasmcni_runtime::netns::Kind;
use wasmcni_runtime::policy::LinkKind;

use super::names::{
    bad_ipam_root, bad_link_name, bad_sysctl_key, generalize_checked, sysctl_link, sysctl_pattern,
};
use super::need::{push, Need};
use super::node_link::{node_link, node_link_named, node_link_names, NodeLink};

/// Whether a record counts toward the suggestion: the call ran, failed in
/// the kernel, or was denied by the policy. A denial by an invariant
/// (`refused-by: invariant`) or by a limit does not: no entry would
/// change it.
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
        // A policy's refusal, as the record says (`refused-by`), never
        // read from its text; an invariant's changes with no entry (and a
        // record of a wasmcni before 0.1's refusals says neither).
        "denied" => r.refused_by == Some(RefusedBy::Policy),
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
pub(super) fn needs_noted(r: &Logged) -> (Vec<Need>, Vec<String>) {
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
            (None, Grant::Dhcp) => out.push(Need::Dhcp),
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
            | (
                Some(_),
                Grant::Delegate(_) | Grant::AttachmentState | Grant::IpamRoot(_) | Grant::Dhcp,
            ) => {}
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
                                r.link
                                    .as_ref()
                                    .filter(|l| l.name == link)
                                    .map(|l| NodeLink {
                                        name: l.name.clone(),
                                        kind: None,
                                    })
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

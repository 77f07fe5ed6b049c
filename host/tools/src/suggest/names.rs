//! What a record's link names, IPAM roots and sysctl keys become in an
//! entry: checked first (a value that could not be a grant is left out),
//! and a name generalized where a plugin derives it from its invocation,
//! never to a pattern too broad.

use wasmcni_runtime::audit::Logged;
use wasmcni_runtime::netns::Kind;
use wasmcni_runtime::policy::Pattern;

use super::need::push;
use super::node_link::node_link_names;

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
pub(super) fn generalize_checked(
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

/// Why `name`, taken from a record, cannot be granted as a link name:
/// it is no valid Linux interface name (1 to 15 bytes, no `/`, `:` or
/// white space, not `.` or `..`) or holds the pattern character `*`.
pub(super) fn bad_link_name(name: &str) -> Option<&'static str> {
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
pub(super) fn bad_ipam_root(dir: &str) -> Option<&'static str> {
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
pub(super) fn bad_sysctl_key(key: &str) -> Option<&'static str> {
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
pub(super) fn sysctl_pattern(key: &str, kind: Kind, r: &Logged, notes: &mut Vec<String>) -> String {
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
pub(super) fn sysctl_link(key: &str) -> Option<String> {
    let parts: Vec<&str> = key.split('.').collect();
    match parts.as_slice() {
        ["net", _, "conf" | "neigh", link, _, ..] if *link != "all" && *link != "default" => {
            Some(link.replace('/', "."))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

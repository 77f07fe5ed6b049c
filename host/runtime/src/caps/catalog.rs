//! The capability reference: every host function a plugin can import, with
//! the authority it exercises, the policy field that grants it (in prose,
//! and as [`Grant`]s read from its audit record), and how the journal undoes
//! it: the rows ([`Entry`]) each interface module holds, in WIT order.
//! `docs/capabilities.md` is generated from them ([`markdown`]); a unit test
//! fails when a WIT function has no row or the document is out of date
//! (`make docs` regenerates it).

use super::row::HOST_LINK;
pub use super::row::{Entry, Grant, LinkGrant, Ns, Right};
use super::{
    address, delegate, dhcp, firewall, ipam_store, link, netns, route, state, sysctl,
    traffic_control,
};

/// Every interface's rows, in WIT order.
const TABLES: &[&[&Entry]] = &[
    netns::ROWS,
    link::ROWS,
    address::ROWS,
    route::ROWS,
    sysctl::ROWS,
    traffic_control::ROWS,
    firewall::ROWS,
    ipam_store::ROWS,
    delegate::ROWS,
    state::ROWS,
    dhcp::ROWS,
];

/// Every host function, in WIT order.
pub fn entries() -> impl Iterator<Item = &'static Entry> {
    TABLES.iter().flat_map(|t| t.iter().copied())
}

/// The entry for `call`.
pub fn entry(call: &str) -> Option<&'static Entry> {
    entries().find(|e| e.call == call)
}

/// `docs/capabilities.md`.
pub fn markdown() -> String {
    let mut s = String::from(
        "<!-- Generated from the capability catalog (each module of host/runtime/src/caps holds its rows) by `make docs`; CI fails when it is stale. -->\n\
         # wasmcni capability reference\n\n\
         Every host function a plugin can import (WIT package `wasmcni:plugin`, in `wit/`), \
         what it can do, which policy field grants it, and what the journal does when ADD fails.\n\n\
         Invariants no policy can waive:\n\
         - a plugin acts only in the two namespaces it is handed (container from `CNI_NETNS`, host);\n\
         - ownership is by attachment (network, container ID, ifname): in the host namespace a \
         plugin controls only links of its own attachment (alias `wasmcni:<network>:<container id>:<ifname>`, \
         or created in the same call) and links matching its `links` patterns; a bridge its network \
         shares (alias `wasmcni-net:<network>`, or an admin's bridge matching `bridges` that no other \
         network or attachment has marked, and only if it really is a bridge) may only be brought up, made promiscuous, given an address, have \
         its MAC pinned, and have the attachment's links enslaved; it is never deleted while another \
         attachment's link is on it; a `masters` link is used as a master and never changed, also \
         not through a link stacked on it;\n\
         - new host links are named per `names` (default `veth*`, `cni*`);\n\
         - host addresses only on such links, and only those wasmcni added (IFA_PROTO 87) may be \
         deleted; host routes only in the main table and through links the plugin controls, and \
         only routes wasmcni created (protocol 87) may be replaced or deleted; a local, multipath \
         or nexthop route in the way of a replace is never touched; host addresses and route \
         destinations lie in the grant's `prefixes` and never cover an address any network's IPAM \
         state on the node reserves for another attachment (nor does a container address); a \
         host route goes via none but the attachment's own addresses and, unless to one of them, \
         neither it nor a host address's connected prefix is as specific as, more specific than, \
         or covering a route of the node's inside `prefixes` that is a connected or on-link subnet, \
         wasmcni's, or a reject route, and not through the attachment's own link;\n\
         - a firewall rule names as the container's only an address the attachment owns: an IPAM \
         delegate's result on the runtime's own config, an address its records hold for this \
         incarnation, or one in the entry's `static-ranges`; `route_localnet` is set only on the \
         attachment's own link or its network's bridge;\n\
         - sysctls only under `net.` and the grant's `sysctls` patterns (host `all`/`default` keys \
         only when a pattern names them literally); per-link host keys only for such links;\n\
         - the network is the runtime's: a delegate runs under its caller's, whatever its config \
         says; IPAM state only for that network, under the grant's `ipam-roots`, reserved for \
         this attachment, released only by it (or in GC when its holder is not a valid attachment);\n\
         - delegates only those the grant lists, each under its own policy entry, with the \
         caller's command (or DEL during ADD); their changes join the caller's journal;\n\
         - during ADD a plugin deletes only links it created in the same call (and that still \
         exist); before a change the kernel follows with flushes the journal records what it \
         flushes, and a change it could not undo (a link with a multipath route or a permanent \
         neighbour entry set down or moved) is refused;\n\
         - one invocation keeps at most `max-links` links it created (default 16, both namespaces \
         together, each end of a veth pair counted): the host removes every one at DEL or GC;\n\
         - a denied call returns `access-denied`, is audited and has no side effect; every call \
         counts against the `host-calls` budget.\n\n\
         Calls that change the kernel are refused during CHECK, GC, STATUS and VERSION (GC may release \
         IPAM reservations of attachments that are gone).\n\n\
         | call | changes the kernel | authority | policy | undo on failed ADD |\n|---|---|---|---|---|\n",
    );
    for e in entries() {
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            e.call,
            if e.mutates { "yes" } else { "no" },
            e.authority,
            e.policy,
            e.undo
        ));
    }
    s.push_str(&format!("\nHost links: {HOST_LINK}.\n"));
    s
}

/// The policy fields a grant reads, and the function of the authority
/// module (`host/runtime/src/caps/authority/`) that decides on it.
fn grant_fields(g: &Grant) -> Vec<(String, &'static str)> {
    let ns = |f: &str| format!("container.{f}, host.{f}");
    match g {
        Grant::HostEntry => vec![("host".into(), "call.rs `View::declared`")],
        Grant::Right(_, Right::ConfigVlans) => {
            vec![(ns("config-vlans"), "link.rs `View::port_vlans`")]
        }
        Grant::Right(_, r) => vec![(ns(&r.written()), "call.rs `View::declared`")],
        Grant::Tables => vec![
            ("container.routes".into(), "route.rs `chooses_tables`"),
            ("host.create: [vrf]".into(), "route.rs `chooses_tables`"),
        ],
        Grant::NewName(..) => vec![("host.names".into(), "link.rs `View::new_name`")],
        Grant::NodeLink(_, _, LinkGrant::Masters) => vec![
            ("host.masters".into(), "link.rs `View::master`"),
            ("host.links".into(), "link.rs `View::master`"),
        ],
        Grant::NodeLink(_, _, LinkGrant::Links) => {
            vec![("host.links".into(), "link.rs `View::host_link`")]
        }
        Grant::NodeLink(_, _, LinkGrant::Shared | LinkGrant::SharedIf(_)) => vec![
            ("host.links".into(), "link.rs `View::host_link`"),
            ("host.bridges".into(), "mod.rs `View::shared`"),
        ],
        Grant::Prefix(_) => vec![(
            "host.prefixes".into(),
            "address.rs `View::host_address`, route.rs `View::host_route`",
        )],
        Grant::FirewallRules(_) | Grant::FirewallKinds(_) => vec![(
            "host.firewall.<kind>".into(),
            "firewall.rs `View::firewall`",
        )],
        Grant::Sysctl(_, shared) => {
            let mut v = vec![
                (ns("sysctls"), "sysctl.rs `View::sysctl_key`"),
                ("host.links".into(), "link.rs `View::host_link`"),
            ];
            if *shared {
                v.push(("host.bridges".into(), "mod.rs `View::shared`"));
            }
            v
        }
        Grant::IpamRoot(_) => vec![("ipam-roots".into(), "store.rs `View::ipam_root`")],
        Grant::Delegate(_) => vec![(
            "delegates, native-delegates".into(),
            "delegate.rs `View::delegate`",
        )],
        Grant::AttachmentState => {
            vec![("attachment-state".into(), "call.rs `View::declared`")]
        }
        Grant::Dhcp => vec![("dhcp".into(), "dhcp.rs `View::dhcp_socket`")],
    }
}

/// The table of `docs/security-model.md` "What each grant allows": for
/// each policy field, the host functions whose catalog rows declare they
/// need it, and where the authority module decides on it; from the rows'
/// `needs`, the same source `View::declared` enforces.
pub fn grant_table() -> String {
    let mut fields: Vec<(String, Vec<&'static str>, Vec<&'static str>)> = Vec::new();
    for e in entries() {
        for g in e.needs {
            for (field, by) in grant_fields(g) {
                match fields.iter_mut().find(|(f, ..)| *f == field) {
                    Some((_, deciders, calls)) => {
                        if !calls.contains(&e.call) {
                            calls.push(e.call);
                        }
                        if !deciders.contains(&by) {
                            deciders.push(by);
                        }
                    }
                    None => fields.push((field, vec![by], vec![e.call])),
                }
            }
        }
    }
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    let mut s = String::from(
        "<!-- Generated from the capability catalog rows' `needs` by `make docs`; CI fails when it is stale. -->\n\
         | policy field | host functions it allows (with the rest of their row) | decided in `caps/authority/` |\n\
         |---|---|---|\n",
    );
    for (field, by, calls) in fields {
        let calls: Vec<String> = calls.iter().map(|c| format!("`{c}`")).collect();
        s.push_str(&format!(
            "| `{field}` | {} | {} |\n",
            calls.join(", "),
            by.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .expect("workspace root")
    }

    /// Every function of every interface the plugin world imports, read
    /// from `wit/` itself.
    fn wit_functions() -> Vec<String> {
        wit_signatures().into_iter().map(|(f, _)| f).collect()
    }

    /// Every function of every interface the plugin world imports, with
    /// its parameters (a method's `self` aside), read from `wit/` itself.
    fn wit_signatures() -> Vec<(String, Vec<String>)> {
        let mut resolve = wit_parser::Resolve::default();
        let (pkg, _) = resolve.push_dir(root().join("wit")).expect("wit parses");
        let world = resolve
            .select_world(&[pkg], Some("plugin"))
            .expect("plugin world");
        let mut out = Vec::new();
        for (_, item) in &resolve.worlds[world].imports {
            if let wit_parser::WorldItem::Interface { id, .. } = item {
                let iface = &resolve.interfaces[*id];
                let name = iface.name.clone().unwrap_or_default();
                for (f, func) in &iface.functions {
                    let params = func
                        .params
                        .iter()
                        .map(|p| p.name.clone())
                        .filter(|p| !(p == "self" && f.starts_with("[method]")))
                        .collect();
                    out.push((format!("{name}.{f}"), params));
                }
            }
        }
        out
    }

    /// What the prose must name for a grant in `needs`: a field, in
    /// backticks as the column writes it (or words the column uses for it).
    fn named_in_prose(g: &Grant) -> Vec<&'static str> {
        match g {
            Grant::HostEntry => vec!["`host`"],
            Grant::Right(_, r) => match r {
                Right::Read => vec!["`read`"],
                Right::Create(k) => vec!["`create", k.name()],
                Right::Modify => vec!["`modify`"],
                Right::Move => vec!["`move`"],
                Right::Addresses => vec!["`addresses`"],
                Right::Routes => vec!["`routes`"],
                Right::Announce => vec!["`announce`"],
                Right::TrafficControl => vec!["`traffic-control`"],
                Right::ConfigVlans => vec!["`config-vlans`"],
            },
            Grant::Tables => vec!["`routes`", "vrf"],
            // A link's row says `links` or refers to another row's; a
            // name, `names`; a master, `masters` or "master as for".
            Grant::NewName(..) => vec!["`names`"],
            Grant::NodeLink(_, _, LinkGrant::Masters) => vec!["master"],
            Grant::NodeLink(..) | Grant::Prefix(_) => vec!["host"],
            Grant::FirewallRules(_) | Grant::FirewallKinds(_) => vec!["`firewall.<kind>`"],
            Grant::Sysctl(..) => vec!["`sysctls`"],
            Grant::IpamRoot(_) => vec!["`ipam-roots`"],
            Grant::Delegate(_) => vec!["`delegates`"],
            Grant::AttachmentState => vec!["`attachment-state"],
            Grant::Dhcp => vec!["`dhcp.socket`"],
        }
    }

    /// The prose and `needs` of every row agree: a row whose policy
    /// names a field (in backticks) needs something, and one that names
    /// none needs nothing; a row that changes the kernel (or needs a grant)
    /// but says which field grants it never has an empty `needs`; each
    /// need is one the prose names.
    #[test]
    fn every_row_states_the_grants_its_policy_names() {
        let mut wrong = Vec::new();
        for e in entries() {
            let names_a_field = e.policy.contains('`');
            if names_a_field == e.needs.is_empty() {
                wrong.push(format!(
                    "{}: policy {:?} but needs {:?}",
                    e.call, e.policy, e.needs
                ));
            }
            if e.mutates && names_a_field && e.needs.is_empty() {
                wrong.push(format!("{}: changes the kernel, needs nothing", e.call));
            }
            for g in e.needs {
                for word in named_in_prose(g) {
                    if !e.policy.contains(word) {
                        wrong.push(format!("{}: needs {g:?}, policy has no {word}", e.call));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn a_call_the_catalog_does_not_know_has_no_entry() {
        assert!(entry("link.set-everything").is_none());
        assert!(entry("").is_none());
        assert!(entry("link.set-up").is_some_and(|e| !e.needs.is_empty()));
    }

    #[test]
    fn every_host_function_has_an_entry() {
        let functions = wit_functions();
        assert!(functions.len() > 20, "{functions:?}");
        let missing: Vec<_> = functions.iter().filter(|f| entry(f).is_none()).collect();
        assert!(missing.is_empty(), "no catalog entry for {missing:?}");
        let stale: Vec<_> = entries()
            .filter(|e| !functions.contains(&e.call.to_owned()))
            .map(|e| e.call)
            .collect();
        assert!(
            stale.is_empty(),
            "catalog entries for no WIT function: {stale:?}"
        );
    }

    /// A call's audit record names its arguments as the WIT function
    /// names its parameters, all of them and in order.
    #[test]
    fn every_row_names_the_parameters_of_its_wit_function() {
        let mut wrong = Vec::new();
        for (call, params) in wit_signatures() {
            if let Some(e) = entry(&call) {
                if e.args != params.as_slice() {
                    wrong.push(format!("{call}: row {:?}, WIT {params:?}", e.args));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    /// The grant table in `docs/security-model.md`, between its markers,
    /// is [`grant_table`]'s.
    #[test]
    fn security_model_grant_table_is_up_to_date() {
        const BEGIN: &str = "<!-- grant table: begin -->\n";
        const END: &str = "<!-- grant table: end -->";
        let path = root().join("docs").join("security-model.md");
        let have = std::fs::read_to_string(&path).expect("docs/security-model.md");
        let (Some(a), Some(b)) = (have.find(BEGIN), have.find(END)) else {
            panic!("docs/security-model.md has no grant table markers");
        };
        let want = format!("{}{BEGIN}{}{}", &have[..a], grant_table(), &have[b..]);
        if crate::config::get().update_docs {
            #[allow(clippy::disallowed_methods)] // a test reads its own environment
            let ci = std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(
                !ci,
                "WASMCNI_UPDATE_DOCS rewrites the file this test checks; CI=true checks it: unset it"
            );
            std::fs::write(&path, &want).expect("write docs");
        } else {
            assert!(
                have == want,
                "docs/security-model.md's grant table is out of date: run `make docs`"
            );
        }
    }

    #[test]
    fn capabilities_doc_is_up_to_date() {
        let path = root().join("docs").join("capabilities.md");
        let want = markdown();
        if crate::config::get().update_docs {
            // Regenerating makes the comparison below pass by
            // construction: never in CI.
            #[allow(clippy::disallowed_methods)] // a test reads its own environment
            let ci = std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(
                !ci,
                "WASMCNI_UPDATE_DOCS rewrites the file this test checks; CI=true checks it: unset it"
            );
            std::fs::create_dir_all(path.parent().expect("docs dir")).expect("mkdir docs");
            std::fs::write(&path, &want).expect("write docs");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/capabilities.md is out of date: run `make docs`"
        );
    }
}

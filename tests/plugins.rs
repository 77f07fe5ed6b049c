//! The standard plugins against the reference: every case file in
//! tests/cases/<plugin>/ runs, for each spec version it names, through the
//! real libcni (tests/libcni/) twice — once with Debian's reference plugins
//! (/usr/lib/cni), once with an installed wasmcni bin dir — each in a
//! sandbox of its own (a node namespace, which the plugins see as the
//! host, and container namespaces). ADD, CHECK, DEL, DEL: results, errors
//! and the kernel state of every namespace (links, addresses, routes of
//! every table, the whole `net.` settings tree, qdiscs and ingress
//! filters as `tc -j` shows them) and of the IPAM state
//! directory must match after each step, modulo what differs by
//! construction (random MACs and veth names, wasmcni's ownership marks).
//! Where the reference leaks (a failed ADD leaves its veth), wasmcni must
//! leave nothing: that is checked against the state before the ADD. The
//! runtime's DEL after every failed ADD must succeed and leave nothing
//! either (a DEL that fails forever wedges a runtime's cleanup).
//!
//! A case file:
//! ```json
//! {"about": "...", "versions": ["0.3.1", "1.0.0"],
//!  "needs": ["vlan"],
//!  "node": [["link", "add", "uplink", "type", "veth", "peer", "name", "uplinkp"]],
//!  "plugins": [ {plugin config; "@data" stands for the IPAM data dir} ],
//!  "args": "K=V;...", "capargs": {"ips": [...]},
//!  "expect": "ok" | "error",
//!  "ping": ["10.61.0.1"], "peers": 1}
//! ```
//! `ping`: addresses each container must reach after ADD; `peers`: more
//! containers attached to the same network, which must reach each other.
//! `node`: `ip` commands run in both sides' node namespaces first (the
//! node's own links: a master, a device to move). `after_first`: `ip`
//! commands run in both node namespaces after the first container's ADD,
//! before the peers' (what the node adds to a network in use: a static
//! neighbour on the bridge the first ADD made).
//! `deliberate`: where wasmcni differs from the reference on purpose:
//! `"restores-on-del"` — the reference returns a device it moved in
//! without its addresses, routes and state, wasmcni exactly as it was:
//! after each DEL wasmcni's namespaces must be as before the ADD, and the
//! reference's are not compared; `"del-idempotent"` — the reference's
//! second DEL fails (the device is gone from the container), wasmcni's
//! succeeds, as the spec asks; `"vrf-aware-check"` — the reference's
//! CHECK looks for the subnet route of each address in the main table
//! only, and fails once a VRF took it; wasmcni's looks in the table of
//! the interface's VRF and succeeds; `"del-frees-bad-config"` — a chain
//! whose last plugin's config is invalid: the reference's DEL fails on it
//! and never reaches the plugins before (the bridge's address leaks),
//! wasmcni's DEL of a config no ADD can have used succeeds, and the
//! chain's DEL leaves the containers as before the ADD and no address
//! reserved (the node keeps what any ADD and DEL leave: the bridge);
//! `"del-completes"` — the reference's DEL after the failed ADD fails
//! (it re-runs ADD's validation), wasmcni's succeeds (after every failed
//! ADD, wasmcni's DEL must succeed wherever the reference's does).
//! `"ipv4-only-check"` — the reference portmap's CHECK looks for its IPv6
//! chain although the container has no IPv6 address, and fails; wasmcni's
//! checks the families it mapped and succeeds.
//! `"localnet-restored"` — the reference portmap leaves
//! `route_localnet=1` on the interface towards the container after the
//! last DEL (and nothing guarding it); wasmcni's last DEL puts back what
//! its first ADD found (0 here): the reference's interfaces must show a
//! 1, wasmcni's none, and the rest of the state must match.
//! `"shares-go-with-last"` — the reference keeps the VLAN gateway pair it
//! handed to the network after the last DEL; wasmcni's last holder of the
//! network removes it (issue 24, S16): the reference's state must show the
//! pair, wasmcni's none of it, and the rest must match.
//! `qdiscs`: qdiscs (subsets of `tc -d -j qdisc show` entries) the node
//! must have after ADD; after each DEL no `tbf`, `ingress` or `ifb` may be
//! left.
//! `needs`: link kinds (`ip link add … type KIND`) the case uses. Cases
//! needing a kind this kernel lacks run in tests/vm/, a VM whose kernel
//! has every kind (`cases_needing_other_link_types_…`); nothing is skipped.
#![allow(clippy::disallowed_methods)] // a test reads its own environment

mod support;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use support::cni::{bin_dir, Call, Drive};
use support::{assert_same, Netns, REFERENCE_DIR};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cases")
}

/// The plugins with cases: the directories of tests/cases.
fn plugins() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(cases_dir())
        .expect("tests/cases")
        .map(|e| e.expect("entry"))
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// Every case file, as (plugin, file name, case).
fn cases() -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for plugin in plugins() {
        let dir = cases_dir().join(&plugin);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("case file");
            let case: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            out.push((
                plugin.clone(),
                f.file_name().expect("name").to_string_lossy().into_owned(),
                case,
            ));
        }
    }
    out
}

#[test]
fn every_standard_plugin_has_cases() {
    let out = std::process::Command::new(support::wasmcni())
        .args(["list", "--json"])
        .output()
        .expect("wasmcni list");
    let list: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("wasmcni list --json: {e}: {out:?}"));
    let bundled: Vec<String> = list["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .filter(|p| p["origin"] == "bundled")
        .map(|p| p["name"].as_str().expect("name").to_owned())
        .collect();
    let cases = cases();
    for p in &bundled {
        // No differential: loopback has tests/loopback.rs and
        // tests/libcni.rs; dummy and tap are newer than the reference
        // (Debian's 1.1.1 has neither): tests/device_plugins.rs checks
        // their results and kernel state against upstream's behaviour.
        // dhcp needs a DHCP server and a daemon of its own on each side:
        // tests/dhcp.rs runs it through libcni against dnsmasq and checks
        // the result and lease against the reference's documented
        // behaviour (a differential beside the reference's daemon is not
        // built yet).
        if matches!(p.as_str(), "loopback" | "dummy" | "tap" | "dhcp") {
            continue;
        }
        assert!(
            cases.iter().any(|(plugin, _, _)| plugin == p),
            "no differential cases for the standard plugin {p} (tests/cases/{p}/)"
        );
    }
    assert!(bundled.len() > 4, "{bundled:?}");
}

/// One side of a comparison: a node, its containers, IPAM data, caches.
struct Side {
    node: Netns,
    ctrs: Vec<Netns>,
    dir: tempfile::TempDir,
    bin: PathBuf,
    env: Vec<(String, String)>,
}

impl Side {
    fn new(tag: &str, bin: &Path, wasm: bool, containers: usize) -> Side {
        let node = Netns::new(&format!("{tag}n"));
        node.ip(&["link", "set", "lo", "up"]);
        let ctrs = (0..containers)
            .map(|i| Netns::new(&format!("{tag}c{i}")))
            .collect();
        let dir = support::private_tempdir();
        let mut env = Vec::new();
        if wasm {
            let policy = dir.path().join("policy.json");
            std::fs::write(
                &policy,
                json!({"plugins": {"host-local": {"ipam-roots": [dir.path().join("data")]}}})
                    .to_string(),
            )
            .expect("policy");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o600))
                .expect("chmod");
            env.push(("WASMCNI_POLICY".into(), policy.display().to_string()));
            env.push((
                "WASMCNI_AUDIT".into(),
                dir.path().join("audit.jsonl").display().to_string(),
            ));
            env.push((
                "WASMCNI_STATE_DIR".into(),
                dir.path().join("state").display().to_string(),
            ));
        }
        Side {
            node,
            ctrs,
            dir,
            bin: bin.to_owned(),
            env,
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The conflist of `case` in `version`, written for this side.
    fn conflist(&self, case: &Value, version: &str) -> PathBuf {
        let text = json!({"cniVersion": version, "name": "diffnet", "plugins": case["plugins"]})
            .to_string()
            .replace(
                "\"@data\"",
                &Value::from(self.data().display().to_string()).to_string(),
            );
        let p = self.dir.path().join("net.conflist");
        std::fs::write(&p, text).expect("conflist");
        p
    }

    fn call(&self, cmd: &str, conflist: &Path, ctr: usize, case: &Value) -> Drive {
        let capargs = match &case["capargs"] {
            Value::Null => String::new(),
            v => v.to_string(),
        };
        Call {
            node: &self.node,
            bin: &self.bin,
            cmd,
            conflist,
            netns: &self.ctrs[ctr].path,
            cid: &format!("ctr{ctr}"),
            ifname: "eth0",
            cache: &self.dir.path().join("cache"),
            args: case["args"].as_str().unwrap_or(""),
            capargs: &capargs,
            env: &self.env,
        }
        .run()
    }

    /// The kernel state of every namespace and the IPAM state, normalized.
    /// (Each namespace's snapshot waits for its own duplicate address
    /// detection to end: `Netns::snapshot`.)
    fn state(&self) -> Value {
        let mut files = serde_json::Map::new();
        if let Ok(rd) = std::fs::read_dir(self.data().join("diffnet")) {
            for e in rd.flatten() {
                let data = std::fs::read(e.path()).unwrap_or_default();
                files.insert(
                    e.file_name().to_string_lossy().into_owned(),
                    Value::from(String::from_utf8_lossy(&data).into_owned()),
                );
            }
        }
        let mut v = json!({
            "node": self.node.full_snapshot(),
            "ctrs": self.ctrs.iter().map(Netns::full_snapshot).collect::<Vec<_>>(),
            "ipam": files,
        });
        normalize(&mut v, self);
        v
    }

    fn ping(&self, ctr: usize, to: &str) -> bool {
        std::process::Command::new(support::ip_exe())
            .args([
                "netns",
                "exec",
                &self.ctrs[ctr].name,
                "ping",
                "-c",
                "1",
                "-W",
                "2",
                to,
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

/// Replaces what differs between two runs by construction: MAC addresses
/// (random), host veth names (random), IPv6 link-local addresses (from
/// the MAC), namespace paths and names, link indexes, carrier state (it
/// follows the ports after the kernel's link-watch delay); drops wasmcni's
/// ownership marks (link aliases); counts wasmcni's host route protocol
/// (87) as the reference's (`boot`); a result without `dns` as `{}`.
fn normalize(v: &mut Value, side: &Side) {
    let mut names: Vec<(String, &str)> = Vec::new();
    for ns in std::iter::once(&side.node).chain(side.ctrs.iter()) {
        names.push((ns.path.display().to_string(), "<netns>"));
        names.push((ns.name.clone(), "<ns>"));
    }
    names.push((side.data().display().to_string(), "<data>"));
    normalize_with(v, &names);
}

/// [`normalize`] with `names`, each the text that stands for it (worked
/// out once: a snapshot holds thousands of strings).
fn normalize_with(v: &mut Value, names: &[(String, &str)]) {
    fn text(s: &str, names: &[(String, &str)]) -> String {
        let mut out = s.to_owned();
        for (name, with) in names {
            if out.contains(name.as_str()) {
                out = out.replace(name.as_str(), with);
            }
        }
        let mac = support::mask_macs(&out);
        let veth = support::mask_veths(&mac);
        if veth.starts_with("fe80::") {
            return "<ll>".into();
        }
        veth
    }
    match v {
        Value::Object(m) => {
            for k in [
                "tentative",
                "ifindex",
                "link_index",
                "ifalias",
                "addr_assign_type",
                // Bridge identities embed the bridge's (random) MAC.
                "bridge_id",
                "root_id",
                "designated_root",
                "designated_bridge",
            ] {
                m.remove(k);
            }
            // Carrier follows the ports with the kernel's link-watch
            // delay (up to a second): not the plugins' doing.
            m.remove("operstate");
            if let Some(Value::Array(flags)) = m.get_mut("flags") {
                flags.retain(|f| {
                    !matches!(f.as_str(), Some("NO-CARRIER" | "LOWER_UP" | "linkdown"))
                });
            }
            // wasmcni's host routes carry protocol 87; the reference's
            // `boot` (which `ip` prints only with `-d`).
            if matches!(
                m.get("protocol").and_then(Value::as_str),
                Some("87" | "boot")
            ) {
                m.remove("protocol");
            }
            for (k, x) in m.iter_mut() {
                normalize_with(x, names);
                // Sorted by their text, which held random veth names
                // (qdiscs and filters list in link index order).
                if k.starts_with("routes") || k == "qdiscs" || k == "filters" {
                    if let Value::Array(a) = x {
                        a.sort_by_cached_key(|r| r.to_string());
                    }
                }
            }
        }
        Value::Array(a) => {
            a.iter_mut().for_each(|x| normalize_with(x, names));
            // IPv6 link-local addresses and their routes come and go with
            // carrier, after the kernel's link-watch delay: the kernel's
            // doing, not the plugins'.
            // So do the per-link multicast routes (`ff00::/8`, table
            // local), a moment after a link comes up.
            a.retain(|x| {
                x.get("local") != Some(&json!("<ll>"))
                    && x.get("dst") != Some(&json!("<ll>"))
                    && x.get("dst") != Some(&json!("ff00::/8"))
            });
            // Lines of the settings tree: their order follows the names.
            if a.iter().all(Value::is_string) {
                a.sort_by(|x, y| x.as_str().cmp(&y.as_str()));
            }
        }
        Value::String(s) => *s = text(s, names),
        _ => {}
    }
}

/// Both sides' states, taken at once (each waits for duplicate address
/// detection, and under tests/vm/ each costs seconds).
fn states(r: &Side, w: &Side) -> (Value, Value) {
    std::thread::scope(|s| {
        let rt = s.spawn(|| r.state());
        let ws = w.state();
        (rt.join().expect("reference state"), ws)
    })
}

/// A result normalized for comparison.
fn result(d: &Drive, side: &Side) -> Value {
    let mut v = d.json();
    if v.get("dns").is_none() {
        v["dns"] = json!({});
    }
    normalize(&mut v, side);
    v
}

fn outcome(d: &Drive) -> Value {
    if d.code == 0 {
        return json!("ok");
    }
    match d.cni_error() {
        Some(e) => json!({"code": e["code"]}),
        None => json!({"failed": d.stderr}),
    }
}

/// The names of a bridge's VLAN gateway pair in a state (`<bridge>.<vid>`
/// and its veth peer).
fn shared_pair(state: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for l in state["node"]["links"].as_array().into_iter().flatten() {
        let Some(name) = l["ifname"].as_str() else {
            continue;
        };
        let gateway = name
            .rsplit_once('.')
            .is_some_and(|(_, vid)| !vid.is_empty() && vid.bytes().all(|b| b.is_ascii_digit()));
        if gateway && l["linkinfo"]["info_kind"] == "veth" {
            out.push(name.to_owned());
            if let Some(peer) = l["link"].as_str() {
                out.push(peer.to_owned());
            }
        }
    }
    out
}

/// `v` without every array element that names one of `names`: an object
/// with a string field equal to one, a string with `/<name>/` in it (a
/// setting's path).
fn drop_naming(v: &mut Value, names: &[String]) {
    let names_one = |x: &Value| match x {
        Value::Object(m) => m
            .values()
            .any(|f| f.as_str().is_some_and(|s| names.iter().any(|n| n == s))),
        Value::String(s) => names.iter().any(|n| s.contains(&format!("/{n}/"))),
        _ => false,
    };
    match v {
        Value::Array(a) => {
            a.retain(|x| !names_one(x));
            for x in a {
                drop_naming(x, names);
            }
        }
        Value::Object(m) => {
            for x in m.values_mut() {
                drop_naming(x, names);
            }
        }
        _ => {}
    }
}

/// Runs one case in one version; panics naming the first difference.
/// Runs each of `cmds` (arrays of `ip` arguments; none when null) in both
/// sides' node namespaces.
fn node_commands(cmds: &Value, r: &Side, w: &Side) {
    for cmd in cmds.as_array().into_iter().flatten() {
        let args: Vec<&str> = cmd
            .as_array()
            .expect("a node command is an array of ip arguments")
            .iter()
            .map(|a| a.as_str().expect("ip argument"))
            .collect();
        r.node.ip(&args);
        w.node.ip(&args);
    }
}

fn run_case(plugin: &str, file: &str, case: &Value, version: &str) {
    let what = format!("{plugin}/{file} {version}");
    let peers = case["peers"].as_u64().unwrap_or(0) as usize;
    let ctrs = 1 + peers;
    let tag = format!("d{}", &file[..file.len().min(4)]);
    let r = Side::new(&format!("{tag}r"), Path::new(REFERENCE_DIR), false, ctrs);
    let w = Side::new(&format!("{tag}w"), bin_dir(), true, ctrs);
    node_commands(&case["node"], &r, &w);
    assert!(
        case["after_first"].is_null() || peers > 0,
        "{what}: after_first runs before the peers' ADDs; the case has none"
    );
    let (rl, wl) = (r.conflist(case, version), w.conflist(case, version));
    let (rs, initial) = states(&r, &w);
    assert_same(
        &rs,
        &initial,
        &format!("{what}: the sandboxes differ to begin with"),
    );
    let deliberate = |what: &str| {
        case["deliberate"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == what))
    };
    let expect_ok = case["expect"].as_str() != Some("error");

    // ADD, for every container (with "expect": "error", the last fails).
    for c in 0..ctrs {
        if c == 1 {
            node_commands(&case["after_first"], &r, &w);
        }
        // The state a failed ADD must leave (taken only where one is
        // expected: each snapshot costs seconds in tests/vm/).
        let before = (!expect_ok && c == ctrs - 1).then(|| w.state());
        let (ra, wa) = (r.call("add", &rl, c, case), w.call("add", &wl, c, case));
        assert_eq!(
            outcome(&ra),
            outcome(&wa),
            "{what}: ADD #{c}\nreference: {ra:?}\nwasmcni: {wa:?}"
        );
        if !expect_ok && c == ctrs - 1 {
            assert_ne!(wa.code, 0, "{what}: expected an error: {wa:?}");
            if let Some(msg) = case["msg"].as_str() {
                let e = wa.cni_error().expect("a CNI error");
                assert_eq!(e["msg"], msg, "{what}: {wa:?}");
            }
            // In a chain, libcni leaves the earlier plugins' ADDs for the
            // runtime's DEL (as containerd and CRI-O call it): after that
            // DEL, both sides alike (what a successful ADD and DEL leave,
            // like the bridge, stays on both).
            if case["plugins"].as_array().is_some_and(|p| p.len() > 1) {
                let (rd, wd) = (r.call("del", &rl, c, case), w.call("del", &wl, c, case));
                assert_eq!(
                    wd.code, 0,
                    "{what}: the runtime's DEL after the failed ADD: {wd:?}"
                );
                if deliberate("del-frees-bad-config") {
                    assert_ne!(
                        rd.code, 0,
                        "{what}: the reference's DEL now succeeds: {rd:?}"
                    );
                    // The containers as before; no address reserved
                    // (what stays is what a successful ADD and DEL leave:
                    // the bridge, host-local's lock and last-reserved
                    // files).
                    let (before, now) = (before.expect("the state before"), w.state());
                    assert_same(
                        &before["ctrs"],
                        &now["ctrs"],
                        &format!("{what}: the failed ADD and the DEL left state in a container"),
                    );
                    let ipam = now["ipam"].as_object().expect("ipam files");
                    assert!(
                        ipam.keys().all(|f| f.parse::<std::net::IpAddr>().is_err()),
                        "{what}: an address is still reserved: {ipam:?}"
                    );
                    assert_no_plugin_state(&w, &what);
                    return;
                }
                assert_eq!(
                    outcome(&rd),
                    outcome(&wd),
                    "{what}: DEL after the failed ADD"
                );
                let (rs, ws) = states(&r, &w);
                assert_same(
                    &rs,
                    &ws,
                    &format!("{what}: state after the failed ADD and DEL"),
                );
                assert_no_plugin_state(&w, &what);
                return;
            }
            // Where the reference may leak, wasmcni leaves nothing.
            let before = before.expect("the state before the failing ADD");
            assert_same(
                &before,
                &w.state(),
                &format!("{what}: a failed ADD left state"),
            );
            assert_no_plugin_state(&w, &what);
            // The runtime's DEL after the failed ADD (containerd, CRI-O and
            // podman all call it) completes wherever the reference's does:
            // validation that only matters to ADD does not run on DEL, and
            // a DEL that failed forever would wedge the container's
            // cleanup. (The reference's DEL fails where its config does not
            // decode at all, a JSON type error: wasmcni's DEL then uses
            // what it can read, and succeeds.)
            let (rd, wd) = (r.call("del", &rl, c, case), w.call("del", &wl, c, case));
            if rd.code == 0 || deliberate("del-completes") {
                assert_eq!(
                    wd.code, 0,
                    "{what}: the runtime's DEL after the failed ADD: {wd:?}\nreference: {rd:?}"
                );
            }
            // host-local's DEL opens the network's state as the
            // reference's does, which makes its `lock` file: that is no
            // reservation.
            let unlocked = |mut v: Value| {
                if let Some(ipam) = v["ipam"].as_object_mut() {
                    ipam.retain(|k, _| k != "lock" && !k.ends_with("/lock"));
                }
                v
            };
            assert_same(
                &unlocked(before),
                &unlocked(w.state()),
                &format!("{what}: the DEL after a failed ADD left state"),
            );
            assert_no_plugin_state(&w, &what);
            return;
        }
        assert_eq!(wa.code, 0, "{what}: ADD #{c}: {wa:?}");
        assert_same(
            &result(&ra, &r),
            &result(&wa, &w),
            &format!("{what}: ADD #{c} result"),
        );
    }
    let (rs, ws) = states(&r, &w);
    assert_same(&rs, &ws, &format!("{what}: state after ADD"));
    // The qdiscs the case names are there (equal on both sides, so on
    // both): `"qdiscs": [{"kind": "tbf", "options": {"rate": ..}}]`, each
    // a subset of one qdisc of the node.
    for want in case["qdiscs"].as_array().into_iter().flatten() {
        let have = ws["node"]["tc"]["qdiscs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            have.iter().any(|q| contains(q, want)),
            "{what}: no qdisc {want} after ADD: {have:?}"
        );
    }
    // Connectivity, the same on both sides.
    for c in 0..ctrs {
        for to in case["ping"].as_array().into_iter().flatten() {
            let to = to.as_str().expect("address");
            assert!(
                r.ping(c, to),
                "{what}: reference container {c} cannot reach {to}"
            );
            assert!(
                w.ping(c, to),
                "{what}: wasmcni container {c} cannot reach {to}"
            );
        }
    }
    if peers > 0 && case["ping"].is_array() {
        let addr_of = |s: &Side, c: usize| -> String {
            let v: Value =
                serde_json::from_str(&s.ctrs[c].ip(&["-j", "-4", "addr", "show", "eth0"]))
                    .expect("json");
            v[0]["addr_info"][0]["local"]
                .as_str()
                .expect("address")
                .to_owned()
        };
        for (a, b) in [(0, 1), (1, 0)] {
            assert!(r.ping(a, &addr_of(&r, b)), "{what}: reference {a} -> {b}");
            assert!(w.ping(a, &addr_of(&w, b)), "{what}: wasmcni {a} -> {b}");
        }
    }
    // CHECK (libcni allows it from 0.4.0).
    if version == "0.4.0" || version.starts_with('1') {
        for c in 0..ctrs {
            let (rc, wc) = (r.call("check", &rl, c, case), w.call("check", &wl, c, case));
            if deliberate("vrf-aware-check") {
                assert!(
                    rc.stderr.contains("Failed to find Gateway"),
                    "{what}: the reference's CHECK no longer fails on the VRF: {rc:?}"
                );
                assert_eq!(wc.code, 0, "{what}: CHECK must succeed: {wc:?}");
                continue;
            }
            if deliberate("ipv4-only-check") {
                assert!(
                    rc.stderr.contains("could not check ipv6 dnat"),
                    "{what}: the reference's CHECK no longer fails on IPv6: {rc:?}"
                );
                assert_eq!(wc.code, 0, "{what}: CHECK must succeed: {wc:?}");
                continue;
            }
            assert_eq!(outcome(&rc), outcome(&wc), "{what}: CHECK\n{rc:?}\n{wc:?}");
        }
    }
    // DEL twice.
    for round in 0..2 {
        for c in 0..ctrs {
            let (rd, wd) = (r.call("del", &rl, c, case), w.call("del", &wl, c, case));
            if round == 1 && deliberate("del-idempotent") {
                assert_eq!(wd.code, 0, "{what}: DEL #{round} must succeed: {wd:?}");
                continue;
            }
            assert_eq!(
                outcome(&rd),
                outcome(&wd),
                "{what}: DEL #{round}\n{rd:?}\n{wd:?}"
            );
        }
        if deliberate("restores-on-del") {
            let now = w.state();
            for part in ["node", "ctrs"] {
                assert_same(
                    &initial[part],
                    &now[part],
                    &format!("{what}: wasmcni after DEL #{round} ({part}) is not as before ADD"),
                );
            }
            continue;
        }
        let (mut rs, mut ws) = states(&r, &w);
        if deliberate("localnet-restored") {
            let localnet = |s: &mut Value| -> Vec<String> {
                let Some(all) = s["node"]["sysctls"].as_array_mut() else {
                    return Vec::new();
                };
                let (ln, rest): (Vec<Value>, Vec<Value>) = all
                    .drain(..)
                    .partition(|l| l.as_str().is_some_and(|l| l.contains("/route_localnet:")));
                *all = rest;
                ln.iter()
                    .filter_map(|l| l.as_str().map(str::to_owned))
                    .collect()
            };
            let (rl, wl) = (localnet(&mut rs), localnet(&mut ws));
            assert!(
                rl.iter().any(|l| l.ends_with(":1")),
                "{what}: the reference no longer leaves route_localnet on: {rl:?}"
            );
            assert!(
                wl.iter().all(|l| l.ends_with(":0")),
                "{what}: wasmcni left route_localnet on after DEL #{round}: {wl:?}"
            );
        }
        if deliberate("shares-go-with-last") {
            // The reference keeps the gateway pair it handed to the
            // network after the last DEL; wasmcni's last holder removes it.
            let names = shared_pair(&rs);
            assert!(
                !names.is_empty(),
                "{what}: the reference no longer leaves a gateway pair"
            );
            let text = ws.to_string();
            for n in &names {
                assert!(
                    !text.contains(&format!("\"{n}\"")),
                    "{what}: wasmcni left {n} after the last DEL #{round}"
                );
            }
            drop_naming(&mut rs, &names);
        }
        assert_same(&rs, &ws, &format!("{what}: state after DEL #{round}"));
        if case["qdiscs"].is_array() {
            // Nothing of the limits is left: no tbf, no ingress qdisc, no ifb.
            let qdiscs = ws["node"]["tc"]["qdiscs"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                qdiscs
                    .iter()
                    .all(|q| q["kind"] != "tbf" && q["kind"] != "ingress"),
                "{what}: qdiscs left after DEL #{round}: {qdiscs:?}"
            );
            let links = ws["node"]["links"].to_string();
            assert!(
                !links.contains("\"ifb\""),
                "{what}: an ifb left after DEL: {links}"
            );
        }
        assert_no_plugin_state(&w, &what);
    }
}

/// Whether every key of `want` is in `have` with the same value (objects
/// compared key by key, recursively).
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|x| contains(x, v))),
        _ => have == want,
    }
}

/// No plugin keeps an `attachment-state` record past the attachment's DEL.
fn assert_no_plugin_state(w: &Side, what: &str) {
    let dir = w.dir.path().join("state").join("plugin-state");
    let left: Vec<String> = walkdir(&dir);
    assert!(
        left.is_empty(),
        "{what}: plugin state left after DEL: {left:?}"
    );
}

/// Every file below `dir` (none if it is missing).
fn walkdir(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walkdir(&p));
            } else {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

/// The link kinds a case needs.
fn needs(case: &Value) -> Vec<String> {
    case["needs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| k.as_str().expect("a link kind").to_owned())
        .collect()
}

/// Runs every case (× its versions) that `pick` selects; returns how many.
/// `WASMCNI_CASES=bridge,ptp/02` narrows the run to cases whose
/// `plugin/file` starts with one of the prefixes (while developing;
/// refused under CI=true, which runs all).
///
/// Case runs go side by side ([`support::in_parallel`]): each has
/// sandboxes of its own (namespaces, IPAM data, caches).
fn run_cases(pick: impl Fn(&Value) -> bool) -> usize {
    let only: Vec<String> = support::narrowing_switch("WASMCNI_CASES")
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let mut runs = Vec::new();
    for (plugin, file, case) in cases().into_iter().filter(|(p, f, c)| {
        pick(c) && (only.is_empty() || only.iter().any(|o| format!("{p}/{f}").starts_with(o)))
    }) {
        // In tests/vm/ (cases that need a link kind) a case-version costs
        // ~20 s: two versions, one of each result format (0.3.x and 1.x;
        // the conversion is the SDK's, run in every version here by the
        // other plugins' cases); a single plugin that is to fail, one (it
        // fails before any result is written, as every version's native
        // error cases show; in a chain or with peers, earlier results are
        // converted, so both).
        let fails_alone = case["expect"] == "error"
            && case["plugins"].as_array().is_some_and(|p| p.len() == 1)
            && case["peers"].as_u64().unwrap_or(0) == 0;
        let default: &[&str] = if needs(&case).is_empty() {
            &["0.3.0", "0.3.1", "0.4.0", "1.0.0"]
        } else if fails_alone {
            &["1.0.0"]
        } else {
            &["0.3.1", "1.0.0"]
        };
        let versions: Vec<String> = case["versions"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_else(|| default.iter().map(|v| (*v).to_owned()).collect());
        for version in versions {
            runs.push((plugin.clone(), file.clone(), case.clone(), version));
        }
    }
    support::in_parallel(
        &runs,
        |_| (),
        |_, (plugin, file, case, version)| {
            eprintln!("case {plugin}/{file} {version}");
            let t = std::time::Instant::now();
            run_case(plugin, file, case, version);
            eprintln!(
                "case {plugin}/{file} {version}: {:.1} s",
                t.elapsed().as_secs_f64()
            );
        },
    );
    runs.len()
}

#[test]
fn standard_plugins_behave_as_the_reference_through_libcni() {
    support::require_root();
    let ran = run_cases(|c| needs(c).is_empty());
    assert!(
        ran >= 20 || std::env::var_os("WASMCNI_CASES").is_some(),
        "only {ran} case runs"
    );
}

/// Cases using link kinds this VM's kernel lacks (dummy, vlan, ipvlan…)
/// run where the kinds exist: here if this kernel has them all (as it does
/// inside tests/vm/), else this very test re-run inside the VM.
#[test]
fn cases_needing_other_link_types_run_on_a_kernel_that_has_them() {
    support::require_root();
    let mut kinds: Vec<String> = cases().iter().flat_map(|(_, _, c)| needs(c)).collect();
    kinds.sort();
    kinds.dedup();
    assert!(!kinds.is_empty(), "no case needs a link kind");
    let missing: Vec<&String> = kinds
        .iter()
        .filter(|k| !support::vm::kernel_has(k))
        .collect();
    if missing.is_empty() {
        let ran = run_cases(|c| !needs(c).is_empty());
        assert!(ran > 0);
    } else {
        assert!(
            !support::vm::inside(),
            "the VM's kernel lacks link kinds {missing:?}"
        );
        support::vm::rerun_this_test(
            "cases_needing_other_link_types_run_on_a_kernel_that_has_them",
        );
    }
}

//! `wasmcni audit <plugin>`: what a plugin is, what it imports (read from
//! the component itself), what its policy grants it, and what wasmcni would
//! refuse — for security reviewers, before the plugin ever runs; and
//! `wasmcni list`: every plugin a runtime can reach, with its policy status.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::{json, Value};
use wasmtime::component::types::ComponentItem;

use crate::caps::catalog;
use crate::engine;
use crate::plugins::{self, Plugin};
use crate::policy::{Policy, Source};
use crate::runner;

/// The report for `plugin` (a name or a path ending in `.wasm`).
pub fn report(plugin: &str, policy_file: Option<&Path>) -> anyhow::Result<Value> {
    let p = if plugin.ends_with(".wasm") {
        Plugin::from_path(Path::new(plugin))?
    } else {
        plugins::find(plugin)?
    };
    if let Some(why) = engine::not_a_component(plugin, p.wasm()) {
        anyhow::bail!("{why}");
    }
    let engine = engine::engine()?;
    // Compile (no cache: this is an inspection, not a run).
    let component = wasmtime::component::Component::new(&engine, p.wasm())?;
    let policy = Policy::load(policy_file)?;
    let entry = policy.resolve(p.name(), *p.origin() == plugins::Origin::Bundled)?;
    let mut imports = Vec::new();
    let mut names = Vec::new();
    for (name, item) in component.component_type().imports(&engine) {
        names.push(name.to_owned());
        let mut functions = Vec::new();
        if let ComponentItem::ComponentInstance(inst) = &item.ty {
            for (f, fitem) in inst.exports(&engine) {
                if !matches!(fitem.ty, ComponentItem::ComponentFunc(_)) {
                    continue;
                }
                let call = format!("{}.{f}", interface_name(name));
                let row = if name.starts_with("wasmcni:plugin/") {
                    catalog::entry(&call)
                } else {
                    None
                };
                functions.push(json!({
                    "function": f,
                    "authority": row.map(|e| e.authority),
                    "grant": row.map(|e| grant_status(&entry, e.needs)),
                }));
            }
        }
        let kind = if name.starts_with("wasmcni:plugin/") {
            "wasmcni"
        } else if name.starts_with("wasi:") {
            "wasi"
        } else {
            "other"
        };
        imports.push(json!({"interface": name, "kind": kind, "functions": functions}));
    }
    let refused = runner::refused_imports(&names);
    let pin_ok = entry.check_pin(p.sha256());
    // The standard plugins that share this one's component: its imports
    // are theirs too.
    let shared_with: Vec<String> = if p.shares_component() {
        plugins::bundled()
            .filter(|o| o.component_name() == p.component_name() && o.name() != p.name())
            .map(|o| o.name().to_owned())
            .collect()
    } else {
        Vec::new()
    };
    Ok(json!({
        "plugin": p.name(),
        "component": p.component_name(),
        "shared-with": shared_with,
        "sha256": p.sha256(),
        "size": p.size(),
        "origin": match p.origin() {
            plugins::Origin::Bundled => "bundled".to_owned(),
            plugins::Origin::File(f) => f.display().to_string(),
        },
        "policy": {
            "sha256-pin": entry.sha256,
            "pin-matches": pin_ok.is_ok(),
            "deadline-ms": entry.deadline_ms,
            "memory-mb": entry.memory_mb,
            "host-calls": entry.grant().host_calls,
            "max-links": entry.grant().max_links,
            "container": entry.container.to_string(),
            "host": entry.host.as_ref().map(|g| g.to_string()),
            "ipam-roots": entry.ipam_roots,
            "delegates": entry.delegates,
            "native-delegates": entry.native_delegates,
            "attachment-state": entry.attachment_state,
            "dhcp-socket": entry.dhcp.as_ref().map(|d| d.socket.display().to_string()),
            "raw": serde_json::to_value(&entry)?,
        },
        "imports": imports,
        "refused-imports": refused,
    }))
}

/// Whether `entry` grants what a call needs (`needs`, its catalog row's):
/// `granted`, `granted in the container only` / `in the host only`, or
/// `DENIED: ...` naming the field it lacks. Read from the grant alone: the
/// checks on the call's arguments (link names and patterns, prefixes,
/// sysctl keys, data dirs) apply when it runs.
fn grant_status(entry: &crate::policy::Entry, needs: &[catalog::Grant]) -> String {
    use crate::policy::{LinkKind, NsGrant};
    use catalog::{Grant, Ns, Right};
    // What each namespace's grant lacks for the call to act there.
    let lacks = |g: Option<&NsGrant>, host: bool| -> Vec<String> {
        let Some(g) = g else {
            return vec!["an entry".to_owned()];
        };
        let mut missing = Vec::new();
        for n in needs {
            match *n {
                Grant::Right(Ns::Call, r) if !r.granted_by(g) => missing.push(r.written()),
                Grant::Tables if host && !g.create.contains(&LinkKind::Vrf) => {
                    missing.push(Right::Create(LinkKind::Vrf).written())
                }
                Grant::Tables if !host && !g.routes => missing.push("routes".to_owned()),
                Grant::Sysctl(..) if g.sysctls.is_empty() => missing.push("sysctls".to_owned()),
                Grant::FirewallRules(_) | Grant::FirewallKinds(_) if g.firewall.is_empty() => {
                    missing.push("firewall".to_owned())
                }
                Grant::Prefix(_) if host && g.prefixes.is_empty() => {
                    missing.push("prefixes".to_owned())
                }
                _ => {}
            }
        }
        missing
    };
    // Needs about no namespace.
    let mut outside = Vec::new();
    for n in needs {
        match *n {
            Grant::IpamRoot(_) if entry.ipam_roots.is_empty() => outside.push("ipam-roots"),
            Grant::Delegate(_) if entry.delegates.is_empty() => outside.push("delegates"),
            Grant::AttachmentState if !entry.attachment_state => outside.push("attachment-state"),
            Grant::Dhcp if entry.dhcp.is_none() => outside.push("dhcp"),
            Grant::HostEntry if entry.host.is_none() => outside.push("host"),
            _ => {}
        }
    }
    if !outside.is_empty() {
        return format!("DENIED: needs {}", outside.join(", "));
    }
    let in_ns = needs.iter().any(|n| {
        !matches!(
            n,
            Grant::IpamRoot(_) | Grant::Delegate(_) | Grant::AttachmentState | Grant::Dhcp
        )
    });
    if !in_ns {
        return "granted".to_owned();
    }
    let host_only = needs.iter().any(|n| matches!(n, Grant::HostEntry));
    let c = if host_only {
        vec!["(acts in the host)".to_owned()]
    } else {
        lacks(Some(&entry.container), false)
    };
    let h = lacks(entry.host.as_ref(), true);
    match (c.is_empty(), h.is_empty()) {
        (true, true) => "granted".to_owned(),
        (true, false) => "granted in the container only".to_owned(),
        (false, true) => "granted in the host only".to_owned(),
        (false, false) if host_only => format!("DENIED: needs host.{}", h.join(", host.")),
        (false, false) if entry.host.is_none() => format!(
            "DENIED: needs container.{} (the entry has no host grant)",
            c.join(", container.")
        ),
        (false, false) => format!(
            "DENIED: needs container.{} or host.{}",
            c.join(", container."),
            h.join(", host.")
        ),
    }
}

/// `wasmcni:plugin/link@0.1.0` -> `link`.
fn interface_name(import: &str) -> &str {
    let tail = import.rsplit('/').next().unwrap_or(import);
    tail.split('@').next().unwrap_or(tail)
}

/// Prints the report as text (or JSON).
pub fn print(plugin: &str, as_json: bool, policy_file: Option<&Path>) -> anyhow::Result<()> {
    let r = report(plugin, policy_file)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".to_owned(),
        v => v.to_string(),
    };
    println!("plugin   {}", s(&r["plugin"]));
    println!("sha256   {}", s(&r["sha256"]));
    println!("size     {} bytes", s(&r["size"]));
    println!("origin   {}", s(&r["origin"]));
    let shared: Vec<String> = r["shared-with"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    if !shared.is_empty() {
        println!(
            "component {} (shared with {}: what runs is this plugin's code, under this plugin's policy)",
            s(&r["component"]),
            shared.join(", ")
        );
    }
    let pol = &r["policy"];
    println!("\npolicy");
    println!(
        "  pin        {}{}",
        s(&pol["sha256-pin"]),
        if pol["pin-matches"] == true {
            ""
        } else {
            "  (MISMATCH: the plugin will be refused)"
        }
    );
    println!(
        "  limits     deadline {} ms, memory {} MiB, {} host calls, {} links",
        pol["deadline-ms"]
            .as_u64()
            .unwrap_or(runner::DEFAULT_DEADLINE.as_millis() as u64),
        pol["memory-mb"]
            .as_u64()
            .unwrap_or((runner::DEFAULT_MEMORY_CAP >> 20) as u64),
        s(&pol["host-calls"]),
        s(&pol["max-links"])
    );
    println!("  container  {}", s(&pol["container"]));
    println!("  host       {}", s(&pol["host"]));
    let list = |v: &Value| {
        let items: Vec<String> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if items.is_empty() {
            "none".to_owned()
        } else {
            items.join(", ")
        }
    };
    println!("  ipam state {}", list(&pol["ipam-roots"]));
    println!(
        "  attachment state {}",
        if pol["attachment-state"] == true {
            "yes"
        } else {
            "no"
        }
    );
    println!(
        "  dhcp       {}",
        pol["dhcp-socket"].as_str().unwrap_or("none")
    );
    println!(
        "  delegates  {} (native: {})",
        list(&pol["delegates"]),
        list(&pol["native-delegates"])
    );
    if shared.is_empty() {
        println!("\nimports (each host function: what it can do; whether this policy grants it)");
    } else {
        println!(
            "\nimports of the shared component, for all the plugins it carries (each host \
             function: what it can do; whether this policy grants it)"
        );
    }
    let mut wasi = Vec::new();
    let mut denied = 0;
    let refused_list = r["refused-imports"].as_array().cloned().unwrap_or_default();
    for imp in r["imports"].as_array().into_iter().flatten() {
        // The WASI interfaces wasmcni provides, on one line: a reviewer
        // needs only know they are there (refused ones are listed below).
        if imp["kind"] == "wasi" && !refused_list.contains(&imp["interface"]) {
            wasi.push(s(&imp["interface"]));
            continue;
        }
        println!("  {}", s(&imp["interface"]));
        for f in imp["functions"].as_array().into_iter().flatten() {
            match (f["authority"].as_str(), f["grant"].as_str()) {
                (Some(a), Some(g)) => {
                    denied += usize::from(g.starts_with("DENIED"));
                    println!("    {:<22} {a}\n    {:<22} -> {g}", s(&f["function"]), "");
                }
                (Some(a), None) => println!("    {:<22} {a}", s(&f["function"])),
                _ => println!("    {}", s(&f["function"])),
            }
        }
    }
    if denied > 0 {
        println!(
            "  {denied} function(s) this policy denies: a call to one fails with access-denied \
             (the checks on a call's arguments apply at run time too){}",
            if shared.is_empty() {
                ""
            } else {
                "; in a shared component, some are other plugins' calls"
            }
        );
    }
    if !wasi.is_empty() {
        println!(
            "  WASI, as wasmcni provides it (stdio, the CNI environment, clocks, random; no \
             file or network access): {}",
            wasi.join(", ")
        );
    }
    let refused = r["refused-imports"].as_array().cloned().unwrap_or_default();
    if refused.is_empty() {
        println!("\nrefused imports: none");
    } else {
        println!("\nrefused imports (the plugin will not run):");
        for i in refused {
            println!("  {}", s(&i));
        }
    }
    Ok(())
}

/// What a run makes of a plugin's policy entry: the status `wasmcni
/// list` shows and, when every run of the plugin would be refused, why.
/// `wasmcni install` asks the same of the node it is about to make live.
#[derive(Debug, Clone)]
pub struct PolicyStatus {
    /// `default`, `entry (policy.d/NAME.json)`, `pinned ok`, `pin
    /// MISMATCH`, `no entry: no authority`, `INVALID: ...`.
    pub status: String,
    /// Why wasmcni refuses to run the plugin (an invalid, untrusted or
    /// ambiguous entry; a pin that is not the plugin's sha256), naming the
    /// file that says so; `None`: it runs.
    pub refused: Option<String>,
    /// Where its entry comes from; `None`: it has none (no authority).
    pub source: Option<Source>,
    /// Whether its pin matches, if it has one.
    pub pinned: Option<bool>,
}

impl PolicyStatus {
    /// The status of a plugin whose sha256 is `sha256`, given its entry as
    /// [`Policy::resolve`] resolves it and where [`Policy::source`] says it
    /// comes from.
    pub fn of(
        resolved: Result<crate::policy::Entry, crate::policy::PolicyError>,
        source: Option<Source>,
        sha256: &str,
    ) -> PolicyStatus {
        let entry = match resolved {
            Ok(entry) => entry,
            Err(e) => {
                return PolicyStatus {
                    status: format!("INVALID: {e}"),
                    refused: Some(e.to_string()),
                    source,
                    pinned: None,
                }
            }
        };
        let mut status = vec![match &source {
            None => "no entry: no authority".to_owned(),
            Some(Source::Embedded) => "default".to_owned(),
            Some(Source::File(p)) => format!("entry ({})", short_path(p, 1)),
            Some(Source::Dir(p)) => format!("entry ({})", short_path(p, 2)),
        }];
        let pin = entry.sha256.as_ref().map(|_| entry.check_pin(sha256));
        let refused = match &pin {
            Some(Ok(())) => {
                status.push("pinned ok".into());
                None
            }
            Some(Err(why)) => {
                status.push("pin MISMATCH".into());
                Some(match &source {
                    Some(s) => format!("{why} (in {s})"),
                    None => why.clone(),
                })
            }
            None => None,
        };
        PolicyStatus {
            status: status.join(", "),
            refused,
            source,
            pinned: pin.map(|p| p.is_ok()),
        }
    }
}

/// The policy status of `plugin` under `policy` (or the error that makes
/// every run fail), as `list --json` shows it.
fn policy_status(policy: &Result<Policy, String>, plugin: &Plugin) -> Value {
    let policy = match policy {
        Ok(p) => p,
        Err(e) => return json!({"status": format!("INVALID: {e}"), "valid": false}),
    };
    let bundled = *plugin.origin() == plugins::Origin::Bundled;
    let s = PolicyStatus::of(
        policy.resolve(plugin.name(), bundled),
        policy.source(plugin.name(), bundled),
        plugin.sha256(),
    );
    if s.pinned.is_none() && s.refused.is_some() {
        return json!({"status": s.status, "valid": false});
    }
    json!({
        "status": s.status,
        "valid": s.refused.is_none(),
        "source": s.source.map(|s| s.to_string()),
        "pinned": s.pinned,
    })
}

/// The last `n` components of `path` (`policy.d/x.json`).
fn short_path(path: &Path, n: usize) -> String {
    let parts: Vec<_> = path.components().collect();
    let tail = &parts[parts.len().saturating_sub(n)..];
    tail.iter()
        .collect::<std::path::PathBuf>()
        .display()
        .to_string()
}

/// What `list --bin-dir` says a `wasmcni-chain` link reaches.
const CHAIN_RUNNER: &str = "bundled (chain runner)";

/// What a name in a CNI bin dir is, as the runtime would execute it
/// (`kind`: `wasmcni`, `wasmcni link`, `native binary`, `dangling link`,
/// `not executable`, `directory`, `unreadable`), and for a wasmcni link
/// the plugin it reaches with third-party plugins in `plugin_dir`
/// (`plugin`: `bundled`, the file, or `NOT FOUND: ...`).
pub fn bin_entry(dir: &Path, name: &str, plugin_dir: &Path) -> Value {
    let path = dir.join(name);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return json!({"name": name, "kind": "unreadable"});
    };
    let self_id = std::fs::metadata(dir.join(crate::plugins::SELF_NAME))
        .ok()
        .map(|m| (m.dev(), m.ino()));
    let plugin = |name: &str| {
        // Not a plugin but the chain runner, carried in wasmcni: a link of
        // this name runs it whatever the plugin dir holds.
        if name == crate::chain::NAME {
            return Value::from(CHAIN_RUNNER);
        }
        match plugins::find_in(name, plugin_dir) {
            Ok(p) => Value::from(match p.origin() {
                plugins::Origin::Bundled => "bundled".to_owned(),
                plugins::Origin::File(f) => f.display().to_string(),
            }),
            Err(e) => Value::from(format!("NOT FOUND: {e}")),
        }
    };
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&path)
            .map(|t| t.display().to_string())
            .unwrap_or_default();
        return match std::fs::metadata(&path) {
            Err(_) => json!({"name": name, "kind": "dangling link", "target": target}),
            Ok(m)
                if Some((m.dev(), m.ino())) == self_id
                    || Path::new(&target).file_name()
                        == Some(crate::plugins::SELF_NAME.as_ref()) =>
            {
                json!({"name": name, "kind": "wasmcni link", "target": target, "plugin": plugin(name)})
            }
            Ok(_) => json!({"name": name, "kind": "native binary", "target": target}),
        };
    }
    if meta.is_dir() {
        return json!({"name": name, "kind": "directory"});
    }
    if name == crate::plugins::SELF_NAME {
        return json!({"name": name, "kind": "wasmcni"});
    }
    if Some((meta.dev(), meta.ino())) == self_id {
        return json!({"name": name, "kind": "wasmcni link", "plugin": plugin(name)});
    }
    if meta.mode() & 0o111 != 0 {
        json!({"name": name, "kind": "native binary"})
    } else {
        json!({"name": name, "kind": "not executable"})
    }
}

/// The report of `wasmcni list`: every plugin a runtime can reach (the
/// standard ones and every `NAME.wasm` in the plugin dir) with its origin,
/// sha256 and policy status; with `bin_dir`, what each name there is.
pub fn list_report(bin_dir: Option<&Path>, policy_file: Option<&Path>) -> anyhow::Result<Value> {
    let policy = Policy::load(policy_file).map_err(|e| e.to_string());
    let mut rows = Vec::new();
    let row = |p: &Plugin, origin: String, note: Option<String>| {
        let mut v = json!({
            "name": p.name(),
            "origin": origin,
            "component": p.component_name(),
            "sha256": p.sha256(),
            "size": p.size(),
            "policy": policy_status(&policy, p),
        });
        if let Some(n) = note {
            v["policy"]["status"] = Value::from(n);
            v["policy"]["valid"] = Value::from(false);
        }
        v
    };
    let bundled: Vec<Plugin> = plugins::bundled().collect();
    for p in &bundled {
        rows.push(row(p, "bundled".into(), None));
    }
    let plugin_dir = plugins::plugin_dir();
    for (name, found) in plugins::third_party_in(&plugin_dir) {
        let shadowed = bundled.iter().any(|b| b.name() == name);
        match found {
            Ok(p) => {
                let origin = plugin_dir
                    .join(format!("{name}.wasm"))
                    .display()
                    .to_string();
                let note = shadowed
                    .then(|| "SHADOWED: the standard plugin of this name runs instead".to_owned());
                let mut r = row(&p, origin, note);
                // Where install pulled it from, if it did (and this build).
                r["source"] = crate::distribute::origin_of(&plugin_dir, &name, p.sha256())
                    .unwrap_or(Value::Null);
                rows.push(r);
            }
            Err(e) => rows.push(json!({
                "name": name,
                "origin": plugin_dir.join(format!("{name}.wasm")).display().to_string(),
                "component": name,
                "sha256": null,
                "size": null,
                "policy": {"status": format!("UNREADABLE: {e}"), "valid": false},
            })),
        }
    }
    let (stray, orphans) = match &policy {
        Ok(p) => {
            let reachable: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
            let orphans: Vec<String> = p
                .names()
                .into_iter()
                .filter(|n| !reachable.contains(&n.as_str()))
                .filter(|n| p.source(n, false).is_some())
                .collect();
            let stray: Vec<String> = p
                .stray_files()
                .iter()
                .map(|f| f.display().to_string())
                .collect();
            (stray, orphans)
        }
        Err(_) => (Vec::new(), Vec::new()),
    };
    let mut report = json!({
        "plugin-dir": plugin_dir.display().to_string(),
        "policy-dir": crate::policy::policy_dir().map(|d| d.display().to_string()),
        "plugins": rows,
        "entries-without-plugin": orphans,
        "stray-policy-files": stray,
    });
    if let Some(dir) = bin_dir {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map_err(|e| anyhow::anyhow!("bin dir {}: {e}", dir.display()))?
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        let entries: Vec<Value> = names
            .iter()
            .map(|n| bin_entry(dir, n, &plugin_dir))
            .collect();
        report["bin-dir"] = json!({"dir": dir.display().to_string(), "entries": entries});
    }
    Ok(report)
}

/// Prints `wasmcni list` as columns (or JSON).
pub fn print_list(
    bin_dir: Option<&Path>,
    as_json: bool,
    policy_file: Option<&Path>,
) -> anyhow::Result<()> {
    let r = list_report(bin_dir, policy_file)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        v => v.to_string(),
    };
    let mut table = vec![[
        "NAME".to_owned(),
        "ORIGIN".to_owned(),
        "SHA256".to_owned(),
        "POLICY".to_owned(),
        "SOURCE".to_owned(),
    ]];
    for p in r["plugins"].as_array().into_iter().flatten() {
        let src = &p["source"];
        let source = if src.is_object() {
            format!(
                "{} (sha256:{}, signer {})",
                s(&src["reference"]),
                short_sha(s(&src["digest"]).trim_start_matches("sha256:")),
                src["signer"].as_str().unwrap_or("none required")
            )
        } else {
            "-".to_owned()
        };
        table.push([
            s(&p["name"]),
            s(&p["origin"]),
            short_sha(&s(&p["sha256"])),
            s(&p["policy"]["status"]),
            source,
        ]);
    }
    print_columns(&table);
    for (key, what) in [
        (
            "entries-without-plugin",
            "policy entries for no reachable plugin",
        ),
        (
            "stray-policy-files",
            "files in the policy directory that apply to nothing (the name is no plugin name)",
        ),
    ] {
        let items = r[key].as_array().cloned().unwrap_or_default();
        if !items.is_empty() {
            println!("\n{what}:");
            for i in items {
                println!("  {}", s(&i));
            }
        }
    }
    if let Some(b) = r.get("bin-dir") {
        println!("\nbin dir {}", s(&b["dir"]));
        let mut table = vec![["NAME".to_owned(), "KIND".to_owned(), "PLUGIN".to_owned()]];
        for e in b["entries"].as_array().into_iter().flatten() {
            let kind = match e.get("target") {
                Some(t) if e["kind"] != "wasmcni link" => format!("{} -> {}", s(&e["kind"]), s(t)),
                _ => s(&e["kind"]),
            };
            let plugin = e.get("plugin").map(s).unwrap_or_default();
            table.push([s(&e["name"]), kind, plugin]);
        }
        print_columns(&table);
    }
    Ok(())
}

/// A sha256 as the table shows it: `7c5a…10fc` (the full value is in
/// `--json`, and in `wasmcni audit`).
fn short_sha(sha: &str) -> String {
    if sha.len() == 64 && sha.is_ascii() {
        format!("{}…{}", &sha[..4], &sha[60..])
    } else {
        sha.to_owned()
    }
}

/// Prints rows as left-aligned columns, two spaces apart.
fn print_columns<const N: usize>(rows: &[[String; N]]) {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N || row[i + 1..].iter().all(String::is_empty) {
                line.push_str(cell);
                break;
            }
            line.push_str(&format!("{cell:<w$}  "));
        }
        println!("{}", line.trim_end());
    }
}

//! `wasmcni audit <plugin>`: what a plugin is, what it imports (read from
//! the component itself), what its policy grants it, and what wasmcni would
//! refuse — for security reviewers, before the plugin ever runs.

use std::path::Path;

use serde_json::{json, Value};
use wasmtime::component::types::ComponentItem;

use crate::caps::catalog;
use crate::engine;
use crate::plugins::{self, Plugin};
use crate::policy::Policy;
use crate::runner;

/// The report for `plugin` (a name or a path ending in `.wasm`).
pub fn report(plugin: &str, policy_file: Option<&Path>) -> anyhow::Result<Value> {
    let p = if plugin.ends_with(".wasm") {
        Plugin::from_path(Path::new(plugin))?
    } else {
        plugins::find(plugin)?
    };
    let engine = engine::engine()?;
    // Compile (no cache: this is an inspection, not a run).
    let component = wasmtime::component::Component::new(&engine, p.wasm())?;
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
                let authority = if name.starts_with("wasmcni:plugin/") {
                    catalog::entry(&call).map(|e| e.authority)
                } else {
                    None
                };
                functions.push(json!({"function": f, "authority": authority}));
            }
        }
        imports.push(json!({"interface": name, "functions": functions}));
    }
    let refused = runner::refused_imports(&names);
    let policy = Policy::load(policy_file)?;
    let entry = policy.entry_for(p.name(), *p.origin() == plugins::Origin::Bundled);
    let pin_ok = entry.check_pin(p.sha256());
    Ok(json!({
        "plugin": p.name(),
        "sha256": p.sha256(),
        "size": p.wasm().len(),
        "origin": format!("{:?}", p.origin()),
        "policy": {
            "sha256-pin": entry.sha256,
            "pin-matches": pin_ok.is_ok(),
            "deadline-ms": entry.deadline_ms,
            "memory-mb": entry.memory_mb,
            "host-calls": entry.grant().host_calls,
            "container": entry.container.to_string(),
            "host": entry.host.as_ref().map(|g| g.to_string()),
            "ipam-roots": entry.ipam_roots,
            "delegates": entry.delegates,
            "native-delegates": entry.native_delegates,
            "raw": serde_json::to_value(&entry)?,
        },
        "imports": imports,
        "refused-imports": refused,
    }))
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
        "  limits     deadline {} ms, memory {} MiB, {} host calls",
        pol["deadline-ms"]
            .as_u64()
            .unwrap_or(runner::DEFAULT_DEADLINE.as_millis() as u64),
        pol["memory-mb"]
            .as_u64()
            .unwrap_or((runner::DEFAULT_MEMORY_CAP >> 20) as u64),
        s(&pol["host-calls"])
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
        "  delegates  {} (native: {})",
        list(&pol["delegates"]),
        list(&pol["native-delegates"])
    );
    println!("\nimports");
    for imp in r["imports"].as_array().into_iter().flatten() {
        println!("  {}", s(&imp["interface"]));
        for f in imp["functions"].as_array().into_iter().flatten() {
            match f["authority"].as_str() {
                Some(a) => println!("    {:<22} {a}", s(&f["function"])),
                None => println!("    {}", s(&f["function"])),
            }
        }
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

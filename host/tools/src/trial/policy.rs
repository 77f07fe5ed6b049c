//! The policy a plugin runs under in the sandbox: the learning policy's
//! entry, which grants everything there, or the one given with
//! `--policy`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use serde_json::Value;

use wasmcni_runtime::plugins;
use wasmcni_runtime::policy::{ConfigKey, Entry, NsGrant, Pattern, Policy};

/// The learning policy's entry: everything, inside the sandbox.
///
/// # Capabilities
/// Every right in both namespaces (any link, name, prefix and `net.`
/// sysctl; every link kind; every standard plugin as a delegate), and IPAM
/// state under `ipam_roots`. It is only ever written into the sandbox's own
/// policy file, and `ipam_roots` are only directories the sandbox covers
/// with a tmpfs ([`enter_sandbox`](super::setup::enter_sandbox)): what
/// it grants reaches nothing of the machine.
pub(super) fn learning_entry(ipam_roots: &[PathBuf]) -> Entry {
    let all = |host: bool| NsGrant {
        links: vec![Pattern("*".into())],
        masters: vec![Pattern("*".into())],
        bridges: vec![Pattern("*".into())],
        firewall: wasmcni_runtime::policy::FirewallGrant {
            port_mappings: true,
            masquerade: true,
            forward: true,
            isolation: true,
            mac_spoof: true,
            forward_mark: None,
        },
        // `conf.all.X` in the host needs a pattern naming `all` literally.
        sysctls: [
            "net.*",
            "net.*.conf.all.*",
            "net.*.conf.default.*",
            "net.*.neigh.all.*",
            "net.*.neigh.default.*",
        ]
        .iter()
        .map(|p| Pattern((*p).to_owned()))
        .collect(),
        prefixes: if host {
            vec![
                "0.0.0.0/0".parse().unwrap_or_default(),
                "::/0".parse().unwrap_or_default(),
            ]
        } else {
            Vec::new()
        },
        names: host.then(|| vec![Pattern("*".into())]),
        config_links: if host {
            vec![
                ConfigKey::Device,
                ConfigKey::Hwaddr,
                ConfigKey::Kernelpath,
                ConfigKey::PciBusId,
                ConfigKey::DeviceId,
            ]
        } else {
            Vec::new()
        },
        adopt_peer: host,
        ..NsGrant::every_right()
    };
    Entry {
        container: all(false),
        host: Some(all(true)),
        ipam_roots: ipam_roots.to_vec(),
        delegates: plugins::bundled().map(|p| p.name().to_owned()).collect(),
        ..Entry::default()
    }
}

/// A policy given with `--policy`.
pub(super) enum GivenPolicy {
    /// A policy document (`{"plugins": {...}}`), as policy.json.
    Document(String),
    /// One plugin's entry, as a policy.d file (`NAME.json`).
    Entry(String),
}

impl GivenPolicy {
    /// Every `ipam-roots` directory it grants (any plugin's: a delegate
    /// keeps IPAM state under its own entry's).
    pub(super) fn ipam_roots(&self, name: &str) -> Vec<PathBuf> {
        match self {
            GivenPolicy::Document(t) => Policy::parse(t, "policy")
                .map(|p| {
                    p.names()
                        .iter()
                        .flat_map(|n| p.entry(n).ipam_roots)
                        .collect()
                })
                .unwrap_or_default(),
            GivenPolicy::Entry(t) => serde_json::from_str::<Value>(t)
                .ok()
                .and_then(|v| Entry::from_value(name, &v, "entry").ok())
                .map(|e| e.ipam_roots)
                .unwrap_or_default(),
        }
    }
}

/// Reads and checks `--policy`: a policy document, or the plugin's entry
/// as a policy.d file holds it; errors name the file and the field.
pub(super) fn read_policy(path: &Path, name: &str) -> anyhow::Result<GivenPolicy> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let origin = path.display().to_string();
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("the policy {origin} is not valid JSON"))?;
    if v.get("plugins").is_some() {
        Policy::parse(&text, &origin).map_err(|e| anyhow!("{e}"))?;
        Ok(GivenPolicy::Document(text))
    } else {
        Entry::from_value(name, &v, &origin).map_err(|e| anyhow!("{e}"))?;
        Ok(GivenPolicy::Entry(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_learning_policy_parses_and_grants_everything() {
        let e = learning_entry(&[PathBuf::from("/var/lib/cni/networks")]);
        let doc = json!({"plugins": {"p": e}}).to_string();
        let p = Policy::parse(&doc, "learning").expect("parses");
        let g = p.entry("p").grant();
        let h = g.host.expect("host");
        assert!(h.may_name("eth0") && h.names_link("eth0") && h.names_master("x"));
        assert!(h.covers("8.8.8.8".parse().expect("ip"), 32));
        assert!(h
            .sysctls
            .iter()
            .any(|p| p.0.contains(".all.") && p.matches("net.ipv4.conf.all.forwarding")));
        assert!(g.delegates.iter().any(|d| d == "host-local"));
    }

    #[test]
    fn a_given_policy_s_ipam_roots_are_covered_too() {
        let doc = GivenPolicy::Document(
            json!({"plugins": {"p": {"ipam-roots": ["/var/lib/a"]},
                               "host-local": {"ipam-roots": ["/srv/b"]}}})
            .to_string(),
        );
        let mut roots = doc.ipam_roots("p");
        roots.sort();
        assert_eq!(
            roots,
            [PathBuf::from("/srv/b"), PathBuf::from("/var/lib/a")]
        );
        let entry = GivenPolicy::Entry(json!({"ipam-roots": ["/var/lib/c"]}).to_string());
        assert_eq!(entry.ipam_roots("p"), [PathBuf::from("/var/lib/c")]);
    }
}

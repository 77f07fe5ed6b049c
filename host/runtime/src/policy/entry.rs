//! One plugin's entry in a policy ([`Entry`]): its fields, how it is
//! parsed and checked (errors name the file and the field), the grant it
//! gives, and its sha256 pin.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::PolicyError;
use super::grant::{Grant, NsGrant, DEFAULT_HOST_CALLS, DEFAULT_MAX_LINKS};

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
    /// The DHCP daemon it may have the host talk to (`dhcp`); none: no
    /// DHCP leases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dhcp: Option<super::dhcp::DhcpGrant>,
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
        if let Some(why) = self.dhcp.as_ref().and_then(super::dhcp::DhcpGrant::invalid) {
            return Err(invalid(format!("plugins.{name}.dhcp.socket {why}")));
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
            dhcp: self.dhcp.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

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
    fn pins() {
        let mut e = Entry::default();
        assert!(e.check_pin("ab").is_ok());
        e.sha256 = Some("AB".repeat(32));
        assert!(e.check_pin(&"ab".repeat(32)).is_ok());
        assert!(e.check_pin(&"cd".repeat(32)).is_err());
    }
}

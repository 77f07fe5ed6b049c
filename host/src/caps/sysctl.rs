//! `wasmcni:plugin/sysctl`.

use serde_json::json;
use wasmtime::component::Resource;

use super::bindings::wasmcni::plugin::sysctl::Host;
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::{arg_str, bounded, ns_arg, CapError, Ctx, NsHandle, StoreData};
use crate::journal::Undo;
use crate::netns::Kind;

/// The longest key accepted.
const MAX_KEY: usize = 256;
/// The longest value accepted.
const MAX_VALUE: usize = 256;

/// A dotted `net.` key made of `[A-Za-z0-9_/-]` components.
fn valid_key(key: &str) -> bool {
    key.starts_with("net.")
        && key.split('.').all(|c| {
            // A `/` stands for `.` in the path, so `//` would be `..`.
            let path = c.replace('/', ".");
            !c.is_empty()
                && path != "."
                && path != ".."
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'/')
        })
}

/// The link a per-link key names (`net.ipv4.conf.<link>.*`,
/// `net.ipv6.conf.<link>.*`, `net.ipv{4,6}.neigh.<link>.*`), if any; `all`
/// and `default` are not links. A `/` in a component stands for `.`.
fn key_link(key: &str) -> Option<String> {
    let parts: Vec<&str> = key.split('.').collect();
    match parts.as_slice() {
        ["net", "ipv4" | "ipv6", "conf" | "neigh", link, _, ..]
            if *link != "all" && *link != "default" =>
        {
            Some(link.replace('/', "."))
        }
        _ => None,
    }
}

impl Ctx {
    fn sysctl_target(&mut self, kind: Kind, key: &str) -> Result<(), CapError> {
        bounded("sysctl key", key, MAX_KEY)?;
        if !valid_key(key) {
            return Err(ErrorCode::InvalidArgument.into());
        }
        if !self.ns_grant(kind).names_sysctl(key) {
            return Err(CapError::Denied(format!(
                "sysctl {key} matches no `sysctls` pattern of the {} namespace grant",
                super::kind_name(kind)
            )));
        }
        if kind == Kind::Host {
            if let Some(name) = key_link(key) {
                let msg = self
                    .netlink(kind)?
                    .link_by_name(&name)
                    .map_err(|e| CapError::from(&e))?;
                let l = super::link::Link::from_message(msg);
                self.check_host_link(kind, &l)?;
            }
        }
        Ok(())
    }

    fn sysctl_read(&self, kind: Kind, key: &str) -> Result<String, CapError> {
        let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
        crate::sysctl::read(ns, key)
            .map_err(|e| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EINVAL)))
    }
}

impl Host for StoreData {
    fn get(&mut self, ns: Resource<NsHandle>, key: String) -> Result<String, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(
            "sysctl.get",
            json!({"ns": ns_arg(kind), "key": arg_str(&key)}),
            |c| {
                c.sysctl_target(kind, &key)?;
                c.sysctl_read(kind, &key)
            },
        )
    }

    fn set(&mut self, ns: Resource<NsHandle>, key: String, value: String) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = json!({"ns": ns_arg(kind), "key": arg_str(&key), "value": arg_str(&value)});
        self.cap("sysctl.set", args, |c| {
            c.sysctl_target(kind, &key)?;
            bounded("sysctl value", &value, MAX_VALUE)?;
            if value.contains(['\n', '\0']) {
                return Err(ErrorCode::InvalidArgument.into());
            }
            let old = c.sysctl_read(kind, &key)?;
            let ns = c.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
            crate::sysctl::write(ns, &key, &value)
                .map_err(|e| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EINVAL)))?;
            c.journal.record(Undo::SetSysctl {
                ns: kind,
                key,
                value: old,
            });
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(valid_key("net.ipv4.ip_forward"));
        assert!(valid_key("net.ipv4.conf.eth0/100.forwarding"));
        assert!(!valid_key("kernel.panic"));
        assert!(!valid_key("net..ipv4"));
        assert!(!valid_key("net.ipv4.conf.a b.x"));
        assert!(!valid_key("net.ipv4/../../x"));
        assert!(!valid_key("net."));
        assert!(!valid_key("net.ipv4.//.//.kernel.panic"));
        assert!(!valid_key("net.ipv4./.x"));
    }

    #[test]
    fn per_link_keys() {
        assert_eq!(
            key_link("net.ipv4.conf.veth1.forwarding").as_deref(),
            Some("veth1")
        );
        assert_eq!(
            key_link("net.ipv6.conf.eth0/100.accept_ra").as_deref(),
            Some("eth0.100")
        );
        assert_eq!(
            key_link("net.ipv4.neigh.eth0.gc_stale_time").as_deref(),
            Some("eth0")
        );
        assert_eq!(key_link("net.ipv4.conf.all.forwarding"), None);
        assert_eq!(key_link("net.ipv6.conf.default.accept_ra"), None);
        assert_eq!(key_link("net.ipv4.ip_forward"), None);
    }
}

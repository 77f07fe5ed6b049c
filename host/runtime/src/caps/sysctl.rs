//! `wasmcni:plugin/sysctl`.

use super::ctx::{Inverse, Uncovered};
use super::row::*;
use crate::record::Owned;
use wasmtime::component::Resource;

use super::bindings::wasmcni::plugin::sysctl::Host;
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::{CapError, NsHandle};
use super::ctx::{bounded, Ctx, StoreData};
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

/// What the fourth component of a per-link key (`net.<proto>.conf.<x>.*`,
/// `net.<proto>.neigh.<x>.*`) names.
#[derive(Debug, PartialEq, Eq)]
enum Scope {
    /// Not a per-link key.
    Global,
    /// `all` or `default`: every link of the node.
    AllLinks(String),
    /// One link (a `/` in the component stands for `.`).
    Link(String),
}

fn key_scope(key: &str) -> Scope {
    let parts: Vec<&str> = key.split('.').collect();
    match parts.as_slice() {
        ["net", _, "conf" | "neigh", x, _, ..] if *x == "all" || *x == "default" => {
            Scope::AllLinks((*x).to_owned())
        }
        ["net", _, "conf" | "neigh", link, _, ..] => Scope::Link(link.replace('/', ".")),
        _ => Scope::Global,
    }
}

/// The one link a per-link key names (`net.<proto>.conf.<link>.*`,
/// `net.<proto>.neigh.<link>.*`, a `/` in the name standing for `.`);
/// `None` for `all`, `default` and keys that are not per link.
pub(super) fn key_link(key: &str) -> Option<String> {
    match key_scope(key) {
        Scope::Link(name) => Some(name),
        _ => None,
    }
}

impl Ctx {
    /// Checks that the plugin may use `key`; returns whether it names a
    /// bridge the network only shares with the plugin (whose settings may
    /// be read, and written only with the value they have).
    fn sysctl_target(&mut self, kind: Kind, key: &str) -> Result<bool, CapError> {
        bounded("sysctl key", key, MAX_KEY)?;
        if !valid_key(key) {
            return Err(ErrorCode::InvalidArgument.into());
        }
        let all_links = match key_scope(key) {
            Scope::AllLinks(x) => Some(x),
            _ => None,
        };
        self.view().sysctl_key(kind, key, all_links.as_deref())?;
        if kind == Kind::Host {
            if let Scope::Link(name) = key_scope(key) {
                let msg = self.netlink(kind)?.link_by_name(&name)?;
                let l = super::bindings::Link::from_message(msg);
                if self.check_host_link(kind, &l).is_err() && self.shared(kind, &l) {
                    return Ok(true);
                }
                self.check_host_link(kind, &l)?;
            }
        }
        Ok(false)
    }

    /// Writes `value` to `key` (whose value is `old`) and journals how to
    /// take it back. The kernel propagates some writes: `conf.all.X` and
    /// `ip_forward` rewrite every link's value (IPv4 `forwarding` also
    /// `all.accept_redirects`), `conf.default.X` is copied to links that
    /// never set theirs, `disable_ipv6` drops addresses and routes. So:
    /// - a key of one link created in this call needs nothing (deleting
    ///   the link undoes it);
    /// - a key of one pre-existing link: its old value, and the addresses
    ///   and routes the kernel may flush with it;
    /// - any other key: every setting of the namespace the write changed
    ///   (the whole `net.` tree read before and after it), and every
    ///   address and route of the namespace.
    fn sysctl_write(
        &mut self,
        kind: Kind,
        key: &str,
        old: String,
        value: &str,
    ) -> Result<(), CapError> {
        let io = |e: std::io::Error| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EINVAL));
        let journaling = self.command == Some(super::ctx::Command::Add);
        let mark = self.journal.len();
        let global = match key_scope(key) {
            Scope::Link(name) => {
                let index = self.netlink(kind)?.link_by_name(&name)?.header.index;
                if journaling && !self.journal.created(kind, index) {
                    self.preserve_link_state(kind, index)?;
                    self.journal.record(SysctlUndo::SetSysctl {
                        ns: kind,
                        key: key.to_owned(),
                        value: old,
                    });
                }
                false
            }
            _ => journaling,
        };
        // Concurrent ADDs writing the same setting for all links (the
        // first containers on a node all find `ip_forward` off): one at a
        // time, and the others find it done.
        let _lock = if global {
            let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
            let lock = crate::netlock::sysctl_lock(ns.ino());
            if crate::sysctl::read(ns, key)? == value {
                return Ok(());
            }
            lock
        } else {
            None
        };
        let before = if global {
            self.preserve_namespace_state(kind)?;
            let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
            Some(crate::sysctl::snapshot(ns).map_err(io)?)
        } else {
            None
        };
        let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
        if let Err(e) = crate::sysctl::write(ns, key, value) {
            // Nothing changed: drop what was journaled for it.
            self.journal.truncate(mark);
            return Err(io(e));
        }
        if let Some(before) = before {
            let after = crate::sysctl::snapshot(ns).map_err(io)?;
            let changes = crate::sysctl::changes(&before, &after);
            self.journal
                .record(SysctlUndo::RestoreSysctls { ns: kind, changes });
        }
        Ok(())
    }

    /// Whether a write of `key` needs no inverse: outside ADD, or a key of
    /// one link created in this call (deleting the link undoes it).
    fn needs_no_journal(&mut self, kind: Kind, key: &str) -> Result<bool, CapError> {
        if self.command != Some(super::ctx::Command::Add) {
            return Ok(true);
        }
        let Scope::Link(name) = key_scope(key) else {
            return Ok(false);
        };
        match self.netlink(kind)?.link_by_name(&name) {
            Ok(m) => Ok(self.journal.created(kind, m.header.index)),
            Err(_) => Ok(false),
        }
    }

    fn sysctl_read(&self, kind: Kind, key: &str) -> Result<String, CapError> {
        let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
        crate::sysctl::read(ns, key)
            .map_err(|e| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EINVAL)))
    }
}

/// The host functions' work, one method per call.
impl Ctx {
    /// Writes a sysctl the plugin may write, journaling the old value.
    fn set_sysctl(&mut self, kind: Kind, key: &str, value: &str) -> Result<(), CapError> {
        let shared = self.sysctl_target(kind, key)?;
        bounded("sysctl value", value, MAX_VALUE)?;
        if value.contains(['\n', '\0']) {
            return Err(ErrorCode::InvalidArgument.into());
        }
        if super::authority::sysctl::one_way(kind, key) {
            let now = self.sysctl_read(kind, key)?;
            super::authority::sysctl::direction_only(kind, key, &now, value)?;
        }
        // One trip into the namespace when nothing needs journaling:
        // a key of a link this call created, or outside ADD.
        if !shared && self.needs_no_journal(kind, key)? {
            let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
            crate::sysctl::exchange(ns, key, value)?;
            return Ok(());
        }
        let old = self.sysctl_read(kind, key)?;
        super::authority::sysctl::shared_bridge_setting(key, shared, old != value)?;
        if old == value {
            // Nothing changes, so there is nothing to undo.
            return Ok(());
        }
        self.sysctl_write(kind, key, old, value)
    }
}

impl Host for StoreData {
    fn get(&mut self, ns: Resource<NsHandle>, key: String) -> Result<String, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&GET, (kind, &key), |c| {
            c.sysctl_target(kind, &key)?;
            c.sysctl_read(kind, &key)
        })
    }

    fn set(&mut self, ns: Resource<NsHandle>, key: String, value: String) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, &key, &value);
        self.cap(&SET, args, |c| c.set_sysctl(kind, &key, &value))
    }
}

/// How a settings write is taken back (`sysctl`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum SysctlUndo {
    /// A sysctl the kernel propagates (`conf.all.*`, `conf.default.*`,
    /// `ip_forward`, any key that is not one link's) was written: every
    /// setting of the namespace that write changed, before and after.
    /// Undone by compare-and-restore: only settings still as the write left
    /// them are written back (parents first, see
    /// [`crate::sysctl::restore_changes`]); what someone else changed since
    /// is kept.
    RestoreSysctls {
        /// Where.
        ns: Kind,
        /// What the write changed.
        changes: Vec<crate::sysctl::Change>,
    },
    /// A sysctl was written: write the old value back.
    SetSysctl {
        /// Where.
        ns: Kind,
        /// The dotted key.
        key: String,
        /// The old value.
        value: String,
    },
}

impl Inverse for SysctlUndo {
    fn apply(&self, ctx: &mut Ctx) -> Result<(), CapError> {
        let io_err = |e: std::io::Error| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO));
        match self {
            SysctlUndo::RestoreSysctls { ns, changes } => {
                let ns = ctx.ns(*ns).ok_or(CapError::Kernel(libc::ENOENT))?;
                let differing = crate::sysctl::restore_changes(ns, changes).map_err(io_err)?;
                if differing.is_empty() {
                    Ok(())
                } else {
                    Err(CapError::Incomplete(format!(
                        "settings not restored: {}",
                        differing.join(", ")
                    )))
                }
            }
            SysctlUndo::SetSysctl { ns, key, value } => {
                let ns = ctx.ns(*ns).ok_or(CapError::Kernel(libc::ENOENT))?;
                crate::sysctl::write(ns, key, value).map_err(io_err)
            }
        }
    }

    /// A settings snapshot by its size, not its thousands of values.
    fn describe(&self) -> String {
        match self {
            SysctlUndo::RestoreSysctls { ns, changes } => {
                let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).take(8).collect();
                format!(
                    "RestoreSysctls {{ ns: {ns:?}, {} settings: {}{} }}",
                    changes.len(),
                    keys.join(", "),
                    if changes.len() > keys.len() {
                        ", ..."
                    } else {
                        ""
                    }
                )
            }
            _ => format!("{self:?}"),
        }
    }

    fn record(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn kept_for_other_holders(&self, ctx: &mut Ctx) -> Option<String> {
        match self {
            SysctlUndo::SetSysctl {
                ns: Kind::Host,
                key,
                ..
            } => {
                match key_link(key) {
                    // The firewall's guards keep their own count.
                    Some(_) if key.ends_with(".route_localnet") => None,
                    Some(name) => {
                        let index = ctx
                            .netlink(Kind::Host)
                            .ok()?
                            .link_by_name(&name)
                            .ok()?
                            .header
                            .index;
                        ctx.shared_link_kept(index)
                    }
                    None => ctx
                        .other_holders(false)
                        .then(|| format!("{key} is the node's, and other attachments hold it")),
                }
            }
            SysctlUndo::RestoreSysctls { ns: Kind::Host, .. } => ctx
                .other_holders(false)
                .then(|| "the node's settings are held by other attachments".to_owned()),
            _ => None,
        }
    }

    fn uncovered(&self, ctx: &mut Ctx, owned: &Owned) -> Uncovered {
        let SysctlUndo::SetSysctl {
            ns: Kind::Host,
            key,
            ..
        } = self
        else {
            return Uncovered::ByLink;
        };
        // A link's own setting goes with the link.
        match key_link(key) {
            // One of the attachment's own links: goes with it.
            Some(name)
                if owned
                    .links
                    .iter()
                    .any(|l| l.ns == Kind::Host && l.name == name) =>
            {
                Uncovered::No
            }
            Some(name) => {
                let mark = ctx.attachment.mark();
                if ctx.node_link_is_foreign(None, Some(&name), &mark) {
                    Uncovered::Yes(format!("setting {key} of node link {name}"))
                } else {
                    Uncovered::No
                }
            }
            // Namespace-wide: shared by the network.
            None => Uncovered::No,
        }
    }
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[&GET, &SET];

/// `sysctl.get`.
pub(super) const GET: Entry = Entry {
    call: "sysctl.get",
    args: &["ns", "key"],
    authority: "read a net.* sysctl",
    policy: "`sysctls` patterns; host per-link keys: link own or `links`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: &[Grant::Sysctl("key", true)],
};

/// `sysctl.set`.
pub(super) const SET: Entry = Entry {
    call: "sysctl.set",
    args: &["ns", "key", "value"],
    authority: "write a net.* sysctl",
    policy: "`sysctls` patterns; host per-link keys: link own or `links`; in the host, a setting by which the node takes routes or addresses from a link (`accept_ra*`, `autoconf`, `accept_redirects`, ...) only lowered",
    undo: "a key of a link created in this ADD: none (the link goes); of another link: its old value, and the addresses and routes it may flush; any other key (`all`, `default`, global): the namespace's whole net. tree, written back parents first; a write that changes nothing is skipped",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Sysctl("key", false)],
};

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
        let link = |s: &str| Scope::Link(s.to_owned());
        assert_eq!(key_scope("net.ipv4.conf.veth1.forwarding"), link("veth1"));
        assert_eq!(
            key_scope("net.ipv6.conf.eth0/100.accept_ra"),
            link("eth0.100")
        );
        assert_eq!(key_scope("net.ipv4.neigh.eth0.gc_stale_time"), link("eth0"));
        assert_eq!(key_scope("net.mpls.conf.eth0.input"), link("eth0"));
        assert_eq!(
            key_scope("net.ipv4.conf.all.forwarding"),
            Scope::AllLinks("all".into())
        );
        assert_eq!(
            key_scope("net.ipv6.conf.default.accept_ra"),
            Scope::AllLinks("default".into())
        );
        assert_eq!(key_scope("net.ipv4.ip_forward"), Scope::Global);
    }
}

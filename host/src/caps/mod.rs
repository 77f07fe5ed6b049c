//! The capability interfaces the host implements for plugins, one file per
//! WIT interface. Every call goes the same way ([`StoreData::cap`]): count
//! it against the budget, resolve the namespace handle, check the grant and
//! the invariants, act through netlink, journal the inverse, audit.
//!
//! The invariants that no policy can waive live here, next to the calls:
//! - a plugin acts only in the two namespaces it was given;
//! - in the host namespace it may modify, move or delete only links wasmcni
//!   created for this container (alias `wasmcni:<container id>`, see
//!   [`MARK_PREFIX`]) or links its grant names by pattern, and may use a
//!   `masters` link only as a master;
//! - host addresses only on such links; host routes only in the main table,
//!   through such links, and only wasmcni's own routes ([`RTPROT_WASMCNI`])
//!   through such links may be replaced or deleted;
//! - sysctls only under `net.` and under the grant's patterns; per-link
//!   host keys only for links the plugin may modify;
//! - during ADD a plugin deletes only links it created in the same call, so
//!   the journal can undo everything.

use std::collections::HashMap;

use serde_json::Value;
use wasmtime::component::{HasSelf, Linker, Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::audit::{Audit, Outcome};
use crate::journal::{Journal, Undo};
use crate::limits::Limiter;
use crate::netlink::{Netlink, NlError};
use crate::netns::{Kind, NetNs};
use crate::policy::{Grant, NsGrant};

mod address;
pub mod catalog;
mod error;
mod link;
mod netns;
mod route;
mod sysctl;
mod undo;

pub use error::{BudgetExceeded, CapError};
pub use netns::NsHandle;

/// Host bindings generated from `wit/` (documented there).
#[allow(missing_docs)]
pub mod bindings {

    wasmtime::component::bindgen!({
        path: "../wit",
        world: "wasmcni:plugin/plugin",
        imports: { default: trappable },
        trappable_error_type: {
            "wasmcni:plugin/types.error-code" => super::CapError,
        },
        with: {
            "wasmcni:plugin/netns.netns": super::NsHandle,
        },
    });
}

use bindings::wasmcni::plugin::types::ErrorCode;
use bindings::Plugin;

/// The alias prefix that marks a host link as created by wasmcni.
pub const MARK_PREFIX: &str = "wasmcni:";

/// The routing protocol number (`rtm_protocol`) of routes wasmcni creates
/// in the host namespace (unassigned in iproute2's `rt_protos`).
pub const RTPROT_WASMCNI: u8 = 87;

/// `RTPROT_BOOT`: what `ip route add` and the reference plugins use.
const RTPROT_BOOT: u8 = 3;

/// The longest alias a plugin may set (the kernel's limit is 255).
const MAX_ALIAS: usize = 128;

/// Per-invocation capability state: the plugin's grant, the namespaces it
/// was given, the journal and the audit log.
pub struct Ctx {
    grant: Grant,
    container: Option<NetNs>,
    host: Option<NetNs>,
    sockets: HashMap<Kind, Netlink>,
    journal: Journal,
    audit: Audit,
    calls: u64,
    mark: String,
    command: Command,
}

/// The CNI command of the invocation, as far as authority goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// ADD: changes are journaled and undone if it fails.
    Add,
    /// DEL: changes are best-effort and stay.
    Del,
    /// CHECK, GC, STATUS, VERSION: read-only.
    Other,
}

impl Command {
    /// The command `CNI_COMMAND` names.
    pub fn from_env(command: &str) -> Command {
        match command {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            _ => Command::Other,
        }
    }
}

impl Ctx {
    /// A context for one invocation. `container` is the verified
    /// `CNI_NETNS`, or `None` when the runtime gave none (or, on DEL, it is
    /// gone).
    pub fn new(
        grant: Grant,
        container: Option<NetNs>,
        audit: Audit,
        container_id: &str,
        command: Command,
    ) -> Ctx {
        Ctx {
            grant,
            container,
            host: None,
            sockets: HashMap::new(),
            journal: Journal::default(),
            audit,
            calls: 0,
            mark: format!("{MARK_PREFIX}{container_id}"),
            command,
        }
    }

    /// How many inverses the journal holds.
    pub fn journal_len(&self) -> usize {
        self.journal.len()
    }

    fn ns(&self, kind: Kind) -> Option<&NetNs> {
        match kind {
            Kind::Container => self.container.as_ref(),
            Kind::Host => self.host.as_ref(),
        }
    }

    fn ns_grant(&self, kind: Kind) -> &NsGrant {
        static NOTHING: std::sync::OnceLock<NsGrant> = std::sync::OnceLock::new();
        match kind {
            Kind::Container => &self.grant.container,
            Kind::Host => self
                .grant
                .host
                .as_ref()
                .unwrap_or_else(|| NOTHING.get_or_init(NsGrant::default)),
        }
    }

    /// Refuses unless `right` holds, naming the right.
    fn require(
        &self,
        kind: Kind,
        right: impl Fn(&NsGrant) -> bool,
        name: &str,
    ) -> Result<(), CapError> {
        if right(self.ns_grant(kind)) {
            Ok(())
        } else {
            Err(CapError::Denied(format!(
                "the policy grants no `{name}` in the {} namespace",
                kind_name(kind)
            )))
        }
    }

    /// The netlink socket for a namespace, opened on first use.
    fn netlink(&mut self, kind: Kind) -> Result<&mut Netlink, CapError> {
        if !self.sockets.contains_key(&kind) {
            let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
            let sock = Netlink::open(ns).map_err(|e| CapError::from(&e))?;
            self.sockets.insert(kind, sock);
        }
        self.sockets
            .get_mut(&kind)
            .ok_or(CapError::Code(ErrorCode::NotFound))
    }

    /// A link as the kernel reports it now.
    fn link(&mut self, kind: Kind, index: u32) -> Result<link::Link, CapError> {
        if index == 0 {
            return Err(ErrorCode::NotFound.into());
        }
        let msg = self
            .netlink(kind)?
            .link_by_index(index)
            .map_err(|e| CapError::from(&e))?;
        Ok(link::Link::from_message(msg))
    }

    /// The link, if the plugin may change it: `modify` in its namespace,
    /// and in the host's, wasmcni's mark or a `links` pattern.
    fn modifiable(&mut self, kind: Kind, index: u32) -> Result<link::Link, CapError> {
        self.require(kind, |g| g.modify, "modify")?;
        let l = self.link(kind, index)?;
        self.check_host_link(kind, &l)?;
        Ok(l)
    }

    /// In the host namespace, only wasmcni's links and pattern-named ones.
    fn check_host_link(&self, kind: Kind, l: &link::Link) -> Result<(), CapError> {
        if kind == Kind::Container || self.owned(l) || self.ns_grant(kind).names_link(&l.name) {
            return Ok(());
        }
        Err(CapError::Denied(format!(
            "host link {:?} (index {}) was not created by wasmcni for this container and \
             matches no `links` pattern",
            l.name, l.index
        )))
    }

    /// Whether wasmcni created `l` for this container: its alias is this
    /// invocation's mark, not merely any wasmcni mark (one container's
    /// plugin must not reach another container's links; links shared
    /// between containers, like a bridge, are named by `links` patterns).
    fn owned(&self, l: &link::Link) -> bool {
        l.alias.as_deref() == Some(self.mark.as_str())
    }

    /// Journals what the kernel drops along with some changes to link
    /// `index` (setting it down flushes its routes, a small MTU drops its
    /// IPv6 addresses, deleting a primary address drops the secondaries,
    /// moving it drops both): the unicast routes through it, then its
    /// addresses, recorded before the change so the undo puts them back
    /// after reverting it (addresses first, then the routes that need them).
    fn preserve_link_state(&mut self, kind: Kind, index: u32) -> Result<(), CapError> {
        let nl = self.netlink(kind)?;
        let routes = nl.routes(None).map_err(|e| CapError::from(&e))?;
        let addresses = nl.addresses(None).map_err(|e| CapError::from(&e))?;
        for spec in routes
            .iter()
            .filter_map(crate::netlink::RouteSpec::from_message)
        {
            if spec.oif == Some(index) {
                self.journal.record(Undo::AddRoute { ns: kind, spec });
            }
        }
        for spec in addresses
            .iter()
            .filter_map(crate::netlink::AddrSpec::from_message)
        {
            if spec.index == index {
                self.journal.record(Undo::AddAddress { ns: kind, spec });
            }
        }
        Ok(())
    }

    /// Runs the kernel change `f` to link `index` after journaling what it
    /// may flush ([`Ctx::preserve_link_state`]); if `f` fails, nothing
    /// changed, and what was journaled for it is dropped again.
    fn preserving<T>(
        &mut self,
        kind: Kind,
        index: u32,
        f: impl FnOnce(&mut Ctx) -> Result<T, CapError>,
    ) -> Result<T, CapError> {
        let mark = self.journal.len();
        self.preserve_link_state(kind, index)?;
        let r = f(self);
        if r.is_err() {
            self.journal.truncate(mark);
        }
        r
    }

    /// Marks a link wasmcni created (or moved) in the host namespace.
    fn mark(&mut self, kind: Kind, index: u32) -> Result<(), CapError> {
        if kind != Kind::Host {
            return Ok(());
        }
        let mark = self.mark.clone();
        self.netlink(kind)?
            .set_alias(index, &mark)
            .map_err(|e| CapError::from(&e))
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Container => "container",
        Kind::Host => "host",
    }
}

/// What a plugin's store holds.
pub struct StoreData {
    /// The WASI context: no preopens, no sockets, CNI_* env only.
    pub wasi: WasiCtx,
    /// Resources the guest holds (WASI streams and our namespaces).
    pub table: ResourceTable,
    /// Capability state.
    pub caps: Ctx,
    /// Memory and table limits.
    pub limiter: Limiter,
    /// When the plugin's wall-clock deadline passes.
    pub deadline: std::time::Instant,
}

impl WasiView for StoreData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl StoreData {
    /// Runs one capability call: budget, then `f` (checks and action),
    /// then the audit record.
    fn cap<T>(
        &mut self,
        call: &'static str,
        args: Value,
        f: impl FnOnce(&mut Ctx) -> Result<T, CapError>,
    ) -> Result<T, CapError> {
        let caps = &mut self.caps;
        caps.calls += 1;
        if caps.calls > caps.grant.host_calls {
            let budget = caps.grant.host_calls;
            // Audit only the first refusal: a loop of refused calls must
            // not fill the log.
            if caps.calls == budget + 1 {
                caps.audit.record(
                    call,
                    &args,
                    &Outcome::LimitExceeded {
                        reason: format!("budget of {budget} host calls exhausted"),
                    },
                );
            }
            return Err(CapError::Trap(BudgetExceeded(budget).into()));
        }
        // Only ADD and DEL change the kernel: CHECK, GC, STATUS and
        // VERSION get read-only authority whatever the policy says.
        let read_only =
            caps.command == Command::Other && catalog::entry(call).is_none_or(|e| e.mutates);
        let result = if read_only {
            Err(CapError::Denied(
                "only ADD and DEL may change the kernel".into(),
            ))
        } else {
            f(caps)
        };
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(e) => e.outcome(),
        };
        caps.audit.record(call, &args, &outcome);
        result
    }

    /// Resolves a borrowed handle to the namespace kind it stands for.
    fn ns_kind(&self, ns: &Resource<NsHandle>) -> Result<Kind, CapError> {
        self.table
            .get(ns)
            .map(|h| h.kind())
            .map_err(|e| CapError::Trap(e.into()))
    }
}

/// Adds wasmcni's capability interfaces to a linker.
pub fn add_to_linker(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
    Plugin::add_to_linker::<StoreData, HasSelf<StoreData>>(linker, |s| s)
}

impl From<&NlError> for CapError {
    fn from(e: &NlError) -> Self {
        CapError::Kernel(e.errno())
    }
}

/// A string argument, refused when longer than `max` bytes.
fn bounded<'a>(what: &str, s: &'a str, max: usize) -> Result<&'a str, CapError> {
    if s.len() > max {
        return Err(CapError::Limit(format!(
            "{what} is {} bytes, more than the {max} wasmcni accepts",
            s.len()
        )));
    }
    Ok(s)
}

/// A JSON value for a string argument, truncated for the audit log.
fn arg_str(s: &str) -> Value {
    const MAX: usize = 256;
    if s.len() <= MAX {
        return Value::from(s);
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Value::from(format!("{}... ({} bytes)", &s[..end], s.len()))
}

fn ns_arg(kind: Kind) -> Value {
    Value::from(kind_name(kind))
}

//! The invocation context every capability call runs in ([`Ctx`]): the
//! plugin's grant, its two namespaces and their netlink sockets, the
//! journal, the audit log; how one call goes ([`StoreData::cap`]: budget,
//! read-only commands, faults, audit); and the context's own primitives
//! the interface modules build on (grant checks, journaling, marks).

use std::collections::HashMap;

use serde_json::Value;
use wasmtime::component::{HasSelf, Linker, Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::args::AuditArgs;
use super::bindings::wasmcni::plugin::types::{ErrorCode, Host as TypesHost};
use super::bindings::{self, BudgetExceeded, CapError, Link, NsHandle};
use super::row::Entry;
use crate::attachment::Attachment;
use crate::audit::{Audit, Outcome};
use crate::cni_error::CniError;
use crate::journal::{Journal, Journaled};
use crate::limits::Limiter;
use crate::netlink::Netlink;
use crate::netns::{Kind, NetNs};
use crate::plugins::Plugin;
use crate::policy::{Grant, NsGrant};
use crate::record::Owned;
use crate::session::{Output, Resolved, Runtime};

/// The routing protocol number (`rtm_protocol`) of routes wasmcni creates
/// in the host namespace (unassigned in iproute2's `rt_protos`).
pub const RTPROT_WASMCNI: u8 = 87;

/// `RTPROT_BOOT`: what `ip route add` and the reference plugins use.
pub(super) const RTPROT_BOOT: u8 = 3;

/// The longest alias a plugin may set (the kernel's limit is 255).
pub(super) const MAX_ALIAS: usize = 128;

/// Per-invocation capability state: the plugin's grant, the namespaces it
/// was given, the attachment it acts for, the journal and the audit log.
pub struct Ctx {
    pub(super) grant: Grant,
    pub(super) container: Option<NetNs>,
    pub(super) host: Option<NetNs>,
    pub(super) sockets: HashMap<Kind, Netlink>,
    /// Whether a host call is under way: while it is, the sockets keep
    /// link answers ([`Ctx::keep_links`]).
    in_call: bool,
    pub(super) journal: Journal<Box<dyn Inverse>>,
    pub(super) audit: Audit,
    pub(super) calls: u64,
    pub(super) attachment: Attachment,
    /// `attachment.mark()` and `attachment.network_mark()`, computed once.
    pub(super) marks: (String, String),
    /// The command (none: a `CNI_COMMAND` wasmcni does not know, which
    /// only the plugin the runtime executed is run with).
    pub(super) command: Option<Command>,
    /// What the invocation's plugin runs share (none: delegation is
    /// unavailable).
    pub(super) runtime: Option<std::sync::Arc<Runtime>>,
    /// How a delegate or chain member runs (none: delegation is
    /// unavailable).
    pub(super) core: Option<&'static dyn RunPlugin>,
    /// How deep in a chain of delegates this invocation runs (0: the
    /// plugin the runtime executed).
    pub(super) depth: u32,
    /// The network state directories opened in this invocation (and its
    /// delegates), to check host routes and addresses against.
    pub(super) stores: Vec<std::path::PathBuf>,
    /// Why calls of this invocation (and its delegates) were refused,
    /// each once, for the runtime if the plugin fails ([`Denial`]).
    pub(super) denials: Vec<String>,
    /// Host-side causes of failed calls ([`Ctx::host_errors`]).
    pub(super) host_errors: Vec<String>,
    /// The attachment whose `attachment-state` records this invocation
    /// uses (network, container ID, ifname): the runtime's, which a
    /// delegate inherits whatever config its caller hands it.
    pub(super) state_owner: (String, String, String),
    /// The plugin whose attachment record this invocation writes: the one
    /// the runtime executed (a delegate's or chain member's changes are
    /// its caller's to record).
    pub(super) record_plugin: String,
    /// The netfilter socket of the node namespace (`firewall`), opened on
    /// first use.
    pub(super) nft: Option<crate::netlink::nft::Nft>,
    /// The attachment's addresses its records hold for this incarnation,
    /// once read ([`authority`]).
    pub(super) recorded: Option<Vec<std::net::IpAddr>>,
    /// What the attachment's records say of its incarnations, once read
    /// ([`authority`]).
    pub(super) incarnations: std::cell::OnceCell<Incarnations>,
    /// The host end of the attachment's veth, fixed before the plugin
    /// runs ([`Ctx::fix_adopted_peer`]; none: no `adopt-peer` grant asked).
    pub(super) adopted: Option<crate::record::Adopted>,
    /// The node's IPAM state directories as the state root lists them,
    /// once read ([`authority`]).
    pub(super) node_stores: std::cell::OnceCell<Vec<std::path::PathBuf>>,
    /// The node device the network config names by a `config-links` key
    /// (a `host-device` network's), resolved once ([`Ctx::view`]).
    pub(super) config_device: std::cell::OnceCell<Option<String>>,
    /// The routing-table locks this invocation holds (a namespace's nsfs
    /// inode, the open lock file): taken by `route.lock-tables`, passed to
    /// its delegates and back, released when the process exits.
    pub(super) table_locks: Vec<(u64, std::fs::File)>,
}

/// The most distinct denials an invocation keeps for the runtime.
pub(super) const MAX_DENIALS: usize = 16;

/// What a context is made from.
pub struct CtxParams {
    /// The plugin's grant.
    pub grant: Grant,
    /// The verified `CNI_NETNS`, or none.
    pub container: Option<NetNs>,
    /// Its audit log.
    pub audit: Audit,
    /// Who it acts for.
    pub attachment: Attachment,
    /// The command (none: `CNI_COMMAND` names none).
    pub command: Option<Command>,
    /// What the invocation's plugin runs share.
    pub runtime: Option<std::sync::Arc<Runtime>>,
    /// How a delegate or chain member runs: the host's one run core.
    pub core: Option<&'static dyn RunPlugin>,
}

/// The CNI command of the invocation. As far as authority goes: ADD's
/// changes are journaled and undone if it fails; DEL's are best-effort and
/// stay; GC releases IPAM reservations of attachments that are gone, the
/// kernel read-only; CHECK, STATUS, VERSION (and a command wasmcni does
/// not know) are read-only.
pub use cni_spec::Command;

impl Ctx {
    /// When this invocation's deadline passes: the runtime's, or 10 s from
    /// now for a context with no runtime (unit tests, tools); what a host
    /// call that waits for a lock waits at most until.
    pub(crate) fn deadline(&self) -> std::time::Instant {
        self.runtime.as_ref().map_or_else(
            || std::time::Instant::now() + std::time::Duration::from_secs(10),
            |rt| rt.deadline,
        )
    }

    /// A context for one invocation. `container` is the verified
    /// `CNI_NETNS`, or `None` when the runtime gave none (or, on DEL, it is
    /// gone).
    pub fn new(p: CtxParams) -> Ctx {
        let marks = (p.attachment.mark(), p.attachment.network_mark());
        let state_owner = (
            p.attachment.network.clone(),
            p.attachment.container_id.clone(),
            p.attachment.ifname.clone(),
        );
        let record_plugin = p.audit.plugin().to_owned();
        Ctx {
            record_plugin,
            grant: p.grant,
            container: p.container,
            host: None,
            sockets: HashMap::new(),
            in_call: false,
            journal: Journal::default(),
            audit: p.audit,
            calls: 0,
            attachment: p.attachment,
            marks,
            command: p.command,
            runtime: p.runtime,
            core: p.core,
            depth: 0,
            stores: Vec::new(),
            denials: Vec::new(),
            host_errors: Vec::new(),
            state_owner,
            nft: None,
            recorded: None,
            incarnations: std::cell::OnceCell::new(),
            adopted: None,
            node_stores: std::cell::OnceCell::new(),
            config_device: std::cell::OnceCell::new(),
            table_locks: Vec::new(),
        }
    }

    /// Why calls were refused in this invocation and its delegates, each
    /// reason once, in order (at most 16): `call: reason`, where the reason
    /// names the policy field that would allow it, or the invariant.
    pub fn denials(&self) -> &[String] {
        &self.denials
    }

    /// What failed on the host's side of calls the plugin saw fail as
    /// `other` (the path and errno of an unwritable state root, ...), and
    /// an audit log that could not be written: for the runtime, in a
    /// failed call's error, since the plugin cannot name them.
    pub fn host_errors(&self) -> Vec<String> {
        let mut out = self.host_errors.clone();
        out.extend(self.audit.failure().map(str::to_owned));
        out
    }

    /// Records an event of the host's own (not a plugin's call) in this
    /// invocation's audit log.
    pub fn audit_event(&mut self, call: &str, args: &Value, outcome: &Outcome) {
        self.audit.record(call, args, outcome);
    }

    /// Keeps `cause` for the runtime (once; at most 16).
    pub(crate) fn note_host_error(&mut self, cause: String) {
        if self.host_errors.len() < MAX_DENIALS && !self.host_errors.contains(&cause) {
            self.host_errors.push(cause);
        }
    }

    /// Keeps `reason` for the runtime (once).
    pub(super) fn note_denial(&mut self, reason: String) {
        if self.denials.len() < MAX_DENIALS && !self.denials.contains(&reason) {
            self.denials.push(reason);
        }
    }

    /// How many inverses the journal holds.
    pub fn journal_len(&self) -> usize {
        self.journal.len()
    }

    pub(super) fn ns(&self, kind: Kind) -> Option<&NetNs> {
        match kind {
            Kind::Container => self.container.as_ref(),
            Kind::Host => self.host.as_ref(),
        }
    }

    pub(super) fn ns_grant(&self, kind: Kind) -> &NsGrant {
        super::authority::ns_grant(&self.grant, kind)
    }

    /// Refuses unless namespace right `right` holds, naming its field of
    /// the namespace grant ([`super::authority::View::require`]).
    pub(super) fn require(&self, kind: Kind, right: super::row::Right) -> Result<(), CapError> {
        self.view().require(kind, right)
    }

    /// Opens wasmcni's own (host) namespace for the host's own use, if the
    /// plugin has not asked for it: what the host checks or returns there
    /// needs no handle of the plugin's.
    pub(super) fn open_host(&mut self) -> Result<(), CapError> {
        if self.host.is_none() {
            let ns = NetNs::open_host().map_err(|_| CapError::Code(ErrorCode::Other))?;
            self.host = Some(ns);
        }
        Ok(())
    }

    /// The netlink socket for a namespace, opened on first use.
    pub(super) fn netlink(&mut self, kind: Kind) -> Result<&mut Netlink, CapError> {
        if !self.sockets.contains_key(&kind) {
            let ns = self.ns(kind).ok_or(CapError::Code(ErrorCode::NotFound))?;
            let mut sock = Netlink::open(ns)?;
            sock.keep_links(self.in_call);
            self.sockets.insert(kind, sock);
        }
        self.sockets
            .get_mut(&kind)
            .ok_or(CapError::Code(ErrorCode::NotFound))
    }

    /// Keeps link answers for the length of one host call, or stops: its
    /// checks and its action read the same links several times (a bridge
    /// ADD asked the kernel for a link 40 times, each answer ~2 KB to build
    /// and parse; 11 of them were a link read earlier in the same call with
    /// no change in between). Any change this process asks for, a lock it
    /// takes and a native delegate it runs drop what was kept
    /// ([`crate::netlink::note_change`]); the next call reads afresh (a
    /// plugin polls a link's state by calling again).
    fn keep_links(&mut self, on: bool) {
        self.in_call = on;
        for s in self.sockets.values_mut() {
            s.keep_links(on);
        }
    }

    /// Runs `f` with link answers kept as in a host call ([`Ctx::keep_links`]):
    /// for work outside one (an ADD's record, written after the plugin
    /// returned) that reads its links several times. Inside a host call,
    /// just runs `f`.
    pub(super) fn keeping_links<R>(&mut self, f: impl FnOnce(&mut Ctx) -> R) -> R {
        if self.in_call {
            return f(self);
        }
        self.keep_links(true);
        let r = f(self);
        self.keep_links(false);
        r
    }

    /// A link as the kernel reports it (in a host call, as it did at the
    /// call's last change: [`Ctx::keep_links`]).
    pub(super) fn link(&mut self, kind: Kind, index: u32) -> Result<Link, CapError> {
        if index == 0 {
            return Err(ErrorCode::NotFound.into());
        }
        let msg = self.netlink(kind)?.link_by_index(index)?;
        Ok(Link::from_message(msg))
    }

    /// Whether a change to link `index` needs an inverse: only in ADD (the
    /// only command undone), and not for a link created in the same call
    /// (the undo deletes it, and all its state with it).
    pub(super) fn journaling_for(&self, kind: Kind, index: u32) -> bool {
        self.command == Some(Command::Add) && !self.journal.created(kind, index)
    }

    /// Records `undo`, an inverse of a change to link `index`, if it is
    /// needed ([`Ctx::journaling_for`]).
    pub(super) fn record_for(&mut self, kind: Kind, index: u32, undo: impl Inverse) {
        if self.journaling_for(kind, index) {
            self.journal.record(undo);
        }
    }

    /// Marks a link wasmcni created (or moved) in the host namespace as
    /// this attachment's, or (`shared`: a bridge) as its network's.
    pub(super) fn mark(&mut self, kind: Kind, index: u32, shared: bool) -> Result<(), CapError> {
        if kind != Kind::Host {
            return Ok(());
        }
        let mark = if shared {
            self.marks.1.clone()
        } else {
            self.marks.0.clone()
        };
        self.netlink(kind)?
            .set_alias(index, &mark)
            .map_err(CapError::from)
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
    /// then the audit record. `args` are the call's arguments in WIT
    /// order; the record names them as the row does ([`super::args`]).
    pub(super) fn cap<T>(
        &mut self,
        row: &'static Entry,
        args: impl AuditArgs,
        f: impl FnOnce(&mut Ctx) -> Result<T, CapError>,
    ) -> Result<T, CapError> {
        Self::cap_with(&mut self.caps, row, args, f)
    }

    /// [`StoreData::cap`] on the context alone, for calls that also borrow
    /// a resource from the table.
    pub(super) fn cap_with<T, A: AuditArgs>(
        caps: &mut Ctx,
        row: &'static Entry,
        args: A,
        f: impl FnOnce(&mut Ctx) -> Result<T, CapError>,
    ) -> Result<T, CapError> {
        debug_assert_eq!(A::LEN, row.args.len(), "{}: arguments", row.call);
        let args = args.audit(row);
        let call = row.call;
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
        crate::fault::pause(call);
        let kill = match injected_fault() {
            Fault::None => false,
            Fault::Fail(e) => {
                caps.audit.record(call, &args, &e.outcome());
                return Err(e);
            }
            Fault::KillAfter => true,
        };
        // Only ADD and DEL change the kernel (`authority::call`).
        // ... and what its row declares it needs is what is checked
        // (`authority::View::declared`).
        let allowed = super::authority::call::command_may(caps.command, row.mutates, row.in_gc)
            .and_then(|()| caps.view().declared(row.needs, &args));
        let result = if let Err(e) = allowed {
            Err(e)
        } else {
            caps.keep_links(true);
            let result = f(caps);
            caps.keep_links(false);
            result
        };
        if kill {
            crate::fault::kill();
        }
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(e) => e.outcome(),
        };
        if let Err(CapError::Denied(d)) = &result {
            caps.note_denial(format!("{call}: {}", d.reason()));
        }
        caps.audit.record(call, &args, &outcome);
        result
    }

    /// Resolves a borrowed handle to the namespace kind it stands for.
    pub(super) fn ns_kind(&self, ns: &Resource<NsHandle>) -> Result<Kind, CapError> {
        self.table
            .get(ns)
            .map(|h| h.kind())
            .map_err(|e| CapError::Trap(e.into()))
    }
}

/// What a test asked of this host call ([`injected_fault`]).
#[cfg_attr(not(debug_assertions), allow(dead_code))]
enum Fault {
    None,
    /// Fail it, before it acts.
    Fail(CapError),
    /// Kill the process right after it acted, before it answers.
    KillAfter,
}

/// Test builds only: `WASMCNI_FAULT=call:K` makes the K-th capability
/// call of the process (a delegate's calls count too) trap before it acts,
/// `call:K:error` makes it fail with EIO instead, so that a test can end a
/// real plugin's ADD at every step and check the undo (S6 through each
/// plugin, `tests/fault.rs`), and `kill:K` kills the process (SIGKILL)
/// right after the K-th call acted, so that a test can check what DEL and
/// GC make of an ADD cut off there (`tests/records.rs`). Release builds
/// compile it out.
fn injected_fault() -> Fault {
    match crate::fault::at_call() {
        None => Fault::None,
        Some(crate::fault::CallFault::KillAfter) => Fault::KillAfter,
        Some(crate::fault::CallFault::Error) => Fault::Fail(CapError::Kernel(libc::EIO)),
        Some(crate::fault::CallFault::Trap(k)) => Fault::Fail(CapError::Trap(
            wasmtime::Error::msg(format!("fault injected at host call {k} (WASMCNI_FAULT)")),
        )),
    }
}

/// One `add_NAME` per capability interface: adds just that interface to a
/// linker (the runner adds those a component imports).
macro_rules! add_interface {
    ($($fn_name:ident => $module:ident),* $(,)?) => {
        $(
            #[doc = concat!("Adds the `", stringify!($module), "` interface to a linker.")]
            pub fn $fn_name(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
                bindings::wasmcni::plugin::$module::add_to_linker::<StoreData, HasSelf<StoreData>>(
                    linker,
                    |s| s,
                )
            }
        )*
    };
}

add_interface! {
    add_types => types,
    add_netns => netns,
    add_link => link,
    add_address => address,
    add_route => route,
    add_sysctl => sysctl,
    add_traffic_control => traffic_control,
    add_firewall => firewall,
    add_ipam_store => ipam_store,
    add_delegate => delegate,
    add_attachment_state => attachment_state,
    add_dhcp => dhcp,
}

/// A string argument, refused when longer than `max` bytes.
pub(super) fn bounded<'a>(what: &str, s: &'a str, max: usize) -> Result<&'a str, CapError> {
    if s.len() > max {
        return Err(CapError::Limit(format!(
            "{what} is {} bytes, more than the {max} wasmcni accepts",
            s.len()
        )));
    }
    Ok(s)
}

/// What the attachment's records (this boot's) say of its incarnations
/// (S15): an incarnation is one ADD's container namespace (its nsfs
/// inode), and a runtime that lost a DEL may ADD the same (network,
/// container ID, ifname) again in another namespace.
#[derive(Debug, Default)]
pub struct Incarnations {
    /// Node links, by name, with the incarnation that made each.
    pub(super) links: Vec<(String, u64)>,
    /// The incarnations the records were written for.
    pub(super) current: Vec<u64>,
}

/// Makes a plugin run's capability context from its grant and its audit
/// log, once its component is ready ([`RunPlugin`]); `Err` stops the run.
pub type MakeCtx<'a> = Box<dyn FnOnce(Grant, Audit) -> Result<Ctx, CniError> + 'a>;

/// The one way a plugin runs (`crate::exec`, above this layer), as
/// delegation and the chain runner's members reach it: through this trait,
/// given to the context ([`CtxParams::core`]), not by importing what is
/// above the capability layer.
pub trait RunPlugin: Sync {
    /// Runs `plugin` (its policy entry `resolved`) for `command` with
    /// `env` and `config`: loads its component, makes its context with
    /// `ctx`, executes it. The outcome and the context; `Err` if it could
    /// not be loaded or `ctx` refused.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        rt: &Runtime,
        plugin: &Plugin,
        resolved: &Resolved,
        command: &str,
        env: &[(String, String)],
        config: &[u8],
        ctx: MakeCtx<'_>,
    ) -> Result<(Result<Output, CniError>, Ctx), CniError>;
}

impl TypesHost for StoreData {
    fn convert_error_code(&mut self, err: CapError) -> wasmtime::Result<ErrorCode> {
        match err.code() {
            Some(c) => Ok(c),
            None => match err {
                CapError::Trap(t) => Err(t),
                _ => Ok(ErrorCode::Other),
            },
        }
    }
}

/// How one change is taken back: an inverse, recorded in the journal
/// ([`Journal`], which orders them and follows the links they name without
/// interpreting them) and carried out by the undo (`undo`). Each interface
/// module defines its inverses (one enum per interface) beside the host
/// functions that record them, and says here how each is carried out,
/// which links it names, and what the authority model and the attachment's
/// records make of it. Adding an undoable host call touches its interface
/// module only.
pub trait Inverse: std::fmt::Debug + InverseBase + Send + 'static {
    /// Carries it out.
    fn apply(&self, ctx: &mut Ctx) -> Result<(), CapError>;

    /// Whether `errno`, from [`Inverse::apply`], means the change was
    /// taken back already (the link is gone, the kernel put the address
    /// back itself).
    fn already_gone(&self, _errno: i32) -> bool {
        false
    }

    /// The link it names (namespace, index), if any: the one place that
    /// says which inverses name a link, for reading and for remapping.
    fn link_slot(&mut self) -> Option<(Kind, &mut u32)> {
        None
    }

    /// The second link it can name: a master.
    fn master_slot(&mut self) -> Option<(Kind, &mut u32)> {
        None
    }

    /// Whether it undoes the creation of the link it names.
    fn creates_link(&self) -> bool {
        false
    }

    /// If it moves a link back where it came from: that namespace, the
    /// link's name and its index there.
    fn moves_back(&self) -> Option<(Kind, &str, u32)> {
        None
    }

    /// A short description, for the audit log and errors.
    fn describe(&self) -> String {
        format!("{self:?}")
    }

    /// Its form in an attachment record (the inverses that put back a link
    /// the ADD took from the node), or none if it is never kept past this
    /// process; `undo::from_record` reads it back.
    fn record(&self) -> Option<serde_json::Value> {
        None
    }

    /// Why a failed ADD's undo leaves this change in place: another
    /// attachment relies on what it changed (`authority`).
    fn kept_for_other_holders(&self, _ctx: &mut Ctx) -> Option<String> {
        None
    }

    /// What of `attachment`'s own it leaves for the attachment's record to
    /// stand for (a reservation, firewall rules), if any (`owned`).
    fn owned(&self, _attachment: &Attachment) -> Option<Owned> {
        None
    }

    /// Whether the host's record-driven DEL could not take it back
    /// (`owned`): by default, as the link it names says.
    fn uncovered(&self, _ctx: &mut Ctx, _owned: &Owned) -> Uncovered {
        Uncovered::ByLink
    }
}

/// What [`Inverse::uncovered`] says of one inverse.
pub enum Uncovered {
    /// As the link it names says: one the ADD made, or one of the node's
    /// the attachment does not own.
    ByLink,
    /// The attachment's record stands for it.
    No,
    /// Only the plugin's DEL takes it back: what it is.
    Yes(String),
}

/// What every inverse has without writing it: a copy, and a view for the
/// few callers that look at one interface's inverses.
pub trait InverseBase {
    /// A copy.
    fn clone_box(&self) -> Box<dyn Inverse>;
    /// The inverse as [`std::any::Any`].
    fn as_any(&self) -> &dyn std::any::Any;
}

impl<T: Inverse + Clone> InverseBase for T {
    fn clone_box(&self) -> Box<dyn Inverse> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Clone for Box<dyn Inverse> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

impl<T: Inverse> From<T> for Box<dyn Inverse> {
    fn from(t: T) -> Self {
        Box::new(t)
    }
}

impl Journaled for Box<dyn Inverse> {
    fn link_slot(&mut self) -> Option<(Kind, &mut u32)> {
        (**self).link_slot()
    }
    fn master_slot(&mut self) -> Option<(Kind, &mut u32)> {
        (**self).master_slot()
    }
    fn creates_link(&self) -> bool {
        (**self).creates_link()
    }
    fn moves_back_to(&self) -> Option<(Kind, &str)> {
        (**self).moves_back().map(|(to, name, _)| (to, name))
    }
}

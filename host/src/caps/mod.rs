//! The capability interfaces the host implements for plugins, one file per
//! WIT interface: convert the guest's values, check the grant, act through
//! netlink.

use std::collections::HashMap;

use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::limits::Limiter;
use crate::netlink::{Netlink, NlError};
use crate::netns::{Kind, NetNs};
use crate::policy::{Grant, NsGrant};

mod address;
mod error;
mod link;
mod netns;

pub use error::CapError;
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

/// Per-invocation capability state: the plugin's grant and the namespaces
/// it was given.
pub struct Ctx {
    grant: Grant,
    container: Option<NetNs>,
    host: Option<NetNs>,
    sockets: HashMap<Kind, Netlink>,
}

impl Ctx {
    /// A context for one invocation. `container` is the verified
    /// `CNI_NETNS`, or `None` when the runtime gave none (or, on DEL, it is
    /// gone).
    pub fn new(grant: Grant, container: Option<NetNs>) -> Ctx {
        Ctx {
            grant,
            container,
            host: None,
            sockets: HashMap::new(),
        }
    }

    fn ns_grant(&self, kind: Kind) -> NsGrant {
        match kind {
            Kind::Container => self.grant.container,
            Kind::Host => self.grant.host.unwrap_or_default(),
        }
    }

    /// The netlink socket for a namespace, opened on first use.
    fn netlink(&mut self, kind: Kind) -> Result<&mut Netlink, CapError> {
        if !self.sockets.contains_key(&kind) {
            let ns = match kind {
                Kind::Container => self.container.as_ref(),
                Kind::Host => self.host.as_ref(),
            }
            .ok_or(CapError::Code(ErrorCode::NotFound))?;
            let sock = Netlink::open(ns).map_err(|e| CapError::from(&e))?;
            self.sockets.insert(kind, sock);
        }
        self.sockets
            .get_mut(&kind)
            .ok_or(CapError::Code(ErrorCode::NotFound))
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
}

impl WasiView for StoreData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Adds wasmcni's capability interfaces to a linker.
pub fn add_to_linker(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
    Plugin::add_to_linker::<StoreData, HasSelf<StoreData>>(linker, |s| s)
}

impl From<&NlError> for CapError {
    fn from(e: &NlError) -> Self {
        CapError::Code(error::from_errno(e.errno()))
    }
}

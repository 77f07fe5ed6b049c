//! `wasmcni:plugin/netns`: the two namespace handles.

use super::row::*;
use wasmtime::component::Resource;

use super::bindings::wasmcni::plugin::netns::{Host, HostNetns, NetnsKind};
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::{CapError, NsHandle};
use super::ctx::{Ctx, StoreData};
use crate::netns::{Kind, NetNs};

/// The host functions' work, one method per call.
impl Ctx {
    /// The node namespace, opened on first use, if the grant has a `host` entry.
    fn open_host_ns(&mut self) -> Result<(), CapError> {
        if self.host.is_none() {
            let ns = NetNs::open_host().map_err(|_| CapError::Code(ErrorCode::Other))?;
            self.host = Some(ns);
        }
        Ok(())
    }

    /// Whether the invocation has a container namespace.
    fn check_container_ns(&mut self) -> Result<(), CapError> {
        if self.container.is_none() {
            return Err(ErrorCode::NotFound.into());
        }
        Ok(())
    }
}

impl Host for StoreData {
    fn container(&mut self) -> Result<Resource<NsHandle>, CapError> {
        self.cap(&CONTAINER, (), |c| c.check_container_ns())?;
        Ok(self.table.push(NsHandle {
            kind: Kind::Container,
        })?)
    }

    fn host(&mut self) -> Result<Resource<NsHandle>, CapError> {
        self.cap(&HOST, (), |c| c.open_host_ns())?;
        Ok(self.table.push(NsHandle { kind: Kind::Host })?)
    }
}

impl HostNetns for StoreData {
    fn kind(&mut self, ns: Resource<NsHandle>) -> wasmtime::Result<NetnsKind> {
        Ok(match self.table.get(&ns)?.kind {
            Kind::Container => NetnsKind::Container,
            Kind::Host => NetnsKind::Host,
        })
    }

    fn drop(&mut self, ns: Resource<NsHandle>) -> wasmtime::Result<()> {
        self.table.delete(ns)?;
        Ok(())
    }
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[&CONTAINER, &HOST, &NETNS_KIND];

/// `netns.container`.
pub(super) const CONTAINER: Entry = Entry {
    call: "netns.container",
    args: &[],
    authority: "handle to the container namespace (CNI_NETNS, verified nsfs, not the host's)",
    policy: "none (always)",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: &[],
};

/// `netns.host`.
pub(super) const HOST: Entry = Entry {
    call: "netns.host",
    args: &[],
    authority: "handle to the node namespace",
    policy: "`host` entry present",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: &[Grant::HostEntry],
};

/// `netns.[method]netns.kind`.
pub(super) const NETNS_KIND: Entry = Entry {
    call: "netns.[method]netns.kind",
    args: &[],
    authority: "none: says which namespace a handle is",
    policy: "none",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: &[],
};

//! `wasmcni:plugin/netns`: the two namespace handles.

use serde_json::json;
use wasmtime::component::Resource;

use super::bindings::wasmcni::plugin::netns::{Host, HostNetns, NetnsKind};
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::{CapError, NsHandle};
use super::ctx::StoreData;
use crate::netns::{Kind, NetNs};

impl Host for StoreData {
    fn container(&mut self) -> Result<Resource<NsHandle>, CapError> {
        self.cap("netns.container", json!({}), |c| {
            if c.container.is_none() {
                return Err(ErrorCode::NotFound.into());
            }
            Ok(())
        })?;
        self.table
            .push(NsHandle {
                kind: Kind::Container,
            })
            .map_err(|e| CapError::Trap(e.into()))
    }

    fn host(&mut self) -> Result<Resource<NsHandle>, CapError> {
        self.cap("netns.host", json!({}), |c| {
            if c.grant.host.is_none() {
                return Err(CapError::denied(format!(
                    "{} is absent: no authority in the host namespace",
                    c.entry_field("host")
                )));
            }
            if c.host.is_none() {
                let ns = NetNs::open_host().map_err(|_| CapError::Code(ErrorCode::Other))?;
                c.host = Some(ns);
            }
            Ok(())
        })?;
        self.table
            .push(NsHandle { kind: Kind::Host })
            .map_err(|e| CapError::Trap(e.into()))
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

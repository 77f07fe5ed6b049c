//! `wasmcni:plugin/link`.
//!
//! This file holds the interface's host functions: each resolves its
//! handles and makes one call, through [`StoreData::cap`], into a [`Ctx`]
//! method in one of the files beside it:
//! - `query`: looking links up (by name, by index, all, by device);
//! - `create`: creating links of each kind, handing one to the network,
//!   deleting, and the set of links this invocation created;
//! - `attributes`: a link's own settings (up, MTU, address, promiscuity,
//!   all-multicast, queue length, alias) and what they pass on to a lower
//!   device;
//! - `port`: bridge ports (master, hairpin, isolation, VLANs);
//! - `moves`: names, and moves between the plugin's two namespaces;
//! - `inverse`: how each change is taken back ([`LinkUndo`]);
//! - `arguments`: the checks of a call's arguments, and how they read in
//!   the audit record;
//! - `rows`: the interface's rows of the capability catalog.
//!
//! The links stacked on a master (macvlan, ipvlan, vlan) are
//! `super::stacked`'s.
//!
//! [`Ctx`]: super::ctx::Ctx

mod arguments;
mod attributes;
mod create;
mod inverse;
mod moves;
mod port;
mod query;
mod rows;

pub use inverse::LinkUndo;
// Part of `LinkUndo`'s shape; the undo replay's tests name it here.
#[cfg(test)]
pub use inverse::LinkState;
pub(super) use rows::ROWS;

use wasmtime::component::Resource;

use super::args::Named;
use super::bindings::wasmcni::plugin::link::{
    BridgeOptions, DeviceSelector, Host, IpvlanMode, LinkInfo, LinkOptions, MacvlanMode,
    MacvlanOptions, PortVlan, TapOptions, VethPair,
};
use super::bindings::{CapError, NsHandle};
use super::ctx::StoreData;
use super::stacked::{CREATE_IPVLAN, CREATE_MACVLAN, CREATE_MACVLAN_WITH, CREATE_VLAN};
use arguments::Mac;
use rows::*;

impl Host for StoreData {
    fn get_by_name(&mut self, ns: Resource<NsHandle>, name: String) -> Result<LinkInfo, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&GET_BY_NAME, (kind, &name), |c| {
            c.link_info_by_name(kind, &name)
        })
    }

    fn get_by_index(&mut self, ns: Resource<NsHandle>, index: u32) -> Result<LinkInfo, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&GET_BY_INDEX, (kind, index), |c| {
            c.link_info_by_index(kind, index)
        })
    }

    fn list(&mut self, ns: Resource<NsHandle>) -> Result<Vec<LinkInfo>, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&LIST, (kind,), |c| c.link_infos(kind))
    }

    fn find_devices(
        &mut self,
        ns: Resource<NsHandle>,
        selector: DeviceSelector,
    ) -> Result<Vec<LinkInfo>, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&FIND_DEVICES, (kind, &selector), |c| {
            c.find_device_links(kind, &selector)
        })
    }

    fn create_veth(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        peer_ns: Resource<NsHandle>,
        peer_name: String,
        options: LinkOptions,
        peer_mac: Option<Vec<u8>>,
    ) -> Result<VethPair, CapError> {
        let kind = self.ns_kind(&ns)?;
        let peer_kind = self.ns_kind(&peer_ns)?;
        let args = (
            kind,
            &name,
            peer_kind,
            &peer_name,
            &options,
            peer_mac.as_deref().map(Mac),
        );
        self.cap(&CREATE_VETH, args, |c| {
            c.create_veth_pair(
                kind,
                &name,
                peer_kind,
                &peer_name,
                &options,
                peer_mac.as_deref(),
            )
        })
    }

    fn create_bridge(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        options: LinkOptions,
        bridge: BridgeOptions,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&CREATE_BRIDGE, (kind, &name, &options, &bridge), |c| {
            c.create_bridge_link(kind, &name, &options, &bridge)
        })
    }

    fn create_dummy(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&CREATE_DUMMY, (kind, &name, &options), |c| {
            c.create_dummy_link(kind, &name, &options)
        })
    }

    fn create_vrf(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        table: u32,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&CREATE_VRF, (kind, &name, table, &options), |c| {
            c.create_vrf_link(kind, &name, table, &options)
        })
    }

    fn create_tap(
        &mut self,
        ns: Resource<NsHandle>,
        name: String,
        options: LinkOptions,
        tap: TapOptions,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&CREATE_TAP, (kind, &name, &options, &tap), |c| {
            c.create_tap_link(kind, &name, &options, &tap)
        })
    }

    fn create_macvlan(
        &mut self,
        master_ns: Resource<NsHandle>,
        master: u32,
        ns: Resource<NsHandle>,
        name: String,
        mode: MacvlanMode,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let master_kind = self.ns_kind(&master_ns)?;
        let kind = self.ns_kind(&ns)?;
        let args = (master_kind, master, kind, &name, Named(mode), &options);
        self.cap(&CREATE_MACVLAN, args, |c| {
            c.create_macvlan_link(master_kind, master, kind, &name, mode, &options, None)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn create_macvlan_with(
        &mut self,
        master_ns: Resource<NsHandle>,
        master: u32,
        ns: Resource<NsHandle>,
        name: String,
        mode: MacvlanMode,
        options: LinkOptions,
        macvlan: MacvlanOptions,
    ) -> Result<u32, CapError> {
        let master_kind = self.ns_kind(&master_ns)?;
        let kind = self.ns_kind(&ns)?;
        let args = (
            master_kind,
            master,
            kind,
            &name,
            Named(mode),
            &options,
            &macvlan,
        );
        self.cap(&CREATE_MACVLAN_WITH, args, |c| {
            c.create_macvlan_link(
                master_kind,
                master,
                kind,
                &name,
                mode,
                &options,
                macvlan.bc_queue_len,
            )
        })
    }

    fn create_ipvlan(
        &mut self,
        master_ns: Resource<NsHandle>,
        master: u32,
        ns: Resource<NsHandle>,
        name: String,
        mode: IpvlanMode,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let master_kind = self.ns_kind(&master_ns)?;
        let kind = self.ns_kind(&ns)?;
        let args = (master_kind, master, kind, &name, Named(mode), &options);
        self.cap(&CREATE_IPVLAN, args, |c| {
            c.create_ipvlan_link(master_kind, master, kind, &name, mode, &options)
        })
    }

    fn create_vlan(
        &mut self,
        master_ns: Resource<NsHandle>,
        master: u32,
        ns: Resource<NsHandle>,
        name: String,
        vlan_id: u16,
        options: LinkOptions,
    ) -> Result<u32, CapError> {
        let master_kind = self.ns_kind(&master_ns)?;
        let kind = self.ns_kind(&ns)?;
        let args = (master_kind, master, kind, &name, vlan_id, &options);
        self.cap(&CREATE_VLAN, args, |c| {
            c.create_vlan_link(master_kind, master, kind, &name, vlan_id, &options)
        })
    }

    fn move_to(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        target: Resource<NsHandle>,
        new_name: Option<String>,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        let target_kind = self.ns_kind(&target)?;
        let args = (kind, index, target_kind, &new_name);
        self.cap(&MOVE_TO, args, |c| {
            c.move_link(kind, index, target_kind, new_name.as_deref())
        })
    }

    fn set_up(&mut self, ns: Resource<NsHandle>, index: u32, up: bool) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_UP, (kind, index, up), |c| {
            c.set_link_admin_up(kind, index, up)
        })
    }

    fn set_mtu(&mut self, ns: Resource<NsHandle>, index: u32, mtu: u32) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_MTU, (kind, index, mtu), |c| {
            c.set_link_mtu(kind, index, mtu)
        })
    }

    fn set_mac(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        mac: Vec<u8>,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_MAC, (kind, index, Mac(&mac)), |c| {
            c.set_link_mac(kind, index, &mac)
        })
    }

    fn set_master(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        master: Option<u32>,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_MASTER, (kind, index, master), |c| {
            c.set_link_master(kind, index, master)
        })
    }

    fn set_hairpin(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_HAIRPIN, (kind, index, on), |c| {
            c.set_port_hairpin(kind, index, on)
        })
    }

    fn set_port_isolated(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_PORT_ISOLATED, (kind, index, on), |c| {
            c.set_port_isolation(kind, index, on)
        })
    }

    fn port_vlans(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
    ) -> Result<Vec<PortVlan>, CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&PORT_VLANS, (kind, index), |c| {
            c.read_port_vlans(kind, index)
        })
    }

    fn set_port_vlans(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        vlans: Vec<PortVlan>,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_PORT_VLANS, (kind, index, &vlans), |c| {
            c.replace_port_vlans(kind, index, &vlans)
        })
    }

    fn share(&mut self, ns: Resource<NsHandle>, index: u32) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SHARE, (kind, index), |c| c.share_link(kind, index))
    }

    fn set_promiscuous(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_PROMISCUOUS, (kind, index, on), |c| {
            c.set_link_promisc(kind, index, on)
        })
    }

    fn set_allmulticast(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_ALLMULTICAST, (kind, index, on), |c| {
            c.set_link_allmulti(kind, index, on)
        })
    }

    fn set_txqlen(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        txqlen: u32,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_TXQLEN, (kind, index, txqlen), |c| {
            c.set_link_txqlen(kind, index, txqlen)
        })
    }

    fn set_name(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        name: String,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_NAME, (kind, index, &name), |c| {
            c.rename_link(kind, index, &name)
        })
    }

    fn set_alias(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        alias: String,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&SET_ALIAS, (kind, index, &alias), |c| {
            c.set_link_alias(kind, index, &alias)
        })
    }

    fn delete(&mut self, ns: Resource<NsHandle>, index: u32) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        self.cap(&DELETE, (kind, index), |c| c.remove_link(kind, index))
    }
}

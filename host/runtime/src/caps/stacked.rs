//! Links stacked on a master — macvlan, ipvlan, vlan — created on the
//! plugin's behalf: which masters a grant lets it use and how (a node
//! link the grant names in `masters` is used as a master only), and their
//! catalog rows. The host functions are in [`super::link`].

use serde_json::Value;

use super::args::{fields, AuditArg};
use super::bindings::wasmcni::plugin::link::{
    IpvlanMode, LinkOptions, MacvlanMode, MacvlanOptions,
};
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::{CapError, Link};
use super::ctx::Ctx;
use super::row::*;
use crate::netlink::SubKind;
use crate::netns::Kind;
use crate::policy::LinkKind;

/// The highest VLAN ID (4095 is reserved).
pub(super) const MAX_VID: u16 = 4094;

impl AuditArg for MacvlanOptions {
    fn audit(&self) -> Value {
        fields([("bc-queue-len", self.bc_queue_len.audit())])
    }
}

impl Ctx {
    /// A master for a macvlan / ipvlan / vlan: any link of the container's
    /// namespace; in the host's, a `masters` pattern, or one the plugin
    /// may modify. It is never changed.
    pub(super) fn usable_master(&mut self, kind: Kind, index: u32) -> Result<Link, CapError> {
        let l = self.link(kind, index)?;
        self.view().master(kind, &l)?;
        Ok(l)
    }

    /// Creates a macvlan on `master` (a passthru one only on a master the
    /// plugin may change), with `bc_queue_len` if given.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_macvlan_link(
        &mut self,
        master_kind: Kind,
        master: u32,
        kind: Kind,
        name: &str,
        mode: MacvlanMode,
        options: &LinkOptions,
        bc_queue_len: Option<u32>,
    ) -> Result<u32, CapError> {
        let mode_value = match mode {
            MacvlanMode::Private => 1,
            MacvlanMode::Vepa => 2,
            MacvlanMode::Bridge => 4,
            MacvlanMode::Passthru => 8,
        };
        if mode == MacvlanMode::Passthru && master_kind == Kind::Host {
            // A passthru macvlan mirrors its MAC and promiscuity onto
            // the master: that changes the master.
            let m = self.link(master_kind, master)?;
            let controlled = self.check_host_link(master_kind, &m).is_ok();
            crate::caps::authority::link::passthru_master(&m.name, controlled)?;
        }
        if let Some(n) = bc_queue_len.filter(|n| *n > MACVLAN_DEFAULT_BC_QUEUE_LEN) {
            if master_kind == Kind::Host {
                // The kernel queues for every macvlan of a master as many
                // broadcast frames as the largest of their requests.
                let m = self.link(master_kind, master)?;
                let controlled = self.check_host_link(master_kind, &m).is_ok();
                crate::caps::authority::link::broadcast_queue(
                    &m.name,
                    n,
                    MACVLAN_DEFAULT_BC_QUEUE_LEN,
                    controlled,
                )?;
            }
        }
        self.create_sub(
            master_kind,
            master,
            kind,
            SubKind::Macvlan(mode_value, bc_queue_len),
            name,
            options,
        )
    }

    /// Creates an ipvlan on `master`.
    pub(super) fn create_ipvlan_link(
        &mut self,
        master_kind: Kind,
        master: u32,
        kind: Kind,
        name: &str,
        mode: IpvlanMode,
        options: &LinkOptions,
    ) -> Result<u32, CapError> {
        let mode_value = match mode {
            IpvlanMode::L2 => 0,
            IpvlanMode::L3 => 1,
            IpvlanMode::L3s => 2,
        };
        self.create_sub(
            master_kind,
            master,
            kind,
            SubKind::Ipvlan(mode_value),
            name,
            options,
        )
    }

    /// Creates a VLAN link with ID `vlan_id` on `master`.
    pub(super) fn create_vlan_link(
        &mut self,
        master_kind: Kind,
        master: u32,
        kind: Kind,
        name: &str,
        vlan_id: u16,
        options: &LinkOptions,
    ) -> Result<u32, CapError> {
        // 0 is a priority-tagged vlan (802.1p), as the kernel and the
        // reference plugin accept it; 4095 is reserved.
        if vlan_id > MAX_VID {
            return Err(ErrorCode::InvalidArgument.into());
        }
        self.create_sub(
            master_kind,
            master,
            kind,
            SubKind::Vlan(vlan_id),
            name,
            options,
        )
    }
}

/// `link.create-macvlan`.
pub(super) const CREATE_MACVLAN: Entry = Entry {
    call: "link.create-macvlan",
    args: &["master-ns", "master", "ns", "name", "mode", "options"],
    authority: "create a macvlan on a master, born in a namespace",
    policy:
        "`create: [macvlan]` where born; host: named per `names`; master: host `masters` (read-only use), own or `links`; within `max-links`",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Macvlan)), Grant::NewName("name", Ns::Call), Grant::NodeLink("master", Ns::Arg("master-ns"), LinkGrant::Masters)],
};

/// The broadcast queue length the kernel gives a macvlan that asks for
/// none (`MACVLAN_DEFAULT_BC_QUEUE_LEN`).
const MACVLAN_DEFAULT_BC_QUEUE_LEN: u32 = 1000;

/// `link.create-macvlan-with`.
pub(super) const CREATE_MACVLAN_WITH: Entry = Entry {
    call: "link.create-macvlan-with",
    args: &["master-ns", "master", "ns", "name", "mode", "options", "macvlan"],
    authority: "create a macvlan with macvlan settings (its broadcast queue length) on a master, born in a namespace",
    policy:
        "as `create-macvlan`: `create: [macvlan]` where born; host: named per `names`; master: host `masters` (read-only use), own or `links`; within `max-links`; a broadcast queue length over the kernel's default (1000), which every macvlan on the master shares, only on a master the plugin may change (own or `links`)",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Macvlan)), Grant::NewName("name", Ns::Call), Grant::NodeLink("master", Ns::Arg("master-ns"), LinkGrant::Masters)],
};

/// `link.create-ipvlan`.
pub(super) const CREATE_IPVLAN: Entry = Entry {
    call: "link.create-ipvlan",
    args: &["master-ns", "master", "ns", "name", "mode", "options"],
    authority: "create an ipvlan on a master, born in a namespace",
    policy: "`create: [ipvlan]` where born; host: named per `names`; master as for macvlan; within `max-links`",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Ipvlan)), Grant::NewName("name", Ns::Call), Grant::NodeLink("master", Ns::Arg("master-ns"), LinkGrant::Masters)],
};

/// `link.create-vlan`.
pub(super) const CREATE_VLAN: Entry = Entry {
    call: "link.create-vlan",
    args: &["master-ns", "master", "ns", "name", "vlan-id", "options"],
    authority: "create an 802.1Q vlan on a master, born in a namespace",
    policy: "`create: [vlan]` where born; host: named per `names`; master as for macvlan; within `max-links`",
    undo: "delete it",
    mutates: true,
    in_gc: false,
    needs: &[Grant::Right(Ns::Call, Right::Create(LinkKind::Vlan)), Grant::NewName("name", Ns::Call), Grant::NodeLink("master", Ns::Arg("master-ns"), LinkGrant::Masters)],
};

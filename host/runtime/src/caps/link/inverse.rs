//! How a change to a link is taken back ([`LinkUndo`]), and the undo's
//! two larger steps: a moved link's state put back, a created link
//! deleted (unless other attachments' links joined it).

use std::os::fd::AsFd;

use crate::caps::bindings::CapError;
use crate::caps::ctx::{Ctx, Inverse};
use crate::netlink::NlError;
use crate::netns::Kind;

/// `IFLA_BRPORT_ISOLATED`: a bridge port's isolation flag.
pub(super) const IFLA_BRPORT_ISOLATED: u16 = 33;

/// How a change to a link is taken back (`link`). Links are named by
/// (namespace, index); these are kept in an attachment record when the
/// link is one the ADD took from the node ([`crate::record::Borrowed`]),
/// in the same form as ever.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum LinkUndo {
    /// A link was created: delete it (a veth takes its peer along).
    DeleteLink {
        /// Where it is.
        ns: Kind,
        /// Its index there.
        index: u32,
    },
    /// A link was set up or down: restore.
    SetUp {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old state.
        up: bool,
    },
    /// The MTU changed: restore.
    SetMtu {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old MTU.
        mtu: u32,
    },
    /// The hardware address changed: restore.
    SetMac {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old address.
        mac: Vec<u8>,
    },
    /// The master changed: restore.
    SetMaster {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old master.
        master: Option<u32>,
    },
    /// Hairpin mode changed: restore.
    SetHairpin {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old mode.
        on: bool,
    },
    /// A bridge port's isolation changed: restore.
    SetPortIsolated {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old flag.
        on: bool,
    },
    /// A bridge port's VLANs changed: put the old list back.
    SetPortVlans {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old VLANs.
        vlans: Vec<crate::netlink::PortVlan>,
    },
    /// `IFF_PROMISC` changed: restore.
    SetPromisc {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old flag.
        on: bool,
    },
    /// Renamed: restore the name.
    SetName {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old name.
        name: String,
    },
    /// The alias changed: restore (empty clears).
    SetAlias {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old alias.
        alias: String,
    },
    /// Moved to another namespace: move back under the old name.
    MoveBack {
        /// Where it is now.
        ns: Kind,
        /// Its index there.
        index: u32,
        /// Where it came from.
        to: Kind,
        /// Its index there.
        from_index: u32,
        /// Its name there.
        name: String,
    },
    /// A link was moved out of its namespace, which resets what the kernel
    /// keeps per namespace: once it is back, restore its state as it was.
    RestoreLink {
        /// Where it is once back.
        ns: Kind,
        /// Its index there.
        index: u32,
        /// Its state before the move.
        state: LinkState,
    },
    /// `IFF_ALLMULTI` changed: restore.
    SetAllmulti {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old flag.
        on: bool,
    },
    /// The transmit queue length changed: restore.
    SetTxqlen {
        /// Where.
        ns: Kind,
        /// Which.
        index: u32,
        /// The old length.
        txqlen: u32,
    },
}

/// What the kernel resets when a link moves to another namespace (it is
/// closed, leaves its master, and its per-link settings are recreated from
/// the new namespace's defaults), recorded before the move.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LinkState {
    /// Administratively up.
    pub up: bool,
    /// MTU.
    pub mtu: u32,
    /// Hardware address.
    pub mac: Vec<u8>,
    /// `IFLA_IFALIAS` (empty: none).
    pub alias: String,
    /// The master (bridge) it was enslaved to.
    pub master: Option<u32>,
    /// Its bridge port settings (hairpin, learning, ...), if it was a port.
    pub port: Option<crate::netlink::PortOptions>,
    /// Its VLANs, if it was a bridge port (absent in records written
    /// before they were kept: left as the kernel makes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlans: Option<Vec<crate::netlink::PortVlan>>,
    /// `IFF_PROMISC`.
    pub promisc: bool,
    /// Its per-link settings (`net.*.conf.<name>.*`, `net.*.neigh.<name>.*`).
    pub sysctls: Vec<(String, String)>,
}

impl Inverse for LinkUndo {
    fn apply(&self, ctx: &mut Ctx) -> Result<(), CapError> {
        let nl_err = |e: NlError| CapError::from(&e);
        match self {
            LinkUndo::DeleteLink { ns, index } => ctx.undo_create(*ns, *index),
            LinkUndo::SetUp { ns, index, up } => {
                ctx.netlink(*ns)?.set_link_up(*index, *up).map_err(nl_err)
            }
            LinkUndo::SetMtu { ns, index, mtu } => {
                ctx.netlink(*ns)?.set_mtu(*index, *mtu).map_err(nl_err)
            }
            LinkUndo::SetMac { ns, index, mac } => {
                ctx.netlink(*ns)?.set_mac(*index, mac).map_err(nl_err)
            }
            LinkUndo::SetMaster { ns, index, master } => ctx
                .netlink(*ns)?
                .set_master(*index, *master)
                .map_err(nl_err),
            LinkUndo::SetHairpin { ns, index, on } => {
                ctx.netlink(*ns)?.set_hairpin(*index, *on).map_err(nl_err)
            }
            LinkUndo::SetPortIsolated { ns, index, on } => ctx
                .netlink(*ns)?
                .set_bridge_port(*index, &[(IFLA_BRPORT_ISOLATED, vec![u8::from(*on)])])
                .map_err(nl_err),
            LinkUndo::SetPortVlans { ns, index, vlans } => ctx
                .netlink(*ns)?
                .set_port_vlans(*index, vlans)
                .map_err(nl_err),
            LinkUndo::SetPromisc { ns, index, on } => {
                ctx.netlink(*ns)?.set_promisc(*index, *on).map_err(nl_err)
            }
            LinkUndo::SetAllmulti { ns, index, on } => {
                ctx.netlink(*ns)?.set_allmulti(*index, *on).map_err(nl_err)
            }
            LinkUndo::SetTxqlen { ns, index, txqlen } => ctx
                .netlink(*ns)?
                .set_txqlen(*index, *txqlen)
                .map_err(nl_err),
            LinkUndo::SetName { ns, index, name } => {
                ctx.netlink(*ns)?.set_name(*index, name).map_err(nl_err)
            }
            LinkUndo::SetAlias { ns, index, alias } => {
                ctx.netlink(*ns)?.set_alias(*index, alias).map_err(nl_err)
            }
            LinkUndo::MoveBack {
                ns,
                index,
                to,
                from_index,
                name,
            } => {
                let fd = ctx.ns_fd(*to)?;
                let nl = ctx.netlink(*ns)?;
                // Back under its old index if it is free; else wherever the
                // kernel puts it (the replay remaps the older entries).
                match nl.set_netns(*index, fd.as_fd(), Some(name), Some(*from_index)) {
                    Ok(()) => Ok(()),
                    Err(_) => nl
                        .set_netns(*index, fd.as_fd(), Some(name), None)
                        .map_err(nl_err),
                }
            }
            LinkUndo::RestoreLink { ns, index, state } => ctx.restore_link(*ns, *index, state),
        }
    }

    fn already_gone(&self, errno: i32) -> bool {
        matches!(self, LinkUndo::DeleteLink { .. })
            && (errno == libc::ENODEV || errno == libc::ENOENT)
    }

    fn link_slot(&mut self) -> Option<(Kind, &mut u32)> {
        match self {
            LinkUndo::DeleteLink { ns, index }
            | LinkUndo::SetUp { ns, index, .. }
            | LinkUndo::SetMtu { ns, index, .. }
            | LinkUndo::SetMac { ns, index, .. }
            | LinkUndo::SetMaster { ns, index, .. }
            | LinkUndo::SetHairpin { ns, index, .. }
            | LinkUndo::SetPortIsolated { ns, index, .. }
            | LinkUndo::SetPortVlans { ns, index, .. }
            | LinkUndo::SetPromisc { ns, index, .. }
            | LinkUndo::SetAllmulti { ns, index, .. }
            | LinkUndo::SetTxqlen { ns, index, .. }
            | LinkUndo::SetName { ns, index, .. }
            | LinkUndo::SetAlias { ns, index, .. }
            | LinkUndo::MoveBack { ns, index, .. }
            | LinkUndo::RestoreLink { ns, index, .. } => Some((*ns, index)),
        }
    }

    fn master_slot(&mut self) -> Option<(Kind, &mut u32)> {
        match self {
            LinkUndo::SetMaster {
                ns,
                master: Some(m),
                ..
            } => Some((*ns, m)),
            LinkUndo::RestoreLink { ns, state, .. } => state.master.as_mut().map(|m| (*ns, m)),
            _ => None,
        }
    }

    fn creates_link(&self) -> bool {
        matches!(self, LinkUndo::DeleteLink { .. })
    }

    fn moves_back(&self) -> Option<(Kind, &str, u32)> {
        match self {
            LinkUndo::MoveBack {
                to,
                name,
                from_index,
                ..
            } => Some((*to, name, *from_index)),
            _ => None,
        }
    }

    fn record(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn kept_for_other_holders(&self, ctx: &mut Ctx) -> Option<String> {
        match self {
            LinkUndo::DeleteLink {
                ns: Kind::Host,
                index,
            } => ctx.shared_link_kept(*index),
            _ => None,
        }
    }
}

impl Ctx {
    /// Puts a link that came back from another namespace into the state it
    /// had before it left: MTU first (it resets the IPv6 MTU setting), its
    /// per-link settings (they decide what happens when it comes up), then
    /// address, alias, master, bridge port settings and VLANs, promiscuity, and
    /// last the admin state (the routes restored after this need it up).
    /// Only what differs is written; a step that fails does not stop the
    /// others, and the error names every one that failed.
    pub(super) fn restore_link(
        &mut self,
        kind: crate::netns::Kind,
        index: u32,
        state: &LinkState,
    ) -> Result<(), CapError> {
        let now = self.link(kind, index)?;
        let mut failed: Vec<String> = Vec::new();
        let step =
            |failed: &mut Vec<String>, what: &str, r: Result<(), crate::netlink::NlError>| {
                if let Err(e) = r {
                    failed.push(format!("{what}: {e}"));
                }
            };
        let nl = self.netlink(kind)?;
        if now.mtu != state.mtu {
            step(&mut failed, "mtu", nl.set_mtu(index, state.mtu));
        }
        let ns = self.ns(kind).ok_or(CapError::Kernel(libc::ENOENT))?;
        match crate::sysctl::restore(ns, &state.sysctls) {
            Ok(keys) if keys.is_empty() => {}
            Ok(keys) => failed.push(format!("settings {}", keys.join(", "))),
            Err(e) => failed.push(format!("settings: {e}")),
        }
        let nl = self.netlink(kind)?;
        if now.mac != state.mac && !state.mac.is_empty() {
            step(&mut failed, "mac", nl.set_mac(index, &state.mac));
        }
        if now.alias.as_deref().unwrap_or("") != state.alias {
            step(&mut failed, "alias", nl.set_alias(index, &state.alias));
        }
        if now.master != state.master {
            step(&mut failed, "master", nl.set_master(index, state.master));
        }
        if let Some(port) = &state.port {
            step(&mut failed, "bridge port", nl.set_bridge_port(index, port));
        }
        // Joining the bridge again gave it the bridge's default VLAN only.
        if let Some(vlans) = &state.vlans {
            step(&mut failed, "port vlans", nl.set_port_vlans(index, vlans));
        }
        if now.promiscuous != state.promisc {
            step(&mut failed, "promisc", nl.set_promisc(index, state.promisc));
        }
        if now.up != state.up {
            step(&mut failed, "up", nl.set_link_up(index, state.up));
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(CapError::Incomplete(failed.join("; ")))
        }
    }

    /// Deletes a link this invocation created; but a bridge created for
    /// the network stays if another attachment's link joined it meanwhile
    /// (checked under the network lock, which enslaving also takes).
    pub(super) fn undo_create(
        &mut self,
        kind: crate::netns::Kind,
        index: u32,
    ) -> Result<(), CapError> {
        let nl_err = |e: crate::netlink::NlError| CapError::from(&e);
        let l = self.link(kind, index)?;
        let _lock = if kind == crate::netns::Kind::Host
            && l.alias.as_deref() == Some(self.marks.1.as_str())
        {
            let lock = crate::netlock::lock(&self.attachment.network);
            let ports = self
                .netlink(kind)?
                .links()
                .map_err(nl_err)?
                .into_iter()
                .filter(|m| {
                    crate::caps::bindings::Link::from_message(m.clone()).master == Some(index)
                })
                .count();
            if ports > 0 {
                log::info!(
                    "kept bridge {:?}: {ports} link(s) of other attachments joined it",
                    l.name
                );
                return Ok(());
            }
            lock
        } else {
            None
        };
        self.netlink(kind)?.delete_link(index).map_err(nl_err)
    }
}

//! Bridge ports (`link.set-master`, `set-hairpin`, `set-port-isolated`,
//! `port-vlans`, `set-port-vlans`): joining and leaving a master, the
//! port's flags, and its VLANs, which only the network config opens.

use super::inverse::{LinkUndo, IFLA_BRPORT_ISOLATED};
use crate::caps::bindings::wasmcni::plugin::link::PortVlan;
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::CapError;
use crate::caps::ctx::Ctx;
use crate::caps::stacked::MAX_VID;
use crate::netns::Kind;

/// Whether a bridge port's settings ([`Netlink::bridge_port`]) say it is
/// isolated.
///
/// [`Netlink::bridge_port`]: crate::netlink::Netlink::bridge_port
fn port_isolated(port: &[(u16, Vec<u8>)]) -> bool {
    port.iter()
        .any(|(kind, value)| *kind == IFLA_BRPORT_ISOLATED && value.first() == Some(&1))
}

impl Ctx {
    /// A port may join a VLAN it is not in only if the network config
    /// names it and the grant's `config-vlans` admits the config's VLANs:
    /// on a bridge other attachments (other tenants) share, any other VLAN
    /// may be theirs. Keeping, re-flagging or leaving its VLANs is always
    /// the port's own business.
    fn check_new_vlans(
        &self,
        kind: Kind,
        index: u32,
        want: &[crate::netlink::PortVlan],
        have: &[crate::netlink::PortVlan],
    ) -> Result<(), CapError> {
        let mut new = want
            .iter()
            .map(|v| v.vid)
            .filter(|vid| !have.iter().any(|h| h.vid == *vid));
        self.view().port_vlans(kind, index, &mut new)
    }

    /// The VLANs of port `index` an ADD's undo must put back if it moves
    /// to `master`: those it has now, if that leaves a bridge (checked as
    /// the change itself is, first).
    fn vlans_to_keep(
        &mut self,
        kind: Kind,
        index: u32,
        master: Option<u32>,
    ) -> Result<Option<Vec<crate::netlink::PortVlan>>, CapError> {
        let l = self.modifiable(kind, index)?;
        let Some(old) = l.master else {
            return Ok(None);
        };
        if master == Some(old)
            || !self.journaling_for(kind, index)
            || self.link(kind, old)?.kind.as_deref() != Some("bridge")
        {
            return Ok(None);
        }
        Ok(Some(self.netlink(kind)?.port_vlans(index)?))
    }

    /// Enslaves a link to `master`, or frees it (`None`).
    pub(super) fn set_link_master(
        &mut self,
        kind: Kind,
        index: u32,
        master: Option<u32>,
    ) -> Result<(), CapError> {
        // Enslaving changes the master too: it must be the
        // plugin's, or a bridge its network shares.
        let mut joins_vrf = false;
        let shared = match master {
            Some(m) => {
                let ml = self.modifiable_or_shared(kind, m, true)?;
                joins_vrf = ml.kind.as_deref() == Some("vrf");
                self.check_host_link(kind, &ml).is_err()
            }
            None => false,
        };
        // Against the undo of a concurrent ADD that created the
        // shared bridge (it keeps a bridge that has ports). Taken before
        // the port is read (what was read before it is read again).
        let _lock = shared.then(|| crate::netlock::lock(&self.attachment.network));
        // A master makes its ports promiscuous: a stacked link must
        // not pass that on to a lower device it may only use.
        if master.is_some() {
            self.check_lower(kind, index, "enslaving")?;
        }
        let change = |c: &mut Ctx| {
            // Leaving a bridge drops the port's VLANs, and joining
            // it again gives it only the bridge's default: the
            // undo puts them back once the master is.
            // (Recorded first, so undone after the master.)
            let mark = c.journal.len();
            if let Some(vlans) = c.vlans_to_keep(kind, index, master)? {
                c.journal.record(LinkUndo::SetPortVlans {
                    ns: kind,
                    index,
                    vlans,
                });
            }
            let r = c.change_link(
                kind,
                index,
                |nl| nl.set_master(index, master),
                |l| LinkUndo::SetMaster {
                    ns: kind,
                    index,
                    master: l.master,
                },
            );
            if r.is_err() {
                c.journal.truncate(mark);
            }
            r
        };
        // Joining or leaving a VRF cycles the link, and the kernel
        // drops its routes and IPv6 addresses: in ADD (the only
        // command undone) the undo puts them back.
        let vrf = self.journaling_for(kind, index)
            && (joins_vrf
                || match self.link(kind, index)?.master {
                    Some(m) => self.link(kind, m)?.kind.as_deref() == Some("vrf"),
                    None => false,
                });
        if vrf {
            self.preserving(kind, index, change)
        } else {
            change(self)
        }
    }

    /// Turns a bridge port's hairpin mode on or off.
    pub(super) fn set_port_hairpin(
        &mut self,
        kind: Kind,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        self.modifiable(kind, index)?;
        let journaling = self.journaling_for(kind, index);
        let nl = self.netlink(kind)?;
        let old = nl
            .hairpin(index)?
            .ok_or(CapError::Code(ErrorCode::NotSupported))?;
        nl.set_hairpin(index, on)?;
        if journaling {
            self.journal.record(LinkUndo::SetHairpin {
                ns: kind,
                index,
                on: old,
            });
        }
        Ok(())
    }

    /// Turns a bridge port's isolation on or off.
    pub(super) fn set_port_isolation(
        &mut self,
        kind: Kind,
        index: u32,
        on: bool,
    ) -> Result<(), CapError> {
        self.modifiable(kind, index)?;
        let journaling = self.journaling_for(kind, index);
        let nl = self.netlink(kind)?;
        let old = port_isolated(&nl.bridge_port(index)?.ok_or(ErrorCode::NotSupported)?);
        nl.set_bridge_port(index, &[(IFLA_BRPORT_ISOLATED, vec![u8::from(on)])])?;
        if journaling {
            self.journal.record(LinkUndo::SetPortIsolated {
                ns: kind,
                index,
                on: old,
            });
        }
        Ok(())
    }

    /// The VLANs of a bridge port.
    pub(super) fn read_port_vlans(
        &mut self,
        kind: Kind,
        index: u32,
    ) -> Result<Vec<PortVlan>, CapError> {
        let vlans = self.netlink(kind)?.port_vlans(index)?;
        Ok(vlans
            .into_iter()
            .map(|v| PortVlan {
                vid: v.vid,
                pvid: v.pvid,
                untagged: v.untagged,
            })
            .collect())
    }

    /// Replaces a bridge port's VLANs with `vlans`.
    pub(super) fn replace_port_vlans(
        &mut self,
        kind: Kind,
        index: u32,
        vlans: &[PortVlan],
    ) -> Result<(), CapError> {
        if vlans.len() > usize::from(MAX_VID) {
            return Err(CapError::Limit(format!("{} VLANs", vlans.len())));
        }
        let mut seen = std::collections::BTreeSet::new();
        let valid = vlans
            .iter()
            .all(|v| (1..=MAX_VID).contains(&v.vid) && seen.insert(v.vid))
            && vlans.iter().filter(|v| v.pvid).count() <= 1;
        if !valid {
            return Err(ErrorCode::InvalidArgument.into());
        }
        // A shared link's VLANs are the network's: never changed.
        let l = self.modifiable(kind, index)?;
        if l.master.is_none() {
            return Err(ErrorCode::InvalidArgument.into());
        }
        let want: Vec<crate::netlink::PortVlan> = vlans
            .iter()
            .map(|v| crate::netlink::PortVlan {
                vid: v.vid,
                pvid: v.pvid,
                untagged: v.untagged,
            })
            .collect();
        let old = self.netlink(kind)?.port_vlans(index)?;
        self.check_new_vlans(kind, index, &want, &old)?;
        // Recorded first: a change that stops half-way is undone too.
        self.record_for(
            kind,
            index,
            LinkUndo::SetPortVlans {
                ns: kind,
                index,
                vlans: old,
            },
        );
        self.netlink(kind)?.set_port_vlans(index, &want)?;
        Ok(())
    }
}

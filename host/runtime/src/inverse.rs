//! What the host does to take a change back: the inverse of every
//! undoable host call ([`Undo`]), as data. The capability layer records
//! them ([`crate::journal`] orders them and follows the links they name)
//! and carries them out (`caps::undo`); an attachment record keeps those a
//! later process may need ([`crate::record`]).

use std::net::IpAddr;
use std::path::PathBuf;

use crate::netlink::{AddrSpec, RouteSpec};
use crate::netns::Kind;

/// How to take one change back. Links are named by (namespace, index).
///
/// Serializable so the host can keep inverses past the process that
/// recorded them (the attachment record, [`crate::record`]); the two
/// variants that hold a process's own handles are not.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum Undo {
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
    /// The kernel may add addresses to a link along with a change (a
    /// second link-local address for a new `addr_gen_mode`): after the
    /// change is reverted and its addresses are back, delete those not in
    /// `keep`.
    PruneAddresses {
        /// Where.
        ns: Kind,
        /// Which link.
        index: u32,
        /// Its addresses before the change.
        keep: Vec<AddrSpec>,
    },
    /// An address was added: delete it.
    DeleteAddress {
        /// Where.
        ns: Kind,
        /// What.
        spec: AddrSpec,
    },
    /// An address was deleted: add it back.
    AddAddress {
        /// Where.
        ns: Kind,
        /// What.
        spec: AddrSpec,
    },
    /// A route was added: delete it.
    DeleteRoute {
        /// Where.
        ns: Kind,
        /// What.
        spec: RouteSpec,
    },
    /// A route was deleted, or the kernel flushed it with a change to its
    /// link: add it back beside any other route with the same key (an
    /// IPv6 `fe80::/64` of another link must not be replaced).
    AddRoute {
        /// Where.
        ns: Kind,
        /// The route.
        spec: RouteSpec,
    },
    /// A route was replaced: put the old one back (replace).
    RestoreRoute {
        /// Where.
        ns: Kind,
        /// The old route (a replacement has the same key, so putting the
        /// old one back with `replace` removes the new one).
        spec: RouteSpec,
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
    /// An IPAM reservation changed (see [`crate::caps`]'s ipam-store).
    #[serde(skip)]
    Ipam(IpamUndo),
    /// A native delegate's ADD succeeded: run its DEL.
    #[serde(skip)]
    NativeDel(NativeCall),
    /// A qdisc was added to a link (`traffic-control`): delete it (an
    /// `ingress` qdisc takes its filters along).
    DeleteQdisc {
        /// Where.
        ns: Kind,
        /// Which link.
        index: u32,
        /// The link's `ingress` qdisc (`ffff:`), or else its root `tbf` (`1:`).
        ingress: bool,
    },
    /// A plugin's attachment-state record changed: put the old values back.
    #[serde(skip)]
    State(StateUndo),
    /// The namespace had no `l3mdev` rules before this ADD made VRF
    /// `vrf` (the kernel added them, or the host did): delete them, unless
    /// another VRF of the namespace is there then (it needs them).
    DeleteL3mdevRules {
        /// Where.
        ns: Kind,
        /// The index of the VRF that brought them (0 in an intent log of
        /// an older wasmcni: no VRF is exempt).
        #[serde(default)]
        vrf: u32,
        /// Whether the IPv4 rule came with it (an older log: both did).
        #[serde(default = "yes")]
        v4: bool,
        /// Whether the IPv6 rule came with it.
        #[serde(default = "yes")]
        v6: bool,
    },
    /// A policy routing rule was added: delete it.
    DeleteRule {
        /// Where.
        ns: Kind,
        /// The rule as the kernel made it.
        spec: crate::netlink::RuleSpec,
    },
    /// A policy routing rule was deleted: add it back.
    AddRule {
        /// Where.
        ns: Kind,
        /// The rule as it was.
        spec: crate::netlink::RuleSpec,
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
    /// Firewall rules were installed for an attachment: remove its rules
    /// of these kinds, found by their tag (no handle is kept, so the entry
    /// stays valid in another process), with the attachment's chains, and
    /// the tables once no attachment has rules left.
    FirewallRemove {
        /// The attachment's hash, as its rules' tags carry it.
        attachment: String,
        /// Which kinds.
        kinds: Vec<FwKind>,
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
impl Undo {
    /// The link this entry is about (namespace, index), if any — the one
    /// list of which entries name a link, for reading and for remapping.
    pub(crate) fn link_slot(&mut self) -> Option<(Kind, &mut u32)> {
        match self {
            Undo::DeleteLink { ns, index }
            | Undo::SetUp { ns, index, .. }
            | Undo::SetMtu { ns, index, .. }
            | Undo::SetMac { ns, index, .. }
            | Undo::SetMaster { ns, index, .. }
            | Undo::SetHairpin { ns, index, .. }
            | Undo::SetPortVlans { ns, index, .. }
            | Undo::SetPromisc { ns, index, .. }
            | Undo::SetAllmulti { ns, index, .. }
            | Undo::SetTxqlen { ns, index, .. }
            | Undo::SetName { ns, index, .. }
            | Undo::SetAlias { ns, index, .. }
            | Undo::MoveBack { ns, index, .. }
            | Undo::RestoreLink { ns, index, .. }
            | Undo::PruneAddresses { ns, index, .. }
            | Undo::DeleteQdisc { ns, index, .. } => Some((*ns, index)),
            Undo::DeleteAddress { ns, spec } | Undo::AddAddress { ns, spec } => {
                Some((*ns, &mut spec.index))
            }
            Undo::DeleteRoute { ns, spec }
            | Undo::AddRoute { ns, spec }
            | Undo::RestoreRoute { ns, spec } => spec.oif.as_mut().map(|oif| (*ns, oif)),
            Undo::SetSysctl { .. }
            | Undo::RestoreSysctls { .. }
            | Undo::Ipam(_)
            | Undo::State(_)
            | Undo::DeleteRule { .. }
            | Undo::DeleteL3mdevRules { .. }
            | Undo::AddRule { .. }
            | Undo::FirewallRemove { .. }
            | Undo::NativeDel(_) => None,
        }
    }

    /// The link this entry is about, if any.
    pub fn link(&self) -> Option<(Kind, u32)> {
        self.clone().link_slot().map(|(ns, index)| (ns, *index))
    }

    /// The second link an entry can name: a master.
    pub(crate) fn master_slot(&mut self) -> Option<(Kind, &mut u32)> {
        match self {
            Undo::SetMaster {
                ns,
                master: Some(m),
                ..
            } => Some((*ns, m)),
            Undo::RestoreLink { ns, state, .. } => state.master.as_mut().map(|m| (*ns, m)),
            _ => None,
        }
    }

    /// The master this entry names, if any.
    pub fn master(&self) -> Option<(Kind, u32)> {
        self.clone().master_slot().map(|(ns, index)| (ns, *index))
    }

    /// A short description for the audit log (a settings snapshot by its
    /// size, not its thousands of values).
    pub fn describe(&self) -> String {
        match self {
            Undo::RestoreSysctls { ns, changes } => {
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
}
/// The kinds of rule, as tags and the journal name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FwKind {
    /// Port mappings.
    PortMap,
    /// ipMasq.
    Masquerade,
    /// Forward allowance.
    Forward,
    /// Bridge isolation.
    Isolation,
    /// MAC spoof check.
    MacSpoof,
}
/// How the journal takes an IPAM change back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpamUndo {
    /// An address was reserved: release it (if its holder is still the
    /// one that reserved it) and put the range's last-reserved address
    /// back.
    Unreserve {
        /// The network's state directory.
        dir: PathBuf,
        /// The address.
        address: IpAddr,
        /// Who reserved it.
        owner: crate::ipam::Owner,
        /// The range set.
        range_id: String,
        /// Its last-reserved address before.
        last: Option<IpAddr>,
    },
    /// An address was released: reserve it again for its holder.
    Rereserve {
        /// The network's state directory.
        dir: PathBuf,
        /// The address.
        address: IpAddr,
        /// Its holder.
        owner: crate::ipam::Owner,
    },
}
/// How to put a record back as it was before an ADD wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateUndo {
    pub(crate) record: crate::plugin_state::Record,
    pub(crate) values: std::collections::BTreeMap<String, String>,
}
/// A native delegate's invocation, kept to run its DEL when the ADD that
/// ran it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeCall {
    /// The executable.
    pub path: PathBuf,
    /// Its environment (`CNI_*`, and `PATH`).
    pub env: Vec<(String, String)>,
    /// The config on its stdin.
    pub config: Vec<u8>,
}

/// serde's default for a flag that older logs did not write and meant.
fn yes() -> bool {
    true
}

//! The undo journal: every mutating capability call records how to take it
//! back. If ADD fails (non-zero exit, trap, deadline, memory cap, budget),
//! the host replays the inverses in reverse order, so both namespaces end
//! as they were before the ADD. DEL and CHECK are not undone: DEL is
//! best-effort and idempotent by contract.

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
    Ipam(crate::caps::IpamUndo),
    /// A native delegate's ADD succeeded: run its DEL.
    #[serde(skip)]
    NativeDel(crate::caps::delegate::NativeCall),
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
    State(crate::caps::StateUndo),
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
        kinds: Vec<crate::caps::firewall::FwKind>,
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
    fn link_slot(&mut self) -> Option<(Kind, &mut u32)> {
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
    fn master_slot(&mut self) -> Option<(Kind, &mut u32)> {
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

/// A link as the journal knows it: an identity that stays with the link
/// while it moves and its index changes, and is never given to another
/// link that later takes the same index.
pub type LinkId = u32;

/// One inverse, with the identities of the links it names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// How to take the change back.
    pub undo: Undo,
    /// The link it names (`Undo::link`).
    pub link: Option<LinkId>,
    /// The master it names (`Undo::master`).
    pub master: Option<LinkId>,
}

impl Entry {
    /// Link `id`, which this entry knew at (`ns`, `from`), is at `to` there
    /// now (it came back from a move under another index): make the entry
    /// say so where it names that link at that place.
    pub fn relocate(&mut self, id: LinkId, ns: Kind, from: u32, to: u32) {
        if self.link == Some(id) {
            if let Some((n, i)) = self.undo.link_slot() {
                if n == ns && *i == from {
                    *i = to;
                }
            }
        }
        if self.master == Some(id) {
            if let Some((n, m)) = self.undo.master_slot() {
                if n == ns && *m == from {
                    *m = to;
                }
            }
        }
    }
}

/// The undo log of one invocation.
///
/// Entries name links by (namespace, index), which is what the kernel acts
/// on, but an index names a link only while it exists, and the kernel
/// reuses indexes (a link moved into a namespace keeps its index there if
/// it is free). So the journal gives every link it hears of an identity
/// ([`LinkId`]) and keeps where each one is now: entries carry the
/// identities of the links they name, a move updates the link's place, and
/// a deletion forgets exactly that link's entries and never another's that
/// reused its index. Which links this invocation created is a set of
/// identities too, and it follows the kernel's truth: when a link is
/// deleted, every created link that went with it (a veth's peer, the
/// macvlans on it) leaves the set ([`Journal::retain_created`]).
#[derive(Debug, Default)]
pub struct Journal {
    entries: Vec<Entry>,
    /// Where each known link is now.
    places: Vec<(LinkId, Kind, u32)>,
    next_id: LinkId,
    /// Links created in this invocation.
    created: Vec<LinkId>,
}

impl Journal {
    /// The identity of the link at (`ns`, `index`), if the journal knows it.
    fn id_at(&self, ns: Kind, index: u32) -> Option<LinkId> {
        self.places
            .iter()
            .find(|(_, n, i)| *n == ns && *i == index)
            .map(|(id, _, _)| *id)
    }

    /// The identity of the link at (`ns`, `index`), given one if new.
    fn identify(&mut self, ns: Kind, index: u32) -> LinkId {
        if let Some(id) = self.id_at(ns, index) {
            return id;
        }
        self.next_id += 1;
        self.places.push((self.next_id, ns, index));
        self.next_id
    }

    /// Where link `id` is now.
    fn place(&self, id: LinkId) -> Option<(Kind, u32)> {
        self.places
            .iter()
            .find(|(i, _, _)| *i == id)
            .map(|(_, ns, index)| (*ns, *index))
    }

    /// Records an inverse.
    pub fn record(&mut self, undo: Undo) {
        let link = undo.link().map(|(ns, i)| self.identify(ns, i));
        let master = undo.master().map(|(ns, i)| self.identify(ns, i));
        if let (Undo::DeleteLink { .. }, Some(id)) = (&undo, link) {
            self.created.push(id);
        }
        self.entries.push(Entry { undo, link, master });
    }

    /// A link came into being along with another (a veth peer): it has no
    /// inverse of its own, but counts as created.
    pub fn note_created(&mut self, ns: Kind, index: u32) {
        let id = self.identify(ns, index);
        self.created.push(id);
    }

    /// Whether link (`ns`, `index`) was created in this invocation.
    pub fn created(&self, ns: Kind, index: u32) -> bool {
        self.id_at(ns, index)
            .is_some_and(|id| self.created.contains(&id))
    }

    /// A link created in this invocation is gone (the plugin deleted it):
    /// nothing about it is left to undo, wherever it was when each entry
    /// was recorded, and its index may now name another link.
    pub fn forget_link(&mut self, ns: Kind, index: u32) {
        if let Some(id) = self.id_at(ns, index) {
            self.forget(id);
        }
    }

    fn forget(&mut self, id: LinkId) {
        self.created.retain(|c| *c != id);
        self.places.retain(|(i, _, _)| *i != id);
        self.entries.retain(|e| e.link != Some(id));
    }

    /// Keeps in the created set only the links `exists` still finds, and
    /// forgets everything about the others (the kernel took them along with
    /// a link the plugin deleted). Returns the links forgotten.
    pub fn retain_created(&mut self, exists: impl Fn(Kind, u32) -> bool) -> Vec<(Kind, u32)> {
        let gone: Vec<(LinkId, Kind, u32)> = self
            .created
            .iter()
            .filter_map(|id| self.place(*id).map(|(ns, i)| (*id, ns, i)))
            .filter(|&(_, ns, i)| !exists(ns, i))
            .collect();
        for &(id, _, _) in &gone {
            self.forget(id);
        }
        gone.into_iter().map(|(_, ns, i)| (ns, i)).collect()
    }

    /// The namespaces holding links created in this invocation.
    pub fn created_namespaces(&self) -> Vec<Kind> {
        [Kind::Container, Kind::Host]
            .into_iter()
            .filter(|k| {
                self.created
                    .iter()
                    .any(|id| self.place(*id).is_some_and(|(ns, _)| ns == *k))
            })
            .collect()
    }

    /// Whether this invocation added address `spec` (it has the inverse).
    pub fn added_address(&self, ns: Kind, spec: &AddrSpec) -> bool {
        self.entries.iter().any(|e| {
            matches!(&e.undo, Undo::DeleteAddress { ns: n, spec: s }
                if *n == ns && s.index == spec.index && s.addr == spec.addr
                    && s.prefix_len == spec.prefix_len)
        })
    }

    /// The link at `from` moved to `to` (namespace, index). A link the
    /// journal knows keeps its identity; whatever it knew at `to` before
    /// is gone (the kernel gives an index to one link at a time).
    pub fn link_moved(&mut self, from: (Kind, u32), to: (Kind, u32)) {
        let moving = self.id_at(from.0, from.1);
        self.places
            .retain(|(id, ns, i)| Some(*id) == moving || (*ns, *i) != to);
        match moving {
            Some(id) => {
                for p in &mut self.places {
                    if p.0 == id {
                        p.1 = to.0;
                        p.2 = to.1;
                    }
                }
            }
            None => {
                self.identify(to.0, to.1);
            }
        }
    }

    /// The links this invocation moved out of namespace `from` that are
    /// elsewhere now, each as (where it is now, its name in `from`, the
    /// entries that put it back: its move back and every inverse recorded
    /// about it while it was in `from`, oldest first).
    pub fn moved_out_of(&self, from: Kind) -> Vec<((Kind, u32), String, Vec<Entry>)> {
        let mut out = Vec::new();
        for e in &self.entries {
            let (Undo::MoveBack { to, name, .. }, Some(id)) = (&e.undo, e.link) else {
                continue;
            };
            let Some(now) = self.place(id).filter(|(ns, _)| *ns != from) else {
                continue;
            };
            if *to != from || out.iter().any(|(at, _, _)| *at == now) {
                continue;
            }
            let restore = self
                .entries
                .iter()
                .filter(|x| {
                    x.link == Some(id)
                        && (matches!(x.undo, Undo::MoveBack { .. })
                            || x.undo.link().is_some_and(|(ns, _)| ns == from))
                })
                .cloned()
                .collect();
            out.push((now, name.clone(), restore));
        }
        out
    }

    /// Where the links this invocation created (and that are still
    /// there, as far as it knows) are now.
    pub fn created_links(&self) -> Vec<(Kind, u32)> {
        self.created
            .iter()
            .filter_map(|id| self.place(*id))
            .collect()
    }

    /// Takes the set of links created so far out (a chain member starts
    /// with none of the earlier members' links); see
    /// [`Journal::restore_created`].
    pub fn take_created(&mut self) -> Vec<LinkId> {
        std::mem::take(&mut self.created)
    }

    /// Puts back links taken with [`Journal::take_created`], beside those
    /// created since.
    pub fn restore_created(&mut self, earlier: Vec<LinkId>) {
        for id in earlier {
            if !self.created.contains(&id) {
                self.created.push(id);
            }
        }
    }

    /// The inverses recorded, oldest first.
    pub fn undos(&self) -> impl Iterator<Item = &Undo> {
        self.entries.iter().map(|e| &e.undo)
    }

    /// Takes the entries out, newest first.
    pub fn drain_reverse(&mut self) -> Vec<Entry> {
        self.drain_reverse_from(0)
    }

    /// Takes the entries recorded after the first `mark` out, newest first
    /// (a delegate that failed: its own changes only).
    pub fn drain_reverse_from(&mut self, mark: usize) -> Vec<Entry> {
        let mut v = self.entries.split_off(mark.min(self.entries.len()));
        v.reverse();
        v
    }

    /// Drops the entries recorded after the first `len` (a call that
    /// recorded what to restore and then failed changed nothing).
    pub fn truncate(&mut self, len: usize) {
        self.entries.truncate(len);
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is nothing to undo.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// serde's default for a flag that older logs did not write and meant.
fn yes() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(v: &[Entry]) -> Vec<&Undo> {
        v.iter().map(|e| &e.undo).collect()
    }

    #[test]
    fn replays_newest_first_and_tracks_created_links() {
        let mut j = Journal::default();
        j.record(Undo::DeleteLink {
            ns: Kind::Host,
            index: 7,
        });
        j.record(Undo::SetUp {
            ns: Kind::Host,
            index: 7,
            up: false,
        });
        j.record(Undo::SetSysctl {
            ns: Kind::Host,
            key: "net.ipv4.ip_forward".into(),
            value: "0".into(),
        });
        assert!(j.created(Kind::Host, 7));
        assert!(!j.created(Kind::Container, 7));
        let order = j.drain_reverse();
        assert!(matches!(kinds(&order)[0], Undo::SetSysctl { .. }));
        assert!(matches!(kinds(&order)[2], Undo::DeleteLink { .. }));
        assert!(j.is_empty());
    }

    #[test]
    fn relocating_follows_one_link_and_its_role_as_a_master() {
        let mut j = Journal::default();
        j.record(Undo::SetMaster {
            ns: Kind::Host,
            index: 4,
            master: Some(4),
        });
        j.record(Undo::SetMtu {
            ns: Kind::Container,
            index: 4,
            mtu: 1500,
        });
        let mut v = j.drain_reverse();
        let id = v[1].link.expect("id");
        for e in &mut v {
            e.relocate(id, Kind::Host, 4, 9);
        }
        assert_eq!(
            v[1].undo,
            Undo::SetMaster {
                ns: Kind::Host,
                index: 9,
                master: Some(9)
            }
        );
        // The container's link 4 is another link: untouched.
        assert_eq!(v[0].undo.link(), Some((Kind::Container, 4)));
    }

    #[test]
    fn deleting_a_created_link_forgets_it() {
        let mut j = Journal::default();
        j.record(Undo::DeleteLink {
            ns: Kind::Container,
            index: 3,
        });
        j.record(Undo::SetMtu {
            ns: Kind::Container,
            index: 3,
            mtu: 1500,
        });
        j.record(Undo::SetUp {
            ns: Kind::Container,
            index: 1,
            up: false,
        });
        j.forget_link(Kind::Container, 3);
        assert_eq!(j.len(), 1);
    }

    #[test]
    fn moved_links_are_tracked_and_forgotten_through_moves() {
        let mut j = Journal::default();
        j.record(Undo::DeleteLink {
            ns: Kind::Host,
            index: 9,
        });
        j.link_moved((Kind::Host, 9), (Kind::Container, 2));
        j.record(Undo::MoveBack {
            ns: Kind::Container,
            index: 2,
            to: Kind::Host,
            from_index: 9,
            name: "v".into(),
        });
        assert!(j.created(Kind::Container, 2));
        assert!(!j.created(Kind::Host, 9));
        j.forget_link(Kind::Container, 2);
        assert!(j.is_empty(), "{j:?}");
    }

    /// A created link moves away and another link moves into its old
    /// index: deleting the first forgets nothing of the second.
    #[test]
    fn a_reused_index_names_another_link() {
        let mut j = Journal::default();
        // e: created in the container at 7, moved to the host as 8.
        j.record(Undo::DeleteLink {
            ns: Kind::Container,
            index: 7,
        });
        j.link_moved((Kind::Container, 7), (Kind::Host, 8));
        j.record(Undo::MoveBack {
            ns: Kind::Host,
            index: 8,
            to: Kind::Container,
            from_index: 7,
            name: "e".into(),
        });
        // eth1: a node link at host 7, moved into the container, keeps 7.
        j.record(Undo::RestoreLink {
            ns: Kind::Host,
            index: 7,
            state: LinkState {
                up: true,
                mtu: 1500,
                mac: vec![],
                alias: String::new(),
                master: None,
                port: None,
                vlans: None,
                promisc: false,
                sysctls: vec![],
            },
        });
        j.link_moved((Kind::Host, 7), (Kind::Container, 7));
        j.record(Undo::MoveBack {
            ns: Kind::Container,
            index: 7,
            to: Kind::Host,
            from_index: 7,
            name: "eth1".into(),
        });
        assert!(!j.created(Kind::Container, 7), "eth1 is not created");
        j.forget_link(Kind::Host, 8);
        let left = j.drain_reverse();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(left
            .iter()
            .all(|e| matches!(e.undo, Undo::MoveBack { .. } | Undo::RestoreLink { .. })));
        assert!(left.iter().all(|e| e.link == left[0].link));
    }
}

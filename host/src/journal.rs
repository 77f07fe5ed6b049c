//! The undo journal: every mutating capability call records how to take it
//! back. If ADD fails (non-zero exit, trap, deadline, memory cap, budget),
//! the host replays the inverses in reverse order, so both namespaces end
//! as they were before the ADD. DEL and CHECK are not undone: DEL is
//! best-effort and idempotent by contract.

use crate::netlink::{AddrSpec, RouteSpec};
use crate::netns::Kind;

/// How to take one change back. Links are named by (namespace, index).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Settings that apply to more than one link (`conf.all.*`,
    /// `conf.default.*`, `ip_forward`, ...) were about to change: the whole
    /// `net.` tree of the namespace as it was, written back in an order
    /// that yields the old state (see [`crate::sysctl::restore`]).
    RestoreSysctls {
        /// Where.
        ns: Kind,
        /// Every readable, writable `net.` setting, as (key, value).
        values: Vec<(String, String)>,
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Hairpin mode, if it was a bridge port.
    pub hairpin: Option<bool>,
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
            | Undo::SetPromisc { ns, index, .. }
            | Undo::SetName { ns, index, .. }
            | Undo::SetAlias { ns, index, .. }
            | Undo::MoveBack { ns, index, .. }
            | Undo::RestoreLink { ns, index, .. } => Some((*ns, index)),
            Undo::DeleteAddress { ns, spec } | Undo::AddAddress { ns, spec } => {
                Some((*ns, &mut spec.index))
            }
            Undo::DeleteRoute { ns, spec }
            | Undo::AddRoute { ns, spec }
            | Undo::RestoreRoute { ns, spec } => spec.oif.as_mut().map(|oif| (*ns, oif)),
            Undo::SetSysctl { .. } | Undo::RestoreSysctls { .. } => None,
        }
    }

    /// The link this entry is about, if any.
    pub fn link(&self) -> Option<(Kind, u32)> {
        self.clone().link_slot().map(|(ns, index)| (ns, *index))
    }

    /// The link (`ns`, `from`) is now `to` in the same namespace (it came
    /// back from a move under another index): make this entry say so.
    pub fn remap(&mut self, ns_of: Kind, from: u32, to: u32) {
        if let Some((ns, index)) = self.link_slot() {
            if ns == ns_of && *index == from {
                *index = to;
            }
        }
        // A master is a second link an entry can name.
        let master = match self {
            Undo::SetMaster { ns, master, .. } => Some((*ns, master)),
            Undo::RestoreLink { ns, state, .. } => Some((*ns, &mut state.master)),
            _ => None,
        };
        if let Some((ns, Some(m))) = master {
            if ns == ns_of && *m == from {
                *m = to;
            }
        }
    }

    /// A short description for the audit log (a settings snapshot by its
    /// size, not its thousands of values).
    pub fn describe(&self) -> String {
        match self {
            Undo::RestoreSysctls { ns, values } => {
                format!(
                    "RestoreSysctls {{ ns: {ns:?}, values: {} settings }}",
                    values.len()
                )
            }
            _ => format!("{self:?}"),
        }
    }
}

/// The undo log of one invocation.
///
/// Besides the inverses it keeps which links this invocation created, where
/// they are now. That set must follow the kernel's truth: an index names a
/// link only while it exists, and the kernel reuses indexes (a link moved
/// into a namespace keeps its index there if it is free). So when a link is
/// deleted, every created link that went with it (a veth's peer, the
/// macvlans on it) leaves the set too ([`Journal::retain_created`]).
#[derive(Debug, Default)]
pub struct Journal {
    entries: Vec<Undo>,
    /// Links created in this invocation, where they are now.
    created: Vec<(Kind, u32)>,
    /// Namespaces whose whole `net.` settings tree is already recorded.
    sysctl_trees: Vec<Kind>,
}

impl Journal {
    /// Records an inverse.
    pub fn record(&mut self, undo: Undo) {
        if let Undo::DeleteLink { ns, index } = undo {
            self.created.push((ns, index));
        }
        self.entries.push(undo);
    }

    /// A link came into being along with another (a veth peer): it has no
    /// inverse of its own, but counts as created.
    pub fn note_created(&mut self, ns: Kind, index: u32) {
        self.created.push((ns, index));
    }

    /// Whether link (`ns`, `index`) was created in this invocation (and not
    /// moved since).
    pub fn created(&self, ns: Kind, index: u32) -> bool {
        self.created.contains(&(ns, index))
    }

    /// A link created in this invocation was deleted by the plugin: nothing
    /// about it is left to undo.
    /// Follows the link back through its moves, so every entry about it,
    /// wherever it was at the time, goes.
    pub fn forget_link(&mut self, ns: Kind, index: u32) {
        self.created.retain(|c| *c != (ns, index));
        let mut at = Some((ns, index));
        while let Some(id) = at.take() {
            for u in &self.entries {
                if let Undo::MoveBack {
                    ns,
                    index,
                    to,
                    from_index,
                    ..
                } = u
                {
                    if (*ns, *index) == id {
                        at = Some((*to, *from_index));
                    }
                }
            }
            self.entries.retain(|u| u.link() != Some(id));
        }
    }

    /// Keeps in the created set only the links `exists` still finds, and
    /// forgets everything about the others (the kernel took them along with
    /// a link the plugin deleted). Returns the links forgotten.
    pub fn retain_created(&mut self, exists: impl Fn(Kind, u32) -> bool) -> Vec<(Kind, u32)> {
        let gone: Vec<(Kind, u32)> = self
            .created
            .iter()
            .copied()
            .filter(|&(ns, index)| !exists(ns, index))
            .collect();
        for &(ns, index) in &gone {
            self.forget_link(ns, index);
        }
        gone
    }

    /// The namespaces holding links created in this invocation.
    pub fn created_namespaces(&self) -> Vec<Kind> {
        [Kind::Container, Kind::Host]
            .into_iter()
            .filter(|k| self.created.iter().any(|(ns, _)| ns == k))
            .collect()
    }

    /// Records the whole settings tree of `ns` as it is now. Once per
    /// invocation is enough: the oldest snapshot restores everything newer.
    pub fn record_sysctl_tree(&mut self, ns: Kind, values: Vec<(String, String)>) {
        if !self.has_sysctl_tree(ns) {
            self.sysctl_trees.push(ns);
            self.entries.push(Undo::RestoreSysctls { ns, values });
        }
    }

    /// Whether the settings tree of `ns` is recorded already.
    pub fn has_sysctl_tree(&self, ns: Kind) -> bool {
        self.sysctl_trees.contains(&ns)
    }

    /// A link moved from `from` to `to` (namespace, index).
    pub fn link_moved(&mut self, from: (Kind, u32), to: (Kind, u32)) {
        for c in &mut self.created {
            if *c == from {
                *c = to;
            }
        }
    }

    /// Takes the entries out, newest first.
    pub fn drain_reverse(&mut self) -> Vec<Undo> {
        let mut v = std::mem::take(&mut self.entries);
        v.reverse();
        v
    }

    /// Drops the entries recorded after the first `len` (a call that
    /// recorded what to restore and then failed changed nothing).
    pub fn truncate(&mut self, len: usize) {
        self.entries.truncate(len);
        let entries = &self.entries;
        self.sysctl_trees.retain(|k| {
            entries
                .iter()
                .any(|u| matches!(u, Undo::RestoreSysctls { ns, .. } if ns == k))
        });
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let order: Vec<_> = j.drain_reverse();
        assert!(matches!(order[0], Undo::SetSysctl { .. }));
        assert!(matches!(order[2], Undo::DeleteLink { .. }));
        assert!(j.is_empty());
    }

    #[test]
    fn remapping_follows_a_link_to_its_new_index() {
        let mut set = Undo::SetMaster {
            ns: Kind::Host,
            index: 4,
            master: Some(4),
        };
        set.remap(Kind::Host, 4, 9);
        assert_eq!(
            set,
            Undo::SetMaster {
                ns: Kind::Host,
                index: 9,
                master: Some(9)
            }
        );
        set.remap(Kind::Container, 9, 1);
        assert_eq!(set.link(), Some((Kind::Host, 9)));
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
        j.record(Undo::MoveBack {
            ns: Kind::Container,
            index: 2,
            to: Kind::Host,
            from_index: 9,
            name: "v".into(),
        });
        j.link_moved((Kind::Host, 9), (Kind::Container, 2));
        assert!(j.created(Kind::Container, 2));
        assert!(!j.created(Kind::Host, 9));
        j.forget_link(Kind::Container, 2);
        assert!(j.is_empty(), "{j:?}");
    }
}

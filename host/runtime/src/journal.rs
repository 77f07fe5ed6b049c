//! The undo journal: every mutating capability call records how to take it
//! back. If ADD fails (non-zero exit, trap, deadline, memory cap, budget),
//! the host replays the inverses in reverse order, so both namespaces end
//! as they were before the ADD. DEL and CHECK are not undone: DEL is
//! best-effort and idempotent by contract.

use crate::inverse::Undo;
use crate::netlink::AddrSpec;
use crate::netns::Kind;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inverse::LinkState;

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

//! The undo journal: every mutating capability call records how to take it
//! back. If ADD fails (non-zero exit, trap, deadline, memory cap, budget),
//! the host replays the inverses in reverse order, so both namespaces end
//! as they were before the ADD. DEL and CHECK are not undone: DEL is
//! best-effort and idempotent by contract.
//!
//! The journal orders the inverses and follows the links they name; it
//! does not interpret them. What an inverse is, and how it is carried out,
//! is its interface module's (`caps`): the journal sees it only through
//! [`Journaled`].

use crate::netns::Kind;

/// What the journal needs of an inverse: which links it names (to follow
/// them through moves and deletions), whether it is the inverse of a
/// link's creation, and whether it moves a link back where it came from.
pub trait Journaled: Clone {
    /// The link this inverse is about (namespace, index), if any: the one
    /// place that says which entries name a link, for reading and for
    /// remapping.
    fn link_slot(&mut self) -> Option<(Kind, &mut u32)>;
    /// The second link it can name: a master.
    fn master_slot(&mut self) -> Option<(Kind, &mut u32)>;
    /// Whether it undoes the creation of the link it names.
    fn creates_link(&self) -> bool;
    /// If it moves a link back: the namespace it goes back to, and its
    /// name there.
    fn moves_back_to(&self) -> Option<(Kind, &str)>;
    /// The link this inverse is about, if any.
    fn link(&self) -> Option<(Kind, u32)> {
        self.clone().link_slot().map(|(ns, index)| (ns, *index))
    }
    /// The master it names, if any.
    fn master(&self) -> Option<(Kind, u32)> {
        self.clone().master_slot().map(|(ns, index)| (ns, *index))
    }
}

/// A link as the journal knows it: an identity that stays with the link
/// while it moves and its index changes, and is never given to another
/// link that later takes the same index.
pub type LinkId = u32;

/// One inverse, with the identities of the links it names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry<U> {
    /// How to take the change back.
    pub undo: U,
    /// The link it names ([`Journaled::link`]).
    pub link: Option<LinkId>,
    /// The master it names ([`Journaled::master`]).
    pub master: Option<LinkId>,
}

impl<U: Journaled> Entry<U> {
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

/// A link moved out of a namespace, as [`Journal::moved_out_of`] gives
/// it: where it is now, its name there, the entries that put it back.
pub type Moved<U> = ((Kind, u32), String, Vec<Entry<U>>);

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
#[derive(Debug)]
pub struct Journal<U> {
    entries: Vec<Entry<U>>,
    /// Where each known link is now.
    places: Vec<(LinkId, Kind, u32)>,
    next_id: LinkId,
    /// Links created in this invocation.
    created: Vec<LinkId>,
}

impl<U> Default for Journal<U> {
    fn default() -> Self {
        Journal {
            entries: Vec::new(),
            places: Vec::new(),
            next_id: 0,
            created: Vec::new(),
        }
    }
}

impl<U: Journaled> Journal<U> {
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
    pub fn record(&mut self, undo: impl Into<U>) {
        // Read through the slots of the entry itself (it is ours): no copy
        // of it, on every journaled call.
        let mut undo = undo.into();
        let link = undo.link_slot().map(|(ns, i)| (ns, *i));
        let master = undo.master_slot().map(|(ns, i)| (ns, *i));
        let link = link.map(|(ns, i)| self.identify(ns, i));
        let master = master.map(|(ns, i)| self.identify(ns, i));
        if let (true, Some(id)) = (undo.creates_link(), link) {
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
    pub fn moved_out_of(&self, from: Kind) -> Vec<Moved<U>> {
        let mut out = Vec::new();
        for e in &self.entries {
            let (Some((to, name)), Some(id)) = (e.undo.moves_back_to(), e.link) else {
                continue;
            };
            let Some(now) = self.place(id).filter(|(ns, _)| *ns != from) else {
                continue;
            };
            if to != from || out.iter().any(|(at, _, _)| *at == now) {
                continue;
            }
            let restore = self
                .entries
                .iter()
                .filter(|x| {
                    x.link == Some(id)
                        && (x.undo.moves_back_to().is_some()
                            || x.undo.link().is_some_and(|(ns, _)| ns == from))
                })
                .cloned()
                .collect();
            out.push((now, name.to_owned(), restore));
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
    pub fn undos(&self) -> impl Iterator<Item = &U> {
        self.entries.iter().map(|e| &e.undo)
    }

    /// Takes the entries out, newest first.
    pub fn drain_reverse(&mut self) -> Vec<Entry<U>> {
        self.drain_reverse_from(0)
    }

    /// Takes the entries recorded after the first `mark` out, newest first
    /// (a delegate that failed: its own changes only).
    pub fn drain_reverse_from(&mut self, mark: usize) -> Vec<Entry<U>> {
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

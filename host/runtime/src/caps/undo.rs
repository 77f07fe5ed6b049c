//! Replaying the journal: the inverses of a failed ADD (or of a link an
//! attachment record returns), newest first, each carried out as its
//! interface module says ([`Inverse`]); and reading an inverse back from
//! a record ([`from_record`]).

use serde_json::json;

use super::address::AddressUndo;
use super::bindings::CapError;
use super::ctx::{Ctx, Inverse};
use super::firewall::FirewallUndo;
use super::link::LinkUndo;
use super::route::RouteUndo;
use super::sysctl::SysctlUndo;
use super::traffic_control::QdiscUndo;
use crate::audit::Outcome;
use crate::cni_error::{CniError, Code};
use crate::session::Output;

impl Ctx {
    /// Undoes every change of this invocation, newest first, each step
    /// audited as `journal.undo`. Keeps going past failures and returns
    /// them (a failed step is logged; the CNI error reports it).
    pub fn undo(&mut self) -> Vec<String> {
        self.undo_from(0)
    }

    /// Undoes the changes recorded after the first `mark` journal entries
    /// (a delegate that failed), newest first, as [`Ctx::undo`] does.
    pub fn undo_from(&mut self, mark: usize) -> Vec<String> {
        let entries = self.journal.drain_reverse_from(mark);
        let failures = self.replay(entries, "journal.undo");
        if mark > 0 {
            // The invocation goes on: links the undo deleted are no longer
            // "created in this call".
            let _ = self.refresh_created();
        }
        failures
    }

    /// Undoes the journal entries from `mark` on ([`Ctx::undo_from`]); if
    /// any step fails, the CNI error of plugin `name` says so instead of
    /// `outcome`.
    pub(crate) fn undo_or_report(
        &mut self,
        mark: usize,
        name: &str,
        outcome: Result<Output, CniError>,
    ) -> Result<Output, CniError> {
        let undo_failures = self.undo_from(mark);
        if undo_failures.is_empty() {
            return outcome;
        }
        eprintln!(
            "wasmcni: undoing the failed ADD left {} change(s) in place: {}",
            undo_failures.len(),
            undo_failures.join("; ")
        );
        Err(CniError::new(
            Code::Internal,
            format!(
                "plugin {name:?} failed and {} of its changes could not be undone",
                undo_failures.len()
            ),
        )
        .with_details(undo_failures.join("; ")))
    }

    /// Carries out `entries`, newest first, each step audited as `label`;
    /// keeps going past failures and returns them. A link moved back
    /// under another index than it had has the older entries about it
    /// follow it.
    pub(super) fn replay(
        &mut self,
        mut entries: Vec<crate::journal::Entry<Box<dyn Inverse>>>,
        label: &str,
    ) -> Vec<String> {
        let mut failures = Vec::new();
        // Entries a delegate joined to this journal may name the host
        // namespace this plugin never asked for: the undo acts there all
        // the same (it is wasmcni's own).
        if !entries.is_empty() {
            if let Err(e) = self.open_host() {
                failures.push(format!("opening the host namespace: {e:?}"));
            }
        }
        for i in 0..entries.len() {
            let entry = entries[i].clone();
            let u = &*entry.undo;
            if let Some(why) = self.kept_for_other_holders(u) {
                self.audit.record(
                    label,
                    &json!({ "undo": u.describe(), "kept": why }),
                    &Outcome::Ok,
                );
                continue;
            }
            let result = match u.apply(self) {
                Err(CapError::Kernel(e)) if u.already_gone(e) => Ok(()),
                r => r,
            };
            // A link moved back keeps the index it had where it was, if
            // that is free here: the older entries about it must follow.
            if let (Ok(()), Some((to, name, from_index)), Some(id)) =
                (&result, u.moves_back(), entry.link)
            {
                if let Ok(now) = self.link_index(to, name) {
                    if now != from_index {
                        for older in &mut entries[i + 1..] {
                            older.relocate(id, to, from_index, now);
                        }
                    }
                }
            }
            let outcome = match &result {
                Ok(()) => Outcome::Ok,
                Err(e) => e.outcome(),
            };
            self.audit
                .record(label, &json!({ "undo": u.describe() }), &outcome);
            if let Err(e) = result {
                failures.push(match e {
                    CapError::Incomplete(what) => format!("{}: {what}", u.describe()),
                    _ => u.describe(),
                });
            }
        }
        failures
    }

    fn link_index(&mut self, kind: crate::netns::Kind, name: &str) -> Result<u32, CapError> {
        self.netlink(kind)?
            .link_by_name(name)
            .map(|m| m.header.index)
            .map_err(CapError::from)
    }
}

impl Ctx {}

/// An inverse read back from its form in an attachment record
/// ([`Inverse::record`]): the interfaces whose inverses a record keeps
/// (those that name a link the ADD took from the node).
pub(super) fn from_record(v: &serde_json::Value) -> Option<Box<dyn Inverse>> {
    fn parse<T: Inverse + serde::de::DeserializeOwned>(
        v: &serde_json::Value,
    ) -> Option<Box<dyn Inverse>> {
        T::deserialize(v)
            .ok()
            .map(|t| Box::new(t) as Box<dyn Inverse>)
    }
    parse::<LinkUndo>(v)
        .or_else(|| parse::<AddressUndo>(v))
        .or_else(|| parse::<RouteUndo>(v))
        .or_else(|| parse::<SysctlUndo>(v))
        .or_else(|| parse::<QdiscUndo>(v))
        .or_else(|| parse::<FirewallUndo>(v))
}

#[cfg(test)]
mod tests {
    use super::super::link::LinkState;
    use super::*;
    use crate::journal::{Entry, Journal, Journaled};
    use crate::netns::Kind;

    type J = Journal<Box<dyn Inverse>>;

    fn link_undo(u: &dyn Inverse) -> Option<&LinkUndo> {
        u.as_any().downcast_ref::<LinkUndo>()
    }

    fn kinds(v: &[Entry<Box<dyn Inverse>>]) -> Vec<&dyn Inverse> {
        v.iter().map(|e| &*e.undo).collect()
    }

    #[test]
    fn replays_newest_first_and_tracks_created_links() {
        let mut j = J::default();
        j.record(LinkUndo::DeleteLink {
            ns: Kind::Host,
            index: 7,
        });
        j.record(LinkUndo::SetUp {
            ns: Kind::Host,
            index: 7,
            up: false,
        });
        j.record(SysctlUndo::SetSysctl {
            ns: Kind::Host,
            key: "net.ipv4.ip_forward".into(),
            value: "0".into(),
        });
        assert!(j.created(Kind::Host, 7));
        assert!(!j.created(Kind::Container, 7));
        let order = j.drain_reverse();
        assert!(matches!(
            kinds(&order)[0].as_any().downcast_ref::<SysctlUndo>(),
            Some(SysctlUndo::SetSysctl { .. })
        ));
        assert!(matches!(
            link_undo(kinds(&order)[2]),
            Some(LinkUndo::DeleteLink { .. })
        ));
        assert!(j.is_empty());
    }

    #[test]
    fn relocating_follows_one_link_and_its_role_as_a_master() {
        let mut j = J::default();
        j.record(LinkUndo::SetMaster {
            ns: Kind::Host,
            index: 4,
            master: Some(4),
        });
        j.record(LinkUndo::SetMtu {
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
            link_undo(&*v[1].undo),
            Some(&LinkUndo::SetMaster {
                ns: Kind::Host,
                index: 9,
                master: Some(9)
            })
        );
        // The container's link 4 is another link: untouched.
        assert_eq!(v[0].undo.link(), Some((Kind::Container, 4)));
    }

    #[test]
    fn deleting_a_created_link_forgets_it() {
        let mut j = J::default();
        j.record(LinkUndo::DeleteLink {
            ns: Kind::Container,
            index: 3,
        });
        j.record(LinkUndo::SetMtu {
            ns: Kind::Container,
            index: 3,
            mtu: 1500,
        });
        j.record(LinkUndo::SetUp {
            ns: Kind::Container,
            index: 1,
            up: false,
        });
        j.forget_link(Kind::Container, 3);
        assert_eq!(j.len(), 1);
    }

    #[test]
    fn moved_links_are_tracked_and_forgotten_through_moves() {
        let mut j = J::default();
        j.record(LinkUndo::DeleteLink {
            ns: Kind::Host,
            index: 9,
        });
        j.link_moved((Kind::Host, 9), (Kind::Container, 2));
        j.record(LinkUndo::MoveBack {
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
        let mut j = J::default();
        // e: created in the container at 7, moved to the host as 8.
        j.record(LinkUndo::DeleteLink {
            ns: Kind::Container,
            index: 7,
        });
        j.link_moved((Kind::Container, 7), (Kind::Host, 8));
        j.record(LinkUndo::MoveBack {
            ns: Kind::Host,
            index: 8,
            to: Kind::Container,
            from_index: 7,
            name: "e".into(),
        });
        // eth1: a node link at host 7, moved into the container, keeps 7.
        j.record(LinkUndo::RestoreLink {
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
        j.record(LinkUndo::MoveBack {
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
        assert!(left.iter().all(|e| matches!(
            link_undo(&*e.undo),
            Some(LinkUndo::MoveBack { .. } | LinkUndo::RestoreLink { .. })
        )));
        assert!(left.iter().all(|e| e.link == left[0].link));
    }

    /// Every interface whose inverses a record keeps is one
    /// [`from_record`] reads back, in the JSON records have always held.
    #[test]
    fn recorded_inverses_read_back_as_they_were_written() {
        let old_forms = [
            serde_json::json!({"set-mtu": {"ns": "host", "index": 3, "mtu": 1500}}),
            serde_json::json!({"prune-addresses": {"ns": "host", "index": 3, "keep": []}}),
            serde_json::json!({"delete-l3mdev-rules": {"ns": "container", "vrf": 4, "v4": true, "v6": false}}),
            serde_json::json!({"set-sysctl": {"ns": "host", "key": "net.ipv4.conf.x.forwarding", "value": "0"}}),
            serde_json::json!({"delete-qdisc": {"ns": "host", "index": 3, "ingress": true}}),
            serde_json::json!({"firewall-remove": {"attachment": "a", "kinds": ["port-map"]}}),
        ];
        for v in &old_forms {
            let u = from_record(v).unwrap_or_else(|| panic!("unreadable: {v}"));
            assert_eq!(u.record().as_ref(), Some(v), "{}", u.describe());
        }
        // Written by a wasmcni that kept fewer fields: their defaults.
        let defaults =
            from_record(&serde_json::json!({"delete-l3mdev-rules": {"ns": "container"}}))
                .expect("l3mdev");
        assert_eq!(
            defaults.describe(),
            "DeleteL3mdevRules { ns: Container, vrf: 0, v4: true, v6: true }"
        );
        assert!(from_record(&serde_json::json!({"no-such-inverse": {}})).is_none());
    }
}

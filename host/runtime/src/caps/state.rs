//! `wasmcni:plugin/attachment-state`: the plugin's own record for the
//! attachment it acts for ([`crate::plugin_state`]).

use super::ctx::Inverse;
use super::row::*;
use std::collections::BTreeMap;

use serde_json::json;

use super::args::Size;
use super::bindings::wasmcni::plugin::attachment_state::Host;
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::CapError;
use super::ctx::{Ctx, StoreData};
use crate::plugin_state::{self, Key, Record, MAX_KEYS, MAX_VALUE};

impl StateUndo {
    /// Writes the old values back (or removes the record).
    pub fn apply(&self) -> Result<(), CapError> {
        self.record.store(&self.values).map_err(CapError::from)
    }
}

impl Ctx {
    /// The record of this plugin for the attachment the runtime invoked
    /// it for, if its policy grants `attachment-state`.
    fn state_record(&self) -> Result<Record, CapError> {
        super::authority::store::trusted_root(crate::record::Location::untrusted_root())?;
        let (network, container_id, ifname) = &self.state_owner;
        if network.is_empty() || container_id.is_empty() || ifname.is_empty() {
            // No attachment to keep a record for (no network name,
            // CNI_CONTAINERID or CNI_IFNAME).
            return Err(ErrorCode::InvalidArgument.into());
        }
        Ok(Record::new(
            &crate::record::Location::root_from_env(),
            Key {
                network: network.clone(),
                container_id: container_id.clone(),
                ifname: ifname.clone(),
                plugin: self.audit.plugin().to_owned(),
            },
        ))
    }

    fn state_load(&self, record: &Record) -> Result<BTreeMap<String, String>, CapError> {
        record.load().map_err(|e| {
            log::warn!("attachment-state: {e}");
            CapError::from(e)
        })
    }

    /// Changes the record with `f`, journaling the old values in ADD.
    fn state_change(
        &mut self,
        f: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), CapError>,
    ) -> Result<(), CapError> {
        // A late DEL's changes would be the live incarnation's record's.
        if self.kept_for_live_incarnation("attachment-state.keep", json!({})) {
            return Ok(());
        }
        let record = self.state_record()?;
        let old = self.state_load(&record)?;
        let mut new = old.clone();
        f(&mut new)?;
        if new == old {
            return Ok(());
        }
        if self.command == Some(super::ctx::Command::Add) {
            self.journal.record(StateUndo {
                record: record.clone(),
                values: old,
            });
        }
        record.store(&new).map_err(CapError::from)
    }

    /// Removes the records of this plugin and of the delegates its grant
    /// names for this attachment: after its DEL succeeded.
    pub fn drop_state(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        let (network, container_id, ifname) = self.state_owner.clone();
        if network.is_empty() || container_id.is_empty() || ifname.is_empty() {
            return failures;
        }
        if self.kept_for_live_incarnation("host.keep-state", json!({})) {
            return failures;
        }
        let root = crate::record::Location::root_from_env();
        for plugin in self.state_plugins() {
            let r = Record::new(
                &root,
                Key {
                    network: network.clone(),
                    container_id: container_id.clone(),
                    ifname: ifname.clone(),
                    plugin,
                },
            );
            if let Err(e) = r.remove() {
                failures.push(format!("{}: {e}", r.path().display()));
            }
        }
        if !failures.is_empty() {
            self.audit.record(
                "host.drop-state",
                &json!({}),
                &crate::audit::Outcome::Error {
                    error: failures.join("; "),
                    errno: None,
                },
            );
        }
        failures
    }

    /// Removes the records of this plugin and its delegates for the
    /// network's attachments the runtime no longer holds: after its GC
    /// succeeded. Returns the records removed (`container-id/ifname
    /// plugin`) and the failures.
    pub fn gc_state(&mut self) -> (Vec<String>, Vec<String>) {
        let Some(valid) = &self.attachment.valid else {
            return (Vec::new(), Vec::new());
        };
        if self.attachment.network.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let (removed, failures) = plugin_state::gc(
            &crate::record::Location::root_from_env(),
            &self.attachment.network,
            &self.state_plugins(),
            valid,
        );
        let removed: Vec<String> = removed
            .into_iter()
            .map(|k| format!("{}/{} {}", k.container_id, k.ifname, k.plugin))
            .collect();
        if !removed.is_empty() || !failures.is_empty() {
            let outcome = if failures.is_empty() {
                crate::audit::Outcome::Ok
            } else {
                crate::audit::Outcome::Error {
                    error: failures.join("; "),
                    errno: None,
                }
            };
            self.audit
                .record("host.gc-state", &json!({ "removed": removed }), &outcome);
        }
        (removed, failures)
    }

    /// This plugin and the delegates its grant names.
    fn state_plugins(&self) -> Vec<String> {
        let mut v = vec![self.audit.plugin().to_owned()];
        v.extend(self.grant.delegates.iter().cloned());
        v
    }
}

fn check_key(key: &str) -> Result<(), CapError> {
    if plugin_state::valid_key(key) {
        Ok(())
    } else if key.len() > plugin_state::MAX_KEY {
        Err(CapError::Limit(format!(
            "a key of {} bytes (at most {})",
            key.len(),
            plugin_state::MAX_KEY
        )))
    } else {
        Err(ErrorCode::InvalidArgument.into())
    }
}

/// The host functions' work, one method per call.
impl Ctx {
    /// Sets a key of the attachment's state record.
    fn set_state(&mut self, key: &str, value: String) -> Result<(), CapError> {
        check_key(key)?;
        if value.len() > MAX_VALUE {
            return Err(CapError::Limit(format!(
                "a value of {} bytes (at most {MAX_VALUE})",
                value.len()
            )));
        }
        self.state_change(|values| {
            if !values.contains_key(key) && values.len() >= MAX_KEYS {
                return Err(CapError::Limit(format!(
                    "a record holds at most {MAX_KEYS} keys"
                )));
            }
            values.insert(key.to_owned(), value);
            Ok(())
        })
    }
}

impl Host for StoreData {
    fn get(&mut self, key: String) -> Result<Option<String>, CapError> {
        self.cap(&GET, (&key,), |c| {
            check_key(&key)?;
            let record = c.state_record()?;
            Ok(c.state_load(&record)?.remove(&key))
        })
    }

    fn keys(&mut self) -> Result<Vec<String>, CapError> {
        self.cap(&KEYS, (), |c| {
            let record = c.state_record()?;
            Ok(c.state_load(&record)?.into_keys().collect())
        })
    }

    fn set(&mut self, key: String, value: String) -> Result<(), CapError> {
        self.cap(&SET, (&key, Size(value.len())), |c| {
            c.set_state(&key, value)
        })
    }

    fn remove(&mut self, key: String) -> Result<(), CapError> {
        self.cap(&REMOVE, (&key,), |c| {
            check_key(&key)?;
            c.state_change(|values| {
                values.remove(&key);
                Ok(())
            })
        })
    }
}

/// How to put a record back as it was before an ADD wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateUndo {
    pub(crate) record: crate::plugin_state::Record,
    pub(crate) values: std::collections::BTreeMap<String, String>,
}

impl Inverse for StateUndo {
    fn describe(&self) -> String {
        format!("State({self:?})")
    }

    fn apply(&self, _ctx: &mut Ctx) -> Result<(), CapError> {
        StateUndo::apply(self)
    }
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[&GET, &KEYS, &SET, &REMOVE];

/// `attachment-state.get`.
pub(super) const GET: Entry = Entry {
    call: "attachment-state.get",
    args: &["key"],
    authority: "read a value of this plugin's own record for this attachment",
    policy: "`attachment-state: true`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: ATTACHMENT_STATE,
};

/// `attachment-state.keys`.
pub(super) const KEYS: Entry = Entry {
    call: "attachment-state.keys",
    args: &[],
    authority: "list the keys of this plugin's own record for this attachment",
    policy: "`attachment-state: true`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: ATTACHMENT_STATE,
};

/// `attachment-state.set`.
pub(super) const SET: Entry = Entry {
    call: "attachment-state.set",
    args: &["key", "value"],
    authority: "set a value in this plugin's own record for this attachment (at most 32 keys of 64 bytes, values of 4096 bytes; written atomically under the state root)",
    policy: "`attachment-state: true`; the record is keyed by the runtime's network, container ID and ifname and the plugin's name, never by an argument",
    undo: "put the record's old values back; the host removes the record after a successful DEL and in GC",
    mutates: true,
    in_gc: false,
    needs: ATTACHMENT_STATE,
};

/// `attachment-state.remove`.
pub(super) const REMOVE: Entry = Entry {
    call: "attachment-state.remove",
    args: &["key"],
    authority: "remove a key from this plugin's own record for this attachment",
    policy: "`attachment-state: true`",
    undo: "put the record's old values back",
    mutates: true,
    in_gc: false,
    needs: ATTACHMENT_STATE,
};

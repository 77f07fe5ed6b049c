//! Links an ADD takes from the host namespace (a `host-device` device),
//! and how DEL returns them exactly as they were: the attachment record
//! ([`crate::record`]) keeps the journal's inverses for them past the ADD.
//!
//! - A successful ADD that moved host links into the container writes the
//!   record ([`Ctx::keep_record`]); if it cannot, the ADD fails and is
//!   undone, so a device is never out without the means to bring it back.
//! - A DEL that moves such a link back ([`Ctx::return_borrowed`], from
//!   `link.move-to`) replays its inverses: back under its old name and
//!   index, then its state, addresses and routes.
//! - After the plugin's DEL, whatever the record still holds is returned
//!   by the host ([`Ctx::finish_del`]): a plugin whose DEL forgets the
//!   device, or fails, leaves nothing out.

use serde_json::json;

use super::{CapError, Ctx};
use crate::audit::Outcome;
use crate::netns::Kind;
use crate::record::{Borrowed, Location, Record};

impl Ctx {
    fn record_location(&self) -> Location {
        Location::new(
            &Location::root_from_env(),
            &self.attachment,
            self.audit.plugin(),
        )
    }

    fn container_ino(&self) -> Option<u64> {
        self.container.as_ref().map(crate::netns::NetNs::ino)
    }

    /// After a successful ADD: records the links it moved from the host
    /// namespace into the container's, with the inverses that put each
    /// back (added to a record an earlier ADD of the attachment left in
    /// the same namespace). The error says why it could not.
    pub fn keep_record(&mut self) -> Result<(), String> {
        let moved: Vec<Borrowed> = self
            .journal
            .moved_out_of(Kind::Host)
            .into_iter()
            .filter(|((ns, _), _, _)| *ns == Kind::Container)
            .map(|((_, index), name, restore)| Borrowed {
                name,
                index,
                restore,
            })
            .collect();
        if moved.is_empty() {
            return Ok(());
        }
        let loc = self.record_location();
        let ino = self
            .container_ino()
            .ok_or("a link moved into no container namespace")?;
        let result = (|| {
            let mut record = match loc.load()? {
                Some(r) if r.applies_to(ino) => r,
                _ => Record::new(&self.attachment, self.audit.plugin(), ino)?,
            };
            record
                .borrowed
                .retain(|b| !moved.iter().any(|m| m.index == b.index));
            record.borrowed.extend(moved.iter().cloned());
            loc.store(&record)
        })();
        let names: Vec<&str> = moved.iter().map(|b| b.name.as_str()).collect();
        let args = json!({"record": loc.path(), "borrowed": names});
        let outcome = match &result {
            Ok(()) => Outcome::Ok,
            Err(e) => CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO)).outcome(),
        };
        self.audit.record("record.store", &args, &outcome);
        result.map_err(|e| {
            format!(
                "cannot record how to return host links {names:?} ({}): {e}",
                loc.path().display()
            )
        })
    }

    /// The record of this attachment, if it applies to this boot and this
    /// container namespace.
    fn record(&self) -> Result<Option<(Location, Record)>, CapError> {
        let Some(ino) = self.container_ino() else {
            return Ok(None);
        };
        let loc = self.record_location();
        match loc.load() {
            Ok(Some(r)) if r.applies_to(ino) => Ok(Some((loc, r))),
            Ok(_) => Ok(None),
            Err(e) => {
                log::warn!("{e}");
                Err(CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO)))
            }
        }
    }

    /// During DEL: if link `index` of the container namespace is one this
    /// attachment's ADD took from the host, returns it as it was and
    /// answers its index there (`None`: not a recorded link). `name`, the
    /// name the plugin asked for, must be none or the recorded one.
    pub(super) fn return_borrowed(
        &mut self,
        index: u32,
        name: Option<&str>,
    ) -> Result<Option<u32>, CapError> {
        if self.command != super::Command::Del {
            return Ok(None);
        }
        let Some((loc, mut record)) = self.record()? else {
            return Ok(None);
        };
        let Some(pos) = record.borrowed.iter().position(|b| b.index == index) else {
            return Ok(None);
        };
        let b = &record.borrowed[pos];
        if name.is_some_and(|n| n != b.name) {
            return Err(CapError::Denied(format!(
                "link {index} was taken from the host namespace as {:?} and goes back under \
                 that name",
                b.name
            )));
        }
        let b = record.borrowed.remove(pos);
        let at = self.put_back(&b)?;
        // Returned: the record no longer holds it (a failure to rewrite
        // the record leaves an entry whose link is no longer there, which
        // the next DEL drops).
        if let Err(e) = loc.store(&record) {
            log::warn!("{}: {e}", loc.path().display());
        }
        Ok(Some(at))
    }

    /// Replays a borrowed link's inverses; its index in the host namespace.
    fn put_back(&mut self, b: &Borrowed) -> Result<u32, CapError> {
        // The host namespace is wasmcni's own: it returns the link there
        // even for a plugin that never asked for a handle to it.
        self.open_host()?;
        let mut entries = b.restore.clone();
        entries.reverse();
        let failures = self.replay(entries, "record.restore");
        let at = self
            .netlink(Kind::Host)?
            .link_by_name(&b.name)
            .map(|m| m.header.index);
        match (failures.is_empty(), at) {
            (true, Ok(at)) => Ok(at),
            (_, Err(_)) if !failures.is_empty() => Err(CapError::Incomplete(failures.join("; "))),
            (_, Err(e)) => Err(CapError::from(&e)),
            (false, Ok(_)) => Err(CapError::Incomplete(failures.join("; "))),
        }
    }

    /// After the plugin's DEL (whatever its outcome): returns every link
    /// the record still holds that is still in the container namespace,
    /// drops those that are not (gone with their namespace), and removes
    /// the record; a link that could not be returned stays in it for the
    /// runtime's next DEL. The errors name what could not be returned.
    pub fn finish_del(&mut self) -> Result<(), String> {
        let Some((loc, mut record)) = self.record().map_err(|e| format!("{e:?}"))? else {
            return Ok(());
        };
        let mut failures = Vec::new();
        let mut kept = Vec::new();
        for b in std::mem::take(&mut record.borrowed) {
            let present = self
                .netlink(Kind::Container)
                .ok()
                .and_then(|nl| nl.link_by_index(b.index).ok())
                .is_some();
            let args = json!({"record": loc.path(), "link": b.name, "index": b.index});
            if !present {
                self.audit.record(
                    "record.drop",
                    &args,
                    &CapError::Kernel(libc::ENODEV).outcome(),
                );
                continue;
            }
            eprintln!(
                "wasmcni: the plugin's DEL left host link {:?} in the container; returning it",
                b.name
            );
            self.audit.record("record.return", &args, &Outcome::Ok);
            if let Err(e) = self.put_back(&b) {
                failures.push(format!("{}: {e:?}", b.name));
                // Kept for the runtime's next DEL.
                kept.push(b);
            }
        }
        record.borrowed = kept;
        if let Err(e) = loc.store(&record) {
            failures.push(format!("{}: {e}", loc.path().display()));
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }
}

//! State: IPAM state only under the grant's `ipam-roots`, a reservation
//! released only by its holder (or a GC's, of a gone attachment), plugin
//! state only with `attachment-state` and a trusted state root.

use std::path::{Path, PathBuf};

use super::View;
use crate::caps::bindings::CapError;
use crate::ipam::Owner;
use cni_spec::Command;

impl View<'_> {
    /// IPAM state needs `ipam-roots`.
    pub fn ipam_state(&self) -> Result<(), CapError> {
        if !self.grant.ipam_roots.is_empty() {
            return Ok(());
        }
        let field = self.entry_field("ipam-roots");
        Err(CapError::by_policy(
            &field,
            format!("{field} is empty: no IPAM state"),
        ))
    }

    /// The IPAM data directory `data_dir` lies under one of the grant's
    /// `ipam-roots`: that root, and the directory relative to it.
    pub fn ipam_root(&self, data_dir: &Path) -> Result<(PathBuf, PathBuf), CapError> {
        let field = self.entry_field("ipam-roots");
        crate::ipam::under_root(data_dir, &self.grant.ipam_roots)
            .map(|(root, rel)| (root.to_path_buf(), rel))
            .ok_or_else(|| {
                CapError::by_policy(
                    &field,
                    format!(
                        "IPAM data dir {} lies under none of {field}",
                        data_dir.display()
                    ),
                )
            })
    }

    /// A reservation held by `holder` is released only by its holder, or
    /// in GC if its attachment is gone (not in the runtime's valid list).
    pub fn release(&self, holder: &Owner) -> Result<(), CapError> {
        let mine = self.attachment.owner().holds(holder);
        let collectable = self.command == Some(Command::Gc) && !self.attachment.still_valid(holder);
        if mine || collectable {
            return Ok(());
        }
        Err(CapError::denied_with(
            "the reservation belongs to another attachment (a wasmcni invariant)",
            format!("{} {}", holder.container_id, holder.ifname),
        ))
    }

    /// Plugin state needs `attachment-state` (declared by its rows:
    /// [`View::declared`]).
    pub fn attachment_state(&self) -> Result<(), CapError> {
        if self.grant.attachment_state {
            return Ok(());
        }
        let field = self.entry_field("attachment-state");
        Err(CapError::by_policy(&field, format!("{field} is false")))
    }
}

/// Plugin state only under a state root the host trusts (`untrusted`: why
/// not, if it does not).
pub(in crate::caps) fn trusted_root(untrusted: Option<String>) -> Result<(), CapError> {
    let Some(why) = untrusted else {
        return Ok(());
    };
    Err(CapError::denied(format!(
        "{why}: no plugin state is kept there (a wasmcni invariant)"
    )))
}

//! Traffic control: limits removed only by DEL and collected only by GC;
//! the attachment's `ifb` only if it really is its own.

use super::View;
use crate::caps::bindings::{CapError, Link};
use crate::netns::Kind;
use cni_spec::Command;

/// `traffic-control.remove-limits` is a DEL's doing: during ADD limits are
/// only installed, and undone by the journal.
pub(in crate::caps) fn remove_limits(command: Option<Command>) -> Result<(), CapError> {
    if command == Some(Command::Add) {
        return Err(CapError::denied(
            "traffic-control.remove-limits is a DEL's doing: during ADD limits are only \
             installed, and undone by the journal (a wasmcni invariant)",
        ));
    }
    Ok(())
}

/// `traffic-control.collect-garbage` is a GC's doing.
pub(in crate::caps) fn collect(command: Option<Command>) -> Result<(), CapError> {
    if command != Some(Command::Gc) {
        return Err(CapError::denied(
            "traffic-control.collect-garbage is a GC's doing (a wasmcni invariant)",
        ));
    }
    Ok(())
}

impl View<'_> {
    /// A link with this attachment's `ifb` name is its `ifb` only if it is
    /// an ifb and the attachment's: in the container namespace, marked for
    /// it, or created in this call or recorded by the attachment
    /// (`made_or_recorded`).
    pub fn own_ifb(&self, kind: Kind, l: &Link, made_or_recorded: bool) -> Result<(), CapError> {
        let ours = kind == Kind::Container || self.owned(l) || made_or_recorded;
        if l.kind.as_deref() == Some("ifb") && ours {
            return Ok(());
        }
        Err(CapError::denied_with(
            format!(
                "{} link {:?} (index {}) has this attachment's ifb name but is not its \
             ifb (a wasmcni invariant)",
                kind.name(),
                l.name,
                l.index
            ),
            l.alias.clone().unwrap_or_default(),
        ))
    }
}

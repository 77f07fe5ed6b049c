//! Delegation: a command delegates only itself (an ADD also DEL, to clean
//! up), and only to the plugins its entry lists.

use super::View;
use crate::caps::bindings::CapError;
use cni_spec::Command;

impl View<'_> {
    /// A command delegates only the same command (an ADD also DEL, to
    /// clean up after a delegate it ran).
    pub fn delegated_command(&self, command: Command) -> Result<(), CapError> {
        let during_add = self.command == Some(Command::Add);
        if Some(command) == self.command || (during_add && command == Command::Del) {
            return Ok(());
        }
        let own = self.command_text;
        Err(CapError::denied(format!(
            "a {own} may delegate only {own}{} (a wasmcni invariant)",
            if during_add {
                " (or DEL to clean up)"
            } else {
                ""
            }
        )))
    }

    /// Delegate `name` only if the entry lists it in `delegates` (a
    /// component) or `native-delegates` (a binary): which of the two.
    pub fn delegate(&self, name: &str) -> Result<(bool, bool), CapError> {
        let wasm_ok = self.grant.delegates.iter().any(|d| d == name);
        let native_ok = self.grant.native_delegates.iter().any(|d| d == name);
        if wasm_ok || native_ok {
            return Ok((wasm_ok, native_ok));
        }
        let field = self.entry_field("delegates");
        Err(CapError::by_policy(
            &field,
            format!(
                "{name:?} is listed in neither {field} nor {}",
                self.entry_field("native-delegates")
            ),
        ))
    }
}

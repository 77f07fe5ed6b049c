//! What every call needs: a command that may change the kernel, and the
//! namespace it acts in.

use serde_json::Value;

use super::View;
use crate::caps::bindings::CapError;
use crate::caps::row::{Grant, Ns, Right};
use crate::netns::Kind;
use cni_spec::Command;

/// Only ADD and DEL change the kernel: CHECK, GC, STATUS and VERSION get
/// read-only authority whatever the policy says (GC may release IPAM
/// reservations and run its delegates' GC: calls whose row says
/// `in_gc`). `mutates`: the call changes the kernel.
pub(in crate::caps) fn command_may(
    command: Option<Command>,
    mutates: bool,
    in_gc: bool,
) -> Result<(), CapError> {
    let read_only = match command {
        Some(Command::Add | Command::Del) => false,
        Some(Command::Gc) => mutates && !in_gc,
        Some(Command::Check | Command::Status | Command::Version) | None => mutates,
    };
    if !read_only {
        return Ok(());
    }
    Err(CapError::denied(match command {
        Some(Command::Gc) => "a GC may only release IPAM reservations and run its \
                        delegates' GC, not change the kernel (a wasmcni invariant)"
            .to_owned(),
        command => format!(
            "a {} may not change the kernel: only ADD and DEL may (a wasmcni invariant)",
            command.map_or("command other than ADD and DEL", Command::as_str)
        ),
    }))
}

impl View<'_> {
    /// The node namespace is the plugin's only if its entry has a `host`
    /// grant.
    pub fn host_namespace(&self) -> Result<(), CapError> {
        if self.grant.host.is_some() {
            return Ok(());
        }
        let field = self.entry_field("host");
        Err(CapError::by_policy(
            &field,
            format!("{field} is absent: no authority in the host namespace"),
        ))
    }
}

/// The namespace a call's audit argument names (`"host"`, `"container"`).
fn kind_named(v: &Value) -> Option<Kind> {
    match v.as_str()? {
        "host" => Some(Kind::Host),
        "container" => Some(Kind::Container),
        _ => None,
    }
}

impl View<'_> {
    /// The grants a call's catalog row declares (`needs`) about the
    /// namespaces it acts in, read from its audit arguments (`args`: `ns`
    /// is the one the call acts in, `Ns::Arg` keys name others): a `host`
    /// entry, and each namespace right but `config-vlans` (needed only for
    /// a VLAN a port is not in yet: [`View::port_vlans`]), and
    /// `attachment-state`. What the row declares is what is checked,
    /// before the call does anything; what a grant says of one link,
    /// name, prefix, key or rule the interface module asks here with the
    /// facts it looked up.
    pub fn declared(&self, needs: &[Grant], args: &Value) -> Result<(), CapError> {
        let call_ns = kind_named(&args["ns"]);
        for need in needs {
            match *need {
                Grant::HostEntry => self.host_namespace()?,
                Grant::AttachmentState => self.attachment_state()?,
                // `config-vlans`: only for a VLAN a port is not in yet.
                Grant::Right(_, Right::ConfigVlans) => {}
                Grant::Right(ns, right) => {
                    let kind = match ns {
                        Ns::Call => call_ns,
                        Ns::Arg(k) => kind_named(&args[k]),
                    };
                    // Fail closed: a right the row declares in a namespace
                    // its arguments do not name is never taken as granted.
                    let Some(kind) = kind else {
                        return Err(CapError::denied(format!(
                            "the call's row declares {} in a namespace its arguments do not \
                             name (a wasmcni invariant)",
                            right.field()
                        )));
                    };
                    self.right(kind, right)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Namespace right `right` in `kind` (`config-vlans` aside: see
    /// [`View::declared`]).
    fn right(&self, kind: Kind, right: Right) -> Result<(), CapError> {
        match right {
            Right::Create(what) => self.create(kind, what),
            Right::ConfigVlans => Ok(()),
            r => self.require(kind, r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;

    #[test]
    fn only_add_and_del_change_the_kernel() {
        for c in [Command::Add, Command::Del] {
            assert!(command_may(Some(c), true, false).is_ok());
        }
        for c in [Command::Check, Command::Status, Command::Version] {
            assert!(command_may(Some(c), true, true).is_err());
            assert!(command_may(Some(c), false, false).is_ok());
        }
        assert!(command_may(None, true, false).is_err());
        assert!(command_may(Some(Command::Gc), true, true).is_ok());
        let e = command_may(Some(Command::Gc), true, false).unwrap_err();
        // A refusal reaches the guest as `access-denied`.
        assert_eq!(e.code(), Some(ErrorCode::AccessDenied));
    }

    /// A grant with every namespace right in both namespaces, a `host`
    /// entry and `attachment-state`; `without` takes one away.
    fn grant_without(
        without: Option<(Kind, Right)>,
        host: bool,
        state: bool,
    ) -> crate::policy::Grant {
        let all = |kind: Kind| {
            let mut g = crate::policy::NsGrant::every_right();
            if let Some((k, r)) = without {
                if k == kind {
                    r.revoke(&mut g);
                }
            }
            g
        };
        crate::policy::Grant {
            container: all(Kind::Container),
            host: host.then(|| all(Kind::Host)),
            attachment_state: state,
            ..crate::policy::Grant::default()
        }
    }

    fn check(grant: &crate::policy::Grant, needs: &[Grant], args: &Value) -> Result<(), CapError> {
        let attachment = crate::attachment::Attachment::default();
        let marks = (String::new(), String::new());
        View {
            grant,
            plugin: "p",
            attachment: &attachment,
            marks: &marks,
            command: Some(Command::Add),
            command_text: "ADD",
            adopted: None,
            config_device: None,
        }
        .declared(needs, args)
    }

    /// Declared is enforced: for every row of the catalog, in each
    /// namespace its calls name, each namespace-level grant its `needs`
    /// declares is checked before the call runs (the call is refused
    /// without it, naming that field), and nothing else is (a grant of
    /// everything lets it through).
    #[test]
    fn every_rows_declared_needs_are_what_the_call_checks() {
        let mut checked = 0;
        for row in crate::caps::catalog::entries() {
            for kind in [Kind::Container, Kind::Host] {
                let mut args = serde_json::Map::new();
                for a in row.args {
                    args.insert((*a).to_owned(), Value::Null);
                }
                // `ns` and every argument naming a namespace: `kind`.
                for need in row.needs {
                    if let Grant::Right(Ns::Arg(k), _) = need {
                        args.insert((*k).to_owned(), kind.name().into());
                    }
                }
                if row.args.contains(&"ns") {
                    args.insert("ns".into(), kind.name().into());
                }
                let args = Value::Object(args);
                let full = grant_without(None, true, true);
                assert!(
                    check(&full, row.needs, &args).is_ok(),
                    "{}: refused with every grant",
                    row.call
                );
                for need in row.needs {
                    let (grant, field) = match *need {
                        Grant::HostEntry => (grant_without(None, false, true), "host".to_owned()),
                        Grant::AttachmentState => (
                            grant_without(None, true, false),
                            "attachment-state".to_owned(),
                        ),
                        Grant::Right(_, Right::ConfigVlans) => continue,
                        Grant::Right(ns, right) => {
                            // Every namespace a right is declared in is one
                            // of the call's arguments.
                            let named = match ns {
                                Ns::Call => "ns",
                                Ns::Arg(k) => k,
                            };
                            assert!(
                                row.args.contains(&named),
                                "{}: declares {} in {named:?}, not an argument",
                                row.call,
                                right.field()
                            );
                            (
                                grant_without(Some((kind, right)), true, true),
                                format!("{}.{}", kind.name(), right.field()),
                            )
                        }
                        _ => continue,
                    };
                    let e = check(&grant, row.needs, &args).expect_err(row.call);
                    let CapError::Denied(d) = e else {
                        panic!("{}: {e:?}", row.call)
                    };
                    assert_eq!(
                        d.refusal().grant.as_deref(),
                        Some(format!("plugins.p.{field}").as_str()),
                        "{}: {}",
                        row.call,
                        d.reason()
                    );
                    checked += 1;
                }
            }
        }
        // Every row with a namespace right is among them.
        assert!(checked > 80, "{checked} needs checked");
        // A right in a namespace the arguments do not name fails closed.
        let full = grant_without(None, true, true);
        let read = [Grant::Right(Ns::Call, Right::Read)];
        assert!(check(&full, &read, &serde_json::json!({})).is_err());
        assert!(check(&full, &read, &serde_json::json!({"ns": "elsewhere"})).is_err());
    }
}

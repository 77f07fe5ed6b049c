//! The `dhcp` interface's refusals, as pure decisions: the grant, what
//! the host knows of the invocation, and what the plugin asked, in; the
//! refusal (or the socket the host may talk to) out.

use std::path::{Path, PathBuf};

use super::View;
use crate::caps::bindings::CapError;
use crate::policy::DhcpGrant;
use cni_spec::Command;

/// What the host knows of the invocation that makes a `dhcp` call.
#[derive(Debug, Clone, Copy)]
pub(in crate::caps) struct Facts<'a> {
    /// The command the runtime invoked (a delegate's is its caller's).
    pub command: Option<Command>,
    /// Whether the host holds a verified container namespace.
    pub container: bool,
    /// Whether the attachment is named in full (network, container ID,
    /// ifname): the lease's client identifier is made from them.
    pub identified: bool,
    /// The plugin's entry's `dhcp` field path, for messages
    /// (`plugins.dhcp.dhcp`).
    pub field: &'a str,
}

/// Which call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::caps) enum Call {
    /// `acquire`: ADD only (a lease is a change on the network).
    Acquire,
    /// `current`: reads; any command with an attachment.
    Current,
    /// `release`: DEL, or ADD (to clean up what it started).
    Release,
    /// `listening`: any command (STATUS's question); names no lease.
    Listening,
}

impl View<'_> {
    /// The DHCP daemon socket this call may use (the entry's
    /// `dhcp.socket`), or why not ([`socket_for`]); `container`: whether
    /// the host holds the container namespace.
    pub fn dhcp_socket(
        &self,
        call: Call,
        container: bool,
        asked: Option<&str>,
    ) -> Result<PathBuf, CapError> {
        let field = self.entry_field("dhcp");
        let a = self.attachment;
        let facts = Facts {
            command: self.command,
            container,
            identified: !a.network.is_empty() && !a.container_id.is_empty() && !a.ifname.is_empty(),
            field: &field,
        };
        socket_for(self.grant.dhcp.as_ref(), &facts, call, asked)
    }
}

/// The socket the host may talk to for this call, or why not: the grant's
/// socket, which a `daemonSocketPath` in the config (`asked`) may only
/// repeat.
pub(in crate::caps) fn socket_for(
    grant: Option<&DhcpGrant>,
    facts: &Facts<'_>,
    call: Call,
    asked: Option<&str>,
) -> Result<PathBuf, CapError> {
    let Some(grant) = grant else {
        return Err(CapError::by_policy(
            facts.field,
            format!("{} is not set: no DHCP daemon for this plugin", facts.field),
        ));
    };
    if let Some(asked) = asked {
        if Path::new(asked) != grant.socket {
            return Err(CapError::by_policy(
                facts.field,
                format!(
                    "daemonSocketPath {asked:?} is not the DHCP daemon socket {} names",
                    facts.field
                ),
            ));
        }
    }
    let command_ok = match call {
        Call::Acquire => facts.command == Some(Command::Add),
        Call::Release => matches!(facts.command, Some(Command::Add | Command::Del)),
        Call::Current | Call::Listening => facts.command.is_some(),
    };
    if !command_ok {
        let c = facts.command.map_or("this command", |c| c.as_str());
        return Err(CapError::denied(format!(
            "dhcp.{} is refused during {c} (a wasmcni invariant)",
            match call {
                Call::Acquire => "acquire",
                Call::Current => "current",
                Call::Release => "release",
                Call::Listening => "listening",
            }
        )));
    }
    if !facts.container && call == Call::Acquire {
        return Err(CapError::denied(
            "dhcp.acquire needs the container namespace (CNI_NETNS) (a wasmcni invariant)",
        ));
    }
    if !facts.identified && call != Call::Listening {
        return Err(CapError::denied(
            "no network name, CNI_CONTAINERID or CNI_IFNAME: no lease to name (a wasmcni invariant)",
        ));
    }
    Ok(grant.socket.clone())
}

/// The DHCP options the host sets itself, which a config's `provide` may
/// not send (a server joins repeated options, RFC 3396): 50 (requested
/// address), 53 (message type), 54 (server identifier), 55 (parameter
/// request list), 61 (client identifier: the host names the lease), 82
/// (relay agent information, a relay's to add).
const HOST_OPTIONS: [u8; 6] = [50, 53, 54, 55, 61, 82];

/// A lease request's `provide` may send any option but those the host sets
/// ([`HOST_OPTIONS`]).
pub(in crate::caps) fn provided(codes: impl IntoIterator<Item = u8>) -> Result<(), CapError> {
    match codes.into_iter().find(|c| HOST_OPTIONS.contains(c)) {
        None => Ok(()),
        Some(c) => Err(CapError::denied(format!(
            "DHCP option {c} is the host's to set, never a config's `provide` (a wasmcni \
             invariant)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(command: Command) -> Facts<'static> {
        Facts {
            command: Some(command),
            container: true,
            identified: true,
            field: "plugins.dhcp.dhcp",
        }
    }

    fn grant() -> DhcpGrant {
        DhcpGrant {
            socket: PathBuf::from("/run/wasmcni/dhcp.sock"),
        }
    }

    fn denied(r: Result<PathBuf, CapError>) -> String {
        match r {
            Err(CapError::Denied(d)) => d.reason().to_owned(),
            other => panic!("not denied: {other:?}"),
        }
    }

    #[test]
    fn only_the_granted_socket() {
        let g = grant();
        let f = facts(Command::Add);
        assert_eq!(
            socket_for(Some(&g), &f, Call::Acquire, None).ok(),
            Some(g.socket.clone())
        );
        assert!(socket_for(Some(&g), &f, Call::Acquire, Some("/run/wasmcni/dhcp.sock")).is_ok());
        let why = denied(socket_for(
            Some(&g),
            &f,
            Call::Acquire,
            Some("/tmp/evil.sock"),
        ));
        assert!(why.contains("daemonSocketPath"), "{why}");
        let why = denied(socket_for(None, &f, Call::Acquire, None));
        assert!(why.contains("plugins.dhcp.dhcp is not set"), "{why}");
    }

    #[test]
    fn a_lease_is_taken_only_in_add_and_given_back_in_add_or_del() {
        let g = grant();
        for c in [Command::Del, Command::Check, Command::Gc, Command::Status] {
            assert!(
                socket_for(Some(&g), &facts(c), Call::Acquire, None).is_err(),
                "{c:?}"
            );
        }
        assert!(socket_for(Some(&g), &facts(Command::Del), Call::Release, None).is_ok());
        assert!(socket_for(Some(&g), &facts(Command::Add), Call::Release, None).is_ok());
        assert!(socket_for(Some(&g), &facts(Command::Check), Call::Release, None).is_err());
        assert!(socket_for(Some(&g), &facts(Command::Check), Call::Current, None).is_ok());
        // STATUS asks only whether a daemon listens, naming no lease.
        let mut f = facts(Command::Status);
        (f.container, f.identified) = (false, false);
        assert!(socket_for(Some(&g), &f, Call::Listening, None).is_ok());
        assert!(socket_for(Some(&g), &f, Call::Current, None).is_err());
        assert!(socket_for(Some(&g), &f, Call::Listening, Some("/tmp/evil.sock")).is_err());
        assert!(socket_for(None, &f, Call::Listening, None).is_err());
    }

    #[test]
    fn no_namespace_or_no_identity_no_lease() {
        let g = grant();
        let mut f = facts(Command::Add);
        f.container = false;
        assert!(socket_for(Some(&g), &f, Call::Acquire, None).is_err());
        // DEL with the namespace gone still releases (the daemon has it).
        let mut f = facts(Command::Del);
        f.container = false;
        assert!(socket_for(Some(&g), &f, Call::Release, None).is_ok());
        let mut f = facts(Command::Add);
        f.identified = false;
        assert!(socket_for(Some(&g), &f, Call::Acquire, None).is_err());
    }

    #[test]
    fn provide_sends_no_option_the_host_sets() {
        assert!(provided([12, 60, 81]).is_ok());
        for c in [50, 53, 54, 55, 61, 82] {
            assert!(provided([12, c]).is_err(), "{c}");
        }
    }
}

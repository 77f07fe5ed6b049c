//! Firewall rules: in the node namespace only, of the kinds the grant
//! allows, each at its command (installed by ADD, removed by DEL, collected
//! by GC); port maps only as the runtime asked; a container address only
//! the attachment's own unicast one; isolation only of bridges.

use std::net::IpAddr;

use super::View;
use crate::caps::bindings::CapError;
use crate::netns::Kind;
use crate::record::FwKind;
use cni_spec::Command;

/// Firewall rules live in the node namespace only.
pub(in crate::caps) fn node_namespace(ns: Kind) -> Result<(), CapError> {
    if ns != Kind::Host {
        return Err(CapError::denied(
            "firewall rules live in the node namespace only: pass the host handle \
             (a wasmcni invariant)",
        ));
    }
    Ok(())
}

impl View<'_> {
    /// Rules of `kind`, in the node namespace, as the grant's `firewall`
    /// allows.
    pub fn firewall(&self, ns: Kind, kind: FwKind) -> Result<(), CapError> {
        node_namespace(ns)?;
        let g = &self.ns_grant(Kind::Host).firewall;
        let ok = match kind {
            FwKind::PortMap => g.port_mappings,
            FwKind::Masquerade => g.masquerade,
            FwKind::Forward => g.forward,
            FwKind::Isolation => g.isolation,
            FwKind::MacSpoof => g.mac_spoof,
        };
        if ok {
            return Ok(());
        }
        let field = self.grant_field(Kind::Host, &format!("firewall.{}", kind.field()));
        Err(CapError::by_policy(&field, format!("{field} is false")))
    }
}

/// What a firewall call does, for [`at_its_command`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::caps) enum Doing {
    /// `firewall.add`: an ADD's doing.
    Add,
    /// `firewall.remove`: a DEL's (during ADD rules are only installed,
    /// and undone by the journal).
    Remove,
    /// `firewall.collect-garbage`: a GC's.
    Collect,
}

/// Each firewall change at its command.
pub(in crate::caps) fn at_its_command(
    doing: Doing,
    command: Option<Command>,
) -> Result<(), CapError> {
    let refused = match doing {
        Doing::Add if command != Some(Command::Add) => {
            "firewall.add is an ADD's doing (a wasmcni invariant)"
        }
        Doing::Remove if command == Some(Command::Add) => {
            "firewall.remove is a DEL's doing: during ADD rules are only installed, and \
             undone by the journal (a wasmcni invariant)"
        }
        Doing::Collect if command != Some(Command::Gc) => {
            "firewall.collect-garbage is a GC's doing (a wasmcni invariant)"
        }
        _ => return Ok(()),
    };
    Err(CapError::denied(refused))
}

/// A port map only as the runtime asked (`asked`: the config's
/// `runtimeConfig.portMappings`, read by the host, has it).
pub(in crate::caps) fn requested_port(
    asked: bool,
    proto: &str,
    host_port: u16,
    host_ip: Option<IpAddr>,
    container_port: u16,
) -> Result<(), CapError> {
    if asked {
        return Ok(());
    }
    let on = host_ip.map(|a| format!(" on {a}")).unwrap_or_default();
    Err(CapError::denied(format!(
        "{proto} host port {host_port}{on} to container port {container_port} is not one of \
         the runtime's runtimeConfig.portMappings, so no plugin may map it (a wasmcni \
         invariant)"
    )))
}

/// Never a loopback, unspecified, multicast, link-local or IPv4-mapped
/// address (`unicast` false), whatever owns it, as a container's in a
/// rule: 127.0.0.1 would map the runtime's host port onto the node's own
/// loopback services. (The address must also be the attachment's own:
/// [`View::own_address`].)
pub(in crate::caps) fn container_address(ip: IpAddr, unicast: bool) -> Result<(), CapError> {
    if unicast {
        return Ok(());
    }
    Err(CapError::denied(format!(
        "{ip} is a loopback, unspecified, multicast, link-local or IPv4-mapped \
         address, never a container's in a firewall rule (a wasmcni invariant)"
    )))
}

/// Only bridges are isolated (`kind`: the link's kind).
pub(in crate::caps) fn isolated_bridge(
    name: &str,
    index: u32,
    kind: Option<&str>,
) -> Result<(), CapError> {
    if kind == Some("bridge") {
        return Ok(());
    }
    Err(CapError::denied(format!(
        "host link {name:?} (index {index}) is not a bridge: only bridges are isolated"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_firewall_change_at_its_command() {
        assert!(at_its_command(Doing::Add, Some(Command::Add)).is_ok());
        assert!(at_its_command(Doing::Add, Some(Command::Del)).is_err());
        assert!(at_its_command(Doing::Remove, Some(Command::Add)).is_err());
        assert!(at_its_command(Doing::Remove, Some(Command::Del)).is_ok());
        assert!(at_its_command(Doing::Collect, Some(Command::Gc)).is_ok());
        assert!(at_its_command(Doing::Collect, Some(Command::Del)).is_err());
        assert!(node_namespace(Kind::Container).is_err());
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(container_address(ip, false).is_err());
        assert!(requested_port(false, "tcp", 80, None, 8080).is_err());
        assert!(isolated_bridge("veth1", 3, Some("veth")).is_err());
        assert!(isolated_bridge("cni0", 3, Some("bridge")).is_ok());
    }
}

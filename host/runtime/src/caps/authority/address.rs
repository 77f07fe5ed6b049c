//! Addresses: a host address in the grant's prefixes; no address over
//! another attachment's reservation or the node's own; a container's
//! address in a firewall rule or host route only if it is the
//! attachment's; what may be deleted; what a change may not lose.

use std::net::IpAddr;

use super::View;
use crate::caps::bindings::CapError;
use crate::ipam::Owner;
use crate::netns::Kind;

impl View<'_> {
    /// A host address must lie in the grant's `prefixes`.
    pub fn host_address(&self, ip: IpAddr, len: u8) -> Result<(), CapError> {
        if self.ns_grant(Kind::Host).covers(ip, len) {
            return Ok(());
        }
        let field = self.grant_field(Kind::Host, "prefixes");
        Err(CapError::by_policy(
            &field,
            format!("host address {ip}/{len} lies in none of {field}"),
        ))
    }

    /// `ip` as the container's address in `what` only if the attachment
    /// owns it (`owned`: an IPAM delegate gave it on the runtime's own
    /// config, or its records hold it for this incarnation) or the
    /// plugin's `static-ranges` covers it.
    pub fn own_address(&self, ip: IpAddr, what: &str, owned: bool) -> Result<(), CapError> {
        if owned || self.grant.static_ranges.iter().any(|r| r.contains(&ip)) {
            return Ok(());
        }
        Err(CapError::denied(format!(
            "{what}: {ip} is not an address of this attachment: no IPAM plugin gave it to the \
             attachment on the runtime's own config, no record of this incarnation holds it \
             (a prevResult or an address in the container's namespace is no proof), and it \
             lies in none of {} (a wasmcni invariant)",
            self.entry_field("static-ranges")
        )))
    }

    /// A reservation of `ip` only inside the subnets the runtime's config
    /// names for the network's IPAM, where it names any: a plugin that
    /// hands its IPAM delegate a config of its own, or calls the store
    /// itself, cannot reserve in its network's state an address of
    /// another network's subnet, which that network's ADDs would then
    /// meet as another attachment's forever (issue 49, breach 4).
    pub fn in_network_subnets(&self, ip: IpAddr) -> Result<(), CapError> {
        let subnets = &self.attachment.ipam_subnets;
        if subnets.is_empty() || subnets.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        let names: Vec<String> = subnets.iter().map(ToString::to_string).collect();
        Err(CapError::denied(format!(
            "address {ip} lies outside the subnets the runtime's config names for network \
             {:?}'s IPAM ({}): not the network's to reserve (a wasmcni invariant)",
            self.attachment.network,
            names.join(", ")
        )))
    }
}

/// A container address the node itself holds (a bridge's gateway, an
/// uplink's address: `node_link` names the link in wasmcni's namespace
/// that has it, if one does), whatever the grant, unless an IPAM store
/// reserved it for this attachment (`reserved_for_me`). A container that
/// took its network's gateway address and announced it would have the
/// other containers' off-subnet traffic (issue 49, breach 2).
pub(in crate::caps) fn not_node_address(
    ip: IpAddr,
    node_link: Option<&str>,
    reserved_for_me: bool,
) -> Result<(), CapError> {
    let Some(link) = node_link.filter(|_| !reserved_for_me && !ip.is_loopback()) else {
        return Ok(());
    };
    Err(CapError::denied(format!(
        "container address {ip} is the node's own (on {link} in wasmcni's namespace) and no \
         IPAM store reserved it for this attachment: a container with it would take \
         the node's traffic (a wasmcni invariant)"
    )))
}

/// A container or host address `ip/len` may not cover another
/// attachment's reservation (`found`: one a network's IPAM state holds
/// inside the address, or on a node link of the attachment's own, inside
/// its connected prefix) (S13).
pub(in crate::caps) fn not_foreign_address(
    kind: Kind,
    ip: IpAddr,
    len: u8,
    found: Option<&(IpAddr, Owner)>,
) -> Result<(), CapError> {
    let Some((other, holder)) = found else {
        return Ok(());
    };
    let place = if kind == Kind::Host {
        "host"
    } else {
        "container"
    };
    Err(CapError::denied_with(
        format!(
            "{place} address {ip}/{len} covers {other}, reserved for another \
             attachment in a network's IPAM state (a wasmcni invariant)"
        ),
        format!("{other}: {} {}", holder.container_id, holder.ifname),
    ))
}

/// Which host address may be deleted: one wasmcni added (`ours`: its
/// protocol), and on a bridge the network's attachments share
/// (`shared`) only one this invocation added (`added_here`).
pub(in crate::caps) fn delete(
    kind: Kind,
    ip: IpAddr,
    len: u8,
    ours: bool,
    shared: bool,
    added_here: bool,
) -> Result<(), CapError> {
    if kind == Kind::Host && !ours {
        return Err(CapError::denied(format!(
            "host address {ip}/{len} was not added by wasmcni, so it may not be \
                 deleted (a wasmcni invariant)"
        )));
    }
    if shared && !added_here {
        return Err(CapError::denied(format!(
            "host address {ip}/{len} is on a bridge the network's attachments share; \
                 only an address this invocation added may be deleted there (a wasmcni \
                 invariant)"
        )));
    }
    Ok(())
}

/// A change of link `index` that would lose a route wasmcni could not put
/// back as it is (`unrestorable`: the route's key, if one is there) is
/// refused: what cannot be undone is not done.
pub(in crate::caps) fn restorable_routes(
    index: u32,
    unrestorable: Option<String>,
) -> Result<(), CapError> {
    let Some(key) = unrestorable else {
        return Ok(());
    };
    Err(CapError::denied_with(
        format!(
            "link {index} carries a route wasmcni could not restore as it is \
             (multipath, nexthop object, source-specific or encapsulated), so it may \
             not change (a wasmcni invariant)"
        ),
        key,
    ))
}

/// A change that drops link `index`'s permanent neighbour entries (down,
/// move; `n` of them) is refused: the journal does not keep them.
pub(in crate::caps) fn neighbours(index: u32, n: usize) -> Result<(), CapError> {
    if n == 0 {
        return Ok(());
    }
    Err(CapError::denied(format!(
        "link {index} has {n} permanent neighbour entries the kernel would drop \
         and wasmcni could not restore (a wasmcni invariant)"
    )))
}

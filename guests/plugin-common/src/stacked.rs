//! Links stacked on a master (macvlan, ipvlan, vlan), as the reference
//! interface plugins make them: the master found by name in the node's
//! namespace (or the container's, `linkInContainer`), the node's
//! default-route link when none is named, the new link born in the
//! container under its final name; DEL deletes it by name and tolerates a
//! missing link or namespace (and reads no master: see
//! [`crate::iface::delete_link`]).

use guest_sdk::cni::{Error, Interface};
use guest_sdk::net::{IpvlanMode, LinkInfo, LinkOptions, MacvlanMode, MacvlanOptions, Netns};
use guest_sdk::skel::Invocation;

use crate::mac;

/// What to stack on the master.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A macvlan in this mode, with this broadcast queue length (none:
    /// the kernel's).
    Macvlan(MacvlanMode, Option<u32>),
    /// An ipvlan in this mode.
    Ipvlan(IpvlanMode),
    /// An 802.1Q vlan with this ID.
    Vlan(u16),
}

impl Kind {
    /// The kernel's name of the kind (`IFLA_INFO_KIND`).
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Macvlan(..) => "macvlan",
            Kind::Ipvlan(_) => "ipvlan",
            Kind::Vlan(_) => "vlan",
        }
    }
}

/// The namespace the master lives in: the container's when
/// `link_in_container`, else the node's.
pub fn master_ns(inv: &Invocation, link_in_container: bool) -> Result<Netns, Error> {
    if link_in_container {
        crate::iface::open_container(inv)
    } else {
        Ok(Netns::host()?)
    }
}

/// The link of the first default route of `ns`'s main table, as the
/// reference's `getDefaultRouteInterfaceName` (`no default route interface
/// found` when there is none).
pub fn default_route_link(ns: &Netns) -> Result<String, Error> {
    let routes = ns.routes(None, Some(254))?;
    for r in routes {
        if r.route.destination.prefix_len != 0 {
            continue;
        }
        if let Some(index) = r.route.link_index {
            let l = ns.link_by_index(index)?;
            return Ok(l.name);
        }
    }
    Err(Error::internal("no default route interface found"))
}

/// The master link `name` in `ns`, with the netlink library's error text
/// (`Link not found`), as the reference's config loading reports it.
pub fn lookup_master(ns: &Netns, name: &str) -> Result<LinkInfo, Error> {
    ns.link(name).map_err(|e| {
        if e.is_not_found() {
            Error::internal("Link not found")
        } else {
            Error::from(e)
        }
    })
}

/// Checks `mtu` against the master's, as the reference does
/// (`invalid MTU ⟨mtu⟩, must be [0, master MTU(⟨m⟩)]`); the MTU to ask
/// for (`None`: the kernel's default, the master's).
pub fn check_mtu(mtu: i64, master: &LinkInfo) -> Result<Option<u32>, Error> {
    if mtu < 0 || mtu > i64::from(master.mtu) {
        return Err(Error::internal(format!(
            "invalid MTU {mtu}, must be [0, master MTU({})]",
            master.mtu
        )));
    }
    Ok(u32::try_from(mtu).ok().filter(|m| *m > 0))
}

/// Creates the stacked link `ifname` in `container` on `master` (a link of
/// `master_ns`); returns its entry for the result (name, MAC, sandbox).
pub fn create(
    inv: &Invocation,
    container: &Netns,
    master_ns: &Netns,
    master: &LinkInfo,
    kind: Kind,
    options: &LinkOptions,
) -> Result<Interface, Error> {
    let ifname = &inv.env.ifname;
    let what = kind.name();
    let index = match kind {
        Kind::Macvlan(mode, None) => {
            container.create_macvlan(master_ns, master.index, ifname, mode, options)
        }
        Kind::Macvlan(mode, bc_queue_len) => container.create_macvlan_with(
            master_ns,
            master.index,
            ifname,
            mode,
            options,
            MacvlanOptions { bc_queue_len },
        ),
        Kind::Ipvlan(mode) => {
            container.create_ipvlan(master_ns, master.index, ifname, mode, options)
        }
        Kind::Vlan(id) => container.create_vlan(master_ns, master.index, ifname, id, options),
    }
    .map_err(|e| Error::internal(format!("failed to create {what}: {e}")))?;
    let link = container
        .link_by_index(index)
        .map_err(|e| Error::internal(format!("failed to refetch {what} {ifname:?}: {e}")))?;
    Ok(Interface {
        mac: mac::format(&link.mac),
        sandbox: inv.env.netns.clone(),
        ..Interface::new(ifname.clone())
    })
}

/// Sets `net.ipv4.conf.⟨ifname⟩.arp_notify` to 1 in `ns`, ignoring any
/// failure, as the reference does before configuring addresses.
pub fn arp_notify(ns: &Netns, ifname: &str) {
    let _ = ns.set_sysctl(&crate::iface::link_key("ipv4", ifname, "arp_notify"), "1");
}

/// CHECK's common part: the prevResult's entry for `CNI_IFNAME` in this
/// sandbox, the link of that name in `container`, of `kind`, with the
/// entry's MAC; then its addresses and routes.
pub fn check_interface(
    inv: &Invocation,
    container: &Netns,
    prev: &guest_sdk::cni::CniResult,
    kind: &str,
) -> Result<LinkInfo, Error> {
    let link = crate::check::interface(inv, container, prev, kind)?;
    crate::check::addresses_and_routes(container, &link, prev)?;
    Ok(link)
}

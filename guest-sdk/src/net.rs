//! Typed, safe wrappers over wasmcni's capability imports.
//!
//! Every call goes to the host, which checks it against the plugin's policy
//! and performs it. A failed call is a [`HostError`] that names the
//! operation, the object and the reason; it converts into a CNI error with
//! `?` inside a plugin's command functions.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bindings::wasmcni::plugin::{address, link, netns, route, sysctl};
use crate::cni::Error;

pub use crate::bindings::wasmcni::plugin::address::{AddressInfo, AddressOptions};
pub use crate::bindings::wasmcni::plugin::link::{
    BridgeOptions, DeviceSelector, IpvlanMode, LinkInfo, LinkOptions, MacvlanMode, OperState,
    PortVlan, TapOptions, VethPair,
};
pub use crate::bindings::wasmcni::plugin::netns::NetnsKind;
pub use crate::bindings::wasmcni::plugin::route::{Route, RouteInfo};
pub use crate::bindings::wasmcni::plugin::types::{
    ErrorCode, IpAddress, IpFamily, IpPrefix, Scope,
};

/// A failed host call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError {
    /// The WIT function, e.g. `link.set-up`.
    pub operation: &'static str,
    /// What it acted on, e.g. `lo in the container netns`.
    pub object: String,
    /// Why it failed.
    pub code: ErrorCode,
}

impl HostError {
    /// Whether the object did not exist.
    pub fn is_not_found(&self) -> bool {
        self.code == ErrorCode::NotFound
    }
}

fn describe(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::AccessDenied => "access denied by wasmcni policy",
        ErrorCode::LimitExceeded => "a wasmcni limit was exceeded",
        ErrorCode::NotFound => "not found",
        ErrorCode::AlreadyExists => "already exists",
        ErrorCode::InvalidArgument => "invalid argument",
        ErrorCode::Busy => "busy",
        ErrorCode::NotPermitted => "not permitted by the kernel",
        ErrorCode::NotSupported => "not supported by the kernel",
        ErrorCode::OutOfResources => "out of kernel resources",
        ErrorCode::AddressNotAvailable => "address not available",
        ErrorCode::Unreachable => "unreachable",
        ErrorCode::TryAgain => "temporarily unavailable, try again",
        ErrorCode::OutOfRange => "value out of range",
        ErrorCode::Other => "failed (see the wasmcni audit log for the errno)",
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.operation,
            self.object,
            describe(self.code)
        )
    }
}

impl std::error::Error for HostError {}

impl From<HostError> for Error {
    /// Host-call failures become code 999 ("internal"), as any untyped error
    /// does in the reference Go skel; the message names operation and object.
    fn from(e: HostError) -> Error {
        Error::internal(e.to_string())
    }
}

/// A network namespace the plugin was given.
///
/// # Capabilities
/// A handle by itself grants nothing; every operation on it is checked by
/// the host against the plugin's policy for this namespace.
pub struct Netns {
    inner: netns::Netns,
    kind: NetnsKind,
}

impl fmt::Debug for Netns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Netns").field("kind", &self.kind).finish()
    }
}

fn kind_name(kind: NetnsKind) -> &'static str {
    match kind {
        NetnsKind::Container => "the container netns",
        NetnsKind::Host => "the host netns",
    }
}

/// A veth pair as an error names it: both ends, each with its namespace
/// (the policy may refuse either side).
fn veth_object(name: &str, kind: NetnsKind, peer: &str, peer_kind: NetnsKind) -> String {
    format!(
        "veth {name:?} in {} with peer {peer:?} in {}",
        kind_name(kind),
        kind_name(peer_kind)
    )
}

impl Netns {
    /// The container's namespace (`CNI_NETNS`). Not found when the runtime
    /// gave none or, on DEL, it is already gone.
    pub fn container() -> Result<Netns, HostError> {
        netns::container()
            .map(|inner| Netns {
                inner,
                kind: NetnsKind::Container,
            })
            .map_err(|code| HostError {
                operation: "netns.container",
                object: "CNI_NETNS".into(),
                code,
            })
    }

    /// The node's namespace, if the plugin's policy grants any right there.
    pub fn host() -> Result<Netns, HostError> {
        netns::host()
            .map(|inner| Netns {
                inner,
                kind: NetnsKind::Host,
            })
            .map_err(|code| HostError {
                operation: "netns.host",
                object: "host netns".into(),
                code,
            })
    }

    /// Which namespace this is.
    pub fn kind(&self) -> NetnsKind {
        self.kind
    }

    fn err(
        &self,
        operation: &'static str,
        what: impl fmt::Display,
    ) -> impl FnOnce(ErrorCode) -> HostError {
        let object = format!("{what} in {}", kind_name(self.kind));
        move |code| HostError {
            operation,
            object,
            code,
        }
    }

    /// Looks a link up by name.
    pub fn link(&self, name: &str) -> Result<LinkInfo, HostError> {
        link::get_by_name(&self.inner, name)
            .map_err(self.err("link.get-by-name", format_args!("link {name:?}")))
    }

    /// Looks a link up by index.
    pub fn link_by_index(&self, index: u32) -> Result<LinkInfo, HostError> {
        link::get_by_index(&self.inner, index)
            .map_err(self.err("link.get-by-index", format_args!("link #{index}")))
    }

    /// Every link.
    pub fn links(&self) -> Result<Vec<LinkInfo>, HostError> {
        link::list(&self.inner).map_err(self.err("link.list", "links"))
    }

    /// The links a sysfs device path or PCI address names, sorted by name
    /// (host namespace only; `not-found` when the device, or its `net/`
    /// directory, does not exist).
    pub fn find_devices(&self, selector: &DeviceSelector) -> Result<Vec<LinkInfo>, HostError> {
        let what = match selector {
            DeviceSelector::KernelPath(p) => format!("device {p:?}"),
            DeviceSelector::PciAddress(a) => format!("PCI device {a:?}"),
        };
        link::find_devices(&self.inner, selector).map_err(self.err("link.find-devices", what))
    }

    /// Sets a link administratively up or down.
    pub fn set_link_up(&self, link: &LinkInfo, up: bool) -> Result<(), HostError> {
        link::set_up(&self.inner, link.index, up)
            .map_err(self.err("link.set-up", format_args!("link {:?}", link.name)))
    }

    /// Creates a veth pair: `name` here, `peer_name` born in `peer_ns`.
    pub fn create_veth(
        &self,
        name: &str,
        peer_ns: &Netns,
        peer_name: &str,
        options: &LinkOptions,
        peer_mac: Option<&[u8]>,
    ) -> Result<VethPair, HostError> {
        link::create_veth(
            &self.inner,
            name,
            &peer_ns.inner,
            peer_name,
            options,
            peer_mac,
        )
        .map_err(|code| HostError {
            operation: "link.create-veth",
            object: veth_object(name, self.kind, peer_name, peer_ns.kind),
            code,
        })
    }

    /// Creates a bridge; returns its index.
    pub fn create_bridge(
        &self,
        name: &str,
        options: &LinkOptions,
        bridge: BridgeOptions,
    ) -> Result<u32, HostError> {
        link::create_bridge(&self.inner, name, options, bridge)
            .map_err(self.err("link.create-bridge", format_args!("bridge {name:?}")))
    }

    /// Creates a dummy link; returns its index.
    pub fn create_dummy(&self, name: &str, options: &LinkOptions) -> Result<u32, HostError> {
        link::create_dummy(&self.inner, name, options)
            .map_err(self.err("link.create-dummy", format_args!("dummy {name:?}")))
    }

    /// Creates a persistent tap; returns its index.
    pub fn create_tap(
        &self,
        name: &str,
        options: &LinkOptions,
        tap: TapOptions,
    ) -> Result<u32, HostError> {
        link::create_tap(&self.inner, name, options, tap)
            .map_err(self.err("link.create-tap", format_args!("tap {name:?}")))
    }

    /// Creates a macvlan named `name` in this namespace on link `master`
    /// of `master_ns`; returns its index here.
    pub fn create_macvlan(
        &self,
        master_ns: &Netns,
        master: u32,
        name: &str,
        mode: MacvlanMode,
        options: &LinkOptions,
    ) -> Result<u32, HostError> {
        link::create_macvlan(&master_ns.inner, master, &self.inner, name, mode, options).map_err(
            self.err(
                "link.create-macvlan",
                format_args!(
                    "macvlan {name:?} on #{master} in {}",
                    kind_name(master_ns.kind)
                ),
            ),
        )
    }

    /// Creates an ipvlan named `name` here on `master` of `master_ns`.
    pub fn create_ipvlan(
        &self,
        master_ns: &Netns,
        master: u32,
        name: &str,
        mode: IpvlanMode,
        options: &LinkOptions,
    ) -> Result<u32, HostError> {
        link::create_ipvlan(&master_ns.inner, master, &self.inner, name, mode, options).map_err(
            self.err(
                "link.create-ipvlan",
                format_args!(
                    "ipvlan {name:?} on #{master} in {}",
                    kind_name(master_ns.kind)
                ),
            ),
        )
    }

    /// Creates vlan `vlan_id` named `name` here on `master` of `master_ns`.
    pub fn create_vlan(
        &self,
        master_ns: &Netns,
        master: u32,
        name: &str,
        vlan_id: u16,
        options: &LinkOptions,
    ) -> Result<u32, HostError> {
        link::create_vlan(
            &master_ns.inner,
            master,
            &self.inner,
            name,
            vlan_id,
            options,
        )
        .map_err(self.err(
            "link.create-vlan",
            format_args!(
                "vlan {name:?} on #{master} in {}",
                kind_name(master_ns.kind)
            ),
        ))
    }

    /// Moves link `index` from here to `target` (renamed if `new_name`);
    /// returns its index there.
    pub fn move_link(
        &self,
        index: u32,
        target: &Netns,
        new_name: Option<&str>,
    ) -> Result<u32, HostError> {
        link::move_to(&self.inner, index, &target.inner, new_name).map_err(self.err(
            "link.move-to",
            format_args!("link #{index} (to {})", kind_name(target.kind)),
        ))
    }

    /// The VLANs of bridge port `index`.
    pub fn port_vlans(&self, index: u32) -> Result<Vec<PortVlan>, HostError> {
        link::port_vlans(&self.inner, index)
            .map_err(self.err("link.port-vlans", format_args!("port #{index}")))
    }

    /// Makes the VLANs of bridge port `index` exactly `vlans`.
    pub fn set_port_vlans(&self, index: u32, vlans: &[PortVlan]) -> Result<(), HostError> {
        link::set_port_vlans(&self.inner, index, vlans)
            .map_err(self.err("link.set-port-vlans", format_args!("port #{index}")))
    }

    /// Hands link `index`, created by this call in the host namespace, to
    /// the network (shared by its attachments, like its bridge).
    pub fn share(&self, index: u32) -> Result<(), HostError> {
        link::share(&self.inner, index)
            .map_err(self.err("link.share", format_args!("link #{index}")))
    }

    /// Sets a link's MTU.
    pub fn set_mtu(&self, index: u32, mtu: u32) -> Result<(), HostError> {
        link::set_mtu(&self.inner, index, mtu)
            .map_err(self.err("link.set-mtu", format_args!("link #{index}")))
    }

    /// Sets a link's hardware address.
    pub fn set_mac(&self, index: u32, mac: &[u8]) -> Result<(), HostError> {
        link::set_mac(&self.inner, index, mac)
            .map_err(self.err("link.set-mac", format_args!("link #{index}")))
    }

    /// Enslaves a link to bridge `master`, or frees it.
    pub fn set_master(&self, index: u32, master: Option<u32>) -> Result<(), HostError> {
        link::set_master(&self.inner, index, master)
            .map_err(self.err("link.set-master", format_args!("link #{index}")))
    }

    /// Sets hairpin mode of a bridge port.
    pub fn set_hairpin(&self, index: u32, on: bool) -> Result<(), HostError> {
        link::set_hairpin(&self.inner, index, on)
            .map_err(self.err("link.set-hairpin", format_args!("link #{index}")))
    }

    /// Sets or clears promiscuous mode.
    pub fn set_promiscuous(&self, index: u32, on: bool) -> Result<(), HostError> {
        link::set_promiscuous(&self.inner, index, on)
            .map_err(self.err("link.set-promiscuous", format_args!("link #{index}")))
    }

    /// Renames a (down) link.
    pub fn set_name(&self, index: u32, name: &str) -> Result<(), HostError> {
        link::set_name(&self.inner, index, name)
            .map_err(self.err("link.set-name", format_args!("link #{index}")))
    }

    /// Sets a link's alias (container namespace only).
    pub fn set_alias(&self, index: u32, alias: &str) -> Result<(), HostError> {
        link::set_alias(&self.inner, index, alias)
            .map_err(self.err("link.set-alias", format_args!("link #{index}")))
    }

    /// Deletes a link.
    pub fn delete_link(&self, index: u32) -> Result<(), HostError> {
        link::delete(&self.inner, index)
            .map_err(self.err("link.delete", format_args!("link #{index}")))
    }

    /// Sets a link administratively up or down, by index.
    pub fn set_up(&self, index: u32, up: bool) -> Result<(), HostError> {
        link::set_up(&self.inner, index, up)
            .map_err(self.err("link.set-up", format_args!("link #{index}")))
    }

    /// Adds an address to link `index`.
    pub fn add_address(
        &self,
        index: u32,
        prefix: IpPrefix,
        options: AddressOptions,
    ) -> Result<(), HostError> {
        address::add(&self.inner, index, prefix, options).map_err(self.err(
            "address.add",
            format_args!("{} on link #{index}", cidr(&prefix)),
        ))
    }

    /// Deletes an address of link `index`.
    pub fn delete_address(&self, index: u32, prefix: IpPrefix) -> Result<(), HostError> {
        address::delete(&self.inner, index, prefix).map_err(self.err(
            "address.delete",
            format_args!("{} on link #{index}", cidr(&prefix)),
        ))
    }

    /// Sends a gratuitous ARP for `ip` from link `index`.
    pub fn announce(&self, index: u32, ip: IpAddress) -> Result<(), HostError> {
        address::announce(&self.inner, index, ip).map_err(self.err(
            "address.announce",
            format_args!("{} on link #{index}", to_ip(&ip)),
        ))
    }

    /// The routes of one family (or both) and one table (or all).
    pub fn routes(
        &self,
        family: Option<IpFamily>,
        table: Option<u32>,
    ) -> Result<Vec<RouteInfo>, HostError> {
        route::list(&self.inner, family, table).map_err(self.err("route.list", "routes"))
    }

    /// Adds a route.
    pub fn add_route(&self, r: &Route) -> Result<(), HostError> {
        route::add(&self.inner, *r).map_err(self.err(
            "route.add",
            format_args!("route to {}", cidr(&r.destination)),
        ))
    }

    /// Adds or replaces a route.
    pub fn replace_route(&self, r: &Route) -> Result<(), HostError> {
        route::replace(&self.inner, *r).map_err(self.err(
            "route.replace",
            format_args!("route to {}", cidr(&r.destination)),
        ))
    }

    /// Deletes a route.
    pub fn delete_route(&self, r: &Route) -> Result<(), HostError> {
        route::delete(&self.inner, *r).map_err(self.err(
            "route.delete",
            format_args!("route to {}", cidr(&r.destination)),
        ))
    }

    /// Reads a `net.` sysctl.
    pub fn sysctl(&self, key: &str) -> Result<String, HostError> {
        sysctl::get(&self.inner, key).map_err(self.err("sysctl.get", format_args!("sysctl {key}")))
    }

    /// Writes a `net.` sysctl.
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<(), HostError> {
        sysctl::set(&self.inner, key, value)
            .map_err(self.err("sysctl.set", format_args!("sysctl {key}")))
    }

    /// The addresses of one link (or all links), of one family (or both),
    /// in the kernel's order.
    pub fn addresses(
        &self,
        link: Option<&LinkInfo>,
        family: Option<IpFamily>,
    ) -> Result<Vec<AddressInfo>, HostError> {
        let what = match link {
            Some(l) => format!("addresses of {:?}", l.name),
            None => "addresses".to_owned(),
        };
        address::list(&self.inner, link.map(|l| l.index), family)
            .map_err(self.err("address.list", what))
    }
}

/// Converts a WIT address to `std`'s.
pub fn to_ip(a: &IpAddress) -> IpAddr {
    match *a {
        IpAddress::Ipv4((a, b, c, d)) => IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => {
            IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h))
        }
    }
}

/// Converts a `std` address to the WIT one.
pub fn from_ip(ip: IpAddr) -> IpAddress {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            IpAddress::Ipv4((o[0], o[1], o[2], o[3]))
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            IpAddress::Ipv6((s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]))
        }
    }
}

/// A WIT prefix of `ip/prefix_len`.
pub fn prefix(ip: IpAddr, prefix_len: u8) -> IpPrefix {
    IpPrefix {
        address: from_ip(ip),
        prefix_len,
    }
}

/// Formats a prefix as CIDR text, e.g. `127.0.0.1/8`.
pub fn cidr(p: &IpPrefix) -> String {
    format!("{}/{}", to_ip(&p.address), p.prefix_len)
}

/// A MAC address as `aa:bb:cc:dd:ee:ff` text.
pub fn mac_string(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_veth_error_names_both_namespaces() {
        let o = veth_object("eth0", NetnsKind::Container, "veth1", NetnsKind::Host);
        assert_eq!(
            o,
            "veth \"eth0\" in the container netns with peer \"veth1\" in the host netns"
        );
    }
}

//! Typed, safe wrappers over wasmcni's capability imports.
//!
//! Every call goes to the host, which checks it against the plugin's policy
//! and performs it. A failed call is a [`HostError`] that names the
//! operation, the object and the reason; it converts into a CNI error with
//! `?` inside a plugin's command functions.
//!
//! Start from [`Netns::container`] (or [`Netns::host`]): every other call
//! is a method of the namespace handle it acts in. A chained plugin can
//! start from [`Invocation::container_interface`](crate::skel::Invocation::container_interface),
//! which gives it the container namespace and its interface.
//!
//! # Addresses and prefixes
//! The WIT types ([`IpAddress`], [`IpPrefix`]) convert from and to `std`'s
//! with `From`/`Into`:
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use guest_sdk::net::{IpAddress, IpPrefix};
//!
//! let gw: IpAddress = Ipv4Addr::new(10, 1, 0, 1).into();
//! let p: IpPrefix = (IpAddr::from([10, 1, 0, 5]), 24).into();
//! assert_eq!(p.to_string(), "10.1.0.5/24");
//! assert_eq!(IpAddr::from(gw).to_string(), "10.1.0.1");
//! ```
//!
//! A [`cni::Cidr`](crate::cni::Cidr) from a result converts to an
//! [`IpPrefix`] the same way.
//!
//! # Options
//! [`LinkOptions`], [`AddressOptions`], [`BridgeOptions`] and
//! [`TapOptions`] implement `Default` (every field none or false: the
//! kernel's defaults). [`Route`] has no `Default`, since a route needs a
//! destination: start from [`Route::to`] or [`Route::default_via`] and set
//! the rest with struct-update syntax:
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use guest_sdk::net::{Route, Scope};
//!
//! let r = Route {
//!     link_index: Some(2),
//!     scope: Some(Scope::Link),
//!     ..Route::to((IpAddr::from([10, 1, 0, 0]), 24))
//! };
//! assert_eq!(r.destination.to_string(), "10.1.0.0/24");
//! let d = Route::default_via(Ipv4Addr::new(10, 1, 0, 1).into());
//! assert_eq!(d.destination.to_string(), "0.0.0.0/0");
//! ```
//!
//! # Two kinds of route
//! [`net::Route`](Route) (also named [`KernelRoute`]) is a route the kernel
//! holds, added with [`Netns::add_route`]; [`cni::Route`](crate::cni::Route)
//! (also named [`cni::ResultRoute`](crate::cni::ResultRoute)) is a route in
//! a CNI result, JSON the runtime reads. Import the aliases where a plugin
//! needs both; [`Route::from_result`] turns the second into the first.
//!
//! # Example: links and namespaces
//! ADD of a bridge-like plugin: a veth pair, `CNI_IFNAME` in the container
//! and `veth<8 hex>` on the node (the node end named as the grant's
//! `names` allow, `veth*` by default), the node's end on bridge `cni0`.
//! Needs `create: ["veth"]` in both namespaces, `create: ["bridge"]`,
//! `modify` and `read`. Every change is journaled: if ADD fails later, the
//! host undoes it.
//!
//! ```no_run
//! use guest_sdk::cni::{CniResult, Error, Interface};
//! use guest_sdk::net::{mac_string, BridgeOptions, ErrorCode, LinkOptions, Netns};
//! use guest_sdk::skel::Invocation;
//!
//! fn add(inv: &Invocation) -> Result<CniResult, Error> {
//!     let container = Netns::container()?; // CNI_NETNS
//!     let host = Netns::host()?; // needs a `host` grant in the plugin's entry
//!     let options = LinkOptions::default();
//!     match host.create_bridge("cni0", &options, BridgeOptions::default()) {
//!         Ok(_) => {}
//!         Err(e) if e.code == ErrorCode::AlreadyExists => {} // the network's, from an earlier ADD
//!         Err(e) => return Err(e.into()),
//!     }
//!     let bridge = host.link("cni0")?;
//!     let peer = format!("veth{}", inv.env.container_id.get(..8).unwrap_or("0"));
//!     let mtu = LinkOptions { mtu: Some(1450), ..LinkOptions::default() };
//!     // The peer is born in the node's namespace: no move, no window.
//!     let pair = container.create_veth(&inv.env.ifname, &host, &peer, &mtu, None)?;
//!     host.set_master(pair.peer_index, Some(bridge.index))?;
//!     host.set_up(pair.peer_index, true)?;
//!     if !bridge.up {
//!         host.set_up(bridge.index, true)?;
//!     }
//!     container.set_up(pair.index, true)?;
//!     let link = container.link_by_index(pair.index)?;
//!     Ok(CniResult {
//!         interfaces: vec![Interface {
//!             mac: mac_string(&link.mac),
//!             sandbox: inv.env.netns.clone(),
//!             ..Interface::new(link.name)
//!         }],
//!         ..CniResult::default()
//!     })
//! }
//! ```
//!
//! # Example: addresses
//! Puts an address (from the IPAM result) on the container's link and
//! reads back what the link has: `addresses` and `read` in the container
//! grant (`announce` for the gratuitous ARP).
//!
//! ```no_run
//! use guest_sdk::cni::{Cidr, Error, IpConfig};
//! use guest_sdk::net::{AddressOptions, IpFamily, IpPrefix, Netns};
//!
//! fn assign(container: &Netns, index: u32, ip: &IpConfig) -> Result<(), Error> {
//!     // The address as given (10.22.0.5/24), not masked; its prefix route too.
//!     let prefix = IpPrefix::from(ip.address);
//!     let options = AddressOptions { no_dad: true, ..AddressOptions::default() };
//!     container.add_address(index, prefix, options)?;
//!     container.announce(index, ip.address.addr().into())?;
//!     let link = container.link_by_index(index)?;
//!     let family = if ip.address.is_ipv4() { IpFamily::Ipv4 } else { IpFamily::Ipv6 };
//!     let has = container.addresses(Some(&link), Some(family))?;
//!     if !has.iter().any(|a| a.prefix == prefix) {
//!         return Err(Error::internal(format!("{prefix} is not on {}", link.name)));
//!     }
//!     Ok(())
//! }
//!
//! /// DEL: the address goes; not there is no error (DEL runs again).
//! fn unassign(container: &Netns, index: u32, address: Cidr) -> Result<(), Error> {
//!     match container.delete_address(index, address.into()) {
//!         Err(e) if e.is_not_found() => Ok(()),
//!         other => Ok(other?),
//!     }
//! }
//! ```
//!
//! # Example: routes
//! Add, list and delete (`routes` and `read` in the container grant). The
//! routes of a CNI result (a [`cni::Route`](crate::cni::Route) each) become
//! kernel routes through the interface with [`Route::from_result`]; a route
//! of your own starts from [`Route::to`] or [`Route::default_via`].
//! [`Netns::routes`] lists [`RouteInfo`]s: the [`Route`] and whether
//! wasmcni made it (`owned`).
//!
//! ```no_run
//! use std::net::Ipv4Addr;
//! use guest_sdk::cni::{CniResult, Error};
//! use guest_sdk::net::{IpFamily, IpPrefix, Netns, Route, RouteInfo};
//!
//! /// ADD: the result's routes through link `index`, then one to the
//! /// service network via the first IPv4 gateway.
//! fn add_routes(container: &Netns, index: u32, result: &CniResult) -> Result<(), Error> {
//!     let gateway = |v4: bool| {
//!         let ips = result.ips.iter().filter(|ip| ip.address.is_ipv4() == v4);
//!         ips.filter_map(|ip| ip.gateway).next()
//!     };
//!     for r in &result.routes {
//!         let mut route = Route::from_result(r, index);
//!         // A result route without `gw` goes via its family's gateway.
//!         if route.gateway.is_none() {
//!             route.gateway = gateway(r.dst.is_ipv4()).map(Into::into);
//!         }
//!         container.add_route(&route)?; // `already-exists` if an equal one is there
//!     }
//!     if let Some(gw) = gateway(true) {
//!         let services = Route {
//!             gateway: Some(gw.into()),
//!             link_index: Some(index),
//!             metric: Some(100),
//!             ..Route::to((Ipv4Addr::new(10, 96, 0, 0), 12))
//!         };
//!         // Adds it, or replaces the route of the same destination, table and metric.
//!         container.replace_route(&services)?;
//!     }
//!     Ok(())
//! }
//!
//! /// DEL: the route to the service network goes, if it is there.
//! fn del_routes(container: &Netns) -> Result<(), Error> {
//!     let services: IpPrefix = (Ipv4Addr::new(10, 96, 0, 0), 12).into();
//!     // The main table's IPv4 routes (`None`: every table).
//!     for RouteInfo { route, owned: _ } in container.routes(Some(IpFamily::Ipv4), Some(254))? {
//!         if route.destination == services {
//!             match container.delete_route(&route) {
//!                 Err(e) if e.is_not_found() => {} // gone meanwhile
//!                 other => other?,
//!             }
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Example: sysctls
//! Reads and writes `net.` settings: each key must match a pattern of the
//! grant's `sysctls` (here `"net.ipv6.conf.*.accept_ra"` in the container
//! grant and `"net.ipv4.ip_forward"` in the host grant; a node-wide key
//! only when a pattern names it literally). A write is journaled: a failed
//! ADD writes the old value back.
//!
//! ```no_run
//! use guest_sdk::cni::Error;
//! use guest_sdk::net::Netns;
//!
//! fn tune(container: &Netns, host: &Netns, ifname: &str) -> Result<(), Error> {
//!     // A `.` in a link name is a `/` in a sysctl key (as `sysctl -w` takes it).
//!     let key = format!("net.ipv6.conf.{}.accept_ra", ifname.replace('.', "/"));
//!     if container.sysctl(&key)?.trim() != "0" {
//!         container.set_sysctl(&key, "0")?;
//!     }
//!     host.set_sysctl("net.ipv4.ip_forward", "1")?;
//!     Ok(())
//! }
//! ```
//!
//! # Native builds
//! There is no wasmcni host in a native build (a plugin's `cargo test`).
//! The first host call a native test reaches, always
//! [`Netns::container`], [`Netns::host`], [`ipam::Store::open`](crate::ipam::Store::open)
//! or [`delegate::run`](crate::delegate::run) (every other call needs the
//! handle one of them returns), panics with a message naming the call and
//! saying how to run it under wasmcni: an ordinary test failure, which
//! `#[should_panic]` can expect. Keep the logic worth unit-testing in pure
//! functions.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bindings::wasmcni::plugin::{address, link, netns, route, sysctl};
use crate::cni::{Cidr, Error};

pub use crate::bindings::wasmcni::plugin::address::{AddressInfo, AddressOptions};
pub use crate::bindings::wasmcni::plugin::link::{
    BridgeOptions, DeviceSelector, IpvlanMode, LinkInfo, LinkOptions, MacvlanMode, MacvlanOptions,
    OperState, PortVlan, TapOptions, VethPair,
};
pub use crate::bindings::wasmcni::plugin::netns::NetnsKind;
pub use crate::bindings::wasmcni::plugin::route::{Route, Route as KernelRoute, RouteInfo, Rule};
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
        ErrorCode::Other => "failed (wasmcni gives the host's cause in this error's details)",
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
    pub(crate) inner: netns::Netns,
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
    #[cfg_attr(not(target_arch = "wasm32"), track_caller)]
    pub fn container() -> Result<Netns, HostError> {
        crate::require_host("netns.container");
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

    /// The node's namespace, if the plugin's policy grants any right there
    /// (`access-denied` otherwise: the entry has no `host` grant).
    #[cfg_attr(not(target_arch = "wasm32"), track_caller)]
    pub fn host() -> Result<Netns, HostError> {
        crate::require_host("netns.host");
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

    pub(crate) fn err(
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

    /// Creates a VRF device bound to routing table `table`; returns its
    /// index.
    pub fn create_vrf(
        &self,
        name: &str,
        table: u32,
        options: &LinkOptions,
    ) -> Result<u32, HostError> {
        link::create_vrf(&self.inner, name, table, options)
            .map_err(self.err("link.create-vrf", format_args!("vrf {name:?}")))
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

    /// [`Netns::create_macvlan`] with `macvlan` settings (its broadcast
    /// queue length).
    pub fn create_macvlan_with(
        &self,
        master_ns: &Netns,
        master: u32,
        name: &str,
        mode: MacvlanMode,
        options: &LinkOptions,
        macvlan: MacvlanOptions,
    ) -> Result<u32, HostError> {
        link::create_macvlan_with(
            &master_ns.inner,
            master,
            &self.inner,
            name,
            mode,
            options,
            macvlan,
        )
        .map_err(self.err(
            "link.create-macvlan-with",
            format_args!(
                "macvlan {name:?} on #{master} in {}",
                kind_name(master_ns.kind)
            ),
        ))
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

    /// Isolates a bridge port, or frees it (`IFLA_BRPORT_ISOLATED`): an
    /// isolated port exchanges frames only with ports that are not.
    pub fn set_port_isolated(&self, index: u32, on: bool) -> Result<(), HostError> {
        link::set_port_isolated(&self.inner, index, on)
            .map_err(self.err("link.set-port-isolated", format_args!("link #{index}")))
    }

    /// Sets or clears promiscuous mode.
    pub fn set_promiscuous(&self, index: u32, on: bool) -> Result<(), HostError> {
        link::set_promiscuous(&self.inner, index, on)
            .map_err(self.err("link.set-promiscuous", format_args!("link #{index}")))
    }

    /// Sets or clears all-multicast mode (`IFF_ALLMULTI`).
    pub fn set_allmulticast(&self, index: u32, on: bool) -> Result<(), HostError> {
        link::set_allmulticast(&self.inner, index, on)
            .map_err(self.err("link.set-allmulticast", format_args!("link #{index}")))
    }

    /// Sets the transmit queue length.
    pub fn set_txqlen(&self, index: u32, txqlen: u32) -> Result<(), HostError> {
        link::set_txqlen(&self.inner, index, txqlen)
            .map_err(self.err("link.set-txqlen", format_args!("link #{index}")))
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

    /// The to-table policy routing rules (`ip rule`), of one family or
    /// both.
    pub fn rules(&self, family: Option<IpFamily>) -> Result<Vec<Rule>, HostError> {
        route::list_rules(&self.inner, family).map_err(self.err("route.list-rules", "rules"))
    }

    /// Takes the namespace's routing-table lock and holds it to the end of
    /// the invocation: call it before listing the rules, routes or links
    /// from which the plugin chooses a table (the first unused one), so
    /// that a concurrent ADD in this namespace (another interface of the
    /// container) does not choose the same. Needs the right to add rules
    /// (`routes` in the container namespace) or to create VRFs here; a
    /// second call does nothing, and so does a call in CHECK or GC. Fails
    /// with `try-again` if another invocation holds it to the deadline.
    pub fn lock_tables(&self) -> Result<(), HostError> {
        route::lock_tables(&self.inner).map_err(self.err("route.lock-tables", "routing tables"))
    }

    /// Adds a policy routing rule (`routes` in the container namespace).
    pub fn add_rule(&self, r: &Rule) -> Result<(), HostError> {
        route::add_rule(&self.inner, *r)
            .map_err(self.err("route.add-rule", format_args!("rule to table {}", r.table)))
    }

    /// Deletes the first policy routing rule that matches `r`.
    pub fn delete_rule(&self, r: &Rule) -> Result<(), HostError> {
        route::delete_rule(&self.inner, *r).map_err(self.err(
            "route.delete-rule",
            format_args!("rule to table {}", r.table),
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

/// Converts a WIT address to `std`'s (as `IpAddr::from`).
pub fn to_ip(a: &IpAddress) -> IpAddr {
    match *a {
        IpAddress::Ipv4((a, b, c, d)) => IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => {
            IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h))
        }
    }
}

/// Converts a `std` address to the WIT one (as `IpAddress::from`).
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

/// A WIT prefix of `ip/prefix_len` (as `IpPrefix::from((ip, prefix_len))`).
/// The length is not checked here; the host refuses one above 32 (IPv4)
/// or 128 (IPv6) with `invalid-argument`.
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

impl From<IpAddr> for IpAddress {
    fn from(ip: IpAddr) -> IpAddress {
        from_ip(ip)
    }
}

impl From<Ipv4Addr> for IpAddress {
    fn from(ip: Ipv4Addr) -> IpAddress {
        from_ip(IpAddr::V4(ip))
    }
}

impl From<Ipv6Addr> for IpAddress {
    fn from(ip: Ipv6Addr) -> IpAddress {
        from_ip(IpAddr::V6(ip))
    }
}

impl From<IpAddress> for IpAddr {
    fn from(a: IpAddress) -> IpAddr {
        to_ip(&a)
    }
}

impl From<&IpAddress> for IpAddr {
    fn from(a: &IpAddress) -> IpAddr {
        to_ip(a)
    }
}

impl fmt::Display for IpAddress {
    /// As `std`'s `IpAddr` shows it (`10.0.0.1`, `fd00::1`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        to_ip(self).fmt(f)
    }
}

impl<A: Into<IpAddr>> From<(A, u8)> for IpPrefix {
    /// `(address, prefix length)`; the length is checked by the host.
    fn from((ip, prefix_len): (A, u8)) -> IpPrefix {
        prefix(ip.into(), prefix_len)
    }
}

impl From<Cidr> for IpPrefix {
    /// The address as given (not masked) and its prefix length.
    fn from(c: Cidr) -> IpPrefix {
        prefix(c.addr(), c.prefix_len())
    }
}

impl From<&Cidr> for IpPrefix {
    fn from(c: &Cidr) -> IpPrefix {
        prefix(c.addr(), c.prefix_len())
    }
}

impl fmt::Display for IpPrefix {
    /// CIDR text, e.g. `10.0.0.2/24`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", to_ip(&self.address), self.prefix_len)
    }
}

impl Default for LinkOptions {
    /// No MTU, MAC or queue length: the kernel's defaults for the kind.
    fn default() -> LinkOptions {
        LinkOptions {
            mtu: None,
            mac: None,
            txqlen: None,
        }
    }
}

impl Default for AddressOptions {
    /// Duplicate address detection on, the prefix route added, scope
    /// `universe`: what `ip addr add` does.
    fn default() -> AddressOptions {
        AddressOptions {
            no_dad: false,
            no_prefix_route: false,
            scope: None,
        }
    }
}

impl Default for BridgeOptions {
    /// No VLAN filtering.
    fn default() -> BridgeOptions {
        BridgeOptions {
            vlan_filtering: false,
        }
    }
}

impl Default for TapOptions {
    /// Single queue, no owner, no group.
    fn default() -> TapOptions {
        TapOptions {
            multi_queue: false,
            owner: None,
            group: None,
        }
    }
}

impl Route {
    /// A directly connected route to `destination` in the main table,
    /// with nothing else set: no gateway, link, metric, scope (the host
    /// picks `link` without a gateway, `universe` with one), source or MTU.
    pub fn to(destination: impl Into<IpPrefix>) -> Route {
        Route {
            destination: destination.into(),
            gateway: None,
            link_index: None,
            table: None,
            metric: None,
            scope: None,
            source: None,
            mtu: None,
            on_link: false,
            protocol: None,
        }
    }

    /// The default route of `gateway`'s family (`0.0.0.0/0` or `::/0`)
    /// through `gateway`.
    pub fn default_via(gateway: IpAddress) -> Route {
        let any = match gateway {
            IpAddress::Ipv4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddress::Ipv6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        Route {
            gateway: Some(gateway),
            ..Route::to((any, 0))
        }
    }

    /// The kernel route for route `r` of a CNI result, through link
    /// `link_index`: destination, gateway, table, priority (as the metric),
    /// MTU and scope (0, 200, 253, 254, 255; any other value is left to the
    /// host). A result route without `gw` means "via the interface's
    /// gateway" in CNI: fill [`gateway`](Route::gateway) in from the
    /// result's `ips` where that is meant.
    pub fn from_result(r: &crate::cni::Route, link_index: u32) -> Route {
        Route {
            gateway: r.gw.map(IpAddress::from),
            link_index: Some(link_index),
            table: r.table.filter(|&t| t != 0),
            metric: r.priority.filter(|&p| p != 0),
            scope: r.scope.and_then(|s| match s {
                0 => Some(Scope::Universe),
                200 => Some(Scope::Site),
                253 => Some(Scope::Link),
                254 => Some(Scope::Host),
                255 => Some(Scope::Nowhere),
                _ => None,
            }),
            mtu: r.mtu.filter(|&m| m != 0),
            ..Route::to(r.dst)
        }
    }
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
    fn std_addresses_convert_both_ways() {
        let v4 = Ipv4Addr::new(192, 0, 2, 7);
        let v6: Ipv6Addr = "fd00::1:2".parse().unwrap();
        assert_eq!(IpAddress::from(v4), IpAddress::Ipv4((192, 0, 2, 7)));
        assert_eq!(
            IpAddress::from(v6),
            IpAddress::Ipv6((0xfd00, 0, 0, 0, 0, 0, 1, 2))
        );
        for ip in [IpAddr::V4(v4), IpAddr::V6(v6)] {
            let wit: IpAddress = ip.into();
            assert_eq!(IpAddr::from(wit), ip);
            assert_eq!(IpAddr::from(&wit), ip);
            assert_eq!(wit.to_string(), ip.to_string());
        }
        let p: IpPrefix = (v6, 64).into();
        assert_eq!(p.to_string(), "fd00::1:2/64");
        let c = Cidr::new(IpAddr::V4(v4), 24).unwrap();
        assert_eq!(IpPrefix::from(c), prefix(IpAddr::V4(v4), 24));
        assert_eq!(cidr(&IpPrefix::from(&c)), "192.0.2.7/24");
    }

    #[test]
    fn options_default_to_the_kernel_defaults() {
        assert_eq!(LinkOptions::default().mtu, None);
        let a = AddressOptions::default();
        assert!(!a.no_dad && !a.no_prefix_route && a.scope.is_none());
        assert!(!BridgeOptions::default().vlan_filtering);
        assert!(!TapOptions::default().multi_queue);
    }

    #[test]
    fn routes_start_from_a_destination() {
        let r = Route::to((Ipv4Addr::new(10, 0, 0, 0), 8));
        assert_eq!(r.destination.to_string(), "10.0.0.0/8");
        assert!(r.gateway.is_none() && r.link_index.is_none() && !r.on_link);
        let d = Route::default_via("fd00::1".parse::<Ipv6Addr>().unwrap().into());
        assert_eq!(d.destination.to_string(), "::/0");
        assert_eq!(d.gateway.map(IpAddr::from), "fd00::1".parse().ok());

        let mut res = crate::cni::ResultRoute::new(Cidr::new([10, 2, 0, 0].into(), 16).unwrap());
        res.gw = Some([10, 1, 0, 1].into());
        res.priority = Some(0);
        res.table = Some(100);
        res.scope = Some(253);
        let k: KernelRoute = Route::from_result(&res, 3);
        assert_eq!(k.destination.to_string(), "10.2.0.0/16");
        assert_eq!(
            k.gateway.map(|g| g.to_string()).as_deref(),
            Some("10.1.0.1")
        );
        assert_eq!(
            (k.link_index, k.table, k.metric, k.scope),
            (Some(3), Some(100), None, Some(Scope::Link))
        );
    }

    /// Friction 6: a native test that reaches a host call fails with a
    /// message, not an abort (SIGABRT) inside wit-bindgen's stand-in.
    #[test]
    #[should_panic(
        expected = "`netns.container` is a call to the wasmcni host, and this is a native build"
    )]
    fn a_host_call_in_a_native_test_panics_with_a_message() {
        let _ = Netns::container();
    }

    #[test]
    fn every_way_to_the_host_panics_natively_and_says_what_to_do() {
        let calls: [(&str, fn()); 4] = [
            ("netns.container", || drop(Netns::container())),
            ("netns.host", || drop(Netns::host())),
            ("ipam-store.open", || drop(crate::ipam::Store::open(None))),
            ("delegate.run", || {
                drop(crate::delegate::run(
                    "host-local",
                    crate::cni::Command::Add,
                    b"{}",
                ))
            }),
        ];
        for (name, call) in calls {
            let payload = std::panic::catch_unwind(call).expect_err(name);
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            assert!(msg.contains(&format!("`{name}`")), "{name}: {msg}");
            assert!(msg.contains("wasmcni try"), "{name}: {msg}");
        }
    }

    #[test]
    fn a_veth_error_names_both_namespaces() {
        let o = veth_object("eth0", NetnsKind::Container, "veth1", NetnsKind::Host);
        assert_eq!(
            o,
            "veth \"eth0\" in the container netns with peer \"veth1\" in the host netns"
        );
    }
}

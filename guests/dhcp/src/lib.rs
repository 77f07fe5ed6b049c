//! The CNI `dhcp` IPAM plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins v1.9.1,
//! `plugins/ipam/dhcp`): ADD obtains a DHCPv4 lease for `CNI_IFNAME` in
//! the container namespace and returns its address, the router as the
//! gateway, and its routes (option 121's if the server sent them, else
//! option 33's and a default route through the router); DEL releases it;
//! CHECK asks for the lease held. The long-running part, which renews the
//! lease for as long as the container lives, is wasmcni's DHCP daemon
//! (`wasmcni dhcp-daemon`), reached through the host (the `dhcp`
//! capability): this plugin names no socket of its own choosing, no
//! namespace and no client (the host hands the daemon the container's
//! namespace and the attachment's client identifier).
//!
//! Where this deliberately differs from the reference: the interface is
//! brought up by the plugin (through the host, journaled) rather than by
//! the daemon; `daemonSocketPath` may only repeat the socket the policy
//! grants; an exchange that gets no answer fails within the daemon's
//! timeout (10 s by default; the reference retries for 208 s); GC and
//! STATUS succeed.
mod config;

use guest_sdk::cni::{Cidr, CniResult, Error, IpConfig, Route};
use guest_sdk::dhcp::{self, Lease};
use guest_sdk::net::Netns;
use guest_sdk::skel::{self, Invocation, Plugin};
use std::net::{IpAddr, Ipv4Addr};

use crate::config::DhcpConfig;

/// RT_SCOPE_LINK.
const SCOPE_LINK: u8 = 253;

/// The ADD result of `lease`, as the reference builds it.
fn result(lease: &Lease, conf: &DhcpConfig) -> Result<CniResult, Error> {
    let ip = |a: &guest_sdk::net::IpAddress| IpAddr::from(a);
    let address = Cidr::new(ip(&lease.address.address), lease.address.prefix_len)?;
    let gateway = lease.router.as_ref().map(ip);
    let mut routes: Vec<Route> = Vec::new();
    for r in &lease.routes {
        let mut route = Route::new(Cidr::new(
            ip(&r.destination.address),
            r.destination.prefix_len,
        )?);
        route.gw = Some(
            r.gateway
                .as_ref()
                .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), ip),
        );
        route.scope = r.gateway.is_none().then_some(SCOPE_LINK);
        routes.push(route);
    }
    // RFC 3442: with classless routes, the router gives no default route.
    if !lease.classless {
        if let Some(gw) = gateway {
            let mut route = Route::new(Cidr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)?);
            route.gw = Some(gw);
            routes.push(route);
        }
    }
    if conf.priority != 0 {
        for r in &mut routes {
            r.priority = Some(conf.priority);
        }
    }
    Ok(CniResult {
        interfaces: Vec::new(),
        ips: vec![IpConfig {
            interface: None,
            address,
            gateway,
        }],
        routes,
        dns: Default::default(),
    })
}

struct Dhcp;

impl Plugin for Dhcp {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let conf = config::load(&inv.conf, &inv.env.args)?;
        // The daemon sends from the interface: it must be up (the
        // reference's daemon brings it up itself).
        let ns = Netns::container().map_err(|e| {
            Error::internal(format!("failed to open netns {:?}: {e}", inv.env.netns))
        })?;
        let ifname = &inv.env.ifname;
        let link = ns
            .link(ifname)
            .map_err(|e| Error::internal(format!("failed to find interface {ifname:?}: {e}")))?;
        if !link.up {
            ns.set_up(link.index, true)
                .map_err(|e| Error::internal(format!("failed to set {ifname:?} UP: {e}")))?;
        }
        let lease = dhcp::acquire(&conf.lease_request())
            .map_err(|e| Error::internal(format!("error calling DHCP.Allocate: {e}")))?;
        result(&lease, &conf)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let conf = config::load(&inv.conf, &inv.env.args)?;
        dhcp::current(conf.socket.as_deref())
            .map_err(|e| Error::internal(format!("error calling DHCP.Allocate: {e}")))?;
        Ok(())
    }

    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        let conf = config::load(&inv.conf, &inv.env.args)?;
        dhcp::release(conf.socket.as_deref())
            .map_err(|e| Error::internal(format!("error calling DHCP.Release: {e}")))
    }

    /// Not ready (50) while no daemon listens on the socket: no ADD could
    /// get a lease (the reference's STATUS says nothing of its daemon).
    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        let conf = config::load(&inv.conf, &inv.env.args)?;
        match dhcp::listening(conf.socket.as_deref()) {
            Ok(()) => Ok(()),
            Err(dhcp::DhcpError::Failed(m)) => Err(Error::not_ready(format!(
                "the DHCP daemon is not running: {m}"
            ))),
            Err(e) => Err(e.into()),
        }
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `dhcp`).
pub fn main() -> ! {
    skel::run(Dhcp, "CNI dhcp plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest_sdk::dhcp::LeaseRoute;
    use guest_sdk::net::{IpAddress, IpPrefix};

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddress {
        IpAddress::Ipv4((a, b, c, d))
    }

    fn lease(routes: Vec<LeaseRoute>, classless: bool) -> Lease {
        Lease {
            address: IpPrefix {
                address: v4(10, 9, 0, 50),
                prefix_len: 24,
            },
            router: Some(v4(10, 9, 0, 1)),
            routes,
            classless,
            dns: vec![],
            server: v4(10, 9, 0, 1),
            lease_seconds: 120,
        }
    }

    #[test]
    fn the_router_is_the_gateway_and_the_default_route() {
        let r = result(&lease(vec![], false), &DhcpConfig::default()).expect("result");
        assert_eq!(r.ips[0].address.to_string(), "10.9.0.50/24");
        assert_eq!(r.ips[0].gateway, Some("10.9.0.1".parse().unwrap()));
        assert_eq!(r.routes.len(), 1);
        assert_eq!(r.routes[0].dst.to_string(), "0.0.0.0/0");
    }

    #[test]
    fn classless_routes_replace_the_default_and_on_link_ones_have_link_scope() {
        let routes = vec![
            LeaseRoute {
                destination: IpPrefix {
                    address: v4(10, 17, 0, 0),
                    prefix_len: 16,
                },
                gateway: Some(v4(10, 9, 0, 2)),
            },
            LeaseRoute {
                destination: IpPrefix {
                    address: v4(192, 168, 5, 0),
                    prefix_len: 24,
                },
                gateway: None,
            },
        ];
        let conf = DhcpConfig {
            priority: 50,
            ..DhcpConfig::default()
        };
        let r = result(&lease(routes, true), &conf).expect("result");
        assert_eq!(r.routes.len(), 2);
        assert_eq!(r.routes[1].scope, Some(SCOPE_LINK));
        assert_eq!(r.routes[1].gw, Some("0.0.0.0".parse().unwrap()));
        assert!(r.routes.iter().all(|r| r.priority == Some(50)));
    }
}

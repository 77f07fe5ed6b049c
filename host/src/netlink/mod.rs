//! Netlink, by family: [`route`] (rtnetlink: links, addresses, routes,
//! neighbours, namespace ids) today; netfilter and traffic control will
//! sit beside it, each over its own socket.

pub mod bridge_vlan;
pub mod route;
pub mod rule;
pub mod tc;

pub use bridge_vlan::PortVlan;
pub use route::*;
pub use rule::RuleSpec;

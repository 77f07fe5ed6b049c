//! Netlink, by family: [`route`] (rtnetlink: links, addresses, routes,
//! neighbours, namespace ids), [`tc`] (traffic control) and [`nft`]
//! (nftables, over a netfilter socket the process keeps: [`nfsock`]).

pub mod bridge_vlan;
pub mod conntrack;
mod fds;
mod fib;
pub mod nfsock;
pub mod nft;
mod raw;
pub mod route;
pub mod rule;
pub mod tc;

pub use bridge_vlan::PortVlan;
pub use route::*;
pub use rule::RuleSpec;

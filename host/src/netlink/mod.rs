//! Netlink, by family: [`route`] (rtnetlink: links, addresses, routes,
//! neighbours, namespace ids) today; netfilter and traffic control will
//! sit beside it, each over its own socket.

pub mod route;

pub use route::*;

//! A small typed, synchronous rtnetlink (`NETLINK_ROUTE`) client.
//!
//! Why synchronous (and not `rtnetlink`'s async API): every host call a
//! plugin makes is synchronous, one at a time, and every CNI invocation is a
//! fresh process, so start-up is the hot path. A blocking socket needs no
//! async runtime and no extra threads; `netlink-packet-route` still gives us
//! typed messages. The socket is created inside the namespace it acts on
//! ([`NetNs::run_inside`](crate::netns::NetNs::run_inside)) and stays
//! bound to it.
//!
//! By object, one file each: the socket (`socket.rs`) and its failure
//! (`error.rs`), how answers are parsed (`decode.rs`), the link answers
//! kept (`cache.rs`), links (`link.rs`, `link_delete.rs`), bridge ports
//! (`bridge_port.rs`), IPv4 settings (`inet_conf.rs`), addresses
//! (`address.rs`), routes (`routes.rs`), neighbours (`neighbour.rs`) and
//! namespace ids (`nsid.rs`).

mod address;
mod bridge_port;
pub(crate) mod cache;
mod decode;
pub(crate) mod error;
mod inet_conf;
mod link;
mod link_delete;
mod neighbour;
mod nsid;
mod routes;
pub(crate) mod socket;
#[cfg(test)]
pub(super) mod tests;

pub use address::{address_flags, address_of, AddrFlags, AddrSpec};
pub use bridge_port::PortOptions;
pub use cache::note_change;
pub use error::NlError;
pub use inet_conf::InetConf;
pub use link::{LinkOpts, SubKind};
pub use routes::{route_uses_link, RouteAdd, RouteKey, RouteSpec};
pub use socket::Netlink;

pub(super) use address::family_of;
pub(super) use link::check_index;

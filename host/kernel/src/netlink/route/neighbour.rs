//! Neighbours: the permanent entries of a link, which the kernel drops
//! when the link goes down or moves.

use netlink_packet_core::NLM_F_DUMP;
use netlink_packet_route::neighbour::{NeighbourMessage, NeighbourState};
use netlink_packet_route::RouteNetlinkMessage;

use super::error::NlError;
use super::socket::Netlink;

impl Netlink {
    /// How many permanent neighbour entries (`ip neigh ... nud permanent`)
    /// link `index` has: the kernel drops them when the link goes down or
    /// moves.
    pub fn permanent_neighbours(&mut self, index: u32) -> Result<usize, NlError> {
        let answers = self.request(
            RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()),
            NLM_F_DUMP,
        )?;
        Ok(answers
            .iter()
            .filter(|m| {
                matches!(m, RouteNetlinkMessage::NewNeighbour(n)
                    if n.header.ifindex == index && n.header.state == NeighbourState::Permanent)
            })
            .count())
    }
}

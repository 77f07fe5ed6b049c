//! Namespace ids: the id this namespace gives another (`RTM_GETNSID`).

use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::error::NlError;
use super::socket::Netlink;

impl Netlink {
    /// The id this namespace gives namespace `other` (`RTM_GETNSID` with
    /// `NETNSA_FD`): how `IFLA_LINK_NETNSID` names it here. `None` if it
    /// has none.
    pub fn nsid_of(&mut self, other: BorrowedFd<'_>) -> Result<Option<i32>, NlError> {
        let fd = u32::try_from(other.as_raw_fd()).map_err(|_| NlError::Kernel(libc::EBADF))?;
        let mut msg = NsidMessage::default();
        msg.attributes.push(NsidAttribute::Fd(fd));
        let answers = self.request(RouteNetlinkMessage::GetNsId(msg), 0)?;
        Ok(answers.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewNsId(n) => n.attributes.into_iter().find_map(|a| match a {
                NsidAttribute::Id(id) if id >= 0 => Some(id),
                _ => None,
            }),
            _ => None,
        }))
    }
}

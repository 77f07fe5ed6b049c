//! `wasmcni:plugin/link`.

use netlink_packet_route::link::{
    LinkAttribute, LinkFlags, LinkInfo as NlInfo, LinkMessage, State,
};
use wasmtime::component::Resource;

use super::bindings::wasmcni::plugin::link::{Host, LinkInfo, OperState};
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::{CapError, NsHandle, StoreData};

/// A valid Linux interface name: 1..=15 bytes, none of `/`, `:`, whitespace
/// or NUL, not `.` or `..`.
pub(crate) fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
}

fn to_info(msg: LinkMessage) -> LinkInfo {
    let mut info = LinkInfo {
        index: msg.header.index,
        name: String::new(),
        kind: None,
        mtu: 0,
        mac: Vec::new(),
        up: msg.header.flags.contains(LinkFlags::Up),
        loopback: msg.header.flags.contains(LinkFlags::Loopback),
        oper_state: OperState::Unknown,
        master: None,
        alias: None,
    };
    for attr in msg.attributes {
        match attr {
            LinkAttribute::IfName(n) => info.name = n,
            LinkAttribute::Mtu(m) => info.mtu = m,
            LinkAttribute::Address(a) => info.mac = a,
            LinkAttribute::Controller(m) => info.master = Some(m),
            LinkAttribute::IfAlias(a) => info.alias = Some(a),
            LinkAttribute::OperState(s) => {
                info.oper_state = match s {
                    State::NotPresent => OperState::NotPresent,
                    State::Down => OperState::Down,
                    State::LowerLayerDown => OperState::LowerLayerDown,
                    State::Testing => OperState::Testing,
                    State::Dormant => OperState::Dormant,
                    State::Up => OperState::Up,
                    _ => OperState::Unknown,
                }
            }
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let NlInfo::Kind(k) = i {
                        info.kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    info
}

impl Host for StoreData {
    fn get_by_name(&mut self, ns: Resource<NsHandle>, name: String) -> Result<LinkInfo, CapError> {
        let kind = self.ns_kind(&ns)?;
        if !self.caps.ns_grant(kind).read {
            return Err(ErrorCode::AccessDenied.into());
        }
        if !valid_ifname(&name) {
            return Err(ErrorCode::InvalidArgument.into());
        }
        let nl = self.caps.netlink(kind)?;
        nl.link_by_name(&name)
            .map(to_info)
            .map_err(|e| CapError::from(&e))
    }

    fn get_by_index(&mut self, ns: Resource<NsHandle>, index: u32) -> Result<LinkInfo, CapError> {
        let kind = self.ns_kind(&ns)?;
        if !self.caps.ns_grant(kind).read {
            return Err(ErrorCode::AccessDenied.into());
        }
        if index == 0 {
            return Err(ErrorCode::NotFound.into());
        }
        let nl = self.caps.netlink(kind)?;
        nl.link_by_index(index)
            .map(to_info)
            .map_err(|e| CapError::from(&e))
    }

    fn list(&mut self, ns: Resource<NsHandle>) -> Result<Vec<LinkInfo>, CapError> {
        let kind = self.ns_kind(&ns)?;
        if !self.caps.ns_grant(kind).read {
            return Err(ErrorCode::AccessDenied.into());
        }
        let nl = self.caps.netlink(kind)?;
        let links = nl.links().map_err(|e| CapError::from(&e))?;
        Ok(links.into_iter().map(to_info).collect())
    }

    fn set_up(&mut self, ns: Resource<NsHandle>, index: u32, up: bool) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        if !self.caps.ns_grant(kind).link_state {
            return Err(ErrorCode::AccessDenied.into());
        }
        if index == 0 {
            return Err(ErrorCode::NotFound.into());
        }
        let nl = self.caps.netlink(kind)?;
        nl.set_link_up(index, up).map_err(|e| CapError::from(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::valid_ifname;

    #[test]
    fn interface_names() {
        assert!(valid_ifname("eth0"));
        assert!(valid_ifname("a23456789012345"));
        assert!(!valid_ifname("a234567890123456"));
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "a\0b",
            "a\u{2003}b",
        ] {
            assert!(!valid_ifname(bad), "{bad:?}");
        }
    }
}

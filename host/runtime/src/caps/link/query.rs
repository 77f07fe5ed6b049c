//! Looking links up (`link.get-by-name`, `get-by-index`, `list`,
//! `find-devices`): what a plugin may read, each link marked as the
//! attachment's own or not.

use super::arguments::{check_name, valid_ifname};
use crate::caps::bindings::wasmcni::plugin::link::{DeviceSelector, LinkInfo};
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::{CapError, Link};
use crate::caps::ctx::Ctx;
use crate::netns::Kind;

impl Ctx {
    fn with_owned(&self, kind: Kind, mut l: Link) -> Link {
        l.owned = kind == Kind::Host && self.owned(&l);
        l
    }

    /// The link named `name` in a namespace the plugin may read.
    pub(super) fn link_info_by_name(
        &mut self,
        kind: Kind,
        name: &str,
    ) -> Result<LinkInfo, CapError> {
        check_name(name)?;
        let msg = self.netlink(kind)?.link_by_name(name)?;
        Ok(self.with_owned(kind, LinkInfo::from_message(msg)))
    }

    /// Link `index` of a namespace the plugin may read.
    pub(super) fn link_info_by_index(
        &mut self,
        kind: Kind,
        index: u32,
    ) -> Result<LinkInfo, CapError> {
        let l = self.link(kind, index)?;
        Ok(self.with_owned(kind, l))
    }

    /// Every link of a namespace the plugin may read.
    pub(super) fn link_infos(&mut self, kind: Kind) -> Result<Vec<LinkInfo>, CapError> {
        let links = self.netlink(kind)?.links()?;
        Ok(links
            .into_iter()
            .map(|m| self.with_owned(kind, LinkInfo::from_message(m)))
            .collect())
    }

    /// The host links of the device a selector names (a kernel path, a PCI address).
    pub(super) fn find_device_links(
        &mut self,
        kind: Kind,
        selector: &DeviceSelector,
    ) -> Result<Vec<LinkInfo>, CapError> {
        if kind != Kind::Host {
            return Err(ErrorCode::NotSupported.into());
        }
        let names = match selector {
            DeviceSelector::KernelPath(p) => crate::devices::of_kernel_path(p),
            DeviceSelector::PciAddress(a) => crate::devices::of_pci_address(a),
        }
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput => CapError::Code(ErrorCode::InvalidArgument),
            std::io::ErrorKind::NotFound => CapError::Code(ErrorCode::NotFound),
            _ => CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO)),
        })?;
        let mut out = Vec::new();
        for name in names.iter().filter(|n| valid_ifname(n)) {
            match self.netlink(kind)?.link_by_name(name) {
                Ok(msg) => out.push(self.with_owned(kind, LinkInfo::from_message(msg))),
                Err(e) if e.errno() == libc::ENODEV => {}
                Err(e) => return Err(CapError::from(&e)),
            }
        }
        Ok(out)
    }
}

//! The arguments of the `link` calls: the checks a call makes of a name,
//! a hardware address or link options before it asks anything of the
//! kernel, and how the arguments read in the audit record.

use serde_json::Value;

use crate::caps::args::{fields, AuditArg};
use crate::caps::bindings::wasmcni::plugin::link::{
    BridgeOptions, DeviceSelector, LinkOptions, PortVlan, TapOptions,
};
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::CapError;
use crate::netlink::LinkOpts;

/// The longest hardware address accepted (`MAX_ADDR_LEN`).
const MAX_MAC: usize = 32;

/// A valid Linux interface name (`cni_spec::ifname_problem`: the rule of
/// libcni and the kernel, shared with guest-sdk).
pub(crate) use cni_spec::valid_ifname;

pub(super) fn check_name(name: &str) -> Result<(), CapError> {
    if valid_ifname(name) {
        Ok(())
    } else {
        Err(ErrorCode::InvalidArgument.into())
    }
}

pub(super) fn check_mac(mac: &[u8]) -> Result<(), CapError> {
    if mac.is_empty() || mac.len() > MAX_MAC {
        return Err(ErrorCode::InvalidArgument.into());
    }
    Ok(())
}

fn mac_arg(mac: &[u8]) -> String {
    mac.iter()
        .take(MAX_MAC)
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub(super) fn opts(o: &LinkOptions) -> Result<LinkOpts, CapError> {
    if let Some(mac) = &o.mac {
        check_mac(mac)?;
    }
    Ok(LinkOpts {
        mtu: o.mtu,
        mac: o.mac.clone(),
        txqlen: o.txqlen,
    })
}

impl AuditArg for LinkOptions {
    fn audit(&self) -> Value {
        fields([
            ("mtu", self.mtu.audit()),
            ("mac", self.mac.as_deref().map(Mac).audit()),
            ("txqlen", self.txqlen.audit()),
        ])
    }
}

impl AuditArg for BridgeOptions {
    fn audit(&self) -> Value {
        fields([("vlan-filtering", self.vlan_filtering.audit())])
    }
}

impl AuditArg for TapOptions {
    fn audit(&self) -> Value {
        fields([
            ("multi-queue", self.multi_queue.audit()),
            ("owner", self.owner.audit()),
            ("group", self.group.audit()),
        ])
    }
}

impl AuditArg for DeviceSelector {
    fn audit(&self) -> Value {
        match self {
            DeviceSelector::KernelPath(p) => fields([("kernel-path", p.audit())]),
            DeviceSelector::PciAddress(a) => fields([("pci-address", a.audit())]),
        }
    }
}

/// A bridge port's VLANs: the first 16, and how many.
impl AuditArg for Vec<PortVlan> {
    fn audit(&self) -> Value {
        let shown = self.iter().take(16).map(|v| {
            fields([
                ("vid", v.vid.audit()),
                ("pvid", v.pvid.audit()),
                ("untagged", v.untagged.audit()),
            ])
        });
        fields([
            ("shown", Value::Array(shown.collect())),
            ("count", self.len().audit()),
        ])
    }
}

/// A MAC address, as `aa:bb:…` (at most the first 32 bytes).
pub(super) struct Mac<'a>(pub(super) &'a [u8]);

impl AuditArg for Mac<'_> {
    fn audit(&self) -> Value {
        Value::from(mac_arg(self.0))
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

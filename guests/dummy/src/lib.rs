//! The CNI `dummy` plugin for wasmcni.
//!
//! Behaves like the upstream plugin (containernetworking/plugins
//! `plugins/main/dummy`, added after 1.1.1): a `dummy` link named
//! `CNI_IFNAME` in the container, carrying every address the IPAM plugin
//! returns and its routes. An IPAM section is required. CHECK verifies the
//! link is a dummy, up, with the prevResult's MAC and addresses; DEL runs
//! the IPAM DEL and deletes the link (a missing link or namespace is no
//! error).
//!
//! Unlike the reference, a failed ADD leaves nothing behind (wasmcni's
//! journal removes the link and releases the reservation), and GC is
//! forwarded to the IPAM plugin.

use guest_sdk::cni::{CniResult, Command, Error, Interface};
use guest_sdk::net::LinkOptions;
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::{check, iface, ipam, mac};

struct Dummy;

/// The config needs an IPAM section naming a plugin.
fn require_ipam(inv: &Invocation) -> Result<(), Error> {
    if ipam::plugin_type(inv).is_empty() {
        return Err(Error::invalid_config(
            "dummy interface requires an IPAM configuration (\"ipam\" with a \"type\")",
        ));
    }
    Ok(())
}

impl Plugin for Dummy {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        require_ipam(inv)?;
        let container = iface::open_container(inv)?;
        let ifname = &inv.env.ifname;
        let options = LinkOptions {
            mtu: None,
            mac: None,
            txqlen: None,
        };
        let index = container
            .create_dummy(ifname, &options)
            .map_err(|e| Error::internal(format!("failed to create dummy: {e}")))?;
        let link = container
            .link_by_index(index)
            .map_err(|e| Error::internal(format!("failed to fetch dummy {ifname:?}: {e}")))?;
        let mut result = ipam::add(inv)?;
        if result.ips.is_empty() {
            return Err(Error::internal("IPAM plugin returned missing IP config"));
        }
        for ip in &mut result.ips {
            ip.interface = Some(0);
        }
        result.interfaces = vec![Interface {
            mac: mac::format(&link.mac),
            sandbox: inv.env.netns.clone(),
            ..Interface::new(ifname.clone())
        }];
        iface::configure(&container, ifname, &result)?;
        Ok(result)
    }

    /// Without an IPAM plugin (which ADD requires) there is no address to
    /// release; the link goes either way.
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Del)?;
        iface::delete_link(inv)
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        require_ipam(inv)?;
        let container = iface::open_container(inv)?;
        ipam::exec(inv, Command::Check)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("dummy: Required prevResult missing"))?;
        let link = check::interface(inv, &container, &prev, "dummy")?;
        if !link.up {
            return Err(Error::internal(format!("Interface {} is down", link.name)));
        }
        // Addresses only, as upstream (not the routes).
        check::addresses(&container, &link, &prev)
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec_if_configured(inv, Command::Gc)
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        ipam::exec(inv, Command::Status)
    }
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `dummy`).
pub fn main() -> ! {
    skel::run(Dummy, "CNI dummy plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_common::testing::{invocation, reach, Reached};
    use serde_json::json;

    #[test]
    fn del_without_ipam_still_deletes_the_link() {
        let c = json!({"type": "dummy", "ipam": {}});
        let add = invocation(Command::Add, "", c.clone());
        assert!(matches!(
            reach(|| Dummy.add(&add).map(drop)),
            Reached::Returned(Err(_))
        ));
        let inv = invocation(Command::Del, ";", c);
        assert_eq!(
            reach(|| Dummy.del(&inv)),
            Reached::HostCall("netns.container".into())
        );
        let inv = invocation(
            Command::Del,
            "",
            json!({"type": "dummy", "ipam": {"type": "host-local"}}),
        );
        assert_eq!(
            reach(|| Dummy.del(&inv)),
            Reached::HostCall("delegate.run".into())
        );
    }
}

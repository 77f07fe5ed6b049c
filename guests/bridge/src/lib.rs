//! The CNI `bridge` plugin for wasmcni.
//!
//! Behaves like the reference plugin (containernetworking/plugins
//! `plugins/main/bridge`, 1.1.1): a bridge on the node (created if needed,
//! `cni0` by default), a veth pair with one end in the container and the
//! other enslaved to the bridge, addresses and routes from the IPAM plugin,
//! the gateway address on the bridge, forwarding on the node.
//!
//! Unlike the reference, a failed ADD leaves nothing behind: wasmcni's
//! journal removes the veth and releases the IPAM reservation (the
//! reference leaks the veth whenever IPAM or a later step fails). And the
//! bridge, shared by every container on the network, is never reshaped or
//! deleted by a plugin acting for one of them. DEL reads only what the
//! cleanup needs (the IPAM section, `ipMasq`, `macspoofchk`, each on its
//! own, no `CNI_ARGS`): a config ADD refuses (a VLAN out of range,
//! `hairpinMode` with `promiscMode`, unknown `CNI_ARGS`) still has its
//! interface removed and its address released, where the reference's DEL
//! fails on some of them for good.
//!
//! From upstream's later versions: `portIsolation` (v1.7+; the
//! container's port is isolated on the bridge: it exchanges frames only
//! with ports that are not, such as the bridge's own) and
//! `disableContainerInterface` (v1.4.1+; a layer-2 container's interface is left
//! down; with IPAM, ADD is refused as upstream refuses it).
//!
//! VLANs: `vlan` (the port's PVID, untagged), and from upstream's later
//! versions `vlanTrunk` (tagged VLANs) and `preserveDefaultVlan` (default
//! false, as since upstream v1.8.0: VLAN 1 leaves a port given `vlan` or
//! `vlanTrunk`; true keeps it, as 1.1.1 and v1.3–v1.7 do). With `isGateway`,
//! the gateway address of a VLAN sits on `<bridge>.<vlan>`, one end of a
//! veth pair whose other end is a port of that VLAN, shared by the
//! network: the reference keeps it after the network's last DEL, wasmcni
//! removes it with the network's last attachment (issue 24; the host's
//! doing, not this plugin's).
//!
//! `ipMasq` (masquerade what each container address sends outside its
//! subnet, not to multicast) and `macspoofchk` (drop frames from the
//! container's port whose source MAC is not the container's) are rules of
//! the host's firewall capability, tagged with the attachment: DEL removes
//! them without needing the addresses (the reference reads them from the
//! container before deleting its interface, so a container already gone
//! leaks its rules there), GC removes those of attachments that are gone,
//! and a failed ADD leaves none.

mod conf;

use std::time::Duration;

use guest_sdk::cni::{Cidr, CniResult, Command, Error, Interface, Route};
use guest_sdk::firewall::{MacSpoof, RuleKind, Rules};
use guest_sdk::net::{prefix, AddressOptions, IpFamily, LinkInfo, LinkOptions, Netns, OperState};
use guest_sdk::skel::{self, Invocation, Plugin};
use plugin_common::iface::{self, link_key};
use plugin_common::{ipam, mac, veth};

use conf::{Conf, DelConf};

struct Bridge;

/// Ensures the bridge exists, is a bridge, is up; returns it.
fn ensure_bridge(host: &Netns, c: &Conf) -> Result<LinkInfo, Error> {
    let name = &c.bridge;
    let wrap = |e: String| Error::internal(format!("failed to create bridge {name:?}: {e}"));
    let options = LinkOptions {
        mtu: c.mtu(),
        mac: None,
        txqlen: None,
    };
    match host.create_bridge(
        name,
        &options,
        guest_sdk::net::BridgeOptions {
            vlan_filtering: c.vlan_filtering(),
        },
    ) {
        Ok(_) => {}
        // An existing bridge keeps its settings (as in the reference).
        Err(e) if e.code == guest_sdk::net::ErrorCode::AlreadyExists => {}
        Err(e) => return Err(wrap(format!("could not add {name:?}: {e}"))),
    }
    let br = host
        .link(name)
        .map_err(|e| wrap(format!("could not lookup {name:?}: {e}")))?;
    if br.kind.as_deref() != Some("bridge") {
        return Err(wrap(format!("{name:?} already exists but is not a bridge")));
    }
    if c.promisc_mode && !br.promiscuous {
        host.set_promiscuous(br.index, true)
            .map_err(|e| wrap(format!("could not set promiscuous mode on {name:?}: {e}")))?;
    }
    // Errors ignored, as in the reference (a shared bridge's setting may
    // only be kept, not changed, by a plugin acting for one container).
    let _ = host.set_sysctl(&link_key("ipv6", name, "accept_ra"), "0");
    if !br.up {
        host.set_up(br.index, true)
            .map_err(|e| wrap(e.to_string()))?;
    }
    Ok(br)
}

/// Puts `gw` on the bridge (unless it is there), as the reference's
/// `ensureAddr`: another IPv4 address, or an overlapping IPv6 one, listed
/// before `gw`'s is an error unless `forceAddress` (then it is removed).
/// When it added the address, it then pins the bridge's hardware address
/// (to its current value; the reference pins the one it read before the
/// first port was enslaved); when the address was there, it leaves the
/// bridge alone, as the reference does. Setting a link's hardware address,
/// even to the one it has, makes the kernel flush every neighbour entry of
/// the link (the node's ARP and ND entries for every container on the
/// bridge, and permanent ones an operator added) and the node's route
/// caches: the reference does that once, at the ADD that gives the bridge
/// its address, not at every ADD.
fn ensure_addr(host: &Netns, br: &LinkInfo, gw: Cidr, force: bool) -> Result<(), Error> {
    let family = if gw.is_ipv4() {
        IpFamily::Ipv4
    } else {
        IpFamily::Ipv6
    };
    let name = &br.name;
    // In the kernel's order, as the reference: the gateway's address found
    // ends the look (the bridge is left as it is), and only the addresses
    // listed before it are checked. The node's own addresses added to the
    // bridge after the gateway's (a second IPv4 address, a link-local one)
    // are not a conflict: with the reference every later ADD succeeds.
    let addrs = host.addresses(Some(br), Some(family))?;
    for a in &addrs {
        let have = Cidr::new(
            guest_sdk::net::to_ip(&a.prefix.address),
            a.prefix.prefix_len,
        )?;
        if have == gw {
            return Ok(());
        }
        let conflicts = gw.is_ipv4() || overlaps(have, gw);
        if conflicts {
            if force {
                host.delete_address(br.index, a.prefix).map_err(|e| {
                    Error::internal(format!("could not remove IP address from {name:?}: {e}"))
                })?;
            } else {
                return Err(Error::internal(format!(
                    "{name:?} already has an IP address different from {gw}"
                )));
            }
        }
    }
    match host.add_address(
        br.index,
        prefix(gw.addr(), gw.prefix_len()),
        AddressOptions {
            no_dad: false,
            no_prefix_route: false,
            scope: None,
        },
    ) {
        Ok(()) => {}
        Err(e) if e.code == guest_sdk::net::ErrorCode::AlreadyExists => {}
        Err(e) => {
            return Err(Error::internal(format!(
                "could not add IP address to {name:?}: {e}"
            )))
        }
    }
    // Until it is pinned, the bridge's address follows its ports: another
    // container's ADD may change it between our read and our write, and a
    // shared bridge may only be pinned to the address it has. Read again
    // and retry then.
    let mut tries = 0;
    loop {
        let now = host.link_by_index(br.index)?;
        match host.set_mac(br.index, &now.mac) {
            Ok(()) => return Ok(()),
            Err(e) if e.code == guest_sdk::net::ErrorCode::AccessDenied && tries < 5 => {
                tries += 1;
            }
            Err(e) => return Err(Error::internal(format!("could not set bridge's mac: {e}"))),
        }
    }
}

/// Whether two networks overlap (either contains the other's address).
fn overlaps(a: Cidr, b: Cidr) -> bool {
    a.contains(b.addr()) || b.contains(a.addr())
}

/// Gives `port` the VLANs the config asks for (none: leaves it as the
/// kernel made it).
fn set_port_vlans(
    host: &Netns,
    port: &LinkInfo,
    c: &Conf,
    vid: u16,
    trunk: &[u16],
) -> Result<(), Error> {
    let wrap = |e: guest_sdk::net::HostError| {
        Error::internal(format!(
            "failed to setup vlan tag on interface {:?}: {e}",
            port.name
        ))
    };
    // Nothing to set: no query either (the port's VLANs are a dump of
    // every port of the node's bridges, a cost that grows with the node).
    if !Conf::sets_port_vlans(vid, trunk) {
        return Ok(());
    }
    let current = host.port_vlans(port.index).map_err(wrap)?;
    match c.port_vlans(vid, trunk, current) {
        Some(vlans) => host.set_port_vlans(port.index, &vlans).map_err(wrap),
        None => Ok(()),
    }
}

/// The gateway link of VLAN `vid`, as the reference's
/// `ensureVlanInterface`: `<bridge>.<vid>` if it exists, else one end of a
/// new veth pair (the bridge's MTU) whose other end is a port of the
/// bridge in VLAN `vid`; both handed to the network, which shares them.
fn ensure_vlan_gateway(host: &Netns, br: &LinkInfo, c: &Conf, vid: u16) -> Result<LinkInfo, Error> {
    let name = format!("{}.{vid}", br.name);
    if let Ok(l) = host.link(&name) {
        return Ok(l);
    }
    let v = veth::setup(host, host, &name, Some(br.mtu), None).map_err(|e| {
        Error::internal(format!("faild to create vlan gateway {name:?}: {}", e.msg))
    })?;
    host.set_master(v.host.index, Some(br.index)).map_err(|e| {
        Error::internal(format!(
            "failed to connect {:?} to bridge {}: {e}",
            v.host.name, br.name
        ))
    })?;
    set_port_vlans(host, &v.host, c, vid, &[])?;
    host.share(v.host.index)?;
    host.share(v.container.index)?;
    host.set_up(v.container.index, true)
        .map_err(|e| Error::internal(format!("failed to set {name:?} up: {e}")))?;
    Ok(host.link_by_index(v.container.index)?)
}

/// Waits for the host end of the veth to be operationally up, as the
/// reference does before putting the gateway on the bridge, and as long
/// (2.55 s in all), but looking every few milliseconds instead of after
/// 0, 50, 500, 1000 and 1000 ms: the state usually follows within one.
fn wait_oper_up(host: &Netns, index: u32) -> Result<(), Error> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let l = host.link_by_index(index)?;
        if l.oper_state == OperState::Up {
            return Ok(());
        }
        if start.elapsed() >= Duration::from_millis(2550) {
            return Err(Error::internal(format!(
                "bridge port in error state: {:?}",
                l.oper_state
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The reference's `calcGateways`: sets each address's interface (the
/// container's, index 2), fills in gateways and the default routes, and
/// returns the gateway addresses (with the address's prefix length) the
/// bridge needs, IPv4 first.
fn calc_gateways(result: &mut CniResult, c: &Conf) -> Result<Vec<Cidr>, Error> {
    let mut gws4 = Vec::new();
    let mut gws6 = Vec::new();
    let (mut default4, mut default6) = (false, false);
    for i in 0..result.ips.len() {
        result.ips[i].interface = Some(2);
        let addr = result.ips[i].address;
        if result.ips[i].gateway.is_none() && c.is_gateway {
            result.ips[i].gateway = Some(addr.first_host());
        }
        let v4 = addr.is_ipv4();
        let default_done = if v4 { &mut default4 } else { &mut default6 };
        if c.is_default_gateway && !*default_done {
            let zero = Cidr::default_route(v4);
            let has = result
                .routes
                .iter()
                .any(|r| r.gw.is_some() && r.dst == zero);
            if !has {
                if let Some(gw) = result.ips[i].gateway {
                    let mut r = Route::new(zero);
                    r.gw = Some(gw);
                    result.routes.push(r);
                }
            }
            *default_done = true;
        }
        if c.is_gateway {
            if let Some(gw) = result.ips[i].gateway {
                let g = Cidr::new(gw, addr.prefix_len())?;
                if v4 {
                    gws4.push(g);
                } else {
                    gws6.push(g);
                }
            }
        }
    }
    gws4.extend(gws6);
    Ok(gws4)
}

impl Plugin for Bridge {
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
        let c = Conf::load(inv)?;
        // Upstream's checks of ADD alone, in its order, with its messages
        // (an interface left down cannot be given addresses).
        if c.disable_container_interface && c.is_layer3(inv) {
            return Err(Error::internal(
                "cannot use IPAM when DisableContainerInterface flag is set",
            ));
        }
        if c.hairpin_mode && c.promisc_mode {
            return Err(Error::internal(
                "cannot set hairpin mode and promiscuous mode at the same time.",
            ));
        }
        // Upstream refuses it once the container is set up; here before
        // any host call, so nothing is left behind.
        plugin_common::check_ip_masq_backend(c.ip_masq, c.ip_masq_backend.as_deref())?;
        let host = Netns::host()?;
        let br = ensure_bridge(&host, &c)?;
        let container = Netns::container().map_err(|e| {
            Error::internal(format!("failed to open netns {:?}: {e}", inv.env.netns))
        })?;
        let mac = c.mac(inv)?.map(|m| mac::parse(&m)).transpose()?;
        let ifname = &inv.env.ifname;
        let v = veth::setup(&container, &host, ifname, c.mtu(), mac)?;
        host.set_master(v.host.index, Some(br.index)).map_err(|e| {
            Error::internal(format!(
                "failed to connect {:?} to bridge {}: {e}",
                v.host.name, br.name
            ))
        })?;
        host.set_hairpin(v.host.index, c.hairpin_mode)
            .map_err(|e| {
                Error::internal(format!(
                    "failed to setup hairpin mode for {}: {e}",
                    v.host.name
                ))
            })?;
        // Upstream sets the flag either way; a new port is not isolated,
        // so only `true` needs the host (one host call fewer otherwise).
        if c.port_isolation {
            host.set_port_isolated(v.host.index, true).map_err(|e| {
                Error::internal(format!(
                    "failed to set isolated on for {}: {e}",
                    v.host.name
                ))
            })?;
        }
        if c.macspoofchk {
            host.firewall_add(&Rules::MacSpoof(MacSpoof {
                link: v.host.index,
                mac: v.container.mac.clone(),
            }))
            .map_err(|e| Error::internal(format!("failed to setup mac spoof check: {e}")))?;
        }
        let vid = u16::try_from(c.vlan).unwrap_or(0);
        set_port_vlans(&host, &v.host, &c, vid, &c.trunk_vids()?)?;
        let mut result = CniResult {
            interfaces: vec![
                Interface {
                    mac: mac::format(&br.mac),
                    ..Interface::new(br.name.clone())
                },
                Interface {
                    mac: mac::format(&v.host.mac),
                    ..Interface::new(v.host.name.clone())
                },
                Interface {
                    mac: mac::format(&v.container.mac),
                    sandbox: inv.env.netns.clone(),
                    ..Interface::new(ifname.clone())
                },
            ],
            ..CniResult::default()
        };
        if c.is_layer3(inv) {
            let r = ipam::add(inv)?;
            result.ips = r.ips;
            result.routes = r.routes;
            result.dns = r.dns;
            if result.ips.is_empty() {
                return Err(Error::internal("IPAM plugin returned missing IP config"));
            }
            let gateways = calc_gateways(&mut result, &c)?;
            let dad = if c.enabledad { "1" } else { "0" };
            if c.enabledad {
                let _ = container.set_sysctl(&link_key("ipv6", ifname, "enhanced_dad"), "1");
            }
            let _ = container.set_sysctl(&link_key("ipv6", ifname, "accept_dad"), dad);
            let _ = container.set_sysctl(&link_key("ipv4", ifname, "arp_notify"), "1");
            iface::configure(&container, ifname, &result)?;
            wait_oper_up(&host, v.host.index)?;
            if c.is_gateway && vid != 0 {
                // A VLAN's gateway lives on its own `<bridge>.<vlan>` port.
                let gwl = ensure_vlan_gateway(&host, &br, &c, vid).map_err(|e| {
                    Error::internal(format!("failed to create vlan interface: {}", e.msg))
                })?;
                for gw in &gateways {
                    ensure_addr(&host, &gwl, *gw, c.force_address).map_err(|e| {
                        Error::internal(format!(
                            "failed to set vlan interface for bridge with addr: {}",
                            e.msg
                        ))
                    })?;
                }
                let now = host.link_by_index(gwl.index)?;
                result.interfaces.push(Interface {
                    mac: mac::format(&now.mac),
                    ..Interface::new(now.name.clone())
                });
            } else if c.is_gateway {
                for gw in &gateways {
                    ensure_addr(&host, &br, *gw, c.force_address).map_err(|e| {
                        Error::internal(format!("failed to set bridge addr: {}", e.msg))
                    })?;
                }
            }
            if c.is_gateway {
                plugin_common::enable_forwarding(
                    &host,
                    gateways.iter().any(|g| g.is_ipv4()),
                    gateways.iter().any(|g| !g.is_ipv4()),
                )
                .map_err(|e| Error::internal(format!("failed to enable forwarding: {e}")))?;
            }
            if c.ip_masq {
                plugin_common::ip_masq(&host, &result)?;
            }
        } else if !c.disable_container_interface {
            let link = container
                .link(ifname)
                .map_err(|e| Error::internal(format!("failed to retrieve link: {e}")))?;
            container
                .set_up(link.index, true)
                .map_err(|e| Error::internal(format!("failed to set {ifname:?} up: {e}")))?;
            // As upstream, once the interface is up (layer 3 waits above).
            wait_oper_up(&host, v.host.index)?;
        }
        let br_now = host.link_by_index(br.index)?;
        result.interfaces[0].mac = mac::format(&br_now.mac);
        // As upstream since v1.2.0: the IPAM's DNS, unless the config sets
        // any of its own (1.1.1 always replaced it, with nothing when the
        // config set none).
        if let Some(dns) = c.dns.clone().filter(|d| !d.is_empty()) {
            result.dns = dns;
        }
        Ok(result)
    }

    /// Decodes only what it needs ([`DelConf`]): a config ADD refuses
    /// still has its interface removed and its address released.
    fn del(&self, inv: &Invocation) -> Result<(), Error> {
        let c = DelConf::load(inv);
        if !inv.env.netns.is_empty() {
            match Netns::container() {
                Ok(ns) => {
                    if let Ok(link) = ns.link(&inv.env.ifname) {
                        ns.delete_link(link.index).map_err(|e| {
                            Error::internal(format!("failed to delete {:?}: {e}", inv.env.ifname))
                        })?;
                    }
                }
                // Gone already: nothing to remove there (the spec asks DEL
                // to succeed), but the address is still released.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        if is_layer3(inv) {
            ipam::exec(inv, Command::Del)?;
        }
        let kinds = firewall_kinds(&c, inv);
        if !kinds.is_empty() {
            Netns::host()?.firewall_remove(&kinds)?;
        }
        Ok(())
    }

    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        let c = Conf::load(inv)?;
        let container = Netns::container().map_err(|e| {
            Error::internal(format!("failed to open netns {:?}: {e}", inv.env.netns))
        })?;
        ipam::exec(inv, Command::Check)?;
        let prev = inv
            .prev_result()?
            .ok_or_else(|| Error::internal("Required prevResult missing"))?;
        let host = Netns::host()?;
        check_attachment(&host, &container, inv, &c, &prev)
    }

    fn gc(&self, inv: &Invocation) -> Result<(), Error> {
        let c = DelConf::load(inv);
        if is_layer3(inv) {
            ipam::exec(inv, Command::Gc)?;
        }
        let kinds = firewall_kinds(&c, inv);
        if !kinds.is_empty() {
            Netns::host()?.firewall_collect_garbage(&kinds)?;
        }
        Ok(())
    }

    fn status(&self, inv: &Invocation) -> Result<(), Error> {
        let c = Conf::load(inv)?;
        if c.is_layer3(inv) {
            ipam::exec(inv, Command::Status)?;
        }
        Ok(())
    }
}

/// Whether IPAM configures the interface (`ipam.type` set).
fn is_layer3(inv: &Invocation) -> bool {
    !ipam::plugin_type(inv).is_empty()
}

/// The firewall rule kinds DEL and GC remove: those the config asks for
/// (masquerading only with addresses, as ADD installs it); none for a key
/// that is unusable.
fn firewall_kinds(c: &DelConf, inv: &Invocation) -> Vec<RuleKind> {
    let mut kinds = Vec::new();
    if c.ip_masq == Some(true) && is_layer3(inv) {
        kinds.push(RuleKind::Masquerade);
    }
    if c.macspoofchk == Some(true) {
        kinds.push(RuleKind::MacSpoof);
    }
    kinds
}

/// CHECK: the bridge, the container's veth and its peer on the bridge,
/// the addresses and routes of `prev`, as the reference checks them.
fn check_attachment(
    host: &Netns,
    container: &Netns,
    inv: &Invocation,
    c: &Conf,
    prev: &CniResult,
) -> Result<(), Error> {
    let ifname = &inv.env.ifname;
    let br_entry = prev.interfaces.iter().find(|i| i.name == c.bridge);
    let ctr_entry = prev
        .interfaces
        .iter()
        .find(|i| i.name == *ifname && i.sandbox == inv.env.netns);
    let Some(br_entry) = br_entry else {
        return Err(Error::internal(format!(
            "CNI created bridge {} in host namespace was not found",
            c.bridge
        )));
    };
    let br = host
        .link(&br_entry.name)
        .map_err(|_| Error::internal(format!("Interface name {} not found", br_entry.name)))?;
    if br.kind.as_deref() != Some("bridge") {
        return Err(Error::internal(format!(
            "Interface {} does not have link type of bridge",
            br.name
        )));
    }
    if !br_entry.mac.is_empty() && br_entry.mac != mac::format(&br.mac) {
        return Err(Error::internal(format!(
            "Bridge interface {} Mac doesn't match: {}",
            br.name, br_entry.mac
        )));
    }
    if br.promiscuous != c.promisc_mode {
        return Err(Error::internal(format!(
            "Bridge interface {} configured Promisc Mode {} doesn't match current state: {} ",
            br.name, c.promisc_mode, br.promiscuous
        )));
    }
    let Some(ctr_entry) = ctr_entry else {
        return Err(Error::internal(format!(
            "Sandbox in prevResult  doesn't match configured netns: {}",
            inv.env.netns
        )));
    };
    let ctr = container
        .link(&ctr_entry.name)
        .map_err(|_| Error::internal(format!("Interface name {} not found", ctr_entry.name)))?;
    if ctr.kind.as_deref() != Some("veth") {
        return Err(Error::internal(format!(
            "Error: Container interface {} not of type veth",
            ctr.name
        )));
    }
    if !ctr_entry.mac.is_empty() && ctr_entry.mac != mac::format(&ctr.mac) {
        return Err(Error::internal(format!(
            "Interface {} Mac {} doesn't match container Mac: {}",
            ctr.name,
            ctr_entry.mac,
            mac::format(&ctr.mac)
        )));
    }
    let peer = ctr.parent_index.ok_or_else(|| {
        Error::internal(format!(
            "Unable to obtain veth peer index for veth {}",
            ctr.name
        ))
    })?;
    let host_veth = host
        .link_by_index(peer)
        .ok()
        .filter(|l| l.master == Some(br.index) && l.parent_index == Some(ctr.index));
    if host_veth.is_none() {
        return Err(Error::internal(format!(
            "CNI veth created for bridge {} was not found",
            c.bridge
        )));
    }
    plugin_common::check::addresses_and_routes(container, &ctr, prev)
}

/// Runs the plugin on this process's CNI environment and stdin, and exits
/// (the standard component calls it when invoked as `bridge`).
pub fn main() -> ! {
    skel::run(Bridge, "CNI bridge plugin (wasmcni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_common::testing::{invocation, reach, Reached};
    use serde_json::json;

    fn conf(extra: serde_json::Value) -> serde_json::Value {
        let mut c = json!({"type": "bridge", "bridge": "cni0",
                           "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}});
        for (k, v) in extra.as_object().expect("object") {
            c[k] = v.clone();
        }
        c
    }

    /// What DEL removes of a config: (IPAM DEL, firewall kinds).
    fn del_plan(c: serde_json::Value, args: &str) -> (bool, Vec<RuleKind>) {
        let inv = invocation(Command::Del, args, c);
        let d = DelConf::load(&inv);
        (is_layer3(&inv), firewall_kinds(&d, &inv))
    }

    #[test]
    fn del_cleans_up_configs_add_refuses() {
        for (extra, args) in [
            // ADD refuses both at once; the reference's DEL succeeds.
            (json!({"hairpinMode": true, "promiscMode": true}), ""),
            // Unknown CNI_ARGS, malformed ones, a bad MAC: DEL reads none.
            (json!({}), "FOO=bar"),
            (json!({}), ";"),
            (json!({"args": {"cni": {"mac": "zz"}}}), ""),
            // Options ADD refuses or cannot decode.
            (json!({"vlan": 5000}), ""),
            (json!({"vlanTrunk": [{"minID": 9, "maxID": 2}]}), ""),
            (json!({"mtu": "big", "hairpinMode": 1}), ""),
        ] {
            let c = conf(extra.clone());
            let add = invocation(Command::Add, args, c.clone());
            // What ADD checks before it changes anything.
            let refused = Conf::load(&add)
                .and_then(|c| c.mac(&add))
                .and_then(|m| m.map(|m| mac::parse(&m)).transpose())
                .is_err()
                || matches!(
                    reach(|| Bridge.add(&add).map(drop)),
                    Reached::Returned(Err(_))
                );
            assert!(refused, "{extra} {args:?}: ADD accepts it");
            assert_eq!(
                del_plan(c.clone(), args),
                (true, vec![]),
                "{extra} {args:?}: DEL must release the address"
            );
            // DEL goes on to the container's interface, refusing nothing.
            // CHECK still refuses what ADD's config loading refuses.
            if Conf::load(&add).is_err() {
                let chk = invocation(Command::Check, args, c.clone());
                assert!(
                    matches!(reach(|| Bridge.check(&chk)), Reached::Returned(Err(_))),
                    "{extra} {args:?}"
                );
            }
            let del = invocation(Command::Del, args, c);
            assert_eq!(
                reach(|| Bridge.del(&del)),
                Reached::HostCall("netns.container".into()),
                "{extra} {args:?}"
            );
        }
    }

    /// `portIsolation` (upstream v1.7+) and `disableContainerInterface` (v1.4.1+)
    /// are read in any case of their keys (Go's decoding). An interface
    /// left down cannot take IPAM's addresses: ADD refuses the two
    /// together, as upstream does, before any host call; without IPAM it
    /// goes on. DEL is the same with or without them.
    #[test]
    fn newer_options_are_read_as_upstream() {
        for key in ["portIsolation", "PORTISOLATION"] {
            let add = invocation(Command::Add, "", conf(json!({ key: true })));
            assert!(Conf::load(&add).expect(key).port_isolation, "{key}");
            assert_eq!(
                reach(|| Bridge.add(&add).map(drop)),
                Reached::HostCall("netns.host".into()),
                "{key}"
            );
        }
        for key in ["disableContainerInterface", "DisableContainerInterface"] {
            let add = invocation(Command::Add, "", conf(json!({ key: true })));
            assert!(Conf::load(&add).expect(key).disable_container_interface);
            match reach(|| Bridge.add(&add).map(drop)) {
                Reached::Returned(Err(e)) => assert!(
                    e.msg == "cannot use IPAM when DisableContainerInterface flag is set"
                        && e.code == 999,
                    "{key}: {e:?}"
                ),
                other => panic!("{key}: with IPAM: {other:?}"),
            }
            let mut l2 = conf(json!({ key: true }));
            l2["ipam"] = json!({});
            let add = invocation(Command::Add, "", l2.clone());
            assert_eq!(
                reach(|| Bridge.add(&add).map(drop)),
                Reached::HostCall("netns.host".into()),
                "{key}: layer 2"
            );
            assert_eq!(del_plan(l2, ""), (false, vec![]), "{key}: DEL");
            let c = conf(json!({ key: true }));
            assert_eq!(del_plan(c, ""), (true, vec![]), "{key}: DEL");
        }
        // Upstream's order: the IPAM conflict before hairpin with promisc,
        // both checks of ADD alone (CHECK goes on to the host).
        let all = json!({"disableContainerInterface": true, "hairpinMode": true,
                         "promiscMode": true});
        let first = |extra: serde_json::Value| match reach(|| {
            Bridge
                .add(&invocation(Command::Add, "", conf(extra)))
                .map(drop)
        }) {
            Reached::Returned(Err(e)) => e.msg,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            first(all),
            "cannot use IPAM when DisableContainerInterface flag is set"
        );
        assert_eq!(
            first(json!({"hairpinMode": true, "promiscMode": true})),
            "cannot set hairpin mode and promiscuous mode at the same time."
        );
        let chk = invocation(
            Command::Check,
            "",
            conf(json!({"hairpinMode": true, "promiscMode": true})),
        );
        assert!(matches!(reach(|| Bridge.check(&chk)), Reached::HostCall(_)));
    }

    /// `ipMasqBackend` (upstream v1.6+): refused by ADD, before any host
    /// call, only when `ipMasq` is set and it is neither backend, with
    /// upstream's message; CHECK does not read it.
    #[test]
    fn ip_masq_backend_as_upstream() {
        for (extra, refused) in [
            (json!({"ipMasq": true, "ipMasqBackend": "nftables"}), false),
            (json!({"ipMasq": true, "IPMasqBackend": "iptables"}), false),
            (json!({"ipMasq": false, "ipMasqBackend": "bogus"}), false),
            (json!({"ipMasq": true, "ipMasqBackend": "bogus"}), true),
        ] {
            let add = invocation(Command::Add, "", conf(extra.clone()));
            match reach(|| Bridge.add(&add).map(drop)) {
                Reached::Returned(Err(e)) if refused => assert_eq!(
                    (e.code, e.msg.as_str()),
                    (999, "unknown ipmasq backend \"bogus\""),
                    "{extra}"
                ),
                Reached::HostCall(c) if !refused => assert_eq!(c, "netns.host", "{extra}"),
                other => panic!("{extra}: {other:?}"),
            }
            let chk = invocation(Command::Check, "", conf(extra.clone()));
            assert!(
                matches!(reach(|| Bridge.check(&chk)), Reached::HostCall(_)),
                "{extra}"
            );
        }
    }

    #[test]
    fn mac_precedence_as_the_reference() {
        let mac = |extra: serde_json::Value, args: &str| {
            let inv = invocation(Command::Add, args, conf(extra));
            Conf::load(&inv).and_then(|c| c.mac(&inv)).expect("loads")
        };
        let two = "MAC=02:00:00:00:00:01;MAC=02:00:00:00:00:02";
        assert_eq!(mac(json!({}), two).as_deref(), Some("02:00:00:00:00:02"));
        // Empty ones override nothing.
        assert_eq!(
            mac(
                json!({"args": {"cni": {"mac": ""}}, "runtimeConfig": {"mac": ""}}),
                two
            )
            .as_deref(),
            Some("02:00:00:00:00:02")
        );
        assert_eq!(
            mac(
                json!({"args": {"cni": {"mac": "02:00:00:00:00:03"}}, "runtimeConfig": {"Mac": "0200.0000.0004"}}),
                two
            )
            .as_deref(),
            Some("0200.0000.0004")
        );
        assert_eq!(
            mac(json!({"args": {"cni": {"mac": "02:00:00:00:00:03"}}}), two).as_deref(),
            Some("02:00:00:00:00:03")
        );
        assert_eq!(mac(json!({}), ""), None);
    }

    #[test]
    fn del_skips_only_the_unusable_part() {
        // `ipMasq: null` is Go's false; a mistyped one removes nothing
        // either, but the address is still released.
        for v in [json!(null), json!("yes"), json!(1), json!(false)] {
            assert_eq!(
                del_plan(conf(json!({"ipMasq": v.clone(), "macspoofchk": true})), ""),
                (true, vec![RuleKind::MacSpoof]),
                "{v}"
            );
        }
        assert_eq!(
            del_plan(conf(json!({"ipMasq": true, "macspoofchk": "on"})), ""),
            (true, vec![RuleKind::Masquerade])
        );
        // Without IPAM there is no address to release, nor masquerade.
        let mut c = conf(json!({"ipMasq": true}));
        c["ipam"] = json!({});
        assert_eq!(del_plan(c, ""), (false, vec![]));
    }
}

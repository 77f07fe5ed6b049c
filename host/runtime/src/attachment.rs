//! Who an invocation acts for: its attachment (network, container ID,
//! ifname), and how wasmcni marks the host objects that belong to one
//! attachment or to a whole network.
//!
//! Host links carry their owner in their alias:
//! - `wasmcni:<network>:<container id>:<ifname>`: a link of one attachment
//!   (a host veth), which only a plugin acting for that attachment may
//!   change, move or delete;
//! - `wasmcni-net:<network>`: a link shared by the network's attachments
//!   (a bridge), which a plugin acting for any of them may only use in ways
//!   that do not disturb the others (bring it up, give it its gateway
//!   address, enslave its own links to it), and never delete.
//!
//! Network names, container IDs and interface names that libcni accepts
//! never contain `:`; anything else, or a mark longer than the kernel keeps
//! (255 bytes), is replaced by a digest (`wasmcni:#<hex>`).

use std::net::IpAddr;

use serde_json::Value;
use sha2::{Digest, Sha256};

use cni_spec::Command;

use crate::ipam::Owner;

/// The alias prefix of a link one attachment owns.
pub const ATTACHMENT_MARK: &str = "wasmcni:";
/// The alias prefix of a link a network shares.
pub const NETWORK_MARK: &str = "wasmcni-net:";

/// The longest alias the kernel keeps.
const MAX_MARK: usize = 255;

/// The attachment an invocation acts for, and what it learns about it.
#[derive(Debug, Clone, Default)]
pub struct Attachment {
    /// The network (the config's `name`).
    pub network: String,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// GC only: the attachments the runtime still holds
    /// (`cni.dev/valid-attachments`, or `cni.dev/attachments`).
    pub valid: Option<Vec<Owner>>,
    /// The addresses this invocation established as the attachment's
    /// (S13): the ADD results of delegates the host ran with the runtime's
    /// own config ([`Attachment::config_digest`]), seen by the host
    /// because delegation runs through it. Never a `prevResult`'s: that
    /// is what the plugins before this one returned, which a hostile one
    /// writes. With those of the attachment's records
    /// ([`crate::caps::authority`]), the only addresses a plugin may name
    /// as its container's.
    pub addresses: Vec<IpAddr>,
    /// A digest of the config the runtime gave this invocation (for a
    /// chain member, the config the host built for it from the runtime's
    /// list): a delegate run with exactly this config acts on the
    /// runtime's word, and its result is the attachment's; a delegate
    /// keeps its caller's digest.
    pub config_digest: String,
    /// The port mappings the runtime asked for
    /// (`runtimeConfig.portMappings`), read by the host from the config on
    /// stdin: the only host ports a plugin may map; a delegate keeps its
    /// runtime's.
    pub port_mappings: Vec<RuntimePortMapping>,
    /// The node devices the config names (`host-device`'s keys).
    pub devices: ConfigDevices,
    /// The VLANs the config names (`bridge`'s keys); a delegate keeps its
    /// runtime's.
    pub vlans: ConfigVlans,
    /// The subnets the config's `ipam` names (`ranges[][].subnet`, or the
    /// older `subnet`; none if one of them is not a subnet): where there
    /// are any, the only addresses the attachment may reserve in its
    /// network's IPAM state; a delegate keeps its runtime's.
    pub ipam_subnets: Vec<ipnet::IpNet>,
}

/// One entry of the runtime's `runtimeConfig.portMappings`, as the
/// reference reads it (protocol case-insensitive, `tcp` when absent; an
/// empty or unspecified `hostIP`: every address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimePortMapping {
    /// `hostPort`.
    pub host_port: u16,
    /// `containerPort`.
    pub container_port: u16,
    /// `protocol`, lower case.
    pub protocol: String,
    /// `hostIP`, if a specific address.
    pub host_ip: Option<IpAddr>,
}

/// The runtime's `runtimeConfig.portMappings` (at most 256; an entry that
/// does not parse is left out, so no plugin may map it).
fn runtime_port_mappings(conf: &Value) -> Vec<RuntimePortMapping> {
    let Some(list) = go_get(conf, "runtimeConfig")
        .and_then(|r| go_get(r, "portMappings"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let port = |m: &Value, key: &str| {
        go_get(m, key)
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
    };
    list.iter()
        .take(256)
        .filter_map(|m| {
            let protocol = match go_get(m, "protocol") {
                None => "tcp".to_owned(),
                Some(p) => p.as_str()?.to_ascii_lowercase(),
            };
            let host_ip = match go_get(m, "hostIP").and_then(Value::as_str) {
                None | Some("") => None,
                Some(a) => Some(a.parse::<IpAddr>().ok()?).filter(|a| !a.is_unspecified()),
            };
            Some(RuntimePortMapping {
                host_port: port(m, "hostPort")?,
                container_port: port(m, "containerPort")?,
                protocol,
                host_ip,
            })
        })
        .collect()
}

/// The node devices a network config names, by the keys the reference
/// `host-device` plugin reads (see [`crate::policy::ConfigKey`]). Read by
/// the host from the config on stdin, so a plugin cannot change them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDevices {
    /// `device`.
    pub device: Option<String>,
    /// `hwaddr`, parsed (`None` if absent or not a MAC address).
    pub hwaddr: Option<Vec<u8>>,
    /// `kernelpath`.
    pub kernelpath: Option<String>,
    /// `pciBusID`.
    pub pci_bus_id: Option<String>,
    /// `runtimeConfig.deviceID`.
    pub device_id: Option<String>,
}

impl ConfigDevices {
    fn from_config(conf: &Value) -> ConfigDevices {
        let text = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        ConfigDevices {
            device: text(go_get(conf, "device")),
            hwaddr: text(go_get(conf, "hwaddr")).and_then(|m| parse_mac(&m)),
            kernelpath: text(go_get(conf, "kernelpath")),
            pci_bus_id: text(go_get(conf, "pciBusID")),
            device_id: text(go_get(conf, "runtimeConfig").and_then(|r| go_get(r, "deviceID"))),
        }
    }

    /// The one node device the config names, as the reference
    /// `host-device` picks it: by the first key set of `device`, `hwaddr`,
    /// `kernelpath`, `pciBusID` (`runtimeConfig.deviceID` overriding it) —
    /// and only if `granted` lists that key. `device` is a name; `hwaddr`
    /// the first interface with that address in index order; `kernelpath`
    /// and the PCI keys the first interface of the device (sorted by name)
    /// that is one of the node's. Resolved through the sysfs of wasmcni's
    /// own mount namespace (the node's).
    pub fn resolve(&self, granted: &[crate::policy::ConfigKey]) -> Option<String> {
        use crate::policy::ConfigKey;
        let first = |r: std::io::Result<Vec<String>>| {
            r.ok().and_then(|v| crate::devices::first_present(&v))
        };
        let (key, name) = if let Some(d) = &self.device {
            (ConfigKey::Device, Some(d.clone()))
        } else if let Some(m) = &self.hwaddr {
            (ConfigKey::Hwaddr, crate::devices::by_mac(m).ok().flatten())
        } else if let Some(p) = &self.kernelpath {
            (
                ConfigKey::Kernelpath,
                first(crate::devices::of_kernel_path(p)),
            )
        } else if let Some(id) = &self.device_id {
            (
                ConfigKey::DeviceId,
                first(crate::devices::of_pci_address(id)),
            )
        } else if let Some(id) = &self.pci_bus_id {
            (
                ConfigKey::PciBusId,
                first(crate::devices::of_pci_address(id)),
            )
        } else {
            return None;
        };
        // The runtime's `deviceID` overrides `pciBusID`: either key of the
        // grant admits it.
        let admitted = granted.contains(&key)
            || (key == ConfigKey::DeviceId && granted.contains(&ConfigKey::PciBusId));
        name.filter(|_| admitted)
    }
}

/// The VLAN IDs a network config names, by the keys the reference
/// `bridge` plugin reads (`vlan`, `vlanTrunk`), which are the VLANs its
/// port may join (see [`crate::policy::NsGrant`]'s `config-vlans`). Read by
/// the host from the config on stdin, so a plugin cannot change them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConfigVlans {
    /// One bit per VLAN ID (empty: none).
    bits: Vec<u64>,
}

/// The highest VLAN ID (4095 is reserved).
const MAX_VID: u16 = 4094;

impl ConfigVlans {
    /// What the reference's `loadNetConf` makes of `vlan` and `vlanTrunk`:
    /// `vlan` (0: none); each `vlanTrunk` entry's `minID`..=`maxID` and
    /// `id`; and VLAN 1, the native VLAN its `setupVeth` adds to a trunk
    /// when `vlan` is 0. Nothing at all if the reference refuses the config
    /// (a VLAN out of range or not an integer, half a range, a range
    /// upside down, an entry that is not an object), since no ADD of its
    /// can then set a VLAN. Keys match as Go's `encoding/json` matches
    /// them.
    fn from_config(conf: &Value) -> ConfigVlans {
        Self::parse(conf).unwrap_or_default()
    }

    fn parse(conf: &Value) -> Option<ConfigVlans> {
        // An integer, as Go decodes one into an `int` (no fraction, no
        // exponent), in 1..=4094.
        let vid = |v: &Value| {
            v.as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| (1..=MAX_VID).contains(n))
        };
        let mut out = ConfigVlans::default();
        let access = match go_get(conf, "vlan") {
            None => 0,
            Some(v) if v.as_u64() == Some(0) => 0,
            Some(v) => vid(v)?,
        };
        if access != 0 {
            out.insert(access, access);
        }
        let mut trunk = ConfigVlans::default();
        if let Some(list) = go_get(conf, "vlanTrunk") {
            for item in list.as_array()? {
                item.as_object()?;
                match (go_get(item, "minID"), go_get(item, "maxID")) {
                    (Some(min), Some(max)) => {
                        let (min, max) = (vid(min)?, vid(max)?);
                        if max < min {
                            return None;
                        }
                        trunk.insert(min, max);
                    }
                    (None, None) => {}
                    _ => return None,
                }
                if let Some(id) = go_get(item, "id") {
                    let id = vid(id)?;
                    trunk.insert(id, id);
                }
            }
        }
        if !trunk.is_empty() {
            if access == 0 {
                out.insert(1, 1);
            }
            out.union(&trunk);
        }
        Some(out)
    }

    /// Adds VLANs `lo..=hi` (both in 1..=4094, `lo <= hi`), a word at a
    /// time.
    fn insert(&mut self, lo: u16, hi: u16) {
        if self.bits.is_empty() {
            self.bits = vec![0; usize::from(MAX_VID / 64) + 1];
        }
        let (lo, hi) = (usize::from(lo), usize::from(hi));
        for word in lo / 64..=hi / 64 {
            let first = lo.max(word * 64) - word * 64;
            let last = hi.min(word * 64 + 63) - word * 64;
            let mask = (u64::MAX >> (63 - (last - first))) << first;
            self.bits[word] |= mask;
        }
    }

    fn union(&mut self, other: &ConfigVlans) {
        if self.bits.is_empty() {
            self.bits.clone_from(&other.bits);
            return;
        }
        for (a, b) in self.bits.iter_mut().zip(&other.bits) {
            *a |= *b;
        }
    }

    fn is_empty(&self) -> bool {
        self.bits.iter().all(|w| *w == 0)
    }

    /// Whether the config names VLAN `vid`.
    pub fn names(&self, vid: u16) -> bool {
        let vid = usize::from(vid);
        self.bits
            .get(vid / 64)
            .is_some_and(|w| (w >> (vid % 64)) & 1 == 1)
    }

    /// The VLANs named, as ranges (`1, 10, 20-22`).
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut vid = 1;
        while vid <= MAX_VID {
            if !self.names(vid) {
                vid += 1;
                continue;
            }
            let start = vid;
            while vid < MAX_VID && self.names(vid + 1) {
                vid += 1;
            }
            parts.push(if start == vid {
                start.to_string()
            } else {
                format!("{start}-{vid}")
            });
            vid += 1;
        }
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

impl std::fmt::Debug for ConfigVlans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConfigVlans({})", self.describe())
    }
}

/// `value[key]` as Go's `encoding/json` fills a struct field: the exact
/// key, else one that differs only in case (containerd sends capability
/// arguments with Go field names: `{"HostPort": 8080, ...}`); `null` is
/// absent.
fn go_get<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.as_object().and_then(|m| gojson::field(m, key))
}

/// The subnets `conf`'s `ipam` names, as host-local reads them (keys
/// case-insensitive): every `ranges[][].subnet`, and the older `subnet`.
/// None if any of them is not a subnet (`usePodCidr`, which a plugin
/// replaces before it runs host-local): a bound of only those that parse
/// would refuse the others' addresses.
fn ipam_subnets(conf: &Value) -> Vec<ipnet::IpNet> {
    let Some(ipam) = go_get(conf, "ipam") else {
        return Vec::new();
    };
    let mut named: Vec<&Value> = go_get(ipam, "ranges")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|r| go_get(r, "subnet"))
        .collect();
    named.extend(go_get(ipam, "subnet"));
    named
        .into_iter()
        .map(|v| v.as_str().and_then(|s| s.parse::<ipnet::IpNet>().ok()))
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default()
}

/// A MAC address in the forms Go's `net.ParseMAC` takes
/// (`aa:bb:cc:dd:ee:ff`, `aa-bb-…`, `aabb.ccdd.eeff`; 6, 8 or 20 bytes).
fn parse_mac(s: &str) -> Option<Vec<u8>> {
    let (parts, width): (Vec<&str>, usize) = if s.contains('.') {
        (s.split('.').collect(), 4)
    } else {
        (s.split([':', '-']).collect(), 2)
    };
    let bytes = parts.len() * width / 2;
    if !matches!(bytes, 6 | 8 | 20) || (s.contains(':') && s.contains('-')) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes);
    for p in parts {
        if p.len() != width || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        for i in (0..width).step_by(2) {
            out.push(u8::from_str_radix(&p[i..i + 2], 16).ok()?);
        }
    }
    Some(out)
}

/// A digest of a config as parsed (key order and white space aside).
pub(crate) fn config_digest(conf: &Value) -> String {
    if !conf.is_object() {
        // No config: nothing a delegate could be run with on its word.
        return String::new();
    }
    let canonical = serde_json::to_vec(conf).unwrap_or_default();
    hex::encode(Sha256::digest(&canonical))
}

fn plain(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..20])
}

/// The `ifb` name of an attachment: `bwp` and the first 12 hex digits of
/// SHA-512(network name + container ID), the reference's name (so both
/// implementations collide, and clean up, alike). The host's, never a
/// plugin's choice.
pub fn ifb_name(network: &str, container_id: &str) -> String {
    use sha2::Sha512;
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("bwp{}", &hex[..12])
}

impl Attachment {
    /// The attachment of an invocation for `command`: `CNI_CONTAINERID`
    /// and `CNI_IFNAME` from `env`, the network name and (GC) the valid
    /// attachments from the config.
    pub fn from_invocation(
        env: &[(String, String)],
        stdin: &[u8],
        command: Option<Command>,
    ) -> Attachment {
        let var = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let conf: Value = serde_json::from_slice(stdin).unwrap_or(Value::Null);
        let network = go_get(&conf, "name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let valid = if command == Some(Command::Gc) {
            let list = go_get(&conf, "cni.dev/valid-attachments")
                .or_else(|| go_get(&conf, "cni.dev/attachments"))
                .and_then(Value::as_array);
            // No list (or not a list): the runtime said nothing about
            // which attachments are valid, and the host removes nothing.
            list.map(|l| {
                l.iter()
                    .map(|a| Owner {
                        container_id: go_get(a, "containerID")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        ifname: go_get(a, "ifname")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                    })
                    .collect()
            })
        } else {
            None
        };
        Attachment {
            network,
            container_id: var("CNI_CONTAINERID"),
            ifname: var("CNI_IFNAME"),
            valid,
            addresses: Vec::new(),
            config_digest: config_digest(&conf),
            port_mappings: runtime_port_mappings(&conf),
            devices: ConfigDevices::from_config(&conf),
            vlans: ConfigVlans::from_config(&conf),
            ipam_subnets: ipam_subnets(&conf),
        }
    }

    /// The mark of a host link this attachment owns.
    pub fn mark(&self) -> String {
        let parts = [
            self.network.as_str(),
            self.container_id.as_str(),
            self.ifname.as_str(),
        ];
        let readable = format!("{ATTACHMENT_MARK}{}", parts.join(":"));
        if parts.iter().all(|p| plain(p)) && readable.len() <= MAX_MARK {
            readable
        } else {
            format!("{ATTACHMENT_MARK}#{}", digest(&parts))
        }
    }

    /// The mark of a host link the network shares.
    pub fn network_mark(&self) -> String {
        let readable = format!("{NETWORK_MARK}{}", self.network);
        if plain(&self.network) && readable.len() <= MAX_MARK {
            readable
        } else {
            format!("{NETWORK_MARK}#{}", digest(&[&self.network]))
        }
    }

    /// This attachment as a reservation holder.
    pub fn owner(&self) -> Owner {
        Owner {
            container_id: self.container_id.clone(),
            ifname: self.ifname.clone(),
        }
    }

    /// GC: whether a reservation held by `holder` belongs to an attachment
    /// the runtime still holds (outside GC: always, nothing is collected).
    pub fn still_valid(&self, holder: &Owner) -> bool {
        match &self.valid {
            None => true,
            Some(valid) => valid.iter().any(|v| v.holds(holder)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(cmd: Command) -> Vec<(String, String)> {
        vec![
            ("CNI_COMMAND".into(), cmd.as_str().into()),
            ("CNI_CONTAINERID".into(), "c1".into()),
            ("CNI_IFNAME".into(), "eth0".into()),
        ]
    }

    /// The attachment of a `cmd` invocation with `conf` on stdin.
    fn of(cmd: Command, conf: &[u8]) -> Attachment {
        Attachment::from_invocation(&env(cmd), conf, Some(cmd))
    }

    /// The IPAM subnets are read as host-local reads them: every range's
    /// subnet and the older `subnet`, keys in any case; none at all (no
    /// bound) when one of them is not a subnet.
    #[test]
    fn ipam_subnets_are_every_range_and_the_older_subnet() {
        let a = of(
            Command::Add,
            br#"{"name":"n","IPAM":{"type":"host-local","Subnet":"10.1.0.5/24",
                 "ranges":[[{"subnet":"10.2.0.0/16"},{"SUBNET":"fd00::/64"}]]}}"#,
        );
        let got: Vec<String> = a.ipam_subnets.iter().map(ToString::to_string).collect();
        assert_eq!(got, ["10.2.0.0/16", "fd00::/64", "10.1.0.5/24"]);
        let calico = of(
            Command::Add,
            br#"{"name":"n","ipam":{"type":"host-local",
                 "ranges":[[{"subnet":"usePodCidr"}],[{"subnet":"fd00::/64"}]]}}"#,
        );
        assert!(calico.ipam_subnets.is_empty(), "{:?}", calico.ipam_subnets);
        assert!(
            of(Command::Add, br#"{"name":"n","ipam":{"type":"static"}}"#)
                .ipam_subnets
                .is_empty()
        );
    }

    #[test]
    fn marks_name_the_attachment_and_the_network() {
        let a = of(Command::Add, br#"{"name":"net1"}"#);
        assert_eq!(a.mark(), "wasmcni:net1:c1:eth0");
        assert_eq!(a.network_mark(), "wasmcni-net:net1");
        assert!(a.valid.is_none());
        let odd = Attachment {
            network: "a:b".into(),
            ..a.clone()
        };
        assert!(odd.mark().starts_with("wasmcni:#"), "{}", odd.mark());
        assert_ne!(odd.mark(), a.mark());
        let long = Attachment {
            container_id: "x".repeat(300),
            ..a
        };
        assert!(long.mark().len() <= MAX_MARK);
    }

    #[test]
    fn the_config_digest_is_of_the_parsed_config() {
        let a = of(Command::Add, br#"{"name":"n","ipam":{"type":"static"}}"#);
        let b = of(
            Command::Add,
            b"{ \"ipam\": {\"type\": \"static\"},\n \"name\": \"n\" }",
        );
        assert_eq!(a.config_digest, b.config_digest);
        assert_eq!(a.config_digest.len(), 64);
        let c = of(
            Command::Add,
            br#"{"name":"n","ipam":{"type":"host-local"}}"#,
        );
        assert_ne!(a.config_digest, c.config_digest);
        let none = of(Command::Add, b"not json");
        assert_eq!(none.config_digest, "");
    }

    #[test]
    fn runtime_port_mappings_as_the_reference_reads_them() {
        let a = of(
            Command::Add,
            br#"{"name":"n","runtimeConfig":{"portMappings":[
                {"hostPort":8080,"containerPort":80},
                {"hostPort":53,"containerPort":53,"protocol":"UDP","hostIP":"10.0.0.1"},
                {"hostPort":9,"containerPort":9,"hostIP":"0.0.0.0"},
                {"hostPort":0,"containerPort":80},
                {"hostPort":70000,"containerPort":80},
                {"hostPort":1,"containerPort":1,"hostIP":"junk"},
                {"hostPort":2,"containerPort":2,"protocol":6}]}}"#,
        );
        let m = |h, c, p: &str, ip: Option<&str>| RuntimePortMapping {
            host_port: h,
            container_port: c,
            protocol: p.to_owned(),
            host_ip: ip.map(|i| i.parse().expect("ip")),
        };
        assert_eq!(
            a.port_mappings,
            vec![
                m(8080, 80, "tcp", None),
                m(53, 53, "udp", Some("10.0.0.1")),
                m(9, 9, "tcp", None)
            ]
        );
        let a = of(Command::Add, br#"{"name":"n"}"#);
        assert!(a.port_mappings.is_empty());
    }

    #[test]
    fn runtime_port_mappings_with_go_field_names() {
        // containerd's go-cni marshals its Go structs without json tags.
        let a = of(
            Command::Add,
            br#"{"name":"n","runtimeConfig":{"portMappings":[
                {"HostPort":8080,"ContainerPort":80,"Protocol":"tcp","HostIP":""},
                {"HostPort":5353,"ContainerPort":53,"Protocol":"UDP","HostIP":"10.0.0.1"}]}}"#,
        );
        assert_eq!(
            a.port_mappings,
            vec![
                RuntimePortMapping {
                    host_port: 8080,
                    container_port: 80,
                    protocol: "tcp".into(),
                    host_ip: None
                },
                RuntimePortMapping {
                    host_port: 5353,
                    container_port: 53,
                    protocol: "udp".into(),
                    host_ip: Some("10.0.0.1".parse().expect("ip"))
                }
            ]
        );
        let a = of(
            Command::Add,
            br#"{"Name":"n2","RuntimeConfig":{"DeviceID":"0000:00:1f.6"}}"#,
        );
        assert_eq!(a.network, "n2");
        assert_eq!(a.devices.device_id.as_deref(), Some("0000:00:1f.6"));
    }

    #[test]
    fn config_vlans_as_the_reference_bridge_reads_them() {
        let vlans = |conf: &str| of(Command::Add, conf.as_bytes()).vlans.describe();
        assert_eq!(vlans(r#"{"name":"n"}"#), "none");
        assert_eq!(vlans(r#"{"name":"n","vlan":0}"#), "none");
        assert_eq!(vlans(r#"{"name":"n","vlan":10}"#), "10");
        // Go's key matching; null is absent.
        assert_eq!(vlans(r#"{"name":"n","VLAN":4094}"#), "4094");
        assert_eq!(
            vlans(r#"{"name":"n","vlan":null,"vlanTrunk":null}"#),
            "none"
        );
        // A trunk without `vlan`: VLAN 1 is its native VLAN.
        assert_eq!(
            vlans(r#"{"name":"n","vlanTrunk":[{"minID":20,"maxID":130},{"ID":7},{}]}"#),
            "1, 7, 20-130"
        );
        assert_eq!(
            vlans(r#"{"name":"n","vlan":5,"VlanTrunk":[{"MinID":63,"maxid":64,"id":3}]}"#),
            "3, 5, 63-64"
        );
        assert_eq!(
            vlans(r#"{"name":"n","vlanTrunk":[{"minID":1,"maxID":4094}]}"#),
            "1-4094"
        );
        // A trunk naming nothing has no native VLAN.
        assert_eq!(vlans(r#"{"name":"n","vlanTrunk":[]}"#), "none");
        // What the reference refuses names nothing.
        for bad in [
            r#""vlan":4095"#,
            r#""vlan":-1"#,
            r#""vlan":5.0"#,
            r#""vlan":"5""#,
            r#""vlan":5,"vlanTrunk":[{"id":0}]"#,
            r#""vlan":5,"vlanTrunk":[{"minID":9,"maxID":2}]"#,
            r#""vlan":5,"vlanTrunk":[{"minID":2}]"#,
            r#""vlan":5,"vlanTrunk":[{"maxID":2}]"#,
            r#""vlan":5,"vlanTrunk":[7]"#,
            r#""vlan":5,"vlanTrunk":{"id":7}"#,
        ] {
            assert_eq!(vlans(&format!(r#"{{"name":"n",{bad}}}"#)), "none", "{bad}");
        }
    }

    #[test]
    fn macs_in_every_form_go_parses() {
        let six = Some(vec![0x02, 0, 0, 0, 0, 0x01]);
        assert_eq!(parse_mac("02:00:00:00:00:01"), six);
        assert_eq!(parse_mac("02-00-00-00-00-01"), six);
        assert_eq!(parse_mac("0200.0000.0001"), six);
        assert_eq!(parse_mac("02:00-00:00:00:01"), None);
        assert_eq!(parse_mac("0200.0000.001"), None);
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("+2:00:00:00:00:01"), None);
    }

    #[test]
    fn gc_reads_both_names_of_the_valid_attachments() {
        for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
            let conf =
                format!(r#"{{"name":"n","{key}":[{{"containerID":"c2","ifname":"eth1"}}]}}"#);
            let a = of(Command::Gc, conf.as_bytes());
            let v = a.valid.as_ref().expect("valid list");
            assert_eq!(v.len(), 1);
            assert!(a.still_valid(&Owner {
                container_id: "c2".into(),
                ifname: "eth1".into()
            }));
            assert!(!a.still_valid(&Owner {
                container_id: "c1".into(),
                ifname: "eth0".into()
            }));
        }
        // No list: the runtime said nothing, and the host's GC removes
        // nothing.
        let a = of(Command::Gc, br#"{"name":"n"}"#);
        assert_eq!(a.valid, None);
    }
}

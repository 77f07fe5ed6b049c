//! The CNI result: one canonical model (the spec 1.1 shape) and its JSON in
//! every supported spec version, converted the way libcni converts.
//!
//! # Versions and conversions
//!
//! | versions            | JSON shape                                                    |
//! |---------------------|---------------------------------------------------------------|
//! | 0.1.0, 0.2.0        | `ip4`/`ip6` objects `{ip, gateway?, routes?}`, `dns`          |
//! | 0.3.0, 0.3.1, 0.4.0 | `interfaces`, `ips` with `version` "4"/"6", `routes`, `dns`   |
//! | 1.0.0, 1.1.0        | as 0.4.0 without `version`; interface `mtu`, `socketPath`, `pciID` |
//!
//! Writing a version ([`CniResult::to_json`]) follows libcni (v1.2):
//!
//! * 0.3.x/0.4.0: interfaces lose `mtu`, `socketPath` and `pciID`; `ips`
//!   get `version` from the address family; routes are written whole
//!   (libcni shares one route type, so `mtu`, `advmss`, `priority`,
//!   `table`, `scope` survive).
//! * 0.1.0/0.2.0: only the *first* IPv4 and the first IPv6 address are kept
//!   (libcni silently drops the others, it does not fail); routes go under
//!   `ip4`/`ip6` by the family of `dst`, with only `dst` and `gw`; a route
//!   of a family with no address is dropped; interfaces and interface
//!   indexes are dropped. A result with no address at all cannot be written
//!   (libcni: "cannot convert: no valid IP addresses") → code 999, the code
//!   libcni's skel gives a plugin's plain error.
//! * `cniVersion` is always written, equal to the requested version.
//! * omitempty as in Go: empty strings, lists and absent options are left
//!   out; `mtu`, `advmss` and `priority` of 0 count as absent (Go `int`),
//!   `table`, `scope` and `interface` of 0 are written (Go `*int`). The
//!   interface `name` is always written. `dns` is always written for 0.x
//!   (a Go struct, `"dns": {}` when empty) and left out when empty for 1.x
//!   (libcni ≥ 1.2).
//! * Key order is libcni's: struct order for 0.x; for 1.x libcni ≥ 1.2
//!   re-marshals through a map, so keys are sorted at every level
//!   (`cniVersion` still comes first). [`CniResult::to_json_string`]
//!   reproduces this; a `serde_json::Value` orders keys by itself.
//!
//! Reading a version ([`CniResult::from_json`]) follows libcni's
//! `create.Create` + `ParsePrevResult`: the JSON's own `cniVersion` must be
//! of the same family as the requested version (`"0.3.1"` is accepted when
//! `"0.4.0"` is requested, `"1.0.0"` is not), and a missing or empty one is
//! taken to be the requested version (libcni injects the config's version
//! into a prevResult the same way). Fields a version does not have are
//! ignored (for example an interface `mtu` in a 0.4.0 result), as Go does.
//! The IPv4/IPv6 `version` of 0.3.x/0.4.0 `ips` is not trusted: the family
//! comes from the address. Stricter than Go: `address`/`ip`/`dst` are
//! required, numbers must be non-negative and fit their type, `null` list
//! elements are rejected.
//!
//! Addresses are parsed and written in canonical form, as Go's `net`
//! package does (`2001:DB8::0:1` → `2001:db8::1`; an IPv4-mapped IPv6
//! address becomes IPv4, for CIDRs when the prefix is ≥ 96).

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::error::Error;
use super::json;
use super::version::{normalize, SUPPORTED_VERSIONS};

// ---------------------------------------------------------------------------
// Addresses

/// An IP address with a prefix length, written `10.1.2.3/24`.
///
/// The address is kept as given (not masked): `10.1.2.3/24` is the address
/// 10.1.2.3 on a /24, as CNI results use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix_len: u8,
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn is_mapped(v6: &Ipv6Addr) -> bool {
    v6.to_ipv4_mapped().is_some()
}

impl Cidr {
    /// `addr/prefix_len`; the prefix must be at most 32 (IPv4) or 128
    /// (IPv6), else code 6. An IPv4-mapped IPv6 address with a prefix ≥ 96
    /// becomes the IPv4 address with the prefix minus 96.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Result<Cidr, Error> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix_len > max {
            return Err(Error::decode(format!(
                "invalid CIDR address \"{addr}/{prefix_len}\": prefix length above {max}"
            )));
        }
        let (addr, prefix_len) = match addr {
            IpAddr::V6(v6) if is_mapped(&v6) && prefix_len >= 96 => (unmap(addr), prefix_len - 96),
            _ => (addr, prefix_len),
        };
        Ok(Cidr { addr, prefix_len })
    }

    /// Parse `addr/prefix`, as Go's `net.ParseCIDR` (no zones, decimal
    /// prefix); failure is code 6 naming the input.
    pub fn parse(s: &str) -> Result<Cidr, Error> {
        let invalid = || Error::decode(format!("invalid CIDR address {s:?}"));
        let (addr, prefix) = s.split_once('/').ok_or_else(invalid)?;
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        let addr: IpAddr = addr.parse().map_err(|_| invalid())?;
        Cidr::new(addr, prefix).map_err(|_| invalid())
    }

    /// The address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// Whether this is an IPv4 address (what decides `version` "4"/"6" and
    /// `ip4`/`ip6` in older result versions).
    pub fn is_ipv4(&self) -> bool {
        match self.addr {
            IpAddr::V4(_) => true,
            IpAddr::V6(v6) => is_mapped(&v6),
        }
    }

    /// The address as a number, with the family's width.
    fn bits(&self) -> (u128, u32) {
        match self.addr {
            IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
            IpAddr::V6(a) => (u128::from(a), 128),
        }
    }

    fn with_bits(&self, v: u128) -> IpAddr {
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from(v as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(v)),
        }
    }

    fn mask(&self) -> u128 {
        let (_, width) = self.bits();
        let host = width - u32::from(self.prefix_len);
        let all = if width == 32 {
            u128::from(u32::MAX)
        } else {
            u128::MAX
        };
        all & !(u128::MAX.checked_shr(128 - host).unwrap_or(0) * u128::from(host > 0))
    }

    /// The network address (host bits cleared): `10.1.2.0` of `10.1.2.3/24`.
    pub fn network(&self) -> IpAddr {
        self.with_bits(self.bits().0 & self.mask())
    }

    /// The network's first host address (network + 1): the default gateway
    /// the reference plugins pick.
    pub fn first_host(&self) -> IpAddr {
        self.with_bits((self.bits().0 & self.mask()).wrapping_add(1))
    }

    /// Whether `ip` lies in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        let other = Cidr {
            addr: ip,
            prefix_len: self.prefix_len,
        };
        other.bits().0 & self.mask() == self.bits().0 & self.mask()
    }

    /// `0.0.0.0/0` or `::/0`.
    pub fn default_route(ipv4: bool) -> Cidr {
        let addr = if ipv4 {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        };
        Cidr {
            addr,
            prefix_len: 0,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl FromStr for Cidr {
    type Err = Error;
    fn from_str(s: &str) -> Result<Cidr, Error> {
        Cidr::parse(s)
    }
}

impl Serialize for Cidr {
    /// As CIDR text, `"10.1.2.3/24"`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

// Parse errors are raised inside the visitors (not after deserializing a
// String) so serde_json attaches the position of the value itself, which is
// what lets error messages name the field.

struct CidrVisitor;

impl serde::de::Visitor<'_> for CidrVisitor {
    type Value = Cidr;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a CIDR address string")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Cidr, E> {
        Cidr::parse(s).map_err(|e| E::custom(e.msg))
    }
}

impl<'de> Deserialize<'de> for Cidr {
    /// From CIDR text, `"10.1.2.3/24"`, as [`Cidr::parse`] reads it.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Cidr, D::Error> {
        d.deserialize_str(CidrVisitor)
    }
}

struct GatewayVisitor;

impl<'de> serde::de::Visitor<'de> for GatewayVisitor {
    type Value = Option<IpAddr>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an IP address string")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Option<IpAddr>, E> {
        if s.is_empty() {
            return Ok(None);
        }
        s.parse::<IpAddr>()
            .map(|ip| Some(unmap(ip)))
            .map_err(|_| E::custom(format!("invalid IP address {s:?}")))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Option<IpAddr>, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<IpAddr>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<IpAddr>, D::Error> {
        d.deserialize_str(GatewayVisitor)
    }
}

/// Parse a gateway: `null`/`""` → none (Go's `net.IP` does the same),
/// else an IP address (IPv4-mapped IPv6 becomes IPv4).
fn de_gateway<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    d.deserialize_option(GatewayVisitor)
}

/// `null` or missing → the type's default (Go leaves the zero value).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

// ---------------------------------------------------------------------------
// The canonical model

/// A CNI result in the spec 1.1 model, independent of any wire version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniResult {
    /// Interfaces created or touched by the plugin.
    pub interfaces: Vec<Interface>,
    /// IP addresses assigned.
    pub ips: Vec<IpConfig>,
    /// Routes installed.
    pub routes: Vec<Route>,
    /// DNS settings (empty when there are none).
    pub dns: Dns,
}

/// An interface in a result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    /// Interface name (always written, even when empty).
    pub name: String,
    /// Hardware address; empty = absent.
    pub mac: String,
    /// MTU (1.1); `None` or 0 = absent. Not representable before 1.0.0.
    pub mtu: Option<u32>,
    /// Netns path of the sandbox the interface is in; empty = a host interface.
    pub sandbox: String,
    /// vhost-user / af_xdp socket path (1.1); not representable before 1.0.0.
    pub socket_path: Option<String>,
    /// PCI address of the device (1.1), e.g. `0000:03:00.1`; not
    /// representable before 1.0.0.
    pub pci_id: Option<String>,
}

impl Interface {
    /// An interface with just a name.
    pub fn new(name: impl Into<String>) -> Interface {
        Interface {
            name: name.into(),
            ..Interface::default()
        }
    }
}

/// An IP address assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpConfig {
    /// Index into [`CniResult::interfaces`] (written even when 0).
    pub interface: Option<usize>,
    /// Address and prefix, e.g. `10.22.0.5/16`.
    pub address: Cidr,
    /// Default gateway for this subnet, if any.
    pub gateway: Option<IpAddr>,
}

impl IpConfig {
    /// An address with no interface index and no gateway.
    pub fn new(address: Cidr) -> IpConfig {
        IpConfig {
            interface: None,
            address,
            gateway: None,
        }
    }
}

/// A route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination, e.g. `0.0.0.0/0`.
    pub dst: Cidr,
    /// Next hop; none = the default gateway.
    pub gw: Option<IpAddr>,
    /// Route MTU (1.1); `None` or 0 = absent.
    pub mtu: Option<u32>,
    /// Advertised MSS (1.1); `None` or 0 = absent.
    pub advmss: Option<u32>,
    /// Priority / metric (1.1); `None` or 0 = absent.
    pub priority: Option<u32>,
    /// Routing table (1.1); 0 is written.
    pub table: Option<u32>,
    /// Route scope (1.1): 0 universe, 200 site, 253 link, 254 host; 0 is written.
    pub scope: Option<u8>,
}

impl Route {
    /// A route to `dst` with nothing else set.
    pub fn new(dst: Cidr) -> Route {
        Route {
            dst,
            gw: None,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

/// DNS settings, in a result or a network config (`dns`).
///
/// Serializes in spec order, each field left out when empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(expecting = "a DNS object")]
pub struct Dns {
    /// Name servers (IP addresses as strings).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub nameservers: Vec<String>,
    /// Local domain.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub domain: String,
    /// Search domains.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub search: Vec<String>,
    /// Resolver options.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub options: Vec<String>,
}

impl Dns {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

// ---------------------------------------------------------------------------
// Version families

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// 0.1.0, 0.2.0
    V02,
    /// 0.3.0, 0.3.1, 0.4.0
    V04,
    /// 1.0.0, 1.1.0
    V1,
}

impl Family {
    fn of(version: &str) -> Option<Family> {
        match version {
            "0.1.0" | "0.2.0" => Some(Family::V02),
            "0.3.0" | "0.3.1" | "0.4.0" => Some(Family::V04),
            "1.0.0" | "1.1.0" => Some(Family::V1),
            _ => None,
        }
    }

    fn versions(self) -> &'static str {
        match self {
            Family::V02 => "[0.1.0 0.2.0]",
            Family::V04 => "[0.3.0 0.3.1 0.4.0]",
            Family::V1 => "[1.0.0 1.1.0]",
        }
    }
}

fn unsupported_version(version: &str) -> Error {
    Error::incompatible_version(format!("unsupported CNI result version {version:?}"))
        .with_details(format!("supported result versions: {SUPPORTED_VERSIONS:?}"))
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn nonzero(v: Option<u32>) -> Option<u32> {
    v.filter(|&n| n != 0)
}

fn nonempty(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|s| !s.is_empty())
}

// ---------------------------------------------------------------------------
// Reading

#[derive(Deserialize)]
#[serde(expecting = "a route object")]
struct InRoute {
    dst: Cidr,
    #[serde(default, deserialize_with = "de_gateway")]
    gw: Option<IpAddr>,
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default)]
    advmss: Option<u32>,
    #[serde(default)]
    priority: Option<u32>,
    #[serde(default)]
    table: Option<u32>,
    #[serde(default)]
    scope: Option<u8>,
}

impl From<InRoute> for Route {
    fn from(r: InRoute) -> Route {
        Route {
            dst: r.dst,
            gw: r.gw,
            mtu: nonzero(r.mtu),
            advmss: nonzero(r.advmss),
            priority: nonzero(r.priority),
            table: r.table,
            scope: r.scope,
        }
    }
}

#[derive(Deserialize)]
#[serde(expecting = "an ip4/ip6 object")]
struct In02Ip {
    ip: Cidr,
    #[serde(default, deserialize_with = "de_gateway")]
    gateway: Option<IpAddr>,
    #[serde(default, deserialize_with = "nullable")]
    routes: Vec<InRoute>,
}

#[derive(Deserialize)]
#[serde(expecting = "a result object")]
struct In02 {
    #[serde(default)]
    ip4: Option<In02Ip>,
    #[serde(default)]
    ip6: Option<In02Ip>,
    #[serde(default, deserialize_with = "nullable")]
    dns: Dns,
}

#[derive(Deserialize)]
#[serde(expecting = "an IP configuration object")]
struct InIp {
    #[serde(default)]
    interface: Option<usize>,
    address: Cidr,
    #[serde(default, deserialize_with = "de_gateway")]
    gateway: Option<IpAddr>,
}

impl From<InIp> for IpConfig {
    fn from(ip: InIp) -> IpConfig {
        IpConfig {
            interface: ip.interface,
            address: ip.address,
            gateway: ip.gateway,
        }
    }
}

#[derive(Deserialize)]
#[serde(expecting = "an interface object")]
struct In04Iface {
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    #[serde(default, deserialize_with = "nullable")]
    mac: String,
    #[serde(default, deserialize_with = "nullable")]
    sandbox: String,
}

#[derive(Deserialize)]
#[serde(expecting = "an interface object")]
struct In1Iface {
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    #[serde(default, deserialize_with = "nullable")]
    mac: String,
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    sandbox: String,
    #[serde(default, rename = "socketPath")]
    socket_path: Option<String>,
    #[serde(default, rename = "pciID")]
    pci_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    expecting = "a result object",
    bound(deserialize = "I: Deserialize<'de>")
)]
struct In04<I> {
    #[serde(default, deserialize_with = "nullable")]
    interfaces: Vec<I>,
    #[serde(default, deserialize_with = "nullable")]
    ips: Vec<InIp>,
    #[serde(default, deserialize_with = "nullable")]
    routes: Vec<InRoute>,
    #[serde(default, deserialize_with = "nullable")]
    dns: Dns,
}

// ---------------------------------------------------------------------------
// Writing

#[derive(Serialize)]
struct OutRoute0 {
    dst: Cidr,
    #[serde(skip_serializing_if = "Option::is_none")]
    gw: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    advmss: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<u8>,
}

impl OutRoute0 {
    fn full(r: &Route) -> OutRoute0 {
        OutRoute0 {
            dst: r.dst,
            gw: r.gw,
            mtu: nonzero(r.mtu),
            advmss: nonzero(r.advmss),
            priority: nonzero(r.priority),
            table: r.table,
            scope: r.scope,
        }
    }

    fn dst_gw(r: &Route) -> OutRoute0 {
        OutRoute0 {
            dst: r.dst,
            gw: r.gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

#[derive(Serialize)]
struct Out02Ip {
    ip: Cidr,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<OutRoute0>,
}

#[derive(Serialize)]
struct Out02<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip4: Option<Out02Ip>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip6: Option<Out02Ip>,
    dns: &'a Dns,
}

#[derive(Serialize)]
struct Out04Iface<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    mac: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    sandbox: &'a str,
}

#[derive(Serialize)]
struct Out04Ip {
    version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
    address: Cidr,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
}

#[derive(Serialize)]
struct Out04<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    interfaces: Vec<Out04Iface<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ips: Vec<Out04Ip>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<OutRoute0>,
    dns: &'a Dns,
}

// 1.x: every struct below has its fields in sorted key order (libcni ≥ 1.2
// re-marshals 1.x results through a map).

#[derive(Serialize)]
struct OutRoute1 {
    #[serde(skip_serializing_if = "Option::is_none")]
    advmss: Option<u32>,
    dst: Cidr,
    #[serde(skip_serializing_if = "Option::is_none")]
    gw: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<u32>,
}

#[derive(Serialize)]
struct OutDns1<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    domain: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    nameservers: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    options: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    search: &'a [String],
}

#[derive(Serialize)]
struct Out1Iface<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    mac: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    name: &'a str,
    #[serde(rename = "pciID", skip_serializing_if = "Option::is_none")]
    pci_id: Option<&'a str>,
    #[serde(skip_serializing_if = "str::is_empty")]
    sandbox: &'a str,
    #[serde(rename = "socketPath", skip_serializing_if = "Option::is_none")]
    socket_path: Option<&'a str>,
}

#[derive(Serialize)]
struct Out1Ip {
    address: Cidr,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
}

#[derive(Serialize)]
struct Out1<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dns: Option<OutDns1<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    interfaces: Vec<Out1Iface<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ips: Vec<Out1Ip>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<OutRoute1>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Out<'a> {
    V02(Out02<'a>),
    V04(Out04<'a>),
    V1(Out1<'a>),
}

// ---------------------------------------------------------------------------
// Conversions

impl CniResult {
    /// Read a result in spec version `version` (empty = 0.1.0).
    ///
    /// Errors: `version` not supported → code 1; the JSON's own
    /// `cniVersion` of another version family → code 1 (libcni: "result
    /// type supports [...] but unmarshalled CNIVersion is ..."); anything
    /// malformed → code 6 naming the field (`ips[0].address`).
    pub fn from_json(value: &Value, version: &str) -> Result<CniResult, Error> {
        let version = normalize(version);
        let family = Family::of(version).ok_or_else(|| unsupported_version(version))?;
        let obj = value.as_object().ok_or_else(|| {
            Error::decode(format!(
                "failed to decode CNI result: expected a JSON object, got {}",
                json_kind(value)
            ))
        })?;
        let own = match gojson::field(obj, "cniVersion") {
            None => version,
            Some(Value::String(s)) if s.is_empty() => version,
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                return Err(Error::decode(format!(
                    "failed to decode CNI result: field \"cniVersion\" must be a string, got {}",
                    json_kind(other)
                )))
            }
        };
        if Family::of(own) != Some(family) {
            return Err(Error::incompatible_version(format!(
                "result type supports {} but unmarshalled CNIVersion is {own:?}",
                family.versions()
            )));
        }
        let decode_err = |e: json::DecodeError| {
            Error::decode(format!("failed to decode CNI result: {}", e.describe("")))
        };
        Ok(match family {
            Family::V02 => {
                let r: In02 = json::decode(value).map_err(decode_err)?;
                let mut out = CniResult {
                    dns: r.dns,
                    ..CniResult::default()
                };
                for ip in [r.ip4, r.ip6].into_iter().flatten() {
                    out.ips.push(IpConfig {
                        interface: None,
                        address: ip.ip,
                        gateway: ip.gateway,
                    });
                    out.routes.extend(ip.routes.into_iter().map(Route::from));
                }
                out
            }
            Family::V04 => {
                let r: In04<In04Iface> = json::decode(value).map_err(decode_err)?;
                CniResult {
                    interfaces: r
                        .interfaces
                        .into_iter()
                        .map(|i| Interface {
                            name: i.name,
                            mac: i.mac,
                            sandbox: i.sandbox,
                            ..Interface::default()
                        })
                        .collect(),
                    ips: r.ips.into_iter().map(IpConfig::from).collect(),
                    routes: r.routes.into_iter().map(Route::from).collect(),
                    dns: r.dns,
                }
            }
            Family::V1 => {
                let r: In04<In1Iface> = json::decode(value).map_err(decode_err)?;
                CniResult {
                    interfaces: r
                        .interfaces
                        .into_iter()
                        .map(|i| Interface {
                            name: i.name,
                            mac: i.mac,
                            mtu: nonzero(i.mtu),
                            sandbox: i.sandbox,
                            socket_path: i.socket_path.filter(|s| !s.is_empty()),
                            pci_id: i.pci_id.filter(|s| !s.is_empty()),
                        })
                        .collect(),
                    ips: r.ips.into_iter().map(IpConfig::from).collect(),
                    routes: r.routes.into_iter().map(Route::from).collect(),
                    dns: r.dns,
                }
            }
        })
    }

    /// [`from_json`](Self::from_json) from raw bytes (a plugin's stdout);
    /// invalid JSON is code 6.
    pub fn from_slice(bytes: &[u8], version: &str) -> Result<CniResult, Error> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| Error::decode(format!("failed to decode CNI result: {e}")))?;
        CniResult::from_json(&value, version)
    }

    fn to_wire<'a>(&'a self, version: &'a str) -> Result<Out<'a>, Error> {
        let version = normalize(version);
        let family = Family::of(version).ok_or_else(|| unsupported_version(version))?;
        Ok(match family {
            Family::V02 => {
                let mut ip4: Option<Out02Ip> = None;
                let mut ip6: Option<Out02Ip> = None;
                for ip in &self.ips {
                    let slot = if ip.address.is_ipv4() {
                        &mut ip4
                    } else {
                        &mut ip6
                    };
                    if slot.is_none() {
                        *slot = Some(Out02Ip {
                            ip: ip.address,
                            gateway: ip.gateway,
                            routes: Vec::new(),
                        });
                    }
                    if ip4.is_some() && ip6.is_some() {
                        break;
                    }
                }
                for r in &self.routes {
                    let slot = if r.dst.is_ipv4() { &mut ip4 } else { &mut ip6 };
                    if let Some(ip) = slot {
                        ip.routes.push(OutRoute0::dst_gw(r));
                    }
                }
                if ip4.is_none() && ip6.is_none() {
                    return Err(Error::internal(format!(
                        "cannot convert result to CNI version {version}: no valid IP addresses"
                    )));
                }
                Out::V02(Out02 {
                    cni_version: version,
                    ip4,
                    ip6,
                    dns: &self.dns,
                })
            }
            Family::V04 => Out::V04(Out04 {
                cni_version: version,
                interfaces: self
                    .interfaces
                    .iter()
                    .map(|i| Out04Iface {
                        name: &i.name,
                        mac: &i.mac,
                        sandbox: &i.sandbox,
                    })
                    .collect(),
                ips: self
                    .ips
                    .iter()
                    .map(|ip| Out04Ip {
                        version: if ip.address.is_ipv4() { "4" } else { "6" },
                        interface: ip.interface,
                        address: ip.address,
                        gateway: ip.gateway,
                    })
                    .collect(),
                routes: self.routes.iter().map(OutRoute0::full).collect(),
                dns: &self.dns,
            }),
            Family::V1 => Out::V1(Out1 {
                cni_version: version,
                dns: (!self.dns.is_empty()).then(|| OutDns1 {
                    domain: &self.dns.domain,
                    nameservers: &self.dns.nameservers,
                    options: &self.dns.options,
                    search: &self.dns.search,
                }),
                interfaces: self
                    .interfaces
                    .iter()
                    .map(|i| Out1Iface {
                        mac: &i.mac,
                        mtu: nonzero(i.mtu),
                        name: &i.name,
                        pci_id: nonempty(&i.pci_id),
                        sandbox: &i.sandbox,
                        socket_path: nonempty(&i.socket_path),
                    })
                    .collect(),
                ips: self
                    .ips
                    .iter()
                    .map(|ip| Out1Ip {
                        address: ip.address,
                        gateway: ip.gateway,
                        interface: ip.interface,
                    })
                    .collect(),
                routes: self
                    .routes
                    .iter()
                    .map(|r| OutRoute1 {
                        advmss: nonzero(r.advmss),
                        dst: r.dst,
                        gw: r.gw,
                        mtu: nonzero(r.mtu),
                        priority: nonzero(r.priority),
                        scope: r.scope,
                        table: r.table,
                    })
                    .collect(),
            }),
        })
    }

    /// This result as JSON of spec version `version` (empty = 0.1.0); see
    /// the [module docs](self) for what each version keeps.
    ///
    /// Errors: unsupported `version` → code 1; 0.1.0/0.2.0 with no IP
    /// address → code 999.
    pub fn to_json(&self, version: &str) -> Result<Value, Error> {
        let wire = self.to_wire(version)?;
        serde_json::to_value(&wire)
            .map_err(|e| Error::internal(format!("failed to encode CNI result: {e}")))
    }

    /// This result as the text a plugin prints: [`to_json`](Self::to_json)
    /// indented with four spaces, keys in libcni's order.
    pub fn to_json_string(&self, version: &str) -> Result<String, Error> {
        let wire = self.to_wire(version)?;
        json::to_pretty_string(&wire)
            .map_err(|e| Error::internal(format!("failed to encode CNI result: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_arithmetic() {
        let c = Cidr::parse("10.1.2.3/24").expect("cidr");
        assert_eq!(c.network().to_string(), "10.1.2.0");
        assert_eq!(c.first_host().to_string(), "10.1.2.1");
        assert!(c.contains("10.1.2.200".parse().expect("ip")));
        assert!(!c.contains("10.1.3.1".parse().expect("ip")));
        assert!(!c.contains("fd00::1".parse().expect("ip")));
        let v6 = Cidr::parse("fd00:1::5/64").expect("cidr");
        assert_eq!(v6.network().to_string(), "fd00:1::");
        assert_eq!(v6.first_host().to_string(), "fd00:1::1");
        let all = Cidr::parse("10.9.9.9/0").expect("cidr");
        assert_eq!(all.network().to_string(), "0.0.0.0");
        assert!(all.contains("1.2.3.4".parse().expect("ip")));
        let host = Cidr::parse("10.9.9.9/32").expect("cidr");
        assert_eq!(host.network().to_string(), "10.9.9.9");
        assert_eq!(Cidr::default_route(true).to_string(), "0.0.0.0/0");
        assert_eq!(Cidr::default_route(false).to_string(), "::/0");
    }

    #[test]
    fn cidr_parse_and_canonical_form() {
        let c = Cidr::parse("2001:DB8::0:1/64").ok();
        assert_eq!(c.map(|c| c.to_string()).as_deref(), Some("2001:db8::1/64"));
        let c = Cidr::parse("::ffff:10.1.2.3/120").ok();
        assert_eq!(c.map(|c| c.to_string()).as_deref(), Some("10.1.2.3/24"));
        assert_eq!(c.map(|c| c.is_ipv4()), Some(true));
        for bad in [
            "10.1.2.3",
            "10.1.2.3/33",
            "::1/129",
            "10.1.2.3/",
            "10.1.2.3/+1",
            "10.1.2.3/ 8",
            "010.1.2.3/8",
            "fe80::1%eth0/64",
            "/8",
            "x/8",
            "10.1.2.3/8/8",
            "",
        ] {
            let e = Cidr::parse(bad).err();
            assert_eq!(e.map(|e| e.code), Some(6), "{bad:?} should be rejected");
        }
    }
}

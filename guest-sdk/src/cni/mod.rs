//! The CNI protocol, as pure logic: errors, spec versions, the `CNI_*`
//! environment, the network configuration and results in every spec
//! version (0.1.0 – 1.1.0).
//!
//! Nothing here performs I/O or touches the network; it follows the
//! behaviour of the reference Go library (libcni and its `skel`) so a
//! plugin built on it answers a runtime exactly as a Go plugin would.
//!
//! | module      | what                                                        |
//! |-------------|-------------------------------------------------------------|
//! | [`error`]   | [`Error`] (code, msg, details) and [`ErrorCode`]             |
//! | [`version`] | supported versions, [`Version`], [`VersionInfo`], checks    |
//! | [`env`](mod@env) | [`Command`] and the validated [`Env`]                        |
//! | [`args`]    | `CNI_ARGS` pairs ([`CniArgs`])                               |
//! | [`config`]  | [`NetConf`], the plugin's network configuration             |
//! | [`result`]  | [`CniResult`] and its conversion to/from every version      |
//! | [`validate`]| container ID / network name / interface name rules          |
//!
//! # Example: config and result
//! A plugin's own settings sit beside the standard keys of its config;
//! [`NetConf::plugin_config`] reads the whole object into the plugin's
//! type, in which guest-sdk's JSON types (a [`Cidr`] from
//! `"10.22.0.0/24"`, [`Dns`], [`IpamConf`]) may appear. The result is
//! built in the 1.1 model and written in the config's version. Pure: this
//! runs natively, as a plugin's unit tests do.
//!
//! ```
//! use guest_sdk::cni::{Cidr, CniResult, Dns, Error, Interface, IpConfig, NetConf, Route};
//!
//! #[derive(serde::Deserialize)]
//! struct Conf {
//!     subnet: Cidr,
//!     mtu: Option<u32>,
//!     #[serde(default)]
//!     dns: Dns,
//! }
//!
//! let stdin = br#"{"cniVersion": "1.0.0", "name": "net", "type": "my-plugin",
//!     "subnet": "10.22.0.0/24", "mtu": 1400, "dns": {"nameservers": ["10.22.0.1"]}}"#;
//! let conf = NetConf::parse(stdin)?; // code 6 or 7 naming the field when it is wrong
//! let mine: Conf = conf.plugin_config()?; // unknown keys ignored; code 7 naming a bad one
//! assert_eq!(mine.subnet.to_string(), "10.22.0.0/24");
//!
//! let result = CniResult {
//!     interfaces: vec![Interface {
//!         mtu: mine.mtu,
//!         sandbox: "/run/netns/c1".into(), // CNI_NETNS: a container interface
//!         ..Interface::new("eth0")
//!     }],
//!     ips: vec![IpConfig {
//!         interface: Some(0), // index into `interfaces`
//!         gateway: Some(mine.subnet.first_host()),
//!         ..IpConfig::new(Cidr::parse("10.22.0.5/24")?)
//!     }],
//!     routes: vec![Route::new(Cidr::default_route(true))], // via the gateway
//!     dns: mine.dns,
//! };
//! // What the runtime reads (a plugin's ADD returns `result`; skel prints it).
//! let json = result.to_json_string(&conf.cni_version)?;
//! assert!(json.contains(r#""address": "10.22.0.5/24""#), "{json}");
//! // A chained plugin reads it back from its `prevResult`.
//! assert_eq!(CniResult::from_slice(json.as_bytes(), "1.0.0")?, result);
//! # Ok::<(), Error>(())
//! ```

pub mod args;
pub mod config;
pub mod env;
pub mod error;
mod json;
pub mod result;
pub mod validate;
pub mod version;

pub use args::CniArgs;
pub use config::{GcAttachment, IpamConf, NetConf};
pub use env::{Command, Env};
pub use error::{Error, ErrorCode};
/// [`Route`] under a name that does not clash with [`net::Route`](crate::net::Route)
/// (a route the kernel holds, also named [`net::KernelRoute`](crate::net::KernelRoute)).
pub use result::Route as ResultRoute;
pub use result::{Cidr, CniResult, Dns, Interface, IpConfig, Route};
pub use version::{Version, VersionInfo, LATEST, SUPPORTED_VERSIONS};

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

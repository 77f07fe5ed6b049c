//! The `dhcp` field of a policy entry ([`DhcpGrant`]): which DHCP daemon
//! the host talks to for the plugin.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The default socket of wasmcni's DHCP daemon (`wasmcni dhcp-daemon`).
pub const DEFAULT_DHCP_SOCKET: &str = "/run/wasmcni/dhcp.sock";

/// `plugins.NAME.dhcp`: the plugin may have the host obtain, renew and
/// release its attachment's DHCP lease through the daemon listening on
/// `socket`.
///
/// # Capabilities
/// The host hands that daemon the container namespace it opened from
/// `CNI_NETNS` (the open file) and the attachment's interface name; the
/// plugin names neither, nor any other socket (a `daemonSocketPath` that
/// is not `socket` is refused).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DhcpGrant {
    /// The daemon's unix socket: an absolute path without `.` or `..`.
    pub socket: PathBuf,
}

impl DhcpGrant {
    /// Why `socket` is not a plain absolute path, if it is not.
    pub fn invalid(&self) -> Option<String> {
        let plain = self.socket.is_absolute()
            && self.socket.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::Normal(_)
                )
            });
        (!plain).then(|| {
            format!(
                "must be an absolute path without `.` or `..`, got {:?}",
                self.socket
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_a_plain_absolute_path() {
        let g = |s: &str| DhcpGrant {
            socket: PathBuf::from(s),
        };
        assert!(g(DEFAULT_DHCP_SOCKET).invalid().is_none());
        assert!(g("run/dhcp.sock").invalid().is_some());
        assert!(g("/run/../etc/x").invalid().is_some());
        let e: Result<DhcpGrant, _> = serde_json::from_str(r#"{"socket": "/a", "other": 1}"#);
        assert!(e.is_err());
    }
}

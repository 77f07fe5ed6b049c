//! The one rule wasmcni keeps outside its own tables: iptables' FORWARD
//! jumping to `WASMCNI-FORWARD`, which runs the admins' `CNI-ADMIN` and
//! accepts what carries the forward mark (see
//! [`Ctx::fw_forward_accept`]).

use super::compile::DEFAULT_FORWARD_MARK;
use crate::caps::bindings::wasmcni::plugin::types::ErrorCode;
use crate::caps::bindings::CapError;
use crate::caps::ctx::Ctx;
use crate::netns::Kind;

impl Ctx {
    /// The one rule wasmcni keeps outside its own tables, once per node
    /// and family: where an iptables `filter` table exists (legacy or nft;
    /// Docker and kube-proxy nodes set FORWARD to DROP, which an accept in
    /// wasmcni's chain cannot override), FORWARD starts with a jump to
    /// `WASMCNI-FORWARD`: first the admins' `CNI-ADMIN` (created empty if
    /// missing, never changed), then accept what carries the forward mark.
    /// Checked by netlink (iptables-nft) or `iptables -C` (legacy), and
    /// installed by `iptables` itself (it must be in iptables' dialect),
    /// so in practice once per node. Never undone: it lets through only
    /// what wasmcni's own rules mark.
    pub(super) fn fw_forward_accept(&mut self) -> Result<(), CapError> {
        let mark = match self.ns_grant(Kind::Host).firewall.forward_mark {
            Some(m) if m != 0 => m,
            _ => DEFAULT_FORWARD_MARK,
        };
        for ipv6 in [false, true] {
            let (cmd, names) = if ipv6 {
                ("ip6tables", "/proc/net/ip6_tables_names")
            } else {
                ("iptables", "/proc/net/ip_tables_names")
            };
            let legacy_cmd = format!("{cmd}-legacy");
            // iptables-nft's table, read by netlink; legacy tables only
            // when they are in use (the kernel lists an empty `filter` in
            // every namespace).
            let nft = self
                .nft()?
                .jumps_to(ipv6, "filter", "FORWARD", FORWARD_CHAIN)?;
            let cmd = match nft {
                Some(true) => continue,
                Some(false) => cmd.to_owned(),
                None => {
                    let listed = std::fs::read_to_string(names)
                        .is_ok_and(|s| s.lines().any(|l| l.trim() == "filter"));
                    let in_use = listed
                        && iptables_output(&legacy_cmd, &["-S", "FORWARD"])
                            .is_ok_and(|out| out.lines().any(|l| l.trim() != "-P FORWARD ACCEPT"));
                    if !in_use {
                        continue;
                    }
                    let check = [
                        "-C",
                        "FORWARD",
                        "-m",
                        "comment",
                        "--comment",
                        "wasmcni",
                        "-j",
                        FORWARD_CHAIN,
                    ];
                    if iptables(&legacy_cmd, &check).is_ok() {
                        continue;
                    }
                    legacy_cmd
                }
            };
            let cmd = cmd.as_str();
            let mark = format!("{mark:#x}/{mark:#x}");
            // Creating a chain that exists fails: fine.
            let _ = iptables(cmd, &["-N", FORWARD_CHAIN]);
            let _ = iptables(cmd, &["-N", ADMIN_CHAIN]);
            let steps: [&[&str]; 4] = [
                &["-F", FORWARD_CHAIN],
                &["-A", FORWARD_CHAIN, "-j", ADMIN_CHAIN],
                &[
                    "-A",
                    FORWARD_CHAIN,
                    "-m",
                    "mark",
                    "--mark",
                    &mark,
                    "-j",
                    "ACCEPT",
                ],
                &[
                    "-I",
                    "FORWARD",
                    "1",
                    "-m",
                    "comment",
                    "--comment",
                    "wasmcni",
                    "-j",
                    FORWARD_CHAIN,
                ],
            ];
            for args in steps {
                iptables(cmd, args).map_err(|e| {
                    log::warn!("{cmd} {}: {e}", args.join(" "));
                    CapError::Code(ErrorCode::NotSupported)
                })?;
            }
        }
        Ok(())
    }
}

/// The iptables chain FORWARD jumps to ([`Ctx::fw_forward_accept`]).
const FORWARD_CHAIN: &str = "WASMCNI-FORWARD";

/// The admins' override chain (the reference firewall plugin's default
/// `iptablesAdminChainName`).
const ADMIN_CHAIN: &str = "CNI-ADMIN";

/// Runs `iptables`/`ip6tables` (waiting for its lock) in wasmcni's own
/// namespace, the node's.
///
/// # Ambient Authority
/// Executes the node's iptables binary; only for the static FORWARD rule.
fn iptables(cmd: &str, args: &[&str]) -> Result<(), String> {
    iptables_output(cmd, args).map(|_| ())
}

/// [`iptables`], returning what it printed.
fn iptables_output(cmd: &str, args: &[&str]) -> Result<String, String> {
    let exe = ["/usr/sbin/", "/sbin/", "/usr/bin/"]
        .iter()
        .map(|d| format!("{d}{cmd}"))
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| cmd.to_owned());
    let out = std::process::Command::new(&exe)
        .arg("-w")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{exe}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

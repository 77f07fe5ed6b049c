//! `wasmcni:plugin/dhcp`: the attachment's DHCP lease, through wasmcni's
//! DHCP daemon ([`crate::dhcp_wire`]). The host names the lease (the
//! client identifier `<container id>/<network>/<ifname>`, the
//! attachment's), hands the daemon the container namespace it opened from
//! `CNI_NETNS`, and journals an ADD's lease (a failed ADD releases it);
//! the lease's address is not the attachment's own (S13: whatever answers
//! on the link chose it; an operator vouches for a range with
//! `static-ranges`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::args::{arg_str, fields, AuditArg};
use super::authority::dhcp::Call;
use super::bindings::ip_to_wit;
use super::bindings::wasmcni::plugin::dhcp::{Host, Lease, LeaseRequest, LeaseRoute};
use super::bindings::wasmcni::plugin::types::{ErrorCode, IpPrefix};
use super::bindings::CapError;
use super::ctx::{Command, Ctx, Inverse, StoreData};
use super::row::*;
use crate::dhcp_wire::{self, Answer, Options, Request};

/// The most parameter codes a request asks for.
const MAX_REQUEST: usize = 64;
/// The most options a request provides.
const MAX_PROVIDE: usize = 16;
/// How long a release may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

impl AuditArg for LeaseRequest {
    fn audit(&self) -> Value {
        fields([
            (
                "socket",
                self.socket.as_deref().map_or(Value::Null, arg_str),
            ),
            ("request", json!(self.request)),
            (
                "provide",
                json!(self.provide.iter().map(|o| o.code).collect::<Vec<_>>()),
            ),
            ("broadcast", json!(self.broadcast)),
            ("timeout-ms", json!(self.timeout_ms)),
        ])
    }
}

/// The lease's key: the reference's client identifier
/// `<container id>/<network>/<ifname>`, whole (the daemon's key, never
/// cut, so no two attachments share one).
fn client_id(network: &str, container_id: &str, ifname: &str) -> String {
    format!("{container_id}/{network}/{ifname}")
}

/// The client identifier sent to the server: the key, as the reference
/// sends it; one longer than an option holds is cut and ends in a hash
/// of the whole (`/` and 16 hex digits), where the reference's cut would
/// give two attachments (networks with long names in one pod) one lease.
fn wire_client_id(key: &str) -> Vec<u8> {
    if key.len() <= dhcp_wire::MAX_CLIENT_ID {
        return key.as_bytes().to_vec();
    }
    use sha2::Digest;
    let hash = hex::encode(&sha2::Sha256::digest(key.as_bytes())[..8]);
    let mut id = key.as_bytes()[..dhcp_wire::MAX_CLIENT_ID - 1 - hash.len()].to_vec();
    id.push(b'/');
    id.extend_from_slice(hash.as_bytes());
    id
}

fn wit_lease(l: &dhcp_wire::Lease) -> Lease {
    let v4 = |ip| ip_to_wit(IpAddr::V4(ip));
    Lease {
        address: IpPrefix {
            address: v4(l.ip),
            prefix_len: l.prefix,
        },
        router: l.router.map(v4),
        routes: l
            .routes
            .iter()
            .map(|r| LeaseRoute {
                destination: IpPrefix {
                    address: v4(r.dst),
                    prefix_len: r.prefix,
                },
                gateway: (!r.gw.is_unspecified()).then(|| v4(r.gw)),
            })
            .collect(),
        classless: l.classless,
        dns: l.dns.iter().map(|d| v4(*d)).collect(),
        server: v4(l.server),
        lease_seconds: l.lease_secs,
    }
}

impl Ctx {
    /// The socket this call may use, and the lease's client identifier.
    fn dhcp_socket(&self, call: Call, asked: Option<&str>) -> Result<(PathBuf, String), CapError> {
        let socket = self
            .view()
            .dhcp_socket(call, self.container.is_some(), asked)?;
        let a = &self.attachment;
        Ok((socket, client_id(&a.network, &a.container_id, &a.ifname)))
    }

    /// How long the exchange may take: what the plugin asked, within the
    /// invocation's deadline (less a second to answer the runtime).
    fn dhcp_timeout(&self, asked_ms: u32) -> Duration {
        let left = self
            .deadline()
            .saturating_duration_since(Instant::now())
            .saturating_sub(Duration::from_secs(1));
        Duration::from_millis(u64::from(asked_ms.max(1)))
            .min(left)
            .max(Duration::from_millis(100))
    }

    fn acquire_lease(&mut self, r: &LeaseRequest) -> Result<Result<Lease, String>, CapError> {
        let (socket, client) = self.dhcp_socket(Call::Acquire, r.socket.as_deref())?;
        if r.request.len() > MAX_REQUEST || r.provide.len() > MAX_PROVIDE {
            return Err(CapError::Limit(format!(
                "at most {MAX_REQUEST} requested and {MAX_PROVIDE} provided options"
            )));
        }
        super::authority::dhcp::provided(r.provide.iter().map(|o| o.code))?;
        let bad = |c: u8| c == 0 || c == 255;
        if r.request.iter().any(|c| bad(*c))
            || r.provide.iter().any(|o| bad(o.code) || o.value.len() > 255)
        {
            return Err(ErrorCode::InvalidArgument.into());
        }
        let timeout = self.dhcp_timeout(r.timeout_ms);
        let ns = self.container.as_ref().ok_or(ErrorCode::NotFound)?;
        let request = Request::Acquire {
            client_id: client.clone(),
            ifname: self.attachment.ifname.clone(),
            netns: ns.path().to_owned(),
            options: Options {
                client_id: wire_client_id(&client),
                request: r.request.clone(),
                provide: r
                    .provide
                    .iter()
                    .map(|o| (o.code, o.value.clone()))
                    .collect(),
                broadcast: r.broadcast,
            },
            timeout_ms: timeout.as_millis() as u64,
        };
        // The daemon answers within its timeout; the wire waits a little
        // longer for the answer.
        let answer = dhcp_wire::call(
            &socket,
            &request,
            Some(ns.fd()),
            timeout + Duration::from_secs(2),
        );
        match answer {
            Ok(Answer::Lease(lease)) => {
                if self.command == Some(Command::Add) {
                    self.journal.record(DhcpUndo {
                        socket,
                        client_id: client,
                    });
                }
                // The lease's address is not the attachment's own (S13):
                // whatever answers on the link chose it, so no firewall
                // rule or host route names it as the container's.
                Ok(Ok(wit_lease(&lease)))
            }
            Ok(Answer::Error(m)) => Ok(Err(m)),
            Ok(Answer::Released) => Ok(Err(
                "the DHCP daemon answered an acquire with a release".into()
            )),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    fn current_lease(&mut self, asked: Option<&str>) -> Result<Result<Lease, String>, CapError> {
        let (socket, client) = self.dhcp_socket(Call::Current, asked)?;
        let request = Request::Current { client_id: client };
        match dhcp_wire::call(&socket, &request, None, RELEASE_TIMEOUT) {
            Ok(Answer::Lease(lease)) => Ok(Ok(wit_lease(&lease))),
            Ok(Answer::Error(m)) => Ok(Err(m)),
            Ok(Answer::Released) => Ok(Err(
                "the DHCP daemon holds no lease for this attachment".into()
            )),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    fn release_lease(&mut self, asked: Option<&str>) -> Result<Result<(), String>, CapError> {
        let (socket, client) = self.dhcp_socket(Call::Release, asked)?;
        // A late DEL of an old incarnation must not release the live one's
        // lease (the client identifier is the same); nor may a DEL that
        // names no namespace, which cannot tell: the daemon releases the
        // lease itself once the namespace it was handed is gone.
        if self.kept_for_live_incarnation("dhcp.keep", json!({})) {
            return Ok(Ok(()));
        }
        if self.command == Some(Command::Del) && self.container.is_none() {
            self.audit_event(
                "dhcp.keep",
                &json!({"why": "a DEL without a container namespace: the daemon releases \
                        the lease when the namespace it holds is gone"}),
                &crate::audit::Outcome::Ok,
            );
            return Ok(Ok(()));
        }
        Ok(release(&socket, &client))
    }

    fn dhcp_listening(&mut self, asked: Option<&str>) -> Result<Result<(), String>, CapError> {
        let socket = self
            .view()
            .dhcp_socket(Call::Listening, self.container.is_some(), asked)?;
        Ok(dhcp_wire::listening(&socket).map_err(|e| e.to_string()))
    }
}

fn release(socket: &std::path::Path, client: &str) -> Result<(), String> {
    let request = Request::Release {
        client_id: client.to_owned(),
    };
    match dhcp_wire::call(socket, &request, None, RELEASE_TIMEOUT) {
        Ok(Answer::Released) => Ok(()),
        Ok(Answer::Error(m)) => Err(m),
        Ok(Answer::Lease(_)) => Err("the DHCP daemon answered a release with a lease".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl Host for StoreData {
    fn acquire(&mut self, request: LeaseRequest) -> Result<Result<Lease, String>, CapError> {
        self.cap(&ACQUIRE, (&request,), |c| c.acquire_lease(&request))
    }

    fn current(&mut self, socket: Option<String>) -> Result<Result<Lease, String>, CapError> {
        self.cap(&CURRENT, (&socket,), |c| c.current_lease(socket.as_deref()))
    }

    fn release(&mut self, socket: Option<String>) -> Result<Result<(), String>, CapError> {
        self.cap(&RELEASE, (&socket,), |c| c.release_lease(socket.as_deref()))
    }

    fn listening(&mut self, socket: Option<String>) -> Result<Result<(), String>, CapError> {
        self.cap(&LISTENING, (&socket,), |c| {
            c.dhcp_listening(socket.as_deref())
        })
    }
}

/// How a failed ADD gives its lease back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpUndo {
    socket: PathBuf,
    client_id: String,
}

impl Inverse for DhcpUndo {
    fn describe(&self) -> String {
        format!("DhcpRelease({})", self.client_id)
    }

    fn apply(&self, _ctx: &mut Ctx) -> Result<(), CapError> {
        release(&self.socket, &self.client_id).map_err(CapError::Incomplete)
    }
}

// The rows of the capability catalog (`catalog`) for this interface.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[&ACQUIRE, &CURRENT, &RELEASE, &LISTENING];

/// `dhcp.acquire`.
pub(super) const ACQUIRE: Entry = Entry {
    call: "dhcp.acquire",
    args: &["request"],
    authority: "have the DHCP daemon obtain and keep renewing a lease for this attachment's interface (CNI_IFNAME) in the container namespace, with the client identifier `<container id>/<network>/<ifname>`; the lease's address is not the attachment's own (no firewall rule or host route names it unless `static-ranges` covers it)",
    policy: "`dhcp.socket` (the daemon the host talks to; a `daemonSocketPath` other than it is refused); ADD only; the host hands the daemon the namespace it opened from CNI_NETNS, never a path",
    undo: "release the lease",
    mutates: true,
    in_gc: false,
    needs: DHCP,
};

/// `dhcp.current`.
pub(super) const CURRENT: Entry = Entry {
    call: "dhcp.current",
    args: &["socket"],
    authority: "read the lease the DHCP daemon holds for this attachment",
    policy: "`dhcp.socket`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: DHCP,
};

/// `dhcp.release`.
pub(super) const RELEASE: Entry = Entry {
    call: "dhcp.release",
    args: &["socket"],
    authority: "have the DHCP daemon release this attachment's lease (DHCPRELEASE from the container namespace) and forget it",
    policy: "`dhcp.socket`; ADD and DEL only; never the lease of a live newer incarnation",
    undo: "none (a DEL's release stays; an ADD that releases its own lease has nothing to undo)",
    mutates: true,
    in_gc: false,
    needs: DHCP,
};

/// `dhcp.listening`.
pub(super) const LISTENING: Entry = Entry {
    call: "dhcp.listening",
    args: &["socket"],
    authority: "ask whether a DHCP daemon listens on the granted socket (a connection opened and closed; no lease named)",
    policy: "`dhcp.socket`; any command",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: DHCP,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_client_identifier_is_cut_to_an_option_and_stays_distinct() {
        let short = client_id("net", "c1", "eth0");
        assert_eq!(wire_client_id(&short), b"c1/net/eth0".to_vec());
        let long = |net: &str| client_id(net, &"c".repeat(64), "eth0");
        let (a, b) = (
            long(&format!("{}a", "n".repeat(200))),
            long(&format!("{}b", "n".repeat(200))),
        );
        let (wa, wb) = (wire_client_id(&a), wire_client_id(&b));
        assert_eq!(wa.len(), dhcp_wire::MAX_CLIENT_ID);
        assert_eq!(wb.len(), dhcp_wire::MAX_CLIENT_ID);
        assert_ne!(wa, wb, "two attachments, one client identifier");
        assert_eq!(&wa[..100], &a.as_bytes()[..100], "the reference's prefix");
        assert_ne!(a, b, "two attachments, one lease key");
    }
}

//! `wasmcni:plugin/traffic-control`: rate limits on links, the two shapes
//! of the reference `bandwidth` plugin (see `wit/traffic-control.wit`).
//!
//! The `ifb` that carries a link's received traffic belongs to the
//! attachment: the host names it (as the reference does, from the network
//! name and container ID), creates it, and marks it in the host namespace
//! with the attachment's alias, so only this attachment's DEL removes it.

use super::ctx::Inverse;
use super::link::LinkUndo;
use super::row::*;
use serde_json::Value;

use wasmtime::component::Resource;

use super::args::{fields, AuditArg};
use super::bindings::wasmcni::plugin::traffic_control::{Host, LinkLimits, RateLimit, Shaping};
use super::bindings::wasmcni::plugin::types::ErrorCode;
use super::bindings::Link;
use super::bindings::{CapError, NsHandle};
use super::ctx::{Command, Ctx, StoreData};
use crate::netlink::tc::{Tbf, INGRESS_HANDLE, TBF_HANDLE};
use crate::netlink::LinkOpts;
use crate::netns::Kind;
use crate::record::Location;
use netlink_packet_route::tc::TcHandle;

use crate::attachment::ifb_name;

/// The bucket for a limit, or `invalid-argument`.
fn bucket(limit: &RateLimit) -> Result<Tbf, CapError> {
    Tbf::sized(limit.rate, limit.burst).ok_or(CapError::Code(ErrorCode::InvalidArgument))
}

impl AuditArg for RateLimit {
    fn audit(&self) -> Value {
        fields([("rate", self.rate.audit()), ("burst", self.burst.audit())])
    }
}

impl Ctx {
    /// Link `index`, if the plugin may put limits on it: `traffic-control`,
    /// and in the host namespace a link it controls
    /// ([`Ctx::check_host_link`]).
    fn tc_link(&mut self, kind: Kind, index: u32) -> Result<Link, CapError> {
        let l = self.link(kind, index)?;
        self.check_host_link(kind, &l)?;
        Ok(l)
    }

    fn attachment_ifb(&self) -> String {
        ifb_name(&self.attachment.network, &self.attachment.container_id)
    }

    /// This attachment's `ifb` in `kind`, if there is one; refused if a
    /// link of its name is there that is not this attachment's `ifb`.
    fn own_ifb(&mut self, kind: Kind) -> Result<Option<Link>, CapError> {
        let name = self.attachment_ifb();
        let l = match self.netlink(kind)?.link_by_name(&name) {
            Ok(m) => Link::from_message(m),
            Err(e) if matches!(e.errno(), libc::ENODEV | libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // The record is read only where the answer can turn on it.
        let made_or_recorded = self.journal.created(kind, l.index)
            || (kind == Kind::Host
                && l.kind.as_deref() == Some("ifb")
                && !self.owned(&l)
                && self.recorded_unmarked(kind, &l));
        self.view().own_ifb(kind, &l, made_or_recorded)?;
        Ok(Some(l))
    }

    /// Whether `l` is a link this attachment's record names as its own
    /// without a mark: an ADD killed after the kernel made it and the
    /// intent log said where, before it was marked (the record's rule,
    /// `owned_link_present`). Its DEL must take the limits off it — the
    /// soak found a DEL refused here, again and again, and containerd's
    /// pod left unknown.
    ///
    /// Killed a step earlier, after the kernel made it and before the log
    /// said where (`step:link-made`), the log names it with no index: its
    /// DEL takes it all the same ([`super::owned::host_named_ifb`]).
    fn recorded_unmarked(&mut self, kind: Kind, l: &Link) -> bool {
        if Location::untrusted_root().is_some() {
            return false;
        }
        let Ok(Some(record)) = self.record_location().load() else {
            return false;
        };
        let del = self.command == Some(Command::Del);
        record
            .owned
            .links
            .iter()
            .filter(|o| o.ns == kind && o.name == l.name)
            .any(|o| match o.index {
                Some(i) => i == l.index && self.owned_link_present(o, &record),
                None => del && super::owned::host_named_ifb(o, l, &record),
            })
    }

    fn limit_transmit(
        &mut self,
        kind: Kind,
        index: u32,
        limit: &RateLimit,
    ) -> Result<(), CapError> {
        let tbf = bucket(limit)?;
        let l = self.tc_link(kind, index)?;
        if let Err(e) = self.netlink(kind)?.add_tbf(index, &tbf) {
            self.txqlen_back(kind, index, l.txqlen);
            return Err(e.into());
        }
        // Undone in reverse: the qdisc deleted, then the queue length put
        // back. Only a link without a queue has its length changed by the
        // kernel; journaled without reading it back (no call more per ADD;
        // setting the length it has is no change).
        if l.txqlen == 0 {
            self.record_for(
                kind,
                index,
                LinkUndo::SetTxqlen {
                    ns: kind,
                    index,
                    txqlen: l.txqlen,
                },
            );
        }
        self.record_for(
            kind,
            index,
            QdiscUndo::DeleteQdisc {
                ns: kind,
                index,
                ingress: false,
            },
        );
        Ok(())
    }

    /// Puts back link `index`'s transmit queue length after the kernel
    /// refused a qdisc. The kernel gives a link without a queue (length
    /// 0: a veth as the reference and wasmcni make them) its default
    /// length (1000) when a qdisc is attached to it, and keeps that when
    /// it then refuses the qdisc's options (seen on this machine's 6.x
    /// kernels and the VM's 6.1: a `tbf` whose buffer is 0, from a rate
    /// of 2^40 bit/s; the reference's failed ADD leaves the host veth
    /// so). Best effort: the refusal is what the plugin hears.
    fn txqlen_back(&mut self, kind: Kind, index: u32, before: u32) {
        if let Ok(now) = self.link(kind, index) {
            if now.txqlen != before {
                if let Ok(nl) = self.netlink(kind) {
                    let _ = nl.set_txqlen(index, before);
                }
            }
        }
    }

    fn limit_receive(
        &mut self,
        kind: Kind,
        index: u32,
        limit: &RateLimit,
    ) -> Result<u32, CapError> {
        let tbf = bucket(limit)?;
        let l = self.tc_link(kind, index)?;
        if self.netlink(kind)?.ingress_qdisc(index)?.is_some() {
            return Err(CapError::Code(ErrorCode::AlreadyExists));
        }
        let name = self.attachment_ifb();
        // The link's MTU, and a transmit queue length of 0, as the
        // reference creates it (its qdisc's queue is the bucket's limit).
        let opts = LinkOpts {
            mtu: Some(l.mtu),
            mac: None,
            txqlen: Some(0),
        };
        self.require_room(1)?;
        self.intend_links(&[(kind, &name, "ifb")])?;
        self.netlink(kind)?.create_ifb(&name, &opts)?;
        let mark = self.journal.len();
        let ifb = self.created(kind, &name, false)?;
        // Every later step is undone with the ifb if one fails, so a
        // plugin that goes on after the error finds nothing half-made.
        let mut ingress_added = false;
        let mut steps = || -> Result<(), CapError> {
            let nl = self.netlink(kind)?;
            nl.set_link_up(ifb, true)?;
            nl.add_tbf(ifb, &tbf)?;
            nl.add_ingress(index)?;
            ingress_added = true;
            self.record_for(
                kind,
                index,
                QdiscUndo::DeleteQdisc {
                    ns: kind,
                    index,
                    ingress: true,
                },
            );
            self.netlink(kind)?.add_redirect(index, ifb)?;
            Ok(())
        };
        if let Err(e) = steps() {
            self.txqlen_back(kind, index, l.txqlen);
            if self.command == Some(Command::Add) {
                self.undo_from(mark);
            } else if let Ok(nl) = self.netlink(kind) {
                if ingress_added {
                    let _ = nl.delete_qdisc(index, TcHandle::INGRESS, INGRESS_HANDLE);
                }
                let _ = nl.delete_link(ifb);
            }
            self.journal.forget_link(kind, ifb);
            return Err(e);
        }
        Ok(ifb)
    }

    fn link_limits(&mut self, kind: Kind, index: u32) -> Result<LinkLimits, CapError> {
        self.link(kind, index)?;
        let nl = self.netlink(kind)?;
        let shaping = |q: Option<crate::netlink::tc::Qdisc>| match q {
            None => Shaping::None,
            Some(q) if q.handle == TcHandle::UNSPEC => Shaping::None,
            Some(q) => match (q.handle == TBF_HANDLE, q.tbf.and_then(|t| t.as_sized())) {
                (true, Some((rate, burst))) => Shaping::RateLimit(RateLimit { rate, burst }),
                _ => Shaping::Other(q.kind),
            },
        };
        let transmit = shaping(nl.root_qdisc(index)?);
        let receive = match nl.ingress_qdisc(index)? {
            None => Shaping::None,
            Some(q) if q.kind != "ingress" => Shaping::Other(q.kind),
            Some(_) => {
                let redirects = nl.ingress_redirects(index)?;
                let name = self.attachment_ifb();
                let nl = self.netlink(kind)?;
                match nl.link_by_name(&name) {
                    Ok(m)
                        if !redirects.is_empty()
                            && redirects.iter().all(|r| *r == m.header.index) =>
                    {
                        shaping(nl.root_qdisc(m.header.index)?)
                    }
                    _ => Shaping::Other("ingress".into()),
                }
            }
        };
        Ok(LinkLimits { transmit, receive })
    }

    fn remove_limits(&mut self, kind: Kind, index: Option<u32>) -> Result<(), CapError> {
        super::authority::traffic::remove_limits(self.command)?;
        // Every check before any change: a refusal leaves everything as is.
        let link = match index {
            Some(i) => match self.link(kind, i) {
                Ok(l) => {
                    self.check_host_link(kind, &l)?;
                    Some(l.index)
                }
                Err(CapError::Kernel(e)) if e == libc::ENODEV || e == libc::ENOENT => None,
                Err(CapError::Code(ErrorCode::NotFound)) => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let mut ifb = self.own_ifb(kind)?;
        if let Some(l) = &ifb {
            let args = serde_json::json!({"ifb": l.name});
            if self.kept_for_live_incarnation("traffic-control.keep", args) {
                ifb = None;
            }
        }
        let nl = self.netlink(kind)?;
        if let Some(i) = link {
            if let Some(q) = nl.root_qdisc(i)? {
                if q.kind == "tbf" && q.handle == TBF_HANDLE {
                    nl.delete_qdisc(i, TcHandle::ROOT, TBF_HANDLE)?;
                }
            }
            if let Some(q) = nl.ingress_qdisc(i)? {
                if q.kind == "ingress" {
                    nl.delete_qdisc(i, TcHandle::INGRESS, INGRESS_HANDLE)?;
                }
            }
        }
        if let Some(l) = ifb {
            match nl.delete_link(l.index) {
                Ok(()) => {}
                Err(e) if matches!(e.errno(), libc::ENODEV | libc::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
            self.journal.forget_link(kind, l.index);
        }
        Ok(())
    }

    /// GC: this network's `ifb`s whose attachment is no longer valid.
    fn collect_ifbs(&mut self, kind: Kind) -> Result<u32, CapError> {
        super::authority::traffic::collect(self.command)?;
        let network = self.attachment.network.clone();
        let links: Vec<Link> = self
            .netlink(kind)?
            .links()?
            .into_iter()
            .map(Link::from_message)
            .collect();
        let mut deleted = 0;
        for l in links {
            if l.kind.as_deref() != Some("ifb") {
                continue;
            }
            let Some(alias) = l.alias.as_deref() else {
                continue;
            };
            let Some(rest) = alias.strip_prefix(crate::attachment::ATTACHMENT_MARK) else {
                continue;
            };
            let parts: Vec<&str> = rest.split(':').collect();
            let [net, container_id, ifname] = parts.as_slice() else {
                continue;
            };
            if *net != network || l.name != ifb_name(net, container_id) {
                continue;
            }
            let holder = crate::ipam::Owner {
                container_id: (*container_id).to_owned(),
                ifname: (*ifname).to_owned(),
            };
            if self.attachment.still_valid(&holder) {
                continue;
            }
            match self.netlink(kind)?.delete_link(l.index) {
                Ok(()) => deleted += 1,
                Err(e) if matches!(e.errno(), libc::ENODEV | libc::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(deleted)
    }
}

impl Host for StoreData {
    fn limit_transmit(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        limit: RateLimit,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, index, &limit);
        self.cap(&LIMIT_TRANSMIT, args, |c| {
            c.limit_transmit(kind, index, &limit)
        })
    }

    fn limit_receive(
        &mut self,
        ns: Resource<NsHandle>,
        index: u32,
        limit: RateLimit,
    ) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, index, &limit);
        self.cap(&LIMIT_RECEIVE, args, |c| {
            c.limit_receive(kind, index, &limit)
        })
    }

    fn limits(&mut self, ns: Resource<NsHandle>, index: u32) -> Result<LinkLimits, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, index);
        self.cap(&LIMITS, args, |c| c.link_limits(kind, index))
    }

    fn remove_limits(
        &mut self,
        ns: Resource<NsHandle>,
        index: Option<u32>,
    ) -> Result<(), CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind, index);
        self.cap(&REMOVE_LIMITS, args, |c| c.remove_limits(kind, index))
    }

    fn collect_garbage(&mut self, ns: Resource<NsHandle>) -> Result<u32, CapError> {
        let kind = self.ns_kind(&ns)?;
        let args = (kind,);
        self.cap(&COLLECT_GARBAGE, args, |c| c.collect_ifbs(kind))
    }
}

/// How a traffic-control change is taken back (`traffic-control`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
pub enum QdiscUndo {
    /// A qdisc was added to a link (`traffic-control`): delete it (an
    /// `ingress` qdisc takes its filters along).
    DeleteQdisc {
        /// Where.
        ns: Kind,
        /// Which link.
        index: u32,
        /// The link's `ingress` qdisc (`ffff:`), or else its root `tbf` (`1:`).
        ingress: bool,
    },
}

impl Inverse for QdiscUndo {
    fn apply(&self, ctx: &mut Ctx) -> Result<(), CapError> {
        let QdiscUndo::DeleteQdisc { ns, index, ingress } = self;
        let (parent, handle) = if *ingress {
            (
                netlink_packet_route::tc::TcHandle::INGRESS,
                crate::netlink::tc::INGRESS_HANDLE,
            )
        } else {
            (
                netlink_packet_route::tc::TcHandle::ROOT,
                crate::netlink::tc::TBF_HANDLE,
            )
        };
        ctx.netlink(*ns)?
            .delete_qdisc(*index, parent, handle)
            .map_err(|e| CapError::from(&e))
    }

    /// The qdisc, or its link, is gone already.
    fn already_gone(&self, errno: i32) -> bool {
        errno == libc::ENOENT || errno == libc::ENODEV || errno == libc::EINVAL
    }

    fn link_slot(&mut self) -> Option<(Kind, &mut u32)> {
        let QdiscUndo::DeleteQdisc { ns, index, .. } = self;
        Some((*ns, index))
    }

    fn record(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[
    &LIMIT_TRANSMIT,
    &LIMIT_RECEIVE,
    &LIMITS,
    &REMOVE_LIMITS,
    &COLLECT_GARBAGE,
];

/// `traffic-control.limit-transmit`.
pub(super) const LIMIT_TRANSMIT: Entry = Entry {
    call: "traffic-control.limit-transmit",
    args: &["ns", "index", "limit"],
    authority: "install a `tbf` root qdisc (handle `1:`) on a link, sized as the reference bandwidth plugin sizes it",
    policy: "`traffic-control`; host: link own or `links`; never replaces a qdisc (already-exists); the `ifb` within `max-links`",
    undo: "delete the qdisc and put back the link's transmit queue length, which the kernel sets when a qdisc is attached to a link without one (nothing for a link created in this ADD)",
    mutates: true,
    in_gc: false,
    needs: TRAFFIC_CONTROL,
};

/// `traffic-control.limit-receive`.
pub(super) const LIMIT_RECEIVE: Entry = Entry {
    call: "traffic-control.limit-receive",
    args: &["ns", "index", "limit"],
    authority: "create the attachment's `ifb` (`bwp` + hash of network and container ID, marked as the attachment's), put a `tbf` on it, add an `ingress` qdisc and a redirect filter to the link",
    policy: "`traffic-control`; host: link own or `links`; never replaces a qdisc (already-exists)",
    undo: "delete the `ingress` qdisc (its filter goes along) and the `ifb`",
    mutates: true,
    in_gc: false,
    needs: TRAFFIC_CONTROL,
};

/// `traffic-control.limits`.
pub(super) const LIMITS: Entry = Entry {
    call: "traffic-control.limits",
    args: &["ns", "index"],
    authority: "read a link's qdiscs, filters and its attachment's `ifb`",
    policy: "`read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `traffic-control.remove-limits`.
pub(super) const REMOVE_LIMITS: Entry = Entry {
    call: "traffic-control.remove-limits",
    args: &["ns", "index"],
    authority: "delete a link's root `tbf` (`1:`) and `ingress` qdisc, and the attachment's `ifb`",
    policy: "`traffic-control`; host: link own or `links`, `ifb` only this attachment's; refused during ADD",
    undo: "none (refused during ADD)",
    mutates: true,
    in_gc: false,
    needs: TRAFFIC_CONTROL,
};

/// `traffic-control.collect-garbage`.
pub(super) const COLLECT_GARBAGE: Entry = Entry {
    call: "traffic-control.collect-garbage",
    args: &["ns"],
    authority: "delete the `ifb`s of this network's attachments that are not in `cni.dev/valid-attachments`",
    policy: "`traffic-control`; GC only; only `ifb` links marked for this network under their attachment's `ifb` name",
    undo: "none (GC only)",
    mutates: true,
    in_gc: true,
    needs: &[Grant::Right(Ns::Call, Right::TrafficControl)],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifb_named_as_the_reference() {
        // What the reference bandwidth plugin (1.1.1) names it for network
        // "diffnet", container "ctr0".
        assert_eq!(ifb_name("diffnet", "ctr0"), "bwp959dd18981f2");
        assert_eq!(ifb_name("diffnet", "ctr0").len(), 15);
    }
}

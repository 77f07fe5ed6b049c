//! nftables over `NETLINK_NETFILTER`: the batches, dumps and expressions
//! the `firewall` capability needs, on `netlink-packet-netfilter`'s typed
//! messages. The five expressions the crate does not type (fib, nat, masq,
//! ct, counter) are flat attribute lists (`Expressions::Other`).
//!
//! A socket is created inside the namespace it acts on, as the rtnetlink
//! one is ([`NetNs::run_inside`]). Changes go in one batch
//! (`NFNL_MSG_BATCH_BEGIN` ... `END`, one `sendmsg`), which the kernel
//! applies entirely or not at all; a batch may carry the ruleset
//! generation it was computed from, and is then refused (`ERESTART`) if
//! anything changed the ruleset since.

use netlink_packet_core::{
    DefaultNla, Emitable, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE,
    NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_netfilter::nftables::{
    Bitwise, ChainAttribute, ChainMessage, Cmp, DataAttribute, ExpressionAttribute, Expressions,
    GenAttribute, GenMessage, Hook, Immediate, InetHookNumber, ListAttribute, Meta, MetaKey,
    NfTablesMessage, Operator, Payload, Register, RuleAttribute, RuleMessage, TableAttribute,
    TableMessage, Verdict, VerdictAttribute,
};
use netlink_packet_netfilter::none::ControlMessage;
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use sha2::{Digest, Sha256};

use super::NlError;
use crate::netns::NetNs;

/// The name of wasmcni's tables (`inet wasmcni`, `bridge wasmcni`).
pub const TABLE: &str = "wasmcni";

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u8 = 16;
const NFNL_BATCH_GENID: u16 = 1;
/// `NF_ACCEPT`.
const NF_ACCEPT: u32 = 1;
/// `RTN_LOCAL`, as `fib ... type` reports a local address.
pub const RTN_LOCAL: u32 = 2;

/// One expression of a rule.
pub type Expr = ListAttribute<ExpressionAttribute>;

/// The table family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `inet`: IPv4 and IPv6.
    Inet,
    /// `bridge`.
    Bridge,
}

impl Family {
    fn proto(self) -> NetfilterProtoFamily {
        match self {
            Family::Inet => NetfilterProtoFamily::Inet,
            Family::Bridge => NetfilterProtoFamily::Bridge,
        }
    }

    /// As nft names it.
    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Bridge => "bridge",
        }
    }
}

/// A base chain's hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPoint {
    /// prerouting.
    PreRouting,
    /// input.
    Input,
    /// forward.
    Forward,
    /// output.
    Output,
    /// postrouting.
    PostRouting,
}

impl HookPoint {
    fn number(self) -> InetHookNumber {
        match self {
            HookPoint::PreRouting => InetHookNumber::PreRouting,
            HookPoint::Input => InetHookNumber::LocalIn,
            HookPoint::Forward => InetHookNumber::Forward,
            HookPoint::Output => InetHookNumber::LocalOut,
            HookPoint::PostRouting => InetHookNumber::PostRouting,
        }
    }
}

/// A base chain: where it hooks in.
#[derive(Debug, Clone, Copy)]
pub struct BaseChain {
    /// Its family.
    pub family: Family,
    /// Its name.
    pub name: &'static str,
    /// `nat` or `filter`.
    pub kind: &'static str,
    /// The hook.
    pub hook: HookPoint,
    /// The priority.
    pub priority: i32,
}

/// A rule to add.
#[derive(Debug, Clone)]
pub struct NewRule {
    /// The table's family.
    pub family: Family,
    /// The chain (in [`TABLE`]).
    pub chain: String,
    /// Its expressions.
    pub exprs: Vec<Expr>,
    /// Its comment (nft's rule comment, userdata TLV 0).
    pub comment: String,
}

impl NewRule {
    /// A digest of what the rule does (chain and expressions, as sent):
    /// 8 hex digits, so a CHECK can find the very rule an ADD made.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.family.name().as_bytes());
        h.update([0]);
        h.update(self.chain.as_bytes());
        h.update([0]);
        let attr = RuleAttribute::Expressions(self.exprs.clone());
        let mut buf = vec![0; attr.buffer_len()];
        attr.emit(&mut buf);
        h.update(&buf);
        hex::encode(&h.finalize()[..4])
    }
}

/// A rule as a dump returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dumped {
    /// Its chain.
    pub chain: String,
    /// Its handle.
    pub handle: u64,
    /// Its comment ("" if none).
    pub comment: String,
    /// If it DNATs UDP to a port: (IPv6, the original destination port).
    pub udp_dnat: Option<(bool, u16)>,
}

/// Whether `exprs` end in a jump or goto to `target`.
fn verdict_chain(exprs: &[Expr], target: &str) -> bool {
    exprs.iter().any(|e| {
        let ListAttribute::Element(attrs) = e else {
            return false;
        };
        attrs.iter().any(|a| match a {
            ExpressionAttribute::Data(Expressions::Immediate(i)) => i.iter().any(|x| match x {
                Immediate::Data(DataAttribute::Verdict(v)) => v
                    .iter()
                    .any(|va| matches!(va, VerdictAttribute::Chain(c) if c == target)),
                _ => false,
            }),
            _ => false,
        })
    })
}

/// Whether `exprs` are a port mapping's DNAT of UDP: (IPv6, the matched
/// destination port). Read from the shape [`expr`] builds: `meta nfproto`,
/// `meta l4proto udp`, `th dport PORT`, ..., `nat`.
fn udp_dnat(exprs: &[Expr]) -> Option<(bool, u16)> {
    #[derive(PartialEq)]
    enum Loaded {
        Nothing,
        Nfproto,
        L4proto,
        Dport,
    }
    let mut loaded = Loaded::Nothing;
    let (mut v6, mut udp, mut port, mut nat) = (None, false, None, false);
    for e in exprs {
        let ListAttribute::Element(attrs) = e else {
            continue;
        };
        for a in attrs {
            let ExpressionAttribute::Data(d) = a else {
                continue;
            };
            match d {
                Expressions::Meta(m) => {
                    loaded = Loaded::Nothing;
                    for x in m {
                        match x {
                            Meta::Key(MetaKey::Nfproto) => loaded = Loaded::Nfproto,
                            Meta::Key(MetaKey::L4Proto) => loaded = Loaded::L4proto,
                            _ => {}
                        }
                    }
                }
                Expressions::Payload(p) => {
                    let (mut base, mut off, mut len) = (0, 0, 0);
                    for x in p {
                        match x {
                            Payload::Base(b) => base = *b,
                            Payload::Offset(o) => off = *o,
                            Payload::Len(l) => len = *l,
                            _ => {}
                        }
                    }
                    loaded = if (base, off, len) == (2, 2, 2) {
                        Loaded::Dport
                    } else {
                        Loaded::Nothing
                    };
                }
                Expressions::Cmp(c) => {
                    for x in c {
                        if let Cmp::Data(DataAttribute::Value(v)) = x {
                            match (&loaded, v.as_slice()) {
                                (Loaded::Nfproto, [f]) => v6 = Some(*f == 10),
                                (Loaded::L4proto, [p]) => udp = *p == 17,
                                (Loaded::Dport, [hi, lo]) => {
                                    port = Some(u16::from_be_bytes([*hi, *lo]))
                                }
                                _ => {}
                            }
                        }
                    }
                }
                Expressions::Other {
                    expression_type, ..
                } if expression_type == "nat" => nat = true,
                _ => loaded = Loaded::Nothing,
            }
        }
    }
    match (v6, udp, port, nat) {
        (Some(v6), true, Some(p), true) => Some((v6, p)),
        _ => None,
    }
}

/// A set of changes applied together.
#[derive(Default)]
pub struct Batch {
    msgs: Vec<NetlinkMessage<NetfilterMessage>>,
}

fn nfmsg(family: Family, m: NfTablesMessage, flags: u16) -> NetlinkMessage<NetfilterMessage> {
    let mut nl = NetlinkMessage::from(NetfilterMessage::new(
        NetfilterHeader::new(family.proto(), 0, 0),
        m,
    ));
    nl.header.flags = NLM_F_REQUEST | flags;
    nl
}

impl Batch {
    /// Creates the table if it is missing.
    pub fn table(&mut self, family: Family) {
        self.msgs.push(nfmsg(
            family,
            NfTablesMessage::NewTable(TableMessage {
                attributes: vec![TableAttribute::Name(TABLE.into())],
            }),
            NLM_F_CREATE | NLM_F_ACK,
        ));
    }

    /// Deletes the table with everything in it.
    pub fn delete_table(&mut self, family: Family) {
        self.msgs.push(nfmsg(
            family,
            NfTablesMessage::DeleteTable(TableMessage {
                attributes: vec![TableAttribute::Name(TABLE.into())],
            }),
            NLM_F_ACK,
        ));
    }

    /// Creates a base chain (policy accept) if it is missing.
    pub fn base_chain(&mut self, c: &BaseChain) {
        self.msgs.push(nfmsg(
            c.family,
            NfTablesMessage::NewChain(ChainMessage {
                attributes: vec![
                    ChainAttribute::Table(TABLE.into()),
                    ChainAttribute::Name(c.name.into()),
                    ChainAttribute::Hook(vec![
                        Hook::Number(c.hook.number().into()),
                        Hook::Priority(c.priority as u32),
                    ]),
                    ChainAttribute::Policy(NF_ACCEPT),
                    ChainAttribute::Type(c.kind.into()),
                ],
            }),
            NLM_F_CREATE | NLM_F_ACK,
        ));
    }

    /// Creates a regular chain if it is missing.
    pub fn chain(&mut self, family: Family, name: &str) {
        self.msgs.push(nfmsg(
            family,
            NfTablesMessage::NewChain(ChainMessage {
                attributes: vec![
                    ChainAttribute::Table(TABLE.into()),
                    ChainAttribute::Name(name.into()),
                ],
            }),
            NLM_F_CREATE | NLM_F_ACK,
        ));
    }

    /// Deletes a chain (it must be empty and unreferenced by then).
    pub fn delete_chain(&mut self, family: Family, name: &str) {
        self.msgs.push(nfmsg(
            family,
            NfTablesMessage::DeleteChain(ChainMessage {
                attributes: vec![
                    ChainAttribute::Table(TABLE.into()),
                    ChainAttribute::Name(name.into()),
                ],
            }),
            NLM_F_ACK,
        ));
    }

    /// Deletes every rule of a chain.
    pub fn flush_chain(&mut self, family: Family, name: &str) {
        self.msgs.push(nfmsg(
            family,
            NfTablesMessage::DeleteRule(RuleMessage {
                attributes: vec![
                    RuleAttribute::Table(TABLE.into()),
                    RuleAttribute::Chain(name.into()),
                ],
            }),
            NLM_F_ACK,
        ));
    }

    /// Appends a rule to its chain.
    pub fn rule(&mut self, r: &NewRule) {
        self.msgs.push(nfmsg(
            r.family,
            NfTablesMessage::NewRule(RuleMessage {
                attributes: vec![
                    RuleAttribute::Table(TABLE.into()),
                    RuleAttribute::Chain(r.chain.clone()),
                    RuleAttribute::Expressions(r.exprs.clone()),
                    RuleAttribute::UserData(comment_udata(&r.comment)),
                ],
            }),
            NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK,
        ));
    }

    /// Deletes one rule by handle.
    pub fn delete_rule(&mut self, family: Family, chain: &str, handle: u64) {
        self.msgs.push(nfmsg(
            family,
            NfTablesMessage::DeleteRule(RuleMessage {
                attributes: vec![
                    RuleAttribute::Table(TABLE.into()),
                    RuleAttribute::Chain(chain.into()),
                    RuleAttribute::Handle(handle),
                ],
            }),
            NLM_F_ACK,
        ));
    }

    /// How many changes it holds.
    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }
}

/// nftables through a netfilter socket bound inside one namespace (the
/// process's kept one, [`super::nfsock`]).
pub struct Nft {
    socket: super::nfsock::Lease,
    seq: u32,
    buf: Vec<u8>,
}

impl Nft {
    /// A socket inside `ns`: the process's kept one, or a new one.
    pub fn open(ns: &NetNs) -> Result<Nft, NlError> {
        let socket = super::nfsock::lease(ns)?;
        Ok(Nft {
            socket,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    /// The socket, for other netfilter requests in the same namespace
    /// (conntrack), which must leave nothing unread on it.
    pub fn socket(&self) -> &netlink_sys::Socket {
        &self.socket
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn send(&mut self, msgs: &mut [NetlinkMessage<NetfilterMessage>]) -> Result<(), NlError> {
        let mut out = Vec::with_capacity(4096);
        for m in msgs {
            m.finalize();
            let off = out.len();
            out.resize(off + m.buffer_len(), 0);
            m.emit(&mut out[off..]);
        }
        self.socket.send(&out, 0)?;
        Ok(())
    }

    /// Reads answers until `done` says so. Each is passed with its
    /// sequence number; messages of other sequence numbers are skipped.
    fn receive(
        &mut self,
        seqs: std::ops::RangeInclusive<u32>,
        nonblocking: bool,
        mut each: impl FnMut(u32, NetlinkPayload<NetfilterMessage>) -> Result<bool, NlError>,
    ) -> Result<(), NlError> {
        loop {
            let flags = if nonblocking { libc::MSG_DONTWAIT } else { 0 };
            let n = match self.socket.recv(&mut &mut self.buf[..], flags) {
                Ok(n) => n,
                Err(e) if nonblocking && e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Ok(())
                }
                Err(e) => return Err(e.into()),
            };
            let mut offset = 0;
            while offset < n {
                let bytes = &self.buf[offset..n];
                let msg = NetlinkMessage::<NetfilterMessage>::deserialize(bytes)
                    .map_err(|e| NlError::Decode(e.to_string()))?;
                let len = msg.header.length as usize;
                if len == 0 {
                    return Err(NlError::Decode("zero-length netlink message".into()));
                }
                offset += (len + 3) & !3;
                let seq = msg.header.sequence_number;
                if !seqs.contains(&seq) {
                    continue;
                }
                if each(seq, msg.payload)? {
                    return Ok(());
                }
            }
        }
    }

    /// The ruleset's generation now.
    pub fn generation(&mut self) -> Result<u32, NlError> {
        let seq = self.next_seq();
        let mut m = NetlinkMessage::from(NetfilterMessage::new(
            NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, 0),
            NfTablesMessage::GetGen(GenMessage { attributes: vec![] }),
        ));
        m.header.flags = NLM_F_REQUEST;
        m.header.sequence_number = seq;
        self.send(&mut [m])?;
        let mut id = None;
        self.receive(seq..=seq, false, |_, p| match p {
            NetlinkPayload::InnerMessage(nf) => {
                if let NetfilterMessageInner::NfTables(NfTablesMessage::NewGen(g)) = nf.inner {
                    for a in g.attributes {
                        if let GenAttribute::Id(i) = a {
                            id = Some(i);
                        }
                    }
                }
                Ok(true)
            }
            NetlinkPayload::Error(e) => match e.code {
                Some(c) => Err(NlError::Kernel(-c.get())),
                None => Ok(true),
            },
            _ => Ok(false),
        })?;
        id.ok_or_else(|| NlError::Decode("no generation id in the answer".into()))
    }

    /// Every rule of wasmcni's table of `family` (none if the table is
    /// missing).
    pub fn rules(&mut self, family: Family) -> Result<Vec<Dumped>, NlError> {
        let seq = self.next_seq();
        let mut m = nfmsg(
            family,
            NfTablesMessage::GetRule(RuleMessage {
                attributes: vec![RuleAttribute::Table(TABLE.into())],
            }),
            NLM_F_DUMP,
        );
        m.header.sequence_number = seq;
        self.send(&mut [m])?;
        let mut out = Vec::new();
        let r = self.receive(seq..=seq, false, |_, p| match p {
            NetlinkPayload::Done(_) => Ok(true),
            NetlinkPayload::Error(e) => match e.code {
                Some(c) => Err(NlError::Kernel(-c.get())),
                None => Ok(true),
            },
            NetlinkPayload::InnerMessage(nf) => {
                if let NetfilterMessageInner::NfTables(NfTablesMessage::NewRule(r)) = nf.inner {
                    let mut d = Dumped {
                        chain: String::new(),
                        handle: 0,
                        comment: String::new(),
                        udp_dnat: None,
                    };
                    let mut table = String::new();
                    for a in r.attributes {
                        match a {
                            RuleAttribute::Table(t) => table = t,
                            RuleAttribute::Chain(c) => d.chain = c,
                            RuleAttribute::Handle(h) => d.handle = h,
                            RuleAttribute::UserData(u) => d.comment = parse_comment(&u),
                            RuleAttribute::Expressions(e) => d.udp_dnat = udp_dnat(&e),
                            _ => {}
                        }
                    }
                    // An old kernel ignores the table filter of a dump.
                    if table == TABLE {
                        out.push(d);
                    }
                }
                Ok(false)
            }
            _ => Ok(false),
        });
        match r {
            Ok(()) => Ok(out),
            Err(NlError::Kernel(e)) if e == libc::ENOENT => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Whether chain `chain` of table `table` (IPv4 or IPv6 family, a
    /// table that is not wasmcni's: iptables-nft's `filter`) has a rule
    /// whose verdict jumps to `target`; `None` if the table or chain is
    /// missing. Read only.
    pub fn jumps_to(
        &mut self,
        ipv6: bool,
        table: &str,
        chain: &str,
        target: &str,
    ) -> Result<Option<bool>, NlError> {
        let family = if ipv6 {
            NetfilterProtoFamily::IPv6
        } else {
            NetfilterProtoFamily::IPv4
        };
        if !self.chains_of(family, table)?.iter().any(|c| c == chain) {
            return Ok(None);
        }
        let seq = self.next_seq();
        let mut m = NetlinkMessage::from(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, 0),
            NfTablesMessage::GetRule(RuleMessage {
                attributes: vec![
                    RuleAttribute::Table(table.into()),
                    RuleAttribute::Chain(chain.into()),
                ],
            }),
        ));
        m.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        m.header.sequence_number = seq;
        self.send(&mut [m])?;
        let mut found = false;
        let r = self.receive(seq..=seq, false, |_, p| match p {
            NetlinkPayload::Done(_) => Ok(true),
            NetlinkPayload::Error(e) => match e.code {
                Some(c) => Err(NlError::Kernel(-c.get())),
                None => Ok(true),
            },
            NetlinkPayload::InnerMessage(nf) => {
                if let NetfilterMessageInner::NfTables(NfTablesMessage::NewRule(r)) = nf.inner {
                    let mut right_place = (false, false);
                    let mut jumps = false;
                    for a in r.attributes {
                        match a {
                            RuleAttribute::Table(t) => right_place.0 = t == table,
                            RuleAttribute::Chain(c) => right_place.1 = c == chain,
                            RuleAttribute::Expressions(e) => jumps = verdict_chain(&e, target),
                            _ => {}
                        }
                    }
                    found |= right_place == (true, true) && jumps;
                }
                Ok(false)
            }
            _ => Ok(false),
        });
        match r {
            Ok(()) => Ok(Some(found)),
            Err(NlError::Kernel(e)) if e == libc::ENOENT => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The names of the chains of wasmcni's table of `family` (none if
    /// the table is missing).
    pub fn chains(&mut self, family: Family) -> Result<Vec<String>, NlError> {
        self.chains_of(family.proto(), TABLE)
    }

    /// The names of the chains of `table` (none if it is missing: a dump
    /// filtered by a table that does not exist is empty).
    fn chains_of(
        &mut self,
        family: NetfilterProtoFamily,
        table: &str,
    ) -> Result<Vec<String>, NlError> {
        let seq = self.next_seq();
        let mut m = NetlinkMessage::from(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, 0),
            NfTablesMessage::GetChain(ChainMessage {
                attributes: vec![ChainAttribute::Table(table.into())],
            }),
        ));
        m.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        m.header.sequence_number = seq;
        self.send(&mut [m])?;
        let mut out = Vec::new();
        let r = self.receive(seq..=seq, false, |_, p| match p {
            NetlinkPayload::Done(_) => Ok(true),
            NetlinkPayload::Error(e) => match e.code {
                Some(c) => Err(NlError::Kernel(-c.get())),
                None => Ok(true),
            },
            NetlinkPayload::InnerMessage(nf) => {
                if let NetfilterMessageInner::NfTables(NfTablesMessage::NewChain(c)) = nf.inner {
                    let (mut t, mut name) = (String::new(), String::new());
                    for a in c.attributes {
                        match a {
                            ChainAttribute::Table(x) => t = x,
                            ChainAttribute::Name(n) => name = n,
                            _ => {}
                        }
                    }
                    if t == table {
                        out.push(name);
                    }
                }
                Ok(false)
            }
            _ => Ok(false),
        });
        match r {
            Ok(()) => Ok(out),
            Err(NlError::Kernel(e)) if e == libc::ENOENT => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Applies `batch` atomically. With `generation`, the kernel refuses
    /// it (`ERESTART`) if the ruleset changed since that generation.
    pub fn commit(&mut self, batch: Batch, generation: Option<u32>) -> Result<(), NlError> {
        if batch.is_empty() {
            return Ok(());
        }
        let n = batch.msgs.len() as u32;
        let first = self.seq.wrapping_add(1);
        self.seq = first.wrapping_add(n + 1);
        let attributes = generation
            .map(|g| vec![DefaultNla::new(NFNL_BATCH_GENID, g.to_be_bytes().to_vec())])
            .unwrap_or_default();
        let ctl = |m: ControlMessage, seq: u32| {
            let mut nl = NetlinkMessage::from(NetfilterMessage::new(
                NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, NFNL_SUBSYS_NFTABLES),
                m,
            ));
            nl.header.flags = NLM_F_REQUEST;
            nl.header.sequence_number = seq;
            nl
        };
        let mut msgs = Vec::with_capacity(batch.msgs.len() + 2);
        msgs.push(ctl(
            ControlMessage::Other {
                message_type: NFNL_MSG_BATCH_BEGIN,
                attributes,
            },
            first,
        ));
        for (i, mut m) in batch.msgs.into_iter().enumerate() {
            m.header.sequence_number = first.wrapping_add(1 + i as u32);
            msgs.push(m);
        }
        msgs.push(ctl(ControlMessage::BatchEnd, first.wrapping_add(n + 1)));
        self.send(&mut msgs)?;
        // One acknowledgement per change; the first error fails the whole
        // batch (the kernel applied nothing). What else the kernel says
        // about a failed batch is drained without waiting.
        let mut acked = 0;
        let mut error = None;
        let last = first.wrapping_add(n + 1);
        self.receive(first..=last, false, |_, p| {
            if let NetlinkPayload::Error(e) = p {
                match e.code {
                    Some(c) => {
                        error = Some(-c.get());
                        return Ok(true);
                    }
                    None => acked += 1,
                }
            }
            Ok(acked >= n)
        })?;
        if let Some(errno) = error {
            let _ = self.receive(first..=last, true, |_, _| Ok(false));
            return Err(NlError::Kernel(errno));
        }
        Ok(())
    }
}

/// The rule comment TLV (`NFTNL_UDATA_RULE_COMMENT`, type 0) as nft writes
/// it, so `nft list` shows `comment "..."`: at most 127 bytes and a NUL.
fn comment_udata(s: &str) -> Vec<u8> {
    let mut end = s.len().min(127);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut b = s.as_bytes()[..end].to_vec();
    b.push(0);
    let mut v = vec![0u8, b.len() as u8];
    v.extend(b);
    v
}

/// The comment in a rule's userdata (TLV type 0), or "".
pub fn parse_comment(u: &[u8]) -> String {
    let mut i = 0;
    while i + 2 <= u.len() {
        let (t, l) = (u[i], u[i + 1] as usize);
        if i + 2 + l > u.len() {
            break;
        }
        if t == 0 {
            let s = &u[i + 2..i + 2 + l];
            let s = s.strip_suffix(&[0]).unwrap_or(s);
            return String::from_utf8_lossy(s).into_owned();
        }
        i += 2 + l;
    }
    String::new()
}

/// Expression builders. Registers: `reg1` for data (and NAT addresses),
/// `reg2` for NAT ports.
pub mod expr {
    use super::*;

    fn be32(v: u32) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }

    fn other(name: &str, attributes: Vec<DefaultNla>) -> Expr {
        Expressions::Other {
            expression_type: name.to_string(),
            attributes,
        }
        .into()
    }

    /// `meta KEY` into reg1.
    pub fn meta(key: MetaKey) -> Expr {
        Expressions::Meta(vec![
            Meta::Key(key),
            Meta::DestinationRegister(Register::Reg1),
        ])
        .into()
    }

    /// `meta KEY set` from reg1.
    pub fn meta_set(key: MetaKey) -> Expr {
        Expressions::Meta(vec![Meta::Key(key), Meta::SourceRegister(Register::Reg1)]).into()
    }

    /// Compares reg1 with `data`.
    pub fn cmp(op: Operator, data: Vec<u8>) -> Expr {
        Expressions::Cmp(vec![
            Cmp::SourceRegister(Register::Reg1),
            Cmp::Op(op),
            Cmp::Data(DataAttribute::Value(data)),
        ])
        .into()
    }

    /// `reg1 == data`.
    pub fn eq(data: Vec<u8>) -> Expr {
        cmp(Operator::Equal, data)
    }

    /// Where a payload load starts.
    #[derive(Debug, Clone, Copy)]
    pub enum Base {
        /// The link layer header.
        Link = 0,
        /// The network header.
        Network = 1,
        /// The transport header.
        Transport = 2,
    }

    /// Loads `len` bytes at `offset` of `base` into reg1.
    pub fn payload(base: Base, offset: u32, len: u32) -> Expr {
        Expressions::Payload(vec![
            Payload::DestinationRegister(Register::Reg1),
            Payload::Base(base as u32),
            Payload::Offset(offset),
            Payload::Len(len),
        ])
        .into()
    }

    /// `reg1 = reg1 & mask ^ xor` over `mask.len()` bytes.
    pub fn bitwise(mask: Vec<u8>, xor: Vec<u8>) -> Expr {
        Expressions::Bitwise(vec![
            Bitwise::SourceRegister(Register::Reg1),
            Bitwise::DestinationRegister(Register::Reg1),
            Bitwise::Length(mask.len() as u32),
            Bitwise::Mask(DataAttribute::Value(mask)),
            Bitwise::Xor(DataAttribute::Value(xor)),
        ])
        .into()
    }

    /// Loads `data` into register `reg` (1 or 2).
    pub fn immediate(reg2: bool, data: Vec<u8>) -> Expr {
        Expressions::Immediate(vec![
            Immediate::DestinationRegister(if reg2 { Register::Reg2 } else { Register::Reg1 }),
            Immediate::Data(DataAttribute::Value(data)),
        ])
        .into()
    }

    /// A verdict: accept, drop, or jump to `chain`.
    pub fn verdict(code: Verdict, chain: Option<&str>) -> Expr {
        let mut v = vec![VerdictAttribute::Code(code)];
        if let Some(c) = chain {
            v.push(VerdictAttribute::Chain(c.to_string()));
        }
        Expressions::Immediate(vec![
            Immediate::DestinationRegister(Register::Verdict),
            Immediate::Data(DataAttribute::Verdict(v)),
        ])
        .into()
    }

    /// `fib daddr type` into reg1.
    pub fn fib_daddr_type() -> Expr {
        other(
            "fib",
            vec![
                DefaultNla::new(1, be32(1)),      // NFTA_FIB_DREG = reg1
                DefaultNla::new(2, be32(3)),      // NFTA_FIB_RESULT = ADDRTYPE
                DefaultNla::new(3, be32(1 << 1)), // NFTA_FIB_FLAGS = F_DADDR
            ],
        )
    }

    /// `dnat` to the address in reg1 and the port in reg2; `ipv6` picks
    /// the family.
    pub fn dnat(ipv6: bool) -> Expr {
        other(
            "nat",
            vec![
                DefaultNla::new(1, be32(1)), // NFTA_NAT_TYPE = dnat
                DefaultNla::new(2, be32(if ipv6 { 10 } else { 2 })), // NFTA_NAT_FAMILY
                DefaultNla::new(3, be32(1)), // REG_ADDR_MIN = reg1
                DefaultNla::new(5, be32(2)), // REG_PROTO_MIN = reg2
            ],
        )
    }

    /// `masquerade`.
    pub fn masq() -> Expr {
        other("masq", vec![])
    }

    /// `ct state` (key 0) or `ct status` (key 2) into reg1.
    pub fn ct(key: u32) -> Expr {
        other(
            "ct",
            vec![DefaultNla::new(1, be32(1)), DefaultNla::new(2, be32(key))],
        )
    }

    /// The `drop` verdict (`NF_DROP`; the crate names no accept or drop).
    pub const DROP: Verdict = Verdict::Other(0);

    /// `ct state`.
    pub const CT_STATE: u32 = 0;
    /// `ct status`.
    pub const CT_STATUS: u32 = 2;
    /// `ct state established,related` bits.
    pub const CT_ESTABLISHED_RELATED: u32 = (1 << 1) | (1 << 2);
    /// `ct status dnat` (`IPS_DST_NAT`).
    pub const IPS_DST_NAT: u32 = 1 << 5;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_round_trip_and_are_bounded() {
        let u = comment_udata("wasmcni n=1 a=2");
        assert_eq!(parse_comment(&u), "wasmcni n=1 a=2");
        let long = "é".repeat(100);
        let u = comment_udata(&long);
        assert!(u.len() <= 130);
        assert!(long.starts_with(&parse_comment(&u)));
    }

    #[test]
    fn udp_dnat_rules_are_recognised() {
        let rule = |proto: u8| {
            vec![
                expr::meta(MetaKey::Nfproto),
                expr::eq(vec![2]),
                expr::meta(MetaKey::L4Proto),
                expr::eq(vec![proto]),
                expr::payload(expr::Base::Transport, 2, 2),
                expr::eq(5353u16.to_be_bytes().to_vec()),
                expr::immediate(false, vec![10, 0, 0, 2]),
                expr::immediate(true, 53u16.to_be_bytes().to_vec()),
                expr::dnat(false),
            ]
        };
        assert_eq!(udp_dnat(&rule(17)), Some((false, 5353)));
        assert_eq!(udp_dnat(&rule(6)), None);
        assert_eq!(udp_dnat(&rule(17)[..8]), None);
    }

    #[test]
    fn digests_tell_rules_apart() {
        let r = |port: u16| NewRule {
            family: Family::Inet,
            chain: "c".into(),
            exprs: vec![expr::eq(port.to_be_bytes().to_vec())],
            comment: String::new(),
        };
        assert_eq!(r(80).digest(), r(80).digest());
        assert_ne!(r(80).digest(), r(81).digest());
        assert_eq!(r(80).digest().len(), 8);
    }
}

//! Who a firewall rule belongs to: the tag its comment carries
//! (`wasmcni n=<network> a=<attachment> k=<kind> r=<rule digest> ...`),
//! the hashes of the attachment in it, the kinds of rules, and the
//! attachment's own chains. Every rule is found, checked and removed by
//! its tag.

use sha2::{Digest, Sha256};

use crate::caps::bindings::wasmcni::plugin::firewall::{RuleKind, Rules};
use crate::caps::ctx::Ctx;
use crate::netlink::nft::Family;
use crate::record::FwKind;
use cni_spec::valid_ifname;

impl FwKind {
    fn tag(self) -> &'static str {
        match self {
            FwKind::PortMap => "pm",
            FwKind::Masquerade => "mq",
            FwKind::Forward => "fw",
            FwKind::Isolation => "is",
            FwKind::MacSpoof => "ms",
        }
    }

    fn from_tag(s: &str) -> Option<FwKind> {
        [
            FwKind::PortMap,
            FwKind::Masquerade,
            FwKind::Forward,
            FwKind::Isolation,
            FwKind::MacSpoof,
        ]
        .into_iter()
        .find(|k| k.tag() == s)
    }

    /// The grant field that allows it.
    pub(in crate::caps) fn field(self) -> &'static str {
        match self {
            FwKind::PortMap => "port-mappings",
            FwKind::Masquerade => "masquerade",
            FwKind::Forward => "forward",
            FwKind::Isolation => "isolation",
            FwKind::MacSpoof => "mac-spoof",
        }
    }

    pub(super) fn family(self) -> Family {
        match self {
            FwKind::MacSpoof => Family::Bridge,
            _ => Family::Inet,
        }
    }
}

impl From<RuleKind> for FwKind {
    fn from(k: RuleKind) -> Self {
        match k {
            RuleKind::PortMap => FwKind::PortMap,
            RuleKind::Masquerade => FwKind::Masquerade,
            RuleKind::Forward => FwKind::Forward,
            RuleKind::Isolation => FwKind::Isolation,
            RuleKind::MacSpoof => FwKind::MacSpoof,
        }
    }
}

pub(super) fn kind_of(r: &Rules) -> FwKind {
    match r {
        Rules::PortMap(_) => FwKind::PortMap,
        Rules::Masquerade(_) => FwKind::Masquerade,
        Rules::Forward(_) => FwKind::Forward,
        Rules::Isolation(_) => FwKind::Isolation,
        Rules::MacSpoof(_) => FwKind::MacSpoof,
    }
}

/// Who a rule belongs to, as its comment says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// The network's hash (8 hex digits).
    pub net: String,
    /// The attachment's hash (16 hex digits).
    pub att: String,
    /// The kind.
    pub kind: FwKind,
    /// The rule's digest.
    pub rule: String,
    /// A `route_localnet` guard's interface, and whether `route_localnet`
    /// was 1 there before wasmcni's first port map set it (`lo=<0|1><name>`).
    pub localnet: Option<(String, bool)>,
}

impl Tag {
    /// The tag of a rule comment, if it is one of ours.
    pub fn parse(comment: &str) -> Option<Tag> {
        let mut it = comment.split(' ');
        if it.next()? != "wasmcni" {
            return None;
        }
        let mut field = |p: &str| it.next()?.strip_prefix(p).map(str::to_owned);
        let net = field("n=")?;
        let att = field("a=")?;
        let kind = FwKind::from_tag(&field("k=")?)?;
        let rule = field("r=")?;
        let localnet = it.next().and_then(|t| t.strip_prefix("lo=")).and_then(|t| {
            match t.split_at_checked(1)? {
                ("0", name) if valid_ifname(name) => Some((name.to_owned(), false)),
                ("1", name) if valid_ifname(name) => Some((name.to_owned(), true)),
                _ => None,
            }
        });
        Some(Tag {
            net,
            att,
            kind,
            rule,
            localnet,
        })
    }
}

fn hash_hex(parts: &[&str], bytes: usize) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..bytes])
}

/// The hashes an attachment's rules carry: (network, attachment).
pub fn attachment_hashes(network: &str, container_id: &str, ifname: &str) -> (String, String) {
    (
        hash_hex(&[network], 4),
        hash_hex(&[network, container_id, ifname], 8),
    )
}

/// The per-attachment port mapping chain.
pub(super) fn pm_chain(att: &str) -> String {
    format!("a{att}-pm")
}

/// Whether `chain` is one of attachment `att`'s own chains.
pub(super) fn is_own_chain(chain: &str, att: &str) -> bool {
    chain
        .strip_prefix('a')
        .and_then(|c| c.strip_prefix(att))
        .is_some_and(|rest| rest.starts_with('-'))
}

impl Ctx {
    /// The runtime's attachment's hashes (a delegate's are its runtime's).
    pub(super) fn fw_hashes(&self) -> (String, String) {
        let (n, c, i) = &self.state_owner;
        attachment_hashes(n, c, i)
    }

    pub(super) fn fw_comment(
        &self,
        kind: FwKind,
        rule_digest: &str,
        localnet: Option<(&str, bool)>,
    ) -> String {
        let (n, c, i) = &self.state_owner;
        let (nh, ah) = self.fw_hashes();
        let cid: String = c.chars().take(12).collect();
        let lo = localnet
            .map(|(name, was)| format!("lo={}{name} ", u8::from(was)))
            .unwrap_or_default();
        format!(
            "wasmcni n={nh} a={ah} k={} r={rule_digest} {lo}{n}/{cid}/{i}",
            kind.tag()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        let (n, a) = attachment_hashes("net", "c1", "eth0");
        assert_eq!((n.len(), a.len()), (8, 16));
        let c = format!("wasmcni n={n} a={a} k=pm r=0123abcd net/c1/eth0");
        let t = Tag::parse(&c).expect("tag");
        assert_eq!(t.att, a);
        assert_eq!(t.kind, FwKind::PortMap);
        assert!(Tag::parse("wasmcni entry").is_none());
        assert!(Tag::parse("wasmcni n=1 a=2 k=zz r=3").is_none());
        assert_ne!(a, attachment_hashes("net", "c1", "eth1").1);
        // No ambiguity from concatenation.
        assert_ne!(
            attachment_hashes("ne", "tc1", "eth0").1,
            attachment_hashes("net", "c1", "eth0").1
        );
    }

    #[test]
    fn own_chains_are_recognised() {
        assert!(is_own_chain("a0123456789abcdef-pm", "0123456789abcdef"));
        assert!(!is_own_chain("hostports", "0123456789abcdef"));
        assert!(!is_own_chain("a0123456789abcdefx-pm", "0123456789abcdef"));
    }
}

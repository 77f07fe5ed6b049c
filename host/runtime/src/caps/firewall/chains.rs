//! The skeleton of wasmcni's own nftables tables (`inet wasmcni`,
//! `bridge wasmcni`): their base chains, the regular chains the rules
//! jump to, and the static entry rules' comment.

use crate::netlink::nft::{BaseChain, Family, HookPoint};

/// The comment of the static entry rules (`fib daddr type local jump
/// hostports`), which belong to no attachment.
pub(super) const ENTRY_COMMENT: &str = "wasmcni entry";

pub(super) const NAT_PREROUTING: BaseChain = BaseChain {
    family: Family::Inet,
    name: "nat-prerouting",
    kind: "nat",
    hook: HookPoint::PreRouting,
    priority: -90,
};
pub(super) const NAT_OUTPUT: BaseChain = BaseChain {
    family: Family::Inet,
    name: "nat-output",
    kind: "nat",
    hook: HookPoint::Output,
    priority: -90,
};
pub(super) const NAT_POSTROUTING: BaseChain = BaseChain {
    family: Family::Inet,
    name: "nat-postrouting",
    kind: "nat",
    hook: HookPoint::PostRouting,
    priority: 110,
};
pub(super) const FILTER_FORWARD: BaseChain = BaseChain {
    family: Family::Inet,
    name: "filter-forward",
    kind: "filter",
    hook: HookPoint::Forward,
    priority: -10,
};
pub(super) const FILTER_INPUT: BaseChain = BaseChain {
    family: Family::Inet,
    name: "filter-input",
    kind: "filter",
    hook: HookPoint::Input,
    priority: -10,
};
pub(super) const BRIDGE_PREROUTING: BaseChain = BaseChain {
    family: Family::Bridge,
    name: "prerouting",
    kind: "filter",
    hook: HookPoint::PreRouting,
    priority: -300,
};
pub(super) const HOSTPORTS: &str = "hostports";
pub(super) const ISOLATION: &str = "isolation";

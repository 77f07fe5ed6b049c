//! The `firewall` interface's rows of the capability catalog
//! (`catalog`), in WIT order: what each host function may do, the grant
//! it needs, its undo.

use crate::caps::row::*;

/// This interface's rows of the capability catalog, in WIT order.
pub(crate) const ROWS: &[&Entry] = &[&ADD, &ADD_WITH, &CHECK, &REMOVE, &COLLECT_GARBAGE];

/// `firewall.add`.
pub(super) const ADD: Entry = Entry {
    call: "firewall.add",
    args: &["ns", "rules"],
    authority: "install nftables rules for the attachment in wasmcni's own tables (`inet wasmcni`, `bridge wasmcni`), tagged with it, replacing its rules of the same kind (every address of the attachment, IPv4 and IPv6, in one call), in one batch: port mappings (DNAT entered only through `fib daddr type local`, at nat priority -90 after every iptables nat chain; hairpin/localhost masquerade; `route_localnet=1` on the node interface towards the container and a 127/8 guard there), masquerade, forward marks (and, once per node where an iptables `filter` table exists, the one rule outside wasmcni's tables: `FORWARD -j WASMCNI-FORWARD`, which runs `CNI-ADMIN` and accepts the mark, installed with `iptables`), bridge isolation, MAC spoof checks (`bridge wasmcni`); UDP conntrack entries to mapped ports flushed",
    policy: "host `firewall.<kind>` (`port-mappings`, `masquerade`, `forward`, `isolation`, `mac-spoof`); ADD only; the container address must be one the attachment owns (an IPAM delegate's result on the runtime's own config in this invocation, an address the attachment's records hold for this incarnation, or one inside the entry's `static-ranges`; never a prevResult's alone, nor what the container's namespace holds), and never a loopback, unspecified, multicast, link-local or IPv4-mapped address; every port mapping must be one of the runtime's `runtimeConfig.portMappings` (host port, container port, protocol, host IP), read by the host from stdin; links: own (isolation: or a bridge its network shares); never a table, chain or handle of the plugin's choosing",
    undo: "remove the attachment's rules of that kind by tag (and its chains; the tables once empty); the old `route_localnet` written back (a batch whose acknowledgement was lost is looked for and undone too); the static FORWARD rule stays",
    mutates: true,
    in_gc: false,
    needs: &[Grant::FirewallRules("rules")],
};

/// `firewall.add-with`.
pub(super) const ADD_WITH: Entry = Entry {
    call: "firewall.add-with",
    args: &["ns", "rules", "options"],
    authority: "`firewall.add`'s, and with `isolate-within-bridge` (isolation only) one more rule of the kind: drop what the bridge forwards from one of its ports to another, IPv4 and IPv6 (`iifname B oifname B drop` in wasmcni's forward chain; bridged traffic reaches it where `br_netfilter` passes it to IP filtering), which concerns every port of that bridge, as the reference firewall's `ingressPolicy: isolated` does",
    policy: "`firewall.add`'s: host `firewall.<kind>` for the rules' kind (`isolation` for the option); ADD only; addresses the attachment owns; links: own, or for isolation a bridge its network shares; with `isolate-within-bridge`: the network's own bridge (its mark) or a link `links` names, never an unmarked bridge only `bridges` matches",
    undo: "`firewall.add`'s: remove the attachment's rules of that kind by tag",
    mutates: true,
    in_gc: false,
    needs: &[Grant::FirewallRules("rules")],
};

/// `firewall.check`.
pub(super) const CHECK: Entry = Entry {
    call: "firewall.check",
    args: &["ns", "rules"],
    authority: "read wasmcni's nftables rules of the attachment",
    policy: "host `read`",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: READ,
};

/// `firewall.remove`.
pub(super) const REMOVE: Entry = Entry {
    call: "firewall.remove",
    args: &["ns", "kinds"],
    authority: "delete the attachment's rules of the given kinds (by tag), its chains, and the tables once no attachment has rules left; `route_localnet` back to 0 on an interface whose last port map goes, if wasmcni's first port map there found it 0",
    policy: "host `firewall.<kind>` for each kind (at most 5); refused during ADD",
    undo: "none (refused during ADD)",
    mutates: true,
    in_gc: false,
    needs: &[Grant::FirewallKinds("kinds")],
};

/// `firewall.collect-garbage`.
pub(super) const COLLECT_GARBAGE: Entry = Entry {
    call: "firewall.collect-garbage",
    args: &["ns", "kinds"],
    authority: "delete the rules of the given kinds of this network's attachments that are not in `cni.dev/valid-attachments`",
    policy: "host `firewall.<kind>` for each kind (at most 5); GC only; only rules tagged with this network",
    undo: "none (GC only)",
    mutates: true,
    in_gc: true,
    needs: &[Grant::FirewallKinds("kinds")],
};

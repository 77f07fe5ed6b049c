//! Settings (sysctls): keys the grant names; a key of every link only
//! by a literal pattern; a key of one link only if that link is the
//! plugin's (or its network's shared bridge, unchanged); the node's
//! route-taking settings moved only their safe way.

use super::View;
use crate::caps::bindings::CapError;
use crate::netns::Kind;

impl View<'_> {
    /// `key` must match the namespace grant's `sysctls`; in the host
    /// namespace a key of every link (`conf.all.x`, `conf.default.x`:
    /// `all_links` names `x`) needs a pattern that names it literally
    /// (`conf.*.x` must not stand for `conf.all.x`).
    pub fn sysctl_key(
        &self,
        kind: Kind,
        key: &str,
        all_links: Option<&str>,
    ) -> Result<(), CapError> {
        let g = self.ns_grant(kind);
        let field = self.grant_field(kind, "sysctls");
        if !g.names_sysctl(key) {
            return Err(CapError::by_policy(
                &field,
                format!("sysctl {key} matches none of {field}"),
            ));
        }
        let Some(x) = all_links.filter(|_| kind == Kind::Host) else {
            return Ok(());
        };
        let literal = format!(".{x}.");
        if g.sysctls
            .iter()
            .any(|p| p.0.contains(&literal) && p.matches(key))
        {
            return Ok(());
        }
        Err(CapError::by_policy(
            &field,
            format!(
                "host sysctl {key} applies to every link, and none of {field} \
                 names `{x}` literally"
            ),
        ))
    }
}

/// A setting of a bridge the network's attachments share (`shared`) is
/// read, and written only with the value it has (`changes`: it would
/// not).
pub(in crate::caps) fn shared_bridge_setting(
    key: &str,
    shared: bool,
    changes: bool,
) -> Result<(), CapError> {
    if shared && changes {
        return Err(CapError::denied(format!(
            "{key} belongs to a bridge the network's attachments share: it may not \
                 change (a wasmcni invariant)"
        )));
    }
    Ok(())
}

/// Which way a node setting may move under a plugin ([`direction_only`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Each larger value takes more from what a link receives: lowered
    /// only.
    Lower,
    /// Each smaller value does (or stops the node routing): raised only.
    Raise,
}

/// The node's settings by which it takes routes, addresses or traffic
/// from what a link receives (router advertisements: a default route,
/// prefixes and their on-link routes, route information; redirects;
/// source routes; packets from its own addresses), with the range of
/// values the kernel gives a meaning and the way a plugin may move them:
/// `net.<proto>.conf.<link, all or default>.<name>`, and `ip_forward`.
/// `forwarding` is raised only: off, the kernel honours `accept_ra` 1
/// (every new link's default) and IPv6 redirects, and the node stops
/// routing every network's pods.
const SETTINGS: &[(&str, &str, Way, i64, i64)] = &[
    ("ipv6", "accept_ra", Way::Lower, 0, 2),
    ("ipv6", "accept_ra_defrtr", Way::Lower, 0, 1),
    ("ipv6", "accept_ra_pinfo", Way::Lower, 0, 1),
    ("ipv6", "accept_ra_rtr_pref", Way::Lower, 0, 1),
    ("ipv6", "accept_ra_rt_info_max_plen", Way::Lower, 0, 128),
    ("ipv6", "accept_ra_from_local", Way::Lower, 0, 1),
    ("ipv6", "autoconf", Way::Lower, 0, 1),
    ("ipv6", "accept_redirects", Way::Lower, 0, 1),
    ("ipv6", "accept_source_route", Way::Lower, -1, 1),
    ("ipv6", "seg6_enabled", Way::Lower, 0, 1),
    ("ipv4", "accept_redirects", Way::Lower, 0, 1),
    ("ipv4", "secure_redirects", Way::Lower, 0, 1),
    ("ipv4", "shared_media", Way::Lower, 0, 1),
    ("ipv4", "accept_source_route", Way::Lower, 0, 1),
    ("ipv4", "accept_local", Way::Lower, 0, 1),
    ("ipv6", "accept_ra_rt_info_min_plen", Way::Raise, 0, 128),
    ("ipv6", "accept_ra_min_lft", Way::Raise, 0, u32::MAX as i64),
    ("ipv6", "ra_defrtr_metric", Way::Raise, 1, u32::MAX as i64),
    ("ipv6", "forwarding", Way::Raise, 0, 1),
    ("ipv6", "force_forwarding", Way::Raise, 0, 1),
    ("ipv4", "forwarding", Way::Raise, 0, 1),
];

/// The way, and the range, of a node setting of [`SETTINGS`] (or
/// `ip_forward`); none for any other key or namespace.
fn setting(kind: Kind, key: &str) -> Option<(Way, i64, i64)> {
    if kind != Kind::Host {
        return None;
    }
    let parts: Vec<&str> = key.split('.').collect();
    match parts.as_slice() {
        ["net", proto, "conf", _, name] => SETTINGS
            .iter()
            .find(|(p, n, ..)| p == proto && n == name)
            .map(|&(_, _, way, min, max)| (way, min, max)),
        ["net", "ipv4", "ip_forward"] => Some((Way::Raise, 0, 1)),
        _ => None,
    }
}

/// Whether `key` moves only one way under a plugin ([`direction_only`]
/// then needs its value now).
pub(in crate::caps) fn one_way(kind: Kind, key: &str) -> bool {
    setting(kind, key).is_some()
}

/// In the node namespace a plugin may move a setting of [`SETTINGS`] only
/// its way, and only to a value in its range: `accept_ra` at 2 (or -1,
/// which the kernel reads as on) on its own host veth let its container
/// send router advertisements that put the node's default route, or
/// another network's subnet, through that veth (issue 49, breach 5's
/// route checks never see a route the kernel adds); `forwarding` at 0
/// did the same with `accept_ra` 1. The reference plugins set `accept_ra`
/// to 0 on their host links and raise `forwarding`; nothing they do goes
/// the other way. `old` is the key's value now (the caller reads it for a
/// key [`one_way`] names; for any other key this allows anything).
pub(in crate::caps) fn direction_only(
    kind: Kind,
    key: &str,
    old: &str,
    value: &str,
) -> Result<(), CapError> {
    let Some((way, min, max)) = setting(kind, key) else {
        return Ok(());
    };
    let in_range = |v: &str| {
        v.trim()
            .parse::<i64>()
            .ok()
            .filter(|v| (min..=max).contains(v))
    };
    let ok = match (way, in_range(value)) {
        (_, None) => false,
        // A value out of range reads as the most the setting takes.
        (Way::Lower, Some(new)) => new <= in_range(old).unwrap_or(max),
        (Way::Raise, Some(new)) => new >= in_range(old).unwrap_or(min),
    };
    if ok {
        return Ok(());
    }
    let (verb, range) = match way {
        Way::Lower => ("lower", format!("{min}..{max}")),
        Way::Raise => ("raise", format!("{min}..{max}")),
    };
    Err(CapError::denied(format!(
        "host sysctl {key}: {} -> {value} would let the node take routes, addresses or \
         traffic from what a link receives (router advertisements, redirects), or stop it \
         routing: a plugin may only {verb} it, within {range} (a wasmcni invariant)",
        old.trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_taking_host_settings_move_only_their_way() {
        let ok = |kind, key, old: &str, new| direction_only(kind, key, old, new).is_ok();
        assert!(ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "1", "0"));
        assert!(ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "0", "0"));
        assert!(!ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "1", "2"));
        assert!(!ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "0", "1"));
        // -1 is on to the kernel; so is an old value out of range.
        assert!(!ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "0", "-1"));
        assert!(ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "-1", "0"));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.all.accept_redirects",
            "0",
            "1"
        ));
        assert!(!ok(Kind::Host, "net.ipv6.conf.default.autoconf", "0", "1"));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.veth1.accept_ra_rt_info_max_plen",
            "0",
            "128"
        ));
        assert!(!ok(Kind::Host, "net.ipv6.conf.veth1.accept_ra", "0", "yes"));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.veth1.accept_source_route",
            "-1",
            "0"
        ));
        assert!(!ok(
            Kind::Host,
            "net.ipv4.conf.veth1.accept_local",
            "0",
            "1"
        ));
        // Raised only: forwarding (and ip_forward), the RA default
        // route's metric, the shortest route information taken.
        assert!(ok(Kind::Host, "net.ipv6.conf.all.forwarding", "0", "1"));
        assert!(!ok(Kind::Host, "net.ipv6.conf.all.forwarding", "1", "0"));
        assert!(ok(Kind::Host, "net.ipv4.ip_forward", "0", "1"));
        assert!(!ok(Kind::Host, "net.ipv4.ip_forward", "1", "0"));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.veth1.ra_defrtr_metric",
            "1024",
            "1"
        ));
        assert!(!ok(
            Kind::Host,
            "net.ipv6.conf.veth1.accept_ra_rt_info_min_plen",
            "48",
            "0"
        ));
        // Not such a setting, or the container's own.
        assert!(ok(Kind::Host, "net.ipv6.conf.veth1.mtu", "1500", "9000"));
        assert!(ok(
            Kind::Host,
            "net.ipv4.conf.veth1.route_localnet",
            "0",
            "1"
        ));
        assert!(ok(
            Kind::Container,
            "net.ipv6.conf.eth0.accept_ra",
            "0",
            "2"
        ));
        assert!(ok(Kind::Container, "net.ipv4.ip_forward", "1", "0"));
    }
}

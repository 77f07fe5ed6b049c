//! Policy: the only place authority is granted to a plugin.
//!
//! Deny by default. A plugin's [`Grant`] is looked up once, when its
//! invocation context is created, and copied into it; capability
//! implementations ask the grant and never decide on their own.
//!
//! This is the first cut: per-namespace read and link-state rights. The
//! policy file, sha256 pinning and per-object patterns come with the full
//! capability surface.

/// What a plugin may do in one namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NsGrant {
    /// May list and look up links and addresses.
    pub read: bool,
    /// May set links administratively up or down.
    pub link_state: bool,
}

/// Everything a plugin may do.
///
/// # Capabilities
/// This value *is* the plugin's authority: `container` applies in the
/// namespace from `CNI_NETNS`, `host` in the node's. `host: None` means the
/// plugin cannot even obtain a handle to the node's namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Grant {
    /// Rights in the container's namespace.
    pub container: NsGrant,
    /// Rights in the node's namespace, if any.
    pub host: Option<NsGrant>,
}

/// Full rights inside the container namespace, nothing on the host: what a
/// plugin that only configures the container's side (like `loopback`)
/// needs, and the most a plugin without an entry gets.
const CONTAINER_ONLY: Grant = Grant {
    container: NsGrant {
        read: true,
        link_state: true,
    },
    host: None,
};

/// The embedded default policy, by plugin name.
const DEFAULTS: &[(&str, Grant)] = &[("loopback", CONTAINER_ONLY)];

/// The grant for plugin `name`. Plugins without an entry get
/// container-only rights and no handle to the host namespace.
pub fn grant_for(name: &str) -> Grant {
    DEFAULTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, g)| *g)
        .unwrap_or(CONTAINER_ONLY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_gets_nothing_on_the_host() {
        let g = grant_for("loopback");
        assert!(g.host.is_none());
        assert!(g.container.link_state);
    }

    #[test]
    fn unknown_plugins_get_no_host_namespace() {
        assert_eq!(grant_for("third-party"), CONTAINER_ONLY);
        assert!(grant_for("third-party").host.is_none());
    }
}

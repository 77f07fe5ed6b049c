//! Rate limits on links: typed wrappers over wasmcni's `traffic-control`
//! import, as methods of [`Netns`].
//!
//! Two shapes, those of the CNI `bandwidth` convention: a token bucket on
//! what a link sends ([`Netns::limit_transmit`]), and one on what it
//! receives, through an `ifb` device the host creates for the attachment
//! ([`Netns::limit_receive`]). Rates are bits per second, bursts bits.
//!
//! # Capabilities
//! Installing and removing need `traffic-control` in the plugin's grant for
//! the namespace, reading needs `read`; in the host namespace only links
//! the plugin may modify (its attachment's own). Installs are journaled and
//! undone if ADD fails; removal is refused during ADD.
//!
//! # Example: traffic control
//! A bandwidth plugin, chained after the plugin that made the container's
//! veth: 10 Mbit/s each way on the veth's node end (`host_index`, a link
//! of this attachment), checked by CHECK, removed by DEL. Needs
//! `traffic-control` and `read` in the host grant.
//!
//! ```no_run
//! use guest_sdk::cni::Error;
//! use guest_sdk::net::Netns;
//! use guest_sdk::tc::{RateLimit, Shaping};
//!
//! const LIMIT: RateLimit = RateLimit { rate: 10_000_000, burst: 1_000_000 }; // bits/s, bits
//!
//! /// ADD: what the node's end sends is what the container receives;
//! /// what it receives (the container's traffic) is limited on an `ifb`
//! /// the host makes for the attachment.
//! fn add(host: &Netns, host_index: u32) -> Result<(), Error> {
//!     host.limit_transmit(host_index, LIMIT)?;
//!     let _ifb = host.limit_receive(host_index, LIMIT)?; // its index, for the result
//!     Ok(())
//! }
//!
//! /// CHECK: both directions limited as ADD left them.
//! fn check(host: &Netns, host_index: u32) -> Result<(), Error> {
//!     let limits = host.limits(host_index)?;
//!     for (way, shaping) in [("transmit", limits.transmit), ("receive", limits.receive)] {
//!         if !matches!(shaping, Shaping::RateLimit(_)) {
//!             return Err(Error::internal(format!("{way}: {shaping:?}, not a rate limit")));
//!         }
//!     }
//!     Ok(())
//! }
//!
//! /// DEL: the link's limits and the attachment's `ifb` go; what is not
//! /// there is no error (the link may be gone: then only the `ifb`).
//! fn del(host: &Netns, host_index: Option<u32>) -> Result<(), Error> {
//!     Ok(host.remove_limits(host_index)?)
//! }
//! ```

use crate::bindings::wasmcni::plugin::traffic_control;
use crate::net::{HostError, Netns};

pub use crate::bindings::wasmcni::plugin::traffic_control::{LinkLimits, RateLimit, Shaping};

impl Netns {
    /// Limits what link `index` sends: a `tbf` root qdisc.
    pub fn limit_transmit(&self, index: u32, limit: RateLimit) -> Result<(), HostError> {
        traffic_control::limit_transmit(&self.inner, index, limit).map_err(self.err(
            "traffic-control.limit-transmit",
            format_args!("link #{index}"),
        ))
    }

    /// Limits what link `index` receives (redirected to the attachment's
    /// `ifb`, limited there). Returns the `ifb`'s index.
    pub fn limit_receive(&self, index: u32, limit: RateLimit) -> Result<u32, HostError> {
        traffic_control::limit_receive(&self.inner, index, limit).map_err(self.err(
            "traffic-control.limit-receive",
            format_args!("link #{index}"),
        ))
    }

    /// What limits link `index` in each direction.
    pub fn limits(&self, index: u32) -> Result<LinkLimits, HostError> {
        traffic_control::limits(&self.inner, index)
            .map_err(self.err("traffic-control.limits", format_args!("link #{index}")))
    }

    /// Removes the limits of link `index` (if given) and the attachment's
    /// `ifb`; what is not there is no error.
    pub fn remove_limits(&self, index: Option<u32>) -> Result<(), HostError> {
        let what = match index {
            Some(i) => format!("link #{i} and the attachment's ifb"),
            None => "the attachment's ifb".to_owned(),
        };
        traffic_control::remove_limits(&self.inner, index)
            .map_err(self.err("traffic-control.remove-limits", what))
    }

    /// GC: deletes the `ifb`s of this network's attachments the runtime
    /// no longer holds; how many.
    pub fn collect_garbage(&self) -> Result<u32, HostError> {
        traffic_control::collect_garbage(&self.inner)
            .map_err(self.err("traffic-control.collect-garbage", "ifbs"))
    }
}

//! IPAM reservation state, kept by the host (the `ipam-store` capability).
//!
//! A [`Store`] is the locked reservation state of the network the config
//! names, on the node's disk in the reference host-local layout. The lock
//! is held until the `Store` is dropped. Reservations are always for this
//! invocation's attachment (`CNI_CONTAINERID`, `CNI_IFNAME`).
//!
//! # Capabilities
//! Needs `ipam-roots` in the plugin's policy; the data directory must lie
//! under one of them.
//!
//! # Example: IPAM
//! An IPAM plugin (as host-local, much reduced): the first free address of
//! 10.22.0.0/24 after the gateway, reserved for this attachment in the
//! default data directory (`/var/lib/cni/networks/<network>`, so
//! `"ipam-roots": ["/var/lib/cni/networks"]`). A reservation made in a
//! failed ADD is released by the host.
//!
//! ```no_run
//! use std::net::{IpAddr, Ipv4Addr};
//! use guest_sdk::cni::{Cidr, CniResult, Error, IpConfig};
//! use guest_sdk::ipam::Store;
//!
//! fn add() -> Result<CniResult, Error> {
//!     let store = Store::open(None)?; // locked until dropped
//!     // A retried ADD finds the address it reserved before.
//!     let ip = match store.owned()?.first() {
//!         Some(&ip) => ip,
//!         None => {
//!             let mut free = None;
//!             for host in 2..255u8 {
//!                 let ip = IpAddr::V4(Ipv4Addr::new(10, 22, 0, host));
//!                 // Range set "0"; false: another attachment holds it.
//!                 if store.reserve(ip, "0")? {
//!                     free = Some(ip);
//!                     break;
//!                 }
//!             }
//!             free.ok_or_else(|| Error::internal("10.22.0.0/24 is full"))?
//!         }
//!     };
//!     let gateway = IpAddr::V4(Ipv4Addr::new(10, 22, 0, 1));
//!     Ok(CniResult {
//!         ips: vec![IpConfig { gateway: Some(gateway), ..IpConfig::new(Cidr::new(ip, 24)?) }],
//!         ..CniResult::default()
//!     })
//! }
//!
//! /// DEL: every address this attachment holds goes back.
//! fn del() -> Result<(), Error> {
//!     Ok(Store::open(None)?.release_owned()?)
//! }
//! ```

use std::net::IpAddr;

use crate::bindings::wasmcni::plugin::ipam_store;
use crate::net::{from_ip, to_ip, HostError};

/// Who holds a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The container ID.
    pub container_id: String,
    /// The interface name (empty in files from old reference versions).
    pub ifname: String,
}

/// The locked reservation state of the invocation's network.
pub struct Store {
    inner: ipam_store::Store,
    dir: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish()
    }
}

impl Store {
    fn err(
        &self,
        operation: &'static str,
        what: String,
    ) -> impl FnOnce(crate::net::ErrorCode) -> HostError {
        let object = format!("{what} in {}", self.dir);
        move |code| HostError {
            operation,
            object,
            code,
        }
    }

    /// Opens and locks the network's state under `data_dir` (absolute;
    /// `None`: `/var/lib/cni/networks`).
    #[cfg_attr(not(target_arch = "wasm32"), track_caller)]
    pub fn open(data_dir: Option<&str>) -> Result<Store, HostError> {
        crate::require_host("ipam-store.open");
        let dir = data_dir.unwrap_or("/var/lib/cni/networks").to_owned();
        ipam_store::Store::open(data_dir)
            .map(|inner| Store {
                inner,
                dir: dir.clone(),
            })
            .map_err(|code| HostError {
                operation: "ipam-store.open",
                object: format!("IPAM state in {dir}"),
                code,
            })
    }

    /// Reserves `ip` for this attachment in range set `range_id`; false if
    /// it is held already.
    pub fn reserve(&self, ip: IpAddr, range_id: &str) -> Result<bool, HostError> {
        self.inner
            .reserve(from_ip(ip), range_id)
            .map_err(self.err("ipam-store.reserve", ip.to_string()))
    }

    /// The last address reserved in range set `range_id`.
    pub fn last_reserved(&self, range_id: &str) -> Result<Option<IpAddr>, HostError> {
        self.inner
            .last_reserved(range_id)
            .map(|o| o.map(|a| to_ip(&a)))
            .map_err(self.err("ipam-store.last-reserved", format!("range set {range_id}")))
    }

    /// Every reservation of the network.
    pub fn list(&self) -> Result<Vec<(IpAddr, Owner)>, HostError> {
        self.inner
            .list()
            .map(|v| {
                v.into_iter()
                    .map(|r| {
                        (
                            to_ip(&r.address),
                            Owner {
                                container_id: r.owner.container_id,
                                ifname: r.owner.ifname,
                            },
                        )
                    })
                    .collect()
            })
            .map_err(self.err("ipam-store.list", "reservations".into()))
    }

    /// The addresses this attachment holds.
    pub fn owned(&self) -> Result<Vec<IpAddr>, HostError> {
        self.inner
            .owned()
            .map(|v| v.iter().map(to_ip).collect())
            .map_err(self.err("ipam-store.owned", "reservations".into()))
    }

    /// Releases `ip` (this attachment's; in GC, a gone attachment's).
    pub fn release(&self, ip: IpAddr) -> Result<(), HostError> {
        self.inner
            .release(from_ip(ip))
            .map_err(self.err("ipam-store.release", ip.to_string()))
    }

    /// Releases every address this attachment holds.
    pub fn release_owned(&self) -> Result<(), HostError> {
        self.inner
            .release_owned()
            .map_err(self.err("ipam-store.release-owned", "reservations".into()))
    }
}

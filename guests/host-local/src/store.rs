//! Where reservations live: the [`Store`] the allocator works on.
//!
//! [`HostStore`] is the real one, the host's `ipam-store` capability (the
//! reference on-disk layout, locked for as long as it is open). Tests use
//! an in-memory fake (`MemStore`) with the same semantics.

use std::net::IpAddr;

use guest_sdk::cni::Error;
use guest_sdk::ipam::{self, Owner};
use guest_sdk::net::ErrorCode;

/// The reservation state of one network, locked, as seen by one
/// attachment (`CNI_CONTAINERID`, `CNI_IFNAME`).
pub trait Store {
    /// Reserves `ip` for this attachment and records it as the last
    /// reservation of range set `range_id`; false if anyone holds it.
    fn reserve(&mut self, ip: IpAddr, range_id: usize) -> Result<bool, Error>;
    /// The last address reserved in range set `range_id`, if any.
    fn last_reserved(&self, range_id: usize) -> Result<Option<IpAddr>, Error>;
    /// The addresses this attachment holds, including those in legacy
    /// reservations that name only its container ID.
    fn owned(&self) -> Result<Vec<IpAddr>, Error>;
    /// Every reservation of the network and its holder.
    fn list(&self) -> Result<Vec<(IpAddr, Owner)>, Error>;
    /// Releases `ip` (succeeds when nobody holds it).
    fn release(&mut self, ip: IpAddr) -> Result<(), Error>;
    /// Releases everything this attachment holds (succeeds when nothing).
    fn release_owned(&mut self) -> Result<(), Error>;
}

/// The host's reservation state of the config's network (`name`), locked
/// from [`open`](HostStore::open) until dropped.
#[derive(Debug)]
pub struct HostStore(ipam::Store);

impl HostStore {
    /// Opens and locks the state under `data_dir` (`None`: the default,
    /// `/var/lib/cni/networks`). Fails when the policy grants no IPAM state
    /// there or the directory cannot be used.
    pub fn open(data_dir: Option<&str>) -> Result<HostStore, Error> {
        Ok(HostStore(ipam::Store::open(data_dir)?))
    }

    /// [`open`](Self::open) for DEL and GC: `None` when the host refuses
    /// the directory itself (outside the policy's `ipam-roots`, relative):
    /// no ADD can have reserved anything there, so there is nothing to
    /// release. (The reference would create it and find it empty.) A
    /// directory the host accepts but cannot use still fails.
    pub fn open_existing(data_dir: Option<&str>) -> Result<Option<HostStore>, Error> {
        match ipam::Store::open(data_dir) {
            Ok(s) => Ok(Some(HostStore(s))),
            Err(e) if matches!(e.code, ErrorCode::AccessDenied | ErrorCode::InvalidArgument) => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl Store for HostStore {
    fn reserve(&mut self, ip: IpAddr, range_id: usize) -> Result<bool, Error> {
        Ok(self.0.reserve(ip, &range_id.to_string())?)
    }

    fn last_reserved(&self, range_id: usize) -> Result<Option<IpAddr>, Error> {
        Ok(self.0.last_reserved(&range_id.to_string())?)
    }

    fn owned(&self) -> Result<Vec<IpAddr>, Error> {
        Ok(self.0.owned()?)
    }

    fn list(&self) -> Result<Vec<(IpAddr, Owner)>, Error> {
        Ok(self.0.list()?)
    }

    fn release(&mut self, ip: IpAddr) -> Result<(), Error> {
        Ok(self.0.release(ip)?)
    }

    fn release_owned(&mut self) -> Result<(), Error> {
        Ok(self.0.release_owned()?)
    }
}

impl<S: Store + ?Sized> Store for &mut S {
    fn reserve(&mut self, ip: IpAddr, range_id: usize) -> Result<bool, Error> {
        (**self).reserve(ip, range_id)
    }
    fn last_reserved(&self, range_id: usize) -> Result<Option<IpAddr>, Error> {
        (**self).last_reserved(range_id)
    }
    fn owned(&self) -> Result<Vec<IpAddr>, Error> {
        (**self).owned()
    }
    fn list(&self) -> Result<Vec<(IpAddr, Owner)>, Error> {
        (**self).list()
    }
    fn release(&mut self, ip: IpAddr) -> Result<(), Error> {
        (**self).release(ip)
    }
    fn release_owned(&mut self) -> Result<(), Error> {
        (**self).release_owned()
    }
}

#[cfg(test)]
pub use fake::{owner, MemStore};

#[cfg(test)]
mod fake {
    use std::collections::BTreeMap;
    use std::net::IpAddr;

    use guest_sdk::cni::Error;
    use guest_sdk::ipam::Owner;

    use super::Store;

    /// An in-memory [`Store`] with the host's semantics, for tests. `me` is
    /// the attachment it acts for; `fail_release` makes releasing those
    /// addresses fail (to test error handling).
    #[derive(Debug, Clone, Default)]
    pub struct MemStore {
        pub held: BTreeMap<IpAddr, Owner>,
        pub last: BTreeMap<usize, IpAddr>,
        pub me: Option<Owner>,
        pub fail_release: Vec<IpAddr>,
        /// Every successful `reserve`, in order.
        pub reserved_log: Vec<IpAddr>,
    }

    pub fn owner(id: &str, ifname: &str) -> Owner {
        Owner {
            container_id: id.into(),
            ifname: ifname.into(),
        }
    }

    impl MemStore {
        fn me(&self) -> Owner {
            self.me.clone().unwrap_or_else(|| owner("c1", "eth0"))
        }

        fn is_mine(&self, o: &Owner) -> bool {
            let me = self.me();
            o.container_id == me.container_id && (o.ifname == me.ifname || o.ifname.is_empty())
        }

        /// Holds `ip` for `who` (a reservation made earlier, by anyone).
        pub fn hold(&mut self, ip: &str, who: Owner) {
            self.held.insert(ip.parse().unwrap(), who);
        }

        /// The held addresses as text, in address order.
        pub fn held_ips(&self) -> Vec<String> {
            self.held.keys().map(ToString::to_string).collect()
        }
    }

    impl Store for MemStore {
        fn reserve(&mut self, ip: IpAddr, range_id: usize) -> Result<bool, Error> {
            if self.held.contains_key(&ip) {
                return Ok(false);
            }
            self.held.insert(ip, self.me());
            self.last.insert(range_id, ip);
            self.reserved_log.push(ip);
            Ok(true)
        }

        fn last_reserved(&self, range_id: usize) -> Result<Option<IpAddr>, Error> {
            Ok(self.last.get(&range_id).copied())
        }

        fn owned(&self) -> Result<Vec<IpAddr>, Error> {
            Ok(self
                .held
                .iter()
                .filter(|(_, o)| self.is_mine(o))
                .map(|(ip, _)| *ip)
                .collect())
        }

        fn list(&self) -> Result<Vec<(IpAddr, Owner)>, Error> {
            Ok(self.held.iter().map(|(ip, o)| (*ip, o.clone())).collect())
        }

        fn release(&mut self, ip: IpAddr) -> Result<(), Error> {
            if self.fail_release.contains(&ip) {
                return Err(Error::internal(format!("cannot release {ip}")));
            }
            self.held.remove(&ip);
            Ok(())
        }

        fn release_owned(&mut self) -> Result<(), Error> {
            let mine = self.owned()?;
            for ip in mine {
                self.held.remove(&ip);
            }
            Ok(())
        }
    }
}

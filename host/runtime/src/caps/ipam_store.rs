//! `wasmcni:plugin/ipam-store`: a network's IPAM reservations, on disk in
//! the reference host-local layout ([`crate::ipam`]), with its calls,
//! their inverses ([`IpamUndo`]) and checks in one place.

use super::ctx::{Inverse, Uncovered};
use super::row::*;
use crate::attachment::Attachment;
use crate::record::{Owned, Reservation as RecordReservation};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use wasmtime::component::Resource;

use super::bindings::wasmcni::plugin::ipam_store::{Host, HostStore, Owner, Reservation};
use super::bindings::wasmcni::plugin::types::{ErrorCode, IpAddress};
use super::bindings::{ip_from_wit, ip_to_wit};
use super::bindings::{CapError, StoreHandle};
use super::ctx::{Ctx, StoreData};
use crate::ipam::{self, NetworkStore, StoreError};

impl IpamUndo {
    /// Carries it out. The lock is taken anew: the plugin's handle is
    /// gone, and its deadline may have passed.
    pub fn apply(&self) -> Result<(), CapError> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let io = |e: std::io::Error| CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO));
        let open = |dir: &PathBuf| {
            NetworkStore::reopen(dir, deadline)
                .map(indexed)
                .map_err(|e| match e {
                    StoreError::Io(e) => io(e),
                    _ => CapError::Kernel(libc::EBUSY),
                })
        };
        match self {
            IpamUndo::Unreserve {
                dir,
                address,
                owner,
                range_id,
                last,
            } => {
                let s = open(dir)?;
                if s.holder(*address).map_err(io)?.as_ref() == Some(owner) {
                    s.release(*address).map_err(io)?;
                }
                if s.last_reserved(range_id).map_err(io)? == Some(*address) {
                    s.set_last_reserved(range_id, *last).map_err(io)?;
                }
                Ok(())
            }
            IpamUndo::Rereserve {
                dir,
                address,
                owner,
            } => {
                let s = open(dir)?;
                match s.holder(*address).map_err(io)? {
                    None => s.restore(*address, owner).map_err(io),
                    Some(h) if &h == owner => Ok(()),
                    // Someone took it meanwhile: it cannot be given back.
                    Some(_) => Err(CapError::Kernel(libc::EADDRINUSE)),
                }
            }
        }
    }
}

/// `store`, keeping the network's owner index ([`NetworkStore::with_owner_index`])
/// in the state root, unless the root may not be trusted with records: an
/// index planted there could hide a reservation.
pub(super) fn indexed(store: NetworkStore) -> NetworkStore {
    if crate::record::Location::untrusted_root().is_some() {
        return store;
    }
    store.with_owner_index(&crate::record::Location::root_from_env())
}

fn store_err(e: StoreError) -> CapError {
    match e {
        StoreError::Invalid(_) => ErrorCode::InvalidArgument.into(),
        StoreError::Busy(_) => ErrorCode::TryAgain.into(),
        StoreError::Io(e) => CapError::Kernel(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

fn owner_to_wit(o: &ipam::Owner) -> Owner {
    Owner {
        container_id: o.container_id.clone(),
        ifname: o.ifname.clone(),
    }
}

impl Ctx {
    /// Opens the state of this invocation's network under `data_dir`.
    fn open_store(
        &mut self,
        data_dir: Option<&str>,
        deadline: Instant,
    ) -> Result<NetworkStore, CapError> {
        self.view().ipam_state()?;
        let data_dir = PathBuf::from(data_dir.unwrap_or(ipam::DEFAULT_DATA_DIR));
        if !data_dir.is_absolute() {
            return Err(ErrorCode::InvalidArgument.into());
        }
        let (root, rel) = self.view().ipam_root(&data_dir)?;
        let store = match NetworkStore::open(&root, &rel, &self.attachment.network, deadline) {
            Ok(store) => indexed(store),
            Err(e) => {
                if let StoreError::Io(io) = &e {
                    self.note_host_error(format!(
                        "opening the IPAM state of network {:?} under {}: {io}",
                        self.attachment.network,
                        data_dir.display()
                    ));
                }
                return Err(store_err(e));
            }
        };
        if !self.stores.contains(&store.path().to_path_buf()) {
            self.note_store(store.path())?;
            self.stores.push(store.path().to_path_buf());
        }
        Ok(store)
    }

    /// Whether this invocation may release a reservation held by `holder`:
    /// its own, or in GC one of an attachment that is gone.
    fn may_release(&self, holder: &ipam::Owner) -> Result<(), CapError> {
        self.view().release(holder)
    }
}

impl Host for StoreData {}

/// The host functions' work, one method per call.
impl Ctx {
    /// Reserves an address for this attachment, journaling its release.
    fn reserve_address(
        &mut self,
        store: &NetworkStore,
        ip: IpAddr,
        range_id: &str,
    ) -> Result<bool, CapError> {
        if !ipam::valid_range_id(range_id) {
            return Err(ErrorCode::InvalidArgument.into());
        }
        self.check_in_network_subnets(ip)?;
        let owner = self.attachment.owner();
        let last = store.last_reserved(range_id)?;
        self.intend(crate::record::Owned {
            reservations: vec![crate::record::Reservation {
                dir: store.path().to_path_buf(),
                address: ip,
            }],
            ..crate::record::Owned::default()
        })?;
        if !store.reserve(ip, &owner, range_id)? {
            return Ok(false);
        }
        self.journal.record(IpamUndo::Unreserve {
            dir: store.path().to_path_buf(),
            address: ip,
            owner,
            range_id: range_id.to_owned(),
            last,
        });
        Ok(true)
    }

    /// The addresses this attachment holds in the store.
    fn reservations_held(&mut self, store: &NetworkStore) -> Result<Vec<IpAddress>, CapError> {
        let me = self.attachment.owner();
        Ok(store
            .owned_by(&me)?
            .into_iter()
            .map(|(ip, _)| ip_to_wit(ip))
            .collect())
    }

    /// Releases an address this attachment holds, journaling its return.
    fn release_address(&mut self, store: &NetworkStore, ip: IpAddr) -> Result<(), CapError> {
        let Some(holder) = store.holder(ip)? else {
            return Ok(());
        };
        self.may_release(&holder)?;
        if self.keeps_for_live_incarnation(&holder, ip) {
            return Ok(());
        }
        self.release_journaled(store, ip, holder)
    }

    /// Releases `ip`, held by `holder`, and journals its return.
    fn release_journaled(
        &mut self,
        store: &NetworkStore,
        ip: IpAddr,
        holder: ipam::Owner,
    ) -> Result<(), CapError> {
        store.release(ip)?;
        self.journal.record(IpamUndo::Rereserve {
            dir: store.path().to_path_buf(),
            address: ip,
            owner: holder,
        });
        Ok(())
    }

    /// Releases every address this attachment holds, journaling their return.
    fn release_all_owned(&mut self, store: &NetworkStore) -> Result<(), CapError> {
        let me = self.attachment.owner();
        for (ip, holder) in store.owned_by(&me)? {
            if !self.keeps_for_live_incarnation(&holder, ip) {
                self.release_journaled(store, ip, holder)?;
            }
        }
        Ok(())
    }
}

impl HostStore for StoreData {
    fn open(&mut self, data_dir: Option<String>) -> Result<Resource<StoreHandle>, CapError> {
        let deadline = self.deadline;
        let args = (&data_dir,);
        let store = self.cap(&STORE_OPEN, args, |c| {
            if let Some(d) = &data_dir {
                super::ctx::bounded("data dir", d, 4096)?;
            }
            c.open_store(data_dir.as_deref(), deadline)
        })?;
        Ok(self.table.push(StoreHandle { store })?)
    }

    fn reserve(
        &mut self,
        h: Resource<StoreHandle>,
        address: IpAddress,
        range_id: String,
    ) -> Result<bool, CapError> {
        let ip = ip_from_wit(address);
        let args = (address, &range_id);
        let store = &self.table.get(&h)?.store;
        let caps = &mut self.caps;
        super::ctx::StoreData::cap_with(caps, &STORE_RESERVE, args, |c| {
            c.reserve_address(store, ip, &range_id)
        })
    }

    fn last_reserved(
        &mut self,
        h: Resource<StoreHandle>,
        range_id: String,
    ) -> Result<Option<IpAddress>, CapError> {
        let args = (&range_id,);
        let store = &self.table.get(&h)?.store;
        super::ctx::StoreData::cap_with(&mut self.caps, &STORE_LAST_RESERVED, args, |_| {
            if !ipam::valid_range_id(&range_id) {
                return Err(ErrorCode::InvalidArgument.into());
            }
            Ok(store.last_reserved(&range_id)?.map(ip_to_wit))
        })
    }

    fn list(&mut self, h: Resource<StoreHandle>) -> Result<Vec<Reservation>, CapError> {
        let store = &self.table.get(&h)?.store;
        super::ctx::StoreData::cap_with(&mut self.caps, &STORE_LIST, (), |_| {
            Ok(store
                .list()?
                .iter()
                .map(|(ip, o)| Reservation {
                    address: ip_to_wit(*ip),
                    owner: owner_to_wit(o),
                })
                .collect())
        })
    }

    fn owned(&mut self, h: Resource<StoreHandle>) -> Result<Vec<IpAddress>, CapError> {
        let store = &self.table.get(&h)?.store;
        super::ctx::StoreData::cap_with(&mut self.caps, &STORE_OWNED, (), |c| {
            c.reservations_held(store)
        })
    }

    fn release(&mut self, h: Resource<StoreHandle>, address: IpAddress) -> Result<(), CapError> {
        let ip = ip_from_wit(address);
        let store = &self.table.get(&h)?.store;
        let args = (address,);
        super::ctx::StoreData::cap_with(&mut self.caps, &STORE_RELEASE, args, |c| {
            c.release_address(store, ip)
        })
    }

    fn release_owned(&mut self, h: Resource<StoreHandle>) -> Result<(), CapError> {
        let store = &self.table.get(&h)?.store;
        super::ctx::StoreData::cap_with(&mut self.caps, &STORE_RELEASE_OWNED, (), |c| {
            c.release_all_owned(store)
        })
    }

    fn drop(&mut self, h: Resource<StoreHandle>) -> wasmtime::Result<()> {
        // Dropping the handle closes the lock file, which releases the lock.
        self.table.delete(h)?;
        Ok(())
    }
}

/// How the journal takes an IPAM change back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpamUndo {
    /// An address was reserved: release it (if its holder is still the
    /// one that reserved it) and put the range's last-reserved address
    /// back.
    Unreserve {
        /// The network's state directory.
        dir: PathBuf,
        /// The address.
        address: IpAddr,
        /// Who reserved it.
        owner: crate::ipam::Owner,
        /// The range set.
        range_id: String,
        /// Its last-reserved address before.
        last: Option<IpAddr>,
    },
    /// An address was released: reserve it again for its holder.
    Rereserve {
        /// The network's state directory.
        dir: PathBuf,
        /// The address.
        address: IpAddr,
        /// Its holder.
        owner: crate::ipam::Owner,
    },
}

impl Inverse for IpamUndo {
    fn describe(&self) -> String {
        format!("Ipam({self:?})")
    }

    fn apply(&self, _ctx: &mut Ctx) -> Result<(), CapError> {
        IpamUndo::apply(self)
    }

    fn owned(&self, attachment: &Attachment) -> Option<Owned> {
        match self {
            IpamUndo::Unreserve {
                dir,
                address,
                owner,
                ..
            } if owner.container_id == attachment.container_id
                && owner.ifname == attachment.ifname =>
            {
                Some(Owned {
                    reservations: vec![RecordReservation {
                        dir: dir.clone(),
                        address: *address,
                    }],
                    ..Owned::default()
                })
            }
            _ => None,
        }
    }

    fn uncovered(&self, ctx: &mut Ctx, _owned: &Owned) -> Uncovered {
        match self {
            IpamUndo::Rereserve { address, .. } => {
                Uncovered::Yes(format!("a release of {address}"))
            }
            IpamUndo::Unreserve { owner, address, .. }
                if owner.container_id != ctx.attachment.container_id
                    || owner.ifname != ctx.attachment.ifname =>
            {
                Uncovered::Yes(format!("a reservation of {address} for another holder"))
            }
            IpamUndo::Unreserve { .. } => Uncovered::ByLink,
        }
    }
}

// The rows of the capability catalog (`catalog`) for this interface,
// in WIT order: what each host function may do, the grant it needs,
// its undo.

/// This interface's rows of the capability catalog, in WIT order.
pub(super) const ROWS: &[&Entry] = &[
    &STORE_OPEN,
    &STORE_RESERVE,
    &STORE_LAST_RESERVED,
    &STORE_LIST,
    &STORE_OWNED,
    &STORE_RELEASE,
    &STORE_RELEASE_OWNED,
];

/// `ipam-store.[static]store.open`.
pub(super) const STORE_OPEN: Entry = Entry {
    call: "ipam-store.[static]store.open",
    args: &["data-dir"],
    authority: "open and lock the IPAM state of the config's network (`<data-dir>/<name>`)",
    policy: "`ipam-roots`: the data dir lies under one of them (default /var/lib/cni/networks)",
    undo: "none (opening changes nothing; the lock ends with the handle)",
    mutates: false,
    in_gc: false,
    needs: &[Grant::IpamRoot("data-dir")],
};

/// `ipam-store.[method]store.reserve`.
pub(super) const STORE_RESERVE: Entry = Entry {
    call: "ipam-store.[method]store.reserve",
    args: &["address", "range-id"],
    authority: "reserve an address for this attachment (a whole file, never partial)",
    policy: "an open store; the holder is always this attachment",
    undo: "release it and put the range's last-reserved address back",
    mutates: true,
    in_gc: false,
    needs: &[],
};

/// `ipam-store.[method]store.last-reserved`.
pub(super) const STORE_LAST_RESERVED: Entry = Entry {
    call: "ipam-store.[method]store.last-reserved",
    args: &["range-id"],
    authority: "read a range set's last reserved address",
    policy: "an open store",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: &[],
};

/// `ipam-store.[method]store.list`.
pub(super) const STORE_LIST: Entry = Entry {
    call: "ipam-store.[method]store.list",
    args: &[],
    authority: "read the network's reservations",
    policy: "an open store",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: &[],
};

/// `ipam-store.[method]store.owned`.
pub(super) const STORE_OWNED: Entry = Entry {
    call: "ipam-store.[method]store.owned",
    args: &[],
    authority: "read this attachment's reservations",
    policy: "an open store",
    undo: "none (no side effect)",
    mutates: false,
    in_gc: false,
    needs: &[],
};

/// `ipam-store.[method]store.release`.
pub(super) const STORE_RELEASE: Entry = Entry {
    call: "ipam-store.[method]store.release",
    args: &["address"],
    authority: "release one reservation",
    policy:
        "an open store; only this attachment's, or in GC one whose holder is not a valid attachment",
    undo: "reserve it again for its holder",
    mutates: true,
    in_gc: true,
    needs: &[],
};

/// `ipam-store.[method]store.release-owned`.
pub(super) const STORE_RELEASE_OWNED: Entry = Entry {
    call: "ipam-store.[method]store.release-owned",
    args: &[],
    authority: "release every reservation of this attachment",
    policy: "an open store",
    undo: "reserve them again",
    mutates: true,
    in_gc: false,
    needs: &[],
};

//! A veth pair between the container and the node, named as the reference
//! plugins name it: the container end `CNI_IFNAME`, the host end `veth`
//! and 8 random hex digits, born directly in the host namespace.

use guest_sdk::cni::Error;
use guest_sdk::net::{ErrorCode, LinkInfo, LinkOptions, Netns};

/// How many random host names are tried before giving up.
const TRIES: usize = 10;

/// The two ends, as the kernel reports them after creation.
#[derive(Debug, Clone)]
pub struct Veth {
    /// The end in the host namespace.
    pub host: LinkInfo,
    /// The end in the container namespace (`CNI_IFNAME`).
    pub container: LinkInfo,
}

/// Creates the pair: `ifname` in `container` (with `mac` if given), the
/// peer in `host`, both with `mtu` if given. The host end is brought up
/// and stops accepting router advertisements (CVE-2020-10749); the
/// container end stays down.
pub fn setup(
    container: &Netns,
    host: &Netns,
    ifname: &str,
    mtu: Option<u32>,
    mac: Option<Vec<u8>>,
) -> Result<Veth, Error> {
    // Both ends with no transmit queue length, as the reference creates
    // them (a veth queues nothing: IFF_NO_QUEUE).
    let options = LinkOptions {
        mtu,
        mac: mac.clone(),
        txqlen: Some(0),
    };
    let mut last = None;
    for _ in 0..TRIES {
        let host_name = format!("veth{:08x}", crate::random_u32());
        match container.create_veth(ifname, host, &host_name, &options, None) {
            Ok(pair) => {
                host.set_up(pair.peer_index, true)?;
                // Errors ignored, as the reference does (no IPv6 at all).
                let _ = host.set_sysctl(
                    &format!("net.ipv6.conf.{}.accept_ra", host_name.replace('.', "/")),
                    "0",
                );
                let host_link = host.link_by_index(pair.peer_index)?;
                let container_link = container.link_by_index(pair.index)?;
                return Ok(Veth {
                    host: host_link,
                    container: container_link,
                });
            }
            Err(e) if e.code == ErrorCode::AlreadyExists => {
                if container.link(ifname).is_ok() {
                    return Err(Error::internal(format!(
                        "container veth name provided ({ifname}) already exists"
                    )));
                }
                // The random host name is taken: try another.
                last = Some(e);
            }
            Err(e) => return Err(Error::internal(format!("failed to make veth pair: {e}"))),
        }
    }
    Err(match last {
        Some(_) => Error::internal("failed to find a unique veth name"),
        None => Error::internal("failed to make veth pair"),
    })
}

//! The bridge plugin's configuration (reference 1.1.1 options, and those of
//! later releases it has; later ones it lacks are refused).

use guest_sdk::cni::{Dns, Error};
use guest_sdk::net::PortVlan;
use guest_sdk::skel::Invocation;
use serde::Deserialize;

/// What the bridge plugin reads from the network config.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conf {
    /// The bridge's name.
    #[serde(default = "default_bridge")]
    pub bridge: String,
    /// Put the gateway address on the bridge.
    #[serde(default)]
    pub is_gateway: bool,
    /// Also make it the container's default route (implies `isGateway`).
    #[serde(default)]
    pub is_default_gateway: bool,
    /// Replace a different address on the bridge.
    #[serde(default)]
    pub force_address: bool,
    /// Masquerade what the container sends outside its subnet (the
    /// firewall capability's `masquerade`).
    #[serde(default)]
    pub ip_masq: bool,
    /// `iptables` or `nftables` (upstream v1.6+): checked with `ipMasq`
    /// ([`plugin_common::check_ip_masq_backend`]).
    #[serde(default)]
    pub ip_masq_backend: Option<String>,
    /// MTU of the bridge and both veth ends; ≤ 0: the kernel's default.
    #[serde(default)]
    pub mtu: i64,
    /// Hairpin mode on the bridge port.
    #[serde(default)]
    pub hairpin_mode: bool,
    /// The bridge in promiscuous mode.
    #[serde(default)]
    pub promisc_mode: bool,
    /// 802.1Q VLAN of the port (0: none): its PVID, untagged.
    #[serde(default)]
    pub vlan: i64,
    /// More VLANs the port carries tagged (upstream v1.3+).
    #[serde(default)]
    pub vlan_trunk: Option<Vec<Trunk>>,
    /// Keep the VLANs a new port has (VLAN 1, the bridge's default PVID)
    /// beside `vlan` / `vlanTrunk` (upstream v1.3+; default true, as
    /// upstream until v1.8 and as 1.1.1 behaves, which always keeps it).
    #[serde(default)]
    pub preserve_default_vlan: Option<bool>,
    /// Drop frames from the container whose source MAC is not its own
    /// (the firewall capability's `mac-spoof`).
    #[serde(default)]
    pub macspoofchk: bool,
    /// Keep IPv6 duplicate address detection on the container's interface.
    #[serde(default)]
    pub enabledad: bool,
    /// Isolate the container's bridge port (upstream v1.7+): it exchanges
    /// frames only with the bridge's ports that are not isolated, so two
    /// containers of the network cannot reach each other on the bridge.
    #[serde(default)]
    pub port_isolation: bool,
    /// Leave the container's interface down (upstream v1.4.1+; layer 2
    /// only: ADD refuses it with an `ipam` section, as upstream does).
    #[serde(default)]
    pub disable_container_interface: bool,
    /// DNS settings for the result.
    #[serde(default)]
    pub dns: Option<Dns>,
    /// `args.cni.mac`.
    #[serde(default)]
    pub args: Option<Args>,
    /// `runtimeConfig.mac`.
    #[serde(default)]
    pub runtime_config: Option<RuntimeConfig>,
}

/// One `vlanTrunk` entry: a range (`minID`..=`maxID`) and/or one `id`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Trunk {
    /// First VLAN of a range.
    #[serde(default, rename = "minID")]
    pub min_id: Option<i64>,
    /// Last VLAN of a range.
    #[serde(default, rename = "maxID")]
    pub max_id: Option<i64>,
    /// One VLAN.
    #[serde(default)]
    pub id: Option<i64>,
}

/// `args`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Args {
    /// `args.cni`.
    #[serde(default)]
    pub cni: Option<ArgsCni>,
}

/// `args.cni`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ArgsCni {
    /// `args.cni.mac`.
    #[serde(default)]
    pub mac: Option<String>,
}

/// `runtimeConfig`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RuntimeConfig {
    /// `runtimeConfig.mac`.
    #[serde(default)]
    pub mac: Option<String>,
}

/// What DEL and GC read of the config: only what the cleanup needs, each
/// key on its own ([`plugin_common::lenient`]). Everything else ADD
/// refuses (a VLAN out of range, `hairpinMode` with `promiscMode`,
/// unknown `CNI_ARGS`, a bad MAC) no ADD can have used, and does not stop
/// DEL from removing the interface and releasing the address.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DelConf {
    /// `ipMasq`; unusable (of the wrong type): no masquerade to remove.
    #[serde(default, deserialize_with = "plugin_common::lenient::field")]
    pub ip_masq: Option<bool>,
    /// `macspoofchk`; unusable: no MAC spoof check to remove.
    #[serde(default, deserialize_with = "plugin_common::lenient::field")]
    pub macspoofchk: Option<bool>,
}

impl DelConf {
    /// The DEL view of the config (never fails).
    pub fn load(inv: &Invocation) -> DelConf {
        plugin_common::lenient::decode(inv)
    }
}

fn default_bridge() -> String {
    "cni0".into()
}

impl Conf {
    /// Reads and checks the config as the reference's `loadNetConf` does,
    /// and refuses what wasmcni cannot do yet.
    pub fn load(inv: &Invocation) -> Result<Conf, Error> {
        let mut c: Conf = inv
            .conf
            .plugin_config()
            .map_err(|e| Error::internal(format!("failed to load netconf: {}", e.msg)))?;
        if c.vlan < 0 || c.vlan > 4094 {
            return Err(Error::internal(format!(
                "invalid VLAN ID {} (must be between 0 and 4094)",
                c.vlan
            )));
        }
        c.trunk_vids()?;
        // `CNI_ARGS` as the reference's `types.LoadArgs` reads them.
        plugin_common::compat::load_args(&inv.env.args, &["MAC"], |_, _| Ok(()))?;
        if c.is_default_gateway {
            c.is_gateway = true;
        }
        Ok(c)
    }

    /// The VIDs of `vlanTrunk`, sorted and without repeats, checked as
    /// upstream checks them (its messages).
    pub fn trunk_vids(&self) -> Result<Vec<u16>, Error> {
        let valid = |v: i64| (1..=4094).contains(&v);
        let mut out = Vec::new();
        for t in self.vlan_trunk.iter().flatten() {
            match (t.min_id, t.max_id) {
                (Some(min), Some(max)) => {
                    if !valid(min) {
                        return Err(Error::internal("incorrect trunk minID parameter"));
                    }
                    if !valid(max) {
                        return Err(Error::internal("incorrect trunk maxID parameter"));
                    }
                    if max < min {
                        return Err(Error::internal(
                            "minID is greater than maxID in trunk parameter",
                        ));
                    }
                    out.extend(min..=max);
                }
                (None, Some(_)) => {
                    return Err(Error::internal(
                        "minID and maxID should be configured simultaneously, minID is missing",
                    ))
                }
                (Some(_), None) => {
                    return Err(Error::internal(
                        "minID and maxID should be configured simultaneously, maxID is missing",
                    ))
                }
                (None, None) => {}
            }
            if let Some(id) = t.id {
                if !valid(id) {
                    return Err(Error::internal("incorrect trunk id parameter"));
                }
                out.push(id);
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out
            .into_iter()
            .filter_map(|v| u16::try_from(v).ok())
            .collect())
    }

    /// Whether the bridge, if this call creates it, filters by VLAN: a
    /// `vlan`, or any `vlanTrunk` (even an empty one, as upstream).
    pub fn vlan_filtering(&self) -> bool {
        self.vlan != 0 || self.vlan_trunk.is_some()
    }

    /// Whether a port is given VLANs at all: a `vlan` or trunk VLANs.
    pub fn sets_port_vlans(vid: u16, trunk: &[u16]) -> bool {
        vid != 0 || !trunk.is_empty()
    }

    /// The VLANs a port gets, given the ones it has (`current`: VLAN 1,
    /// PVID, untagged, on a new port): `None` when the config asks for
    /// none. `vlan` becomes the PVID, untagged; trunk VLANs are tagged
    /// (after `vlan`, so a trunk VLAN equal to `vlan` ends tagged, as
    /// upstream's later add does); a trunk with no `vlan` keeps VLAN 1 as
    /// the native (PVID, untagged) VLAN (upstream v1.8); the port's own
    /// VLANs (VLAN 1 on a new port) stay only if `preserveDefaultVlan` is
    /// true: its default is false since upstream v1.8.0 (48a4ae5a; true
    /// in v1.3–v1.7, and 1.1.1, which has no such option, keeps them).
    pub fn port_vlans(
        &self,
        vid: u16,
        trunk: &[u16],
        current: Vec<PortVlan>,
    ) -> Option<Vec<PortVlan>> {
        if !Conf::sets_port_vlans(vid, trunk) {
            return None;
        }
        let mut set = if self.preserve_default_vlan.unwrap_or(false) {
            current
        } else {
            Vec::new()
        };
        let mut upsert = |v: PortVlan| {
            if v.pvid {
                set.iter_mut().for_each(|x| x.pvid = false);
            }
            match set.iter_mut().find(|x| x.vid == v.vid) {
                Some(x) => *x = v,
                None => set.push(v),
            }
        };
        let access = |vid| PortVlan {
            vid,
            pvid: true,
            untagged: true,
        };
        if vid != 0 {
            upsert(access(vid));
        }
        for &t in trunk {
            upsert(PortVlan {
                vid: t,
                pvid: false,
                untagged: false,
            });
        }
        if vid == 0 {
            upsert(access(1));
        }
        set.sort_by_key(|v| v.vid);
        Some(set)
    }

    /// The MTU to set, if any.
    pub fn mtu(&self) -> Option<u32> {
        u32::try_from(self.mtu).ok().filter(|m| *m > 0)
    }

    /// Whether IPAM configures the interface (`ipam.type` set).
    pub fn is_layer3(&self, inv: &Invocation) -> bool {
        !plugin_common::ipam::plugin_type(inv).is_empty()
    }

    /// The container's MAC: `CNI_ARGS` `MAC`, overridden by
    /// `args.cni.mac`, overridden by `runtimeConfig.mac` (an empty one
    /// overrides nothing, as in the reference).
    pub fn mac(&self, inv: &Invocation) -> Result<Option<String>, Error> {
        // The last `MAC=` wins, as each pair overrides the field in Go's
        // `types.LoadArgs`.
        let from_args = inv
            .env
            .args
            .iter()
            .filter(|(k, _)| *k == "MAC")
            .last()
            .map(|(_, v)| v.to_owned());
        let from_conf = self
            .args
            .as_ref()
            .and_then(|a| a.cni.as_ref())
            .and_then(|c| c.mac.clone());
        let from_runtime = self.runtime_config.as_ref().and_then(|r| r.mac.clone());
        Ok([from_runtime, from_conf, from_args]
            .into_iter()
            .flatten()
            .find(|m| !m.is_empty()))
    }
}

/// docs/reference-options.md's `bridge` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "bridge",
            &[
                ("", keys_of::<Conf>()),
                ("runtimeConfig.", keys_of::<RuntimeConfig>()),
                ("args.cni.", keys_of::<ArgsCni>()),
                ("vlanTrunk[].", keys_of::<Trunk>()),
            ],
        );
    }
}

//! The bridge plugin's configuration (reference 1.1.1 options).

use guest_sdk::cni::{Dns, Error};
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
    /// Masquerade the container's traffic (needs firewall rules).
    #[serde(default)]
    pub ip_masq: bool,
    /// MTU of the bridge and both veth ends; ≤ 0: the kernel's default.
    #[serde(default)]
    pub mtu: i64,
    /// Hairpin mode on the bridge port.
    #[serde(default)]
    pub hairpin_mode: bool,
    /// The bridge in promiscuous mode.
    #[serde(default)]
    pub promisc_mode: bool,
    /// 802.1Q VLAN of the port (0: none).
    #[serde(default)]
    pub vlan: i64,
    /// MAC spoofing protection (needs firewall rules).
    #[serde(default)]
    pub macspoofchk: bool,
    /// Keep IPv6 duplicate address detection on the container's interface.
    #[serde(default)]
    pub enabledad: bool,
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
        inv.env
            .args
            .check_known(&["MAC"])
            .map_err(|e| Error::internal(e.msg))?;
        if c.is_default_gateway {
            c.is_gateway = true;
        }
        if c.hairpin_mode && c.promisc_mode {
            return Err(Error::internal(
                "cannot set hairpin mode and promiscuous mode at the same time.",
            ));
        }
        for (on, what, why) in [
            (c.ip_masq, "ipMasq", "masquerading needs firewall rules"),
            (
                c.macspoofchk,
                "macspoofchk",
                "MAC spoof checking needs firewall rules",
            ),
            (
                c.vlan != 0,
                "vlan",
                "VLAN tagging needs bridge VLAN filtering",
            ),
        ] {
            if on {
                return Err(Error::unsupported_field(format!(
                    "bridge option {what:?} is not supported by wasmcni yet: {why}, \
                     which wasmcni does not grant plugins yet"
                )));
            }
        }
        Ok(c)
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
    /// `args.cni.mac`, overridden by `runtimeConfig.mac`.
    pub fn mac(&self, inv: &Invocation) -> Result<Option<String>, Error> {
        let mut mac = inv.env.args.get("MAC").map(str::to_owned);
        if let Some(m) = self
            .args
            .as_ref()
            .and_then(|a| a.cni.as_ref())
            .and_then(|c| c.mac.clone())
        {
            mac = Some(m);
        }
        if let Some(m) = self.runtime_config.as_ref().and_then(|r| r.mac.clone()) {
            mac = Some(m);
        }
        Ok(mac.filter(|m| !m.is_empty()))
    }
}

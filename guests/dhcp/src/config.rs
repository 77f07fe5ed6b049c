//! The `dhcp` plugin's configuration: the `ipam` section as the reference
//! reads it (`daemonSocketPath`, `request`, `provide`, `priority`), its
//! option names resolved to codes, and `fromArg` values taken from
//! `CNI_ARGS`.

use guest_sdk::cni::{CniArgs, Error, NetConf};
use guest_sdk::dhcp::{LeaseRequest, ProvidedOption};
use plugin_common::compat;
use serde::Deserialize;

/// The reference's default parameter request list: routers, subnet mask.
const REQUEST_DEFAULT: [u8; 2] = [3, 1];

/// How long the plugin lets the daemon try (the daemon's own timeout and
/// the invocation's deadline bound it further).
const TIMEOUT_MS: u32 = 60_000;

/// The parsed configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DhcpConfig {
    /// `daemonSocketPath`.
    pub socket: Option<String>,
    /// Parameter request list.
    pub request: Vec<u8>,
    /// Options sent verbatim.
    pub provide: Vec<(u8, Vec<u8>)>,
    /// `priority`: the routes' metric (0: none).
    pub priority: u32,
}

impl DhcpConfig {
    /// The capability's request.
    pub fn lease_request(&self) -> LeaseRequest {
        LeaseRequest {
            socket: self.socket.clone(),
            request: self.request.clone(),
            provide: self
                .provide
                .iter()
                .map(|(code, value)| ProvidedOption {
                    code: *code,
                    value: value.clone(),
                })
                .collect(),
            broadcast: false,
            timeout_ms: TIMEOUT_MS,
        }
    }
}

#[derive(Deserialize)]
struct NetJson {
    #[serde(default)]
    ipam: Option<IpamJson>,
}

#[derive(Deserialize)]
struct IpamJson {
    #[serde(default, rename = "type")]
    _plugin_type: Option<String>,
    #[serde(default, rename = "daemonSocketPath")]
    daemon_socket_path: Option<String>,
    #[serde(default)]
    provide: Option<Vec<ProvideJson>>,
    #[serde(default)]
    request: Option<Vec<RequestJson>>,
    #[serde(default)]
    priority: Option<i64>,
}

#[derive(Deserialize)]
struct ProvideJson {
    #[serde(default)]
    option: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default, rename = "fromArg")]
    from_arg: Option<String>,
}

#[derive(Deserialize)]
struct RequestJson {
    #[serde(default, rename = "skipDefault")]
    skip_default: Option<bool>,
    #[serde(default)]
    option: Option<String>,
}

/// An option by the reference's name or its number (`Can not parse
/// option "x": ...` as the reference says it).
fn option_code(name: &str) -> Result<u8, Error> {
    Ok(match name {
        "dhcp-client-identifier" => 61,
        "subnet-mask" => 1,
        "routers" => 3,
        "host-name" => 12,
        "user-class" => 77,
        "vendor-class-identifier" => 60,
        n => n.parse::<u8>().map_err(|e| {
            Error::internal(format!(
                "Can not parse option {name:?}: Can not parse option: {e}"
            ))
        })?,
    })
}

/// Reads the config.
pub fn load(conf: &NetConf, args: &CniArgs) -> Result<DhcpConfig, Error> {
    let net: NetJson = compat::decode(conf)?;
    let Some(ipam) = net.ipam else {
        return Err(Error::internal("IPAM config missing 'ipam' key"));
    };
    let mut provide = Vec::new();
    for p in ipam.provide.unwrap_or_default() {
        let name = p.option.unwrap_or_default();
        let code = option_code(&name)?;
        if let Some(v) = p.value.filter(|v| !v.is_empty()) {
            if v.len() > 255 {
                return Err(Error::internal(format!(
                    "value too long for option {name:?}: {v:?}"
                )));
            }
            provide.push((code, v.into_bytes()));
        }
        if let Some(v) = p.from_arg.as_deref().and_then(|k| args.get(k)) {
            if v.len() > 255 {
                return Err(Error::internal(format!(
                    "value too long for option {name:?} from CNI_ARGS: {v:?}"
                )));
            }
            provide.push((code, v.as_bytes().to_vec()));
        }
    }
    let mut request: Vec<u8> = Vec::new();
    let mut skip_default = false;
    for r in ipam.request.unwrap_or_default() {
        skip_default |= r.skip_default.unwrap_or(false);
        let Some(name) = r.option.filter(|o| !o.is_empty()) else {
            continue;
        };
        let code = option_code(&name)?;
        if !request.contains(&code) {
            request.push(code);
        }
    }
    if !skip_default {
        for c in REQUEST_DEFAULT {
            if !request.contains(&c) {
                request.push(c);
            }
        }
    }
    if provide.iter().any(|(c, _)| *c == 0 || *c == 255)
        || request.iter().any(|c| *c == 0 || *c == 255)
    {
        return Err(Error::internal(
            "options 0 (pad) and 255 (end) cannot be sent",
        ));
    }
    Ok(DhcpConfig {
        socket: ipam.daemon_socket_path.filter(|s| !s.is_empty()),
        request,
        provide,
        priority: u32::try_from(ipam.priority.unwrap_or(0).max(0)).unwrap_or(u32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(ipam: serde_json::Value) -> NetConf {
        let v = serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "macvlan", "ipam": ipam});
        serde_json::from_value(v).expect("conf")
    }

    #[test]
    fn defaults_request_routers_and_mask() {
        let c = load(
            &conf(serde_json::json!({"type": "dhcp"})),
            &CniArgs::default(),
        )
        .expect("load");
        assert_eq!(c.request, vec![3, 1]);
        assert!(c.provide.is_empty() && c.socket.is_none());
    }

    #[test]
    fn options_by_name_number_and_from_cni_args() {
        let args = CniArgs::parse("K8S_POD_NAME=pod-1").expect("args");
        let c = load(
            &conf(serde_json::json!({"type": "dhcp",
                "daemonSocketPath": "/run/x.sock",
                "request": [{"skipDefault": true}, {"option": "121"}, {"option": "subnet-mask"}],
                "provide": [{"option": "host-name", "fromArg": "K8S_POD_NAME"},
                            {"option": "60", "value": "wasmcni"}],
                "priority": 7})),
            &args,
        )
        .expect("load");
        assert_eq!(c.request, vec![121, 1]);
        assert_eq!(
            c.provide,
            vec![(12, b"pod-1".to_vec()), (60, b"wasmcni".to_vec())]
        );
        assert_eq!(c.socket.as_deref(), Some("/run/x.sock"));
        assert_eq!(c.priority, 7);
        let e = load(
            &conf(serde_json::json!({"type": "dhcp", "request": [{"option": "routerz"}]})),
            &args,
        );
        assert!(e
            .unwrap_err()
            .msg
            .contains("Can not parse option \"routerz\""));
        let e = load(
            &conf(
                serde_json::json!({"type": "dhcp", "provide": [{"option": "12", "value": "x".repeat(256)}]}),
            ),
            &args,
        );
        assert!(e.unwrap_err().msg.contains("value too long"));
    }
}

/// docs/reference-options.md's `dhcp` section against the keys this
/// plugin's config types read.
#[cfg(test)]
mod option_table {
    use super::*;
    use plugin_common::option_table::{check, keys_of};

    #[test]
    fn option_table_is_true() {
        check(
            "dhcp",
            &[
                ("ipam.", keys_of::<IpamJson>()),
                ("ipam.provide[].", keys_of::<ProvideJson>()),
                ("ipam.request[].", keys_of::<RequestJson>()),
            ],
        );
    }
}

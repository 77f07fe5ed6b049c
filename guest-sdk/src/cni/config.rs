//! A single plugin's network configuration (what a plugin reads on stdin).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::error::Error;
use super::json;
use super::result::{CniResult, Dns};
use super::validate::validate_network_name;
use super::version::{check_supported, select_version, DEFAULT_VERSION};

/// The `ipam` section: the IPAM plugin `type` plus its own settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IpamConf {
    /// IPAM plugin type (`host-local`, `static`, ...); empty when the
    /// section has none (some plugins treat `"ipam": {}` as "no IPAM").
    #[serde(rename = "type")]
    pub plugin_type: String,
    /// Every other key of the section, as given.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl IpamConf {
    /// Split an `ipam` object into `type` and the rest; a non-string
    /// `type` is code 7 naming `ipam.type`.
    pub fn from_map(mut map: Map<String, Value>) -> Result<IpamConf, Error> {
        let plugin_type = match gojson::take_field(&mut map, "type") {
            None => String::new(),
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(Error::invalid_config(format!(
                    "invalid network config: field \"ipam.type\" must be a string, got {}",
                    kind(&other)
                )))
            }
        };
        Ok(IpamConf {
            plugin_type,
            extra: map,
        })
    }
}

impl<'de> Deserialize<'de> for IpamConf {
    /// Via [`IpamConf::from_map`]: `type` (a string, if present) and every
    /// other key.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<IpamConf, D::Error> {
        let map = Map::deserialize(d)?;
        IpamConf::from_map(map).map_err(|e| serde::de::Error::custom(e.msg))
    }
}

/// One entry of `cni.dev/valid-attachments` (GC): an attachment that is
/// still in use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcAttachment {
    /// Container ID of the attachment.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Interface name of the attachment.
    pub ifname: String,
}

/// A single plugin's network configuration.
///
/// Known keys are typed; every other key is kept in [`extra`](Self::extra)
/// and written back by `Serialize` (after the known ones, which come in the
/// order below, `cniVersion` first). Don't put known keys into `extra`:
/// they would be written twice.
///
/// # Errors from [`NetConf::parse`]
///
/// * not JSON, or not a JSON object → code 6 ("failed to decode network
///   config").
/// * a known key with the wrong JSON type → code 7 naming the key
///   (`field "capabilities.portMappings": invalid type: ...`). Code 7 rather
///   than 6: the JSON itself is fine, the configuration is not. (libcni's
///   skel says 6 for a mistyped `name`/`cniVersion`, as they fail Go's
///   unmarshal; 7 is the more useful answer and is used throughout.)
/// * `name` missing/empty/`null` or not matching
///   `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$` → code 7 naming `name`.
/// * `type` missing/empty or containing `/` or `\` → code 7 naming `type`.
/// * `cniVersion` not supported → code 1 naming the version. An absent or
///   empty `cniVersion` means 0.1.0 (libcni), unless the spec 1.1
///   `cniVersions` list is present: then the highest supported entry is
///   used ([`select_version`]).
/// * `prevResult` not an object → code 7 (it is parsed only by
///   [`NetConf::prev_result`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetConf {
    /// The spec version to answer in; after parsing never empty
    /// (absent → `"0.1.0"`).
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    /// Spec 1.1 `cniVersions` list, when given.
    #[serde(rename = "cniVersions", skip_serializing_if = "Vec::is_empty")]
    pub cni_versions: Vec<String>,
    /// Network name.
    pub name: String,
    /// Plugin type (the executable name).
    #[serde(rename = "type")]
    pub plugin_type: String,
    /// Capabilities the plugin declared (`{"portMappings": true}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<BTreeMap<String, bool>>,
    /// The `ipam` section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipam: Option<IpamConf>,
    /// The `dns` section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// The `args` section (runtime metadata, may be ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Map<String, Value>>,
    /// The `runtimeConfig` section (capability values from the runtime).
    #[serde(rename = "runtimeConfig", skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<Map<String, Value>>,
    /// The previous plugin's result, raw (in [`cni_version`](Self::cni_version)).
    #[serde(rename = "prevResult", skip_serializing_if = "Option::is_none")]
    pub prev_result: Option<Value>,
    /// Every key not listed above (plugin-specific settings, `cni.dev/*`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Take the field `key` out of `map` (its exact key, else one that
/// differs only in case, as Go's decoder matches them) and decode it;
/// absent or `null` → `None`.
fn take<T: DeserializeOwned>(map: &mut Map<String, Value>, key: &str) -> Result<Option<T>, Error> {
    match gojson::take_field(map, key) {
        None => Ok(None),
        Some(v) => json::decode::<T>(&v).map(Some).map_err(|e| {
            Error::invalid_config(format!("invalid network config: {}", e.describe(key)))
        }),
    }
}

impl NetConf {
    /// Parse and validate a network configuration from stdin bytes. See the
    /// [type docs](NetConf#errors-from-netconfparse) for the error codes.
    pub fn parse(bytes: &[u8]) -> Result<NetConf, Error> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| Error::decode(format!("failed to decode network config: {e}")))?;
        NetConf::from_value(value)
    }

    /// [`parse`](Self::parse) from an already decoded JSON value.
    pub fn from_value(value: Value) -> Result<NetConf, Error> {
        let mut map = match value {
            Value::Object(map) => map,
            other => {
                return Err(Error::decode(format!(
                    "failed to decode network config: expected a JSON object, got {}",
                    kind(&other)
                )))
            }
        };
        let cni_version: String = take(&mut map, "cniVersion")?.unwrap_or_default();
        let cni_versions: Vec<String> = take(&mut map, "cniVersions")?.unwrap_or_default();
        let name: String = take(&mut map, "name")?.unwrap_or_default();
        let plugin_type: String = take(&mut map, "type")?.unwrap_or_default();
        let capabilities = take(&mut map, "capabilities")?;
        let ipam = match take::<Map<String, Value>>(&mut map, "ipam")? {
            Some(m) => Some(IpamConf::from_map(m)?),
            None => None,
        };
        let dns = take(&mut map, "dns")?;
        let args = take(&mut map, "args")?;
        let runtime_config = take(&mut map, "runtimeConfig")?;
        let prev_result = match gojson::take_field(&mut map, "prevResult") {
            None => None,
            Some(v @ Value::Object(_)) => Some(v),
            Some(other) => {
                return Err(Error::invalid_config(format!(
                    "invalid network config: field \"prevResult\" must be an object, got {}",
                    kind(&other)
                )))
            }
        };

        validate_network_name(&name)?;
        if plugin_type.is_empty() {
            return Err(Error::invalid_config(
                "missing plugin type (field \"type\" is required)",
            ));
        }
        if plugin_type.contains(['/', '\\']) {
            return Err(Error::invalid_config(format!(
                "invalid plugin type {plugin_type:?} (field \"type\" must not contain a path separator)"
            )));
        }

        let cni_version = if cni_version.is_empty() && !cni_versions.is_empty() {
            select_version("", &cni_versions)?
        } else {
            cni_version
        };
        let cni_version = if cni_version.is_empty() {
            DEFAULT_VERSION.to_string()
        } else {
            cni_version
        };
        check_supported(&cni_version)?;

        Ok(NetConf {
            cni_version,
            cni_versions,
            name,
            plugin_type,
            capabilities,
            ipam,
            dns,
            args,
            runtime_config,
            prev_result,
            extra: map,
        })
    }

    /// This configuration as a JSON value (known keys plus `extra`).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Deserialize the whole configuration object into the plugin's own
    /// type `T` (which usually ignores unknown keys, or embeds the fields it
    /// shares with [`NetConf`]). Failure is code 7 naming the offending
    /// field when serde points at one (`field "vlan": invalid type: ...`,
    /// ``missing field `master` ``).
    pub fn plugin_config<T: DeserializeOwned>(&self) -> Result<T, Error> {
        json::decode::<T>(&self.to_value()).map_err(|e| {
            Error::invalid_config(format!("invalid network config: {}", e.describe("")))
        })
    }

    /// The `prevResult`, parsed in this config's `cniVersion` into the
    /// canonical model; `None` when there is none. Errors as
    /// [`CniResult::from_json`] (code 1 for a version mismatch, 6 when
    /// malformed).
    pub fn prev_result(&self) -> Result<Option<CniResult>, Error> {
        match &self.prev_result {
            None | Some(Value::Null) => Ok(None),
            Some(v) => CniResult::from_json(v, &self.cni_version)
                .map(Some)
                .map_err(|mut e| {
                    e.msg = format!("prevResult: {}", e.msg);
                    e
                }),
        }
    }

    /// The GC list of attachments still in use: `cni.dev/valid-attachments`,
    /// or the older draft's `cni.dev/attachments` (libcni sends both);
    /// `None` when neither is present. Malformed → code 7 naming the key.
    pub fn valid_attachments(&self) -> Result<Option<Vec<GcAttachment>>, Error> {
        for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
            match gojson::field(&self.extra, key) {
                None => continue,
                Some(v) => {
                    return json::decode::<Vec<GcAttachment>>(v).map(Some).map_err(|e| {
                        Error::invalid_config(format!(
                            "invalid network config: {}",
                            e.describe(key)
                        ))
                    })
                }
            }
        }
        Ok(None)
    }
}

impl<'de> Deserialize<'de> for NetConf {
    /// Via [`NetConf::from_value`], with the same validation.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NetConf, D::Error> {
        let value = Value::deserialize(d)?;
        NetConf::from_value(value).map_err(serde::de::Error::custom)
    }
}

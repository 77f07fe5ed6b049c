//! Reading a config the way DEL (and GC) must: only what the cleanup
//! needs, each key on its own. A runtime calls DEL after a failed ADD too,
//! and retries a DEL that fails, so a container's teardown waits on it: a
//! value no ADD could have used (of the wrong type, out of range, an
//! option ADD refuses) must not make DEL fail for good. It makes only the
//! part of the cleanup that needs it unusable, which is then skipped (no
//! ADD installed it): the rest — the interface, the IPAM reservation —
//! still goes.
//!
//! A plugin's DEL view is a struct of `Option`s, each field with
//! `#[serde(default, deserialize_with = "plugin_common::lenient::field")]`,
//! read with [`decode`]; its ADD and CHECK keep their full decoding and
//! validation.

use guest_sdk::skel::Invocation;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// A field read leniently: its value when it decodes as `T` (with Go's
/// key matching inside it too, as the SDK decodes: [`gojson`]), else
/// `None` (as when it is absent). The key is matched as the SDK matches
/// keys.
pub fn field<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let v = serde_json::Value::deserialize(d)?;
    Ok(gojson::from_value(&v).ok())
}

/// The config's DEL view `T` (see the module docs); never fails: a config
/// that cannot be read at all gives `T::default()`, nothing usable.
pub fn decode<T: DeserializeOwned + Default>(inv: &Invocation) -> T {
    inv.conf.plugin_config().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest_sdk::cni::NetConf;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct DelView {
        #[serde(default, deserialize_with = "field")]
        ip_masq: Option<bool>,
        #[serde(default, deserialize_with = "field")]
        table: Option<u32>,
    }

    fn view(extra: serde_json::Value) -> DelView {
        let mut c = serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "t"});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        NetConf::from_value(c)
            .unwrap()
            .plugin_config()
            .unwrap_or_default()
    }

    #[test]
    fn each_key_on_its_own() {
        assert_eq!(
            view(serde_json::json!({"ipMasq": true, "table": 7})),
            DelView {
                ip_masq: Some(true),
                table: Some(7)
            }
        );
        // A bad value is unusable, and spoils nothing else.
        assert_eq!(
            view(serde_json::json!({"ipMasq": "yes", "table": 7})),
            DelView {
                ip_masq: None,
                table: Some(7)
            }
        );
        assert_eq!(
            view(serde_json::json!({"ipMasq": null, "table": -1})),
            DelView::default()
        );
        assert_eq!(view(serde_json::json!({})), DelView::default());
    }
}

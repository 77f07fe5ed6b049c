//! The node links a record names that the plugin did not create: from a
//! `wasmcni try` run's `node-links`, or from the link a denial is about.

use serde_json::Value;

use wasmcni_runtime::audit::Logged;

/// A node link the plugin did not create, as `wasmcni try` annotates its
/// records (`node-links`: index → name and kind).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeLink {
    /// Its name.
    pub name: String,
    /// Its kind (`bridge`, `veth`, ...), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// The node link at `index` (host namespace), if the record says it is one
/// the plugin did not create: from `try`'s `node-links`, else from the
/// link a denial is about (its `link`, never its text).
pub(super) fn node_link(r: &Logged, index: Option<u32>) -> Option<NodeLink> {
    let index = index?;
    if let Some(l) = r
        .extra
        .get("node-links")
        .and_then(|m| m.get(index.to_string()))
        .and_then(|v| serde_json::from_value::<NodeLink>(v.clone()).ok())
    {
        return Some(l);
    }
    r.link
        .as_ref()
        .filter(|l| l.index == index)
        .map(|l| NodeLink {
            name: l.name.clone(),
            kind: None,
        })
}

/// The node link called `name`, from `try`'s `node-links`.
pub(super) fn node_link_named(r: &Logged, name: &str) -> Option<NodeLink> {
    r.extra
        .get("node-links")?
        .as_object()?
        .values()
        .filter_map(|v| serde_json::from_value::<NodeLink>(v.clone()).ok())
        .find(|l| l.name == name)
}

/// The names of the node links `try` recorded in `r` (`node-links`).
pub(super) fn node_link_names(r: &Logged) -> Vec<String> {
    r.extra
        .get("node-links")
        .and_then(Value::as_object)
        .map(|m| {
            m.values()
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

//! The node links a record names that the plugin did not create: from a
//! `wasmcni try` run's `node-links`, or from a denial's reason.

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
/// the plugin did not create: from `try`'s `node-links`, else from a
/// denial's reason (`host link "eth0" (index 3) ...`).
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
    let why = r.reason.as_deref()?;
    let name = quoted_after(why, "host link ")?;
    // The reason is about this link if it names its index, or names none.
    let about = match why.find("(index ") {
        Some(at) => why[at + 7..].starts_with(&format!("{index})")),
        None => true,
    };
    about.then_some(NodeLink { name, kind: None })
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

/// The JSON string quoted right after `prefix` in `text` (a reason's
/// `{:?}`-formatted link name).
pub(super) fn quoted_after(text: &str, prefix: &str) -> Option<String> {
    let at = text.find(&format!("{prefix}\""))? + prefix.len();
    let mut de = serde_json::Deserializer::from_str(&text[at..]).into_iter::<String>();
    de.next()?.ok()
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

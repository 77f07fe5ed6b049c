//! The option table, `docs/reference-options.md` (every option of today's
//! reference plugins, its status here, the test that covers it), checked
//! against the standard plugins' config types so that it cannot go stale:
//! each plugin's unit test `option_table_is_true` hands [`check`] the keys
//! its config types read, level by level (the top level, `runtimeConfig.`,
//! …), and [`check_tests`] checks the test column. Native builds only (the
//! tests' own; it reads the repository).

use std::path::{Path, PathBuf};

/// One row of a plugin's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The key (`mtu`, `runtimeConfig.mac`, `ipam.ranges[][].subnet`,
    /// `CNI_ARGS MAC`).
    pub option: String,
    /// `implemented`, `refused`, `validated-unused`, `ignored` or `n/a`.
    pub status: String,
    /// The tests that cover it: a file of the repository, or a file and a
    /// test function in it.
    pub tests: Vec<String>,
}

const STATUSES: &[&str] = &[
    "implemented",
    "refused",
    "validated-unused",
    "ignored",
    "n/a",
];

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every plugin's rows, in the table's order: (plugin, rows).
///
/// # Panics
/// When the table cannot be read, or a row is malformed.
pub fn tables() -> Vec<(String, Vec<Row>)> {
    let path = root().join("docs/reference-options.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut out: Vec<(String, Vec<Row>)> = Vec::new();
    for line in text.lines() {
        if let Some(plugin) = line.strip_prefix("## ") {
            out.push((plugin.trim().to_owned(), Vec::new()));
            continue;
        }
        let Some(body) = line.strip_prefix("| `") else {
            continue;
        };
        let cells: Vec<&str> = body.split(" | ").collect();
        assert!(cells.len() >= 4, "a malformed row: {line}");
        let option = cells[0].strip_suffix('`').unwrap_or(cells[0]).to_owned();
        let status = cells[2].trim().to_owned();
        assert!(
            STATUSES.contains(&status.as_str()),
            "{option}: unknown status {status:?}"
        );
        let tests = cells[3]
            .split(';')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        let (_, rows) = out
            .last_mut()
            .unwrap_or_else(|| panic!("a row before any plugin's heading: {line}"));
        rows.push(Row {
            option,
            status,
            tests,
        });
    }
    out
}

/// `plugin`'s rows.
///
/// # Panics
/// When the table has no section for it.
pub fn rows(plugin: &str) -> Vec<Row> {
    tables()
        .into_iter()
        .find(|(p, _)| p == plugin)
        .unwrap_or_else(|| panic!("docs/reference-options.md has no section for {plugin:?}"))
        .1
}

/// The JSON keys a derived `Deserialize` struct reads: its fields as serde
/// names them.
pub fn keys_of<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut fields));
    assert!(
        !fields.is_empty(),
        "{} is no struct with named fields",
        std::any::type_name::<T>()
    );
    fields.to_vec()
}

/// A deserializer that notes the fields a struct asks for, and stops.
struct Fields<'a>(&'a mut &'static [&'static str]);

#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stop")
    }
}

impl std::error::Error for Stop {}

impl serde::de::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Stop {
        Stop
    }
}

impl<'de> serde::Deserializer<'de> for Fields<'_> {
    type Error = Stop;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// Asserts that `plugin`'s table is true of its config types. `levels`
/// are (prefix, the keys read there): the top level is `""`, the
/// runtime's `"runtimeConfig."`, and so on. At each level every key read
/// has a row (the plugin's or a common one), every row of a key directly
/// at that level marked `implemented`, `refused` or `validated-unused` is
/// read, and none marked `ignored` is (a plugin's row of a common key,
/// which the SDK reads for it, excepted).
///
/// # Panics
/// With every disagreement.
pub fn check(plugin: &str, levels: &[(&str, Vec<&'static str>)]) {
    let own = rows(plugin);
    let common = rows("common");
    let mut wrong = Vec::new();
    for (prefix, keys) in levels {
        for k in keys {
            let key = format!("{prefix}{k}");
            if !own.iter().chain(&common).any(|r| r.option == key) {
                wrong.push(format!("{key:?} is read but has no row"));
            }
        }
        for r in &own {
            // A common key (`dns`, `prevResult`, `ipam.type`) has a row of
            // the plugin's only to say how it uses it: the SDK reads it.
            if common.iter().any(|c| c.option == r.option) {
                continue;
            }
            let Some(k) = r.option.strip_prefix(prefix) else {
                continue;
            };
            if k.is_empty() || k.contains(['.', '[', ' ']) {
                continue;
            }
            let read = keys.contains(&k);
            match r.status.as_str() {
                "implemented" | "refused" | "validated-unused" if !read => wrong.push(format!(
                    "{:?} is {} in the table but not read",
                    r.option, r.status
                )),
                "ignored" if read => {
                    wrong.push(format!("{:?} is ignored in the table but read", r.option))
                }
                _ => {}
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/reference-options.md, section {plugin}:\n{}",
        wrong.join("\n")
    );
}

/// Asserts that every test the table names exists: the file, and the
/// test function in it where one is named.
///
/// # Panics
/// With every one that does not.
pub fn check_tests() {
    let mut wrong = Vec::new();
    for (plugin, rows) in tables() {
        for r in rows {
            for t in &r.tests {
                let mut parts = t.split_whitespace();
                let file = parts.next().unwrap_or_default();
                let text = std::fs::read_to_string(root().join(file));
                match (text, parts.next()) {
                    (Err(e), _) => wrong.push(format!("{plugin} {}: {file}: {e}", r.option)),
                    (Ok(text), Some(f)) if !text.contains(&format!("fn {f}(")) => {
                        wrong.push(format!("{plugin} {}: no fn {f} in {file}", r.option));
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_test_the_option_table_names_exists() {
        check_tests();
    }

    #[test]
    fn keys_of_a_struct_are_its_serde_names() {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        #[allow(dead_code)]
        struct S {
            ip_masq: bool,
            #[serde(rename = "conditionsV4")]
            conditions_v4: Option<String>,
        }
        assert_eq!(keys_of::<S>(), ["ipMasq", "conditionsV4"]);
    }
}

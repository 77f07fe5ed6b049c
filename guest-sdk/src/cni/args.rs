//! `CNI_ARGS`: `KEY=VALUE` pairs separated by `;`.

use super::error::Error;

/// Parsed `CNI_ARGS`, in the order given.
///
/// Parsing follows libcni's `LoadArgs`: the string is split on `;` and each
/// piece must contain exactly one `=`. Stricter than libcni in one point: an
/// empty key (`=v`) is rejected too. Empty values (`K=`) are allowed. An
/// empty `CNI_ARGS` means no pairs; a trailing `;` leaves an empty piece and
/// is rejected, as libcni does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Parse a `CNI_ARGS` value. A malformed pair is code 4 naming `CNI_ARGS`
    /// and the pair.
    pub fn parse(s: &str) -> Result<CniArgs, Error> {
        let mut pairs = Vec::new();
        if s.is_empty() {
            return Ok(CniArgs { pairs });
        }
        for pair in s.split(';') {
            let mut parts = pair.split('=');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(k), Some(v), None) if !k.is_empty() => {
                    pairs.push((k.to_string(), v.to_string()));
                }
                _ => {
                    return Err(Error::invalid_env(format!(
                        "CNI_ARGS: invalid pair {pair:?} (want KEY=VALUE pairs separated by ';')"
                    )))
                }
            }
        }
        Ok(CniArgs { pairs })
    }

    /// Build from pairs (no validation).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> CniArgs {
        CniArgs {
            pairs: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value of the first pair with key `key` (exact, case-sensitive).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All pairs in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// Iterate over `(key, value)` in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Whether `IgnoreUnknown` is `1` or `true` (case-insensitive), the
    /// convention that lets a runtime pass arguments a plugin does not know.
    pub fn ignore_unknown(&self) -> bool {
        self.get("IgnoreUnknown")
            .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
    }

    /// Reject keys not in `known` (code 4 naming them) unless
    /// [`ignore_unknown`](Self::ignore_unknown) is set, as libcni's
    /// `LoadArgs` does. `IgnoreUnknown` itself is always known.
    pub fn check_known(&self, known: &[&str]) -> Result<(), Error> {
        if self.ignore_unknown() {
            return Ok(());
        }
        let unknown: Vec<String> = self
            .pairs
            .iter()
            .filter(|(k, _)| k != "IgnoreUnknown" && !known.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid_env(format!(
                "CNI_ARGS: unknown args {unknown:?}"
            )))
        }
    }
}

//! `CNI_ARGS`: `KEY=VALUE` pairs separated by `;`.

use super::error::Error;

/// Parsed `CNI_ARGS`, in the order given.
///
/// [`parse`](Self::parse) follows libcni's `LoadArgs`: the string is split
/// on `;` and each piece must contain exactly one `=`. Stricter than libcni
/// in one point: an empty key (`=v`) is rejected too. Empty values (`K=`)
/// are allowed. An empty `CNI_ARGS` means no pairs; a trailing `;` leaves
/// an empty piece and is rejected, as libcni does.
///
/// [`parse_lenient`](Self::parse_lenient) never fails: the Go skel does
/// not read `CNI_ARGS` at all (each reference plugin that wants them runs
/// `types.LoadArgs` itself), so a plugin that ignores them must not fail
/// on them; the SDK's skel reads them so. The malformed pieces are kept
/// aside ([`malformed`](Self::malformed)) for a plugin that reads the
/// arguments the reference's way ([`check_known`](Self::check_known)
/// refuses them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
    /// Malformed pieces, each with the number of pairs before it.
    malformed: Vec<(usize, String)>,
}

impl CniArgs {
    /// Parse a `CNI_ARGS` value. A malformed pair is code 4 naming `CNI_ARGS`
    /// and the pair.
    pub fn parse(s: &str) -> Result<CniArgs, Error> {
        let mut pairs = Vec::new();
        if s.is_empty() {
            return Ok(CniArgs::default());
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
        Ok(CniArgs {
            pairs,
            malformed: Vec::new(),
        })
    }

    /// Parse a `CNI_ARGS` value without failing: every piece with exactly
    /// one `=` is a pair (an empty key too: Go's `LoadArgs` counts it an
    /// unknown argument), every other piece (`""` of `";"`, `"A"`,
    /// `"A=1=2"`) is kept aside as [`malformed`](Self::malformed).
    pub fn parse_lenient(s: &str) -> CniArgs {
        let mut args = CniArgs::default();
        if s.is_empty() {
            return args;
        }
        for piece in s.split(';') {
            let mut parts = piece.split('=');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(k), Some(v), None) => args.pairs.push((k.to_string(), v.to_string())),
                _ => args.malformed.push((args.pairs.len(), piece.to_string())),
            }
        }
        args
    }

    /// The pieces [`parse_lenient`](Self::parse_lenient) could not read as
    /// `KEY=VALUE`, each with the number of pairs that came before it (to
    /// report them where Go's `LoadArgs` would meet them); empty after
    /// [`parse`](Self::parse).
    pub fn malformed(&self) -> &[(usize, String)] {
        &self.malformed
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
            malformed: Vec::new(),
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

    /// Whether there are no pairs (and no malformed pieces).
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty() && self.malformed.is_empty()
    }

    /// Whether `IgnoreUnknown` is `1` or `true` (case-insensitive), the
    /// convention that lets a runtime pass arguments a plugin does not know.
    pub fn ignore_unknown(&self) -> bool {
        self.get("IgnoreUnknown")
            .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
    }

    /// Reject a [`malformed`](Self::malformed) piece (code 4 naming it), and
    /// keys not in `known` (code 4 naming them) unless
    /// [`ignore_unknown`](Self::ignore_unknown) is set, as libcni's
    /// `LoadArgs` does. `IgnoreUnknown` itself is always known.
    pub fn check_known(&self, known: &[&str]) -> Result<(), Error> {
        if let Some((_, piece)) = self.malformed.first() {
            return Err(Error::invalid_env(format!(
                "CNI_ARGS: invalid pair {piece:?} (want KEY=VALUE pairs separated by ';')"
            )));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_parsing_keeps_the_pairs_and_sets_the_rest_aside() {
        let a = CniArgs::parse_lenient(";");
        assert!(a.pairs().is_empty());
        assert_eq!(a.malformed(), [(0, String::new()), (0, String::new())]);
        assert!(!a.is_empty());
        let a = CniArgs::parse_lenient("A=1;junk;=v;B=2=3;C=");
        assert_eq!(
            a.iter().collect::<Vec<_>>(),
            [("A", "1"), ("", "v"), ("C", "")]
        );
        assert_eq!(
            a.malformed(),
            [(1, "junk".to_string()), (2, "B=2=3".to_string())]
        );
        assert_eq!(CniArgs::parse_lenient(""), CniArgs::default());
        // What parses strictly parses the same leniently.
        let s = "IgnoreUnknown=1;K8S_POD_NAME=web-0";
        assert_eq!(CniArgs::parse_lenient(s), CniArgs::parse(s).unwrap());
    }
}

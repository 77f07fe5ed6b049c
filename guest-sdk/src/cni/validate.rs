//! Validation of container IDs, network names and interface names, with the
//! rules of libcni's `pkg/utils` (the reference skel applies them).

use super::error::Error;

/// The pattern container IDs and network names must match.
pub const NAME_PATTERN: &str = r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$";

/// Longest valid interface name in bytes (Linux `IFNAMSIZ` - 1).
pub use cni_spec::MAX_IFNAME_LEN;

/// Whether `s` matches [`NAME_PATTERN`]: a non-empty ASCII string that starts
/// with a letter or digit and continues with letters, digits, `_`, `.` or `-`.
pub fn is_valid_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Check a container ID (`CNI_CONTAINERID`).
///
/// Empty → code 3 (libcni: "missing containerID"); not matching
/// [`NAME_PATTERN`] → code 4.
pub fn validate_container_id(id: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::unknown_container("missing CNI_CONTAINERID"));
    }
    if !is_valid_name(id) {
        return Err(Error::invalid_env(format!(
            "CNI_CONTAINERID {id:?} contains invalid characters (must match {NAME_PATTERN})"
        )));
    }
    Ok(())
}

/// Check a network name (the config's `name`). Both failures are code 7.
pub fn validate_network_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid_config(
            "missing network name (field \"name\" is required)",
        ));
    }
    if !is_valid_name(name) {
        return Err(Error::invalid_config(format!(
            "invalid characters found in network name {name:?} (field \"name\" must match {NAME_PATTERN})"
        ))
        .with_details(name));
    }
    Ok(())
}

/// Check an interface name (`CNI_IFNAME`); every failure is code 4.
///
/// Rules (libcni `ValidateInterfaceName`, after the kernel's
/// `dev_valid_name`): not empty, at most [`MAX_IFNAME_LEN`] bytes (bytes,
/// not characters: `"ethé"` is 5 bytes), not `.` or `..`, and no `/`, `:`,
/// NUL or whitespace (any Unicode whitespace, as Go's `unicode.IsSpace`):
/// `cni_spec::ifname_problem`, the one rule the host applies too.
pub fn validate_ifname(name: &str) -> Result<(), Error> {
    use cni_spec::IfnameProblem;
    let msg = match cni_spec::ifname_problem(name) {
        None => return Ok(()),
        Some(IfnameProblem::Empty) => "CNI_IFNAME is empty".to_owned(),
        Some(IfnameProblem::TooLong) => {
            format!("CNI_IFNAME {name:?} is longer than {MAX_IFNAME_LEN} bytes")
        }
        Some(IfnameProblem::Reserved) => format!(
            "CNI_IFNAME {name:?} is not a valid interface name (\".\" and \"..\" are reserved)"
        ),
        Some(IfnameProblem::Forbidden(c)) => {
            format!("CNI_IFNAME {name:?} contains {c:?} (no '/', ':', NUL or whitespace allowed)")
        }
    };
    Err(Error::invalid_env(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_pattern() {
        for ok in ["a", "0", "abc-DEF_1.2", "Z.", "9-"] {
            assert!(is_valid_name(ok), "{ok:?} should be valid");
        }
        for bad in [
            "", "-a", "_a", ".a", "a b", "a/b", "a:b", "é", "aé", "a\n", "a\0",
        ] {
            assert!(!is_valid_name(bad), "{bad:?} should be invalid");
        }
    }

    #[test]
    fn network_name_errors() {
        assert_eq!(validate_network_name("").map_err(|e| e.code), Err(7));
        let e = validate_network_name("a b").err();
        assert_eq!(e.as_ref().map(|e| e.code), Some(7));
        assert!(e.is_some_and(|e| e.msg.contains("\"a b\"") && e.msg.contains("name")));
    }
}

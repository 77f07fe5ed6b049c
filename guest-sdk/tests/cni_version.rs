//! Spec versions, the VERSION answer and the error object.

use std::cmp::Ordering;

use guest_sdk::cni::version::{
    check_command_version, check_supported, compare, is_supported, select_version,
};
use guest_sdk::cni::{Command, Error, ErrorCode, Version, VersionInfo, LATEST, SUPPORTED_VERSIONS};

#[test]
fn supported_list() {
    assert_eq!(
        SUPPORTED_VERSIONS,
        ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
    );
    assert_eq!(LATEST, "1.1.0");
    assert!(is_supported(""));
    assert!(!is_supported("1.0"));
    assert!(!is_supported("0.5.0"));
    let e = check_supported("2.0.0").err();
    assert_eq!(
        e,
        Some(
            Error::incompatible_version("incompatible CNI versions: config is \"2.0.0\"").with_details(
                "config is \"2.0.0\", plugin supports [\"0.1.0\" \"0.2.0\" \"0.3.0\" \"0.3.1\" \"0.4.0\" \"1.0.0\" \"1.1.0\"]"
            )
        )
    );
}

#[test]
fn parse_and_compare() {
    assert_eq!(Version::parse("1.2.3").ok(), Some(Version::new(1, 2, 3)));
    assert_eq!(Version::parse("").ok(), Some(Version::new(0, 1, 0)));
    assert_eq!(Version::parse("1").ok(), Some(Version::new(1, 0, 0)));
    assert_eq!(Version::parse("0.4").ok(), Some(Version::new(0, 4, 0)));
    assert_eq!(Version::parse("1.10.0").ok(), Some(Version::new(1, 10, 0)));
    assert_eq!(Version::new(0, 3, 1).to_string(), "0.3.1");
    for bad in [
        "asdf",
        "asdf.",
        ".asdf",
        "0.",
        "..",
        "1.2.3.4",
        "1.2.3.4.5",
        "+1.0.0",
        "-1.0.0",
        "1. 0",
        "v1.0.0",
        "99999999999.0.0",
    ] {
        let e = Version::parse(bad).err();
        assert_eq!(e.as_ref().map(|e| e.code), Some(6), "{bad:?}");
        assert!(
            e.is_some_and(|e| e.msg.starts_with(&format!("invalid version {bad:?}"))),
            "{bad:?}"
        );
    }
    let pairs = [
        ("1.2.34", "1.2.14"),
        ("2.5.4", "2.4.4"),
        ("1.2.3", "0.2.3"),
        ("0.4.0", "0.3.1"),
        ("1.10.0", "1.9.0"),
    ];
    for (hi, lo) in pairs {
        assert_eq!(compare(hi, lo).ok(), Some(Ordering::Greater));
        assert_eq!(compare(lo, hi).ok(), Some(Ordering::Less));
    }
    assert_eq!(compare("1.0.0", "1.0.0").ok(), Some(Ordering::Equal));
    assert_eq!(compare("", "0.1.0").ok(), Some(Ordering::Equal));
    assert_eq!(compare("x", "1.0.0").err().map(|e| e.code), Some(6));
}

#[test]
fn version_info() {
    let all: Vec<String> = SUPPORTED_VERSIONS.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        VersionInfo::from_request(br#"{"cniVersion": "0.4.0"}"#),
        VersionInfo {
            cni_version: "0.4.0".into(),
            supported_versions: all.clone()
        }
    );
    for req in [
        &b""[..],
        b"garbage",
        b"{}",
        br#"{"cniVersion": ""}"#,
        br#"{"cniVersion": "7.0.0"}"#,
        br#"{"cniVersion": 1}"#,
    ] {
        assert_eq!(
            VersionInfo::from_request(req).cni_version,
            "1.1.0",
            "{req:?}"
        );
    }
    assert_eq!(
        VersionInfo::new(Some("1.0.0")).to_json(),
        r#"{"cniVersion":"1.0.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}"#
    );
    assert_eq!(VersionInfo::new(None).cni_version, "1.1.0");
}

#[test]
fn command_version_floors() {
    let ok = |c, v| check_command_version(c, v).map_err(|e| (e.code, e.msg));
    assert_eq!(ok(Command::Add, "0.1.0"), Ok(()));
    assert_eq!(ok(Command::Add, ""), Ok(()));
    assert_eq!(ok(Command::Del, "1.1.0"), Ok(()));
    assert_eq!(ok(Command::Version, "garbage"), Ok(()));
    assert_eq!(ok(Command::Add, "0.5.0").map_err(|e| e.0), Err(1));
    assert_eq!(ok(Command::Check, "0.4.0"), Ok(()));
    assert_eq!(ok(Command::Check, "1.0.0"), Ok(()));
    assert_eq!(
        ok(Command::Check, "0.3.1"),
        Err((1, "config version does not allow CHECK".into()))
    );
    assert_eq!(
        ok(Command::Check, "2.0.0"),
        Err((1, "plugin version does not allow CHECK".into()))
    );
    assert_eq!(ok(Command::Check, "bad").map_err(|e| e.0), Err(6));
    assert_eq!(ok(Command::Status, "1.1.0"), Ok(()));
    assert_eq!(
        ok(Command::Status, "1.0.0"),
        Err((1, "config version does not allow STATUS".into()))
    );
    assert_eq!(
        ok(Command::Gc, "1.0.0"),
        Err((1, "config version does not allow GC".into()))
    );
    assert_eq!(ok(Command::Gc, "1.1.0"), Ok(()));
    // Above the floor, parses, but not exactly supported.
    assert_eq!(ok(Command::Check, "0.4.1").map_err(|e| e.0), Err(1));
}

#[test]
fn cni_versions_selection() {
    let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        select_version("", &list(&["0.4.0", "1.0.0"]))
            .ok()
            .as_deref(),
        Some("1.0.0")
    );
    assert_eq!(
        select_version("1.1.0", &list(&["0.4.0", "1.0.0"]))
            .ok()
            .as_deref(),
        Some("1.1.0")
    );
    assert_eq!(
        select_version("0.3.1", &list(&["2.0.0", "1.0.5"]))
            .ok()
            .as_deref(),
        Some("0.3.1")
    );
    assert_eq!(
        select_version("", &list(&["1.1.0", "1.0.0", "0.3.1"]))
            .ok()
            .as_deref(),
        Some("1.1.0")
    );
    assert_eq!(
        select_version("", &list(&["3.0.0"])).ok().as_deref(),
        Some("")
    );
    assert_eq!(select_version("1.0.0", &[]).ok().as_deref(), Some("1.0.0"));
    let e = select_version("", &list(&["1.0.0", "one"])).err();
    assert_eq!(e.as_ref().map(|e| e.code), Some(7));
    assert_eq!(
        e.map(|e| e.msg).as_deref(),
        Some("invalid cniVersions entry \"one\" at index 1")
    );
}

#[test]
fn error_json_and_codes() {
    let e = Error::invalid_env("CNI_IFNAME \"a/b\" contains '/'").with_details("see spec");
    assert_eq!(
        e.to_json("0.4.0"),
        "{\n    \"cniVersion\": \"0.4.0\",\n    \"code\": 4,\n    \"msg\": \"CNI_IFNAME \\\"a/b\\\" contains '/'\",\n    \"details\": \"see spec\"\n}"
    );
    assert_eq!(
        Error::decode("x").to_json(""),
        "{\n    \"code\": 6,\n    \"msg\": \"x\"\n}"
    );
    assert_eq!(e.to_string(), "CNI_IFNAME \"a/b\" contains '/'; see spec");
    assert_eq!(Error::internal("boom").to_string(), "boom");

    // Reads back, ignoring cniVersion.
    let back: Result<Error, _> = serde_json::from_str(&e.to_json("1.0.0"));
    assert_eq!(back.ok(), Some(e.clone()));
    assert_eq!(
        serde_json::to_string(&Error::io("eof")).ok().as_deref(),
        Some(r#"{"code":5,"msg":"eof"}"#)
    );

    let table: [(Error, u32, ErrorCode); 12] = [
        (
            Error::incompatible_version(""),
            1,
            ErrorCode::IncompatibleVersion,
        ),
        (Error::unsupported_field(""), 2, ErrorCode::UnsupportedField),
        (Error::unknown_container(""), 3, ErrorCode::UnknownContainer),
        (Error::invalid_env(""), 4, ErrorCode::InvalidEnv),
        (Error::io(""), 5, ErrorCode::Io),
        (Error::decode(""), 6, ErrorCode::Decode),
        (Error::invalid_config(""), 7, ErrorCode::InvalidConfig),
        (Error::invalid_netns(""), 8, ErrorCode::InvalidNetns),
        (Error::try_again_later(""), 11, ErrorCode::TryAgainLater),
        (Error::not_ready(""), 50, ErrorCode::NotReady),
        (
            Error::limited_connectivity(""),
            51,
            ErrorCode::LimitedConnectivity,
        ),
        (Error::internal(""), 999, ErrorCode::Internal),
    ];
    for (err, code, kind) in table {
        assert_eq!(err.code, code);
        assert_eq!(err.well_known(), Some(kind));
        assert_eq!(u32::from(kind), code);
        assert_eq!(Error::with_code(kind, "").code, code);
    }
    assert_eq!(Error::new(123, "custom").well_known(), None);
}

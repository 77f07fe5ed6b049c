//! `CNI_*` environment validation, as the reference Go skel (libcni 1.2).

use std::collections::HashMap;

use guest_sdk::cni::args::CniArgs;
use guest_sdk::cni::{Command, Env, Error};

const FULL: [(&str, &str); 6] = [
    ("CNI_COMMAND", "ADD"),
    ("CNI_CONTAINERID", "ctr-0123abcd"),
    ("CNI_NETNS", "/var/run/netns/cni-1234"),
    ("CNI_IFNAME", "eth0"),
    ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web-0"),
    ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
];

fn env_with(command: &str, overrides: &[(&str, Option<&str>)]) -> Result<Env, Error> {
    let mut vars: HashMap<String, String> = FULL
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    vars.insert("CNI_COMMAND".into(), command.into());
    for (k, v) in overrides {
        match v {
            Some(v) => vars.insert(k.to_string(), v.to_string()),
            None => vars.remove(*k),
        };
    }
    Env::from_lookup(|name| vars.get(name).cloned())
}

#[test]
fn full_environment_parses_for_every_command() {
    for (name, cmd) in [
        ("ADD", Command::Add),
        ("DEL", Command::Del),
        ("CHECK", Command::Check),
        ("STATUS", Command::Status),
        ("GC", Command::Gc),
        ("VERSION", Command::Version),
    ] {
        let env = env_with(name, &[]);
        assert_eq!(env.as_ref().map(|e| e.command).ok(), Some(cmd), "{name}");
    }
    let env = env_with("ADD", &[]).ok();
    let Some(env) = env else {
        panic!("full ADD env must parse")
    };
    assert_eq!(env.container_id, "ctr-0123abcd");
    assert_eq!(env.netns, "/var/run/netns/cni-1234");
    assert_eq!(env.ifname, "eth0");
    assert_eq!(env.path, "/opt/cni/bin:/usr/lib/cni");
    assert_eq!(
        env.path_dirs().collect::<Vec<_>>(),
        ["/opt/cni/bin", "/usr/lib/cni"]
    );
    assert_eq!(
        env.args.pairs(),
        [
            ("IgnoreUnknown".to_string(), "1".to_string()),
            ("K8S_POD_NAME".to_string(), "web-0".to_string())
        ]
    );
    assert_eq!(env.args.get("K8S_POD_NAME"), Some("web-0"));
    assert!(env.args.ignore_unknown());
}

/// Required variables per command (reference skel).
#[test]
fn required_variables_per_command() {
    let table: [(&str, &[&str]); 6] = [
        (
            "ADD",
            &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
        ),
        (
            "CHECK",
            &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
        ),
        ("DEL", &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"]),
        ("STATUS", &["CNI_PATH"]),
        ("GC", &["CNI_PATH"]),
        ("VERSION", &[]),
    ];
    let all = [
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_ARGS",
        "CNI_PATH",
    ];
    for (cmd, required) in table {
        for var in all {
            for how in [None, Some("")] {
                let result = env_with(cmd, &[(var, how)]);
                if required.contains(&var) {
                    let e = result.err();
                    assert_eq!(e.as_ref().map(|e| e.code), Some(4), "{cmd} without {var}");
                    assert_eq!(
                        e.map(|e| e.msg),
                        Some(format!("required env variables [{var}] missing")),
                        "{cmd} without {var}"
                    );
                } else {
                    assert!(result.is_ok(), "{cmd} must not need {var}: {result:?}");
                }
            }
            assert_eq!(
                Command::parse(cmd).map(|c| c.requires(var)).ok(),
                Some(required.contains(&var))
            );
        }
    }
    // Several missing at once are reported together, in skel order.
    let e = env_with(
        "ADD",
        &[
            ("CNI_PATH", None),
            ("CNI_NETNS", None),
            ("CNI_CONTAINERID", Some("")),
        ],
    )
    .err();
    assert_eq!(
        e.map(|e| e.msg).as_deref(),
        Some("required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_PATH] missing")
    );
    // DEL without netns keeps it empty.
    let env = env_with("DEL", &[("CNI_NETNS", None)]).ok();
    assert_eq!(env.map(|e| e.netns), Some(String::new()));
}

#[test]
fn command_parsing() {
    let e = env_with("", &[]).err();
    assert_eq!(e.as_ref().map(|e| e.code), Some(4));
    assert_eq!(
        e.map(|e| e.msg).as_deref(),
        Some("required env variables [CNI_COMMAND] missing")
    );
    let e = Env::from_lookup(|_| None).err();
    assert_eq!(
        e.map(|e| e.msg).as_deref(),
        Some("required env variables [CNI_COMMAND] missing")
    );
    for bad in ["add", "FOO", "ADD ", "DELETE"] {
        let e = env_with(bad, &[]).err();
        assert_eq!(e.as_ref().map(|e| e.code), Some(4), "{bad:?}");
        assert_eq!(
            e.map(|e| e.msg),
            Some(format!("unknown CNI_COMMAND: {bad:?}"))
        );
    }
    for c in Command::ALL {
        assert_eq!(c.as_str().parse::<Command>().ok(), Some(c));
        assert_eq!(c.to_string(), c.as_str());
    }
}

#[test]
fn container_id_rules() {
    for ok in [
        "a",
        "0",
        "abc-DEF_1.2",
        "f81d4fae7dec11d0a76500a0c91e6bf6",
        "x.",
    ] {
        assert!(
            env_with("ADD", &[("CNI_CONTAINERID", Some(ok))]).is_ok(),
            "{ok:?}"
        );
    }
    for bad in [
        "-abc",
        "_abc",
        ".abc",
        "a b",
        "a/b",
        "a:b",
        "ab\n",
        "ctr\u{e9}",
        "a\tb",
        "a\u{0}b",
    ] {
        let e = env_with("DEL", &[("CNI_CONTAINERID", Some(bad))]).err();
        assert_eq!(e.as_ref().map(|e| e.code), Some(4), "{bad:?}");
        let msg = e.map(|e| e.msg).unwrap_or_default();
        assert!(msg.starts_with("CNI_CONTAINERID "), "{msg}");
        assert!(msg.contains(&format!("{bad:?}")), "{msg}");
    }
    // Not validated where the command does not use it (GC, STATUS, VERSION).
    for cmd in ["GC", "STATUS", "VERSION"] {
        assert!(
            env_with(cmd, &[("CNI_CONTAINERID", Some("-bad id"))]).is_ok(),
            "{cmd}"
        );
    }
}

#[test]
fn interface_name_rules() {
    let ok = [
        "eth0",
        "a",
        "123456789012345", // 15 bytes
        "net-1_x.y",
        "\u{e9}th0",                                // 5 bytes
        "\u{4e2d}\u{6587}\u{7f51}\u{5361}\u{4e00}", // 5 CJK chars = 15 bytes
        "...",
    ];
    for name in ok {
        assert!(
            env_with("ADD", &[("CNI_IFNAME", Some(name))]).is_ok(),
            "{name:?} should be valid"
        );
    }
    let bad = [
        (
            "1234567890123456",
            "CNI_IFNAME \"1234567890123456\" is longer than 15 bytes",
        ),
        (
            "toolongname12345",
            "CNI_IFNAME \"toolongname12345\" is longer than 15 bytes",
        ),
        (
            "\u{4e2d}\u{6587}\u{7f51}\u{5361}\u{4e00}a",
            "is longer than 15 bytes",
        ), // 16 bytes, 6 chars
        (".", "CNI_IFNAME \".\" is not a valid interface name"),
        ("..", "CNI_IFNAME \"..\" is not a valid interface name"),
        ("a/b", "CNI_IFNAME \"a/b\" contains '/'"),
        ("a:b", "CNI_IFNAME \"a:b\" contains ':'"),
        ("a b", "CNI_IFNAME \"a b\" contains ' '"),
        ("a\tb", "contains '\\t'"),
        ("eth0\n", "contains '\\n'"),
        ("a\u{a0}b", "contains '\\u{a0}'"),     // no-break space
        ("a\u{2003}b", "contains '\\u{2003}'"), // em space
        ("a\u{3000}", "contains '\\u{3000}'"),  // ideographic space
        ("\u{85}x", "contains '\\u{85}'"),      // NEL
    ];
    for (name, want) in bad {
        for cmd in ["ADD", "DEL", "CHECK"] {
            let e = env_with(cmd, &[("CNI_IFNAME", Some(name))]).err();
            assert_eq!(e.as_ref().map(|e| e.code), Some(4), "{cmd} {name:?}");
            let msg = e.map(|e| e.msg).unwrap_or_default();
            assert!(
                msg.contains(want),
                "{name:?}: {msg:?} should contain {want:?}"
            );
        }
    }
    // Not checked for commands that do not take an interface.
    assert!(env_with("GC", &[("CNI_IFNAME", Some("a/b"))]).is_ok());
}

#[test]
fn validation_errors_come_in_skel_order() {
    // An invalid container ID is reported before a missing later variable.
    let e = env_with(
        "ADD",
        &[("CNI_CONTAINERID", Some("a b")), ("CNI_PATH", None)],
    )
    .err();
    assert!(e.is_some_and(|e| e.msg.starts_with("CNI_CONTAINERID")));
    // A missing earlier variable does not hide an invalid ifname.
    let e = env_with("ADD", &[("CNI_NETNS", None), ("CNI_IFNAME", Some("."))]).err();
    assert!(e.is_some_and(|e| e.msg.starts_with("CNI_IFNAME")));
}

/// Expected pairs, or `None` for a parse error.
type ArgsCase<'a> = (&'a str, Option<&'a [(&'a str, &'a str)]>);

#[test]
fn cni_args_parsing() {
    let cases: [ArgsCase; 10] = [
        ("", Some(&[])),
        ("A=1", Some(&[("A", "1")])),
        (
            "A=1;B=two;A=3",
            Some(&[("A", "1"), ("B", "two"), ("A", "3")]),
        ),
        ("K8S_POD_IP=", Some(&[("K8S_POD_IP", "")])),
        ("A", None),
        ("A=1;", None),
        (";A=1", None),
        ("A=1=2", None),
        ("=1", None),
        ("A=1;;B=2", None),
    ];
    for (input, want) in cases {
        let got = CniArgs::parse(input);
        match want {
            Some(pairs) => {
                let got: Option<Vec<(String, String)>> = got.ok().map(|a| a.pairs().to_vec());
                let want: Vec<(String, String)> = pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                assert_eq!(got, Some(want), "{input:?}");
            }
            None => {
                let e = got.err();
                assert_eq!(e.as_ref().map(|e| e.code), Some(4), "{input:?}");
                assert!(
                    e.is_some_and(|e| e.msg.starts_with("CNI_ARGS")),
                    "{input:?}"
                );
            }
        }
    }
    // The environment takes any CNI_ARGS (the Go skel does not read
    // them); a plugin that reads them strictly refuses the malformed piece.
    let env = env_with("ADD", &[("CNI_ARGS", Some("garbage"))]).expect("env");
    let e = env.args.check_known(&[]).err();
    assert_eq!(
        e.map(|e| e.msg).as_deref(),
        Some("CNI_ARGS: invalid pair \"garbage\" (want KEY=VALUE pairs separated by ';')")
    );
    // VERSION ignores CNI_ARGS altogether.
    assert!(env_with("VERSION", &[("CNI_ARGS", Some("garbage"))]).is_ok());

    let args = CniArgs::parse("IP=10.1.2.3;FOO=bar")
        .ok()
        .unwrap_or_default();
    assert_eq!(args.check_known(&["IP", "FOO"]).map_err(|e| e.code), Ok(()));
    let e = args.check_known(&["IP"]).err();
    assert_eq!(
        e.map(|e| e.msg).as_deref(),
        Some("CNI_ARGS: unknown args [\"FOO=bar\"]")
    );
    let args = CniArgs::parse("IgnoreUnknown=true;FOO=bar")
        .ok()
        .unwrap_or_default();
    assert!(args.check_known(&[]).is_ok());
}

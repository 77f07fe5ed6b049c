//! Network configuration parsing and validation.

use guest_sdk::cni::{Error, NetConf};
use serde::Deserialize;
use serde_json::{json, Value};

fn parse(v: &Value) -> Result<NetConf, Error> {
    NetConf::parse(v.to_string().as_bytes())
}

fn code_and_msg(r: Result<NetConf, Error>) -> (u32, String) {
    match r {
        Ok(c) => panic!("expected an error, parsed {c:?}"),
        Err(e) => (e.code, e.msg),
    }
}

fn bridge_conf() -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "mynet",
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": true,
        "ipMasq": true,
        "mtu": 1450,
        "capabilities": {"portMappings": true},
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.22.0.0/16"}]],
            "routes": [{"dst": "0.0.0.0/0"}]
        },
        "dns": {"nameservers": ["10.22.0.1"]},
        "args": {"cni": {"labels": [{"key": "app", "value": "web"}]}},
        "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
        "cni.dev/custom": {"x": [1, 2, 3]}
    })
}

#[test]
fn parses_known_fields_and_keeps_unknown_ones() {
    let conf = match parse(&bridge_conf()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(conf.cni_version, "1.0.0");
    assert_eq!(conf.name, "mynet");
    assert_eq!(conf.plugin_type, "bridge");
    assert_eq!(
        conf.capabilities
            .as_ref()
            .and_then(|c| c.get("portMappings")),
        Some(&true)
    );
    assert_eq!(
        conf.ipam.as_ref().map(|i| i.plugin_type.as_str()),
        Some("host-local")
    );
    assert_eq!(
        conf.ipam.as_ref().and_then(|i| i.extra.get("ranges")),
        Some(&json!([[{"subnet": "10.22.0.0/16"}]]))
    );
    assert_eq!(
        conf.dns.as_ref().map(|d| d.nameservers.clone()),
        Some(vec!["10.22.0.1".to_string()])
    );
    assert!(conf.args.as_ref().is_some_and(|a| a.contains_key("cni")));
    assert!(conf
        .runtime_config
        .as_ref()
        .is_some_and(|r| r.contains_key("portMappings")));
    assert_eq!(conf.extra.get("bridge"), Some(&json!("cni0")));
    assert_eq!(conf.extra.get("mtu"), Some(&json!(1450)));
    assert_eq!(
        conf.extra.get("cni.dev/custom"),
        Some(&json!({"x": [1, 2, 3]}))
    );
    assert!(!conf.extra.contains_key("name"));
    assert_eq!(conf.prev_result().map_err(|e| e.code), Ok(None));

    // Re-serialized: the same document (all unknown fields preserved).
    assert_eq!(conf.to_value(), bridge_conf());
    let text = serde_json::to_string(&conf).unwrap_or_default();
    assert!(
        text.starts_with("{\"cniVersion\":\"1.0.0\",\"name\":\"mynet\",\"type\":\"bridge\""),
        "{text}"
    );
    let again: Result<NetConf, _> = serde_json::from_str(&text);
    assert_eq!(again.ok().as_ref(), Some(&conf));
}

#[test]
fn bad_json_is_code_6() {
    for bad in [
        &b"{"[..],
        b"",
        b"not json",
        b"{\"name\": \"x\",}",
        b"\xff\xfe",
    ] {
        let (code, msg) = code_and_msg(NetConf::parse(bad));
        assert_eq!(code, 6, "{bad:?}");
        assert!(msg.starts_with("failed to decode network config"), "{msg}");
    }
    for not_object in [json!([]), json!("conf"), json!(1), json!(null)] {
        let (code, msg) = code_and_msg(parse(&not_object));
        assert_eq!(code, 6);
        assert!(msg.contains("expected a JSON object"), "{msg}");
    }
}

#[test]
fn name_and_type_are_required_and_checked() {
    let cases: [(Value, &str); 9] = [
        (
            json!({"cniVersion": "1.0.0", "type": "bridge"}),
            "missing network name (field \"name\"",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "", "type": "bridge"}),
            "missing network name",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": null, "type": "bridge"}),
            "missing network name",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "my net", "type": "bridge"}),
            "invalid characters found in network name \"my net\"",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "-net", "type": "bridge"}),
            "field \"name\" must match",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "net"}),
            "missing plugin type (field \"type\"",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "net", "type": ""}),
            "missing plugin type",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "net", "type": "../../bin/sh"}),
            "field \"type\" must not contain a path separator",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "net", "type": "a\\b"}),
            "path separator",
        ),
    ];
    for (conf, want) in cases {
        let (code, msg) = code_and_msg(parse(&conf));
        assert_eq!(code, 7, "{conf}");
        assert!(
            msg.contains(want),
            "{conf}: {msg:?} should contain {want:?}"
        );
    }
}

#[test]
fn wrong_types_are_code_7_naming_the_field() {
    let base = json!({"cniVersion": "1.0.0", "name": "net", "type": "bridge"});
    let cases: [(&str, Value, &str); 10] = [
        (
            "name",
            json!(5),
            "field \"name\": invalid type: integer `5`, expected a string",
        ),
        (
            "type",
            json!(["bridge"]),
            "field \"type\": invalid type: sequence",
        ),
        ("cniVersion", json!(1.0), "field \"cniVersion\""),
        (
            "cniVersions",
            json!(["1.0.0", 1]),
            "field \"cniVersions[1]\"",
        ),
        (
            "capabilities",
            json!({"portMappings": "yes"}),
            "field \"capabilities.portMappings\"",
        ),
        ("ipam", json!("host-local"), "field \"ipam\""),
        (
            "ipam",
            json!({"type": 3}),
            "field \"ipam.type\" must be a string",
        ),
        ("dns", json!({"search": [1]}), "field \"dns.search[0]\""),
        ("args", json!([]), "field \"args\""),
        (
            "prevResult",
            json!("x"),
            "field \"prevResult\" must be an object",
        ),
    ];
    for (key, value, want) in cases {
        let mut conf = base.clone();
        conf[key] = value;
        let (code, msg) = code_and_msg(parse(&conf));
        assert_eq!(code, 7, "{conf}");
        assert!(
            msg.contains(want),
            "{conf}: {msg:?} should contain {want:?}"
        );
    }
    // runtimeConfig must be an object too.
    let mut conf = base.clone();
    conf["runtimeConfig"] = json!(true);
    assert_eq!(parse(&conf).err().map(|e| e.code), Some(7));
    // null means absent for optional sections.
    let mut conf = base;
    for key in [
        "ipam",
        "dns",
        "args",
        "runtimeConfig",
        "prevResult",
        "capabilities",
    ] {
        conf[key] = Value::Null;
    }
    let parsed = parse(&conf).ok();
    assert!(parsed.is_some_and(|c| c.ipam.is_none() && c.dns.is_none() && c.prev_result.is_none()));
}

#[test]
fn cni_version_rules() {
    let with = |v: Value| json!({"cniVersion": v, "name": "net", "type": "loopback"});
    for v in [
        "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
    ] {
        assert_eq!(
            parse(&with(json!(v))).ok().map(|c| c.cni_version),
            Some(v.to_string())
        );
    }
    // Empty or absent → 0.1.0.
    assert_eq!(
        parse(&with(json!("")))
            .ok()
            .map(|c| c.cni_version)
            .as_deref(),
        Some("0.1.0")
    );
    assert_eq!(
        parse(&with(Value::Null))
            .ok()
            .map(|c| c.cni_version)
            .as_deref(),
        Some("0.1.0")
    );
    let no_version = json!({"name": "net", "type": "loopback"});
    assert_eq!(
        parse(&no_version).ok().map(|c| c.cni_version).as_deref(),
        Some("0.1.0")
    );
    // Unsupported → code 1 naming the version.
    for v in ["0.5.0", "1.0", "2.0.0", "banana", " 1.0.0"] {
        let (code, msg) = code_and_msg(parse(&with(json!(v))));
        assert_eq!(code, 1, "{v}");
        assert_eq!(msg, format!("incompatible CNI versions: config is {v:?}"));
    }
    // cniVersions (spec 1.1) when cniVersion is absent: highest supported.
    let conf =
        json!({"cniVersions": ["0.4.0", "1.1.0", "1.0.0", "9.0.0"], "name": "n", "type": "t"});
    assert_eq!(
        parse(&conf).ok().map(|c| c.cni_version).as_deref(),
        Some("1.1.0")
    );
    let conf = json!({"cniVersions": ["1.0.0", "x.y"], "name": "n", "type": "t"});
    assert_eq!(parse(&conf).err().map(|e| e.code), Some(7));
    // Name problems come before version problems (skel order).
    let conf = json!({"cniVersion": "9.9.9", "name": "bad name", "type": "t"});
    assert_eq!(parse(&conf).err().map(|e| e.code), Some(7));
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct BridgeConf {
    name: String,
    bridge: String,
    #[serde(default)]
    is_gateway: bool,
    mtu: Option<u32>,
    #[serde(default)]
    vlan: u16,
}

#[test]
fn plugin_config_deserializes_the_whole_object() {
    let conf = parse(&bridge_conf()).ok();
    let typed = conf.as_ref().map(|c| c.plugin_config::<BridgeConf>());
    assert_eq!(
        typed.and_then(Result::ok),
        Some(BridgeConf {
            name: "mynet".into(),
            bridge: "cni0".into(),
            is_gateway: true,
            mtu: Some(1450),
            vlan: 0
        })
    );

    let mut bad = bridge_conf();
    bad["vlan"] = json!("ten");
    let e = parse(&bad)
        .ok()
        .map(|c| c.plugin_config::<BridgeConf>())
        .and_then(Result::err);
    assert_eq!(e.as_ref().map(|e| e.code), Some(7));
    assert_eq!(
        e.map(|e| e.msg).as_deref(),
        Some("invalid network config: field \"vlan\": invalid type: string \"ten\", expected u16")
    );

    let mut missing = bridge_conf();
    if let Some(m) = missing.as_object_mut() {
        m.remove("bridge");
    }
    let e = parse(&missing)
        .ok()
        .map(|c| c.plugin_config::<BridgeConf>())
        .and_then(Result::err);
    assert_eq!(
        e.map(|e| (e.code, e.msg)),
        Some((
            7,
            "invalid network config: missing field `bridge`".to_string()
        ))
    );
}

#[test]
fn prev_result_is_parsed_in_the_config_version() {
    let mut conf = json!({"cniVersion": "0.4.0", "name": "net", "type": "tuning"});
    conf["prevResult"] = json!({
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
        "ips": [{"version": "4", "interface": 0, "address": "10.1.0.5/24", "gateway": "10.1.0.1"}],
        "dns": {}
    });
    let prev = parse(&conf).ok().map(|c| c.prev_result());
    let prev = prev.and_then(Result::ok).flatten();
    assert_eq!(
        prev.as_ref().map(|p| p.interfaces[0].name.as_str()),
        Some("eth0")
    );
    assert_eq!(
        prev.map(|p| p.ips[0].address.to_string()),
        Some("10.1.0.5/24".to_string())
    );

    // Without its own cniVersion the prevResult takes the config's.
    conf["prevResult"] = json!({"ips": [{"version": "4", "address": "10.1.0.5/24"}]});
    let prev = parse(&conf).ok().map(|c| c.prev_result());
    assert!(prev.is_some_and(|p| p.is_ok_and(|r| r.is_some_and(|r| r.ips.len() == 1))));

    // A prevResult of another version family: code 1.
    conf["prevResult"] = json!({"cniVersion": "1.0.0", "ips": []});
    let e = parse(&conf)
        .ok()
        .map(|c| c.prev_result())
        .and_then(Result::err);
    assert_eq!(e.as_ref().map(|e| e.code), Some(1));
    assert!(e.is_some_and(|e| e.msg.starts_with("prevResult: ")));

    // Malformed: code 6 naming the field.
    conf["prevResult"] = json!({"ips": [{"address": "nope"}]});
    let e = parse(&conf)
        .ok()
        .map(|c| c.prev_result())
        .and_then(Result::err);
    assert_eq!(e.as_ref().map(|e| e.code), Some(6));
    assert!(
        e.as_ref().is_some_and(|e| e.msg.contains("ips[0].address")),
        "{e:?}"
    );
}

#[test]
fn gc_valid_attachments() {
    let conf = json!({
        "cniVersion": "1.1.0", "name": "net", "type": "bridge",
        "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}],
        "cni.dev/attachments": [{"containerID": "old", "ifname": "eth0"}]
    });
    let list = parse(&conf).ok().map(|c| c.valid_attachments());
    let list = list.and_then(Result::ok).flatten().unwrap_or_default();
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].container_id.as_str(), list[0].ifname.as_str()),
        ("c1", "eth0")
    );

    let conf = json!({"cniVersion": "1.1.0", "name": "net", "type": "bridge",
                      "cni.dev/attachments": [{"containerID": "c2", "ifname": "net1"}]});
    let list = parse(&conf).ok().map(|c| c.valid_attachments());
    assert_eq!(
        list.and_then(Result::ok).flatten().map(|l| l.len()),
        Some(1)
    );

    let conf = json!({"cniVersion": "1.1.0", "name": "net", "type": "bridge",
                      "cni.dev/valid-attachments": [{"containerID": 5}]});
    let e = parse(&conf)
        .ok()
        .map(|c| c.valid_attachments())
        .and_then(Result::err);
    assert_eq!(e.as_ref().map(|e| e.code), Some(7));
    assert!(e.is_some_and(|e| e.msg.contains("cni.dev/valid-attachments[0].containerID")));

    let conf = json!({"cniVersion": "1.1.0", "name": "net", "type": "bridge"});
    let none = parse(&conf).ok().map(|c| c.valid_attachments());
    assert_eq!(none.map(|r| r.map_err(|e| e.code)), Some(Ok(None)));
}

/// Go's encoding/json matches keys case-insensitively (exact first), and
/// `null` leaves a field unset: the reference plugins accept a config in
/// any casing, and containerd sends capability arguments with Go's field
/// names. NetConf and every plugin type decoded through it do the same.
#[test]
fn keys_match_as_go_matches_them() {
    #[derive(Deserialize, Debug, PartialEq)]
    struct Mapping {
        #[serde(rename = "hostPort")]
        host_port: u16,
        #[serde(rename = "containerPort")]
        container_port: u16,
        #[serde(default)]
        protocol: String,
    }
    #[derive(Deserialize, Debug)]
    struct Bridge {
        bridge: String,
        #[serde(default, rename = "isGateway")]
        is_gateway: bool,
        #[serde(default, rename = "ipMasq")]
        ip_masq: bool,
        #[serde(default, rename = "runtimeConfig")]
        runtime_config: Option<Runtime>,
    }
    #[derive(Deserialize, Debug)]
    struct Runtime {
        #[serde(default, rename = "portMappings")]
        port_mappings: Vec<Mapping>,
    }
    let c = parse(&json!({
        "CNIVersion": "1.0.0", "Name": "mynet", "TYPE": "bridge", "Bridge": "cni0",
        "IsGateway": true, "ipMasq": null,
        "Capabilities": {"portMappings": true},
        "IPAM": {"Type": "host-local", "Subnet": "10.22.0.0/16"},
        "RuntimeConfig": {"portMappings": [
            {"HostPort": 8080, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""}]}
    }))
    .expect("parses");
    assert_eq!(
        (
            c.cni_version.as_str(),
            c.name.as_str(),
            c.plugin_type.as_str()
        ),
        ("1.0.0", "mynet", "bridge")
    );
    assert_eq!(c.capabilities.as_ref().map(|m| m.len()), Some(1));
    let ipam = c.ipam.as_ref().expect("ipam");
    assert_eq!(ipam.plugin_type, "host-local");
    assert_eq!(ipam.extra.get("Subnet"), Some(&json!("10.22.0.0/16")));
    // Known keys spelled otherwise are not left over in `extra`.
    assert!(
        c.extra
            .keys()
            .all(|k| k == "Bridge" || k == "IsGateway" || k == "ipMasq"),
        "{:?}",
        c.extra
    );
    let b: Bridge = c.plugin_config().expect("plugin config");
    assert_eq!(b.bridge, "cni0");
    assert!(b.is_gateway && !b.ip_masq);
    assert_eq!(
        b.runtime_config.expect("runtimeConfig").port_mappings,
        vec![Mapping {
            host_port: 8080,
            container_port: 80,
            protocol: "tcp".into()
        }]
    );
}

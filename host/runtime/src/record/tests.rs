//! The record's unit tests: round trips, hostile names, corrupt files, intent logs.

use super::*;
use crate::netns::Kind;

fn attachment(network: &str, cid: &str, ifname: &str) -> Attachment {
    Attachment {
        network: network.into(),
        container_id: cid.into(),
        ifname: ifname.into(),
        ..Attachment::default()
    }
}

#[test]
fn a_record_round_trips_and_removal_leaves_no_directories() {
    let root = tempfile::tempdir().expect("tempdir");
    let a = attachment("net1", "c1", "eth0");
    let loc = Location::new(root.path(), &a, "host-device");
    assert_eq!(loc.load().expect("load"), None);
    let mut r = Record::new(&a, "host-device", 42).expect("record");
    r.borrowed.push(Borrowed {
        name: "eth9".into(),
        index: 3,
        identity: LinkIdentity {
            kind: Some("veth".into()),
            host_link: Some(8),
            ..LinkIdentity::default()
        },
        restore: vec![Entry {
            undo: serde_json::json!({"move-back": {
                "ns": "container",
                "index": 3,
                "to": "host",
                "from-index": 7,
                "name": "eth9",
            }}),
            link: Some(1),
            master: None,
        }],
    });
    loc.store(&r).expect("store");
    assert_eq!(loc.load().expect("load"), Some(r.clone()));
    assert!(r.applies_to(42));
    assert!(!r.applies_to(43));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(loc.path())
        .expect("file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    r.borrowed.clear();
    loc.store(&r).expect("store empty");
    assert_eq!(loc.load().expect("load"), None);
    let left: Vec<_> = std::fs::read_dir(root.path().join("attachments"))
        .expect("attachments")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn hostile_names_stay_inside_their_directory() {
    let root = Path::new("/state");
    for (net, cid, ifname, plugin) in [
        ("../../etc", "c", "eth0", "p"),
        ("n", "..", "eth0", "p"),
        ("n", "c", "a/b", "p"),
        ("n", "c", "eth0", "../../../x"),
        ("n", ".hidden", "eth0", "p"),
    ] {
        let loc = Location::new(root, &attachment(net, cid, ifname), plugin);
        let p = loc.path();
        assert!(
            p.components()
                .all(|c| !matches!(c, std::path::Component::ParentDir)),
            "{p:?}"
        );
        assert!(p.starts_with("/state/attachments/"), "{p:?}");
        assert_eq!(p.components().count(), 7, "{p:?}");
    }
}

#[test]
fn a_corrupt_record_is_an_error_not_a_panic() {
    let root = tempfile::tempdir().expect("tempdir");
    let a = attachment("n", "c", "eth0");
    let loc = Location::new(root.path(), &a, "p");
    std::fs::create_dir_all(loc.path().parent().expect("dir")).expect("mkdir");
    for bad in ["", "{", "{\"version\": 1}", "[]", "\u{0}"] {
        std::fs::write(loc.path(), bad).expect("write");
        let e = loc.load().expect_err(bad);
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{bad:?}");
    }
}

/// Only the last step of an interrupted ADD, and only once it has
/// said where the kernel made its node link, stands for an unmarked
/// link: a name whose create the kernel refused, or that a kill cut
/// off before the index was read, does not.
#[test]
fn only_a_link_the_last_step_saw_made_may_be_unmarked() {
    let root = tempfile::tempdir().expect("tempdir");
    let a = attachment("n", "c", "eth0");
    let loc = Location::new(root.path(), &a, "p");
    let line = |name: &str, index: Option<u32>| {
        let mut l = Record::new(&a, "p", 7).expect("line");
        l.owned.links.push(OwnedLink {
            ns: Kind::Host,
            name: name.into(),
            kind: Some("veth".into()),
            intent: true,
            index,
            netns: 0,
            named_unmade: false,
        });
        l
    };
    let got = |interrupted: bool| {
        loc.load_as(interrupted)
            .expect("load")
            .expect("a record")
            .owned
            .links
            .into_iter()
            .map(|l| (l.name, l.intent, l.index))
            .collect::<Vec<_>>()
    };
    // Named, and never made (the kernel refused; a kill came first).
    loc.intend(&line("veth1", None)).expect("intend");
    assert_eq!(got(true), [("veth1".to_owned(), false, None)]);
    // Made at index 12.
    loc.intend(&line("veth1", Some(12))).expect("intend");
    assert_eq!(got(true), [("veth1".to_owned(), true, Some(12))]);
    assert_eq!(got(false), [("veth1".to_owned(), false, None)]);
    // A later step: the first was marked by a process still running.
    loc.intend(&line("veth2", None)).expect("intend");
    assert_eq!(
        got(true),
        [
            ("veth1".to_owned(), false, None),
            ("veth2".to_owned(), false, None)
        ]
    );
}

/// An intent log that cannot be read does not set aside the good
/// record beside it (nor does the record lose what the log names once
/// it reads again); an unreadable record is set aside, and its intent
/// log still read.
#[test]
fn an_unreadable_intent_log_leaves_its_record_in_place() {
    let root = tempfile::tempdir().expect("tempdir");
    let a = attachment("n", "c", "eth0");
    let loc = Location::new(root.path(), &a, "p");
    let mut r = Record::new(&a, "p", 7).expect("record");
    r.owned.links.push(OwnedLink {
        ns: Kind::Host,
        name: "veth1".into(),
        kind: Some("veth".into()),
        intent: false,
        netns: 0,
        index: None,
        named_unmade: false,
    });
    loc.store(&r).expect("store");
    // Not a file: reading it fails.
    std::fs::create_dir(loc.intent_path()).expect("mkdir");
    let got = loc.load_or_quarantine().expect("the record");
    assert_eq!(got.owned.links, r.owned.links);
    assert!(loc.path().is_file(), "the record was set aside");
    std::fs::remove_dir(loc.intent_path()).expect("rmdir");

    let mut line = Record::new(&a, "p", 7).expect("line");
    line.owned.links.push(OwnedLink {
        ns: Kind::Host,
        name: "veth2".into(),
        kind: Some("veth".into()),
        intent: true,
        netns: 0,
        index: None,
        named_unmade: false,
    });
    loc.intend(&line).expect("intend");
    std::fs::write(loc.path(), "{").expect("corrupt");
    let got = loc.load_or_quarantine().expect("the intent log");
    let names: Vec<&str> = got.owned.links.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["veth2"]);
    assert!(!loc.path().exists(), "the corrupt record stays in place");
    assert!(loc.intent_path().is_file());
}

//! The plugin entry point, like the reference Go `skel.PluginMainFuncs`.
//!
//! [`run`] reads and validates the `CNI_*` environment for the command,
//! reads the network config from stdin, refuses an unsupported
//! `cniVersion` (code 1), dispatches ADD / DEL / CHECK / VERSION / STATUS /
//! GC to the [`Plugin`], and prints the result in the config's version, or
//! a CNI error JSON, on stdout, exiting non-zero on error.
//!
//! [`dispatch`] is the same without the process around it, for tests.
//!
//! `CNI_ARGS` is never refused here: the Go skel does not read it at all,
//! and each reference plugin that wants arguments parses them itself
//! (`types.LoadArgs`), so a plugin that ignores them works with any.
//! [`Env::args`] holds the well-formed pairs; the malformed pieces are set
//! aside ([`CniArgs::parse_lenient`], [`CniArgs::malformed`]) for a plugin
//! that reads its arguments strictly ([`CniArgs::check_known`] refuses
//! them, code 4). DEL and GC also read the config leniently: a known
//! section that does not parse is left out ([`parse_conf`]); ADD, CHECK
//! and STATUS refuse it.
//!
//! [`CniArgs::parse_lenient`]: crate::cni::CniArgs::parse_lenient
//! [`CniArgs::malformed`]: crate::cni::CniArgs::malformed
//! [`CniArgs::check_known`]: crate::cni::CniArgs::check_known

use std::io::{Read, Write};

use crate::cni::version::{check_command_version, VersionInfo};
use crate::cni::{CniResult, Command, Env, Error, Interface, NetConf, LATEST};
use crate::net::{LinkInfo, Netns};

/// The largest config accepted on stdin.
const MAX_STDIN: u64 = 4 << 20;

/// A CNI plugin: one function per command. Only ADD is required; the
/// others have defaults, each saying what it claims and when it is right.
///
/// ```
/// use guest_sdk::cni::{CniResult, Error};
/// use guest_sdk::skel::{Invocation, Plugin};
///
/// /// Passes the previous plugin's result on, changing nothing: the
/// /// defaults of CHECK and DEL are honest for it.
/// struct PassOn;
///
/// impl Plugin for PassOn {
///     fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
///         inv.prev_result_required()
///     }
/// }
/// ```
pub trait Plugin {
    /// ADD: attach the container; return what was configured.
    fn add(&self, inv: &Invocation) -> Result<CniResult, Error>;

    /// CHECK: verify the attachment is as ADD left it.
    ///
    /// The spec says a plugin should return an error when something it
    /// created or changed (an interface, address or route listed in
    /// `prevResult`, a firewall rule, a rate limit, an IP reservation) is
    /// missing or in an invalid state. Only the plugin knows what that is,
    /// so the default verifies nothing of the container and claims only
    /// what holds for any plugin: the request is well-formed (the config
    /// was parsed before CHECK was called, and this parses the
    /// `prevResult`, if there is one, so a malformed one is an error). It
    /// is right only for a plugin whose ADD changes nothing that could
    /// drift (one that reports, or passes `prevResult` on). A plugin whose
    /// ADD changes something (the `wasmcni new` template's sets the
    /// interface's alias) overrides it to read that back and return an
    /// error when it differs.
    fn check(&self, inv: &Invocation) -> Result<(), Error> {
        inv.prev_result().map(drop)
    }

    /// DEL: detach; must succeed when there is nothing left to remove, and
    /// when called again.
    ///
    /// The default removes nothing and succeeds. It is right for a plugin
    /// that creates nothing of its own: its changes are attributes of
    /// objects another plugin made and deletes (the alias or MTU of the
    /// container interface go with the interface; a setting of the node's
    /// end of a veth goes with the veth), and its [attachment
    /// record](crate::state) the host removes when DEL succeeds. A plugin
    /// that creates links, addresses, routes, rules or firewall rules,
    /// reserves addresses (IPAM), or changes what outlives the
    /// attachment's interfaces (a setting of the node itself, an admin's
    /// link it moved or changed) overrides it to undo that.
    fn del(&self, _inv: &Invocation) -> Result<(), Error> {
        Ok(())
    }

    /// STATUS (spec 1.1): is the plugin ready to serve ADD? The default
    /// says ready.
    fn status(&self, _inv: &Invocation) -> Result<(), Error> {
        Ok(())
    }

    /// GC (spec 1.1): release everything not in `cni.dev/valid-attachments`.
    /// The default has nothing to collect.
    fn gc(&self, _inv: &Invocation) -> Result<(), Error> {
        Ok(())
    }
}

/// Everything one invocation carries.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The validated `CNI_*` environment.
    pub env: Env,
    /// The parsed network config.
    pub conf: NetConf,
    /// The raw config bytes, for plugin-specific parsing.
    pub stdin: Vec<u8>,
}

impl Invocation {
    /// The spec version to answer in.
    pub fn version(&self) -> &str {
        &self.conf.cni_version
    }

    /// `prevResult` in the canonical model, when chained.
    pub fn prev_result(&self) -> Result<Option<CniResult>, Error> {
        self.conf.prev_result()
    }

    /// `prevResult`, for a chained plugin, which needs one: code 7
    /// (`TYPE is a chained plugin: it needs a prevResult`, `TYPE` the
    /// config's `type`) when there is none, and the errors of
    /// [`prev_result`](Self::prev_result) when it is malformed.
    pub fn prev_result_required(&self) -> Result<CniResult, Error> {
        self.prev_result()?.ok_or_else(|| {
            Error::invalid_config(format!(
                "{} is a chained plugin: it needs a prevResult",
                self.conf.plugin_type
            ))
        })
    }

    /// The index in `prev.interfaces` of the container interface: the
    /// entry named `CNI_IFNAME` whose `sandbox` is `CNI_NETNS`, else one
    /// named `CNI_IFNAME` in another sandbox (a runtime may name one
    /// namespace by two paths, `/proc/PID/ns/net` and `/run/netns/X`, and
    /// a `prevResult` written by hand for `wasmcni try` names one of its
    /// own). `None` when `prev` lists neither: a node-side interface of the
    /// same name (no `sandbox`) is not one. Pure: no host call.
    pub fn container_entry(&self, prev: &CniResult) -> Option<usize> {
        let named = |i: &&Interface| i.name == self.env.ifname && !i.sandbox.is_empty();
        let ifaces = || prev.interfaces.iter().enumerate();
        ifaces()
            .find(|(_, i)| named(i) && i.sandbox == self.env.netns)
            .or_else(|| ifaces().find(|(_, i)| named(i)))
            .map(|(index, _)| index)
    }

    /// What a chained plugin works on: `prevResult`
    /// ([`prev_result_required`](Self::prev_result_required): code 7 when
    /// there is none, before any host call), its entry for the container
    /// interface ([`container_entry`](Self::container_entry)), the
    /// container's namespace, and the link `CNI_IFNAME` there. The link is
    /// looked up by `CNI_IFNAME` whether or not `prevResult` lists it, as
    /// the reference chained plugins (tuning, sbr, vrf) do; one that must
    /// be listed checks [`ContainerInterface::entry`].
    ///
    /// # Capabilities
    /// Looking the link up needs `read` in the container namespace
    /// (`container.read` in the plugin's policy entry).
    ///
    /// # Typical errors
    /// - code 7: no `prevResult`.
    /// - code 999: no link `CNI_IFNAME` in the container (the message says
    ///   to run the plugin after the one that creates it), or the policy
    ///   denies the lookup (`access denied by wasmcni policy`).
    #[cfg_attr(not(target_arch = "wasm32"), track_caller)]
    pub fn container_interface(&self) -> Result<ContainerInterface, Error> {
        let prev = self.prev_result_required()?;
        let entry = self.container_entry(&prev);
        let ns = Netns::container()?;
        let ifname = &self.env.ifname;
        let link = ns.link(ifname).map_err(|e| {
            let not_found = e.is_not_found();
            let mut err = Error::from(e);
            if not_found {
                err.msg = format!(
                    "{}: {} is a chained plugin: run it after the plugin that creates \
                     {ifname:?} in the container",
                    err.msg, self.conf.plugin_type
                );
            }
            err
        })?;
        Ok(ContainerInterface {
            prev,
            entry,
            ns,
            link,
        })
    }
}

/// A chained plugin's container interface, from
/// [`Invocation::container_interface`]: the link `CNI_IFNAME` in the
/// container's namespace, with the `prevResult` it came with.
///
/// # Capabilities
/// `ns` is a handle to the container namespace: by itself it grants
/// nothing; every call through it is checked against the plugin's policy.
#[derive(Debug)]
pub struct ContainerInterface {
    /// `prevResult`: what a chained ADD returns, changed or not.
    pub prev: CniResult,
    /// The container interface's index in `prev.interfaces`, `None` when
    /// `prevResult` does not list it ([`Invocation::container_entry`]).
    pub entry: Option<usize>,
    /// The container's namespace (`CNI_NETNS`).
    pub ns: Netns,
    /// The link `CNI_IFNAME` in `ns`, as it was when looked up.
    pub link: LinkInfo,
}

/// What a finished invocation prints and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Stdout.
    pub stdout: String,
    /// Exit code.
    pub code: i32,
}

fn fail(e: &Error, version: &str) -> Outcome {
    Outcome {
        stdout: e.to_json(version),
        code: 1,
    }
}

/// The cniVersion for an error before the config is parsed: the config's
/// own if readable, else the newest.
fn version_hint(stdin: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(stdin)
        .ok()
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(|s| s.as_str())
                .map(str::to_owned)
        })
        .filter(|v| crate::cni::version::is_supported(v))
        .unwrap_or_else(|| LATEST.to_owned())
}

/// Whether `command` reads its config leniently: DEL (which must not fail
/// for good on what no ADD could have used: a runtime retries it, and a
/// container's teardown waits on it) and GC (which keeps going whatever
/// it meets). A config whose known sections (`ipam`, `dns`, `args`,
/// `runtimeConfig`, `capabilities`, `prevResult`, `cniVersions`) are
/// malformed is read without them (see [`lenient_conf`]). What the Go
/// skel itself refuses still fails: not a JSON object, a bad `name`, an
/// unsupported `cniVersion`.
fn lenient(command: Command) -> bool {
    matches!(command, Command::Del | Command::Gc)
}

/// The network config on `stdin` as [`dispatch`] reads it for `command`:
/// [`NetConf::parse`], and for DEL and GC, when that fails, the
/// config without those of its known sections (`ipam`, `dns`, `args`,
/// `runtimeConfig`, `capabilities`, `prevResult`, `cniVersions`) that do
/// not parse, each tried on its own. A bad `name`, `type` or `cniVersion`
/// fails on every command (the Go skel refuses them too).
pub fn parse_conf(command: Command, stdin: &[u8]) -> Result<NetConf, Error> {
    match NetConf::parse(stdin) {
        Err(e) if lenient(command) => lenient_conf(stdin).ok_or(e),
        other => other,
    }
}

/// The sections of a config [`lenient_conf`] may leave out, as lower case.
const SECTIONS: [&str; 7] = [
    "cniversions",
    "capabilities",
    "ipam",
    "dns",
    "args",
    "runtimeconfig",
    "prevresult",
];

/// The config without those of its known sections that do not parse
/// (each tried on its own beside the rest of the config), or `None` when
/// the rest does not parse either (a bad `name`, `type` or `cniVersion`,
/// which the Go skel refuses on every command too).
fn lenient_conf(stdin: &[u8]) -> Option<NetConf> {
    let serde_json::Value::Object(map) = serde_json::from_slice(stdin).ok()? else {
        return None;
    };
    let is_section = |k: &str| SECTIONS.contains(&k.to_ascii_lowercase().as_str());
    let base: serde_json::Map<String, serde_json::Value> = map
        .iter()
        .filter(|(k, _)| !is_section(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let bare = NetConf::from_value(serde_json::Value::Object(base.clone())).ok()?;
    let mut kept = base.clone();
    for (k, v) in map.iter().filter(|(k, _)| is_section(k)) {
        let mut one = base.clone();
        one.insert(k.clone(), v.clone());
        if NetConf::from_value(serde_json::Value::Object(one)).is_ok() {
            kept.insert(k.clone(), v.clone());
        }
    }
    Some(NetConf::from_value(serde_json::Value::Object(kept)).unwrap_or(bare))
}

/// Runs one invocation against `plugin`, with the environment seen through
/// `lookup` and the config `stdin`.
pub fn dispatch<P: Plugin>(
    plugin: &P,
    lookup: impl Fn(&str) -> Option<String>,
    stdin: &[u8],
) -> Outcome {
    let env = match Env::from_lookup(lookup) {
        Ok(env) => env,
        Err(e) => return fail(&e, &version_hint(stdin)),
    };
    if env.command == Command::Version {
        return Outcome {
            stdout: VersionInfo::from_request(stdin).to_json(),
            code: 0,
        };
    }
    let conf = match parse_conf(env.command, stdin) {
        Ok(c) => c,
        Err(e) => return fail(&e, &version_hint(stdin)),
    };
    let version = conf.cni_version.clone();
    if let Err(e) = check_command_version(env.command, &version) {
        return fail(&e, &version);
    }
    let inv = Invocation {
        env,
        conf,
        stdin: stdin.to_vec(),
    };
    let done = |r: Result<(), Error>| match r {
        Ok(()) => Outcome {
            stdout: String::new(),
            code: 0,
        },
        Err(e) => fail(&e, &version),
    };
    match inv.env.command {
        Command::Add => match plugin.add(&inv).and_then(|r| r.to_json_string(&version)) {
            Ok(json) => Outcome {
                stdout: json,
                code: 0,
            },
            Err(e) => fail(&e, &version),
        },
        Command::Del => done(plugin.del(&inv)),
        Command::Check => done(plugin.check(&inv)),
        Command::Status => done(plugin.status(&inv)),
        Command::Gc => done(plugin.gc(&inv)),
        Command::Version => unreachable!("handled above"),
    }
}

/// The plugin's `main`: runs [`dispatch`] on the process's environment and
/// stdin, prints the outcome, and exits with its code. `about` is printed
/// to stderr when the plugin is run without `CNI_COMMAND` (as a person
/// would, by hand), like the Go skel.
pub fn run<P: Plugin>(plugin: P, about: &str) -> ! {
    let mut stdin = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_STDIN + 1)
        .read_to_end(&mut stdin);
    let outcome = match read {
        Err(e) => fail(
            &Error::io(format!("reading the network config from stdin: {e}")),
            LATEST,
        ),
        Ok(n) if n as u64 > MAX_STDIN => fail(
            &Error::invalid_config(format!(
                "the network config on stdin is larger than {MAX_STDIN} bytes"
            )),
            LATEST,
        ),
        Ok(_) => {
            if std::env::var_os("CNI_COMMAND").is_none() && !about.is_empty() {
                eprintln!("{about}");
            }
            dispatch(&plugin, |k| std::env::var(k).ok(), &stdin)
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(outcome.stdout.as_bytes());
    if !outcome.stdout.is_empty() && !outcome.stdout.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
    let _ = out.flush();
    std::process::exit(outcome.code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Succeeds at everything, keeping the last invocation.
    #[derive(Default)]
    struct Seen(RefCell<Option<Invocation>>);

    impl Plugin for Seen {
        fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
            *self.0.borrow_mut() = Some(inv.clone());
            Ok(CniResult::default())
        }
        fn check(&self, inv: &Invocation) -> Result<(), Error> {
            *self.0.borrow_mut() = Some(inv.clone());
            Ok(())
        }
        fn del(&self, inv: &Invocation) -> Result<(), Error> {
            *self.0.borrow_mut() = Some(inv.clone());
            Ok(())
        }
    }

    fn run<P: Plugin>(p: &P, command: &str, args: &str, conf: &serde_json::Value) -> Outcome {
        let env = [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args),
            ("CNI_PATH", "/opt/cni/bin"),
        ];
        let lookup = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
                .filter(|v| !v.is_empty())
        };
        dispatch(p, lookup, conf.to_string().as_bytes())
    }

    fn conf() -> serde_json::Value {
        serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "x"})
    }

    fn code(o: &Outcome) -> u64 {
        serde_json::from_str::<serde_json::Value>(&o.stdout)
            .ok()
            .and_then(|v| v["code"].as_u64())
            .unwrap_or(0)
    }

    #[test]
    fn cni_args_are_taken_as_they_come() {
        let p = Seen::default();
        for args in [";", "A", "A=1=2;B=2", "=v"] {
            for command in ["ADD", "CHECK", "DEL"] {
                let o = run(&p, command, args, &conf());
                assert_eq!(o.code, 0, "{command} {args:?}: {}", o.stdout);
            }
            // A plugin that checks them refuses them (code 4).
            let inv = p.0.borrow_mut().take().expect("called");
            assert_eq!(
                inv.env.args.check_known(&["A", "B"]).map_err(|e| e.code),
                Err(4),
                "{args:?}"
            );
        }
        run(&p, "DEL", "A=1;;IgnoreUnknown=1", &conf());
        let inv = p.0.borrow_mut().take().expect("called");
        assert_eq!(
            inv.env.args.iter().collect::<Vec<_>>(),
            [("A", "1"), ("IgnoreUnknown", "1")]
        );
        assert_eq!(inv.env.args.malformed(), [(1, String::new())]);
        // The rest of the environment is checked as before.
        let o = dispatch(
            &p,
            |k| match k {
                "CNI_COMMAND" => Some("DEL".into()),
                "CNI_ARGS" => Some(";".into()),
                _ => None,
            },
            conf().to_string().as_bytes(),
        );
        assert!(
            o.stdout
                .contains("required env variables [CNI_CONTAINERID,CNI_IFNAME,CNI_PATH] missing"),
            "{}",
            o.stdout
        );
    }

    /// Implements ADD only: CHECK and DEL (and STATUS, GC) are the defaults.
    struct AddOnly;

    impl Plugin for AddOnly {
        fn add(&self, inv: &Invocation) -> Result<CniResult, Error> {
            inv.prev_result_required()
        }
    }

    fn with_prev(prev: serde_json::Value) -> serde_json::Value {
        let mut c = conf();
        c["prevResult"] = prev;
        c
    }

    fn prev() -> serde_json::Value {
        serde_json::json!({"cniVersion": "1.0.0", "interfaces": [
            {"name": "eth0", "sandbox": "/run/netns/x"}]})
    }

    #[test]
    fn check_and_del_have_defaults() {
        for command in ["CHECK", "DEL"] {
            for c in [conf(), with_prev(prev())] {
                let o = run(&AddOnly, command, "", &c);
                assert_eq!((o.code, o.stdout.as_str()), (0, ""), "{command} {c}");
            }
        }
        // The default CHECK claims the request is well-formed: a malformed
        // prevResult is an error (DEL reads the config without it).
        let bad = with_prev(serde_json::json!({"cniVersion": "1.0.0", "interfaces": 7}));
        assert_ne!(code(&run(&AddOnly, "CHECK", "", &bad)), 0);
        assert_eq!(run(&AddOnly, "DEL", "", &bad).code, 0);
        // ADD passes prevResult on; without one it is code 7 naming the type.
        let o = run(&AddOnly, "ADD", "", &with_prev(prev()));
        assert_eq!(o.code, 0, "{}", o.stdout);
        let out: serde_json::Value = serde_json::from_str(&o.stdout).expect("a result");
        assert_eq!(out["interfaces"], prev()["interfaces"], "{out}");
        let o = run(&AddOnly, "ADD", "", &conf());
        assert_eq!(code(&o), 7, "{}", o.stdout);
        assert!(
            o.stdout
                .contains("x is a chained plugin: it needs a prevResult"),
            "{}",
            o.stdout
        );
    }

    /// An invocation of `command` for `CNI_NETNS=/run/netns/x`,
    /// `CNI_IFNAME=eth0`, with `conf`.
    fn invocation(command: &str, conf: &serde_json::Value) -> Invocation {
        let seen = Seen::default();
        let o = run(&seen, command, "", conf);
        assert_eq!(o.code, 0, "{}", o.stdout);
        let inv = seen.0.borrow_mut().take();
        inv.expect("called")
    }

    #[test]
    fn prev_result_required_is_code_7_naming_the_type() {
        let inv = invocation("CHECK", &conf());
        let e = inv.prev_result_required().unwrap_err();
        assert_eq!(e.code, 7);
        assert_eq!(e.msg, "x is a chained plugin: it needs a prevResult");
        let inv = invocation("CHECK", &with_prev(prev()));
        assert_eq!(
            inv.prev_result_required().unwrap().interfaces[0].name,
            "eth0"
        );
    }

    #[test]
    fn the_container_entry_is_cni_ifname_in_a_sandbox_cni_netns_first() {
        let inv = invocation("CHECK", &conf());
        let entry = |ifaces: serde_json::Value| {
            let p = serde_json::json!({"cniVersion": "1.0.0", "interfaces": ifaces});
            inv.container_entry(&CniResult::from_json(&p, "1.0.0").expect("result"))
        };
        let (host, here, other) = (
            serde_json::json!({"name": "eth0"}),
            serde_json::json!({"name": "eth0", "sandbox": "/run/netns/x"}),
            serde_json::json!({"name": "eth0", "sandbox": "/proc/7/ns/net"}),
        );
        let net1 = serde_json::json!({"name": "net1", "sandbox": "/run/netns/x"});
        assert_eq!(entry(serde_json::json!([host, net1, here])), Some(2));
        assert_eq!(entry(serde_json::json!([other, here])), Some(1));
        // Another path to the namespace, or a prevResult written by hand.
        assert_eq!(entry(serde_json::json!([host, other])), Some(1));
        // A node-side interface of that name is not the container's.
        assert_eq!(entry(serde_json::json!([host, net1])), None);
        assert_eq!(entry(serde_json::json!([])), None);
    }

    #[test]
    fn container_interface_wants_a_prev_result_before_any_host_call() {
        // Natively a host call panics: an error here proves none was made.
        let e = invocation("ADD", &conf())
            .container_interface()
            .unwrap_err();
        assert_eq!(e.code, 7, "{e:?}");
    }

    #[test]
    #[should_panic(expected = "`netns.container` is a call to the wasmcni host")]
    fn container_interface_then_asks_the_host() {
        let _ = invocation("ADD", &with_prev(prev())).container_interface();
    }

    #[test]
    fn del_reads_a_config_without_its_malformed_sections() {
        let p = Seen::default();
        let mut c = conf();
        c["args"] = serde_json::json!("x");
        c["runtimeConfig"] = serde_json::json!([1]);
        c["dns"] = serde_json::json!({"nameservers": "8.8.8.8"});
        c["ipam"] = serde_json::json!({"type": "host-local", "subnet": "10.1.0.0/24"});
        c["mtu"] = serde_json::json!("big");
        assert_eq!(code(&run(&p, "ADD", "", &c)), 7);
        assert_eq!(code(&run(&p, "STATUS", "", &c)), 7);
        let o = run(&p, "DEL", "", &c);
        assert_eq!(o.code, 0, "{}", o.stdout);
        let inv = p.0.borrow_mut().take().expect("called");
        assert_eq!(inv.conf.args, None);
        assert_eq!(inv.conf.runtime_config, None);
        assert_eq!(inv.conf.dns, None);
        // What parses stays, plugin keys too; stdin is as given.
        assert_eq!(
            inv.conf.ipam.as_ref().map(|i| i.plugin_type.as_str()),
            Some("host-local")
        );
        assert_eq!(inv.conf.extra["mtu"], "big");
        assert_eq!(inv.stdin, c.to_string().into_bytes());
        // What the Go skel refuses on every command still fails.
        for (k, v) in [
            ("name", serde_json::json!("bad name")),
            ("cniVersion", serde_json::json!("9.9.9")),
        ] {
            let mut bad = c.clone();
            bad[k] = v;
            assert_ne!(run(&p, "DEL", "", &bad).code, 0, "{k}");
        }
        let o = dispatch(
            &p,
            |k| match k {
                "CNI_COMMAND" => Some("DEL".into()),
                "CNI_CONTAINERID" => Some("c1".into()),
                "CNI_IFNAME" => Some("eth0".into()),
                "CNI_PATH" => Some("/x".into()),
                _ => None,
            },
            b"[1]",
        );
        assert_eq!(code(&o), 6);
    }
}

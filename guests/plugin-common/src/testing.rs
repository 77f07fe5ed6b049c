//! Invocations for the standard plugins' unit tests (native, no host).

use guest_sdk::cni::{CniArgs, Command, Env};
use guest_sdk::skel::Invocation;

/// An invocation of `command` for container `c1`, `eth0` in
/// `/run/netns/c1`, with `CNI_ARGS` `args` (read as the SDK reads them:
/// never refused) and the config `conf` as the SDK reads it for
/// `command` (`cniVersion`, `name` and `type` added when missing).
///
/// # Panics
/// When `conf` is not a valid network config.
pub fn invocation(command: Command, args: &str, conf: serde_json::Value) -> Invocation {
    let mut conf = conf;
    for (k, v) in [("cniVersion", "1.0.0"), ("name", "net1"), ("type", "test")] {
        if conf.get(k).is_none() {
            conf[k] = v.into();
        }
    }
    let stdin = conf.to_string().into_bytes();
    Invocation {
        env: Env {
            command,
            container_id: "c1".into(),
            netns: "/run/netns/c1".into(),
            ifname: "eth0".into(),
            args: CniArgs::parse_lenient(args),
            path: "/opt/cni/bin".into(),
        },
        conf: guest_sdk::skel::parse_conf(command, &stdin).expect("a valid network config"),
        stdin,
    }
}

/// What a command did natively, where every host call stops it (the SDK
/// panics there: no wasmcni host answers a native build).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reached {
    /// It got as far as this host call (`netns.container`,
    /// `delegate.run`, …): nothing before refused the config.
    HostCall(String),
    /// It returned before any host call, with this outcome.
    Returned(Result<(), guest_sdk::cni::Error>),
}

/// Runs `f` (a plugin's DEL, say) natively and tells how far it got: a
/// DEL that must not fail on a config reaches its first host call.
pub fn reach(f: impl FnOnce() -> Result<(), guest_sdk::cni::Error>) -> Reached {
    quiet_host_panics();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => Reached::Returned(r),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            match host_call(&msg) {
                Some(call) => Reached::HostCall(call.to_owned()),
                None => std::panic::resume_unwind(p),
            }
        }
    }
}

/// The host call a panic of the SDK's native stand-in names.
fn host_call(msg: &str) -> Option<&str> {
    msg.strip_prefix("guest-sdk: `")?.split('`').next()
}

/// Keeps the SDK's host-call panics, which [`reach`] expects, off stderr;
/// every other panic is reported as usual.
fn quiet_host_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if host_call(msg).is_none() {
                default(info);
            }
        }));
    });
}

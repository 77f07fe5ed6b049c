//! `wasmcni demo`: the embedded example, run in a throwaway sandbox.
//!
//! The demo process first moves itself into new network and mount
//! namespaces, so nothing it does can touch the machine's network. Inside,
//! it makes a "container" namespace and runs the loopback plugin through
//! the same path a runtime uses: it executes itself as `loopback` (multi-call)
//! with the CNI_* environment and the config on stdin.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};

use crate::netlink::{address_of, Netlink};
use crate::netns::NetNs;

const CONFIG: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "demo-net",
  "type": "loopback"
}"#;

/// Runs the demo.
pub fn run() -> anyhow::Result<()> {
    unshare(CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS).context(
        "entering a sandbox (new network and mount namespaces) needs root or CAP_SYS_ADMIN",
    )?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making mounts private in the sandbox")?;
    // Not under /tmp: the demo's policy file must sit in directories only
    // root can write (wasmcni refuses a policy others could replace).
    let base = Path::new("/run").join(format!("wasmcni-demo.{}", std::process::id()));
    fs::create_dir_all(&base)?;
    let result = mount(
        Some("tmpfs"),
        &base,
        Some("tmpfs"),
        MsFlags::empty(),
        Some("size=64m,mode=0700"),
    )
    .context("mounting a tmpfs for the sandbox")
    .and_then(|_| steps(&base));
    let _ = umount2(&base, MntFlags::MNT_DETACH);
    let _ = fs::remove_dir(&base);
    result
}

/// Creates a network namespace pinned at `path` (a bind mount, as
/// `ip netns add` does). Also the sandbox of `wasmcni try`.
pub(crate) fn make_netns(path: &Path) -> anyhow::Result<()> {
    fs::File::create(path)?;
    let p = path.to_owned();
    std::thread::spawn(move || -> anyhow::Result<()> {
        unshare(CloneFlags::CLONE_NEWNET)?;
        mount(
            Some("/proc/thread-self/ns/net"),
            &p,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )?;
        Ok(())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("netns thread panicked"))??;
    Ok(())
}

fn lo_state(ns: &Path) -> anyhow::Result<String> {
    let ns = NetNs::open_container(ns)?;
    let mut nl = Netlink::open(&ns)?;
    let lo = nl.link_by_name("lo")?;
    let up = lo
        .header
        .flags
        .contains(netlink_packet_route::link::LinkFlags::Up);
    let addrs: Vec<String> = nl
        .addresses(None)?
        .iter()
        .filter(|a| a.header.index == lo.header.index)
        .filter_map(|a| address_of(a).map(|ip| format!("{ip}/{}", a.header.prefix_len)))
        .collect();
    Ok(format!(
        "lo is {}{}",
        if up { "UP" } else { "DOWN" },
        if addrs.is_empty() {
            String::new()
        } else {
            format!(", addresses {}", addrs.join(" "))
        }
    ))
}

fn steps(base: &Path) -> anyhow::Result<()> {
    let netns = base.join("container-netns");
    make_netns(&netns)?;
    let cache = base.join("cache");
    let exe = std::env::current_exe()?;
    let bin = base.join("bin");
    fs::create_dir(&bin)?;
    let out = |s: String| {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{s}");
    };

    out("wasmcni demo: a throwaway sandbox (own network + mount namespaces); the machine's network is not touched.".into());
    out(format!(
        "container netns: {}  ({})",
        netns.display(),
        lo_state(&netns)?
    ));
    out(format!("network config:\n{CONFIG}\n"));

    let audit = base.join("audit.jsonl");
    let grant = crate::policy::Policy::embedded().entry("loopback");
    out(format!(
        "policy (embedded default) for loopback: container: {}; host: {}\n",
        grant.container,
        grant
            .host
            .as_ref()
            .map_or("nothing".to_owned(), |g| g.to_string())
    ));
    let run_with = |command: &str, policy: Option<&Path>| -> anyhow::Result<(i32, String, f64)> {
        let start = Instant::now();
        let mut cmd = Command::new(&exe);
        cmd.arg0(bin.join("loopback"))
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", "demo-container-1")
            .env("CNI_NETNS", &netns)
            .env("CNI_IFNAME", "lo")
            .env("CNI_PATH", &bin)
            .env("WASMCNI_CACHE_DIR", &cache)
            .env("WASMCNI_AUDIT", &audit);
        if let Some(p) = policy {
            cmd.env("WASMCNI_POLICY", p);
        }
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        child
            .stdin
            .take()
            .context("child stdin")?
            .write_all(CONFIG.as_bytes())?;
        let output = child.wait_with_output()?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        Ok((
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            ms,
        ))
    };
    let run = |command: &str| run_with(command, None);

    for (i, command) in ["ADD", "CHECK", "DEL", "DEL", "VERSION"].iter().enumerate() {
        let (code, stdout, ms) = run(command)?;
        let note = if i == 0 {
            " (first run: compiles the plugin and stores its artifact)"
        } else {
            " (precompiled artifact)"
        };
        out(format!(
            "$ CNI_COMMAND={command} loopback < config   -> exit {code}, {ms:.1} ms{note}"
        ));
        let shown = serde_json::from_str::<serde_json::Value>(&stdout)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| stdout.trim().to_owned());
        if !shown.is_empty() {
            out(indent(&shown));
        }
        if *command != "VERSION" {
            out(format!("  kernel: {}", lo_state(&netns)?));
        }
        if code != 0 {
            bail!("{command} failed with exit code {code}");
        }
        out(String::new());
    }
    // The same ADD under a policy that takes `modify` away: the host
    // refuses the call, the plugin reports it, nothing changes.
    let narrow = base.join("policy.json");
    fs::write(
        &narrow,
        r#"{"plugins": {"loopback": {"container": {"read": true}}}}"#,
    )?;
    fs::set_permissions(&narrow, fs::Permissions::from_mode(0o600))?;
    out("with a policy file granting loopback only `read` in the container:".into());
    let (code, stdout, ms) = run_with("ADD", Some(&narrow))?;
    out(format!(
        "$ WASMCNI_POLICY=policy.json CNI_COMMAND=ADD loopback < config   -> exit {code}, {ms:.1} ms"
    ));
    out(indent(stdout.trim()));
    out(format!("  kernel: {}", lo_state(&netns)?));
    if code == 0 {
        bail!("the narrowed policy did not stop ADD");
    }

    out("\naudit log (one JSON line per capability call; shown: command, call, outcome):".into());
    for line in fs::read_to_string(&audit)?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        let s = |k: &str| v[k].as_str().unwrap_or("").to_owned();
        let why = if s("outcome") == "denied" {
            format!(" ({})", s("reason"))
        } else {
            String::new()
        };
        out(format!(
            "  {:<6} {:<18} {}{why}",
            s("command"),
            s("call"),
            s("outcome")
        ));
    }
    bridge_network(base, &exe, &bin, &cache, &audit, &out)?;
    out(format!(
        "\ndone: loopback's ADD, CHECK, DEL, DEL and VERSION succeeded, the narrowed ADD was \
         refused, and two containers on a bridge + host-local network reached their gateway and \
         each other; artifacts, IPAM state and the audit log were kept in {} inside the sandbox \
         and are gone with it.",
        base.display()
    ));
    Ok(())
}

/// The network config of the bridge part ("@data": the IPAM data dir).
const BRIDGE_CONFIG: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "demo-bridge",
  "type": "bridge",
  "bridge": "cni-demo0",
  "isGateway": true,
  "ipam": {
    "type": "host-local",
    "subnet": "10.88.0.0/24",
    "routes": [{"dst": "0.0.0.0/0"}],
    "dataDir": "@data"
  }
}"#;

/// Part two: two containers on a bridge + host-local network, through the
/// same path a runtime uses (the bridge plugin delegates to host-local,
/// in-process), then a ping from each to its gateway and to the other.
fn bridge_network(
    base: &Path,
    exe: &Path,
    bin: &Path,
    cache: &Path,
    audit: &Path,
    out: &dyn Fn(String),
) -> anyhow::Result<()> {
    let data = base.join("ipam");
    let config = BRIDGE_CONFIG.replace(
        "\"@data\"",
        &serde_json::to_string(&data.display().to_string())?,
    );
    // host-local's embedded grant keeps state under /var/lib/cni/networks;
    // the demo keeps it in its sandbox.
    let policy = base.join("policy-ipam.json");
    fs::write(
        &policy,
        serde_json::json!({"plugins": {"host-local": {"ipam-roots": [data]}}}).to_string(),
    )?;
    fs::set_permissions(&policy, fs::Permissions::from_mode(0o600))?;
    out(format!(
        "\n--- a bridge network: two containers, bridge + host-local ---\nnetwork config:\n{config}\n"
    ));
    let ctrs = [base.join("ctr-a"), base.join("ctr-b")];
    for c in &ctrs {
        make_netns(c)?;
    }
    let run = |command: &str, i: usize| -> anyhow::Result<(i32, String, f64)> {
        let start = Instant::now();
        let mut child = Command::new(exe)
            .arg0(bin.join("bridge"))
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", format!("demo-ctr-{i}"))
            .env("CNI_NETNS", &ctrs[i])
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", bin)
            .env("WASMCNI_CACHE_DIR", cache)
            .env("WASMCNI_AUDIT", audit)
            .env("WASMCNI_POLICY", &policy)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("child stdin")?
            .write_all(config.as_bytes())?;
        let o = child.wait_with_output()?;
        Ok((
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            start.elapsed().as_secs_f64() * 1e3,
        ))
    };
    let mut addrs = Vec::new();
    for i in 0..2 {
        let (code, stdout, ms) = run("ADD", i)?;
        let note = if i == 0 {
            " (first run: compiles bridge and host-local, which runs inside the same process)"
        } else {
            ""
        };
        out(format!(
            "$ CNI_COMMAND=ADD CNI_CONTAINERID=demo-ctr-{i} bridge < config   -> exit {code}, {ms:.1} ms{note}"
        ));
        out(indent(stdout.trim()));
        if code != 0 {
            bail!("bridge ADD failed with exit code {code}");
        }
        let v: serde_json::Value = serde_json::from_str(&stdout)?;
        let a = v["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .context("no address in the result")?
            .to_owned();
        addrs.push(a);
    }
    let files: Vec<String> = fs::read_dir(data.join("demo-bridge"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out(format!(
        "IPAM state (host-local's layout): {}",
        files.join(" ")
    ));
    for (i, to) in [
        (0, "10.88.0.1"),
        (0, addrs[1].as_str()),
        (1, addrs[0].as_str()),
    ] {
        let ok = Command::new("nsenter")
            .arg(format!("--net={}", ctrs[i].display()))
            .args(["ping", "-c", "1", "-W", "2", to])
            .output()
            .context("running nsenter + ping (util-linux, iputils-ping)")?
            .status
            .success();
        out(format!(
            "ping from demo-ctr-{i} to {to}: {}",
            if ok { "ok" } else { "FAILED" }
        ));
        if !ok {
            bail!("demo-ctr-{i} cannot reach {to}");
        }
    }
    for i in 0..2 {
        let (code, _, ms) = run("DEL", i)?;
        out(format!(
            "$ CNI_COMMAND=DEL CNI_CONTAINERID=demo-ctr-{i} bridge < config   -> exit {code}, {ms:.1} ms"
        ));
        if code != 0 {
            bail!("bridge DEL failed with exit code {code}");
        }
    }
    let mut left: Vec<String> = fs::read_dir(data.join("demo-bridge"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    out(format!("IPAM state after the DELs: {}", left.join(" ")));
    Ok(())
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

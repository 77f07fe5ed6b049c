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
use nix::sched::{setns, CloneFlags};

use crate::sandbox::{self, make_netns};
use wasmcni_runtime::conflist::Conflist;
use wasmcni_runtime::netlink::{address_of, Netlink};
use wasmcni_runtime::netns::NetNs;

const CONFIG: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "demo-net",
  "type": "loopback"
}"#;

/// Runs the demo.
pub fn run() -> anyhow::Result<()> {
    sandbox::enter()?;
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
    if cfg!(debug_assertions) {
        // `make demo` runs the debug build (it builds in ~60% of the
        // release build's time): its milliseconds are not wasmcni's.
        out("(a debug build: the times below are several times a release build's; `make bench` measures the release build against the reference plugins)".into());
    }
    out(format!(
        "container netns: {}  ({})",
        netns.display(),
        lo_state(&netns)?
    ));
    out(format!("network config:\n{CONFIG}\n"));

    let audit = base.join("audit.jsonl");
    let grant = wasmcni_runtime::policy::Policy::embedded().entry("loopback");
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
            // Attachment records in the sandbox, never the machine's.
            .env("WASMCNI_STATE_DIR", cache.with_file_name("state"))
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

    use cni_spec::Command as Cni;
    let commands = [Cni::Add, Cni::Check, Cni::Del, Cni::Del, Cni::Version];
    for (i, command) in commands.into_iter().enumerate() {
        let (code, stdout, ms) = run(command.as_str())?;
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
        if command != Cni::Version {
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
    chain_network(base, &exe, &bin, &cache, &audit, &out)?;
    out(format!(
        "\ndone: loopback's ADD, CHECK, DEL, DEL and VERSION succeeded, the narrowed ADD was \
         refused, and two containers on the spec's bridge + tuning + portmap network reached \
         their gateway, each other and the published port, and left nothing behind; artifacts, IPAM state and the audit log were kept in {} inside the sandbox \
         and are gone with it.",
        base.display()
    ));
    Ok(())
}

/// Part two's network: the example conflist of the CNI spec (bridge +
/// tuning + portmap), as written there, with two additions: the IPAM
/// `dataDir` ("@data"), so the reservations stay in the sandbox, and
/// `isGateway` (the spec's example leaves the gateway address off the
/// bridge, and the node could not reach its containers).
const CHAIN_CONFIG: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "dbnet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "keyA": ["some more", "plugin specific", "configuration"],
      "ipam": {
        "type": "host-local",
        "subnet": "10.1.0.0/16",
        "gateway": "10.1.0.1",
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "@data"
      },
      "dns": {"nameservers": ["10.1.0.1"]}
    },
    {
      "type": "tuning",
      "capabilities": {"mac": true},
      "sysctl": {"net.core.somaxconn": "500"}
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}"#;

/// The node port mapped to container 0's port 80.
const HOST_PORT: u16 = 8080;

/// Runs `f` on a thread in the network namespace `ns`.
fn in_netns<T: Send + 'static>(
    ns: &Path,
    f: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    let file = fs::File::open(ns)?;
    std::thread::spawn(move || -> anyhow::Result<T> {
        setns(&file, CloneFlags::CLONE_NEWNET)?;
        Ok(f())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("netns thread panicked"))?
}

/// Connects to `to` and reads what the server says (at most 2 s each way).
fn probe(to: std::net::SocketAddr) -> Result<String, String> {
    use std::io::Read;
    let t = std::time::Duration::from_secs(2);
    let mut s = std::net::TcpStream::connect_timeout(&to, t).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(t)).map_err(|e| e.to_string())?;
    let mut got = String::new();
    s.read_to_string(&mut got).map_err(|e| e.to_string())?;
    Ok(got.trim().to_owned())
}

/// `net.core.somaxconn` in the namespace `ns` (/proc/sys/net is the
/// reading thread's namespace's).
fn somaxconn(ns: &Path) -> anyhow::Result<String> {
    Ok(
        in_netns(ns, || fs::read_to_string("/proc/sys/net/core/somaxconn"))??
            .trim()
            .to_owned(),
    )
}

/// The MAC of `ifname` in `ns`, through netlink.
fn mac_of(ns: &Path, ifname: &str) -> anyhow::Result<String> {
    let ns = NetNs::open_container(ns)?;
    let mut nl = Netlink::open(&ns)?;
    let link = nl.link_by_name(ifname)?;
    Ok(link
        .attributes
        .iter()
        .find_map(|a| match a {
            netlink_packet_route::link::LinkAttribute::Address(m) => Some(
                m.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
            ),
            _ => None,
        })
        .unwrap_or_default())
}

/// `nft ARGS` in the sandbox (Debian's nftables), its output's non-empty
/// lines, trimmed.
fn nft_lines(args: &[&str]) -> anyhow::Result<Vec<String>> {
    let o = Command::new("nft")
        .args(args)
        .output()
        .context("running nft (apt-get install nftables)")?;
    if !o.status.success() {
        bail!(
            "nft {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect())
}

/// Part two: the spec's example conflist (bridge + tuning + portmap) for
/// two containers, run the way a runtime runs a chain (libcni's rules:
/// each plugin gets the list's name and version, the previous result and
/// the capability arguments it declared); container 0 publishes port 80
/// as node port 8080 and gets its MAC from the runtime. Then pings, the
/// port mapping answering from the node, from localhost and from the
/// other container, and the DELs in reverse order, leaving nothing.
fn chain_network(
    base: &Path,
    exe: &Path,
    bin: &Path,
    cache: &Path,
    audit: &Path,
    out: &dyn Fn(String),
) -> anyhow::Result<()> {
    let data = base.join("ipam");
    let text = CHAIN_CONFIG.replace(
        "\"@data\"",
        &serde_json::to_string(&data.display().to_string())?,
    );
    let list = Conflist::parse(&serde_json::from_str(&text)?)?;
    // host-local's embedded grant keeps state under /var/lib/cni/networks;
    // the demo keeps it in its sandbox.
    let policy = base.join("policy-ipam.json");
    fs::write(
        &policy,
        serde_json::json!({"plugins": {"host-local": {"ipam-roots": [data]}}}).to_string(),
    )?;
    fs::set_permissions(&policy, fs::Permissions::from_mode(0o600))?;
    out(format!(
        "\n--- the spec's example network: bridge + tuning + portmap, two containers ---\n\
         network config (the spec's conflist, plus isGateway and the IPAM dataDir):\n{text}\n"
    ));
    let ctrs = [base.join("ctr-a"), base.join("ctr-b")];
    for c in &ctrs {
        make_netns(c)?;
    }
    // The sandbox is the node: its loopback up, as on a node, for
    // 127.0.0.1:8080.
    let mut node = Netlink::open(&NetNs::open_host()?)?;
    let lo = node.link_by_name("lo")?.header.index;
    node.set_link_up(lo, true)?;
    let macs = ["0a:58:0a:01:00:aa", "0a:58:0a:01:00:bb"];
    let cap_args = |i: usize| -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("mac".into(), macs[i].into());
        if i == 0 {
            m.insert(
                "portMappings".into(),
                serde_json::json!([{"hostPort": HOST_PORT, "containerPort": 80, "protocol": "tcp"}]),
            );
        }
        m
    };
    // One plugin call, as a runtime makes it: (exit code, stdout, ms).
    let call = |command: &str,
                i: usize,
                config: &serde_json::Map<String, serde_json::Value>|
     -> anyhow::Result<(i32, String, f64)> {
        let start = Instant::now();
        let ty = config.get("type").and_then(|t| t.as_str()).unwrap_or("");
        let mut child = Command::new(exe)
            .arg0(bin.join(ty))
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", format!("demo-ctr-{i}"))
            .env("CNI_NETNS", &ctrs[i])
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", bin)
            .env("WASMCNI_CACHE_DIR", cache)
            .env("WASMCNI_STATE_DIR", cache.with_file_name("state"))
            .env("WASMCNI_AUDIT", audit)
            .env("WASMCNI_POLICY", &policy)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("child stdin")?
            .write_all(serde_json::to_string(config)?.as_bytes())?;
        let o = child.wait_with_output()?;
        Ok((
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            start.elapsed().as_secs_f64() * 1e3,
        ))
    };
    let mut results = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..2 {
        let caps = cap_args(i);
        out(format!(
            "container demo-ctr-{i}: the runtime's capability arguments {}",
            serde_json::Value::Object(caps.clone())
        ));
        let mut prev: Option<serde_json::Value> = None;
        for p in 0..list.plugins.len() {
            let config = list.plugin_config(p, prev.as_ref(), &caps);
            let (code, stdout, ms) = call("ADD", i, &config)?;
            let note = match (i, p) {
                (0, 0) => " (first run: compiles bridge and host-local, which runs inside the same process)",
                (0, _) => " (first run: compiles the plugin)",
                _ => "",
            };
            out(format!(
                "$ CNI_COMMAND=ADD CNI_CONTAINERID=demo-ctr-{i} {} < config   -> exit {code}, {ms:.1} ms{note}",
                list.plugin_type(p)
            ));
            if code != 0 {
                out(indent(stdout.trim()));
                bail!("{} ADD failed with exit code {code}", list.plugin_type(p));
            }
            prev = Some(serde_json::from_str(&stdout)?);
        }
        let result = prev.context("the chain gave no result")?;
        if i == 0 {
            out("the chain's result (portmap's, the last plugin):".into());
            out(indent(&serde_json::to_string_pretty(&result)?));
        }
        let a = result["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .context("no address in the result")?
            .to_owned();
        out(format!(
            "  demo-ctr-{i}: address {a}, eth0 MAC {} (the runtime asked {}), net.core.somaxconn = {}",
            mac_of(&ctrs[i], "eth0")?,
            macs[i],
            somaxconn(&ctrs[i])?
        ));
        addrs.push(a);
        results.push(result);
    }
    let files: Vec<String> = fs::read_dir(data.join("dbnet"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out(format!(
        "IPAM state (host-local's layout): {}",
        files.join(" ")
    ));
    out(format!(
        "portmap's DNAT rules (nft list ruleset):\n{}",
        indent(
            &nft_lines(&["list", "ruleset"])?
                .into_iter()
                .filter(|l| l.contains("dnat"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    ));
    for (i, to) in [
        (0, "10.1.0.1"),
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
    // Container 0 serves port 80; the node reaches it through node port
    // 8080 (portmap's DNAT) at the bridge's address and at localhost, as
    // does the other container. (Container 0 itself would need the
    // bridge's `hairpinMode`, which the spec's example leaves off.)
    let listener = in_netns(&ctrs[0], || std::net::TcpListener::bind("0.0.0.0:80"))??;
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let mut s = s;
            let _ = writeln!(s, "hello from demo-ctr-0's port 80");
        }
    });
    let gw: std::net::SocketAddr = format!("10.1.0.1:{HOST_PORT}").parse()?;
    let local: std::net::SocketAddr = format!("127.0.0.1:{HOST_PORT}").parse()?;
    let probes = [
        ("the node", gw, probe(gw)),
        ("the node", local, probe(local)),
        ("demo-ctr-1", gw, in_netns(&ctrs[1], move || probe(gw))?),
    ];
    for (from, to, got) in probes {
        out(format!(
            "connect from {from} to {to} (node port {HOST_PORT}): {}",
            match &got {
                Ok(s) => format!("answered {s:?}"),
                Err(e) => format!("FAILED ({e})"),
            }
        ));
        if got.is_err() {
            bail!("the port mapping did not answer {from} at {to}");
        }
    }
    // DEL: the plugins in reverse order, each with the cached result.
    for (i, result) in results.iter().enumerate() {
        let caps = cap_args(i);
        for p in (0..list.plugins.len()).rev() {
            let config = list.plugin_config(p, Some(result), &caps);
            let (code, stdout, ms) = call("DEL", i, &config)?;
            out(format!(
                "$ CNI_COMMAND=DEL CNI_CONTAINERID=demo-ctr-{i} {} < config   -> exit {code}, {ms:.1} ms",
                list.plugin_type(p)
            ));
            if code != 0 {
                out(indent(stdout.trim()));
                bail!("{} DEL failed with exit code {code}", list.plugin_type(p));
            }
        }
    }
    let mut left: Vec<String> = fs::read_dir(data.join("dbnet"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    out(format!("IPAM state after the DELs: {}", left.join(" ")));
    let tables = nft_lines(&["list", "tables"])?;
    out(format!(
        "nftables tables after the DELs: {}",
        if tables.is_empty() {
            "none".to_owned()
        } else {
            tables.join(", ")
        }
    ));
    if !tables.is_empty() {
        bail!("the DELs left nftables tables behind");
    }
    Ok(())
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

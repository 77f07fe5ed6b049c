//! wasmcni as a netavark plugin (Podman 5 and later): `wasmcni create`,
//! `setup NETNS`, `teardown NETNS` and `info`, netavark's plugin API
//! (netavark's `plugin-API.md`: JSON on stdin, JSON on stdout, and
//! `{"error": "..."}` with a non-zero exit for a failure).
//!
//! A netavark network whose `driver` is `wasmcni` names a CNI conflist in
//! its `options`: `conflist` (a path) or `conflist-json` (the list
//! itself). `setup` runs the list's ADD as one `wasmcni-chain`
//! ([`crate::chain`]) — every member under its own policy entry, one
//! journal, one attachment record, the whole chain undone if any member
//! fails (netavark does not call `teardown` after a failed `setup`) — and
//! answers a status block made from the CNI result. `teardown` runs the
//! list's DEL with the result of the `setup` as `prevResult` (as libcni's
//! result cache gives it), then the host's record-driven cleanup, as the
//! chain runner's DEL always does; it completes wherever a CNI DEL would
//! (the namespace gone, the conflist removed since `setup`).
//!
//! netavark's inputs become the CNI invocation:
//! - `CNI_CONTAINERID` = `container_id`, `CNI_IFNAME` =
//!   `network_options.interface_name`, `CNI_NETNS` = the namespace
//!   argument;
//! - capability arguments, given to the members that declare them (as
//!   libcni does): `port_mappings` → `portMappings` (a `range` is that
//!   many consecutive ports, a `protocol` of `tcp,udp` is one mapping per
//!   protocol), `network_options.static_ips` → `ips` (Podman assigns the
//!   addresses of a network with subnets itself; host-local honours them),
//!   `network_options.static_mac` → `mac`, `network.network_dns_servers` →
//!   `dns.servers`.
//!
//! The result of a `setup` is kept in the run directory
//! (`<run dir>/netavark/`, a tmpfs: a reboot takes it with the
//! namespaces), for the `teardown`.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::chain;
use crate::cni_error::CniError;
use crate::conflist::Conflist;
use crate::policy::Policy;
use crate::runner::{self, Target};
use crate::session::{Output, MAX_STDIN};

/// The netavark plugin API version wasmcni speaks.
pub const API_VERSION: &str = "1.0.0";

/// The `driver` of a network netavark runs wasmcni for (the name of the
/// executable in netavark's plugin directory).
pub const DRIVER: &str = crate::plugins::SELF_NAME;

/// The network option naming the conflist's path.
pub const OPT_CONFLIST: &str = "conflist";

/// The network option holding the conflist itself.
pub const OPT_CONFLIST_JSON: &str = "conflist-json";

/// The largest conflist read.
const MAX_CONFLIST: u64 = 1 << 20;

/// One call of the plugin API.
#[derive(Debug, Clone)]
pub enum Call {
    /// Validate a network config (stdin) and print it.
    Create,
    /// Attach the container whose namespace is the path.
    Setup(String),
    /// Detach it.
    Teardown(String),
    /// Print the plugin's and the API's versions.
    Info,
}

/// Runs `call` with the process's stdin and stdout; returns the exit code.
pub fn main(call: Call) -> i32 {
    let mut stdin = Vec::new();
    let read = match call {
        Call::Info => Ok(0),
        _ => std::io::stdin()
            .lock()
            .take(MAX_STDIN as u64 + 1)
            .read_to_end(&mut stdin),
    };
    let outcome = match read {
        Err(e) => Err(format!("reading the plugin input from stdin: {e}")),
        Ok(_) if stdin.len() > MAX_STDIN => Err(format!(
            "the plugin input on stdin is larger than {MAX_STDIN} bytes"
        )),
        Ok(_) => run(&call, &stdin),
    };
    let mut out = std::io::stdout().lock();
    let code = match outcome {
        Ok(Some(v)) => {
            let _ = writeln!(out, "{v}");
            0
        }
        Ok(None) => 0,
        Err(msg) => {
            let _ = writeln!(out, "{}", json!({ "error": msg }));
            1
        }
    };
    let _ = out.flush();
    code
}

/// What `call` prints on success (`None`: nothing), or the error message.
pub fn run(call: &Call, stdin: &[u8]) -> Result<Option<Value>, String> {
    match call {
        Call::Info => Ok(Some(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "api_version": API_VERSION,
            "description": "runs CNI plugins compiled to WASI components (options: conflist=PATH or conflist-json=LIST)",
        }))),
        Call::Create => create(stdin).map(Some),
        Call::Setup(netns) | Call::Teardown(netns) if netns.is_empty() => {
            Err("the network namespace path argument is missing".to_owned())
        }
        Call::Setup(netns) => setup(netns, stdin).map(Some),
        Call::Teardown(netns) => teardown(netns, stdin).map(|()| None),
    }
}

/// The parts of netavark's `Network` wasmcni reads (the rest is kept as
/// given).
#[derive(Debug, Default, Deserialize)]
struct Network {
    name: String,
    #[serde(default)]
    options: Option<HashMap<String, String>>,
    #[serde(default)]
    subnets: Option<Vec<Subnet>>,
    #[serde(default)]
    network_dns_servers: Option<Vec<IpAddr>>,
}

#[derive(Debug, Deserialize)]
struct Subnet {
    subnet: String,
}

/// netavark's `NetworkPluginExec`: the input of `setup` and `teardown`.
#[derive(Debug, Deserialize)]
struct PluginExec {
    container_id: String,
    #[serde(default)]
    port_mappings: Option<Vec<PortMapping>>,
    network: Network,
    network_options: PerNetworkOptions,
}

#[derive(Debug, Deserialize)]
struct PerNetworkOptions {
    interface_name: String,
    #[serde(default)]
    static_ips: Option<Vec<IpAddr>>,
    #[serde(default)]
    static_mac: Option<String>,
}

#[derive(Debug, Deserialize)]
struct PortMapping {
    container_port: u16,
    #[serde(default)]
    host_ip: String,
    host_port: u16,
    #[serde(default)]
    protocol: String,
    #[serde(default)]
    range: u16,
}

/// `create`: the network, checked (its conflist is there, parses, and every
/// member is a plugin wasmcni can run under a policy entry that loads),
/// printed as given.
fn create(stdin: &[u8]) -> Result<Value, String> {
    let given: Value = parse(stdin, "the network config on stdin")?;
    let network: Network = serde_path_to_error::deserialize(&given)
        .map_err(|e| invalid("the network config on stdin", &e))?;
    let chain = Chain::of(&network)?;
    let policy = Policy::load(None).map_err(|e| format!("the policy does not load: {e}"))?;
    chain::check(&chain.config(&Map::new(), None), &policy)
        .map_err(|e| format!("{}: {}", chain.source, message(&e)))?;
    // Podman assigns the addresses of a network with subnets itself, and
    // passes them to every setup: a list none of whose plugins takes them
    // would give the container other addresses than Podman reports.
    if network.subnets.as_ref().is_some_and(|s| !s.is_empty()) && !chain.declares("ips") {
        let subnets: Vec<&str> = network
            .subnets
            .iter()
            .flatten()
            .map(|s| s.subnet.as_str())
            .collect();
        return Err(format!(
            "the network has subnets ({}), whose addresses Podman assigns and passes as \
             static IPs, but no plugin of {} declares the \"ips\" capability: add \
             \"capabilities\": {{\"ips\": true}} to the plugin that delegates to host-local \
             (and give host-local the same subnets), or create the network without --subnet",
            subnets.join(", "),
            chain.source
        ));
    }
    Ok(given)
}

/// `setup NETNS`: the list's ADD; the status block of its result.
fn setup(netns: &str, stdin: &[u8]) -> Result<Value, String> {
    let exec = parse_exec(stdin)?;
    let chain = Chain::of(&exec.network)?;
    let cap_args = capability_args(&exec, &chain, Strict::Yes)?;
    let config = chain.config(&cap_args, None);
    let ifname = &exec.network_options.interface_name;
    let result = invoke(&chain, "ADD", &exec.container_id, netns, ifname, &config)?;
    let result: Value = serde_json::from_slice(&result).map_err(|e| {
        format!(
            "{}: the chain's ADD printed a result that is not JSON: {e}",
            chain.source
        )
    })?;
    let block = match status_block(&result, ifname) {
        Ok(b) => b,
        Err(why) => {
            // netavark would fail the setup on a block it cannot read, and
            // call no teardown: take the ADD back first.
            let config = chain.config(&cap_args, Some(&result));
            let undone = invoke(&chain, "DEL", &exec.container_id, netns, ifname, &config);
            return Err(format!(
                "{}: the chain's result cannot be a netavark status block: {why}{}",
                chain.source,
                match undone {
                    Ok(_) => "; the ADD is undone".to_owned(),
                    Err(e) => format!("; undoing the ADD failed too: {e}"),
                }
            ));
        }
    };
    let cache = ResultCache::new(&exec.network.name, &exec.container_id, ifname);
    if let Err(e) = cache.store(&chain.list_value, &result) {
        // The ADD stands: its teardown runs DEL without prevResult, as
        // libcni's does when its cache is lost.
        log::warn!("keeping the setup's result for its teardown: {e}");
    }
    Ok(block)
}

/// `teardown NETNS`: the list's DEL, with the setup's result.
fn teardown(netns: &str, stdin: &[u8]) -> Result<(), String> {
    let exec = parse_exec(stdin)?;
    let ifname = &exec.network_options.interface_name;
    let cache = ResultCache::new(&exec.network.name, &exec.container_id, ifname);
    let kept = cache.load();
    // The conflist as it is now, as libcni's DEL reads it; if it is gone or
    // broken, the list the setup ran (kept with its result), so that the
    // DEL still completes.
    let setup_list = kept
        .as_ref()
        .and_then(|k| Chain::from_list(k.list.clone(), "the list of the setup").ok());
    let chain = match (Chain::of(&exec.network), setup_list) {
        // The list renamed since the setup: its attachment (IPAM pool,
        // records, rules) is under the setup's name.
        (Ok(now), Some(then)) if now.list.name != then.list.name => {
            log::warn!(
                "{} is now network {:?}, set up as {:?}: tearing down with the list of the setup",
                now.source,
                now.list.name,
                then.list.name
            );
            then
        }
        (Ok(now), _) => now,
        (Err(why), Some(then)) => {
            log::warn!("{why}; tearing down with the list of the setup");
            then
        }
        // Neither the list nor the setup's result (the conflist removed,
        // and a reboot took the run dir; libcni could not DEL either): the
        // host's record-driven DEL of the attachment, under the network its
        // record names, as for a chain whose members cannot run. It
        // releases what the record holds, and fails naming what only the
        // list's DEL could take back. Nothing recorded: nothing of
        // wasmcni's is left, and the DEL succeeds, as the CNI DEL of an
        // attachment that is not there does.
        (Err(why), None) => match recorded_network(&exec.container_id, ifname) {
            Some(name) => {
                log::warn!("{why}; tearing down what the records of network {name:?} hold");
                Chain {
                    source: format!("the records of network {name:?}"),
                    list: Conflist {
                        name,
                        cni_version: cni_spec::LATEST.to_owned(),
                        plugins: Vec::new(),
                    },
                    list_value: Value::Null,
                }
            }
            None => {
                log::warn!("{why}; no record of this attachment: nothing to tear down");
                cache.remove();
                return Ok(());
            }
        },
    };
    let prev = kept.map(|k| k.result);
    let cap_args = capability_args(&exec, &chain, Strict::No)?;
    let config = chain.config(&cap_args, prev.as_ref());
    invoke(&chain, "DEL", &exec.container_id, netns, ifname, &config)?;
    cache.remove();
    Ok(())
}

/// The network whose attachment records hold the chain's attachment
/// (`container_id`, `ifname`), if one does.
fn recorded_network(container_id: &str, ifname: &str) -> Option<String> {
    let root = crate::record::Location::root_from_env();
    crate::record::networks(&root).into_iter().find(|network| {
        let attachment = crate::attachment::Attachment {
            network: network.clone(),
            container_id: container_id.to_owned(),
            ifname: ifname.to_owned(),
            ..Default::default()
        };
        let at = crate::record::Location::new(&root, &attachment, chain::NAME);
        at.path().exists() || at.has_intent()
    })
}

fn parse_exec(stdin: &[u8]) -> Result<PluginExec, String> {
    parse(stdin, "the plugin input on stdin")
}

/// `stdin` as a `T`, or a message naming the field at fault.
fn parse<T: serde::de::DeserializeOwned>(stdin: &[u8], what: &str) -> Result<T, String> {
    let de = &mut serde_json::Deserializer::from_slice(stdin);
    serde_path_to_error::deserialize(de).map_err(|e| invalid(what, &e))
}

/// `what` is not valid, at the field `e` names.
fn invalid(what: &str, e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let at = e.path().to_string();
    if at == "." {
        format!("{what} is not valid: {}", e.inner())
    } else {
        format!("{what} is not valid: {at}: {}", e.inner())
    }
}

/// The conflist a network names, as one `wasmcni-chain`.
struct Chain {
    /// Where it came from, for messages.
    source: String,
    /// The list, its members the chain's (its `name` is the CNI network:
    /// IPAM pools and attachment records are kept under it).
    list: Conflist,
    /// The list as read.
    list_value: Value,
}

impl Chain {
    /// The conflist `network`'s options name.
    fn of(network: &Network) -> Result<Chain, String> {
        let opts = network.options.as_ref();
        let path = opts.and_then(|o| o.get(OPT_CONFLIST));
        let inline = opts.and_then(|o| o.get(OPT_CONFLIST_JSON));
        let (text, source) = match (path, inline) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "network {:?}: options {OPT_CONFLIST:?} and {OPT_CONFLIST_JSON:?} are both set; \
                     set one",
                    network.name
                ))
            }
            (Some(p), None) => {
                let p = PathBuf::from(p);
                if !p.is_absolute() {
                    return Err(format!(
                        "network {:?}: option {OPT_CONFLIST:?} ({}) is not an absolute path",
                        network.name,
                        p.display()
                    ));
                }
                (
                    crate::conflist::read_file(&p, MAX_CONFLIST)?,
                    format!("conflist {}", p.display()),
                )
            }
            (None, Some(j)) => (
                j.clone().into_bytes(),
                format!("network {:?}'s option {OPT_CONFLIST_JSON:?}", network.name),
            ),
            (None, None) => {
                return Err(format!(
                    "network {:?} names no CNI conflist: set option {OPT_CONFLIST:?} to its path \
                     (podman network create -d {DRIVER} -o {OPT_CONFLIST}=/etc/cni/net.d/NAME.conflist NAME)",
                    network.name
                ))
            }
        };
        let value: Value = serde_json::from_slice(&text)
            .map_err(|e| format!("{source} is not valid JSON: {e}"))?;
        Chain::from_list(value, &source)
    }

    /// A conflist's value as a chain; a list that is one `wasmcni-chain`
    /// already is its members.
    fn from_list(value: Value, source: &str) -> Result<Chain, String> {
        let mut list = Conflist::parse(&value).map_err(|e| format!("{source}: {e:#}"))?;
        if list.plugins.len() == 1 && list.plugin_type(0) == chain::NAME {
            let members = gojson::field(&list.plugins[0], "plugins")
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    format!(
                        "{source}: its {} entry has no \"plugins\" list",
                        chain::NAME
                    )
                })?;
            list.plugins = members
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    m.as_object().cloned().ok_or_else(|| {
                        format!("{source}: {} plugins[{i}] is not an object", chain::NAME)
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        Ok(Chain {
            source: source.to_owned(),
            list,
            list_value: value,
        })
    }

    /// Whether a member declares capability `cap`.
    fn declares(&self, cap: &str) -> bool {
        self.list.declares(cap)
    }

    /// The `wasmcni-chain` config for the runtime's capability arguments
    /// and `prevResult`.
    fn config(&self, cap_args: &Map<String, Value>, prev: Option<&Value>) -> Vec<u8> {
        let mut c = Map::new();
        c.insert("cniVersion".into(), self.list.cni_version.clone().into());
        c.insert("name".into(), self.list.name.clone().into());
        c.insert("type".into(), chain::NAME.into());
        c.insert(
            "plugins".into(),
            Value::Array(
                self.list
                    .plugins
                    .iter()
                    .cloned()
                    .map(Value::Object)
                    .collect(),
            ),
        );
        if !cap_args.is_empty() {
            c.insert("runtimeConfig".into(), Value::Object(cap_args.clone()));
        }
        if let Some(p) = prev {
            c.insert("prevResult".into(), p.clone());
        }
        serde_json::to_vec(&Value::Object(c)).unwrap_or_default()
    }
}

/// Whether [`capability_args`] refuses what it cannot pass (setup), or
/// passes what it can (teardown: a DEL completes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strict {
    Yes,
    No,
}

/// The capability arguments netavark's input gives.
fn capability_args(
    exec: &PluginExec,
    chain: &Chain,
    strict: Strict,
) -> Result<Map<String, Value>, String> {
    let mut args = Map::new();
    // What no plugin of the list would receive (libcni gives a capability
    // argument only to the plugins that declare it): refused at setup
    // rather than dropped, which would leave `podman run -p` without its
    // port or the container without its MAC, silently.
    let undeclared = |cap: &str, field: &str| -> Result<(), String> {
        if strict == Strict::No || chain.declares(cap) {
            return Ok(());
        }
        Err(format!(
            "{field}: no plugin of {} declares the {cap:?} capability, so nothing would apply \
             it; add \"capabilities\": {{\"{cap}\": true}} to the plugin that does (portmap \
             for port mappings, tuning for a MAC)",
            chain.source
        ))
    };
    match port_mappings(exec) {
        Ok(m) if m.is_empty() => {}
        Ok(m) => {
            undeclared("portMappings", "port_mappings")?;
            args.insert("portMappings".into(), Value::Array(m));
        }
        Err(e) if strict == Strict::Yes => return Err(e),
        Err(e) => log::warn!("{e}: tearing down without the port mappings"),
    }
    let opts = &exec.network_options;
    if let Some(ips) = opts.static_ips.as_ref().filter(|v| !v.is_empty()) {
        if chain.declares("ips") {
            args.insert(
                "ips".into(),
                Value::Array(ips.iter().map(|ip| ip.to_string().into()).collect()),
            );
        } else if strict == Strict::Yes {
            return Err(format!(
                "network_options.static_ips ({}): no plugin of {} declares the \"ips\" \
                 capability, so the container would get other addresses; add \
                 \"capabilities\": {{\"ips\": true}} to the plugin that delegates to host-local",
                ips.iter()
                    .map(IpAddr::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                chain.source
            ));
        }
    }
    if let Some(mac) = opts.static_mac.as_ref().filter(|m| !m.is_empty()) {
        undeclared("mac", "network_options.static_mac")?;
        args.insert("mac".into(), mac.clone().into());
    }
    if let Some(servers) = exec
        .network
        .network_dns_servers
        .as_ref()
        .filter(|v| !v.is_empty())
    {
        let servers: Vec<Value> = servers.iter().map(|s| s.to_string().into()).collect();
        args.insert("dns".into(), json!({ "servers": servers }));
    }
    Ok(args)
}

/// netavark's port mappings as CNI's `portMappings` (one per port and
/// protocol), at most as many as the firewall capability installs in one
/// call.
fn port_mappings(exec: &PluginExec) -> Result<Vec<Value>, String> {
    let max = crate::caps::firewall::MAX_MAPPINGS;
    let mut mappings = Vec::new();
    for (i, m) in exec.port_mappings.iter().flatten().enumerate() {
        let field = format!("port_mappings[{i}]");
        let range = u32::from(m.range.max(1));
        if u32::from(m.host_port) + range - 1 > 65535
            || u32::from(m.container_port) + range - 1 > 65535
        {
            return Err(format!(
                "{field}: ports {}/{} with range {} pass 65535",
                m.host_port, m.container_port, m.range
            ));
        }
        let protocols: Vec<&str> = if m.protocol.is_empty() {
            vec!["tcp"]
        } else {
            m.protocol.split(',').map(str::trim).collect()
        };
        for proto in protocols {
            if !matches!(proto, "tcp" | "udp" | "sctp") {
                return Err(format!(
                    "{field}.protocol: {proto:?} is not tcp, udp or sctp"
                ));
            }
            if mappings.len() + range as usize > max {
                return Err(format!(
                    "{field}: the port mappings come to more than {max} ports (each port of \
                     a range, once per protocol), more than wasmcni maps for one container"
                ));
            }
            for k in 0..range {
                let mut pm = Map::new();
                pm.insert("hostPort".into(), (u32::from(m.host_port) + k).into());
                pm.insert(
                    "containerPort".into(),
                    (u32::from(m.container_port) + k).into(),
                );
                pm.insert("protocol".into(), proto.into());
                if !m.host_ip.is_empty() {
                    pm.insert("hostIP".into(), m.host_ip.clone().into());
                }
                mappings.push(Value::Object(pm));
            }
        }
    }
    Ok(mappings)
}

/// Runs the chain for `command`, as a runtime executing `wasmcni-chain`
/// would; its result (ADD) or nothing, or the error message.
fn invoke(
    chain: &Chain,
    command: &str,
    container_id: &str,
    netns: &str,
    ifname: &str,
    config: &[u8],
) -> Result<Vec<u8>, String> {
    // CNI_PATH: the directory netavark found wasmcni in (its plugin
    // directory, which `wasmcni install` made a CNI bin dir), where a
    // native delegate would be looked for.
    let cni_path = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.as_os_str().to_owned()))
        .unwrap_or_else(|| OsString::from("/opt/cni/bin"));
    let mut vars: Vec<(OsString, OsString)> = [
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", container_id),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", ifname),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    vars.push(("CNI_PATH".into(), cni_path));
    match runner::invoke(Target::Name(chain::NAME), config, vars.into_iter(), None) {
        Ok(Output { stdout, code: 0 }) => Ok(stdout),
        Ok(Output { stdout, code }) => Err(format!(
            "{}: {command} failed: {}",
            chain.source,
            printed_error(&stdout).unwrap_or_else(|| format!(
                "exit code {code}: {}",
                String::from_utf8_lossy(&stdout).trim()
            ))
        )),
        Err(e) => Err(format!(
            "{}: {command} failed: {}",
            chain.source,
            message(&e)
        )),
    }
}

/// A CNI error's message and details, with its code.
fn message(e: &CniError) -> String {
    if e.details.is_empty() {
        format!("{} (CNI error {})", e.msg, e.code as u32)
    } else {
        format!("{}: {} (CNI error {})", e.msg, e.details, e.code as u32)
    }
}

/// The message of a CNI error a plugin printed.
fn printed_error(stdout: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(stdout).ok()?;
    let msg = v.get("msg").and_then(Value::as_str)?;
    let code = v.get("code").and_then(Value::as_u64).unwrap_or(0);
    Some(match v.get("details").and_then(Value::as_str) {
        Some(d) if !d.is_empty() => format!("{msg}: {d} (CNI error {code})"),
        _ => format!("{msg} (CNI error {code})"),
    })
}

/// netavark's status block for a CNI result: the container's interface
/// `ifname`, its MAC and its addresses with their gateways, and the DNS
/// servers and search domains; an error if the result holds what netavark
/// could not read (it would fail the setup).
fn status_block(result: &Value, ifname: &str) -> Result<Value, String> {
    let interfaces = result
        .get("interfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // The container's interface of that name (a result lists the host's
    // side of a veth and the bridge too).
    let index = interfaces.iter().position(|i| {
        i.get("name").and_then(Value::as_str) == Some(ifname)
            && i.get("sandbox")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
    });
    let mac = index
        .and_then(|k| interfaces[k].get("mac"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut subnets = Vec::new();
    let mut subnet = |address: &Value, gateway: Option<&Value>, at: &str| -> Result<(), String> {
        let ipnet: ipnet::IpNet = address
            .as_str()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("{at}.address {address} is not an address with a prefix"))?;
        let mut s = Map::new();
        s.insert("ipnet".into(), ipnet.to_string().into());
        if let Some(gw) = gateway.filter(|g| !g.is_null()) {
            let gw: IpAddr = gw
                .as_str()
                .and_then(|g| g.parse().ok())
                .ok_or_else(|| format!("{at}.gateway {gw} is not an IP address"))?;
            s.insert("gateway".into(), gw.to_string().into());
        }
        subnets.push(Value::Object(s));
        Ok(())
    };
    for (k, ip) in result
        .get("ips")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        // An address of another interface is not this one's.
        let of = ip.get("interface").and_then(Value::as_u64);
        if of.is_some() && of != index.map(|k| k as u64) {
            continue;
        }
        let address = ip.get("address").unwrap_or(&Value::Null);
        subnet(address, ip.get("gateway"), &format!("ips[{k}]"))?;
    }
    // Results of spec 0.1/0.2: ip4 and ip6.
    for key in ["ip4", "ip6"] {
        if let Some(ip) = result.get(key) {
            let address = ip.get("ip").unwrap_or(&Value::Null);
            subnet(address, ip.get("gateway"), key)?;
        }
    }
    let dns = result.get("dns");
    let list = |k: &str| -> Vec<Value> {
        dns.and_then(|d| d.get(k))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let servers: Vec<Value> = list("nameservers")
        .into_iter()
        .filter(|s| s.as_str().is_some_and(|s| s.parse::<IpAddr>().is_ok()))
        .collect();
    let search: Vec<Value> = list("search")
        .into_iter()
        .filter(Value::is_string)
        .collect();
    let mut block = BTreeMap::new();
    block.insert("dns_search_domains", Value::Array(search));
    block.insert("dns_server_ips", Value::Array(servers));
    block.insert(
        "interfaces",
        json!({ ifname: { "mac_address": mac, "subnets": subnets } }),
    );
    Ok(json!(block))
}

/// The run directory's subdirectory of kept results (0700).
const DIR: &str = "netavark";

/// The result of a setup, kept for its teardown: `<run dir>/netavark/`,
/// one file per attachment.
struct ResultCache {
    root: PathBuf,
    file: String,
}

/// What the cache keeps.
struct Kept {
    /// The conflist the setup ran.
    list: Value,
    /// Its ADD's result.
    result: Value,
}

impl ResultCache {
    fn new(network: &str, container_id: &str, ifname: &str) -> ResultCache {
        let root = crate::netlock::run_dir();
        // A digest of the three (always: a newline is no plain name).
        let file = crate::state_fs::component(&format!("{network}\n{container_id}\n{ifname}"));
        ResultCache {
            root,
            file: format!("{}.json", file.trim_start_matches('#')),
        }
    }

    fn store(&self, list: &Value, result: &Value) -> std::io::Result<()> {
        let text = serde_json::to_vec(&json!({"list": list, "result": result}))?;
        crate::state_fs::write_atomic(&self.root, Path::new(DIR), &self.file, &text)
    }

    fn load(&self) -> Option<Kept> {
        let text = crate::state_fs::read_bounded(
            &self.root,
            &Path::new(DIR).join(&self.file),
            MAX_CONFLIST * 2,
        )
        .ok()
        .flatten()?;
        let v: Value = serde_json::from_slice(&text).ok()?;
        Some(Kept {
            list: v.get("list")?.clone(),
            result: v.get("result")?.clone(),
        })
    }

    fn remove(&self) {
        let path = self.root.join(DIR).join(&self.file);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                log::warn!("removing {}: {e}", path.display())
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(v: Value) -> PluginExec {
        serde_json::from_value(v).expect("exec")
    }

    fn chain(plugins: Value) -> Chain {
        Chain::from_list(
            json!({"cniVersion": "1.0.0", "name": "n", "plugins": plugins}),
            "test",
        )
        .expect("chain")
    }

    #[test]
    fn port_mappings_expand_ranges_and_protocols() {
        let e = exec(json!({
            "container_id": "c", "container_name": "x",
            "port_mappings": [
                {"container_port": 80, "host_ip": "", "host_port": 8080, "protocol": "tcp,udp", "range": 2},
                {"container_port": 53, "host_ip": "127.0.0.1", "host_port": 5353, "protocol": "udp", "range": 0}],
            "network": {"name": "n", "driver": "wasmcni", "id": "i", "unknown": 1},
            "network_options": {"interface_name": "eth0"}}));
        let with_portmap = chain(json!([{"type": "bridge"},
            {"type": "portmap", "capabilities": {"portMappings": true}}]));
        let args = capability_args(&e, &with_portmap, Strict::Yes).unwrap();
        let pm = args["portMappings"].as_array().unwrap();
        assert_eq!(pm.len(), 5);
        assert_eq!(
            pm[0],
            json!({"hostPort": 8080, "containerPort": 80, "protocol": "tcp"})
        );
        assert_eq!(
            pm[3],
            json!({"hostPort": 8081, "containerPort": 81, "protocol": "udp"})
        );
        assert_eq!(
            pm[4],
            json!({"hostPort": 5353, "containerPort": 53, "protocol": "udp", "hostIP": "127.0.0.1"})
        );
        // No plugin takes them: refused at setup (podman's -p would do
        // nothing), passed over at teardown.
        let bare = chain(json!([{"type": "bridge"}]));
        let err = capability_args(&e, &bare, Strict::Yes).unwrap_err();
        assert!(
            err.contains("port_mappings: no plugin of test declares the \"portMappings\""),
            "{err}"
        );
        assert!(capability_args(&e, &bare, Strict::No).is_ok());
    }

    #[test]
    fn bad_port_mappings_name_the_field() {
        for (pm, want) in [
            (
                json!({"container_port": 80, "host_port": 65535, "protocol": "tcp", "range": 2}),
                "port_mappings[0]: ports 65535/80 with range 2",
            ),
            (
                json!({"container_port": 80, "host_port": 80, "protocol": "icmp", "range": 1}),
                "port_mappings[0].protocol: \"icmp\"",
            ),
            (
                json!({"container_port": 8000, "host_port": 8000, "protocol": "tcp,udp", "range": 129}),
                "port_mappings[0]: the port mappings come to more than 256 ports",
            ),
        ] {
            let e = exec(json!({
                "container_id": "c", "port_mappings": [pm],
                "network": {"name": "n"}, "network_options": {"interface_name": "eth0"}}));
            let c = chain(json!([{"type": "portmap", "capabilities": {"portMappings": true}}]));
            let err = capability_args(&e, &c, Strict::Yes).unwrap_err();
            assert!(err.contains(want), "{err} lacks {want}");
        }
    }

    #[test]
    fn static_ips_need_a_plugin_that_takes_them() {
        let e = exec(json!({
            "container_id": "c",
            "network": {"name": "n", "network_dns_servers": ["10.0.0.53"]},
            "network_options": {"interface_name": "eth0", "static_ips": ["10.88.0.50"],
                                "static_mac": "aa:bb:cc:dd:ee:ff"}}));
        let err =
            capability_args(&e, &chain(json!([{"type": "bridge"}])), Strict::Yes).unwrap_err();
        assert!(
            err.contains("network_options.static_ips (10.88.0.50)"),
            "{err}"
        );
        let err = capability_args(
            &e,
            &chain(json!([{"type": "bridge", "capabilities": {"ips": true}}])),
            Strict::Yes,
        )
        .unwrap_err();
        assert!(
            err.contains("network_options.static_mac: no plugin"),
            "{err}"
        );
        let args = capability_args(
            &e,
            &chain(json!([{"type": "bridge", "capabilities": {"ips": true}},
                          {"type": "tuning", "capabilities": {"mac": true}}])),
            Strict::Yes,
        )
        .unwrap();
        assert_eq!(args["ips"], json!(["10.88.0.50"]));
        assert_eq!(args["mac"], "aa:bb:cc:dd:ee:ff");
        assert_eq!(args["dns"], json!({"servers": ["10.0.0.53"]}));
    }

    #[test]
    fn a_wasmcni_chain_list_is_its_members() {
        let c = Chain::from_list(
            json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
                {"type": "wasmcni-chain", "plugins": [{"type": "bridge"}, {"type": "portmap"}]}]}),
            "test",
        )
        .unwrap();
        assert_eq!(c.list.plugins.len(), 2);
        let conf: Value = serde_json::from_slice(&c.config(&Map::new(), None)).unwrap();
        assert_eq!(conf["type"], "wasmcni-chain");
        assert_eq!(conf["plugins"][1]["type"], "portmap");
        assert!(conf.get("runtimeConfig").is_none());
    }

    #[test]
    fn options_name_one_conflist() {
        let net = |opts: Value| -> Network {
            serde_json::from_value(json!({"name": "n", "options": opts})).unwrap()
        };
        let err = |opts: Value| Chain::of(&net(opts)).err().unwrap();
        assert!(err(json!({})).contains("set option \"conflist\""));
        assert!(err(json!({"conflist": "rel.conflist"})).contains("not an absolute path"));
        assert!(err(json!({"conflist": "/x", "conflist-json": "{}"})).contains("both set"));
        assert!(err(json!({"conflist": "/nonexistent/x.conflist"}))
            .contains("conflist /nonexistent/x.conflist"));
        assert!(err(json!({"conflist-json": "{"})).contains("not valid JSON"));
        let c = Chain::of(&net(json!({"conflist-json":
            r#"{"cniVersion":"0.4.0","name":"cni","plugins":[{"type":"loopback"}]}"#})))
        .unwrap();
        assert_eq!(c.list.name, "cni");
    }

    #[test]
    fn the_status_block_is_the_container_interface() {
        let result = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "br0", "mac": "00:00:00:00:00:01"},
                {"name": "veth1", "mac": "00:00:00:00:00:02"},
                {"name": "eth0", "mac": "0a:00:00:00:00:03", "sandbox": "/run/netns/x"}],
            "ips": [
                {"address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 2},
                {"address": "10.99.0.1/16", "interface": 0},
                {"address": "fd00::5/64"}],
            "dns": {"nameservers": ["10.88.0.1", "bogus"], "search": ["example.org"]}});
        assert_eq!(
            status_block(&result, "eth0").expect("a block"),
            json!({
                "dns_search_domains": ["example.org"],
                "dns_server_ips": ["10.88.0.1"],
                "interfaces": {"eth0": {"mac_address": "0a:00:00:00:00:03", "subnets": [
                    {"ipnet": "10.88.0.5/16", "gateway": "10.88.0.1"},
                    {"ipnet": "fd00::5/64"}]}}})
        );
        // What netavark could not read fails the setup (which undoes it).
        for (bad, want) in [
            (
                json!({"ips": [{"address": "10.0.0.5"}]}),
                "ips[0].address \"10.0.0.5\"",
            ),
            (
                json!({"ips": [{"address": "10.0.0.5/24", "gateway": "x"}]}),
                "ips[0].gateway \"x\"",
            ),
        ] {
            let err = status_block(&bad, "eth0").unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }
}

#!/usr/bin/python3
"""A small CRI client: starts Debian's containerd (1.6, its CRI plugin) and
drives it over the CRI API (runtime.v1, gRPC on containerd's socket) the
way the kubelet does, with CNI served by an installed wasmcni bin dir or
by Debian's reference plugins. Run by tests/cri/sandbox.sh inside the
test's own network and mount namespaces; never run it on a node as is.

    cri.py WORK GEN cases reference|wasmcni
    cri.py WORK GEN bench RUNS
    cri.py WORK GEN soak SEED SECONDS

`cases` prints, per case, one line `result {json}` with what it observed
(tests/cri.rs judges it): {"side", "case", "ms", "error"?, ...facts}.
Cases:
  hostport   a pod with a hostPort and bandwidth annotations, and an app
             container (busybox httpd) serving the container port: the
             port answers at the node-side address of the pod network, the
             tbf qdiscs are there; nothing left after Stop/Remove;
  sequential 20 pods in a row (Run, Stop, Remove), nothing left after each;
  parallel   8 pods at once, then their Stop/Remove at once;
  fail-plain, fail-hostport
             RunPodSandbox with the runtime handler `failing`, whose CNI
             conf dir holds the same chain ending in a tuning entry with a
             sysctl that does not exist: the call fails, and after
             containerd's own cleanup nothing is left;
  restart    a pod made, containerd killed (SIGKILL) and started again on
             the same root, then the pod's Stop/Remove.
`bench` prints `bench {json}` lines: RunPodSandbox, StopPodSandbox and
RemovePodSandbox times of RUNS pods on each side, the sides taking turns
(two containerds in this sandbox); WASMCNI_BENCH_CRI_HOSTPORT=1: pods with
a hostPort and bandwidth annotations.
`soak` (tests/cri/soak.py) drives the wasmcni side with a seeded random
mix of pods and faults for SECONDS and prints `soak {json}`.
"""

import concurrent.futures
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
import uuid

WORK, GEN, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, GEN)

import grpc  # noqa: E402  (Debian's python3-grpcio)
import cri_pb2 as pb  # noqa: E402  (compiled from tests/cri/cri.proto)
import cri_pb2_grpc as pbg  # noqa: E402

IMAGE = "localhost/wasmcni-cri-busybox:1"
HOST_PORT = 18080
# Every pod's cgroups go under this parent (the kubelet always gives one),
# removed at the end: the cgroup hierarchies are the node's.
CGROUP_PARENT = f"/wasmcni-cri-{os.getpid()}"
CALL_TIMEOUT = 120
# Bandwidth annotations (the kubelet passes a pod's annotations as they
# are; containerd turns these into the `bandwidth` capability argument).
INGRESS, EGRESS = "10M", "20M"


def log(*a):
    print(*a, flush=True)


def run(*cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.returncode} {p.stderr.strip()}")
    return p.stdout


# ---------------------------------------------------------------- the image


def build_image(path):
    """A docker-archive image of busybox-static: its sandbox (pause)
    process sleeps; an app container can run busybox httpd on /www."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        def add_dir(name):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            t.addfile(ti)

        def add_file(name, data, mode=0o644):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), mode
            t.addfile(ti, io.BytesIO(data))

        for d in ["bin", "etc", "tmp", "www", "proc", "sys", "dev"]:
            add_dir(d)
        with open("/bin/busybox", "rb") as f:
            add_file("bin/busybox", f.read(), 0o755)
        for applet in ["sh", "sleep", "httpd", "nc", "ip", "cat"]:
            ti = tarfile.TarInfo(f"bin/{applet}")
            ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, "busybox", 0o777
            t.addfile(ti)
        add_file("etc/passwd", b"root:x:0:0:root:/:/bin/sh\n")
        add_file("etc/group", b"root:x:0:\n")
        add_file("www/index.html", b"served-by-the-pod\n")
    layer = layer.getvalue()
    diff_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/bin/sleep"], "Cmd": ["2147483647"], "WorkingDir": "/",
                   "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": "tests/cri/cri.py: busybox-static"}],
    }).encode()
    config_id = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{
        "Config": f"{config_id}.json",
        "RepoTags": [IMAGE],
        "Layers": [f"{diff_id}/layer.tar"],
    }]).encode()
    with tarfile.open(path, mode="w") as t:
        for name, data in [(f"{diff_id}/layer.tar", layer), (f"{config_id}.json", config),
                           ("manifest.json", manifest)]:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            t.addfile(ti, io.BytesIO(data))


# ------------------------------------------------------------- containerd


def conflist(name, bridge, subnet, failing):
    """What the brief's node runs: bridge (isGateway, ipMasq) + host-local
    + portmap + bandwidth + tuning; `failing`: tuning sets a sysctl that
    does not exist, so the chain's last member fails ADD."""
    sysctl = {"net.ipv4.conf.eth0.no_such_setting": "1"} if failing else {
        "net.core.somaxconn": "512"}
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": True,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
                      "ranges": [[{"subnet": f"{subnet}.0/24", "gateway": f"{subnet}.1"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "bandwidth", "capabilities": {"bandwidth": True}},
            {"type": "tuning", "sysctl": sysctl},
        ],
    }


class Containerd:
    """One containerd with its own root, state, socket and config under
    WORK/NAME, its CNI bin dir `bin_dir`, the network `cri-NAME` (bridge
    `cni-NAME0`, NAME cut to 4 letters, SUBNET.0/24: wasmcni's default
    policy lets bridge make `cni*` bridges) and, for the runtime handler
    `failing`, `cri-NAME-fail` (`cni-NAMEf`, FAIL_SUBNET.0/24)."""

    def __init__(self, name, bin_dir, subnet, fail_subnet):
        self.name, self.bin_dir = name, bin_dir
        self.dir = os.path.join(WORK, name)
        self.sock = os.path.join(self.dir, "containerd.sock")
        self.log_path = os.path.join(self.dir, "containerd.log")
        self.net, self.fail_net = f"cri-{name}", f"cri-{name}-fail"
        self.subnet, self.fail_subnet = subnet, fail_subnet
        self.proc = None
        self.channel = None
        conf = os.path.join(self.dir, "net.d")
        fail_conf = os.path.join(self.dir, "net.d-failing")
        for d in [conf, fail_conf, os.path.join(self.dir, "opt")]:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(conf, "10-cri.conflist"), "w") as f:
            json.dump(conflist(self.net, f"cni-{name[:4]}0", subnet, False), f)
        with open(os.path.join(fail_conf, "10-cri.conflist"), "w") as f:
            json.dump(conflist(self.fail_net, f"cni-{name[:4]}f", fail_subnet, True), f)
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{self.dir}/root"
state = "{self.dir}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.dir}/opt"
[{cri}]
  sandbox_image = "{IMAGE}"
  # This machine withholds CAP_SYS_RESOURCE: runc cannot lower the pause
  # container's oom_score_adj below its own.
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [{cri}.containerd.runtimes.failing]
      runtime_type = "io.containerd.runc.v2"
      cni_conf_dir = "{fail_conf}"
      cni_max_conf_num = 1
  [{cri}.cni]
    bin_dir = "{bin_dir}"
    conf_dir = "{conf}"
    max_conf_num = 1
"""
        self.config = os.path.join(self.dir, "config.toml")
        with open(self.config, "w") as f:
            f.write(config)

    def start(self):
        env = dict(os.environ)
        env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["containerd", "--config", self.config],
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     env=env, start_new_session=True)
        logf.close()
        deadline = time.monotonic() + 60
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd {self.name} did not start:\n{self.log_tail()}")
            time.sleep(0.05)
        if self.channel:
            self.channel.close()
        self.channel = grpc.insecure_channel(f"unix://{self.sock}")
        self.rt = pbg.RuntimeServiceStub(self.channel)
        self.img = pbg.ImageServiceStub(self.channel)
        last = None
        while time.monotonic() < deadline:
            try:
                st = self.rt.Status(pb.StatusRequest(), timeout=5)
                conds = {c.type: c for c in st.status.conditions}
                if all(conds.get(t) and conds[t].status for t in ["RuntimeReady", "NetworkReady"]):
                    return self.rt.Version(pb.VersionRequest(version="v1"), timeout=5)
                last = str(st.status)
            except grpc.RpcError as e:
                last = f"{e.code()}: {e.details()}"
            time.sleep(0.1)
        raise RuntimeError(f"containerd {self.name} not ready: {last}\n{self.log_tail()}")

    def kill(self):
        """SIGKILL, as a crash would (its shims and pods go on)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        if os.path.exists(self.sock):
            os.unlink(self.sock)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, n=40, problems_only=False):
        """The last `n` lines of containerd's log (`problems_only`: of its
        warnings and errors)."""
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [line for line in f
                         if not problems_only or "level=info" not in line]
                return "".join(lines[-n:])
        except OSError as e:
            return f"(no log: {e})"

    def import_image(self, tar):
        run("ctr", "--address", self.sock, "--namespace", "k8s.io", "images", "import", tar)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st = self.img.ImageStatus(pb.ImageStatusRequest(image=pb.ImageSpec(image=IMAGE)),
                                      timeout=10)
            if st.image.id:
                return
            time.sleep(0.1)
        raise RuntimeError(f"CRI does not see the imported image {IMAGE}")

    # The kubelet's calls.
    def run_pod(self, cfg, handler=""):
        return self.rt.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg, runtime_handler=handler),
                                     timeout=CALL_TIMEOUT).pod_sandbox_id

    def pod_status(self, pod):
        return self.rt.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=pod),
                                        timeout=CALL_TIMEOUT).status

    def stop_pod(self, pod):
        self.rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=pod), timeout=CALL_TIMEOUT)

    def remove_pod(self, pod):
        self.rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=pod),
                                 timeout=CALL_TIMEOUT)

    def pods(self):
        return list(self.rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=CALL_TIMEOUT).items)


NS = pb.NamespaceOption(network=pb.POD, pid=pb.CONTAINER, ipc=pb.POD)


def pod_config(name, hostport=False, host_port=HOST_PORT, bandwidth=None):
    """A PodSandboxConfig shaped as the kubelet sends it; `hostport`: the
    pod's container declares port 80 with hostPort `host_port` and 8080
    without one (the kubelet lists both; containerd maps only the first),
    and (unless `bandwidth` says otherwise) the pod carries bandwidth
    annotations."""
    uid = str(uuid.uuid4())
    ports = [pb.PortMapping(protocol=pb.TCP, container_port=80, host_port=host_port),
             pb.PortMapping(protocol=pb.TCP, container_port=8080)] if hostport else []
    annotations = {"kubernetes.io/config.source": "api"}
    if hostport if bandwidth is None else bandwidth:
        annotations["kubernetes.io/ingress-bandwidth"] = INGRESS
        annotations["kubernetes.io/egress-bandwidth"] = EGRESS
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="default", attempt=0),
        hostname=name,
        dns_config=pb.DNSConfig(servers=["10.96.0.10"],
                                searches=["default.svc.cluster.local", "svc.cluster.local"],
                                options=["ndots:5"]),
        port_mappings=ports,
        labels={"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default",
                "io.kubernetes.pod.uid": uid},
        annotations=annotations,
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=f"{CGROUP_PARENT}/pod{uid}",
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=NS)),
    )


# ------------------------------------------------------------ observations


def files_under(d):
    out = []
    for root, _, files in os.walk(d):
        out.extend(os.path.relpath(os.path.join(root, f), d) for f in files)
    return sorted(out)


def mentions(text, needles):
    """Lines of `text` naming any of `needles`: addresses (not as the
    prefix of a longer one) and pod IDs (by their first 12 digits, as
    wasmcni's rule comments name them; the reference's name all 64)."""
    pats = [re.compile(re.escape(n[:12]) if re.fullmatch("[0-9a-f]{64}", n)
                       else re.escape(n) + r"(?![0-9])") for n in needles if n]
    return [line.strip() for line in text.splitlines() if any(p.search(line) for p in pats)]


def wasmcni_rules():
    """Rule lines in wasmcni's nftables tables (`inet`, `bridge`)."""
    rules = []
    for family in ["inet", "bridge"]:
        p = subprocess.run(["nft", "list", "table", family, "wasmcni"], capture_output=True,
                           text=True)
        for line in p.stdout.splitlines():
            s = line.strip()
            if s and not re.match(r"^(table|chain|type|policy|\}|counter packets 0 bytes 0$)",
                                  s):
                rules.append(f"{family}: {s}")
    return rules


def links(kind):
    return [line.split(":")[1].strip().split("@")[0]
            for line in run("ip", "-o", "link", "show", "type", kind).splitlines()]


def leftovers(c, nets, needles):
    """What is left on the node (this sandbox) of pods that are gone:
    each value must be empty."""
    reservations = []
    for net in nets:
        d = f"/var/lib/cni/networks/{net}"
        if os.path.isdir(d):
            reservations += [f"{net}/{f}" for f in os.listdir(d)
                             if f != "lock" and not f.startswith("last_reserved_ip")]
    tables = [t for t in run("nft", "list", "tables").splitlines() if "wasmcni" in t]
    rules = mentions(run("iptables-save", check=False), needles)
    rules += [f"nft: {r}" for r in mentions(run("nft", "list", "ruleset", check=False), needles)]
    return {
        "veths": links("veth"),
        "ifbs": links("ifb"),
        "reservations": sorted(reservations),
        "netns": sorted(os.listdir("/run/netns")),
        "records": files_under("/var/lib/wasmcni/attachments"),
        "wasmcni-tables": tables,
        "wasmcni-rules": wasmcni_rules(),
        "rules": rules,
        "tbf": [q for q in run("tc", "qdisc", "show").splitlines() if " tbf " in q],
        "cni-cache": files_under("/var/lib/cni/results"),
        "pods": [p.id for p in c.pods()],
    }


def clean(left):
    return all(not v for v in left.values())


def reserved_ips(nets):
    """Every address host-local ever handed out here (its round-robin
    marks), to look for rules that name them."""
    ips = []
    for net in nets:
        d = f"/var/lib/cni/networks/{net}"
        for f in os.listdir(d) if os.path.isdir(d) else []:
            if f.startswith("last_reserved_ip"):
                with open(os.path.join(d, f)) as fh:
                    ips.append(fh.read().strip())
    return ips


def http_get(url, seconds):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read().decode().strip()
        except Exception as e:  # noqa: BLE001 (retry whatever it was)
            last = e
            time.sleep(0.2)
    return f"nothing ({last})"


# ----------------------------------------------------------------- cases


def new_since(before, after):
    """What `after` has that `before` had not, key by key (as multisets)."""
    out = {}
    for k, v in after.items():
        rest = list(before.get(k, []))
        added = []
        for x in v:
            if x in rest:
                rest.remove(x)
            else:
                added.append(x)
        out[k] = added
    return out


class Cases:
    """The cases, each judged on what it leaves beyond what was there when
    it began (a case that failed may have left something the next one
    must not be blamed for)."""

    def __init__(self, side, c):
        self.side, self.c = side, c
        self.nets = [c.net, c.fail_net]
        self.seen = []  # addresses and pod IDs ever used, for `leftovers`
        self.base = {}

    def snapshot(self):
        for ip in reserved_ips(self.nets):
            if ip not in self.seen:
                self.seen.append(ip)
        return leftovers(self.c, self.nets, self.seen)

    def left(self):
        return new_since(self.base, self.snapshot())

    def run(self, name, fn):
        """Runs case `name`: its facts, with `left` (what it left) and, if
        it left anything, what the kubelet's clean-up of its pods (Stop,
        Remove) answered and left."""
        self.base = self.snapshot()
        before = set(self.base["pods"])
        t = time.monotonic()
        try:
            facts = fn()
        except Exception as e:  # noqa: BLE001 (reported, judged by cri.rs)
            facts = {"error": f"{e.code().name}: {e.details()}" if isinstance(e, grpc.RpcError)
                     else repr(e)}
        facts = {"side": self.side, "case": name, "ms": round((time.monotonic() - t) * 1000),
                 **facts}
        facts["left"] = self.left()
        if not clean(facts["left"]):
            gc = []
            for pod in [p for p in facts["left"]["pods"] if p not in before]:
                for what, call in [("stop", self.c.stop_pod), ("remove", self.c.remove_pod)]:
                    try:
                        call(pod)
                        gc.append(f"{what} {pod[:12]}: ok")
                    except grpc.RpcError as e:
                        gc.append(f"{what} {pod[:12]}: {e.code().name}: {e.details()}")
            facts["gc"] = gc
            facts["left-after-gc"] = self.left()
        return facts

    def pod_ip(self, pod):
        return self.c.pod_status(pod).network.ip

    def cycle(self, name, hostport=False):
        """Run, then Stop and Remove, one pod: its IP."""
        pod = self.c.run_pod(pod_config(name, hostport))
        self.seen.append(pod)
        ip = self.pod_ip(pod)
        self.seen.append(ip)
        self.c.stop_pod(pod)
        self.c.remove_pod(pod)
        return ip

    def hostport(self):
        c = self.c
        cfg = pod_config("web", hostport=True)
        calls = audit_calls()
        pod = c.run_pod(cfg)
        self.seen.append(pod)
        ip = self.pod_ip(pod)
        self.seen.append(ip)
        facts = {"ip": ip}
        ctr = c.rt.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=pod,
            config=pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name="httpd"),
                image=pb.ImageSpec(image=IMAGE),
                command=["/bin/httpd"], args=["-f", "-p", "80", "-h", "/www"],
                linux=pb.LinuxContainerConfig(
                    security_context=pb.LinuxContainerSecurityContext(namespace_options=NS))),
            sandbox_config=cfg), timeout=CALL_TIMEOUT).container_id
        c.rt.StartContainer(pb.StartContainerRequest(container_id=ctr), timeout=CALL_TIMEOUT)
        facts["direct"] = http_get(f"http://{ip}:80/", 20)
        # The node-side address of the pod network: the bridge's, its
        # gateway (the nat OUTPUT hook sees a local destination).
        gw = f"{c.subnet}.1"
        facts["hostport"] = http_get(f"http://{gw}:{HOST_PORT}/", 20)
        facts["dnat-iptables"] = mentions(run("iptables-save", "-t", "nat"), [f"{ip}:80"])
        facts["dnat-wasmcni"] = [r for r in wasmcni_rules() if f"{ip}:80" in r]
        ifbs = links("ifb")
        tbf = []
        for q in run("tc", "qdisc", "show").splitlines():
            m = re.search(r"qdisc tbf \S+ dev (\S+) .*?rate (\S+)", q)
            if m:
                tbf.append({"dev": m.group(1), "ifb": m.group(1) in ifbs, "rate": m.group(2)})
        facts["tbf"] = tbf
        # httpd is its container's PID 1 and has no SIGTERM handler: no
        # grace period (the kubelet would wait it out, then kill).
        c.rt.StopContainer(pb.StopContainerRequest(container_id=ctr, timeout=0),
                           timeout=CALL_TIMEOUT)
        c.rt.RemoveContainer(pb.RemoveContainerRequest(container_id=ctr), timeout=CALL_TIMEOUT)
        c.stop_pod(pod)
        c.remove_pod(pod)
        # wasmcni's audited host calls for this pod, by plugin and
        # command (from its audit log; none on the reference side).
        audited = {}
        for call in new_since(calls, audit_calls())["calls"]:
            audited[call] = audited.get(call, 0) + 1
        facts["wasmcni-audited"] = audited
        return facts

    def sequential(self, n=20):
        ips, dirty = [], []
        for i in range(n):
            ips.append(self.cycle(f"seq-{i}"))
            left = self.left()
            if not clean(left):
                dirty.append({"after": i, "left": left})
        return {"pods": n, "ips": ips, "dirty": dirty}

    def parallel(self, n=8):
        c = self.c

        def start(i):
            pod = c.run_pod(pod_config(f"par-{i}"))
            self.seen.append(pod)
            return pod

        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            pods = list(ex.map(start, range(n)))
            ips = list(ex.map(self.pod_ip, pods))
            self.seen.extend(ips)
            veths = len(links("veth")) - len(self.base["veths"])
            list(ex.map(lambda p: (c.stop_pod(p), c.remove_pod(p)), pods))
        return {"pods": n, "ips": ips, "distinct-ips": len(set(ips)),
                "veths-while-running": veths}

    def failing(self, hostport):
        """RunPodSandbox on the failing network: what it answered (`failed`);
        `left` is taken right after, what containerd's cleanup left."""
        c = self.c
        facts = {}
        try:
            pod = c.run_pod(pod_config("failing", hostport), handler="failing")
            facts["error"] = f"RunPodSandbox succeeded: {pod}"
            self.seen.append(pod)
            c.stop_pod(pod)
            c.remove_pod(pod)
        except grpc.RpcError as e:
            facts["failed"] = f"{e.code().name}: {e.details()}"
        return facts

    def restart(self):
        c = self.c
        pod = c.run_pod(pod_config("survivor", hostport=False))
        self.seen.append(pod)
        ip = self.pod_ip(pod)
        self.seen.append(ip)
        c.kill()
        t = time.monotonic()
        c.start()
        facts = {"ip": ip, "restart-ms": round((time.monotonic() - t) * 1000)}
        st = c.pod_status(pod)
        facts["state-after-restart"] = pb.PodSandboxState.Name(st.state)
        facts["ip-after-restart"] = st.network.ip
        c.stop_pod(pod)
        c.remove_pod(pod)
        return facts


def audit_calls():
    """wasmcni's audited host calls so far, as `plugin COMMAND` each."""
    try:
        with open("/var/log/wasmcni/audit.jsonl", errors="replace") as f:
            out = []
            for line in f:
                try:
                    e = json.loads(line)
                    out.append(f"{e.get('plugin')} {e.get('command')}")
                except ValueError:
                    pass
            return {"calls": out}
    except OSError:
        return {"calls": []}


def audit_errors():
    """The last lines of wasmcni's audit log that report an error."""
    try:
        with open("/var/log/wasmcni/audit.jsonl", errors="replace") as f:
            return [line.strip() for line in f if '"outcome":"error"' in line][-10:]
    except OSError:
        return []


def cleanup(instances):
    for c in instances:
        try:
            c.stop()
        except Exception as e:  # noqa: BLE001
            log(f"stopping containerd {c.name}: {e}")
    # Whatever this sandbox started and left running (a shim, a pod's
    # processes, after a failed case): every process in this network
    # namespace (which no other process shares) but this one, and every
    # process in our pods' cgroups.
    me = os.stat("/proc/self/ns/net").st_ino
    killed = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            ours = os.stat(f"/proc/{pid}/ns/net").st_ino == me
            if not ours:
                with open(f"/proc/{pid}/cgroup") as f:
                    ours = f"{CGROUP_PARENT}/" in f.read()
            if ours:
                os.kill(int(pid), signal.SIGKILL)
                killed.append(pid)
        except OSError:
            pass
    if killed:
        log(f"cleanup: killed {len(killed)} processes left running")
    # The pods' cgroups are the node's: remove ours, deepest first (a
    # killed process leaves its cgroup once it is reaped).
    # (cgroup v1: one hierarchy per directory of /sys/fs/cgroup; v2: one.)
    tops = [f"/sys/fs/cgroup{CGROUP_PARENT}"] + [
        f"/sys/fs/cgroup/{h}{CGROUP_PARENT}" for h in os.listdir("/sys/fs/cgroup")]
    for _ in range(20):
        left = []
        for top in tops:
            for root, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                try:
                    os.rmdir(root)
                except OSError:
                    left.append(root)
        if not left:
            break
        time.sleep(0.1)
    else:
        log(f"cleanup: cgroups left: {left}")


def main():
    tar = os.path.join(WORK, "image.tar")
    build_image(tar)
    instances = []
    try:
        if MODE == "cases":
            side = sys.argv[4]
            bin_dir = {"reference": "/usr/lib/cni", "wasmcni": os.path.join(WORK, "bin")}[side]
            c = Containerd(side, bin_dir, "10.88.0", "10.89.0")
            instances.append(c)
            t = time.monotonic()
            v = c.start()
            log(f"containerd {v.runtime_version} serves CRI {v.runtime_api_version}, "
                f"started in {round((time.monotonic() - t) * 1000)} ms; CNI bin dir {bin_dir}")
            c.import_image(tar)
            cases = Cases(side, c)
            plan = [
                ("hostport", cases.hostport),
                ("sequential", cases.sequential),
                ("parallel", cases.parallel),
                ("fail-plain", lambda: cases.failing(False)),
                ("fail-hostport", lambda: cases.failing(True)),
                ("restart", cases.restart),
            ]
            only = os.environ.get("CRI_CASES")
            failed = False
            for name, fn in plan:
                if only and name not in only.split(","):
                    continue
                facts = cases.run(name, fn)
                if "error" in facts or not clean(facts["left"]):
                    failed = True
                log("result " + json.dumps(facts))
            if failed:
                log(f"== containerd's last warnings and errors ({c.log_path})")
                log(c.log_tail(40, problems_only=True))
                log("== wasmcni audit errors")
                log("\n".join(audit_errors()))
        elif MODE == "bench":
            bench(int(sys.argv[4]), tar, instances)
        elif MODE == "soak":
            import soak
            soak.run(sys.modules[__name__], tar, instances, int(sys.argv[4]), float(sys.argv[5]))
        else:
            raise SystemExit(f"unknown mode {MODE}")
    finally:
        cleanup(instances)


def bench(runs, tar, instances):
    sides = [
        Containerd("wasmcni", os.path.join(WORK, "bin"), "10.90.0", "10.91.0"),
        Containerd("reference", "/usr/lib/cni", "10.92.0", "10.93.0"),
    ]
    instances.extend(sides)
    for c in sides:
        c.start()
        c.import_image(tar)
    hostport = os.environ.get("WASMCNI_BENCH_CRI_HOSTPORT") == "1"

    def one(c, i):
        cfg = pod_config(f"bench-{i}", hostport)
        t0 = time.perf_counter()
        pod = c.run_pod(cfg)
        t1 = time.perf_counter()
        c.stop_pod(pod)
        t2 = time.perf_counter()
        c.remove_pod(pod)
        t3 = time.perf_counter()
        return {"side": c.name, "run": (t1 - t0) * 1e3, "stop": (t2 - t1) * 1e3,
                "remove": (t3 - t2) * 1e3}

    # One warm-up pod each (the first ADD loads what later ones reuse).
    for c in sides:
        one(c, "warm")
    for i in range(runs):
        order = sides if i % 2 == 0 else sides[::-1]
        for c in order:
            log("bench " + json.dumps(one(c, i)))
    for c in sides:
        left = leftovers(c, [c.net], [])
        if not clean(left):
            log("bench-left " + json.dumps({"side": c.name, "left": left}))


if __name__ == "__main__":
    main()

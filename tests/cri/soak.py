"""The soak (issue 48): containerd's CRI, as tests/cri.rs runs it, driven by
a seeded random mix of pod Run/Stop/Remove (some pods with a hostPort,
some with bandwidth annotations) on bridge + portmap + bandwidth + tuning,
while faults are injected at random moments:

  restart      containerd SIGKILLed and started again on the same root;
  kill-add     a wasmcni process SIGKILLed in the middle of an ADD;
  kill-del     a wasmcni process SIGKILLed in the middle of a DEL (the
               kubelet retries StopPodSandbox);
  netns-gone   a pod's network namespace unmounted before its DEL (as
               when its pause process died): containerd (1.6) runs the
               CNI DEL without a namespace path (CNI_NETNS empty), whose
               host part takes what the pod had on the node from its
               attachment records; the node's `wasmcni gc` runs after
               and takes anything left;
  disk-full    the state directory (/var/lib/wasmcni, a small tmpfs here)
               full while pods start and stop, then freed;
  policy       bridge's entry in the node's policy file broken while pods
               start and stop, then mended;
  gc           `wasmcni gc` running again and again beside ADDs and DELs.

After every step the node is checked against the pods that are live:
each live pod keeps its address (its reservation), its veth, its limits
(tbf, ifb) and its port mapping; nothing is left of a pod that is gone
(reservation, veth, ifb, qdisc, rule, attachment record, intent log,
libcni cache entry, plugin process); containerd lists exactly the live
pods. At the end every pod is removed and the node must be as it began;
the audit log must hold the host calls of every ADD and DEL that ran; and
a last run of pods, one after the other, must not grow containerd's open
files or memory.

Run by tests/cri/cri.py (`cri.py WORK GEN soak SEED SECONDS`), inside
tests/cri/sandbox.sh's sandbox. Prints `soak-step {json}` per step and one
`soak {json}` summary (tests/cri.rs and `make soak` judge it).
"""

import collections
import json
import os
import random
import re
import signal
import subprocess
import threading
import time

MAX_LIVE = 5
FAULTS = ["restart", "kill-add", "kill-del", "netns-gone", "disk-full", "policy", "gc"]
# SOAK_FAULTS=kind,...: only these (tests/cri/soak-can-fail runs one kind
# at a time against a build broken for it).
if os.environ.get("SOAK_FAULTS"):
    _only = os.environ["SOAK_FAULTS"].split(",")
    _unknown = [k for k in _only if k not in FAULTS]
    if _unknown:
        raise SystemExit(f"SOAK_FAULTS: unknown fault kinds {_unknown}; the kinds: {FAULTS}")
    FAULTS = _only
STATE_DIR = "/var/lib/wasmcni"
# The node's policy file for the soak (WASMCNI_POLICY, which containerd
# passes on to the plugins), in the sandbox's /run: the built-in policy's
# text, but while the `policy` fault holds.
POLICY_FILE = "/run/wasmcni-soak/policy.json"
DEFAULT_POLICY = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "../../host/runtime/src/default-policy.json")


class Pod:
    def __init__(self, pid, name, ip, port, bw):
        self.id, self.name, self.ip, self.port, self.bw = pid, name, ip, port, bw


class Killer(threading.Thread):
    """SIGKILLs the first plugin process this sandbox's containerd
    (`parent`) runs for
    `command` (CNI_COMMAND in its environment), `delay` seconds after
    seeing it: a random moment of its run. It looks only at containerd's
    children (each of its threads' `children` file): never at another
    test's plugins running beside the sandbox, and a look is quick enough
    to catch a plugin that lives for milliseconds."""

    def __init__(self, parent, command, delay):
        super().__init__(daemon=True)
        self.parent = parent
        self.want = b"CNI_COMMAND=" + command.encode()
        self.delay = delay
        self.done = threading.Event()
        self.hit = None

    def children(self):
        out = []
        try:
            for t in os.listdir(f"/proc/{self.parent}/task"):
                try:
                    with open(f"/proc/{self.parent}/task/{t}/children") as f:
                        out += f.read().split()
                except OSError:
                    pass
        except OSError:
            pass
        return out

    def run(self):
        while not self.done.is_set() and self.hit is None:
            for pid in self.children():
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        env = f.read().split(b"\0")
                    if self.want not in env:
                        continue
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv0 = f.read().split(b"\0")[0].decode(errors="replace")
                    time.sleep(self.delay)
                    os.kill(int(pid), signal.SIGKILL)
                    self.hit = os.path.basename(argv0)
                    return
                except (OSError, ProcessLookupError):
                    continue

    def stop(self):
        self.done.set()
        self.join(10)
        return self.hit


class Soak:
    def __init__(self, cri, c, wasmcni, seed, seconds):
        self.cri, self.c, self.wasmcni = cri, c, wasmcni
        self.rng = random.Random(seed)
        self.seed, self.seconds = seed, seconds
        self.live = {}  # pod id -> Pod
        self.ever = []  # every pod that ran: (Pod, removed normally?)
        self.runtime_leaks = set()  # pods whose DEL containerd skipped
        self.ops = collections.Counter()
        self.faults = collections.Counter()
        self.missed = collections.Counter()
        self.problems = []
        self.n = 0
        self.step = 0
        self.ports = list(range(18100, 18100 + MAX_LIVE * 4))

    # ------------------------------------------------------------ helpers

    def problem(self, what):
        self.problems.append(f"step {self.step}: {what}")
        self.cri.log(f"soak-problem step {self.step}: {what}")

    def rpc(self, fn, *a, **kw):
        """A CRI call: None on success, the error text on failure."""
        try:
            fn(*a, **kw)
            return None
        except Exception as e:  # noqa: BLE001 (an RpcError, reported)
            return f"{getattr(e, 'code', lambda: '?')()}: {getattr(e, 'details', lambda: e)()}"

    def new_pod(self, fault=False):
        """RunPodSandbox of a new pod; its Pod, or None when it failed."""
        self.n += 1
        name = f"soak-{self.n}"
        free = [p for p in self.ports if p not in {x.port for x in self.live.values()}]
        port = self.rng.choice(free) if self.rng.random() < 0.5 else None
        bw = self.rng.random() < 0.5
        cfg = self.cri.pod_config(name, hostport=port is not None, host_port=port or 0,
                                  bandwidth=bw)
        try:
            pid = self.c.run_pod(cfg)
        except Exception as e:  # noqa: BLE001
            if not fault:
                self.problem(f"RunPodSandbox {name} failed without a fault: {e}")
            return None
        ip = self.c.pod_status(pid).network.ip
        pod = Pod(pid, name, ip, port, bw)
        self.live[pid] = pod
        self.ever.append(pod)
        return pod

    def remove(self, pod, tries=1):
        """StopPodSandbox and RemovePodSandbox, each tried up to `tries`
        times (the kubelet retries); whether the pod is gone."""
        for call in [self.c.stop_pod, self.c.remove_pod]:
            err = None
            for _ in range(tries):
                err = self.rpc(call, pod.id)
                if err is None:
                    break
                time.sleep(0.2)
            if err is not None:
                return err
        self.live.pop(pod.id, None)
        return None

    def any_live(self):
        return self.live[self.rng.choice(sorted(self.live))] if self.live else None

    def gc(self):
        p = subprocess.run([self.wasmcni, "gc"], capture_output=True, text=True)
        if p.returncode != 0:
            self.problem(f"wasmcni gc: {p.returncode} {p.stderr.strip()[-500:]}")

    def netns_of(self, pod):
        st = self.c.rt.PodSandboxStatus(
            self.cri.pb.PodSandboxStatusRequest(pod_sandbox_id=pod.id, verbose=True),
            timeout=self.cri.CALL_TIMEOUT)
        info = json.loads(st.info.get("info", "{}"))
        for ns in info.get("runtimeSpec", {}).get("linux", {}).get("namespaces", []):
            if ns.get("type") == "network" and ns.get("path"):
                return ns["path"]
        return None

    # ---------------------------------------------------------------- ops

    def op_run(self):
        if len(self.live) >= MAX_LIVE:
            return self.op_remove()
        self.ops["run"] += 1
        self.new_pod()

    def op_remove(self):
        pod = self.any_live()
        if pod is None:
            return self.op_run()
        self.ops["remove"] += 1
        err = self.remove(pod)
        if err:
            self.problem(f"removing {pod.name} failed without a fault: {err}")

    def fault_restart(self):
        before = {p.id: p.ip for p in self.live.values()}
        self.c.kill()
        self.c.start()
        for pid, ip in before.items():
            now = self.c.pod_status(pid).network.ip
            if now != ip:
                self.problem(f"pod {pid[:12]} had {ip}, after containerd's restart {now!r}")
        return True

    def fault_kill(self, command):
        """One ADD (or DEL) with a plugin process killed in its middle;
        whether a process was killed."""
        victim = None
        if command == "DEL":
            victim = self.any_live()
            if victim is None:
                self.new_pod()
                victim = self.any_live()
            if victim is None:
                return False
        k = Killer(self.c.proc.pid, command, self.rng.uniform(0, 0.004))
        k.start()
        if command == "ADD":
            pod = self.new_pod(fault=True)
        else:
            err = self.rpc(self.c.stop_pod, victim.id)
        hit = k.stop()
        # (An ADD killed after libcni had the plugin's answer, or a killed
        # plugin whose runtime's retry succeeded: the pod runs, and counts
        # as live.)
        if command == "DEL":
            if hit is None and err is not None:
                self.problem(f"StopPodSandbox {victim.name} failed without a fault: {err}")
            # The kubelet retries Stop until it succeeds, then removes.
            err = self.remove(victim, tries=5)
            if err:
                self.problem(f"{victim.name}: Stop/Remove after a killed DEL, retried: {err}")
        return hit is not None

    def fault_netns_gone(self):
        pod = self.any_live()
        if pod is None:
            self.new_pod()
            pod = self.any_live()
        if pod is None:
            return False
        path = self.netns_of(pod)
        if not path:
            self.problem(f"{pod.name}: no network namespace path in its status")
            return False
        subprocess.run(["umount", path], capture_output=True)
        try:
            os.unlink(path)
        except OSError as e:
            self.problem(f"removing {path}: {e}")
        err = self.remove(pod, tries=3)
        if err:
            self.problem(f"{pod.name}: Stop/Remove with its namespace gone: {err}")
            return True
        # containerd (1.6) runs the CNI DEL without a namespace path (its
        # log: "TearDown network for sandbox" for every one of these);
        # what that DEL could not take is the node's GC's.
        self.runtime_leaks.add(pod.id)
        self.gc()
        return True

    def fill(self):
        """Fills the state directory's file system; the filler's path."""
        filler = os.path.join(STATE_DIR, "soak-filler")
        chunk = b"\0" * (1 << 20)
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError:
                pass
        # Fill the last blocks too.
        try:
            with open(filler, "ab") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:
            pass
        return filler

    def under_fault(self, mend):
        """A start and a stop while a fault holds, then `mend`, then the
        kubelet's retries: the stop retried until it succeeds."""
        pod = self.new_pod(fault=True)
        victim = self.any_live() if pod is None else pod
        err = None
        if victim is not None:
            err = self.rpc(self.c.stop_pod, victim.id)
        mend()
        if victim is not None:
            err = self.remove(victim, tries=5)
            if err:
                self.problem(f"{victim.name}: Stop/Remove after the fault was mended: {err}")
        return True

    def fault_disk_full(self):
        filler = self.fill()
        return self.under_fault(lambda: os.unlink(filler))

    def fault_policy(self):
        with open(DEFAULT_POLICY) as f:
            policy = json.load(f)
        policy["plugins"]["bridge"] = "broken"
        write_policy(json.dumps(policy))
        return self.under_fault(lambda: write_policy(open(DEFAULT_POLICY).read()))

    def fault_gc(self):
        stop = threading.Event()
        runs = [0]

        def loop():
            while not stop.is_set():
                self.gc()
                runs[0] += 1

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        try:
            for _ in range(2):
                self.new_pod()
            pod = self.any_live()
            if pod is not None:
                err = self.remove(pod)
                if err:
                    self.problem(f"removing {pod.name} beside gc: {err}")
        finally:
            stop.set()
            t.join(60)
        return runs[0] > 0

    def retried(self, fn, times=10):
        """`fn` until it strikes (a plugin process can end before the
        killer sees it), at most `times` times."""
        return any(fn() for _ in range(times))

    def fault(self, kind):
        fn = {
            "restart": self.fault_restart,
            "kill-add": lambda: self.retried(lambda: self.fault_kill("ADD")),
            "kill-del": lambda: self.retried(lambda: self.fault_kill("DEL")),
            "netns-gone": self.fault_netns_gone,
            "disk-full": self.fault_disk_full,
            "policy": self.fault_policy,
            "gc": self.fault_gc,
        }[kind]
        if fn():
            self.faults[kind] += 1
        else:
            self.missed[kind] += 1

    # ------------------------------------------------------------- checks

    def check(self, final=False):
        """The node against the live pods; problems for what differs."""
        cri, live = self.cri, self.live
        net = self.c.net
        d = f"/var/lib/cni/networks/{net}"
        reserved = {}
        for f in os.listdir(d) if os.path.isdir(d) else []:
            if f == "lock" or f.startswith("last_reserved_ip"):
                continue
            with open(os.path.join(d, f)) as fh:
                reserved[f] = fh.read().split("\n")[0].strip()
        want = {p.ip: p.id for p in live.values()}
        if reserved != want:
            self.problem(f"reservations {reserved} != the live pods' {want}")
        veths = cri.links("veth")
        if len(veths) != len(live):
            self.problem(f"{len(veths)} veths for {len(live)} live pods: {veths}")
        bw = [p for p in live.values() if p.bw]
        ifbs = cri.links("ifb")
        if len(ifbs) != len(bw):
            self.problem(f"{len(ifbs)} ifbs for {len(bw)} live pods with limits: {ifbs}")
        tbf = [q for q in cri.run("tc", "qdisc", "show").splitlines() if " tbf " in q]
        if len(tbf) != 2 * len(bw):
            self.problem(f"{len(tbf)} tbf qdiscs for {len(bw)} live pods with limits: {tbf}")
        rules = cri.wasmcni_rules()
        for p in live.values():
            if p.port and not any(f"{p.ip}:80" in r for r in rules):
                self.problem(f"{p.name} ({p.ip}) lost its port mapping {p.port}")
        live_prefixes = {p.id[:12] for p in live.values()}
        for r in rules:
            for cid in re.findall(rf"{re.escape(net)}/([0-9a-f]{{12,64}})/", r):
                if cid[:12] not in live_prefixes:
                    self.problem(f"a rule of a pod that is gone: {r}")
        for r in rules:
            m = re.search(r"dnat ip to ([0-9.]+):80", r)
            if m and m.group(1) not in {p.ip for p in live.values() if p.port}:
                self.problem(f"a port mapping to no live pod: {r}")
        # attachments/<network>/<container id>/<ifname>/<plugin>.json,
        # and <plugin>.intent beside it while an ADD is under way.
        records = cri.files_under(f"{STATE_DIR}/attachments")
        for f in records:
            parts = f.split("/")
            if len(parts) < 2 or parts[1] not in live:
                self.problem(f"left of a pod that is gone: attachments/{f}")
        for p in live.values():
            if f"{net}/{p.id}/eth0/bridge.json" not in records:
                self.problem(f"{p.name} ({p.id[:12]}) has no attachment record: {records}")
        cache = cri.files_under("/var/lib/cni/results")
        for f in cache:
            cid = next((p.id for p in self.ever if p.id in f), None)
            if cid is None or (cid not in live and cid not in self.runtime_leaks):
                self.problem(f"a libcni cache entry of no live pod: {f}")
        pods = {p.id for p in self.c.pods()}
        if pods != set(live):
            self.problem(f"containerd lists {len(pods)} pods, {len(live)} are live")
        procs = plugin_processes()
        if procs:
            # One more look a moment later: a DEL containerd runs on its
            # own after a failed call may still be ending.
            time.sleep(1)
            procs = plugin_processes()
        if procs:
            self.problem(f"plugin processes still running: {procs}")

    def check_audit(self):
        """Every pod that ran has its ADDs' host calls in the audit log
        (bridge's, and portmap's and bandwidth's where it asked), every
        pod removed normally its bridge DEL's."""
        seen = collections.defaultdict(set)
        try:
            with open("/var/log/wasmcni/audit.jsonl", errors="replace") as f:
                for line in f:
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue
                    seen[e.get("container_id", "")].add((e.get("plugin"), e.get("command")))
        except OSError as e:
            self.problem(f"no audit log: {e}")
            return
        for p in self.ever:
            want = {("bridge", "ADD")}
            if p.port:
                want.add(("portmap", "ADD"))
            if p.bw:
                want.add(("bandwidth", "ADD"))
            if p.id not in self.runtime_leaks:
                want.add(("bridge", "DEL"))
            missing = want - seen.get(p.id, set())
            if missing:
                self.problem(f"{p.name} ({p.id[:12]}): no audit records of {sorted(missing)}")

    def containerd_usage(self):
        pid = self.c.proc.pid
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return fds, rss

    # --------------------------------------------------------------- main

    def run(self):
        t0 = time.monotonic()
        # Each fault at least once, in a seeded order, among the first
        # steps; then a random mix until the time is up.
        first = FAULTS[:]
        self.rng.shuffle(first)
        plan = []
        for f in first:
            plan += ["run", "run", f]
        while True:
            self.step += 1
            if plan:
                what = plan.pop(0)
            elif time.monotonic() - t0 >= self.seconds:
                break
            else:
                r = self.rng.random()
                what = "run" if r < 0.4 else "remove" if r < 0.7 else self.rng.choice(FAULTS)
            ts = time.monotonic()
            if what == "run":
                self.op_run()
            elif what == "remove":
                self.op_remove()
            else:
                self.fault(what)
            self.check()
            self.cri.log("soak-step " + json.dumps({
                "step": self.step, "what": what, "live": len(self.live),
                "ms": round((time.monotonic() - ts) * 1000), "problems": len(self.problems)}))
        # The end: every pod removed, the node's GC, the node as it began.
        for pod in list(self.live.values()):
            err = self.remove(pod, tries=3)
            if err:
                self.problem(f"removing {pod.name} at the end: {err}")
        self.gc()
        self.check(final=True)
        self.check_audit()
        # containerd's open files and memory over pods one after the
        # other, no faults.
        usage = []
        for i in range(12):
            p = self.new_pod()
            if p is not None:
                err = self.remove(p)
                if err:
                    self.problem(f"removing {p.name}: {err}")
            if i in (3, 11):
                usage.append(self.containerd_usage())
        (fd0, rss0), (fd1, rss1) = usage
        if fd1 > fd0 + 2:
            self.problem(f"containerd's open files grew over 8 pods: {fd0} -> {fd1}")
        if rss1 > rss0 * 1.25 + 8192:
            self.problem(f"containerd's memory grew over 8 pods: {rss0} -> {rss1} KiB")
        self.check(final=True)
        return {
            "seed": self.seed, "seconds": round(time.monotonic() - t0, 1),
            "steps": self.step, "pods": len(self.ever), "ops": dict(self.ops),
            "faults": dict(self.faults), "missed": dict(self.missed),
            "containerd": {"fds": [fd0, fd1], "rss-kib": [rss0, rss1]},
            "problems": self.problems[:50], "problem-count": len(self.problems),
        }


def plugin_processes():
    """The CNI plugin processes running in this sandbox (its network
    namespace: other tests' plugins run beside it), CNI_COMMAND in their
    environment: `pid command argv0 state` each."""
    out = []
    me = os.stat("/proc/self/ns/net").st_ino
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino != me:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            cmd = next((e.decode(errors="replace") for e in env
                        if e.startswith(b"CNI_COMMAND=")), None)
            if cmd is None:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            out.append(f"{pid} {cmd} {argv0} {state}")
        except OSError:
            continue
    return out


def write_policy(text):
    """Replaces the policy file at once (a rename), root's, mode 0600."""
    os.makedirs(os.path.dirname(POLICY_FILE), exist_ok=True)
    tmp = POLICY_FILE + ".new"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.rename(tmp, POLICY_FILE)


def run(cri, tar, instances, seed, seconds):
    wasmcni = os.environ["WASMCNI_EXE"]
    with open(DEFAULT_POLICY) as f:
        write_policy(f.read())
    os.environ["WASMCNI_POLICY"] = POLICY_FILE
    c = cri.Containerd("soak", os.path.join(cri.WORK, "bin"), "10.94.0", "10.95.0")
    instances.append(c)
    c.start()
    c.import_image(tar)
    summary = Soak(cri, c, wasmcni, seed, seconds).run()
    cri.log("soak " + json.dumps(summary))
    if summary["problem-count"]:
        cri.log(f"== containerd's last warnings and errors ({c.log_path})")
        cri.log(c.log_tail(40, problems_only=True))
        cri.log("== wasmcni audit errors")
        cri.log("\n".join(cri.audit_errors()))

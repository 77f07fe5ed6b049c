#!/bin/bash
# Regenerates host/hot-symbols.txt (with --musl: host/hot-symbols-musl.txt):
# the functions of the wasmcni executable that a warm plugin run executes,
# which build.rs hands to the linker
# (lld --symbol-ordering-file) so they sit together at the start of .text.
#
# Why: every CNI call is a fresh process, and the kernel maps 64 KiB of
# file pages around each page fault in the executable. With the hot code
# spread over a 13 MB text section a warm loopback ADD touched 88 such
# windows (5.5 MiB of RSS); packed together it is about 1 MiB. A stale list
# only costs RSS (unknown names are ignored), never correctness.
#
# Needs root (a network namespace for the plugin) and valgrind. Usage:
#   host/hot-symbols.sh        (from the workspace root; `make hot-symbols`)
#   host/hot-symbols.sh --musl the same for the static musl build (the
#                              installer image's): host/hot-symbols-musl.txt
#   host/hot-symbols.sh --instructions BIN
#                              the same runs of wasmcni BIN, printing each warm
#                              run's instruction count (callgrind: repeatable on
#                              these noisy machines, where wall-clock medians move
#                              by 10%) and writing no list: for A/B comparisons
#                              of two builds, both built in this checkout (the
#                              hot-symbol order depends on the path)
set -euo pipefail
counts=
target=x86_64-unknown-linux-gnu list=host/hot-symbols.txt
if [ "${1:-}" = --instructions ]; then counts=$(realpath "${2:?usage: $0 --instructions BIN}"); fi
if [ "${1:-}" = --musl ]; then target=x86_64-unknown-linux-musl list=host/hot-symbols-musl.txt; fi
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
if [ -n "$counts" ]; then
  bin=$counts
else
  # The release executable is linked without its symbol table (host/build.rs);
  # the list is made from the same build linked with it: the same symbol
  # names (only the executable's link step differs). The next plain build
  # links it stripped again.
  WASMCNI_KEEP_SYMBOLS=1 cargo build --release --target "$target" -p wasmcni
  bin=target/$target/release/wasmcni
fi
# Under target/: the policy file must sit in directories only root can write.
mkdir -p target
work=$(mktemp -d "$PWD/target/hot-symbols.XXXXXX")
ns=wasmcni-hot-$$
ctr=wasmcni-hotc-$$
ip netns add "$ns"
ip netns add "$ctr"
ip -n "$ns" link set lo up
trap 'ip netns del "$ns" 2>/dev/null; ip netns del "$ctr" 2>/dev/null; rm -rf "$work"' EXIT
echo '{"cniVersion":"1.0.0","name":"lo","type":"loopback"}' > "$work/lo.json"
cat > "$work/bridge.json" <<JSON
{"cniVersion":"1.0.0","name":"hot","type":"bridge","bridge":"cnihot0","isGateway":true,
 "ipam":{"type":"host-local","subnet":"10.49.0.0/24","dataDir":"$work/ipam","routes":[{"dst":"0.0.0.0/0"}]}}
JSON
echo "{\"plugins\":{\"host-local\":{\"ipam-roots\":[\"$work/ipam\"]}}}" > "$work/policy.json"
chmod 600 "$work/policy.json"
# run PLUGIN CONFIG NETNS IFNAME COMMAND OUT: one invocation under callgrind,
# in the node namespace (the bridge goes there, not on the machine).
run() {
  ip netns exec "$ns" env CNI_COMMAND=$5 CNI_CONTAINERID=hot CNI_NETNS=/run/netns/$3 CNI_IFNAME=$4 \
    CNI_PATH=/opt/cni/bin WASMCNI_POLICY="$work/policy.json" \
    WASMCNI_AUDIT="$work/audit.jsonl" WASMCNI_CACHE_DIR="$work/cache" WASMCNI_STATE_DIR="$work/state" \
    WASMCNI_RUN_DIR="$work/run" \
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/$6" \
    "$bin" run "$1" < "$work/$2" > /dev/null 2> "$work/vg.log" || { cat "$work/vg.log" >&2; exit 1; }
}
# The first runs compile the plugins for valgrind's CPU and store the
# artifacts; the warm runs (ADD, CHECK, DEL of loopback, and of bridge with
# host-local, which runs in the same process) are what a runtime does.
run loopback lo.json "$ctr" lo ADD cold.out
run loopback lo.json "$ctr" lo ADD add.out
run loopback lo.json "$ctr" lo CHECK check.out
run loopback lo.json "$ctr" lo DEL del.out
run bridge bridge.json "$ctr" eth0 ADD bcold.out
run bridge bridge.json "$ctr" eth0 DEL bdel0.out
run bridge bridge.json "$ctr" eth0 ADD badd.out
run bridge bridge.json "$ctr" eth0 DEL bdel.out
if [ -n "$counts" ]; then
  for r in add check del badd bdel; do
    echo "$r $(sed -n 's/^summary: //p' "$work/$r.out")"
  done
  exit 0
fi
python3 - "$bin" "$work" > "$list" <<'PY'
import re, subprocess, sys
bin, work = sys.argv[1:]
def executed(runs):
    names = set()
    for r in runs:
        for line in open(f'{work}/{r}.out'):
            m = re.match(r'^c?fn=\(\d+\) (.+)$', line.rstrip('\n'))
            if m:
                names.add(m.group(1))
    return names
addr = {}
for l in subprocess.run(['nm', '--defined-only', bin], capture_output=True, text=True).stdout.splitlines():
    p = l.split()
    if len(p) == 3 and p[1] in 'tTwW':
        addr[p[2]] = int(p[0], 16)
markers = ('wasmcni_hot_text_start', 'wasmcni_hot_text_end', 'wasmcni_hot_text_bridge_end')
order = lambda names: sorted((n for n in names if n in addr and n not in markers), key=lambda n: addr[n])
# What every plugin run executes (loopback's: start-up, policy, engine,
# one component's run), then what only bridge's adds (netlink, IPAM, a
# second component in the process). The first two markers enclose the
# first part, which host/src/main.rs maps in one call at start-up of every
# run; the last two the second part, which it maps too for every plugin
# but loopback (mapping it would only add to loopback's RSS).
common = executed(['add', 'check', 'del'])
hot = [markers[0]] + order(common) + [markers[1]] + order(executed(['badd', 'bdel']) - common) + [markers[2]]
print('\n'.join(hot))
PY
echo "$list: $(wc -l < "$list") functions"

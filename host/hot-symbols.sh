#!/bin/bash
# Regenerates host/hot-symbols.txt: the functions of the wasmcni executable
# that a warm plugin run executes, which build.rs hands to the linker
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
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -p wasmcni
bin=target/release/wasmcni
work=$(mktemp -d)
ns=wasmcni-hot-$$
ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null; rm -rf "$work"' EXIT
echo '{"cniVersion":"1.0.0","name":"lo","type":"loopback"}' > "$work/conf.json"
run() {
  CNI_COMMAND=$1 CNI_CONTAINERID=hot CNI_NETNS=/run/netns/$ns CNI_IFNAME=lo CNI_PATH=/opt/cni/bin \
  WASMCNI_AUDIT="$work/audit.jsonl" WASMCNI_CACHE_DIR="$work/cache" \
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/$2" \
    "$bin" run loopback < "$work/conf.json" > /dev/null 2> "$work/vg.log"
}
# The first run compiles the plugin for valgrind's CPU and stores the
# artifact; the warm runs (ADD, CHECK, DEL) are what a runtime does.
run ADD cold.out
run ADD add.out
run CHECK check.out
run DEL del.out
python3 - "$bin" "$work"/add.out "$work"/check.out "$work"/del.out > host/hot-symbols.txt <<'PY'
import re, subprocess, sys
names = set()
for path in sys.argv[2:]:
    for line in open(path):
        m = re.match(r'^c?fn=\(\d+\) (.+)$', line.rstrip('\n'))
        if m:
            names.add(m.group(1))
addr = {}
for l in subprocess.run(['nm', '--defined-only', sys.argv[1]], capture_output=True, text=True).stdout.splitlines():
    p = l.split()
    if len(p) == 3 and p[1] in 'tTwW':
        addr[p[2]] = int(p[0], 16)
hot = sorted((n for n in names if n in addr), key=lambda n: addr[n])
print('\n'.join(hot))
PY
echo "host/hot-symbols.txt: $(wc -l < host/hot-symbols.txt) functions"

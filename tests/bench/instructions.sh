#!/bin/bash
# Instruction counts (valgrind's callgrind: repeatable on these noisy
# machines, where wall-clock medians move by 10%) of the warm runs a runtime
# makes: loopback ADD, bridge + host-local ADD and DEL, each one process of
# wasmcni BIN, in network namespaces of its own. Compare two builds, both
# built in the same checkout path (the hot-symbol order depends on it):
#   tests/bench/instructions.sh /tmp/old/wasmcni; tests/bench/instructions.sh /tmp/new/wasmcni
# Needs root and valgrind. Prints "run instructions" per line.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
bin=$(realpath "$1")
mkdir -p target
work=$(mktemp -d "$PWD/target/instructions.XXXXXX")
ns=wasmcni-ir-$$; ctr=wasmcni-irc-$$
ip netns add "$ns"; ip netns add "$ctr"; ip -n "$ns" link set lo up
trap 'ip netns del "$ns" 2>/dev/null; ip netns del "$ctr" 2>/dev/null; rm -rf "$work"' EXIT
echo '{"cniVersion":"1.0.0","name":"lo","type":"loopback"}' > "$work/lo.json"
cat > "$work/bridge.json" <<JSON
{"cniVersion":"1.0.0","name":"hot","type":"bridge","bridge":"cnihot0","isGateway":true,
 "ipam":{"type":"host-local","subnet":"10.49.0.0/24","dataDir":"$work/ipam","routes":[{"dst":"0.0.0.0/0"}]}}
JSON
echo "{\"plugins\":{\"host-local\":{\"ipam-roots\":[\"$work/ipam\"]}}}" > "$work/policy.json"
chmod 600 "$work/policy.json"
run() {
  ip netns exec "$ns" env CNI_COMMAND=$5 CNI_CONTAINERID=hot CNI_NETNS=/run/netns/$3 CNI_IFNAME=$4 \
    CNI_PATH=/opt/cni/bin WASMCNI_POLICY="$work/policy.json" \
    WASMCNI_AUDIT="$work/audit.jsonl" WASMCNI_CACHE_DIR="$work/cache" WASMCNI_STATE_DIR="$work/state" \
    valgrind --tool=callgrind --callgrind-out-file="$work/$6" \
    "$bin" run "$1" < "$work/$2" > /dev/null 2> "$work/vg.log"
  grep -m1 "^summary:\|^totals:" "$work/$6" | awk -v n="$6" '{print n, $2}'
}
run loopback lo.json "$ctr" lo ADD cold.out >/dev/null
run loopback lo.json "$ctr" lo ADD add.out
run bridge bridge.json "$ctr" eth0 ADD bcold.out >/dev/null
run bridge bridge.json "$ctr" eth0 DEL bdel0.out >/dev/null
run bridge bridge.json "$ctr" eth0 ADD badd.out
run bridge bridge.json "$ctr" eth0 DEL bdel.out

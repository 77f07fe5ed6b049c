#!/bin/bash
# Runs a container with Debian's podman (4.3, CNI backend) on a bridge +
# host-local + portmap + firewall + tuning network served by an installed wasmcni bin dir, with
# a published port the node reaches through portmap's DNAT. Meant to run
# inside `unshare -n -m` (tests/podman.rs): every path podman and CNI
# write to is a tmpfs of this mount namespace, and the network is this
# process's own.
#   run.sh WASMCNI BINDIR WORKDIR
set -euo pipefail
wasmcni=$1 bin=$2 work=$3
mount --make-rprivate /
# /var/log/wasmcni, /var/lib/wasmcni and /run/wasmcni too: podman runs the
# plugins without this script's WASMCNI_* settings (its cleanup process at
# least), so they use wasmcni's default audit log, state root (the
# attachment records) and run directory (locks), which must not be the
# machine's.
for d in /var/lib/containers /run/containers /run/libpod /etc/cni/net.d /var/lib/cni \
         /etc/containers/containers.conf.d /var/log/wasmcni /var/lib/wasmcni /run/wasmcni; do
  mkdir -p "$d"
  mount -t tmpfs -o mode=0755 tmpfs "$d"
done
ip link set lo up
"$wasmcni" install "$bin" >/dev/null
cat > /etc/containers/containers.conf.d/50-wasmcni.conf <<CONF
[network]
network_backend = "cni"
cni_plugin_dirs = ["$bin"]
CONF
# The shape podman 4.3's CNI backend writes for a network (`podman network
# create`): bridge (ipMasq, hairpinMode) + portmap + firewall + tuning.
cat > /etc/cni/net.d/wasmnet.conflist <<'CONF'
{"cniVersion": "0.4.0", "name": "wasmnet", "plugins": [
  {"type": "bridge", "bridge": "cni-wasm0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
            "ranges": [[{"subnet": "10.59.0.0/24", "gateway": "10.59.0.1"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "firewall", "backend": ""},
  {"type": "tuning"}]}
CONF
root=$work/rootfs
mkdir -p "$root/bin"
cp /bin/busybox "$root/bin/busybox"
for c in sh ip ping; do ln -sf busybox "$root/bin/$c"; done
export WASMCNI_AUDIT=$work/audit.jsonl
echo "== run"
# The container serves one connection on port 80, published as node port
# 18080; the node connects to its own bridge address (nat output hook).
podman --log-level=error run --rm --network wasmnet --runtime runc \
  --ulimit nproc=1000:1000 --ulimit nofile=1000:1000 --cap-add NET_RAW \
  -p 18080:80 --rootfs "$root" /bin/sh -c \
  'ip -4 addr show eth0; ping -c 1 -W 2 10.59.0.1; echo through-portmap | nc -l -p 80' \
  </dev/null &
pod=$!
# Until the whole chain's ADD is done: portmap's DNAT and, after it, the
# firewall plugin's forward rule (a loaded machine can be between the two).
rules=0
for _ in $(seq 1 150); do
  table=$(nft list table inet wasmcni 2>/dev/null || true)
  rules=$(grep -c 'dnat ip to 10.59.0.2:80' <<<"$table" || true)
  forward=$(grep -c 'ip saddr 10.59.0.2 meta mark set' <<<"$table" || true)
  [ "$rules" -gt 0 ] && [ "$forward" -gt 0 ] && break
  sleep 0.2
done
echo "DNAT rules while running: $rules"
echo "== ruleset while running"
nft list table inet wasmcni 2>&1 || true
echo "== end ruleset"
reply=
for _ in $(seq 1 100); do
  reply=$(busybox nc -w 2 10.59.0.1 18080 </dev/null 2>/dev/null || true)
  [ -n "$reply" ] && break
  sleep 0.2
done
echo "node port 18080 answered: ${reply:-nothing}"
wait "$pod"
echo "== after"
echo "reservations: $(ls /var/lib/cni/networks/wasmnet | tr '\n' ' ')"
echo "veths: $(ip -o link show type veth | wc -l)"
audit=
for p in bridge portmap firewall tuning; do
  audit="$audit $(grep -c "\"plugin\":\"$p\"" "$work/audit.jsonl" || true) $p calls,"
done
echo "audit:$audit"
echo "wasmcni tables: $(nft list tables | grep -c wasmcni)"

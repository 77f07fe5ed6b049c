#!/bin/bash
# The podman benchmark's runs (tests/bench/podman.rs): `podman run --rm`
# with Debian's podman (4.3, CNI backend) on a bridge + host-local
# network, its plugins the reference's (/usr/lib/cni) or an installed
# wasmcni bin dir, the two taking turns. Meant to run inside
# `unshare -n -m`, as tests/podman/run.sh: every path podman, CNI and
# wasmcni write to is a tmpfs of this mount namespace, and the network is
# this process's own.
#   podman.sh WASMCNI BINDIR WORKDIR RUNS
# Output: one line per run, `VARIANT SIDE MS` (the `podman run` process,
# exec to exit), VARIANT `plain` (bridge with isGateway, host-local) or
# `default` (the list `podman network create` writes: bridge with ipMasq
# and hairpinMode, portmap, firewall, tuning; the container publishes a
# port), SIDE `wasmcni`, `reference` or `none` (`--network none`: podman
# and runc without CNI).
set -euo pipefail
wasmcni=$1 bin=$2 work=$3 runs=$4
mount --make-rprivate /
for d in /var/lib/containers /run/containers /run/libpod /etc/cni/net.d /var/lib/cni \
         /etc/containers/containers.conf.d /var/log/wasmcni /var/lib/wasmcni /run/netns; do
  mkdir -p "$d"
  mount -t tmpfs -o mode=0755 tmpfs "$d"
done
ip link set lo up
"$wasmcni" install "$bin" >/dev/null
root=$work/rootfs
mkdir -p "$root/bin"
cp /bin/busybox "$root/bin/busybox"
for c in sh true; do ln -sf busybox "$root/bin/$c"; done
export WASMCNI_AUDIT=$work/audit.jsonl

# One network per variant and side, only it in /etc/cni/net.d while it
# runs (podman asks every member of every network for its VERSION on each
# run), and the side's plugin dir podman's only one.
conf() { # VARIANT SIDE: writes the side's network and plugin dir
  local dir=$bin net=bench-$1-$2 n=1 extra= more=
  [ "$2" = reference ] && dir=/usr/lib/cni n=2
  if [ "$1" = default ]; then
    n=$((n + 2)) extra='"ipMasq": true, "hairpinMode": true,'
    more=', {"type": "portmap", "capabilities": {"portMappings": true}},
      {"type": "firewall", "backend": ""}, {"type": "tuning"}'
  fi
  cat > /etc/containers/containers.conf.d/50-wasmcni.conf <<CONF
[network]
network_backend = "cni"
cni_plugin_dirs = ["$dir"]
CONF
  rm -f /etc/cni/net.d/*.conflist
  cat > "/etc/cni/net.d/$net.conflist" <<CONF
{"cniVersion": "0.4.0", "name": "$net", "plugins": [
  {"type": "bridge", "bridge": "cni-bench$n", "isGateway": true, $extra
   "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
            "ranges": [[{"subnet": "10.61.$n.0/24", "gateway": "10.61.$n.1"}]]}}$more]}
CONF
  echo "$net"
}
run() { # VARIANT SIDE
  local net=none start ports=()
  [ "$2" = none ] || net=$(conf "$1" "$2")
  [ "$1" = default ] && ports=(-p 18080:80)
  start=$(date +%s%N)
  podman --log-level=error run --rm --network "$net" "${ports[@]}" --runtime runc \
    --ulimit nproc=1000:1000 --ulimit nofile=1000:1000 \
    --rootfs "$root" /bin/true </dev/null >/dev/null 2>"$work/err" \
    || { echo "podman run on $1 $2 failed:" >&2; cat "$work/err" >&2; exit 1; }
  echo "$1 $2 $(( ($(date +%s%N) - start) / 1000 ))" | awk '{printf "%s %s %.2f\n", $1, $2, $3 / 1000}'
}
# Warm-up: podman's first run makes its storage and state; each side's
# first run makes its bridge (and wasmcni's artifact cache is installed).
for v in plain default; do
  run "$v" none >/dev/null
  run "$v" wasmcni >/dev/null
  run "$v" reference >/dev/null
done
for i in $(seq 1 "$runs"); do
  for v in plain default; do
    if [ $((i % 2)) = 0 ]; then order="wasmcni reference none"; else order="reference none wasmcni"; fi
    for s in $order; do run "$v" "$s"; done
  done
done
# What is left after the runs: nothing of either side's containers.
echo "left veths $(ip -o link show type veth | wc -l) containers $(podman ps -aq | wc -l)"

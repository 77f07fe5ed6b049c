#!/bin/bash
# The podman benchmark's runs (tests/bench/podman.rs): `podman run --rm`
# with Debian's podman (4.3, CNI backend) on a bridge + host-local
# network, its plugins the reference's (/usr/lib/cni) or an installed
# wasmcni bin dir, the sides taking turns. Meant to run inside
# `unshare -n -m`: every path podman, CNI and wasmcni write to or read
# settings from is a tmpfs of this mount namespace, and the network is
# this process's own.
#   podman.sh WASMCNI BINDIR WORKDIR RUNS
# Output: one line per run, `VARIANT SIDE MS` (the `podman run` process,
# exec to exit), VARIANT `plain` (bridge with isGateway, host-local) or
# `default` (the list `podman network create` writes: bridge with ipMasq
# and hairpinMode, portmap, firewall, tuning; the container publishes a
# port), SIDE `wasmcni`, `reference` or `none` (`--network none`: podman
# and runc without CNI); then `left KEY VALUE ...`, what the runs left.
# A run fails the script when podman fails or reports any error (its
# network cleanup, DEL, only logs one), or when a wasmcni run made no
# wasmcni call or another side's run made one.
set -euo pipefail
shopt -s inherit_errexit
wasmcni=$1 bin=$2 work=$3 runs=$4
mount --make-rprivate /
# Only over directories that exist: a mountpoint made here would be a new
# directory on the machine. /etc/wasmcni (the machine's policy) too, when
# there is one; /run/wasmcni: wasmcni's locks, taken by podman's cleanup
# process too, which runs without this script's environment.
for d in /var/lib/containers /run/containers /run/libpod /etc/cni/net.d /var/lib/cni \
         /etc/containers/containers.conf.d /var/log/wasmcni /var/lib/wasmcni /run/netns \
         /run/wasmcni /etc/wasmcni; do
  if [ -d "$d" ]; then
    mount -t tmpfs -o mode=0755 tmpfs "$d"
  elif [ "$d" != /etc/wasmcni ]; then
    echo "podman.sh: $d does not exist; run tests/podman.rs first or create it" >&2
    exit 1
  fi
done
ip link set lo up
"$wasmcni" install "$bin" >/dev/null
root=$work/rootfs
mkdir -p "$root/bin"
cp /bin/busybox "$root/bin/busybox"
for c in sh true; do ln -sf busybox "$root/bin/$c"; done
audit=$work/audit.jsonl
export WASMCNI_AUDIT=$audit
: > "$audit"
# wasmcni's audit records: this script's log, and the default one (a tmpfs
# here), where podman's cleanup process, which runs DEL without this
# script's environment, has them written.
audited() { { cat "$audit"; cat /var/log/wasmcni/audit.jsonl 2>/dev/null || true; } | wc -l; }

# One network per variant and side, only it in /etc/cni/net.d while it
# runs (podman asks every member of every network for its VERSION on each
# run), and the side's plugin dir podman's only one. Sets $net.
conf() { # VARIANT SIDE
  local dir=$bin n=1 extra= more= fw='""'
  net=bench-$1-$2
  [ "$2" = reference ] && dir=/usr/lib/cni n=2 fw='"iptables"'
  if [ "$1" = default ]; then
    n=$((n + 2)) extra='"ipMasq": true, "hairpinMode": true,'
    more=', {"type": "portmap", "capabilities": {"portMappings": true}},
      {"type": "firewall", "backend": '$fw'}, {"type": "tuning"}'
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
}
run() { # VARIANT SIDE
  local start end calls ports=()
  net=none
  [ "$2" = none ] || conf "$1" "$2"
  [ "$1" = default ] && [ "$2" != none ] && ports=(-p 18080:80)
  calls=$(audited)
  start=$EPOCHREALTIME
  podman --log-level=error run --rm --network "$net" "${ports[@]}" --runtime runc \
    --ulimit nproc=1000:1000 --ulimit nofile=1000:1000 \
    --rootfs "$root" /bin/true </dev/null >/dev/null 2>"$work/err" \
    || { echo "podman run on $1 $2 failed:" >&2; cat "$work/err" >&2; exit 1; }
  end=$EPOCHREALTIME
  if [ -s "$work/err" ]; then
    echo "podman run on $1 $2 reported an error:" >&2; cat "$work/err" >&2; exit 1
  fi
  # wasmcni's runs, and only they, call wasmcni (its audit log).
  if [ "$2" = wasmcni ] && [ "$(audited)" -eq "$calls" ]; then
    echo "podman run on $1 $2 made no wasmcni call" >&2; exit 1
  elif [ "$2" != wasmcni ] && [ "$(audited)" -ne "$calls" ]; then
    echo "podman run on $1 $2 called wasmcni" >&2; exit 1
  fi
  awk -v v="$1" -v s="$2" -v a="$start" -v b="$end" 'BEGIN { printf "%s %s %.2f\n", v, s, (b - a) * 1000 }'
}
# Warm-up: podman's first run makes its storage and state; each side's
# first runs make its bridge and the firewall chains each side keeps on
# the node (wasmcni's firewall plugin hooks a chain of its own into
# iptables-nft's filter table once the reference's has made that table),
# and wasmcni's artifact cache is installed.
for _ in 1 2; do
  for v in plain default; do
    run "$v" none >/dev/null
    run "$v" wasmcni >/dev/null
    run "$v" reference >/dev/null
  done
done
# Without counters (-s): the rules, not the packets they saw.
rules_before=$(nft -s list ruleset 2>/dev/null)
records() { find /var/lib/wasmcni -type f -path '*attachments*' | wc -l; }
records_before=$(records)
orders=("wasmcni reference none" "reference none wasmcni" "none wasmcni reference")
for i in $(seq 1 "$runs"); do
  for v in plain default; do
    for s in ${orders[$((i % 3))]}; do run "$v" "$s"; done
  done
done
# What the runs left: no veth, container, reservation, wasmcni record,
# and the same firewall rules (nftables holds iptables-nft's too) as
# before them.
veths=$(ip -o link show type veth | wc -l)
containers=$(podman ps -aq)
containers=$(printf '%s' "$containers" | grep -c . || true)
reservations=$(find /var/lib/cni/networks -type f ! -name lock ! -name 'last_reserved_ip*' | wc -l)
records=$(( $(records) - records_before ))
rules_after=$(nft -s list ruleset 2>/dev/null)
same_rules=yes
[ "$rules_before" = "$rules_after" ] || same_rules=no
echo "left veths $veths containers $containers reservations $reservations records $records same-rules $same_rules"
if [ "$same_rules" = no ]; then
  diff <(printf '%s\n' "$rules_before") <(printf '%s\n' "$rules_after") | head -40 >&2 || true
fi

#!/bin/bash
# Runs a container with Debian's podman (4.3, CNI backend) on a macvlan +
# dhcp network served by an installed wasmcni bin dir, its lease from
# dnsmasq through `wasmcni dhcp-daemon` on the default socket and state
# directory (tmpfs of this mount namespace). dnsmasq serves on one end of a
# veth pair (`dsrv`), the macvlan master is the other end (`dup0`). Meant
# to run inside `unshare -n -m` (tests/podman.rs).
#   dhcp.sh WASMCNI BINDIR WORKDIR
set -euo pipefail
wasmcni=$1 bin=$2 work=$3
mount --make-rprivate /
for d in /var/lib/containers /run/containers /run/libpod /etc/cni/net.d /var/lib/cni \
         /etc/containers/containers.conf.d /var/log/wasmcni /var/lib/wasmcni /run/wasmcni; do
  mkdir -p "$d"
  mount -t tmpfs -o mode=0755 tmpfs "$d"
done
ip link set lo up
ip link add dsrv type veth peer name dup0
ip addr add 10.78.0.1/24 dev dsrv
ip link set dsrv up
ip link set dup0 up
leases=$work/dnsmasq.leases
dnsmasq --conf-file=/dev/null --keep-in-foreground --no-resolv --no-hosts --port=0 --no-ping \
  --bind-interfaces --interface=dsrv --dhcp-authoritative -u root \
  --dhcp-range=10.78.0.50,10.78.0.99,255.255.255.0,2m \
  --dhcp-option=option:T1,2 --dhcp-option=option:T2,4 \
  --dhcp-leasefile="$leases" --pid-file="$work/dnsmasq.pid" \
  --log-facility="$work/dnsmasq.log" --log-dhcp </dev/null &
server=$!
"$wasmcni" dhcp-daemon --timeout 5 --check-interval 1 2>"$work/daemon.log" </dev/null &
daemon=$!
trap 'kill $server $daemon 2>/dev/null; wait $server $daemon 2>/dev/null || true' EXIT
"$wasmcni" install "$bin" >/dev/null
for _ in $(seq 1 100); do [ -S /run/wasmcni/dhcp.sock ] && break; sleep 0.1; done
cat > /etc/containers/containers.conf.d/50-wasmcni.conf <<CONF
[network]
network_backend = "cni"
cni_plugin_dirs = ["$bin"]
CONF
cat > /etc/cni/net.d/dhcpnet.conflist <<'CONF'
{"cniVersion": "0.4.0", "name": "dhcpnet", "plugins": [
  {"type": "macvlan", "master": "dup0", "ipam": {"type": "dhcp"}}]}
CONF
root=$work/rootfs
mkdir -p "$root/bin"
cp /bin/busybox "$root/bin/busybox"
for c in sh ip sleep; do ln -sf busybox "$root/bin/$c"; done
echo "== run"
podman --log-level=error run --rm --network dhcpnet --runtime runc \
  --ulimit nproc=1000:1000 --ulimit nofile=1000:1000 \
  --rootfs "$root" /bin/sh -c 'ip -4 -o addr show eth0; sleep 7' </dev/null > "$work/ctr.out" &
pod=$!
lease=
for _ in $(seq 1 150); do
  lease=$(awk '{print $1, $3}' "$leases" 2>/dev/null | head -1)
  [ -n "$lease" ] && break
  sleep 0.1
done
echo "lease while running: $lease"
first=${lease%% *}
renewed=
for _ in $(seq 1 60); do
  now=$(awk '{print $1}' "$leases" 2>/dev/null | head -1)
  if [ -n "$now" ] && [ -n "$first" ] && [ "$now" -gt "$first" ]; then renewed=$now; break; fi
  sleep 0.1
done
echo "renewed: ${renewed:-no}"
wait "$pod"
echo "container: $(cat "$work/ctr.out")"
echo "== after"
for _ in $(seq 1 50); do [ -s "$leases" ] || break; sleep 0.1; done
echo "server leases: $(wc -l < "$leases")"
echo "daemon leases: $(ls /var/lib/wasmcni/dhcp | wc -l)"
echo "macvlans: $(ip -o link show type macvlan | wc -l)"
echo "== daemon log"
cat "$work/daemon.log"

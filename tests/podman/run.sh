#!/bin/bash
# Runs a container with Debian's podman (4.3, CNI backend) on a bridge +
# host-local network served by an installed wasmcni bin dir. Meant to run
# inside `unshare -n -m` (tests/podman.rs): every path podman and CNI
# write to is a tmpfs of this mount namespace, and the network is this
# process's own.
#   run.sh WASMCNI BINDIR WORKDIR
set -euo pipefail
wasmcni=$1 bin=$2 work=$3
mount --make-rprivate /
for d in /var/lib/containers /run/containers /run/libpod /etc/cni/net.d /var/lib/cni \
         /etc/containers/containers.conf.d; do
  mkdir -p "$d"
  mount -t tmpfs tmpfs "$d"
done
ip link set lo up
"$wasmcni" install "$bin" >/dev/null
cat > /etc/containers/containers.conf.d/50-wasmcni.conf <<CONF
[network]
network_backend = "cni"
cni_plugin_dirs = ["$bin"]
CONF
cat > /etc/cni/net.d/wasmnet.conflist <<'CONF'
{"cniVersion": "0.4.0", "name": "wasmnet", "plugins": [
  {"type": "bridge", "bridge": "cni-wasm0", "isGateway": true,
   "ipam": {"type": "host-local", "subnet": "10.59.0.0/24", "routes": [{"dst": "0.0.0.0/0"}]}}]}
CONF
root=$work/rootfs
mkdir -p "$root/bin"
cp /bin/busybox "$root/bin/busybox"
for c in sh ip ping; do ln -sf busybox "$root/bin/$c"; done
export WASMCNI_AUDIT=$work/audit.jsonl
echo "== run"
podman --log-level=error run --rm --network wasmnet --runtime runc \
  --ulimit nproc=1000:1000 --ulimit nofile=1000:1000 --cap-add NET_RAW \
  --rootfs "$root" /bin/sh -c 'ip -4 addr show eth0; ping -c 1 -W 2 10.59.0.1'
echo "== after"
echo "reservations: $(ls /var/lib/cni/networks/wasmnet | tr '\n' ' ')"
echo "veths: $(ip -o link show type veth | wc -l)"
echo "audit: $(grep -c '"plugin":"bridge"' "$work/audit.jsonl") bridge calls"

#!/bin/bash
# Runs tests/cri/cri.py (a CRI client that starts Debian's containerd 1.6
# and drives its CRI plugin as the kubelet does) in a sandbox of its own.
# Meant to run inside `unshare -n -m` (tests/cri.rs, tests/bench/cri.rs):
# the network is this process's own, and every path containerd, its shims,
# runc, the CNI plugins and wasmcni write to outside WORKDIR is a tmpfs of
# this mount namespace, so the node's own state is never touched.
#   sandbox.sh WASMCNI WORKDIR cases reference|wasmcni
#   sandbox.sh WASMCNI WORKDIR bench RUNS
#   sandbox.sh WASMCNI WORKDIR soak SEED SECONDS
# WASMCNI is installed into WORKDIR/bin (`wasmcni install`), the bin dir
# containerd's CNI uses on the wasmcni side; the reference side uses
# Debian's plugins in /usr/lib/cni.
set -euo pipefail
wasmcni=$1 work=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
mount --make-rprivate /
# /run (so /var/run): containerd's shim sockets (/run/containerd/s), runc's
# state (/run/containerd/runc) and the pods' network namespaces
# (/var/run/netns) are there whatever containerd's own root and state
# say. /var/lib/cni: host-local's reservations and libcni's result cache.
# /var/log/wasmcni and /var/lib/wasmcni: containerd runs the plugins in
# its own environment, so wasmcni's audit log and attachment records are
# at their defaults. The soak fills the state directory: a small one.
for d in /run /var/lib/cni /var/log/wasmcni /var/lib/wasmcni /etc/cni/net.d; do
  mkdir -p "$d"
  size=""
  [ "$d $1" = "/var/lib/wasmcni soak" ] && size=",size=16m"
  mount -t tmpfs -o "mode=0755$size" tmpfs "$d"
done
mkdir -p /run/netns
ip link set lo up
mkdir -p "$work/tmp"
export TMPDIR=$work/tmp
# containerd hands its environment to the plugins: wasmcni's audit log,
# records, run dir and policy are at their defaults, which are this
# sandbox's (the cases read them there), whatever the caller had set.
unset WASMCNI_AUDIT WASMCNI_STATE_DIR WASMCNI_RUN_DIR WASMCNI_POLICY WASMCNI_POLICY_DIR \
  WASMCNI_PLUGIN_DIR WASMCNI_FAULT
# (WASMCNI_CACHE_DIR, if set, is where install puts the compiled plugins
# and where they load from: containerd passes its environment on.)
if [ "$1 ${2:-}" != "cases reference" ]; then
  "$wasmcni" install "$work/bin" >"$work/install.log" 2>&1 || {
    cat "$work/install.log" >&2
    exit 1
  }
fi
# The client's protobuf and gRPC code, compiled now from tests/cri/cri.proto
# (Debian's python3-grpc-tools); nothing generated is kept in the tree.
gen=$work/gen
mkdir -p "$gen"
/usr/bin/python3 -m grpc_tools.protoc -I"$here" --python_out="$gen" --grpc_python_out="$gen" \
  "$here/cri.proto"
export WASMCNI_EXE="$wasmcni" PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 "$here/cri.py" "$work" "$gen" "$@"

#!/bin/bash
# Runs `podman run` N times on networks whose chain fails ADD after bridge
# (host-local IPAM, ipMasq) has made its veth, address and masquerade
# rule, and reports, per network, what is left after podman's own cleanup
# (it runs the list's DEL right after the failed ADD). Meant to run inside
# `unshare -n -m` (tests/podman.rs), as run.sh: every path podman, CNI and
# wasmcni write to is a tmpfs of this mount namespace, the network is this
# process's own.
#   failing.sh WASMCNI BINDIR WORKDIR N
# Each case is IMPL FAILER:
#   IMPL    reference (Debian's plugins, /usr/lib/cni), wasmcni (the same
#           list served by an installed wasmcni bin dir) or chain (the same
#           members as one wasmcni-chain plugin);
#   FAILER  tuning (a sysctl that does not exist: ADD fails, DEL succeeds)
#           or portmap (a config it cannot parse, `"snat": "yes"`: ADD
#           fails; the reference's DEL fails too, and libcni's DEL stops
#           there, before bridge's; wasmcni's DEL succeeds).
# Output, per case, one line of `key value` pairs (and one more line for
# runs that did not fail in the failing plugin's ADD):
#   case IMPL FAILER: subnet 10.60.I tries N failed-add K ms T reservations R ...
set -euo pipefail
wasmcni=$1 bin=$2 work=$3 tries=$4
mount --make-rprivate /
# As run.sh, and /run/netns too: podman's container namespaces (which this
# test counts) are made there.
for d in /var/lib/containers /run/containers /run/libpod /etc/cni/net.d /var/lib/cni \
         /etc/containers/containers.conf.d /var/log/wasmcni /var/lib/wasmcni /run/netns /run/wasmcni; do
  mkdir -p "$d"
  mount -t tmpfs -o mode=0755 tmpfs "$d"
done
ip link set lo up
"$wasmcni" install "$bin" >/dev/null
root=$work/rootfs
mkdir -p "$root/bin"
cp /bin/busybox "$root/bin/busybox"
ln -sf busybox "$root/bin/sh"

# wasmcni's attachment records.
records() { { find /var/lib/wasmcni/attachments -type f 2>/dev/null || true; } | wc -l; }

i=0
for impl in reference wasmcni chain; do
  for failer in tuning portmap; do
    i=$((i + 1))
    net=fail-$impl-$failer
    subnet=10.60.$i
    case $impl in
      reference) dir=/usr/lib/cni ;;
      *) dir=$bin ;;
    esac
    cat > /etc/containers/containers.conf.d/50-wasmcni.conf <<CONF
[network]
network_backend = "cni"
cni_plugin_dirs = ["$dir"]
CONF
    bridge='{"type": "bridge", "bridge": "cni-fail'$i'", "isGateway": true, "ipMasq": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
               "ranges": [[{"subnet": "'$subnet'.0/24", "gateway": "'$subnet'.1"}]]}}'
    case $failer in
      tuning) bad='{"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.no_such_setting": "1"}}' ;;
      portmap) bad='{"type": "portmap", "capabilities": {"portMappings": true}, "snat": "yes"}' ;;
    esac
    case $impl in
      chain) plugins='{"type": "wasmcni-chain", "capabilities": {"portMappings": true},
                       "plugins": ['"$bridge, $bad"']}' ;;
      *) plugins="$bridge, $bad" ;;
    esac
    # Only this case's network: podman asks every list member of every
    # network for its VERSION on each run.
    rm -f /etc/cni/net.d/*.conflist
    echo '{"cniVersion": "0.4.0", "name": "'$net'", "plugins": ['"$plugins"']}' \
      > "/etc/cni/net.d/$net.conflist"
    export WASMCNI_AUDIT=$work/audit-$net.jsonl
    records_before=$(records)
    failed=0 other=
    start=$(date +%s%N)
    for _ in $(seq 1 "$tries"); do
      if podman --log-level=error run --rm --network "$net" --runtime runc \
           --ulimit nproc=1000:1000 --ulimit nofile=1000:1000 \
           --rootfs "$root" /bin/sh -c true </dev/null >/dev/null 2>"$work/err"; then
        other="${other}a run succeeded; "
      elif grep -q "failed (add)" "$work/err" && grep -q "$failer" "$work/err"; then
        failed=$((failed + 1))
      else
        other="${other}$(head -c 300 "$work/err" | tr '\n' ' '); "
      fi
    done
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    data=/var/lib/cni/networks/$net
    reservations=$(ls "$data" 2>/dev/null | grep -cv -e '^lock$' -e '^last_reserved_ip' || true)
    last=$(cat "$data/last_reserved_ip.0" 2>/dev/null || echo none)
    # Firewall rules naming the network's addresses: wasmcni's nftables
    # table, and iptables (the reference's masquerade chains, commented
    # with the network's name).
    nft_rules=$( (nft list table inet wasmcni 2>/dev/null || true) | grep -c "$subnet\." || true)
    ipt_rules=$(iptables-save 2>/dev/null | grep -c "name: \\\\\"$net\\\\\"" || true)
    # The containers wasmcni's bridge ran ADD for (its audit records).
    adds=$( { grep -h '"plugin":"bridge"' "$WASMCNI_AUDIT" 2>/dev/null | grep '"command":"ADD"' \
                | grep -o '"container_id":"[0-9a-f]*"' || true; } | sort -u | wc -l)
    # A host veth whose container end is in a removed namespace goes with
    # that namespace, which the kernel tears down in a work queue after
    # podman has returned: the reference's DEL (stopped at portmap) never
    # deletes it, and a count taken at once can still see the last try's
    # (a CI run did). Wait for it, at most 5 s; a veth still there then is
    # one nothing will remove.
    veths=$(ip -o link show type veth | wc -l)
    for _ in $(seq 1 50); do
      [ "$veths" -eq 0 ] && break
      sleep 0.1
      veths=$(ip -o link show type veth | wc -l)
    done
    echo "case $impl $failer: subnet $subnet tries $tries failed-add $failed ms $ms" \
         "reservations $reservations last-reserved $last" \
         "veths $veths" \
         "nft-rules $nft_rules iptables-rules $ipt_rules" \
         "records $(( $(records) - records_before ))" \
         "netns $(ls /run/netns | wc -l) containers $(podman ps -aq | wc -l)" \
         "wasmcni-bridge-adds $adds"
    [ -z "$other" ] || echo "other outcomes of $impl $failer: $other"
  done
done
echo "== iptables"
iptables-save
echo "== nftables"
nft list ruleset
echo "== wasmcni records"
find /var/lib/wasmcni -type f -print -exec cat {} \; -exec echo \;

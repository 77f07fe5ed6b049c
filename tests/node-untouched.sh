#!/usr/bin/env bash
# Runs the command given (the test suite) and fails when it changed the
# node's own CNI or wasmcni state: every test keeps its audit log, records,
# reservations and configs in its own directories or in a sandbox's tmpfs.
# The roots themselves may appear (the podman tests mount tmpfs on them);
# anything below them, and the default audit log, must stay as it was.
set -uo pipefail
roots=(/var/log/wasmcni /var/lib/wasmcni /var/lib/cni /run/cni /etc/cni/net.d /opt/cni/bin)
snapshot() {
  local r
  for r in "${roots[@]}"; do
    [ -d "$r" ] && find "$r" -mindepth 1 -printf '%p %y %s %T@\n' 2>/dev/null
  done | sort
}
before=$(snapshot)
"$@"
rc=$?
after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "node-untouched: the tests changed the node's own state (< before, > after):" >&2
  diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") | head -40 >&2
  [ "$rc" -eq 0 ] && rc=1
fi
exit "$rc"

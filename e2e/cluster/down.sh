#!/usr/bin/env bash
# Stops local clusters started by up.sh.  down.sh NAME | down.sh --all (also etcd, and wipes state)
set -uo pipefail
root=${SKEWER_E2E_STATE:-/tmp/skewer-e2e}
stop() { [ -f "$1" ] && kill "$(cat "$1")" 2>/dev/null; rm -f "$1"; }
if [ "${1:-}" = "--all" ]; then
  for d in "$root"/*/; do
    [ -d "$d" ] || continue
    stop "$d/controller-manager.pid"; stop "$d/apiserver.pid"
  done
  stop "$root/etcd.pid"
  sleep 1
  rm -rf "$root"
else
  d=$root/${1:?name or --all}
  stop "$d/controller-manager.pid"; stop "$d/apiserver.pid"
fi

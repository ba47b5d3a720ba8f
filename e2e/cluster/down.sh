#!/usr/bin/env bash
# Stops local clusters started by up.sh.  down.sh NAME | down.sh --all (also etcd, and wipes state)
set -uo pipefail
root=${SKEWER_E2E_STATE:-/tmp/skewer-e2e}
# A stopped server is a gone process: an API server in graceful shutdown refuses new
# connections but goes on serving the ones it has, which a test of "unreachable" must not see.
stop() {
  [ -f "$1" ] || return 0
  local pid; pid=$(cat "$1"); rm -f "$1"
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}
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

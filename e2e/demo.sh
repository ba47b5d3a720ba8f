#!/usr/bin/env bash
# The demo: a real local cluster, the bundled example repo served by git daemon on loopback,
# and skewer syncing it: apply, self-heal, prune, and the history of what it deployed. Leaves
# nothing running unless --keep.
set -euo pipefail
cd "$(dirname "$0")/.."
keep=false; [ "${1:-}" = "--keep" ] && keep=true

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
wait_for() { # wait_for DESCRIPTION TIMEOUT_S COMMAND...
  local what=$1 t=$2; shift 2
  for _ in $(seq 1 $((t * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "timed out waiting for $what" >&2; return 1
}

say "installing the cluster binaries (first run only; cached in ~/.cache/skewer)"
bash e2e/cluster/install.sh
say "building skewer"
cargo build --quiet -p skewer-agent --bin skewer
skewer=$PWD/target/debug/skewer

export SKEWER_E2E_STATE=/tmp/skewer-demo SKEWER_ETCD_PORT=23890
work=$(mktemp -d /tmp/skewer-demo-repo.XXXXXX)
cleanup() {
  [ -n "${skewer_pid:-}" ] && kill "$skewer_pid" 2>/dev/null
  [ -n "${daemon_pid:-}" ] && kill "$daemon_pid" 2>/dev/null
  if ! $keep; then bash e2e/cluster/down.sh --all; rm -rf "$work"; fi
}
trap cleanup EXIT

say "starting a Kubernetes 1.20 control plane on loopback"
export KUBECONFIG
KUBECONFIG=$(bash e2e/cluster/up.sh demo)
kubectl apply -f deploy/crds.yaml
kubectl wait --for=condition=Established crd/gitrepositories.skewer.dev crd/ocirepositories.skewer.dev crd/kustomizations.skewer.dev >/dev/null

say "serving the example repo with git daemon on 127.0.0.1"
git init -q --bare "$work/srv/demo.git"
cp -r e2e/demo/repo "$work/checkout"
g() { git -C "$work/checkout" -c user.name=demo -c user.email=demo@skewer.dev "$@"; }
g init -q -b main && g add -A && g commit -qm "example app" && g push -q "$work/srv/demo.git" main
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
git daemon --export-all --reuseaddr --listen=127.0.0.1 --port="$port" --base-path="$work/srv" "$work/srv" &
daemon_pid=$!
wait_for "git daemon" 10 git ls-remote "git://127.0.0.1:$port/demo.git"

say "starting skewer"
"$skewer" run --data-dir "$work/data" >"$work/skewer.log" 2>&1 &
skewer_pid=$!
sed "s|\${REPO_URL}|git://127.0.0.1:$port/demo.git|" e2e/demo/skewer.yaml | kubectl apply -f -
kubectl wait --for=condition=Ready kustomization/demo --timeout=60s
kubectl get gitrepositories,kustomizations
kubectl get all,configmaps -n demo -l skewer.dev/name=demo
echo "replicas after the JSON patch: $(kubectl get deploy hello -n demo -o jsonpath='{.spec.replicas}')"

say "self-heal: deleting ConfigMap demo/greeting behind skewer's back"
kubectl delete configmap greeting -n demo
start=$(date +%s%N)
wait_for "greeting to come back" 30 kubectl get configmap greeting -n demo
echo "restored after $(( ($(date +%s%N) - start) / 1000000 )) ms (seen by a watch, not at the next interval)"

say "prune: removing apps/extra.yaml from Git"
g rm -q apps/extra.yaml && g commit -qm "drop extra" && g push -q "$work/srv/demo.git" main
wait_for "extra to be pruned" 30 bash -c '! kubectl get configmap extra -n demo'
kubectl get configmaps -n demo -l skewer.dev/name=demo
kubectl get kustomization demo -o jsonpath='{range .status.inventory.objects[*]}{@}{"\n"}{end}'

say "history: the two revisions the Kustomization deployed"
wait_for "the second deployment" 30 bash -c '[ -n "$(kubectl get kustomization demo -o jsonpath="{.status.history[1].id}")" ]'
"$skewer" history ks/demo -n default

say "done"
if $keep; then
  echo "left running: KUBECONFIG=$KUBECONFIG, skewer pid $skewer_pid (log $work/skewer.log)"
  trap - EXIT
fi

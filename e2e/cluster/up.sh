#!/usr/bin/env bash
# Starts a local Kubernetes 1.20 control plane on loopback: one shared etcd, and for each
# cluster NAME an API server (its own --etcd-prefix) and a controller manager.
#   e2e/cluster/up.sh NAME [PORT]     prints the kubeconfig path on stdout
#   SKEWER_ETCD_FSYNC=1 makes etcd durable (fsync per write), for benchmarks.
# State lives in ${SKEWER_E2E_STATE:-/tmp/skewer-e2e}/NAME; stop with e2e/cluster/down.sh.
set -euo pipefail

name=${1:-hub}
port=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
cache=${SKEWER_CACHE:-$HOME/.cache/skewer}
root=${SKEWER_E2E_STATE:-/tmp/skewer-e2e}
state=$root/$name
bin=$cache/bin
etcd_port=${SKEWER_ETCD_PORT:-23790}

log() { printf '[cluster %s] %s\n' "$name" "$*" >&2; }

[ -x "$bin/kube-apiserver" ] || bash "$here/install.sh" >&2

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

mkdir -p "$root" "$state"
# Tests skip fsync for speed; benchmarks set SKEWER_ETCD_FSYNC=1 for a durable etcd, whose
# per-write fsync is what sequential clients (kubectl) pay on real clusters.
fsync_flag=--unsafe-no-fsync
[ "${SKEWER_ETCD_FSYNC:-0}" = 1 ] && fsync_flag=
if ! alive "$root/etcd.pid"; then
  log "starting etcd on 127.0.0.1:$etcd_port"
  rm -rf "$root/etcd-data"
  etcd --data-dir "$root/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-cluster "default=http://127.0.0.1:$((etcd_port + 1))" \
    $fsync_flag --quota-backend-bytes 4294967296 >"$root/etcd.log" 2>&1 &
  echo $! >"$root/etcd.pid"
fi

if alive "$state/apiserver.pid"; then
  log "already running"
  echo "$state/kubeconfig"
  exit 0
fi

if [ -z "$port" ]; then
  # Pick a free port deterministically per name so reruns reuse it.
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
fi

[ -f "$state/sa.key" ] || openssl genrsa -out "$state/sa.key" 2048 2>/dev/null
# A client CA, so tests can mint client certificates (CN: user, O: group) with openssl.
if [ ! -f "$state/client-ca.crt" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=skewer-e2e-client-ca-$name" \
    -keyout "$state/client-ca.key" -out "$state/client-ca.crt" 2>/dev/null
fi
[ -f "$state/admin.token" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/admin.token"
admin=$(cat "$state/admin.token")
# An admin; skewer's own identity (so the audit log tells its requests apart); and a user
# with no rights at all (for tests of what is refused).
printf '%s,admin,1000,"system:masters"\n%s-skewer,skewer,1002,"system:masters"\n%s-nobody,nobody,1001\n' \
  "$admin" "$admin" "$admin" >"$state/tokens.csv"

log "starting kube-apiserver on 127.0.0.1:$port"
"$bin/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$etcd_port" --etcd-prefix "/cluster-$name" \
  --bind-address 127.0.0.1 --secure-port "$port" --cert-dir "$state/certs" \
  --token-auth-file "$state/tokens.csv" --client-ca-file "$state/client-ca.crt" --authorization-mode RBAC \
  --service-account-key-file "$state/sa.key" --service-account-signing-key-file "$state/sa.key" \
  --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.96.0.0/16 \
  --enable-priority-and-fairness=false --max-requests-inflight 1000 --max-mutating-requests-inflight 500 \
  --audit-log-path "$state/audit.log" --audit-policy-file "$here/audit-policy.yaml" \
  --audit-log-maxsize 200 --audit-log-maxbackup 1 \
  >"$state/apiserver.log" 2>&1 &
echo $! >"$state/apiserver.pid"
echo "$port" >"$state/port"

for _ in $(seq 1 120); do
  if [ -s "$state/certs/apiserver.crt" ] && curl -sk --max-time 1 -H "Authorization: Bearer $admin" "https://127.0.0.1:$port/readyz" 2>/dev/null | grep -q '^ok$'; then
    break
  fi
  alive "$state/apiserver.pid" || { tail -n 30 "$state/apiserver.log" >&2; exit 1; }
  sleep 0.5
done

ca=$(base64 -w0 <"$state/certs/apiserver.crt")
cat >"$state/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: $name
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $ca
users:
- name: admin
  user:
    token: $admin
contexts:
- name: $name
  context: {cluster: $name, user: admin, namespace: default}
current-context: $name
KC

# The same cluster as the user `skewer`.
sed "s/token: $admin\$/token: $admin-skewer/" "$state/kubeconfig" >"$state/skewer.kubeconfig"

log "starting kube-controller-manager"
"$bin/kube-controller-manager" \
  --kubeconfig "$state/kubeconfig" --service-account-private-key-file "$state/sa.key" \
  --root-ca-file "$state/certs/apiserver.crt" --controllers '*,-nodelifecycle' --leader-elect=false \
  --port 0 --secure-port 0 --use-service-account-credentials=false \
  >"$state/controller-manager.log" 2>&1 &
echo $! >"$state/controller-manager.pid"

# Ready when the ServiceAccount controller made `default` in the default namespace.
for _ in $(seq 1 120); do
  if KUBECONFIG=$state/kubeconfig kubectl get serviceaccount default -n default >/dev/null 2>&1; then
    log "ready: KUBECONFIG=$state/kubeconfig"
    echo "$state/kubeconfig"
    exit 0
  fi
  sleep 0.5
done
tail -n 30 "$state/controller-manager.log" >&2
exit 1

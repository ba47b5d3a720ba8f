#!/usr/bin/env bash
# Runs the benchmarks on a cluster of their own with a durable etcd (fsync on, as in real
# clusters), then stops it. Arguments go to the bench binary (--objects, --runs, --concurrency).
# SKEWER_BIN runs another build of skewer than this tree's release build (to compare two
# builds with --baseline). SKEWER_BENCH picks another bench binary: clusters_bench (hub and
# spokes), apps_bench, appset_bench (an ApplicationSet over many clusters), kustomize_bench,
# git_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
bash e2e/cluster/install.sh
bench=${SKEWER_BENCH:-bench}
cargo build --quiet --release -p skewer-agent --bin skewer -p skewer-e2e --bin "$bench"
export SKEWER_BIN=${SKEWER_BIN:-$PWD/target/release/skewer} SKEWER_ETCD_FSYNC=1
export SKEWER_E2E_STATE=/tmp/skewer-bench SKEWER_ETCD_PORT=23990
bash e2e/cluster/down.sh --all >/dev/null 2>&1 || true
trap 'bash e2e/cluster/down.sh --all >/dev/null 2>&1' EXIT
"./target/release/$bench" "$@"

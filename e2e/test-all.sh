#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a used one:
#   formatting and lints, unit tests, integration tests against real git servers, and
#   end-to-end tests against a real Kubernetes 1.20 API server started on loopback.
# First run installs packages and builds the cluster binaries (cached in ~/.cache/skewer).
set -euo pipefail
cd "$(dirname "$0")/.."

# A clean build gains nothing from incremental state; it only costs disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

step() { printf '\n==> %s\n' "$*"; }

step "installing the test cluster's binaries and peers (cached)"
bash e2e/cluster/install.sh

step "rustfmt and clippy"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "building"
cargo build --workspace --all-targets --quiet
export SKEWER_BIN=$PWD/target/debug/skewer

# A cluster of our own, apart from any a developer has running.
export SKEWER_E2E_STATE
SKEWER_E2E_STATE=$(mktemp -d /tmp/skewer-test.XXXXXX)
export SKEWER_ETCD_PORT
SKEWER_ETCD_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
trap 'bash e2e/cluster/down.sh --all >/dev/null 2>&1' EXIT
step "starting the local clusters: a hub and two spokes on one etcd"
for name in hub spoke-a spoke-b; do bash e2e/cluster/up.sh "$name" >/dev/null; done

step "tests"
cargo test --workspace --quiet

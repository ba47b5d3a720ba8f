#!/usr/bin/env bash
# Installs what the real test cluster and the loopback peers need, once per machine:
# Debian packages (etcd, Go 1.19, git daemon), and kube-apiserver + kube-controller-manager
# 1.20.2 built from Debian's own `kubernetes` source package. Everything built is cached
# under ${SKEWER_CACHE:-~/.cache/skewer}; a second run is a no-op.
set -euo pipefail

cache=${SKEWER_CACHE:-$HOME/.cache/skewer}
bin=$cache/bin
mkdir -p "$bin"

log() { printf '[install] %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_pkgs=()
command -v etcd >/dev/null || need_pkgs+=(etcd-server)
[ -x /usr/lib/go-1.19/bin/go ] || need_pkgs+=(golang-1.19-go)
command -v rsync >/dev/null || need_pkgs+=(rsync)
command -v jq >/dev/null || need_pkgs+=(jq)
command -v dpkg-source >/dev/null || need_pkgs+=(dpkg-dev)
command -v openssl >/dev/null || need_pkgs+=(openssl)
command -v curl >/dev/null || need_pkgs+=(curl)
# Kubernetes 1.20 vendors reflect2 1.0.1, whose map iteration segfaults when built with
# Go >= 1.18 (the API server crashes encoding custom resources); Debian ships the fix.
[ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || need_pkgs+=(golang-github-modern-go-reflect2-dev)
# `git daemon` ships in Debian's git-daemon-sysvinit/git packages; the machine's git may lack it.
git daemon --help >/dev/null 2>&1 || need_pkgs+=(git)
# Peers of the Git source tests: sshd (deploy keys), gpg (signed commits and tags).
[ -x /usr/sbin/sshd ] || need_pkgs+=(openssh-server)
command -v ssh >/dev/null || need_pkgs+=(openssh-client)
command -v gpg >/dev/null || need_pkgs+=(gnupg)
# Peers of the OCI source tests: a registry (distribution 2.8), htpasswd for its basic auth,
# skopeo to push artifacts written by another tool.
command -v docker-registry >/dev/null || need_pkgs+=(docker-registry)
command -v htpasswd >/dev/null || need_pkgs+=(apache2-utils)
command -v skopeo >/dev/null || need_pkgs+=(skopeo)
# The dashboard's tests drive a real browser (headless, through the DevTools protocol).
command -v chromium >/dev/null || need_pkgs+=(chromium)

if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "apt-get install ${need_pkgs[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# Bump when the build below changes, so cached binaries are rebuilt.
build_id="1.20.2 reflect2-1.0.2"
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] && [ "$(cat "$bin/build-id" 2>/dev/null)" = "$build_id" ]; then
  log "cluster binaries cached in $bin"
  exit 0
fi

# deb-src entries made from the machine's own sources, so no host name is written here.
src_list=/etc/apt/sources.list.d/skewer-deb-src.sources
if [ ! -f "$src_list" ]; then
  log "adding deb-src entries ($src_list)"
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | as_root tee "$src_list" >/dev/null
  as_root apt-get update -qq
fi

work=$cache/src
mkdir -p "$work"
cd "$work"
tree=$(find . -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
if [ -z "$tree" ]; then
  log "apt-get source kubernetes"
  apt-get source -qq kubernetes >/dev/null
  tree=$(find . -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
fi
tree=$(cd "$tree" && pwd)

gopath=$work/gopath
mkdir -p "$gopath/src/k8s.io"
ln -sfn "$tree" "$gopath/src/k8s.io/kubernetes"

cd "$gopath/src/k8s.io/kubernetes"
log "replacing vendored reflect2 1.0.1 with Debian's 1.0.2"
rsync -a --delete --exclude '*_test.go' --exclude 'go.mod' --exclude 'go.sum' --exclude 'test*/' \
  /usr/share/gocode/src/github.com/modern-go/reflect2/ vendor/github.com/modern-go/reflect2/
# A failed generator step leaves a zero-byte binary behind; start clean if nothing finished.
[ -x _output/bin/kube-apiserver ] || rm -rf _output
log "building kube-apiserver and kube-controller-manager (about 9 minutes on 2 cores)"
PATH=/usr/lib/go-1.19/bin:$PATH GOPATH=$gopath GOCACHE=$work/gocache CGO_ENABLED=0 \
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >"$work/build.log" 2>&1 || {
    tail -n 40 "$work/build.log" >&2
    exit 1
  }
install -m 0755 _output/bin/kube-apiserver _output/bin/kube-controller-manager "$bin/"
echo "$build_id" >"$bin/build-id"
log "installed into $bin"

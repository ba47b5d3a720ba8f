#!/usr/bin/env bash
# Builds skewer's image without a container engine: an OCI image layout assembled from a built
# binary and the files it needs at run time, taken from this machine's own Debian packages
# (the ssh client and its libraries, CA certificates), with the same user, entrypoint and
# layout as image/Containerfile. Optionally pushes it with skopeo.
#
#   image/build.sh [--binary target/release/skewer] [--tag ghcr.io/skewer-dev/skewer:v0.1.0]
#                  [--out target/image] [--push docker://localhost:5000/skewer:v0.1.0 [--insecure]]
#
# The layer is reproducible: files sorted, owned by root, timestamps at SOURCE_DATE_EPOCH (0).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
binary=$here/../target/release/skewer
tag=ghcr.io/skewer-dev/skewer:v$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../Cargo.toml" | head -1)
out=$here/../target/image
push=
insecure=
while [ $# -gt 0 ]; do
  case $1 in
    --binary) binary=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --push) push=$2; shift 2 ;;
    --insecure) insecure=1; shift ;;
    *) echo "image/build.sh: unknown argument $1 (see the comment at its top)" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || { echo "image/build.sh: no binary at $binary; build it first (cargo build --release)" >&2; exit 3; }
command -v ssh >/dev/null || { echo "image/build.sh: the ssh client is needed (apt-get install openssh-client)" >&2; exit 3; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
rootfs=$root/rootfs
mkdir -p "$rootfs"/{usr/local/bin,usr/bin,etc/ssl/certs,data,tmp}
strip -o "$rootfs/usr/local/bin/skewer" "$binary" 2>/dev/null || cp "$binary" "$rootfs/usr/local/bin/skewer"
cp "$(command -v ssh)" "$rootfs/usr/bin/ssh"
# Every shared library the two programs load, and the dynamic loader, at their own paths.
for lib in $( (ldd "$binary"; ldd "$(command -v ssh)") | awk '/=> \//{print $3} /^[ \t]*\/lib/{print $1}' | sort -u); do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nskewer:x:65532:65532:skewer:/data:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nskewer:x:65532:\n' >"$rootfs/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
chmod 1777 "$rootfs/tmp"

python3 "$here/layout.py" --rootfs "$rootfs" --tag "$tag" --out "$out"
echo "image/build.sh: $tag in $out ($(du -sh "$out" | cut -f1))" >&2
if [ -n "$push" ]; then
  flags=()
  [ -n "$insecure" ] && flags+=(--dest-tls-verify=false)
  skopeo copy --quiet "${flags[@]}" "oci:$out:${tag##*:}" "$push"
  echo "image/build.sh: pushed $push" >&2
fi

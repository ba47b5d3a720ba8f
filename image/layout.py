#!/usr/bin/env python3
"""Writes an OCI image layout holding one image: ROOTFS as a single reproducible layer (sorted,
owned by root, timestamps at SOURCE_DATE_EPOCH or 0, gzip without a name or time), and the
config of image/Containerfile (user 65532, entrypoint skewer, `run --data-dir=/data`).

    layout.py --rootfs DIR --tag REPOSITORY:TAG --out DIR
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile


def layer(rootfs, mtime):
    """The rootfs as an uncompressed tar, entries sorted and normalised."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in dirnames + sorted(filenames):
                paths.append(os.path.join(dirpath, name))
        for path in sorted(paths, key=lambda p: os.path.relpath(p, rootfs)):
            info = tar.gettarinfo(path, arcname=os.path.relpath(path, rootfs))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = mtime
            if info.isfile():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def blob(out, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rootfs", required=True)
    p.add_argument("--tag", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = "1970-01-01T00:00:00Z" if mtime == 0 else None
    if created is None:
        import datetime
        created = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(os.path.join(args.out, "blobs", "sha256"))
    tar = layer(args.rootfs, mtime)
    compressed = io.BytesIO()
    with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0, filename="") as gz:
        gz.write(tar)
    layer_bytes = compressed.getvalue()
    layer_digest = blob(args.out, layer_bytes)
    version = args.tag.rsplit(":", 1)[-1]
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": "65532:65532",
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/data"],
            "Entrypoint": ["/usr/local/bin/skewer"],
            "Cmd": ["run", "--data-dir=/data"],
            "WorkingDir": "/data",
            "Labels": {
                "org.opencontainers.image.title": "skewer",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.description": "GitOps reconciler: keeps clusters in step with Git.",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
        "history": [{"created": created, "created_by": "image/build.sh"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = blob(args.out, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest, "size": len(layer_bytes)}],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = blob(args.out, manifest_bytes)
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": len(manifest_bytes),
            "annotations": {
                "org.opencontainers.image.ref.name": version,
                "io.containerd.image.name": args.tag,
            },
        }],
    }
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(args.out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    print(manifest_digest)


if __name__ == "__main__":
    main()

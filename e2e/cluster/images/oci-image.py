#!/usr/bin/env python3
"""Writes a one-layer OCI image (an image-layout tar) from local files, with no registry and no
container engine: what `ctr images import` loads into a real node's containerd.

    oci-image.py --name localhost/x:tag --out x.tar [--user 65532:65532] [--entrypoint /bin]
        [--env K=V ...] [--file SRC:DEST[:MODE] ...] [--dir DEST:MODE ...]

The layer is deterministic (sorted entries, zero mtimes, root-owned), so the same inputs give the
same image digest. Layout: oci-layout, index.json (its manifest annotated with
io.containerd.image.name, the name containerd gives the image), blobs/sha256/{layer,config,
manifest}.
"""

import argparse
import hashlib
import io
import json
import sys
import tarfile


def layer(files, dirs):
    """The uncompressed layer tar: every parent directory, then the files."""
    entries = {}
    for dest, mode in dirs:
        entries[dest.strip("/")] = ("dir", None, mode)
    for src, dest, mode in files:
        entries[dest.strip("/")] = ("file", src, mode)
    for path in list(entries):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            entries.setdefault("/".join(parts[:i]), ("dir", None, 0o755))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(entries):
            kind, src, mode = entries[path]
            info = tarfile.TarInfo(path)
            info.mode, info.mtime, info.uid, info.gid = mode, 0, 0, 0
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                with open(src, "rb") as f:
                    data = f.read()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def descriptor(media_type, data):
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="image reference, e.g. localhost/pause:e2e")
    p.add_argument("--out", required=True)
    p.add_argument("--user", default="")
    p.add_argument("--entrypoint", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--file", action="append", default=[], help="SRC:DEST[:MODE(octal)]")
    p.add_argument("--dir", action="append", default=[], help="DEST:MODE(octal)")
    args = p.parse_args()

    files = []
    for spec in args.file:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            sys.exit(f"oci-image: --file {spec}: expected SRC:DEST[:MODE]")
        files.append((parts[0], parts[1], int(parts[2], 8) if len(parts) == 3 else 0o644))
    dirs = []
    for spec in args.dir:
        dest, _, mode = spec.partition(":")
        dirs.append((dest, int(mode or "755", 8)))
    try:
        layer_tar = layer(files, dirs)
    except OSError as e:
        sys.exit(f"oci-image: {e}")

    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": args.user,
            "Entrypoint": args.entrypoint or None,
            "Env": ["PATH=/"] + args.env,
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
        "history": [{"created_by": "e2e/cluster/images/oci-image.py"}],
    }
    config_json = canonical(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", config_json),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", layer_tar)],
    }
    manifest_json = canonical(manifest)
    tag = args.name.rsplit(":", 1)[-1] if ":" in args.name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            dict(
                descriptor("application/vnd.oci.image.manifest.v1+json", manifest_json),
                annotations={"io.containerd.image.name": args.name, "org.opencontainers.image.ref.name": tag},
            )
        ],
    }
    blobs = [layer_tar, config_json, manifest_json]
    with tarfile.open(args.out, mode="w") as out:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            out.addfile(info, io.BytesIO(data))

        add("oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        add("index.json", canonical(index))
        for data in blobs:
            add("blobs/sha256/" + hashlib.sha256(data).hexdigest(), data)
    print(f"{args.name} {manifest['config']['digest']} -> {args.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes a one-layer OCI image (an image-layout tar) from local files, with no registry and no
container engine: what `ctr images import` loads into a real node's containerd.

    oci-image.py --name localhost/x:tag --out x.tar [--user 65532:65532] [--entrypoint /bin]
        [--env K=V ...] [--file SRC:DEST[:MODE] ...] [--dir DEST:MODE ...]

With --platform (repeated), one image per platform under one image index (a multi-arch image):
--file and --dir go into every platform's layer, --arch-file ARCH:SRC:DEST[:MODE] into that
architecture's only (its binaries); --gzip compresses the layers (a release pushed to a
registry). index.json then points to the image index, and the last line printed is its digest.

    oci-image.py --inspect x.tar    lists the platforms, digests and layers of an image tar and
                                    checks every blob's digest and the ELF machine of its files

The layer is deterministic (sorted entries, zero mtimes, root-owned; gzip without a timestamp
or name), so the same inputs give the same image digest. Layout: oci-layout, index.json (its
manifest or image index annotated with io.containerd.image.name, the name containerd gives the
image), blobs/sha256/{layers,configs,manifests[,index]}.
"""

import argparse
import gzip
import hashlib
import io
import json
import sys
import tarfile

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
LAYER_GZIP = LAYER + "+gzip"
# The ELF e_machine of each architecture's executables: a layer of the wrong one is refused.
ELF_MACHINE = {"amd64": 0x3E, "arm64": 0xB7}


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


def image(arch, layer_tar, args):
    """One platform's image: (its manifest, the blobs it references)."""
    config = {
        "architecture": arch,
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
    if args.gzip:
        # mtime=0 and no file name: the compressed bytes depend on the layer (and zlib) only.
        blob, media_type = gzip.compress(layer_tar, compresslevel=6, mtime=0), LAYER_GZIP
    else:
        blob, media_type = layer_tar, LAYER
    config_json = canonical(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": descriptor(CONFIG, config_json),
        "layers": [descriptor(media_type, blob)],
    }
    return canonical(manifest), [blob, config_json]


def parse_file(spec, option):
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        sys.exit(f"oci-image: {option} {spec}: expected SRC:DEST[:MODE]")
    return (parts[0], parts[1], int(parts[2], 8) if len(parts) == 3 else 0o644)


def build(args):
    files = [parse_file(spec, "--file") for spec in args.file]
    arch_files = {arch: [] for arch in args.platform}
    for spec in args.arch_file:
        arch, _, rest = spec.partition(":")
        if arch not in arch_files:
            sys.exit(f"oci-image: --arch-file {spec}: {arch} is not one of the --platform given")
        arch_files[arch].append(parse_file(rest, "--arch-file"))
    if len(arch_files) != len(args.platform):
        sys.exit("oci-image: --platform: each architecture once")
    if arch_files.keys() - ELF_MACHINE.keys():
        sys.exit(f"oci-image: --platform: one of {', '.join(ELF_MACHINE)} expected")
    dirs = []
    for spec in args.dir:
        dest, _, mode = spec.partition(":")
        dirs.append((dest, int(mode or "755", 8)))

    blobs, platforms = [], []
    try:
        for arch in args.platform or ["amd64"]:
            manifest_json, image_blobs = image(arch, layer(files + arch_files.get(arch, []), dirs), args)
            blobs += image_blobs + [manifest_json]
            platforms.append((arch, manifest_json))
    except OSError as e:
        sys.exit(f"oci-image: {e}")

    if args.platform:
        image_index = {
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [
                dict(descriptor(MANIFEST, manifest_json), platform={"architecture": arch, "os": "linux"})
                for arch, manifest_json in platforms
            ],
        }
        top_json = canonical(image_index)
        blobs.append(top_json)
        top = descriptor(INDEX, top_json)
    else:
        top = descriptor(MANIFEST, platforms[0][1])
    tag = args.name.rsplit(":", 1)[-1] if ":" in args.name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            dict(top, annotations={"io.containerd.image.name": args.name, "org.opencontainers.image.ref.name": tag})
        ],
    }
    with tarfile.open(args.out, mode="w") as out:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            out.addfile(info, io.BytesIO(data))

        add("oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        add("index.json", canonical(index))
        written = set()
        for data in blobs:
            digest = hashlib.sha256(data).hexdigest()
            if digest not in written:  # platforms may share a blob (an identical layer)
                written.add(digest)
                add("blobs/sha256/" + digest, data)
    if args.platform:
        for arch, manifest_json in platforms:
            print(f"{args.name} linux/{arch} {descriptor(MANIFEST, manifest_json)['digest']}")
        print(f"{args.name} image index -> {args.out}")
        print(top["digest"])
    else:
        config = json.loads(platforms[0][1])["config"]
        print(f"{args.name} {config['digest']} -> {args.out}")


def inspect(path):
    """Prints what an image tar holds; exits non-zero on a blob whose digest or ELF machine is
    wrong."""
    problems = []
    with tarfile.open(path) as tar:
        def read(name):
            member = tar.extractfile(name)
            if member is None:
                sys.exit(f"oci-image: {path}: {name} is not a file")
            return member.read()

        def blob(desc):
            algorithm, _, digest = desc["digest"].partition(":")
            data = read(f"blobs/{algorithm}/{digest}")
            if hashlib.sha256(data).hexdigest() != digest or len(data) != desc["size"]:
                problems.append(f"blob {desc['digest']} does not match its descriptor")
            return data

        def show_image(desc, label):
            manifest = json.loads(blob(desc))
            config = json.loads(blob(manifest["config"]))
            arch = config.get("architecture")
            if label and label != f"{config.get('os')}/{arch}":
                problems.append(f"{label}: its config says {config.get('os')}/{arch}")
            entry = " ".join(config["config"].get("Entrypoint") or [])
            print(f"  {config.get('os')}/{arch} {desc['digest']} user={config['config'].get('User')!s} entrypoint={entry}")
            for layer_desc in manifest["layers"]:
                data = blob(layer_desc)
                if layer_desc["mediaType"].endswith("+gzip"):
                    data = gzip.decompress(data)
                with tarfile.open(fileobj=io.BytesIO(data)) as layer_tar:
                    members = layer_tar.getmembers()
                    for member in members:
                        if not member.isfile():
                            continue
                        head = layer_tar.extractfile(member).read(20)
                        if head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") != ELF_MACHINE.get(arch):
                            problems.append(f"{config.get('os')}/{arch}: /{member.name} is an ELF for another machine")
                print(f"    layer {layer_desc['digest']} {layer_desc['mediaType'].rsplit('.', 1)[-1]} "
                      f"{layer_desc['size']} bytes, {len(members)} entries")

        top = json.loads(read("index.json"))["manifests"]
        for desc in top:
            name = desc.get("annotations", {}).get("io.containerd.image.name", "")
            print(f"{name} {desc['mediaType'].split('.')[-2]} {desc['digest']}")
            if desc["mediaType"] == INDEX:
                for child in json.loads(blob(desc))["manifests"]:
                    platform = child.get("platform", {})
                    show_image(child, f"{platform.get('os')}/{platform.get('architecture')}")
            else:
                show_image(desc, None)
    for problem in problems:
        print(f"oci-image: {path}: {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inspect", metavar="TAR", help="list an image tar's platforms and digests")
    p.add_argument("--name", help="image reference, e.g. localhost/pause:e2e")
    p.add_argument("--out")
    p.add_argument("--user", default="")
    p.add_argument("--entrypoint", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--file", action="append", default=[], help="SRC:DEST[:MODE(octal)]")
    p.add_argument("--dir", action="append", default=[], help="DEST:MODE(octal)")
    p.add_argument("--platform", action="append", default=[], help="ARCH (amd64, arm64): one image per platform under an image index")
    p.add_argument("--arch-file", action="append", default=[], help="ARCH:SRC:DEST[:MODE(octal)]: only in ARCH's image")
    p.add_argument("--gzip", action="store_true", help="gzip the layers")
    args = p.parse_args()
    if args.inspect:
        inspect(args.inspect)
    elif args.name and args.out:
        if args.arch_file and not args.platform:
            p.error("--arch-file needs --platform")
        build(args)
    else:
        p.error("--name and --out, or --inspect, are required")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The krew manifest of the kubectl-zone plugin, for the archives of a release.

    python3 mk/krew.py --version X.Y.Z --dist DIR [--download URL]

writes the manifest (krew's index.krew.dev/v1alpha2 Plugin) of the archives
DIR/kubectl-zone-X.Y.Z-linux-{amd64,arm64}.tar.gz on stdout, each platform with its archive's
address (URL/vX.Y.Z/<archive>) and sha256. `--check FILE` checks a manifest: one platform per
architecture, every field krew requires, a sha256 of 64 hex digits. Exits non-zero with one line
on stderr when an archive is missing or a check fails.
"""
import argparse
import hashlib
import json
import os
import re
import sys

ARCHES = ("amd64", "arm64")
DOWNLOAD = "https://github.com/zone-aware-controllers/zone-aware-controllers/releases/download"
HOMEPAGE = "https://github.com/zone-aware-controllers/zone-aware-controllers"


def die(message):
    sys.exit(f"krew: {message}")


def archive(version, arch):
    return f"kubectl-zone-{version}-linux-{arch}.tar.gz"


def manifest(version, dist, download):
    platforms = []
    for arch in ARCHES:
        path = os.path.join(dist, archive(version, arch))
        if not os.path.isfile(path):
            die(f"{path} is missing")
        with open(path, "rb") as f:
            sha256 = hashlib.sha256(f.read()).hexdigest()
        platforms.append({
            "selector": {"matchLabels": {"os": "linux", "arch": arch}},
            "uri": f"{download}/v{version}/{archive(version, arch)}",
            "sha256": sha256,
            "files": [
                {"from": "kubectl-zone", "to": "."},
                {"from": "kubectl_complete-zone", "to": "."},
                {"from": "LICENSE", "to": "."},
            ],
            "bin": "kubectl-zone",
        })
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": "zone"},
        "spec": {
            "version": f"v{version}",
            "homepage": HOMEPAGE,
            "shortDescription": "Preview what the zone-aware controllers will do",
            "description": (
                "Read-only previews of the zone-aware controllers' plans: the batches a\n"
                "ZoneAwareUpdate removes next, the evictions a drain would meet under the\n"
                "ZoneDisruptionBudgets, and the targets a ShardedPrometheus resize would move.\n"
            ),
            "platforms": platforms,
        },
    }


def check(path):
    with open(path) as f:
        plugin = json.load(f)
    spec = plugin.get("spec", {})
    if plugin.get("kind") != "Plugin" or plugin.get("metadata", {}).get("name") != "zone":
        die(f"{path}: not the Plugin zone")
    for field in ("version", "homepage", "shortDescription", "platforms"):
        if not spec.get(field):
            die(f"{path}: spec.{field} is missing")
    arches = sorted(p["selector"]["matchLabels"]["arch"] for p in spec["platforms"])
    if arches != sorted(ARCHES):
        die(f"{path}: platforms {arches}, not {list(ARCHES)}")
    for platform in spec["platforms"]:
        if not re.fullmatch(r"[0-9a-f]{64}", platform.get("sha256", "")):
            die(f"{path}: a platform without a sha256")
        if platform.get("bin") != "kubectl-zone" or not platform.get("uri", "").endswith(".tar.gz"):
            die(f"{path}: a platform without its bin or archive")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--version")
    parser.add_argument("--dist")
    parser.add_argument("--download", default=DOWNLOAD)
    parser.add_argument("--check")
    args = parser.parse_args()
    if args.check:
        check(args.check)
        return
    if not args.version or not args.dist:
        die("--version and --dist are required")
    # krew reads YAML; JSON is YAML, and needs nothing beyond the standard library.
    json.dump(manifest(args.version, args.dist, args.download.rstrip("/")), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()

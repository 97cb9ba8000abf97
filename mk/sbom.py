#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM (JSON) of the release, from the real dependency graph.

Reads `cargo metadata` (the resolved graph of the workspace, from Cargo.lock) and Cargo.lock (the
checksums) and lists every package of Cargo.lock: the crates the shipped binaries link
(`scope: required`, normal dependencies reachable from the binaries on the release platforms)
and the others, build scripts, proc macros and test-only crates (`scope: excluded`), with their
version, purl, license expression, SHA-256 and dependencies.

    python3 mk/sbom.py --version 1.2.3 --bins "zdb-controller zau-controller ..." > sbom.json
    python3 mk/sbom.py --check sbom.json     # every package of Cargo.lock is listed

Exits non-zero with one line on stderr when cargo metadata fails or the check finds a package
missing.
"""

import argparse
import json
import os
import subprocess
import sys
import tomllib
import uuid
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]


def fail(message):
    print(f"sbom: {message}", file=sys.stderr)
    sys.exit(1)


def cargo_metadata(platform=None):
    command = ["cargo", "metadata", "--format-version", "1", "--locked"]
    if platform:
        command += ["--filter-platform", platform]
    try:
        out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as error:
        fail(f"cargo metadata failed: {error.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def lock_packages():
    with open(ROOT / "Cargo.lock", "rb") as lock:
        return tomllib.load(lock).get("package", [])


def shipped(metadata, bins):
    """Package ids reachable from the binaries' targets through normal dependencies."""
    nodes = {node["id"]: node for node in metadata["resolve"]["nodes"]}
    roots = [
        package["id"]
        for package in metadata["packages"]
        if any(t["name"] in bins and "bin" in t["kind"] for t in package["targets"])
    ]
    missing = set(bins) - {
        t["name"] for p in metadata["packages"] for t in p["targets"] if "bin" in t["kind"]
    }
    if missing:
        fail(f"no binary target named {', '.join(sorted(missing))}")
    seen, stack = set(), list(roots)
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for dep in nodes[current]["deps"]:
            if any(kind["kind"] is None for kind in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    return seen


def purl(package):
    return f"pkg:cargo/{package['name']}@{package['version']}"


def build(version, bins):
    full = cargo_metadata()
    required = set()
    for platform in PLATFORMS:
        required |= shipped(cargo_metadata(platform), bins)
    checksums = {
        (p["name"], p["version"]): p.get("checksum") for p in lock_packages()
    }
    workspace = set(full["workspace_members"])
    components = []
    for package in sorted(full["packages"], key=lambda p: (p["name"], p["version"])):
        component = {
            "type": "application" if package["id"] in workspace else "library",
            "bom-ref": package["id"],
            "name": package["name"],
            "version": package["version"],
            "scope": "required" if package["id"] in required else "excluded",
            "purl": purl(package),
        }
        if package.get("license"):
            component["licenses"] = [{"expression": package["license"]}]
        checksum = checksums.get((package["name"], package["version"]))
        if checksum:
            component["hashes"] = [{"alg": "SHA-256", "content": checksum}]
        if package.get("repository"):
            component["externalReferences"] = [{"type": "vcs", "url": package["repository"]}]
        components.append(component)
    dependencies = [
        {"ref": node["id"], "dependsOn": sorted({dep["pkg"] for dep in node["deps"]})}
        for node in sorted(full["resolve"]["nodes"], key=lambda n: n["id"])
    ]
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    stamp = datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        # Reproducible: the same version and Cargo.lock give the same serial number.
        "serialNumber": "urn:uuid:"
        + str(uuid.uuid5(uuid.NAMESPACE_URL, f"zone-aware-controllers/{version}/{len(components)}")),
        "version": 1,
        "metadata": {
            "timestamp": stamp,
            "component": {
                "type": "application",
                "bom-ref": f"zone-aware-controllers@{version}",
                "name": "zone-aware-controllers",
                "version": version,
                "purl": f"pkg:oci/zone-aware-controllers@{version}",
                "licenses": [{"expression": "Apache-2.0"}],
            },
            "properties": [{"name": "binaries", "value": " ".join(sorted(bins))}],
        },
        "components": components,
        "dependencies": dependencies,
    }


def check(path):
    sbom = json.loads(Path(path).read_text())
    listed = {(c["name"], c["version"]) for c in sbom.get("components", [])}
    locked = {(p["name"], p["version"]) for p in lock_packages()}
    missing = sorted(locked - listed)
    if missing:
        fail(f"{path} lacks {len(missing)} packages of Cargo.lock, e.g. {missing[:3]}")
    required = sum(1 for c in sbom["components"] if c.get("scope") == "required")
    print(f"sbom: {path} lists all {len(locked)} packages of Cargo.lock ({required} shipped in the binaries)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version")
    parser.add_argument("--bins", help="the shipped binaries, space separated")
    parser.add_argument("--check", metavar="SBOM")
    args = parser.parse_args()
    if args.check:
        check(args.check)
        return
    if not args.version or not args.bins:
        fail("--version and --bins are required (or --check SBOM)")
    json.dump(build(args.version, set(args.bins.split())), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

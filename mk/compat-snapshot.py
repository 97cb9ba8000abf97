#!/usr/bin/env python3
"""Snapshots what a release put in its users' hands, for `make crd-compat`.

    mk/compat-snapshot.py VERSION COMMIT

writes crates/api/tests/compat/VERSION/: crds.yaml (the released commit's config/crd CRDs) and,
mirrored by path, every YAML file of that commit that holds an object of the project's API group (samples, the
goldens' inputs, fixtures) and the YAML blocks of its Markdown documents (docs/zau.md ->
docs/zau.md.yaml). Run once when a version is released; the check then reads the snapshot,
so a clone without the tag's history can still run it.
"""
import pathlib
import re
import subprocess
import sys

# A document that is an object of the group: its top-level apiVersion names it.
OBJECT = re.compile(r"^apiVersion:\s*[\"']?zonecontrol\.k8s\.aws/", re.M)
ROOT = pathlib.Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```ya?ml\s*\n(.*?)^```", re.M | re.S)


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: mk/compat-snapshot.py VERSION COMMIT")
    # The released commit, named as versions.sh pins it: a clone need not carry the tag.
    tag, commit = sys.argv[1], sys.argv[2]
    commit = git("rev-parse", "--verify", f"{commit}^{{commit}}").strip()
    out = ROOT / "crates/api/tests/compat" / tag
    if out.exists():
        sys.exit(f"{out} exists: a release's snapshot is written once")
    files = git("ls-tree", "-r", "--name-only", commit).splitlines()
    written = 0
    crds = [f for f in files if f.startswith("config/crd/") and f.endswith(".yaml")
            and "kustomization" not in f]
    snapshot = {"crds.yaml": "\n---\n".join(git("show", f"{commit}:{f}") for f in crds)}
    for path in files:
        if path.startswith("config/crd/") or not path.endswith((".yaml", ".yml", ".md")):
            continue
        text = git("show", f"{commit}:{path}")
        if not OBJECT.search(text):
            continue
        if path.endswith(".md"):
            blocks = [b for b in FENCE.findall(text) if OBJECT.search(b)]
            if blocks:
                snapshot[path + ".yaml"] = "\n---\n".join(blocks)
        else:
            snapshot[path] = text
    for path, text in sorted(snapshot.items()):
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        header = f"# {tag} ({commit[:12]}): {path.removesuffix('.md.yaml') + ('.md' if path.endswith('.md.yaml') else '')}\n"
        target.write_text(header + text)
        written += 1
    print(f"{out}: {written} files")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Import cycles between the modules of each crate of bins/ and crates/.

A module depends on another when its non-test code names it by a `crate::` or `super::` path
(in a `use` or inline); a module's own descendants and ancestors do not count (`mod` and
`use super::*` in tests are the module tree, not a dependency). Prints each strongly connected
set of modules of more than one, then the count. Exits 1 with --check when there is any.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r"\b(crate|super)((?:::\w+)+)(::\{[^;]*?\})?")
TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{")


def modules(src):
    """Module path ('' for the crate root) -> file, test files and src/bin/ left out."""
    found = {}
    for file in src.rglob("*.rs"):
        parts = list(file.relative_to(src).with_suffix("").parts)
        if parts[0] == "bin" or parts[-1] == "tests":
            continue
        if parts in (["lib"], ["main"]):
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        found["::".join(parts)] = file
    return found


def without_tests(text):
    """The text without comments and `#[cfg(test)] mod … { … }` blocks."""
    text = re.sub(r"//[^\n]*", "", text)
    kept, at = [], 0
    while match := TEST_MODULE.search(text, at):
        kept.append(text[at:match.start()])
        depth, at = 1, match.end()
        while at < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[at], 0)
            at += 1
    kept.append(text[at:])
    return "".join(kept)


def owner(path, known):
    """The longest module path of `known` that `path` starts with."""
    parts = path.split("::")
    for n in range(len(parts), 0, -1):
        if "::".join(parts[:n]) in known:
            return "::".join(parts[:n])
    return ""


def related(a, b):
    return not a or not b or a == b or a.startswith(b + "::") or b.startswith(a + "::")


def dependencies(known):
    graph = {module: set() for module in known}
    for module, file in known.items():
        parent = module.split("::")[:-1] if module else []
        for match in PATH.finditer(without_tests(file.read_text())):
            base = [] if match.group(1) == "crate" else parent
            full = base + match.group(2)[2:].split("::")
            targets = [full]
            for item in (match.group(3) or "::{}")[3:-1].split(","):
                item = item.strip().split(" as ")[0].strip()
                if item and item != "self" and not item.startswith("{"):
                    targets.append(full + item.split("::"))
            for target in targets:
                found = owner("::".join(target), known)
                if not related(module, found):
                    graph[module].add(found)
    return graph


def cycles(graph):
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    total = 0
    crates = sorted(p for d in ("bins", "crates") for p in (ROOT / d).iterdir() if (p / "src").is_dir())
    for crate in crates:
        graph = dependencies(modules(crate / "src"))
        for component in cycles(graph):
            total += 1
            print(f"{crate.relative_to(ROOT)}: {' <-> '.join(component)}")
            for module in component:
                print(f"    {module} -> {', '.join(sorted(graph[module] & set(component)))}")
    print(f"import cycles: {total}")
    if total and "--check" in sys.argv:
        sys.exit(1)


if __name__ == "__main__":
    main()

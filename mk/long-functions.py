#!/usr/bin/env python3
"""The production functions of bins/ and crates/ longer than a limit.

A function's length is its lines from the `fn` line to its closing brace, blank and comment lines
included: what a reader scrolls through. Production code is `src/` less `src/bin/`, `tests.rs` /
`tests/` modules and `#[cfg(test)]` items; a function nested in another counts inside its owner
only. Prints each function over --warn (default 60) lines, longest first, then the counts over
--warn and over --limit (default 80). Exits 1 with --check when any is over --limit.
"""
import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FN = re.compile(r"\bfn\s+(\w+)")
CFG_TEST = re.compile(r"#\[cfg\((?:all\()?test\b")
TEST_MOD = re.compile(r"#\[cfg\((?:all\()?test\b[^\]]*\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def code_only(text):
    """The text with comments, strings and char literals blanked (newlines kept), so that only
    the code's own braces remain."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif raw := re.match(r'b?r(#*)"', text[i:i + 260]):
            if i and (text[i - 1].isalnum() or text[i - 1] == "_"):
                out.append(c)
                i += 1
                continue
            close = '"' + raw.group(1)
            end = text.find(close, i + raw.end())
            end = n if end < 0 else end + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'" and (char := re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])):
            out.append(" " * char.end())
            i += char.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(code, at):
    """The index just past the brace that closes the one at `at`."""
    depth = 0
    for j in range(at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if not depth:
                return j + 1
    return len(code)


def test_spans(code):
    """(start, end) of the items under `#[cfg(test)]`."""
    spans = []
    for match in CFG_TEST.finditer(code):
        brace, semi = code.find("{", match.end()), code.find(";", match.end())
        if brace >= 0 and (semi < 0 or brace < semi):
            spans.append((match.start(), matching(code, brace)))
    return spans


def functions(path):
    """(name, first line, lines) of each outermost production function of a file."""
    code = code_only(path.read_text())
    skipped = test_spans(code)
    found, at = [], 0
    while match := FN.search(code, at):
        start = match.start()
        if any(a <= start < b for a, b in skipped):
            at = match.end()
            continue
        # The body opens at the first `{` after the signature; a `;` first is a declaration.
        depth, j = 0, match.end()
        while j < len(code):
            if code[j] in "([<":
                depth += 1
            elif code[j] in ")]>" and not (code[j] == ">" and code[j - 1] == "-"):
                depth -= 1
            elif code[j] == ";" and depth <= 0:
                break
            elif code[j] == "{" and depth <= 0:
                break
            j += 1
        if j >= len(code) or code[j] == ";":
            at = match.end()
            continue
        end = matching(code, j)
        first = code.count("\n", 0, start) + 1
        last = code.count("\n", 0, end - 1) + 1
        found.append((match.group(1), first, last - first + 1))
        at = end
    return found


def test_only_modules(path):
    """The files and folders of the modules `path` declares under `#[cfg(test)]`."""
    here = path.parent if path.stem in ("main", "lib", "mod") else path.with_suffix("")
    for match in TEST_MOD.finditer(code_only(path.read_text())):
        yield here / f"{match.group(1)}.rs"
        yield here / match.group(1)


def production_files():
    for group in ("bins", "crates"):
        for crate in sorted((ROOT / group).iterdir()):
            src = crate / "src"
            files = sorted(src.rglob("*.rs"))
            test_only = {module for path in files for module in test_only_modules(path)}
            for path in files:
                parts = path.relative_to(src).parts
                if parts[0] == "bin" or "tests" in parts or path.stem == "tests":
                    continue
                if any(path == module or module in path.parents for module in test_only):
                    continue
                yield path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("--warn", type=int, default=60)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    long = sorted(
        ((lines, f"{path.relative_to(ROOT)}:{line}", name)
         for path in production_files()
         for name, line, lines in functions(path)
         if lines > args.warn),
        reverse=True,
    )
    for lines, where, name in long:
        print(f"{lines:4} {where} {name}")
    over = sum(1 for lines, _, _ in long if lines > args.limit)
    print(f"functions over {args.warn} lines: {len(long)}; over {args.limit}: {over}")
    if over and args.check:
        print(f"long-functions: {over} production function(s) over {args.limit} lines", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Runs the long measurements (latency percentiles, memory, stress repetitions) that stay out of
# CI. Each e2e/perf/<name>.sh (but lib.sh, which they share) is one measurement; `make perf
# PERF=zau` runs only the matching ones.
# Every script prints its figures on stdout and exits non-zero when a target is missed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
filter="${1:-}"
failed=()
for script in "$here"/*.sh; do
    name="$(basename "$script" .sh)"
    case "$name" in run | lib) continue ;; esac
    [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
    echo "== perf: $name"
    bash "$script" || failed+=("$name")
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "perf: targets missed by: ${failed[*]}" >&2
    exit 1
fi

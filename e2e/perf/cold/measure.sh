#!/usr/bin/env bash
# The cold measurements: `make run` or `.ci/run` on a fresh clone of HEAD (no tags) with every
# cache empty, as on a new machine: the project's cache dir (the cargo target dir, the Go-built
# tools, LocalStack's virtualenv), the Go module and build caches, cargo's registry and pip's
# cache all live in a scratch dir for the run. Prints the elapsed time against the target
# (`make run` 12 min, `.ci/run` 60 min) and exits 1 when it is missed.
#
#   e2e/perf/cold/measure.sh run|ci        (make perf-cold COLD=run|ci)
#
# Not in `make perf` (e2e/perf/run.sh runs e2e/perf/*.sh only): it brings up a cluster of its own,
# so the checkout's must be down, and it takes an hour with the CI run. Needs about 20 GB free.
# The scratch dir is removed at the end (COLD_KEEP=1 keeps it, with the run's log).
set -euo pipefail
what="${1:-}"
case "$what" in
run) target=720 ;;
ci) target=3600 ;;
*) echo "usage: $0 run|ci" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "$0")/../../.." && pwd)"
if [ -f "$root/e2e/.cluster/env" ]; then
    echo "cold $what: the local cluster of $root is up: make cluster-down first" >&2
    exit 1
fi
scratch="$(mktemp -d "${TMPDIR:-/tmp}/zone-aware-cold.XXXXXX")"
clone="$scratch/clone"
finish() {
    # make run leaves its cluster up; .ci/run takes its own down.
    if [ -f "$clone/e2e/.cluster/env" ]; then
        (cd "$clone" && XDG_CACHE_HOME="$scratch/cache" make cluster-down >/dev/null 2>&1) || true
    fi
    if [ "${COLD_KEEP:-0}" = 1 ]; then
        echo "cold $what: kept $scratch (the run's log: $scratch/log)"
    else
        rm -rf "$scratch"
    fi
}
trap finish EXIT
git clone --quiet --no-tags "$root" "$clone"
echo "cold $what: $(git -C "$clone" rev-parse --short HEAD), caches in $scratch"
cd "$clone"
export XDG_CACHE_HOME="$scratch/cache" GOMODCACHE="$scratch/gomod" CARGO_HOME="$scratch/cargo"
unset CARGO_TARGET_DIR GOCACHE
start=$SECONDS
status=0
case "$what" in
run) make run 2>&1 | tee "$scratch/log" || status=$? ;;
ci) CI=true bash .ci/run 2>&1 | tee "$scratch/log" || status=$? ;;
esac
elapsed=$((SECONDS - start))
if [ "$status" != 0 ]; then
    echo "cold $what: failed (exit $status) after $elapsed s" >&2
    exit 1
fi
printf 'cold %s: %d s (%d min %02d s), target %d s\n' "$what" "$elapsed" $((elapsed / 60)) \
    $((elapsed % 60)) "$target"
[ "$elapsed" -le "$target" ] || { echo "cold $what: over the target" >&2; exit 1; }

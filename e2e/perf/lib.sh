# Shared by the measurements (sourced; run.sh skips this file): the local cluster's env, the
# release binaries they run, and passing SIGINT/SIGTERM on to the step running.

# perf_setup NAME BINARY...: cd to the checkout, load the local cluster's env, check that the
# release BINARYs are built and point the e2e harness at them (E2E_BIN_DIR). Sets `root` and
# `release`.
perf_setup() {
    local name="$1" binary env_file
    shift
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    cd "$root"
    env_file="$root/e2e/.cluster/env"
    # PERF_NO_CLUSTER=1: a measurement of processes on this host only (the federator's), best
    # run with the cluster down: its idle control plane and nodes take a fifth of the 2 cores.
    if [ "${PERF_NO_CLUSTER:-0}" = 1 ] && [ ! -f "$env_file" ]; then
        env_file=/dev/null
    elif [ ! -f "$env_file" ]; then
        echo "$name perf: no local cluster ($env_file missing): run \`make local-crds\` (or \`make perf\`)" >&2
        exit 1
    fi
    # shellcheck disable=SC1090
    source "$env_file"
    release="${CARGO_TARGET_DIR:-$root/target}/release"
    for binary in "$@"; do
        if [ ! -x "$release/$binary" ]; then
            echo "$name perf: $release/$binary missing: run \`cargo build --release --workspace --bins\`" >&2
            exit 1
        fi
    done
    # The controller processes the drivers and the e2e tests start: the release builds.
    export E2E_BIN_DIR="$release"
}

child=""
# The drivers delete their namespaces and stop their controllers when they end or get SIGINT or
# SIGTERM (an e2e test cleans up through its Drop guards when it ends): a signal sent to the
# script is passed on to the step running, and its clean-up awaited.
stop_child() {
    if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
}
trap 'stop_child; exit 130' INT TERM
# Runs a step in the background (so that a trapped signal interrupts the wait), returns its status.
run_step() {
    "$@" &
    child=$!
    local status=0
    wait "$child" || status=$?
    child=""
    return "$status"
}

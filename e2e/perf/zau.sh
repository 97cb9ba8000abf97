#!/usr/bin/env bash
# ZoneAwareUpdate controller measurements (run by `make perf`, which starts the local cluster and
# builds the release binaries first). The zau_perf driver (e2e/src/bin/zau_perf.rs) runs the
# release zau-controller against the local zonal cluster:
#
# 1. Latency: rollouts of a 60-pod StatefulSet until >= 100 batch boundaries; from the API
#    server's audit log, the time from the last pod of a batch turning Ready (kwok's pods/status
#    write) to the next batch's first eviction. Targets: p50 <= 100 ms, p99 <= 500 ms.
# 2. Memory: 3,000 pods in 10 watched StatefulSets, a rollout on each; VmHWM <= 50 MiB.
#
# Settings: the ZAU_PERF_* variables of the driver (see its header). Prints the figures; exits
# non-zero when a target is missed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

env_file="$root/e2e/.cluster/env"
if [ ! -f "$env_file" ]; then
    echo "zau perf: no local cluster ($env_file missing): run \`make cluster-up\` (or \`make perf\`)" >&2
    exit 1
fi
# shellcheck disable=SC1090
source "$env_file"

release="${CARGO_TARGET_DIR:-$root/target}/release"
for binary in zau_perf zau-controller; do
    if [ ! -x "$release/$binary" ]; then
        echo "zau perf: $release/$binary missing: run \`cargo build --release --workspace --bins\`" >&2
        exit 1
    fi
done
# The controller the driver starts: the release build.
export E2E_BIN_DIR="$release"

echo "-- zau rollout latency and memory (load: $(cut -d' ' -f1-3 /proc/loadavg) at start, $(nproc) CPUs)"
# The driver deletes its namespace and stops its controller on SIGINT/SIGTERM; pass them on.
"$release/zau_perf" &
driver=$!
trap 'kill -TERM "$driver" 2>/dev/null; wait "$driver"; exit 130' INT TERM
wait "$driver"

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
source "$(dirname "$0")/lib.sh"
perf_setup zau zau_perf zau-controller

echo "-- zau rollout latency and memory (load: $(cut -d' ' -f1-3 /proc/loadavg) at start, $(nproc) CPUs)"
run_step "$release/zau_perf"

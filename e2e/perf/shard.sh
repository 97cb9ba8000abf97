#!/usr/bin/env bash
# ShardedPrometheus controller measurements (run by `make perf`, which starts the local cluster
# and builds the release binaries first). The shard_perf driver (e2e/src/bin/shard_perf.rs) runs
# the release shard-controller against the local zonal cluster:
#
# 1. CPU: a 100-shard ShardedPrometheus (2 replicas each) created, then its scrape configs
#    changed; the controller's CPU time for each until every child is applied and observed.
#    Target: <= 1 s each.
# 2. Memory: with the 200 Prometheus pods Ready (kwok), VmHWM <= 50 MiB.
#
# Then the sharding benchmark (criterion): balance at 12 shards / 3 zones over 1,000,000 targets
# (max/mean <= 1.05, asserted) and the movement per step 1 -> 64 shards.
#
# Settings: the SHARD_PERF_* variables of the driver (see its header). Prints the figures; exits
# non-zero when a target is missed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
perf_setup shard shard_perf shard-controller

echo "-- shard controller CPU and memory (load: $(cut -d' ' -f1-3 /proc/loadavg) at start, $(nproc) CPUs)"
run_step "$release/shard_perf"
echo "-- sharding balance and movement (criterion bench)"
run_step "${CARGO:-cargo}" bench --quiet -p zone-topology --bench sharding -- --noplot 2>&1 \
    | grep -E '^(sharding|movement):'

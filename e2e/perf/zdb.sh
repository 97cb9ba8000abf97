#!/usr/bin/env bash
# ZoneDisruptionBudget webhook measurements (run by `make perf`, which starts the local cluster
# and builds the release binaries first):
#
# 1. Latency and memory: the zdb_perf driver (e2e/src/bin/zdb_perf/main.rs) creates a namespace with
#    3,000 pods selected by ZoneDisruptionBudgets, starts the release zdb-controller and sends
#    AdmissionReviews for pods/eviction straight to its webhook at 200 requests/s on loopback.
#    Targets: p99 <= 5 ms for denials and for pods no budget selects; VmRSS <= 50 MiB. Allowed
#    decisions (recorded by status writes) are reported with p50/p99, not gated. Then the drain
#    storm: 200 would-be-allowed evictions/s for 30 s on one budget through two replicas, with
#    maxUnavailable 1 and 100%. Targets: no budget violation (the ledger), every answer before
#    the webhook timeout, p99 <= 250 ms, VmRSS <= 64 MiB per replica; at 100% >= 50 allowed/s,
#    at 1 >= 0.7 allowed per replacement cycle. Then the same storm (same pods, same rate)
#    against a native policy/v1 PodDisruptionBudget with maxUnavailable 100% through the API
#    server's Eviction API, reported side by side: the ZDB must allow >= 2x its rate.
# 2. Concurrency: the e2e test sending 100 concurrent evictions through a round-robin proxy to
#    two webhook replicas, repeated E2E_ZDB_CONCURRENCY_RUNS times (20 here).
#
# 3. ZDB_PERF_RESTART=1 runs this alone instead: the drain storm as real evictions through the
#    API server, judged by the deployed zdb-controller (real pods: `make deploy-local` first, or
#    ZDB_PERF_RESTART_DEPLOY=1 here), with `kubectl rollout restart` mid-storm. Targets: no
#    eviction failed because the webhook was unreachable (the driver's eviction errors and the
#    API server's calling_webhook_error / fail-open counters), no budget violation. See
#    e2e/src/bin/zdb_perf/storm/restart.rs for its ZDB_PERF_RESTART_* settings.
#
# Settings: the ZDB_PERF_* variables of the driver (see its header), ZDB_PERF_CONCURRENCY_RUNS
# (20; 0 skips part 2). Prints the figures; exits non-zero when a target is missed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
perf_setup zdb zdb_perf zdb-controller

if [ "${ZDB_PERF_RESTART:-0}" = 1 ]; then
    if [ "${ZDB_PERF_RESTART_DEPLOY:-0}" = 1 ]; then
        run_step make --no-print-directory deploy-local
    fi
    echo "-- zdb webhook: drain storm through the API server during a rollout restart"
    if run_step "$release/zdb_perf"; then
        echo "zdb perf: restart targets met"
        exit 0
    fi
    echo "zdb perf: restart targets missed" >&2
    exit 1
fi

failed=()

echo "-- zdb webhook latency and memory (load average $(cut -d' ' -f1-3 /proc/loadavg) at start, $(nproc) CPUs)"
run_step "$release/zdb_perf" || failed+=("latency/memory")

runs="${ZDB_PERF_CONCURRENCY_RUNS:-20}"
test_name=replicas::concurrent_evictions_through_two_replicas_disrupt_at_most_the_budget_in_one_zone
if [ "$runs" -gt 0 ]; then
    echo
    echo "-- zdb concurrency: $test_name, $runs runs"
    started=$(date +%s)
    if E2E_ZDB_CONCURRENCY_RUNS="$runs" run_step cargo test --release --workspace --test zdb -- \
        --ignored --exact "$test_name" --nocapture; then
        echo "zdb concurrency: $runs runs passed in $(( $(date +%s) - started )) s (with the test's build)"
    else
        failed+=("concurrency")
    fi
fi

if [ "${#failed[@]}" -gt 0 ]; then
    echo "zdb perf: targets missed: ${failed[*]}" >&2
    exit 1
fi
echo "zdb perf: all targets met"

#!/usr/bin/env bash
# rules-federator measurements (run by `make perf`, which builds the release binaries first).
# The federator_perf driver (e2e/src/bin/federator_perf.rs) records a real Prometheus 3.16
# answer, scales it to 200 groups / 2,000 rules / 1,600 alert instances per backend, serves it
# from 10 and 100 fake backends (two replicas per shard, gzipped as Prometheus serves it), and
# measures the release rules-federator: latency p50/p99, CPU seconds per request and peak RSS
# for /api/v1/rules, /api/v1/alerts and a filtered request, one at a time, four identical ones at
# a time (they share one merge) and four different ones at a time. Then the same 100 backends
# as fake Thanos sidecars over gRPC (thanos.Rules/Rules), read by the federator and by a real
# Thanos Querier (the cached v0.42 binary, e2e/cluster/build.sh thanos) side by side.
#
# Targets (/api/v1/rules): 100 backends one at a time p50 <= 600 ms and <= 1.5 CPU-s per
# request, four at a time p50 <= 1.2 s, peak RSS <= 512 MiB; 10 backends p50 <= 150 ms; a small
# answer (20 groups) at 10 backends p99 <= 50 ms; over 100 gRPC backends the federator's p50
# and CPU per request at most a fifth of the Querier's. Exits non-zero when one is missed. The
# figures are of a quiet 2-core machine: the load at the start is printed. FED_PERF_ONLY=http
# (or grpc) runs only those scenarios.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# Processes on this host only: no cluster needed (and none wanted: it takes CPU).
PERF_NO_CLUSTER=1
perf_setup federator federator_perf rules-federator

echo "-- rules-federator fan-in (load: $(cut -d' ' -f1-3 /proc/loadavg) at start, $(nproc) CPUs)"
run_step "$release/federator_perf"

#!/usr/bin/env bash
# Stops exactly the processes up.sh started (their process groups, by PID file). Idempotent.
set -uo pipefail
source "$(dirname "$0")/lib.sh"

# The real nodes first (their pods talk to the API server), and only if this checkout's cluster
# owns them: another checkout's cluster is left alone.
if [ -f "$HOST_OWNER_DIR/owner" ] && [ "$(cat "$HOST_OWNER_DIR/owner")" = "$STATE" ]; then
    bash "$here/real-nodes.sh" down
fi
[ -d "$PIDS" ] || { echo "cluster-down: nothing running"; exit 0; }
# prometheus-operator processes of the e2e tests (e2e/src/operator.rs) whose test was killed before
# it could stop them: API clients too. Only a process still running that binary is stopped.
for pid_file in "$PIDS"/prometheus-operator-*.pid; do
    [ -f "$pid_file" ] || continue
    pid="$(cat "$pid_file")"
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = prometheus-oper ]; then
        kill -TERM "$pid" 2>/dev/null && echo "cluster-down: stopped a test's prometheus-operator (pid $pid)"
    fi
    rm -f "$pid_file"
done
# Reverse start order: the controllers of `make run` and other API clients first, etcd last.
for name in "${CONTROLLERS[@]}" localstack kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    pid_file="$PIDS/$name.pid"
    [ -f "$pid_file" ] || continue
    pid="$(cat "$pid_file")"
    if kill -0 "$pid" 2>/dev/null; then
        # Each component was started as the leader of its own process group (setsid).
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null
        echo "cluster-down: stopped $name (pid $pid)"
    fi
    rm -f "$pid_file"
done
if [ -f "$STATE/localstack-s3-made" ]; then
    rm -rf "$LOCALSTACK_S3_DIR" "$STATE/localstack-s3-made"
fi
rm -f "$STATE/env"

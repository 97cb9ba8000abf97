#!/usr/bin/env bash
# One real node, run by real-nodes.sh inside its own mount namespace
# (`unshare --mount --propagation private`): joins the node's cgroup, puts the node's directories
# over /var/lib, /var/log and /run (only in this namespace), then runs containerd and the kubelet.
#
# Usage: node-ns.sh NODE_DIR CGROUP KUBELET [KUBELET_ARGS...]
set -euo pipefail
dir="$1" cgroup="$2"
shift 2

# Everything started from here (containerd, its shims, the pods) stays in the node's cgroup, where
# `make cluster-down` finds and stops it.
for hierarchy in $(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts); do
    echo $$ >"$hierarchy/$cgroup/cgroup.procs"
done

# /run first and no mtab/utab writes (-n): nothing lands in the host's /run.
for path in /run /var/lib /var/log; do
    mount -n --bind "$dir/root$path" "$path"
done
# As on a host booted by systemd: the kubelet expects shared mount propagation.
mount -n --make-rshared /

containerd --config "$dir/containerd.toml" >"$dir/containerd.log" 2>&1 &
containerd_pid=$!
trap 'kill -TERM $containerd_pid ${kubelet_pid:-} 2>/dev/null' TERM INT
for _ in $(seq 1 300); do
    [ -S "$dir/containerd.sock" ] && break
    kill -0 "$containerd_pid" 2>/dev/null || { echo "containerd exited; see $dir/containerd.log" >&2; exit 1; }
    sleep 0.1
done

"$@" &
kubelet_pid=$!
# Either one ending ends the node.
wait -n "$containerd_pid" "$kubelet_pid"
status=$?
kill -TERM "$containerd_pid" "$kubelet_pid" 2>/dev/null
exit "$status"

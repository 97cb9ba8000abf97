#!/usr/bin/env bash
# What the local zonal cluster could leave behind on the host, recorded before `make cluster-up`
# and compared after `make cluster-down` (.ci/run does both):
#
#   host-state.sh snapshot FILE   record the host's state (and a timestamp file FILE.stamp)
#   host-state.sh check FILE      compare with it; print every difference and exit 1 if any
#
# Compared: the cluster's processes, mounts, cgroups (top level of every hierarchy), network
# links, addresses and routes, iptables rules (v4 and v6), the nftables ruleset, the sysctls the
# nodes touch, the paths
# three levels deep and the files written under /etc, /var, /run, /opt, /usr/local and /srv, less
# the checkout (the state dir) and what is expected to change (package caches, temporary files).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

# `ps -o comm` shows at most 15 characters of a name.
controllers="$(for name in "${CONTROLLERS[@]}"; do printf '|%s' "${name:0:15}"; done)"
PROCESSES="^(kubelet|containerd|containerd-shim.*|runc|pause|metrics-target${controllers}|etcd|kube-apiserver|kube-controller|kube-scheduler|kube-proxy|coredns|kwok)\$"
SYSCTLS='^(net\.ipv4\.ip_forward|net\.ipv4\.conf\.(all|default)\.|net\.ipv6\.conf\.(all|default)\.forwarding|vm\.overcommit_memory|kernel\.panic|kernel\.keys\.|net\.bridge\.|net\.netfilter\.nf_conntrack_(max|tcp_timeout_established|tcp_timeout_close_wait|tcp_be_liberal|udp_timeout|udp_timeout_stream))'

state() {
    echo "## processes"
    ps -eo comm= | grep -E "$PROCESSES" | sort | uniq -c || true
    echo "## mounts"
    awk '{ print $5 }' /proc/self/mountinfo | sort
    echo "## cgroups"
    local dir
    for dir in $(cgroup_mounts); do find "$dir" -mindepth 1 -maxdepth 1 -type d; done | sort
    echo "## links"
    ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort
    echo "## addresses"
    ip -o addr show | awk '{ print $2, $3, $4 }' | sort
    echo "## routes"
    { ip route show table all; ip -6 route show table all; } 2>/dev/null | grep -v ' proto ra ' | sort || true
    echo "## iptables"
    if command -v iptables-save >/dev/null; then
        { iptables-save; ip6tables-save; } 2>/dev/null | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]//' | sort || true
    fi
    echo "## nftables"
    if command -v nft >/dev/null; then
        nft list ruleset 2>/dev/null | grep -vE '^\s*(counter|#)' || true
    fi
    echo "## sysctls"
    sysctl -a 2>/dev/null | grep -E "$SYSCTLS" | sort || true
    echo "## paths (three levels deep)"
    walk -maxdepth 3
}

# The walk of the file checks: system directories, less what is expected to change.
walk() { # find-arguments...
    local root
    for root in /etc /var /run /opt /usr/local /srv; do
        [ -d "$root" ] || continue
        find "$root" -xdev \( -path "$TOP" -o -path /var/tmp -o -path /var/cache -o -path /var/lib/apt \
            -o -path /var/lib/dpkg -o -path /var/log/apt -o -path /run/user -o -path /var/log/journal \) \
            -prune -o "$@" -print 2>/dev/null || true
    done | sort
}

case "${1:-}" in
snapshot)
    file="${2:?snapshot FILE}"
    touch "$file.stamp"
    state >"$file"
    echo "host-state: recorded in $file"
    ;;
check)
    file="${2:?check FILE}"
    [ -f "$file" ] || { echo "host-state: no snapshot $file" >&2; exit 2; }
    differences=0
    if ! diff -u "$file" <(state) >"$file.diff"; then
        echo "host-state: the host differs from before the cluster:" >&2
        cat "$file.diff" >&2
        differences=1
    fi
    # Files written since the snapshot (new directories show in the paths above).
    files="$(walk ! -type d -newer "$file.stamp" | grep -vF -e "$file" || true)"
    if [ -n "$files" ]; then
        echo "host-state: files created or changed outside the cluster's state dir:" >&2
        echo "$files" >&2
        differences=1
    fi
    [ "$differences" = 0 ] && echo "host-state: the host is as it was before the cluster"
    exit "$differences"
    ;;
*) echo "usage: $0 snapshot FILE | check FILE" >&2; exit 2 ;;
esac

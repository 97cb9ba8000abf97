# shellcheck shell=bash
# `heartbeat WHAT command...`: runs the command and, while it runs, says on stderr every minute
# that WHAT is still under way, so a cold build of many minutes is never silent; returns the
# command's status. The ticker also ends within a minute of the shell that started it (a
# command that exits the shell, as build.sh's `fail` does, leaves nothing behind). Sourced by
# build.sh and images.sh.
heartbeat() {
    local what="$1" parent="$BASHPID" ticker status=0
    shift
    (
        sleeper=""
        trap 'kill ${sleeper:+"$sleeper"} 2>/dev/null; exit 0' TERM
        minutes=0
        while :; do
            sleep 60 &
            sleeper=$!
            wait "$sleeper"
            kill -0 "$parent" 2>/dev/null || exit 0
            minutes=$((minutes + 1))
            echo "$what: still under way after $minutes min" >&2
        done
    ) &
    ticker=$!
    "$@" || status=$?
    kill "$ticker" 2>/dev/null
    wait "$ticker" 2>/dev/null || true
    return "$status"
}

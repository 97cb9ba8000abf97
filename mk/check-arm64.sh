#!/usr/bin/env bash
# `make check-arm64`: the arm64 binaries of the release image run. Built as `make
# image-multiarch` builds them (e2e/cluster/images.sh static arm64), then, under Debian's
# qemu-user-static on this x86_64 host (qemu-aarch64-static runs a binary directly: no binfmt
# registration):
#   - each is a static aarch64 ELF (`file`) and answers --help;
#   - rules-federator does a unit of real work: over three static backends (two replicas of
#     shard 0 with the same firing alert, shard 1 with a recording rule; mk/check-arm64-backend.py)
#     its /api/v1/rules is the merged answer: the replicas deduplicated, each rule with its shard.
# Not in CI by default: a cold arm64 build of every dependency is long (docs/release.md).
#
# Env: BINS (default: those of bins.txt), CARGO, CARGO_TARGET_DIR.
# Exits non-zero with one line on stderr when a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/cluster/versions.sh # ZAC_CACHE
die() { echo "check-arm64: $*" >&2; exit 1; }

if ! command -v qemu-aarch64-static >/dev/null || ! command -v file >/dev/null; then
    mkdir -p "$ZAC_CACHE"
    log="$ZAC_CACHE/apt-check-arm64.log"
    echo "check-arm64: installing qemu-user-static file (Debian packages)"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends qemu-user-static file; } >"$log" 2>&1 \
        || die "installing qemu-user-static failed; see $log"
fi

dir="$(bash e2e/cluster/images.sh static arm64 | tail -n 1)" || exit 1 # images.sh said why
read -r -a bins <<<"${BINS:-$(tr '\n' ' ' <bins.txt)}"
for bin in "${bins[@]}"; do
    kind="$(file -b "$dir/$bin")"
    [[ "$kind" == *"ARM aarch64"* && "$kind" == *"static"*"linked"* ]] \
        || die "$dir/$bin is not a static aarch64 executable: $kind"
    echo "$bin: ${kind%%, BuildID*}"
    help="$(qemu-aarch64-static "$dir/$bin" --help 2>&1)" \
        || die "$bin --help under qemu-aarch64-static failed: $(tail -n 1 <<<"$help")"
    grep -q '^Usage: ' <<<"$help" || die "$bin --help under qemu-aarch64-static printed no usage: $(head -n 1 <<<"$help")"
    echo "$bin --help under qemu-aarch64-static: $(grep -m 1 '^Usage: ' <<<"$help")"
done

# The unit of real work: rules-federator, arm64 under qemu, merging three static backends.
[[ " ${bins[*]} " == *" rules-federator "* ]] || { echo "check-arm64: rules-federator not built (BINS): no merge checked"; exit 0; }
work="$(mktemp -d)"
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
python3 mk/check-arm64-backend.py >"$work/backend.port" 2>"$work/backend.log" &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/backend.port" ] && break; sleep 0.1; done
backend="http://127.0.0.1:$(head -n 1 "$work/backend.port")"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# Static endpoints only: nothing asks Kubernetes (a kubeconfig that would fail if it were read).
KUBECONFIG=/dev/null qemu-aarch64-static "$dir/rules-federator" --listen-address "127.0.0.1:$port" \
    --endpoint "$backend/shard0-a#shard=0&replica=a" --endpoint "$backend/shard0-b#shard=0&replica=b" \
    --endpoint "$backend/shard1#shard=1" --log-format json >"$work/federator.log" 2>&1 &
pids+=($!)
python3 - "$port" "$work/federator.log" <<'PY' || exit 1
import json, sys, time, urllib.request

port, log = sys.argv[1:]
def get(path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.read().decode()

started, deadline = time.monotonic(), time.monotonic() + 60
while True:
    try:
        if get("/readyz").strip() == "ready":
            break
    except OSError:
        pass
    if time.monotonic() > deadline:
        last = open(log).read().strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"check-arm64: rules-federator (arm64, qemu) not ready in 60 s: {last[0]}")
    time.sleep(0.2)
ready = time.monotonic() - started
answer = json.loads(get("/api/v1/rules"))
shape = [(group["name"], rule["name"], rule["labels"].get("shard"), len(rule.get("alerts", [])))
         for group in answer["data"]["groups"] for rule in group["rules"]]
expected = [("common", "AlwaysFiring", "0", 1), ("extra", "job:up:sum", "1", 0)]
if answer.get("status") != "success" or answer.get("warnings") or shape != expected:
    sys.exit(f"check-arm64: rules-federator (arm64, qemu) /api/v1/rules is not the merged answer: {json.dumps(answer)[:300]}")
print(f"rules-federator (arm64, qemu): ready in {ready:.1f} s; /api/v1/rules merged 3 backends into {shape}")
PY
echo "check-arm64: ok (${#bins[@]} static aarch64 binaries answer --help; rules-federator merges under qemu)"

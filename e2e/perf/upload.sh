#!/usr/bin/env bash
# The final upload of a removed shard (docs/thanos.md, "No sample lost when a shard goes"), for a
# shard pod holding UPLOAD_PERF_MIB (default 1024) MiB of TSDB, against the local cluster's
# LocalStack S3:
#
# 1. End to end: the upload_perf driver (e2e/src/bin/upload_perf.rs) runs the release
#    shard-controller, gives a retained shard's pod on a real node a block of that size and times
#    its Retain deadline to the StatefulSet's deletion (snapshot, ephemeral container, upload,
#    one reconcile), checking the bucket then holds every byte of the block. Target: within 120 s
#    (UPLOAD_PERF_TARGET_S).
# 2. The upload alone: what a shard pod's thanos-upload-N container runs, `thanos tools bucket
#    upload-blocks` (the same binary, flags and shipper), over a snapshot directory holding one
#    block of that size, twice: the first run uploads the block, the second finds its meta.json in
#    the bucket and uploads nothing (a retried attempt after a success). The block's files are
#    random bytes: the uploader copies files and never parses them, and random bytes do not
#    compress on the way. Same target.
#
# Prints the figures; exits non-zero when a target is missed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
perf_setup upload upload_perf shard-controller
# shellcheck disable=SC1091
source "$root/e2e/cluster/lib.sh"
mib="${UPLOAD_PERF_MIB:-1024}"
target_s="${UPLOAD_PERF_TARGET_S:-120}"
endpoint="${E2E_POD_S3_ENDPOINT:?E2E_POD_S3_ENDPOINT: LocalStack S3 of the local cluster}"
# The Thanos binary and its image on the real nodes (cached: built once per version).
bash e2e/cluster/build.sh thanos
bash e2e/cluster/images.sh thanos

echo "-- end to end: a retained shard holding $mib MiB, from its deadline to its deletion (load: $(cut -d' ' -f1-3 /proc/loadavg) at start, $(nproc) CPUs)"
missed=0
UPLOAD_PERF_MIB="$mib" UPLOAD_PERF_TARGET_S="$target_s" run_step "$release/upload_perf" || missed=1
echo "-- the upload alone: thanos tools bucket upload-blocks"

work="$(mktemp -d /tmp/upload-perf.XXXXXX)"
bucket="upload-perf-$$"
cleanup() {
    rm -rf "$work"
    # The bucket's objects, then the bucket: LocalStack keeps them on disk otherwise.
    curl -fsS "http://$endpoint/$bucket?list-type=2" 2>/dev/null \
        | grep -o '<Key>[^<]*</Key>' | sed 's/<[^>]*>//g' \
        | while read -r key; do curl -fsS -X DELETE "http://$endpoint/$bucket/$key" >/dev/null || true; done
    curl -fsS -X DELETE "http://$endpoint/$bucket" >/dev/null 2>&1 || true
}
trap cleanup EXIT
curl -fsS -X PUT "http://$endpoint/$bucket" >/dev/null

# One block as a snapshot holds it: <ulid>/{meta.json,index,chunks/...}, chunk files of at most
# 512 MiB as Prometheus cuts them.
ulid="$(python3 - <<'EOF'
import os, time
alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
print("".join(alphabet[(value >> (5 * i)) & 31] for i in reversed(range(26))))
EOF
)"
block="$work/snapshot/$ulid"
mkdir -p "$block/chunks"
echo "-- writing a block of $mib MiB ($ulid)"
left="$mib"
n=1
while [ "$left" -gt 0 ]; do
    size=$((left < 512 ? left : 512))
    head -c "$((size * 1024 * 1024))" /dev/urandom >"$block/chunks/$(printf '%06d' "$n")"
    left=$((left - size))
    n=$((n + 1))
done
head -c $((1024 * 1024)) /dev/urandom >"$block/index"
now_ms="$(($(date +%s) * 1000))"
cat >"$block/meta.json" <<EOF
{"ulid": "$ulid", "minTime": $((now_ms - 7200000)), "maxTime": $now_ms,
 "stats": {"numSamples": 1, "numSeries": 1, "numChunks": 1},
 "compaction": {"level": 1, "sources": ["$ulid"]}, "version": 1}
EOF
cat >"$work/objstore.yml" <<EOF
type: S3
config:
  bucket: $bucket
  endpoint: $endpoint
  insecure: true
  access_key: test
  secret_key: test
  region: us-east-1
  bucket_lookup_type: path
EOF

upload() {
    "$THANOS_BIN" tools bucket upload-blocks --shipper.upload-compacted --log.level=warn \
        --objstore.config-file="$work/objstore.yml" --path="$work/snapshot" \
        --label='shard="2"' --label='zone="zone-c"' --label='prometheus_replica="perf-0"'
}
seconds() { python3 -c 'import time; print(f"{time.monotonic():.3f}")'; }

echo "-- uploading (load: $(cut -d' ' -f1-3 /proc/loadavg) at start, $(nproc) CPUs)"
start="$(seconds)"
run_step upload
first="$(python3 -c "print(f'{$(seconds) - $start:.1f}')")"
start="$(seconds)"
run_step upload
again="$(python3 -c "print(f'{$(seconds) - $start:.1f}')")"
uploaded="$(curl -fsS "http://$endpoint/$bucket?list-type=2" | grep -o '<Size>[0-9]*</Size>' \
    | sed 's/<[^>]*>//g' | awk '{s += $1} END {print s}')"
rate="$(python3 -c "print(f'{$mib / $first:.1f}')")"
echo "upload: $mib MiB in ${first} s ($rate MiB/s); $uploaded bytes in the bucket; again (already there): ${again} s"
if python3 -c "import sys; sys.exit(0 if $first <= $target_s else 1)"; then
    echo "upload: target met (<= ${target_s} s)"
else
    echo "upload: target missed: ${first} s > ${target_s} s" >&2
    missed=1
fi
exit "$missed"

#!/usr/bin/env bash
# Measures what follower checkpoints buy (docs/REPLICATION.md, "Checkpoints and WAL
# truncation"): one TPC-C shard with 3 replicas on this machine, each case on a fresh cluster.
#   ckpt:  replica 2 runs with --checkpoint-interval-ms INTERVAL; plain: without.
# Each case: a TPC-C run of SECONDS, then replica 2's WAL and checkpoint bytes on disk, then
# replica 2 SIGKILLed and restarted over its directory: its recovery time (load + replay, from
# its own "recovered ... in X ms" line), peak RSS when recovery is done, and `cluster digest`.
# Cases interleave ckpt / plain, ROUNDS rounds. Every process runs at nice 19.
# Usage: scripts/checkpoint-bench.sh [rounds] [seconds] [interval_ms]  (SHOAL=path, WORK=dir)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
shoal="${SHOAL:-$root/build/release/shoal}"
rounds="${1:-2}"
seconds="${2:-20}"
interval="${3:-2000}"
work="${WORK:-/tmp/shoal-checkpoint-bench}"
mkdir -p "$work"
"$root/scripts/one-shard-config.sh" ckptbench 23200 > "$work/c.toml"
run() { nice -n 19 "$shoal" "$@"; }  # foreground only: `nice` execs, so `nice ... &` is the pid
bytes_of() {  # bytes_of DIR GLOB...
  local d=$1 total=0 f
  shift
  for f in "$@"; do
    for p in "$d"/$f; do [ -e "$p" ] && total=$((total + $(stat -c %s "$p"))); done
  done
  echo "$total"
}

one_case() {  # one_case ckpt|plain N
  local mode=$1 n=$2 d="$work/$1$2" pids=() extra=()
  [ "$mode" = ckpt ] && extra=(--checkpoint-interval-ms "$interval")
  rm -rf "$d" && mkdir -p "$d"
  nice -n 19 "$shoal" server --config "$work/c.toml" --shard 0 --workload tpcc --data-dir "$d/r0" \
    > "$d/server.log" 2>&1 &
  pids+=($!)
  nice -n 19 "$shoal" replica --config "$work/c.toml" --shard 0 --replica 1 --data-dir "$d/r1" \
    > "$d/r1.log" 2>&1 &
  pids+=($!)
  nice -n 19 "$shoal" replica --config "$work/c.toml" --shard 0 --replica 2 --data-dir "$d/r2" "${extra[@]}" \
    > "$d/r2.log" 2>&1 &
  local victim=$!
  for _ in $(seq 1 180); do  # bounded: the load and the followers' bootstrap
    run cluster status --config "$work/c.toml" > /dev/null 2>&1 && break
    sleep 1
  done
  timeout 300 nice -n 19 "$shoal" bench tpcc --cluster "$work/c.toml" --seconds "$seconds" \
    > "$d/run.out" 2>&1 || true
  local wal ckpt leader_wal
  wal=$(bytes_of "$d/r2" 'stream-*.wal' 'stream-*.acc')
  ckpt=$(bytes_of "$d/r2" 'checkpoint-*.ckpt')
  leader_wal=$(bytes_of "$d/r0" 'stream-*.wal' 'stream-*.acc')
  kill -9 "$victim"
  wait "$victim" 2> /dev/null || true
  local t0 t1 rec_ms pid2
  t0=$(date +%s%N)
  nice -n 19 "$shoal" replica --config "$work/c.toml" --shard 0 --replica 2 --data-dir "$d/r2" "${extra[@]}" \
    > "$d/r2b.log" 2>&1 &
  pid2=$!
  pids+=($pid2)
  for _ in $(seq 1 3000); do  # bounded: 300 s
    grep -q 'recovered' "$d/r2b.log" && break
    sleep 0.1
  done
  t1=$(date +%s%N)
  local hwm
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid2/status" 2> /dev/null || echo "?")
  rec_ms=$(grep 'recovered' "$d/r2b.log" | grep -o 'in [0-9]* ms$' | grep -o '[0-9]*' || true)
  local digest="?"
  for _ in $(seq 1 60); do  # bounded: until the restarted replica is caught up
    if timeout 300 nice -n 19 "$shoal" cluster digest --config "$work/c.toml" > "$d/digest.out" 2>&1; then
      digest=identical
      break
    fi
    digest="exit $?"
    sleep 2
  done
  local pauses
  pauses=$(grep -o 'paused [0-9.]* ms' "$d/r2.log" | awk '{print $2}' | sort -n |
    awk '{v[NR] = $1} END {if (NR) printf "%d, median %s, max %s ms", NR, v[int((NR + 1) / 2)], v[NR]}' ||
    true)
  echo "$mode$n: $(grep -h throughput "$d/run.out" | head -1)"
  echo "  replica 2 on disk after the run: WAL+journal $((wal / 1048576)) MiB, checkpoints" \
    "$((ckpt / 1048576)) MiB (leader's WAL+journal $((leader_wal / 1048576)) MiB);" \
    "checkpoints written: $(grep -c ': checkpoint [0-9]* at TID' "$d/r2.log" || true)," \
    "largest $(grep -o '[0-9]* bytes; replay' "$d/r2.log" | sort -n | tail -1 | grep -o '^[0-9]*' || echo 0) bytes"
  echo "  restart: recovery ${rec_ms:-?} ms (own line), $(((t1 - t0) / 1000000)) ms from exec;" \
    "peak RSS ${hwm} kB; digest: $digest"
  if [ -n "$pauses" ]; then echo "  replay pauses for checkpoints: $pauses"; fi
  grep -h 'loaded\|recovered\|refused' "$d/r2b.log" | sed 's/^/  | /' || true
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
}

for n in $(seq 1 "$rounds"); do
  one_case ckpt "$n"
  one_case plain "$n"
done

#!/usr/bin/env bash
# Measures catch-up of a follower from the leader's WAL (docs/REPLICATION.md, "Catch-up from
# the WAL"): one TPC-C shard with 3 replicas on this machine, each case on a fresh cluster.
#   catch: replica 2 SIGKILLed, a gap run, then replica 2 restarted from its WAL together with
#          a second run; base: the same two runs with every replica healthy.
# Usage: scripts/catchup-bench.sh [rounds] [seconds]   (SHOAL=path/to/shoal, WORK=dir)
# Prints each case's second-run throughput and, for catch, the catch-up rate from the
# leader's debug lines (SHOAL_REPL_DEBUG=1: one a second).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
shoal="${SHOAL:-$root/build/release/shoal}"
rounds="${1:-3}"
seconds="${2:-15}"
work="${WORK:-/tmp/shoal-catchup-bench}"
mkdir -p "$work"
"$root/scripts/one-shard-config.sh" catchup 23100 > "$work/c.toml"
stamp() { while IFS= read -r l; do echo "$(date +%s.%N) $l"; done; }

one_case() {  # one_case catch|base N
  local mode=$1 n=$2 d="$work/$1$2" pids=()
  rm -rf "$d" && mkdir -p "$d"
  SHOAL_REPL_DEBUG=1 "$shoal" server --config "$work/c.toml" --shard 0 --workload tpcc \
    --data-dir "$d/r0" > >(stamp > "$d/server.log") 2>&1 &
  pids+=($!)
  "$shoal" replica --config "$work/c.toml" --shard 0 --replica 1 --data-dir "$d/r1" \
    > "$d/r1.log" 2>&1 &
  pids+=($!)
  "$shoal" replica --config "$work/c.toml" --shard 0 --replica 2 --data-dir "$d/r2" \
    > "$d/r2.log" 2>&1 &
  local victim=$!
  pids+=($victim)
  for _ in $(seq 1 120); do  # bounded: the load and the followers' bootstrap
    "$shoal" cluster status --config "$work/c.toml" > /dev/null 2>&1 && break
    sleep 1
  done
  [ "$mode" = catch ] && kill -9 "$victim"
  timeout 300 "$shoal" bench tpcc --cluster "$work/c.toml" --seconds "$seconds" > "$d/run1.out" 2>&1 || true
  local t0
  t0=$(date +%s.%N)
  if [ "$mode" = catch ]; then
    SHOAL_REPL_DEBUG=1 "$shoal" replica --config "$work/c.toml" --shard 0 --replica 2 \
      --data-dir "$d/r2" > >(stamp > "$d/r2b.log") 2>&1 &
    pids+=($!)
  fi
  timeout 300 "$shoal" bench tpcc --cluster "$work/c.toml" --seconds "$seconds" > "$d/run2.out" 2>&1 || true
  echo "$mode$n: $(grep -h throughput "$d/run2.out"); $(grep -c 'digest.*= leader' "$d/run2.out") followers equal"
  if [ "$mode" = catch ]; then
    # The catch-up ends when the leader no longer counts a follower catching up.
    awk -v t0="$t0" '/repl: leading/ {
        for (i = 1; i <= NF; i++) {
          if ($i == "chosen") c = $(i + 1)
          if ($i == "catching_up") u = $(i + 1)
          if ($i == "entries" && $(i - 2) == "catchup") { e = $(i - 1); w = substr($(i + 1), 2) }
          if ($i == "WAL)") b = $(i + 1)
        }
        if ($1 < t0 - 1.2) next
        if (!s) { s = 1; c0 = c; e0 = e; w0 = w; b0 = b; ts = $1 }
        if (u == 0 && $1 > t0 + 1 && !done) {
          done = 1
          printf "  catch-up %.1f s: %d learned entries (%d from the WAL), %.0f MB: %.0f entries/s, %.1f MB/s; leader +%.0f entries/s\n",
                 $1 - ts, e - e0, w - w0, (b - b0) / 1e6, (e - e0) / ($1 - ts), (b - b0) / 1e6 / ($1 - ts), (c - c0) / ($1 - ts)
        }
      }' "$d/server.log"
  fi
  kill "${pids[0]}" 2> /dev/null || true
  sleep 3
  for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
}

for r in $(seq 1 "$rounds"); do
  one_case catch "$r"
  one_case base "$r"
done

#!/usr/bin/env bash
# Measures a whole cluster's restart from disk (docs/REPLICATION.md, "Restarting a whole cluster
# from disk"): one TPC-C shard with 3 replicas on this machine (`cluster up --ack-journal`,
# followers checkpointing every INTERVAL ms), a TPC-C run of SECONDS, `cluster digest`, then
#   clean: `cluster down` + `cluster up`;  kill: SIGKILL of every process mid-run + `cluster up`
# and for each: the time `up` reports until every shard serves, the leader's own recovery
# line, the WAL bytes on disk, the digests before and after (clean) and `cluster check`
# (TPC-C conditions, every acknowledged NewOrder looked up). Fresh load time for comparison
# is the first `up`'s line. ROUNDS rounds.
# Usage: scripts/restart-bench.sh [rounds] [seconds] [interval_ms]  (SHOAL=path, WORK=dir)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
shoal="${SHOAL:-$root/build/release/shoal}"
rounds="${1:-2}"
seconds="${2:-20}"
interval="${3:-5000}"
work="${WORK:-/tmp/shoal-restart-bench}"
mkdir -p "$work"
"$root/scripts/one-shard-config.sh" restartbench 23300 > "$work/c.toml"
c=(--config "$work/c.toml")

for n in $(seq 1 "$rounds"); do
  d="$work/run$n"
  rm -rf "$d"
  "$shoal" cluster up "${c[@]}" --run-dir "$d" --workload tpcc --ack-journal \
    --checkpoint-interval-ms "$interval" | grep -E 'loaded afresh|restarted'
  "$shoal" bench tpcc --cluster "$work/c.toml" --seconds "$seconds" 2>&1 |
    grep -E '^throughput' || true
  before=$("$shoal" cluster digest "${c[@]}" | grep -o 'digest [0-9a-f]*' | sort | tr '\n' ' ')
  "$shoal" cluster down "${c[@]}" --run-dir "$d" > /dev/null
  echo "round $n: WAL on disk after the run: $(du -sh "$d"/shard-0-replica-* | tr '\n' ' ')"
  echo "round $n clean:"
  "$shoal" cluster up "${c[@]}" --run-dir "$d" --workload tpcc --ack-journal --checkpoint-interval-ms "$interval" |
    grep -E 'restarted|loaded'
  grep -h 'recovered its store\|took over in epoch' "$d/shard-0.log" | tail -2
  after=$("$shoal" cluster digest "${c[@]}" | grep -o 'digest [0-9a-f]*' | sort | tr '\n' ' ')
  [ "$before" = "$after" ] && echo "  digests equal before and after" ||
    echo "  DIGESTS DIFFER: before $before after $after"
  "$shoal" cluster check "${c[@]}" --run-dir "$d" | sed 's/^/  /'
  echo "round $n kill -9 mid-run:"
  "$shoal" bench tpcc --cluster "$work/c.toml" --seconds "$seconds" > "$d/bench2.log" 2>&1 &
  bench=$!
  sleep $((seconds / 2))
  for p in "$d"/*.pid; do kill -9 "$(cat "$p")" || true; done
  wait "$bench" || true
  "$shoal" cluster up "${c[@]}" --run-dir "$d" --workload tpcc --ack-journal --checkpoint-interval-ms "$interval" |
    grep -E 'restarted|loaded'
  grep -h 'recovered its store\|took over in epoch' "$d/shard-0.log" | tail -2
  "$shoal" cluster check "${c[@]}" --run-dir "$d" | sed 's/^/  /'
  "$shoal" cluster digest "${c[@]}" | tail -1 | sed 's/^/  /'
  "$shoal" cluster down "${c[@]}" --run-dir "$d" > /dev/null
done

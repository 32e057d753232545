#!/usr/bin/env bash
# What an idle cluster costs: starts the main job's layout (2 shards x 3 replicas over tcp, a
# 5 ms WAN to two regions, leader_timeout_ms 1000, micro load), lets it settle 3 s, then counts
# over SECONDS the CPU ticks (/proc/PID/stat) and voluntary context switches (wake-ups) of
# every process, etcd included, and the run directory's growth (floors idle streams log);
# prints one line, stops the cluster and removes its scratch directory.
# Usage: scripts/idle-cost.sh [SHOAL_BINARY (build/release/shoal)] [SECONDS (10)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
shoal="${1:-$root/build/release/shoal}"
seconds="${2:-10}"
dir="$(mktemp -d)"
base=$(( 23000 + RANDOM % 400 * 8 ))
trap '"$shoal" cluster down --config "$dir/c.toml" --run-dir "$dir/run" > /dev/null 2>&1 || true; rm -rf "$dir"' EXIT
{
  printf '[cluster]\nname = "idle"\ntransport = "tcp"\nworkers = 1\nreplicas = 3\n'
  printf 'kv_split_keys = ["n"]\nleader_timeout_ms = 1000\n'
  for r in 0 1 2; do printf '\n[[region]]\nname = "r%d"\n' "$r"; done
  for r in 1 2; do printf '\n[[wan]]\nfrom = "r0"\nto = "r%d"\none_way_ms = 5.0\n' "$r"; done
  for s in 0 1; do
    printf '\n[[shard]]\nid = %d\npartition_lo = %d\npartition_hi = %d\n' "$s" $((s + 1)) $((s + 2))
    for r in 0 1 2; do
      printf '[[shard.replica]]\nregion = "r%d"\nhost = "127.0.0.1"\nport = %d\n' \
        "$r" $((base + 8 * s + 2 * r))
    done
  done
} > "$dir/c.toml"
timeout 120 "$shoal" cluster up --config "$dir/c.toml" --run-dir "$dir/run" --fresh \
  --keys-per-partition 1000 > "$dir/up.log" 2>&1 || { cat "$dir/up.log" >&2; exit 1; }
sleep 3
pids=$(cat "$dir"/run/*.pid)
snap() {  # per process: pid, CPU ticks, voluntary context switches over its threads
  for p in $pids; do
    local w=0 s
    for s in /proc/"$p"/task/*/status; do w=$(( w + $(awk '/^voluntary_ctxt/ { print $2 }' "$s") )); done
    echo "$p $(awk '{ print $14 + $15 }' /proc/"$p"/stat) $w"
  done
}
d0=$(du -sb "$dir/run" | cut -f1); snap > "$dir/a"
sleep "$seconds"
snap > "$dir/b"; d1=$(du -sb "$dir/run" | cut -f1)
hz=$(getconf CLK_TCK)
paste "$dir/a" "$dir/b" | awk -v s="$seconds" -v hz="$hz" -v dd=$(( d1 - d0 )) '
  { t += $5 - $2; w += $6 - $3 }
  END { printf "idle 2x3 cluster: CPU %.1f%% of one core, %d wake-ups/s, run directory +%d B/s\n",
        100 * t / hz / s, w / s, dd / s }'

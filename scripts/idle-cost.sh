#!/usr/bin/env bash
# What an idle cluster costs: starts the main job's cluster (scripts/main-job-config.sh, micro
# load), lets it settle 3 s, then counts over SECONDS the CPU ticks (/proc/PID/stat) and
# voluntary context switches (wake-ups) of every process, etcd included, and the run directory's growth (floors idle streams log);
# prints one line, stops the cluster and removes its scratch directory.
# Usage: scripts/idle-cost.sh [SHOAL_BINARY (build/release/shoal)] [SECONDS (10)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
shoal="${1:-$root/build/release/shoal}"
seconds="${2:-10}"
dir="$(mktemp -d)"
base=$(( 23000 + RANDOM % 200 * 32 ))  # the config takes base .. base + 31
trap '"$shoal" cluster down --config "$dir/c.toml" --run-dir "$dir/run" > /dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$root/scripts/main-job-config.sh" "$base" > "$dir/c.toml"
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

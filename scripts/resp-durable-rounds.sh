#!/usr/bin/env bash
# Durable Redis writes against redis-server, in shuffled rounds over standing servers: Shoal
# 1 shard x 1 replica (`cluster up --fsync always`: its WAL synced before each reply), Shoal
# 1 shard x 3 replicas (`--fsync always` on every replica) and Debian's redis-server with
# `--appendonly yes --appendfsync always`. Each round runs `redis-benchmark -t set -c 50` at
# -P 1 (N1 requests) and at -P 16 (N16) against each server in a new random order, each run
# after a probe of the disk (100 synced 2 KiB writes with dd, mean ms per sync). Why rounds and
# not runs: this VM's disk alternates within seconds between syncs of about 0.15 ms and of
# 4 ms (docs/RESULTS.md), and a fixed order would give one server the slow spells. Prints one
# line per run, then per -P and server the median req/s with the median run's p50/p99 and the
# median of the same-round ratios to redis-server. Scratch files under a temporary directory.
# Usage: scripts/resp-durable-rounds.sh [ROUNDS (8)] [N1 (40000)] [N16 (300000)]
#   (SHOAL_BIN_DIR: default build/release)
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
shoal="${SHOAL_BIN_DIR:-$root/build/release}/shoal"
rounds="${1:-8}"
n1="${2:-40000}"
n16="${3:-300000}"
dir="$(mktemp -d)"
base=$(( 19000 + RANDOM % 400 * 2 ))
declare -A port=([shoal_1x1]=$(( base + 10 )) [shoal_1x3]=$(( base + 30 )) [redis]=$(( base + 50 )))
redis_pid=""
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null
  for c in 1x1 1x3; do
    "$shoal" cluster down --config "$dir/$c.toml" --run-dir "$dir/$c" > /dev/null 2>&1
  done
  rm -rf "$dir"
}
trap cleanup EXIT
REPLICAS=1 "$root/scripts/one-shard-config.sh" rounds1 "$base" "${port[shoal_1x1]}" > "$dir/1x1.toml"
REPLICAS=3 "$root/scripts/one-shard-config.sh" rounds3 $(( base + 20 )) "${port[shoal_1x3]}" \
  > "$dir/1x3.toml"
for c in 1x1 1x3; do
  timeout 120 "$shoal" cluster up --config "$dir/$c.toml" --run-dir "$dir/$c" --fresh \
    --fsync always --keys-per-partition 1000 > "$dir/$c.log" 2>&1 || { cat "$dir/$c.log" >&2; exit 1; }
done
mkdir -p "$dir/redis"
redis-server --port "${port[redis]}" --dir "$dir/redis" --save "" --appendonly yes \
  --appendfsync always > "$dir/redis.log" 2>&1 &
redis_pid=$!
sleep 1
disk_ms() {  # mean ms per synced 2 KiB write
  dd if=/dev/zero of="$dir/probe" bs=2k count=100 oflag=dsync 2>&1 |
    awk '/copied/ { for (i = 1; i <= NF; ++i) if ($i == "s,") printf "%.3f", $(i - 1) * 10 }'
}
for r in $(seq "$rounds"); do
  for p in 1 16; do
    n=$n1; [ "$p" = 16 ] && n=$n16
    for who in $(printf '%s\n' shoal_1x1 shoal_1x3 redis | shuf); do
      disk=$(disk_ms)
      out=$(timeout 600 redis-benchmark -p "${port[$who]}" -t set -n "$n" -c 50 -P "$p" --csv | tail -1)
      echo "round $r -P $p $who disk_ms $disk load $(cut -d' ' -f1 /proc/loadavg) $out"
    done
  done
done | tee "$dir/out"
# The summary: per (-P, server) the median req/s, its run's p50/p99, the same-round ratios.
awk '
  { split($0, q, "\""); k = $4 SUBSEP $5; rps[k, $2] = q[4]; p50[k, $2] = q[10]; p99[k, $2] = q[14]
    keys[k] = 1; rounds[$2] = 1 }
  function median(v, n,   i, j, t) {
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  function abs(x) { return x < 0 ? -x : x }
  END {
    print "## summary: median req/s (p50/p99 ms of the run nearest it); same-round ratio to redis-server: median (each round)"
    for (k in keys) {
      split(k, kp, SUBSEP); n = 0; delete v
      for (r in rounds) if ((k, r) in rps) v[++n] = rps[k, r] + 0
      m = median(v, n); mr = ""
      for (r in rounds) if ((k, r) in rps && (mr == "" || abs(rps[k, r] - m) < abs(rps[k, mr] - m))) mr = r
      line = sprintf("-P %-2s %-9s %9.0f (%s/%s)", kp[1], kp[2], m, p50[k, mr], p99[k, mr])
      rk = kp[1] SUBSEP "redis"; n = 0; delete w; all = ""
      for (r = 1; (k, r) in rps; ++r) if ((rk, r) in rps) { w[++n] = rps[k, r] / rps[rk, r]; all = all sprintf(" %.2f", w[n]) }
      if (kp[2] != "redis" && n > 0) line = line sprintf("  /redis %.2f (%s)", median(w, n), substr(all, 2))
      print line
    }
  }' "$dir/out" | sort

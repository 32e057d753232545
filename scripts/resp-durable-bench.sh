#!/usr/bin/env bash
# The Redis port against redis-server, alternating, ROUNDS times (default 3):
# `redis-benchmark -t set,get,incr,mset -n N -c 50 -P {1,16} --csv` each (N default 200000).
# RESP_BENCH_MODE=durable (the default; docs/RESULTS.md, "Durable redis-benchmark"): Shoal
# 1 shard x 3 replicas (`shoal cluster up --fsync always`, the config's batch_us 4000 and
# `--batch-us 1000`) against Debian's redis-server with `--appendonly yes --appendfsync
# always`. RESP_BENCH_MODE=durable1: the same with Shoal 1 shard x 1 replica (`cluster up
# --fsync always`: one process, its WAL synced before each reply, as redis-server's AOF).
# RESP_BENCH_MODE=memory (issue 15's comparison): Shoal 1 shard x 1 replica
# (`cluster up`, no replication) against `redis-server --save "" --appendonly no`.
# Scratch dirs outside the repo. Prints "## round R WHAT -P P load L" headers, redis-benchmark's
# CSV and each run's server CPU ("## cpu_ms MS", /proc/<pid>/stat, every thread), then a
# summary: per run the medians of req/s over the rounds with that run's p50/p99 (ms), the
# median's ratio to redis, and the median of the same-round ratios.
# Usage: scripts/resp-durable-bench.sh [ROUNDS] [N]   (SHOAL_BIN_DIR: default build/release)
# RESP_BENCH_TESTS: redis-benchmark -t (default set,get,incr,mset); RESP_BENCH_PIPELINES: the -P
# values (default "1 16").
# A/B: SHOAL_BASE_BIN_DIR names a second build, and RESP_BENCH_WHAT the runs of each round in
# order (durable default "shoal4000 redis shoal1000": shoalUS / baseUS run that build at
# batch_us US; memory default "shoal redis", add "base" for the second build).
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
shoal="${SHOAL_BIN_DIR:-$root/build/release}/shoal"
base_shoal="${SHOAL_BASE_BIN_DIR:-}/shoal"
rounds="${1:-3}"
n="${2:-200000}"
mode="${RESP_BENCH_MODE:-durable}"
dir="$(mktemp -d)"
base=$(( 18000 + RANDOM % 1000 * 2 ))
trap '"$shoal" cluster down --config "$dir/c.toml" --run-dir "$dir/run" > /dev/null 2>&1; rm -rf "$dir"' EXIT
case $mode in
  durable) replicas=3 what_default="shoal4000 redis shoal1000"
    up_flags=(--fsync always) redis_flags=(--appendonly yes --appendfsync always) ;;
  durable1) replicas=1 what_default="shoal redis"
    up_flags=(--fsync always) redis_flags=(--appendonly yes --appendfsync always) ;;
  memory) replicas=1 what_default="shoal redis" up_flags=() redis_flags=(--appendonly no) ;;
  *) echo "RESP_BENCH_MODE: durable, durable1 or memory" >&2; exit 2 ;;
esac
REPLICAS=$replicas "$root/scripts/one-shard-config.sh" "resp$mode" "$base" $(( base + 10 )) \
  > "$dir/c.toml"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tck=$(getconf CLK_TCK)
rb() {  # port label server-pid
  for p in ${RESP_BENCH_PIPELINES:-1 16}; do
    echo "## $2 -P $p load $(cut -d' ' -f1-3 /proc/loadavg)"
    local before; before=$(cpu_ticks "$3")
    timeout 900 redis-benchmark -p "$1" -t "${RESP_BENCH_TESTS:-set,get,incr,mset}" -n "$n" -c 50 -P "$p" --csv
    echo "## cpu_ms $(( ($(cpu_ticks "$3") - before) * 1000 / tck ))"
  done
}
run_round() {  # round
  for what in ${RESP_BENCH_WHAT:-$what_default}; do
    case $what in
      shoal*|base*)
        bu=${what#shoal}
        bin="$shoal"
        if [[ $what == base* ]]; then bu=${what#base}; bin="$base_shoal"; fi
        timeout 120 "$bin" cluster up --config "$dir/c.toml" --run-dir "$dir/run" --fresh \
          "${up_flags[@]}" --keys-per-partition 1000 ${bu:+--batch-us "$bu"} > "$dir/up.log" 2>&1 ||
          { cat "$dir/up.log" >&2; exit 1; }
        rb $(( base + 10 )) "round $1 ${what%%[0-9]*}${bu:+ batch_us=$bu}" "$(cat "$dir/run/shard-0.pid")"
        timeout 60 "$bin" cluster down --config "$dir/c.toml" --run-dir "$dir/run" > /dev/null 2>&1
        ;;
      redis)
        mkdir -p "$dir/redis" && rm -rf "$dir/redis/"*
        redis-server --port $(( base + 20 )) --dir "$dir/redis" --save "" "${redis_flags[@]}" \
          > "$dir/redis.log" 2>&1 &
        rpid=$!
        sleep 1
        rb $(( base + 20 )) "round $1 redis ${redis_flags[*]}" "$rpid"
        kill "$rpid"; wait "$rpid" 2>/dev/null
        ;;
    esac
  done
}
for round in $(seq "$rounds"); do run_round "$round"; done | tee "$dir/out"
# The summary: rows keyed by (run name, -P, test); the run name is the header's third word.
awk -F'"' '
  /^## round/ { split($0, w, " "); who = w[4]; if (w[5] ~ /^batch_us/) who = who "_" w[5];
                p = $0; sub(/.* -P /, "", p); sub(/ .*/, "", p);
                round = w[3]; whos[who] = 1; next }
  /^"test"/ || /^##/ || NF < 10 { next }
  { k = who SUBSEP p SUBSEP $2; rps[k, round] = $4; p50[k, round] = $10; p99[k, round] = $14;
    tests[p SUBSEP $2] = 1; rounds[round] = 1 }
  function median(k, arr,   n, r, v, i, j, t) {
    n = 0; for (r in rounds) if ((k, r) in rps) v[++n] = rps[k, r] + 0
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n == 0 ? 0 : v[int((n + 1) / 2)]
  }
  function median_round(k, m,   r) { for (r in rounds) if ((k, r) in rps && rps[k, r] + 0 == m) return r }
  END {
    print "## summary: median req/s (p50/p99 ms of that run), /redis = median over median, same-round = median of the rounds ratios"
    for (t in tests) {
      split(t, tp, SUBSEP); line = sprintf("-P %-2s %-15s", tp[1], tp[2])
      rk = "redis" SUBSEP t; rm = median(rk)
      for (x in whos) {
        k = x SUBSEP t; m = median(k); r = median_round(k, m)
        n = 0; delete v
        for (rr in rounds) if ((k, rr) in rps && (rk, rr) in rps) v[++n] = rps[k, rr] / rps[rk, rr]
        for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (v[j] < v[i]) { tt = v[i]; v[i] = v[j]; v[j] = tt }
        line = line sprintf(" | %s %.0f (%s/%s)", x, m, p50[k, r], p99[k, r])
        if (x != "redis" && rm > 0) line = line sprintf(" /redis %.2f same-round %.2f", m / rm, v[int((n + 1) / 2)])
      }
      print line
    }
  }' "$dir/out" | sort

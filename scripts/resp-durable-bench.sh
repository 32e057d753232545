#!/usr/bin/env bash
# The Redis port with durable replies against redis-server with appendfsync always
# (docs/RESULTS.md, "Durable redis-benchmark"): Shoal 1 shard x 3 replicas (`shoal cluster up
# --fsync always`, the config's batch_us 4000 and `--batch-us 1000`) and Debian's
# redis-server (`--appendonly yes --appendfsync always`, a scratch dir outside the repo),
# alternating, ROUNDS times (default 3): `redis-benchmark -t set,get,incr,mset -n N -c 50
# -P {1,16} --csv` each (N default 200000). Prints "## round R WHAT -P P load L" headers and
# redis-benchmark's CSV.
# Usage: scripts/resp-durable-bench.sh [ROUNDS] [N]   (SHOAL_BIN_DIR: default build/release)
# A/B: SHOAL_BASE_BIN_DIR names a second build, and RESP_BENCH_WHAT the runs of each round in
# order (default "shoal4000 redis shoal1000"; baseUS runs the base build at batch_us US).
set -u
root="$(cd "$(dirname "$0")/.." && pwd)"
shoal="${SHOAL_BIN_DIR:-$root/build/release}/shoal"
base_shoal="${SHOAL_BASE_BIN_DIR:-}/shoal"
rounds="${1:-3}"
n="${2:-200000}"
dir="$(mktemp -d)"
base=$(( 18000 + RANDOM % 1000 * 2 ))
trap '"$shoal" cluster down --config "$dir/c3.toml" --run-dir "$dir/run" > /dev/null 2>&1; rm -rf "$dir"' EXIT
"$root/scripts/one-shard-config.sh" durable3 "$base" $(( base + 10 )) > "$dir/c3.toml"
rb() {  # port label
  for p in 1 16; do
    echo "## $2 -P $p load $(cut -d' ' -f1-3 /proc/loadavg)"
    timeout 900 redis-benchmark -p "$1" -t set,get,incr,mset -n "$n" -c 50 -P "$p" --csv
  done
}
for round in $(seq "$rounds"); do
  for what in ${RESP_BENCH_WHAT:-shoal4000 redis shoal1000}; do
    case $what in
      shoal*|base*)
        bu=${what#shoal}
        bin="$shoal"
        if [[ $what == base* ]]; then bu=${what#base}; bin="$base_shoal"; fi
        timeout 120 "$bin" cluster up --config "$dir/c3.toml" --run-dir "$dir/run" --fresh \
          --fsync always --keys-per-partition 1000 --batch-us "$bu" > "$dir/up.log" 2>&1 ||
          { cat "$dir/up.log"; exit 1; }
        rb $(( base + 10 )) "round $round ${what%%[0-9]*} batch_us=$bu"
        timeout 60 "$bin" cluster down --config "$dir/c3.toml" --run-dir "$dir/run" > /dev/null 2>&1
        ;;
      redis)
        mkdir -p "$dir/redis" && rm -rf "$dir/redis/"*
        redis-server --port $(( base + 20 )) --dir "$dir/redis" --save "" --appendonly yes \
          --appendfsync always > "$dir/redis.log" 2>&1 &
        rpid=$!
        sleep 1
        rb $(( base + 20 )) "round $round redis appendfsync=always"
        kill "$rpid"; wait "$rpid" 2>/dev/null
        ;;
    esac
  done
done

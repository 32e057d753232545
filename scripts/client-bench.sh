#!/usr/bin/env bash
# Round trips of one get against one `shoal server` (1 shard, 1 replica, 1 worker): the client
# library (Client::get, spin_us 0 and 50), pipelined gets (16, 64, 256 outstanding, with the
# server's CPU seconds), hiredis GET on the Redis port, and raw loopback TCP ping-pongs
# (blocking, and polling 50 us first), in that order, RUNS times (default 5);
# build/release/client_bench (src/client/client_bench.cc says what each measures). Then, with
# redis-benchmark installed, RUNS times `redis-benchmark -t get -P 16` on the server's Redis
# port, with the server's CPU seconds over it.
# Usage: scripts/client-bench.sh [RUNS]   (SHOAL_BIN_DIR: the binaries, default build/release)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${SHOAL_BIN_DIR:-$root/build/release}"
runs="${1:-5}"
dir="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(( 17000 + RANDOM % 2000 ))
cat > "$dir/c.toml" <<TOML
[cluster]
name = "clientbench"
transport = "tcp"
workers = 1
replicas = 1

[[region]]
name = "r0"

[[shard]]
id = 0
partition_lo = 1
partition_hi = 2
[[shard.replica]]
region = "r0"
host = "127.0.0.1"
port = $port
TOML
"$bin/shoal" server --config "$dir/c.toml" --shard 0 --keys-per-partition 1000 \
  --resp-port 0 --client-port 0 > "$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q " ready on " "$dir/server.log" && break; sleep 0.1; done
cp=$(grep -o "client protocol on 127.0.0.1:[0-9]*" "$dir/server.log" | cut -d: -f2)
rp=$(grep -o "redis protocol on 127.0.0.1:[0-9]*" "$dir/server.log" | cut -d: -f2)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }  # clock ticks, every thread
for _ in $(seq "$runs"); do
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  SHOAL_BENCH_CLIENT_PORT=$cp SHOAL_BENCH_RESP_PORT=$rp SHOAL_BENCH_SERVER_PID=$pid \
    "$bin/client_bench" --benchmark_min_time=1 2>/dev/null | grep "^BM_"
done
command -v redis-benchmark > /dev/null || exit 0
tck=$(getconf CLK_TCK)
for _ in $(seq "$runs"); do
  before=$(cpu)
  out=$(redis-benchmark -p "$rp" -t get -n 1000000 -c 50 -P 16 --csv | tail -1)
  after=$(cpu)
  rps=$(echo "$out" | cut -d, -f2 | tr -d '"')
  echo "redis-benchmark -t get -n 1000000 -c 50 -P 16: $out; server cpu $(( (after - before) * 1000 / tck )) ms;" \
    "gets per server cpu second $(awk -v n=1000000 -v t=$((after - before)) -v h="$tck" 'BEGIN{printf "%.0f", n * h / t}')"
done

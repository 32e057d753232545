#!/usr/bin/env bash
# Round trips of one get against one `shoal server` (1 shard, 1 replica, 1 worker): the client
# library (Client::get), hiredis GET on the Redis port, and a raw loopback TCP ping-pong, in
# that order, RUNS times (default 5); build/release/client_bench (src/client/client_bench.cc).
# Usage: scripts/client-bench.sh [RUNS]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/build/release"
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
for _ in $(seq "$runs"); do
  SHOAL_BENCH_CLIENT_PORT=$cp SHOAL_BENCH_RESP_PORT=$rp "$bin/client_bench" \
    --benchmark_min_time=1 2>/dev/null | grep "^BM_"
done

#!/usr/bin/env bash
# Prints a cluster config of one shard with 3 replicas on 127.0.0.1 (one worker, TCP, regions
# r0..r2), ports BASE, BASE+2, BASE+4 (replication ports one above each): the benches'
# cluster (scripts/catchup-bench.sh, scripts/checkpoint-bench.sh, scripts/resp-durable-bench.sh).
# With RESP_PORT, replica 0 (the leader) also serves the Redis protocol there. `cluster up`
# gives it an etcd; 1 s of silence before a follower suspects its leader, as the bench's local
# clusters and scripts/run-tpcc.sh use: under a benchmark's load on two cores a live leader can
# be silent for more than the 100 ms default, and was deposed (docs/RESULTS.md, "Durable
# writes").
# Usage: scripts/one-shard-config.sh NAME BASE_PORT [RESP_PORT]
set -euo pipefail
name="$1"
port="$2"
resp_port="${3:-}"
cat <<EOF
[cluster]
name = "$name"
transport = "tcp"
workers = 1
replicas = 3
leader_timeout_ms = 1000
[[region]]
name = "r0"
[[region]]
name = "r1"
[[region]]
name = "r2"
[[shard]]
id = 0
partition_lo = 1
partition_hi = 2
EOF
for r in 0 1 2; do
  printf '[[shard.replica]]\nregion = "r%d"\nhost = "127.0.0.1"\nport = %d\n' "$r" $((port + 2 * r))
  if [ "$r" = 0 ] && [ -n "$resp_port" ]; then printf 'resp_port = %d\n' "$resp_port"; fi
done

#!/usr/bin/env bash
# Prints a cluster config of one shard with 3 replicas on 127.0.0.1 (one worker, TCP, regions
# r0..r2), ports BASE, BASE+2, BASE+4 (replication ports one above each): the benches'
# cluster (scripts/catchup-bench.sh, scripts/checkpoint-bench.sh, scripts/resp-durable-bench.sh).
# REPLICAS=N (default 3) gives N replicas instead (regions r0.., ports BASE, BASE+2, ...).
# With RESP_PORT, replica 0 (the leader) also serves the Redis protocol there; with RESP_EVERY=1
# too, replica R serves it at RESP_PORT + R (a replica other than 0 may come to lead). `cluster up`
# gives it an etcd; 1 s of silence before a follower suspects its leader, as the bench's local
# clusters and scripts/run-tpcc.sh use: under a benchmark's load on two cores a live leader can
# be silent for more than the 100 ms default, and was deposed (docs/RESULTS.md, "Durable
# writes").
# Usage: scripts/one-shard-config.sh NAME BASE_PORT [RESP_PORT]
set -euo pipefail
name="$1"
port="$2"
resp_port="${3:-}"
replicas="${REPLICAS:-3}"
resp_every="${RESP_EVERY:-0}"
cat <<EOF
[cluster]
name = "$name"
transport = "tcp"
workers = 1
replicas = $replicas
leader_timeout_ms = 1000
EOF
for r in $(seq 0 $(( replicas - 1 ))); do printf '[[region]]\nname = "r%d"\n' "$r"; done
printf '[[shard]]\nid = 0\npartition_lo = 1\npartition_hi = 2\n'
for r in $(seq 0 $(( replicas - 1 ))); do
  printf '[[shard.replica]]\nregion = "r%d"\nhost = "127.0.0.1"\nport = %d\n' "$r" $((port + 2 * r))
  if [ -n "$resp_port" ] && { [ "$r" = 0 ] || [ "$resp_every" = 1 ]; }; then
    printf 'resp_port = %d\n' $((resp_port + r))
  fi
done

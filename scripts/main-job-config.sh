#!/usr/bin/env bash
# Prints the main job's cluster config (scripts/run-tpcc.sh): 2 shards x 3 replicas on
# 127.0.0.1 over tcp, one worker each, regions r0..r2 with a 5 ms one-way WAN from r0, keys
# below "n" on shard 0, 1 s of leader timeout. Also measured idle by scripts/idle-cost.sh.
# Replica r of shard s listens on base + 8s + 2r (a leader's followers dial its port + 1),
# serves /metrics on base + 16 + 3s + r, and a leader the Redis protocol on base + 28 + s and
# the client library's protocol (docs/CLIENT.md) on base + 30 + s.
# Usage: scripts/main-job-config.sh BASE_PORT
set -euo pipefail
base="$1"
printf '[cluster]\nname = "local"\ntransport = "tcp"\nworkers = 1\nreplicas = 3\n'
printf 'kv_split_keys = ["n"]\n'
# `cluster up` gives the cluster an etcd (a dead leader is replaced, OPERATIONS.md "A
# standing cluster"); 1 s of silence before a follower suspects its leader, as the bench's
# local clusters use: six processes on two loaded cores can leave a leader silent for more
# than the 100 ms default without it being dead.
printf 'leader_timeout_ms = 1000\n'
for r in 0 1 2; do printf '\n[[region]]\nname = "r%d"\n' "$r"; done
for r in 1 2; do printf '\n[[wan]]\nfrom = "r0"\nto = "r%d"\none_way_ms = 5.0\n' "$r"; done
for s in 0 1; do
  printf '\n[[shard]]\nid = %d\npartition_lo = %d\npartition_hi = %d\n' "$s" $((s + 1)) $((s + 2))
  for r in 0 1 2; do
    printf '[[shard.replica]]\nregion = "r%d"\nhost = "127.0.0.1"\nport = %d\n' \
      "$r" $((base + 8 * s + 2 * r))
    printf 'metrics_port = %d\n' $((base + 16 + 3 * s + r))
    if [ "$r" -eq 0 ]; then
      printf 'resp_port = %d\nclient_port = %d\n' $((base + 28 + s)) $((base + 30 + s))
    fi
  done
done

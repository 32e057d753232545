#!/usr/bin/env bash
# The main job: installs dependencies, builds the release binary, starts a local cluster of
# 2 shards x 3 replicas (leaders in region r0, followers in r1 and r2, 5 ms one way between
# regions) with TPC-C loaded, runs TPC-C across it for 10 seconds (live line, then the report:
# throughput, speculative and commit latency, the consistency check; JSON in tpcc.json), and
# leaves the cluster running with a Redis port on each leader, printing how to reach it and
# how to stop it.
#
# With arguments, runs the in-process bench instead: `scripts/run-tpcc.sh --warehouses 4
# --seconds 30` is `shoal bench tpcc --warehouses 4 --seconds 30`.
# Environment: SHOAL_PORT_BASE (default 7400): the cluster's ports are BASE..BASE+31.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" release shoal
shoal="$root/build/release/shoal"
if [ $# -gt 0 ]; then
  exec "$shoal" bench tpcc "$@"
fi

base="${SHOAL_PORT_BASE:-7400}"
run_dir="$root/.shoal/local"
config="$run_dir/cluster.toml"
if [ -f "$config" ]; then  # a cluster this script started before: stop it, start afresh
  "$shoal" cluster down --config "$config" --run-dir "$run_dir" >/dev/null 2>&1 || true
fi
rm -rf "$run_dir"
mkdir -p "$run_dir"

# Replica r of shard s listens on base + 8s + 2r (a leader's followers dial its port + 1),
# serves /metrics on base + 16 + 3s + r, and a leader the Redis protocol on base + 28 + s and
# the client library's protocol (docs/CLIENT.md) on base + 30 + s.
{
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
} > "$config"

echo "run-tpcc: starting 2 shards x 3 replicas (config $config, logs in $run_dir)" >&2
"$shoal" cluster up --config "$config" --run-dir "$run_dir" --workload tpcc
"$shoal" bench tpcc --cluster "$config" --seconds 10 --check --json tpcc.json

cat <<EOF

The cluster keeps running. Talk to it with any Redis client, through either leader (each
coordinates transactions across both shards; keys below "n" live on shard 0):
  redis-cli -p $((base + 28)) SET apple 1
  redis-cli -p $((base + 29)) GET apple
or with the client library's command line:
  $shoal kv get apple --cluster $config
Watch it:   $shoal cluster top --config $config
Run again:  $shoal bench tpcc --cluster $config --seconds 10 --check
Stop it:    $shoal cluster down --config $config --run-dir $run_dir
EOF

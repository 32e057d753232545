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

"$root/scripts/main-job-config.sh" "$base" > "$config"

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

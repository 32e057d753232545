#!/usr/bin/env bash
# The main job: installs dependencies, builds the release binary, loads TPC-C and runs it with
# a live progress line and a final report. Arguments are passed to `shoal bench tpcc`
# (defaults: 1 warehouse, 1 worker, 10 seconds, consistency check, JSON in tpcc.json).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" release shoal
if [ $# -eq 0 ]; then
  set -- --warehouses 1 --workers 1 --seconds 10 --check --json tpcc.json
fi
exec "$root/build/release/shoal" bench tpcc "$@"

#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test in a release build, then the
# concurrency tests (names containing "Concurrent") again under ThreadSanitizer.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" release
(cd "$root/build/release" && ctest --output-on-failure -j 2 --timeout 600)
if [ "${SHOAL_SKIP_TSAN:-0}" != "1" ]; then
  "$root/scripts/build.sh" tsan index_test txn_test sim_test base_test workloads_test
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
  export SHOAL_TEST_SCALE=small
  (cd "$root/build/tsan" && ctest --output-on-failure -j 2 --timeout 600 -R Concurrent)
fi

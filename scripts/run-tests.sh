#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test in a release build, then the
# engine's tests under AddressSanitizer+UBSan and the concurrency tests (names containing
# "Concurrent") under ThreadSanitizer. SHOAL_SKIP_SANITIZERS=1 runs the release suite only.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" release
(cd "$root/build/release" && ctest --output-on-failure -j 2 --timeout 600)
if [ "${SHOAL_SKIP_SANITIZERS:-0}" != "1" ]; then
  export SHOAL_TEST_SCALE=small
  sanitized=(base_test index_test txn_test sim_test workloads_test cluster_test)
  "$root/scripts/build.sh" asan "${sanitized[@]}"
  # Only the binaries above are built here: skip the CLI tests and the others' placeholders.
  (cd "$root/build/asan" && ctest --output-on-failure -j 2 --timeout 600 -E '^cli_|_NOT_BUILT$')
  "$root/scripts/build.sh" tsan "${sanitized[@]}"
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
  (cd "$root/build/tsan" && ctest --output-on-failure -j 2 --timeout 600 -R Concurrent -E '_NOT_BUILT$')
fi

#!/usr/bin/env bash
# Configures and builds one flavour: release (default), debug, asan or tsan, in build/<flavour>.
# Extra arguments are ninja targets. Environment:
#   SHOAL_WERROR=1      warnings are errors (scripts/run-tests.sh sets it; default off)
#   SHOAL_NATIVE=1      release: -march=native instead of the portable x86-64-v2 baseline
#   SHOAL_CMAKE_ARGS    more cmake arguments, split on spaces
#   SHOAL_BUILD_JOBS    ninja -j (default: nproc)
# Both switches are passed on every run, so a build directory always has the ones asked for
# now, not whatever an earlier run left in its cache.
set -euo pipefail
flavour="${1:-release}"
shift || true
root="$(cd "$(dirname "$0")/.." && pwd)"
case "$flavour" in
  release) args=(-DCMAKE_BUILD_TYPE=Release) ;;
  debug) args=(-DCMAKE_BUILD_TYPE=Debug) ;;
  # Sanitizer flavours with line tables only (-g1): the stacks keep file:line. ASan+UBSan at
  # -O0: UBSan's checks make gcc's optimizer slow, and -O1 took 2.4x the CPU of -O0 (repl_test's
  # largest unity source: 108 s against 46 s, measured 2026-12-03), for tests that then run
  # about as long (docs/RESULTS.md). TSan stays at -O1 (it compiles fast; its tests need speed).
  # ASan+UBSan builds without NDEBUG: SHOAL_DCHECK and assert() on, so the ASan run doubles
  # as the test command's debug pass (it caught a loop used off its owner thread).
  asan) args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0 -g1"
              -DSHOAL_SANITIZE=asan) ;;
  tsan) args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
              -DSHOAL_SANITIZE=tsan) ;;
  *) echo "build.sh: unknown flavour '$flavour' (release, debug, asan, tsan)" >&2; exit 2 ;;
esac
args+=("-DSHOAL_WERROR=$([ "${SHOAL_WERROR:-0}" = 1 ] && echo ON || echo OFF)")
args+=("-DSHOAL_NATIVE=$([ "${SHOAL_NATIVE:-0}" = 1 ] && echo ON || echo OFF)")
read -r -a extra <<< "${SHOAL_CMAKE_ARGS:-}"
args+=("${extra[@]}")
jobs="${SHOAL_BUILD_JOBS:-$(nproc)}"
cmake -S "$root" -B "$root/build/$flavour" -G Ninja "${args[@]}" >/dev/null
ninja -C "$root/build/$flavour" -j "$jobs" "$@"

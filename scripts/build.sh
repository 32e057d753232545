#!/usr/bin/env bash
# Configures and builds one flavour: release (default), debug, asan or tsan, in build/<flavour>.
# Extra arguments are ninja targets.
set -euo pipefail
flavour="${1:-release}"
shift || true
root="$(cd "$(dirname "$0")/.." && pwd)"
case "$flavour" in
  release) args=(-DCMAKE_BUILD_TYPE=Release) ;;
  debug) args=(-DCMAKE_BUILD_TYPE=Debug) ;;
  asan) args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=asan) ;;
  tsan) args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=tsan) ;;
  *) echo "build.sh: unknown flavour '$flavour' (release, debug, asan, tsan)" >&2; exit 2 ;;
esac
jobs="${SHOAL_BUILD_JOBS:-$(nproc)}"
cmake -S "$root" -B "$root/build/$flavour" -G Ninja "${args[@]}" >/dev/null
ninja -C "$root/build/$flavour" -j "$jobs" "$@"

#!/usr/bin/env bash
# Builds and runs the frame-decoder fuzzer (libFuzzer needs clang; the g++ build is untouched).
#   src/net/fuzz/build.sh            build into build/fuzz/ and fuzz for 60 s
#   src/net/fuzz/build.sh 600        fuzz for 600 s
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="$root/build/fuzz"
mkdir -p "$out/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -DSHOAL_FUZZ_TARGET \
  -I"$root/include" -I"$root" \
  "$root/src/net/frame_decoder_fuzz.cc" "$root/src/net/ring.cc" "$root/src/base/status.cc" \
  -lfmt -o "$out/frame_decoder_fuzz"
"$out/frame_decoder_fuzz" -max_total_time="${1:-60}" -max_len=8192 "$out/corpus"

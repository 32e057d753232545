#!/usr/bin/env bash
# Builds and runs the log-decoder fuzzer (libFuzzer needs clang; the g++ build is untouched:
# src/repl/log_decoder_fuzz.cc is an empty translation unit without SHOAL_FUZZ_TARGET).
#   src/repl/fuzz/build.sh            build into build/fuzz/ and fuzz for 60 s
#   src/repl/fuzz/build.sh 600        fuzz for 600 s
# Seeds: if build/release/repl_test exists, valid entries are written into the corpus first.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="$root/build/fuzz"
mkdir -p "$out/log_corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -DSHOAL_FUZZ_TARGET \
  -I"$root/include" -I"$root" \
  "$root/src/repl/log_decoder_fuzz.cc" "$root/src/repl/log_format.cc" \
  "$root/src/base/status.cc" \
  -lfmt -lxxhash -o "$out/log_decoder_fuzz"
if [[ -x "$root/build/release/repl_test" ]]; then
  SHOAL_FUZZ_SEEDS="$out/log_corpus" "$root/build/release/repl_test" \
    --gtest_filter=LogFormat.WriteFuzzSeeds >/dev/null
fi
"$out/log_decoder_fuzz" -max_total_time="${1:-60}" -max_len=16384 "$out/log_corpus"

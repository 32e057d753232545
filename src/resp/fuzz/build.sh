#!/usr/bin/env bash
# Builds and runs the RESP parser/command fuzzer (libFuzzer needs clang; the g++ build is
# untouched: src/resp/resp_parser_fuzz.cc is an empty translation unit without
# SHOAL_FUZZ_TARGET).
#   src/resp/fuzz/build.sh            build into build/fuzz/ and fuzz for 60 s
#   src/resp/fuzz/build.sh 600        fuzz for 600 s
# Seeds: a few valid and malformed requests are written into the corpus first.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="$root/build/fuzz"
corpus="$out/resp_corpus"
mkdir -p "$corpus"
lib=()
for f in "$root"/src/resp/*.cc; do
  case "$f" in *_test.cc|*_bench.cc|*_fuzz.cc) ;; *) lib+=("$f") ;; esac
done
# -fsized-deallocation: the coroutine frame pool's sized delete (src/runtime/task.h);
# -fno-sanitize=function: clang 14 cannot assemble coroutines under it ("Cannot represent a
# difference across sections").
clang++ -std=c++20 -fsized-deallocation -O1 -g -fsanitize=fuzzer,address,undefined \
  -fno-sanitize=function -DSHOAL_FUZZ_TARGET \
  -I"$root/include" -I"$root" \
  "$root/src/resp/resp_parser_fuzz.cc" "${lib[@]}" "$root/src/base/status.cc" \
  -o "$out/resp_parser_fuzz"
printf '*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n' > "$corpus/seed-set-get"
printf 'MULTI\r\nINCR n\r\nSET k "a\\x41" PX 5\r\nEXEC\r\nSCAN 0 MATCH k* COUNT 2\r\n' > "$corpus/seed-inline"
printf 'WATCH a\r\nSET a 1 NX GET\r\nMULTI\r\nAPPEND a x\r\nEXEC\r\nHELLO 3\r\nMGET a b\r\n' > "$corpus/seed-watch"
printf '*2\r\n$4\r\nECHO\r\n$-5\r\n' > "$corpus/seed-bad-bulk"
"$out/resp_parser_fuzz" -max_total_time="${1:-60}" -max_len=8192 "$corpus"

#!/usr/bin/env bash
# Samples every replica's WAL and checkpoint bytes on disk during a one-shard TPC-C run with
# 3 replicas and WAL truncation on the leader (docs/REPLICATION.md "WAL truncation on the
# leader"; the bound is in docs/OPERATIONS.md). Every SAMPLE seconds: per replica directory
# (replica-0 is the leader) the disk usage (du) of its stream-*.wal files, of its checkpoint
# files, and its number of WAL segments. Prints a table, then the bench's own summary lines.
# Usage: scripts/leader-wal-bench.sh [seconds] [interval_ms] [sample_s]  (SHOAL=path, TMPDIR=dir)
# interval_ms 0 runs the baseline: no checkpoints, no truncation.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
shoal="${SHOAL:-$root/build/release/shoal}"
seconds="${1:-300}"
interval="${2:-3000}"
sample="${3:-10}"
out="$(mktemp -d "${TMPDIR:-/tmp}/shoal-leader-wal-bench.XXXXXX")"
dir=""  # the bench's replica directory, $out/shoal-repl-*, once it exists
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
bytes_of() {  # bytes_of DIR PATTERN: disk usage (du) of the matching files, in bytes
  local kib
  # shellcheck disable=SC2086  # the pattern is meant to glob
  kib=$(du -ck "$1"/$2 2>/dev/null | awk 'END { print $1 + 0 }')
  echo $((kib * 1024))
}
flags=()  # interval 0: the baseline, no checkpoints and no truncation anywhere
[ "$interval" != 0 ] && flags=(--checkpoint-interval-ms "$interval")
TMPDIR="$out" "$shoal" bench tpcc --shards 1 --replicas 3 --seconds "$seconds" "${flags[@]}" \
  > "$out/bench.log" 2>&1 &
bench=$!
printf '%6s' t_s
for r in 0 1 2; do printf ' | r%s wal_MB ckpt_MB segs' "$r"; done
printf '\n'
start=$(date +%s)
peak=0
while kill -0 "$bench" 2>/dev/null; do  # bounded by the bench's own run
  sleep "$sample"
  [ -n "$dir" ] || dir=$(ls -d "$out"/shoal-repl-* 2>/dev/null | head -1)
  [ -n "$dir" ] && [ -d "$dir/replica-0" ] || continue
  printf '%6s' $(( $(date +%s) - start ))
  for r in 0 1 2; do
    d="$dir/replica-$r"
    w=$(bytes_of "$d" 'stream-*.wal')
    c=$(bytes_of "$d" 'checkpoint-*.ckpt')
    n=$(ls "$d" 2>/dev/null | grep -c '\.wal$' || true)
    [ "$r" = 0 ] && [ "$w" -gt "$peak" ] && peak=$w
    printf ' | %11s %7s %4s' "$(mb "$w")" "$(mb "$c")" "$n"
  done
  printf '\n'
done
wait "$bench" && rc=0 || rc=$?
echo "leader WAL peak over the samples: $(mb "$peak") MB; bench exit $rc"
grep -E "txn/s|tpmC|replica|digest|checkpoint|WAL" "$out/bench.log" | head -40 || true
echo "bench log: $out/bench.log"
exit "$rc"

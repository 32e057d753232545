// Compaction of a lone replica's directory (docs/REPLICATION.md, "A lone replica's
// checkpoints"): a shard of one replica has no follower to take checkpoints from, so its leader
// writes its own, not from its live engine (a Silo-style store written by the workers has no
// consistent cut) but from its directory: a fresh engine gets the newest checkpoint there that
// loads, then the chosen slots of the closed WAL segments after it, replayed through a
// ReplayApplier exactly as a restart replays them (Follower::open); its exact cut is written as
// checkpoint-<seq>.ckpt and made durable. The live engine and the workers are untouched; the
// cost is the rebuild's CPU, its I/O and, for its duration, a second copy of the store plus
// the closed segments' slots in memory.
//
// Threads: one call on any thread; it reads only files the live log no longer writes (closed
// segments, published checkpoints) and writes only checkpoint-<seq>.ckpt(.tmp).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/repl/replica_proto.h"

namespace shoal::repl {

struct CompactionInput {
  std::string dir;  // the replica's directory: checkpoints and stream-<s>[.<n>].{wal,acc}
  Schema schema;
  uint32_t shard = 0;
  uint32_t streams = 1;
  // Per stream: the closed segments numbered at or below it are read (AcceptorLog::rotate
  // closed them; the live log appends to a newer one).
  std::vector<uint64_t> through_segment;
  uint64_t seq = 0;                         // writes checkpoint-<seq>.ckpt
  const std::atomic<bool>* stop = nullptr;  // set: Aborted between two slots
};

struct CompactionResult {
  std::vector<uint64_t> covered;  // per stream: slots <= it are in the checkpoint
  uint64_t base_seq = 0;          // the checkpoint it started from (0: none, the WAL alone)
  uint64_t slots = 0;             // chosen slots replayed over it
  uint64_t applied_tid = 0;
  uint64_t rows = 0, bytes = 0;  // the new checkpoint's
};

// Rebuilds the store at the closed segments' chosen prefix and publishes its checkpoint.
// Errors: a checkpoint or segment that cannot be read; Corruption when the WAL after the
// checkpoint it loaded lacks slots (truncated behind a checkpoint that no longer loads);
// Aborted when *stop was set. Nothing is published then (the .tmp is removed).
[[nodiscard]] Result<CompactionResult> compact_replica_dir(const CompactionInput& in);

}  // namespace shoal::repl

// Follower checkpoints: every live row of a follower's engine at an exact replay cut
// (ReplayCut, src/repl/replay.h), in one file, so a restarted follower loads it and replays
// only the WAL slots after the cut, and the WAL below the cut can be deleted
// (docs/REPLICATION.md "Checkpoints and WAL truncation", format in docs/LOG_FORMAT.md).
//
// The cut is exact, not fuzzy: the replay thread writes the rows between two entries, when
// the store holds exactly the records with TID <= the cut's applied TID (no tombstones are
// needed: every record replayed after the cut is newer than every row in the file).
//
// Files: <dir>/checkpoint-<seq>.ckpt, written as <name>.tmp (streamed through a bounded
// buffer, kCheckpointChunkBytes), then publish_checkpoint(): fsync, rename, fsync of the
// directory. The whole content is covered by an XXH3-64 in the trailer; a reader verifies it
// (and the length, and the format version: a newer version is refused, NotSupported) before it
// loads a single row, so a torn or corrupted file is refused with one line naming it and never
// partly loaded.
//
// Threads: free functions; write_checkpoint() reads the engine, so the caller guarantees no
// replay writes it meanwhile (the follower's replay thread calls it itself).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/repl/replay.h"
#include "src/txn/engine.h"

namespace shoal::repl {

inline constexpr uint32_t kCheckpointMagic = 0x4b434853;  // "SHCK" in file byte order
// 2: the epoch fences (ReplayCut::fences) after the stream cuts; 1 had none (its count is 0).
// What this binary writes; it reads 1 and 2 too. Version 3: byte-key tables (key words 0).
inline constexpr uint32_t kCheckpointVersion = 3;
inline constexpr size_t kCheckpointChunkBytes = size_t{1} << 20;  // write/read buffer

struct CheckpointStats {
  uint64_t rows = 0;
  uint64_t bytes = 0;  // file size
};

// <dir>/checkpoint-<seq>.ckpt (seq zero-padded so names sort by seq).
std::string checkpoint_path(const std::string& dir, uint64_t seq);
// The sequence numbers of the checkpoint files in dir (not .tmp), ascending.
[[nodiscard]] Result<std::vector<uint64_t>> list_checkpoints(const std::string& dir);

// Writes every live row of `engine` and `cut` to `tmp_path` (truncated first), not synced.
// REQUIRES: nothing writes the engine during the call; the engine's store is exactly `cut`.
[[nodiscard]] Result<CheckpointStats> write_checkpoint(const std::string& tmp_path,
                                                       const txn::Engine& engine,
                                                       const ReplayCut& cut);
// Makes tmp_path durable under `path`: fsync, rename, fsync of the directory.
[[nodiscard]] Status publish_checkpoint(const std::string& tmp_path, const std::string& path);

// Checks length, header, version and checksum without loading anything.
[[nodiscard]] Status verify_checkpoint(const std::string& path);
// The same, then returns the file's cut (a leader checks a checkpoint fetched from a follower
// against what the follower announced). InvalidArgument for another stream count.
[[nodiscard]] Result<ReplayCut> verify_checkpoint_cut(const std::string& path, uint32_t streams);
// Verifies, then installs the rows into `engine` and returns the cut. Errors name the file:
// Corruption (torn, bad checksum, rows that do not fit the schema), NotSupported (a newer
// format), InvalidArgument (written for another number of streams or tables).
// REQUIRES: engine's tables created and empty.
[[nodiscard]] Result<ReplayCut> load_checkpoint(const std::string& path, txn::Engine& engine,
                                                uint32_t streams);

}  // namespace shoal::repl

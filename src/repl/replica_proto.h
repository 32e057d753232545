// What a shard's leader and its followers say to each other besides Paxos messages, and the
// pieces both sides share: the table schema, follower status reports, the engine digest.
//
// One TCP connection per follower, dialed by the follower (so a restarted follower simply
// dials again), carries every stream's Paxos messages (the transport session tag is the
// stream id) and, on kControlSession, small JSON control messages (cold path: a handful per
// run):
//   follower -> leader  {"type":"hello","replica":r}
//   leader -> follower  {"type":"schema","tables":[{"name":..,"key_words":..}],"workload":..}
//   leader -> follower  {"type":"report","target":tid,"digest":bool,"check":bool,
//                        "check_args":any (optional, handed to the follower's CheckFn)}
//   follower -> leader  {"type":"status", ... FollowerReport fields}
//   follower -> leader  {"type":"checkpoint","seq":n,"bytes":b,"covered":[slot per stream],
//                        "kept":[slot per stream]} (CheckpointNote: its newest durable
//                        checkpoint, and below what it may still need the leader's WAL)
//   leader -> follower  {"type":"ckpt_get","seq":n,"offset":o,"max":m} (one chunk, pulled:
//                        one request outstanding, so the follower's sends never pile up)
//   follower -> leader  on kCheckpointSession: a chunk (CheckpointChunk), or on
//                        kControlSession {"type":"ckpt_gone","seq":n} (deleted meanwhile)
//
// Threads: plain data and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shoal/status.h"
#include "src/repl/copy_count.h"
#include "src/txn/engine.h"

namespace shoal::repl {

inline constexpr uint32_t kControlSession = 0xC0000000u;
// Binary checkpoint chunks (follower -> leader), docs/REPLICATION.md "WAL truncation on the
// leader".
inline constexpr uint32_t kCheckpointSession = 0xC0000001u;

// A follower's newest durable checkpoint, as it reports it to the leader. covered[s]: every
// slot <= it of stream s is in the file. kept[s]: the follower may still need the slots above
// it from the leader's WAL (its own WAL is kept above its older checkpoint's cut, and slots it
// never received come from the leader); zeros until it holds two checkpoints.
struct CheckpointNote {
  uint64_t seq = 0;
  uint64_t bytes = 0;  // the file's size
  std::vector<uint64_t> covered;
  std::vector<uint64_t> kept;

  nlohmann::json to_json() const;
  // InvalidArgument naming the field for a malformed note or one for another stream count.
  [[nodiscard]] static Result<CheckpointNote> parse(const nlohmann::json& j, uint32_t streams);
};

// One piece of a checkpoint file: a 32-byte header (magic "CKCH", zero, seq, offset, the
// file's total bytes; little-endian) and the bytes at that offset.
inline constexpr uint32_t kCheckpointChunkMagic = 0x48434b43;  // "CKCH" in byte order
inline constexpr size_t kCheckpointChunkHeaderBytes = 32;
inline constexpr size_t kCheckpointChunkBytesMax = size_t{1} << 20;
struct CheckpointChunk {
  uint64_t seq = 0;
  uint64_t offset = 0;
  uint64_t total = 0;
  std::span<const uint8_t> bytes;  // into the message
};
void encode_checkpoint_chunk_header(uint64_t seq, uint64_t offset, uint64_t total,
                                    uint8_t out[kCheckpointChunkHeaderBytes]);
// InvalidArgument (naming what is wrong) for a message shorter than the header, another
// magic, more than max_bytes of payload, or a range beyond the total.
[[nodiscard]] Result<CheckpointChunk> parse_checkpoint_chunk(std::span<const uint8_t> message,
                                                             size_t max_bytes);

struct TableSchema {
  std::string name;
  uint32_t key_words = 1;
};

// Tables in id order plus the workload whose consistency check followers run ("" for none).
struct Schema {
  std::vector<TableSchema> tables;
  std::string workload;

  static Schema of(const txn::Engine& engine, std::string workload);
  nlohmann::json to_json() const;
  [[nodiscard]] static Result<Schema> from_json(const nlohmann::json& j);
  // Creates the tables in `engine` (fresh) with the same ids.
  [[nodiscard]] Status create_tables(txn::Engine& engine) const;
};

// A follower's answer to a report request.
// Follower reads (FollowerOptions::serve_reads): read-only transactions at the follower's
// snapshot while it replays, each snapshot checked for tearing.
struct FollowerReadStats {
  uint32_t threads = 0;
  uint64_t transactions = 0;  // read-only transactions run
  uint64_t snapshots = 0;     // rounds, one snapshot each
  uint64_t torn = 0;          // snapshots that failed a consistency condition (must be 0)
  std::string first_violation;
  double seconds = 0;  // from the first snapshot to the last
  // Snapshot lag: leader's newest TID this follower received minus the snapshot, in epochs
  // (the TID's high half; the leader advances one per epoch_interval, 40 ms by default).
  double lag_epochs_mean = 0;
  uint64_t lag_epochs_max = 0;
  uint64_t version_chain_bytes = 0;  // older versions kept for snapshots
  uint64_t engine_bytes = 0;         // the follower's whole store (chains included)

  double transactions_per_sec() const { return seconds > 0 ? transactions / seconds : 0; }
  // One line for reports: "follower reads: 900 read-only txn/s (1800 txns, 600 snapshots,
  // 0 torn), lag ..." (no newline).
  std::string to_text() const;
  nlohmann::json to_json() const;
  // Every field is optional (absent: 0 or empty); one of the wrong type fails, naming it.
  [[nodiscard]] static Result<FollowerReadStats> parse(const nlohmann::json& j);
};

struct FollowerReport {
  uint32_t replica = 0;
  uint64_t applied_tid = 0;  // every record at or below it is installed (the shard watermark)
  bool digest_done = false;
  uint64_t digest = 0;
  bool checked = false;
  std::vector<std::string> check_failures;
  uint64_t replay_txns = 0;
  uint64_t replay_writes = 0;
  uint64_t replay_cpu_ns = 0;  // thread CPU time spent installing records
  uint64_t wal_bytes = 0;
  uint64_t recovered_slots = 0;  // restored from the WAL at start
  uint64_t chosen_slots = 0;     // over all streams
  bool lost = false;             // leader side only, never sent: the follower's connection is gone
  FollowerReadStats reads;       // threads == 0: this follower serves no reads
  CopyCounts copies;             // this follower process's, since it started (copy_count.h)

  double replay_txns_per_cpu_sec() const {
    return replay_cpu_ns == 0 ? 0 : static_cast<double>(replay_txns) * 1e9 / replay_cpu_ns;
  }
  nlohmann::json to_json() const;
  // A follower's "status" message: "replica" is required, the other fields optional (absent:
  // 0 or empty); a malformed message fails naming the field, never throws.
  [[nodiscard]] static Result<FollowerReport> parse(const nlohmann::json& j);
};

// CopyCounts as a report carries them: {"entry_bytes_proposed": n, "entry_bytes_received": n,
// "<hop name>": bytes, ...}; parse() takes absent fields as 0 and fails naming a malformed one.
nlohmann::json copy_counts_json(const CopyCounts& c);
[[nodiscard]] Result<CopyCounts> parse_copy_counts(const nlohmann::json& j);

// XXH3-64 over every table (in id order) of (table id, then per live record in key order:
// key words, value size, value bytes). Equal stores give equal digests; versions (TIDs) are
// left out, so a follower that installed a record at its commit TID and a leader that loaded
// it compare equal. REQUIRES: quiescent (no transactions or replay running).
uint64_t engine_digest(const txn::Engine& engine);

}  // namespace shoal::repl

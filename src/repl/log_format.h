// Replication log format, version 5: the bytes a stream's leader writes once and every replica
// sends, keeps, persists and replays as they are. The layout is
// specified byte by byte in docs/LOG_FORMAT.md; this header is its only encoder and decoder.
//
// An entry is a fixed 64-byte header followed by `payload_bytes` of transaction records. All
// integers are little-endian, every record and every write starts 8-byte aligned, and padding
// bytes are zero, so identical batches are byte-identical on every replica.
//
// Threads: a LogBatchBuilder is owned by the worker thread of its stream. A LogEntryView is an
// immutable view; any thread may read it while the underlying bytes stay alive.
//
// Invariants:
//  - A builder never allocates and never writes outside the buffer it was given.
//  - A LogEntryView exists only for bytes that passed LogEntryView::parse(): magic, version,
//    lengths, checksum and the structure of every record. Iterating it afterwards cannot read
//    out of bounds, so replay code needs no error paths.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "shoal/status.h"
#include "src/base/env.h"
#include "src/txn/depvec.h"

namespace shoal::repl {

static_assert(std::endian::native == std::endian::little,
              "the log format is little-endian and decoded in place; big-endian hosts would "
              "need byte swaps in the load/store helpers");

inline constexpr uint32_t kLogMagic = 0x474c4853;             // "SHLG" in file byte order
inline constexpr uint16_t kLogFormatVersion = 7;              // what this binary writes
inline constexpr uint16_t kLogFormatMinVersion = 1;           // oldest version this binary reads
inline constexpr uint16_t kLogFormatPatchVersion = 2;         // first version with WriteOp::kPatch
inline constexpr uint16_t kLogFormatBootstrapEndVersion = 3;  // first with kLogFlagBootstrapEnd
inline constexpr uint16_t kLogFormatEpochStartVersion = 4;    // first with kLogFlagEpochStart
inline constexpr uint16_t kLogFormatBytesKeyVersion = 5;      // first with byte-key writes
inline constexpr uint16_t kLogFormatDistTxnVersion = 6;       // first with kLogRecordDistTxn
inline constexpr uint16_t kLogFormatPromiseHeldVersion = 7;   // first with kLogFlagPromiseHeld
inline constexpr size_t kLogHeaderBytes = 64;
inline constexpr size_t kLogRecordHeaderBytes = 16;
inline constexpr size_t kLogWriteHeaderBytes = 16;
// Format 6: bit 15 of a record's dep_count field says the record is its coordinator's own half
// of a distributed transaction, and the transaction's id (dist::TxnId, u64) follows the record
// header, before the dependencies: the decision outlives the coordinator in its shard's log
// (docs/LOG_FORMAT.md). The count itself is the low 15 bits.
inline constexpr uint16_t kLogRecordDistTxn = 1u << 15;
inline constexpr uint32_t kLogRecordDepsMax = kLogRecordDistTxn - 1;
inline constexpr size_t kLogRecordDistTxnBytes = 8;
inline constexpr uint32_t kLogKeyWordsMax = 8;  // Key<K> has at most 8 words
// Format 5: a write whose key_words field is 0 carries a byte key (a BytesTable's, src/txn/
// bytes_table.h), packed: a u64 length (1..kLogBytesKeyBytesMax), then the bytes, zero padded.
inline constexpr uint32_t kLogBytesKeyBytesMax = 8192;
inline constexpr size_t log_packed_key_words(uint64_t key_bytes) {
  return 1 + (key_bytes + 7) / 8;
}
// The entry size a stream's buffers hold at least, whatever batch_bytes_max says: one
// transaction whose byte-key writes fill txn::kBytesTxnWriteBytesMax (a 1 MiB value), with
// its header, dependencies and a few fixed-key writes. A record larger than batch_bytes_max
// gets an entry of its own (StreamAppender). Readers' limits (Paxos messages, 2 MiB or more:
// replication_message_bytes) are above it.
inline constexpr uint32_t kLogLargeEntryBytes = (1u << 20) + (128u << 10);
// Hard ceiling on one entry; readers also take a (smaller) configured bound.
inline constexpr uint32_t kLogEntryBytesMax = 1u << 30;

// Header flag bits. Unknown bits in a checksum-valid header are refused (NotSupported): they
// mean a newer writer relied on a feature this reader does not know.
inline constexpr uint16_t kLogFlagNoop = 1u << 0;  // epoch-change no-op (design 5.2): 0 records
// Format 3: the floor entry that closes a stream's bootstrap (src/repl/bootstrap.h): no
// records; its max_tid is the snapshot TID S, and every bootstrap record is below S. A follower
// whose applied TID reaches S has installed the whole initial state (readers start there).
inline constexpr uint16_t kLogFlagBootstrapEnd = 1u << 1;
// Format 4: the first entry a new leader logs on each stream after an epoch change (design
// section 5, docs/REPLICATION.md "Failover"): no records; `min_tid` is the shard's final
// watermark F of the epochs before `epoch`, `max_tid` a floor above every TID logged before.
// Replay discards every record of an entry from an older epoch whose TID is above F: such a
// transaction was never acknowledged, and it may have read what the failed leader lost.
inline constexpr uint16_t kLogFlagEpochStart = 1u << 2;
// Format 7: the entry's max_tid (the stream's promise) is held below some of its records' TIDs,
// because a 2PC participant sharing the stream reserved a lower TID it has not installed yet
// (src/dist/participant.h F10). Those records may be followed by later records below them; the
// promise still holds: no record after this entry is at or below max_tid.
inline constexpr uint16_t kLogFlagPromiseHeld = 1u << 3;
inline constexpr uint16_t kLogFlagsKnown =
    kLogFlagNoop | kLogFlagBootstrapEnd | kLogFlagEpochStart | kLogFlagPromiseHeld;
// The flags an entry of format `version` may carry.
inline constexpr uint16_t log_flags_known(uint16_t version) {
  if (version >= kLogFormatPromiseHeldVersion) return kLogFlagsKnown;
  if (version >= kLogFormatEpochStartVersion) return kLogFlagsKnown & ~kLogFlagPromiseHeld;
  return version >= kLogFormatBootstrapEndVersion ? kLogFlagNoop | kLogFlagBootstrapEnd
                                                  : kLogFlagNoop;
}

// kPatch (format 2): an update that carries only the changed bytes of a value of unchanged
// size, against the version it overwrote (docs/LOG_FORMAT.md, "Patch").
enum class WriteOp : uint8_t { kPut = 1, kInsert = 2, kRemove = 3, kPatch = 4 };
inline constexpr size_t kLogPatchHeaderBytes = 8;          // base_tid
inline constexpr size_t kLogPatchRangeHeaderBytes = 4;     // offset u16, length u16
inline constexpr uint32_t kLogPatchValueBytesMax = 65535;  // offsets are u16

// Where an entry belongs: one slot of one stream of one shard.
struct LogEntryId {
  uint32_t shard = 0;
  uint32_t stream = 0;
  uint64_t epoch = 0;
  uint64_t sequence = 0;  // the Paxos slot
};

// Little-endian loads and stores on possibly unaligned bytes (memcpy: no aliasing questions).
inline uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint32_t load_u32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint64_t load_u64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_u16(std::byte* p, uint16_t v) {
  std::memcpy(p, &v, sizeof v);
}
inline void store_u32(std::byte* p, uint32_t v) {
  std::memcpy(p, &v, sizeof v);
}
inline void store_u64(std::byte* p, uint64_t v) {
  std::memcpy(p, &v, sizeof v);
}
inline constexpr size_t pad8(size_t n) {
  return (n + 7) & ~size_t{7};
}

// One write of a transaction, as the builder takes it. `key` is 1..8 words, or with bytes_key
// a packed byte key (log_packed_key_words(key[0]) words); `value` is empty for kRemove.
struct TxnWrite {
  uint32_t table_id = 0;
  WriteOp op = WriteOp::kPut;
  std::span<const uint64_t> key;
  std::span<const std::byte> value;  // kPatch: the patch body (encode_patch)
  uint32_t patch_value_bytes = 0;    // kPatch: size of the value before and after
  uint16_t patch_ranges = 0;         // kPatch: ranges in the body
  bool bytes_key = false;            // key is a packed byte key (never with kPatch)
};

// Encodes into `out` the body of a kPatch write turning `old_value` into `new_value` (same
// size, <= kLogPatchValueBytesMax): base_tid, then (offset u16, length u16, bytes) for each
// run of changed bytes, runs closer than 4 equal bytes merged. Returns the body's size, or 0
// when it would not be smaller than the value (log a put then) or does not fit out.
size_t encode_patch(std::span<const std::byte> old_value, std::span<const std::byte> new_value,
                    uint64_t base_tid, std::span<std::byte> out, uint16_t* range_count);

// Bytes one record takes in a payload (with a distributed transaction's id when dist_txn).
size_t log_record_bytes(size_t dep_count, std::span<const TxnWrite> writes, bool dist_txn = false);
inline size_t log_dep_bytes(size_t dep_count) {
  return pad8(dep_count * 12);
}
inline size_t log_write_bytes(size_t key_words, size_t value_bytes) {
  return kLogWriteHeaderBytes + key_words * 8 + pad8(value_bytes);
}

// ---- Building ------------------------------------------------------------------------------

struct BatchLimits {
  uint32_t batch_txns_max = 400;          // Mako's TPC-C batch
  uint32_t batch_bytes_max = 1u << 20;    // whole entry, header included
  uint64_t batch_age_ns_max = 4'000'000;  // seal an open batch after 4 ms (docs/REPLICATION.md)
};

enum class AppendResult : uint8_t {
  kOk,
  kFull,       // no room (bytes or count) left in this batch: seal it and append to the next
  kNeverFits,  // larger than an empty batch could hold: a configuration or caller error
};

// Encodes transaction records straight into a caller-provided buffer (typically a registered
// buffer of the transport or WAL pool), then seals the header and checksum. Written once: the
// sealed bytes are what goes on the wire, into follower logs and onto disk.
class LogBatchBuilder {
 public:
  LogBatchBuilder() = default;
  LogBatchBuilder(const LogBatchBuilder&) = delete;
  LogBatchBuilder& operator=(const LogBatchBuilder&) = delete;

  // Starts a new batch in `buffer`. The entry may use min(buffer.size(), batch_bytes_max).
  // REQUIRES: buffer 8-byte aligned; it holds at least a header and one empty record; the
  // buffer outlives the batch.
  void reset(std::span<std::byte> buffer, const LogEntryId& id, const BatchLimits& limits);

  // Appends one transaction record: commit TID, sparse dependency entries (any order; copied
  // as given) and writes. A non-zero dist_txn_id marks the record as this shard's half of
  // that distributed transaction (kLogRecordDistTxn). On kFull/kNeverFits the batch
  // is unchanged.
  // REQUIRES: an open (reset, not sealed) batch; each key 1..8 words or a packed byte key;
  // remove has no value; a patch has no byte key.
  [[nodiscard]] AppendResult append(uint64_t commit_tid, std::span<const txn::DepEntry> deps,
                                    std::span<const TxnWrite> writes, uint64_t dist_txn_id = 0);

  // Writes the header (min/max TID, counts, flags) and the checksum; returns the entry bytes,
  // a prefix of the buffer. The builder is closed until the next reset().
  // `floor_tid` raises max_tid to at least that value: the stream's promise that none of its
  // later records has a TID <= max_tid (an idle stream seals empty entries with a floor so the
  // shard watermark, the minimum over streams, is not held back by it; docs/REPLICATION.md).
  // REQUIRES: an open batch; floor_tid below every TID this stream will still log. An empty
  // batch is valid (a heartbeat or, with kLogFlagNoop, the epoch-change no-op); flags with
  // kLogFlagNoop or kLogFlagBootstrapEnd REQUIRE an empty batch.
  // kLogFlagEpochStart: `final_tid` goes into min_tid (the previous epochs' final watermark).
  // `promise_cap` holds max_tid at or below it (a 2PC participant's lowest reservation minus
  // one); when that cuts below a record's TID the entry is flagged kLogFlagPromiseHeld.
  // REQUIRES: kLogFlagPromiseHeld not in `flags` (seal sets it).
  std::span<const std::byte> seal(uint16_t flags = 0, uint64_t floor_tid = 0,
                                  uint64_t final_tid = 0, uint64_t promise_cap = UINT64_MAX);

  bool open() const { return open_; }
  uint32_t txn_count() const { return txn_count_; }
  size_t entry_bytes() const { return used_bytes_; }
  size_t capacity_bytes() const { return capacity_bytes_; }
  // True once an append was refused as kFull: the policy seals on bytes.
  bool refused_full() const { return refused_full_; }
  const LogEntryId& id() const { return id_; }

 private:
  std::byte* buf_ = nullptr;
  size_t capacity_bytes_ = 0;
  size_t used_bytes_ = 0;
  uint32_t txn_count_ = 0;
  uint32_t txns_max_ = 0;
  uint64_t min_tid_ = 0;
  uint64_t max_tid_ = 0;
  LogEntryId id_;
  bool open_ = false;
  bool refused_full_ = false;
};

// When to seal: count >= batch_txns_max, bytes (the next record did not fit), or the first
// record is batch_age_ns_max old by the injected clock. Owned by the stream's worker thread.
class BatchPolicy {
 public:
  enum class Reason : uint8_t { kNone, kCount, kBytes, kAge };

  // REQUIRES: env outlives the policy.
  BatchPolicy(const BatchLimits& limits, Env* env) : limits_(limits), env_(env) {}

  // Call after each successful append; the first record of a batch starts its age.
  void note_append(const LogBatchBuilder& builder);
  // Call after seal(): the next batch starts empty and ageless.
  void note_sealed() { first_append_ns_ = 0; }
  [[nodiscard]] Reason should_seal(const LogBatchBuilder& builder);
  // When the open batch must be sealed by age; 0 if it is empty. For the event loop's timer.
  uint64_t deadline_ns() const {
    return first_append_ns_ == 0 ? 0 : first_append_ns_ + limits_.batch_age_ns_max;
  }

 private:
  BatchLimits limits_;
  Env* env_;
  uint64_t first_append_ns_ = 0;  // 0: no record yet (a real clock never reads 0 twice)
};

// ---- Reading -------------------------------------------------------------------------------

struct WriteView {
  uint32_t table_id;
  WriteOp op;
  uint32_t key_word_count;           // a byte key: its packed words (length word included)
  const std::byte* key_bytes;        // key_word_count * 8 bytes, little-endian words
  std::span<const std::byte> value;  // kPatch: the patch body
  uint32_t patch_value_bytes = 0;    // kPatch only
  uint16_t patch_ranges = 0;         // kPatch only
  bool bytes_key = false;            // format 5: key_bytes holds a packed byte key

  // A byte key's bytes. REQUIRES: bytes_key.
  std::string_view byte_key() const {
    return {reinterpret_cast<const char*>(key_bytes + 8), static_cast<size_t>(load_u64(key_bytes))};
  }

  uint64_t key_word(uint32_t i) const { return load_u64(key_bytes + 8 * size_t{i}); }
  // kPatch: the version the patch was computed against.
  uint64_t patch_base_tid() const { return load_u64(value.data()); }
  // kPatch: writes the changed bytes into `data` (patch_value_bytes long). The entry passed
  // parse(), so the ranges lie inside the value.
  void apply_patch(std::byte* data) const;
};

// A record inside a validated entry. Cheap to copy (two pointers' worth).
class RecordView {
 public:
  uint64_t commit_tid() const { return load_u64(p_); }
  uint32_t record_bytes() const { return load_u32(p_ + 8); }
  uint32_t dep_count() const { return load_u16(p_ + 12) & kLogRecordDepsMax; }
  uint32_t write_count() const { return load_u16(p_ + 14); }
  // The distributed transaction whose coordinator's half this record is (format 6), else 0.
  uint64_t dist_txn_id() const { return has_dist_txn() ? load_u64(p_ + kLogRecordHeaderBytes) : 0; }
  // REQUIRES: i < dep_count()
  txn::DepEntry dep(uint32_t i) const;

  // Calls fn(const WriteView&) for each write, in order.
  template <typename Fn>
  void for_each_write(Fn&& fn) const {
    const std::byte* w = deps_begin() + log_dep_bytes(dep_count());
    for (uint32_t i = 0, n = write_count(); i < n; ++i) {
      const WriteView v = decode_write(w);
      fn(v);
      w += log_write_bytes(v.key_word_count, v.value.size());
    }
  }

 private:
  friend class LogEntryView;
  explicit RecordView(const std::byte* p) : p_(p) {}
  bool has_dist_txn() const { return (load_u16(p_ + 12) & kLogRecordDistTxn) != 0; }
  const std::byte* deps_begin() const {
    return p_ + kLogRecordHeaderBytes + (has_dist_txn() ? kLogRecordDistTxnBytes : 0);
  }
  static WriteView decode_write(const std::byte* w);
  const std::byte* p_;
};

// Header fields of a sealed entry read without a view, where the bytes passed parse() or were
// sealed by this process (LogEntryView reads them the same way). REQUIRES: at least
// kLogHeaderBytes, 8-byte aligned.
inline uint32_t entry_record_count(const std::byte* entry) {
  return load_u32(entry + 36);
}
inline uint64_t entry_max_tid(const std::byte* entry) {
  return load_u64(entry + 48);
}

// A validated entry, viewed in place (no copy). Valid while the bytes it was parsed from live.
class LogEntryView {
 public:
  // Validates `bytes` as one entry starting at bytes[0] (trailing bytes beyond the entry are
  // allowed and ignored; entry_bytes() says where it ends). `offset` is where bytes[0] sits in
  // the caller's stream or file, for error messages. Errors:
  //  - Corruption: bad magic, lengths, checksum or record structure (message has the offset);
  //    also a header cut short ("truncated"), which a WAL scan treats as a torn tail.
  //  - NotSupported: a version newer than this reader, or unknown flags in a valid entry.
  // REQUIRES: bytes.data() 8-byte aligned.
  [[nodiscard]] static Result<LogEntryView> parse(std::span<const std::byte> bytes,
                                                  uint64_t offset = 0,
                                                  uint32_t entry_bytes_max = kLogEntryBytesMax);

  // A view of bytes that already passed parse() and have not changed since (an acceptor store
  // keeps the bytes it verified, immutably), or that this process's LogBatchBuilder sealed (a
  // leader proposing its own entries; every receiver parse()s them in full): header checks
  // only (magic, version, lengths). The checksum and record passes would read every entry a
  // second time on the replay and propose paths. REQUIRES: as stated; 8-byte aligned.
  [[nodiscard]] static Result<LogEntryView> reparse(std::span<const std::byte> bytes);

  // Header-only checks (magic, version, lengths) on at least kLogHeaderBytes; returns the whole
  // entry's size so a reader knows how many more bytes to fetch before parse().
  [[nodiscard]] static Result<size_t> peek_entry_bytes(
      std::span<const std::byte> header, uint64_t offset = 0,
      uint32_t entry_bytes_max = kLogEntryBytesMax);

  uint16_t format_version() const { return load_u16(p_ + 4); }
  uint16_t flags() const { return load_u16(p_ + 6); }
  LogEntryId id() const;
  uint64_t epoch() const { return load_u64(p_ + 16); }
  uint32_t payload_bytes() const { return load_u32(p_ + 32); }
  uint32_t record_count() const { return entry_record_count(p_); }
  uint64_t min_tid() const { return load_u64(p_ + 40); }
  uint64_t max_tid() const { return entry_max_tid(p_); }
  uint64_t checksum() const { return load_u64(p_ + 56); }
  size_t entry_bytes() const { return kLogHeaderBytes + payload_bytes(); }
  std::span<const std::byte> bytes() const { return {p_, entry_bytes()}; }

  template <typename Fn>
  void for_each_record(Fn&& fn) const {
    const std::byte* r = p_ + kLogHeaderBytes;
    for (uint32_t i = 0, n = record_count(); i < n; ++i) {
      const RecordView v(r);
      fn(v);
      r += v.record_bytes();
    }
  }

 private:
  explicit LogEntryView(const std::byte* p) : p_(p) {}
  // The header checks parse() and reparse() share; the entry's size.
  [[nodiscard]] static Result<size_t> check_header(std::span<const std::byte> bytes,
                                                   uint64_t offset, uint32_t entry_bytes_max);
  const std::byte* p_;
};

// XXH3-64 of header bytes [0, 56) followed by the payload: what the checksum field holds.
uint64_t log_entry_checksum(const std::byte* entry, size_t payload_bytes);

}  // namespace shoal::repl

// Snapshot reads on a follower's engine: read-only transactions at a fixed TID while replay
// keeps installing newer records (docs/REPLICATION.md, "Follower reads").
//
// A follower's store is a prefix of the leader's TID order: once replay has published
// applied TID A, every record with TID <= A is installed (src/repl/replay.h). A reader takes
// S = A and reads every key as of S. Replay installs with Table::apply_replicated, which on an
// engine with EngineOptions::keep_version_chains first pushes the key's current version
// (tombstones included) onto its `older` chain, so a reader that finds a head newer than S
// walks back to the newest version <= S; a key with no version <= S is absent at S (inserted
// after S); a tombstone <= S is absent (removed at or before S).
//
// Memory: SnapshotRegistry tracks the snapshots in use and publishes the engine's version
// horizon H = min(oldest active snapshot, applied TID). apply_replicated keeps, per key, the
// versions newer than H plus the newest one <= H, and retires the rest through EBR (chains
// are trimmed as replay writes the key). H never exceeds an active snapshot: a snapshot takes
// S = applied under the registry's mutex and H is computed under it too, and applied only grows.
//
// Threads: one SnapshotRegistry per follower engine, shared by the replay thread
// (publish_applied) and reader threads (SnapshotReader::begin/end). A SnapshotReader belongs to
// one reader thread. Reads are lock-free against replay: a head read is Silo's seqlock read
// (Record::stable_read); older versions are immutable once linked (release store of `older`
// under the record lock, acquire load here); after walking a chain the head's word is
// re-read, and a changed word (replaced by a grown record) makes the read start over.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "shoal/status.h"
#include "src/base/ebr.h"
#include "src/txn/engine.h"

namespace shoal::txn {

class SnapshotRegistry {
 public:
  // At most this many snapshots in use at once (reader threads, each one at a time).
  static constexpr uint32_t kSnapshotsMax = 64;
  // REQUIRES: engine.options().keep_version_chains (else older versions are not kept).
  explicit SnapshotRegistry(Engine& engine);

  // Replay: every record at or below applied_tid is installed, and the store there is a
  // consistent state (a follower publishes only once its bootstrap is installed: before, the
  // applied TID passes through partial loads, src/repl/bootstrap.h). REQUIRES: non-decreasing.
  void publish_applied(uint64_t applied_tid);
  uint64_t applied_tid() const;
  // Oldest snapshot in use, or the applied TID when none (the engine's version horizon).
  uint64_t horizon() const;

 private:
  friend class SnapshotReader;
  // Takes a snapshot slot at the current applied TID. Unavailable when every slot is taken.
  [[nodiscard]] Status acquire(uint32_t* slot, uint64_t* snapshot_tid);
  void release(uint32_t slot);
  void publish_horizon_locked();

  Engine& engine_;
  mutable std::mutex mu_;
  uint64_t applied_tid_ = 0;
  uint64_t active_[kSnapshotsMax] = {};  // 0: free slot (snapshots are > 0 once taken)
  bool in_use_[kSnapshotsMax] = {};
};

struct SnapshotReaderOptions {
  // Test-only planted bug: read every key's newest version, ignoring the snapshot, so tests
  // can show that the torn-snapshot checks catch it.
  bool unsafe_read_newest = false;
};

// What one round of read-only transactions at one snapshot found (a workload's checks, e.g.
// src/workload/tpcc/tpcc_follower_reads.h).
struct ReadRoundResult {
  uint32_t transactions = 0;  // read-only transactions run
  bool torn = false;          // a condition that holds in every consistent state failed
  std::string violation;      // the first failed condition, when torn
};

// One read-only transaction at a time, at the snapshot taken by begin().
class SnapshotReader {
 public:
  explicit SnapshotReader(SnapshotRegistry& registry, SnapshotReaderOptions options = {})
      : registry_(registry), options_(options) {}
  ~SnapshotReader() { end(); }
  SnapshotReader(const SnapshotReader&) = delete;
  SnapshotReader& operator=(const SnapshotReader&) = delete;

  // Starts a read-only transaction at S = the registry's applied TID. Unavailable if
  // SnapshotRegistry::kSnapshotsMax are in use. REQUIRES: no transaction open on this reader.
  [[nodiscard]] Status begin();
  // Ends it (releases the snapshot; the horizon may advance). No-op when none is open.
  void end();
  bool open() const { return open_; }
  uint64_t snapshot_tid() const { return snapshot_tid_; }

  // The same shapes as Txn's reads (so read-only procedures can be written once for both).
  // get: NotFound if the key is absent at S; the value's size must equal size_bytes unless
  // size_out is given. REQUIRES: open().
  template <size_t K>
  Status get(Table<K>& table, const Key<K>& key, void* out, uint32_t size_bytes,
             uint32_t* size_out = nullptr);
  template <typename T, size_t K>
  Status get(Table<K>& table, const Key<K>& key, T* out) {
    return get(table, key, out, sizeof(T));
  }
  // Ascending scan over [lo, hi] of the keys present at S, at most `limit`:
  // fn(const Key<K>&, const void* value, uint32_t size) -> bool (false stops). REQUIRES: open().
  template <size_t K, typename Fn>
  Status scan(Table<K>& table, const Key<K>& lo, const Key<K>& hi, size_t limit, Fn&& fn);
  // Descending scan from hi down to lo.
  template <size_t K, typename Fn>
  Status rscan(Table<K>& table, const Key<K>& hi, const Key<K>& lo, size_t limit, Fn&& fn);

 private:
  enum class ReadOutcome : uint8_t { kFound, kAbsent, kRetry };
  // Reads rec as of the snapshot into scratch_ (value size in *size_out).
  ReadOutcome read_at(const Record* rec, uint32_t* size_out);
  // read_at, looking the key up again while the record was replaced under us (bounded).
  template <size_t K>
  ReadOutcome read_key(Table<K>& table, const Key<K>& key, const Record* rec, uint32_t* size_out);
  template <bool kReverse, size_t K, typename Fn>
  Status scan_impl(Table<K>& table, const Key<K>& from, const Key<K>& to, size_t limit, Fn& fn);

  SnapshotRegistry& registry_;
  SnapshotReaderOptions options_;
  bool open_ = false;
  uint32_t slot_ = 0;
  uint64_t snapshot_tid_ = 0;
  uint64_t scratch_[TableBase::kValueBytesMax / 8] = {};
  std::optional<ebr::Guard> guard_;
};

// ---- Implementation ----

template <size_t K>
SnapshotReader::ReadOutcome SnapshotReader::read_key(Table<K>& table, const Key<K>& key,
                                                     const Record* rec, uint32_t* size_out) {
  // Bounded: a retry means replay replaced this key's record meanwhile (it grew); replay of
  // one key does that at most once per install.
  for (int attempt = 0; attempt < (1 << 16); ++attempt) {
    if (rec == nullptr) return ReadOutcome::kAbsent;
    const ReadOutcome o = read_at(rec, size_out);
    if (o != ReadOutcome::kRetry) return o;
    rec = static_cast<const Record*>(table.index_.get(key, nullptr));
  }
  SHOAL_ASSERT(false, "%s", "snapshot read of a key kept failing");
  return ReadOutcome::kAbsent;
}

template <size_t K>
Status SnapshotReader::get(Table<K>& table, const Key<K>& key, void* out, uint32_t size_bytes,
                           uint32_t* size_out) {
  SHOAL_ASSERT(open_, "%s", "snapshot get outside begin()/end()");
  const auto* rec = static_cast<const Record*>(table.index_.get(key, nullptr));
  uint32_t size = 0;
  if (read_key(table, key, rec, &size) != ReadOutcome::kFound) return Status::NotFound();
  if (size_out != nullptr) {
    *size_out = size;
  } else {
    SHOAL_ASSERT(size == size_bytes, "snapshot get: value of %u bytes into %u", size, size_bytes);
  }
  std::memcpy(out, scratch_, std::min(size, size_bytes));
  return Status::Ok();
}

template <bool kReverse, size_t K, typename Fn>
Status SnapshotReader::scan_impl(Table<K>& table, const Key<K>& from, const Key<K>& to,
                                 size_t limit, Fn& fn) {
  SHOAL_ASSERT(open_, "%s", "snapshot scan outside begin()/end()");
  size_t delivered = 0;
  auto on_entry = [&](const Key<K>& key, void* value) {
    if (delivered >= limit) return false;
    uint32_t size = 0;
    if (read_key(table, key, static_cast<const Record*>(value), &size) != ReadOutcome::kFound) {
      return true;
    }
    ++delivered;
    return static_cast<bool>(fn(key, static_cast<const void*>(scratch_), size)) &&
           delivered < limit;
  };
  auto on_leaf = [](const typename BTree<K>::NodeRef&) {};
  if constexpr (kReverse) {
    table.index_.rscan(from, to, on_entry, on_leaf);
  } else {
    table.index_.scan(from, to, on_entry, on_leaf);
  }
  return Status::Ok();
}

template <size_t K, typename Fn>
Status SnapshotReader::scan(Table<K>& table, const Key<K>& lo, const Key<K>& hi, size_t limit,
                            Fn&& fn) {
  return scan_impl<false>(table, lo, hi, limit, fn);
}

template <size_t K, typename Fn>
Status SnapshotReader::rscan(Table<K>& table, const Key<K>& hi, const Key<K>& lo, size_t limit,
                             Fn&& fn) {
  return scan_impl<true>(table, hi, lo, limit, fn);
}

}  // namespace shoal::txn

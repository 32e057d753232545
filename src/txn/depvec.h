// Sparse dependency vectors (docs/ARCHITECTURE.md, "Across shards"; acknowledged once the
// vectorized watermark covers them: docs/REPLICATION.md, "Vectorized watermark across shards").
//
// A version's dependency vector says, per shard, the highest commit timestamp it depends on.
// Mako ships a dense uint32[SHARDS] per version; we keep only (shard, timestamp) entries that
// are non-zero, sorted by shard, so the size tracks the shards a transaction actually touched.
// Entries the vectorized watermark already covers are not trimmed: a version's vector is an
// immutable copy, and covered entries cost only their bytes.
//
// A DepVec is a value type owned by one thread; a Record points at an immutable heap copy
// when its version has dependencies beyond its own shard's TID.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace shoal::txn {

struct DepEntry {
  uint32_t shard;
  uint64_t ts;
  friend bool operator==(const DepEntry&, const DepEntry&) = default;
};

class DepVec {
 public:
  // Raises the entry for `shard` to at least `ts`.
  void raise(uint32_t shard, uint64_t ts) {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), shard,
                               [](const DepEntry& e, uint32_t s) { return e.shard < s; });
    if (it != entries_.end() && it->shard == shard) {
      it->ts = std::max(it->ts, ts);
    } else if (ts != 0) {
      entries_.insert(it, DepEntry{shard, ts});
    }
  }
  // Element-wise max.
  void merge(const DepVec& other) {
    for (const DepEntry& e : other.entries_) raise(e.shard, e.ts);
  }
  uint64_t get(uint32_t shard) const {
    for (const DepEntry& e : entries_) {
      if (e.shard == shard) return e.ts;
    }
    return 0;
  }
  // True when every entry of `other` is <= the matching entry here.
  bool dominates(const DepVec& other) const {
    for (const DepEntry& e : other.entries_) {
      if (get(e.shard) < e.ts) return false;
    }
    return true;
  }
  void clear() { entries_.clear(); }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  const std::vector<DepEntry>& entries() const { return entries_; }

  // Bytes on the wire: a count, then (shard varint-free u32, ts u64) per entry.
  size_t encoded_bytes() const { return 2 + entries_.size() * (4 + 8); }
  static size_t dense_bytes(uint32_t shard_count) { return shard_count * 8; }

 private:
  std::vector<DepEntry> entries_;
};

}  // namespace shoal::txn

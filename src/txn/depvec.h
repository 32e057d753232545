// Sparse dependency vectors (docs/ARCHITECTURE.md, "Across shards"; acknowledged once the
// vectorized watermark covers them: docs/REPLICATION.md, "Vectorized watermark across shards").
//
// A version's dependency vector says, per shard, the highest commit timestamp it depends on.
// Mako ships a dense uint32[SHARDS] per version; we keep only (shard, timestamp) entries that
// are non-zero, sorted by shard, so the size tracks the shards a transaction actually touched.
// In memory a vector keeps every entry it was given (a version's vector is an immutable copy).
//
// Compact form (design section 3, "(base, entries above it)"): where a vector is logged
// (repl::StreamAppender) or crosses the 2PC wire (dist::RpcLink, ParticipantService), the
// sender leaves out every entry its *stable base* covers. The base is the sender's vectorized
// watermark (dist::VectorWatermark::base()): entry (s, ts) is covered when the sender knows
// shard s's watermark at or above ts and ts is in no range a failover of s declared lost.
// Nothing about the base travels: a reader rebuilds the vector from the entries above it and
// treats a missing entry as "no dependency", which is exact, because:
//  - A covered entry is stable, a fact about the cluster and not about the sender's view: a
//    watermark value was once shard s's real watermark (VectorWatermark's invariant), so every
//    TID of s at or below it is chosen on a majority; and TIDs only stop being durable by a
//    failover, which loses exactly (F, floor] with F, the final watermark, at or above every
//    watermark s reported in the epochs before, while fenced ranges are excluded above.
//  - Acknowledgement (VectorWatermark::covers/wait_covered) waits for entries to be covered:
//    a stable entry is already durable, so a vector without it is acknowledged exactly when
//    the whole one may be (no later, never earlier than durability allows).
//  - The FVW discard (server/discard_journal.h, VectorWatermark::lost) judges a version lost
//    when an entry names a TID in (F, floor]: a stable entry never does, so dropping it
//    changes no verdict.
//  - A participant installs at max(its own entry, its proposal, floor + 1) (participant.h
//    F10). 2PC requests always carry the receiving shard's own entry (dist::RpcLink leaves
//    it out of the base). The decision log (repl/decision_log.h) may lack it when the
//    coordinator's shard logged it as stable (dist::Participant::resolve): a stable entry of
//    a replicated shard is at or below its watermark, hence at or below the floor of every
//    stream of that shard: the same TID with or without it. (A shard without replication
//    reports UINT64_MAX, so every entry of it is stable; nothing waits on or fences such a
//    shard, and it installs at max(proposal, floor + 1), still above what it locked.)
// Code that cares whether a transaction spans shards asks the transaction, not its vector's
// entries (server Worker::logged_commit): a compact vector may name no other shard.
//
// A DepVec is a value type owned by one thread; a Record points at an immutable heap copy
// when its version has dependencies beyond its own shard's TID.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shoal/status.h"

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

  // Bytes of the uncompacted form before the compact one (a u32 count, then shard u32 and
  // ts u64 per entry: the 2PC wire of earlier versions), for comparisons.
  size_t full_wire_bytes() const { return 4 + entries_.size() * (4 + 8); }
  static size_t dense_bytes(uint32_t shard_count) { return shard_count * 8; }

 private:
  std::vector<DepEntry> entries_;
};

// The stable base of a compaction (see the top): stable(shard, ts) says that every TID of
// `shard` at or below ts is durable and can never be lost. A default DepBase covers nothing
// (every entry is kept). Owned by whoever owns the watermark it reads; called on that thread.
struct DepBase {
  using StableFn = bool (*)(const void* ctx, uint32_t shard, uint64_t ts);
  StableFn stable_fn = nullptr;
  const void* ctx = nullptr;
  bool covers(uint32_t shard, uint64_t ts) const {
    return stable_fn != nullptr && stable_fn(ctx, shard, ts);
  }
};

// Bytes of dependency vectors a sender wrote, compact, and what the same vectors took before
// (every entry: DepVec::full_wire_bytes on the wire, repl::log_dep_bytes of every other-shard
// entry in the log). Owned by one thread; summed with +=.
struct DepVecBytes {
  uint64_t vectors = 0;     // vectors encoded
  uint64_t entries = 0;     // entries written (above the base)
  uint64_t omitted = 0;     // entries left out (covered by the base)
  uint64_t bytes = 0;       // compact bytes written
  uint64_t full_bytes = 0;  // bytes the uncompacted form takes
  DepVecBytes& operator+=(const DepVecBytes& o) {
    vectors += o.vectors;
    entries += o.entries;
    omitted += o.omitted;
    bytes += o.bytes;
    full_bytes += o.full_bytes;
    return *this;
  }
  // REQUIRES: `base` is an earlier snapshot of the same counters.
  DepVecBytes operator-(const DepVecBytes& base) const {
    return {vectors - base.vectors, entries - base.entries, omitted - base.omitted,
            bytes - base.bytes, full_bytes - base.full_bytes};
  }
};

// The entries of `v` the base does not cover, `skip_shard`'s excluded (UINT32_MAX: none),
// into *out (cleared first; keeps v's order). Returns how many covered entries it left out.
uint32_t compact_entries(const DepVec& v, const DepBase& base, uint32_t skip_shard,
                         std::vector<DepEntry>* out);

// ---- The compact wire form (2PC messages; docs/REPLICATION.md, "Dependency vectors") ----
// count u16, then per entry shard u16 and ts u64, little-endian, shards strictly increasing,
// every ts non-zero. 2 + 10 bytes per entry above the base.
inline constexpr size_t kDepWireHeaderBytes = 2;
inline constexpr size_t kDepWireEntryBytes = 10;
inline constexpr uint32_t kDepWireShardsMax = 1024;  // dist::DistTxn::kShardsMax
inline constexpr size_t dep_wire_bytes(size_t entries_above) {
  return kDepWireHeaderBytes + entries_above * kDepWireEntryBytes;
}
// How many entries of `v` encode_dep_wire writes against `base`.
size_t dep_wire_entries(const DepVec& v, const DepBase& base);
// Writes `v`'s compact form into out, which must be exactly dep_wire_bytes(entries) long
// (entries = dep_wire_entries(v, base) with the same base, unchanged since). Adds to
// *counted when given. REQUIRES: every shard < kDepWireShardsMax.
void encode_dep_wire(const DepVec& v, const DepBase& base, std::span<uint8_t> out,
                     DepVecBytes* counted = nullptr);
// Decodes a compact vector that fills `in` exactly into *out (cleared first). `what` names
// the message in errors. Corruption: "truncated dependency vector count", "truncated
// dependency vector entry i of n", "n trailing bytes after the dependency vector";
// InvalidArgument: "dependency vector count n above 1024", "dependency vector entry i:
// shard s not above shard p" (unsorted or repeated), "dependency vector entry i: shard s
// out of range", "dependency vector entry i: timestamp 0".
[[nodiscard]] Status decode_dep_wire(std::span<const uint8_t> in, DepVec* out, const char* what);

}  // namespace shoal::txn

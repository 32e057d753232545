// Records: one per key, updated in place under Silo's version word protocol.
//
// The version word (`word`) packs a lock bit, two state bits and a 61-bit commit TID. Writers
// take the lock bit (only at commit, in a global order), write the data, then publish a new
// TID and release the lock in one store. Readers never lock: they read the word, copy the
// data with relaxed atomic word loads, and re-read the word; a changed or locked word means
// the copy may be torn and is retried. Data is copied word by word with atomics so that the
// seqlock pattern is well defined in C++ (and TSan-clean); on x86 these are plain moves.
//
// Older versions: when the engine keeps version chains, an install first copies the current
// version into a new Record linked from `older`, so readers at an older snapshot (followers,
// later) can walk back. Chains are trimmed by TID horizon and freed through EBR.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/base/assert.h"
#include "src/txn/depvec.h"

namespace shoal::txn {

// TID layout: [63] lock, [62] absent, [61] unlinked, [60..0] version = epoch << 32 | sequence.
struct Tid {
  static constexpr uint64_t kLock = 1ULL << 63;
  static constexpr uint64_t kAbsent = 1ULL << 62;    // deleted, or inserted but not committed
  static constexpr uint64_t kUnlinked = 1ULL << 61;  // removed from the index: a dead record
  static constexpr uint64_t kVersionMask = (1ULL << 61) - 1;
  static constexpr uint64_t kStateMask = kAbsent | kUnlinked;

  static uint64_t version(uint64_t word) { return word & kVersionMask; }
  static uint64_t epoch(uint64_t word) { return version(word) >> 32; }
  static uint64_t make(uint64_t epoch, uint64_t seq) { return (epoch << 32) | seq; }
};

struct Record {
  std::atomic<uint64_t> word;
  uint32_t size_bytes;      // valid bytes in data
  uint32_t capacity_words;  // data capacity, in 8-byte words
  Record* older;            // previous version when chains are kept, else nullptr
  // Dependencies of this version beyond its own shard's TID (nullptr: none). Replaced only
  // under the lock; the old vector is retired through EBR, so readers load it atomically.
  std::atomic<const DepVec*> deps;
  alignas(8) uint64_t data[];

  static Record* make(uint32_t size_bytes, uint64_t initial_word);
  static void free(void* record);      // with its chain of older versions
  static void free_one(void* record);  // alone: its chain lives on in a newer record
  static size_t alloc_bytes(uint32_t capacity_words) {
    return sizeof(Record) + capacity_words * sizeof(uint64_t);
  }
  static uint32_t words_for(uint32_t size_bytes) { return (size_bytes + 7) / 8; }

  // Copies the stable value (at most out_bytes of it) into `out` and returns the version word
  // it belongs to; *size_out is the value's full size. Spins at most spins_max pauses while the
  // record is locked; returns a word with kLock set if it stayed locked, which callers treat
  // as a conflict.
  uint64_t stable_read(void* out, uint32_t out_bytes, uint32_t* size_out, uint32_t spins_max) const;

  // REQUIRES: the caller holds the lock bit (or the record is unpublished);
  // size_bytes <= capacity. Reads exactly size_bytes from src.
  void write_locked(const void* src, uint32_t size_bytes);

  // Takes the lock bit, spinning at most spins_max pauses; false if it stayed locked (a
  // conflict).
  bool try_lock(uint64_t* observed, uint32_t spins_max);
  // Publishes `new_word` (without kLock), releasing the lock.
  void unlock_with(uint64_t new_word) {
    word.store(new_word & ~Tid::kLock, std::memory_order_release);
  }
  void unlock() { word.fetch_and(~Tid::kLock, std::memory_order_release); }
};

// Word-wise relaxed atomic copy: the seqlock data path.
inline void atomic_copy_words(uint64_t* dst, const uint64_t* src, uint32_t nwords) {
  for (uint32_t i = 0; i < nwords; ++i) {
    dst[i] =
        std::atomic_ref<uint64_t>(const_cast<uint64_t&>(src[i])).load(std::memory_order_relaxed);
  }
}
inline void atomic_store_words(uint64_t* dst, const uint64_t* src, uint32_t nwords) {
  for (uint32_t i = 0; i < nwords; ++i) {
    std::atomic_ref<uint64_t>(dst[i]).store(src[i], std::memory_order_relaxed);
  }
}

}  // namespace shoal::txn

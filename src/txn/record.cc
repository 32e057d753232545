#include "src/txn/record.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <new>

namespace shoal::txn {

Record* Record::make(uint32_t size_bytes, uint64_t initial_word) {
  const uint32_t cap = words_for(size_bytes == 0 ? 1 : size_bytes);
  void* mem = std::malloc(alloc_bytes(cap));
  SHOAL_ASSERT(mem != nullptr, "out of memory allocating a record of %u bytes", size_bytes);
  auto* rec = static_cast<Record*>(mem);
  new (&rec->word) std::atomic<uint64_t>(initial_word);
  rec->size_bytes = size_bytes;
  rec->capacity_words = cap;
  rec->older = nullptr;
  new (&rec->deps) std::atomic<const DepVec*>(nullptr);
  return rec;
}

void Record::free(void* p) {
  auto* rec = static_cast<Record*>(p);
  // Version chains hang off the newest version and die with it.
  Record* older = rec->older;
  for (int depth = 0; older != nullptr; ++depth) {
    SHOAL_ASSERT(depth < (1 << 20), "version chain cycle");
    Record* next = older->older;
    delete older->deps.load(std::memory_order_relaxed);
    std::free(older);
    older = next;
  }
  delete rec->deps.load(std::memory_order_relaxed);
  std::free(rec);
}

void Record::free_one(void* p) {
  auto* rec = static_cast<Record*>(p);
  delete rec->deps.load(std::memory_order_relaxed);
  std::free(rec);
}

uint64_t Record::stable_read(void* out, uint32_t out_bytes, uint32_t* size_out,
                             uint32_t spins_max) const {
  char* dst = static_cast<char*>(out);
  uint64_t w1 = 0;
  // One more round than spins_max: with spins_max == 0 an unlocked record is still read.
  for (uint32_t round = 0; round <= spins_max; ++round) {
    w1 = word.load(std::memory_order_acquire);
    if (w1 & Tid::kLock) {
      _mm_pause();
      continue;
    }
    const uint32_t size = std::atomic_ref<uint32_t>(const_cast<uint32_t&>(size_bytes))
                              .load(std::memory_order_relaxed);
    const uint32_t copy_bytes = std::min({size, out_bytes, capacity_words * 8});
    const uint32_t full = copy_bytes / 8;
    // Straight into the caller's buffer, word by word (atomic loads: see the header).
    for (uint32_t i = 0; i < full; ++i) {
      const uint64_t v =
          std::atomic_ref<uint64_t>(const_cast<uint64_t&>(data[i])).load(std::memory_order_relaxed);
      std::memcpy(dst + i * 8, &v, 8);
    }
    if (full * 8 != copy_bytes) {
      const uint64_t v = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(data[full]))
                             .load(std::memory_order_relaxed);
      std::memcpy(dst + full * 8, &v, copy_bytes - full * 8);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (word.load(std::memory_order_relaxed) == w1) {
      *size_out = size;
      return w1;
    }
  }
  return w1 | Tid::kLock;
}

void Record::write_locked(const void* src, uint32_t size_bytes_new) {
  SHOAL_ASSERT(words_for(size_bytes_new) <= capacity_words,
               "record overflow: %u bytes into %u words", size_bytes_new, capacity_words);
  std::atomic_thread_fence(std::memory_order_release);
  const uint32_t full = size_bytes_new / 8;
  uint64_t tail = 0;
  std::memcpy(&tail, static_cast<const char*>(src) + full * 8, size_bytes_new - full * 8);
  // The source may be an unaligned user struct: go through memcpy into a word at a time.
  for (uint32_t i = 0; i < full; ++i) {
    uint64_t w;
    std::memcpy(&w, static_cast<const char*>(src) + i * 8, 8);
    std::atomic_ref<uint64_t>(data[i]).store(w, std::memory_order_relaxed);
  }
  if (full * 8 != size_bytes_new)
    std::atomic_ref<uint64_t>(data[full]).store(tail, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(size_bytes).store(size_bytes_new, std::memory_order_relaxed);
}

bool Record::try_lock(uint64_t* observed, uint32_t spins_max) {
  uint64_t w = word.load(std::memory_order_relaxed);
  for (uint32_t round = 0; round <= spins_max; ++round) {
    if (!(w & Tid::kLock)) {
      if (word.compare_exchange_weak(w, w | Tid::kLock, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
        *observed = w;
        return true;
      }
      continue;
    }
    _mm_pause();
    w = word.load(std::memory_order_relaxed);
  }
  return false;
}

}  // namespace shoal::txn

// RingHolds: see ring_holds.h.
#include "src/net/ring_holds.h"

#include <sys/mman.h>

#include "src/base/assert.h"

namespace shoal::net {

// The allocator of a hold's shared_ptr: its control block goes into the hold's record (no
// allocation per hold), and giving it back, the very last step of the last handle's release,
// clears the record (floor() may then pass it) and drops the hold's table reference.
template <typename T>
struct RingHolds::ControlAllocator {
  using value_type = T;
  RingHolds* table;
  Record* record;
  ControlAllocator(RingHolds* t, Record* r) : table(t), record(r) {}
  template <typename U>
  ControlAllocator(const ControlAllocator<U>& other)  // NOLINT: rebind
      : table(other.table), record(other.record) {}
  T* allocate(size_t n) {
    static_assert(sizeof(T) <= kControlBytes && alignof(T) <= 16,
                  "the shared_ptr control block must fit a hold's record");
    SHOAL_ASSERT(n == 1, "control block allocation of %zu", n);
    return reinterpret_cast<T*>(record->control);
  }
  void deallocate(T*, size_t) {
    RingHolds* t = table;  // the record may be reused once the flag is clear
    record->held.store(false, std::memory_order_release);
    t->unref();
  }
  template <typename U>
  bool operator==(const ControlAllocator<U>& other) const {
    return record == other.record;
  }
};

RingHolds* RingHolds::create(uint32_t capacity, void* map, size_t map_bytes) {
  SHOAL_ASSERT(capacity >= 1, "%s", "a RingHolds of no records");
  return new RingHolds(capacity, map, map_bytes);
}

RingHolds::RingHolds(uint32_t capacity, void* map, size_t map_bytes)
    : capacity_(capacity),
      map_(map),
      map_bytes_(map_bytes),
      records_(std::make_unique<Record[]>(capacity)) {}

RingHolds::~RingHolds() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

void RingHolds::unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

std::shared_ptr<const uint64_t[]> RingHolds::hold(const uint8_t* data, uint64_t begin,
                                                  size_t bytes) {
  (void)bytes;
  SHOAL_ASSERT(reinterpret_cast<uintptr_t>(data) % 8 == 0, "%s", "a hold must be 8-byte aligned");
  const bool in_order = pushed_ == popped_ || records_[(pushed_ - 1) % capacity_].begin <= begin;
  if (pushed_ - popped_ == capacity_ || !in_order) {
    ++refused_;
    return nullptr;
  }
  Record& r = records_[pushed_ % capacity_];
  r.begin = begin;
  r.held.store(true, std::memory_order_relaxed);
  ++pushed_;
  refs_.fetch_add(1, std::memory_order_relaxed);
  // The deleter has nothing to do: the bytes are the ring's; the allocator ends the hold.
  return std::shared_ptr<const uint64_t[]>(
      reinterpret_cast<const uint64_t*>(data), [](const uint64_t*) {},
      ControlAllocator<uint64_t>(this, &r));
}

uint64_t RingHolds::floor(uint64_t cursor) {
  // Bounded by the records in use. Acquire: the holder's last reads of the bytes happen
  // before the producer may overwrite them (the consumer publishes head after this).
  while (popped_ != pushed_ &&
         !records_[popped_ % capacity_].held.load(std::memory_order_acquire)) {
    ++popped_;
  }
  return popped_ == pushed_ ? cursor : records_[popped_ % capacity_].begin;
}

}  // namespace shoal::net

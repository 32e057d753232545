// RingHolds: regions of a ring consumer's receive area that a receiver keeps after releasing
// the frames they came in (a replication follower's acceptor store keeps each received log
// entry where the leader wrote it in the shared-memory ring: no copy into a buffer of its own).
//
// A hold is a shared_ptr<const uint64_t[]> on the held bytes whose control block lives in a
// record of this table (no allocation per hold); the last handle's release clears the record's
// flag. The consumer thread makes holds in ring order and asks floor(cursor) before returning
// credit: the producer gets back the bytes below the oldest region still held, never beyond,
// so held bytes are never overwritten. Holds are released in any order, on any thread (a
// follower's replay thread drops most of them); floor() skips released records at the front.
//
// Lifetime: the table owns the ring's mapping once the endpoint is closed: the endpoint keeps
// one reference, every live hold another, and the last one to go unmaps (a follower's store
// outlives its connection: a takeover hands it to the new leader with the held bytes in it).
//
// Bounds: `capacity` records; hold() refuses (a null pointer: the caller copies instead) when
// every record is in use or when the bytes are older than the newest held region.
// Threads: hold(), floor() and the reference taken for the endpoint: the consumer's thread.
// A hold's release and unref(): any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace shoal::net {

class RingHolds {
 public:
  // A table of `capacity` records (>= 1) that unmaps [map, map + map_bytes) when the last
  // reference goes (map null: owns nothing). The caller holds the first reference.
  static RingHolds* create(uint32_t capacity, void* map, size_t map_bytes);
  RingHolds(const RingHolds&) = delete;
  RingHolds& operator=(const RingHolds&) = delete;

  // Holds `bytes` bytes at `data`, which sit at ring positions [begin, begin + bytes).
  // Null when no record is free or begin is below the newest hold's. Consumer thread.
  // REQUIRES: data 8-byte aligned; the bytes are below the consumer's cursor and not yet
  // released to the producer.
  std::shared_ptr<const uint64_t[]> hold(const uint8_t* data, uint64_t begin, size_t bytes);
  // The position credit may be returned up to: the oldest held region's start, or `cursor`
  // when nothing is held. Consumer thread.
  uint64_t floor(uint64_t cursor);
  // Records in use (held or released but not yet passed by floor()). Consumer thread.
  uint64_t records_in_use() const { return pushed_ - popped_; }
  uint32_t capacity() const { return capacity_; }
  // Holds made and holds refused (the table full, or out of order) so far. Consumer thread.
  uint64_t holds_made() const { return pushed_; }
  uint64_t holds_refused() const { return refused_; }

  void unref();

 private:
  static constexpr size_t kControlBytes = 64;
  struct Record {
    uint64_t begin = 0;
    std::atomic<bool> held{false};
    alignas(16) std::byte control[kControlBytes];
  };
  template <typename T>
  struct ControlAllocator;

  RingHolds(uint32_t capacity, void* map, size_t map_bytes);
  ~RingHolds();

  const uint32_t capacity_;
  void* const map_;
  const size_t map_bytes_;
  std::unique_ptr<Record[]> records_;
  std::atomic<uint64_t> refs_{1};
  uint64_t pushed_ = 0;  // records ever used (record i % capacity_); consumer thread
  uint64_t popped_ = 0;  // of them, passed by floor() (a prefix)
  uint64_t refused_ = 0;
};

}  // namespace shoal::net

// YCSB core workloads A, B, C and F as a Workload, each operation one transaction.
//
// Table "usertable": `records` keys 0..records-1 (one 8-byte key word; YCSB's "user<hash>"
// strings become integers), each value 10 fields x 10 bytes = 100 bytes.
//   A: 50% read, 50% update      B: 95% read, 5% update
//   C: 100% read                 F: 50% read, 50% read-modify-write
// read: fetch the whole record. update: blind write of the whole record (YCSB with
// writeallfields=true; the engine's put replaces whole values). read-modify-write: read the
// record, change one random field, write it back.
// Request keys follow YCSB's scrambled Zipfian distribution: a Zipfian rank over `records`
// items (YCSB's ZipfianGenerator, Gray et al.) hashed with FNV-1a 64 so that popular keys are
// spread over the key space. (YCSB proper draws the rank over 10^10 items with a precomputed
// zeta for theta 0.99; drawing over `records` keeps any theta exact.)
//
// Threads: as Workload (src/workload/workload.h). The Zipfian constants are computed once in
// load() and only read afterwards; every Client has its own generator state.
#pragma once

#include <cstdint>
#include <memory>

#include "src/base/env.h"
#include "src/workload/workload.h"

namespace shoal::workload {

struct YcsbOptions {
  char workload = 'A';           // one of A, B, C, F
  uint64_t records = 1'000'000;  // REQUIRES: >= 2
  double theta = 0.99;           // Zipfian skew; REQUIRES: in [0, 1)
};

inline constexpr uint32_t kYcsbFields = 10;
inline constexpr uint32_t kYcsbFieldBytes = 10;
inline constexpr uint32_t kYcsbValueBytes = kYcsbFields * kYcsbFieldBytes;

// InvalidArgument for an unknown workload letter or out-of-range options.
Result<std::unique_ptr<Workload>> make_ycsb_workload(const YcsbOptions& options);

// YCSB's ZipfianGenerator over ranks [0, items): rank 0 is the most popular.
// Constructing costs O(items) (the zeta sum); next() is O(1). Immutable after construction.
class Zipfian {
 public:
  // REQUIRES: items >= 2, theta in [0, 1).
  Zipfian(uint64_t items, double theta);
  uint64_t next(Rng& rng) const;
  uint64_t items() const { return items_; }

 private:
  uint64_t items_;
  double theta_, alpha_, zetan_, eta_, half_pow_theta_;
};

// FNV-1a 64 over the 8 bytes of `value` (YCSB's Utils.fnvhash64 family).
uint64_t fnv1a64(uint64_t value);

// Zipfian rank scrambled over [0, items) with fnv1a64.
inline uint64_t scrambled_zipfian(const Zipfian& z, Rng& rng) {
  return fnv1a64(z.next(rng)) % z.items();
}

}  // namespace shoal::workload

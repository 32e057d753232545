// Mako's microbenchmark as a Workload: one table of `keys` 8-byte keys with 32-byte values;
// every transaction reads 4 distinct uniformly random keys, then writes all 4 back (each
// value's counter incremented): a read-modify-write of 4 records ("50/50": 4 reads + 4 writes).
//
// Consistency condition: the sum of all counters equals 4 x the transactions the clients saw
// commit (each commit adds exactly 4; aborted attempts add nothing).
//
// Threads: as Workload (src/workload/workload.h). Each Client counts its commits in its own slot,
// owned by the Workload so that check() can read it after the clients are gone.
#pragma once

#include <cstdint>
#include <memory>

#include "src/workload/workload.h"

namespace shoal::workload {

struct MicroOptions {
  uint64_t keys = 1'000'000;  // REQUIRES: >= 4 (a transaction touches 4 distinct keys)
};

// InvalidArgument when options are out of range.
Result<std::unique_ptr<Workload>> make_micro_workload(const MicroOptions& options);

}  // namespace shoal::workload

// Memory mapped and faulted in ahead of use, for the allocator to hand out later
// (`--memory-reserve-mb`; tools/shoal.cc gives it to mimalloc as an arena).
//
// Why: a store that grows (TPC-C inserts orders all the time) touches fresh pages all the
// time, and a first touch is dear: the kernel zeroes the page and, in a VM, the host backs it
// too. On the project's Firecracker VM that is about 1.6 ms per MB against 0.05 for memory
// the process reuses (docs/RESULTS.md), a quarter of a follower's replay. Faulting a reserve
// in at start-up takes that cost out of the transactions, as Silo's --numa-memory does. What
// the process needs beyond the reserve comes from the OS as before.
//
// Any thread, once per reserve; the mapping lives until the process exits (the allocator
// owns it from then on).
#pragma once

#include <cstdint>

#include "shoal/status.h"

namespace shoal {

// Reserves are mapped in whole units of this, aligned to it (mimalloc's arenas need their
// 32 MiB segments aligned).
inline constexpr uint64_t kMemoryReserveUnitBytes = uint64_t{64} << 20;

struct PrefaultedMemory {
  void* start = nullptr;
  uint64_t bytes = 0;        // a multiple of kMemoryReserveUnitBytes
  uint64_t fault_in_ms = 0;  // wall time it took to fault the pages in
  bool huge_pages = false;   // the kernel took the MADV_HUGEPAGE advice
};

// Maps `bytes` rounded up to kMemoryReserveUnitBytes, aligned to it, advised into transparent
// huge pages, and writes every page of it (MADV_POPULATE_WRITE, or a store per page on
// kernels before 5.14). Errors: InvalidArgument when bytes is 0 or above what
// /proc/meminfo calls available (a reserve the machine cannot back would only swap or be
// killed); IOError when the mapping fails.
[[nodiscard]] Result<PrefaultedMemory> map_prefaulted_memory(uint64_t bytes);

// MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t available_memory_bytes();

}  // namespace shoal

// Memory mapped and faulted in ahead of use, for the allocator to hand out later
// (`--memory-reserve-mb`; tools/shoal.cc gives it to mimalloc as an arena).
//
// Why: a store that grows (TPC-C inserts orders all the time) touches fresh pages all the
// time, and a first touch is dear: the kernel zeroes the page and, in a VM, the host backs it
// too. On the project's VM that was a quarter of a follower's replay (docs/RESULTS.md, "A
// memory reserve"). Faulting a reserve in at start-up takes that cost out of the
// transactions, as Silo's --numa-memory does. What the process needs beyond the reserve
// comes from the OS as before.
//
// Any thread, once per reserve; the mapping lives until the process exits (the allocator
// owns it from then on).
#pragma once

#include <cstdint>

#include "shoal/status.h"

namespace shoal {

// Reserves are mapped in whole units of this, aligned to it (mimalloc 2.0.9's arenas need
// their 32 MiB segments aligned).
inline constexpr uint64_t kMemoryReserveUnitBytes = uint64_t{64} << 20;

struct PrefaultedMemory {
  void* start = nullptr;
  uint64_t bytes = 0;            // a multiple of kMemoryReserveUnitBytes
  uint64_t fault_in_ms = 0;      // wall time it took to fault the pages in
  uint64_t huge_page_bytes = 0;  // of bytes, what the kernel backed with transparent huge pages
};

// `bytes` rounded up to whole kMemoryReserveUnitBytes.
uint64_t memory_reserve_rounded(uint64_t bytes);

// Maps memory_reserve_rounded(bytes), aligned to kMemoryReserveUnitBytes, advised into
// transparent huge pages, and writes every page of it (MADV_POPULATE_WRITE, or a store per
// page on kernels before 5.14, which refuse that advice with EINVAL). Errors, with nothing
// left mapped: InvalidArgument when bytes is 0 or the reserves of `processes` processes (this
// one and those started beside it on this host) would be above what /proc/meminfo calls
// available (a reserve the machine cannot back would only be killed); IOError when the
// mapping fails or the kernel cannot fault it in (ENOMEM: memory ran out meanwhile).
[[nodiscard]] Result<PrefaultedMemory> map_prefaulted_memory(uint64_t bytes,
                                                             uint32_t processes = 1);

// Ok when `processes` reserves of `bytes` each fit what /proc/meminfo calls available;
// InvalidArgument saying how much is asked and available otherwise (Ok when it cannot be
// read). A parent about to start several processes with reserves asks first.
[[nodiscard]] Status check_memory_reserves_fit(uint64_t bytes, uint32_t processes);

// MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t available_memory_bytes();

}  // namespace shoal

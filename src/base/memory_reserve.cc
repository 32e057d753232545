#include "src/base/memory_reserve.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace shoal {
namespace {

// Linux 5.14; the constant is missing from older headers.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

void touch_every_page(char* start, uint64_t bytes) {
  const auto page_bytes = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (uint64_t at = 0; at < bytes; at += page_bytes) {
    // volatile: the store is the point (it faults the page in); the value is what it holds.
    *static_cast<volatile char*>(start + at) = 0;
  }
}

// Whether the kernel backed [start, start + bytes) with huge pages: AnonHugePages of the
// mapping in /proc/self/smaps would say exactly; a sample of mincore cannot. Reads the
// process-wide figure instead, which the reserve dominates right after it is faulted in.
bool process_has_huge_pages(uint64_t at_least_bytes) {
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return false;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "AnonHugePages: %lu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024 >= at_least_bytes / 2;
}

}  // namespace

uint64_t available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %lu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

Result<PrefaultedMemory> map_prefaulted_memory(uint64_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("a memory reserve of 0 bytes");
  const uint64_t unit = kMemoryReserveUnitBytes;
  const uint64_t rounded = (bytes + unit - 1) / unit * unit;
  const uint64_t available = available_memory_bytes();
  if (available != 0 && rounded > available) {
    return Status::InvalidArgument(
        fmt::format("a memory reserve of {} MiB is more than the {} MiB this machine has available",
                    (bytes + (1 << 20) - 1) >> 20, available >> 20));
  }
  // Over-map by one unit and skip to the first aligned address; the slack stays mapped
  // (untouched, so it costs address space only).
  void* mapped = ::mmap(nullptr, rounded + unit, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapped == MAP_FAILED) {
    return Status::IOError(
        fmt::format("mmap of a {} MiB memory reserve: {}", rounded >> 20, std::strerror(errno)));
  }
  const auto base = reinterpret_cast<uintptr_t>(mapped);
  char* start = reinterpret_cast<char*>((base + unit - 1) / unit * unit);
  (void)::madvise(start, rounded, MADV_HUGEPAGE);  // advice: without THP, 4 KiB pages
  const auto began = std::chrono::steady_clock::now();
  if (::madvise(start, rounded, MADV_POPULATE_WRITE) != 0) touch_every_page(start, rounded);
  const auto took = std::chrono::steady_clock::now() - began;
  PrefaultedMemory m;
  m.start = start;
  m.bytes = rounded;
  m.fault_in_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
  m.huge_pages = process_has_huge_pages(rounded);
  return m;
}

}  // namespace shoal

#include "src/base/memory_reserve.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

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
    // volatile: the store is the point (it faults the page in).
    *static_cast<volatile char*>(start + at) = 0;
  }
}

// A "Name: N kB" field of a /proc file in bytes; 0 when it cannot be read.
uint64_t proc_kib_field(const char* path, const char* format) {
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, format, &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

// The process's anonymous memory in transparent huge pages: read before and after the reserve
// is faulted in, the difference is the reserve's (nothing else of the process grows meanwhile).
uint64_t anon_huge_page_bytes() {
  return proc_kib_field("/proc/self/smaps_rollup", "AnonHugePages: %" SCNu64 " kB");
}

}  // namespace

uint64_t available_memory_bytes() {
  return proc_kib_field("/proc/meminfo", "MemAvailable: %" SCNu64 " kB");
}

uint64_t memory_reserve_rounded(uint64_t bytes) {
  const uint64_t unit = kMemoryReserveUnitBytes;
  return (bytes + unit - 1) / unit * unit;
}

Status check_memory_reserves_fit(uint64_t bytes, uint32_t processes) {
  const uint64_t each = memory_reserve_rounded(bytes);
  const uint64_t available = available_memory_bytes();
  if (available == 0 || each * processes <= available) return Status::Ok();
  const std::string asked =
      processes == 1 ? fmt::format("a memory reserve of {} MiB", (bytes + (1 << 20) - 1) >> 20)
                     : fmt::format("{} memory reserves of {} MiB ({} MiB in all)", processes,
                                   each >> 20, (each * processes) >> 20);
  return Status::InvalidArgument(
      fmt::format("{} {} more than the {} MiB this machine has available", asked,
                  processes == 1 ? "is" : "are", available >> 20));
}

Result<PrefaultedMemory> map_prefaulted_memory(uint64_t bytes, uint32_t processes) {
  if (bytes == 0) return Status::InvalidArgument("a memory reserve of 0 bytes");
  SHOAL_TRY(check_memory_reserves_fit(bytes, processes));
  const uint64_t unit = kMemoryReserveUnitBytes;
  const uint64_t rounded = memory_reserve_rounded(bytes);
  // Over-map by one unit, keep the first aligned `rounded` bytes, give the slack back.
  void* mapped = ::mmap(nullptr, rounded + unit, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapped == MAP_FAILED) {
    return Status::IOError(
        fmt::format("mmap of a {} MiB memory reserve: {}", rounded >> 20, std::strerror(errno)));
  }
  char* base = static_cast<char*>(mapped);
  char* start =
      reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + unit - 1) / unit * unit);
  if (start > base) ::munmap(base, static_cast<size_t>(start - base));
  ::munmap(start + rounded, static_cast<size_t>(base + unit - start));  // never empty
  (void)::madvise(start, rounded, MADV_HUGEPAGE);  // advice: without THP, 4 KiB pages
  const uint64_t huge_before = anon_huge_page_bytes();
  const auto began = std::chrono::steady_clock::now();
  if (::madvise(start, rounded, MADV_POPULATE_WRITE) != 0) {
    const int err = errno;
    if (err != EINVAL) {  // not an old kernel: the memory is not there to be had
      ::munmap(start, rounded);
      return Status::IOError(fmt::format("faulting in a {} MiB memory reserve: {}", rounded >> 20,
                                         std::strerror(err)));
    }
    touch_every_page(start, rounded);
  }
  const auto took = std::chrono::steady_clock::now() - began;
  PrefaultedMemory m;
  m.start = start;
  m.bytes = rounded;
  m.fault_in_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
  const uint64_t huge_after = anon_huge_page_bytes();
  m.huge_page_bytes = huge_after > huge_before ? std::min(huge_after - huge_before, rounded) : 0;
  return m;
}

}  // namespace shoal

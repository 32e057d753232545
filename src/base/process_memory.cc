#include "src/base/process_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace shoal {

uint64_t current_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size_pages = 0, resident_pages = 0;
  const int n = std::fscanf(f, "%lu %lu", &size_pages, &resident_pages);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<uint64_t>(resident_pages) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace shoal

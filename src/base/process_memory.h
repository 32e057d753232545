// This process's memory, for reports and metrics (`shoal bench`, the shard servers' and
// followers' stats).
//
// current_rss_bytes(): the resident set now, from /proc/self/statm. peak_rss_bytes(): the
// peak resident set, from getrusage. Either is 0 when it cannot be read. Any thread.
#pragma once

#include <cstdint>

namespace shoal {

uint64_t current_rss_bytes();
uint64_t peak_rss_bytes();

}  // namespace shoal

#include "src/base/striped_counter.h"

namespace shoal {

size_t thread_stripe() {
  static std::atomic<size_t> next{0};
  thread_local const size_t stripe =
      next.fetch_add(1, std::memory_order_relaxed) % StripedCounter::kStripes;
  return stripe;
}

}  // namespace shoal

#include "src/index/btree.h"

#include <sched.h>

#include <atomic>

namespace shoal::btree_detail {

namespace {
// A restart storm this long means a bug (a lock never released), not contention.
constexpr uint64_t kMaxRestarts = uint64_t{1} << 26;
constexpr uint64_t kSpinAttempts = 8;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

void backoff_slow(uint64_t attempt) {
  SHOAL_ASSERT(attempt < kMaxRestarts, "btree: %llu restarts of one operation",
               static_cast<unsigned long long>(attempt));
  if (attempt < kSpinAttempts) {
    for (uint64_t i = 0; i < (uint64_t{1} << attempt); ++i) cpu_relax();
  } else {
    sched_yield();
  }
}

}  // namespace shoal::btree_detail

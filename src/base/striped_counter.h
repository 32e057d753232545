// A counter many threads add to without sharing a cache line: each thread adds to its own
// stripe (threads are spread over stripes round-robin), readers sum the stripes. Sums are
// exact when writers are quiescent and approximate while they run.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace shoal {

// The calling thread's stripe, in [0, kStripes).
size_t thread_stripe();

class StripedCounter {
 public:
  static constexpr size_t kStripes = 8;
  void add(int64_t delta) {
    stripes_[thread_stripe()].v.fetch_add(delta, std::memory_order_relaxed);
  }
  int64_t sum() const {
    int64_t total = 0;
    for (const Stripe& s : stripes_) total += s.v.load(std::memory_order_relaxed);
    return total;
  }

 private:
  struct alignas(64) Stripe {
    std::atomic<int64_t> v{0};
  };
  Stripe stripes_[kStripes];
};

}  // namespace shoal

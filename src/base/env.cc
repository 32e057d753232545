#include "src/base/env.h"

#include <time.h>

#include <atomic>

namespace shoal {

RealEnv::RealEnv(uint64_t base_seed) : base_seed_(base_seed) {}

uint64_t RealEnv::now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t RealEnv::wall_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000ULL + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

void RealEnv::sleep_ns(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000ULL), static_cast<long>(ns % 1'000'000'000ULL)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

uint64_t RealEnv::seed() {
  const uint64_t n = std::atomic_ref<uint64_t>(counter_).fetch_add(1, std::memory_order_relaxed);
  return base_seed_ ^ (n * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
}

RealEnv& RealEnv::instance() {
  static RealEnv env;
  return env;
}

}  // namespace shoal

// Results shared by the transport benchmark's parts.
#pragma once

#include <cstdint>

#include "src/base/histogram.h"

namespace shoal::bench::transport {

// Round-trip latency of one ping-pong run (the first tenth of the samples is warm-up and not
// recorded).
struct LatencyUs {
  double p50_us = 0;
  double p99_us = 0;
  uint64_t samples = 0;
};

inline LatencyUs latency_of(const Histogram& h) {
  return {static_cast<double>(h.percentile(50)) / 1e3, static_cast<double>(h.percentile(99)) / 1e3,
          h.count()};
}

// The sample index from which a ping-pong of `iterations` records latencies.
inline int first_recorded(int iterations) {
  return iterations / 10;
}

}  // namespace shoal::bench::transport

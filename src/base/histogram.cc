#include "src/base/histogram.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shoal {

void Histogram::reset() {
  counts_.fill(0);
  count_ = 0;
  sum_ns_ = 0;
  min_ns_ = std::numeric_limits<uint64_t>::max();
  max_ns_ = 0;
}

void Histogram::merge(const Histogram& other) {
  if (other.count_ == 0) return;
  for (size_t i = 0; i < kBucketCount; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ns_ += other.sum_ns_;
  min_ns_ = std::min(min_ns_, other.min_ns_);
  max_ns_ = std::max(max_ns_, other.max_ns_);
}

uint64_t Histogram::percentile(double p) const {
  if (count_ == 0) return 0;
  if (!(p > 0)) return min_ns_;  // also catches NaN
  if (p >= 100) return max_ns_;
  // Rank of the sample we want, 1-based: the ceil(p% of count)-th smallest, at least the 1st.
  const double exact_rank = std::ceil(p / 100.0 * static_cast<double>(count_));
  const uint64_t rank = std::clamp<uint64_t>(static_cast<uint64_t>(exact_rank), 1, count_);
  uint64_t seen = 0;
  for (size_t i = 0; i < kBucketCount; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      return std::clamp(Layout::bucket_mid(i), min_ns_, max_ns_);
    }
  }
  return max_ns_;  // unreachable while count_ equals the bucket sum
}

double Histogram::mean() const {
  if (count_ == 0) return 0;
  return static_cast<double>(sum_ns_) / static_cast<double>(count_);
}

}  // namespace shoal

// A log-linear latency histogram (HdrHistogram-like) over nanosecond values.
//
// Buckets: values below 2 * kSubBuckets are counted exactly; above, every power of two
// [2^m, 2^(m+1)) is split into kSubBuckets equal sub-buckets, so a bucket's width is at most
// 1/kSubBuckets (0.78%) of its values and a reported percentile (the bucket's midpoint) is
// within 0.4% of a value in that bucket. Values above kMaxValueNs (~137 s) are clamped to it.
//
// Threads: a Histogram is owned by one thread; merge() copies from another histogram that is
// not being written. record() never allocates: the buckets are an inline array (~32 KiB), so
// allocate Histograms up front (one per thread and transaction type), not on the data path.
//
// Invariants: count() == sum of all buckets; min() <= max() when count() > 0.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace shoal {

// The bucket arithmetic of a log-linear layout over values in [0, 2^MaxValueBits): values below
// 2 * 2^SubBucketBits exact, then every power of two split into 2^SubBucketBits equal
// sub-buckets (a bucket is at most 1/2^SubBucketBits of its values wide). Histogram uses
// 7 bits; coarser layouts (src/server/live_latency.h: 4 bits) share the arithmetic.
template <uint32_t SubBucketBits, uint32_t MaxValueBits>
struct LogLinearBuckets {
  static_assert(SubBucketBits >= 1 && SubBucketBits < MaxValueBits && MaxValueBits < 64);
  static constexpr uint64_t kSubBuckets = uint64_t{1} << SubBucketBits;
  static constexpr uint64_t kMaxValue = (uint64_t{1} << MaxValueBits) - 1;
  static constexpr size_t kBucketCount = (MaxValueBits - SubBucketBits + 1) * kSubBuckets;

  // The bucket of `value` (clamped to kMaxValue).
  static constexpr size_t bucket_of(uint64_t value) {
    if (value > kMaxValue) value = kMaxValue;
    const uint32_t msb = 63 - static_cast<uint32_t>(std::countl_zero(value | 1));
    if (msb <= SubBucketBits) return static_cast<size_t>(value);  // exact region
    const uint32_t shift = msb - SubBucketBits;
    // (value >> shift) is in [kSubBuckets, 2 * kSubBuckets).
    return static_cast<size_t>((shift + 1) * kSubBuckets + ((value >> shift) - kSubBuckets));
  }
  // The smallest value that falls into bucket `index`. REQUIRES: index < kBucketCount.
  static constexpr uint64_t bucket_low(size_t index) {
    if (index < 2 * kSubBuckets) return index;
    const uint64_t shift = index / kSubBuckets - 1;
    return (kSubBuckets + index % kSubBuckets) << shift;
  }
  // Width of bucket `index` (number of distinct values it holds).
  static constexpr uint64_t bucket_width(size_t index) {
    if (index < 2 * kSubBuckets) return 1;
    return uint64_t{1} << (index / kSubBuckets - 1);
  }
  // The value a percentile reports for bucket `index`: its midpoint.
  static constexpr uint64_t bucket_mid(size_t index) {
    return bucket_low(index) + (bucket_width(index) - 1) / 2;
  }
};

class Histogram {
 public:
  static constexpr uint32_t kSubBucketBits = 7;
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBucketBits;  // 128
  static constexpr uint32_t kMaxValueBits = 37;
  static constexpr uint64_t kMaxValueNs = (uint64_t{1} << kMaxValueBits) - 1;  // ~137 s
  // Exact buckets [0, 2 * kSubBuckets), then kSubBuckets per remaining power of two.
  static constexpr size_t kBucketCount =
      (kMaxValueBits - kSubBucketBits + 1) * kSubBuckets;  // 31 * 128 = 3968

  Histogram() { reset(); }

  void reset();

  // Adds one sample (clamped to kMaxValueNs).
  void record(uint64_t value_ns) { record_n(value_ns, 1); }
  // Adds `n` samples of the same value.
  void record_n(uint64_t value_ns, uint64_t n) {
    if (n == 0) return;
    if (value_ns > kMaxValueNs) value_ns = kMaxValueNs;
    counts_[bucket_of(value_ns)] += n;
    count_ += n;
    sum_ns_ += static_cast<unsigned __int128>(value_ns) * n;
    if (value_ns < min_ns_) min_ns_ = value_ns;
    if (value_ns > max_ns_) max_ns_ = value_ns;
  }

  // Adds every sample of `other` to this histogram.
  void merge(const Histogram& other);

  // The value at percentile p (p in [0, 100], clamped): the smallest bucket value v such that
  // at least p% of the samples are <= v, reported as the bucket's midpoint clamped to
  // [min(), max()]. p = 0 gives min(), p = 100 gives max(). 0 when empty.
  uint64_t percentile(double p) const;

  uint64_t count() const { return count_; }
  // Arithmetic mean of the (clamped) samples; 0 when empty.
  double mean() const;
  // Exact extremes of the (clamped) samples; 0 when empty.
  uint64_t min() const { return count_ == 0 ? 0 : min_ns_; }
  uint64_t max() const { return max_ns_; }

  // Bucket arithmetic, public so that concurrent counters (one atomic per bucket, owned by
  // the caller) can share the layout and be turned back into a Histogram.
  using Layout = LogLinearBuckets<kSubBucketBits, kMaxValueBits>;
  static_assert(Layout::kBucketCount == kBucketCount);
  static constexpr size_t bucket_of(uint64_t value_ns) { return Layout::bucket_of(value_ns); }
  // The smallest value that falls into bucket `index`. REQUIRES: index < kBucketCount.
  static constexpr uint64_t bucket_low(size_t index) { return Layout::bucket_low(index); }
  // Width of bucket `index` (number of distinct values it holds).
  static constexpr uint64_t bucket_width(size_t index) { return Layout::bucket_width(index); }

  // Raw bucket count (for tests and for diffing snapshots).
  uint64_t bucket_count(size_t index) const { return counts_[index]; }

 private:
  std::array<uint64_t, kBucketCount> counts_;
  uint64_t count_ = 0;
  unsigned __int128 sum_ns_ = 0;  // 128 bits: 2^37 ns * 2^64 samples cannot overflow
  uint64_t min_ns_ = 0;
  uint64_t max_ns_ = 0;
};

static_assert(Histogram::bucket_of(Histogram::kMaxValueNs) == Histogram::kBucketCount - 1);
static_assert(Histogram::bucket_low(Histogram::bucket_of(1000)) <= 1000);

}  // namespace shoal

#include "src/base/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "src/base/env.h"

namespace shoal {
namespace {

// Exact percentile with the same definition as Histogram::percentile: the ceil(p% * n)-th
// smallest sample (1-based), at least the first.
uint64_t exact_percentile(std::vector<uint64_t> sorted, double p) {
  const auto n = static_cast<double>(sorted.size());
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * n));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

// The reported value must lie within one bucket width of the exact sample: 1/128 relative.
void expect_close(uint64_t got, uint64_t want, double p) {
  const double tolerance = std::max(1.0, static_cast<double>(want) / 128.0);
  EXPECT_LE(std::abs(static_cast<double>(got) - static_cast<double>(want)), tolerance)
      << "p" << p << " got " << got << " want " << want;
}

TEST(HistogramTest, EmptyIsZero) {
  auto h = std::make_unique<Histogram>();
  EXPECT_EQ(h->count(), 0u);
  EXPECT_EQ(h->percentile(50), 0u);
  EXPECT_EQ(h->percentile(0), 0u);
  EXPECT_EQ(h->percentile(100), 0u);
  EXPECT_EQ(h->mean(), 0.0);
  EXPECT_EQ(h->max(), 0u);
  EXPECT_EQ(h->min(), 0u);
}

TEST(HistogramTest, SingleValue) {
  auto h = std::make_unique<Histogram>();
  h->record(123456789);
  EXPECT_EQ(h->count(), 1u);
  for (double p : {0.0, 1.0, 50.0, 99.9, 100.0}) EXPECT_EQ(h->percentile(p), 123456789u) << p;
  EXPECT_EQ(h->mean(), 123456789.0);
  EXPECT_EQ(h->max(), 123456789u);
  EXPECT_EQ(h->min(), 123456789u);
}

TEST(HistogramTest, SmallValuesAreExact) {
  auto h = std::make_unique<Histogram>();
  for (uint64_t v = 0; v < 256; ++v) h->record(v);
  EXPECT_EQ(h->percentile(50), 127u);  // 128th smallest of 0..255
  EXPECT_EQ(h->percentile(100), 255u);
  EXPECT_EQ(h->min(), 0u);
  EXPECT_DOUBLE_EQ(h->mean(), 127.5);
}

TEST(HistogramTest, BucketLayoutIsContiguous) {
  // Every bucket starts where the previous one ended, and values map back to their bucket.
  for (size_t i = 1; i < Histogram::kBucketCount; ++i) {
    ASSERT_EQ(Histogram::bucket_low(i),
              Histogram::bucket_low(i - 1) + Histogram::bucket_width(i - 1))
        << i;
    ASSERT_EQ(Histogram::bucket_of(Histogram::bucket_low(i)), i);
    ASSERT_EQ(Histogram::bucket_of(Histogram::bucket_low(i) + Histogram::bucket_width(i) - 1), i);
  }
  EXPECT_EQ(Histogram::bucket_of(~uint64_t{0}), Histogram::kBucketCount - 1);
}

TEST(HistogramTest, ClampsHugeValues) {
  auto h = std::make_unique<Histogram>();
  h->record(~uint64_t{0});
  EXPECT_EQ(h->max(), Histogram::kMaxValueNs);
  EXPECT_EQ(h->percentile(50), Histogram::kMaxValueNs);
}

// Log-uniform samples from 1 µs to 100 s: percentiles within the precision bound.
TEST(HistogramTest, PercentilesMatchExactOnRandomSamples) {
  Rng rng(42);
  auto h = std::make_unique<Histogram>();
  std::vector<uint64_t> samples;
  constexpr int kSamples = 200'000;
  samples.reserve(kSamples);
  double sum = 0;
  for (int i = 0; i < kSamples; ++i) {
    const double exp10 = 3.0 + 8.0 * rng.uniform01();  // 1e3 .. 1e11 ns
    const auto v = static_cast<uint64_t>(std::pow(10.0, exp10));
    samples.push_back(v);
    h->record(v);
    sum += static_cast<double>(v);
  }
  std::sort(samples.begin(), samples.end());
  EXPECT_EQ(h->count(), static_cast<uint64_t>(kSamples));
  EXPECT_EQ(h->max(), samples.back());
  EXPECT_EQ(h->min(), samples.front());
  EXPECT_NEAR(h->mean(), sum / kSamples, sum / kSamples * 1e-9);
  for (double p : {0.0, 0.1, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
    expect_close(h->percentile(p), exact_percentile(samples, p), p);
  }
}

// Uniform samples in a narrow latency range typical of a transaction (2-40 µs).
TEST(HistogramTest, PercentilesMatchExactOnNarrowRange) {
  Rng rng(7);
  auto h = std::make_unique<Histogram>();
  std::vector<uint64_t> samples;
  for (int i = 0; i < 50'000; ++i) {
    const uint64_t v = rng.uniform(2'000, 40'000);
    samples.push_back(v);
    h->record(v);
  }
  std::sort(samples.begin(), samples.end());
  for (double p : {1.0, 50.0, 90.0, 99.0, 99.9}) {
    expect_close(h->percentile(p), exact_percentile(samples, p), p);
  }
}

TEST(HistogramTest, MergeEqualsRecordingEverything) {
  Rng rng(3);
  auto a = std::make_unique<Histogram>();
  auto b = std::make_unique<Histogram>();
  auto all = std::make_unique<Histogram>();
  for (int i = 0; i < 10'000; ++i) {
    const uint64_t v = rng.uniform(0, 10'000'000);
    (i % 3 == 0 ? *a : *b).record(v);
    all->record(v);
  }
  a->merge(*b);
  EXPECT_EQ(a->count(), all->count());
  EXPECT_EQ(a->max(), all->max());
  EXPECT_EQ(a->min(), all->min());
  EXPECT_DOUBLE_EQ(a->mean(), all->mean());
  for (size_t i = 0; i < Histogram::kBucketCount; ++i) {
    ASSERT_EQ(a->bucket_count(i), all->bucket_count(i)) << i;
  }
  for (double p : {0.0, 50.0, 99.0, 100.0}) EXPECT_EQ(a->percentile(p), all->percentile(p));
}

TEST(HistogramTest, MergeWithEmptyAndReset) {
  auto a = std::make_unique<Histogram>();
  auto empty = std::make_unique<Histogram>();
  a->record(500);
  a->merge(*empty);
  EXPECT_EQ(a->count(), 1u);
  EXPECT_EQ(a->min(), 500u);
  empty->merge(*a);
  EXPECT_EQ(empty->count(), 1u);
  EXPECT_EQ(empty->percentile(50), 500u);
  a->reset();
  EXPECT_EQ(a->count(), 0u);
  EXPECT_EQ(a->percentile(99), 0u);
  EXPECT_EQ(a->max(), 0u);
}

TEST(HistogramTest, RecordN) {
  auto h = std::make_unique<Histogram>();
  h->record_n(1000, 99);
  h->record_n(1'000'000, 1);
  h->record_n(5, 0);  // no-op
  EXPECT_EQ(h->count(), 100u);
  expect_close(h->percentile(99), 1000, 99);
  EXPECT_EQ(h->percentile(99.5), 1'000'000u);  // the max's bucket is clamped to max()
  EXPECT_EQ(h->min(), 1000u);
}

}  // namespace
}  // namespace shoal

// Reading Prometheus text back (what `shoal cluster top` does with each shard's /metrics):
// samples with their labels, and sums and quantiles over them. Only what our own exposition
// writes is supported: no timestamps are kept, escapes in label values are undone.
//
// Threads: plain functions over values; any thread.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shoal/status.h"
#include "src/ops/metrics.h"

namespace shoal::ops {

struct MetricSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  // The label's value; empty when absent.
  std::string_view label(std::string_view key) const;
};

// Every sample line of `text` (comments skipped). InvalidArgument naming the line for a line
// that does not parse; at most kSamplesMax samples (InvalidArgument beyond).
inline constexpr size_t kSamplesMax = 100'000;
[[nodiscard]] Result<std::vector<MetricSample>> parse_metrics_text(std::string_view text);

// Sum of the samples named `name` whose labels include every (key, value) of `match`.
double sum_samples(std::span<const MetricSample> samples, std::string_view name,
                   std::initializer_list<Label> match = {});
// Max of the same (0 when none).
double max_samples(std::span<const MetricSample> samples, std::string_view name,
                   std::initializer_list<Label> match = {});

// A latency histogram's bucket counts (kLatencyBounds, then +Inf; per bucket, not cumulative)
// summed over every series of `name`_bucket matching `match`.
BucketSnapshot buckets_of(std::span<const MetricSample> samples, std::string_view name,
                          std::initializer_list<Label> match = {});
// The q-quantile (q in [0, 1]) of non-cumulative counts, in seconds, interpolated inside
// its bucket as Prometheus' histogram_quantile does; the highest bound when it falls in +Inf;
// 0 when empty.
double bucket_quantile(const BucketSnapshot& counts, double q);
// after - before, field by field (counters that went back, a restart, count from zero).
BucketSnapshot bucket_delta(const BucketSnapshot& after, const BucketSnapshot& before);

}  // namespace shoal::ops

// Per-second latency of a run across shard processes (failover_run.h; the JSON's "series").
//
// Each shard server's workers count the speculative latency of every transaction they commit
// and the commit (acknowledged) latency of every one the vectorized watermark covers, in a
// coarse log-linear layout (LiveLatencyLayout: 16 sub-buckets per power of two, 544 buckets,
// each at most 6.25% of its values wide, so a percentile is within ~3% of a sample), cumulative
// over the server's life. kStats with {"latency": true} answers the shard's sums as
// {"speculative": [...], "commit": [...]}: each the nonzero buckets only, a flat array
// [index, count, index, count, ...] with indices increasing (at most 2 * 544 numbers: a reply
// stays well below kControlBytesMax). The controller (LatencySeries) diffs each shard's
// successive samples, merges the shards' differences into the second of the run the sample
// was taken in (as committed_per_second does), and reports p50/p99 per second.
//
// Threads: LiveLatencyCounts has one writer (its worker's loop thread: relaxed load + store,
// no locked instruction on the data path) and any reader (approximate while the worker runs;
// what a sample misses, the next one's difference counts). LatencySeries: one thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shoal/status.h"
#include "src/base/histogram.h"

namespace shoal::server {

using LiveLatencyLayout = LogLinearBuckets<4, Histogram::kMaxValueBits>;
inline constexpr size_t kLiveLatencyBuckets = LiveLatencyLayout::kBucketCount;  // 544
using LatencyCounts = std::array<uint64_t, kLiveLatencyBuckets>;

// One worker's cumulative counts of one latency (ns).
class LiveLatencyCounts {
 public:
  // REQUIRES: the owning thread only.
  void record(uint64_t latency_ns) {
    std::atomic<uint64_t>& c = counts_[LiveLatencyLayout::bucket_of(latency_ns)];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  // Adds this worker's counts to *out (any thread).
  void add_to(LatencyCounts* out) const;

 private:
  std::array<std::atomic<uint64_t>, kLiveLatencyBuckets> counts_{};
};

// What one kStats sample of a shard says about its latencies (cumulative).
struct LatencySample {
  LatencyCounts speculative{};
  LatencyCounts commit{};
};

// kStats's "latency" object for `s`.
nlohmann::json latency_sample_json(const LatencySample& s);
// Field "latency" of a kStats reply into *out, checked: InvalidArgument naming the field for a
// missing object, a list that is not [index, count, ...] pairs of unsigned integers, an index
// out of range or not increasing, more than kLiveLatencyBuckets pairs. *out is unspecified on
// error.
[[nodiscard]] Status parse_latency_sample(const nlohmann::json& stats_reply, LatencySample* out);

// One second of the run, merged over the shards.
struct LatencySecond {
  uint64_t speculative_count = 0;  // transactions committed (their latency counted)
  uint64_t commit_count = 0;       // transactions acknowledged
  // Percentiles of the second's transactions; empty when it counted none.
  std::optional<double> latency_p50_us, latency_p99_us;
  std::optional<double> commit_latency_p50_us, commit_latency_p99_us;
};

// The controller's per-second latency of a run over `shards` shards and `seconds` seconds.
class LatencySeries {
 public:
  LatencySeries(uint32_t shards, size_t seconds);

  // What `shard` had counted before the run started: its first sample counts from there.
  void set_baseline(uint32_t shard, const LatencySample& s);
  // `shard`'s leader was replaced: its successor (a new process) counts from zero.
  void reset(uint32_t shard);
  // A sample of `shard` taken in second `second` of the run (clamped to the last one): what it
  // counted since its previous sample goes to that second. Seconds must not go back across
  // calls (a sample of an earlier second goes to the second open now). A bucket below the
  // previous sample's means another process answers: the sample becomes the shard's baseline
  // and counts nothing.
  void add(uint32_t shard, size_t second, const LatencySample& s);
  // One row per second of the run, in order (seconds without a sample: counts 0, no
  // percentiles). Call once.
  std::vector<LatencySecond> finish();

 private:
  void close_before(size_t second);
  LatencySecond close_window();

  size_t seconds_;
  std::vector<LatencySample> last_;     // per shard: its previous sample (or baseline)
  LatencySample window_{};              // the open second's differences, every shard merged
  size_t open_ = 0;                     // the open second
  std::vector<LatencySecond> rows_;     // the closed seconds
  std::unique_ptr<Histogram> scratch_;  // percentiles (~32 KiB: on the heap)
};

}  // namespace shoal::server

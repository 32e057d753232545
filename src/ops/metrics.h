// Metrics an operator scrapes: the Prometheus text exposition format (version 0.0.4) and the
// one histogram kind the data path feeds.
//
// MetricsText builds one scrape's text: a family (HELP and TYPE lines) then its samples.
// It is filled on the thread that serves the scrape, from atomics and snapshots the owning
// threads publish; nothing here blocks a worker. Every name passed in is one of ours (a
// constant): it is asserted to be a valid metric or label name, not escaped. Label values and
// help text are escaped as the format requires (backslash, double quote, newline).
//
// Buckets (LatencyBuckets): a histogram with fixed Prometheus buckets (latencies or sizes) that ONE
// thread writes (relaxed load + store per field: no locked instruction on the hot path) and
// any thread reads. A reader's snapshot is approximate while the writer runs; its _count is
// the sum of its buckets, so a scrape is always self-consistent.
//
// Threads: a MetricsText is owned by one thread; Buckets as above.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace shoal::ops {

// Label name and value; values are escaped when written.
using Label = std::pair<std::string_view, std::string_view>;
using Labels = std::initializer_list<Label>;

// A histogram's layout: 17 upper bounds in the unit exported (seconds, bytes), then +Inf, and
// how many recorded units make one exported unit (1e9: recorded in ns, exported in seconds).
inline constexpr size_t kBucketBoundsCount = 17;
struct BucketBounds {
  std::array<double, kBucketBoundsCount> upper;
  double per_unit;
};
// Latencies: 50 us to 10 s, roughly 1-2.5-5 per decade; recorded in ns.
inline constexpr BucketBounds kLatencyBounds = {
    {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
     1.0, 2.5, 5.0, 10.0},
    1e9};
// Sizes: 256 B to 128 MiB in powers of 2 and 4; recorded in bytes.
inline constexpr BucketBounds kSizeBounds = {
    {256, 1024, 4096, 16384, 32768, 65536, 131072, 262144, 524288, 1048576, 2097152, 4194304,
     8388608, 16777216, 33554432, 67108864, 134217728},
    1};

// A histogram's state as written: per-bucket (not cumulative) counts, the last one above every
// bound (+Inf), and the sum of the samples in recorded units.
struct BucketSnapshot {
  const BucketBounds* bounds = &kLatencyBounds;
  std::array<uint64_t, kBucketBoundsCount + 1> counts{};
  uint64_t sum = 0;
  uint64_t count() const;
  // REQUIRES: other has the same bounds.
  BucketSnapshot& operator+=(const BucketSnapshot& other);
};

// A histogram of one of the layouts above that one thread writes and any thread reads.
class Buckets {
 public:
  explicit Buckets(const BucketBounds& bounds = kLatencyBounds);
  // REQUIRES: called by one thread only (the owner). `value` in recorded units.
  void observe(uint64_t value) {
    size_t i = 0;
    while (i < limits_.size() && value > limits_[i]) ++i;
    bump(counts_[i], 1);
    bump(sum_, value);
  }
  // Any thread.
  BucketSnapshot snapshot() const;

 private:
  static void bump(std::atomic<uint64_t>& a, uint64_t by) {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  const BucketBounds* bounds_;
  std::array<uint64_t, kBucketBoundsCount> limits_;  // the bounds in recorded units
  std::array<std::atomic<uint64_t>, kBucketBoundsCount + 1> counts_{};
  std::atomic<uint64_t> sum_{0};
};
using LatencyBuckets = Buckets;  // in ns, exported in seconds (the default layout)

class MetricsText {
 public:
  // Starts a family. type: "counter", "gauge" or "histogram". REQUIRES: a valid metric name
  // (counters end in _total), each family once per scrape, its samples right after.
  void family(std::string_view name, std::string_view type, std::string_view help);
  // One sample line `name{labels} value`.
  void sample(std::string_view name, std::span<const Label> labels, uint64_t value);
  void sample(std::string_view name, std::span<const Label> labels, double value);
  void sample(std::string_view name, Labels labels, uint64_t value) {
    sample(name, std::span<const Label>(labels.begin(), labels.size()), value);
  }
  void sample(std::string_view name, Labels labels, double value) {
    sample(name, std::span<const Label>(labels.begin(), labels.size()), value);
  }
  // A family of one unlabelled sample.
  void counter(std::string_view name, std::string_view help, uint64_t value);
  void gauge(std::string_view name, std::string_view help, double value);
  // A histogram's samples (its family declared before): name_bucket{...,le="..."} cumulative,
  // name_sum in the exported unit, name_count.
  void histogram(std::string_view name, std::span<const Label> labels, const BucketSnapshot& h);
  void histogram(std::string_view name, Labels labels, const BucketSnapshot& h) {
    histogram(name, std::span<const Label>(labels.begin(), labels.size()), h);
  }

  const std::string& text() const { return text_; }

 private:
  void labels_text(std::span<const Label> labels, std::string_view le);
  std::string text_;
};

// Appends `value` escaped for a label value (\\, \", \n) to *out.
void escape_label_value(std::string_view value, std::string* out);
// Appends `help` escaped for a HELP line (\\, \n) to *out.
void escape_help(std::string_view help, std::string* out);
// [a-zA-Z_:][a-zA-Z0-9_:]* (metric) or [a-zA-Z_][a-zA-Z0-9_]* (label).
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);

}  // namespace shoal::ops

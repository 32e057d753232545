// Metrics an operator scrapes: the Prometheus text exposition format (version 0.0.4) and the
// one histogram kind the data path feeds.
//
// MetricsText builds one scrape's text: a family (HELP and TYPE lines) then its samples.
// It is filled on the thread that serves the scrape, from atomics and snapshots the owning
// threads publish; nothing here blocks a worker. Every name passed in is one of ours (a
// constant): it is asserted to be a valid metric or label name, not escaped. Label values and
// help text are escaped as the format requires (backslash, double quote, newline).
//
// LatencyBuckets: a latency histogram with Prometheus' fixed cumulative buckets that ONE
// thread writes (relaxed load + store per field: no locked instruction on the hot path) and
// any thread reads. A reader's snapshot is approximate while the writer runs; its _count is
// the sum of its buckets, so a scrape is always self-consistent.
//
// Threads: a MetricsText is owned by one thread; LatencyBuckets as above.
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

// Upper bounds (seconds) of LatencyBuckets: 50 us to 10 s, roughly 1-2.5-5 per decade.
inline constexpr std::array<double, 17> kLatencyBoundsS = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
    50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0};

// A histogram's state as written: per-bucket (not cumulative) counts, the last one above every
// bound (+Inf), and the sum of the samples.
struct BucketSnapshot {
  std::array<uint64_t, kLatencyBoundsS.size() + 1> counts{};
  uint64_t sum_ns = 0;
  uint64_t count() const;
  BucketSnapshot& operator+=(const BucketSnapshot& other);
};

// kLatencyBoundsS in nanoseconds (exact: each bound is a whole number of ns).
inline constexpr std::array<uint64_t, kLatencyBoundsS.size()> kLatencyBoundsNs = [] {
  std::array<uint64_t, kLatencyBoundsS.size()> ns{};
  for (size_t i = 0; i < ns.size(); ++i)
    ns[i] = static_cast<uint64_t>(kLatencyBoundsS[i] * 1e9 + 0.5);
  return ns;
}();

class LatencyBuckets {
 public:
  // REQUIRES: called by one thread only (the owner).
  void observe(uint64_t latency_ns) {
    size_t i = 0;
    while (i < kLatencyBoundsNs.size() && latency_ns > kLatencyBoundsNs[i]) ++i;
    bump(counts_[i], 1);
    bump(sum_ns_, latency_ns);
  }
  // Any thread.
  BucketSnapshot snapshot() const;

 private:
  static void bump(std::atomic<uint64_t>& a, uint64_t by) {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  std::array<std::atomic<uint64_t>, kLatencyBoundsS.size() + 1> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
};

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
  // name_sum in seconds, name_count.
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

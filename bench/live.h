// The live line of a benchmark run (`shoal bench`'s "[  3.0s] committed/s ..."): per-thread
// counters that each load thread publishes, and the main thread's sampler that diffs them
// once a second into a SecondSample (RunResult::series) and prints it. bench/runner.cc and
// the client-library bench (bench/bench_kv.cc) share it.
//
// Threads: a LiveCounters has one writer (its thread, with bump(): relaxed load + store, no
// locked read-modify-write on the data path) and is read by the sampler's thread.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "bench/runner.h"
#include "src/base/histogram.h"

namespace shoal::bench {

// Single-writer counter bump: the owning thread is the only writer, so a relaxed load+store
// publishes the new value without a locked read-modify-write on the data path.
inline void bump(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// What a worker thread publishes for the live line. Cumulative since the thread started
// (warmup included); the main thread diffs successive samples.
struct LiveCounters {
  std::atomic<uint64_t> committed{0};
  std::atomic<uint64_t> conflict_aborts{0};
  std::atomic<uint64_t> failed{0};
  std::array<std::atomic<uint64_t>, Histogram::kBucketCount> latency_buckets{};
  std::array<std::atomic<uint64_t>, Histogram::kBucketCount> commit_latency_buckets{};
};

// The live line: diffs of the threads' cumulative counters over the last interval.
class LiveSampler {
 public:
  explicit LiveSampler(std::vector<const LiveCounters*> counters)
      : counters_(std::move(counters)),
        prev_buckets_(Histogram::kBucketCount, 0),
        prev_commit_buckets_(Histogram::kBucketCount, 0) {}

  SecondSample sample(double elapsed_s, double interval_s, bool warmup) {
    uint64_t committed = 0, aborts = 0, failed = 0;
    for (const LiveCounters* c : counters_) {
      committed += c->committed.load(std::memory_order_relaxed);
      aborts += c->conflict_aborts.load(std::memory_order_relaxed);
      failed += c->failed.load(std::memory_order_relaxed);
    }
    const double per_s = 1.0 / std::max(interval_s, 1e-9);
    SecondSample x;
    x.t_s = elapsed_s;
    x.warmup = warmup;
    x.committed_per_sec = static_cast<double>(committed - prev_committed_) * per_s;
    x.aborts_per_sec = static_cast<double>(aborts - prev_aborts_) * per_s;
    x.failed_per_sec = static_cast<double>(failed - prev_failed_) * per_s;
    window(&LiveCounters::latency_buckets, prev_buckets_);
    x.latency_p50_us = window_->percentile(50) / 1e3;
    x.latency_p99_us = window_->percentile(99) / 1e3;
    const uint64_t acked = window(&LiveCounters::commit_latency_buckets, prev_commit_buckets_);
    x.acked_per_sec = static_cast<double>(acked) * per_s;
    x.commit_latency_p50_us = acked != 0 ? window_->percentile(50) / 1e3 : 0;
    x.commit_latency_p99_us = acked != 0 ? window_->percentile(99) / 1e3 : 0;
    prev_committed_ = committed;
    prev_aborts_ = aborts;
    prev_failed_ = failed;
    return x;
  }

  static void print(std::FILE* out, const SecondSample& x, bool replicated) {
    fmt::print(
        out,
        "[{:5.1f}s{}] committed/s {:>10.0f}  aborts/s {:>9.0f}{}  p50 {:.1f} us  p99 {:.1f} us{}\n",
        x.t_s, x.warmup ? " warmup" : "", x.committed_per_sec, x.aborts_per_sec,
        x.failed_per_sec != 0 ? fmt::format("  failed/s {:.0f}", x.failed_per_sec) : "",
        x.latency_p50_us, x.latency_p99_us,
        replicated ? fmt::format("  commit p50 {:.1f} us p99 {:.1f} us", x.commit_latency_p50_us,
                                 x.commit_latency_p99_us)
                   : "");
    std::fflush(out);
  }

 private:
  // Loads window_ with the samples of one bucket array since the last call; returns how many.
  uint64_t window(std::array<std::atomic<uint64_t>, Histogram::kBucketCount> LiveCounters::*buckets,
                  std::vector<uint64_t>& prev) {
    window_->reset();
    uint64_t n = 0;
    for (size_t i = 0; i < Histogram::kBucketCount; ++i) {
      uint64_t total = 0;
      for (const LiveCounters* c : counters_)
        total += (c->*buckets)[i].load(std::memory_order_relaxed);
      // A bucket's samples are counted at its midpoint: within the histogram's precision.
      window_->record_n(Histogram::bucket_low(i) + (Histogram::bucket_width(i) - 1) / 2,
                        total - prev[i]);
      n += total - prev[i];
      prev[i] = total;
    }
    return n;
  }

  std::vector<const LiveCounters*> counters_;
  std::vector<uint64_t> prev_buckets_;
  std::vector<uint64_t> prev_commit_buckets_;
  std::unique_ptr<Histogram> window_ = std::make_unique<Histogram>();
  uint64_t prev_committed_ = 0, prev_aborts_ = 0, prev_failed_ = 0;
};

}  // namespace shoal::bench

#include "src/server/live_latency.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/base/assert.h"
#include "src/base/json_field.h"

namespace shoal::server {
namespace {

nlohmann::json encode_counts(const LatencyCounts& counts) {
  nlohmann::json flat = nlohmann::json::array();
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    flat.push_back(i);
    flat.push_back(counts[i]);
  }
  return flat;
}

// Field `name` of `latency` (a flat [index, count, ...] list) into *out.
Status decode_counts(const nlohmann::json& latency, std::string_view name, LatencyCounts* out) {
  const std::string field = fmt::format("latency.{}", name);
  auto flat = json_field<nlohmann::json>(latency, name);
  if (!flat.ok())
    return Status::InvalidArgument(fmt::format("latency: {}", flat.status().message()));
  if (!flat->is_array() || flat->size() % 2 != 0 || flat->size() > 2 * kLiveLatencyBuckets) {
    return Status::InvalidArgument(
        fmt::format("'{}': {}, not a list of at most {} [index, count] pairs", field,
                    json_detail::describe(*flat), kLiveLatencyBuckets));
  }
  out->fill(0);
  size_t next = 0;  // the smallest index allowed next: increasing
  for (size_t k = 0; k < flat->size(); k += 2) {
    size_t index = 0;
    uint64_t count = 0;
    if (!json_detail::convert((*flat)[k], &index) || index < next || index >= kLiveLatencyBuckets) {
      return Status::InvalidArgument(
          fmt::format("'{}': entry {} is {}, not a bucket index in [{}, {})", field, k,
                      json_detail::describe((*flat)[k]), next, kLiveLatencyBuckets));
    }
    if (!json_detail::convert((*flat)[k + 1], &count)) {
      return json_detail::wrong_type<uint64_t>(fmt::format("{}[{}]", field, k + 1), (*flat)[k + 1]);
    }
    (*out)[index] = count;
    next = index + 1;
  }
  return Status::Ok();
}

// `now - before` into *window, bucket by bucket; false (nothing added) when a bucket of `now`
// is below `before`'s.
bool add_difference(const LatencyCounts& now, const LatencyCounts& before, LatencyCounts* window) {
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] < before[i]) return false;
  }
  for (size_t i = 0; i < now.size(); ++i) (*window)[i] += now[i] - before[i];
  return true;
}

// p50 and p99 of `counts` (bucket midpoints) into the row's fields; empty counts: none.
uint64_t fill_percentiles(const LatencyCounts& counts, Histogram* scratch,
                          std::optional<double>* p50_us, std::optional<double>* p99_us) {
  scratch->reset();
  for (size_t i = 0; i < counts.size(); ++i) {
    scratch->record_n(LiveLatencyLayout::bucket_mid(i), counts[i]);
  }
  if (scratch->count() == 0) return 0;
  *p50_us = static_cast<double>(scratch->percentile(50)) / 1e3;
  *p99_us = static_cast<double>(scratch->percentile(99)) / 1e3;
  return scratch->count();
}

}  // namespace

void LiveLatencyCounts::add_to(LatencyCounts* out) const {
  for (size_t i = 0; i < counts_.size(); ++i) {
    (*out)[i] += counts_[i].load(std::memory_order_relaxed);
  }
}

nlohmann::json latency_sample_json(const LatencySample& s) {
  return {{"speculative", encode_counts(s.speculative)}, {"commit", encode_counts(s.commit)}};
}

Status parse_latency_sample(const nlohmann::json& stats_reply, LatencySample* out) {
  auto latency = json_field<nlohmann::json>(stats_reply, "latency");
  if (!latency.ok()) return latency.status();
  if (!latency->is_object()) {
    return Status::InvalidArgument(
        fmt::format("'latency': {}, not an object", json_detail::describe(*latency)));
  }
  SHOAL_TRY(decode_counts(*latency, "speculative", &out->speculative));
  return decode_counts(*latency, "commit", &out->commit);
}

LatencySeries::LatencySeries(uint32_t shards, size_t seconds)
    : seconds_(std::max<size_t>(seconds, 1)),
      last_(shards),
      scratch_(std::make_unique<Histogram>()) {
  rows_.reserve(seconds_);
}

void LatencySeries::set_baseline(uint32_t shard, const LatencySample& s) {
  SHOAL_ASSERT(shard < last_.size(), "shard %u of %zu", shard, last_.size());
  last_[shard] = s;
}

void LatencySeries::reset(uint32_t shard) {
  set_baseline(shard, LatencySample{});
}

void LatencySeries::add(uint32_t shard, size_t second, const LatencySample& s) {
  SHOAL_ASSERT(shard < last_.size(), "shard %u of %zu", shard, last_.size());
  close_before(std::min(second, seconds_ - 1));
  LatencySample& last = last_[shard];
  // A sample from another process (a bucket went back) counts nothing, neither latency.
  LatencySample diff{};
  if (add_difference(s.speculative, last.speculative, &diff.speculative) &&
      add_difference(s.commit, last.commit, &diff.commit)) {
    for (size_t i = 0; i < kLiveLatencyBuckets; ++i) {
      window_.speculative[i] += diff.speculative[i];
      window_.commit[i] += diff.commit[i];
    }
  }
  last = s;
}

void LatencySeries::close_before(size_t second) {
  while (open_ < second) {  // bounded by seconds_
    rows_.push_back(close_window());
    ++open_;
  }
}

LatencySecond LatencySeries::close_window() {
  LatencySecond row;
  row.speculative_count = fill_percentiles(window_.speculative, scratch_.get(), &row.latency_p50_us,
                                           &row.latency_p99_us);
  row.commit_count = fill_percentiles(window_.commit, scratch_.get(), &row.commit_latency_p50_us,
                                      &row.commit_latency_p99_us);
  window_ = LatencySample{};
  return row;
}

std::vector<LatencySecond> LatencySeries::finish() {
  close_before(seconds_ - 1);
  if (rows_.size() < seconds_) rows_.push_back(close_window());
  return std::move(rows_);
}

}  // namespace shoal::server

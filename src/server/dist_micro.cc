#include "src/server/dist_micro.h"

#include <fmt/format.h>

namespace shoal::server {

nlohmann::json MicroParams::to_json() const {
  return {{"seconds", seconds},
          {"cross_shard_pct", cross_shard_pct},
          {"inflight", inflight},
          {"seed", seed},
          {"history_run", history_run}};
}

Result<MicroParams> MicroParams::from_json(const nlohmann::json& j) {
  MicroParams p;
  if (!j.is_object()) return Status::InvalidArgument("start: request is not an object");
  auto seconds = j.find("seconds");
  if (seconds == j.end() || !seconds->is_number() || !(seconds->get<double>() > 0) ||
      seconds->get<double>() > 1e6) {
    return Status::InvalidArgument("start.seconds: must be a number in (0, 1e6]");
  }
  p.seconds = seconds->get<double>();
  auto pct = j.find("cross_shard_pct");
  if (pct == j.end() || !pct->is_number_unsigned() || pct->get<uint64_t>() > 100) {
    return Status::InvalidArgument("start.cross_shard_pct: must be a whole number in [0, 100]");
  }
  p.cross_shard_pct = pct->get<uint32_t>();
  auto inflight = j.find("inflight");
  if (inflight == j.end() || !inflight->is_number_unsigned() || inflight->get<uint64_t>() < 1 ||
      inflight->get<uint64_t>() > 1024) {
    return Status::InvalidArgument("start.inflight: must be a whole number in [1, 1024]");
  }
  p.inflight = inflight->get<uint32_t>();
  auto seed = j.find("seed");
  if (seed != j.end() && seed->is_number_unsigned()) p.seed = seed->get<uint64_t>();
  auto run = j.find("history_run");
  if (run != j.end() && !run->is_number_unsigned()) {
    return Status::InvalidArgument("start.history_run: must be a whole number");
  }
  if (run != j.end()) p.history_run = run->get<uint64_t>();
  return p;
}

namespace {

// n distinct keys uniform in [lo, hi); a collision moves to the next key (bounded: n <= 4 and
// hi - lo >= 4 leave a free key within 4 steps).
void pick_distinct(uint64_t lo, uint64_t hi, uint32_t n, Rng& rng, uint64_t* out) {
  const uint64_t span = hi - lo;
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t k = rng.uniform(0, span - 1);
    for (uint32_t step = 0; step < kMicroKeysPerTxn; ++step) {
      bool taken = false;
      for (uint32_t j = 0; j < i; ++j) taken |= out[j] == lo + k;
      if (!taken) break;
      k = (k + 1) % span;
    }
    out[i] = lo + k;
  }
}

}  // namespace

void pick_keys(const KeyLayout& layout, uint32_t home, bool cross, Rng& rng, MicroArgs* out) {
  if (!cross) {
    pick_distinct(layout.lo(home), layout.hi(home), kMicroKeysPerTxn, rng, out->keys);
    for (uint32_t& s : out->shards) s = home;
    return;
  }
  // Another shard, uniformly: skip over home.
  uint32_t other = static_cast<uint32_t>(rng.uniform(0, layout.shard_count() - 2));
  if (other >= home) ++other;
  pick_distinct(layout.lo(home), layout.hi(home), 2, rng, out->keys);
  pick_distinct(layout.lo(other), layout.hi(other), 2, rng, out->keys + 2);
  out->shards[0] = out->shards[1] = home;
  out->shards[2] = out->shards[3] = other;
}

rt::Task<Status> dist_rmw4(dist::DistTxn& txn, const void* raw_args, void* /*result*/) {
  const auto& args = *static_cast<const MicroArgs*>(raw_args);
  MicroValue values[kMicroKeysPerTxn];
  for (uint32_t i = 0; i < kMicroKeysPerTxn; ++i) {
    SHOAL_CO_TRY(co_await txn.get(args.shards[i], kMicroTableId, &args.keys[i], 1, &values[i],
                                  sizeof(MicroValue)));
  }
  for (uint32_t i = 0; i < kMicroKeysPerTxn; ++i) {
    ++values[i].counter;
    SHOAL_CO_TRY(
        txn.put(args.shards[i], kMicroTableId, &args.keys[i], 1, &values[i], sizeof(MicroValue)));
  }
  co_return Status::Ok();
}

void MicroStats::merge(const MicroStats& o) {
  committed += o.committed;
  committed_cross += o.committed_cross;
  conflict_aborts += o.conflict_aborts;
  failed += o.failed;
  unavailable += o.unavailable;
  failover_retries += o.failover_retries;
  in_doubt_committed += o.in_doubt_committed;
  in_doubt_lost += o.in_doubt_lost;
  unacknowledged += o.unacknowledged;
  failed_cross += o.failed_cross;
  user_aborts += o.user_aborts;
  for (uint32_t t = 0; t < kTypesMax; ++t) {
    committed_by_type[t] += o.committed_by_type[t];
    failed_by_type[t] += o.failed_by_type[t];
  }
  if (first_error.empty()) first_error = o.first_error;
  latency_local.merge(o.latency_local);
  latency_cross.merge(o.latency_cross);
  latency_commit.merge(o.latency_commit);
  for (uint32_t t = 0; t < kTypesMax; ++t) latency_by_type[t].merge(o.latency_by_type[t]);
  rss_bytes += o.rss_bytes;
  peak_rss_bytes += o.peak_rss_bytes;
}

namespace {

nlohmann::json histogram_json(const Histogram& h) {
  nlohmann::json pairs = nlohmann::json::array();
  if (h.count() == 0) return pairs;
  for (size_t i = Histogram::bucket_of(h.min()); i <= Histogram::bucket_of(h.max()); ++i) {
    if (h.bucket_count(i) != 0) pairs.push_back({i, h.bucket_count(i)});
  }
  return pairs;
}

// Each bucket comes back as its midpoint: percentiles stay within the bucket's 0.8%.
Status histogram_from(const nlohmann::json& pairs, const char* field, Histogram* h) {
  if (!pairs.is_array()) return Status::InvalidArgument(fmt::format("stats.{}: not a list", field));
  for (const auto& p : pairs) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_unsigned() ||
        !p[1].is_number_unsigned() || p[0].get<uint64_t>() >= Histogram::kBucketCount) {
      return Status::InvalidArgument(fmt::format("stats.{}: bad [bucket, count] pair", field));
    }
    const size_t b = p[0].get<size_t>();
    h->record_n(Histogram::bucket_low(b) + Histogram::bucket_width(b) / 2, p[1].get<uint64_t>());
  }
  return Status::Ok();
}

}  // namespace

nlohmann::json MicroStats::to_json() const {
  nlohmann::json by_type = nlohmann::json::array();
  for (const Histogram& h : latency_by_type) by_type.push_back(histogram_json(h));
  return {{"committed", committed},
          {"committed_cross", committed_cross},
          {"conflict_aborts", conflict_aborts},
          {"failed", failed},
          {"unavailable", unavailable},
          {"failover_retries", failover_retries},
          {"in_doubt_committed", in_doubt_committed},
          {"in_doubt_lost", in_doubt_lost},
          {"unacknowledged", unacknowledged},
          {"failed_cross", failed_cross},
          {"user_aborts", user_aborts},
          {"committed_by_type", committed_by_type},
          {"failed_by_type", failed_by_type},
          {"first_error", first_error},
          {"latency_local", histogram_json(latency_local)},
          {"latency_cross", histogram_json(latency_cross)},
          {"latency_commit", histogram_json(latency_commit)},
          {"latency_by_type", by_type},
          {"rss_bytes", rss_bytes},
          {"peak_rss_bytes", peak_rss_bytes}};
}

Result<MicroStats> MicroStats::from_json(const nlohmann::json& j) {
  MicroStats s;
  if (!j.is_object()) return Status::InvalidArgument("stats: not an object");
  auto count = [&j](const char* name, uint64_t* out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_unsigned()) {
      return Status::InvalidArgument(fmt::format("stats.{}: missing or not a count", name));
    }
    *out = it->get<uint64_t>();
    return Status::Ok();
  };
  SHOAL_TRY(count("committed", &s.committed));
  SHOAL_TRY(count("committed_cross", &s.committed_cross));
  SHOAL_TRY(count("conflict_aborts", &s.conflict_aborts));
  SHOAL_TRY(count("failed", &s.failed));
  SHOAL_TRY(count("unavailable", &s.unavailable));
  SHOAL_TRY(count("unacknowledged", &s.unacknowledged));
  SHOAL_TRY(count("failed_cross", &s.failed_cross));
  if (auto e = j.find("first_error"); e != j.end() && e->is_string()) s.first_error = *e;
  if (auto u = j.find("user_aborts"); u != j.end() && u->is_number_unsigned()) s.user_aborts = *u;
  for (auto [name, field] : {std::pair{"failover_retries", &s.failover_retries},
                             std::pair{"in_doubt_committed", &s.in_doubt_committed},
                             std::pair{"in_doubt_lost", &s.in_doubt_lost}}) {
    if (auto r = j.find(name); r != j.end() && r->is_number_unsigned()) *field = *r;
  }
  for (const char* name : {"committed_by_type", "failed_by_type"}) {
    auto it = j.find(name);
    if (it == j.end()) continue;
    if (!it->is_array() || it->size() != kTypesMax) {
      return Status::InvalidArgument(fmt::format("stats.{}: not a list of {}", name, kTypesMax));
    }
    uint64_t* dst = name[0] == 'c' ? s.committed_by_type : s.failed_by_type;
    for (uint32_t t = 0; t < kTypesMax; ++t) {
      if (!(*it)[t].is_number_unsigned()) {
        return Status::InvalidArgument(fmt::format("stats.{}[{}]: not a count", name, t));
      }
      dst[t] = (*it)[t].get<uint64_t>();
    }
  }
  SHOAL_TRY(histogram_from(j.value("latency_local", nlohmann::json::array()), "latency_local",
                           &s.latency_local));
  SHOAL_TRY(histogram_from(j.value("latency_cross", nlohmann::json::array()), "latency_cross",
                           &s.latency_cross));
  SHOAL_TRY(histogram_from(j.value("latency_commit", nlohmann::json::array()), "latency_commit",
                           &s.latency_commit));
  if (auto it = j.find("latency_by_type"); it != j.end()) {
    if (!it->is_array() || it->size() != kTypesMax) {
      return Status::InvalidArgument("stats.latency_by_type: not a list of histograms");
    }
    for (uint32_t t = 0; t < kTypesMax; ++t) {
      SHOAL_TRY(histogram_from((*it)[t], "latency_by_type", &s.latency_by_type[t]));
    }
  }
  for (const char* name : {"rss_bytes", "peak_rss_bytes"}) {
    auto it = j.find(name);
    if (it != j.end() && it->is_number_unsigned()) {
      (name[0] == 'r' ? s.rss_bytes : s.peak_rss_bytes) = it->get<uint64_t>();
    }
  }
  return s;
}

}  // namespace shoal::server

#include "src/server/cluster_top.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "src/cluster/config.h"
#include "src/cluster/http_client.h"
#include "src/ops/metrics_parse.h"
#include "src/server/cluster_config.h"

namespace shoal::server {

namespace {

using Clock = std::chrono::steady_clock;

// One shard's leader as last scraped.
struct ShardView {
  bool up = false;
  uint32_t leader = 0;
  double epoch = 0;
  Clock::time_point at;
  double committed = 0, aborted = 0, failed = 0;
  ops::BucketSnapshot commit, speculative;
  double lag_s = 0;
  double followers = 0;
};

// Scrapes every replica of `shard` that has a metrics port; the leader's view, up = false if
// none answered as leader.
ShardView scrape_shard(cluster::HttpClient& http, const cluster::Shard& shard,
                       uint64_t timeout_ms) {
  ShardView best;
  for (uint32_t r = 0; r < shard.replicas.size(); ++r) {
    const cluster::Replica& rep = shard.replicas[r];
    if (rep.metrics_port == 0) continue;
    cluster::HttpResponse response;
    cluster::HttpFailure failure;
    const std::string url = fmt::format("http://{}:{}/metrics", rep.host, rep.metrics_port);
    if (!http.request(url, {}, true, timeout_ms, &response, &failure) || response.status != 200) {
      continue;
    }
    auto samples = ops::parse_metrics_text(response.body);
    if (!samples.ok() || ops::sum_samples(*samples, "shoal_info", {{"role", "leader"}}) < 1) {
      continue;
    }
    const double epoch = ops::sum_samples(*samples, "shoal_epoch");
    if (best.up && epoch <= best.epoch) continue;
    best.up = true;
    best.leader = r;
    best.epoch = epoch;
    best.at = Clock::now();
    best.committed = ops::sum_samples(*samples, "shoal_txn_committed_total");
    best.aborted = ops::sum_samples(*samples, "shoal_txn_aborted_total");
    best.failed = ops::sum_samples(*samples, "shoal_txn_failed_total");
    best.commit = ops::buckets_of(*samples, "shoal_txn_commit_latency_seconds");
    best.speculative = ops::buckets_of(*samples, "shoal_txn_speculative_latency_seconds");
    best.lag_s = ops::max_samples(*samples, "shoal_repl_lag_seconds");
    best.followers = ops::sum_samples(*samples, "shoal_repl_followers_connected");
  }
  return best;
}

// One screen line: the shard's rates between two scrapes of the same leader.
std::string shard_line(uint32_t id, const ShardView& before, const ShardView& now) {
  if (!now.up) return fmt::format("{:>5}  {:>6}  (no leader answers on its metrics port)", id, "-");
  if (!before.up || before.leader != now.leader || before.epoch != now.epoch) {
    return fmt::format("{:>5}  {:>6}  (new leader: rates next interval)", id, now.leader);
  }
  const double dt = std::chrono::duration<double>(now.at - before.at).count();
  const double rate = dt > 0 ? (now.committed - before.committed) / dt : 0;
  const double aborts =
      dt > 0 ? (now.aborted + now.failed - before.aborted - before.failed) / dt : 0;
  ops::BucketSnapshot lat = ops::bucket_delta(now.commit, before.commit);
  const char* kind = "ack";
  if (lat.count() == 0) {  // no replication: what clients see is the speculative latency
    lat = ops::bucket_delta(now.speculative, before.speculative);
    kind = "spec";
  }
  const auto ms = [](double s) { return s * 1e3; };
  return fmt::format(
      "{:>5}  {:>6}  {:>10.0f}  {:>9.1f}  {:>9.2f}  {:>9.2f}  {:>4}  {:>8.1f}  {:>9.0f}", id,
      now.leader, rate, aborts, ms(ops::bucket_quantile(lat, 0.5)),
      ms(ops::bucket_quantile(lat, 0.99)), kind, ms(now.lag_s), now.followers);
}

}  // namespace

Status cluster_top(const TopOptions& options) {
  auto config = load_cluster_config(options.config_path);
  if (!config.ok()) return config.status();
  for (const cluster::Shard& s : config->shards) {
    bool any = false;
    for (const cluster::Replica& r : s.replicas) any = any || r.metrics_port != 0;
    if (!any) {
      return Status::InvalidArgument(
          fmt::format("shard[{}]: no replica has a metrics_port in {}: cluster top reads /metrics",
                      s.id, options.config_path));
    }
  }
  cluster::HttpClient http;
  std::vector<ShardView> last(config->shards.size());
  for (size_t s = 0; s < last.size(); ++s) {
    last[s] = scrape_shard(http, config->shards[s], options.scrape_timeout_ms);
  }
  const bool tty = isatty(STDOUT_FILENO) != 0;
  for (uint32_t i = 0; options.iterations == 0 || i < options.iterations; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options.interval_ms));
    std::string screen = tty ? "\033[H\033[2J" : "";
    screen += fmt::format("cluster '{}'  {} shards  every {} ms\n", config->name,
                          config->shards.size(), options.interval_ms);
    screen += fmt::format("{:>5}  {:>6}  {:>10}  {:>9}  {:>9}  {:>9}  {:>4}  {:>8}  {:>9}\n",
                          "shard", "leader", "txn/s", "aborts/s", "p50 ms", "p99 ms", "lat",
                          "lag ms", "followers");
    for (size_t s = 0; s < last.size(); ++s) {
      ShardView now = scrape_shard(http, config->shards[s], options.scrape_timeout_ms);
      screen += shard_line(static_cast<uint32_t>(s), last[s], now) + "\n";
      last[s] = std::move(now);
    }
    fmt::print("{}", screen);
    std::fflush(stdout);
  }
  return Status::Ok();
}

}  // namespace shoal::server

// `shoal cluster top --config F [--iterations N] [--interval-ms T]`: a live per-shard view of a
// running cluster, from each shard leader's /metrics (server_metrics.h): committed
// transactions and aborts per second, commit latency p50/p99 over the last interval (the
// acknowledged latency on replicated clusters, the speculative one otherwise), and the
// slowest follower's replication lag.
//
// Every replica with a metrics_port in the config is scraped each interval; the one whose
// shoal_info says role="leader" (highest epoch) speaks for its shard, so the view follows a
// failover. Rates are differences between two scrapes of the same process.
//
// Threads: the calling thread only; blocking HTTP requests, each bounded by a timeout.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/status.h"

namespace shoal::server {

struct TopOptions {
  std::string config_path;
  uint32_t iterations = 0;      // screens to print; 0: until interrupted (Ctrl-C ends it)
  uint64_t interval_ms = 1000;  // between screens
  uint64_t scrape_timeout_ms = 500;
};

// InvalidArgument when no replica of some shard has a metrics_port (naming the shard).
[[nodiscard]] Status cluster_top(const TopOptions& options);

}  // namespace shoal::server

// What a shard server's and a follower's /metrics say (docs/OPERATIONS.md, "Metrics"): the
// per-worker counters the workers keep for it, and the functions that turn them, the
// replication leader's or follower's counters and the process's state into Prometheus text.
//
// WorkerMetrics: written by its worker's loop thread only (relaxed single-writer stores: no
// locked instruction on the data path), read by the metrics thread at scrape time. Counters
// never go back (they span every load the server ran); gauges (connections, vectorized
// watermark) are refreshed by the worker's health tick (kHealthTickNs, 20 ms).
//
// The render functions run on the metrics HTTP thread (src/ops/metrics_http.h): they read
// atomics, the leader's stats under its short lock, and nothing a worker holds.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/ops/metrics.h"

namespace shoal::repl {
class ReplicationLeader;
class Follower;
}  // namespace shoal::repl

namespace shoal::server {

class WorkerMetrics {
 public:
  static constexpr uint32_t kTypesMax = 8;  // MicroStats::kTypesMax
  static constexpr uint32_t kShardsMax = 64;

  // Outcome of one transaction a terminal or client ran (Worker::record).
  enum class Failure : uint8_t { kUnavailable, kTimeout, kOther };
  void committed(uint32_t type, bool cross, bool user_abort, uint64_t latency_ns);
  void failed(uint32_t type, Failure why);
  void conflicts(uint64_t retried) { bump(local_conflicts_, retried); }
  void acknowledged(uint64_t latency_ns) { commit_latency_.observe(latency_ns); }
  void unacknowledged() { bump(unacknowledged_, 1); }
  // Health tick: state only the loop thread can read.
  void set_coordinator(uint64_t conflict_aborts, uint64_t timeouts, uint64_t in_doubt);
  void set_connections(uint64_t incoming, uint64_t peers_up);
  void set_vector_watermark(uint32_t shard, uint64_t watermark);
  // This worker's RPC connection to `shard` (its coordinator's 2PC link): calls made (one
  // round trip each), calls that timed out, retransmissions.
  void set_peer_rpc(uint32_t shard, uint64_t calls, uint64_t timeouts, uint64_t retransmits);

  // A reader's copy (any thread; approximate while the worker runs). Sums of several
  // workers' copies add field by field.
  struct Totals {
    using Counts = std::array<uint64_t, kTypesMax>;
    Counts committed_local{}, committed_cross{}, user_aborts{};
    Counts failed_unavailable{}, failed_timeout{}, failed_other{};
    uint64_t conflicts = 0, timeouts = 0, in_doubt = 0, unacknowledged = 0;
    uint64_t incoming = 0, peers_up = 0;
    std::array<uint64_t, kShardsMax> vector_watermark{};  // min over the workers summed
    std::array<uint64_t, kShardsMax> peer_calls{}, peer_timeouts{}, peer_retransmits{};
    ops::BucketSnapshot speculative_local, speculative_cross, commit_latency;
    void add(const Totals& o);
  };
  Totals totals() const;
  // Totals::conflicts alone (any thread): the coordinator's part as of the last health tick.
  uint64_t conflicts_total() const {
    return local_conflicts_.load(std::memory_order_relaxed) +
           coordinator_conflicts_.load(std::memory_order_relaxed);
  }

 private:
  static void bump(std::atomic<uint64_t>& a, uint64_t by) {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  using Counts = std::array<std::atomic<uint64_t>, kTypesMax>;
  Counts committed_local_{}, committed_cross_{}, user_aborts_{};
  Counts failed_unavailable_{}, failed_timeout_{}, failed_other_{};
  std::atomic<uint64_t> local_conflicts_{0}, coordinator_conflicts_{0}, coordinator_timeouts_{0};
  std::atomic<uint64_t> in_doubt_{0}, unacknowledged_{0};
  std::atomic<uint64_t> incoming_{0}, peers_up_{0};
  std::array<std::atomic<uint64_t>, kShardsMax> vector_watermark_{};
  std::array<std::atomic<uint64_t>, kShardsMax> peer_calls_{}, peer_timeouts_{},
      peer_retransmits_{};
  ops::LatencyBuckets speculative_local_, speculative_cross_, commit_latency_;
};

// What one scrape of a shard server reads; pointers stay valid while the server serves.
struct ServerMetricsView {
  uint32_t shard = 0;
  uint32_t replica = 0;
  uint32_t shards = 1;  // vectorized watermark entries
  uint64_t epoch = 0;
  bool replicated_cluster = false;           // the vectorized watermark exists
  std::vector<std::string_view> type_names;  // transaction type labels, by type index
  std::vector<const WorkerMetrics*> workers;
  repl::ReplicationLeader* replication = nullptr;  // null: one replica
  uint64_t rss_bytes = 0;
};

// Appends a shard server's metrics (shoal_txn_*, shoal_2pc_*, shoal_repl_*, watermarks,
// epoch, connections, process).
void render_server_metrics(const ServerMetricsView& v, ops::MetricsText* m);

// A follower's (`shoal replica`): applied TID, replayed transactions, WAL and checkpoints.
struct FollowerMetricsView {
  uint32_t shard = 0;
  uint32_t replica = 0;
  const repl::Follower* follower = nullptr;  // null while none runs (between leaders)
  std::string data_dir;                      // where its checkpoints are (their bytes)
  uint64_t rss_bytes = 0;
};
void render_follower_metrics(const FollowerMetricsView& v, ops::MetricsText* m);

// Label names of TPC-C's five transaction types, by index; micro and bank use "txn".
std::vector<std::string_view> txn_type_names(std::string_view workload);

}  // namespace shoal::server

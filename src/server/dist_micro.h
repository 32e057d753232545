// Mako's microbenchmark across shard processes: the key layout, the distributed stored
// procedure, how a transaction picks its keys, and the statistics a shard reports.
//
// Keys: shard s owns the global keys [(partition_lo - 1) * K, (partition_hi - 1) * K) where K
// is keys_per_partition (partitions are 1-based in the config). One table (id 0, one 8-byte
// key word, 32-byte values whose first word is a counter). Each transaction reads 4 distinct
// keys and writes each back with its counter incremented. A local transaction draws all 4
// from its coordinator's shard; a cross-shard one (probability cross_shard_pct %) draws 2
// from its own shard and 2 from one other shard chosen uniformly (so it locks, validates and
// installs on two shards: the 2PC path).
// Consistency: sum of every counter over all shards == 4 x committed transactions.
//
// Threads: MicroStats and Rng are owned by one worker loop; the functions are pure.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "shoal/status.h"
#include "src/base/env.h"
#include "src/base/histogram.h"
#include "src/cluster/config.h"
#include "src/dist/coordinator.h"

namespace shoal::server {

inline constexpr uint32_t kMicroTableId = 0;
inline constexpr uint32_t kMicroKeysPerTxn = 4;

struct MicroValue {
  uint64_t counter;  // incremented by every committed transaction that writes the key
  char payload[24];  // filler, as in the single-shard microbenchmark
};
static_assert(sizeof(MicroValue) == 32);

class KeyLayout {
 public:
  KeyLayout(const cluster::ClusterConfig& config, uint64_t keys_per_partition)
      : config_(&config), keys_per_partition_(keys_per_partition) {}
  uint64_t lo(uint32_t shard) const {
    return (config_->shards[shard].partition_lo - 1) * keys_per_partition_;
  }
  uint64_t hi(uint32_t shard) const {
    return (config_->shards[shard].partition_hi - 1) * keys_per_partition_;
  }
  uint32_t shard_count() const { return static_cast<uint32_t>(config_->shards.size()); }
  uint64_t keys_per_partition() const { return keys_per_partition_; }

 private:
  const cluster::ClusterConfig* config_;
  uint64_t keys_per_partition_;
};

// What a server runs when told to start (kStart's request).
struct MicroParams {
  double seconds = 10;
  uint32_t cross_shard_pct = 0;  // [0, 100]
  uint32_t inflight = 128;       // coroutine transactions in flight per worker, [1, 1024]
  uint64_t seed = 1;
  // Bank, a server with a journal directory: the run's id, which every worker's history file
  // carries in its header (bank_history_file.h); 0: no files.
  uint64_t history_run = 0;
  nlohmann::json to_json() const;
  // InvalidArgument naming the field that is missing or out of range.
  [[nodiscard]] static Result<MicroParams> from_json(const nlohmann::json& j);
};

struct MicroArgs {
  uint64_t keys[kMicroKeysPerTxn];
  uint32_t shards[kMicroKeysPerTxn];
};

// Picks the keys of one transaction coordinated by `home` (see the header comment).
// REQUIRES: every shard owns >= 4 keys; cross only when shard_count() > 1.
void pick_keys(const KeyLayout& layout, uint32_t home, bool cross, Rng& rng, MicroArgs* out);

// The stored procedure: args is a MicroArgs; no result.
rt::Task<Status> dist_rmw4(dist::DistTxn& txn, const void* args, void* result);

// A worker's (or a shard's, or the cluster's) outcome counts and latencies, for the
// microbenchmark and for TPC-C across shards (which also counts by transaction type).
struct MicroStats {
  static constexpr uint32_t kTypesMax = 8;
  uint64_t committed = 0;  // includes user aborts (TPC-C's rollbacks: completed business)
  uint64_t user_aborts = 0;
  uint64_t committed_by_type[kTypesMax] = {};
  uint64_t failed_by_type[kTypesMax] = {};
  uint64_t committed_cross = 0;
  uint64_t conflict_aborts = 0;  // retried attempts (the coordinator's count)
  uint64_t failed = 0;           // transactions that gave up (any non-Ok final status)
  uint64_t unavailable = 0;      // of those: a shard was gone
  // Attempts that found a shard unreachable, installed nothing, and were retried once its new
  // leader was redialed (a failover; not failures: their clients were never answered).
  uint64_t failover_retries = 0;
  // Left in doubt at a shard that failed over (coordinator.h C2), then settled by its verdict
  // (discard_journal.h): its half there survived (committed, acknowledged as any other), or
  // was lost with the shard and undone everywhere (then retried as above).
  uint64_t in_doubt_committed = 0, in_doubt_lost = 0;
  uint64_t failed_cross = 0;
  std::string first_error;               // the first failure's text, for the report
  Histogram latency_local;               // ns, committed local transactions (retries included)
  Histogram latency_cross;               // ns, committed cross-shard transactions
  Histogram latency_by_type[kTypesMax];  // ns, committed, by transaction type (TPC-C)
  // ns, start to acknowledged: the vectorized watermark covers the transaction's vector
  // (replicated clusters; the latencies above are speculative: start to visible).
  Histogram latency_commit;
  // Committed but never acknowledged: still waiting for the vector watermark when the run's
  // grace period after its end ran out (replication stalled).
  uint64_t unacknowledged = 0;
  uint64_t rss_bytes = 0;  // the shard process's resident set (a shard's stats only)
  uint64_t peak_rss_bytes = 0;

  void merge(const MicroStats& other);
  // Histograms travel as sparse [bucket, count] pairs.
  nlohmann::json to_json() const;
  [[nodiscard]] static Result<MicroStats> from_json(const nlohmann::json& j);
};

}  // namespace shoal::server

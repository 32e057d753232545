// The controller's side of replicated shards (docs/REPLICATION.md): after a run, close every
// shard's streams (control kRepl "close"), wait until every follower applied the closed floor,
// and collect per replica its engine digest and, for TPC-C, the cluster-wide consistency
// check (each follower of shard s gets the HISTORY payments other shards hold for shard s's
// customers, as its leader does). Used by `shoal bench --shards N --replicas R` / `--cluster`
// (bench/dist_controller.cc) and `shoal cluster digest` (cluster_ctl.cc).
//
// Threads: the calling thread (it drives a ControlClient).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shoal/status.h"
#include "src/cluster/config.h"
#include "src/repl/replica_proto.h"
#include "src/server/control.h"

namespace shoal::server {

struct ReplicaState {
  uint32_t replica = 0;
  bool lost = false;  // its connection to the leader is gone: no digest, no check
  uint64_t applied_tid = 0;
  uint64_t digest = 0;
  bool checked = false;
  std::vector<std::string> check_failures;
  uint64_t replay_txns = 0;
  double replay_txns_per_cpu_sec = 0;
  uint64_t wal_bytes = 0;
  repl::FollowerReadStats reads;  // threads == 0: it serves no reads
};

struct ShardReplicaStates {
  uint32_t shard = 0;
  std::string error;  // non-empty: the shard did not answer (the rest is empty)
  uint64_t floor = 0;
  uint64_t leader_digest = 0;
  uint32_t leader_replica = 0;          // which replica leads (not 0 after a failover)
  std::vector<ReplicaState> followers;  // every other replica
};

// For every shard: closes its streams (no load may run) and collects its replicas' states
// once each connected follower applied the floor, or records why not within timeout_ms.
// payments: empty (no consistency check), or per shard the TPC-C payments JSON
// (payments_json.h) its followers add to their check.
std::vector<ShardReplicaStates> collect_replica_states(ControlClient& client,
                                                       const cluster::ClusterConfig& config,
                                                       const std::vector<nlohmann::json>& payments,
                                                       uint64_t timeout_ms);

// The shard x replica table (digests, "= leader" or "DIFFERS", checks, and the follower
// reads of followers serving them), one line per replica (two with reads). Its verdict: Ok
// when every answering replica matches its leader, passed its check and served no torn
// snapshot; Corruption naming the first difference, failed check or torn snapshot; Unavailable when
// a shard or a follower did not answer (and nothing differs). *shard_unverified (may be null) tells
// whether a whole shard went unverified (no answer, not quiesced in time), as opposed to
// followers lost while their shard went on.
[[nodiscard]] Status replica_verdict(const std::vector<ShardReplicaStates>& states,
                                     std::string* table, nlohmann::json* json,
                                     bool* shard_unverified = nullptr);

}  // namespace shoal::server

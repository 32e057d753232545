// The control plane of a shard server: a handful of RPC methods that `shoal cluster` and
// `shoal bench micro --shards/--cluster` call, and ControlClient, the synchronous client
// the command line uses.
//
// WIRE: the control methods share the data RPC endpoint of every accepted connection (ids
// 60..64, beside the transaction protocol's 40..44). Requests and replies are JSON text
// (human-debuggable, and off the data path), at most kControlBytesMax bytes each:
//   kPing   60  {}                                   {"shard", "workers", "keys_lo", "keys_hi",
//                                                     "pid", "running", "replicas", "watermark"}
//   kStart  61  {"seconds", "cross_shard_pct",       {} or InvalidArgument (already running,
//                "inflight", "seed"}                     bad field)
//   kStats  62  {} or {"latency": true}              {"done", "committed", ..., histograms};
//                                                    with latency also "live_conflicts" and
//                                                    "latency" (live_latency.h: cumulative
//                                                    latency counts, the controller's series)
//   kScan   63  {}                                   {"keys", "unreadable", "counter_sum"}
//                                                    (bank: also "balance_sum")
//   kHistory 64 {"worker", "from"}                   {"workers", "total", "dropped", "next",
//                                                     "txns"}: workload bank, after a load: one
//                                                     page of a worker's log (dist_bank.h)
//   kRepl   65  {"step":"close"}                     {"closing"}: a replicated shard, after a
//                                                     run: every stream seals a floor above
//                                                     every TID committed (shard_server.h)
//               {"step":"report","digest","check",   {"closed","done"} and when done: "floor",
//                "payments","wait_ms"}                "leader_digest", "followers": [{replica,
//                                                     lost, applied_tid, digest, checked,
//                                                     check_failures, ...}]
//   kDecisions 66 {"ids":[id,...]}                  {"found":[[id,tid],...]}: a shard's new
//                                                    leader, after a failover: which of these
//                                                    distributed transactions its log holds
//                                                    (at most kDecisionIdsMax ids; asked by
//                                                    the other shards' leaders, F11 and C2)
//   kStop   67  {}                                   {"stopping": workers}: the load running
//                                                    ends now (Ctrl-C of the bench): each
//                                                    worker's clients finish the transaction in
//                                                    hand and stop, as at the run's end; no-op
//                                                    without a load
//
// Threads: ControlClient owns a private EventLoop and runs it only inside call(); use it from
// one thread. Every call is bounded by its timeout; a shard that is gone answers Unavailable
// naming the shard.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shoal/status.h"
#include "src/cluster/config.h"

namespace shoal::server {

enum ControlMethod : uint16_t {
  kPing = 60,
  kStart = 61,
  kStats = 62,
  kScan = 63,
  kHistory = 64,
  kRepl = 65,
  kDecisions = 66,
  kStop = 67,
};
inline constexpr size_t kControlBytesMax = 1 << 20;
inline constexpr size_t kDecisionIdsMax = 4096;  // ids per kDecisions call

// Parses a JSON control payload; InvalidArgument on malformed text or an oversized payload.
[[nodiscard]] Result<nlohmann::json> parse_control(std::string_view text);

class ControlClient {
 public:
  explicit ControlClient(const cluster::ClusterConfig& config);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Connects to shard `shard`'s leader (once; later calls reuse the connection), retrying
  // refused connections for up to timeout_ms. Unavailable naming the shard and address.
  [[nodiscard]] Status connect(uint32_t shard, uint64_t timeout_ms);
  // One control call; connects first if needed. Unavailable/Timeout name the shard.
  [[nodiscard]] Result<nlohmann::json> call(uint32_t shard, ControlMethod method,
                                            const nlohmann::json& request, uint64_t timeout_ms);
  // Drops the connection to `shard` (the next call reconnects).
  void disconnect(uint32_t shard);
  // The shard's leader is now `replica` (a failover): later calls go to that replica's address.
  // REQUIRES: replica < the shard's replicas in the config.
  void set_leader(uint32_t shard, uint32_t replica);
  // The replica calls to `shard` go to (0 unless set_leader moved it).
  uint32_t leader(uint32_t shard) const { return leaders_.at(shard); }

 private:
  struct Conn;
  std::string address(uint32_t shard) const;

  const cluster::ClusterConfig& config_;
  struct LoopHolder;
  std::unique_ptr<LoopHolder> loop_;
  std::vector<std::unique_ptr<Conn>> conns_;  // per shard; null when not connected
  std::vector<uint32_t> leaders_;             // per shard: the replica its calls go to
};

}  // namespace shoal::server

// `shoal replica --config FILE --shard N --replica R`: one follower replica of one shard
// (src/repl/follower.h) as a process. It dials the shard's leader (replica 0's
// cluster::replication_port() in the config), delays what it receives by the config's one-way
// delay between the leader's region and its own, and keeps its WAL in --data-dir.
//
// When its leader goes away (the connection ends: the process died or stopped) and a
// configuration manager is given (`--etcd host:port,...`), the replicas agree on the next
// leader (docs/REPLICATION.md, "Failover"): every surviving follower tries one compare-and-swap
// moving the cluster's epoch and the shard's leader to itself
// (cluster::ClusterStateStore::begin_epoch_change); exactly one wins. Without one, the follower
// exits with its leader, as before (it cannot tell a crash from a stop). The winner is promoted in
// place: its engine, applier and acceptor state become a shard server's (run_server with a
// Promotion, shard_server.h), which takes over the streams and serves the shard on this replica's
// address from the config; the others follow it.
//
// Threads: the calling thread runs the follower's event loop, then, promoted, the server.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/status.h"
#include "src/cluster/config.h"
#include "src/repl/follower.h"
#include "src/server/shard_server.h"

namespace shoal::server {

struct ReplicaOptions {
  std::string config_path;
  uint32_t shard = 0;
  uint32_t replica = 1;
  std::string data_dir;  // empty: .shoal/<config name>/shard-<N>-replica-<R>
  std::string fsync = "batch";
  int replay_nice = 0;  // nice level of the replay thread
  // Dialing the leader: a shard server listens for followers only after loading its data.
  uint64_t connect_timeout_ms = 120'000;
  // Reader threads running read-only transactions at the follower's snapshot (0: none).
  uint32_t serve_reads = 0;
  bool unsafe_snapshot_read_newest = false;  // test-only planted bug
  // Checkpoint of the replayed store every this many ms, then WAL truncation (0: never).
  uint64_t checkpoint_interval_ms = 0;
  // CPUs every thread of the follower runs on (`--cpus`, a cpu list; spawn_servers plans it
  // beside the workers' cores, src/base/cpu_placement.h). Empty: any.
  std::string cpus;
  // What a promoted replica serves (the shard server's options, shard_server.h: workload,
  // workers, keys_per_partition, batching, etcd). config_path, shard, fsync and data_dir
  // above are copied into it.
  ServerOptions server;
};

[[nodiscard]] Status run_replica(const ReplicaOptions& options);

// `shoal server --recover-epoch E` (`cluster up` over a run directory it ran before): replica
// options.replica of a replicated shard, its leader, restarts from its own disk. Its store is
// rebuilt as a restarting follower's is (the newest valid checkpoint, then the chosen slots of
// its WAL after it, Follower::open), then promoted in place in epoch E through the failover's
// takeover (run_server with a Promotion: phase 1 on every stream, which its followers,
// restarted over their own directories, answer; what a majority holds above its recovered
// chosen index is re-proposed; the tail above the final watermark, never acknowledged, is
// discarded), and it serves. Nothing is loaded. Errors: NotFound when data_dir holds no
// replica (nothing is created there), InvalidArgument when the directory is another
// replica's (check_replica_identity) or its log already saw epoch E or a later one. With etcd
// (options.server.etcd), etcd must be at epoch E naming this replica as its shard's leader
// (`cluster up` moves it there before it starts anything: ClusterStateStore::restart_in_epoch),
// else InvalidArgument, and the server then runs under etcd as any leader does (a follower
// replaces it when it dies); without etcd only replica 0 may restart as the leader.
[[nodiscard]] Status recover_and_lead(const ReplicaOptions& options, uint64_t epoch);

// Follows the shard's leader with `follower` (opened by run_replica) and, whenever the leader
// is gone, agrees on the next one; promoted, runs the shard server until SIGTERM.
inline constexpr uint32_t kLeaderChangesMax = 64;
// How long a follower that is not the failed leader's designated successor waits before it
// stands in etcd (the successor stands at once).
inline constexpr uint64_t kSuccessorGraceMs = 300;
// How often such a follower asks etcd meanwhile whether the successor stood already.
inline constexpr uint64_t kSuccessorPollMs = 5;
[[nodiscard]] Status follow_and_take_over(const ReplicaOptions& options,
                                          const cluster::ClusterConfig& config,
                                          const std::string& data_dir, uint32_t leader,
                                          std::unique_ptr<repl::Follower> follower);
// The shard's leader as the configuration manager (options.server.etcd) has it.
[[nodiscard]] Result<uint32_t> current_leader(const ReplicaOptions& options,
                                              const cluster::ClusterConfig& config);

}  // namespace shoal::server

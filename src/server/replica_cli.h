// `shoal replica --config FILE --shard N --replica R`: one follower replica of one shard
// (src/repl/follower.h) as a process. It dials the shard's leader (replica 0's
// cluster::replication_port() in the config), delays what it receives by the config's one-way delay
// between the leader's region and its own, keeps its WAL in --data-dir, and exits when the leader
// closes the connection.
//
// Threads: the calling thread runs the follower's event loop.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/status.h"

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
};

[[nodiscard]] Status run_replica(const ReplicaOptions& options);

}  // namespace shoal::server

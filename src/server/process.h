// Shard server processes seen from a controller: spawn them (fork + exec of this binary) with
// the follower replicas of replicated shards (`shoal replica`), wait until the servers answer
// kPing (a replicated server answers only once its followers installed its load), and stop
// them all (SIGTERM, then SIGKILL after a deadline). Every process it starts gets its CPUs
// from one plan for the host (plan_host_placement): workers on cores of their own when there
// are cores to spare, everything else on the rest.
//
// Threads: the calling thread only. REQUIRES: spawn() from a process without other threads
// (between fork and exec the child only calls async-signal-safe functions anyway).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/base/cpu_placement.h"
#include "src/cluster/config.h"
#include "src/cluster/etcd_process.h"
#include "src/server/control.h"

namespace shoal::server {

struct ServerProcess {
  uint32_t shard = 0;
  uint32_t replica = 0;
  bool leader = false;  // the shard server (`shoal server`); else a `shoal replica` follower
  pid_t pid = -1;
  bool child = false;  // ours to waitpid (else: reaped by whoever adopted it)
  std::string log_path;
};

struct SpawnOptions {
  std::string config_path;  // absolute
  std::string log_dir;
  uint32_t workers = 0;
  std::string workload = "micro";  // `shoal server --workload`
  uint64_t keys_per_partition = 1'000'000;
  bool die_with_parent = false;  // PR_SET_PDEATHSIG; else the child starts its own session
  bool unsafe_skip_read_validation = false;  // test only: `--unsafe-skip-read-validation`
  bool tpcc_read_only_hint = true;           // false: `--no-read-only-hint`
  // Replicated shards: every replica's WAL in <data_dir>/shard-<s>-replica-<r> (empty: the
  // log_dir), its sync policy, and the followers' replay nice level.
  std::string data_dir;
  std::string fsync = "batch";
  // One replica per shard: each server keeps a WAL there all the same (`cluster up --fsync`
  // given, or a restart of a cluster that did), and so does what replicated shards do with it.
  bool lone_replica_log = false;
  int replica_nice = 0;
  // Leaders' log batching (`shoal server --batch-txns/--batch-us`); 0: the config's.
  uint32_t batch_txns = 0;
  double batch_us = 0;
  int64_t lead_ms_max = -1;  // `--lead-ms-max` (the lead bound); -1: the server's default
  // Followers' reader threads (`shoal replica --serve-reads`) and the test-only planted bug.
  uint32_t serve_reads = 0;
  bool unsafe_snapshot_read_newest = false;
  // Followers' `shoal replica --checkpoint-interval-ms`, and the leaders' `shoal server
  // --checkpoint-interval-ms` (they fetch those checkpoints and truncate their WALs).
  uint64_t checkpoint_interval_ms = 0;
  // `--memory-reserve-mb` of every server and replica (src/base/memory_reserve.h); 0: none.
  uint64_t memory_reserve_mb = 0;
  // "auto": when the servers' workers leave a core of this host over, each worker is pinned
  // to a core of its own (shard 0's first) and everything else, followers included, runs on
  // the rest (plan_host_placement); "none": the scheduler places everything.
  std::string cpu_placement = "auto";
  // The configuration manager's endpoints (`--etcd` of every server and replica); empty: none.
  std::vector<std::string> etcd;
  std::string ack_journal_dir;  // `--ack-journal` of every server and replica (TPC-C)
  // Non-zero: every replicated shard's server restarts from its data directory in this epoch
  // (`shoal server --recover-epoch`, replica_cli.h) instead of loading; followers restart
  // from theirs as always.
  uint64_t recover_epoch = 0;
  // Per shard, the replica that runs `shoal server` (a restart after failovers: the leaders
  // etcd names); the others run `shoal replica`. Empty: replica 0 of every shard.
  std::vector<uint32_t> leaders;
  // Non-zero: every server's `--connect-timeout-ms` (dialing the other shards once it serves;
  // a restart's leaders recover their WALs first, for as long as those take).
  uint64_t connect_timeout_ms = 0;
};

// The plan to hand spawn_servers (planned once, so the caller can print what it starts):
// worker_cpus lists shard 0's workers, then shard 1's, ...; nothing pinned with cpu_placement
// "none" or no core left over; InvalidArgument for another mode.
[[nodiscard]] Result<CpuPlacement> plan_host_placement(const cluster::ClusterConfig& config,
                                                       const SpawnOptions& options);

// What `who` is in messages: "shard 1" or "shard 1 replica 2".
std::string process_name(const ServerProcess& p);

// This executable's path (/proc/self/exe).
[[nodiscard]] Result<std::string> self_exe();

// A local cluster's configuration manager: a single-member etcd with its data in <dir>/etcd
// and its log in <dir>/etcd.log (loopback, free ports), holding epoch 1 with every shard led
// by replica 0 (unless an epoch is there already). `detach`: it outlives this process
// (`cluster up`; EtcdProcessOptions::detach). Unavailable when etcd does not start.
[[nodiscard]] Result<std::unique_ptr<cluster::EtcdProcess>> start_local_etcd(
    const cluster::ClusterConfig& config, const std::string& dir, bool detach);

// The cluster's state in the etcd at `endpoints` (ClusterStateStore): epoch 1 with every shard
// led by replica 0, unless an epoch is there already; `fresh` removes every key of the
// cluster first (a cluster started afresh on an etcd it ran with before). Unavailable when
// etcd does not answer.
[[nodiscard]] Status initialize_cluster_state(const cluster::ClusterConfig& config,
                                              const std::vector<std::string>& endpoints,
                                              bool fresh);

// Starts one `shoal server` per shard (replica options.leaders[s], 0 by default), placed as
// `placement` (plan_host_placement) says, and `shoal replica` for every other replica of every
// shard. Logs go by replica, whatever its role: replica 0 to <log_dir>/shard-<i>.log, replica
// r >= 1 to <log_dir>/shard-<i>-replica-<r>.log.
[[nodiscard]] Result<std::vector<ServerProcess>> spawn_servers(const cluster::ClusterConfig& config,
                                                               const SpawnOptions& options,
                                                               const CpuPlacement& placement);

// Starts `shoal replica` for replica `replica` of shard `shard` over its directory (a killed
// replica, the former leader included, restarting: it follows the configuration manager's
// leader, options.etcd), logging to <log_dir>/shard-<s>-replica-<r>.restarted.log.
[[nodiscard]] Result<ServerProcess> spawn_follower(const cluster::ClusterConfig& config,
                                                   const SpawnOptions& options,
                                                   const CpuPlacement& placement, uint32_t shard,
                                                   uint32_t replica);

// Polls every shard server with kPing until all answer or timeout_ms passes. A process (server
// or follower) that exits meanwhile fails it at once, quoting the end of its log.
[[nodiscard]] Status wait_ready(ControlClient& client, const std::vector<ServerProcess>& procs,
                                uint64_t timeout_ms);

// True while `p` runs (a child that exited is reaped here).
bool alive(const ServerProcess& p);

// SIGTERM to every process, wait up to timeout_ms, then SIGKILL what is left and wait again.
// Returns how many needed SIGKILL.
size_t stop_servers(const std::vector<ServerProcess>& procs, uint64_t timeout_ms);

// The last `lines` lines of a file ("" when unreadable), for error messages.
std::string tail_file(const std::string& path, size_t lines);

// Milliseconds on the monotonic clock, and a sleep of `ms` (not resumed after a signal): the
// waits of the tools that drive server processes (spawn, control, failover runs).
uint64_t now_ms();
void sleep_ms(uint64_t ms);

}  // namespace shoal::server

// `shoal cluster up|status|down|check` and `shoal bench micro|tpcc|bank --shards N | --cluster F`:
// starting shard server processes, finding out which answer, stopping them, and the options of
// the benchmarks driven from outside (their controller: bench/dist_bench.h).
//
// Run directory (`cluster up`/`down`): <run_dir>/shard-<i>.pid and shard-<i>.log per shard,
// shard-<i>-replica-<r>.{pid,log} and the WAL directory shard-<i>-replica-<r>/ per replica of
// a replicated shard, up.json (the epoch, workload, workers and keys of the last `up`); run_dir
// defaults to .shoal/<cluster name>/. An `up` over a run directory where a replicated cluster
// ran restarts every replica from its own disk (followers as `shoal replica`, leaders as
// `shoal server --recover-epoch`, replica_cli.h) in the next epoch, loading nothing; `--fresh`
// (or no replica directory) clears and loads. Three replicas or more: `up` runs an etcd in
// <run_dir>/etcd (afresh: epoch 1, replica 0 leading; a restart: the same data moved to the
// restart's epoch, its leaders kept and restarted as leaders), and `up` over a running
// cluster with replicas down restarts those as followers of etcd's leaders. `status`, `check`,
// `digest` and `bench --cluster` address the leaders that etcd names. `down` signals only pids
// whose command line is a `shoal server` or `shoal replica` (a stale pid file must not kill an
// unrelated process that reused the pid). Stopping is SIGTERM, then SIGKILL after stop_timeout_ms.
//
// Benchmark: the servers generate the load themselves (shard_server.h); the controller sends
// kStart to every shard, waits, polls kStats until every shard is done or gone, checks
// (micro: scans every surviving shard for keys left locked and sums the counters; TPC-C: the
// consistency conditions on every shard, each with the other shards' Payments of its
// customers; bank: pages every worker's history out with kHistory, runs the Adya checker over
// the merged history and checks that no money was made or lost), and prints one report. A
// local run (--shards) starts its own servers on free loopback ports in a temporary directory,
// as children that die with it (PR_SET_PDEATHSIG), and always stops them, on errors too.
//
// Threads: all of this runs on the calling (main) thread; it forks but starts no threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shoal/status.h"
#include "src/cluster/config.h"
#include "src/server/control.h"

namespace shoal::server {

struct ClusterOptions {
  std::string config_path;
  std::string run_dir;             // empty: .shoal/<cluster name>
  uint32_t workers = 0;            // 0: the config's workers_per_shard
  std::string workload = "micro";  // what the servers load: micro, tpcc or bank
  uint64_t keys_per_partition = 1'000'000;
  uint64_t ready_timeout_ms = 60'000;
  uint64_t stop_timeout_ms = 10'000;
  std::string fsync = "batch";  // `up`, replicated shards: every replica's WAL sync policy
  uint64_t quiesce_timeout_ms = 120'000;  // `digest`: followers applying the closed floor
  // `up`, replicated shards: the leaders' log batching (0: the config's batch_txns/batch_us),
  // and reader threads per follower serving read-only transactions at its snapshot.
  uint32_t batch_txns = 0;
  double batch_us = 0;
  int64_t lead_ms_max = -1;  // `up`: the leaders' lead bound (-1: the server's default)
  uint32_t serve_reads = 0;
  uint64_t checkpoint_interval_ms = 0;  // `up`: followers' checkpoint interval (0: none)
  uint64_t memory_reserve_mb = 0;       // `up`: SpawnOptions::memory_reserve_mb
  std::string cpu_placement = "auto";   // `up`: SpawnOptions::cpu_placement
  // `up --no-read-only-hint`, TPC-C: ITEM and the customer-name index are read as any table
  // (their reads validated; docs/OPERATIONS.md), for measuring what the hint buys.
  bool tpcc_read_only_hint = true;
  // `up` over a run directory that an earlier `up` of a replicated cluster left (up.json and
  // replica directories): every replica restarts from its own disk and nothing is loaded,
  // unless `fresh` (the replica directories and ack journals are cleared, the load is afresh).
  // A restart keeps the recorded workload, workers and keys; --workload or
  // --keys-per-partition given (flags_given) must then agree with the record
  // (InvalidArgument otherwise).
  bool fresh = false;
  // `up`: the flags given on its command line ("--fsync", ...). Restarting from disk, or the
  // replicas that died, keeps up.json's setting of every recorded flag not given again
  // (fsync, batching, lead bound, serve-reads, checkpoints, memory reserve, CPU placement,
  // the read-only hint, the ack journal).
  std::set<std::string> flags_given;
  // `up --ack-journal`, TPC-C: the terminals journal every acknowledged NewOrder into the run
  // directory (acks-*.bin, ack_journal.h), which `check` then looks up in the stores.
  bool ack_journal = false;
};

// Each prints its table to stdout; a non-Ok Status is the one-line reason for exit code 1.
[[nodiscard]] Status cluster_up(const ClusterOptions& options);
[[nodiscard]] Status cluster_status(const ClusterOptions& options);
// Points `client` at the shard leaders that the cluster's etcd names (the config's `etcd`
// members, else the one `up` started in run directory `dir`; after a failover the leaders are
// not replica 0) and prints them; returns that etcd's endpoints (for a run that follows later
// failovers), none when there is no etcd (`up` of a cluster of fewer than three replicas) or
// it does not answer.
std::vector<std::string> follow_run_dir_leaders(const cluster::ClusterConfig& config,
                                                const std::string& dir, ControlClient* client);
[[nodiscard]] Status cluster_down(const ClusterOptions& options);
// Reads every key of every shard with fresh transactions: Unavailable when a shard does not
// answer, Aborted when a key is unreadable (a lock left behind). A TPC-C cluster (as up.json
// records it) is checked with TPC-C's consistency conditions instead (Corruption when one
// fails), and with every acknowledged NewOrder of the run directory's ack journals looked up
// (Corruption when one is missing).
[[nodiscard]] Status cluster_check(const ClusterOptions& options);
// Quiesces every shard (no load may run: kRepl close) and prints each replica's engine digest,
// shard x replica; Corruption when a follower differs from its leader, Unavailable when a
// shard or follower does not answer.
[[nodiscard]] Status cluster_digest(const ClusterOptions& options);

struct DistBenchOptions {
  std::string workload = "micro";         // micro, tpcc (dist_tpcc.h) or bank (dist_bank.h)
  uint32_t warehouses = 2;                // tpcc, local run: partitions of the config
  std::string transport = "shm";          // local run: between shard processes (tcp, shm, fabric)
  bool baseline = false;                  // tpcc: measure a single-shard run first (the CLI does)
  double baseline_committed_per_sec = 0;  // > 0: report per-worker throughput against it
  std::string cluster_path;               // non-empty: run against this running cluster
  uint32_t shards = 2;                    // local run: shards to start
  uint32_t workers = 1;                   // local run: workers per shard
  uint32_t cross_shard_pct = 0;
  uint32_t inflight = 128;  // per worker: 32 leaves cross-shard runs latency-bound
  double seconds = 10;
  uint64_t keys_per_partition = 1'000'000;  // local run
  uint64_t seed = 1;
  std::string json_path;
  // Local run, test only: the servers skip read validation (the bank's checker must notice).
  bool unsafe_skip_read_validation = false;
  bool tpcc_read_only_hint = true;  // local run, tpcc: TpccOptions::read_only_hint on every shard
  // Local run: replicas per shard (1: none), leader included; followers are `shoal replica`
  // processes in regions region-1.. at wan_rtt_ms / 2 one way from the leaders' region.
  uint32_t replicas = 1;
  double wan_rtt_ms = 0;
  std::string fsync = "batch";  // every replica's WAL
  // Local run, one replica per shard: each server keeps a WAL all the same (`--fsync` given),
  // as `cluster up --fsync` does (SpawnOptions::lone_replica_log).
  bool lone_replica_log = false;
  int replica_nice = 10;       // followers' replay threads (they share this machine)
  int64_t replay_lag_ms = -1;  // local run: the config's ratekeeper bound (-1: its default)
  // Local run: the config's log batching (0: its defaults, 400 txns / 4000 us), and the
  // leaders' lead bound (`shoal server --lead-ms-max`; -1: the server's default).
  uint32_t batch_txns = 0;
  double batch_us = 0;
  int64_t lead_ms_max = -1;
  // Local run, tpcc: reader threads per follower running OrderStatus and StockLevel at its
  // snapshot (each shard's followers read that shard's warehouses); torn snapshots fail the
  // run. The planted bug (test only) reads the newest version instead.
  uint32_t follower_reads = 0;
  bool unsafe_follower_read_newest = false;
  std::string cpu_placement = "auto";  // local run: SpawnOptions::cpu_placement
  uint64_t memory_reserve_mb = 0;      // local run: SpawnOptions::memory_reserve_mb
  bool client_ports = false;           // local run: every replica gets a client_port (bench kv)
  // Local replicated run: SIGKILL a shard's leader at each of these times into the run
  // (increasing; empty: never), the shard kill_shard[i] (or kill_shard[0] for all; empty:
  // shard 0); its replicas elect a new leader through the configuration manager, the load goes
  // on there, and the report adds each kill's failover_ms, the per-second series and the
  // acknowledged NewOrders checked against the final state (failover_run.h,
  // make_kill_schedule).
  std::vector<double> kill_leader_at;
  std::vector<uint32_t> kill_shard;
  bool hang_leader = false;  // SIGSTOP instead of SIGKILL (KillPlan::hang)
  // Non-empty: the one kill_leader_at time SIGKILLs every process of this region instead
  // (KillPlan::region; check_region_kill).
  std::string kill_region;
  // Ctrl-C (src/base/interrupt.h). Set before the run starts: nothing is run, Aborted. Set
  // during the run: the controller tells every shard's leader to end its load (kStop), then
  // collects, checks and reports over the seconds measured.
  const std::atomic<bool>* stop = nullptr;
};

// The benchmark controller, run_dist_bench, is a driver: bench/dist_bench.h.

// TPC-C over every shard of a running cluster (no load may run): the consistency conditions,
// each shard's with the HISTORY payments the other shards hold for its customers (returned in
// *payments_out, per shard). The failures, each naming its shard; empty when all hold.
std::vector<std::string> check_tpcc_cluster(ControlClient& client,
                                            const cluster::ClusterConfig& config,
                                            std::vector<nlohmann::json>* payments_out);

// The acknowledged NewOrders journaled in `dir` (acks-*.bin) looked up in their home shards'
// stores. failures: shards that did not answer or lack orders ("" when none).
struct AckCheck {
  uint64_t checked = 0, missing = 0;
  std::string failures;
  std::string line() const;  // the report's line, "\n"-terminated
};
AckCheck check_acknowledged_orders(ControlClient& client, uint32_t shards, const std::string& dir);

}  // namespace shoal::server

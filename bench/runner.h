// The benchmark runner behind `shoal bench`: loads a Workload into an Engine, drives it from
// N worker threads for a fixed time, and reports throughput, latency, memory and consistency.
//
// Threads: run_benchmark() is called by one thread (the "main" thread), which loads, starts
// the workers, prints one live line per second, joins them and builds the report. Each worker
// thread owns its Worker, Client and histograms. The live line reads per-thread counters that
// the owning thread publishes with relaxed atomic stores (single writer, no locks, no RMW), so
// the data path never waits on the main thread.
//
// Counting: `committed` counts Ok and UserAbort outcomes (a deliberate rollback is completed
// business, as in TPC-C); user aborts are also reported separately. `conflict_aborts` are the
// Worker's retries (TxnStats::conflict_aborts), attributed to the type of the transaction that
// retried. `failed` counts outcomes that are neither (retries exhausted, other errors).
// Latency is per run_one() call, retries included, and only for committed outcomes.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shoal/status.h"
#include "src/repl/replica_proto.h"
#include "src/txn/engine.h"
#include "src/workload/workload.h"

namespace shoal {
class Histogram;  // src/base/histogram.h
}  // namespace shoal

namespace shoal::bench {

inline constexpr uint64_t kNsPerSec = 1'000'000'000;

struct RunOptions {
  double seconds = 10;      // measured duration; REQUIRES: > 0
  uint32_t workers = 1;     // REQUIRES: in [1, kMaxWorkers]
  double warmup_s = 0;      // run this long before measuring (results discarded); REQUIRES: >= 0
  std::string json_path;    // empty: no JSON file
  bool check = false;       // run Workload::check() after the run
  uint32_t warehouses = 1;  // passed to Workload::load (TPC-C scale)
  uint64_t seed = 1;
  // "auto": when the workers leave a core over, each worker is pinned to a core of its own
  // and every other thread of the run (the main thread, replication threads, follower
  // processes) is confined to the rest, for the run only (src/base/cpu_placement.h).
  // "none": the scheduler places everything.
  std::string cpu_placement = "auto";
  // Load progress and live lines; nullptr is silent. A tty gets a redrawn progress bar,
  // anything else periodic lines.
  std::FILE* progress = stderr;
  // The final table; nullptr prints nothing.
  std::FILE* report = stdout;
  // When it becomes true during the run (Ctrl-C: src/base/interrupt.h), the measurement ends
  // early and the run reports what it measured, checks and JSON included
  // (RunResult::interrupted). nullptr: the run always lasts `seconds`.
  const std::atomic<bool>* stop = nullptr;

  // Replication of the shard (issue 5). replicas > 1 starts replicas-1 follower processes
  // (`shoal replica`, children that die with this process) in regions region-1.., streams one
  // per worker, and reports commit latency (until the shard watermark covers a transaction)
  // beside the speculative latency. replicas == 1: no log, no followers (the baseline).
  uint32_t replicas = 1;
  double wan_rtt_ms = 0;        // every cross-region one-way delay is wan_rtt_ms / 2
  uint32_t batch_txns = 400;    // seal a log entry after this many transactions (Mako)
  double batch_us = 4000;       // ... or when its first transaction is this old
  uint64_t lead_ms_max = 10;    // the lead bound (repl::LeaderOptions::lead_ms_max; 0: none)
  std::string fsync = "batch";  // none, batch or always (every replica's WAL)
  // How the followers (all on this host) reach the leader: shm (the leader's send is one copy
  // into the follower's ring) or tcp (loopback, as between machines).
  std::string replica_transport = "shm";  // shm, tcp or fabric
  std::string replica_exe;        // the `shoal` binary for followers; empty: this executable
  std::string replica_dir;        // WALs and logs; empty: a fresh directory under $TMPDIR
  bool keep_replica_dir = false;  // keep it after a successful run
  // Nice level of the followers' replay threads: on a machine that hosts every replica (ours)
  // replay uses the CPU the leader's workers leave, as it would on machines of its own, while
  // the followers' network threads (acknowledgements) keep normal priority. It changes nothing
  // where followers have cores to themselves. 0: same priority as the leader.
  int replica_nice = 10;
  int64_t replay_lag_ms = -1;  // the ratekeeper's bound (LeaderOptions); -1: its default
  // Follower reads: each follower runs this many reader threads of read-only transactions at
  // its snapshot during the run (src/txn/snapshot.h); 0: none.
  uint32_t follower_reads = 0;
  bool unsafe_follower_read_newest = false;  // test-only planted bug (torn snapshots)
  // Followers checkpoint this often (`shoal replica --checkpoint-interval-ms`) and the leader
  // fetches their checkpoints and truncates its WAL behind them (LeaderOptions::
  // checkpoint_fetch_interval_ms). 0: neither; every WAL grows with the run.
  uint64_t checkpoint_interval_ms = 0;
  // MiB of memory this process faulted in at start-up for the allocator (`--memory-reserve-mb`,
  // src/base/memory_reserve.h; tools/shoal.cc reserves it before the load); each follower
  // reserves as much. Reported in the JSON. 0: none.
  uint64_t memory_reserve_mb = 0;
};

inline constexpr uint32_t kMaxWorkers = 1024;

struct LatencyUs {
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, mean = 0, max = 0;
};

// A histogram's percentiles, mean and max (recorded in ns), in microseconds.
LatencyUs summarize(const Histogram& h);
// {p50, p90, p99, p999, mean, max}: the JSON of every bench's latency fields.
nlohmann::json latency_json(const LatencyUs& l);

struct TypeResult {
  std::string name;
  uint64_t committed = 0;  // Ok + UserAbort
  uint64_t user_aborts = 0;
  uint64_t conflict_aborts = 0;
  uint64_t failed = 0;
  LatencyUs latency_us;
};

struct FollowerResult {
  uint32_t replica = 0;
  uint64_t digest = 0;
  bool digest_match = false;
  bool checked = false;
  std::vector<std::string> check_failures;
  uint64_t replay_txns = 0;
  uint64_t replay_writes = 0;
  double replay_cpu_s = 0;
  double replay_txns_per_cpu_sec = 0;  // replay throughput per core
  uint64_t wal_bytes = 0;
  repl::FollowerReadStats reads;  // threads == 0: no follower reads
};

struct ReplicationResult {
  bool enabled = false;
  uint32_t replicas = 1;
  double wan_rtt_ms = 0;
  uint32_t batch_txns = 0;
  double batch_us = 0;
  std::string fsync;
  std::string transport;  // followers' link: shm, tcp or fabric
  // The streams' counts from the end of the bootstrap on (the run and its close; the
  // bootstrap's own are bootstrap_records and bootstrap_s), here and in the waits below.
  uint64_t entries = 0, log_bytes = 0, logged_txns = 0, floor_entries = 0, buffer_waits = 0;
  uint64_t bootstrap_records = 0;
  // The leader's Paxos resends over the run: accepts unanswered for a retransmit period, and
  // chosen entries sent again by catch-up (paxos_learn) with their bytes.
  uint64_t retransmits = 0, catchup_entries = 0, catchup_bytes = 0;
  // Workers' time waiting for log ring space or the lead bound (summed over streams), and the
  // retained chosen slots the leader's stores let go of early for them (appender.h,
  // Backpressure); lead_waits: the waits the lead bound held (lead_bound.h); idle_seals: the
  // entries sealed because the worker had nothing more to run (appender.h, Group commit).
  uint64_t buffer_wait_ns = 0, retained_shed = 0, lead_waits = 0, idle_seals = 0;
  // Of buffer_wait_ns, the time the lead bound held the workers and the time their sealed
  // entries waited to be taken (appender.h, AppenderStats); the rest waited for ring space.
  uint64_t lead_hold_wait_ns = 0, backlog_wait_ns = 0;
  // Why proposals stopped (LeaderStats): drains held for a follower's acknowledgements
  // (lag_waits) or for the successor's replay (replay_lag_waits, the ratekeeper; its largest
  // lag seen, and how long it kept proposals stopped in all), and the times the lead
  // bound held a worker (lead_holds).
  uint64_t lag_waits = 0, replay_lag_waits = 0, replay_lag_ms_max = 0, lead_holds = 0;
  uint64_t replay_lag_stop_ms = 0;
  // How long the lead bound held in all, by what began each hold (LeaderStats).
  uint64_t lead_hold_unproposed_ns = 0, lead_hold_unchosen_ns = 0;
  // The ratekeeper's rate (LeaderStats; lead_bound.h RatekeeperRate): how long it paced the
  // workers and the transactions its rate admitted at most meanwhile, the successor's replay
  // speed it last measured; the workers' waits for that pace (AppenderStats).
  uint64_t pace_limited_ns = 0, pace_limited_txns = 0, pace_replay_per_s = 0;
  uint64_t pace_waits = 0, pace_wait_ns = 0;
  double bootstrap_s = 0;  // initial state through the log until every follower installed it
  double quiesce_s = 0;    // after the run until every follower applied everything
  uint64_t leader_digest = 0;
  uint64_t final_tid = 0;
  std::vector<FollowerResult> followers;
  // Bytes copied on the replication path (src/repl/copy_count.h): this process's (the
  // leader's) and the followers' summed, each since its process started (bootstrap included:
  // the same path), and what they make per replicated byte.
  repl::CopyCounts leader_copies, follower_copies;
  repl::CopiesPerByte copies_per_byte;
};

// One live line of the run: what the second ending at t_s (from the start, warmup included)
// committed, and its latencies. RunResult::series, the JSON's "series" (what
// scripts/plot-bench.py draws).
struct SecondSample {
  double t_s = 0;
  bool warmup = false;
  double committed_per_sec = 0;
  double aborts_per_sec = 0;
  double failed_per_sec = 0;
  double latency_p50_us = 0;  // speculative: run_one() calls that ended in the second
  double latency_p99_us = 0;
  // Replicated runs: transactions the shard watermark acknowledged in the second.
  double acked_per_sec = 0;
  double commit_latency_p50_us = 0;
  double commit_latency_p99_us = 0;
};

struct RunResult {
  std::string workload;
  uint32_t workers = 0;
  double seconds = 0;            // measured wall time
  double requested_seconds = 0;  // RunOptions::seconds
  bool interrupted = false;      // RunOptions::stop ended the measurement before its time
  double load_seconds = 0;
  uint64_t committed = 0;  // Ok + UserAbort, all types
  uint64_t user_aborts = 0;
  uint64_t conflict_aborts = 0;
  uint64_t failed = 0;
  double committed_per_sec = 0;
  double aborts_per_sec = 0;    // conflict aborts per second
  LatencyUs latency_us;         // all types: speculative (visible, not yet replicated)
  LatencyUs commit_latency_us;  // until the shard watermark covers it (replication only)
  std::vector<TypeResult> per_type;
  uint64_t rss_bytes = 0;  // resident set right after load
  uint64_t peak_rss_bytes = 0;
  uint64_t memory_reserve_mb = 0;  // RunOptions::memory_reserve_mb (in rss_bytes from the start)
  std::string cpu_placement;       // CpuPlacement::describe() of the run, or "none"
  bool checked = false;
  std::vector<std::string> check_failures;  // empty when consistent (or not checked)
  ReplicationResult replication;            // followers' digests and checks fail the check
  std::vector<SecondSample> series;         // one per live line (RunOptions::progress or not)

  bool consistent() const { return check_failures.empty(); }
  // The JSON document written to RunOptions::json_path (see the field list in runner.cc).
  nlohmann::json to_json() const;
  // The human-readable final report.
  std::string to_table() const;
};

// Loads `workload` into `engine` and runs it. Errors: InvalidArgument for bad options,
// the load's Status, IOError if the JSON file cannot be written (checked before loading).
// A failed consistency check is not an error: see RunResult::consistent().
// REQUIRES: `engine` is fresh (no tables); no other thread uses it during the call.
Result<RunResult> run_benchmark(workload::Workload& workload, txn::Engine& engine,
                                const RunOptions& options);

}  // namespace shoal::bench

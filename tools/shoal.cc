// The `shoal` command. Subcommands:
//   shoal bench tpcc|micro|ycsb [options]   load a workload into an in-process engine and run it
//   shoal bench transport [options]         RPC latency/throughput per transport beside raw
//                                           baselines (bench/transport/transport.h)
//   shoal bench micro --shards N | --cluster FILE [--cross-shard-pct P ...]
//                                           the microbenchmark across shard server processes
//   shoal bench bank --shards N | --cluster FILE [--cross-shard-pct P ...]
//                                           transfers across shard processes, the recorded
//                                           history checked for serializability
//   shoal bench kv --shards N | --cluster FILE [--workload a|b|c|f --connections N ...]
//                                           YCSB through the client library over the network
//                                           (bench/bench_kv.h)
//   shoal server --config FILE --shard N    one shard server (src/server/shard_server.h)
//   shoal replica --config FILE --shard N --replica R
//                                           one follower replica (src/server/replica_cli.h)
//   shoal cluster up|status|down|check|digest --config FILE
//                                           manage a cluster of shard servers and replicas
//                                           (src/server/cluster_ctl.h)
//   shoal kv get|put|del|scan --cluster FILE [--password-file F] ...
//                                           one key-value transaction through the client
//                                           library (include/shoal/client.h, docs/CLIENT.md)
//
// Exit codes: 0 success; 2 bad command line; 1 the run failed (load error, unwritable JSON;
// `kv get` of a missing key, which prints nothing);
// 3 --check found a consistency failure; 130 a bench interrupted by Ctrl-C (reported if it was
// the first, src/base/interrupt.h; 1 and 3 outrank it).
//
// Threads: main() parses on the main thread; the benchmark runner starts its own workers.
#include <mimalloc.h>

#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench/bench_kv.h"
#include "bench/dist_bench.h"
#include "bench/runner.h"
#include "bench/transport/transport.h"
#include "shoal/client.h"
#include "src/base/cpu_placement.h"
#include "src/base/interrupt.h"
#include "src/base/memory_reserve.h"
#include "src/cluster/config.h"
#include "src/server/cluster_ctl.h"
#include "src/server/cluster_top.h"
#include "src/server/failover_run.h"
#include "src/server/replica_cli.h"
#include "src/server/shard_server.h"
#include "src/txn/engine.h"
#include "src/workload/micro/micro.h"
#include "src/workload/tpcc/tpcc.h"
#include "src/workload/ycsb/ycsb.h"

namespace shoal {
namespace {

constexpr int kExitRunFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInconsistent = 3;

struct BenchFlags {
  bench::RunOptions run;
  uint32_t warehouses = 1;
  workload::MicroOptions micro;
  workload::YcsbOptions ycsb;
  std::string ycsb_workload = "A";
  std::string transport = "all";  // shm, tcp, uring, fabric or all
  int transport_iterations = bench::transport::Options{}.iterations;
  std::string unknown_workload;  // a bench positional that matched no workload subcommand
  // `bench micro` / `bench tpcc` across shard processes (--shards or --cluster).
  server::DistBenchOptions dist;
  server::DistBenchOptions tpcc_dist;
  server::DistBenchOptions bank_dist;  // `bench bank` (always across shard processes)
  server::KvBenchOptions kv;           // `bench kv` (through the client library)
  std::string kv_workload = "a";
  std::string kv_distribution = "zipfian";
  bool tpcc_read_only_hint = true;  // `bench tpcc --no-read-only-hint`: false
};

struct ServerCommands {
  CLI::App* server = nullptr;
  CLI::App* cluster = nullptr;
  CLI::App* up = nullptr;
  CLI::App* status = nullptr;
  CLI::App* down = nullptr;
  CLI::App* check = nullptr;
  CLI::App* digest = nullptr;
  CLI::App* top = nullptr;
  server::ServerOptions server_options;
  uint64_t recover_epoch = 0;      // `server --recover-epoch E`: restart from the data dir
  uint32_t recover_replica = 0;    // `server --replica R`: which replica restarts as the leader
  uint64_t memory_reserve_mb = 0;  // `server --memory-reserve-mb`
  server::ClusterOptions cluster_options;
  server::TopOptions top_options;
};

struct BenchCommands {
  CLI::App* bench = nullptr;
  CLI::App* tpcc = nullptr;
  CLI::App* micro = nullptr;
  CLI::App* bank = nullptr;
  CLI::App* ycsb = nullptr;
  CLI::App* transport = nullptr;
  CLI::App* kv = nullptr;
};

// A validator with a plain message: "--workers: must be in [1, 1024], not 0". CLI11's own
// Range prints the type's full limits (e.g. 1.8e308 digits for doubles) and cannot say
// "not a number".
template <typename T>
CLI::Validator number_in(T lo, T hi, bool lo_open, std::string range_text) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        T value{};
        // CLI11's unsigned conversion would wrap "-5" around to a huge value.
        const bool negative_unsigned = std::is_unsigned_v<T> && !input.empty() && input[0] == '-';
        if (negative_unsigned || !CLI::detail::lexical_cast(input, value)) {
          if (negative_unsigned && input.size() > 1) {
            return fmt::format("must be {}, not {}", range_text, input);
          }
          return fmt::format("'{}' is not a {}", input,
                             std::is_integral_v<T> ? "whole number" : "number");
        }
        const bool below = lo_open ? !(value > lo) : !(value >= lo);
        if (below || !(value <= hi)) return fmt::format("must be {}, not {}", range_text, input);
        return std::string();
      },
      range_text);
}

// A list of cpus like 0-3,6 (src/base/cpu_placement.h): "--cpus: cpu list '3-1': a range runs
// downwards (a cpu list is like 0-3,6)".
CLI::Validator cpu_list() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        auto cpus = parse_cpu_list(input, "cpu list");
        return cpus.ok() ? std::string() : cpus.status().message();
      },
      "LIST");
}

// What Ctrl-C does to a bench (tpcc, micro, ycsb, bank; not transport), in `bench --help`.
constexpr const char* kBenchInterruptHelp =
    "Ctrl-C: the first ends the measurement early and reports what was measured (throughput over "
    "the\nmeasured seconds, --check and --json as usual), then exits 130 (or 1 / 3 if the run "
    "failed /\nthe check failed); the second quits at once with 130, no report, the processes "
    "the bench\nstarted stopped with it. Across shard processes (--shards, --cluster) the first "
    "Ctrl-C tells\nevery shard's leader to end its load, then collects, checks and reports.";

// The first SIGINT's line on stderr (the handler cannot format).
constexpr const char* kBenchInterruptMessage =
    "\nshoal: interrupted: ending the run, the report follows (Ctrl-C again to quit at once)\n";

// `bench transport`: its own --transport and --iterations; --seconds (pipelined time per
// transport and size; default 1 s here, not the workloads' 10 s) and --json come from `bench`.
void add_transport_command(BenchCommands& c, BenchFlags& f) {
  c.transport = c.bench->add_subcommand(
      "transport",
      "RPC ping-pong latency and pipelined throughput (64 B, 64 KiB, 1 MiB) per transport, "
      "each beside a raw baseline measured in the same run");
  c.transport
      ->add_option("--transport", f.transport,
                   "Transport to measure: shm, tcp, uring, fabric or all")
      ->check(CLI::IsMember({"shm", "tcp", "uring", "fabric", "all"}))
      ->capture_default_str();
  c.transport
      ->add_option("--iterations", f.transport_iterations,
                   "64 B ping-pong round trips (64 KiB: 1/8 of them, 1 MiB: 1/64)")
      ->check(number_in(bench::transport::kMinIterations, bench::transport::kMaxIterations, false,
                        fmt::format("in [{}, {}]", bench::transport::kMinIterations,
                                    bench::transport::kMaxIterations)))
      ->capture_default_str();
  c.transport->footer(
      "Also (bench options): --seconds S  pipelined run per transport and size (default 1 here)\n"
      "                      --json PATH  results as JSON (rpc.p50_us, raw.p50_us, "
      "pipelined.rpcs_per_sec_per_core, ...)");
}

// `bench micro` across shard processes: any of these but --keys selects the distributed run.
void add_dist_micro_options(CLI::App* micro, server::DistBenchOptions& d) {
  micro->add_option("--shards", d.shards, "Start a local cluster of N shard servers for the run")
      ->check(number_in(1u, 64u, false, "in [1, 64]"));
  micro->add_option("--cluster", d.cluster_path, "Run against the running cluster in this config");
  micro
      ->add_option("--cross-shard-pct", d.cross_shard_pct,
                   "Percent of transactions touching a second shard (needs --shards/--cluster)")
      ->check(number_in(0u, 100u, false, "in [0, 100]"))
      ->capture_default_str();
  micro->add_option("--inflight", d.inflight, "Transactions in flight per worker (coroutines)")
      ->check(number_in(1u, 1024u, false, "in [1, 1024]"))
      ->capture_default_str();
  micro
      ->add_option("--transport", d.transport,
                   "Between the local shard servers: shm, tcp or fabric (libfabric; "
                   "provider: SHOAL_FABRIC_PROVIDER, default net)")
      ->check(CLI::IsMember({"shm", "tcp", "fabric"}))
      ->capture_default_str();
  micro->add_option("--keys-per-shard", d.keys_per_partition, "Keys per shard (local cluster)")
      ->check(number_in(uint64_t{4}, uint64_t{1'000'000'000}, false, "in [4, 1e9]"))
      ->capture_default_str();
}

constexpr const char* kKillRegionHelp =
    "With one --kill-leader-at time: SIGKILL every process of this region then (each shard's "
    "replica there, leader or follower; a local run's regions are region-0, which holds every "
    "leader, region-1, ...); every shard whose leader died elects one in another region and "
    "goes on, and the region's replicas restart once all serve. Refused when the region holds "
    "half or more of some shard's replicas";

// `bench bank`: only across shard processes (--shards or --cluster); its history is checked.
void add_dist_bank_options(CLI::App* bank, server::DistBenchOptions& d) {
  bank->add_option("--shards", d.shards, "Start a local cluster of N shard servers for the run")
      ->check(number_in(1u, 64u, false, "in [1, 64]"));
  bank->add_option("--cluster", d.cluster_path,
                   "Run against the running cluster in this config (started --workload bank)");
  bank->add_option("--cross-shard-pct", d.cross_shard_pct,
                   "Percent of transactions touching a second shard")
      ->check(number_in(0u, 100u, false, "in [0, 100]"))
      ->capture_default_str();
  bank->add_option("--inflight", d.inflight, "Transactions in flight per worker (coroutines)")
      ->check(number_in(1u, 1024u, false, "in [1, 1024]"))
      ->capture_default_str();
  bank->add_option("--transport", d.transport,
                   "Between the local shard servers and from their followers: shm, tcp "
                   "or fabric (libfabric; provider: SHOAL_FABRIC_PROVIDER, default net)")
      ->check(CLI::IsMember({"shm", "tcp", "fabric"}))
      ->capture_default_str();
  bank->add_option("--replicas", d.replicas,
                   "Replicas of each shard, leader included (1: no replication; a local run)")
      ->check(number_in(1u, 16u, false, "in [1, 16]"))
      ->capture_default_str();
  bank->add_option("--kill-leader-at", d.kill_leader_at,
                   "Local replicated run: SIGKILL a shard's leader this many seconds in (a "
                   "list, T1,T2,...: one kill each, one after the other); its replicas elect a "
                   "new one, the other shards redial it and the run goes on")
      ->delimiter(',')
      ->check(number_in(0.0, 1e6, true, "> 0"));
  bank->add_option("--kill-shard", d.kill_shard,
                   "The shard whose leader --kill-leader-at kills (a list: one per time; one "
                   "shard: every kill; default 0)")
      ->delimiter(',')
      ->check(number_in(0u, 63u, false, "in [0, 63]"));
  bank->add_option("--kill-region", d.kill_region, kKillRegionHelp);
  bank->add_option("--accounts-per-shard", d.keys_per_partition,
                   "Accounts per shard (local cluster; few: contended)")
      ->check(number_in(uint64_t{4}, uint64_t{100'000'000}, false, "in [4, 1e8]"))
      ->capture_default_str();
  // Test only (hidden): the servers skip read validation; the check must catch it.
  bank->add_flag("--unsafe-skip-read-validation", d.unsafe_skip_read_validation)->group("");
}

// `bench tpcc` across shard processes: --shards N >= 2 or --cluster selects the distributed run.
void add_dist_tpcc_options(CLI::App* tpcc, server::DistBenchOptions& d) {
  tpcc->add_option("--shards", d.shards,
                   "Start a local cluster of N shard servers, warehouses split among them "
                   "(1: in-process)")
      ->check(number_in(1u, 64u, false, "in [1, 64]"));
  tpcc->add_option("--cluster", d.cluster_path,
                   "Run against the running cluster in this config (started --workload tpcc)");
  tpcc->add_option("--kill-leader-at", d.kill_leader_at,
                   "Local replicated run: SIGKILL a shard's leader this many seconds in (a "
                   "list, T1,T2,...: one kill each, one after the other); its replicas elect a "
                   "new one and the run goes on (failover_ms, acknowledged_lost in the report). "
                   "Runs shard servers even with --shards 1")
      ->delimiter(',')
      ->check(number_in(0.0, 1e6, true, "> 0"));
  tpcc->add_flag("--hang-leader", d.hang_leader,
                 "With --kill-leader-at: SIGSTOP the leader instead (its connections stay open: "
                 "the followers' heartbeat timeout detects it); resumed once replaced, it must "
                 "exit deposed (status 4)");
  tpcc->add_option("--kill-shard", d.kill_shard,
                   "The shard whose leader --kill-leader-at kills (a list: one per time; one "
                   "shard: every kill; default 0)")
      ->delimiter(',')
      ->check(number_in(0u, 63u, false, "in [0, 63]"));
  tpcc->add_option("--kill-region", d.kill_region, kKillRegionHelp);
  tpcc->add_option("--inflight", d.inflight,
                   "Terminals per worker across shards (coroutines; default 8)")
      ->check(number_in(1u, 1024u, false, "in [1, 1024]"));
  tpcc->add_option("--transport", d.transport,
                   "Between the local shard servers and from their followers: shm, tcp "
                   "or fabric (libfabric; provider: SHOAL_FABRIC_PROVIDER, default net)")
      ->check(CLI::IsMember({"shm", "tcp", "fabric"}))
      ->capture_default_str();
  tpcc->add_flag("--baseline", d.baseline,
                 "First run single-shard TPC-C in-process (1 warehouse, 1 worker, same seconds) "
                 "and report each worker's throughput against it");
}

// The single-shard, single-worker TPC-C figure that --baseline compares a cluster run with,
// measured here, before the servers start, on the same machine. 0 when it fails (reported).
double measure_tpcc_baseline(const BenchFlags& f) {
  workload::TpccOptions options;
  options.warehouses = 1;
  options.read_only_hint = f.tpcc_read_only_hint;
  auto workload = make_tpcc_workload(options);
  txn::Engine engine;
  bench::RunOptions ro;
  ro.seconds = f.run.seconds;
  ro.workers = 1;
  ro.warehouses = 1;
  ro.seed = f.run.seed;
  ro.progress = nullptr;
  ro.report = nullptr;
  fmt::print(stderr, "baseline: single-shard TPC-C, 1 warehouse, 1 worker, {:.1f} s...\n",
             f.run.seconds);
  Result<bench::RunResult> r = bench::run_benchmark(*workload, engine, ro);
  if (!r.ok()) {
    fmt::print(stderr, "baseline failed: {}\n", r.status().to_string());
    return 0;
  }
  return r->committed_per_sec;
}

// Follower reads (src/txn/snapshot.h): a reader-thread count, and a hidden test-only flag
// that plants the "read the newest version" bug (torn snapshots).
void add_follower_read_options(CLI::App* app, const char* count_flag, uint32_t& count,
                               const char* help, const char* unsafe_flag, bool& unsafe) {
  app->add_option(count_flag, count, help)
      ->check(number_in(0u, 16u, false, "in [0, 16]"))
      ->capture_default_str();
  app->add_flag(unsafe_flag, unsafe)->group("");
}

// `--memory-reserve-mb` (src/base/memory_reserve.h): the command reserves it before it loads
// anything; `what` says whose memory it is.
void add_memory_reserve_option(CLI::App* app, uint64_t& mb, const std::string& what) {
  app->add_option(
         "--memory-reserve-mb", mb,
         "Fault in this much memory (whole 64 MiB units) at start-up, before any load, for "
         "the allocator to hand out (fresh memory is dear on first touch, on a VM most "
         "of all; 0: none)" +
             what)
      ->check(number_in(uint64_t{0}, uint64_t{1} << 20, false, "in [0, 1048576]"))
      ->capture_default_str();
}

// Followers' checkpoints (src/repl/checkpoint.h) and the WAL truncation they allow.
void add_checkpoint_option(CLI::App* app, uint64_t& interval_ms) {
  app->add_option("--checkpoint-interval-ms", interval_ms,
                  "Followers write a checkpoint of their replayed store this often and delete "
                  "the WAL it covers (`cluster up --fsync P` on one replica per shard: each "
                  "replica compacts its WAL so; 0: never)")
      ->check(number_in(uint64_t{0}, uint64_t{86'400'000}, false, "in [0, 86400000]"))
      ->capture_default_str();
}

// Log batching flags (cluster::ClusterConfig::batch_txns, batch_us; the same bounds). `what`
// ends the help text: the default, or where it comes from.
void add_batch_options(CLI::App* app, uint32_t& txns, double& us, const std::string& what) {
  app->add_option("--batch-txns", txns, "Seal a log entry after N transactions" + what)
      ->check(number_in(1u, cluster::kBatchTxnsMax, false, "in [1, 65535]"));
  app->add_option("--batch-us", us, "... or when its first transaction is T us old" + what)
      ->check(number_in(0.0, cluster::kBatchUsMax, true, "in (0, 1e7]"));
}

// The lead bound (repl::LeaderOptions::lead_ms_max, src/repl/lead_bound.h). `what` ends the
// help text: the default, or where it comes from.
template <typename T>
void add_lead_option(CLI::App* app, T& ms, const std::string& what) {
  app->add_option("--lead-ms-max", ms,
                  "Lead bound: a stream's worker opens no new log batch while its oldest entry "
                  "has waited this long unproposed, or this long past the majority's round trip "
                  "unchosen (0: unbounded" +
                      what + ")")
      ->check(number_in(T{0}, T{600'000}, false, "in [0, 600000]"));
}

// `bench tpcc` replication: of the in-process shard (followers as child processes), or with
// --shards N of every shard server (followers started beside them; repl_ctl.h).
void add_replication_options(CLI::App* tpcc, bench::RunOptions& r) {
  tpcc->add_option("--replicas", r.replicas,
                   "Replicas of each shard, leader included (1: no replication)")
      ->check(number_in(1u, 16u, false, "in [1, 16]"))
      ->capture_default_str();
  tpcc->add_option("--wan-rtt-ms", r.wan_rtt_ms,
                   "WAN round trip between regions (each one-way delay is half), needs --replicas")
      ->check(number_in(0.0, 10'000.0, false, "in [0, 10000]"))
      ->capture_default_str();
  add_batch_options(tpcc, r.batch_txns, r.batch_us,
                    fmt::format(" (defaults {} txns / {} us; with --shards: every shard server's)",
                                r.batch_txns, r.batch_us));
  add_lead_option(tpcc, r.lead_ms_max,
                  fmt::format("; default {}; with --shards: every shard server's", r.lead_ms_max));
  tpcc->add_option("--replay-lag-ms", r.replay_lag_ms,
                   "Ratekeeper: leaders stop proposing while a follower's replay trails by more "
                   "than this (bounds the failover's replay backlog; 0: unbounded; default 100)")
      ->check(number_in(int64_t{0}, static_cast<int64_t>(cluster::kReplayLagMsMax), false,
                        "in [0, 600000]"));
  tpcc->add_option("--fsync", r.fsync, "WAL sync policy on every replica")
      ->check(CLI::IsMember({"none", "batch", "always"}))
      ->capture_default_str();
  tpcc->add_option("--replica-nice", r.replica_nice,
                   "Nice level of the followers' replay threads (they share this machine)")
      ->check(number_in(0, 19, false, "in [0, 19]"))
      ->capture_default_str();
  tpcc->add_option("--checkpoint-interval-ms", r.checkpoint_interval_ms,
                   "One shard with --replicas: followers write a checkpoint this often and the "
                   "leader fetches it and deletes the WAL every replica can do without, so "
                   "every WAL stays bounded (0: never)")
      ->check(number_in(uint64_t{0}, uint64_t{86'400'000}, false, "in [0, 86400000]"))
      ->capture_default_str();
  add_follower_read_options(tpcc, "--follower-reads", r.follower_reads,
                            "Reader threads per follower running OrderStatus and StockLevel at "
                            "its snapshot during the run, checked for torn snapshots; needs "
                            "--replicas",
                            "--unsafe-follower-read-newest", r.unsafe_follower_read_newest);
}

// What a shard server serves; also on `shoal replica`, which serves it once promoted.
void add_served_options(CLI::App* c, server::ServerOptions& so, const std::string& when) {
  c->add_option("--workers", so.workers, "Worker threads (default: the config's)" + when)
      ->check(number_in(1u, 64u, false, "in [1, 64]"));
  c->add_option("--keys-per-partition", so.keys_per_partition,
                "Micro keys per config partition" + when)
      ->check(number_in(uint64_t{1}, uint64_t{1'000'000'000}, false, "in [1, 1e9]"))
      ->capture_default_str();
  c->add_option("--workload", so.workload, "What to load and run: micro, tpcc or bank" + when)
      ->check(CLI::IsMember({"micro", "tpcc", "bank"}))
      ->capture_default_str();
  c->add_option("--ack-journal", so.ack_journal_dir,
                "TPC-C: append every acknowledged NewOrder's key to a file per worker in this "
                "directory (the benchmark's acknowledged-lost check)");
  c->add_option("--metrics-port", so.metrics_port,
                "Serve GET /metrics (Prometheus text) on this port of the replica's configured "
                "host (default: the config's metrics_port; none without one)")
      ->check(number_in(1u, 65535u, false, "in [1, 65535]"));
  c->add_option("--resp-port", so.resp_port,
                "Serve the Redis protocol on this port of the replica's configured host (0: a "
                "free port, printed; default: the config's resp_port; none without one)")
      ->check(number_in(0, 65535, false, "in [0, 65535]"));
  c->add_flag("--resp-reply-at-speculative-commit", so.resp_reply_at_speculative_commit,
              "Answer a Redis write at its speculative commit instead of once it is durable "
              "(replicated on a majority of every shard it touched)");
  c->add_option("--resp-max-connections", so.resp_max_connections,
                "Redis-protocol clients at once (beyond: \"-ERR max number of clients "
                "reached\")")
      ->check(number_in(1u, 100000u, false, "in [1, 100000]"))
      ->capture_default_str();
  c->add_option("--client-port", so.client_port,
                "Serve the Shoal client protocol (docs/CLIENT.md) on this port of the replica's "
                "configured host (0: a free port, printed; default: the config's client_port; "
                "none without one)")
      ->check(number_in(0, 65535, false, "in [0, 65535]"));
  c->add_option("--client-max-connections", so.client_max_connections,
                "Client-protocol clients at once (beyond: an error frame and close)")
      ->check(number_in(1u, 100000u, false, "in [1, 100000]"))
      ->capture_default_str();
  c->add_option("--etcd", so.etcd,
                "The configuration manager: etcd client endpoints (host:port, comma-separated); "
                "replicas agree on a failed leader's replacement through it")
      ->delimiter(',');
}

// `shoal replica`: one follower replica (src/server/replica_cli.h).
CLI::App* add_replica_command(CLI::App& app, server::ReplicaOptions& o) {
  CLI::App* c = app.add_subcommand("replica",
                                   "Run one follower replica of a shard (until its "
                                   "leader closes the connection)");
  c->add_option("--config", o.config_path, "Cluster config (TOML)")->required();
  c->add_option("--shard", o.shard, "Shard id")
      ->check(number_in(0u, 65535u, false, "in [0, 65535]"));
  c->add_option("--replica", o.replica,
                "Replica id (not the leader's: 0 at first, the configuration manager's after a "
                "failover)")
      ->required()
      ->check(number_in(0u, 15u, false, "in [0, 15]"));
  c->add_option("--data-dir", o.data_dir,
                "WAL directory (default .shoal/<name>/shard-N-replica-R)");
  c->add_option("--fsync", o.fsync, "WAL sync policy")
      ->check(CLI::IsMember({"none", "batch", "always"}))
      ->capture_default_str();
  c->add_option("--connect-timeout-ms", o.connect_timeout_ms,
                "How long to keep dialing the leader (it listens once its load is done)")
      ->capture_default_str();
  c->add_option("--replay-nice", o.replay_nice, "Nice level of the replay thread")
      ->check(number_in(0, 19, false, "in [0, 19]"))
      ->capture_default_str();
  add_checkpoint_option(c, o.checkpoint_interval_ms);
  c->add_option("--cpus", o.cpus,
                "Run every thread on these cpus (a list like 0-3,6; `cluster up` plans it)")
      ->check(cpu_list());
  add_follower_read_options(c, "--serve-reads", o.serve_reads,
                            "Reader threads running read-only transactions (TPC-C OrderStatus, "
                            "StockLevel) at the follower's snapshot while it replays",
                            "--unsafe-snapshot-read-newest", o.unsafe_snapshot_read_newest);
  add_served_options(c, o.server, " (once promoted to leader)");
  c->add_option("--worker-cpus", o.server.worker_cpus,
                "Once promoted to leader: pin worker i to the i-th of these cpus (with --cpus "
                "for every other thread)")
      ->check(cpu_list());
  add_batch_options(c, o.server.batch_txns, o.server.batch_us, " (once promoted to leader)");
  add_lead_option(c, o.server.lead_ms_max, "; once promoted to leader; default 10");
  return c;
}

// `bench kv`: YCSB through the client library against a local cluster (--shards, --replicas)
// or a running one (--cluster); bench's --workers is the local servers' workers per shard.
void add_kv_bench_command(BenchCommands& c, BenchFlags& f) {
  server::KvBenchOptions& k = f.kv;
  server::DistBenchOptions& d = k.local;
  c.kv = c.bench->add_subcommand(
      "kv",
      "YCSB A, B, C, F through the client library over the network, against a local cluster "
      "(--shards, --replicas) or a running one (--cluster)");
  c.kv->add_option("--workload", f.kv_workload,
                   "a: 50% read/50% update, b: 95/5, c: read only, f: 50% read/50% "
                   "read-modify-write")
      ->check(CLI::IsMember({"a", "b", "c", "f"}, CLI::ignore_case))
      ->capture_default_str();
  c.kv->add_option("--connections", k.connections,
                   "Client connections, a thread each (a Client is blocking)")
      ->check(number_in(1u, server::kKvBenchConnectionsMax, false,
                        fmt::format("in [1, {}]", server::kKvBenchConnectionsMax)))
      ->capture_default_str();
  c.kv->add_option("--keys", k.keys, "Records, loaded through the client before the run")
      ->check(number_in(uint64_t{2}, uint64_t{1'000'000'000}, false, "in [2, 1e9]"))
      ->capture_default_str();
  c.kv->add_option("--value-bytes", k.value_bytes, "Bytes per value")
      ->check(number_in(0u, 1u << 20, false, "in [0, 1048576]"))
      ->capture_default_str();
  c.kv->add_option("--distribution", f.kv_distribution, "Key choice: zipfian or uniform")
      ->check(CLI::IsMember({"zipfian", "uniform"}))
      ->capture_default_str();
  c.kv->add_option("--theta", k.theta, "Zipfian skew in [0, 1)")
      ->check(number_in(0.0, 0.999999, false, "in [0, 1)"))
      ->capture_default_str();
  c.kv->add_flag("--speculative", k.speculative,
                 "Return at the commit point instead of once durable on a majority");
  c.kv->add_option("--check-seconds", k.check_seconds,
                   "With --check: seconds of bank transfers whose client-side history is checked")
      ->check(number_in(0.0, 600.0, true, "in (0, 600]"))
      ->capture_default_str();
  c.kv->add_option("--shards", d.shards, "Start a local cluster of N shard servers")
      ->check(number_in(1u, 64u, false, "in [1, 64]"))
      ->capture_default_str();
  c.kv->add_option("--replicas", d.replicas,
                   "Replicas of each shard of the local cluster, leader included")
      ->check(number_in(1u, 16u, false, "in [1, 16]"))
      ->capture_default_str();
  c.kv->add_option("--fsync", d.fsync, "Local replicated cluster: every replica's WAL sync policy")
      ->check(CLI::IsMember({"none", "batch", "always"}))
      ->capture_default_str();
  add_batch_options(c.kv, d.batch_txns, d.batch_us,
                    " (the local cluster's leaders; default: 400 txns / 4000 us)");
  c.kv->add_option("--cluster", k.cluster_path,
                   "Run against the running cluster in this config (its client ports)");
  // Test only (hidden): the local servers skip read validation; --check must catch it.
  c.kv->add_flag("--unsafe-skip-read-validation", d.unsafe_skip_read_validation)->group("");
}

// `bench --memory-reserve-mb` against a running cluster (`--cluster`): refused, said on stderr;
// the reserves are its servers'.
bool reserve_given_with_cluster(const BenchCommands& c, bool remote) {
  if (!remote || c.bench->count("--memory-reserve-mb") == 0) return false;
  fmt::print(stderr,
             "shoal: error: --memory-reserve-mb: with --cluster the running servers' reserves "
             "apply (shoal cluster up --memory-reserve-mb)\n");
  return true;
}

int run_kv_bench_command(const BenchCommands& c, BenchFlags& f) {
  server::KvBenchOptions& k = f.kv;
  const bool remote = c.kv->count("--cluster") > 0;
  for (const char* flag : {"--shards", "--replicas", "--fsync", "--batch-txns", "--batch-us"}) {
    if (remote && c.kv->count(flag) > 0) {
      fmt::print(stderr, "shoal: error: {}: with --cluster the running cluster's apply\n", flag);
      return kExitUsage;
    }
  }
  for (const char* flag : {"--workers", "--cpu-placement"}) {
    if (remote && c.bench->count(flag) > 0) {
      fmt::print(stderr, "shoal: error: {}: with --cluster the running cluster's apply\n", flag);
      return kExitUsage;
    }
  }
  if (c.bench->count("--warmup") > 0) {
    fmt::print(stderr, "shoal: error: --warmup does not apply to bench kv\n");
    return kExitUsage;
  }
  if (reserve_given_with_cluster(c, remote)) return kExitUsage;
  k.local.memory_reserve_mb = f.run.memory_reserve_mb;  // the local servers', not this client's
  k.local.lone_replica_log = k.local.replicas == 1 && c.kv->count("--fsync") > 0;
  k.workload = static_cast<char>(std::toupper(static_cast<unsigned char>(f.kv_workload.at(0))));
  k.zipfian = f.kv_distribution == "zipfian";
  k.seconds = f.run.seconds;
  k.check = f.run.check;
  k.seed = f.run.seed;
  k.json_path = f.run.json_path;
  k.local.workers = f.run.workers;
  k.local.cpu_placement = f.run.cpu_placement;
  k.stop = &interrupt_flag();
  const Status s = server::run_kv_bench(k);
  if (s.ok()) return interrupt_flag().load() ? kExitInterrupted : 0;
  fmt::print(stderr, "shoal: error: {}\n", s.to_string());
  if (s.code() == Code::kCorruption) return kExitInconsistent;
  if (interrupt_flag().load()) return kExitInterrupted;
  return s.code() == Code::kInvalidArgument ? kExitUsage : kExitRunFailed;
}

// Options shared by every workload live on `bench`; the workload subcommands fall through to
// them, so `shoal bench micro --seconds 5` and `shoal bench --seconds 5 micro` both work.
BenchCommands add_bench_command(CLI::App& app, BenchFlags& f) {
  BenchCommands c;
  c.bench = app.add_subcommand("bench", "Load a workload into an in-process engine and run it");
  // Not require_subcommand(): its error ("A subcommand is required") would also be the answer
  // to a misspelt workload. A word that is no workload lands in this positional instead, and
  // so does the value after an unknown flag (`bench tpcc --foo 3`). It is judged after the
  // parse (bench_positional_error), not by a validator here: CLI11 runs validators before it
  // reports unknown flags, and "3 is no workload" would hide the real mistake, --foo.
  c.bench->add_option("workload", f.unknown_workload, "tpcc, micro, ycsb, bank, kv or transport");
  c.bench->add_option("--workers", f.run.workers, "Worker threads")
      ->check(
          number_in(1u, bench::kMaxWorkers, false, fmt::format("in [1, {}]", bench::kMaxWorkers)))
      ->capture_default_str();
  c.bench->add_option("--seconds", f.run.seconds, "Measured run time in seconds (> 0)")
      ->check(number_in(0.0, 1e7, true, "> 0 (and at most 1e7)"))
      ->capture_default_str();
  c.bench->add_option("--warmup", f.run.warmup_s, "Seconds to run before measuring (>= 0)")
      ->check(number_in(0.0, 1e7, false, "in [0, 1e7]"))
      ->capture_default_str();
  c.bench->add_flag("--check", f.run.check,
                    "Check the workload's consistency conditions after the run "
                    "(exit 3 if one fails)");
  c.bench->add_option("--json", f.run.json_path, "Write the results as JSON to this file");
  c.bench->add_option("--seed", f.run.seed, "Seed for data and transaction inputs")
      ->check(number_in(uint64_t{0}, ~uint64_t{0}, false, "a whole number >= 0"))
      ->capture_default_str();
  c.bench
      ->add_option("--cpu-placement", f.run.cpu_placement,
                   "auto: pin each worker to a core of its own and keep every other thread "
                   "(followers included) on the cores left over, when there are any; none: "
                   "leave it to the scheduler")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();

  add_memory_reserve_option(c.bench, f.run.memory_reserve_mb,
                            "; each follower or shard server the run starts reserves as much");
  c.bench->footer(kBenchInterruptHelp);

  c.tpcc = c.bench->add_subcommand("tpcc", "TPC-C: the 5-transaction mix over W warehouses");
  c.tpcc->add_flag("--no-read-only-hint{false}", f.tpcc_read_only_hint,
                   "Keep ITEM and the customer-name index ordinary tables: their reads are "
                   "validated like any other (TPC-C as specified; the default marks them "
                   "read-only, docs/RESULTS.md)");
  c.tpcc
      ->add_option("--warehouses", f.warehouses,
                   "Number of warehouses (>= 1; with --shards N, N unless given)")
      ->check(number_in(1u, 100'000u, false, "in [1, 100000]"))
      ->capture_default_str();
  add_dist_tpcc_options(c.tpcc, f.tpcc_dist);
  add_replication_options(c.tpcc, f.run);

  c.micro = c.bench->add_subcommand(
      "micro", "Mako's microbenchmark: each transaction reads and writes 4 random keys");
  c.micro->add_option("--keys", f.micro.keys, "Keys in the table (>= 4)")
      ->check(number_in(uint64_t{4}, uint64_t{1'000'000'000'000}, false, "in [4, 1e12]"))
      ->capture_default_str();
  add_dist_micro_options(c.micro, f.dist);

  c.bank = c.bench->add_subcommand(
      "bank",
      "Transfers and audits across shard processes (--shards or --cluster); the recorded "
      "history is checked for serializability and the money for conservation");
  f.bank_dist.keys_per_partition = 100;
  f.bank_dist.cross_shard_pct = 50;
  f.bank_dist.inflight = 32;
  add_dist_bank_options(c.bank, f.bank_dist);

  c.ycsb = c.bench->add_subcommand("ycsb", "YCSB core workloads A, B, C, F (Zipfian keys)");
  c.ycsb
      ->add_option("--workload", f.ycsb_workload,
                   "A: 50% read/50% update, B: 95/5, C: read only, F: 50% read/50% rmw")
      ->check(CLI::IsMember({"A", "B", "C", "F"}, CLI::ignore_case))
      ->capture_default_str();
  c.ycsb->add_option("--records", f.ycsb.records, "Records in the table (>= 2)")
      ->check(number_in(uint64_t{2}, uint64_t{1'000'000'000'000}, false, "in [2, 1e12]"))
      ->capture_default_str();
  c.ycsb->add_option("--theta", f.ycsb.theta, "Zipfian skew in [0, 1)")
      ->check(number_in(0.0, 0.999999, false, "in [0, 1)"))
      ->capture_default_str();
  add_transport_command(c, f);
  add_kv_bench_command(c, f);
  for (CLI::App* sub : {c.tpcc, c.micro, c.bank, c.ycsb, c.transport, c.kv}) sub->fallthrough();
  return c;
}

ServerCommands add_server_commands(CLI::App& app) {
  ServerCommands c;
  c.server = app.add_subcommand("server", "Run one shard server (until SIGTERM)");
  auto& so = c.server_options;
  c.server->add_option("--config", so.config_path, "Cluster config (TOML)")->required();
  c.server->add_option("--shard", so.shard, "This server's shard id")
      ->required()
      ->check(number_in(0u, 65535u, false, "in [0, 65535]"));
  add_served_options(c.server, so, "");
  add_memory_reserve_option(c.server, c.memory_reserve_mb, "");
  c.server
      ->add_option("--worker-cpus", so.worker_cpus,
                   "Pin worker i to the i-th of these cpus (a list like 0-3,6; one per "
                   "worker; with --other-cpus; `cluster up` plans them)")
      ->check(cpu_list());
  c.server
      ->add_option("--other-cpus", so.other_cpus,
                   "Run every thread that is not a worker on these cpus")
      ->check(cpu_list());
  // Test only (hidden): a planted bug for the bank's serializability check.
  c.server->add_flag("--unsafe-skip-read-validation", so.unsafe_skip_read_validation)->group("");
  c.server->add_flag("--no-read-only-hint{false}", so.tpcc_read_only_hint,
                     "Workload tpcc: keep ITEM and the customer-name index ordinary tables "
                     "(their reads validated)");
  c.server->add_flag("--unsafe-plant-divergence", so.unsafe_plant_divergence)->group("");
  // Mostly for tests: a small in-memory log that a short run passes (catch-up from the WAL).
  c.server
      ->add_option("--retain-slots", so.retain_slots,
                   "Replicated shards: chosen log slots kept in memory per stream")
      ->check(number_in(uint64_t{16}, uint64_t{1} << 20, false, "in [16, 1048576]"))
      ->capture_default_str();
  c.server
      ->add_option("--connect-timeout-ms", so.connect_timeout_ms,
                   "How long to keep dialing the other shards at start-up")
      ->capture_default_str();
  c.server->add_option("--data-dir", so.data_dir,
                       "This replica's WAL (default .shoal/<name>/shard-N-replica-0). A shard "
                       "of one replica keeps a WAL only when given one, and restarts from it");
  c.server
      ->add_option("--fsync", so.fsync,
                   "WAL sync policy (replicated shards, or one replica with --data-dir)")
      ->check(CLI::IsMember({"none", "batch", "always"}))
      ->capture_default_str();
  add_batch_options(c.server, so.batch_txns, so.batch_us,
                    " (replicated shards; default: the config's batch_txns / batch_us)");
  add_lead_option(c.server, so.lead_ms_max, "; replicated shards; default 10");
  c.server
      ->add_option("--checkpoint-interval-ms", so.checkpoint_interval_ms,
                   "Replicated shards: fetch a follower's newest checkpoint at most this often "
                   "and delete this leader's WAL segments every replica can do without; one "
                   "replica with --data-dir: compact its WAL into a checkpoint of its own this "
                   "often (0: never; `cluster up --checkpoint-interval-ms` passes it)")
      ->check(number_in(uint64_t{0}, uint64_t{86'400'000}, false, "in [0, 86400000]"))
      ->capture_default_str();
  c.server
      ->add_option("--recover-epoch", c.recover_epoch,
                   "Replicated shards: recover this leader's store from --data-dir (its "
                   "checkpoint and WAL, as a follower restarts) instead of loading, and take "
                   "over its followers in this epoch (above every earlier one; `cluster up` "
                   "passes it when it restarts a cluster)")
      ->check(number_in(uint64_t{2}, uint64_t{1} << 40, false, "in [2, 2^40]"));
  c.server
      ->add_option("--replica", c.recover_replica,
                   "With --recover-epoch and --etcd: this process is that replica of its shard, "
                   "the leader etcd names (after a failover, not replica 0)")
      ->check(number_in(0u, 63u, false, "in [0, 63]"))
      ->capture_default_str();
  c.cluster = app.add_subcommand("cluster", "Start, inspect and stop a cluster of shard servers");
  c.cluster->require_subcommand(1);
  auto& co = c.cluster_options;
  c.up = c.cluster->add_subcommand("up", "Start one server per shard; wait until all answer");
  c.status = c.cluster->add_subcommand("status", "Which shards answer");
  c.down = c.cluster->add_subcommand("down", "Stop the servers (SIGTERM, then SIGKILL)");
  c.check = c.cluster->add_subcommand("check", "Read every key of every shard (no locks left)");
  c.digest = c.cluster->add_subcommand(
      "digest", "Quiesce and compare every replica's store with its leader's (no load running)");
  for (CLI::App* sub : {c.up, c.status, c.down, c.check, c.digest}) {
    sub->add_option("--config", co.config_path, "Cluster config (TOML)")->required();
  }
  c.top = c.cluster->add_subcommand(
      "top", "Live per-shard view from the leaders' /metrics: txn/s, aborts, p50/p99, lag");
  c.top->add_option("--config", c.top_options.config_path, "Cluster config (TOML)")->required();
  c.top
      ->add_option("--iterations", c.top_options.iterations,
                   "Screens to print (default: until interrupted)")
      ->check(number_in(1u, 1'000'000u, false, "in [1, 1000000]"));
  c.top->add_option("--interval-ms", c.top_options.interval_ms, "Time between screens")
      ->check(number_in(uint64_t{100}, uint64_t{3'600'000}, false, "in [100, 3600000]"))
      ->capture_default_str();
  for (CLI::App* sub : {c.up, c.status, c.down, c.check, c.digest}) {
    sub->add_option("--run-dir", co.run_dir, "Pid and log directory (default .shoal/<name>)");
  }
  c.up->add_flag("--fresh", co.fresh,
                 "Clear the run directory's replica WALs and ack journals and load afresh "
                 "(default: a replicated cluster that ran there before restarts from its disk)");
  c.up->add_flag("--ack-journal", co.ack_journal,
                 "TPC-C: journal every acknowledged NewOrder in the run directory; `cluster "
                 "check` looks each up in the stores");
  c.up->add_option("--workers", co.workers, "Worker threads per shard (default: the config's)")
      ->check(number_in(1u, 64u, false, "in [1, 64]"));
  c.up->add_option("--workload", co.workload,
                   "What the servers load: micro (partitions = key ranges), tpcc "
                   "(partitions = warehouses) or bank (accounts as micro's keys)")
      ->check(CLI::IsMember({"micro", "tpcc", "bank"}))
      ->capture_default_str();
  c.up->add_option("--keys-per-partition", co.keys_per_partition, "Micro keys per config partition")
      ->check(number_in(uint64_t{1}, uint64_t{1'000'000'000}, false, "in [1, 1e9]"))
      ->capture_default_str();
  c.up->add_option("--fsync", co.fsync,
                   "Every replica's WAL sync policy. With one replica per shard, given: each "
                   "leader keeps a WAL (memory only without it) and `up` restarts from it")
      ->check(CLI::IsMember({"none", "batch", "always"}))
      ->capture_default_str();
  add_batch_options(c.up, co.batch_txns, co.batch_us,
                    " (every leader; default: the config's batch_txns / batch_us)");
  add_lead_option(c.up, co.lead_ms_max, "; every leader; default 10");
  c.up->add_option("--serve-reads", co.serve_reads,
                   "Reader threads per follower running TPC-C OrderStatus and StockLevel at its "
                   "snapshot (needs --workload tpcc and replicas)")
      ->check(number_in(0u, 16u, false, "in [0, 16]"))
      ->capture_default_str();
  add_checkpoint_option(c.up, co.checkpoint_interval_ms);
  add_memory_reserve_option(c.up, co.memory_reserve_mb, "; by every server and replica");
  c.up->add_flag("--no-read-only-hint{false}", co.tpcc_read_only_hint,
                 "TPC-C: validate reads of ITEM and the customer-name index like any other "
                 "(docs/OPERATIONS.md; the disclosure in docs/RESULTS.md)");
  c.up->add_option("--cpu-placement", co.cpu_placement,
                   "auto: when the servers' workers leave a core over, pin each worker to a core "
                   "of its own and run everything else, followers included, on the rest; none: "
                   "leave it to the scheduler")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  return c;
}

int run_server_commands(const ServerCommands& c) {
  Status s;
  if (c.server->parsed() && c.recover_epoch != 0) {
    server::ReplicaOptions ro;
    ro.config_path = c.server_options.config_path;
    ro.shard = c.server_options.shard;
    ro.replica = c.recover_replica;  // replica 0 unless etcd appointed another
    ro.data_dir = c.server_options.data_dir;
    ro.fsync = c.server_options.fsync;
    ro.checkpoint_interval_ms = c.server_options.checkpoint_interval_ms;
    ro.server = c.server_options;
    s = server::recover_and_lead(ro, c.recover_epoch);
  } else if (c.server->parsed() && c.recover_replica != 0) {
    s = Status::InvalidArgument(
        "--replica: only with --recover-epoch (a leader restarting from its disk); a fresh "
        "shard server is replica 0, and the others start as `shoal replica`");
  } else if (c.server->parsed()) {
    s = server::run_server(c.server_options);
  } else if (c.up->parsed()) {
    server::ClusterOptions co = c.cluster_options;
    for (const CLI::Option* opt : c.up->get_options()) {
      if (opt->count() > 0) co.flags_given.insert(opt->get_name());
    }
    s = server::cluster_up(co);
  } else if (c.status->parsed()) {
    s = server::cluster_status(c.cluster_options);
  } else if (c.down->parsed()) {
    s = server::cluster_down(c.cluster_options);
  } else if (c.check->parsed()) {
    s = server::cluster_check(c.cluster_options);
  } else if (c.digest->parsed()) {
    s = server::cluster_digest(c.cluster_options);
  } else if (c.top->parsed()) {
    s = server::cluster_top(c.top_options);
  }
  if (s.ok()) return 0;
  fmt::print(stderr, "shoal: error: {}\n", s.to_string());
  if (s.code() == Code::kCorruption) return kExitInconsistent;  // digest: replicas differ
  return s.code() == Code::kInvalidArgument ? kExitUsage : kExitRunFailed;
}

// `bench tpcc --no-read-only-hint`: said on stderr, so that a run's log shows it.
void print_no_read_only_hint() {
  fmt::print(stderr,
             "tpcc: read-only hint off: ITEM and the customer-name index are ordinary tables, "
             "their reads validated\n");
}

// `--kill-region`, checked against the layout the local run will start (make_local_config's
// regions: region-0 leads every shard). The remote and --replicas checks come before it.
Status check_region_kill_flags(const CLI::App& sub, const server::DistBenchOptions& d,
                               uint32_t replicas) {
  if (sub.count("--kill-leader-at") == 0) {
    return Status::InvalidArgument("--kill-region: needs --kill-leader-at (when the region dies)");
  }
  auto layout = cluster::make_local_config(d.shards, replicas, 1, d.shards, 1);
  if (!layout.ok()) return layout.status();
  return server::check_region_kill(d.kill_leader_at, sub.count("--kill-shard") > 0, d.hang_leader,
                                   *layout, d.kill_region);
}

// `bench micro|tpcc` with --shards or --cluster: the distributed run.
int run_dist_bench(const BenchCommands& c, BenchFlags& f) {
  const bool tpcc = c.tpcc->parsed();
  const bool bank = c.bank->parsed();
  CLI::App* sub = tpcc ? c.tpcc : bank ? c.bank : c.micro;
  server::DistBenchOptions& d = tpcc ? f.tpcc_dist : bank ? f.bank_dist : f.dist;
  const bool remote = sub->count("--cluster") > 0;
  const bool local = sub->count("--shards") > 0 || (tpcc && !remote);
  if (local && remote) {
    fmt::print(stderr, "shoal: error: --shards and --cluster exclude each other\n");
    return kExitUsage;
  }
  if (tpcc && remote && !f.tpcc_read_only_hint) {
    fmt::print(stderr,
               "shoal: error: --no-read-only-hint: with --cluster the running servers' setting "
               "applies (shoal server --no-read-only-hint)\n");
    return kExitUsage;
  }
  d.tpcc_read_only_hint = f.tpcc_read_only_hint;
  if (tpcc && !f.tpcc_read_only_hint) print_no_read_only_hint();
  if ((!tpcc && c.micro->count("--keys") > 0) || c.bench->count("--warmup") > 0) {
    fmt::print(stderr, "shoal: error: {} does not apply across shards (see --help)\n",
               c.bench->count("--warmup") > 0 ? "--warmup" : "--keys (use --keys-per-shard)");
    return kExitUsage;
  }
  if (c.bench->count("--cpu-placement") > 0 && remote) {
    fmt::print(stderr,
               "shoal: error: --cpu-placement: with --cluster the running cluster's placement "
               "applies (shoal cluster up --cpu-placement)\n");
    return kExitUsage;
  }
  if (reserve_given_with_cluster(c, remote)) return kExitUsage;
  d.memory_reserve_mb = f.run.memory_reserve_mb;  // the servers', not this controller's
  if (!tpcc && d.cross_shard_pct > 0 && sub->count("--cross-shard-pct") > 0 && local &&
      d.shards < 2) {
    fmt::print(stderr, "shoal: error: --cross-shard-pct: needs --shards >= 2\n");
    return kExitUsage;
  }
  if (bank) {
    d.workload = "bank";
    if (local && d.shards < 2) d.cross_shard_pct = 0;  // the default 50 needs a second shard
  }
  if (tpcc) {
    d.workload = "tpcc";
    // One warehouse per shard at least unless told otherwise: each shard needs one to serve.
    if (sub->count("--warehouses") == 0) f.warehouses = std::max(f.warehouses, d.shards);
    d.warehouses = f.warehouses;
    // Local TPC-C transactions run start to commit without suspending: a few terminals keep
    // the cross-shard ones overlapped without delaying the loop's polling for long.
    if (sub->count("--inflight") == 0) d.inflight = 8;
    if (d.baseline) d.baseline_committed_per_sec = measure_tpcc_baseline(f);
  }
  const uint32_t replicas = bank ? d.replicas : f.run.replicas;  // bank has its own --replicas
  if ((tpcc || bank) && sub->count("--kill-shard") > 0 && sub->count("--kill-leader-at") == 0) {
    fmt::print(stderr, "shoal: error: --kill-shard: needs --kill-leader-at\n");
    return kExitUsage;
  }
  if ((tpcc || bank) && sub->count("--kill-leader-at") > 0) {
    const char* bad = remote
                          ? "--kill-leader-at: a local run only (kill a cluster's leader by hand)"
                      : replicas < 3 ? "--kill-leader-at: needs --replicas >= 3"
                                     : nullptr;
    if (bad != nullptr) {
      fmt::print(stderr, "shoal: error: {}\n", bad);
      return kExitUsage;
    }
    auto schedule = server::make_kill_schedule(d.kill_leader_at, d.kill_shard, d.shards);
    if (!schedule.ok()) {
      fmt::print(stderr, "shoal: error: {}\n", schedule.status().message());
      return kExitUsage;
    }
  }
  if ((tpcc || bank) && sub->count("--kill-region") > 0) {
    if (const Status st = check_region_kill_flags(*sub, d, replicas); !st.ok()) {
      fmt::print(stderr, "shoal: error: {}\n", st.message());
      return kExitUsage;
    }
  }
  if (tpcc && remote && sub->count("--replicas") > 0) {
    fmt::print(stderr, "shoal: error: --replicas: with --cluster the config's replicas apply\n");
    return kExitUsage;
  }
  // A running cluster's servers and followers were started with their batching and readers.
  for (const char* flag : {"--batch-txns", "--batch-us", "--lead-ms-max", "--follower-reads"}) {
    if (tpcc && remote && sub->count(flag) > 0) {
      fmt::print(stderr,
                 "shoal: error: {}: with --cluster the running cluster's settings apply (shoal "
                 "cluster up {})\n",
                 flag, std::string(flag) == "--follower-reads" ? "--serve-reads" : flag);
      return kExitUsage;
    }
  }
  if (tpcc) {
    d.batch_txns = f.run.batch_txns;
    d.batch_us = f.run.batch_us;
    if (sub->count("--lead-ms-max") > 0) d.lead_ms_max = static_cast<int64_t>(f.run.lead_ms_max);
    d.follower_reads = f.run.follower_reads;
    d.unsafe_follower_read_newest = f.run.unsafe_follower_read_newest;
  }
  d.replicas = replicas;
  d.wan_rtt_ms = f.run.wan_rtt_ms;
  d.fsync = f.run.fsync;
  const CLI::Option* fsync_flag = sub->get_option_no_throw("--fsync");
  d.lone_replica_log = replicas == 1 && fsync_flag != nullptr && fsync_flag->count() > 0;
  d.replica_nice = f.run.replica_nice;
  d.replay_lag_ms = f.run.replay_lag_ms;
  d.cpu_placement = f.run.cpu_placement;
  d.workers = f.run.workers;
  d.seconds = f.run.seconds;
  d.seed = f.run.seed;
  d.json_path = f.run.json_path;
  d.stop = &interrupt_flag();
  Status s = server::run_dist_bench(d);
  if (s.ok() || s.code() == Code::kAborted) {
    if (!interrupt_flag().load()) return 0;
    fmt::print(stderr, "shoal: interrupted{}\n", s.ok() ? "" : " before the run started");
    return kExitInterrupted;
  }
  fmt::print(stderr, "shoal: error: {}\n", s.to_string());
  if (s.code() == Code::kCorruption) return kExitInconsistent;
  return s.code() == Code::kInvalidArgument ? kExitUsage : kExitRunFailed;
}

// The workload chosen on the command line; null with a message on stderr if none fits.
std::unique_ptr<workload::Workload> make_workload(const BenchCommands& c, BenchFlags& f) {
  Result<std::unique_ptr<workload::Workload>> w = Status::InvalidArgument("no workload selected");
  if (c.tpcc->parsed()) {
    workload::TpccOptions options;
    options.warehouses = f.warehouses;
    options.read_only_hint = f.tpcc_read_only_hint;
    if (!f.tpcc_read_only_hint) print_no_read_only_hint();
    w = make_tpcc_workload(options);
  } else if (c.micro->parsed()) {
    w = workload::make_micro_workload(f.micro);
  } else if (c.ycsb->parsed()) {
    f.ycsb.workload =
        static_cast<char>(std::toupper(static_cast<unsigned char>(f.ycsb_workload.at(0))));
    w = workload::make_ycsb_workload(f.ycsb);
  }
  if (!w.ok() || *w == nullptr) {
    fmt::print(stderr, "shoal: error: {}\n",
               w.ok() ? "workload could not be created" : w.status().to_string());
    return nullptr;
  }
  return std::move(w).value();
}

// `--memory-reserve-mb`: faulted in now and given to mimalloc as an arena, which its segments
// come from before it asks the OS. Committed: mimalloc 2.0.9 then never decommits or resets
// it (allow_decommit off), so a page freed and reused is not faulted in twice. Not "large":
// mimalloc serves a large arena only to segments that may use large OS pages, which a
// thread's first segment may not (eager_commit_delay), and each worker's first 32 MiB would
// miss the reserve. `processes`: this one and those it starts on this host with as much.
// Returns the MiB reserved (whole 64 MiB units; 0 for none), or an error already said on
// stderr.
std::optional<uint64_t> reserve_allocator_memory(uint64_t mb, uint32_t processes) {
  if (mb == 0) return 0;
  Result<PrefaultedMemory> m = map_prefaulted_memory(mb << 20, processes);
  if (!m.ok()) {
    fmt::print(stderr, "shoal: error: --memory-reserve-mb {}: {}\n", mb, m.status().to_string());
    return std::nullopt;
  }
  if (!mi_manage_os_memory(m->start, m->bytes, /*is_committed=*/true, /*is_large=*/false,
                           /*is_zero=*/true, /*numa_node=*/-1)) {
    fmt::print(stderr, "shoal: error: --memory-reserve-mb {}: the allocator refused it\n", mb);
    return std::nullopt;
  }
  fmt::print(stderr, "memory reserve: {} MiB faulted in in {} ms ({} MiB in huge pages)\n",
             m->bytes >> 20, m->fault_in_ms, m->huge_page_bytes >> 20);
  return m->bytes >> 20;
}

int run_bench(const BenchCommands& c, BenchFlags& f) {
  std::unique_ptr<workload::Workload> workload = make_workload(c, f);
  if (workload == nullptr) return kExitUsage;
  // Before the load, after the checks (a usage error need not wait for the faults); the
  // followers reserve what this process did.
  const std::optional<uint64_t> reserved =
      reserve_allocator_memory(f.run.memory_reserve_mb, f.run.replicas);
  if (!reserved) return kExitUsage;
  f.run.memory_reserve_mb = *reserved;
  f.run.warehouses = f.warehouses;
  f.run.stop = &interrupt_flag();
  txn::Engine engine;
  Result<bench::RunResult> result = bench::run_benchmark(*workload, engine, f.run);
  if (!result.ok()) {
    fmt::print(stderr, "shoal: error: {}\n", result.status().to_string());
    return kExitRunFailed;
  }
  if (!result->consistent()) {
    fmt::print(stderr, "shoal: consistency check FAILED ({} condition(s))\n",
               result->check_failures.size());
    return kExitInconsistent;
  }
  if (result->interrupted) {
    fmt::print(stderr, "shoal: interrupted: {:.2f} s of the {:g} s requested measured\n",
               result->seconds, result->requested_seconds);
    return kExitInterrupted;
  }
  return 0;
}

// Bench options that mean nothing to `bench transport` are refused rather than ignored.
int run_transport_bench(const BenchCommands& c, const BenchFlags& f) {
  for (const char* flag :
       {"--workers", "--warmup", "--check", "--seed", "--cpu-placement", "--memory-reserve-mb"}) {
    if (c.bench->count(flag) > 0) {
      fmt::print(stderr, "shoal: error: {} does not apply to bench transport (see --help)\n", flag);
      return kExitUsage;
    }
  }
  bench::transport::Options options;
  if (f.transport == "all") {
    options.transports.assign(std::begin(bench::transport::kTransportNames),
                              std::end(bench::transport::kTransportNames));
  } else {
    options.transports = {f.transport};
  }
  options.iterations = f.transport_iterations;
  options.pipelined_seconds = c.bench->count("--seconds") > 0 ? f.run.seconds : 1.0;
  options.json_path = f.run.json_path;
  Result<bench::transport::Report> report = bench::transport::run(options);
  if (!report.ok()) {
    fmt::print(stderr, "shoal: error: {}\n", report.status().to_string());
    return report.status().code() == Code::kInvalidArgument ? kExitUsage : kExitRunFailed;
  }
  std::fputs(report->to_table().c_str(), stdout);
  return 0;
}

// `shoal kv`: a single-key transaction (get, put, del) or a scan in one transaction, through
// the client library on a server of the cluster's config.
struct KvCommands {
  CLI::App* kv = nullptr;
  CLI::App* get = nullptr;
  CLI::App* put = nullptr;
  CLI::App* del = nullptr;
  CLI::App* scan = nullptr;
  std::string cluster;
  std::string password_file;  // empty: the config's resp_password_file, if it names one
  std::string key;
  std::string value;
  std::string start;
  std::string end;
  uint32_t limit = 100;
  bool speculative = false;
};

void add_kv_command(CLI::App& app, KvCommands& c) {
  c.kv = app.add_subcommand("kv", "Read and write keys through the client library");
  c.kv->require_subcommand(1);
  c.get = c.kv->add_subcommand("get", "Print a key's value (missing: nothing, exit 1)");
  c.put = c.kv->add_subcommand("put", "Write a key's value");
  c.del = c.kv->add_subcommand("del", "Delete a key");
  c.scan = c.kv->add_subcommand("scan", "Print keys in [START, END) as KEY<tab>VALUE lines");
  for (CLI::App* sub : {c.get, c.put, c.del, c.scan}) {
    sub->add_option("--cluster", c.cluster, "Cluster config (TOML) naming client ports")
        ->required();
    sub->add_option("--password-file", c.password_file,
                    "File whose first line is the client password (default: the config's "
                    "resp_password_file)");
  }
  for (CLI::App* sub : {c.get, c.put, c.del}) {
    sub->add_option("key", c.key, "The key (1 to 8192 bytes)")->required();
  }
  c.put->add_option("value", c.value, "The value (at most 1 MiB)")->required();
  c.scan->add_option("start", c.start, "First key (default: the first)");
  c.scan->add_option("end", c.end, "Key after the last (default: none)");
  c.scan->add_option("--limit", c.limit, "Keys at most")
      ->check(number_in(1u, 100000u, false, "in [1, 100000]"))
      ->capture_default_str();
  for (CLI::App* sub : {c.put, c.del}) {
    sub->add_flag("--speculative", c.speculative,
                  "Return at the commit point instead of once durable on a majority");
  }
}

int kv_failed(const Status& s) {
  fmt::print(stderr, "shoal: error: {}\n", s.to_string());
  return s.code() == Code::kInvalidArgument ? kExitUsage : kExitRunFailed;
}

int run_kv_command(const KvCommands& c) {
  ClientOptions options;
  if (!c.password_file.empty()) {
    Result<std::string> password = cluster::read_password_file(c.password_file, "--password-file");
    if (!password.ok()) return kv_failed(password.status());
    options.password = std::move(*password);
  }
  auto client = Client::connect_cluster(c.cluster, options);
  if (!client.ok()) return kv_failed(client.status());
  const Durability d = c.speculative ? Durability::kSpeculative : Durability::kDurable;
  if (c.get->parsed()) {
    std::string value;
    const Status s = (*client)->get(c.key, &value);
    if (s.is_not_found()) return kExitRunFailed;
    if (!s.ok()) return kv_failed(s);
    fmt::print("{}\n", value);
    return 0;
  }
  if (c.put->parsed() || c.del->parsed()) {
    Result<CommitResult> r =
        c.put->parsed() ? (*client)->put(c.key, c.value, d) : (*client)->del(c.key, d);
    if (!r.ok()) return kv_failed(r.status());
    fmt::print("OK ({})\n", r->durable ? "durable" : "speculative");
    return 0;
  }
  std::vector<KeyValue> found;
  const Status s = (*client)->run([&](Transaction& t) {
    found.clear();
    return t.scan(c.start, c.end, c.limit, &found);
  });
  if (!s.ok()) return kv_failed(s);
  for (const KeyValue& e : found) fmt::print("{}\t{}\n", e.key, e.value);
  return 0;
}

// A word in bench's positional (BenchFlags::unknown_workload), once CLI11 found nothing else
// wrong: a misspelt workload, or a stray word after one. "" when there is none.
std::string bench_positional_error(const BenchCommands& c, const BenchFlags& f) {
  if (f.unknown_workload.empty()) return {};
  if (c.bench->get_subcommands().empty()) {
    return fmt::format("workload: {} not in {{tpcc,micro,ycsb,bank,kv,transport}}",
                       f.unknown_workload);
  }
  return fmt::format("unexpected argument '{}'", f.unknown_workload);
}

// CLI11 errors as one line on stderr ("shoal: error: --workers: Value 0 not in range ...").
int usage_error(const CLI::ParseError& e) {
  std::string what = e.what();
  for (char& ch : what) {
    if (ch == '\n') ch = ' ';
  }
  fmt::print(stderr, "shoal: error: {} (see --help)\n", what);
  return kExitUsage;
}

}  // namespace
}  // namespace shoal

// libfabric pulls in libinfinipath (PSM), whose constructor installs handlers for SIGINT,
// SIGTERM, SIGSEGV, SIGBUS, SIGILL and SIGABRT before main: they write "shoal.80s-<pid>,<host>.btr"
// files into the working directory and call exit() from the handler, whose thread-local
// destructors then abort (a follower SIGTERMed while it recovered its WAL left such files).
// Ours are installed where a command needs them; everything else gets the default back, so
// a crash dumps core and a SIGTERM just terminates.
void restore_default_signal_handlers() {
  for (int sig : {SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL, SIGABRT})
    (void)std::signal(sig, SIG_DFL);
}

// Fresh memory in huge pages (mimalloc's large OS pages: its segments madvised
// MADV_HUGEPAGE, the machine's THP mode being "madvise"). On the project's VM a 4 KiB page
// fault costs about 20 us (a page-table update is a hypervisor call): the worker's new B-tree
// leaves and records faulted about 6,700 times a second, a fifth of its time, and each
// follower's replay as much (docs/RESULTS.md, issue 16, branch helper-replcpu). An explicit
// MIMALLOC_LARGE_OS_PAGES in the environment wins (0 turns it off).
void use_huge_pages_for_fresh_memory() {
  if (std::getenv("MIMALLOC_LARGE_OS_PAGES") != nullptr) return;
  mi_option_enable(mi_option_large_os_pages);
}

int main(int argc, char** argv) {
  use_huge_pages_for_fresh_memory();
  restore_default_signal_handlers();
  CLI::App app{"shoal: an in-memory serializable transactional key-value store", "shoal"};
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok, 1 run failed, 2 bad command line, 3 consistency check failed, 130 a "
      "bench\ninterrupted by Ctrl-C (see shoal bench --help).\n"
      "Example: shoal bench micro --keys 100000 --workers 2 --seconds 5 --json out.json\n"
      "         shoal bench transport --transport shm --iterations 20000 --json transport.json\n"
      "         shoal bench micro --shards 2 --cross-shard-pct 100 --seconds 5");
  shoal::BenchFlags flags;
  const shoal::BenchCommands commands = shoal::add_bench_command(app, flags);
  shoal::ServerCommands server_commands = shoal::add_server_commands(app);
  shoal::server::ReplicaOptions replica_options;
  CLI::App* replica_command = shoal::add_replica_command(app, replica_options);
  uint64_t replica_memory_reserve_mb = 0;
  shoal::add_memory_reserve_option(replica_command, replica_memory_reserve_mb, "");
  shoal::KvCommands kv_commands;
  shoal::add_kv_command(app, kv_commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help: printed on stdout, success
    return shoal::usage_error(e);
  }
  if (commands.bench->parsed()) {
    if (const std::string why = shoal::bench_positional_error(commands, flags); !why.empty()) {
      fmt::print(stderr, "shoal: error: {} (see --help)\n", why);
      return shoal::kExitUsage;
    }
    if (commands.bench->get_subcommands().empty()) {
      std::fputs(
          "shoal: error: bench needs a workload: tpcc, micro, ycsb, bank, kv or transport (see "
          "--help)\n",
          stderr);
      return shoal::kExitUsage;
    }
    if (commands.transport->parsed()) return shoal::run_transport_bench(commands, flags);
    // Before any thread or child process starts (src/base/interrupt.h).
    shoal::install_interrupt_handler(shoal::kBenchInterruptMessage);
    if (commands.kv->parsed()) return shoal::run_kv_bench_command(commands, flags);
    if (commands.bank->parsed()) {
      if (commands.bank->count("--shards") == 0 && commands.bank->count("--cluster") == 0) {
        std::fputs(
            "shoal: error: bench bank runs across shard processes: give --shards N or "
            "--cluster FILE\n",
            stderr);
        return shoal::kExitUsage;
      }
      return shoal::run_dist_bench(commands, flags);
    }
    const bool dist =
        (commands.micro->parsed() &&
         (commands.micro->count("--shards") > 0 || commands.micro->count("--cluster") > 0)) ||
        (commands.tpcc->parsed() &&
         ((flags.tpcc_dist.shards >= 2 && commands.tpcc->count("--shards") > 0) ||
          commands.tpcc->count("--cluster") > 0 || commands.tpcc->count("--kill-leader-at") > 0));
    if (commands.tpcc->parsed()) {
      const auto& r = flags.run;
      const bool remote = commands.tpcc->count("--cluster") > 0;  // its config's replicas
      const char* bad =
          r.replicas == 1 && commands.tpcc->count("--wan-rtt-ms") > 0
              ? "--wan-rtt-ms: needs --replicas >= 2"
          : r.replicas == 1 && r.follower_reads > 0 && !remote
              ? "--follower-reads: needs --replicas >= 2"
          : r.checkpoint_interval_ms > 0 && (r.replicas == 1 || dist)
              ? "--checkpoint-interval-ms: one shard with --replicas >= 2 (a cluster of several "
                "shards: `shoal cluster up --checkpoint-interval-ms`)"
          : flags.tpcc_dist.hang_leader && commands.tpcc->count("--kill-leader-at") == 0
              ? "--hang-leader: needs --kill-leader-at (when to hang it)"
              : nullptr;
      if (bad != nullptr) {
        fmt::print(stderr, "shoal: error: {}\n", bad);
        return shoal::kExitUsage;
      }
    }
    if (dist) return shoal::run_dist_bench(commands, flags);
    // One shard: --transport is how its followers reach it (needs --replicas).
    flags.run.replica_transport = flags.tpcc_dist.transport;
    for (const char* flag : {"--inflight", "--baseline", "--transport"}) {
      if (commands.tpcc->parsed() && commands.tpcc->count(flag) > 0 &&
          !(std::string_view(flag) == "--transport" && flags.run.replicas > 1)) {
        fmt::print(stderr, "shoal: error: {}: needs --shards >= 2 or --cluster{}\n", flag,
                   std::string_view(flag) == "--transport" ? " (or --replicas >= 2)" : "");
        return shoal::kExitUsage;
      }
    }
    for (const char* flag : {"--cross-shard-pct", "--inflight", "--keys-per-shard"}) {
      if (commands.micro->parsed() && commands.micro->count(flag) > 0) {
        fmt::print(stderr, "shoal: error: {}: needs --shards or --cluster\n", flag);
        return shoal::kExitUsage;
      }
    }
    return shoal::run_bench(commands, flags);
  }
  if (replica_command->parsed()) {
    if (!shoal::reserve_allocator_memory(replica_memory_reserve_mb, 1)) return shoal::kExitUsage;
    const shoal::Status s = shoal::server::run_replica(replica_options);
    if (s.ok()) return 0;
    fmt::print(stderr, "shoal: error: {}\n", s.to_string());
    return s.code() == shoal::Code::kInvalidArgument ? shoal::kExitUsage : shoal::kExitRunFailed;
  }
  if (kv_commands.kv->parsed()) return shoal::run_kv_command(kv_commands);
  if (server_commands.server->parsed() &&
      !shoal::reserve_allocator_memory(server_commands.memory_reserve_mb, 1)) {
    return shoal::kExitUsage;
  }
  if (server_commands.server->parsed() || server_commands.cluster->parsed()) {
    return shoal::run_server_commands(server_commands);
  }
  return shoal::kExitUsage;  // unreachable: a subcommand is required
}

// run_dist_bench (declared in bench/dist_bench.h): the controller of the benchmarks across
// shard processes. See src/server/cluster_ctl.h for the flow.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/dist_bench.h"
#include "bench/local_cluster.h"
#include "bench/runner.h"
#include "src/base/env.h"
#include "src/base/json_field.h"
#include "src/base/memory_reserve.h"
#include "src/check/serializability.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/config.h"
#include "src/cluster/etcd_config_manager.h"
#include "src/cluster/etcd_process.h"
#include "src/net/tcp_transport.h"
#include "src/server/cluster_config.h"
#include "src/server/cluster_ctl.h"
#include "src/server/control.h"
#include "src/server/dist_bank.h"
#include "src/server/dist_micro.h"
#include "src/server/dist_tpcc.h"
#include "src/server/failover_run.h"
#include "src/server/process.h"
#include "src/server/repl_ctl.h"
#include "src/server/shard_server.h"

namespace shoal::server {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kCallTimeoutMs = 5000;
constexpr uint64_t kCollectGraceMs = 60'000;     // after the run: servers finish in-flight work
constexpr uint64_t kQuiesceTimeoutMs = 300'000;  // followers applying the closed floor
constexpr uint64_t kRejoinTimeoutMs = 120'000;   // a restarted replica recovering its WAL

// Free loopback ports for every replica of every shard, below the kernel's ephemeral range
// (else the outgoing connections of the processes starting up may take one before its owner
// binds it): bind each, then release them all right before the servers start (a small race
// with other programs, far smaller than a fixed base port). A replicated shard's leader also
// needs port + 1 (its replication port). With client_ports every replica also gets a
// client_port (a follower opens it once promoted).
Status assign_free_ports(cluster::ClusterConfig* config, bool client_ports) {
  constexpr uint32_t kAttemptsMax = 1000;
  constexpr uint32_t kLowest = 10'000;
  uint32_t ephemeral_lo = 32'768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) {
    range >> ephemeral_lo;
  }
  if (ephemeral_lo <= kLowest + 1000) ephemeral_lo = 65'535;  // odd kernel setting: use any
  Rng rng(static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ULL ^ RealEnv::instance().now_ns());
  std::vector<net::TcpListener> held;
  // A free port (and port + 1 when `pair`), held until this function returns.
  auto pick = [&](bool pair) -> Result<uint16_t> {
    for (uint32_t attempt = 0; attempt < kAttemptsMax; ++attempt) {
      const auto port = static_cast<uint16_t>(rng.uniform(kLowest, ephemeral_lo - 2));
      auto l = net::TcpListener::listen("127.0.0.1", port);
      if (!l.ok()) continue;
      if (pair) {
        auto next = net::TcpListener::listen("127.0.0.1", static_cast<uint16_t>(port + 1));
        if (!next.ok()) continue;  // taken: try another
        held.push_back(std::move(*next));
      }
      held.push_back(std::move(*l));
      return port;
    }
    return Status::Unavailable(
        fmt::format("no free loopback port in [{}, {})", kLowest, ephemeral_lo));
  };
  for (cluster::Shard& shard : config->shards) {
    for (cluster::Replica& replica : shard.replicas) {
      // Every replica of a replicated shard may lead it (a failover): each needs its
      // replication port, port + 1, free too.
      auto port = pick(shard.replicas.size() > 1);
      if (!port.ok()) return port.status();
      replica.port = *port;
      if (!client_ports) continue;
      auto client_port = pick(false);
      if (!client_port.ok()) return client_port.status();
      replica.client_port = *client_port;
    }
  }
  return Status::Ok();
}

// A replicated local cluster's configuration manager: an etcd of its own in the run directory
// (loopback, free ports), holding epoch 1 with every shard led by replica 0.
Status start_config_manager(LocalCluster* lc) {
  auto etcd = server::start_local_etcd(lc->config, lc->dir, /*detach=*/false);
  if (!etcd.ok()) return etcd.status();
  lc->etcd = std::move(*etcd);
  lc->etcd_endpoints = {lc->etcd->endpoint()};
  return Status::Ok();
}

}  // namespace

LocalCluster::~LocalCluster() {
  if (std::getenv("SHOAL_KEEP_RUN_DIR") != nullptr) keep_dir = true;  // logs for debugging
  if (!procs.empty()) stop_servers(procs, 10'000);
  if (etcd) (void)etcd->stop(2'000);
  std::error_code ec;
  if (dir.empty()) return;
  if (!keep_dir) {
    fs::remove_all(dir, ec);
    return;
  }
  // Kept for its logs and config; the replicas' WAL directories (hundreds of MB per run)
  // would fill a disk over a few failed runs.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory(ec)) fs::remove_all(e.path(), ec);
  }
}

// The transport as the report names it: fabric with the provider its servers ask for (the
// config's, else SHOAL_FABRIC_PROVIDER, which they inherit, else the default).
static std::string transport_label(const cluster::ClusterConfig& config) {
  std::string label(cluster::transport_name(config.transport));
  if (config.transport == cluster::TransportKind::kFabric) {
    label += " (" + net::FabricEndpoint::provider_name(server::fabric_options(config)) + ")";
  }
  return label;
}

Status start_local(const DistBenchOptions& o, LocalCluster* lc) {
  const bool tpcc = o.workload == "tpcc";
  if (tpcc && o.warehouses < o.shards) {
    return Status::InvalidArgument(
        fmt::format("--warehouses: {} warehouses cannot fill {} shards", o.warehouses, o.shards));
  }
  auto config = cluster::make_local_config(o.shards, o.replicas, o.workers,
                                           tpcc ? o.warehouses : o.shards, 10000);
  if (!config.ok()) return config.status();
  lc->config = std::move(*config);
  auto kind = cluster::transport_kind(o.transport);
  if (!kind.ok()) return kind.status();
  lc->config.transport = *kind;  // fabric: the provider from SHOAL_FABRIC_PROVIDER or default
  SHOAL_TRY(assign_free_ports(&lc->config, o.client_ports));
  // Every region pair at half the round trip (region-0 holds the leaders).
  for (uint32_t a = 0; a < o.replicas; ++a) {
    for (uint32_t b = a + 1; b < o.replicas && o.wan_rtt_ms > 0; ++b) {
      lc->config.wan.push_back(
          {lc->config.regions[a].name, lc->config.regions[b].name, o.wan_rtt_ms / 2, 0});
    }
  }
  if (o.batch_txns != 0) lc->config.batch_txns = o.batch_txns;
  if (o.batch_us != 0) lc->config.batch_us = o.batch_us;
  if (o.replay_lag_ms >= 0) lc->config.replay_lag_ms = static_cast<uint64_t>(o.replay_lag_ms);
  lc->config.name = fmt::format("bench-{}", getpid());
  SHOAL_TRY(lc->config.validate());
  lc->dir = (fs::temp_directory_path() / fmt::format("shoal-bench-{}", getpid())).string();
  std::error_code ec;
  fs::create_directories(lc->dir, ec);
  if (ec) return Status::IOError(fmt::format("{}: {}", lc->dir, ec.message()));
  const std::string config_path = lc->dir + "/cluster.toml";
  std::ofstream(config_path) << lc->config.to_toml();
  SpawnOptions so;
  so.config_path = config_path;
  so.log_dir = lc->dir;
  so.workers = o.workers;
  so.keys_per_partition = o.keys_per_partition;
  so.workload = o.workload;
  so.die_with_parent = true;
  so.unsafe_skip_read_validation = o.unsafe_skip_read_validation;
  so.tpcc_read_only_hint = o.tpcc_read_only_hint;
  so.fsync = o.fsync;
  so.lone_replica_log = o.lone_replica_log;
  so.replica_nice = o.replica_nice;
  so.lead_ms_max = o.lead_ms_max;
  so.serve_reads = o.follower_reads;
  so.unsafe_snapshot_read_newest = o.unsafe_follower_read_newest;
  so.cpu_placement = o.cpu_placement;
  so.memory_reserve_mb = o.memory_reserve_mb;
  if (o.memory_reserve_mb != 0) {  // every server and follower on this host reserves as much
    SHOAL_TRY(check_memory_reserves_fit(o.memory_reserve_mb << 20, o.shards * o.replicas));
  }
  if (o.replicas > 1) {
    SHOAL_TRY(start_config_manager(lc));
    so.etcd = lc->etcd_endpoints;
    if (tpcc) so.ack_journal_dir = lc->dir;
  }
  if (o.workload == "bank") so.ack_journal_dir = lc->dir;  // the history files
  auto placement = plan_host_placement(lc->config, so);
  if (!placement.ok()) return placement.status();
  fmt::print(stderr, "cpu placement: {}\n", placement->describe());
  auto procs = spawn_servers(lc->config, so, *placement);
  if (!procs.ok()) return procs.status();
  lc->procs = std::move(*procs);
  lc->spawn = so;
  lc->placement = *placement;
  return Status::Ok();
}

namespace {

struct ShardOutcome {
  bool done = false;
  bool gone = false;
  std::string error;  // why it is gone
  MicroStats stats;
  uint64_t orphaned = 0;
  nlohmann::json log;  // replicated shards: what the run logged (txns, entries, bytes, patches)
  nlohmann::json wire_deps;  // dependency vectors in the 2PC messages its workers sent
};

// Polls kStats until every shard is done or gone (bounded by deadline_ms).
void collect(ControlClient& client, uint32_t shards, uint64_t deadline_ms,
             std::vector<ShardOutcome>* out) {
  out->assign(shards, ShardOutcome{});
  for (;;) {
    bool pending = false;
    for (uint32_t s = 0; s < shards; ++s) {
      ShardOutcome& so = (*out)[s];
      if (so.done || so.gone) continue;
      auto reply = client.call(s, kStats, nlohmann::json::object(), kCallTimeoutMs);
      if (!reply.ok()) {
        if (reply.status().code() == Code::kUnavailable) {
          so.gone = true;
          so.error = reply.status().to_string();
        } else {
          pending = true;  // slow answer: ask again
        }
        continue;
      }
      bool done = false;
      nlohmann::json stats_json = nlohmann::json::object();
      Status read = json_optional_field(*reply, "done", &done);
      if (read.ok() && !done) {
        pending = true;
        continue;
      }
      if (read.ok()) read = json_optional_field(*reply, "stats", &stats_json);
      if (read.ok()) read = json_optional_field(*reply, "orphaned", &so.orphaned);
      if (read.ok()) read = json_optional_field(*reply, "log", &so.log);
      if (read.ok()) read = json_optional_field(*reply, "wire_deps", &so.wire_deps);
      auto stats = read.ok() ? MicroStats::from_json(stats_json) : Result<MicroStats>(read);
      if (!stats.ok()) {
        so.gone = true;
        so.error = stats.status().to_string();
        continue;
      }
      so.done = true;
      so.stats = std::move(*stats);
    }
    if (!pending) return;
    if (now_ms() >= deadline_ms) {
      for (auto& so : *out) {
        if (!so.done && !so.gone) {
          so.gone = true;
          so.error = "no final stats before the deadline";
        }
      }
      return;
    }
    sleep_ms(100);
  }
}

bool stopped(const DistBenchOptions& o) {
  return o.stop != nullptr && o.stop->load(std::memory_order_relaxed);
}

// `measured_s`: the run's seconds (shorter than o.seconds when Ctrl-C ended it: interrupted).
bench::RunResult make_result(const DistBenchOptions& o, uint32_t shards, uint32_t workers,
                             const MicroStats& t, double measured_s, bool interrupted) {
  bench::RunResult r;
  r.workload = o.workload + "-dist";
  r.user_aborts = t.user_aborts;
  r.workers = shards * workers;
  const double seconds = interrupted && measured_s > 0 ? measured_s : o.seconds;
  r.seconds = seconds;
  r.requested_seconds = o.seconds;
  r.interrupted = interrupted;
  r.committed = t.committed;
  r.conflict_aborts = t.conflict_aborts;
  r.failed = t.failed;
  r.committed_per_sec = static_cast<double>(t.committed) / seconds;
  r.aborts_per_sec = static_cast<double>(t.conflict_aborts) / seconds;
  Histogram all = t.latency_local;
  all.merge(t.latency_cross);
  r.latency_us = bench::summarize(all);
  r.commit_latency_us = bench::summarize(t.latency_commit);  // all zero without replication
  bench::TypeResult local{"rmw4-local",
                          t.committed - t.committed_cross,
                          0,
                          0,
                          t.failed - t.failed_cross,
                          bench::summarize(t.latency_local)};
  bench::TypeResult cross{
      "rmw4-cross", t.committed_cross, 0, 0, t.failed_cross, bench::summarize(t.latency_cross)};
  r.per_type = {local, cross};
  if (o.workload == "tpcc" || o.workload == "bank") {
    r.per_type.clear();
    const bool bank = o.workload == "bank";
    const char* names[] = {"NewOrder", "Payment", "OrderStatus", "Delivery", "StockLevel"};
    const char* bank_names[] = {"transfer", "audit"};
    for (uint32_t i = 0; i < (bank ? 2 : 5); ++i) {
      bench::TypeResult tr;
      tr.name = bank ? bank_names[i] : names[i];
      tr.committed = t.committed_by_type[i];
      tr.failed = t.failed_by_type[i];
      tr.latency_us = bench::summarize(t.latency_by_type[i]);
      r.per_type.push_back(tr);
    }
    // Latency is kept per placement, not per type: the split that matters across shards.
    local.name = "(local)";
    cross.name = "(cross-shard)";
    r.per_type.push_back(local);
    r.per_type.push_back(cross);
  }
  // The shard servers' memory, summed over shards (not this controller's).
  r.rss_bytes = t.rss_bytes;
  r.peak_rss_bytes = t.peak_rss_bytes;
  return r;
}

// What a shard's kScan answers, every field read checked (a peer's reply never aborts us).
struct ScanReply {
  uint64_t counter_sum = 0;  // micro
  uint64_t keys = 0;         // bank: accounts
  int64_t balance_sum = 0;   // bank
  uint64_t unreadable = 0;
  std::string first_unreadable;
};
Result<ScanReply> parse_scan_reply(const nlohmann::json& j) {
  ScanReply out;
  SHOAL_TRY(json_optional_field(j, "counter_sum", &out.counter_sum));
  SHOAL_TRY(json_optional_field(j, "keys", &out.keys));
  SHOAL_TRY(json_optional_field(j, "balance_sum", &out.balance_sum));
  SHOAL_TRY(json_optional_field(j, "unreadable", &out.unreadable));
  SHOAL_TRY(json_optional_field(j, "first_unreadable", &out.first_unreadable));
  return out;
}

// Scans every surviving shard: no key may be unreadable; with every shard alive and no
// failed transaction, the counters must sum to 4 x committed.
void check(ControlClient& client, const std::vector<ShardOutcome>& shards, const MicroStats& t,
           bench::RunResult* r) {
  r->checked = true;
  uint64_t sum = 0;
  bool all_alive = true;
  for (uint32_t s = 0; s < shards.size(); ++s) {
    if (shards[s].gone) {
      all_alive = false;
      continue;
    }
    auto scan = client.call(s, kScan, nlohmann::json::object(), 120'000);
    if (!scan.ok()) {
      r->check_failures.push_back(fmt::format("shard {} scan: {}", s, scan.status().to_string()));
      all_alive = false;
      continue;
    }
    auto reply = parse_scan_reply(*scan);
    if (!reply.ok()) {
      r->check_failures.push_back(fmt::format("shard {} scan: {}", s, reply.status().to_string()));
      all_alive = false;
      continue;
    }
    sum += reply->counter_sum;
    if (reply->unreadable != 0) {
      r->check_failures.push_back(fmt::format("shard {}: {} keys unreadable (locks left): {}", s,
                                              reply->unreadable, reply->first_unreadable));
    }
  }
  if (!all_alive || t.failed != 0) {
    std::fputs(
        "counter sum not checked: a shard was lost or transactions failed (only "
        "\"no key left locked\" on the surviving shards)\n",
        stdout);
  } else if (sum != kMicroKeysPerTxn * t.committed) {
    r->check_failures.push_back(fmt::format("counter sum: {} increments, expected {} (4 x {})", sum,
                                            kMicroKeysPerTxn * t.committed, t.committed));
  }
}

// TPC-C across shards: each shard's HISTORY sums for other shards' customers go to the shard
// owning the customer, which checks the conditions of its warehouses with them added in. The
// sums per owning shard are left in *payments (its followers' checks need them too).
void check_tpcc(ControlClient& client, const cluster::ClusterConfig& config,
                const std::vector<ShardOutcome>& shards, bench::RunResult* r,
                std::vector<nlohmann::json>* payments_out) {
  for (const ShardOutcome& so : shards) {
    if (so.gone) {  // not checked: the report says "skipped", never "ok"
      std::fputs("consistency not checked: a shard was lost\n", stdout);
      return;
    }
  }
  r->checked = true;
  std::vector<std::string> failures = check_tpcc_cluster(client, config, payments_out);
  r->check_failures.insert(r->check_failures.end(), failures.begin(), failures.end());
}

// Where check_bank finds the bank's history.
struct BankHistorySource {
  // Non-empty: the history files there (bank_history_file.h) of run `run`; empty: the shards'
  // in-memory logs, paged out (kHistory).
  std::string dir;
  uint64_t run = 0;
  uint64_t committed = 0;  // the shards' count of commits (a killed leader's as last sampled)
  uint64_t unlogged = 0;   // commits of killed leaders (their in-memory logs died with them)
};

// The shards' in-memory logs, paged out (kHistory). False (a failure added) on an error.
bool page_bank_history(ControlClient& client, uint32_t shards, check::History* history,
                       uint64_t* dropped, bench::RunResult* r) {
  for (uint32_t s = 0; s < shards; ++s) {
    uint64_t workers = 1;
    for (uint64_t w = 0; w < workers; ++w) {
      for (uint64_t from = 0;;) {
        auto page = client.call(s, kHistory, {{"worker", w}, {"from", from}}, 60'000);
        uint64_t next = 0, total = 0, dropped_here = 0;
        workers = 1;
        nlohmann::json txns;
        Status st = page.status();
        if (st.ok()) st = json_optional_field(*page, "next", &next);
        if (st.ok()) st = json_optional_field(*page, "total", &total);
        if (st.ok()) st = json_optional_field(*page, "workers", &workers);
        if (st.ok()) st = json_optional_field(*page, "dropped", &dropped_here);
        if (st.ok()) st = json_optional_field(*page, "txns", &txns);
        if (st.ok()) st = parse_bank_page(txns, &history->txns);
        if (st.ok() && next <= from && from < total) st = Status::Corruption("no progress");
        if (!st.ok()) {
          r->check_failures.push_back(
              fmt::format("shard {} worker {} history: {}", s, w, st.to_string()));
          return false;
        }
        if (next >= total) {
          *dropped += dropped_here;
          break;
        }
        from = next;
      }
    }
  }
  return true;
}

// Bank: the money over all shards must be what was loaded, and the merged history of every
// worker's acknowledged transactions must be serializable (src/check/serializability.h). Lines
// for the report go to *text, fields for the JSON to *json.
void check_bank(ControlClient& client, const std::vector<ShardOutcome>& shards,
                const BankHistorySource& source, bench::RunResult* r, std::string* text,
                nlohmann::json* json) {
  for (const ShardOutcome& so : shards) {
    if (so.gone) {  // not checked: the report says "skipped", never "ok"
      *text += "bank not checked: a shard was lost\n";
      return;
    }
  }
  r->checked = true;
  int64_t balance = 0;
  uint64_t accounts = 0;
  for (uint32_t s = 0; s < shards.size(); ++s) {
    auto scan = client.call(s, kScan, nlohmann::json::object(), 120'000);
    if (!scan.ok()) {
      r->check_failures.push_back(fmt::format("shard {} scan: {}", s, scan.status().to_string()));
      return;
    }
    auto reply = parse_scan_reply(*scan);
    if (!reply.ok()) {
      r->check_failures.push_back(fmt::format("shard {} scan: {}", s, reply.status().to_string()));
      return;
    }
    accounts += reply->keys;
    balance += reply->balance_sum;
    if (reply->unreadable != 0) {
      r->check_failures.push_back(fmt::format("shard {}: {} accounts unreadable (locks left): {}",
                                              s, reply->unreadable, reply->first_unreadable));
    }
  }
  const int64_t expected = static_cast<int64_t>(accounts) * kBankInitialBalance;
  (*json)["balance_sum"] = balance;
  (*json)["balance_expected"] = expected;
  (*json)["money_conserved"] = balance == expected;
  if (balance == expected) {
    *text += fmt::format("money: ok ({} over {} accounts)\n", balance, accounts);
  } else {
    *text += fmt::format("money: FAILED: the balances sum to {}, expected {} ({} accounts x {})\n",
                         balance, expected, accounts, kBankInitialBalance);
    r->check_failures.push_back(fmt::format("money: {} made or lost", balance - expected));
  }
  check::History history;
  uint64_t unrecorded = 0;
  BankHistoryNotes notes;
  notes.id_legend = "transaction ids are T<shard>.<worker>.<attempt>";
  notes.readable_ids = readable_txn_ids;
  notes.stand_in_unrecorded = true;
  if (source.dir.empty()) {
    unrecorded = source.unlogged;
    if (!page_bank_history(client, static_cast<uint32_t>(shards.size()), &history, &unrecorded,
                           r)) {
      return;
    }
    notes.unrecorded =
        fmt::format("logs full at {} per worker, never acknowledged, or died with a killed leader",
                    kBankHistoryMax);
    (*json)["history_source"] = "servers";
  } else {
    BankHistoryFiles files = read_bank_history_files(source.dir, source.run);
    for (const std::string& e : files.errors) {
      *text += "history: " + e + "\n";
      r->check_failures.push_back("history: " + e);
    }
    history.txns = std::move(files.txns);
    const uint64_t recorded = history.txns.size();
    // The shards' count lags a killed leader's last commits by up to a sample: "about".
    const uint64_t missing = source.committed > recorded + files.unacknowledged
                                 ? source.committed - recorded - files.unacknowledged
                                 : 0;
    unrecorded = files.unacknowledged + missing;
    // A killed leader may have acknowledged transactions it had not yet written: no count
    // shows them, so what read from anything unrecorded is left out whenever a leader died.
    notes.unrecorded_unknown = source.unlogged > 0;
    notes.unrecorded =
        "committed but never acknowledged, or acknowledged by a killed leader "
        "within its last flush";
    *text += fmt::format(
        "history: {} acknowledged transactions recorded in {} files ({} with a torn last record, "
        "dropped); {} committed but never acknowledged; the shards counted {} commits ({} more "
        "than recorded)\n",
        recorded, files.files, files.torn_files, files.unacknowledged, source.committed, missing);
    (*json)["history_source"] = "files";
    (*json)["history_files"] = files.files;
    (*json)["history_recorded"] = recorded;
    (*json)["history_unacknowledged"] = files.unacknowledged;
    (*json)["history_torn_files"] = files.torn_files;
    (*json)["history_refused_files"] = files.errors.size();
  }
  check_bank_history(std::move(history), unrecorded, notes, &r->check_failures, text, json);
}

// The replicas' part of the report: digests and checks per shard and replica.
struct ReplicationReport {
  bool enabled = false;
  std::string text;
  nlohmann::json json;
  Status verdict;
  bool shard_unverified = false;  // a shard's replicas could not be compared at all
  // Log batching in use, per shard (from kPing: the config's unless a server's flags differ).
  std::vector<uint32_t> batch_txns;
  std::vector<double> batch_us;
};

// "log batching: 400 txns / 1000 us per entry" (a line per shard when they differ) and the
// JSON fields batch_txns and batch_us (shard 0's) and batching_per_shard.
void report_batching(const ReplicationReport& repl, std::string* text, nlohmann::json* j) {
  bool same = true;
  nlohmann::json per_shard = nlohmann::json::array();
  for (size_t s = 0; s < repl.batch_txns.size(); ++s) {
    same = same && repl.batch_txns[s] == repl.batch_txns[0] && repl.batch_us[s] == repl.batch_us[0];
    per_shard.push_back(
        {{"shard", s}, {"batch_txns", repl.batch_txns[s]}, {"batch_us", repl.batch_us[s]}});
  }
  if (repl.batch_txns.empty()) return;
  (*j)["batch_txns"] = repl.batch_txns[0];
  (*j)["batch_us"] = repl.batch_us[0];
  (*j)["batching_per_shard"] = per_shard;
  if (same) {
    *text += fmt::format("log batching: {} txns / {} us per entry\n", repl.batch_txns[0],
                         repl.batch_us[0]);
    return;
  }
  for (size_t s = 0; s < repl.batch_txns.size(); ++s) {
    *text += fmt::format("shard {} log batching: {} txns / {} us per entry\n", s,
                         repl.batch_txns[s], repl.batch_us[s]);
  }
}

// "shard S log: ..." for a replicated shard's run (its leader's streams), else "".
// What a watched run adds to the report: the per-second series and, after a kill, the
// failover and the acknowledged transactions checked against the final state.
struct RunExtras {
  std::string text;
  nlohmann::json json = nlohmann::json::object();
  Status verdict;  // not ok: the run fails with it (acknowledged transactions lost)
};

nlohmann::json kill_json(const KillOutcome& k) {
  return {{"killed", k.killed},
          {"shard", k.shard},
          {"planned_at_s", k.planned_at_s},
          {"killed_at_s", k.killed ? k.killed_at_s : k.planned_at_s},
          {"killed_unix_us", k.killed_unix_us},
          {"old_leader", k.old_leader},
          {"new_leader", k.new_leader},
          {"new_epoch", k.new_epoch},
          {"failover_ms", k.failover_ms},
          {"leader_elected_ms", k.leader_elected_ms},
          {"kill_to_first_commit_ms", k.kill_to_commit_ms},
          {"killed_leader_committed", k.killed_leader_committed},
          {"killed_replica_restarted", k.restarted},
          {"observed", k.observed},
          {"signal", k.hung ? "SIGSTOP" : "SIGKILL"},
          {"deposed_exit_code", k.deposed_exit_code},
          {"deposed_exit_ms", k.deposed_exit_ms},
          {"error", k.error}};
}

nlohmann::json region_kill_json(const RegionKillOutcome& r) {
  nlohmann::json processes = nlohmann::json::array();
  for (const RegionKillOutcome::Process& p : r.processes) {
    processes.push_back({{"shard", p.shard},
                         {"replica", p.replica},
                         {"pid", p.pid},
                         {"role", p.leader ? "leader" : "follower"},
                         {"restarted", p.restarted}});
  }
  return {{"region", r.region},
          {"killed", r.killed},
          {"planned_at_s", r.planned_at_s},
          {"killed_at_s", r.killed ? r.killed_at_s : r.planned_at_s},
          {"killed_unix_us", r.killed_unix_us},
          {"processes", std::move(processes)},
          {"restarted_at_s", r.restarted_at_s},
          {"error", r.error}};
}

// The region kill's line of the report (its failovers follow, one per shard it failed over).
void report_region_kill(const RegionKillOutcome& r, RunExtras* x) {
  if (!r.killed) {
    x->text += fmt::format("region kill: no kill of region {} (the run ended before {:.1f} s)\n",
                           r.region, r.planned_at_s);
    return;
  }
  std::string named;
  size_t leaders = 0;
  for (const RegionKillOutcome::Process& p : r.processes) {
    named += fmt::format("{}shard {} replica {} ({})", named.empty() ? "" : ", ", p.shard,
                         p.replica, p.leader ? "leader" : "follower");
    leaders += p.leader ? 1 : 0;
  }
  x->text += fmt::format(
      "region kill: region {} SIGKILLed at {:.1f} s, {} processes: {}; {} shards failed over; "
      "{}\n",
      r.region, r.killed_at_s, r.processes.size(), named, leaders,
      r.restarted_at_s >= 0 ? fmt::format("its replicas restarted at {:.1f} s", r.restarted_at_s)
                            : std::string("its replicas were not restarted"));
  if (!r.error.empty()) {
    x->text += fmt::format("region kill: FAILED: {}\n", r.error);
    if (x->verdict.ok()) x->verdict = Status::Unavailable("region kill: " + r.error);
  }
}

// One kill's lines of the report; a failed one sets x->verdict (the first failure kept).
void report_kill(const KillOutcome& k, size_t index, size_t count, RunExtras* x) {
  const std::string name =
      (k.observed ? std::string("observed ") : std::string()) +
      (count == 1 ? std::string("failover") : fmt::format("failover {} of {}", index + 1, count));
  const auto fail = [x](Status st) {
    if (x->verdict.ok()) x->verdict = std::move(st);
  };
  if (!k.killed && k.error.empty()) {
    x->text += fmt::format("{}: no kill of shard {} (the run ended before {:.1f} s)\n", name,
                           k.shard, k.planned_at_s);
    return;
  }
  if (!k.error.empty()) {
    x->text += fmt::format("{}: FAILED: {}\n", name, k.error);
    fail(Status::Unavailable(fmt::format("{}: {}", name, k.error)));
    return;
  }
  x->text += fmt::format(
      "{}: shard {}'s leader (replica {}) {} at {:.1f} s{}; replica {} leads in epoch {}: "
      "elected {:.0f} ms after the kill, first commit {:.0f} ms after the kill, failover "
      "{:.0f} ms (last commit seen before the kill to the first after)\n",
      name, k.shard, k.old_leader,
      k.observed ? "gone (not by this run; its last answer)"
      : k.hung   ? "hung (SIGSTOP)"
                 : "killed",
      k.killed_at_s,
      k.killed_at_s > k.planned_at_s + 0.5
          ? fmt::format(" (planned {:.1f} s: it waited, see above)", k.planned_at_s)
          : std::string(),
      k.new_leader, k.new_epoch, k.leader_elected_ms, k.kill_to_commit_ms, k.failover_ms);
  if (k.hung) {
    x->text += fmt::format(
        "the hung leader, resumed once replaced: exit status {} after {:.0f} ms ({})\n",
        k.deposed_exit_code, k.deposed_exit_ms,
        k.deposed_exit_code == kExitDeposed ? "deposed, as it must" : "NOT the deposed exit");
    if (k.deposed_exit_code != kExitDeposed) {
      fail(Status::Unavailable(
          fmt::format("the hung leader did not exit deposed (status {})", k.deposed_exit_code)));
    }
  }
}

nlohmann::json optional_json(const std::optional<double>& v) {
  return v.has_value() ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// The JSON's "series": one row per second of the run with the in-process runner's keys
// (bench/runner.cc), the second ending at t_s. Percentiles of a second that committed (or
// acknowledged) nothing are null. `acknowledged`: the servers count commit latency (a
// replicated TPC-C or bank run), so the commit keys are there.
nlohmann::json series_json(const WatchedRun& w, bool acknowledged) {
  nlohmann::json series = nlohmann::json::array();
  for (size_t i = 0; i < w.committed_per_second.size(); ++i) {
    const LatencySecond lat = i < w.latency.size() ? w.latency[i] : LatencySecond{};
    nlohmann::json row = {
        {"t_s", static_cast<double>(i + 1)},
        {"committed_per_sec", w.committed_per_second[i]},
        {"aborts_per_sec", i < w.aborts_per_second.size() ? w.aborts_per_second[i] : 0},
        {"latency_p50_us", optional_json(lat.latency_p50_us)},
        {"latency_p99_us", optional_json(lat.latency_p99_us)}};
    if (acknowledged) {
      row["acked_per_sec"] = lat.commit_count;
      row["commit_latency_p50_us"] = optional_json(lat.commit_latency_p50_us);
      row["commit_latency_p99_us"] = optional_json(lat.commit_latency_p99_us);
    }
    series.push_back(std::move(row));
  }
  return series;
}

// "120/950": a second's p50/p99 in us, "-" when it counted none.
std::string percentiles_text(const std::optional<double>& p50, const std::optional<double>& p99) {
  if (!p50.has_value() || !p99.has_value()) return "-";
  return fmt::format("{:.0f}/{:.0f}", *p50, *p99);
}

// The JSON keeps the single kill's keys (failover, failover_ms: the first kill) for the
// scripts that read them (scripts/plot-bench.py) and adds `kills`, one object per kill.
RunExtras watched_extras(const WatchedRun& w, bool acknowledged) {
  RunExtras x;
  x.json["committed_per_second"] = w.committed_per_second;
  x.json["series"] = series_json(w, acknowledged);
  if (w.kills.empty() && w.observed.empty() && !w.has_region_kill) return x;
  nlohmann::json kills = nlohmann::json::array();
  for (const KillOutcome& k : w.kills) kills.push_back(kill_json(k));
  for (const KillOutcome& k : w.observed) kills.push_back(kill_json(k));
  const KillOutcome* first = !w.kills.empty()      ? &w.kills[0]
                             : !w.observed.empty() ? &w.observed[0]
                                                   : nullptr;
  if (first != nullptr) {
    x.json["failover"] = kill_json(*first);
    x.json["failover_ms"] = first->failover_ms;
  }
  x.json["kills"] = std::move(kills);
  if (w.has_region_kill) x.json["region_kill"] = region_kill_json(w.region_kill);
  x.text += fmt::format("committed per second: {}\n", fmt::join(w.committed_per_second, " "));
  std::string speculative, commit;
  for (const LatencySecond& l : w.latency) {
    speculative += " " + percentiles_text(l.latency_p50_us, l.latency_p99_us);
    commit += " " + percentiles_text(l.commit_latency_p50_us, l.commit_latency_p99_us);
  }
  x.text += fmt::format("speculative latency p50/p99 per second (us):{}\n", speculative);
  if (acknowledged) x.text += fmt::format("commit latency p50/p99 per second (us):{}\n", commit);
  if (w.has_region_kill) report_region_kill(w.region_kill, &x);
  for (size_t i = 0; i < w.kills.size(); ++i) report_kill(w.kills[i], i, w.kills.size(), &x);
  for (size_t i = 0; i < w.observed.size(); ++i) {
    report_kill(w.observed[i], i, w.observed.size(), &x);
  }
  return x;
}

// A killed replica restarted during the run recovers its WAL before it dials its new leader:
// wait (bounded) until every follower of the shard is connected, so that the quiesce compares
// it too instead of reporting it lost.
void wait_for_rejoin(ControlClient& client, const cluster::ClusterConfig& config, uint32_t shard) {
  const uint32_t followers = static_cast<uint32_t>(config.shards[shard].replicas.size()) - 1;
  const uint64_t deadline = now_ms() + kRejoinTimeoutMs;
  fmt::print(stderr, "waiting for shard {}'s restarted replica to rejoin...\n", shard);
  while (now_ms() < deadline) {  // bounded by the deadline
    auto pong = client.call(shard, kPing, nlohmann::json::object(), kCallTimeoutMs);
    uint32_t connected = 0;
    if (pong.ok() && json_optional_field(*pong, "followers_connected", &connected).ok() &&
        connected >= followers) {
      return;
    }
    sleep_ms(100);
  }
  fmt::print(stderr, "shard {}: a follower did not rejoin within {} ms\n", shard, kRejoinTimeoutMs);
}

// Every acknowledged NewOrder the terminals journaled (ack_journal.h; in `dir`) must be in its
// home shard's final store.
void check_acknowledged(ControlClient& client, uint32_t shards, const std::string& dir,
                        RunExtras* x) {
  const AckCheck a = check_acknowledged_orders(client, shards, dir);
  x->json["acknowledged_checked"] = a.checked;
  x->json["acknowledged_lost"] = a.failures.empty() ? nlohmann::json(a.missing) : nlohmann::json();
  x->text += a.line();
  if (!a.failures.empty() && x->verdict.ok()) {
    x->verdict = Status::Corruption("acknowledged transactions lost or not checked:" + a.failures);
  }
}

// The server's "log" object is read field by field with checked reads: a field of another type
// (a server of another version, a corrupted reply) is reported on the line, never thrown.
std::string log_line(uint32_t shard, const ShardOutcome& so) {
  if (so.gone || !so.log.is_object()) return {};
  uint64_t txns = 0, bytes = 0, entries = 0, patches = 0;
  for (const auto& [name, field] :
       {std::pair{"txns", &txns}, std::pair{"bytes", &bytes}, std::pair{"entries", &entries},
        std::pair{"patches", &patches}}) {
    if (Status s = json_optional_field(so.log, name, field); !s.ok()) {
      return fmt::format("shard {} log: malformed report: {}\n", shard, s.message());
    }
  }
  return fmt::format(
      "shard {} log: {} entries, {:.1f} MiB, {:.0f} bytes per txn, {} puts as patches\n", shard,
      entries, static_cast<double>(bytes) / (1 << 20),
      txns ? static_cast<double>(bytes) / static_cast<double>(txns) : 0.0, patches);
}

// Dependency-vector bytes per transaction (src/txn/depvec.h), compact and as the same vectors
// take with every entry: in the leaders' log records (per logged transaction) and in the 2PC
// messages (per committed transaction). Into j["depvec"] (j["replication"] is the replicas'
// array on this path) and a line of text. Fields are
// read with checked reads: a malformed report is said on the line, never thrown.
void report_depvec(const std::vector<ShardOutcome>& shards, uint64_t committed, std::string* text,
                   nlohmann::json* j) {
  uint64_t log_txns = 0, log_bytes = 0, log_full = 0, log_entries = 0, log_omitted = 0;
  uint64_t wire_bytes = 0, wire_full = 0, wire_entries = 0, wire_omitted = 0;
  for (const ShardOutcome& so : shards) {
    if (so.gone || !so.log.is_object() || !so.wire_deps.is_object()) continue;
    uint64_t v[9] = {};
    Status s;
    const std::pair<const nlohmann::json*, const char*> fields[9] = {
        {&so.log, "txns"},
        {&so.log, "dep_bytes"},
        {&so.log, "dep_bytes_full"},
        {&so.log, "dep_entries"},
        {&so.log, "dep_entries_omitted"},
        {&so.wire_deps, "bytes"},
        {&so.wire_deps, "bytes_full"},
        {&so.wire_deps, "entries"},
        {&so.wire_deps, "entries_omitted"}};
    for (size_t i = 0; i < 9 && s.ok(); ++i)
      s = json_optional_field(*fields[i].first, fields[i].second, &v[i]);
    if (!s.ok()) {
      *text += fmt::format("dependency vectors: malformed report: {}\n", s.message());
      return;
    }
    log_txns += v[0];
    log_bytes += v[1];
    log_full += v[2];
    log_entries += v[3];
    log_omitted += v[4];
    wire_bytes += v[5];
    wire_full += v[6];
    wire_entries += v[7];
    wire_omitted += v[8];
  }
  const auto per = [](uint64_t bytes, uint64_t n) {
    return n == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(n);
  };
  const auto pct = [](uint64_t part, uint64_t whole) {
    return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  };
  (*j)["depvec"] = {{"log_bytes_per_txn", per(log_bytes, log_txns)},
                    {"log_bytes_per_txn_full", per(log_full, log_txns)},
                    {"wire_bytes_per_txn", per(wire_bytes, committed)},
                    {"wire_bytes_per_txn_full", per(wire_full, committed)},
                    {"counts",
                     {{"log_txns", log_txns},
                      {"log_bytes", log_bytes},
                      {"log_bytes_full", log_full},
                      {"log_entries", log_entries},
                      {"log_entries_omitted", log_omitted},
                      {"wire_committed_txns", committed},
                      {"wire_bytes", wire_bytes},
                      {"wire_bytes_full", wire_full},
                      {"wire_entries", wire_entries},
                      {"wire_entries_omitted", wire_omitted}}}};
  *text += fmt::format(
      "dependency vectors: log {:.2f} bytes per txn ({:.2f} with every entry; {:.0f}% of "
      "entries covered by the base, left out), 2PC wire {:.2f} bytes per committed txn ({:.2f} "
      "with every entry, as before; {:.0f}% left out)\n",
      per(log_bytes, log_txns), per(log_full, log_txns),
      pct(log_omitted, log_entries + log_omitted), per(wire_bytes, committed),
      per(wire_full, committed), pct(wire_omitted, wire_entries + wire_omitted));
}

Status report(const DistBenchOptions& o, const cluster::ClusterConfig& config, uint32_t workers,
              const std::vector<ShardOutcome>& shards, const MicroStats& total, bench::RunResult& r,
              const std::string& check_text, const nlohmann::json& check_json,
              const ReplicationReport& repl, const RunExtras& extras) {
  std::string text = r.to_table();
  const std::string requested =
      o.workload == "tpcc"
          ? fmt::format("TPC-C over {} warehouses", WarehouseMap(config).warehouses())
          : fmt::format("{}% cross-shard requested", o.cross_shard_pct);
  text.insert(0, fmt::format("\nshards: {} over {}, {} worker{} each, {} in flight per worker, "
                             "{}, {:.1f}% of commits cross-shard",
                             config.shards.size(), transport_label(config), workers,
                             workers == 1 ? "" : "s", o.inflight, requested,
                             total.committed ? 100.0 * static_cast<double>(total.committed_cross) /
                                                   static_cast<double>(total.committed)
                                             : 0.0));
  nlohmann::json j = r.to_json();
  if (total.latency_commit.count() > 0) {
    // Speculative (visible) is r.latency_us; acknowledged: the vectorized watermark covered
    // the transaction's vector (replicated clusters).
    const bench::LatencyUs& c = r.commit_latency_us;
    j["commit_latency_us"] = bench::latency_json(c);
    j["acknowledged"] = total.latency_commit.count();
    j["unacknowledged"] = total.unacknowledged;
    text += fmt::format(
        "commit latency (acknowledged: vector watermark covers the vector), {} txns: p50 {:.0f} "
        "us, p90 {:.0f}, p99 {:.0f}, p999 {:.0f}; speculative p50 {:.0f} us; {} never "
        "acknowledged\n",
        total.latency_commit.count(), c.p50, c.p90, c.p99, c.p999, r.latency_us.p50,
        total.unacknowledged);
  }
  j["shards"] = config.shards.size();
  j["workers_per_shard"] = workers;
  j["transport"] = cluster::transport_name(config.transport);
  if (config.transport == cluster::TransportKind::kFabric) {
    j["fabric_provider"] = net::FabricEndpoint::provider_name(server::fabric_options(config));
  }
  j["inflight"] = o.inflight;
  if (o.workload == "tpcc") {
    j["warehouses"] = WarehouseMap(config).warehouses();
    j["consistency"] = r.checked ? (r.consistent() ? "ok" : "failed") : "not checked";
  } else {
    j["cross_shard_pct"] = o.cross_shard_pct;
  }
  if (o.workload == "bank") {
    j["consistency"] = r.checked ? (r.consistent() ? "ok" : "failed") : "not checked";
    j.update(check_json);
  }
  const double per_worker =
      r.committed_per_sec / static_cast<double>(config.shards.size() * workers);
  j["committed_per_sec_per_worker"] = per_worker;
  if (o.baseline_committed_per_sec > 0) {
    const double ratio = per_worker / o.baseline_committed_per_sec;
    j["baseline_committed_per_sec"] = o.baseline_committed_per_sec;
    j["per_worker_vs_baseline"] = ratio;
    text += fmt::format(
        "per worker: {:.0f} committed/s = {:.1f}% of the single-shard, single-worker baseline "
        "({:.0f}/s, measured in this run)\n",
        per_worker, 100 * ratio, o.baseline_committed_per_sec);
  }
  j["committed_cross"] = total.committed_cross;
  j["unavailable"] = total.unavailable;
  j["failover_retries"] = total.failover_retries;
  j["in_doubt_committed"] = total.in_doubt_committed;
  j["in_doubt_lost"] = total.in_doubt_lost;
  if (total.failover_retries > 0) {
    text += fmt::format(
        "failover: {} attempts found a shard unreachable and were retried after "
        "the redial of its new leader\n",
        total.failover_retries);
  }
  if (total.in_doubt_committed + total.in_doubt_lost > 0) {
    text += fmt::format(
        "failover: {} transactions left in doubt at the failed shard were settled by its new "
        "leader's log: {} committed there, {} lost with it (undone, then retried)\n",
        total.in_doubt_committed + total.in_doubt_lost, total.in_doubt_committed,
        total.in_doubt_lost);
  }
  nlohmann::json per_shard = nlohmann::json::array();
  std::vector<std::string> gone;
  std::string first_gone_error;
  for (uint32_t s = 0; s < shards.size(); ++s) {
    const ShardOutcome& so = shards[s];
    per_shard.push_back({{"shard", s},
                         {"status", so.gone ? "unavailable" : "ok"},
                         {"error", so.gone ? so.error : so.stats.first_error},
                         {"committed", so.stats.committed},
                         {"failed", so.stats.failed},
                         {"released_orphans", so.orphaned}});
    if (so.log.is_object()) per_shard.back()["log"] = so.log;
    text += fmt::format(
        "shard {}: {}\n", s,
        so.gone
            ? "UNAVAILABLE: " + so.error
            : fmt::format("{} committed, {} failed{}", so.stats.committed, so.stats.failed,
                          so.stats.first_error.empty() ? std::string()
                                                       : " (first: " + so.stats.first_error + ")"));
    text += log_line(s, so);
    if (so.gone) {
      gone.push_back(fmt::format("shard {}", s));
      if (first_gone_error.empty()) first_gone_error = so.error;
    }
  }
  j["per_shard"] = per_shard;
  text += check_text;
  if (repl.enabled) {
    j["replicas"] = config.replicas_per_shard;
    j["replication"] = repl.json;
    j["replicas_identical"] = repl.verdict.ok();
    report_batching(repl, &text, &j);
    report_depvec(shards, total.committed, &text, &j);
    text += repl.text;
    text += repl.verdict.ok() ? "replicas: every follower identical to its leader\n"
                              : "replicas: " + repl.verdict.to_string() + "\n";
  }
  text += extras.text;
  j.update(extras.json);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << j.dump(2) << "\n";
    if (!f) return Status::IOError(fmt::format("--json: cannot write {}", o.json_path));
  }
  if (!extras.verdict.ok()) return extras.verdict;
  if (!gone.empty()) {
    return Status::Unavailable(
        fmt::format("{} unavailable during the run ({}); {} transactions "
                    "failed",
                    fmt::join(gone, ", "), first_gone_error, total.failed));
  }
  // Bank: a broken history or lost money outranks transactions that gave up (the check stands
  // without them: only committed ones are recorded).
  if (o.workload == "bank" && !r.consistent()) {
    return Status::Corruption("bank check failed (serializability or money)");
  }
  if (total.failed != 0) {
    return Status::Unavailable(
        fmt::format("{} transactions failed (first: {})", total.failed, total.first_error));
  }
  if (!r.consistent()) return Status::Corruption("consistency check failed");
  // A follower lost while its shard ran on is reported only; a shard whose replicas could not
  // be compared fails the run.
  if (repl.enabled && (repl.verdict.code() == Code::kCorruption || repl.shard_unverified)) {
    return repl.verdict;
  }
  return Status::Ok();
}

}  // namespace

Status run_dist_bench(const DistBenchOptions& o) {
  LocalCluster local;
  cluster::ClusterConfig remote;
  const cluster::ClusterConfig* config = nullptr;
  if (!o.cluster_path.empty()) {
    auto c = load_cluster_config(o.cluster_path);
    if (!c.ok()) return c.status();
    remote = std::move(*c);
    config = &remote;
  } else {
    if (o.workload == "tpcc") {
      fmt::print(stderr, "starting {} local shard servers ({} warehouses in all)...\n", o.shards,
                 o.warehouses);
    } else {
      fmt::print(stderr, "starting {} local shard servers ({} keys each)...\n", o.shards,
                 o.keys_per_partition);
    }
    SHOAL_TRY(start_local(o, &local));
    config = &local.config;
  }
  ControlClient client(*config);
  // A standing cluster (`cluster up` in its default run directory) may have failed over, and
  // may fail over during the run: its etcd says who leads.
  std::vector<std::string> etcd = local.etcd_endpoints;
  if (!o.cluster_path.empty()) {
    std::vector<std::string> endpoints =
        follow_run_dir_leaders(*config, fmt::format(".shoal/{}", config->name), &client);
    if (!endpoints.empty()) etcd = std::move(endpoints);
  }
  const uint32_t shards = static_cast<uint32_t>(config->shards.size());
  if (!local.procs.empty()) {
    if (Status s = wait_ready(client, local.procs, 120'000); !s.ok()) {
      local.keep_dir = true;  // keep the logs the error points at
      return s;
    }
  }
  uint32_t workers = 0;
  ReplicationReport repl;
  repl.enabled = config->replicas_per_shard > 1;
  for (uint32_t s = 0; s < shards; ++s) {
    auto pong = client.call(s, kPing, nlohmann::json::object(), kCallTimeoutMs);
    if (!pong.ok()) return pong.status();
    uint32_t batch_txns = 0;
    double batch_us = 0;
    std::string loaded = "micro";
    Status st = json_optional_field(*pong, "workers", &workers);
    if (st.ok()) st = json_optional_field(*pong, "batch_txns", &batch_txns);
    if (st.ok()) st = json_optional_field(*pong, "batch_us", &batch_us);
    if (st.ok()) st = json_optional_field(*pong, "workload", &loaded);
    if (!st.ok()) {
      return Status::InvalidArgument(fmt::format("shard {}'s ping reply: {}", s, st.to_string()));
    }
    repl.batch_txns.push_back(batch_txns);
    repl.batch_us.push_back(batch_us);
    if (loaded != o.workload) {
      return Status::InvalidArgument(fmt::format(
          "shard {} serves workload '{}', not '{}' (start the cluster with --workload {})", s,
          loaded, o.workload, o.workload));
    }
  }
  if (stopped(o)) return Status::Aborted("interrupted before the run started");
  MicroParams params{o.seconds, o.cross_shard_pct, o.inflight, o.seed};
  // A local bank run's workers write their acknowledged transactions to history files in the
  // run directory (bank_history_file.h), named by this run's id: they survive a killed leader.
  const bool history_files = o.workload == "bank" && !local.dir.empty();
  if (history_files) {
    Rng rng(static_cast<uint64_t>(getpid()) ^ RealEnv::instance().now_ns());
    params.history_run = rng.next() | 1;  // never 0 (0: no files)
  }
  auto schedule = make_kill_schedule(o.kill_leader_at, o.kill_shard, shards);
  if (!schedule.ok()) return schedule.status();
  fmt::print(stderr, "running {} on {} shards for {:.1f} s...\n", o.workload, shards, o.seconds);
  if (!o.kill_region.empty()) {
    SHOAL_TRY(check_region_kill(o.kill_leader_at, !o.kill_shard.empty(), o.hang_leader, *config,
                                o.kill_region));
  }
  KillPlan kill{std::move(*schedule), o.kill_region, o.hang_leader, nullptr};
  kill.restart = [&local](uint32_t shard, uint32_t replica) -> Status {
    auto p = spawn_follower(local.config, local.spawn, local.placement, shard, replica);
    if (!p.ok()) return p.status();
    fmt::print(stderr, "restarted shard {} replica {} (pid {}) as a follower\n", shard, replica,
               p->pid);
    local.procs.push_back(std::move(*p));
    return Status::Ok();
  };
  WatchedRun watched;
  SHOAL_TRY(run_watched(client, *config, local.procs, etcd, params, kill, o.stop, &watched));
  std::vector<ShardOutcome> outcomes;
  collect(client, shards, now_ms() + kCollectGraceMs, &outcomes);
  MicroStats total;
  for (const auto& so : outcomes) total.merge(so.stats);
  // The killed leaders' final statistics died with them: their commits count as last sampled.
  total.committed += watched.killed_leaders_committed();
  bench::RunResult r =
      make_result(o, shards, workers, total, watched.measured_s, watched.interrupted);
  std::string check_text;
  nlohmann::json check_json = nlohmann::json::object();
  std::vector<nlohmann::json> payments;
  if (o.workload == "tpcc") {
    check_tpcc(client, *config, outcomes, &r, &payments);
  } else if (o.workload == "bank") {
    BankHistorySource source;
    source.unlogged = watched.killed_leaders_committed();
    source.committed = total.committed;
    if (history_files) {
      source.dir = local.dir;
      source.run = params.history_run;
    }
    check_bank(client, outcomes, source, &r, &check_text, &check_json);
  } else {
    check(client, outcomes, total, &r);
  }
  std::vector<bool> rejoin(shards, false);
  // The shard's latest kill decides: a shard left without a leader has nobody to rejoin.
  for (const KillOutcome& k : watched.kills) {
    if (k.killed) rejoin[k.shard] = k.restarted && k.error.empty();
  }
  for (const RegionKillOutcome::Process& p : watched.region_kill.processes) {
    if (p.restarted && !p.leader) rejoin[p.shard] = true;  // a follower: its leader lives
  }
  for (uint32_t s = 0; s < shards; ++s) {
    if (rejoin[s]) wait_for_rejoin(client, *config, s);
  }
  if (repl.enabled) {
    fmt::print(stderr, "quiescing: closing every stream, waiting for the followers...\n");
    const std::vector<ShardReplicaStates> states =
        collect_replica_states(client, *config, payments, kQuiesceTimeoutMs);
    repl.verdict = replica_verdict(states, &repl.text, &repl.json, &repl.shard_unverified);
  }
  // Micro clients do not wait for their acknowledgement: no commit latency to report.
  RunExtras extras = watched_extras(watched, repl.enabled && o.workload != "micro");
  if (o.workload == "tpcc" && !local.dir.empty() && repl.enabled) {
    check_acknowledged(client, shards, local.dir, &extras);
  }
  Status s = report(o, *config, workers, outcomes, total, r, check_text, check_json, repl, extras);
  if ((!s.ok() || !repl.verdict.ok()) && !local.dir.empty()) {  // a lost follower too
    local.keep_dir = true;
    fmt::print(stderr, "server logs kept in {}\n", local.dir);
  }
  return s;
}

}  // namespace shoal::server

#include "src/server/replica_cli.h"

#include <filesystem>

#include <fmt/format.h>

#include "src/base/cpu_placement.h"
#include "src/base/process_memory.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/config.h"
#include "src/cluster/etcd_config_manager.h"
#include "src/ops/metrics_http.h"
#include "src/repl/bootstrap.h"
#include "src/repl/follower.h"
#include "src/repl/leader.h"
#include "src/server/cluster_config.h"
#include "src/server/discard_journal.h"
#include "src/server/payments_json.h"
#include "src/server/server_metrics.h"
#include "src/workload/tpcc/tpcc.h"
#include "src/workload/tpcc/tpcc_follower_reads.h"

namespace shoal::server {

namespace {

// The follower of replica options.replica of its shard, dialing `leader_replica` when run:
// everything run_replica and recover_and_lead share.
Result<repl::FollowerOptions> follower_options(const ReplicaOptions& options,
                                               const cluster::ClusterConfig& config,
                                               uint32_t leader_replica) {
  const cluster::Shard& shard = config.shards[options.shard];
  auto fsync = repl::parse_fsync(options.fsync, "--fsync");
  if (!fsync.ok()) return fsync.status();
  const cluster::Replica& leader = shard.replicas[leader_replica];
  const cluster::Replica& me = shard.replicas[options.replica];
  const auto one_way_ns = static_cast<uint64_t>(config.one_way_ms(leader.region, me.region) * 1e6);
  repl::FollowerOptions fo;
  fo.shard = options.shard;
  fo.replica = options.replica;
  fo.replicas = static_cast<uint32_t>(shard.replicas.size());
  fo.leader_replica = leader_replica;
  fo.leader_host = leader.host;
  fo.leader_port = cluster::replication_port(leader);
  fo.receive_shape = {one_way_ns, 0};
  fo.link = replication_link(config);
  fo.fabric = fabric_options(config);
  fo.data_dir = options.data_dir.empty()
                    ? cluster::replica_dir(".shoal/" + config.name, options.shard, options.replica)
                    : options.data_dir;
  fo.cluster_name = config.name;
  fo.fsync = *fsync;
  fo.paxos = repl::paxos_options_for_rtt(2 * one_way_ns);
  fo.paxos.max_message_bytes =
      repl::replication_message_bytes(fo.paxos, repl::BatchLimits{}.batch_bytes_max);
  // TPC-C across shards: the leader passes the payments other shards hold for this shard's
  // customers (the cluster-wide check, as on the shard servers: dist_tpcc.h).
  fo.check = [](txn::Engine& engine, const std::string& workload,
                const nlohmann::json& args) -> std::vector<std::string> {
    if (workload != "tpcc") return {};  // no conditions over a bare engine; digests cover it
    workload::ForeignPayments foreign;
    const Status parsed = payments_from_json(
        args.is_object() ? args.value("payments", nlohmann::json()) : nlohmann::json(),
        "check_args.payments", &foreign);
    if (!parsed.ok()) return {parsed.to_string()};
    return workload::check_tpcc_conditions(engine, /*after_load=*/false, &foreign);
  };
  fo.replay_nice = options.replay_nice;
  fo.checkpoint_interval_ms = options.checkpoint_interval_ms;
  // Suspecting a live leader only makes sense where someone can take over: etcd to agree on
  // who, and three replicas or more, so that a majority remains without the old leader (with
  // two, the deposed leader exits and its successor can never take over). The round trip to
  // the leader's region comes on top.
  if (!options.server.etcd.empty() && shard.replicas.size() >= 3) {
    fo.leader_timeout_ms = config.leader_timeout_ms + (2 * one_way_ns + 999'999) / 1'000'000;
    // A replica that may take over journals the cross-shard halves it replays, for the
    // FVW discard should another shard fail over with ours (a region: discard_journal.h).
    if (config.shards.size() > 1) {
      fo.replay_observer = std::make_shared<ReplayJournal>(options.shard);
    }
  }
  fo.serve_reads = options.serve_reads;
  fo.unsafe_snapshot_read_newest = options.unsafe_snapshot_read_newest;
  fo.read_rounds = [](txn::Engine& engine,
                      const std::string& workload) -> Result<repl::ReadRoundFn> {
    if (workload != "tpcc") {
      return Status::NotSupported("--serve-reads: workload " + workload +
                                  " has no read-only transactions (tpcc has)");
    }
    workload::tpcc::Tables tables;
    if (!workload::tpcc::find_tables(engine, &tables)) {
      return Status::Corruption("--serve-reads: the follower's engine lacks TPC-C tables");
    }
    return repl::ReadRoundFn(
        [tables](txn::SnapshotReader& reader, Rng& rng, txn::ReadRoundResult* out) {
          return workload::tpcc::snapshot_read_round(reader, tables, rng, out);
        });
  };
  fo.connect_timeout_ms = options.connect_timeout_ms;
  return fo;
}

Status confine_to_cpus(const ReplicaOptions& options) {
  if (options.cpus.empty()) return Status::Ok();
  auto cpus = parse_cpu_list(options.cpus, "--cpus");
  if (!cpus.ok()) return cpus.status();
  return confine_threads(0, *cpus);  // before any thread starts: they all inherit it
}

// The config, with options.shard in it.
Result<cluster::ClusterConfig> load_config_of_shard(const ReplicaOptions& options) {
  auto config = load_cluster_config(options.config_path);
  if (!config.ok()) return config.status();
  if (options.shard >= config->shards.size()) {
    return Status::InvalidArgument(
        fmt::format("--shard {}: the config has {} shards", options.shard, config->shards.size()));
  }
  return config;
}

// Defined below, with the other reads of etcd.
Result<std::vector<repl::EpochFence>> published_fences(const ReplicaOptions& options,
                                                       const cluster::ClusterConfig& config,
                                                       uint64_t epoch);
Result<uint64_t> current_epoch(const ReplicaOptions& options, const cluster::ClusterConfig& config);
Result<std::vector<uint32_t>> restart_leaders(const ReplicaOptions& options,
                                              const cluster::ClusterConfig& config, uint64_t epoch);

}  // namespace

Status run_replica(const ReplicaOptions& options) {
  auto config = load_config_of_shard(options);
  if (!config.ok()) return config.status();
  const cluster::Shard& shard = config->shards[options.shard];
  // The leader: replica 0 at first; the configuration manager's after a failover (a former
  // leader restarts as a follower of its successor).
  uint32_t leader_replica = 0;
  if (!options.server.etcd.empty()) {
    auto leader = current_leader(options, *config);
    if (!leader.ok()) return leader.status();
    leader_replica = *leader;
  }
  if (options.replica == leader_replica || options.replica >= shard.replicas.size()) {
    return Status::InvalidArgument(
        fmt::format("--replica {}: shard {} has replicas 0..{}, led by replica {}{}",
                    options.replica, options.shard, shard.replicas.size() - 1, leader_replica,
                    options.replica == leader_replica
                        ? " (the leader restarts from its disk as `shoal server --recover-epoch E`)"
                        : ""));
  }
  auto fo = follower_options(options, *config, leader_replica);
  if (!fo.ok()) return fo.status();
  if (!options.server.etcd.empty()) {  // before the WAL is replayed (Follower::open)
    auto epoch = current_epoch(options, *config);
    if (!epoch.ok()) return epoch.status();
    auto fences = published_fences(options, *config, *epoch);
    if (!fences.ok()) return fences.status();
    fo->fences = std::move(*fences);
  }
  SHOAL_TRY(confine_to_cpus(options));
  std::error_code ec;
  std::filesystem::create_directories(fo->data_dir, ec);
  if (ec) return Status::IOError("cannot create " + fo->data_dir + ": " + ec.message());
  auto follower = repl::Follower::open(*fo);
  if (!follower.ok()) return follower.status();
  const cluster::Replica& leader = shard.replicas[leader_replica];
  const cluster::Replica& me = shard.replicas[options.replica];
  std::fprintf(stderr, "replica %u of shard %u: following %s:%u from %s (one-way %.1f ms)\n",
               options.replica, options.shard, leader.host.c_str(), fo->leader_port,
               me.region.c_str(), config->one_way_ms(leader.region, me.region));
  return follow_and_take_over(options, *config, fo->data_dir, leader_replica, std::move(*follower));
}

Status recover_and_lead(const ReplicaOptions& options, uint64_t epoch) {
  auto config = load_config_of_shard(options);
  if (!config.ok()) return config.status();
  const cluster::Shard& shard = config->shards[options.shard];
  if (epoch < 2) {
    return Status::InvalidArgument(fmt::format(
        "--recover-epoch: {}: the first run is epoch 1, a restart comes after it", epoch));
  }
  if (options.replica >= shard.replicas.size()) {
    return Status::InvalidArgument(fmt::format("--replica {}: shard {} has replicas 0..{}",
                                               options.replica, options.shard,
                                               shard.replicas.size() - 1));
  }
  // Without etcd every shard is led by replica 0; with it, by whom etcd names in epoch E.
  std::vector<uint32_t> leaders(config->shards.size(), 0);
  if (!options.server.etcd.empty()) {
    auto named = restart_leaders(options, *config, epoch);
    if (!named.ok()) return named.status();
    leaders = std::move(*named);
  } else if (options.replica != 0) {
    return Status::InvalidArgument(fmt::format(
        "--replica {}: without --etcd a restarting leader is replica 0 (no configuration "
        "manager appointed another)",
        options.replica));
  }
  // Any other replica (itself, when it is the shard's only one): the follower is only opened
  // (its disk recovered), never run.
  auto fo = follower_options(options, *config,
                             (options.replica + 1) % static_cast<uint32_t>(shard.replicas.size()));
  if (!fo.ok()) return fo.status();
  if (!options.server.etcd.empty()) {  // as a restarting follower: before its WAL is replayed
    auto fences = published_fences(options, *config, epoch);
    if (!fences.ok()) return fences.status();
    fo->fences = std::move(*fences);
  }
  // Nothing is created over a missing or foreign directory (Follower::open would start an
  // empty replica there).
  SHOAL_TRY(repl::check_replica_dir_to_recover(fo->data_dir,
                                               {config->name, options.shard, options.replica}));
  SHOAL_TRY(confine_to_cpus(options));
  const uint64_t start_ns = RealEnv::instance().now_ns();
  auto follower = repl::Follower::open(*fo);
  if (!follower.ok()) return follower.status();
  if ((*follower)->wal_head_missing()) {
    // Its WAL was truncated behind checkpoints and none of them loads (each refusal was said
    // above): the store would lack the log's head, and no leader is there to serve it.
    return Status::NotFound(fmt::format(
        "--recover-epoch: {}: no checkpoint loads and its WAL was truncated behind them, so "
        "this leader cannot rebuild its store alone; copy the newest checkpoint-*.ckpt of a "
        "follower of shard {} into it and restart (a follower's newest cut is above every "
        "slot the leader deleted), or start it as a follower; not started",
        fo->data_dir, options.shard));
  }
  if (const uint32_t n = (*follower)->rejoining_streams(); n > 0) {
    // An acceptor that lost its state cannot vote, so its phase 1 could never complete.
    return Status::InvalidArgument(fmt::format(
        "--recover-epoch: {}: {} stream{} lost {} acceptor log (a stream-S.rejoin mark: the "
        "directory was lost and not yet caught up), so this replica cannot lead; restart the "
        "shard with a replica whose log is whole as its leader; not started",
        fo->data_dir, n, n == 1 ? "" : "s", n == 1 ? "its" : "their"));
  }
  const uint64_t applied = (*follower)->applied_tid();
  const uint64_t recovered = (*follower)->recovered_slots();
  Promotion p;
  p.replica = options.replica;
  p.epoch = epoch;
  p.leaders = std::move(leaders);
  auto takeover = (*follower)->hand_over(&p.engine);
  if (!takeover.ok()) return takeover.status();
  follower->reset();
  const auto& fences = takeover->applier->fences();
  if (!fences.empty() && fences.back().epoch >= epoch) {
    return Status::InvalidArgument(fmt::format(
        "--recover-epoch {}: {} already holds epoch {} (the run directory's up.json is older "
        "than its WAL?); restart with an epoch above it",
        epoch, fo->data_dir, fences.back().epoch));
  }
  std::fprintf(stderr,
               "shoal server: shard %u replica %u: recovered its store from %s in %.1f ms (%lu "
               "slots, applied TID %#lx); taking over in epoch %lu\n",
               options.shard, options.replica, fo->data_dir.c_str(),
               static_cast<double>(RealEnv::instance().now_ns() - start_ns) / 1e6, recovered,
               applied, epoch);
  p.takeover = std::move(*takeover);
  ServerOptions so = options.server;
  so.config_path = options.config_path;
  so.shard = options.shard;
  so.fsync = options.fsync;
  so.checkpoint_interval_ms = options.checkpoint_interval_ms;  // its fetches, once leading
  so.data_dir = fo->data_dir;
  return run_server(so, &p);
}

namespace {

// A replica reads etcd at start and at its leader's failure, when the machine is often at its
// busiest (a cluster starting, a region restarting): a local etcd then took over a second to
// answer (its own fsyncs) and the 1 s default made the replica exit. A dead etcd still fails
// at once (connection refused); only a slow one is waited for longer.
constexpr uint64_t kReplicaEtcdTimeoutMs = 5000;

Result<std::unique_ptr<cluster::EtcdConfigManager>> open_manager(const ReplicaOptions& options) {
  cluster::EtcdOptions eo;
  eo.endpoints = options.server.etcd;
  eo.timeout_ms = kReplicaEtcdTimeoutMs;
  return cluster::EtcdConfigManager::create(eo);
}

// The shard's leader as `store` holds it now.
Result<uint32_t> leader_in(cluster::ClusterStateStore& store, const ReplicaOptions& options,
                           const cluster::ClusterConfig& config) {
  auto state = store.load_state();
  if (!state.ok()) {
    return Status::Unavailable(
        fmt::format("--etcd: the cluster's state: {}", state.status().to_string()));
  }
  if (options.shard >= state->shards.size()) {
    return Status::Corruption(
        fmt::format("etcd holds {} shards for cluster {}", state->shards.size(), config.name));
  }
  return state->shards[options.shard].leader_replica;
}

}  // namespace

Result<uint32_t> current_leader(const ReplicaOptions& options,
                                const cluster::ClusterConfig& config) {
  auto manager = open_manager(options);
  if (!manager.ok()) return manager.status();
  cluster::ClusterStateStore store(**manager, config.name);
  return leader_in(store, options, config);
}

namespace {

// The epoch fences etcd holds for this replica's shard (repl::ReplayApplier::learn_fence): for
// every epoch E before `epoch` that ended with this shard's failover, (E + 1, the final
// watermark its new leader published before it sealed any epoch start). The log alone may
// bring a fence too late: an epoch start chosen on some streams only (its leader crashed
// right after) let a replica whose other stream ran ahead install the old epoch's records
// above F (issue 14, sim/epoch_change_sim_test.cc seed 14809). Bounded: one read per epoch.
Result<std::vector<repl::EpochFence>> published_fences(const ReplicaOptions& options,
                                                       const cluster::ClusterConfig& config,
                                                       uint64_t epoch) {
  auto manager = open_manager(options);
  if (!manager.ok()) return manager.status();
  cluster::ClusterStateStore store(**manager, config.name);
  std::vector<repl::EpochFence> fences;
  for (uint64_t e = 1; e < epoch; ++e) {
    auto f = store.final_watermark(e, options.shard);
    if (!f.ok()) {
      return Status::Unavailable(fmt::format("--etcd: shard {}'s final watermark of epoch {}: {}",
                                             options.shard, e, f.status().to_string()));
    }
    if (f->has_value() && **f != cluster::kInfiniteWatermark) fences.push_back({e + 1, **f});
  }
  return fences;
}

// Every shard's leader as etcd names it for a restart in `epoch` (`cluster up` moved etcd
// there: ClusterStateStore::restart_in_epoch), which must name this replica for its shard:
// a leader started against another epoch, or not appointed, is refused before it touches its
// followers (they would promise its ballot).
Result<std::vector<uint32_t>> restart_leaders(const ReplicaOptions& options,
                                              const cluster::ClusterConfig& config,
                                              uint64_t epoch) {
  auto manager = open_manager(options);
  if (!manager.ok()) return manager.status();
  auto state = cluster::ClusterStateStore(**manager, config.name).load_state();
  if (!state.ok()) {
    return Status::Unavailable(fmt::format("--recover-epoch {}: the cluster state in etcd: {}",
                                           epoch, state.status().to_string()));
  }
  if (state->shards.size() != config.shards.size()) {
    return Status::InvalidArgument(
        fmt::format("--recover-epoch {}: etcd holds {} shards of cluster '{}', the config {}",
                    epoch, state->shards.size(), config.name, config.shards.size()));
  }
  const uint32_t named = state->shards[options.shard].leader_replica;
  if (state->epoch != epoch || named != options.replica) {
    return Status::InvalidArgument(fmt::format(
        "--recover-epoch {}: etcd is at epoch {} and names replica {} as shard {}'s leader, not "
        "replica {} in epoch {} (`cluster up` moves etcd to the restart's epoch first); refused, "
        "nothing written",
        epoch, state->epoch, named, options.shard, options.replica, epoch));
  }
  std::vector<uint32_t> leaders;
  for (const cluster::ShardState& sh : state->shards) leaders.push_back(sh.leader_replica);
  return leaders;
}

// The current epoch in etcd.
Result<uint64_t> current_epoch(const ReplicaOptions& options,
                               const cluster::ClusterConfig& config) {
  auto manager = open_manager(options);
  if (!manager.ok()) return manager.status();
  cluster::ClusterStateStore store(**manager, config.name);
  auto state = store.load_state();
  if (!state.ok()) return state.status();
  return state->epoch;
}

}  // namespace

namespace {

// Who leads the shard after `failed` (replica_cli.h): the configuration manager's answer (one
// compare-and-swap per surviving replica decides). Sets *epoch to the epoch the new leader logs
// in and *leaders to every shard's leader, and in *p (when not null) every shard's since_epoch
// and the one `failed` took over in.
// The compare-and-swap is on the cluster's epoch, which every shard's change moves: one lost
// to another shard's change (a region failing: its shards stand at once) leaves `failed`
// named here, and is tried again at the new epoch (bounded by kStandAttemptsMax).
constexpr uint32_t kStandAttemptsMax = 64;  // > the shards that may stand at once (kShardsMax)
Result<uint32_t> next_leader(const ReplicaOptions& options, const cluster::ClusterConfig& config,
                             uint32_t failed, uint64_t* epoch, std::vector<uint32_t>* leaders,
                             Promotion* p = nullptr) {
  leaders->assign(config.shards.size(), 0);
  auto manager = open_manager(options);
  if (!manager.ok()) return manager.status();
  cluster::ClusterStateStore store(**manager, config.name);
  auto state = store.load_state();
  if (!state.ok()) return state.status();
  if (state->shards.size() != config.shards.size()) {
    return Status::Corruption(fmt::format("etcd holds {} shards for cluster {}, the config {}",
                                          state->shards.size(), config.name, config.shards.size()));
  }
  cluster::ClusterState now = *state;
  const uint64_t failed_since = now.shards[options.shard].since_epoch;
  for (uint32_t attempt = 0;  // not replaced yet: stand
       now.shards[options.shard].leader_replica == failed && attempt < kStandAttemptsMax;
       ++attempt) {
    auto change = store.begin_epoch_change(now.epoch, options.shard, options.replica);
    if (!change.ok()) return change.status();
    now = change->state;
  }
  *epoch = now.epoch;
  for (uint32_t s = 0; s < now.shards.size(); ++s) (*leaders)[s] = now.shards[s].leader_replica;
  if (p != nullptr) {
    p->since_epochs.clear();
    for (const cluster::ShardState& s : now.shards) p->since_epochs.push_back(s.since_epoch);
    p->predecessor_since_epoch = failed_since;
  }
  return (*leaders)[options.shard];
}

// Up to kSuccessorGraceMs for etcd to name another leader than `failed` (the designated
// successor standing), looking every kSuccessorPollMs: a fixed sleep of the whole grace made
// the successor's phase 1 wait for this replica's dial (a majority of 3 needs it) and was most
// of a failover's time. Errors end the wait: next_leader reports them.
void wait_for_successor(const ReplicaOptions& options, const cluster::ClusterConfig& config,
                        uint32_t failed) {
  auto manager = open_manager(options);
  if (!manager.ok()) return;
  cluster::ClusterStateStore store(**manager, config.name);
  const uint64_t deadline_ns = RealEnv::instance().now_ns() + kSuccessorGraceMs * 1'000'000;
  while (RealEnv::instance().now_ns() < deadline_ns) {  // bounded by the grace
    Result<uint32_t> leader = leader_in(store, options, config);
    if (!leader.ok() || *leader != failed) return;
    RealEnv::instance().sleep_ns(kSuccessorPollMs * 1'000'000);
  }
}

// A rejoining replica does not stand: it waits (up to its connect timeout) for etcd to name a
// leader other than `failed`, and learns the fences published since.
Result<uint32_t> wait_for_other_leader(const ReplicaOptions& options,
                                       const cluster::ClusterConfig& config, uint32_t failed) {
  auto manager = open_manager(options);
  if (!manager.ok()) return manager.status();
  cluster::ClusterStateStore store(**manager, config.name);
  const uint64_t deadline_ns =
      RealEnv::instance().now_ns() + options.connect_timeout_ms * 1'000'000;
  while (RealEnv::instance().now_ns() < deadline_ns) {  // bounded by the connect timeout
    Result<uint32_t> leader = leader_in(store, options, config);
    if (leader.ok() && *leader != failed) return *leader;
    RealEnv::instance().sleep_ns(kSuccessorPollMs * 1'000'000);
  }
  return Status::Unavailable(fmt::format(
      "replica {}: shard {}'s leader (replica {}) failed while this replica was still rejoining "
      "without a vote, and no other replica was named within {} ms",
      options.replica, options.shard, failed, options.connect_timeout_ms));
}

// GET /metrics for this follower (ServerOptions::metrics_port, else the config's); null when
// neither names a port. REQUIRES: the result is destroyed before `follower`.
Result<std::unique_ptr<ops::MetricsHttp>> start_follower_metrics(const ReplicaOptions& options,
                                                                 const cluster::Replica& me,
                                                                 const std::string& data_dir,
                                                                 const repl::Follower* follower) {
  const uint16_t port =
      options.server.metrics_port != 0 ? options.server.metrics_port : me.metrics_port;
  if (port == 0) return std::unique_ptr<ops::MetricsHttp>();
  FollowerMetricsView v;
  v.shard = options.shard;
  v.replica = options.replica;
  v.follower = follower;
  v.data_dir = data_dir;
  auto http = ops::MetricsHttp::start(me.host, port, [v]() mutable {
    v.rss_bytes = current_rss_bytes();
    ops::MetricsText m;
    render_follower_metrics(v, &m);
    return m.text();
  });
  if (!http.ok()) return http.status();
  std::fprintf(stderr, "replica %u of shard %u: metrics on http://%s:%u/metrics\n", options.replica,
               options.shard, me.host.c_str(), (*http)->port());
  return std::move(*http);
}

}  // namespace

Status follow_and_take_over(const ReplicaOptions& options, const cluster::ClusterConfig& config,
                            const std::string& data_dir, uint32_t leader,
                            std::unique_ptr<repl::Follower> follower) {
  const cluster::Shard& shard = config.shards[options.shard];
  auto metrics =
      start_follower_metrics(options, shard.replicas[options.replica], data_dir, follower.get());
  if (!metrics.ok()) return metrics.status();
  // Bounded: each round follows one leader until it is gone; a replica that cannot reach a
  // majority ends in its connect timeout (Unavailable).
  for (uint32_t round = 0; round < kLeaderChangesMax; ++round) {
    const Status s = follower->run();
    const bool unreachable = follower->leader_unreachable();
    std::fprintf(stderr, "replica %u: leader %u %s (%s); applied up to TID %lu\n", options.replica,
                 leader,
                 unreachable                 ? "unreachable"
                 : follower->leader_silent() ? "silent"
                                             : "gone",
                 s.to_string().c_str(), follower->applied_tid());
    // A leader we could not reach for the whole connect timeout counts as failed, like one
    // whose connection ended; any other error is ours (the WAL, a malformed schema): fatal.
    if (!s.ok() && !(unreachable && !options.server.etcd.empty())) return s;
    // Without a configuration manager nobody can tell a dead leader from one that stopped (a
    // benchmark's end), and with two replicas no successor has a majority: the follower stops
    // with it, as before.
    if (options.server.etcd.empty() || follower->leader_stopped() || shard.replicas.size() < 3) {
      return Status::Ok();
    }
    // The leader's designated successor replayed furthest (the leader paced itself by it):
    // the others give it kSuccessorGraceMs to stand first, so the takeover installs the
    // smallest backlog; if it is gone too, they stand after the grace.
    const uint32_t successor = follower->successor_hint();
    if (successor != repl::Follower::kNoReplica && successor != options.replica &&
        successor != leader) {
      std::fprintf(stderr, "replica %u: replica %u is the designated successor: %lu ms for it\n",
                   options.replica, successor, kSuccessorGraceMs);
      wait_for_successor(options, config, leader);
    }
    if (follower->rejoining_streams() > 0) {
      // It cannot vote yet (it lost its directory: docs/REPLICATION.md), so it cannot lead:
      // another replica stands; it follows whoever etcd names next.
      std::fprintf(stderr,
                   "replica %u: still rejoining after a lost directory (%u streams without a "
                   "vote): not standing; waiting for etcd to name another leader\n",
                   options.replica, follower->rejoining_streams());
      auto named = wait_for_other_leader(options, config, leader);
      if (!named.ok()) return named.status();
      auto epoch = current_epoch(options, config);
      if (!epoch.ok()) return epoch.status();
      auto fences = published_fences(options, config, *epoch);  // before it replays theirs
      if (!fences.ok()) return fences.status();
      follower->learn_fences(*fences);
      leader = *named;
      const cluster::Replica& r = shard.replicas[leader];
      follower->set_leader(leader, r.host, cluster::replication_port(r));
      continue;
    }
    uint64_t epoch = 0;
    std::vector<uint32_t> leaders;
    Promotion p;
    auto next = next_leader(options, config, leader, &epoch, &leaders, &p);
    if (!next.ok()) {
      return Status::Unavailable(fmt::format("replica {}: no next leader for shard {}: {}",
                                             options.replica, options.shard,
                                             next.status().to_string()));
    }
    // Before anything the new leader sends is replayed, and before this replica takes over.
    auto fences = published_fences(options, config, epoch);
    if (!fences.ok()) return fences.status();
    follower->learn_fences(*fences);
    if (*next != options.replica) {
      leader = *next;
      const cluster::Replica& r = shard.replicas[leader];
      std::fprintf(stderr, "replica %u: following replica %u at %s:%u (epoch %lu)\n",
                   options.replica, leader, r.host.c_str(), cluster::replication_port(r), epoch);
      follower->set_leader(leader, r.host, cluster::replication_port(r));
      continue;
    }
    std::fprintf(stderr, "replica %u: taking over shard %u in epoch %lu\n", options.replica,
                 options.shard, epoch);
    metrics->reset();  // it reads the follower; the server serves /metrics on the same port
    p.replica = options.replica;
    p.epoch = epoch;
    p.leaders = std::move(leaders);
    auto takeover = follower->hand_over(&p.engine);
    if (!takeover.ok()) return takeover.status();
    p.takeover = std::move(*takeover);
    follower.reset();
    ServerOptions so = options.server;
    so.config_path = options.config_path;
    so.shard = options.shard;
    so.fsync = options.fsync;
    so.checkpoint_interval_ms = options.checkpoint_interval_ms;  // its fetches, once leading
    so.checkpoint_interval_ms = options.checkpoint_interval_ms;  // its fetches, once leading
    so.data_dir = data_dir;
    // Placed as the leader was (--worker-cpus), the rest where the follower ran (--cpus).
    so.other_cpus = so.worker_cpus.empty() ? std::string() : options.cpus;
    return run_server(so, &p);
  }
  return Status::Unavailable(
      fmt::format("replica {}: {} leader changes: giving up", options.replica, kLeaderChangesMax));
}

}  // namespace shoal::server

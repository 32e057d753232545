// A shard server's start-up (config, engine, data, workers and their dials to the other shards)
// and serving (the acceptors, the Redis and client ports, /metrics, etcd, peer health), and
// run_server (shard_server.h). Its other parts: shard_server_impl.h.
#include "src/server/shard_server_impl.h"

#include <signal.h>

#include <cstdlib>
#include <string_view>

namespace shoal::server {
namespace detail {
namespace {
void on_signal(int) {
  g_stop.store(true);
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Start-up

// Confines this process to --other-cpus before it starts any thread (every thread inherits it)
// and keeps --worker-cpus for the worker threads, which pin themselves.
Status ShardServer::apply_placement() {
  if (options_.worker_cpus.empty() != options_.other_cpus.empty()) {
    return Status::InvalidArgument("--worker-cpus and --other-cpus go together");
  }
  if (options_.worker_cpus.empty()) return Status::Ok();
  auto workers = parse_cpu_list(options_.worker_cpus, "--worker-cpus");
  if (!workers.ok()) return workers.status();
  auto others = parse_cpu_list(options_.other_cpus, "--other-cpus");
  if (!others.ok()) return others.status();
  if (workers->size() != options_.workers) {
    return Status::InvalidArgument(fmt::format("--worker-cpus '{}': {} cpus for {} workers",
                                               options_.worker_cpus, workers->size(),
                                               options_.workers));
  }
  for (int c : *workers) {
    if (std::find(others->begin(), others->end(), c) != others->end()) {
      return Status::InvalidArgument(fmt::format(
          "--worker-cpus '{}' and --other-cpus '{}' share cpu {}: a worker's core is its own",
          options_.worker_cpus, options_.other_cpus, c));
    }
  }
  SHOAL_TRY(confine_threads(0, *others));
  worker_cpus_ = std::move(*workers);
  return Status::Ok();
}

Status ShardServer::init(const ServerOptions& options, Promotion* promotion) {
  options_ = options;
  auto config = load_cluster_config(options.config_path);
  if (!config.ok()) return config.status();
  config_ = std::move(*config);
  if (options.shard >= config_.shards.size()) {
    return Status::InvalidArgument(fmt::format("--shard: {} not in the config ({} shard{})",
                                               options.shard, config_.shards.size(),
                                               config_.shards.size() == 1 ? "" : "s"));
  }
  if (config_.shards.size() > kShardsMax) {
    return Status::InvalidArgument(
        fmt::format("shards: {} shards, at most {} supported", config_.shards.size(), kShardsMax));
  }
  if (options_.workers == 0) options_.workers = config_.workers_per_shard;
  if (options_.checkpoint_interval_ms > 0 && !replicated()) {
    // A lone replica compacts its WAL into checkpoints (leader.h); with no WAL the flag would
    // do nothing.
    return Status::InvalidArgument(
        "--checkpoint-interval-ms: a shard of one replica keeps a WAL to checkpoint only with "
        "--data-dir");
  }
  if (!config_.resp_password_file.empty()) {
    auto pw = cluster::read_password_file(config_.resp_password_file, "cluster.resp_password_file");
    if (!pw.ok()) return pw.status();
    resp_password_ = std::move(*pw);
  }
  leaders_.assign(config_.shards.size(), 0);
  if (promotion != nullptr) {
    if (promotion->leaders.size() != config_.shards.size()) {
      return Status::InvalidArgument(fmt::format("promotion: {} leaders for {} shards",
                                                 promotion->leaders.size(), config_.shards.size()));
    }
    me_ = promotion->replica;
    epoch_ = promotion->epoch;
    // HISTORY keys carry the load number: a promoted leader's loads must not reuse those of
    // the leaders before it (their rows are in the store).
    loads_started_ = static_cast<uint32_t>((epoch_ & 0xff) << 8);
    leaders_ = promotion->leaders;
    for (uint32_t s = 0; s < leaders_.size(); ++s) {
      if (leaders_[s] >= config_.shards[s].replicas.size()) {
        return Status::InvalidArgument(
            fmt::format("promotion: shard {} has no replica {}", s, leaders_[s]));
      }
    }
  }
  watch_leaders_ = leaders_;
  if (promotion != nullptr && promotion->since_epochs.size() == leaders_.size()) {
    for (uint32_t s = 0; s < leaders_.size(); ++s) {
      // Changed while our predecessor led: it may have died before following it.
      if (s != options_.shard && promotion->since_epochs[s] > promotion->predecessor_since_epoch) {
        watch_leaders_[s] = kNoReplica;
      }
    }
  }
  SHOAL_TRY(apply_placement());
  SHOAL_TRY(apply_batching());
  layout_ = std::make_unique<KeyLayout>(config_, options.keys_per_partition);
  if (promotion != nullptr) {
    SHOAL_TRY(adopt_store(*promotion));
  } else if (options_.workload == "tpcc") {
    SHOAL_TRY(load_tpcc());
  } else if (options_.workload == "micro" || options_.workload == "bank") {
    for (uint32_t s = 0; s < config_.shards.size(); ++s) {
      if (layout_->hi(s) - layout_->lo(s) < kMicroKeysPerTxn) {
        return Status::InvalidArgument(fmt::format(
            "--keys-per-partition: shard {} would own fewer than {} keys", s, kMicroKeysPerTxn));
      }
    }
    SHOAL_TRY(load_table());
  } else {
    return Status::InvalidArgument(
        fmt::format("--workload: '{}' is not micro, tpcc or bank", options_.workload));
  }
  // Every shard keeps the Redis front end's keys and serves its fragments, whether or not this
  // server listens on a RESP port: any server's coordinator may reach our keys.
  auto kv = kv_table(*engine_);
  if (!kv.ok()) return kv.status();
  kv_table_ = *kv;
  register_kv_fragments(&fragments_, kv_table_);
  auto listener = net::TcpListener::listen(me().host, me().port);
  if (!listener.ok()) {
    return Status::IOError(fmt::format("shard[{}].replica[{}]: cannot listen on {}:{}: {}",
                                       options_.shard, me_, me().host, me().port,
                                       listener.status().to_string()));
  }
  listener_ = std::move(*listener);
  // The early acceptor first: other shards dial us while we wait for our followers.
  SHOAL_TRY(start_early_acceptor());
  if (replicated()) SHOAL_TRY(start_replication(promotion));
  const uint64_t deadline_ns = RealEnv::instance().now_ns() + options_.connect_timeout_ms * kMs;
  for (uint32_t w = 0; w < options_.workers; ++w) SHOAL_TRY(make_worker(w, deadline_ns));
  return Status::Ok();
}

txn::EngineOptions ShardServer::engine_options() const {
  txn::EngineOptions eo;
  eo.shard_id = options_.shard;
  eo.lock_wait_spins_max = 16;  // locks live for network round trips: fail fast, retry
  eo.unsafe_skip_read_validation = options_.unsafe_skip_read_validation;
  if (eo.unsafe_skip_read_validation) {
    fmt::print(stderr, "shoal server: shard {}: UNSAFE: read validation is off (test only)\n",
               options_.shard);
  }
  return eo;
}

// The micro table (MicroValue per key) or the bank's accounts (BankAccount): one table, id 0.
Status ShardServer::load_table() {
  engine_ = std::make_unique<txn::Engine>(engine_options());
  table_ = engine_->create_table<1>(is_bank() ? "bank" : "micro");
  const uint64_t lo = layout_->lo(options_.shard), hi = layout_->hi(options_.shard);
  MicroValue v{};
  for (char& c : v.payload) c = 'x';
  const BankAccount account{kBankInitialBalance, 0, check::kInitialTxn};
  for (uint64_t k = lo; k < hi; ++k) {
    SHOAL_TRY(is_bank() ? table_->load(key1(k), account) : table_->load(key1(k), v));
  }
  return Status::Ok();
}

// The workload a shard server runs: this shard's warehouses (warehouse_map_), whether it loads
// them or a promotion finds them replicated. REQUIRES: warehouse_map_ set.
workload::TpccOptions ShardServer::tpcc_options() const {
  workload::TpccOptions to;
  to.warehouses = warehouse_map_->warehouses();
  to.load_first_warehouse = warehouse_map_->first(options_.shard);
  to.load_last_warehouse = warehouse_map_->last(options_.shard);
  to.read_only_hint = options_.tpcc_read_only_hint;
  return to;
}

workload::LoadOptions ShardServer::tpcc_load_options() const {
  workload::LoadOptions lo;
  lo.warehouses = warehouse_map_->warehouses();
  lo.seed = 1;  // every shard: the same ITEM rows and NURand constants
  return lo;
}

Status ShardServer::load_tpcc() {
  warehouse_map_ = std::make_unique<WarehouseMap>(config_);
  const WarehouseMap& map = *warehouse_map_;
  if (map.warehouses() > workload::tpcc::kMaxWarehouses) {
    return Status::InvalidArgument(fmt::format("shards: partitions are warehouses, at most {}",
                                               workload::tpcc::kMaxWarehouses));
  }
  txn::EngineOptions eo = engine_options();
  // Without replication every version is as stable as it gets once installed, so the
  // vectorized watermark covers every dependency at once (EngineOptions); with it, versions
  // carry the vectors acknowledgement will wait on.
  eo.track_dependencies = replicated();
  engine_ = std::make_unique<txn::Engine>(eo);
  tpcc_ = std::make_unique<workload::TpccWorkload>(tpcc_options());
  workload::LoadOptions lo = tpcc_load_options();
  lo.workers = options_.workers;
  SHOAL_TRY(tpcc_->load(*engine_, lo, nullptr));
  fragments_ = make_tpcc_fragments(&tpcc_->tables());
  return Status::Ok();
}

Status ShardServer::make_worker(uint32_t index, uint64_t deadline_ns) {
  auto w = std::make_unique<Worker>();
  w->server = this;
  w->server_shard = options_.shard;
  w->index = index;
  rt::LoopOptions lo;
  lo.max_pollers = kIncomingMax + kShardsMax + 8;
  // Poll between every two tasks: a request from another shard (or a reply to one of ours)
  // is served after at most one local transaction, not after a whole batch of them. Each
  // cross-shard round trip would otherwise wait for both loops' batches, and it holds locks
  // on rows other transactions wait for all that time. Measured (docs/OPERATIONS.md):
  // TPC-C on 2 shards 118K/s with 256, 184K/s with 1.
  lo.ready_batch = 1;
  // A worker with no peers (one shard, no replication: no 2PC and no replication traffic on
  // this loop) has nothing to spin for: its inputs are client sockets, whose epoll fd wakes the
  // loop. The spin only burned what the clients left idle: about 15% of the server's CPU
  // under pipelined GETs (docs/RESULTS.md, "Pipelined GETs per server core, again").
  if (config_.shards.size() == 1 && !cluster_replicated()) lo.spin_ns = 0;
  // Room of their own for the load's clients and acknowledgements and the ports' (RESP: a
  // task per client with a request in flight, and one per pending acknowledgement), so that
  // other shards' requests always find some (worker_tasks.h).
  WorkerTaskNeeds needs;
  if (cluster_replicated()) needs.load_acks = kPendingAcksMax;
  needs.terminals = kTerminalsMax;
  if (resp_enabled()) needs.resp_connections = options_.resp_max_connections;
  if (client_enabled()) needs.client_connections = options_.client_max_connections;
  if (kv_enabled()) needs.kv_acks = kPendingAcksMax;
  lo.max_tasks = worker_max_tasks(needs);
  w->loop = std::make_unique<rt::EventLoop>(RealEnv::instance(), lo);
  dist::ParticipantOptions po;
  po.inflight_max = 8192;          // every remote worker's in-flight transactions, with room
  po.lease_ns = 2000 * kMs;        // > a live coordinator's gap on a loaded machine
  po.tombstone_ns = 10'000 * kMs;  // > the RPC deadline
  w->participant = std::make_unique<dist::Participant>(*engine_, options_.shard, po);
  // A promoted leader's requests carry its epoch; it refuses older ones (the deposed leader's
  // coordinators', and other shards' until they learn of the failover and redial).
  w->epoch = epoch_;
  w->participant->advance_epoch(epoch_);
  w->participant->set_fragments(&fragments_);
  if (decisions_ != nullptr) w->participant->set_decision_lookup(&find_decision, this);
  w->service = std::make_unique<dist::ParticipantService>(*w->participant, *w->loop);
  const char* compact = std::getenv("SHOAL_DEPVEC_COMPACT");
  w->compact_vectors = compact == nullptr || std::string_view(compact) != "0";
  w->service->set_compact_vectors(w->compact_vectors);
  if (replication_ != nullptr) w->service->set_watermark_source(replication_->watermark_source());
  if (cluster_replicated()) {
    w->vector_watermark = std::make_unique<dist::VectorWatermark>(
        *w->loop, static_cast<uint32_t>(config_.shards.size()), kPendingAcksMax + kTerminalsMax);
    w->pending_acks.resize(kPendingAcksMax);
    for (uint32_t i = kPendingAcksMax; i > 0; --i) w->free_acks.push_back(i - 1);
    // A shard without replicas has everything it installed covered: ours too.
    if (replication_ == nullptr) {
      SHOAL_TRY(w->vector_watermark->raise(options_.shard, dist::wire::kNoReplicationWatermark));
    }
    w->service->set_vector_watermark(w->vector_watermark.get());
    if (lost_through_ != 0) {  // promoted: what our predecessor lost is never acknowledged
      auto fenced = w->vector_watermark->fence(options_.shard, lost_above_, lost_through_);
      if (!fenced.ok()) return fenced.status();
    }
  }
  w->self_link = dist::LocalLink::make_direct(*w->participant, *w->loop, w->link_rng);
  w->peers.resize(config_.shards.size());
  std::vector<dist::ShardLink*> links(config_.shards.size());
  for (uint32_t s = 0; s < config_.shards.size(); ++s) {
    if (s == options_.shard) {
      links[s] = w->self_link.get();
      continue;
    }
    SHOAL_TRY(dial_current_leader(*w, s, deadline_ns));
    links[s] = w->peers[s]->link();
  }
  for (uint32_t s = 0; s < config_.shards.size(); ++s) {
    // Followed at the watch's first look (not the leader the watch starts from: it changed
    // while our predecessor led, which may have died before following it, or the dial found
    // etcd naming another): until then, no word of its new leader covers its
    // lost TIDs, and no transaction reads here: our replayed store may hold halves of its lost
    // transactions, and a transaction touching its new leader would hide that dependency
    // behind its new-epoch TID there (participant.h, await_failover_of; Worker::redial).
    if (s == options_.shard || watch_leaders_[s] == leaders_[s]) continue;
    if (w->vector_watermark != nullptr) w->vector_watermark->hold(s);
    w->participant->await_failover_of(s);
  }
  dist::CoordinatorOptions co;
  co.shard_id = options_.shard;
  co.worker_id = index;
  co.max_retries = 1000;  // backoff caps each wait at 2 ms: a hot row on a loaded box
  co.backoff_loop = w->loop.get();
  co.first_seq = ((epoch_ & 0xff) << 32) + 1;  // above every id of the leaders before us
  w->coordinator = std::make_unique<dist::Coordinator>(co, links, &w->epoch);
  if (w->vector_watermark != nullptr) {
    dist::WatermarkExchangeOptions xo;
    xo.shard = options_.shard;
    if (replication_ != nullptr) xo.source = replication_->watermark_source();
    // Tests only: a long period shows that acknowledgements do not wait for the tick
    // (our own entry rises by entries_chosen; other shards' through replies and the tick).
    if (const char* p = std::getenv("SHOAL_WATERMARK_EXCHANGE_PERIOD_US"); p != nullptr) {
      const uint64_t us = std::strtoull(p, nullptr, 10);
      if (us > 0) xo.period_ns = us * 1000;
    }
    w->watermark_exchange =
        std::make_unique<dist::WatermarkExchange>(*w->loop, *w->vector_watermark, xo);
    for (uint32_t s = 0; s < links.size(); ++s) {
      if (s != options_.shard) SHOAL_TRY(w->watermark_exchange->add_link(s, *links[s]));
    }
  }
  if (replication_ != nullptr) {
    // Both places this worker's thread commits: the participant (every coordinator's
    // installs here) and, for TPC-C, the terminals' local Worker.
    w->appender = &replication_->appender(index);
    // Records name only the dependencies our vectorized watermark does not cover as stable
    // (src/txn/depvec.h); the appender appends on this worker's thread, as the watermark's.
    if (w->vector_watermark != nullptr && w->compact_vectors) {
      w->appender->set_dep_base(w->vector_watermark->base());
    }
    if (follows_failovers() && config_.shards.size() > 1 && w->vector_watermark != nullptr) {
      w->discard_journal = std::make_unique<DiscardJournal>(options_.shard);
    }
    w->participant->set_commit_hook(&Worker::logged_commit, w.get());
    // One stream, several Txns (participant F10): every TID goes above what it promised.
    w->participant->set_tid_floor(w->appender->promised_tid());
    w->participant->set_proposal_floor(w->appender->logged_floor_tid());
    w->appender->set_reservations(
        [](const void* p) {
          return static_cast<const dist::Participant*>(p)->lowest_reserved_tid();
        },
        w->participant.get());
  }
  SHOAL_TRY(make_kv_workers(w.get()));
  if (tpcc_ != nullptr) {
    w->tpcc = std::make_unique<TpccShardContext>();
    w->tpcc->workload = tpcc_.get();
    w->tpcc->map = warehouse_map_.get();
    w->tpcc->shard = options_.shard;
    w->tpcc->coordinator = w->coordinator.get();
    w->tpcc->local = engine_->make_worker();
    if (w->appender != nullptr) {  // local transactions commit on its Txn (dist_tpcc.cc)
      w->tpcc->commit_hook = &Worker::logged_commit;
      w->tpcc->commit_hook_ctx = w.get();
      w->tpcc->local->txn().set_tid_floor(w->appender->logged_floor_tid());
      w->tpcc->local->txn().set_keep_old_values(true);  // puts logged as patches
    }
    w->tpcc->loop = w->loop.get();
    if (!options_.ack_journal_dir.empty()) {
      SHOAL_TRY(
          w->ack_journal.open(fmt::format("{}/acks-shard-{}-replica-{}-worker-{}.bin",
                                          options_.ack_journal_dir, options_.shard, me_, index)));
    }
  }
  workers_.push_back(std::move(w));
  return Status::Ok();
}

std::string ShardServer::shm_name(uint32_t shard) const {
  const cluster::Replica& r = leader_of(shard);
  return fmt::format("shoal-{}-{}-{}", config_.name, r.host, r.port);
}

Status ShardServer::dial(Worker& w, uint32_t shard, uint64_t deadline_ns) {
  return connect_to(shard, deadline_ns, [&](auto endpoint) -> Status {
    auto peer = make_peer(w, shard, leaders_[shard], std::move(endpoint));
    if (!peer.ok()) return peer.status();
    w.peers[shard] = std::move(*peer);
    return Status::Ok();
  });
}

Status ShardServer::dial_current_leader(Worker& w, uint32_t shard, uint64_t deadline_ns) {
  if (!follows_failovers()) return dial(w, shard, deadline_ns);
  constexpr uint64_t kAttemptMs = 100;  // a live leader accepts at once
  for (;;) {                            // bounded by deadline_ns
    const uint64_t now = RealEnv::instance().now_ns();
    const Status st = dial(w, shard, std::min(deadline_ns, now + kAttemptMs * kMs));
    if (st.ok() || RealEnv::instance().now_ns() >= deadline_ns || g_stop.load()) return st;
    SHOAL_TRY(open_etcd());
    auto state = cluster::ClusterStateStore(*etcd_, config_.name).load_state();
    if (!state.ok() || shard >= state->shards.size()) continue;
    const uint32_t named = state->shards[shard].leader_replica;
    if (named == leaders_[shard] || named >= config_.shards[shard].replicas.size()) continue;
    fmt::print(stderr,
               "shoal server: shard {}: shard {}'s leader replica {} does not answer ({}); etcd "
               "names replica {} (epoch {}): dialing it\n",
               options_.shard, shard, leaders_[shard], st.to_string(), named,
               state->shards[shard].since_epoch);
    leaders_[shard] = named;  // the watch still starts from watch_leaders_: it follows
  }
}

// ---------------------------------------------------------------------------------------------
// Serving

Status ShardServer::serve() {
  // Signals go to the main thread only: workers block them (the mask is inherited).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  SHOAL_TRY(start_metrics());  // its thread inherits the blocked signals
  for (auto& w : workers_) {
    Worker* wp = w.get();
    auto timer = wp->loop->add_timer(wp->loop->now_ns() + kHealthTickNs, &Worker::health_thunk, wp);
    if (!timer.ok()) return timer.status();
    if (wp->appender != nullptr) {
      wp->schedule_repl_tick(wp->loop->now_ns() + kReplTickIdleNs);
    }
    // Every worker: a promoted follower's workers get their appender later (shard_failover.cc).
    wp->loop->set_idle_hook(&Worker::idle_thunk, wp);
    if (wp->watermark_exchange != nullptr) wp->watermark_exchange->start();
    const int cpu = worker_cpus_.empty() ? -1 : worker_cpus_[wp->index];
    wp->thread = std::thread([wp, cpu] {
      pin_worker_thread(cpu, fmt::format("shoal server: worker {}", wp->index));
      wp->loop->run();
      wp->teardown();
    });
  }
  if (config_.transport != cluster::TransportKind::kTcp) {
    control_ = std::make_unique<ControlPlane>();
    control_->server = this;
    rt::LoopOptions lo;
    lo.max_pollers = kIncomingMax + 8;
    control_->loop = std::make_unique<rt::EventLoop>(RealEnv::instance(), lo);
    ControlPlane* cp = control_.get();
    cp->thread = std::thread([cp] {
      cp->loop->run();
      cp->conns.clear();
      cp->loop.reset();
    });
  }
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  SHOAL_TRY(start_resp());
  SHOAL_TRY(start_client_port());
  SHOAL_TRY(start_deposition_watch());
  if (replication_) replication_->note_serving();  // its followers' leader timeout applies now
  fmt::print(stderr,
             "shoal server: shard {} replica {} ready on {}:{} (epoch {}, {} worker{}, keys [{}, "
             "{}))\n",
             options_.shard, me_, me().host, me().port, epoch_, options_.workers,
             options_.workers == 1 ? "" : "s", layout_->lo(options_.shard),
             layout_->hi(options_.shard));
  {
    // From here on only stop_workers() ends the workers (an early return above leaves the
    // flag off, so their destruction never races a post).
    std::lock_guard<std::mutex> lock(chosen_wake_mu_);
    chosen_wake_on_ = true;
  }
  accept_loop();
  deposition_watch_.reset();  // it posts redials to the workers' loops
  stop_workers();
  fmt::print(stderr, "shoal server: shard {} stopped\n", options_.shard);
  return Status::Ok();
}

Status ShardServer::start_resp() {
  if (!resp_enabled()) return Status::Ok();
  std::vector<StreamAcceptor*> workers;
  for (auto& w : workers_) workers.push_back(w->resp.get());
  auto l = StreamListener::listen("resp", me().host, resp_port(), std::move(workers),
                                  options_.resp_max_connections, RespProtocol::too_many());
  if (!l.ok()) return l.status();
  resp_listener_ = std::move(*l);
  resp_listener_->start();
  fmt::print(
      stderr,
      "shoal server: shard {} replica {}: redis protocol on {}:{} (replies {}; keys [{}, {}))\n",
      options_.shard, me_, me().host, resp_listener_->port(),
      options_.resp_reply_at_speculative_commit || workers_[0]->kv_acks == nullptr
          ? "at the speculative commit"
          : "once durable",
      options_.shard == 0 ? "" : config_.kv_split_keys[options_.shard - 1],
      options_.shard + 1 == config_.shards.size() ? "" : config_.kv_split_keys[options_.shard]);
  return Status::Ok();
}

Status ShardServer::start_client_port() {
  if (!client_enabled()) return Status::Ok();
  std::vector<StreamAcceptor*> workers;
  for (auto& w : workers_) workers.push_back(w->client.get());
  auto l = StreamListener::listen("client port", me().host, client_port(), std::move(workers),
                                  options_.client_max_connections, ClientProtocol::too_many());
  if (!l.ok()) return l.status();
  client_listener_ = std::move(*l);
  client_listener_->start();
  fmt::print(stderr,
             "shoal server: shard {} replica {}: client protocol on {}:{} (durable commits {})\n",
             options_.shard, me_, me().host, client_listener_->port(),
             workers_[0]->kv_acks == nullptr ? "unavailable: no replication" : "by the watermark");
  return Status::Ok();
}

Status ShardServer::make_kv_workers(Worker* w) {
  if (!kv_enabled()) return Status::Ok();
  if (w->vector_watermark != nullptr) {
    w->kv_acks =
        std::make_unique<KvAcks>(*w->loop, *w->vector_watermark, kPendingAcksMax, options_.shard);
  }
  DistKvOptions ko;
  ko.coordinator = w->coordinator.get();
  ko.config = &config_;
  ko.acks = w->kv_acks.get();
  ko.loop = w->loop.get();
  // The local fast path: a Txn of this worker's, logged to its stream as the participant's.
  // Both ports' backends share it: a transaction on it never suspends before it ends.
  txn::Txn& local = engine_->make_worker()->txn();
  if (w->appender != nullptr) {
    local.set_tid_floor(w->appender->logged_floor_tid());
    local.set_keep_old_values(true);          // puts logged as patches
    ko.commit_hook = &Worker::logged_commit;  // the discard journal and tick hurry too
    ko.commit_hook_ctx = w;
  }
  ko.local = &local;
  ko.table = kv_table_;
  ko.own_shard = options_.shard;
  if (client_enabled()) {
    w->client_backend = std::make_unique<DistKvBackend>(ko);
    w->client = std::make_unique<ClientWorker>(*w->loop, *w->client_backend, w->kv_acks.get(),
                                               RealEnv::instance(), options_.client_max_connections,
                                               resp_password_);
    SHOAL_TRY(w->client->start());
  }
  if (resp_enabled()) {
    if (options_.resp_reply_at_speculative_commit) ko.acks = nullptr;
    w->kv_backend = std::make_unique<DistKvBackend>(ko);
    w->resp = std::make_unique<RespWorker>(*w->loop, *w->kv_backend, ko.acks, RealEnv::instance(),
                                           options_.resp_max_connections, resp_password_);
    SHOAL_TRY(w->resp->start());
  }
  return Status::Ok();
}

Status ShardServer::start_metrics() {
  const uint16_t port = options_.metrics_port != 0 ? options_.metrics_port : me().metrics_port;
  if (port == 0) return Status::Ok();
  auto http = ops::MetricsHttp::start(me().host, port, [this] { return render_metrics(); });
  if (!http.ok()) return http.status();
  metrics_http_ = std::move(*http);
  fmt::print(stderr, "shoal server: shard {} replica {}: metrics on http://{}:{}/metrics\n",
             options_.shard, me_, me().host, metrics_http_->port());
  return Status::Ok();
}

std::string ShardServer::render_metrics() {
  ServerMetricsView v;
  v.shard = options_.shard;
  v.replica = me_;
  v.shards = static_cast<uint32_t>(config_.shards.size());
  v.epoch = epoch_;
  v.replicated_cluster = cluster_replicated();
  v.type_names = txn_type_names(options_.workload);
  for (const auto& w : workers_) v.workers.push_back(&w->metrics);
  v.replication = replication_.get();
  v.rss_bytes = current_rss_bytes();
  ops::MetricsText m;
  render_server_metrics(v, &m);
  return m.text();
}

// A leader replaced while it hung must stop at once (DepositionWatch): it exits as a crash
// would, without the "bye" that tells followers a leader stopped on purpose; it rejoins as a
// follower when restarted.
Status ShardServer::open_etcd() {
  if (etcd_ != nullptr) return Status::Ok();
  cluster::EtcdOptions eo;
  eo.endpoints = options_.etcd;
  auto manager = cluster::EtcdConfigManager::create(eo);
  if (!manager.ok()) return manager.status();
  etcd_ = std::move(*manager);
  return Status::Ok();
}

Status ShardServer::start_deposition_watch() {
  if (options_.etcd.empty()) return Status::Ok();
  SHOAL_TRY(open_etcd());
  DepositionWatchOptions wo;
  wo.cluster = config_.name;
  wo.shard = options_.shard;
  wo.replica = me_;
  wo.epoch = epoch_;
  wo.leaders = watch_leaders_;
  const uint32_t shard = options_.shard, me = me_;
  const uint64_t epoch = epoch_;
  deposition_watch_ = std::make_unique<DepositionWatch>(
      *etcd_, wo,
      [shard, me, epoch](uint64_t now_epoch, uint32_t leader) {
        std::fprintf(stderr,
                     "shoal server: shard %u replica %u: deposed: the configuration manager "
                     "names replica %u the leader in epoch %lu (we led in epoch %lu); exiting\n",
                     shard, me, leader, now_epoch, epoch);
        std::_Exit(kExitDeposed);
      },
      [this](uint32_t other, uint32_t leader, uint64_t now_epoch) {
        follow_leader(other, leader, now_epoch);
      });
  deposition_watch_->start();
  return Status::Ok();
}

// Hands a connection accepted on the main thread to `owner` (a Worker or the ControlPlane),
// whose adopt() then runs on its loop.
template <typename Owner, typename E>
void post_adopt(Owner* owner, E endpoint) {
  struct Handoff {
    Owner* owner;
    E endpoint;
  };
  auto* h = new Handoff{owner, std::move(endpoint)};
  Status s = owner->loop->post(
      [](void* ctx) {
        std::unique_ptr<Handoff> h(static_cast<Handoff*>(ctx));
        h->owner->adopt(std::move(h->endpoint));
      },
      h);
  if (!s.ok()) delete h;  // its post queue is full: drop the connection
}

template <typename E>
void ShardServer::hand_to_worker(E endpoint, uint32_t* next) {
  post_adopt(workers_[(*next)++ % workers_.size()].get(), std::move(endpoint));
}

// An accepted connection's RPC endpoint on `loop`, serving the control methods; nullptr when
// it cannot start (the connection closes).
template <typename E>
std::unique_ptr<IncomingOver<E>> open_incoming(ShardServer* server, rt::EventLoop& loop,
                                               E endpoint) {
  auto in = std::make_unique<IncomingOver<E>>();
  in->endpoint = std::move(endpoint);
  in->rpc = std::make_unique<rt::RpcEndpoint<E>>(loop, in->endpoint, data_rpc_options());
  if (!in->rpc->start().ok()) return nullptr;
  attach_control(server, *in->rpc);
  return in;
}

void ControlPlane::adopt(net::TcpEndpoint tcp) {
  std::erase_if(conns, [](const auto& c) { return !c->status().ok(); });
  if (conns.size() >= kIncomingMax) return;  // closes it
  if (auto in = open_incoming(server, *loop, std::move(tcp))) conns.push_back(std::move(in));
}

template <typename E>
void ShardServer::hand_out(E endpoint, uint32_t* next) {
  if constexpr (std::is_same_v<E, net::TcpEndpoint>) {
    if (control_ != nullptr) return post_adopt(control_.get(), std::move(endpoint));
  }
  hand_to_worker(std::move(endpoint), next);
}

// A TCP accept that failed: a refused dialer is logged (net/auth.h); else nobody came in this
// slice (or EINTR from a signal).
static void note_refused(uint32_t shard, const Status& accept_status) {
  if (accept_status.code() == Code::kInvalidArgument) {
    fmt::print(stderr, "shoal server: shard {}: {}\n", shard, accept_status.message());
  }
}

void ShardServer::accept_loop() {
  uint32_t next = 0;
  while (!g_stop.load()) {
    if (early_tcp_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kAcceptSliceMs / 10));
    } else if (auto tcp = listener_.accept(kAcceptSliceMs); tcp.ok()) {
      hand_out(std::move(*tcp), &next);
    } else {
      note_refused(options_.shard, tcp.status());
    }
    std::vector<net::ShmEndpoint> shm;
    std::vector<net::FabricEndpoint> fabric;
    std::vector<net::TcpEndpoint> tcp;
    {
      std::lock_guard<std::mutex> lock(early_mu_);
      shm.swap(shm_pending_);
      fabric.swap(fabric_pending_);
      tcp.swap(tcp_pending_);
    }
    for (auto& e : shm) hand_out(std::move(e), &next);
    for (auto& e : fabric) hand_out(std::move(e), &next);
    for (auto& e : tcp) hand_out(std::move(e), &next);
  }
}

Status ShardServer::start_early_acceptor() {
  const bool shm = config_.transport == cluster::TransportKind::kShm;
  const bool fabric = config_.transport == cluster::TransportKind::kFabric;
  early_tcp_ = !net::cluster_secret().empty();
  if (!shm && !fabric && !early_tcp_) return Status::Ok();
  if (shm) {
    const std::string name = shm_name(options_.shard);
    auto listener = net::ShmListener::listen(name);
    if (!listener.ok()) {
      return Status::IOError(fmt::format("shard[{}]: cannot listen on shm {}: {}", options_.shard,
                                         name, listener.status().to_string()));
    }
    shm_listener_ = std::move(*listener);
  }
  if (fabric) {
    const std::string name = fabric_name(options_.shard);
    auto listener = net::FabricListener::listen_local(name, {}, fabric_options(config_));
    if (!listener.ok()) {
      return Status::IOError(fmt::format("shard[{}]: cannot listen on fabric {}: {}",
                                         options_.shard, name, listener.status().to_string()));
    }
    fabric_listener_ = std::move(*listener);
  }
  early_acceptor_ = std::thread([this, shm, fabric] {
    // Each accept waits at most a slice (both listeners: half a slice each), so stop is seen.
    // A fabric accept also completes the provider's handshake with its dialer (bounded by
    // FabricOptions::handshake_timeout_ms), which is why it is accepted here, off the loops.
    const uint64_t slice_ms = (shm || fabric) && early_tcp_ ? kAcceptSliceMs / 2 : kAcceptSliceMs;
    while (!early_stop_.load()) {
      if (shm) {
        // Not ok: nobody in this slice, or a peer that gave up mid-handshake.
        if (auto e = shm_listener_.accept(slice_ms); e.ok()) {
          std::lock_guard<std::mutex> lock(early_mu_);
          if (shm_pending_.size() < kIncomingMax * 4) shm_pending_.push_back(std::move(*e));
        }
      }
      if (fabric) {
        if (auto e = fabric_listener_.accept(slice_ms); e.ok()) {
          std::lock_guard<std::mutex> lock(early_mu_);
          if (fabric_pending_.size() < kIncomingMax * 4) fabric_pending_.push_back(std::move(*e));
        } else if (e.status().code() != Code::kTimeout) {
          fmt::print(stderr, "shoal server: shard {}: fabric accept: {}\n", options_.shard,
                     e.status().to_string());
        }
      }
      if (early_tcp_) {
        if (auto e = listener_.accept(slice_ms); e.ok()) {
          std::lock_guard<std::mutex> lock(early_mu_);
          if (tcp_pending_.size() < kIncomingMax * 4) tcp_pending_.push_back(std::move(*e));
        } else {
          note_refused(options_.shard, e.status());
        }
      }
    }
  });
  return Status::Ok();
}

void ShardServer::stop_early_acceptor() {
  early_stop_.store(true);
  if (early_acceptor_.joinable()) early_acceptor_.join();
}

void ShardServer::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(chosen_wake_mu_);
    chosen_wake_on_ = false;
  }
  stop_early_acceptor();
  if (resp_listener_ != nullptr) resp_listener_->stop();
  if (client_listener_ != nullptr) client_listener_->stop();
  if (control_ != nullptr) {
    control_->loop->stop();
    if (control_->thread.joinable()) control_->thread.join();
  }
  for (auto& w : workers_) w->loop->stop();
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

void Worker::teardown() {
  if (resp != nullptr) resp->shutdown();
  if (client != nullptr) client->shutdown();
  watermark_exchange.reset();
  coordinator.reset();
  incoming.clear();
  peers.clear();
  retired.clear();
  if (appender != nullptr) appender->set_dep_base({});  // its base is the watermark below
  vector_watermark.reset();                             // after the links that raise it
  self_link.reset();
  service.reset();
  participant.reset();
  loop.reset();
  resp.reset();
  client.reset();
  kv_backend.reset();
  client_backend.reset();
  kv_acks.reset();
}

template <typename E>
void Worker::adopt(E endpoint) {
  if (incoming.size() >= kIncomingMax) {
    fmt::print(stderr, "shoal server: shard {}: worker {} refuses a connection ({} open)\n",
               server->shard(), index, incoming.size());
    return;  // closes it
  }
  auto in = open_incoming(server, *loop, std::move(endpoint));
  if (in == nullptr) return;
  service->attach(*in->rpc);
  incoming.push_back(std::move(in));
}

template <typename E>
void attach_control(ShardServer* s, rt::RpcEndpoint<E>& rpc) {
  rpc.handle(kPing,
             [s](rt::RpcRequest& r) -> rt::Task<Status> { co_return s->on_ping(r.response); });
  rpc.handle(kStart, [s](rt::RpcRequest& r) -> rt::Task<Status> {
    co_return s->on_start(r.payload, r.response);
  });
  rpc.handle(kStats, [s](rt::RpcRequest& r) -> rt::Task<Status> {
    co_return s->on_stats(r.payload, r.response);
  });
  rpc.handle(kScan, [s](rt::RpcRequest& r) -> rt::Task<Status> {
    co_return s->on_scan(r.payload, r.response);
  });
  rpc.handle(kHistory, [s](rt::RpcRequest& r) -> rt::Task<Status> {
    co_return s->on_history(r.payload, r.response);
  });
  rpc.handle(kRepl, [s](rt::RpcRequest& r) -> rt::Task<Status> {
    co_return s->on_repl(r.payload, r.response);
  });
  rpc.handle(kDecisions, [s](rt::RpcRequest& r) -> rt::Task<Status> {
    co_return s->on_decisions(r.payload, r.response);
  });
  rpc.handle(kStop,
             [s](rt::RpcRequest& r) -> rt::Task<Status> { co_return s->on_stop(r.response); });
}

// Marks links to dead shards (releasing what they coordinated here) and frees connections
// that have been closed for two ticks (no handler of theirs can still be queued by then:
// a failed endpoint spawns nothing, and spawned handlers run within an iteration).
void Worker::health() {
  for (auto& p : peers) {
    if (p == nullptr || p->down || p->status().ok()) continue;
    p->down = true;
    server->note_down(p->shard);
    // It may fail over: nothing its new leader says raises its entry before the fence.
    if (vector_watermark != nullptr && server->follows_failovers())
      vector_watermark->hold(p->shard);
    // Its prepared transactions wait for its new leader's word when it fails over (F11).
    const bool keep_prepared = server->follows_failovers();
    const size_t released = participant->abort_coordinated_by(p->shard, keep_prepared);
    fmt::print(stderr,
               "shoal server: shard {} worker {}: shard {} unreachable ({}); released {} of its "
               "transactions{}\n",
               server->shard(), index, p->shard, p->status().to_string(), released,
               keep_prepared ? " (prepared ones wait for its new leader)" : "");
  }
  const uint64_t now = loop->now_ns();
  std::erase_if(retired, [now](const std::unique_ptr<Peer>& p) {
    return p->outstanding() == 0 && now - p->retired_ns >= kRetiredKeepNs;
  });
  std::erase_if(incoming, [now](const std::unique_ptr<Incoming>& in) {
    if (in->status().ok()) return false;
    if (in->failed_seen_ns == 0) in->failed_seen_ns = now;
    return now - in->failed_seen_ns >= 2 * kHealthTickNs;
  });
  publish_metrics();
  trace_busy_drops();
}

void Worker::trace_busy_drops() {
  static const bool on = [] {
    const char* trace = std::getenv("SHOAL_RESERVATION_TRACE");
    return trace != nullptr && trace[0] == '1';
  }();
  const uint64_t now = loop->now_ns();
  if (!on || now < busy_trace_next_ns) return;
  uint64_t drops = 0, resent = 0, timeouts = 0;
  for (const auto& in : incoming) drops += in->rpc_stats().busy_drops;
  for (const auto& p : peers) {
    if (p == nullptr) continue;
    resent += p->rpc_stats().retransmits;
    timeouts += p->rpc_stats().timeouts;
  }
  // A closed or replaced connection's counts went with it: start again from what is left.
  if (drops < busy_drops_seen) busy_drops_seen = drops;
  if (resent < busy_resent_seen) busy_resent_seen = resent;
  if (timeouts < busy_timeouts_seen) busy_timeouts_seen = timeouts;
  if (drops == busy_drops_seen && resent == busy_resent_seen && timeouts == busy_timeouts_seen) {
    return;
  }
  busy_trace_next_ns = now + 1'000 * kMs;
  fmt::print(stderr,
             "busy-trace shard {} worker {}: since the last report {} requests of other shards "
             "dropped, {} of our calls re-sent and {} timed out (task room {}, {} "
             "acknowledgements watched by tasks, {} waits on the vector watermark)\n",
             server->shard(), index, drops - busy_drops_seen, resent - busy_resent_seen,
             timeouts - busy_timeouts_seen, loop->task_room(), acks_running,
             vector_watermark != nullptr ? vector_watermark->waiting() : 0);
  busy_drops_seen = drops;
  busy_resent_seen = resent;
  busy_timeouts_seen = timeouts;
}

void Worker::publish_metrics() {
  const dist::CoordinatorStats& c = coordinator->stats();
  metrics.set_coordinator(c.conflict_aborts, c.timeouts, c.in_doubt);
  uint64_t peers_up = 0;
  for (const auto& p : peers) {
    if (p == nullptr) continue;
    peers_up += !p->down;
    const rt::RpcStats& r = p->rpc_stats();
    metrics.set_peer_rpc(p->shard, r.calls, r.timeouts, r.retransmits);
  }
  metrics.set_connections(incoming.size(), peers_up);
  if (vector_watermark != nullptr) {
    for (uint32_t s = 0; s < vector_watermark->shards(); ++s) {
      metrics.set_vector_watermark(s, vector_watermark->get(s));
    }
  }
}

void Worker::health_thunk(void* self, uint64_t) {
  auto* w = static_cast<Worker*>(self);
  w->health();
  auto id = w->loop->add_timer(w->loop->now_ns() + kHealthTickNs, &Worker::health_thunk, w);
  SHOAL_ASSERT(id.ok(), "health timer: %s", id.status().to_string().c_str());
}

}  // namespace detail

using detail::on_signal;
using detail::ShardServer;

Status run_server(const ServerOptions& options, Promotion* promotion) {
  struct sigaction sa {};
  sa.sa_handler = &on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a peer that dies mid-send is an error status, not a signal
  ShardServer server;
  SHOAL_TRY(server.init(options, promotion));
  return server.serve();
}

}  // namespace shoal::server

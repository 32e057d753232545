// The shard's replication leader inside the server (shard_server_impl.h): starting it (or
// adopting a promoted follower's store), the streams' ticks, closing the streams after a run
// and the kRepl reports.
#include "src/server/shard_server_impl.h"

namespace shoal::server::detail {

// ---------------------------------------------------------------------------------------------
// Replication (shards with replicas > 1)

Status ShardServer::start_replication(Promotion* promotion) {
  const cluster::Shard& shard = config_.shards[options_.shard];
  const cluster::Replica& me = this->me();
  repl::LeaderOptions lo;
  lo.shard = options_.shard;
  lo.streams = options_.workers;
  lo.replicas = static_cast<uint32_t>(shard.replicas.size());
  lo.replica = me_;
  lo.appender.epoch = epoch_;
  lo.listen_host = me.host;
  lo.listen_port = cluster::replication_port(me);
  lo.link = replication_link(config_);
  lo.fabric = fabric_options(config_);
  uint64_t rtt_ns_max = 0;
  for (const cluster::Replica& r : shard.replicas) {
    const auto one_way_ns = static_cast<uint64_t>(config_.one_way_ms(r.region, me.region) * 1e6);
    lo.receive_shapes.push_back(net::LinkShape{one_way_ns, 0});
    rtt_ns_max = std::max(rtt_ns_max, 2 * one_way_ns);
  }
  lo.appender.limits.batch_txns_max = options_.batch_txns;
  lo.appender.stop = &g_stop;  // SIGTERM ends a worker's wait for a log buffer
  lo.appender.limits.batch_age_ns_max = static_cast<uint64_t>(options_.batch_us * 1e3);
  lo.lead_ms_max = options_.lead_ms_max;
  auto fsync = repl::parse_fsync(options_.fsync, "--fsync");
  if (!fsync.ok()) return fsync.status();
  lo.fsync = *fsync;
  lo.paxos = repl::paxos_options_for_rtt(rtt_ns_max);
  lo.paxos.epoch = epoch_;  // the no-ops that fill holes
  lo.retain_chosen_slots = options_.retain_slots;
  lo.follower_lag_slots_max = options_.retain_slots * 3 / 4;
  lo.follower_replay_lag_ms_max = config_.replay_lag_ms;
  lo.schema = repl::Schema::of(*engine_, options_.workload);
  lo.checkpoint_fetch_interval_ms = options_.checkpoint_interval_ms;
  // A promoted follower's directory is its data_dir (replica_cli.cc sets it).
  lo.checkpoint_dir = options_.data_dir;
  lo.on_chosen = &ShardServer::entries_chosen;
  lo.on_chosen_ctx = this;
  // Followers suspect us by their leader timeout only once we serve (note_serving() below
  // the ready line): the start-up after listening stalled the replication thread past a
  // 100 ms timeout on a loaded machine, and a restarting leader was deposed as it started.
  lo.announces_serving = true;
  if (promotion == nullptr) {  // a promoted follower's WAL comes with its takeover
    lo.wal_dir = options_.data_dir.empty()
                     ? cluster::replica_dir(".shoal/" + config_.name, options_.shard, 0)
                     : options_.data_dir;
    std::error_code ec;
    std::filesystem::create_directories(lo.wal_dir, ec);
    if (ec) {
      return Status::IOError(
          fmt::format("--data-dir: cannot create {}: {}", lo.wal_dir, ec.message()));
    }
    // A fresh leader over a replica's directory would overwrite its schema and mix logs.
    if (std::filesystem::exists(lo.wal_dir + "/schema.json", ec)) {
      return Status::AlreadyExists(fmt::format(
          "shard {}: {} holds a replica's log; restart it from there (`shoal server "
          "--recover-epoch E`, as `cluster up` does over a run directory) or clear it first "
          "(`cluster up --fresh`); not started, nothing written",
          options_.shard, lo.wal_dir));
    }
    // The layout marker, identity and schema a follower needs: this replica may restart as
    // one (a failover) or recover its store from here (`--recover-epoch`).
    SHOAL_TRY(repl::prepare_replica_dir(lo.wal_dir));
    SHOAL_TRY(repl::check_replica_identity(lo.wal_dir, {config_.name, options_.shard, me_}));
    SHOAL_TRY(repl::write_replica_schema(lo.wal_dir, lo.schema, lo.streams));
    lo.checkpoint_dir = lo.wal_dir;
  }
  auto leader = repl::ReplicationLeader::start(
      lo, *engine_, promotion != nullptr ? &promotion->takeover : nullptr);
  if (!leader.ok()) {
    return Status::IOError(fmt::format("shard[{}]: replication on {}:{}: {}", options_.shard,
                                       me.host, lo.listen_port, leader.status().to_string()));
  }
  replication_ = std::move(*leader);
  if (promotion != nullptr) return take_over();
  fmt::print(stderr,
             "shoal server: shard {}: waiting for a majority of {} replicas on {}:{} (batch {} "
             "txns / {} us)\n",
             options_.shard, lo.replicas, me.host, lo.listen_port, options_.batch_txns,
             options_.batch_us);
  SHOAL_TRY(wait_leading());
  // Before any worker exists: this thread owns every appender until serve() starts them.
  auto boot =
      repl::bootstrap_followers(*replication_, *engine_, options_.replication_timeout_ms, &g_stop);
  if (!boot.ok()) {
    if (g_stop.load()) return stopped_by_signal("installing the load on its followers");
    return boot.status();
  }
  snapshot_tid_ = boot->snapshot_tid;
  if (options_.unsafe_plant_divergence) SHOAL_TRY(plant_divergence());
  if (lo.replicas == 1) {
    fmt::print(stderr, "shoal server: shard {}: a lone replica, logging to {} (--fsync {})\n",
               options_.shard, lo.wal_dir, options_.fsync);
    return Status::Ok();
  }
  fmt::print(stderr,
             "shoal server: shard {}: {} followers installed the load ({} records, {:.1f} s)\n",
             options_.shard, lo.replicas - 1, boot->records, static_cast<double>(boot->ns) / 1e9);
  return Status::Ok();
}

Status ShardServer::adopt_store(Promotion& p) {
  engine_ = std::move(p.engine);
  if (options_.workload == "tpcc") {
    warehouse_map_ = std::make_unique<WarehouseMap>(config_);
    tpcc_ = std::make_unique<workload::TpccWorkload>(tpcc_options());  // as the loading leader's
    SHOAL_TRY(tpcc_->attach(*engine_, tpcc_load_options()));
    fragments_ = make_tpcc_fragments(&tpcc_->tables());
    return Status::Ok();
  }
  if (options_.workload != "micro" && options_.workload != "bank") {
    return Status::InvalidArgument(
        fmt::format("--workload: '{}' is not micro, tpcc or bank", options_.workload));
  }
  txn::TableBase* t = engine_->find_table(is_bank() ? "bank" : "micro");
  if (t == nullptr || t->key_words() != 1) {
    return Status::Corruption(
        fmt::format("promotion: the replicated store has no {} table", options_.workload));
  }
  table_ = static_cast<txn::Table<1>*>(t);
  return Status::Ok();
}

// The batching in use: the flags (ServerOptions) where given, else the config's.
Status ShardServer::apply_batching() {
  if (options_.batch_txns > cluster::kBatchTxnsMax) {
    return Status::InvalidArgument(fmt::format("--batch-txns: must be in [1, {}], not {}",
                                               cluster::kBatchTxnsMax, options_.batch_txns));
  }
  if (!(options_.batch_us >= 0 && options_.batch_us <= cluster::kBatchUsMax)) {
    return Status::InvalidArgument(
        fmt::format("--batch-us: must be in (0, 1e7], not {}", options_.batch_us));
  }
  if (options_.batch_txns == 0) options_.batch_txns = config_.batch_txns;
  if (options_.batch_us == 0) options_.batch_us = config_.batch_us;
  return Status::Ok();
}

// wait_leading in slices, so that SIGTERM is seen while the followers do not come.
Status ShardServer::wait_leading() {
  const uint64_t start_ns = RealEnv::instance().now_ns();
  for (;;) {  // bounded by replication_timeout_ms and g_stop
    const Status s = replication_->wait_leading(kAcceptSliceMs);
    if (s.code() != Code::kTimeout) return s;
    if (g_stop.load()) return stopped_by_signal("waiting for a majority of its replicas");
    const uint64_t waited_ms = (RealEnv::instance().now_ns() - start_ns) / kMs;
    if (waited_ms >= options_.replication_timeout_ms) {
      return Status::Timeout(fmt::format("shard {}: no majority of replicas after {} ms: {}",
                                         options_.shard, waited_ms, s.to_string()));
    }
  }
}

Status ShardServer::stopped_by_signal(const std::string& while_doing) const {
  return Status::Unavailable(
      fmt::format("shard {}: stopped by a signal while {}", options_.shard, while_doing));
}

// ServerOptions::unsafe_plant_divergence: the first key's counter changes here only (no commit
// hook is installed yet), so the leader's digest differs from its followers'.
Status ShardServer::plant_divergence() {
  if (table_ == nullptr || is_bank()) {
    return Status::InvalidArgument("--unsafe-plant-divergence: needs --workload micro");
  }
  fmt::print(stderr, "shoal server: shard {}: UNSAFE: one record changed without logging (test)\n",
             options_.shard);
  txn::Worker* w = engine_->make_worker();
  struct Args {
    txn::Table<1>* table;
    uint64_t key;
  } args{table_, layout_->lo(options_.shard)};
  return w->run(
      [](txn::Txn& t, const void* a, void*) -> Status {
        const auto* in = static_cast<const Args*>(a);
        MicroValue v{};
        SHOAL_TRY(t.get(*in->table, key1(in->key), &v));
        v.counter += 1;
        return t.put(*in->table, key1(in->key), v);
      },
      &args);
}

void Worker::repl_tick_thunk(void* self, uint64_t) {
  auto* w = static_cast<Worker*>(self);
  w->appender->tick();
  w->ack_journal.flush();  // what was acknowledged leaves the process within a tick
  w->bank_log.flush();     // the same for the bank's history file
  const uint64_t txns = w->appender->stats().txns;
  const uint64_t now_ns = w->loop->now_ns();
  const bool shard_busy = w->server->committed_recently(now_ns);
  const bool busy =
      txns != w->repl_txns_seen || !w->done.load(std::memory_order_relaxed) || shard_busy;
  w->repl_txns_seen = txns;
  w->schedule_repl_tick(now_ns + (busy ? kReplTickBusyNs : kReplTickIdleNs));
}

bool Worker::idle_thunk(void* self) {
  auto* w = static_cast<Worker*>(self);
  return w->appender != nullptr && w->appender->idle();
}

void Worker::schedule_repl_tick(uint64_t due_ns) {
  auto id = loop->add_timer(due_ns, &Worker::repl_tick_thunk, this);
  SHOAL_ASSERT(id.ok(), "replication tick timer: %s", id.status().to_string().c_str());
  repl_tick_id = *id;
  repl_tick_due_ns = due_ns;
}

void Worker::hurry_repl_tick(void* self) {
  auto* w = static_cast<Worker*>(self);
  if (w->appender == nullptr || w->repl_tick_id == 0) return;  // not ticking (yet)
  const uint64_t due_ns = w->loop->now_ns() + kReplTickBusyNs;
  if (w->repl_tick_due_ns <= due_ns) return;
  w->loop->cancel_timer(w->repl_tick_id);
  w->schedule_repl_tick(due_ns);
}

void ShardServer::entries_chosen(void* self, uint32_t /*stream*/) {
  auto* s = static_cast<ShardServer*>(self);
  // Every worker, not only the stream's: the shard watermark is what each one's acks wait on.
  std::lock_guard<std::mutex> lock(s->chosen_wake_mu_);
  if (!s->chosen_wake_on_) return;
  for (auto& w : s->workers_) {
    if (w->watermark_exchange != nullptr) w->watermark_exchange->notify();
  }
}

// On the committing worker's loop thread. One relaxed load per commit; a store at most once
// per busy tick; posts only when the shard was idle (once per quiet period).
void ShardServer::note_logged_commit(uint64_t now_ns) {
  const uint64_t last_ns = last_commit_ns_.load(std::memory_order_relaxed);
  if (now_ns - last_ns < kReplTickBusyNs) return;
  last_commit_ns_.store(now_ns, std::memory_order_relaxed);
  if (now_ns - last_ns < kReplTickIdleNs) return;
  for (auto& w : workers_) {
    // A full post queue only delays this worker's floor to its idle tick.
    (void)w->loop->post(&Worker::hurry_repl_tick, w.get());
  }
}

Status ShardServer::post_to_workers(void (*fn)(void*)) {
  for (auto& w : workers_) SHOAL_TRY(w->loop->post(fn, w.get()));
  return Status::Ok();
}

// Round 1, on each worker: its stream's last TID; the last worker starts round 2.
void Worker::close_floor_thunk(void* self) {
  auto* w = static_cast<Worker*>(self);
  w->server->close_floor_from(w->appender->last_commit_tid());
}

// Round 2, on each worker: the floor entry; the last worker publishes the closed floor.
void Worker::close_stream_thunk(void* self) {
  auto* w = static_cast<Worker*>(self);
  w->server->close_stream(*w->appender);
}

void ShardServer::close_floor_from(uint64_t tid) {
  uint64_t seen = close_floor_.load();
  while (tid > seen && !close_floor_.compare_exchange_weak(seen, tid)) {
  }
  if (close_pending_.fetch_sub(1) != 1) return;
  close_pending_.store(static_cast<uint32_t>(workers_.size()));
  const Status s = post_to_workers(&Worker::close_stream_thunk);
  SHOAL_ASSERT(s.ok(), "closing the streams: %s", s.to_string().c_str());
}

void ShardServer::close_stream(repl::StreamAppender& appender) {
  const Status closed = appender.finish(close_floor_.load());
  if (!closed.ok()) {  // stopped (shutdown): followers will not reach the floor; say why
    fmt::print(stderr, "shoal server: shard {}: closing stream {}: {}\n", options_.shard,
               appender.stream(), closed.to_string());
  }
  if (close_pending_.fetch_sub(1) != 1) return;
  closed_floor_.store(close_floor_.load());
  closing_.store(false);
}

// kRepl (control.h): {"step":"close"} seals every stream above every TID committed (after a
// run; answers at once, the close completes on the workers); {"step":"report", "digest",
// "check", "payments", "wait_ms"} waits (bounded) until every connected follower applied the
// closed floor and reports the leader's and the followers' digests and checks. A shard with a
// single replica answers both with its digest alone.
Status ShardServer::on_repl(std::span<const uint8_t> request, rt::MsgBuffer* out) {
  auto j = parse_control({reinterpret_cast<const char*>(request.data()), request.size()});
  if (!j.ok()) return j.status();
  std::string step;
  if (Status s = json_optional_field(*j, "step", &step); !s.ok()) {
    return Status::InvalidArgument("repl: " + s.message());
  }
  if (step != "close" && step != "report") {
    return Status::InvalidArgument("repl.step: must be close or report");
  }
  if (running_.load() > 0) return load_running("repl");
  if (replication_ == nullptr) {  // a single replica: its digest is the whole report
    reply_json({{"shard", options_.shard},
                {"closed", true},
                {"done", true},
                {"floor", 0},
                {"leader_digest", repl::engine_digest(*engine_)},
                {"leader_replica", me_},
                {"followers", nlohmann::json::array()}},
               out);
    return Status::Ok();
  }
  if (step == "report") return repl_report(*j, out);
  bool idle = false;
  if (closing_.compare_exchange_strong(idle, true)) {
    closed_floor_.store(0);
    close_floor_.store(snapshot_tid_);
    close_pending_.store(static_cast<uint32_t>(workers_.size()));
    SHOAL_TRY(post_to_workers(&Worker::close_floor_thunk));
  }
  reply_json({{"shard", options_.shard}, {"closing", true}}, out);
  return Status::Ok();
}

Status ShardServer::repl_report(const nlohmann::json& request, rt::MsgBuffer* out) {
  const uint64_t floor = closed_floor_.load();
  if (floor == 0) {
    reply_json({{"shard", options_.shard}, {"closed", false}}, out);
    return Status::Ok();
  }
  std::unique_lock<std::mutex> lock(repl_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    reply_json({{"shard", options_.shard}, {"closed", true}, {"done", false}}, out);
    return Status::Ok();
  }
  bool digest = true, check = false;
  uint64_t wait_ms = 1000;
  for (Status s : {json_optional_field(request, "digest", &digest),
                   json_optional_field(request, "check", &check),
                   json_optional_field(request, "wait_ms", &wait_ms)}) {
    if (!s.ok()) return Status::InvalidArgument("repl.report: " + s.message());
  }
  check = check && tpcc_ != nullptr;
  wait_ms = std::min(wait_ms, kReplReportWaitMsMax);
  nlohmann::json args = nlohmann::json::object();
  if (auto p = request.find("payments"); p != request.end()) args["payments"] = *p;
  auto reports = replication_->collect_reports(floor, digest, check, wait_ms, args,
                                               /*skip_lost=*/true);
  if (!reports.ok()) {
    reply_json({{"shard", options_.shard},
                {"closed", true},
                {"done", false},
                {"lagging", reports.status().message()}},
               out);
    return Status::Ok();
  }
  nlohmann::json followers = nlohmann::json::array();
  for (const repl::FollowerReport& r : *reports) {
    nlohmann::json f = r.to_json();
    f["replica"] = r.replica;
    f["lost"] = r.lost;
    followers.push_back(std::move(f));
  }
  reply_json({{"shard", options_.shard},
              {"closed", true},
              {"done", true},
              {"floor", floor},
              {"leader_digest", repl::engine_digest(*engine_)},
              {"leader_replica", me_},
              {"followers", followers}},
             out);
  return Status::Ok();
}

}  // namespace shoal::server::detail

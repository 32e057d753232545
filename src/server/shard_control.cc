// The control methods of a shard server (control.h; shard_server_impl.h): ping, start, stats,
// scans, histories, decisions and the after-run checks. Any worker's loop thread.
#include "src/server/shard_server_impl.h"

namespace shoal::server::detail {

// ---------------------------------------------------------------------------------------------
// Control handlers

Status ShardServer::on_ping(rt::MsgBuffer* out) {
  nlohmann::json down = nlohmann::json::array();
  const uint64_t mask = down_mask_.load();
  for (uint32_t s = 0; s < kShardsMax; ++s) {
    if (mask & (uint64_t{1} << s)) down.push_back(s);
  }
  // The connected followers that reported their replay, and the largest replay lag among
  // them (a benchmark waits for a restarted follower to catch up before it kills this leader:
  // failover_run.h). replayed_tid 0: not reported yet.
  uint64_t lag_ns_max = 0;
  uint32_t replay_reported = 0;
  if (replication_ != nullptr) {
    for (const repl::FollowerPosition& f : replication_->positions().followers) {
      if (!f.connected || f.replayed_tid == 0) continue;
      ++replay_reported;
      lag_ns_max = std::max(lag_ns_max, f.replay_lag_ns);
    }
  }
  reply_json(
      {{"shard", options_.shard},
       {"workers", options_.workers},
       {"workload", options_.workload},
       {"keys_lo", layout_->lo(options_.shard)},
       {"keys_hi", layout_->hi(options_.shard)},
       {"pid", static_cast<int64_t>(getpid())},
       {"running", running_.load() > 0},
       {"replicas", config_.shards[options_.shard].replicas.size()},
       {"replica", me_},
       {"epoch", epoch_},
       {"batch_txns", options_.batch_txns},
       {"batch_us", options_.batch_us},
       {"watermark", replication_ != nullptr ? replication_->watermark() : 0},
       {"followers_connected", replication_ != nullptr ? replication_->followers_connected() : 0},
       {"followers_replay_reported", replay_reported},
       {"followers_replay_lag_ms_max", static_cast<double>(lag_ns_max) / 1e6},
       {"unreachable", down}},
      out);
  return Status::Ok();
}

Status ShardServer::on_start(std::span<const uint8_t> request, rt::MsgBuffer* out) {
  auto j = parse_control({reinterpret_cast<const char*>(request.data()), request.size()});
  if (!j.ok()) return j.status();
  auto params = MicroParams::from_json(*j);
  if (!params.ok()) return params.status();
  if (tpcc_ != nullptr && workers_.size() * params->inflight >= 1024) {
    return Status::InvalidArgument(
        fmt::format("start.inflight: {} workers x {} terminals: at most 1023 per shard",
                    workers_.size(), params->inflight));
  }
  uint32_t idle = 0;
  if (!running_.compare_exchange_strong(idle, static_cast<uint32_t>(workers_.size()))) {
    return Status::AlreadyExists("a load is already running");
  }
  ++loads_started_;
  for (auto& w : workers_) {
    w->done.store(false);
    w->params = *params;  // read by the worker only in the posted start (post orders it)
    w->load_number = loads_started_;
  }
  for (auto& w : workers_) {
    Status s = w->loop->post([](void* ctx) { static_cast<Worker*>(ctx)->start_load(); }, w.get());
    if (!s.ok()) {
      w->done.store(true);  // that worker runs nothing; the rest report
      running_.fetch_sub(1);
    }
  }
  reply_json(nlohmann::json::object(), out);
  return Status::Ok();
}

Status ShardServer::on_stop(rt::MsgBuffer* out) {
  uint32_t stopping = 0;
  for (auto& w : workers_) stopping += w->loop->post(&Worker::stop_load_thunk, w.get()).ok();
  reply_json({{"stopping", stopping}}, out);
  return Status::Ok();
}

// {"latency": true} (the controller's samples during a run, failover_run.h) adds the live
// latency counts and conflicts; without it the reply stays as small as before.
Status ShardServer::on_stats(std::span<const uint8_t> request, rt::MsgBuffer* out) {
  bool latency = false;
  if (!request.empty()) {
    auto req = parse_control({reinterpret_cast<const char*>(request.data()), request.size()});
    if (!req.ok()) return req.status();
    if (Status s = json_optional_field(*req, "latency", &latency); !s.ok()) {
      return Status::InvalidArgument("stats: " + s.message());
    }
  }
  bool done = true;
  for (auto& w : workers_) done = done && w->done.load(std::memory_order_acquire);
  uint64_t live = 0;
  for (auto& w : workers_) live += w->live_committed.load(std::memory_order_relaxed);
  nlohmann::json j = {
      {"shard", options_.shard}, {"done", done},
      {"replica", me_},          {"epoch", epoch_},
      {"live_committed", live},  {"first_commit_unix_us", first_commit_unix_us_.load()}};
  if (latency) {
    LatencySample sample;
    uint64_t conflicts = 0;
    for (auto& w : workers_) {
      w->live_speculative.add_to(&sample.speculative);
      w->live_commit.add_to(&sample.commit);
      conflicts += w->metrics.conflicts_total();
    }
    j["latency"] = latency_sample_json(sample);
    j["live_conflicts"] = conflicts;
  }
  if (done) {
    MicroStats total;
    uint64_t orphaned = 0, expired = 0;
    for (auto& w : workers_) {
      total.merge(w->published);
      orphaned += w->published_participant.orphaned;
      expired += w->published_participant.expired;
    }
    total.rss_bytes = current_rss_bytes();
    total.peak_rss_bytes = peak_rss_bytes();
    j["stats"] = total.to_json();
    j["orphaned"] = orphaned;
    j["expired"] = expired;
    if (replication_ != nullptr) {
      repl::AppenderStats log;
      for (auto& w : workers_) log += w->published_log;
      // dep_*: the records' dependency areas, compact and as they were with every entry.
      j["log"] = {{"txns", log.txns},
                  {"entries", log.entries},
                  {"bytes", log.bytes},
                  {"patches", log.patches},
                  {"dep_bytes", log.deps.bytes},
                  {"dep_bytes_full", log.deps.full_bytes},
                  {"dep_entries", log.deps.entries},
                  {"dep_entries_omitted", log.deps.omitted}};
    }
    // Dependency vectors in the 2PC messages this shard's workers sent (requests and replies).
    txn::DepVecBytes wire;
    for (auto& w : workers_) wire += w->published_wire_deps;
    j["wire_deps"] = {{"vectors", wire.vectors},
                      {"bytes", wire.bytes},
                      {"bytes_full", wire.full_bytes},
                      {"entries", wire.entries},
                      {"entries_omitted", wire.omitted}};
  }
  reply_json(j, out);
  return Status::Ok();
}

Status ShardServer::load_running(const char* what) const {
  uint32_t running = 0;
  for (const auto& w : workers_) running += !w->done.load(std::memory_order_acquire);
  return Status::InvalidArgument(fmt::format(
      "{}: shard {}'s load has not ended on {} of {} workers (clients still in a transaction, "
      "or waiting for their acknowledgement: at most {} ms past the run, after which the "
      "server's log says what they waited for)",
      what, options_.shard, running, workers_.size(), kAckGraceNs / kMs));
}

// Reads every key of this shard with fresh transactions (a lock left behind fails the read)
// and sums the counters: the survivors' "no locks kept" check and the consistency check.
Status ShardServer::on_scan(std::span<const uint8_t> request, rt::MsgBuffer* out) {
  if (tpcc_ != nullptr) {
    auto j = parse_control({reinterpret_cast<const char*>(request.data()), request.size()});
    if (!j.ok()) return j.status();
    return on_scan_tpcc(*j, out);
  }
  constexpr uint64_t kKeysPerTxn = 4096;  // bounds a read set
  const uint64_t lo = layout_->lo(options_.shard), hi = layout_->hi(options_.shard);
  txn::Txn t(engine_.get(), 7);
  uint64_t unreadable = 0, sum = 0;
  int64_t balance_sum = 0;  // bank: the money on this shard
  std::string first;
  // Tracing a failed bank check by hand (SHOAL_BANK_DUMP): every account's final version
  // (balance, seq, writer) in the server's log, for scripts/bank-history.py's records.
  const bool dump = std::getenv("SHOAL_BANK_DUMP") != nullptr;
  for (uint64_t base = lo; base < hi; base += kKeysPerTxn) {
    t.begin();
    for (uint64_t k = base; k < std::min(hi, base + kKeysPerTxn); ++k) {
      Status s;
      if (is_bank()) {
        BankAccount a{};
        s = engine_->tables()[kBankTableId]->txn_get(t, &k, &a, sizeof a, nullptr);
        sum += s.ok() ? a.seq : 0;
        balance_sum += s.ok() ? a.balance : 0;
        if (s.ok() && dump) {
          fmt::print(stderr, "bank-final {} {} {} {:#x}\n", k, a.balance, a.seq, a.writer);
        }
      } else {
        MicroValue v{};
        s = engine_->tables()[kMicroTableId]->txn_get(t, &k, &v, sizeof v, nullptr);
        sum += s.ok() ? v.counter : 0;
      }
      if (!s.ok() && unreadable++ == 0) first = fmt::format("key {}: {}", k, s.to_string());
    }
    t.abort();
  }
  nlohmann::json reply = {{"shard", options_.shard},
                          {"keys", hi - lo},
                          {"unreadable", unreadable},
                          {"first_unreadable", first},
                          {"counter_sum", sum}};
  if (is_bank()) reply["balance_sum"] = balance_sum;
  reply_json(reply, out);
  return Status::Ok();
}

// One page of a worker's bank log (control.h kHistory), once every worker finished its load:
// the logs are written by the worker threads until they publish (done, release).
Status ShardServer::on_history(std::span<const uint8_t> request, rt::MsgBuffer* out) {
  if (!is_bank()) return Status::InvalidArgument("history: this shard serves no bank workload");
  auto j = parse_control({reinterpret_cast<const char*>(request.data()), request.size()});
  if (!j.ok()) return j.status();
  uint64_t worker = ~uint64_t{0};
  uint64_t from = 0;
  if (j->is_object()) {
    SHOAL_TRY(json_optional_field(*j, "worker", &worker));
    SHOAL_TRY(json_optional_field(*j, "from", &from));
  }
  if (worker >= workers_.size()) {
    return Status::InvalidArgument(
        fmt::format("history.worker: must be below {}", workers_.size()));
  }
  if (running_.load() > 0) return load_running("history");
  for (auto& w : workers_) {
    if (!w->done.load(std::memory_order_acquire)) return load_running("history");
  }
  const BankHistory& log = workers_[worker]->bank_log;
  std::string txns;
  const size_t next = log.page(std::min<uint64_t>(from, log.size()), kControlBytesMax - 512, &txns);
  const std::string text = fmt::format(
      "{{\"shard\":{},\"worker\":{},\"workers\":{},\"total\":{},\"dropped\":{},\"next\":{},"
      "\"txns\":[{}]}}",
      options_.shard, worker, workers_.size(), log.size(), log.dropped(), next, txns);
  out->assign({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  return Status::Ok();
}

// kDecisions (control.h): which of these distributed transactions our predecessor's log holds,
// as this new leader replayed it (participant.h F11, coordinator.h C2).
Status ShardServer::on_decisions(std::span<const uint8_t> request, rt::MsgBuffer* out) {
  const repl::DecisionLog* decisions = decisions_published_.load(std::memory_order_acquire);
  if (decisions == nullptr) {
    return Status::Unavailable(
        fmt::format("decisions: shard {} has not taken over from a log", options_.shard));
  }
  auto j = parse_control({reinterpret_cast<const char*>(request.data()), request.size()});
  if (!j.ok()) return j.status();
  auto ids = json_field<nlohmann::json>(*j, "ids");
  if (!ids.ok()) return ids.status();
  if (!ids->is_array() || ids->size() > kDecisionIdsMax) {
    return Status::InvalidArgument(
        fmt::format("decisions.ids: an array of at most {} ids", kDecisionIdsMax));
  }
  std::string found;
  for (const nlohmann::json& v : *ids) {
    uint64_t id = 0, tid = 0;
    if (!json_detail::convert(v, &id)) {
      return Status::InvalidArgument("decisions.ids: unsigned 64-bit integers only");
    }
    txn::DepVec vector;
    if (!decisions->find(id, options_.shard, &tid, &vector)) continue;
    found += fmt::format("{}[{},{}]", found.empty() ? "" : ",", id, tid);
  }
  const std::string text = fmt::format("{{\"found\":[{}]}}", found);
  out->assign({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  return Status::Ok();
}

Status ShardServer::check_acks(const nlohmann::json& request, rt::MsgBuffer* out) {
  if (running_.load() > 0) return load_running("scan.acks");
  const auto paths = request.find("paths");
  if (paths == request.end() || !paths->is_array() || paths->size() > kAckJournalsMax) {
    return Status::InvalidArgument(
        fmt::format("scan.paths: an array of at most {} journal paths", kAckJournalsMax));
  }
  uint64_t checked = 0, missing = 0, unreadable = 0;
  nlohmann::json first_missing = nullptr;
  workload::tpcc::OrderRow row;
  for (const auto& p : *paths) {
    if (!p.is_string()) return Status::InvalidArgument("scan.paths: strings only");
    auto orders = read_ack_journal(p.get<std::string>());
    if (!orders.ok()) {
      ++unreadable;
      continue;
    }
    for (const OrderKey& k : *orders) {
      if (k.w_id == 0 || k.w_id > warehouse_map_->warehouses() ||
          warehouse_map_->shard_of(k.w_id) != options_.shard) {
        continue;  // another shard's order
      }
      ++checked;
      const Status s = tpcc_->tables().order->peek(
          workload::tpcc::order_key(k.w_id, k.d_id, k.o_id), &row, sizeof row);
      if (s.ok()) continue;
      ++missing;
      if (first_missing.is_null()) first_missing = {k.w_id, k.d_id, k.o_id};
    }
  }
  reply_json({{"shard", options_.shard},
              {"checked", checked},
              {"missing", missing},
              {"unreadable", unreadable},
              {"first_missing", first_missing}},
             out);
  return Status::Ok();
}

// TPC-C's check in two steps (the controller runs them, see cluster_check.cc):
//   {"step": "payments"}: the HISTORY sums this shard holds for other shards' warehouses, as
//      [[kind, key, cents], ...] (kind 0: by warehouse, 1: by district, 2: by customer; keys as
//      in workload::ForeignPayments)
//   {"step": "check", "payments": [...]}: the consistency conditions over this shard's
//      warehouses with those sums (from every other shard) added in.
Status ShardServer::on_scan_tpcc(const nlohmann::json& request, rt::MsgBuffer* out) {
  std::string step;
  if (Status s = json_optional_field(request, "step", &step); !s.ok()) {
    return Status::InvalidArgument("scan: " + s.message());
  }
  if (step == "payments") {
    reply_json({{"shard", options_.shard},
                {"payments", payments_to_json(workload::foreign_payments(*engine_))}},
               out);
    return Status::Ok();
  }
  if (step == "acks") return check_acks(request, out);
  if (step != "check") {
    return Status::InvalidArgument("scan.step: must be payments, check or acks");
  }
  workload::ForeignPayments foreign;
  const auto entries = request.find("payments");
  if (entries != request.end()) SHOAL_TRY(payments_from_json(*entries, "scan.payments", &foreign));
  const std::vector<std::string> failures =
      workload::check_tpcc_conditions(*engine_, /*after_load=*/false, &foreign);
  reply_json({{"shard", options_.shard}, {"failures", failures}}, out);
  return Status::Ok();
}

}  // namespace shoal::server::detail

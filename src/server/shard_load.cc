// The compiled-in load drivers of a shard server (shard_server_impl.h): micro, bank and TPC-C
// clients on each worker's loop, and the acknowledgement of their transactions once the
// vectorized watermark covers them.
#include "src/server/shard_server_impl.h"

namespace shoal::server::detail {

// ---------------------------------------------------------------------------------------------
// Load: `inflight` coroutine clients per worker, each running transactions back to back.

// After a failed transaction: yield, so the loop's pollers and timers keep their turn (a shard
// that is gone fails cross-shard transactions at once); with the shard unreachable (Unavailable:
// it is failing over until this worker redials its new leader) pause a little, so a client
// does not spin on failures meanwhile. Nothing of a failed transaction was acknowledged.
rt::Task<void> after_failure(Worker* w, Code code) {
  if (code == Code::kUnavailable) {
    (co_await w->loop->sleep_for(kUnavailablePauseNs)).ignore();  // full timers: no pause
  } else {
    co_await w->loop->yield();
  }
}

// After a cross-shard transaction: journals its outcome (note_outcome) and, when it was left in
// doubt at a shard that is failing over (C2), waits for the failover's verdict
// (discard_journal.h, bounded by kRedialTimeoutMs): committed there (Ok, its vector raised to
// where its half survived, acknowledged as any other), or lost (nothing of it remains anywhere:
// Unavailable and no longer in doubt, so retry_after_failover retries it). Kept whole or no
// verdict in time: still in doubt (failed).
rt::Task<Status> conclude(Worker* w, Status s, dist::DistTxn& txn) {
  w->note_outcome(s, txn);
  if (!txn.in_doubt() || txn.doubtful_shards().empty() || w->discard_journal == nullptr) {
    co_return s;
  }
  const uint64_t deadline_ns = w->loop->now_ns() + kRedialTimeoutMs * kMs;
  std::array<uint64_t, 8> tids{};
  const auto& doubtful = txn.doubtful_shards();
  if (doubtful.size() > tids.size()) co_return s;
  while (w->loop->now_ns() < deadline_ns) {  // bounded
    size_t committed = 0, lost = 0, kept = 0;
    for (size_t i = 0; i < doubtful.size(); ++i) {
      const DiscardJournal::Outcome o = w->discard_journal->outcome(txn.id(), doubtful[i]);
      committed += o.verdict == DiscardJournal::Verdict::kCommitted;
      lost += o.verdict == DiscardJournal::Verdict::kLost;
      kept += o.verdict == DiscardJournal::Verdict::kKept;
      tids[i] = o.tid;
    }
    if (kept > 0 || (lost > 0 && committed > 0)) co_return s;  // parts stay: in doubt
    // This worker followed a failover since the transaction began (the discard, and its
    // verdicts, come before the redial that raises the epoch): what is still pending was not
    // in doubt yet when the question was asked, and gets no verdict.
    if (w->epoch > txn.epoch() && committed + lost < doubtful.size()) co_return s;
    if (committed == doubtful.size()) {
      txn.settle_doubt(true, std::span<const uint64_t>(tids.data(), doubtful.size()));
      ++w->stats.in_doubt_committed;
      co_return Status::Ok();
    }
    if (lost > 0 && committed + lost == doubtful.size()) {
      txn.settle_doubt(false, {});
      ++w->stats.in_doubt_lost;
      co_return Status::Unavailable(
          fmt::format("transaction {:#x} was lost with shard {}'s failover: nothing of it remains",
                      txn.id(), doubtful[0]));
    }
    (co_await w->loop->sleep_for(kUnavailablePauseNs)).ignore();
  }
  co_return s;
}

// A transaction that failed because a shard was unreachable and installed nothing anywhere (not
// in doubt) is retried while the load runs: its shard is failing over, and this worker redials
// the new leader as soon as the configuration manager names it (follow_leader). Counts it.
bool retry_after_failover(Worker* w, const Status& s, const dist::DistTxn& txn) {
  if (s.code() != Code::kUnavailable || txn.in_doubt() || !w->server->follows_failovers()) {
    return false;
  }
  if (w->loop->now_ns() >= w->load_end_ns) return false;
  ++w->stats.failover_retries;
  return true;
}

rt::Task<void> load_client(Worker* w, uint64_t seed) {
  dist::DistTxn txn;
  Rng rng(seed);
  MicroArgs args;
  const KeyLayout& layout = w->server->layout();
  const uint32_t home = w->server->shard();
  const bool can_cross = layout.shard_count() > 1;
  while (w->loop->now_ns() < w->load_end_ns) {
    const bool cross = can_cross && rng.uniform(0, 99) < w->params.cross_shard_pct;
    pick_keys(layout, home, cross, rng, &args);
    const uint64_t start_ns = w->loop->now_ns();
    Status s =
        co_await conclude(w, co_await w->coordinator->run(txn, &dist_rmw4, &args, nullptr), txn);
    while (retry_after_failover(w, s, txn)) {  // bounded by the load's end
      (co_await w->loop->sleep_for(kUnavailablePauseNs)).ignore();
      s = co_await conclude(w, co_await w->coordinator->run(txn, &dist_rmw4, &args, nullptr), txn);
    }
    w->record(cross, s, w->loop->now_ns() - start_ns);
    // A shard that is gone fails cross-shard transactions at once: yield so the loop's
    // pollers and timers keep their turn even then.
    if (!s.ok()) co_await after_failure(w, s.code());
  }
  if (--w->clients_running == 0) w->publish();
}

// Tracing acknowledgements by hand (SHOAL_ACK_TRACE=1): each bank worker keeps its last
// kAckTraceMax acknowledgements (the vector waited for, and the vector watermark's entries for
// those shards when it was covered) and prints them when its load ends.
struct AckTrace {
  uint64_t id = 0, wall_us = 0;
  uint32_t n = 0;
  txn::DepEntry deps[4] = {};
  uint64_t vw[4] = {};
};
constexpr size_t kAckTraceMax = size_t{1} << 17;
static thread_local std::vector<AckTrace> t_ack_trace;
static thread_local size_t t_ack_next = 0;

static void trace_ack(const Worker* w, uint64_t id, const txn::DepVec& v) {
  static const bool on = std::getenv("SHOAL_ACK_TRACE") != nullptr;
  if (!on) return;
  if (t_ack_trace.empty()) t_ack_trace.resize(kAckTraceMax);
  AckTrace& a = t_ack_trace[t_ack_next++ % kAckTraceMax];
  a = AckTrace{};
  a.id = id;
  a.wall_us = RealEnv::instance().wall_us();
  for (const txn::DepEntry& d : v.entries()) {
    if (a.n == 4) break;
    a.deps[a.n] = d;
    a.vw[a.n++] = w->vector_watermark->get(d.shard);
  }
}

static void dump_ack_trace() {
  const size_t n = std::min(t_ack_next, kAckTraceMax);
  for (size_t i = 0; i < n; ++i) {
    const AckTrace& a = t_ack_trace[(t_ack_next - n + i) % kAckTraceMax];
    std::string line = fmt::format("ack-trace {:#x} {:.3f}", a.id,
                                   static_cast<double>(a.wall_us % 1'000'000'000) / 1e6);
    for (uint32_t j = 0; j < a.n; ++j)
      line += fmt::format(" {}:{:#x}<={:#x}", a.deps[j].shard, a.deps[j].ts, a.vw[j]);
    fmt::print(stderr, "{}\n", line);
  }
}

// A bank client: transfers and audits (dist_bank.h); each committed one goes to the log.
rt::Task<void> bank_client(Worker* w, uint64_t seed) {
  dist::DistTxn txn;
  Rng rng(seed);
  BankArgs args;
  BankTxnRecord rec;
  const KeyLayout& layout = w->server->layout();
  const uint32_t home = w->server->shard();
  const bool can_cross = layout.shard_count() > 1;
  while (w->loop->now_ns() < w->load_end_ns) {
    const bool cross = can_cross && rng.uniform(0, 99) < w->params.cross_shard_pct;
    pick_bank_txn(layout, home, cross, rng, &args);
    const uint64_t start_ns = w->loop->now_ns();
    Status s =
        co_await conclude(w, co_await w->coordinator->run(txn, &dist_bank, &args, &rec), txn);
    while (retry_after_failover(w, s, txn)) {  // bounded by the load's end
      (co_await w->loop->sleep_for(kUnavailablePauseNs)).ignore();
      s = co_await conclude(w, co_await w->coordinator->run(txn, &dist_bank, &args, &rec), txn);
    }
    // Replicated: only what was acknowledged goes to the history (what a failover discards
    // never is); the rest is counted as not recorded.
    if (s.ok() && w->vector_watermark != nullptr) {
      const Status acked = co_await w->vector_watermark->wait_covered(txn.vector());
      if (acked.ok()) {
        trace_ack(w, txn.id(), txn.vector());
        w->live_commit.record(w->loop->now_ns() - start_ns);  // the live series only
        w->bank_log.add(rec);
      } else {
        w->bank_log.add_unrecorded(rec.id);
      }
    } else if (s.ok()) {
      w->bank_log.add(rec);
    }
    w->record(cross, s, w->loop->now_ns() - start_ns, args.audit ? kBankAudit : kBankTransfer);
    if (!s.ok()) co_await after_failure(w, s.code());
  }
  if (--w->clients_running == 0) {
    dump_ack_trace();
    w->publish();
  }
}

// Waits until the vectorized watermark covers `vector`, then records the commit latency (and
// journals an acknowledged NewOrder).
rt::Task<void> wait_for_ack(Worker* w, const txn::DepVec& vector, uint64_t start_ns,
                            OrderKey order) {
  Status covered = co_await w->vector_watermark->wait_covered(vector);
  if (covered.ok()) {
    const uint64_t latency_ns = w->loop->now_ns() - start_ns;
    w->stats.latency_commit.record(latency_ns);
    w->metrics.acknowledged(latency_ns);
    w->live_commit.record(latency_ns);
    if (order.o_id != 0) w->ack_journal.note(order);
  } else {
    ++w->stats.unacknowledged;
    w->metrics.unacknowledged();
  }
}

// Watches one pending acknowledgement (slot of w->pending_acks) and frees its slot.
rt::Task<void> ack_task(Worker* w, uint32_t slot) {
  Worker::PendingAck& p = w->pending_acks[slot];
  co_await wait_for_ack(w, p.vector, p.start_ns, p.order);
  w->free_acks.push_back(slot);
  --w->acks_running;
  w->publish_when_idle();
}

// A TPC-C terminal: home warehouse and StockLevel district spread over this shard's own.
rt::Task<void> tpcc_client(Worker* w, uint32_t terminal, uint64_t seed) {
  ShardServer& server = *w->server;
  const WarehouseMap& map = server.warehouses();
  const uint32_t first = map.first(server.shard());
  const uint32_t count = map.last(server.shard()) - first + 1;
  const uint32_t n = w->index * w->params.inflight + terminal;
  // HISTORY keys: source (16 bits) = shard and terminal, unique in the cluster (a row lives
  // with its customer, on any shard; on_start bounds terminals per shard below 1024); run =
  // this server's load number, so a second `bench tpcc --cluster` does not reuse the first's
  // keys (the 65537th load of one server would).
  workload::TpccClient client(server.tpcc(), *w->tpcc->local, n, seed,
                              uint64_t{server.shard()} * 1024 + n + 1, w->load_number & 0xffff);
  client.bind_home(first + n % count, (n / count) % workload::tpcc::kDistrictsPerWarehouse + 1);
  dist::DistTxn dtxn;
  workload::TpccInput in;
  txn::DepVec ack;  // reused: no allocation once it has grown to the widest vector
  while (w->loop->now_ns() < w->load_end_ns) {
    client.make_input(&in);
    const uint64_t start_ns = w->loop->now_ns();
    const uint64_t local_tid_before = w->tpcc->local->txn().last_commit_tid();
    TpccOutcome out = co_await run_tpcc_txn(*w->tpcc, dtxn, in);
    if (out.cross) out.status = co_await conclude(w, out.status, dtxn);
    while (retry_after_failover(w, out.status, dtxn)) {  // bounded by the load's end
      w->stats.conflict_aborts += out.conflicts;
      (co_await w->loop->sleep_for(kUnavailablePauseNs)).ignore();
      out = co_await run_tpcc_txn(*w->tpcc, dtxn, in);
      if (out.cross) out.status = co_await conclude(w, out.status, dtxn);
    }
    w->stats.conflict_aborts += out.conflicts;
    w->metrics.conflicts(out.conflicts);
    w->record(out.cross, out.status, w->loop->now_ns() - start_ns, in.type);
    if (out.status.code() == Code::kUnavailable) co_await after_failure(w, out.status.code());
    // Acknowledgement (design 3 step 8): "committed" once the vectorized watermark covers
    // the transaction's vector; the latency above was speculative (visible). A cross-shard
    // rollback installed nothing and validated nothing: it has no vector to wait for.
    // The terminal goes on meanwhile (as the one-shard bench's clients do): an ack task
    // watches it, or, with every slot taken, the terminal waits itself.
    const bool acked = out.status.ok() || (out.status.is_user_abort() && !out.cross);
    OrderKey order;
    if (in.type == workload::tpcc::kNewOrder && out.status.ok()) {
      order = {in.new_order.w_id, in.new_order.d_id, out.o_id};
    }
    if (w->vector_watermark != nullptr && acked) {
      if (!w->free_acks.empty()) {
        const uint32_t slot = w->free_acks.back();
        w->free_acks.pop_back();
        Worker::PendingAck& p = w->pending_acks[slot];
        w->ack_vector(out.cross, dtxn, local_tid_before, &p.vector);  // before anything runs
        p.start_ns = start_ns;
        p.order = order;
        if (w->loop->spawn(ack_task(w, slot)).ok()) {
          ++w->acks_running;
        } else {
          w->free_acks.push_back(slot);  // task table full: wait ourselves
          ack = p.vector;
          co_await wait_for_ack(w, ack, start_ns, order);
        }
      } else {
        w->ack_vector(out.cross, dtxn, local_tid_before, &ack);
        co_await wait_for_ack(w, ack, start_ns, order);
      }
    }
    // Local transactions never suspend: yield so pollers (remote coordinators' requests,
    // replies to our own) and the other terminals keep their turn.
    co_await w->loop->yield();
  }
  if (--w->clients_running == 0 && w->acks_running > 0) {
    // The last ack task publishes; bounded by kAckGraceNs if replication stalls (a load
    // stopped early: the grace start_load armed counts from the planned end).
    w->arm_ack_grace(w->loop->now_ns() + kAckGraceNs);
  }
  w->publish_when_idle();
}

void Worker::start_load() {
  stats = MicroStats{};
  aborts_base = coordinator->stats().conflict_aborts;
  if (appender != nullptr) log_base = appender->stats();
  wire_dep_base = wire_dep_bytes_now();
  bank_log.clear();
  if (server->is_bank() && params.history_run != 0 && !server->journal_dir().empty()) {
    const BankHistoryFileHeader h{params.history_run, server->shard(), server->replica(), index,
                                  load_number};
    const Status opened =
        bank_log.open_file(bank_history_path(server->journal_dir(), h, ::getpid()), h);
    if (!opened.ok()) {  // the controller finds this worker's transactions missing and says so
      fmt::print(stderr, "shard {} worker {}: {}\n", server->shard(), index, opened.to_string());
    }
  }
  load_end_ns = loop->now_ns() + static_cast<uint64_t>(params.seconds * 1e9);
  // Every wait for an acknowledgement ends by the run's end plus kAckGraceNs, whoever waits:
  // an ack task, a terminal that found every slot taken, a bank client. Without it a shard
  // watermark that stopped kept the load running for good, and the controller found the
  // shard lost ("a load is running").
  if (vector_watermark != nullptr) arm_ack_grace(load_end_ns + kAckGraceNs);
  clients_running = 0;
  for (uint32_t i = 0; i < params.inflight; ++i) {
    const uint64_t seed =
        params.seed * 0x9e3779b97f4a7c15ULL + server->shard() * 65536ULL + index * 1024ULL + i;
    rt::Task<void> client = tpcc                ? tpcc_client(this, i, seed)
                            : server->is_bank() ? bank_client(this, seed)
                                                : load_client(this, seed);
    if (!loop->spawn(std::move(client)).ok()) break;  // task table full: fewer clients
    ++clients_running;
  }
  if (clients_running == 0) publish();
}

// A cross-shard transaction's vector is the coordinator's (every written shard's install TID,
// merged with what its reads depended on). A local one ran start to commit on the worker's
// Txn without suspending, so right after it that Txn still holds it: its dependencies and, on
// our shard, its commit TID if it wrote (a new TID since `local_tid_before`), else the
// newest version it read.
void Worker::ack_vector(bool cross, const dist::DistTxn& dtxn, uint64_t local_tid_before,
                        txn::DepVec* out) const {
  if (cross) {
    *out = dtxn.vector();
    return;
  }
  const txn::Txn& t = tpcc->local->txn();
  *out = t.deps();
  const uint64_t tid = t.last_commit_tid();
  out->raise(server->shard(), std::max(t.max_seen_version(), tid != local_tid_before ? tid : 0));
}

void Worker::stop_load_thunk(void* self) {
  auto* w = static_cast<Worker*>(self);
  const uint64_t now = w->loop->now_ns();
  if (now < w->load_end_ns) w->load_end_ns = now;
}

void Worker::arm_ack_grace(uint64_t due_ns) {
  if (ack_grace_load == load_number && ack_grace_chain != 0 && due_ns >= ack_grace_due_ns) return;
  ack_grace_load = load_number;
  ack_grace_due_ns = due_ns;
  auto grace = loop->add_timer(due_ns, &Worker::ack_grace_thunk, this, ++ack_grace_chain);
  SHOAL_ASSERT(grace.ok(), "ack grace timer: %s", grace.status().to_string().c_str());
}

void Worker::ack_grace_thunk(void* self, uint64_t chain) {
  auto* w = static_cast<Worker*>(self);
  // Replaced by a chain due sooner, an earlier load's, or published.
  if (chain != w->ack_grace_chain || w->ack_grace_load != w->load_number ||
      w->done.load(std::memory_order_relaxed)) {
    return;
  }
  w->ack_grace_due_ns = UINT64_MAX;  // fired: the recheck below starts the chain's next timer
  const size_t waiting = w->vector_watermark->waiting();
  if (waiting > 0) {
    // Says what the run could not get acknowledged (the shard watermark that stopped), then
    // every waiter resumes with the error and counts as unacknowledged.
    const std::string what = w->vector_watermark->describe_waits();
    fmt::print(stderr,
               "shoal server: shard {} worker {}: {} transactions not acknowledged {} ms after "
               "the run: {}\n",
               w->server->shard(), w->index, waiting, kAckGraceNs / kMs, what);
    w->vector_watermark->release_all(
        Status::Timeout(fmt::format("shard {}: not acknowledged {} ms after the run ({})",
                                    w->server->shard(), kAckGraceNs / kMs, what)));
  }
  // A client still in a transaction may wait again once it ends (bounded by its RPC and
  // verdict deadlines): look again until the load is published.
  w->arm_ack_grace(w->loop->now_ns() + kAckGraceRecheckNs);
}

void Worker::record(bool cross, const Status& s, uint64_t latency_ns, uint32_t type) {
  type = std::min(type, MicroStats::kTypesMax - 1);
  if (s.ok() || s.is_user_abort()) {
    ++stats.committed;
    live_committed.store(live_committed.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
    server->note_commit();
    live_speculative.record(latency_ns);
    ++stats.committed_by_type[type];
    stats.latency_by_type[type].record(latency_ns);
    metrics.committed(type, cross, s.is_user_abort(), latency_ns);
    if (s.is_user_abort()) ++stats.user_aborts;
    if (cross) {
      ++stats.committed_cross;
      stats.latency_cross.record(latency_ns);
    } else {
      stats.latency_local.record(latency_ns);
    }
    return;
  }
  ++stats.failed;
  ++stats.failed_by_type[type];
  if (cross) ++stats.failed_cross;
  if (s.code() == Code::kUnavailable) ++stats.unavailable;
  metrics.failed(type, s.code() == Code::kUnavailable ? WorkerMetrics::Failure::kUnavailable
                       : s.code() == Code::kTimeout   ? WorkerMetrics::Failure::kTimeout
                                                      : WorkerMetrics::Failure::kOther);
  if (stats.first_error.empty()) stats.first_error = s.to_string();
}

void Worker::publish() {
  // Local retries were counted as they happened (TpccOutcome::conflicts); add the coordinator's.
  stats.conflict_aborts += coordinator->stats().conflict_aborts - aborts_base;
  published = stats;
  published_participant = participant->stats();
  if (appender != nullptr) published_log = appender->stats() - log_base;
  published_wire_deps = wire_dep_bytes_now() - wire_dep_base;
  ack_journal.flush();
  bank_log.flush();
  done.store(true, std::memory_order_release);
  server->load_finished();
}

}  // namespace shoal::server::detail

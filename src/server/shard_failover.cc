// Failover, both sides (shard_server_impl.h): following another shard's new leader (the hold,
// the fence, the discard of what depended on its lost TIDs, the redial and the F11 resolution
// of prepared halves), and this process taking over as a promoted leader.
#include "src/server/shard_server_impl.h"

namespace shoal::server::detail {

// Failover of another shard: each worker gets a connection to the new leader, dialed here (the
// watch thread: a dial blocks) and adopted on its loop (Worker::redial). A worker that cannot
// be reached (its post queue full) keeps its failed link: its transactions there keep failing.
void ShardServer::follow_leader(uint32_t shard, uint32_t replica, uint64_t epoch) {
  if (shard >= leaders_.size() || replica >= config_.shards[shard].replicas.size()) return;
  // Hold the shard's vector watermark entry at once (its link may not have failed: a hung
  // leader), so that the new leader's word cannot cover what was lost before the fence.
  for (auto& w : workers_) {
    struct Hold {
      Worker* w;
      uint32_t shard;
    };
    auto* h = new Hold{w.get(), shard};
    const Status posted = w->loop->post(
        [](void* ctx) {
          std::unique_ptr<Hold> h(static_cast<Hold*>(ctx));
          if (h->w->vector_watermark != nullptr) h->w->vector_watermark->hold(h->shard);
        },
        h);
    if (!posted.ok()) delete h;
  }
  // The fence first: until its new leader published what the failover lost, the workers
  // keep their failed link (transactions needing the shard wait and retry).
  uint64_t lost_above = 0, lost_through = 0;
  const Status record = await_failover_record(shard, epoch, &lost_above, &lost_through);
  if (!record.ok()) {
    fmt::print(stderr, "shoal server: shard {}: not following shard {}'s new leader: {}\n",
               options_.shard, shard, record.to_string());
    return;
  }
  if (!workers_.empty() && workers_[0]->discard_journal != nullptr) {
    const Status discarded =
        discard_lost_versions(LostRange{shard, lost_above, lost_through}, replica, epoch);
    if (!discarded.ok()) {
      fmt::print(stderr, "shoal server: shard {}: discarding what depends on shard {}'s loss: {}\n",
                 options_.shard, shard, discarded.to_string());
    }
  }
  leaders_[shard] = replica;  // read by connect_to, on this thread only after init
  fmt::print(stderr,
             "shoal server: shard {}: shard {} is led by replica {} since epoch {} (lost its TIDs "
             "in ({:#x}, {:#x}]): redialing\n",
             options_.shard, shard, replica, epoch, lost_above, lost_through);
  const uint64_t deadline_ns = RealEnv::instance().now_ns() + kRedialTimeoutMs * kMs;
  for (auto& w : workers_) {
    Worker* wp = w.get();
    const Status s = connect_to(shard, deadline_ns, [&](auto endpoint) -> Status {
      using E = decltype(endpoint);
      struct Handoff {
        Worker* w;
        uint32_t shard, replica;
        uint64_t epoch, lost_above, lost_through;
        E endpoint;
      };
      auto* h =
          new Handoff{wp, shard, replica, epoch, lost_above, lost_through, std::move(endpoint)};
      Status posted = wp->loop->post(
          [](void* ctx) {
            std::unique_ptr<Handoff> h(static_cast<Handoff*>(ctx));
            h->w->redial(h->shard, h->replica, h->epoch, h->lost_above, h->lost_through,
                         std::move(h->endpoint));
          },
          h);
      if (!posted.ok()) delete h;
      return posted;
    });
    if (!s.ok()) {
      fmt::print(stderr, "shoal server: shard {} worker {}: redialing shard {}: {}\n",
                 options_.shard, wp->index, shard, s.to_string());
    }
  }
}

Status Worker::logged_commit(void* ctx, const txn::Txn& txn) {
  auto* w = static_cast<Worker*>(ctx);
  // Our own coordinator's installs here (through the local link).
  const dist::TxnId logging = w->participant->logging_id();
  const bool ours = logging != 0 && (logging >> 48) == w->server_shard;
  // One that other shards take part in carries its id: ours, its decision, for the shards
  // holding its prepared halves should we fail over (participant.h F11); another shard's, what
  // its coordinator asks our new leader of a transaction it left in doubt here (C2,
  // discard_journal.h). Another shard's is cross-shard by who coordinates it, not by its
  // vector: the 2PC wire leaves out the entries the sender's watermark covers (src/txn/
  // depvec.h), so its vector may name no other shard. Ours came through the local link with
  // every entry.
  const bool cross_shard =
      logging != 0 &&
      (!ours || std::any_of(txn.deps().entries().begin(), txn.deps().entries().end(),
                            [w](const txn::DepEntry& d) { return d.shard != w->server_shard; }));
  SHOAL_TRY(w->appender->append(txn, cross_shard ? logging : 0));
  w->server->note_logged_commit(w->loop->now_ns());
  if (w->discard_journal != nullptr) {
    const dist::VectorWatermark& vw = *w->vector_watermark;
    // Ours: note_outcome follows.
    w->discard_journal->record(txn, ours, [&vw](uint32_t shard, uint64_t ts) {
      return shard < vw.shards() && vw.get(shard) >= ts;
    });
  }
  return Status::Ok();
}

void Worker::pause_thunk(void* self) {
  auto* w = static_cast<Worker*>(self);
  w->server->park_worker(w);
}

void ShardServer::park_worker(Worker* w) {
  std::unique_lock<std::mutex> lock(pause_mu_);
  ++parked_;
  pause_cv_.notify_all();
  uint64_t seen = park_job_gen_;
  for (;;) {  // bounded by discard_lost_versions, which ends the pause
    pause_cv_.wait(lock, [&] { return !pausing_ || park_job_gen_ != seen; });
    if (!pausing_) break;
    seen = park_job_gen_;
    lock.unlock();
    park_job_(park_job_ctx_, w);
    lock.lock();
    ++park_job_done_;
    pause_cv_.notify_all();
  }
  --parked_;
}

bool ShardServer::run_on_parked(void (*job)(void* ctx, Worker* w), void* ctx) {
  constexpr uint64_t kJobWaitMs = 5000;
  std::unique_lock<std::mutex> lock(pause_mu_);
  park_job_ = job;
  park_job_ctx_ = ctx;
  park_job_done_ = 0;
  ++park_job_gen_;
  pause_cv_.notify_all();
  const auto all_done = [&] { return park_job_done_ == workers_.size(); };
  if (pause_cv_.wait_for(lock, std::chrono::milliseconds(kJobWaitMs), all_done)) return true;
  // Late, but not abandoned: ctx lives on the caller's stack, and once this returns the engine
  // is the discard's again. The job's own work bounds this wait.
  pause_cv_.wait(lock, all_done);
  return false;
}

Result<std::vector<std::pair<uint64_t, uint64_t>>> ShardServer::ask_decisions(
    uint32_t shard, uint32_t replica, const std::vector<uint64_t>& ids) {
  constexpr uint64_t kDecisionsAskMs = 3000, kCallMs = 1000;
  ControlClient client(config_);
  client.set_leader(shard, replica);
  std::vector<std::pair<uint64_t, uint64_t>> found;
  const uint64_t deadline_ns = RealEnv::instance().now_ns() + kDecisionsAskMs * kMs;
  for (size_t first = 0; first < ids.size(); first += kDecisionIdsMax) {
    const size_t end = std::min(ids.size(), first + kDecisionIdsMax);
    const nlohmann::json request = {
        {"ids", std::vector<uint64_t>(ids.begin() + static_cast<ptrdiff_t>(first),
                                      ids.begin() + static_cast<ptrdiff_t>(end))}};
    Result<nlohmann::json> reply = Status::Timeout("not asked");
    while (!g_stop.load()) {  // bounded by deadline_ns
      reply = client.call(shard, kDecisions, request, kCallMs);
      if (reply.ok() || RealEnv::instance().now_ns() >= deadline_ns) break;
      client.disconnect(shard);
      RealEnv::instance().sleep_ns(20 * kMs);
    }
    if (!reply.ok()) return reply.status();
    auto list = json_field<nlohmann::json>(*reply, "found");
    if (!list.ok() || !list->is_array()) {
      return Status::Corruption(fmt::format("shard {}'s decisions: no \"found\" list", shard));
    }
    for (const nlohmann::json& pair : *list) {
      uint64_t id = 0, tid = 0;
      if (!pair.is_array() || pair.size() != 2 || !json_detail::convert(pair[0], &id) ||
          !json_detail::convert(pair[1], &tid) || tid == DiscardJournal::kInDoubt) {
        return Status::Corruption(fmt::format("shard {}'s decisions: a malformed entry", shard));
      }
      found.emplace_back(id, tid);
    }
  }
  return found;
}

Status ShardServer::discard_lost_versions(const LostRange& range, uint32_t replica,
                                          uint64_t epoch) {
  constexpr uint64_t kPauseWaitMs = 5000;
  {
    std::lock_guard<std::mutex> lock(pause_mu_);
    pausing_ = true;
  }
  uint32_t posted = 0;
  for (auto& w : workers_) posted += w->loop->post(&Worker::pause_thunk, w.get()).ok();
  std::unique_lock<std::mutex> lock(pause_mu_);
  const bool all =
      posted == workers_.size() && pause_cv_.wait_for(lock, std::chrono::milliseconds(kPauseWaitMs),
                                                      [&] { return parked_ == workers_.size(); });
  // Unless all paused, says which: a full post queue, or a worker blocked off its loop.
  Result<DiscardResult> r =
      Status::Timeout(fmt::format("{} of {} workers paused within {} ms ({} asked to)", parked_,
                                  workers_.size(), kPauseWaitMs, posted));
  lock.unlock();  // the parked workers take it to run run_on_parked's jobs
  if (all) {
    // Every worker waits in park_worker: the journals, the engine and stream 0 are ours.
    const uint64_t start_ns = RealEnv::instance().now_ns();
    std::vector<DiscardJournal*> journals;
    for (auto& w : workers_) journals.push_back(w->discard_journal.get());
    // What we replayed as a follower: its halves of cross-shard transactions are undone like
    // the ones our workers committed (a region's shards failing together).
    if (replay_journal_ != nullptr) journals.push_back(&replay_journal_->journal());
    const size_t in_doubt = resolve_in_doubt(journals, range.shard, replica);
    release_undecided(range.shard, replica, epoch);
    uint64_t overflow = 0;
    for (const DiscardJournal* j : journals) overflow += j->stats().overflow;
    if (compensator_ == nullptr) {
      compensator_ = engine_->make_worker();
      compensator_->set_commit_hook(&repl::StreamAppender::commit_hook, workers_[0]->appender);
      compensator_->txn().set_tid_floor(workers_[0]->appender->logged_floor_tid());
    }
    r = discard_lost(journals, *engine_, *compensator_, range);
    std::vector<uint64_t> kept;
    for (DiscardJournal* j : journals) {
      kept.clear();
      if (r.ok()) {
        for (const auto& [journal, tid] : r->kept) {
          if (journal == j) kept.push_back(tid);
        }
      }
      std::sort(kept.begin(), kept.end());
      j->settle(range.shard, kept);
    }
    if (r.ok()) {
      fmt::print(
          stderr,
          "shoal server: shard {}: discarded what depends on shard {}'s lost TIDs in {:.1f} "
          "ms: {} lost writes, {} records restored, {} removed, {} left in {} transactions "
          "kept whole (writes under a kept version {}, under a lock {}, removes {}, without an "
          "old value {}), "
          "{} not judged; {} transactions were in doubt there; {} writes were never journaled "
          "(full)\n",
          options_.shard, range.shard,
          static_cast<double>(RealEnv::instance().now_ns() - start_ns) / 1e6, r->lost_writes,
          r->restored, r->removed, r->not_discarded, r->kept_txns, r->blocked_under,
          r->blocked_locked, r->blocked_removes, r->blocked_no_old_value, r->unknown, in_doubt,
          overflow);
    }
  }
  lock.lock();
  pausing_ = false;
  pause_cv_.notify_all();
  return r.ok() ? Status::Ok() : r.status();
}

size_t ShardServer::resolve_in_doubt(std::span<DiscardJournal* const> journals, uint32_t shard,
                                     uint32_t replica) {
  std::vector<uint64_t> ids;
  for (const DiscardJournal* j : journals) j->in_doubt_ids(shard, &ids);
  if (ids.empty()) return 0;
  auto found = ask_decisions(shard, replica, ids);
  if (!found.ok()) {
    // 2PC would block here; we judge them lost, as before this question existed, and say so.
    fmt::print(stderr,
               "shoal server: shard {}: {} transactions in doubt at shard {} could not be asked "
               "of its new leader ({}): judged lost\n",
               options_.shard, ids.size(), shard, found.status().to_string());
    return ids.size();
  }
  for (const auto& [id, tid] : *found) {
    for (DiscardJournal* j : journals) j->resolve(id, shard, tid);
  }
  fmt::print(stderr,
             "shoal server: shard {}: {} transactions in doubt at shard {}: its new leader "
             "holds {} of them (committed), the rest are lost\n",
             options_.shard, ids.size(), shard, found->size());
  return ids.size();
}

size_t ShardServer::release_undecided(uint32_t shard, uint32_t replica, uint64_t epoch) {
  std::vector<uint64_t> ids, asked;
  for (auto& w : workers_) {
    w->participant->prepared_coordinated_by(shard, &ids, epoch);
    asked.insert(asked.end(), ids.begin(), ids.end());
  }
  auto found = asked.empty() ? Result<std::vector<std::pair<uint64_t, uint64_t>>>(
                                   std::vector<std::pair<uint64_t, uint64_t>>{})
                             : ask_decisions(shard, replica, asked);
  if (!found.ok()) {  // they stay prepared: the redial asks again (resolve_prepared)
    fmt::print(stderr,
               "shoal server: shard {}: {} prepared transactions of shard {} could not be asked "
               "of its new leader before the discard ({}): they stay prepared\n",
               options_.shard, asked.size(), shard, found.status().to_string());
    return 0;
  }
  struct Job {
    uint32_t shard;
    uint64_t epoch;
    std::vector<dist::TxnId> committed;
    std::atomic<size_t> aborted{0};
  } job{shard, epoch, {}};
  for (const auto& [id, tid] : *found) job.committed.push_back(id);
  std::sort(job.committed.begin(), job.committed.end());
  // On each worker's own thread: aborting ends its Txns, whose ebr guards are that thread's.
  const bool ran = run_on_parked(
      [](void* ctx, Worker* w) {
        auto* j = static_cast<Job*>(ctx);
        j->aborted += w->participant->abort_undecided(j->shard, j->committed, j->epoch);
      },
      &job);
  const size_t aborted = job.aborted.load();
  if (!ran) {
    fmt::print(stderr,
               "shoal server: shard {}: a worker took more than 5 s to end shard {}'s "
               "undecided transactions\n",
               options_.shard, shard);
  }
  if (!asked.empty()) {
    fmt::print(stderr,
               "shoal server: shard {}: {} prepared transactions of shard {} before the discard: "
               "its new leader's log holds {}, {} aborted\n",
               options_.shard, asked.size(), shard, job.committed.size(), aborted);
  }
  return aborted;
}

// F11 (participant.h): asks `shard`'s new leader what its log says of each transaction its
// predecessor coordinated that is still prepared here, and installs or aborts it. One that
// gets no answer stays prepared, its locks held, until a later failover of that shard asks
// again: 2PC blocks rather than guess. It stops holding our stream's promise (F10,
// drop_reservation).
rt::Task<void> resolve_prepared(Worker* w, uint32_t shard, dist::ShardLink* link,
                                std::vector<dist::TxnId> ids) {
  size_t committed = 0, aborted = 0, unknown = 0;
  for (const dist::TxnId id : ids) {
    uint64_t tid = 0, installed = 0;
    txn::DepVec vector;
    const Status answer = co_await link->decision(id, &tid, &vector);
    Status s = answer;
    if (answer.ok() || answer.code() == Code::kNotFound) {
      s = w->participant->resolve(id, answer.ok(), vector, &installed);
      if (s.ok()) ++committed;
      if (s.code() == Code::kAborted) ++aborted;
      if (s.ok() || s.code() == Code::kAborted || s.code() == Code::kNotFound) continue;
    }
    ++unknown;
    // Prepared until an answer comes, but no longer holding our stream's promise (F10): our
    // watermark, and every acknowledgement waiting on it, would wait for that answer.
    w->participant->drop_reservation(id);
    fmt::print(stderr, "shoal server: shard {} worker {}: transaction {:#x} of shard {}: {}\n",
               w->server_shard, w->index, id, shard, s.to_string());
  }
  fmt::print(stderr,
             "shoal server: shard {} worker {}: shard {}'s new leader resolved {} prepared "
             "transactions: {} committed, {} aborted, {} still in doubt\n",
             w->server_shard, w->index, shard, ids.size(), committed, aborted, unknown);
}

template <typename E>
void Worker::redial(uint32_t shard, uint32_t replica, uint64_t new_epoch, uint64_t lost_above,
                    uint64_t lost_through, E endpoint) {
  if (vector_watermark != nullptr) {
    // Before any reply of the new leader raises the shard's entry past the lost TIDs.
    auto ended = vector_watermark->fence(shard, lost_above, lost_through);
    if (!ended.ok()) {
      fmt::print(stderr, "shoal server: shard {} worker {}: fencing shard {}: {}\n",
                 server->shard(), index, shard, ended.status().to_string());
      return;  // not followed: its link stays failed
    }
    if (*ended > 0) {
      fmt::print(stderr,
                 "shoal server: shard {} worker {}: {} transactions depending on what shard {} "
                 "lost will not be acknowledged\n",
                 server->shard(), index, *ended, shard);
    }
  }
  // Fencing: from now on this worker's transactions carry the new epoch, and its participant
  // refuses reads, locks and validates of older ones (the deposed leader's, if it still runs).
  epoch = std::max(epoch, new_epoch);
  participant->advance_epoch(epoch);
  if (participant->followed_failover_of(shard)) {  // fenced above, discarded before the redial
    fmt::print(stderr,
               "shoal server: shard {} worker {}: followed shard {}'s failover (epoch {}), which "
               "our predecessor may not have: serving transactions{}\n",
               server->shard(), index, shard, new_epoch,
               participant->awaits_failovers() ? " once the other failovers are followed" : "");
  }
  auto peer = make_peer(*this, shard, replica, std::move(endpoint));
  if (!peer.ok()) {
    fmt::print(stderr, "shoal server: shard {} worker {}: link to shard {}'s new leader: {}\n",
               server->shard(), index, shard, peer.status().to_string());
    return;
  }
  std::unique_ptr<Peer> old = std::move(peers[shard]);
  if (old != nullptr) {
    const bool live = reaches_live_leader(*old, replica);
    // Not down: a hung leader (its connection never failed: health() did not see it), or the
    // new leader itself, dialed at our appointment.
    if (!old->down) {
      old->down = true;
      const size_t released =
          participant->abort_coordinated_by(shard, /*keep_prepared=*/true, new_epoch);
      fmt::print(stderr, "shoal server: shard {} worker {}: released {} transactions of shard {}\n",
                 server->shard(), index, released, shard);
    }
    if (!end_replaced_link(*old, live, new_epoch)) {
      fmt::print(stderr,
                 "shoal server: shard {} worker {}: the link replaced reached replica {} "
                 "already: its {} calls in flight finish there\n",
                 server->shard(), index, replica, old->outstanding());
    }
    old->retired_ns = loop->now_ns();
    retired.push_back(std::move(old));
  }
  peers[shard] = std::move(*peer);
  coordinator->set_link(shard, peers[shard]->link());
  std::vector<dist::TxnId> prepared;
  participant->prepared_coordinated_by(shard, &prepared, new_epoch);
  if (!prepared.empty()) {
    const Status spawned =
        loop->spawn(resolve_prepared(this, shard, peers[shard]->link(), std::move(prepared)));
    if (!spawned.ok()) {
      fmt::print(stderr,
                 "shoal server: shard {} worker {}: cannot ask shard {}'s new leader about its "
                 "prepared transactions ({}): they stay prepared\n",
                 server->shard(), index, shard, spawned.to_string());
    }
  }
  if (watermark_exchange != nullptr) {
    const Status s = watermark_exchange->replace_link(shard, *peers[shard]->link());
    SHOAL_ASSERT(s.ok(), "watermark exchange: %s", s.to_string().c_str());
  }
  server->note_up(shard);
}

// A promotion: phase 1 on every stream and the old slots installed (bounded, in slices that see
// SIGTERM), then the epoch start on every stream before any worker commits.
Status ShardServer::take_over() {
  const uint64_t start_ns = RealEnv::instance().now_ns();
  Result<repl::TakeoverResult> r = Status::Timeout("not run");
  for (;;) {  // bounded by replication_timeout_ms and g_stop
    r = replication_->wait_takeover(kAcceptSliceMs);
    if (r.ok() || r.status().code() != Code::kTimeout) break;
    if (g_stop.load()) return stopped_by_signal("taking over as leader");
    const uint64_t waited_ms = (RealEnv::instance().now_ns() - start_ns) / kMs;
    if (waited_ms >= options_.replication_timeout_ms) return r.status();
  }
  if (!r.ok()) return r.status();
  // Our TIDs start kTakeoverEpochJump engine epochs above the floor we saw, above any TID the
  // old leader gave in a tail nobody received (its ticker ran on while it lived: 40 ms per
  // epoch), so that those are in the lost range below.
  const uint64_t first_epoch = (r->floor_tid >> 32) + kTakeoverEpochJump;
  // Published before any epoch start is sealed: our start may be chosen on some streams only
  // if we fail next, and a replica that replays another stream's later entries first would
  // then pass F with no fence from the log (issue 14, EpochChangeSim seed 14809). Replicas
  // read the fence from etcd before they replay what our successor sends (replica_cli.cc,
  // published_fences). The old leader's lost TIDs include ones nobody received (above the
  // floor we saw): count as lost everything below our first TID.
  const uint64_t publish_start_ns = RealEnv::instance().now_ns();
  SHOAL_TRY(publish_takeover(r->final_tid, (first_epoch << 32) - 1));
  const uint64_t publish_ns = RealEnv::instance().now_ns() - publish_start_ns;
  if (lost_above_ != r->final_tid) {  // the fence replicas read must be the log's
    return Status::Aborted(fmt::format(
        "shard {}: etcd holds final watermark {:#x} for epoch {}, this takeover found {:#x}",
        options_.shard, lost_above_, epoch_ - 1, r->final_tid));
  }
  for (uint32_t s = 0; s < replication_->streams(); ++s) {
    SHOAL_TRY(
        replication_->appender(s).finish(r->floor_tid, repl::kLogFlagEpochStart, r->final_tid));
  }
  txn::EngineOptions eo = engine_options();
  eo.track_dependencies = true;  // a replicated shard's versions carry their vectors
  const size_t purged = engine_->start_leading(first_epoch, &eo);
  snapshot_tid_ = r->floor_tid;
  decisions_ = r->decisions;
  replay_journal_ = std::dynamic_pointer_cast<ReplayJournal>(r->observer);
  const size_t versions_with_deps =
      replay_journal_ != nullptr ? replay_journal_->journal().restore_version_deps(*engine_) : 0;
  decisions_published_.store(decisions_.get(), std::memory_order_release);
  fmt::print(stderr,
             "shoal server: shard {}: replica {} took over in epoch {} in {:.1f} ms (its fences "
             "published to etcd in {:.1f} ms more): final "
             "watermark {:#x}, {} txns installed, {} discarded above it, {} tombstones purged, "
             "{} cross-shard decisions known, {} replayed cross-shard writes journaled ({} "
             "forgotten, {} not journaled; {} versions given their vectors)\n",
             options_.shard, me_, epoch_, static_cast<double>(r->elapsed_ns) / 1e6,
             static_cast<double>(publish_ns) / 1e6, r->final_tid, r->replayed_txns,
             r->discarded_txns, purged, decisions_ != nullptr ? decisions_->size() : 0,
             replay_journal_ != nullptr ? replay_journal_->journal().size() : 0,
             replay_journal_ != nullptr ? replay_journal_->journal().stats().forgotten : 0,
             replay_journal_ != nullptr ? replay_journal_->journal().stats().overflow : 0,
             versions_with_deps);
  return Status::Ok();
}

// The FVW of the epoch that ended with our predecessor (docs/REPLICATION.md, "Failover across
// shards"): our final watermark and the floor of our old TIDs (what lies between was lost with the
// old leader), and the FVW itself, every other shard healthy (an epoch change replaces one shard's
// leader). Written once (a value published first, by an earlier attempt, stays and is what we fence
// with).
Status ShardServer::publish_takeover(uint64_t final_tid, uint64_t floor_tid) {
  lost_above_ = final_tid;
  lost_through_ = std::max(floor_tid, final_tid + 1);
  if (options_.etcd.empty()) return Status::Ok();
  SHOAL_TRY(open_etcd());
  cluster::ClusterStateStore store(*etcd_, config_.name);
  auto stored =
      store.publish_takeover(epoch_ - 1, options_.shard, final_tid, lost_through_, me_, epoch_);
  if (!stored.ok()) return stored.status();
  lost_above_ = stored->final_watermark;
  lost_through_ = std::max(stored->floor, lost_above_ + 1);
  return Status::Ok();
}

bool ShardServer::find_decision(const void* ctx, dist::TxnId id, uint64_t* tid,
                                txn::DepVec* vector) {
  const auto* server = static_cast<const ShardServer*>(ctx);
  return server->decisions_->find(id, server->options_.shard, tid, vector);
}

Status ShardServer::await_failover_record(uint32_t shard, uint64_t epoch, uint64_t* final_tid,
                                          uint64_t* floor_tid) {
  if (epoch < 2) return Status::InvalidArgument(fmt::format("shard {}: epoch {}", shard, epoch));
  cluster::ClusterStateStore store(*etcd_, config_.name);
  const uint64_t deadline_ns = RealEnv::instance().now_ns() + kRedialTimeoutMs * kMs;
  Status last = Status::Timeout("not asked");
  while (RealEnv::instance().now_ns() < deadline_ns && !g_stop.load()) {  // bounded
    auto fw = store.final_watermark(epoch - 1, shard);
    auto fl = store.epoch_floor(epoch - 1, shard);
    if (fw.ok() && fl.ok() && fw->has_value() && fl->has_value()) {
      *final_tid = **fw;
      *floor_tid = std::max(**fl, **fw + 1);
      return Status::Ok();
    }
    last = !fw.ok() ? fw.status() : !fl.ok() ? fl.status() : Status::NotFound("not published");
    RealEnv::instance().sleep_ns(20 * kMs);
  }
  return Status::Timeout(fmt::format("shard {}'s final watermark of epoch {}: {}", shard, epoch - 1,
                                     last.to_string()));
}

}  // namespace shoal::server::detail

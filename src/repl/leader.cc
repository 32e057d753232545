#include "src/repl/leader.h"

#include <unistd.h>

#include <bit>
#include <cstdlib>
#include <deque>

#include <fmt/format.h>

#include "src/base/json_field.h"
#include "src/net/auth.h"
#include "src/repl/lead_bound.h"

namespace shoal::repl {

PaxosOptions paxos_options_for_rtt(uint64_t rtt_ns) {
  PaxosOptions o;
  o.heartbeat_ns = kQuietTickNs;  // tick() runs every kTickNs = 2 ms, quiet every 10 ms
  // TCP already delivers reliably: retransmission matters after a reconnect or a leader
  // change, so it waits well past a round trip plus a busy follower's queueing (a re-sent
  // entry costs as much as the first send: hundreds of KB for a TPC-C batch).
  o.retransmit_ns = 2 * rtt_ns + 200'000'000;
  // Generous: a follower installing a large entry (the bootstrap's 1 MiB ones take tens of
  // ms) must not look dead, and a re-election in a shard with a long retained log needs
  // several promise rounds (each message carries at most max_message_bytes of entries).
  o.election_timeout_ns = std::max<uint64_t>(1'000'000'000, 4 * rtt_ns + 500'000'000);
  // A stream seals an entry about every millisecond under load, so a round trip of R ms keeps
  // about R entries in flight: 64 slots capped a 50 ms WAN at its RTT-0 rate. Two per ms of
  // round trip on top, at most 128: in-flight slots plus the commit notice's delay must stay
  // below the followers' lag bound (LeaderOptions::follower_lag_slots_max, 192).
  o.pipeline_slots = static_cast<uint32_t>(std::min<uint64_t>(128, 64 + 2 * (rtt_ns / 1'000'000)));
  return o;
}

uint32_t replication_message_bytes(const PaxosOptions& paxos, uint32_t batch_bytes_max) {
  (void)paxos;
  return std::max<uint32_t>(2u << 20, batch_bytes_max + (256u << 10));
}

// Gathers: an accept goes out as its headers and the entries' bytes where the store keeps
// them (the appender's ring), each link copying them once at most (PeerLink::send_gather).
class ReplicationLeader::Transport final : public PaxosTransport {
 public:
  Transport(ReplicationLeader* self, uint32_t stream) : self_(self), stream_(stream) {}
  void send(uint32_t to, std::span<const std::byte> message) override {
    self_->send(to, stream_, message);
  }
  bool gathers() const override { return true; }
  void send_gather(uint32_t to, std::span<const std::span<const std::byte>> pieces) override {
    self_->send_gather(to, stream_, pieces);
  }

 private:
  ReplicationLeader* self_;
  uint32_t stream_;
};

struct ReplicationLeader::Stream {
  uint32_t id = 0;
  std::unique_ptr<StreamAppender> appender;
  PaxosAcceptorStore store;
  std::unique_ptr<AcceptorLog> log;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<PaxosStream> paxos;
  std::deque<SealedEntry> pending;  // sealed, not yet proposed (bounded by the ring's entries)
  bool leading = false;
  // By replica: catching up (not waited for) until back within follower_lag_slots_max.
  std::array<bool, kPaxosReplicasMax> catching_up{};
  uint64_t persisted = 0;                           // the durable slot on_durable last noted
  std::pair<Ballot, uint64_t> synced_inline{0, 0};  // sync_inline(): the last (ballot, slot)
  uint64_t chosen_bytes = 0, chosen_entries = 0;
  uint64_t catchup_errors_seen = 0;
  bool catchup_wal_noted = false;   // said once on stderr
  std::optional<LeadBound> lead;    // init()
  bool lead_held = false;           // what update_lead_hold() last told the appender
  bool lead_hold_unchosen = false;  // ... and why (LeadBound::Hold::kUnchosen), since when
  uint64_t lead_hold_since_ns = 0;
  explicit Stream(uint64_t retain) : store(retain) {}
};

struct ReplicationLeader::Peer {
  ReplicationLeader* self = nullptr;
  uint32_t replica = 0;
  PeerLink ep;
  bool dead = false;
  Status why;
  uint64_t replayed_tid = 0;  // the follower's applied TID as it last reported
  bool replay_reported = false;
  Peer(ReplicationLeader* s, uint32_t r, RawEndpoint e, net::LinkShape shape)
      : self(s), replica(r), ep(std::move(e), shape) {}
};

StreamAppender& ReplicationLeader::appender(uint32_t stream) {
  return *streams_[stream]->appender;
}

ReplicationLeader::ReplicationLeader(const LeaderOptions& options, txn::Engine& engine)
    : options_(options),
      engine_(engine),
      wm_(options.streams),
      wm_history_(watermark_rise_gap_max_ns(options.lead_ms_max,
                                            options.appender.limits.batch_age_ns_max, kTickNs)) {}

Result<std::unique_ptr<ReplicationLeader>> ReplicationLeader::start(const LeaderOptions& options,
                                                                    txn::Engine& engine,
                                                                    Takeover* takeover) {
  if (options.streams < 1 || options.replicas < 1 || options.replicas > kPaxosReplicasMax ||
      options.replica >= options.replicas) {
    return Status::InvalidArgument(fmt::format("replication: {} streams, replica {} of {}",
                                               options.streams, options.replica, options.replicas));
  }
  if (takeover != nullptr &&
      (takeover->stores.size() != options.streams || takeover->logs.size() != options.streams ||
       takeover->applier == nullptr || !options.wal_dir.empty())) {
    return Status::InvalidArgument(
        fmt::format("replication: a takeover of {} streams brought {} stores and {} logs",
                    options.streams, takeover->stores.size(), takeover->logs.size()));
  }
  if (options.follower_lag_slots_max == 0 ||
      options.follower_lag_slots_max >= options.retain_chosen_slots) {
    return Status::InvalidArgument(
        fmt::format("replication: follower_lag_slots_max {} must be in [1, retain_chosen_slots {})",
                    options.follower_lag_slots_max, options.retain_chosen_slots));
  }
  if (!options.receive_shapes.empty() && options.receive_shapes.size() != options.replicas) {
    return Status::InvalidArgument("replication: one receive shape per replica");
  }
  std::unique_ptr<ReplicationLeader> l(new ReplicationLeader(options, engine));
  SHOAL_TRY(l->init(takeover));
  if (!net::cluster_secret().empty()) {
    l->authenticating_ = true;
    l->acceptor_ = std::thread([p = l.get()] { p->authenticating_acceptor_main(); });
  }
  if (l->fabric_listener_) {
    l->fabric_acceptor_ = std::thread([p = l.get()] { p->fabric_acceptor_main(); });
  }
  l->thread_ = std::thread([p = l.get()] { p->thread_main(); });
  if (l->deferred_sync_ && !l->sync_inline_) {
    l->syncer_ = std::thread([p = l.get()] { p->syncer_main(); });
  }
  return l;
}

Status ReplicationLeader::init(Takeover* takeover) {
  std::vector<uint64_t> follower_one_way_ns;
  for (uint32_t r = 0; r < options_.receive_shapes.size(); ++r) {
    if (r != options_.replica) {
      follower_one_way_ns.push_back(options_.receive_shapes[r].one_way_delay_ns);
    }
  }
  majority_rtt_ns_ = majority_rtt_ns(options_.replicas, std::move(follower_one_way_ns));
  options_.paxos.max_message_bytes =
      replication_message_bytes(options_.paxos, options_.appender.limits.batch_bytes_max);
  net::EndpointOptions eo;
  eo.max_message_bytes = options_.paxos.max_message_bytes + 4096;
  eo.tcp_buffer_bytes = tcp_buffer_bytes_for(eo.max_message_bytes);
  auto listener = net::TcpListener::listen(options_.listen_host, options_.listen_port, eo);
  if (!listener.ok()) return listener.status();
  listener_ = std::move(*listener);
  port_ = listener_.port();
  if (options_.link == LinkKind::kTcp || options_.link == LinkKind::kShm) {
    // Followers keep entries in their receive rings until chosen (Follower::shed_for_ring),
    // over tcp in a ring of the same size (Follower::run).
    options_.paxos.pipeline_bytes = shm_ring_bytes_for(eo.max_message_bytes) / 4;
  }
  if (options_.link == LinkKind::kShm) {
    eo.ring_bytes = shm_ring_bytes_for(eo.max_message_bytes);
    auto shm = net::ShmListener::listen(replication_shm_name(options_.listen_host, port_), eo);
    if (!shm.ok()) return shm.status();
    shm_listener_.emplace(std::move(*shm));
  } else if (options_.link == LinkKind::kFabric) {
    eo.ring_bytes = shm_ring_bytes_for(eo.max_message_bytes);
    auto fab = net::FabricListener::listen_local(
        replication_fabric_name(options_.listen_host, port_), eo, options_.fabric);
    if (!fab.ok()) return fab.status();
    fabric_listener_.emplace(std::move(*fab));
  }
  rt::LoopOptions lo;
  lo.spin_ns = 5'000;  // the workers need the cores more than we need a fast wake-up
  lo.max_pollers = kPaxosReplicasMax + 4;
  loop_ = std::make_unique<rt::EventLoop>(RealEnv::instance(), lo);
  peers_.resize(options_.replicas);
  reports_.resize(options_.replicas);
  lost_.assign(options_.replicas, false);
  init_checkpoints();
  // Our own acceptances are synced off the replication thread (the syncer), so followers'
  // acceptances make a majority meanwhile. A takeover's logs were opened by the follower and
  // switch to that (sync_elsewhere_from_now_on).
  deferred_sync_ =
      options_.fsync != FsyncPolicy::kNone && (takeover != nullptr || !options_.wal_dir.empty());
  if (takeover != nullptr) {
    takeover_applier_ = std::move(takeover->applier);
    takeover_tracker_.emplace(options_.streams, *takeover_applier_);
    takeover_start_ns_ = RealEnv::instance().now_ns();
    // Every other replica is absent until it dials us: reports need not wait for the dead.
    for (uint32_t r = 0; r < options_.replicas; ++r) lost_[r] = r != options_.replica;
  }
  options_.paxos.defer_self_ack = deferred_sync_;
  // A lone replica has no followers to send to while its WAL syncs, so the syncer's thread
  // would only add two wake-ups per entry (request, then durable): it syncs here instead.
  sync_inline_ = deferred_sync_ && options_.replicas == 1;
  sync_.requested.assign(options_.streams, {0, 0});
  sync_.durable.assign(options_.streams, {0, 0});
  for (uint32_t s = 0; s < options_.streams; ++s) {
    auto st = std::make_unique<Stream>(options_.retain_chosen_slots);
    st->id = s;
    AppenderOptions ao = options_.appender;
    ao.shard = options_.shard;
    ao.stream = s;
    // Patches need the key's writes replayed in TID order: one stream's slot order is that.
    ao.log_patches = options_.streams == 1;
    // The store keeps the ring's entries (no copy), so the ring's entry slots cover what it
    // holds: the retained chosen slots, the pipeline in flight, and a margin for sealed
    // entries waiting to be proposed. Retention then never makes the worker wait for a slot;
    // for bytes (the ring's pool_buffers x buffer) the store sheds its retained slots when
    // the worker runs short (drain()).
    ao.pool_entries = std::max<uint32_t>(
        ao.pool_entries,
        static_cast<uint32_t>(std::bit_ceil(std::min<uint64_t>(
            options_.retain_chosen_slots + options_.paxos.pipeline_slots + kPendingMarginEntries,
            kPoolEntriesMax))));
    st->appender =
        std::make_unique<StreamAppender>(ao, engine_, RealEnv::instance(), &on_post, this);
    st->lead.emplace(options_.lead_ms_max * 1'000'000, majority_rtt_ns_, ao.pool_entries);
    if (takeover != nullptr) {
      st->store = std::move(*takeover->stores[s]);
      st->log = std::move(takeover->logs[s]);
      if (deferred_sync_) SHOAL_TRY(st->log->sync_elsewhere_from_now_on());
      st->store.set_hooks(st->log->hooks());
      // The shard watermark starts where the follower's replay stood on this stream.
      wm_.advance(s, takeover_applier_->watermark().stream(s));
    } else if (!options_.wal_dir.empty()) {
      auto log = AcceptorLog::open(options_.wal_dir, s, options_.fsync, deferred_sync_);
      if (!log.ok()) return log.status();
      st->log = std::move(*log);
      auto rec = st->log->recover(st->store);
      if (!rec.ok()) return rec.status();
      if (rec->slots != 0) {
        return Status::AlreadyExists(
            "replication: " + options_.wal_dir +
            " holds a log; a leader over it recovers it (`shoal server --recover-epoch E`, as "
            "`cluster up` restarts a cluster) or it is cleared first (`cluster up --fresh`); "
            "not started, nothing written");
      }
      st->store.set_hooks(st->log->hooks());
    }
    st->transport = std::make_unique<Transport>(this, s);
    PaxosOptions po = options_.paxos;
    po.shard = options_.shard;
    po.stream = s;
    po.epoch = ao.epoch;
    po.replica_id = options_.replica;
    po.replica_count = options_.replicas;
    po.may_lead = true;
    // Only etcd replaces this leader (its followers never stand in Paxos): stepped down for a
    // second without a majority (followers starved of CPU) it would lead its shard in etcd
    // and propose nothing, for good (paxos_stream.h).
    po.step_down_without_majority = false;
    Stream* raw = st.get();
    st->paxos = std::make_unique<PaxosStream>(
        RealEnv::instance(), *st->transport, st->store, po,
        [this, raw](uint64_t slot, const EntryBuffer& e) { on_chosen(*raw, slot, e.span()); });
    // A follower lagging beyond the retained slots is caught up from our WAL.
    if (st->log) st->paxos->set_chosen_source(st->log.get());
    streams_.push_back(std::move(st));
  }
  return Status::Ok();
}

ReplicationLeader::~ReplicationLeader() {
  stop();
}

void ReplicationLeader::stop() {
  if (syncer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(sync_.mu);
      sync_.stop = true;
    }
    sync_.cv.notify_one();
    syncer_.join();
  }
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  if (acceptor_.joinable()) acceptor_.join();                // it looks at stop_ every accept slice
  if (fabric_acceptor_.joinable()) fabric_acceptor_.join();  // likewise
  // Bounded: the loop drains posts every iteration; retry while its post queue is full.
  while (!loop_->post([](void* l) { static_cast<rt::EventLoop*>(l)->stop(); }, loop_.get()).ok()) {
    std::this_thread::yield();
  }
  thread_.join();
  // Destroyed here, not on its thread: post() above still reads the loop after publishing the
  // stop, and the loop thread may already have taken it and returned (TSan saw the
  // use-after-free). Appenders must not seal after stop(): the loop no longer exists.
  loop_.reset();
  for (auto& p : peers_) {
    if (p) p->ep.close();
  }
  if (publish_thread_.joinable()) publish_thread_.join();
  if (fetch_) {  // interrupted: its partial file is of no use
    if (fetch_->fd >= 0) ::close(fetch_->fd);
    std::remove(fetch_->tmp.c_str());
    fetch_.reset();
  }
}

void ReplicationLeader::thread_main() {
  loop_->take_ownership();  // built by create() on the caller's thread
  SHOAL_ASSERT(schedule_tick(loop_->now_ns() + kTickNs), "%s", "replication tick timer");
  if (stop_.load(std::memory_order_acquire)) return;
  // A takeover stands for election at once: a higher ballot than the failed leader's fences
  // it out of every acceptor that promises.
  if (takeover_applier_) {
    for (auto& s : streams_) s->paxos->campaign();
  }
  loop_->run();
  // A leader that stops says so, so that its followers exit with it instead of electing a
  // successor (a SIGKILLed one says nothing: they take over).
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    if (!peers_[r] || peers_[r]->dead) continue;
    send_control(r, {{"type", "bye"}});
    (void)peers_[r]->ep.flush();
  }
  for (auto& p : peers_) {
    if (p) loop_->remove_poller(p.get());
  }
}

void ReplicationLeader::on_tick(void* self, uint64_t) {
  auto* l = static_cast<ReplicationLeader*>(self);
  l->tick();
  if (l->stop_.load(std::memory_order_acquire)) return;
  const uint64_t period_ns = l->quiet() ? kQuietTickNs : kTickNs;
  (void)l->schedule_tick(l->loop_->now_ns() + period_ns);  // timers full: ticks stop
}

bool ReplicationLeader::schedule_tick(uint64_t due_ns) {
  auto id = loop_->add_timer(due_ns, &on_tick, this);
  tick_timer_ = id.ok() ? *id : 0;
  tick_due_ns_ = id.ok() ? due_ns : 0;
  return id.ok();
}

void ReplicationLeader::hurry_tick() {
  const uint64_t due_ns = loop_->now_ns() + kTickNs;
  if (tick_due_ns_ <= due_ns) return;  // soon enough, or none pending (inside on_tick)
  loop_->cancel_timer(tick_timer_);
  (void)schedule_tick(due_ns);
}

bool ReplicationLeader::quiet() const {
  if (takeover_applier_ || fetch_ || publishing_ || !greeting_.empty()) return false;
  for (const auto& p : peers_) {
    if (p && p->dead) return false;
  }
  for (const auto& s : streams_) {
    if (!s->pending.empty() || !s->paxos->is_leader() || !s->paxos->quiet()) return false;
  }
  return true;
}

void ReplicationLeader::on_post(void* self) {
  // From a worker after a seal. A full post queue only delays the proposal to the next tick.
  auto* l = static_cast<ReplicationLeader*>(self);
  l->loop_
      ->post(
          [](void* p) {
            auto* me = static_cast<ReplicationLeader*>(p);
            for (auto& s : me->streams_) me->drain(*s);
          },
          l)
      .ignore();
}

void ReplicationLeader::tick() {
  wm_history_.note(watermark_.load(std::memory_order_relaxed), loop_->now_ns(), chosen_txns_);
  accept_connections();
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r] && peers_[r]->dead) drop_peer(r, peers_[r]->why);
  }
  update_successor(loop_->now_ns());
  update_pace(loop_->now_ns());
  uint32_t leading = 0;
  for (auto& s : streams_) {
    s->paxos->tick();
    update_catching_up(*s);  // also while nothing is proposed (stats)
    s->leading = s->paxos->is_leader();
    leading += s->leading ? 1 : 0;
    drain(*s);
  }
  leading_.store(leading, std::memory_order_release);
  if (takeover_applier_) check_takeover();
  say_serving();
  maybe_fetch_checkpoint(loop_->now_ns());
  nlohmann::json request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request = report_request_;
    stats_.proposed = stats_.chosen = stats_.retransmits = stats_.messages_sent = 0;
    stats_.elections = stats_.stepped_down = stats_.became_leader = 0;
    stats_.catchup_entries = stats_.catchup_wal_entries = stats_.catchup_errors = 0;
    stats_.catchup_bytes = 0;
    stats_.catching_up = 0;
    stats_.pace_limited_ns = pace_.limited_ns();
    stats_.pace_limited_txns = static_cast<uint64_t>(pace_.limited_txns());
    stats_.pace_replay_per_s = static_cast<uint64_t>(pace_.replay_per_s());
    for (auto& s : streams_) {
      const PaxosStats& ps = s->paxos->stats();
      stats_.catchup_entries += ps.catchup_entries_sent;
      stats_.catchup_bytes += ps.catchup_bytes_sent;
      stats_.catchup_wal_entries += ps.catchup_source_entries;
      stats_.catchup_errors += ps.catchup_source_errors;
      for (uint32_t r = 0; r < options_.replicas; ++r) stats_.catching_up += s->catching_up[r];
      if (ps.catchup_source_entries > 0 && !s->catchup_wal_noted) {
        s->catchup_wal_noted = true;
        std::fprintf(stderr, "replication: stream %u: catching up a follower from the WAL\n",
                     s->id);
      }
      if (ps.catchup_source_errors > s->catchup_errors_seen) {
        if (s->catchup_errors_seen == 0) {
          std::fprintf(stderr, "replication: stream %u: catch-up from the WAL refused: %s\n", s->id,
                       s->paxos->last_catchup_error().to_string().c_str());
        }
        s->catchup_errors_seen = ps.catchup_source_errors;
      }
      stats_.proposed += ps.proposed;
      stats_.chosen += ps.chosen;
      stats_.retransmits += ps.retransmits;
      stats_.messages_sent += ps.messages_sent;
      stats_.elections += ps.elections;
      stats_.stepped_down += ps.stepped_down;
      stats_.became_leader += ps.became_leader;
    }
    note_positions();
  }
  // Report requests are re-sent every 20 ms until answered (cheap JSON, cold path).
  const uint64_t now = loop_->now_ns();
  static const bool debug = std::getenv("SHOAL_REPL_DEBUG") != nullptr;
  if (debug && now - last_debug_ns_ >= 1'000'000'000) {
    last_debug_ns_ = now;
    const LeaderStats st = stats();
    std::fprintf(stderr,
                 "repl: leading %u/%u proposed %lu chosen %lu elections %lu stepped_down %lu "
                 "retransmits %lu watermark %lx pending %zu room %u role %d lag_waits %lu "
                 "replay_lag_waits %lu (max %lu ms) catching_up %lu catchup %lu entries (%lu from "
                 "the WAL) %lu bytes\n",
                 leading, options_.streams, st.proposed, st.chosen, st.elections, st.stepped_down,
                 st.retransmits, watermark(), streams_[0]->pending.size(),
                 streams_[0]->paxos->pipeline_room(), static_cast<int>(streams_[0]->paxos->role()),
                 st.lag_waits, st.replay_lag_waits, st.replay_lag_ms_max, st.catching_up,
                 st.catchup_entries, st.catchup_wal_entries, st.catchup_bytes);
  }
  if (!request.is_null() && now - last_request_ns_ >= 20'000'000) {
    last_request_ns_ = now;
    for (uint32_t r = 0; r < peers_.size(); ++r) {
      if (peers_[r] && !peers_[r]->dead) send_control(r, request);
    }
  }
}

void ReplicationLeader::drain(Stream& s) {
  SealedEntry e;
  while (s.appender->pop_sealed(&e)) {
    s.pending.push_back(e);
    taken_txns_ += e.txns;
    s.lead->sealed(e.sealed_ns);
  }
  relieve(s);
  // Bounded by the pending queue (at most the appender's ring entries).
  // Nothing new is proposed until a takeover's old slots are chosen (their final watermark
  // must be known before the epoch's first entry).
  while (!takeover_applier_ && !s.pending.empty() && s.paxos->is_leader() &&
         s.paxos->pipeline_room() > 0 && followers_keep_up(s)) {
    const SealedEntry& head = s.pending.front();
    std::span<std::byte> buf = s.appender->buffer(head.buffer);
    // The worker numbered its entries from 1; a leader change (no-ops in holes) can move the
    // slot: then the entry is re-stamped, which costs one checksum pass.
    const uint64_t slot = s.paxos->next_slot();
    if (load_u64(buf.data() + 24) != slot) {
      store_u64(buf.data() + 24, slot);
      const uint32_t payload = load_u32(buf.data() + 32);
      store_u64(buf.data() + 56, log_entry_checksum(buf.data(), payload));
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.restamped;
    }
    // The store keeps the sealed bytes themselves; their ring space is free once it lets go.
    // Sealed by this process's appender: the followers verify the checksum on receipt.
    // Cannot fail for want of leadership or room (the loop's condition), and any other
    // failure (a WAL append) is fatal: the entry is never left half proposed.
    Result<uint64_t> r =
        s.paxos->propose(s.appender->take(head.buffer), PaxosStream::EntryCheck::kSealedHere);
    SHOAL_ASSERT(r.ok(), "replication: propose failed: %s", r.status().to_string().c_str());
    s.pending.pop_front();
    s.lead->proposed(slot, RealEnv::instance().now_ns());
    hurry_tick();
  }
  update_lead_hold(s);
  if (sync_inline_) {
    sync_inline(s);
  } else if (deferred_sync_) {
    request_sync(s);
  } else {
    sync_logs();
  }
}

void ReplicationLeader::relieve(Stream& s) {
  // The worker waits for log ring space: the store lets go of the chosen slots it retains (it
  // keeps the ring's bytes), so the wait lasts only while entries are in flight. Those slots
  // are then caught up from the WAL, or, without one, the store keeps copies (counted).
  if (!s.appender->short_of_space()) return;
  const uint64_t shed = s.paxos->shed_retained();
  if (shed == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.retained_shed += shed;
}

void ReplicationLeader::update_lead_hold(Stream& s) {
  // Only a leading stream past any takeover holds its worker: before that nothing is
  // proposed, and the ring alone bounds what waits.
  if (!s.paxos->is_leader()) s.lead->forget_proposed();
  s.appender->note_settled(s.lead->settled());  // group commit (StreamAppender::idle)
  const uint64_t now = RealEnv::instance().now_ns();
  const LeadBound::Hold why =
      !takeover_applier_ && s.paxos->is_leader() ? s.lead->why_hold(now) : LeadBound::Hold::kNone;
  const bool hold = why != LeadBound::Hold::kNone;
  if (hold == s.lead_held) return;
  s.lead_held = hold;
  s.appender->set_lead_hold(hold);
  std::lock_guard<std::mutex> lock(mu_);
  if (hold) {
    ++stats_.lead_holds;
    s.lead_hold_unchosen = why == LeadBound::Hold::kUnchosen;
    s.lead_hold_since_ns = now;
    return;
  }
  (s.lead_hold_unchosen ? stats_.lead_hold_unchosen_ns : stats_.lead_hold_unproposed_ns) +=
      now - s.lead_hold_since_ns;
}

void ReplicationLeader::update_catching_up(Stream& s) {
  // Far behind (found beyond the bound plus a pipeline, or just (re)connected): catching up,
  // until back within the bound.
  const uint64_t next = s.paxos->next_slot();
  const uint64_t bound = options_.follower_lag_slots_max;
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    if (!peers_[r] || peers_[r]->dead) continue;
    const uint64_t peer_chosen = s.paxos->peer_chosen_index(r);
    if (peer_chosen + bound + options_.paxos.pipeline_slots < next) {
      s.catching_up[r] = true;
    } else if (peer_chosen + bound >= next) {
      s.catching_up[r] = false;
    }
  }
}

bool ReplicationLeader::followers_keep_up(Stream& s) {
  // A healthy follower is waited for at follower_lag_slots_max: it then never falls out of
  // the retained slots (a WAN run once stranded one so, when catch-up came from memory only)
  // and the shard goes at its slowest healthy follower's pace, as TCP backpressure made it.
  // A follower far behind (reconnected, restarted, or found beyond the bound plus a pipeline)
  // is caught up from the WAL while the shard goes on without it; it is waited for again
  // once back within the bound. Leader, one healthy follower: still a majority.
  update_catching_up(s);
  const uint64_t next = s.paxos->next_slot();
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    if (!peers_[r] || peers_[r]->dead || s.catching_up[r]) continue;
    if (s.paxos->peer_chosen_index(r) + options_.follower_lag_slots_max < next) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.lag_waits;
      return false;
    }
  }
  return followers_replay_keeps_up(s);
}

bool ReplicationLeader::successor_replay(uint64_t now_ns, SuccessorReplay* out) const {
  if (options_.follower_replay_lag_ms_max == 0 || successor_ == kNoSuccessor) return false;
  // Only the designated successor is waited for: it is the one that takes over (the others
  // defer to it, replica_cli.cc), and holding the shard to its slowest follower's replay cost
  // 40% of the throughput on two cores.
  const Peer* p = peers_[successor_].get();
  if (p == nullptr) return false;
  // The successor's round trip counts in the bound (ratekeeper_bound_ms): at a 50 ms round
  // trip half of the default 100 ms went to the wire, and every replay hiccup paused the shard.
  const net::LinkShape to_successor = successor_ < options_.receive_shapes.size()
                                          ? options_.receive_shapes[successor_]
                                          : net::LinkShape{};
  out->replayed_tid = p->replayed_tid;
  out->lag_ms = wm_history_.lag_ns(p->replayed_tid, now_ns) / 1'000'000;
  out->backlog_ms = wm_history_.backlog_ns(p->replayed_tid, now_ns) / 1'000'000;
  out->one_way_delay_ns = to_successor.one_way_delay_ns;
  out->jitter_ns = to_successor.jitter_ns;
  out->bound_ms = ratekeeper_bound_ms(options_.follower_replay_lag_ms_max,
                                      to_successor.one_way_delay_ns, to_successor.jitter_ns);
  out->rtt_ms = (2 * to_successor.one_way_delay_ns + to_successor.jitter_ns) / 1'000'000;
  return true;
}

bool ReplicationLeader::followers_replay_keeps_up(const Stream& s) {
  (void)s;
  const uint64_t now = loop_->now_ns();
  SuccessorReplay r;
  if (!successor_replay(now, &r)) {
    ratekeeper_.release(now);
    note_ratekeeper_stops();
    return true;
  }
  // The hard limit beyond the bound (the rate, update_pace, keeps the lag well inside it).
  // Stopping the proposals stops the watermark, so the successor's backlog falls within a
  // replay of the bound.
  const uint64_t resume_ms = ratekeeper_resume_ms(r.bound_ms, r.one_way_delay_ns, r.jitter_ns);
  const bool go = ratekeeper_.admit(r.lag_ms, r.backlog_ms, r.bound_ms, resume_ms, now);
  note_ratekeeper_stops();
  if (go) return true;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.replay_lag_waits;
  stats_.replay_lag_ms_max = std::max(stats_.replay_lag_ms_max, r.lag_ms);
  return false;
}

void ReplicationLeader::update_pace(uint64_t now_ns) {
  SuccessorReplay r;
  uint64_t rate = 0;
  // Nothing is proposed during a takeover: nothing to pace.
  if (takeover_applier_ || !successor_replay(now_ns, &r)) {
    pace_.release(now_ns);
  } else {
    RatekeeperRate::Reading reading;
    reading.now_ns = now_ns;
    reading.lag_ms = r.lag_ms;
    reading.taken_txns = taken_txns_;
    reading.replayed_txns = wm_history_.txns_through(r.replayed_tid);
    reading.successor = successor_;
    rate = pace_.update(RatekeeperRate::shape(r.bound_ms, r.rtt_ms), reading);
  }
  if (rate == paced_rate_) return;
  paced_rate_ = rate;
  // The shard's rate, shared evenly among its streams (one per worker).
  const uint64_t per_stream = rate == 0 ? 0 : std::max<uint64_t>(1, rate / streams_.size());
  for (auto& s : streams_) s->appender->set_pace_rate(per_stream);
}

void ReplicationLeader::note_ratekeeper_stops() {
  const uint64_t stop_ms = ratekeeper_.stopped_total_ns() / 1'000'000;
  if (stop_ms == reported_stop_ms_) return;
  reported_stop_ms_ = stop_ms;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.replay_lag_stop_ms = stop_ms;
}

// The successor: the connected follower, caught up on every stream, that replayed furthest.
// Followers hear who it is when it changes and every kSuccessorResendNs (new connections).
void ReplicationLeader::update_successor(uint64_t now_ns) {
  uint32_t best = kNoSuccessor;
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    const Peer* p = peers_[r].get();
    if (p == nullptr || p->dead || !p->replay_reported) continue;
    bool catching_up = false;
    for (const auto& st : streams_) catching_up = catching_up || st->catching_up[r];
    if (catching_up) continue;
    if (best == kNoSuccessor || p->replayed_tid > peers_[best]->replayed_tid) best = r;
  }
  if (best == successor_ && now_ns - successor_sent_ns_ < kSuccessorResendNs) return;
  successor_ = best;
  successor_sent_ns_ = now_ns;
  if (best == kNoSuccessor) return;
  const nlohmann::json j = {{"type", "successor"}, {"replica", best}};
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r] && !peers_[r]->dead) send_control(r, j);
  }
}

void ReplicationLeader::request_sync(Stream& s) {
  const std::pair<Ballot, uint64_t> want{s.paxos->ballot(), s.paxos->next_slot() - 1};
  {
    std::lock_guard<std::mutex> lock(sync_.mu);
    if (sync_.requested[s.id] == want) return;
    sync_.requested[s.id] = want;
  }
  sync_.cv.notify_one();
}

void ReplicationLeader::syncer_main() {
  std::vector<std::pair<Ballot, uint64_t>> done(options_.streams, {0, 0});
  std::vector<std::pair<Ballot, uint64_t>> want;
  for (;;) {  // until stop; each pass syncs what was requested meanwhile (a group)
    {
      std::unique_lock<std::mutex> lock(sync_.mu);
      sync_.cv.wait(lock, [&] { return sync_.stop || sync_.requested != done; });
      if (sync_.stop) return;
      want = sync_.requested;
    }
    for (uint32_t s = 0; s < options_.streams; ++s) {
      if (want[s] != done[s]) sync_own_log(*streams_[s]);
    }
    done = want;
    {
      std::lock_guard<std::mutex> lock(sync_.mu);
      sync_.durable = want;
    }
    // Bounded: the loop drains posts every iteration.
    while (!loop_->post(&on_durable, this).ok() && !stop_.load(std::memory_order_acquire)) {
      std::this_thread::yield();
    }
  }
}

void ReplicationLeader::sync_own_log(Stream& s) {
  const uint64_t start_ns = RealEnv::instance().now_ns();
  const Status st = s.log->sync_from_any_thread();
  fsync_latency_.observe(RealEnv::instance().now_ns() - start_ns);
  SHOAL_ASSERT(st.ok(), "replication: WAL sync failed: %s", st.to_string().c_str());
}

void ReplicationLeader::sync_inline(Stream& s) {
  const std::pair<Ballot, uint64_t> want{s.paxos->ballot(), s.paxos->next_slot() - 1};
  if (s.synced_inline == want) return;
  sync_own_log(s);
  s.synced_inline = want;
  s.persisted = want.second;
  s.paxos->note_self_durable(want.first, want.second);  // our vote alone chooses
}

void ReplicationLeader::on_durable(void* self) {
  auto* l = static_cast<ReplicationLeader*>(self);
  std::vector<std::pair<Ballot, uint64_t>> durable;
  {
    std::lock_guard<std::mutex> lock(l->sync_.mu);
    durable = l->sync_.durable;
  }
  for (uint32_t s = 0; s < l->options_.streams; ++s) {
    l->streams_[s]->persisted = durable[s].second;
    l->streams_[s]->paxos->note_self_durable(durable[s].first, durable[s].second);
  }
}

void ReplicationLeader::sync_logs() {
  // Group commit: our own acceptances become durable before this thread handles any reply
  // that could make them count towards a choice.
  for (auto& s : streams_) {
    if (s->log && s->log->dirty()) {
      const Status st = s->log->sync();
      SHOAL_ASSERT(st.ok(), "replication: WAL sync failed: %s", st.to_string().c_str());
    }
  }
}

void ReplicationLeader::on_chosen(Stream& s, uint64_t slot, std::span<const std::byte> entry) {
  if (s.log) s.log->note_chosen(slot);
  s.lead->chosen_through(slot);
  chosen_txns_ += entry_record_count(entry.data());
  update_lead_hold(s);
  s.chosen_bytes += entry.size();
  ++s.chosen_entries;
  batch_bytes_.observe(entry.size());
  // A takeover installs the old slots as they are chosen (gated by the watermark as any
  // follower's replay; above the final watermark the records stay queued and are dropped).
  // Its watermark is the shard's meanwhile: it holds a stream at a hole phase 1 filled with a
  // no-op (the records after it may be above F: replay.cc), which wm_ would pass.
  if (takeover_applier_) {
    takeover_applier_->on_chosen(s.id, entry);
    watermark_.store(takeover_applier_->applied_tid(), std::memory_order_release);
  } else {
    watermark_.store(wm_.advance(s.id, entry_max_tid(entry.data())), std::memory_order_release);
  }
  if (options_.on_chosen != nullptr) options_.on_chosen(options_.on_chosen_ctx, s.id);
}

void ReplicationLeader::say_serving() {
  if (serving_said_ || !serving_noted_.load(std::memory_order_acquire)) return;
  serving_said_ = true;
  if (!options_.announces_serving) return;  // its followers took it as serving from the start
  for (uint32_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r] && !peers_[r]->dead) send_control(r, {{"type", "serving"}});
  }
}

void ReplicationLeader::check_takeover() {
  for (uint32_t i = 0; i < streams_.size(); ++i) {
    const PaxosStream& p = *streams_[i]->paxos;
    if (!takeover_tracker_->note(i, p.is_leader(), p.next_slot(), p.chosen_index())) return;
  }
  TakeoverResult r = takeover_tracker_->result(*takeover_applier_);
  // wm_ goes on from the applier's (it was not advanced during the takeover); the epoch
  // starts then lift every stream to the floor.
  for (uint32_t i = 0; i < streams_.size(); ++i) {
    wm_.advance(i, takeover_applier_->watermark().stream(i));
  }
  r.elapsed_ns = RealEnv::instance().now_ns() - takeover_start_ns_;
  takeover_tracker_.reset();
  takeover_applier_.reset();
  takeover_result_ = r;
  takeover_done_.store(true, std::memory_order_release);
}

Result<TakeoverResult> ReplicationLeader::wait_takeover(uint64_t timeout_ms) {
  Env& env = RealEnv::instance();
  const uint64_t deadline = env.now_ns() + timeout_ms * 1'000'000;
  while (!takeover_done_.load(std::memory_order_acquire)) {  // bounded by the deadline
    if (env.now_ns() >= deadline) {
      return Status::Timeout(fmt::format(
          "replication: takeover of shard {}: {} of {} streams lead after {} ms (followers "
          "connected: {}; a majority of {} must answer)",
          options_.shard, leading_.load(), options_.streams, timeout_ms,
          stats().followers_connected, options_.replicas / 2 + 1));
    }
    env.sleep_ns(1'000'000);
  }
  return takeover_result_;
}

void ReplicationLeader::authenticating_acceptor_main() {
  while (!stop_.load(std::memory_order_acquire)) {
    auto ep = listener_.accept(100);  // a slice: stop() joins within it plus one handshake
    if (!ep.ok()) {
      if (ep.status().code() == Code::kInvalidArgument) {
        fmt::print(stderr, "replication: {}\n", ep.status().message());
      }
      continue;
    }
    std::lock_guard<std::mutex> lock(authenticated_mu_);
    if (authenticated_.size() < kAuthenticatedMax) authenticated_.push_back(std::move(*ep));
  }
}

void ReplicationLeader::fabric_acceptor_main() {
  while (!stop_.load(std::memory_order_acquire)) {
    // A slice: stop() joins within it plus one handshake (bounded by its timeout).
    auto ep = fabric_listener_->accept(100);
    if (!ep.ok()) {
      if (ep.status().code() != Code::kTimeout) {
        fmt::print(stderr, "replication: fabric accept: {}\n", ep.status().to_string());
      }
      continue;
    }
    std::lock_guard<std::mutex> lock(authenticated_mu_);
    if (authenticated_.size() < kAuthenticatedMax) authenticated_.emplace_back(std::move(*ep));
  }
}

void ReplicationLeader::accept_connections() {
  // Bounded: at most a few new connections per tick.
  if (authenticating_ || fabric_listener_) {
    std::lock_guard<std::mutex> lock(authenticated_mu_);
    for (auto& ep : authenticated_) greeting_.emplace_back(std::move(ep));
    authenticated_.clear();
  }
  for (int i = 0; i < 4 && !authenticating_; ++i) {
    auto ep = listener_.accept(0);
    if (!ep.ok()) break;
    greeting_.emplace_back(std::move(*ep));
  }
  for (int i = 0; shm_listener_ && i < 4; ++i) {
    // A follower that connected is inside its half of the handshake: it answers at once.
    auto ep = shm_listener_->accept(0, 1000);
    if (!ep.ok()) break;
    greeting_.emplace_back(std::move(*ep));
  }
  for (size_t i = 0; i < greeting_.size();) {
    net::Completion c[8];
    auto n = std::visit([&](auto& e) { return e.poll(c, 8); }, greeting_[i]);
    bool done = !n.ok();
    if (n.ok() && *n > 0) {
      // The first message of a follower is its hello; nothing else is sent before the
      // schema comes back.
      uint32_t replica = options_.replica;  // none: refused below
      if (c[0].imm == kControlSession) {
        auto j = nlohmann::json::parse(c[0].bytes.begin(), c[0].bytes.end(), nullptr, false);
        std::string type;
        uint32_t said = options_.replica;
        // Malformed (a wrong type anywhere): refused below, as a connection without a hello.
        if (!j.is_discarded() && json_optional_field(j, "type", &type).ok() && type == "hello" &&
            json_optional_field(j, "replica", &said).ok()) {
          replica = said;
        }
      }
      // Anything behind the hello (a restarted follower's heartbeats) is dropped: Paxos
      // messages are retransmitted. But not its checkpoint note, sent once per connection
      // right behind the hello (bounded by the batch of 8).
      std::vector<nlohmann::json> notes;
      for (size_t k = 1; n.ok() && k < *n; ++k) {
        if (c[k].imm != kControlSession) continue;
        auto j = nlohmann::json::parse(c[k].bytes.begin(), c[k].bytes.end(), nullptr, false);
        std::string type;
        if (!j.is_discarded() && json_optional_field(j, "type", &type).ok() &&
            type == "checkpoint") {
          notes.push_back(std::move(j));
        }
      }
      std::visit([](auto& e) { e.release(); }, greeting_[i]);
      done = true;
      if (replica != options_.replica && replica < options_.replicas) {
        if (peers_[replica]) drop_peer(replica, Status::Aborted("replaced by a new connection"));
        const net::LinkShape shape =
            options_.receive_shapes.empty() ? net::LinkShape{} : options_.receive_shapes[replica];
        peers_[replica] = std::make_unique<Peer>(this, replica, std::move(greeting_[i]), shape);
        {
          std::lock_guard<std::mutex> lock(mu_);
          lost_[replica] = false;
        }
        connected_.fetch_add(1, std::memory_order_acq_rel);
        // What it needs from our WAL is what this connection says (a replica restarted over
        // an empty directory says nothing: it may need every slot, so nothing more is deleted).
        follower_checkpoints_[replica].reset();
        for (const nlohmann::json& j : notes) note_follower_checkpoint(replica, j);
        // What we know of its chosen index is stale: catching up until it reports otherwise.
        for (auto& s : streams_) s->catching_up[replica] = true;
        Peer* p = peers_[replica].get();
        rt::PollerWake wake;
        wake.prepare = [](void* ctx, int fds[rt::kMaxPollerFds]) {
          auto* peer = static_cast<Peer*>(ctx);
          if (peer->dead) return true;
          return peer->ep.arm(fds);
        };
        wake.end = [](void* ctx) { static_cast<Peer*>(ctx)->ep.end_block(); };
        const Status added = loop_->add_poller(
            [](void* ctx) {
              auto* peer = static_cast<Peer*>(ctx);
              peer->self->poll_peer(*peer);
              return false;
            },
            p,
            [](void* ctx) {
              auto* peer = static_cast<Peer*>(ctx);
              return peer->dead ? rt::kNever : peer->ep.next_due_ns();
            },
            wake);
        SHOAL_ASSERT(added.ok(), "replication: %s", added.to_string().c_str());
        send_control(replica, {{"type", "schema"},
                               {"schema", options_.schema.to_json()},
                               {"streams", options_.streams},
                               {"leader", options_.replica},
                               {"starting", options_.announces_serving && !serving_said_}});
        // Electing: the newcomer has not promised yet; ask it now rather than a retransmit
        // period later.
        if (takeover_applier_) {
          for (auto& s : streams_) s->paxos->campaign();
        }
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.followers_connected;
      } else {
        std::fprintf(stderr, "replication: dropping a connection without a valid hello\n");
      }
    }
    if (done) {
      if (i < greeting_.size()) std::visit([](auto& e) { e.close(); }, greeting_[i]);
      greeting_.erase(greeting_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void ReplicationLeader::poll_peer(Peer& p) {
  if (p.dead) return;
  net::Completion c[16];
  // Bounded: at most 4 batches per call, so one busy follower cannot starve the loop.
  for (int round = 0; round < 4; ++round) {
    auto n = p.ep.poll(c, 16);
    if (!n.ok()) {
      p.dead = true;
      p.why = n.status();
      return;
    }
    if (*n == 0) return;
    for (size_t i = 0; i < *n; ++i) {
      const auto bytes = std::as_bytes(c[i].bytes);
      if (c[i].imm < streams_.size()) {
        streams_[c[i].imm]->paxos->on_message(p.replica, bytes);
      } else if (c[i].imm == kControlSession) {
        handle_control(p.replica, c[i].bytes);
      } else if (c[i].imm == kCheckpointSession) {
        on_checkpoint_chunk(p.replica, c[i].bytes);
      }
    }
    p.ep.release();
    sync_logs();  // an acceptance while not leading must be durable before its reply leaves
    // Entries the replies just got chosen free ring space for a worker waiting on it now,
    // not at the next tick.
    for (auto& s : streams_) relieve(*s);
  }
}

void ReplicationLeader::drop_peer(uint32_t replica, const Status& why) {
  if (!peers_[replica]) return;
  if (!stop_.load(std::memory_order_acquire)) {
    std::fprintf(stderr, "replication: follower %u disconnected (%s)\n", replica,
                 why.to_string().c_str());
  }
  loop_->remove_poller(peers_[replica].get());
  peers_[replica]->ep.close();
  peers_[replica].reset();
  connected_.fetch_sub(1, std::memory_order_acq_rel);
  if (fetch_ && fetch_->from == replica) abandon_fetch("the follower disconnected", true);
  std::lock_guard<std::mutex> lock(mu_);
  lost_[replica] = true;
}

void ReplicationLeader::handle_control(uint32_t from, std::span<const uint8_t> bytes) {
  auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  std::string type;
  // Malformed messages from a follower are dropped: it is refused nothing else for them.
  if (j.is_discarded() || !json_optional_field(j, "type", &type).ok()) return;
  if (type == "replayed") {
    auto tid = json_field<uint64_t>(j, "tid");
    if (!tid.ok() || !peers_[from]) return;
    peers_[from]->replayed_tid = *tid;
    peers_[from]->replay_reported = true;
    return;
  }
  if (type == "checkpoint") {
    note_follower_checkpoint(from, j);
    return;
  }
  if (type == "ckpt_gone") {  // it took a newer one meanwhile: fetch that instead
    if (fetch_ && fetch_->from == from) abandon_fetch("deleted by the follower", false);
    return;
  }
  if (type != "status") return;
  auto r = FollowerReport::parse(j);
  if (!r.ok()) {  // dropped: the request is repeated, and a sound follower answers it
    std::fprintf(stderr, "replication: follower %u: dropped a malformed report: %s\n", from,
                 r.status().to_string().c_str());
    return;
  }
  r->replica = from;
  std::lock_guard<std::mutex> lock(mu_);
  reports_[from] = std::move(*r);
}

void ReplicationLeader::send(uint32_t to, uint32_t session, std::span<const std::byte> bytes) {
  const std::span<const std::byte> one[1] = {bytes};
  send_gather(to, session, one);
}

void ReplicationLeader::send_gather(uint32_t to, uint32_t session,
                                    std::span<const std::span<const std::byte>> pieces) {
  if (to >= peers_.size() || !peers_[to] || peers_[to]->dead) return;  // not connected: lost
  SHOAL_ASSERT(pieces.size() <= gather_.size(), "a message of %zu pieces", pieces.size());
  size_t bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    gather_[i] = {reinterpret_cast<const uint8_t*>(pieces[i].data()), pieces[i].size()};
    bytes += pieces[i].size();
  }
  Peer& p = *peers_[to];
  const uint64_t copied_before = p.ep.sent_copied_bytes();
  const Status s = p.ep.send_gather(session, {gather_.data(), pieces.size()});
  if (!s.ok()) {
    p.dead = true;
    p.why = s;
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.send_errors;
    return;
  }
  if (session < kControlSession) {  // a stream's Paxos message: its copies (copy_count.h)
    p.ep.count_send(bytes, p.ep.sent_copied_bytes() - copied_before);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_sent += bytes;
}

void ReplicationLeader::send_control(uint32_t to, const nlohmann::json& j) {
  const std::string text = j.dump();
  send(to, kControlSession, std::as_bytes(std::span(text.data(), text.size())));
}

Status ReplicationLeader::wait_leading(uint64_t timeout_ms) {
  Env& env = RealEnv::instance();
  const uint64_t deadline = env.now_ns() + timeout_ms * 1'000'000;
  // Bounded by the deadline.
  while (leading_.load(std::memory_order_acquire) < options_.streams) {
    if (env.now_ns() >= deadline) {
      return Status::Timeout(
          fmt::format("replication: {} of {} streams lead after {} ms (followers connected: {})",
                      leading_.load(), options_.streams, timeout_ms, stats().followers_connected));
    }
    env.sleep_ns(2'000'000);
  }
  return Status::Ok();
}

Result<std::vector<FollowerReport>> ReplicationLeader::collect_reports(
    uint64_t target_tid, bool digest, bool check, uint64_t timeout_ms,
    const nlohmann::json& check_args, bool skip_lost) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : reports_) r.reset();
    report_request_ = {
        {"type", "report"}, {"target", target_tid}, {"digest", digest}, {"check", check}};
    if (!check_args.is_null()) report_request_["check_args"] = check_args;
  }
  Env& env = RealEnv::instance();
  const uint64_t deadline = env.now_ns() + timeout_ms * 1'000'000;
  for (;;) {  // bounded by the deadline
    std::vector<FollowerReport> out;
    std::string lagging;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (uint32_t r = 0; r < options_.replicas; ++r) {
        if (r == options_.replica) continue;
        const auto& rep = reports_[r];
        const bool ready = rep && rep->applied_tid >= target_tid && (!digest || rep->digest_done) &&
                           (!check || rep->checked);
        if (ready) {
          out.push_back(*rep);
        } else if (skip_lost && lost_[r]) {
          FollowerReport gone;
          gone.replica = r;
          gone.lost = true;
          out.push_back(std::move(gone));
        } else {
          lagging += fmt::format(" {}(applied {})", r, rep ? rep->applied_tid : 0);
        }
      }
      if (lagging.empty()) {
        report_request_ = nullptr;
        return out;
      }
    }
    if (env.now_ns() >= deadline) {
      std::lock_guard<std::mutex> lock(mu_);
      report_request_ = nullptr;
      return Status::Timeout(
          fmt::format("replication: followers did not reach TID {} within {} ms:{}", target_tid,
                      timeout_ms, lagging));
    }
    env.sleep_ns(5'000'000);
  }
}

void ReplicationLeader::note_positions() {
  positions_.streams.resize(streams_.size());
  for (size_t i = 0; i < streams_.size(); ++i) {
    const Stream& s = *streams_[i];
    StreamPosition& p = positions_.streams[i];
    p.proposed = s.paxos->next_slot() - 1;
    p.chosen = s.paxos->chosen_index();
    p.persisted = s.log ? s.persisted : p.chosen;  // no WAL: nothing to make durable
    p.wal_bytes = s.log ? s.log->wal_bytes() : 0;
    p.chosen_bytes = s.chosen_bytes;
    p.chosen_entries = s.chosen_entries;
    for (uint32_t r = 0; r < options_.replicas && r < kPaxosReplicasMax; ++r) {
      p.peer_chosen[r] = r == options_.replica ? p.chosen : s.paxos->peer_chosen_index(r);
    }
  }
  positions_.followers.resize(options_.replicas);
  const uint64_t now = loop_->now_ns();
  for (uint32_t r = 0; r < options_.replicas; ++r) {
    const Peer* peer = r < peers_.size() ? peers_[r].get() : nullptr;
    FollowerPosition& f = positions_.followers[r];
    f.connected = peer != nullptr && !peer->dead;
    f.replayed_tid = peer != nullptr ? peer->replayed_tid : f.replayed_tid;
    const bool reported = f.connected && peer->replay_reported;
    f.replay_lag_ns = reported ? wm_history_.lag_ns(f.replayed_tid, now) : 0;
  }
}

ReplicationPositions ReplicationLeader::positions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return positions_;
}

LeaderStats ReplicationLeader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace shoal::repl

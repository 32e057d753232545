// The shard server's parts (`shoal server`, shard_server.h), shared by the files that build it;
// not an API: only src/server/shard_*.cc include this header. shard_server.h says what the
// server does; here are its pieces and who owns them:
//   shard_server.cc       start-up (config, engine, load, workers, dials), serving (the
//                          acceptors, the client and Redis ports, metrics, etcd), peer health
//   shard_failover.cc     following another shard's failover (fence, discard, redial, F11
//                          resolution) and taking over as a promoted leader
//   shard_replication.cc  the replication leader, stream ticks, closing streams, kRepl
//   shard_load.cc         the compiled-in load drivers (micro, bank, TPC-C terminals) and the
//                          acknowledgement of their transactions by the vectorized watermark
//   shard_control.cc      the control methods (control.h): ping, start, stats, scans, checks
// Threads: a Worker's fields belong to its loop thread except those marked shared; the
// ShardServer's to the main thread after init, except its atomics and the mutex-guarded parts.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "src/base/cpu_placement.h"
#include "src/base/env.h"
#include "src/base/json_field.h"
#include "src/base/process_memory.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/config.h"
#include "src/cluster/etcd_config_manager.h"
#include "src/dist/coordinator.h"
#include "src/dist/local_link.h"
#include "src/dist/participant.h"
#include "src/dist/rpc_link.h"
#include "src/dist/vector_watermark.h"
#include "src/dist/watermark_exchange.h"
#include "src/index/key.h"
#include "src/net/auth.h"
#include "src/net/fabric_transport.h"
#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"
#include "src/ops/metrics_http.h"
#include "src/repl/bootstrap.h"
#include "src/repl/follower.h"
#include "src/repl/leader.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"
#include "src/server/ack_journal.h"
#include "src/server/cluster_config.h"
#include "src/server/control.h"
#include "src/server/deposition_watch.h"
#include "src/server/discard_journal.h"
#include "src/server/dist_bank.h"
#include "src/server/dist_kv.h"
#include "src/server/dist_micro.h"
#include "src/server/dist_tpcc.h"
#include "src/server/kv_fragments.h"
#include "src/server/live_latency.h"
#include "src/server/payments_json.h"
#include "src/server/resp_listener.h"
#include "src/server/server_metrics.h"
#include "src/server/shard_server.h"
#include "src/server/worker_tasks.h"
#include "src/txn/engine.h"

namespace shoal::server::detail {

constexpr uint64_t kMs = 1'000'000;
constexpr uint32_t kIncomingMax = 64;         // accepted connections per worker (bounded)
constexpr uint64_t kHealthTickNs = 20 * kMs;  // peer-death check and reaping period
constexpr uint32_t kShardsMax = 64;           // down_mask_ is one bit per shard
constexpr uint64_t kAcceptSliceMs = 100;      // main thread: how often it sees a signal
constexpr size_t kAckJournalsMax = 4096;      // journals one check_acks call reads
// A link replaced by a redial is freed this long after: longer than any RPC deadline and the
// link's retries of an install or abort (which stop at once on a failed endpoint).
constexpr uint64_t kRetiredKeepNs = 10'000 * kMs;
// Dialing a failed shard's new leader (it accepts once its takeover began).
constexpr uint64_t kRedialTimeoutMs = 10'000;
// A new leader's first engine epoch is this far above the floor it saw (take_over): 64
// epochs of 40 ms are 2.56 s, more than an old leader's unreceived tail spans (the pipeline
// bound and the ratekeeper hold it to a few hundred ms), though not more than a partitioned
// leader that lives on for seconds could give. (2^16 measured as well, and stalled the
// rejoin of a restarted replica: a replay or lag rule keyed on epochs, not found yet.)
constexpr uint64_t kTakeoverEpochJump = 64;
constexpr uint64_t kUnavailablePauseNs = 5 * kMs;  // a client after Unavailable (after_failure)
// After its terminals end, a worker waits at most this long for the acknowledgements still
// pending, then gives up on them (counted unacknowledged) and publishes its stats.
constexpr uint64_t kAckGraceNs = 10'000 * kMs;
// After the grace, waits that began since are ended this often until the load is published.
constexpr uint64_t kAckGraceRecheckNs = 1'000 * kMs;
// Replication stream ticks (StreamAppender::tick: aged batches, idle floors): often while
// transactions commit (a batch waits at most this long past its age), rarely when idle so an
// idle cluster does not write a floor entry to every WAL every millisecond.
constexpr uint64_t kReplTickBusyNs = 1 * kMs;
constexpr uint64_t kReplTickIdleNs = 50 * kMs;
constexpr uint64_t kReplReportWaitMsMax =
    2000;  // one kRepl report call blocks its loop at most this

inline std::atomic<bool> g_stop{false};  // SIGTERM/SIGINT seen (run_server)

// Both ends of every data connection use the same window (rpc.h REQUIRES). A generous
// deadline, since a loaded 2-core box can stall a peer for tens of ms, and a shard that is
// gone is reported at once by the socket (Unavailable). Retransmission although TCP and shm
// are reliable: a busy server drops a request (rpc.h busy_drops), and without a re-send the
// call waited for its 2 s deadline while the participant held the transaction's locks; two
// clusters on the 2-core VM then showed cross-shard p999 of exactly 2.0 s and local
// transactions running out of retries. The server deduplicates re-sends (cached replies).
inline rt::RpcOptions data_rpc_options() {
  rt::RpcOptions o;
  o.max_sessions = 16;
  o.window = 8;
  o.timeout_ns = 2000 * kMs;
  o.retransmit_ns = 50 * kMs;  // doubling up to max_retransmit_ns (100 ms)
  o.max_pooled_buffers = 1024;
  return o;
}

class ShardServer;

// A connection this worker dialed to another shard: its coordinator's link there. Over the
// config's transport (tcp, or shm or fabric between processes of one host).
struct Peer {
  virtual ~Peer() = default;
  virtual dist::ShardLink* link() = 0;
  virtual Status status() const = 0;
  virtual const rt::RpcStats& rpc_stats() const = 0;
  virtual void fail(Status why) = 0;  // every outstanding call completes with `why`
  virtual uint32_t outstanding() const = 0;
  uint32_t shard = 0;
  uint32_t replica = 0;  // the replica of `shard` it was dialed to (its leader then)
  bool down = false;
  uint64_t retired_ns = 0;  // replaced by a redial at this time (Worker::retired)
};
// Whether a link to `shard` that a redial to its new leader `replica` replaces still reaches that
// leader: dialed to it and up. A promoted leader dials the leader etcd names at its appointment
// (ShardServer::dial_current_leader), which may be the new leader whose failover it follows
// afterwards (a region failure: both shards' leaders at once). Its calls in flight are then at
// a live participant, and failing them would strand what they carry: an install failed here
// is in doubt for good while its half stays prepared there (participant.h F3), and that
// half's reservation (F10) holds the other shard's watermark, and every acknowledgement
// waiting on it, forever. Such a link is retired without failing its calls; a link to a dead
// or deposed leader fails them, so their transactions end at once.
inline bool reaches_live_leader(const Peer& old, uint32_t replica) {
  return !old.down && old.replica == replica && old.status().ok();
}
// The end of a link a redial replaced: unless `live` (reaches_live_leader, asked before the
// redial marked it down), its calls in flight fail now, saying why. Returns whether they did.
inline bool end_replaced_link(Peer& old, bool live, uint64_t new_epoch) {
  if (live) return false;
  old.fail(Status::Unavailable(
      fmt::format("shard {} failed over to another leader (epoch {})", old.shard, new_epoch)));
  return true;
}
template <typename E>
struct PeerOver final : Peer {  // members destroyed bottom-up: link, rpc, endpoint
  dist::ShardLink* link() override { return rpc_link.get(); }
  Status status() const override { return rpc->status(); }
  const rt::RpcStats& rpc_stats() const override { return rpc->stats(); }
  void fail(Status why) override { rpc->fail(std::move(why)); }
  uint32_t outstanding() const override { return rpc->outstanding(); }
  E endpoint;
  std::unique_ptr<rt::RpcEndpoint<E>> rpc;
  std::unique_ptr<dist::RpcLink<E>> rpc_link;
};

// A connection handed to this worker: remote coordinators, or control (always tcp).
struct Incoming {
  virtual ~Incoming() = default;
  virtual Status status() const = 0;
  virtual const rt::RpcStats& rpc_stats() const = 0;
  uint64_t failed_seen_ns = 0;
};
template <typename E>
struct IncomingOver final : Incoming {
  Status status() const override { return rpc->status(); }
  const rt::RpcStats& rpc_stats() const override { return rpc->stats(); }
  E endpoint;
  std::unique_ptr<rt::RpcEndpoint<E>> rpc;
};

// One worker: everything here is owned by its loop thread, except the fields marked shared.
// Members are destroyed bottom-up: coordinator, connections, links, service, participant,
// then the loop (which destroys suspended load tasks without resuming them).
struct Worker {
  ShardServer* server = nullptr;
  uint32_t index = 0;
  std::unique_ptr<rt::EventLoop> loop;
  std::unique_ptr<dist::Participant> participant;
  std::unique_ptr<dist::ParticipantService> service;
  // Acknowledgement by dependency vector (a cluster with replicas; nullptr otherwise): the
  // vectorized watermark, raised by every peer link's replies, by remote askers and by the
  // exchange (src/dist/watermark_exchange.h), which also reads our leader's watermark.
  std::unique_ptr<dist::VectorWatermark> vector_watermark;
  std::unique_ptr<dist::WatermarkExchange> watermark_exchange;
  // Committed transactions awaiting acknowledgement, each watched by an ack task
  // (kPendingAcksMax slots, their vectors' storage reused).
  struct PendingAck {
    txn::DepVec vector;
    uint64_t start_ns = 0;
    OrderKey order;  // a NewOrder: journaled once acknowledged (o_id 0: nothing to journal)
  };
  std::vector<PendingAck> pending_acks;
  std::vector<uint32_t> free_acks;
  uint32_t acks_running = 0;
  AckJournal ack_journal;  // ServerOptions::ack_journal_dir (TPC-C): what was acknowledged
  // Commits recorded so far, over every load (the controller's live view; loop thread writes).
  std::atomic<uint64_t> live_committed{0};
  // Their speculative latency, and the commit latency of the acknowledged ones, over every
  // load (kStats {"latency": true}: the controller's per-second series; live_latency.h).
  LiveLatencyCounts live_speculative, live_commit;
  WorkerMetrics metrics;  // /metrics (server_metrics.h); loop thread writes
  Rng link_rng{1};
  std::unique_ptr<dist::LocalLink> self_link;
  std::vector<std::unique_ptr<Peer>> peers;  // by shard; null for our own
  // Links replaced by a redial (a failover of their shard), failed (unless they reach the new
  // leader: reaches_live_leader) and kept until no call of theirs can still run
  // (kRetiredKeepNs): a transaction suspended in one finishes there.
  // Bounded by the leader changes within kRetiredKeepNs, one per shard each.
  std::vector<std::unique_ptr<Peer>> retired;
  std::vector<std::unique_ptr<Incoming>> incoming;
  std::unique_ptr<dist::Coordinator> coordinator;
  uint64_t epoch = 1;
  std::unique_ptr<TpccShardContext> tpcc;  // TPC-C terminals' shared state (workload tpcc)
  // The Redis protocol (resp_listener.h): null when the server has no RESP port. Destroyed
  // after the loop (its in-flight requests' frames must outlive nothing that resumes them).
  std::unique_ptr<KvAcks> kv_acks;
  std::unique_ptr<DistKvBackend> kv_backend;
  std::unique_ptr<RespWorker> resp;
  // The client protocol (client_connection.h): its own backend, whose tokens always follow
  // the watermark (each commit says durable or speculative); null without a client port.
  std::unique_ptr<DistKvBackend> client_backend;
  std::unique_ptr<ClientWorker> client;

  // Load state (loop thread).
  MicroParams params;
  uint32_t load_number = 0;  // 1 for the server's first load (on_start), and so on
  uint64_t load_end_ns = 0;
  uint32_t clients_running = 0;
  uint64_t aborts_base = 0;
  MicroStats stats;
  BankHistory bank_log;  // workload bank: committed transactions (read after done, as published)
  repl::StreamAppender* appender = nullptr;  // this worker's replication stream (replicated only)
  // What a failover elsewhere may make us discard (discard_journal.h; replicated shards of a
  // cluster that follows failovers); written by this loop's commits, read while paused.
  std::unique_ptr<DiscardJournal> discard_journal;
  // The commit hook of both places this worker commits: logs the transaction on its stream and
  // journals it for a discard. ctx: the Worker.
  static Status logged_commit(void* ctx, const txn::Txn& txn);
  // After a cross-shard transaction this worker coordinated: its own writes' journal entries
  // get its final vector, or are marked in doubt (discard_journal.h).
  void note_outcome(const Status& s, const dist::DistTxn& txn) {
    if (discard_journal == nullptr || txn.shards().size() < 2) return;
    discard_journal->note_outcome(s.ok() || txn.in_doubt(), txn.written_shards(), txn.vector(),
                                  txn.doubtful_shards(), txn.id());
  }
  uint32_t server_shard = 0;  // server->shard(), for note_outcome
  static void pause_thunk(void* self);
  uint64_t repl_txns_seen = 0;
  // The pending repl_tick_thunk timer and when it is due (loop thread), so that a commit on an
  // idle shard can bring every worker's tick forward (hurry_repl_tick).
  uint64_t repl_tick_id = 0;
  uint64_t repl_tick_due_ns = 0;
  repl::AppenderStats log_base;  // the appender's counts when this load started
  // Dependency vectors in the 2PC messages this worker sent: its links' requests (counted
  // here, RpcLinkOptions::dep_bytes) and its participant service's replies.
  txn::DepVecBytes link_dep_bytes;
  // Vectors logged and sent compact (src/txn/depvec.h); off (SHOAL_DEPVEC_COMPACT=0 in the
  // server's environment) they carry every entry, as before: a measurement's baseline.
  bool compact_vectors = true;
  txn::DepVecBytes wire_dep_base;  // wire_dep_bytes_now() when this load started
  txn::DepVecBytes wire_dep_bytes_now() const {
    txn::DepVecBytes b = link_dep_bytes;
    if (service != nullptr) b += service->dep_bytes();
    return b;
  }

  // Shared: written by the loop thread before done.store(release); read after an acquire.
  MicroStats published;
  dist::ParticipantStats published_participant;
  repl::AppenderStats published_log;     // what this load logged (replicated only)
  txn::DepVecBytes published_wire_deps;  // this load's vectors in 2PC messages sent
  std::atomic<bool> done{true};

  std::thread thread;

  template <typename E>
  void adopt(E endpoint);
  // A failover of `shard` (shard_server.h): its TIDs in (lost_above, lost_through] are fenced
  // off the vector watermark, then its new leader `replica`, dialed, replaces the link. The
  // old link's calls in flight fail, unless it reaches that same leader and is up (a promoted
  // leader may have dialed it at its appointment): then they finish there.
  template <typename E>
  void redial(uint32_t shard, uint32_t replica, uint64_t new_epoch, uint64_t lost_above,
              uint64_t lost_through, E endpoint);

  void start_load();
  void record(bool cross, const Status& s, uint64_t latency_ns, uint32_t type = 0);
  // The vector a terminal's transaction waits on before it is acknowledged.
  void ack_vector(bool cross, const dist::DistTxn& dtxn, uint64_t local_tid_before,
                  txn::DepVec* out) const;
  // Publishes once every client and every ack task is done.
  void publish_when_idle() {
    if (clients_running == 0 && acks_running == 0) publish();
  }
  void publish();
  void health();
  void publish_metrics();  // health tick: what only this loop can read, for /metrics
  // SHOAL_RESERVATION_TRACE=1 (diagnosis): at most once a second, when any grew, the requests
  // of other shards this worker's endpoints dropped since (rpc.h busy_drops), its calls
  // re-sent and timed out, and its task room.
  void trace_busy_drops();
  uint64_t busy_drops_seen = 0, busy_resent_seen = 0, busy_timeouts_seen = 0;
  uint64_t busy_trace_next_ns = 0;
  void teardown();
  static void health_thunk(void* self, uint64_t);
  // Ends every acknowledgement wait of the current load still pending, with a log line saying
  // what they waited for, then looks again every kAckGraceRecheckNs until the load is
  // published. One chain of these timers per load: the timer's argument is its chain, and a
  // timer of a replaced chain does nothing.
  static void ack_grace_thunk(void* self, uint64_t chain);
  // Starts the chain's next timer at due_ns, unless the load's chain is already due sooner.
  void arm_ack_grace(uint64_t due_ns);
  uint64_t ack_grace_chain = 0;   // the live chain's number
  uint32_t ack_grace_load = 0;    // the load the live chain belongs to
  uint64_t ack_grace_due_ns = 0;  // when the live chain's next timer fires
  static void repl_tick_thunk(void* self, uint64_t);
  void schedule_repl_tick(uint64_t due_ns);
  // Brings the next tick forward to a busy tick's distance (posted to every worker when the
  // shard commits after being idle).
  static void hurry_repl_tick(void* self);
  // The loop's idle hook (rt::EventLoop::set_idle_hook): the stream's group commit
  // (StreamAppender::idle) when the loop runs out of requests to serve.
  static bool idle_thunk(void* self);
  static void close_floor_thunk(void* self);
  // kStop: the load in progress ends now (its end moves to this moment; a load already past
  // its end, in its acknowledgement grace, is left alone: its grace timers still run).
  static void stop_load_thunk(void* self);
  static void close_stream_thunk(void* self);
};

// The control methods (control.h) on an endpoint.
template <typename E>
void attach_control(ShardServer* s, rt::RpcEndpoint<E>& rpc);

// Transport shm or fabric: the control connections (tcp) get a loop of their own, so the
// workers poll nothing but their rings (a tcp endpoint costs a recv system call per poll). Control
// is off the data path; this thread does no transaction work. Owned by its thread once started.
struct ControlPlane {
  ShardServer* server = nullptr;
  std::unique_ptr<rt::EventLoop> loop;
  std::vector<std::unique_ptr<IncomingOver<net::TcpEndpoint>>> conns;
  std::thread thread;
  void adopt(net::TcpEndpoint tcp);
};

class ShardServer {
 public:
  ~ShardServer() { stop_early_acceptor(); }
  [[nodiscard]] Status init(const ServerOptions& options, Promotion* promotion);
  [[nodiscard]] Status serve();

  const cluster::ClusterConfig& config() const { return config_; }
  const KeyLayout& layout() const { return *layout_; }
  uint32_t shard() const { return options_.shard; }
  txn::Engine& engine() { return *engine_; }
  bool is_tpcc() const { return tpcc_ != nullptr; }
  bool is_bank() const { return options_.workload == "bank"; }
  uint32_t replica() const { return me_; }
  // ServerOptions::ack_journal_dir: TPC-C's ack journals and the bank's history files.
  const std::string& journal_dir() const { return options_.ack_journal_dir; }
  workload::TpccWorkload& tpcc() { return *tpcc_; }
  const WarehouseMap& warehouses() const { return *warehouse_map_; }

  // Control handlers (any worker's loop thread).
  Status on_ping(rt::MsgBuffer* out);
  Status on_start(std::span<const uint8_t> request, rt::MsgBuffer* out);
  Status on_stats(std::span<const uint8_t> request, rt::MsgBuffer* out);
  Status on_scan(std::span<const uint8_t> request, rt::MsgBuffer* out);
  Status on_scan_tpcc(const nlohmann::json& request, rt::MsgBuffer* out);
  Status on_history(std::span<const uint8_t> request, rt::MsgBuffer* out);
  Status on_decisions(std::span<const uint8_t> request, rt::MsgBuffer* out);
  Status on_stop(rt::MsgBuffer* out);
  // {"step": "acks", "paths": [...]}: reads those ack journals (ack_journal.h) and counts the
  // acknowledged orders of this shard's warehouses that its store lacks. After a run only.
  Status check_acks(const nlohmann::json& request, rt::MsgBuffer* out);

  Status on_repl(std::span<const uint8_t> request, rt::MsgBuffer* out);
  // The shard's replication leader; nullptr when the shard has a single replica. Its
  // watermark() may be read from any thread.
  repl::ReplicationLeader* replication() { return replication_.get(); }
  // Stream close after a run (kRepl "close"), in two rounds of posts to every worker: each
  // reports its stream's last TID, then each seals the floor above all of them.
  void close_floor_from(uint64_t tid);
  void close_stream(repl::StreamAppender& appender);

  void note_down(uint32_t shard) { down_mask_.fetch_or(uint64_t{1} << shard); }
  void note_up(uint32_t shard) { down_mask_.fetch_and(~(uint64_t{1} << shard)); }
  // Whether a shard that becomes unreachable may come back under a new leader (the server
  // watches the configuration manager): only then do clients retry what it failed.
  bool follows_failovers() const { return !options_.etcd.empty(); }
  // A worker's side of a discard's pause (its loop thread): blocks until the discard is over,
  // running meanwhile each job run_on_parked posts (on this thread: what the worker's Txns
  // hold, ebr guards among them, belongs to it).
  void park_worker(Worker* w);
  // Runs job(ctx, w) on every parked worker's own thread and waits for all; false when that
  // took more than 5 s (it still waited: ctx must outlive the jobs).
  // REQUIRES: every worker is parked (discard_lost_versions).
  [[nodiscard]] bool run_on_parked(void (*job)(void* ctx, Worker* w), void* ctx);
  // The first commit this process recorded, in wall-clock microseconds (a failover's end, as
  // the benchmark measures it: docs/OPERATIONS.md).
  void note_commit() {
    if (first_commit_unix_us_.load(std::memory_order_relaxed) != 0) return;
    uint64_t none = 0;
    first_commit_unix_us_.compare_exchange_strong(none, RealEnv::instance().wall_us());
  }
  void load_finished() { running_.fetch_sub(1); }
  // Why an after-run request must wait: "`what`: shard S's load has not ended on N of M
  // workers (...)". REQUIRES: the load has not ended (running_ > 0, or a worker not done).
  Status load_running(const char* what) const;
  // Called by a worker that logged a commit (its loop thread). Every
  // worker's stream ticks at the busy rate for kReplTickIdleNs after it. A transaction is
  // acknowledged only once every stream of the shard promised past it, and an idle stream
  // promises only at its tick: with 50 ms idle ticks a lone SET on a quiet shard waited
  // 25-50 ms for the others' floor entries.
  void note_logged_commit(uint64_t now_ns);
  bool committed_recently(uint64_t now_ns) const {
    return now_ns - last_commit_ns_.load(std::memory_order_relaxed) < kReplTickIdleNs;
  }
  // The replication leader chose an entry (LeaderOptions::on_chosen; its thread): each worker's
  // watermark exchange raises our shard's entry at once (WatermarkExchange::notify), so
  // durable replies leave without waiting for its tick, and the post wakes the worker, whose
  // idle hook seals what waited for entries in flight to settle. Only while serve() runs the
  // workers' loops.
  static void entries_chosen(void* self, uint32_t stream);

 private:
  txn::EngineOptions engine_options() const;
  [[nodiscard]] Status load_table();
  [[nodiscard]] Status load_tpcc();
  workload::TpccOptions tpcc_options() const;
  workload::LoadOptions tpcc_load_options() const;
  // A promotion: the follower's engine and its replicated tables instead of a load.
  [[nodiscard]] Status adopt_store(Promotion& p);
  // The address shard `shard` is served at now: its current leader replica's.
  const cluster::Replica& leader_of(uint32_t shard) const {
    return config_.shards[shard].replicas.at(leaders_[shard]);
  }
  const cluster::Replica& me() const { return config_.shards[options_.shard].replicas.at(me_); }
  [[nodiscard]] Status take_over();
  // This shard logs: it has followers, or it is a lone replica given a data directory (a
  // Paxos stream of one acceptor: its own WAL, synced per --fsync, decides alone).
  bool replicated() const {
    const size_t replicas = config_.shards[options_.shard].replicas.size();
    return replicas > 1 || !options_.data_dir.empty();
  }
  // Any shard that logs: terminals then wait for the vectorized watermark.
  bool cluster_replicated() const {
    if (replicated()) return true;
    for (const cluster::Shard& sh : config_.shards) {
      if (sh.replicas.size() > 1) return true;
    }
    return false;
  }
  [[nodiscard]] Status apply_batching();
  [[nodiscard]] Status start_replication(Promotion* promotion);
  [[nodiscard]] Status wait_leading();  // replication_->wait_leading, stoppable by SIGTERM
  [[nodiscard]] Status stopped_by_signal(const std::string& while_doing) const;
  [[nodiscard]] Status plant_divergence();
  [[nodiscard]] Status post_to_workers(void (*fn)(void*));
  [[nodiscard]] Status repl_report(const nlohmann::json& request, rt::MsgBuffer* out);
  [[nodiscard]] Status make_worker(uint32_t index, uint64_t deadline_ns);
  [[nodiscard]] Status apply_placement();
  [[nodiscard]] Status dial(Worker& w, uint32_t shard, uint64_t deadline_ns);
  // dial, and under etcd, when the leader does not answer (it may die while we start: a
  // region's shards fail together), the leader etcd names now, until deadline_ns.
  [[nodiscard]] Status dial_current_leader(Worker& w, uint32_t shard, uint64_t deadline_ns);
  // Connects to shard's current leader (leader_of) and hands the endpoint to `with` (a
  // generic callable taking the transport's endpoint by value, returning Status).
  template <typename F>
  [[nodiscard]] Status connect_to(uint32_t shard, uint64_t deadline_ns, F&& with);
  // DepositionWatch: another shard's leader changed; every worker redials it (watch thread).
  void follow_leader(uint32_t shard, uint32_t replica, uint64_t epoch);
  // The FVW's discard (watch thread): with every worker paused, undoes what depends on the
  // failed shard's lost TIDs (discard_journal.h), logged on stream 0. Bounded wait for the
  // workers to pause.
  // Our transactions in doubt at the failed shard (C2) are first asked of its new leader,
  // `replica` (ask_decisions): those its log holds are not lost.
  // `epoch`: the new leader's (its own transactions, already here when two shards failed over
  // at once, are not the failed leader's: Participant's spare_epoch).
  [[nodiscard]] Status discard_lost_versions(const LostRange& range, uint32_t replica,
                                             uint64_t epoch);
  // kDecisions of `shard`'s leader `replica`: the TIDs there of those of `ids` its log holds.
  // Bounded: a few attempts within kDecisionsAskMs.
  // Asks and resolves (DiscardJournal::resolve) what the journals hold in doubt at `shard`;
  // how many transactions that was. REQUIRES: the workers are paused.
  size_t resolve_in_doubt(std::span<DiscardJournal* const> journals, uint32_t shard,
                          uint32_t replica);
  // F11 ahead of the discard (participant.h): ends the contexts `shard`'s old leader
  // coordinated here that can no longer commit: unprepared ones, and prepared ones whose
  // decision the new leader `replica`'s log does not hold (what resolve_prepared would be
  // told after the redial). Their locks would otherwise hide the records under them from the
  // discard, which then keeps a lost transaction whole (issue 14). How many prepared ones it
  // aborted. REQUIRES: the workers are paused.
  size_t release_undecided(uint32_t shard, uint32_t replica, uint64_t epoch);
  [[nodiscard]] Result<std::vector<std::pair<uint64_t, uint64_t>>> ask_decisions(
      uint32_t shard, uint32_t replica, const std::vector<uint64_t>& ids);
  std::mutex pause_mu_;
  std::condition_variable pause_cv_;
  // See note_logged_commit.
  std::atomic<uint64_t> last_commit_ns_{0};
  // See entries_chosen: set by serve() once the workers run, cleared by stop_workers() before
  // their loops stop (a post then could reach a destroyed loop).
  std::mutex chosen_wake_mu_;
  bool chosen_wake_on_ = false;  // under chosen_wake_mu_
  uint32_t parked_ = 0;          // under pause_mu_
  bool pausing_ = false;         // under pause_mu_
  // run_on_parked's job, under pause_mu_: a new generation wakes the parked workers.
  void (*park_job_)(void* ctx, Worker* w) = nullptr;
  void* park_job_ctx_ = nullptr;
  uint64_t park_job_gen_ = 0;
  uint32_t park_job_done_ = 0;
  txn::Worker* compensator_ = nullptr;  // discard_lost_versions: the engine's, logged on stream 0
  // The shm rendezvous name of a shard (an abstract unix socket: per cluster and address),
  // and its fabric one.
  std::string shm_name(uint32_t shard) const;
  std::string fabric_name(uint32_t shard) const { return "fabric-" + shm_name(shard); }
  void accept_loop();
  void stop_workers();
  [[nodiscard]] Status start_early_acceptor();
  void stop_early_acceptor();
  template <typename E>
  void hand_out(E endpoint, uint32_t* next);
  template <typename E>
  void hand_to_worker(E endpoint, uint32_t* next);

  ServerOptions options_;
  uint32_t me_ = 0;                // this process's replica id (0 unless promoted)
  uint64_t epoch_ = 1;             // the epoch this leader logs in
  std::vector<uint32_t> leaders_;  // per shard: the replica that leads it (dial, shm names)
  // Per shard: the leader the DepositionWatch starts from (init's leaders_, or kNoReplica for
  // a shard a promotion must follow: Promotion::since_epochs). A shard whose entry differs
  // from leaders_ once the workers dialed gets followed (follow_leader) by the watch's first
  // look, and its vector watermark entry is held until then.
  std::vector<uint32_t> watch_leaders_;
  static constexpr uint32_t kNoReplica = UINT32_MAX;
  std::vector<int> worker_cpus_;  // empty: workers unpinned
  cluster::ClusterConfig config_;
  std::unique_ptr<KeyLayout> layout_;
  std::unique_ptr<txn::Engine> engine_;
  txn::Table<1>* table_ = nullptr;
  std::unique_ptr<workload::TpccWorkload> tpcc_;
  uint32_t loads_started_ = 0;  // control thread (on_start)
  std::unique_ptr<WarehouseMap> warehouse_map_;
  dist::FragmentTable fragments_;
  txn::BytesTable* kv_table_ = nullptr;  // the Redis front end's keys (kv_fragments.h)
  // The RESP port (stopped before the workers); 0: none.
  [[nodiscard]] Status start_resp();
  uint16_t resp_port() const {
    return options_.resp_port >= 0 ? static_cast<uint16_t>(options_.resp_port) : me().resp_port;
  }
  bool resp_enabled() const { return options_.resp_port >= 0 || me().resp_port != 0; }
  std::unique_ptr<StreamListener> resp_listener_;
  // The client protocol's port, likewise.
  [[nodiscard]] Status start_client_port();
  uint16_t client_port() const {
    return options_.client_port >= 0 ? static_cast<uint16_t>(options_.client_port)
                                     : me().client_port;
  }
  bool client_enabled() const { return options_.client_port >= 0 || me().client_port != 0; }
  bool kv_enabled() const { return resp_enabled() || client_enabled(); }
  // The workers' key-value backends and the ports' workers (make_worker).
  [[nodiscard]] Status make_kv_workers(Worker* w);
  std::unique_ptr<StreamListener> client_listener_;
  // Both client ports' (Redis AUTH, the client protocol's hello); empty: none asked
  // (config resp_password_file).
  std::string resp_password_;
  net::TcpListener listener_;
  net::ShmListener shm_listener_;        // transport shm: data connections from other shards
  net::FabricListener fabric_listener_;  // transport fabric: likewise
  // The early acceptor: accepts from init() on, on a thread of its own, where a dialer must be
  // answered before we serve (peers dial us while we still dial them): transport shm (an shm
  // connect waits for the accepting side to share its rings) and TCP with a cluster secret
  // (net/auth.h: a dialer waits for our challenge). It parks connections in *_pending_ until
  // accept_loop() hands them out. Without either, the kernel's backlog holds early dials.
  bool early_tcp_ = false;  // set before the acceptor starts: it accepts TCP, not accept_loop()
  std::thread early_acceptor_;
  std::atomic<bool> early_stop_{false};
  std::mutex early_mu_;
  std::vector<net::ShmEndpoint> shm_pending_;
  std::vector<net::FabricEndpoint> fabric_pending_;
  std::vector<net::TcpEndpoint> tcp_pending_;
  std::unique_ptr<ControlPlane> control_;  // transport shm or fabric only
  // Replication (after engine_: the leader reads it; before workers_: they hold its appenders).
  std::unique_ptr<repl::ReplicationLeader> replication_;
  std::unique_ptr<cluster::ConfigManager> etcd_;  // a replicated shard under etcd
  [[nodiscard]] Status open_etcd();               // etcd_, once (ServerOptions::etcd given)
  // A promotion: what the failover lost, published for the other shards (publish_takeover)
  // and fenced on our own workers' vector watermarks: our TIDs in (lost_above_, lost_through_].
  [[nodiscard]] Status publish_takeover(uint64_t final_tid, uint64_t floor_tid);
  uint64_t lost_above_ = 0, lost_through_ = 0;  // both 0: nothing lost (not promoted)
  // A promotion: what our predecessor's log says its coordinator committed (participant.h
  // F11); our participants answer the other shards' kResolve from it. Read-only by then.
  std::shared_ptr<const repl::DecisionLog> decisions_;
  // A promotion: the journal of what our replay installed of cross-shard transactions
  // (discard_journal.h, ReplayJournal), walked by every FVW discard with the workers'; null
  // when none was kept. Set by take_over, before the watch thread starts.
  std::shared_ptr<ReplayJournal> replay_journal_;
  // decisions_ for the control threads (kDecisions): set once, after it, with release.
  std::atomic<const repl::DecisionLog*> decisions_published_{nullptr};
  static bool find_decision(const void* ctx, dist::TxnId id, uint64_t* tid, txn::DepVec* vector);
  // Waits (bounded) for shard's failover record of `epoch` - 1 (its final watermark and
  // floor, published by its new leader before it serves).
  [[nodiscard]] Status await_failover_record(uint32_t shard, uint64_t epoch, uint64_t* final_tid,
                                             uint64_t* floor_tid);
  std::unique_ptr<DepositionWatch> deposition_watch_;  // after etcd_: it reads through it
  [[nodiscard]] Status start_deposition_watch();
  uint64_t snapshot_tid_ = 0;
  std::mutex repl_mu_;                      // one kRepl call at a time (collect_reports)
  std::atomic<bool> closing_{false};        // a close is in flight
  std::atomic<uint32_t> close_pending_{0};  // workers yet to answer this round
  std::atomic<uint64_t> close_floor_{0};    // max TID over the streams (round 1)
  std::atomic<uint64_t> closed_floor_{0};   // every stream sealed this floor (0: not closed)
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint32_t> running_{0};  // workers with a load in flight
  std::atomic<uint64_t> down_mask_{0};
  std::atomic<uint64_t> first_commit_unix_us_{0};
  // GET /metrics (ServerOptions::metrics_port); last: stopped before anything it reads goes.
  [[nodiscard]] Status start_metrics();
  std::string render_metrics();  // the metrics thread
  std::unique_ptr<ops::MetricsHttp> metrics_http_;
};

inline void reply_json(const nlohmann::json& j, rt::MsgBuffer* out) {
  const std::string text = j.dump();
  out->assign({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

// A link over `endpoint` to `shard`, on w's loop. REQUIRES: w's loop thread, or before it runs.
template <typename E>
Result<std::unique_ptr<Peer>> make_peer(Worker& w, uint32_t shard, uint32_t replica, E endpoint) {
  auto peer = std::make_unique<PeerOver<E>>();
  peer->shard = shard;
  peer->replica = replica;
  peer->endpoint = std::move(endpoint);
  peer->rpc = std::make_unique<rt::RpcEndpoint<E>>(*w.loop, peer->endpoint, data_rpc_options());
  SHOAL_TRY(peer->rpc->start());
  dist::RpcLinkOptions lo;
  lo.shard = shard;
  lo.session_count = 8;  // <= data_rpc_options().max_sessions
  lo.call_timeout_ns = 2000 * kMs;
  lo.end_attempts_max = 20;
  lo.watermark = w.vector_watermark.get();  // nullptr without replication
  lo.dep_bytes = &w.link_dep_bytes;
  lo.compact_vectors = w.compact_vectors;
  peer->rpc_link = std::make_unique<dist::RpcLink<E>>(*peer->rpc, lo);
  return std::unique_ptr<Peer>(std::move(peer));
}

template <typename F>
Status ShardServer::connect_to(uint32_t shard, uint64_t deadline_ns, F&& with) {
  const cluster::Replica& r = leader_of(shard);
  const uint64_t now = RealEnv::instance().now_ns();
  const uint64_t left_ms = std::max<uint64_t>(deadline_ns > now ? (deadline_ns - now) / kMs : 0, 1);
  if (config_.transport == cluster::TransportKind::kShm) {
    // The peer's shm acceptor runs from its start-up on (init), so this cannot wait on a
    // peer that is itself still dialing.
    Result<net::ShmEndpoint> shm = Status::Unavailable("not tried");
    for (;;) {
      shm = net::ShmEndpoint::connect(shm_name(shard), {}, left_ms);
      if (shm.ok() || RealEnv::instance().now_ns() >= deadline_ns) break;
      RealEnv::instance().sleep_ns(20 * kMs);  // not listening yet: it is still loading
    }
    if (!shm.ok()) {
      return Status::Unavailable(fmt::format("shard {} (shm {}) did not accept within {} ms: {}",
                                             shard, shm_name(shard), left_ms,
                                             shm.status().to_string()));
    }
    return with(std::move(*shm));
  }
  if (config_.transport == cluster::TransportKind::kFabric) {
    // As shm: the peer listens from init on; connect_local retries until it does.
    auto fab = net::FabricEndpoint::connect_local(fabric_name(shard), {}, fabric_options(config_),
                                                  left_ms);
    if (!fab.ok()) {
      return Status::Unavailable(fmt::format("shard {} (fabric {}) did not accept within {} ms: {}",
                                             shard, fabric_name(shard), left_ms,
                                             fab.status().to_string()));
    }
    return with(std::move(*fab));
  }
  auto tcp = net::TcpEndpoint::connect(r.host, r.port, {}, left_ms);
  if (!tcp.ok()) {
    return Status::Unavailable(
        fmt::format("shard {} at {}:{} did not accept a connection within {} ms: {}", shard, r.host,
                    r.port, left_ms, tcp.status().to_string()));
  }
  return with(std::move(*tcp));
}

}  // namespace shoal::server::detail

#include "src/server/shard_server.h"

#include "src/server/ack_journal.h"

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
#include "src/server/cluster_config.h"
#include "src/server/control.h"
#include "src/server/deposition_watch.h"
#include "src/server/discard_journal.h"
#include "src/server/dist_bank.h"
#include "src/server/dist_kv.h"
#include "src/server/dist_micro.h"
#include "src/server/dist_tpcc.h"
#include "src/server/kv_fragments.h"
#include "src/server/payments_json.h"
#include "src/server/resp_listener.h"
#include "src/server/server_metrics.h"
#include "src/txn/engine.h"

namespace shoal::server {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint32_t kIncomingMax = 64;         // accepted connections per worker (bounded)
constexpr uint64_t kHealthTickNs = 20 * kMs;  // peer-death check and reaping period
constexpr uint32_t kShardsMax = 64;           // down_mask_ is one bit per shard
constexpr uint64_t kAcceptSliceMs = 100;      // main thread: how often it sees a signal
constexpr uint32_t kTerminalsMax = 1024;      // TPC-C terminals per shard (on_start)
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
// Transactions per worker waiting for their acknowledgement while their terminal goes on; a
// terminal that finds every slot taken waits for its own (backpressure).
constexpr uint32_t kPendingAcksMax = 4096;
// After its terminals end, a worker waits at most this long for the acknowledgements still
// pending, then gives up on them (counted unacknowledged) and publishes its stats.
constexpr uint64_t kAckGraceNs = 10'000 * kMs;
// Replication stream ticks (StreamAppender::tick: aged batches, idle floors): often while
// transactions commit (a batch waits at most this long past its age), rarely when idle so an
// idle cluster does not write a floor entry to every WAL every millisecond.
constexpr uint64_t kReplTickBusyNs = 1 * kMs;
constexpr uint64_t kReplTickIdleNs = 50 * kMs;
constexpr uint64_t kReplReportWaitMsMax =
    2000;  // one kRepl report call blocks its loop at most this

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop.store(true);
}

// Both ends of every data connection use the same window (rpc.h REQUIRES). A generous
// deadline, since a loaded 2-core box can stall a peer for tens of ms, and a shard that is
// gone is reported at once by the socket (Unavailable). Retransmission although TCP and shm
// are reliable: a busy server drops a request (rpc.h busy_drops), and without a re-send the
// call waited for its 2 s deadline while the participant held the transaction's locks; two
// clusters on the 2-core VM then showed cross-shard p999 of exactly 2.0 s and local
// transactions running out of retries. The server deduplicates re-sends (cached replies).
rt::RpcOptions data_rpc_options() {
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
  bool down = false;
  uint64_t retired_ns = 0;  // replaced by a redial at this time (Worker::retired)
};
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
  uint64_t failed_seen_ns = 0;
};
template <typename E>
struct IncomingOver final : Incoming {
  Status status() const override { return rpc->status(); }
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
  WorkerMetrics metrics;  // /metrics (server_metrics.h); loop thread writes
  Rng link_rng{1};
  std::unique_ptr<dist::LocalLink> self_link;
  std::vector<std::unique_ptr<Peer>> peers;  // by shard; null for our own
  // Links replaced by a redial (a failover of their shard), failed and kept until no call of
  // theirs can still run (kRetiredKeepNs): a transaction suspended in one finishes there.
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
    const uint64_t own = txn.vector().get(server_shard);
    if (own != 0 && (s.ok() || txn.in_doubt())) {
      discard_journal->update(own, txn.vector(), txn.doubtful_shards(), txn.id());
    }
  }
  uint32_t server_shard = 0;  // server->shard(), for note_outcome
  static void pause_thunk(void* self);
  uint64_t repl_txns_seen = 0;
  // The pending repl_tick_thunk timer and when it is due (loop thread), so that a commit on an
  // idle shard can bring every worker's tick forward (hurry_repl_tick).
  uint64_t repl_tick_id = 0;
  uint64_t repl_tick_due_ns = 0;
  repl::AppenderStats log_base;  // the appender's counts when this load started

  // Shared: written by the loop thread before done.store(release); read after an acquire.
  MicroStats published;
  dist::ParticipantStats published_participant;
  repl::AppenderStats published_log;  // what this load logged (replicated only)
  std::atomic<bool> done{true};

  std::thread thread;

  template <typename E>
  void adopt(E endpoint);
  // A failover of `shard` (shard_server.h): its TIDs in (lost_above, lost_through] are fenced
  // off the vector watermark, then its new leader, dialed, replaces the link.
  template <typename E>
  void redial(uint32_t shard, uint64_t new_epoch, uint64_t lost_above, uint64_t lost_through,
              E endpoint);

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
  void teardown();
  static void health_thunk(void* self, uint64_t);
  static void ack_grace_thunk(void* self, uint64_t);
  static void repl_tick_thunk(void* self, uint64_t);
  void schedule_repl_tick(uint64_t due_ns);
  // Brings the next tick forward to a busy tick's distance (posted to every worker when the
  // shard commits after being idle).
  static void hurry_repl_tick(void* self);
  static void close_floor_thunk(void* self);
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
  bench::TpccWorkload& tpcc() { return *tpcc_; }
  const WarehouseMap& warehouses() const { return *warehouse_map_; }

  // Control handlers (any worker's loop thread).
  Status on_ping(rt::MsgBuffer* out);
  Status on_start(std::span<const uint8_t> request, rt::MsgBuffer* out);
  Status on_stats(rt::MsgBuffer* out);
  Status on_scan(std::span<const uint8_t> request, rt::MsgBuffer* out);
  Status on_scan_tpcc(const nlohmann::json& request, rt::MsgBuffer* out);
  Status on_history(std::span<const uint8_t> request, rt::MsgBuffer* out);
  Status on_decisions(std::span<const uint8_t> request, rt::MsgBuffer* out);
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
  // A worker's side of a discard's pause (its loop thread): blocks until the discard is over.
  void park_worker();
  // The first commit this process recorded, in wall-clock microseconds (a failover's end, as
  // the benchmark measures it: docs/OPERATIONS.md).
  void note_commit() {
    if (first_commit_unix_us_.load(std::memory_order_relaxed) != 0) return;
    uint64_t none = 0;
    first_commit_unix_us_.compare_exchange_strong(none, RealEnv::instance().wall_us());
  }
  void load_finished() { running_.fetch_sub(1); }
  // Called by a worker that logged a commit (its loop thread). Every
  // worker's stream ticks at the busy rate for kReplTickIdleNs after it. A transaction is
  // acknowledged only once every stream of the shard promised past it, and an idle stream
  // promises only at its tick: with 50 ms idle ticks a lone SET on a quiet shard waited
  // 25-50 ms for the others' floor entries.
  void note_logged_commit(uint64_t now_ns);
  bool committed_recently(uint64_t now_ns) const {
    return now_ns - last_commit_ns_.load(std::memory_order_relaxed) < kReplTickIdleNs;
  }

 private:
  txn::EngineOptions engine_options() const;
  [[nodiscard]] Status load_table();
  [[nodiscard]] Status load_tpcc();
  bench::TpccOptions tpcc_options() const;
  bench::LoadOptions tpcc_load_options() const;
  // A promotion: the follower's engine and its replicated tables instead of a load.
  [[nodiscard]] Status adopt_store(Promotion& p);
  // The address shard `shard` is served at now: its current leader replica's.
  const cluster::Replica& leader_of(uint32_t shard) const {
    return config_.shards[shard].replicas.at(leaders_[shard]);
  }
  const cluster::Replica& me() const { return config_.shards[options_.shard].replicas.at(me_); }
  [[nodiscard]] Status take_over();
  bool replicated() const { return config_.shards[options_.shard].replicas.size() > 1; }
  // Any shard with replicas: terminals then wait for the vectorized watermark.
  bool cluster_replicated() const {
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
  [[nodiscard]] Status discard_lost_versions(const LostRange& range, uint32_t replica);
  // kDecisions of `shard`'s leader `replica`: the TIDs there of those of `ids` its log holds.
  // Bounded: a few attempts within kDecisionsAskMs.
  // Asks and resolves (DiscardJournal::resolve) what the journals hold in doubt at `shard`;
  // how many transactions that was. REQUIRES: the workers are paused.
  size_t resolve_in_doubt(std::span<DiscardJournal* const> journals, uint32_t shard,
                          uint32_t replica);
  [[nodiscard]] Result<std::vector<std::pair<uint64_t, uint64_t>>> ask_decisions(
      uint32_t shard, uint32_t replica, const std::vector<uint64_t>& ids);
  std::mutex pause_mu_;
  std::condition_variable pause_cv_;
  // See note_logged_commit.
  std::atomic<uint64_t> last_commit_ns_{0};
  uint32_t parked_ = 0;                 // under pause_mu_
  bool pausing_ = false;                // under pause_mu_
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
  std::vector<int> worker_cpus_;   // empty: workers unpinned
  cluster::ClusterConfig config_;
  std::unique_ptr<KeyLayout> layout_;
  std::unique_ptr<txn::Engine> engine_;
  txn::Table<1>* table_ = nullptr;
  std::unique_ptr<bench::TpccWorkload> tpcc_;
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

void reply_json(const nlohmann::json& j, rt::MsgBuffer* out) {
  const std::string text = j.dump();
  out->assign({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

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
  const BankAccount account{kBankInitialBalance, 0, sim::kInitialTxn};
  for (uint64_t k = lo; k < hi; ++k) {
    SHOAL_TRY(is_bank() ? table_->load(key1(k), account) : table_->load(key1(k), v));
  }
  return Status::Ok();
}

// The workload a shard server runs: this shard's warehouses (warehouse_map_), whether it loads
// them or a promotion finds them replicated. REQUIRES: warehouse_map_ set.
bench::TpccOptions ShardServer::tpcc_options() const {
  bench::TpccOptions to;
  to.warehouses = warehouse_map_->warehouses();
  to.load_first_warehouse = warehouse_map_->first(options_.shard);
  to.load_last_warehouse = warehouse_map_->last(options_.shard);
  to.read_only_hint = options_.tpcc_read_only_hint;
  return to;
}

bench::LoadOptions ShardServer::tpcc_load_options() const {
  bench::LoadOptions lo;
  lo.warehouses = warehouse_map_->warehouses();
  lo.seed = 1;  // every shard: the same ITEM rows and NURand constants
  return lo;
}

Status ShardServer::load_tpcc() {
  warehouse_map_ = std::make_unique<WarehouseMap>(config_);
  const WarehouseMap& map = *warehouse_map_;
  if (map.warehouses() > bench::tpcc::kMaxWarehouses) {
    return Status::InvalidArgument(
        fmt::format("shards: partitions are warehouses, at most {}", bench::tpcc::kMaxWarehouses));
  }
  txn::EngineOptions eo = engine_options();
  // Without replication every version is as stable as it gets once installed, so the
  // vectorized watermark covers every dependency at once (EngineOptions); with it, versions
  // carry the vectors acknowledgement will wait on.
  eo.track_dependencies = replicated();
  engine_ = std::make_unique<txn::Engine>(eo);
  tpcc_ = std::make_unique<bench::TpccWorkload>(tpcc_options());
  bench::LoadOptions lo = tpcc_load_options();
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
  // RESP: a task per client with a request in flight, and one per pending acknowledgement.
  if (resp_enabled()) lo.max_tasks += options_.resp_max_connections;
  if (client_enabled()) lo.max_tasks += options_.client_max_connections;
  if (kv_enabled()) lo.max_tasks += kPendingAcksMax;
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
    SHOAL_TRY(dial(*w, s, deadline_ns));
    links[s] = w->peers[s]->link();
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
    if (follows_failovers() && config_.shards.size() > 1 && w->vector_watermark != nullptr) {
      w->discard_journal = std::make_unique<DiscardJournal>(options_.shard);
    }
    w->participant->set_commit_hook(&Worker::logged_commit, w.get());
    // One stream, several Txns (participant F10): every TID goes above what it promised.
    w->participant->set_tid_floor(w->appender->promised_tid());
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
      w->tpcc->local->txn().set_tid_floor(w->appender->promised_tid());
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

// A link over `endpoint` to `shard`, on w's loop. REQUIRES: w's loop thread, or before it runs.
template <typename E>
Result<std::unique_ptr<Peer>> make_peer(Worker& w, uint32_t shard, E endpoint) {
  auto peer = std::make_unique<PeerOver<E>>();
  peer->shard = shard;
  peer->endpoint = std::move(endpoint);
  peer->rpc = std::make_unique<rt::RpcEndpoint<E>>(*w.loop, peer->endpoint, data_rpc_options());
  SHOAL_TRY(peer->rpc->start());
  dist::RpcLinkOptions lo;
  lo.shard = shard;
  lo.session_count = 8;  // <= data_rpc_options().max_sessions
  lo.call_timeout_ns = 2000 * kMs;
  lo.end_attempts_max = 20;
  lo.watermark = w.vector_watermark.get();  // nullptr without replication
  peer->rpc_link = std::make_unique<dist::RpcLink<E>>(*peer->rpc, lo);
  return std::unique_ptr<Peer>(std::move(peer));
}

Status ShardServer::dial(Worker& w, uint32_t shard, uint64_t deadline_ns) {
  return connect_to(shard, deadline_ns, [&](auto endpoint) -> Status {
    auto peer = make_peer(w, shard, std::move(endpoint));
    if (!peer.ok()) return peer.status();
    w.peers[shard] = std::move(*peer);
    return Status::Ok();
  });
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
        discard_lost_versions(LostRange{shard, lost_above, lost_through}, replica);
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
        uint32_t shard;
        uint64_t epoch, lost_above, lost_through;
        E endpoint;
      };
      auto* h = new Handoff{wp, shard, epoch, lost_above, lost_through, std::move(endpoint)};
      Status posted = wp->loop->post(
          [](void* ctx) {
            std::unique_ptr<Handoff> h(static_cast<Handoff*>(ctx));
            h->w->redial(h->shard, h->epoch, h->lost_above, h->lost_through,
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
  // discard_journal.h).
  const bool cross_shard =
      logging != 0 &&
      std::any_of(txn.deps().entries().begin(), txn.deps().entries().end(),
                  [w](const txn::DepEntry& d) { return d.shard != w->server_shard; });
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
  static_cast<Worker*>(self)->server->park_worker();
}

void ShardServer::park_worker() {
  std::unique_lock<std::mutex> lock(pause_mu_);
  ++parked_;
  pause_cv_.notify_all();
  pause_cv_.wait(lock, [this] { return !pausing_; });  // bounded by discard_lost_versions
  --parked_;
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

Status ShardServer::discard_lost_versions(const LostRange& range, uint32_t replica) {
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
  if (all) {
    // Every worker waits in park_worker: the journals, the engine and stream 0 are ours.
    const uint64_t start_ns = RealEnv::instance().now_ns();
    std::vector<DiscardJournal*> journals;
    for (auto& w : workers_) journals.push_back(w->discard_journal.get());
    const size_t in_doubt = resolve_in_doubt(journals, range.shard, replica);
    uint64_t overflow = 0;
    for (const DiscardJournal* j : journals) overflow += j->stats().overflow;
    if (compensator_ == nullptr) {
      compensator_ = engine_->make_worker();
      compensator_->set_commit_hook(&repl::StreamAppender::commit_hook, workers_[0]->appender);
      compensator_->txn().set_tid_floor(workers_[0]->appender->promised_tid());
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
          "kept whole (writes under a kept version {}, removes {}, without an old value {}), "
          "{} not judged; {} transactions were in doubt there; {} writes were never journaled "
          "(full)\n",
          options_.shard, range.shard,
          static_cast<double>(RealEnv::instance().now_ns() - start_ns) / 1e6, r->lost_writes,
          r->restored, r->removed, r->not_discarded, r->kept_txns, r->blocked_under,
          r->blocked_removes, r->blocked_no_old_value, r->unknown, in_doubt, overflow);
    }
  }
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

// F11 (participant.h): asks `shard`'s new leader what its log says of each transaction its
// predecessor coordinated that is still prepared here, and installs or aborts it. One that
// gets no answer stays prepared, its locks held, until a later failover of that shard asks
// again: 2PC blocks rather than guess.
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
    fmt::print(stderr, "shoal server: shard {} worker {}: transaction {:#x} of shard {}: {}\n",
               w->server_shard, w->index, id, shard, s.to_string());
  }
  fmt::print(stderr,
             "shoal server: shard {} worker {}: shard {}'s new leader resolved {} prepared "
             "transactions: {} committed, {} aborted, {} still in doubt\n",
             w->server_shard, w->index, shard, ids.size(), committed, aborted, unknown);
}

template <typename E>
void Worker::redial(uint32_t shard, uint64_t new_epoch, uint64_t lost_above, uint64_t lost_through,
                    E endpoint) {
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
  auto peer = make_peer(*this, shard, std::move(endpoint));
  if (!peer.ok()) {
    fmt::print(stderr, "shoal server: shard {} worker {}: link to shard {}'s new leader: {}\n",
               server->shard(), index, shard, peer.status().to_string());
    return;
  }
  std::unique_ptr<Peer> old = std::move(peers[shard]);
  if (old != nullptr) {
    if (!old->down) {  // a hung leader: its connection never failed (health() did not see it)
      old->down = true;
      const size_t released = participant->abort_coordinated_by(shard, /*keep_prepared=*/true);
      fmt::print(stderr, "shoal server: shard {} worker {}: released {} transactions of shard {}\n",
                 server->shard(), index, released, shard);
    }
    old->fail(Status::Unavailable(
        fmt::format("shard {} failed over to another leader (epoch {})", shard, new_epoch)));
    old->retired_ns = loop->now_ns();
    retired.push_back(std::move(old));
  }
  peers[shard] = std::move(*peer);
  coordinator->set_link(shard, peers[shard]->link());
  std::vector<dist::TxnId> prepared;
  participant->prepared_coordinated_by(shard, &prepared);
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
  fmt::print(stderr,
             "shoal server: shard {} replica {} ready on {}:{} (epoch {}, {} worker{}, keys [{}, "
             "{}))\n",
             options_.shard, me_, me().host, me().port, epoch_, options_.workers,
             options_.workers == 1 ? "" : "s", layout_->lo(options_.shard),
             layout_->hi(options_.shard));
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
    w->kv_acks = std::make_unique<KvAcks>(*w->loop, *w->vector_watermark, kPendingAcksMax);
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
    local.set_tid_floor(w->appender->promised_tid());
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
  wo.leaders = leaders_;
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
  vector_watermark.reset();  // after the links that raise it
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
  rpc.handle(kStats,
             [s](rt::RpcRequest& r) -> rt::Task<Status> { co_return s->on_stats(r.response); });
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
  fmt::print(stderr,
             "shoal server: shard {}: {} followers installed the load ({} records, {:.1f} s)\n",
             options_.shard, lo.replicas - 1, boot->records, static_cast<double>(boot->ns) / 1e9);
  return Status::Ok();
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
  for (uint32_t s = 0; s < replication_->streams(); ++s) {
    SHOAL_TRY(
        replication_->appender(s).finish(r->floor_tid, repl::kLogFlagEpochStart, r->final_tid));
  }
  txn::EngineOptions eo = engine_options();
  eo.track_dependencies = true;  // a replicated shard's versions carry their vectors
  // Our TIDs start kTakeoverEpochJump engine epochs above the floor we saw, above any TID the
  // old leader gave in a tail nobody received (its ticker ran on while it lived: 40 ms per
  // epoch), so that those are in the lost range below.
  const uint64_t first_epoch = (r->floor_tid >> 32) + kTakeoverEpochJump;
  const size_t purged = engine_->start_leading(first_epoch, &eo);
  snapshot_tid_ = r->floor_tid;
  decisions_ = r->decisions;
  decisions_published_.store(decisions_.get(), std::memory_order_release);
  // The old leader's lost TIDs include ones nobody received (above the floor we saw): count
  // as lost everything below our first TID.
  SHOAL_TRY(publish_takeover(r->final_tid, (first_epoch << 32) - 1));
  fmt::print(stderr,
             "shoal server: shard {}: replica {} took over in epoch {} in {:.1f} ms: final "
             "watermark {:#x}, {} txns installed, {} discarded above it, {} tombstones purged, "
             "{} cross-shard decisions known\n",
             options_.shard, me_, epoch_, static_cast<double>(r->elapsed_ns) / 1e6, r->final_tid,
             r->replayed_txns, r->discarded_txns, purged,
             decisions_ != nullptr ? decisions_->size() : 0);
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
  const uint64_t old_epoch = epoch_ - 1;
  auto fw = store.publish_final_watermark(old_epoch, options_.shard, final_tid);
  if (!fw.ok()) return fw.status();
  auto fl = store.publish_epoch_floor(old_epoch, options_.shard, lost_through_);
  if (!fl.ok()) return fl.status();
  lost_above_ = *fw;
  lost_through_ = std::max(*fl, lost_above_ + 1);
  std::vector<uint64_t> fvw(config_.shards.size(), cluster::kInfiniteWatermark);
  fvw[options_.shard] = lost_above_;
  auto stored = store.publish_fvw(old_epoch, fvw);
  return stored.ok() ? Status::Ok() : stored.status();
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

Status ShardServer::adopt_store(Promotion& p) {
  engine_ = std::move(p.engine);
  if (options_.workload == "tpcc") {
    warehouse_map_ = std::make_unique<WarehouseMap>(config_);
    tpcc_ = std::make_unique<bench::TpccWorkload>(tpcc_options());  // as the loading leader's
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
  if (running_.load() > 0) return Status::InvalidArgument("repl: a load is running");
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
  if (--w->clients_running == 0) w->publish();
}

// Waits until the vectorized watermark covers `vector`, then records the commit latency (and
// journals an acknowledged NewOrder).
rt::Task<void> wait_for_ack(Worker* w, const txn::DepVec& vector, uint64_t start_ns,
                            OrderKey order) {
  Status covered = co_await w->vector_watermark->wait_covered(vector);
  if (covered.ok()) {
    w->stats.latency_commit.record(w->loop->now_ns() - start_ns);
    w->metrics.acknowledged(w->loop->now_ns() - start_ns);
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
  bench::TpccClient client(server.tpcc(), *w->tpcc->local, n, seed,
                           uint64_t{server.shard()} * 1024 + n + 1, w->load_number & 0xffff);
  client.bind_home(first + n % count, (n / count) % bench::tpcc::kDistrictsPerWarehouse + 1);
  dist::DistTxn dtxn;
  bench::TpccInput in;
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
    if (in.type == bench::tpcc::kNewOrder && out.status.ok()) {
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
    // The last ack task publishes; bounded by kAckGraceNs if replication stalls.
    auto grace = w->loop->add_timer(w->loop->now_ns() + kAckGraceNs, &Worker::ack_grace_thunk, w,
                                    w->load_end_ns);  // names this run
    SHOAL_ASSERT(grace.ok(), "ack grace timer: %s", grace.status().to_string().c_str());
  }
  w->publish_when_idle();
}

void Worker::start_load() {
  stats = MicroStats{};
  aborts_base = coordinator->stats().conflict_aborts;
  if (appender != nullptr) log_base = appender->stats();
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

void Worker::ack_grace_thunk(void* self, uint64_t run_end_ns) {
  auto* w = static_cast<Worker*>(self);
  if (run_end_ns != w->load_end_ns || w->acks_running == 0) return;  // done, or a later run
  // Every waiter resumes with the error; the last ack task then publishes.
  w->vector_watermark->release_all(Status::Timeout(fmt::format(
      "shard {}: not acknowledged {} ms after the run", w->server->shard(), kAckGraceNs / kMs)));
}

void Worker::record(bool cross, const Status& s, uint64_t latency_ns, uint32_t type) {
  type = std::min(type, MicroStats::kTypesMax - 1);
  if (s.ok() || s.is_user_abort()) {
    ++stats.committed;
    live_committed.store(live_committed.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
    server->note_commit();
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
  ack_journal.flush();
  bank_log.flush();
  done.store(true, std::memory_order_release);
  server->load_finished();
}

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

Status ShardServer::on_stats(rt::MsgBuffer* out) {
  bool done = true;
  for (auto& w : workers_) done = done && w->done.load(std::memory_order_acquire);
  uint64_t live = 0;
  for (auto& w : workers_) live += w->live_committed.load(std::memory_order_relaxed);
  nlohmann::json j = {
      {"shard", options_.shard}, {"done", done},
      {"replica", me_},          {"epoch", epoch_},
      {"live_committed", live},  {"first_commit_unix_us", first_commit_unix_us_.load()}};
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
      j["log"] = {{"txns", log.txns},
                  {"entries", log.entries},
                  {"bytes", log.bytes},
                  {"patches", log.patches}};
    }
  }
  reply_json(j, out);
  return Status::Ok();
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
  for (uint64_t base = lo; base < hi; base += kKeysPerTxn) {
    t.begin();
    for (uint64_t k = base; k < std::min(hi, base + kKeysPerTxn); ++k) {
      Status s;
      if (is_bank()) {
        BankAccount a{};
        s = engine_->tables()[kBankTableId]->txn_get(t, &k, &a, sizeof a, nullptr);
        sum += s.ok() ? a.seq : 0;
        balance_sum += s.ok() ? a.balance : 0;
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
  const uint64_t worker = j->is_object() ? j->value("worker", ~uint64_t{0}) : ~uint64_t{0};
  const uint64_t from = j->is_object() ? j->value("from", uint64_t{0}) : 0;
  if (worker >= workers_.size()) {
    return Status::InvalidArgument(
        fmt::format("history.worker: must be below {}", workers_.size()));
  }
  if (running_.load() > 0) return Status::InvalidArgument("history: a load is running");
  for (auto& w : workers_) {
    if (!w->done.load(std::memory_order_acquire)) {
      return Status::InvalidArgument("history: a load is running");
    }
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
  if (running_.load() > 0) return Status::InvalidArgument("scan.acks: a load is running");
  const auto paths = request.find("paths");
  if (paths == request.end() || !paths->is_array() || paths->size() > kAckJournalsMax) {
    return Status::InvalidArgument(
        fmt::format("scan.paths: an array of at most {} journal paths", kAckJournalsMax));
  }
  uint64_t checked = 0, missing = 0, unreadable = 0;
  nlohmann::json first_missing = nullptr;
  bench::tpcc::OrderRow row;
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
      const Status s = tpcc_->tables().order->peek(bench::tpcc::order_key(k.w_id, k.d_id, k.o_id),
                                                   &row, sizeof row);
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
//      in bench::ForeignPayments)
//   {"step": "check", "payments": [...]}: the consistency conditions over this shard's
//      warehouses with those sums (from every other shard) added in.
Status ShardServer::on_scan_tpcc(const nlohmann::json& request, rt::MsgBuffer* out) {
  std::string step;
  if (Status s = json_optional_field(request, "step", &step); !s.ok()) {
    return Status::InvalidArgument("scan: " + s.message());
  }
  if (step == "payments") {
    reply_json({{"shard", options_.shard},
                {"payments", payments_to_json(bench::foreign_payments(*engine_))}},
               out);
    return Status::Ok();
  }
  if (step == "acks") return check_acks(request, out);
  if (step != "check") {
    return Status::InvalidArgument("scan.step: must be payments, check or acks");
  }
  bench::ForeignPayments foreign;
  const auto entries = request.find("payments");
  if (entries != request.end()) SHOAL_TRY(payments_from_json(*entries, "scan.payments", &foreign));
  const std::vector<std::string> failures =
      bench::check_tpcc_conditions(*engine_, /*after_load=*/false, &foreign);
  reply_json({{"shard", options_.shard}, {"failures", failures}}, out);
  return Status::Ok();
}

}  // namespace

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

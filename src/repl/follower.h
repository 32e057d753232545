// Follower: one follower replica of one shard (a `shoal replica` process, or a thread in
// tests). It takes part in every stream of the shard as a Paxos acceptor whose state is
// durable (AcceptorLog: the WAL of received entries plus the ballot journal), replays chosen
// entries into its own engine gated by the shard watermark (ReplayApplier), and answers the
// leader's status requests (applied TID, digest, consistency check, replay cost).
//
// Life: open() restores the schema, the newest valid checkpoint (if any), the acceptor state
// and the chosen slots after the checkpoint's cut from data_dir (a restarted follower holds
// everything it had acknowledged, and has replayed the chosen part before it talks to
// anyone); run() dials the leader, says hello, receives the schema (first
// start) and then follows until the leader closes the connection (returns Ok), *stop is set,
// or an error. The streams then catch up by Paxos (accepts retransmitted, chosen entries sent
// by paxos_learn). Catch-up is served from the leader's memory (retain_chosen_slots) or, for a
// follower that lags further, from the leader's WAL (AcceptorLog as ChosenSlotSource); learned
// entries go into this replica's WAL too. While the replay queue is over half full, learn
// messages are dropped (learns_deferred_) so catch-up never stops the network thread reading.
//
// Topology today: followers talk to the leader only (a star); messages a stream addresses to
// another follower are dropped. Followers never start elections (PaxosOptions::may_lead):
// only replica 0 proposes. Elections among followers after a leader failure need the
// follower-to-follower links (later, with recovery).
//
// Checkpoints (FollowerOptions::checkpoint_interval_ms): the replay thread writes the store at
// an exact cut between two entries, a short-lived thread makes the file durable, and the
// network thread then starts new WAL segments and deletes those the older kept checkpoint
// covers (docs/REPLICATION.md "Checkpoints and WAL truncation"). The follower reports each
// durable checkpoint to the leader (CheckpointNote: its cut, and the cut of the older one it
// keeps, above which it may need the leader's WAL) and serves the file in chunks when the
// leader asks for it (the leader keeps it as its own and truncates its WAL behind it).
//
// Threads: open() and run() on one thread, which runs the network, Paxos and the WAL; run()
// starts a replay thread (installs chosen entries, writes checkpoints) and joins it before
// returning.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shoal/status.h"
#include "src/net/tcp_transport.h"
#include "src/net/wan_shaper.h"
#include "src/repl/acceptor_log.h"
#include "src/repl/leader.h"
#include "src/repl/paxos_stream.h"
#include "src/repl/peer_link.h"
#include "src/repl/replay.h"
#include "src/repl/replica_proto.h"
#include "src/runtime/event_loop.h"
#include "src/txn/snapshot.h"

namespace shoal::repl {

// Runs a workload's consistency conditions on a follower's engine: failures, empty when all
// hold. Chosen by the schema's workload name (the replica command maps names to checks);
// `args` is what the leader's report request carried (null if nothing), e.g. the TPC-C
// payments other shards hold for this shard's customers.
using CheckFn = std::function<std::vector<std::string>(txn::Engine&, const std::string& workload,
                                                       const nlohmann::json& args)>;

// Makes the function a reader thread calls for one round of read-only transactions at its
// open snapshot (src/txn/snapshot.h), for the schema's workload; called once per reader
// thread when the schema is known. An error (e.g. a workload without read-only
// transactions) is reported and that reader stops.
using ReadRoundFn = std::function<Status(txn::SnapshotReader&, Rng&, txn::ReadRoundResult*)>;
using ReadRoundFactory =
    std::function<Result<ReadRoundFn>(txn::Engine&, const std::string& workload)>;

struct FollowerOptions {
  uint32_t shard = 0;
  uint32_t replica = 1;
  uint32_t replicas = 3;
  std::string leader_host = "127.0.0.1";
  uint16_t leader_port = 0;
  uint32_t leader_replica = 0;     // the replica id of the leader we dial (set_leader changes it)
  net::LinkShape receive_shape;    // WAN delay of what the leader sends us
  LinkKind link = LinkKind::kTcp;  // kShm, kFabric: the leader runs on this host (LeaderOptions)
  net::FabricOptions fabric;       // kFabric: the provider (the leader's must be the same)
  std::string data_dir;            // WAL, journal and schema; created if absent
  // The cluster's name: data_dir's identity.json must name it, shard and replica (written
  // when absent; check_replica_identity). Empty: not checked.
  std::string cluster_name;
  FsyncPolicy fsync = FsyncPolicy::kBatch;
  // shard/stream/replica fields are set per stream; max_message_bytes must match the
  // leader's (replication_message_bytes).
  PaxosOptions paxos;
  uint64_t retain_chosen_slots = 256;
  uint64_t connect_timeout_ms = 10'000;
  CheckFn check;  // null: check requests report "no checker"
  // Nice level of the replay thread: on a machine shared with the leader's workers (the bench
  // runs every replica on one machine) replay uses the CPU they leave.
  int replay_nice = 0;
  bool quiet = false;
  // Follower reads: reader threads (at replay_nice) that run read-only transactions at the
  // follower's snapshot while replay goes on; 0: none, and no version chains are kept.
  // At most kReadThreadsMax. Readers take their first snapshot once the leader's bootstrap
  // (its end marker, src/repl/bootstrap.h) is installed: a follower whose leader never
  // bootstraps serves no reads.
  uint32_t serve_reads = 0;
  ReadRoundFactory read_rounds;  // REQUIRES: set when serve_reads > 0
  // Test-only planted bug: readers read the newest versions, not their snapshot's.
  bool unsafe_snapshot_read_newest = false;
  // Checkpoints (src/repl/checkpoint.h): every this many ms the replay thread writes the
  // store at its exact cut to data_dir; once durable, each stream's WAL starts a new segment
  // and segments covered by the previous checkpoint are deleted (two are kept). 0: never.
  // A restart loads the newest valid checkpoint and replays only the WAL after it.
  uint64_t checkpoint_interval_ms = 0;
  // Failure detection: run() ends (leader_silent()) when nothing came from the leader for
  // this long while its connection stays open (a hung or partitioned leader; a dead one closes
  // it). The leader's streams send heartbeats every PaxosOptions::heartbeat_ns, so this must
  // be several of those plus a round trip. Armed once the bootstrap is installed (a leader
  // busy bootstrapping is slow, not dead) and the leader serves: it has spoken on this
  // connection and not said it is starting (LeaderOptions::announces_serving), or said since
  // that it serves. Until then connect_timeout_ms of silence ends it instead (a connection
  // completes once the leader listens, long before a restarting leader's replication thread
  // talks; docs/REPLICATION.md, "Failure detection and fencing"). This replica's own stalls do not
  // count: a tick more than half the timeout late, or the poller paused by replay
  // backpressure, restart the clock. 0: only a closed connection ends the leader.
  uint64_t leader_timeout_ms = 0;
  // Epoch fences the configuration manager published for this shard (ReplayApplier::
  // learn_fence), given to the applier before it replays anything, the WAL included: the
  // log alone may bring a fence too late (an epoch start chosen on some streams only).
  std::vector<EpochFence> fences;
  // Sees the replayed writes of records naming other shards (ReplayApplier::set_observer),
  // from the WAL's replay on; goes with the applier to a takeover. Null: nothing does.
  std::shared_ptr<ReplayObserver> replay_observer;
};

// What the follower's checkpoints did (any thread; tests and the log line).
struct CheckpointCounters {
  uint64_t written = 0;       // published (durable)
  uint64_t failed = 0;        // writes or publishes that failed (reported on stderr)
  uint64_t pause_ns_max = 0;  // longest replay pause (cut + rows written to the file)
  uint64_t pause_ns_last = 0;
  uint64_t wal_bytes_deleted = 0;
  uint64_t loaded_seq = 0;  // the checkpoint open() loaded (0: none)
  uint64_t refused = 0;     // checkpoints open() refused (corrupt, torn, newer format)
};

// Where each of the follower's streams stands, as of its network thread's last tick (metrics).
struct FollowerStreamPosition {
  uint64_t received = 0;   // the highest slot accepted or learned here
  uint64_t chosen = 0;     // every slot at or below it is known chosen here
  uint64_t wal_bytes = 0;  // this stream's WAL (live segments)
};

inline constexpr uint32_t kReadThreadsMax = 16;

// A replica's directory (a follower's, or a leader's WAL directory: a former leader restarts
// over it as a follower): created if absent; its layout marker checked, or written when it
// holds no replica files yet. NotSupported/Corruption for another layout, naming what to do.
[[nodiscard]] Status prepare_replica_dir(const std::string& dir);
// Whose directory it is (identity.json): written when absent, else compared.
struct ReplicaIdentity {
  std::string cluster;
  uint32_t shard = 0;
  uint32_t replica = 0;
};
// InvalidArgument naming both when the directory belongs to another cluster, shard or replica
// (nothing is written then), Corruption when the file is unreadable.
[[nodiscard]] Status check_replica_identity(const std::string& dir, const ReplicaIdentity& id);

// A directory a leader restarts from (`shoal server --recover-epoch`): NotFound when it is
// missing or holds no schema.json and layout marker (never used by a replica), InvalidArgument
// when its identity.json names another replica (directories older than identities have none),
// NotSupported/Corruption for another layout (prepare_replica_dir). Writes nothing.
[[nodiscard]] Status check_replica_dir_to_recover(const std::string& dir,
                                                  const ReplicaIdentity& id);

// The schema and stream count a replica's directory keeps (schema.json): with it a replica
// restarting there (a follower, or a former leader rejoining as one) recovers its WAL before it
// dials anyone, instead of after the leader sent the schema (a recovery of seconds on the
// network thread, while the leader's sends to it back up).
[[nodiscard]] Status write_replica_schema(const std::string& dir, const Schema& schema,
                                          uint32_t streams);

// A replica directory that lost its state in a cluster with history (`cluster up` restarting
// a follower whose directory holds no log): <dir>/rejoin, synced, the directory created if
// absent. The follower that opens the directory marks every stream whose log is absent
// rejoining (AcceptorLog::mark_rejoining: no promise, no vote until caught up) and then
// deletes it. A directory whose schema.json survived needs none: a stream log missing there
// is marked all the same. docs/REPLICATION.md, "A replica that lost its directory rejoins
// without a vote".
[[nodiscard]] Status mark_replica_dir_rejoining(const std::string& dir);

class Follower {
 public:
  // Recovers the store from data_dir. options.leader_replica names another replica, except
  // for a shard's only replica (replicas 1), which is opened only to hand_over() and lead.
  [[nodiscard]] static Result<std::unique_ptr<Follower>> open(const FollowerOptions& options);
  ~Follower();
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

  // Follows the leader until it disconnects (Ok), *stop becomes true (Ok), or an error.
  [[nodiscard]] Status run(const std::atomic<bool>* stop = nullptr);

  // The last run() ended because the leader said it stops (not a crash: nobody takes over).
  bool leader_stopped() const { return leader_stopped_; }
  // The last run() ended because the leader was silent for leader_timeout_ms (suspected).
  bool leader_silent() const { return leader_silent_; }
  // The last run() failed to connect to the leader within connect_timeout_ms (its error says
  // how): it may be dead, or gone while we dialed.
  bool leader_unreachable() const { return leader_unreachable_; }
  // The leader of the current (or last) run() serves: it spoke and is not starting, so its
  // silence counts against leader_timeout_ms (FollowerOptions). Any thread.
  bool leader_serving() const { return leader_serving_.load(std::memory_order_acquire); }
  // The replica the leader last named its successor (the follower whose replay it paces
  // itself by, LeaderOptions::follower_replay_lag_ms_max), kNoReplica if none yet. Network
  // (any thread).
  static constexpr uint32_t kNoReplica = UINT32_MAX;
  uint32_t successor_hint() const { return successor_hint_.load(std::memory_order_acquire); }

  // The leader changed (docs/REPLICATION.md, "Failover": the configuration manager named replica
  // `replica`): the next run() dials it. REQUIRES: run() is not running; replica != this replica.
  void set_leader(uint32_t replica, const std::string& host, uint16_t port);
  // Fences the configuration manager published since open() (FollowerOptions::fences): call
  // when a new leader is named, before run() follows it or hand_over() promotes this replica.
  // REQUIRES: run() is not running.
  void learn_fences(const std::vector<EpochFence>& fences);

  // Promotion in place: hands this replica's applier and acceptor state to a
  // ReplicationLeader (Takeover, leader.h) and its engine to *engine. Everything chosen and
  // received is installed or held in the applier. The follower is unusable afterwards.
  // REQUIRES: run() is not running; the schema is known (FailedPrecondition otherwise).
  [[nodiscard]] Result<Takeover> hand_over(std::unique_ptr<txn::Engine>* engine);

  txn::Engine& engine() { return *engine_; }
  // Every record at or below it is installed (any thread).
  uint64_t applied_tid() const;
  // Records (transactions) installed so far, published with applied_tid (any thread).
  uint64_t replayed_txns() const { return replay_txns_.load(std::memory_order_acquire); }
  uint64_t recovered_slots() const { return recovered_slots_; }
  // Streams whose acceptor is still rejoining (lost its state; no vote yet). Between runs,
  // or on the network thread: a follower with any cannot lead, so it does not stand.
  uint32_t rejoining_streams() const;
  // open() loaded no checkpoint while a stream's WAL lost its head to truncation: the store
  // lacks the slots before it, which only another replica can give (a follower learns them
  // from its leader's WAL if that still holds them; a leader restarting alone cannot).
  bool wal_head_missing() const;
  CheckpointCounters checkpoints() const;
  // As of the last tick (any thread).
  std::vector<FollowerStreamPosition> positions() const;
  // Entries chosen and queued for replay, not yet installed (any thread).
  uint64_t replay_backlog() const { return replay_pending_.load(std::memory_order_relaxed); }
  // Latency of the WAL fdatasyncs before acknowledging (fsync batch/always; any thread).
  ops::BucketSnapshot fsync_latency() const { return fsync_latency_.snapshot(); }
  // Status as sent to the leader (digest and check computed on demand, cached per TID).
  FollowerReport report(bool digest, bool check,
                        const nlohmann::json& check_args = nlohmann::json());

 private:
  struct Stream;
  class Transport;
  explicit Follower(const FollowerOptions& options);
  [[nodiscard]] Status set_schema(const Schema& schema, uint32_t streams, bool persist);
  // Recovery: the newest checkpoint that loads (older ones after a refusal), or none.
  [[nodiscard]] Status load_newest_checkpoint(const Schema& schema, uint32_t streams,
                                              std::optional<ReplayCut>* cut);
  void reset_engine();
  void on_message(uint32_t session, std::span<const uint8_t> bytes);
  void handle_control(std::span<const uint8_t> bytes);
  void send(uint32_t session, std::span<const std::byte> bytes);
  void release_held();  // syncs dirty logs, then sends the replies held meanwhile
  static void on_tick(void* self, uint64_t);
  // When the next tick is due: kTickNs from now, or kQuietTickNs while nothing is in hand
  // (streams quiet, replay drained and reported), but never after the leader timeout expires.
  uint64_t next_tick_ns(uint64_t now_ns) const;
  void schedule_tick(uint64_t due_ns);
  uint64_t tick_timer_ = 0, tick_due_ns_ = 0;  // network thread: the pending on_tick

  FollowerOptions options_;
  uint32_t leader_replica_ = 0;  // network thread (set_leader between runs)
  bool leader_stopped_ = false;  // network thread: the leader's "bye" ended the last run
  std::unique_ptr<txn::Engine> engine_;
  std::optional<Schema> schema_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::unique_ptr<ReplayApplier> applier_;
  uint64_t recovered_slots_ = 0;
  std::unique_ptr<rt::EventLoop> loop_;
  std::optional<PeerLink> ep_;
  Status failed_;
  const std::atomic<bool>* stop_ = nullptr;
  // Replay runs on its own thread (at replay_nice), fed chosen entries (copies) through a
  // queue; beyond kReplayQueueMax queued entries (about 2048 x 200 KB of TPC-C batches) the
  // network poller stops reading, so TCP pushes back on the leader.
  static constexpr size_t kReplayQueueMax = 2048;
  void hand_to_replay(uint32_t stream, EntryBuffer entry);
  void publish_replay();  // replay thread (or before it starts)
  void start_replay();
  void stop_replay();
  std::mutex replay_mu_;
  std::condition_variable replay_cv_;
  std::deque<std::pair<uint32_t, EntryBuffer>> replay_items_;
  bool replay_stop_ = false;
  std::thread replay_thread_;
  std::atomic<uint64_t> replay_pending_{0};  // queued or in hand
  std::atomic<uint64_t> applied_{0}, replay_txns_{0}, replay_writes_{0}, replay_cpu_ns_{0};
  // The replay's watermark: applied_ but for the few records held at or below it behind a
  // higher one of their stream (replay.h), which a takeover installs at once (install_held).
  std::atomic<uint64_t> replayed_watermark_{0};
  uint64_t last_debug_ns_ = 0;
  uint64_t replayed_sent_ = 0;  // network thread: the applied TID last reported to the leader
  void report_replayed();
  // Failure detection (leader_timeout_ms), network thread.
  uint64_t last_heard_ns_ = 0, last_tick_ns_ = 0;
  bool leader_silent_ = false;
  // This connection: the leader spoke (network thread), and it has not said it is starting
  // (or said since that it serves): leader_timeout_ms applies (check_leader_heard).
  bool leader_spoke_ = false, leader_starting_ = false;
  std::atomic<bool> leader_serving_{false};
  bool leader_unreachable_ = false;
  std::atomic<uint32_t> successor_hint_{kNoReplica};
  bool malformed_control_said_ = false;  // network thread
  void note_malformed_control(const std::string& why);
  std::atomic<bool> bootstrap_installed_{false};  // published by publish_replay()
  void check_leader_heard(uint64_t now_ns);
  uint64_t learns_deferred_ = 0;  // network thread
  // Keeps received entries where they arrived (PeerLink::keep_received): over shared memory,
  // tcp or fabric the store, the WAL write and the replay queue use the bytes where the
  // transport received them (the shared ring the leader wrote, tcp's receive ring recv()
  // filled, or the registered ring the leader's RMA writes filled), not a copy. Network thread.
  class RingKeeper final : public EntryKeeper {
   public:
    explicit RingKeeper(Follower* f) : self_(f) {}
    EntryBuffer keep(std::span<const std::byte> bytes) override;

   private:
    Follower* self_;
  };
  RingKeeper keeper_{this};
  // Kept entries hold half the receive ring back from the leader: every stream drops
  // its retained chosen slots (their bytes are in the WAL, which catch-up reads as a leader's
  // ChosenSlotSource after a takeover); if that was not enough, every other kept entry (in a
  // store or queued for replay) is copied out of the ring.
  void shed_for_ring();
  uint64_t retained_shed_ = 0;         // network thread: slots shed_for_ring() dropped ...
  uint64_t ring_copied_ = 0;           // ... and kept entries it copied out of the ring
  ops::LatencyBuckets fsync_latency_;  // the network thread writes
  mutable std::mutex positions_mu_;
  std::vector<FollowerStreamPosition> positions_;  // guarded by positions_mu_
  void note_positions();                           // network thread (tick)
  // Checkpoints (checkpoint_interval_ms > 0). The network thread requests one (tick), the
  // replay thread writes it between entries (take_checkpoint), a short-lived thread makes it
  // durable, and the network thread then rotates and truncates the WALs (finish_checkpoint).
  void take_checkpoint();  // replay thread
  // Network thread: the note of the newest durable checkpoint, sent on every connect and
  // after every checkpoint; nullopt before the first.
  std::optional<CheckpointNote> checkpoint_note_;
  void send_checkpoint_note();
  void serve_checkpoint_chunk(const nlohmann::json& request);  // a leader's ckpt_get
  std::vector<uint8_t> chunk_buf_;                             // reused
  void finish_checkpoint();                                    // network thread
  void maybe_request_checkpoint(uint64_t now_ns);              // network thread (tick)
  struct DoneCheckpoint {
    uint64_t seq = 0;
    Status status;
    std::vector<uint64_t> covered;  // per stream: slots <= it are in the checkpoint
  };
  std::atomic<bool> checkpoint_requested_{false};
  bool checkpoint_busy_ = false;  // network thread: requested and not yet finished
  uint64_t last_checkpoint_ns_ = 0;
  uint64_t next_checkpoint_seq_ = 1;  // replay thread (set at open)
  // Network thread: what replay and the WAL had when the last checkpoint was requested.
  uint64_t txns_at_checkpoint_ = 0, wal_bytes_at_checkpoint_ = 0;
  static constexpr uint64_t kIdleCheckpointWalBytes = uint64_t{64} << 20;
  std::thread checkpoint_sync_thread_;  // publishes the last written checkpoint
  std::vector<uint64_t> kept_covered_;  // network thread: the cut of the older kept checkpoint
  uint64_t kept_seq_ = 0;               // ... and its sequence number
  mutable std::mutex checkpoint_mu_;
  std::optional<DoneCheckpoint> checkpoint_done_;  // guarded by checkpoint_mu_
  CheckpointCounters checkpoint_counters_;         // guarded by checkpoint_mu_
  // Follower reads (serve_reads > 0).
  void start_readers();
  void stop_readers();
  void read_loop(uint32_t index);
  void note_read_round(const txn::ReadRoundResult& round, uint64_t lag_epochs);
  std::unique_ptr<txn::SnapshotRegistry> snapshots_;
  std::vector<std::thread> readers_;
  std::atomic<bool> readers_stop_{false}, schema_ready_{false};
  std::atomic<uint64_t> max_received_tid_{0};  // the newest TID an entry brought us
  std::atomic<uint64_t> read_txns_{0}, read_snapshots_{0}, torn_snapshots_{0};
  std::atomic<uint64_t> lag_epochs_sum_{0}, lag_epochs_max_{0};
  std::atomic<uint64_t> reads_first_ns_{0}, reads_last_ns_{0};
  std::mutex violation_mu_;
  std::string first_violation_;  // guarded by violation_mu_
  // Replies held during a batch of received messages (group commit); reused buffers.
  struct Held {
    uint32_t session;
    size_t offset, bytes;
  };
  bool holding_ = false;
  std::vector<Held> held_index_;
  std::vector<std::byte> held_bytes_;
  // Cached on-demand results.
  uint64_t digest_tid_ = ~uint64_t{0}, digest_ = 0;
  uint64_t check_tid_ = ~uint64_t{0};
  std::vector<std::string> check_failures_;
};

}  // namespace shoal::repl

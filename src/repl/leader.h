// ReplicationLeader: the leader side of one shard's replication (docs/REPLICATION.md, "A
// replicated shard" and "Watermarks and acknowledgement"), owned by the shard's process and shared
// by its worker threads.
//
//   worker thread s:  Worker commit hook -> StreamAppender s (encode into a pooled buffer,
//                     seal by count/bytes/age) -> SPSC ring  ──┐
//   replication thread (one per process, an rt::EventLoop):    v
//                     PaxosStream s .propose(sealed bytes) -> accepts to every follower over
//                     one WAN-shaped TCP connection each; chosen callback -> ShardWatermark
//                     -> watermark() (an atomic any thread reads: the acknowledgement point)
//
// One stream per worker (Rolis: a single shared stream caps throughput), but one replication
// thread for all of them: on our 2-core machines a thread per stream would steal the workers'
// cores. Followers dial the leader's listener (FollowerOptions::leader_*), say hello with their
// replica id, get the table schema, and from then on take part in every stream.
//
// Start-up: streams elect replica 0 (this process) once a majority is connected;
// wait_leading() blocks until every stream leads. Proposals sealed before that wait in the
// stream's queue (bounded by the appender's buffer pool, which pushes back on the worker).
//
// WAL truncation on the leader (LeaderOptions::checkpoint_fetch_interval_ms; docs/
// REPLICATION.md "WAL truncation on the leader"): the leader takes no checkpoint of its own
// (its store is written by the workers while it runs); it fetches a follower's newest durable
// checkpoint over the replication connection, in chunks it pulls one at a time, verifies it
// (checksum, stream count, the cut the follower announced, a cut within what this leader
// chose) and publishes it in its own directory, where a restart (`--recover-epoch`, or as a
// follower after a failover) loads it like a follower's. Each stream's log then starts a new
// segment and deletes the closed ones at or below leader_wal_truncation_cut(): below both the
// older of its two kept checkpoints and every other replica's reported need.
//
// A lone replica (replicas 1, with a WAL) has no follower to fetch from: every interval its
// replication thread closes each stream's WAL segment (AcceptorLog::rotate) and a thread at
// compaction_nice rebuilds the store at those segments' chosen prefix from the directory alone
// (compact_replica_dir, compaction.h: the newest checkpoint plus the closed segments, replayed
// as a restart replays them; never the live engine) and publishes it as the next checkpoint,
// which the replication thread then registers as it registers a fetched one (the two newest
// held, the segments the older covers deleted). docs/REPLICATION.md "A lone replica's
// checkpoints".
//
// Threads: start()/wait_leading()/collect_reports()/stop() from one controlling thread;
// appender(s) on worker s; watermark() anywhere. Everything else runs on the replication
// thread.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shoal/status.h"
#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"
#include "src/net/wan_shaper.h"
#include "src/ops/metrics.h"
#include "src/repl/acceptor_log.h"
#include "src/repl/appender.h"
#include "src/repl/lead_bound.h"
#include "src/repl/paxos_stream.h"
#include "src/repl/peer_link.h"
#include "src/repl/replay.h"
#include "src/repl/replica_proto.h"
#include "src/repl/takeover.h"
#include "src/repl/watermark.h"
#include "src/runtime/event_loop.h"

namespace shoal::repl {

// Paxos timing for a WAN of `rtt_ns`: heartbeats stay at 5 ms, retransmission waits beyond a
// round trip (else every accept is sent several times per round trip), elections wait several.
PaxosOptions paxos_options_for_rtt(uint64_t rtt_ns);
// How often leader and followers tick their streams (heartbeats, retransmission, floors):
// every wake-up costs both a core on our 2-core machines, so not every millisecond.
inline constexpr uint64_t kTickNs = 2'000'000;
// The tick while nothing needs hurrying (nothing pending or in flight, no catch-up, election,
// takeover or checkpoint fetch): the heartbeat period (paxos_options_for_rtt), so that an idle
// shard's replication threads wake about 100 times a second instead of 500. Anything that
// arrives (a sealed entry's post, a message) wakes the loop by itself, and a proposal brings a
// quiet tick forward to kTickNs (ReplicationLeader::hurry_tick).
inline constexpr uint64_t kQuietTickNs = 10'000'000;

// Paxos message size for entries of up to batch_bytes_max: one entry plus headroom, and small
// otherwise. Small matters: TcpEndpoint::send blocks (without reading) while the socket is
// full, so two peers sending each other multi-megabyte messages (accepts one way, a promise
// with a long accepted suffix the other) can stall each other; promises page through long
// suffixes instead (PaxosStream phase 1).
uint32_t replication_message_bytes(const PaxosOptions& paxos, uint32_t batch_bytes_max);

// What a follower hands to the replica process that takes over as its shard's leader
// (Follower::hand_over; docs/REPLICATION.md, "Failover"): the applier, with its per-stream
// positions and the records it holds above its watermark, and each stream's acceptor state (store
// and WAL), in stream order. The engine it replayed into goes to the leader as its store.
struct Takeover {
  std::unique_ptr<ReplayApplier> applier;
  std::vector<std::unique_ptr<PaxosAcceptorStore>> stores;  // (a deque inside: not nothrow-movable)
  std::vector<std::unique_ptr<AcceptorLog>> logs;
};

// The per-stream slot at or below which the leader may delete closed WAL segments: the
// minimum of (a) the older of the leader's own two kept checkpoints (its restart loads the
// newest, or the older if the newest is refused, then needs the WAL above it) and (b) every
// other replica's `kept` (CheckpointNote: the slots above it may have to come from the
// leader's WAL). Zeros (nothing deleted) while the leader keeps fewer than two checkpoints or
// a replica has not reported (nullopt): a replica the leader knows nothing about may need any
// slot. own_kept: oldest first. follower_kept: by replica id, entry `self` ignored.
// REQUIRES: every vector has `streams` entries.
std::vector<uint64_t> leader_wal_truncation_cut(
    uint32_t streams, const std::vector<std::vector<uint64_t>>& own_kept,
    const std::vector<std::optional<std::vector<uint64_t>>>& follower_kept, uint32_t self);

struct LeaderOptions {
  uint32_t shard = 0;
  uint32_t streams = 1;  // one per worker
  uint32_t replicas = 3;
  uint32_t replica = 0;  // this process's replica id
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0: any free port (see port())
  // receive_shapes[r]: the WAN delay of what replica r sends us (region r -> region 0).
  std::vector<net::LinkShape> receive_shapes;
  // kShm: also accept followers on this host over shared memory (replication_shm_name of
  // listen_host and the TCP port); kFabric: over libfabric (replication_fabric_name, with
  // `fabric`'s provider). TCP stays open for the others.
  LinkKind link = LinkKind::kTcp;
  net::FabricOptions fabric;
  AppenderOptions appender;  // shard/stream are set per stream
  std::string wal_dir;       // empty: this replica keeps no WAL (its acceptances in memory)
  FsyncPolicy fsync = FsyncPolicy::kBatch;
  PaxosOptions paxos;  // shard/stream/replica fields are set per stream
  uint64_t retain_chosen_slots = 256;
  // Proposals stop while a connected follower's reported chosen index lags the next slot by
  // more than this, so a healthy follower stays within the retained slots (caught up from
  // memory). A follower that (re)connects or is found further behind than this plus
  // PaxosOptions::pipeline_slots is catching up (from the WAL, paced): it is not waited for
  // until it is back within this bound. REQUIRES: < retain_chosen_slots.
  uint64_t follower_lag_slots_max = 192;
  // The ratekeeper: proposals also stop while the designated successor (the connected
  // follower, caught up on every stream, that replayed furthest; followers are told who it is
  // and the others defer to it when the leader fails) reports a replay position the shard
  // watermark passed more than this long ago, and resume once it is back within it. The
  // backlog the successor replays before it can serve as the shard's leader (its takeover) is
  // so bounded, and with it the failover time. Followers report their applied TID every tick
  // ({"type":"replayed"}). The successor's round trip (receive_shapes, both ways) is added:
  // the lag the leader sees includes it (the chosen index travels to the follower, its
  // report back), and it is not replay backlog. Below that hard limit the ratekeeper paces
  // the workers (lead_bound.h, RatekeeperRate: StreamAppender::set_pace_rate) at the
  // successor's replay speed, so that its lag settles near the round trip plus half of this.
  // 0: unbounded, and no pace.
  uint64_t follower_replay_lag_ms_max = 100;
  // The lead bound (lead_bound.h): a stream's worker opens no new batch while its oldest
  // entry not yet proposed was sealed more than this long ago, or its oldest proposal not
  // yet chosen went out more than this plus the round trip to the nearest majority
  // (receive_shapes) ago. Keeps the queues in front of the majority short, so that a stall
  // holds back one batch rather than the worker's whole log ring.
  // 0: unbounded (the ring and the proposal rules above are the only bounds).
  uint64_t lead_ms_max = 10;
  Schema schema;  // sent to every follower
  // WAL truncation on the leader: at most this often, fetch the newest checkpoint a follower
  // reports into checkpoint_dir and delete WAL segments (see above). 0, or checkpoint_dir
  // empty: never (the WAL grows without bound). checkpoint_dir is the leader's replica
  // directory (wal_dir, or a promoted follower's data_dir).
  uint64_t checkpoint_fetch_interval_ms = 0;
  std::string checkpoint_dir;
  // A fetch that received nothing for this long is abandoned (the follower is stuck or gone).
  uint64_t checkpoint_fetch_timeout_ms = 10'000;
  // A lone replica (replicas 1) compacts instead, every checkpoint_fetch_interval_ms (see
  // above), on a thread at this nice level: the workers need the cores more.
  int compaction_nice = 10;
  // Called on the replication thread each time an entry of `stream` is chosen, after the
  // shard watermark took it in: what waits on the watermark or on the stream's entries
  // settling (durable replies, the worker's group commit) is woken instead of polling.
  // Must not block. nullptr: nobody is told.
  void (*on_chosen)(void* ctx, uint32_t stream) = nullptr;
  void* on_chosen_ctx = nullptr;
  // Start-up (docs/REPLICATION.md, "Failure detection and fencing"): true, the leader tells its
  // followers it is starting (the schema message says so) until its caller calls
  // note_serving(); a follower suspects a starting leader only after its connect timeout of
  // silence, not its leader timeout. A shard server's start-up after it listens (a restart's
  // or a takeover's streams, fences, purges, workers) runs beside the replication thread and,
  // on a loaded machine, stalled it past a 100 ms leader timeout: a live leader was deposed
  // as it started. False: serving from the first message (the bench's in-process leader).
  bool announces_serving = false;
};

struct LeaderStats {
  uint64_t proposed = 0, chosen = 0, retransmits = 0, messages_sent = 0, bytes_sent = 0;
  uint64_t restamped = 0, send_errors = 0, followers_connected = 0;
  uint64_t elections = 0, stepped_down = 0, became_leader = 0;
  uint64_t lag_waits = 0;            // drains that stopped proposing for a follower lagging too far
  uint64_t replay_lag_waits = 0;     // ... for a follower's replay trailing too far (ratekeeper)
  uint64_t replay_lag_ms_max = 0;    // the largest replay lag a follower reported, in ms
  uint64_t replay_lag_stop_ms = 0;   // how long the ratekeeper kept proposals stopped, in all
  uint64_t catchup_entries = 0;      // chosen entries sent by paxos_learn
  uint64_t catchup_bytes = 0;        // ... their bytes
  uint64_t catchup_wal_entries = 0;  // ... of which read back from the WAL
  uint64_t catchup_errors = 0;       // WAL reads refused (the first is printed)
  uint64_t catching_up = 0;          // (stream, follower) pairs not waited for right now
  uint64_t checkpoints_fetched = 0;  // published in checkpoint_dir
  uint64_t checkpoint_bytes_fetched = 0;
  uint64_t checkpoint_fetches_failed = 0;  // refused or abandoned (each said on stderr)
  uint64_t checkpoints_compacted = 0;      // a lone replica's own, published and registered
  uint64_t compactions_failed = 0;         // ... that failed (each said on stderr)
  uint64_t wal_bytes_deleted = 0;          // by the leader's own truncation
  // Retained chosen slots the stores let go of early because an appender ran short of log
  // ring space (appender.h, Backpressure); caught up from the WAL if a follower needs them.
  uint64_t retained_shed = 0;
  uint64_t lead_holds = 0;  // times a stream's worker was held by the lead bound
  // ... and how long in all, by what began a hold: an entry sealed
  // and not proposed for too long (proposals stopped), or one proposed and not chosen for
  // too long (a majority slow to accept).
  uint64_t lead_hold_unproposed_ns = 0, lead_hold_unchosen_ns = 0;
  // The ratekeeper's rate (lead_bound.h, RatekeeperRate): how long it paced the workers, the
  // transactions its rate admitted at most meanwhile (their ratio: the mean rate), and the
  // successor's replay speed it last measured (transactions a second; 0: not yet).
  uint64_t pace_limited_ns = 0, pace_limited_txns = 0, pace_replay_per_s = 0;
};

// Where each stream and follower stands, as of the replication thread's last tick (metrics,
// src/server/server_metrics.h). Slots are Paxos slot numbers; one slot is one sealed entry.
struct StreamPosition {
  uint64_t proposed = 0;      // the highest slot proposed
  uint64_t chosen = 0;        // every slot at or below it is chosen
  uint64_t persisted = 0;     // our own acceptances are durable up to this slot (fsync)
  uint64_t wal_bytes = 0;     // this stream's WAL on this replica
  uint64_t chosen_bytes = 0;  // entry bytes chosen so far (batch size = bytes / entries)
  uint64_t chosen_entries = 0;
  std::array<uint64_t, kPaxosReplicasMax> peer_chosen{};  // by replica, as each reported
};
struct FollowerPosition {
  bool connected = false;
  uint64_t replayed_tid = 0;   // the follower's applied TID as it last reported
  uint64_t replay_lag_ns = 0;  // how long ago the shard watermark passed replayed_tid
};
struct ReplicationPositions {
  std::vector<StreamPosition> streams;      // by stream
  std::vector<FollowerPosition> followers;  // by replica id ([own] unused)
};

class ReplicationLeader {
 public:
  // Listens, creates the appenders and streams, starts the replication thread.
  // With `takeover` (a follower promoted in place; its engine is `engine`): the streams run
  // over the follower's acceptor state and stand for election at once (a higher ballot
  // fences the old leader); each stream's phase 1 re-proposes what a majority may hold and
  // fills holes with no-ops; every old slot chosen so is installed by the applier up to the
  // final watermark (wait_takeover). Nothing the workers seal is proposed before that.
  // REQUIRES: engine outlives the leader; options.streams >= 1; replicas in [1, 16];
  // replica < replicas; receive_shapes empty or one per replica; a takeover has one store
  // and log per stream and options.wal_dir empty (the logs come with it).
  [[nodiscard]] static Result<std::unique_ptr<ReplicationLeader>> start(
      const LeaderOptions& options, txn::Engine& engine, Takeover* takeover = nullptr);

  // A takeover: blocks until every stream leads and the slots it held before are chosen and
  // installed (or timeout_ms: Timeout naming the streams still electing, e.g. no majority).
  // Then the caller seals each stream's epoch start (StreamAppender::finish with
  // kLogFlagEpochStart, floor_tid and final_tid), raises its engine's epoch above floor_tid
  // (txn::Engine::start_leading) and starts its workers.
  [[nodiscard]] Result<TakeoverResult> wait_takeover(uint64_t timeout_ms);
  // The start-up is over (LeaderOptions::announces_serving): every follower is told, within a
  // tick, that it may suspect this leader by its leader timeout from now on; followers that
  // connect later are told so in their schema message. Any thread; idempotent.
  void note_serving() { serving_noted_.store(true, std::memory_order_release); }
  ~ReplicationLeader();  // stop()
  ReplicationLeader(const ReplicationLeader&) = delete;
  ReplicationLeader& operator=(const ReplicationLeader&) = delete;

  uint16_t port() const { return port_; }
  uint32_t streams() const { return options_.streams; }
  StreamAppender& appender(uint32_t stream);
  // The shard watermark: every logged record with a TID at or below it is chosen (on a
  // majority). Any thread.
  uint64_t watermark() const { return watermark_.load(std::memory_order_acquire); }
  // The same, as the atomic the vectorized watermark's sources read (dist/rpc_link.h,
  // dist/watermark_exchange.h).
  const std::atomic<uint64_t>* watermark_source() const { return &watermark_; }

  // Blocks until every stream leads (so a majority is connected). Timeout otherwise.
  [[nodiscard]] Status wait_leading(uint64_t timeout_ms);
  // Asks every follower for its status until each has applied `target_tid` (and computed its
  // digest / run its check, with `check_args` passed to its CheckFn, when asked), or
  // timeout_ms passes (Timeout naming who lags). With skip_lost, a follower whose connection
  // was lost (and not re-established) is not waited for: its report says lost.
  [[nodiscard]] Result<std::vector<FollowerReport>> collect_reports(
      uint64_t target_tid, bool digest, bool check, uint64_t timeout_ms,
      const nlohmann::json& check_args = nullptr, bool skip_lost = false);
  // Followers connected right now (any thread).
  uint32_t followers_connected() const { return connected_.load(std::memory_order_acquire); }
  // Stops the replication thread and closes the connections (followers then exit).
  void stop();
  // After stop(), or approximate while running.
  LeaderStats stats() const;
  // As of the last tick (any thread; copies under a short lock).
  ReplicationPositions positions() const;
  // Latency of our own WAL's group fdatasyncs (fsync batch/always; any thread).
  ops::BucketSnapshot fsync_latency() const { return fsync_latency_.snapshot(); }
  // Sizes of the log entries (batches) chosen, over every stream (any thread).
  ops::BucketSnapshot batch_bytes() const { return batch_bytes_.snapshot(); }

 private:
  struct Stream;
  struct Peer;
  class Transport;
  ReplicationLeader(const LeaderOptions& options, txn::Engine& engine);
  Status init(Takeover* takeover);
  void check_takeover();  // replication thread: finishes the takeover once its slots are chosen
  void thread_main();
  static void on_tick(void* self, uint64_t);
  static void on_post(void* self);
  void tick();
  // After tick(): whether nothing needs the next tick soon (kQuietTickNs then).
  bool quiet() const;
  // The pending on_tick timer (replication thread). A proposal made while the next tick is a
  // quiet one away brings it forward to kTickNs (hurry_tick): with traffic the streams, the
  // watermark history and the pace are ticked as often as ever.
  [[nodiscard]] bool schedule_tick(uint64_t due_ns);
  void hurry_tick();
  uint64_t tick_timer_ = 0, tick_due_ns_ = 0;
  void drain(Stream& s);
  // If the stream's appender waits for log ring space, its store sheds its retained slots.
  void relieve(Stream& s);
  // Holds or releases the stream's worker by its LeadBound.
  void update_lead_hold(Stream& s);
  uint64_t majority_rtt_ns_ = 0;  // set by init(), from receive_shapes
  // False (counted in lag_waits) while a connected follower lags follower_lag_slots_max, or
  // (replay_lag_waits) its replay lags follower_replay_lag_ms_max.
  bool followers_keep_up(Stream& s);
  bool followers_replay_keeps_up(const Stream& s);
  void update_successor(uint64_t now_ns);
  static constexpr uint32_t kNoSuccessor = UINT32_MAX;
  static constexpr uint64_t kSuccessorResendNs = 500'000'000;
  uint32_t successor_ = kNoSuccessor;  // replication thread
  RatekeeperGate ratekeeper_;          // on the successor's replay: the hard limit
  uint64_t reported_stop_ms_ = 0;      // ratekeeper_'s stops as stats_ has them
  void note_ratekeeper_stops();        // stats_.replay_lag_stop_ms from ratekeeper_
  // The successor's replay as the ratekeeper sees it at now_ns; false when there is nothing
  // to pace by (no ratekeeper, no successor).
  struct SuccessorReplay {
    uint64_t replayed_tid = 0, lag_ms = 0, backlog_ms = 0, bound_ms = 0, rtt_ms = 0;
    uint64_t one_way_delay_ns = 0, jitter_ns = 0;
  };
  bool successor_replay(uint64_t now_ns, SuccessorReplay* out) const;
  // The ratekeeper's rate (below the gate): sets the appenders' pace each tick.
  void update_pace(uint64_t now_ns);
  RatekeeperRate pace_;
  uint64_t paced_rate_ = 0;   // what the appenders were last told (the shard's, 0: unpaced)
  uint64_t taken_txns_ = 0;   // records in the entries taken from the appenders
  uint64_t chosen_txns_ = 0;  // ... in the entries chosen (WatermarkHistory's counts)
  uint64_t successor_sent_ns_ = 0;
  void update_catching_up(Stream& s);
  void sync_logs();
  void accept_connections();
  void poll_peer(Peer& p);
  void drop_peer(uint32_t replica, const Status& why);
  void handle_control(uint32_t from, std::span<const uint8_t> bytes);
  void send(uint32_t to, uint32_t session, std::span<const std::byte> bytes);
  // The message is the pieces' concatenation (at most kPaxosGatherPiecesMax).
  void send_gather(uint32_t to, uint32_t session,
                   std::span<const std::span<const std::byte>> pieces);
  // A send's pieces as the transports take them (replication thread).
  static_assert(kPaxosGatherPiecesMax <= net::kGatherPiecesMax);
  std::array<std::span<const uint8_t>, kPaxosGatherPiecesMax> gather_{};
  // The appender's ring entries beyond retained + pipeline slots (init()), and their bound.
  static constexpr uint64_t kPendingMarginEntries = 64;
  static constexpr uint64_t kPoolEntriesMax = uint64_t{1} << 16;
  void send_control(uint32_t to, const nlohmann::json& j);
  void on_chosen(Stream& s, uint64_t slot, std::span<const std::byte> entry);

  // WAL truncation on the leader (leader_truncation.cc), replication thread.
  void init_checkpoints();  // the checkpoints already in checkpoint_dir (a restart)
  void note_follower_checkpoint(uint32_t from, const nlohmann::json& j);
  void maybe_fetch_checkpoint(uint64_t now_ns);
  void request_chunk();
  void on_checkpoint_chunk(uint32_t from, std::span<const uint8_t> bytes);
  void abandon_fetch(const std::string& why, bool failure);
  void finish_fetched_checkpoint();
  // rotate: every stream starts a new segment first (a compaction rotated when it began).
  void truncate_wal(bool rotate);
  // A lone replica: every checkpoint_fetch_interval_ms, closes each stream's segment and
  // starts the rebuild of its checkpoint on publish_thread_ (leader_truncation.cc).
  void maybe_compact(uint64_t now_ns);
  // What the last compaction saw (an idle shard is not copied again every interval).
  uint64_t compacted_txns_ = 0, compacted_wal_bytes_ = 0;
  static constexpr uint64_t kIdleCompactionWalBytes = uint64_t{64} << 20;
  struct HeldCheckpoint {
    uint64_t seq = 0;
    std::vector<uint64_t> covered;
  };
  struct Fetch {
    uint32_t from = 0;
    uint64_t follower_seq = 0, total = 0, offset = 0, requested = 0, last_ns = 0;
    uint64_t seq = 0;  // ours: checkpoint-<seq>.ckpt in checkpoint_dir
    std::vector<uint64_t> covered;
    int fd = -1;
    std::string tmp;
  };
  struct Published {
    Status status;
    HeldCheckpoint held;
    uint64_t bytes = 0;
    bool compacted = false;  // a lone replica's own (maybe_compact), not a fetched one
    std::string said;        // compacted: the line said on stderr once registered
  };
  std::vector<std::optional<CheckpointNote>> follower_checkpoints_;  // by replica; kept on drop
  std::vector<HeldCheckpoint> held_checkpoints_;  // oldest first, at most kHeldCheckpoints
  static constexpr size_t kHeldCheckpoints = 2;
  std::optional<Fetch> fetch_;
  uint64_t next_checkpoint_seq_ = 1;
  uint64_t last_fetch_end_ns_ = 0;
  // Verifies and publishes a fetched file off the loop, or (a lone replica) compacts.
  std::thread publish_thread_;
  std::mutex publish_mu_;
  std::optional<Published> published_;  // guarded by publish_mu_
  bool publishing_ = false;             // replication thread: publish_thread_ runs

  LeaderOptions options_;
  txn::Engine& engine_;
  uint16_t port_ = 0;
  net::TcpListener listener_;
  std::optional<net::ShmListener> shm_listener_;  // LinkKind::kShm
  // With a cluster secret (net/auth.h) each accept runs the authentication handshake, which
  // waits on the dialer: a thread of its own accepts then, so that a dialer that says nothing
  // cannot stall the replication loop, and parks what it accepted here (at most
  // kAuthenticatedMax, taken by accept_connections()).
  void authenticating_acceptor_main();
  static constexpr size_t kAuthenticatedMax = 16;
  std::mutex authenticated_mu_;
  std::vector<RawEndpoint> authenticated_;  // both acceptor threads park theirs here
  std::thread acceptor_;
  bool authenticating_ = false;  // set before the threads start; acceptor_ runs
  // LinkKind::kFabric: a fabric accept completes the provider's handshake (tens to hundreds
  // of ms on tcp;ofi_rxm, a few on net), so it runs on a thread of its own as well, parking at most
  // kAuthenticatedMax endpoints in authenticated_ too.
  void fabric_acceptor_main();
  std::optional<net::FabricListener> fabric_listener_;
  std::thread fabric_acceptor_;
  std::unique_ptr<rt::EventLoop> loop_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by replica id; [0] unused (us)
  std::vector<RawEndpoint> greeting_;         // accepted, waiting for hello
  ShardWatermark wm_;
  std::atomic<uint64_t> watermark_{0};
  WatermarkHistory wm_history_;  // replication thread
  std::atomic<uint32_t> leading_{0};
  std::atomic<uint32_t> connected_{0};  // peers_ that are set (replication thread writes)
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Takeover (replication thread until done is published).
  std::unique_ptr<ReplayApplier> takeover_applier_;
  std::optional<TakeoverTracker> takeover_tracker_;  // while takeover_applier_ is set
  uint64_t takeover_start_ns_ = 0;
  std::atomic<bool> takeover_done_{false};
  std::atomic<bool> serving_noted_{false};  // note_serving() called
  bool serving_said_ = false;               // replication thread: followers told (tick)
  void say_serving();                       // replication thread
  TakeoverResult takeover_result_;          // written before takeover_done_ is published
  uint64_t last_request_ns_ = 0;            // replication thread
  uint64_t last_debug_ns_ = 0;

  // Group commit of our own acceptances off the replication thread (fsync batch/always):
  // the replication thread asks for (ballot, last proposed slot) per stream, the syncer
  // thread fdatasyncs and hands back what is durable; PaxosStream counts our vote only then.
  struct SyncState {
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    std::vector<std::pair<Ballot, uint64_t>> requested, durable;  // per stream
  };
  void syncer_main();
  void request_sync(Stream& s);
  static void on_durable(void* self);
  // A lone replica (replicas 1): the replication thread syncs its own WAL and counts its vote
  // at once, with no syncer thread.
  void sync_inline(Stream& s);
  // Our own acceptances in s's WAL made durable (the syncer's or sync_inline's; fatal if the
  // sync fails), its latency observed. Either thread, never both for one leader.
  void sync_own_log(Stream& s);
  bool sync_inline_ = false;
  bool deferred_sync_ = false;
  SyncState sync_;
  std::thread syncer_;

  // Report requests (controlling thread <-> replication thread), cold path.
  mutable std::mutex mu_;
  nlohmann::json report_request_;  // null: none
  uint64_t report_target_ = 0;
  std::vector<std::optional<FollowerReport>> reports_;
  std::vector<bool> lost_;             // by replica: was connected, connection gone
  LeaderStats stats_;                  // under mu_ when read from outside
  ReplicationPositions positions_;     // under mu_; the replication thread fills it every tick
  void note_positions();               // replication thread, holding mu_
  ops::LatencyBuckets fsync_latency_;  // the syncer thread writes
  ops::Buckets batch_bytes_{ops::kSizeBounds};  // the replication thread writes
};

}  // namespace shoal::repl

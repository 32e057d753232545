// StreamAppender: the worker-thread half of one replication stream (docs/REPLICATION.md, "A
// replicated shard").
//
// The worker's commit hook (txn::CommitHook) appends each committed read-write transaction
// (commit TID, dependency entries beyond this shard, writes) straight into a LogBatchBuilder
// over the free end of the stream's log ring; BatchPolicy seals it by count, bytes or age;
// the sealed entry goes through a bounded SPSC ring to the replication thread
// (ReplicationLeader), which takes it as an EntryBuffer (take()) and proposes it on the
// stream's PaxosStream: the acceptor store keeps those very bytes, the WAL writes and the
// transports send from them (docs/LOG_FORMAT.md, "How the bytes flow"). The entry's ring
// space is free again when the last EntryBuffer handle on it goes (any thread; the store
// trims it once chosen and past its retention), or at recycle() for an entry never taken.
// On the worker: no allocation after warm-up, no syscall, no lock per transaction; one post to
// the replication loop per sealed batch (an eventfd write only when that loop sleeps).
//
// The log ring: pool_buffers x buffer bytes (a buffer: max(batch_bytes_max,
// kLogLargeEntryBytes)) of memory, 64-byte aligned, and pool_entries entry slots. A batch
// opens on buffer bytes of contiguous free space (a transaction larger than a batch, a byte
// key's 1 MiB value, takes a batch as large as a buffer; docs/LOG_FORMAT.md; a batch that
// would cross the ring's end starts at its beginning) and, sealed, keeps only its own bytes
// (rounded to 8). Space is reused in ring order: an entry freed early waits for the older
// ones (out of order only when a leader change replaces a slot's value). So a ring of N
// buffers holds at least N - 2 buffers' worth of entries while a batch can still open (a
// batch at the ring's end needs the held ones out of its first buffer); one buffer: one
// entry at a time.
//
// Backpressure: when the ring has no free buffer's worth of space or no free entry slot
// (Paxos pipeline full, a follower slow, the WAN long, or the leader's store retaining
// chosen entries), the worker waits in append(), and says so (short_of_space()): the leader
// then makes its store let go of the chosen entries it retains (PaxosStream::shed_retained),
// so a wait lasts only as long as entries are in flight. That bounds what a leader holds per
// stream to the ring. The worker says so a little early too, once a batch it opens leaves
// less than a quarter of the ring (at least a buffer) or of the entry slots for the next
// ones, and wakes the leader then: a store retaining chosen entries fills the ring every lap,
// and a worker that waited for each shed waited on the replication thread's next turn of a
// busy core (short_of_space() stays set until a batch finds enough room again). The leader also
// holds the worker (set_lead_hold) while its oldest entry sealed and not yet chosen is too old
// (src/repl/lead_bound.h), so that a stall keeps one batch waiting rather than the ring's worth,
// and paces it (set_pace_rate: the ratekeeper's rate, lead_bound.h RatekeeperRate): before it
// opens a batch the worker charges the transactions it logged since to a token bucket
// (TxnPacer) and sleeps while that is in debt, in slices of at most 1 ms.
// The wait yields, then sleeps (50 us, doubling to 1 ms: no busy spin), and ends when
// AppenderOptions::stop is set (a shutdown, e.g. SIGTERM while the followers are gone): the append
// then fails with Unavailable and the stream is *stopped* for good: every later append, tick and
// finish fails the same way (logging a later transaction after a missing one would give followers a
// store the leader never had). The caller reports the error and never acknowledges the transaction
// (txn::CommitHook: Worker::run and the 2PC participant return it).
//
// Dependencies are logged compact (src/txn/depvec.h): a record names only the other shards'
// entries the stable base (set_dep_base: the worker's vectorized watermark) does not cover;
// our own entry is the commit TID itself. Readers treat a missing entry as no dependency,
// which is exact (the argument is in depvec.h). stats().deps counts the bytes.
//
// Group commit (seal_when_idle): the worker's event loop calls idle() when it runs out of work
// (src/runtime/event_loop.h, set_idle_hook), and the open batch is sealed at once instead of
// at its age: at light load a transaction's entry leaves as soon as nothing else is coming
// to join it. Two things keep the batch open instead, so that it grows under load: as many
// entries as idle_seal_inflight_max are sealed and not yet settled (chosen by a majority, or
// given up by the leader: note_settled), so that, as in a database's group commit, the next
// batch gathers what arrives while the replication round of the last ones is in flight; or
// the leader holds the worker (set_lead_hold: the next batch could not open, and the worker
// would wait in append()). batch_txns_max, the buffer's bytes and batch_age_ns_max stay the
// bounds (an aged batch seals at tick() whatever is in flight). The check costs a few loads.
//
// Watermark duties (src/repl/watermark.h): tick() on an idle worker seals an aged batch, and
// after idle_ns without a seal an empty entry whose floor is the lowest TID this worker can
// still commit minus one, so the stream never holds the shard watermark back; finish(floor)
// closes the stream after a run.
//
// Threads: append/idle/tick/flush/finish on the stream's worker thread (or whoever owns it when
// the worker is not running); pop_sealed/buffer/take/recycle on the replication thread; an
// EntryBuffer from take() may be dropped on any thread; short_of_space() any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "src/base/assert.h"
#include "src/repl/entry_buffer.h"
#include "src/repl/lead_bound.h"
#include "src/repl/log_format.h"
#include "src/txn/engine.h"

namespace shoal::repl {

// Bounded single-producer single-consumer ring of T (trivially copyable).
template <typename T>
class SpscRing {
 public:
  // REQUIRES: capacity a power of two.
  explicit SpscRing(uint32_t capacity) : mask_(capacity - 1), slots_(capacity) {
    SHOAL_ASSERT(capacity != 0 && (capacity & (capacity - 1)) == 0, "capacity %u", capacity);
  }
  bool push(const T& v) {  // producer
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) > mask_) return false;
    slots_[t & mask_] = v;
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }
  bool pop(T* out) {  // consumer
    const uint64_t h = head_.load(std::memory_order_relaxed);
    if (h == tail_.load(std::memory_order_acquire)) return false;
    *out = slots_[h & mask_];
    head_.store(h + 1, std::memory_order_release);
    return true;
  }
  bool empty() const {
    return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
  }

 private:
  const uint64_t mask_;
  std::vector<T> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};
};

struct AppenderOptions {
  uint32_t shard = 0;
  uint32_t stream = 0;
  uint64_t epoch = 1;  // configuration epoch written into entries (docs/REPLICATION.md, "Failover")
  BatchLimits limits;  // count (Mako: 400), bytes (buffer size), age
  // The log ring (see above): pool_buffers x buffer bytes, and at most pool_entries entries
  // sealed and not yet free (a power of two: the sealed queue's capacity too), of which at
  // most pool_buffers not yet taken by the replication thread (the worker runs as far ahead
  // of the proposals as it did with a pool of that many buffers). A leader sizes
  // pool_entries for what its store retains (ReplicationLeader::start).
  uint32_t pool_buffers = 16;
  uint32_t pool_entries = 64;
  uint64_t idle_ns = 2'000'000;  // tick(): an empty floor entry after this long without a seal
  // idle(): seal the open batch when the worker runs out of work (see Group commit above),
  // while fewer than idle_seal_inflight_max entries are sealed and not settled.
  bool seal_when_idle = true;
  uint32_t idle_seal_inflight_max = 2;
  // Log a put that keeps the value's size as a patch of its changed bytes (format 2) when the
  // worker kept the old value. REQUIRES: only when the shard has this one stream: a follower
  // applies a patch onto the version it holds, and only one stream's order guarantees that
  // this is the version the patch was computed against (across streams, replay installs in
  // arrival order, not TID order).
  bool log_patches = false;
  // Set by anyone (another thread, a signal handler) to make a worker waiting for a free
  // buffer give up (see Backpressure above). nullptr: the wait ends only with a buffer.
  // REQUIRES: outlives the appender.
  const std::atomic<bool>* stop = nullptr;
  // The pace's token bucket (set_pace_rate) keeps credit for at most this long at the rate.
  uint64_t pace_burst_ns = 4'000'000;
};

struct SealedEntry {
  uint32_t buffer = 0;  // entry slot in the log ring, for buffer()/take()/recycle()
  uint32_t bytes = 0;
  uint64_t max_tid = 0;
  uint64_t sealed_ns = 0;  // the appender's clock when sealed (LeadBound)
  uint32_t txns = 0;       // records in it (the ratekeeper's count of what the workers logged)
};

struct AppenderStats {
  uint64_t txns = 0, entries = 0, bytes = 0, floor_entries = 0, buffer_waits = 0;
  uint64_t patches = 0;         // puts logged as patches
  uint64_t buffer_wait_ns = 0;  // time spent waiting for a free buffer or the lead bound
  // ... of it, the time the lead bound held the worker (lead_hold_wait_ns), and the time it
  // waited for the replication thread to take its sealed entries (backlog_wait_ns); the rest
  // waited for ring space.
  uint64_t lead_hold_wait_ns = 0, backlog_wait_ns = 0;
  uint64_t lead_waits = 0;  // of buffer_waits, those the lead bound began (set_lead_hold)
  uint64_t idle_seals = 0;  // of entries, those idle() sealed (group commit)
  // Waits for the ratekeeper's pace (set_pace_rate) before a batch opened, and their time
  // (apart from buffer_wait_ns).
  uint64_t pace_waits = 0, pace_wait_ns = 0;
  // Dependency areas of the records append() wrote (log_dep_bytes), compact, and what they
  // took with every other-shard entry (full_bytes).
  txn::DepVecBytes deps;

  // Field by field: the sum of several streams, and the counts since an earlier snapshot.
  AppenderStats& operator+=(const AppenderStats& o) {
    txns += o.txns;
    entries += o.entries;
    bytes += o.bytes;
    floor_entries += o.floor_entries;
    buffer_waits += o.buffer_waits;
    patches += o.patches;
    buffer_wait_ns += o.buffer_wait_ns;
    lead_hold_wait_ns += o.lead_hold_wait_ns;
    backlog_wait_ns += o.backlog_wait_ns;
    lead_waits += o.lead_waits;
    idle_seals += o.idle_seals;
    pace_waits += o.pace_waits;
    pace_wait_ns += o.pace_wait_ns;
    deps += o.deps;
    return *this;
  }
  // REQUIRES: `base` is an earlier snapshot of the same counters.
  AppenderStats operator-(const AppenderStats& base) const {
    AppenderStats d;
    d.txns = txns - base.txns;
    d.entries = entries - base.entries;
    d.bytes = bytes - base.bytes;
    d.floor_entries = floor_entries - base.floor_entries;
    d.buffer_waits = buffer_waits - base.buffer_waits;
    d.patches = patches - base.patches;
    d.buffer_wait_ns = buffer_wait_ns - base.buffer_wait_ns;
    d.lead_hold_wait_ns = lead_hold_wait_ns - base.lead_hold_wait_ns;
    d.backlog_wait_ns = backlog_wait_ns - base.backlog_wait_ns;
    d.lead_waits = lead_waits - base.lead_waits;
    d.idle_seals = idle_seals - base.idle_seals;
    d.pace_waits = pace_waits - base.pace_waits;
    d.pace_wait_ns = pace_wait_ns - base.pace_wait_ns;
    d.deps = deps - base.deps;
    return d;
  }
};

class StreamAppender {
 public:
  using WakeFn = void (*)(void* ctx);
  // `engine` gives the epoch for idle floors; `wake(ctx)` runs on the worker after each seal
  // (the replication loop's post). REQUIRES: engine and env outlive the appender.
  StreamAppender(const AppenderOptions& options, txn::Engine& engine, Env& env, WakeFn wake,
                 void* wake_ctx);
  StreamAppender(const StreamAppender&) = delete;
  StreamAppender& operator=(const StreamAppender&) = delete;

  // txn::CommitHook: ctx is the StreamAppender.
  [[nodiscard]] static Status commit_hook(void* ctx, const txn::Txn& txn) {
    return static_cast<StreamAppender*>(ctx)->append(txn);
  }
  // Logs a committed transaction (read-only ones log nothing). Worker thread. Unavailable
  // once the stream is stopped (see Backpressure): the transaction is not logged.
  // dist_txn_id: non-zero when the transaction is this shard's half of a distributed
  // transaction (its record carries the id: docs/LOG_FORMAT.md, DIST_TXN).
  [[nodiscard]] Status append(const txn::Txn& txn, uint64_t dist_txn_id = 0);
  // Appends one record as given (bootstrap of the initial state, tests). Worker thread.
  // Unavailable once stopped. REQUIRES: tid above promised_tid(); the record fits an empty
  // batch.
  [[nodiscard]] Status append_record(uint64_t tid, std::span<const txn::DepEntry> deps,
                                     std::span<const TxnWrite> writes, uint64_t dist_txn_id = 0);
  // The worker has nothing more to run now (its loop is about to spin idle or sleep): with
  // seal_when_idle, seals the open batch unless it should grow (see Group commit). Returns
  // whether it sealed. No syscall of its own (a seal's wake may post to the replication loop).
  bool idle();
  // The worker is idle: seal an aged batch, or write a floor entry after idle_ns. Does
  // nothing once stopped.
  void tick();
  // Seals the open batch now (if it holds records).
  void flush();
  // Closes the stream after its worker stopped: seals what is open and an empty entry with
  // `floor_tid` and `flags` (kLogFlagBootstrapEnd closes a bootstrap). Unavailable once
  // stopped. REQUIRES: floor_tid >= every TID this stream logged; no later appends below it.
  // kLogFlagEpochStart (a new leader's first entry of an epoch): `final_tid` is the final
  // watermark of the epochs before (LogBatchBuilder::seal).
  [[nodiscard]] Status finish(uint64_t floor_tid, uint16_t flags = 0, uint64_t final_tid = 0);
  // The base append() compacts dependency vectors against (src/txn/depvec.h); the default
  // covers nothing. REQUIRES: base.covers() may be called on the worker thread while the
  // appender appends (the worker's own vectorized watermark); reset it to {} before the
  // watermark goes away.
  void set_dep_base(const txn::DepBase& base) { dep_base_ = base; }
  // Ok, or why the stream stopped (sticky).
  const Status& stopped() const { return stopped_; }
  // A 2PC participant sharing this stream (src/dist/participant.h F10): fn(ctx) is its lowest
  // TID proposed and not yet installed, UINT64_MAX when none. The stream promises nothing at
  // or above it (entries are sealed with max_tid below it, kLogFlagPromiseHeld when that cuts
  // below their records), so the install, logged later at that TID, lands where the
  // transaction's vector says even when the worker logged higher TIDs meanwhile: readers that
  // inherited the TID are covered only once it is logged. REQUIRES: fn and ctx outlive the
  // appender; called on the worker thread.
  using ReservationFn = uint64_t (*)(const void* ctx);
  void set_reservations(ReservationFn fn, const void* ctx) {
    reservations_ = fn;
    reservations_ctx_ = ctx;
  }

  // ---- replication thread ----
  bool pop_sealed(SealedEntry* out) { return sealed_.pop(out); }
  // A popped entry's bytes, writable until take() or recycle() (the leader re-stamps the
  // sequence of an entry whose slot moved).
  std::span<std::byte> buffer(uint32_t index) {
    const RingEntry& e = entries_[index];
    return {ring_ + e.offset, e.bytes};
  }
  // The popped entry `index` as an EntryBuffer over its ring bytes (no copy); its space is
  // free again when the last handle goes. At most once per entry, and not after recycle().
  EntryBuffer take(uint32_t index);
  // A popped entry that is not taken: its space is free again now.
  void recycle(uint32_t index);
  // The first `entries` entries this appender sealed are settled: chosen, or given up by the
  // leader (LeadBound::settled). Group commit counts those in flight from it.
  void note_settled(uint64_t entries) { settled_count_.store(entries, std::memory_order_release); }
  // Any thread: the worker waits for log ring space (see Backpressure).
  bool short_of_space() const { return short_of_space_.load(std::memory_order_acquire); }
  // Any thread (the leader's, from its LeadBound): while set, no new batch opens (the worker
  // waits as for ring space; the open batch still takes records and seals by its limits) and
  // an idle tick seals no floor entry.
  void set_lead_hold(bool hold) { lead_hold_.store(hold, std::memory_order_release); }
  // Any thread (the leader's ratekeeper): the worker logs at most this many transactions a
  // second from its next batch on (see Backpressure); 0: unpaced.
  void set_pace_rate(uint64_t txns_per_s) {
    pace_rate_.store(txns_per_s, std::memory_order_relaxed);
  }

  // Worker thread (or after it stopped).
  const AppenderStats& stats() const { return stats_; }
  uint64_t last_logged_tid() const { return last_logged_tid_; }
  // What this stream has promised so far: every floor it sealed and every TID it logged (up to
  // the participant's reservations, set_reservations) are at or below it, and every record it
  // logs from now on is above it (append() asserts). The
  // Txns committing on this worker propose above it (txn::Txn::set_tid_floor) and a 2PC
  // participant installs above it (dist::Participant::set_tid_floor). Worker thread only.
  const uint64_t* promised_tid() const { return &promised_tid_; }
  // The highest TID this stream logged or promised: where the worker's own commits and a
  // participant's proposals go above (txn::Txn::set_tid_floor,
  // dist::Participant::set_proposal_floor). Above promised_tid() while a reservation holds
  // the promise below records already logged (set_reservations): a commit above the promise
  // alone would take a TID logged before, and two transactions sharing a TID are one to
  // whatever judges transactions by TID (the FVW discard: server/discard_journal.h).
  // Worker thread only.
  const uint64_t* logged_floor_tid() const { return &logged_floor_tid_; }
  uint64_t last_commit_tid() const { return last_commit_tid_; }
  uint32_t stream() const { return options_.stream; }

 private:
  // One sealed entry of the ring: where its bytes are, and whether they are still held.
  // The EntryBuffer that take() makes keeps its shared_ptr control block in `control` (no
  // allocation per entry); the allocator's deallocate, the very last step of the last
  // handle's release, clears `held`.
  static constexpr size_t kControlBytes = 64;
  struct RingEntry {
    uint64_t begin = 0;  // ring position of its space (a skipped end of the ring included)
    uint64_t end = 0;    // ring position after it (8-aligned)
    size_t offset = 0;   // of its bytes in ring_
    uint32_t bytes = 0;
    std::atomic<bool> held{false};
    alignas(16) std::byte control[kControlBytes];
  };
  template <typename T>
  struct ControlAllocator;
  // Waits for ring space and opens a batch there; Unavailable (and the stream stopped)
  // when options_.stop is set while it waits, or once stopped before.
  [[nodiscard]] Status open_batch();
  // Before a batch opens: sleeps while the pace's token bucket is in debt; Unavailable (and the
  // stream stopped) when options_.stop is set meanwhile.
  [[nodiscard]] Status wait_for_pace();
  // Stops the stream for a stop request that came while it waited for `what`.
  Status stop_waiting(const char* what);
  // Frees the oldest entries that nobody holds, then places a batch of buffer_bytes_ at the
  // free end (batch_begin_, batch_at_). kNoSpace: no room or no entry slot yet; kBacklog:
  // pool_buffers entries wait to be taken; kLeadHold: the leader holds us (set_lead_hold).
  enum class Place : uint8_t { kPlaced, kNoSpace, kBacklog, kLeadHold };
  Place try_place_batch();
  // After placing a batch at ring position `at`: short_of_space() while what is left for the
  // batches after it is low (see Backpressure), and a wake of the leader when that begins.
  void note_space_left(uint64_t at);
  // Starts the batch in the current buffer at the current sequence, limited by the batch
  // size, or by the buffer's (an oversized transaction's batch).
  void reset_builder(bool whole_buffer);
  // The log form of one write: a patch (body in patch_scratch_ after *scratch_used) or as is.
  TxnWrite log_write(const txn::WriteView& w, size_t* scratch_used);
  // Patch bodies of one transaction; a transaction whose patches would not fit logs the rest
  // of its puts whole.
  static constexpr size_t kPatchScratchBytes = 256 * 1024;
  void seal(uint64_t floor_tid, uint16_t flags = 0, uint64_t final_tid = 0);
  // What the stream may promise now: below the participant's lowest reservation.
  uint64_t promise_cap() const {
    return reservations_ == nullptr ? UINT64_MAX : reservations_(reservations_ctx_) - 1;
  }

  AppenderOptions options_;
  txn::Engine& engine_;
  Env& env_;
  WakeFn wake_;
  void* wake_ctx_;
  size_t buffer_bytes_;
  size_t ring_bytes_;  // pool_buffers x buffer_bytes_
  std::unique_ptr<std::byte[]> ring_storage_;
  std::byte* ring_ = nullptr;  // 64-byte aligned
  std::unique_ptr<RingEntry[]> entries_;
  SpscRing<SealedEntry> sealed_;
  // Worker thread: positions count bytes from the ring's creation (offset = position mod
  // ring_bytes_); entry sequence numbers count entries (slot = sequence mod pool_entries).
  uint64_t tail_ = 0;          // free from here on (up to the oldest held entry's begin + ring)
  uint64_t sealed_count_ = 0;  // entries sealed so far
  uint64_t freed_count_ = 0;   // of them, free again (a prefix: space is reused in order)
  uint64_t batch_begin_ = 0;   // the open batch's space starts here (tail_ when opened) ...
  uint64_t batch_at_ = 0;      // ... and its bytes here (later when it skipped the ring's end)
  std::atomic<bool> short_of_space_{false};
  std::atomic<bool> lead_hold_{false};
  std::atomic<uint64_t> pace_rate_{0};  // set_pace_rate
  TxnPacer pacer_;
  uint64_t paced_txns_ = 0;                 // stats_.txns when last charged to pacer_
  std::atomic<uint64_t> taken_count_{0};    // entries take()n or recycle()d (replication thread)
  std::atomic<uint64_t> settled_count_{0};  // note_settled (replication thread)
  LogBatchBuilder builder_;
  BatchPolicy policy_;
  uint64_t sequence_ = 0;
  uint64_t last_seal_ns_ = 0;
  uint64_t last_logged_tid_ = 0;
  uint64_t last_commit_tid_ = 0;
  uint64_t promised_tid_ = 0;      // read-only commits included
  uint64_t logged_floor_tid_ = 0;  // logged_floor_tid()
  ReservationFn reservations_ = nullptr;
  const void* reservations_ctx_ = nullptr;
  std::vector<TxnWrite> writes_;  // reused; grows only for a transaction wider than any before
  std::vector<txn::DepEntry> deps_;
  txn::DepBase dep_base_;
  std::vector<std::byte> patch_scratch_;  // sized once (kPatchScratchBytes)
  AppenderStats stats_;
  Status stopped_;  // sticky: see Backpressure
};

}  // namespace shoal::repl

// ReplayApplier: a follower installs chosen log entries into its own engine (docs/REPLICATION.md,
// "Follower replay"), gated by the shard watermark so that it never exposes a record of one
// stream while another stream may still deliver an older one: a record is installed only once
// its TID is at or below the minimum over streams of their chosen max_tid
// (src/repl/watermark.h). A stream's records are installed in its log order, which is not
// always TID order: a 2PC participant's install is logged at the TID it reserved, after the
// worker's higher ones (kLogFlagPromiseHeld, src/dist/participant.h F10), so a record at or
// below the watermark may wait behind one above it. applied_tid() is the watermark held below
// every record still waiting, so the store is always a prefix of the leader's serial (TID)
// order, i.e. a consistent snapshot at applied_tid().
//
// Entries arrive per stream in slot order (PaxosStream's chosen callback). A stream's records
// at or below the watermark are installed at once from the bytes given; the rest of the entry
// is copied into that stream's queue (bounded by what the other streams lag behind) and
// installed when the watermark reaches them. Installation is Table::apply_replicated (newer
// TID wins, tombstones for removes), so replaying an entry twice changes nothing. While it
// installs a write, the index descents of the next few are in flight (TableBase::prefetch_step),
// so their cache misses overlap instead of stalling one write after another; a descent to a
// key near an earlier write's in the same table jumps to that write's leaf (a finger, replay.cc),
// and an insert goes into the leaf its own descent found.
//
// Snapshot reads at applied_tid run beside replay (src/txn/snapshot.h: the follower keeps
// version chains when it serves reads). Not yet: replay spread over several threads (one per
// stream); today one thread installs every stream, which the CPU measurement below reports per
// core.
//
// Threads: one (the follower's loop).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "src/base/assert.h"
#include "src/repl/decision_log.h"
#include "src/repl/log_format.h"
#include "src/repl/paxos_stream.h"
#include "src/repl/watermark.h"
#include "src/txn/engine.h"

namespace shoal::repl {

// The calling thread's CPU time: a measurement for reports and tests, not protocol input (so
// not behind Env).
uint64_t thread_cpu_ns();

// Where replay stands on one stream, exactly (a checkpoint's cut, src/repl/checkpoint.h):
// every record of slots < next_slot is installed, and the first next_record records of
// next_slot; nothing after them. stream_tid is the stream's watermark (the max_tid of the
// last entry delivered), which the shard watermark needs even for streams that deliver
// nothing more after a restart.
struct StreamCut {
  uint64_t next_slot = 1;
  uint32_t next_record = 0;
  uint64_t stream_tid = 0;
};

// The applier's state between two entries: the store holds exactly the records with TID <=
// applied_tid (the watermark order above), which are exactly the records before each
// stream's cut.
// An epoch change seen in the log (an entry flagged kLogFlagEpochStart): every record of an
// entry from an epoch below `epoch` whose TID is above `final_tid` is discarded, never
// installed (docs/REPLICATION.md, "Failover": the old epoch's speculative tail above its final
// watermark).
struct EpochFence {
  uint64_t epoch = 0;
  uint64_t final_tid = 0;
};
inline constexpr size_t kEpochFencesMax = 1024;

struct ReplayCut {
  uint64_t applied_tid = 0;
  uint64_t bootstrap_tid = 0;
  std::vector<StreamCut> streams;
  std::vector<EpochFence> fences;  // in epoch order
};

// Sees each write of a record that names another shard (RecordView::dep_count() > 0: an entry
// the leader's vectorized watermark did not cover when it logged the record) just before replay
// installs it, with the table it goes to: what a replica promoted later needs in order to undo
// its half of a cross-shard transaction whose other half a failover lost (the FVW discard,
// src/server/discard_journal.h, ReplayJournal). Records naming no other shard, nearly all,
// cost one load and a branch. Called on the thread that calls on_chosen or install_held,
// under its ebr::Guard, before the write is installed (and only for records installed, never
// for those a fence discards).
class ReplayObserver {
 public:
  virtual ~ReplayObserver() = default;
  // `key_words`: w's key as aligned words (w.key_word_count of them); `known`: the record
  // replay's prefetch found for it, or nullptr (TableBase::peek_replicated).
  virtual void before_install(const RecordView& r, const WriteView& w, const uint64_t* key_words,
                              const void* known, txn::TableBase& table) = 0;
};

struct ReplayStats {
  uint64_t entries = 0, txns = 0, writes = 0, skipped_writes = 0;
  uint64_t known_writes = 0;    // installed on the record their prefetch found (no lookup)
  uint64_t finger_jumps = 0;    // prefetch descents that jumped to a neighbour's leaf
  uint64_t discarded_txns = 0;  // records above an epoch fence (EpochFence), never installed
  uint64_t cpu_ns = 0;          // thread CPU time spent installing
};

class ReplayApplier {
 public:
  // REQUIRES: engine's tables created (Schema::create_tables) before the first entry.
  ReplayApplier(txn::Engine& engine, uint32_t streams)
      : engine_(engine), wm_(streams), queues_(streams), positions_(streams) {}

  // A chosen entry of `stream`, in slot order. `bytes` need only live during the call.
  // REQUIRES: bytes passed LogEntryView::parse (the stream verified them); 8-byte aligned.
  void on_chosen(uint32_t stream, std::span<const std::byte> bytes);

  // Where replay stands (between entries: call on the applier's thread between on_chosen
  // calls; the store then is exactly the records before the cut).
  ReplayCut cut() const;
  // Continues from a cut (a checkpoint loaded into the engine): the next entry of stream s
  // must be slot cut.streams[s].next_slot, of which the first next_record records are skipped.
  // REQUIRES: before the first on_chosen; cut.streams.size() == streams.
  void restore(const ReplayCut& cut);

  // Every record at or below it is installed, and none above it: the watermark, held below
  // the lowest record still queued and, after restore(), at the cut's until every stream
  // delivered again (the records queued at the cut come back then).
  uint64_t applied_tid() const;
  // A takeover's last step (TakeoverTracker::result): installs every queued record at or below
  // the watermark, out of log order (or discards it, per the fences), so that applied_tid()
  // is the watermark, the final watermark F. REQUIRES: every old slot chosen and delivered.
  void install_held();
  // The highest max_tid `stream` delivered, including entries after a hole (above its
  // watermark until the next epoch start): a new epoch's floor must be above it.
  uint64_t logged_tid(uint32_t stream) const { return positions_[stream].logged_tid; }
  // The snapshot TID of the bootstrap (the max_tid of an entry flagged kLogFlagBootstrapEnd,
  // src/repl/bootstrap.h), 0 until such an entry arrived.
  uint64_t bootstrap_tid() const { return bootstrap_tid_; }
  // The whole bootstrap is installed: the store at applied_tid() is a state the leader had
  // (before, it may be part of the load). Snapshot readers start only from here.
  bool bootstrap_installed() const {
    return bootstrap_tid_ != 0 && applied_tid() >= bootstrap_tid_;
  }
  const ShardWatermark& watermark() const { return wm_; }
  const std::vector<EpochFence>& fences() const { return fences_; }
  // A fence known before the log brings it: the final watermark F the configuration manager
  // holds for the epoch before `f.epoch` (the new leader publishes it before it seals any
  // epoch start, docs/REPLICATION.md "Failover"). From here on records of older epochs above
  // F are discarded whatever order the streams deliver in: an epoch start chosen on some
  // streams only, or an old entry a later leader's phase 1 revived ahead of it, can no longer
  // let the watermark pass F before the fence is known. The same fence arriving in the log
  // later must carry the same F (asserted). REQUIRES: called between entries, before any
  // entry chosen after F was published is given to on_chosen (what the fence must judge).
  void learn_fence(const EpochFence& f) { add_fence(f.epoch, f.final_tid); }
  // The distributed transactions this shard's coordinator committed, as installed (only what
  // the fences kept). Shared: a promoted replica's workers answer from it after the takeover.
  const std::shared_ptr<DecisionLog>& decisions() const { return decisions_; }
  const ReplayStats& stats() const { return stats_; }
  // From here on `observer` sees the writes of records naming another shard (ReplayObserver);
  // null: none. Shared: it goes with the applier to a takeover (TakeoverResult::observer).
  void set_observer(std::shared_ptr<ReplayObserver> observer) { observer_ = std::move(observer); }
  const std::shared_ptr<ReplayObserver>& observer() const { return observer_; }
  size_t queued_entries() const;
  // Test only (a planted bug for the simulator's checker, sim/epoch_change_sim_test.cc):
  // records above an epoch fence are installed instead of discarded. Never set in production.
  void ignore_fences_for_test() { ignore_fences_for_test_ = true; }
  // Calls fn(commit TID) for every record received and not installed (held above the
  // watermark), e.g. to count what a takeover discards.
  template <typename Fn>
  void for_each_queued_record(Fn&& fn) const {
    for (const auto& q : queues_) {
      for (const Pending& p : q) {
        Result<LogEntryView> view = LogEntryView::reparse(p.bytes.span());
        SHOAL_ASSERT(view.ok(), "%s", "a queued entry that does not parse");
        uint32_t index = 0;
        view->for_each_record([&](const RecordView& r) {
          if (index++ >= p.next_record && r.commit_tid() > held_installed_) fn(r.commit_tid());
        });
      }
    }
  }

 private:
  struct Pending {
    EntryBuffer bytes;
    uint32_t next_record = 0;  // records before it are installed
    // The lowest TID of the records from next_record on (above installed_upto), computed once
    // per next_record (min_from).
    uint64_t lowest_tid(uint64_t installed_upto);
    uint64_t min_tid = UINT64_MAX;
    uint32_t min_from = UINT32_MAX;
  };
  void update_held_min();
  // known / leaf: what the write's prefetch found (its record; the leaf it ended at), or null.
  void apply_write(const WriteView& w, const uint64_t* key, uint64_t tid, void* known,
                   const void* leaf);
  // The observer's look at w of r, if r names another shard (observed: r.dep_count() > 0).
  void observe(bool observed, const RecordView& r, const WriteView& w, const uint64_t* key,
               const void* known) {
    if (observed) observer_->before_install(r, w, key, known, *engine_.tables()[w.table_id]);
  }
  // Installs records [*next, ...) of the entry at or below the watermark; true when done.
  bool install(std::span<const std::byte> bytes, uint32_t* next);
  void drain_queues();

  struct Position {
    uint64_t next_slot = 1;     // the slot the stream delivers next
    uint32_t skip_records = 0;  // records of next_slot installed before a restore
    // The slot of a chosen no-op (a hole a new leader's phase 1 filled) not yet followed by
    // an epoch start on this stream; 0: none. Until then the stream's watermark stays where
    // it was before the hole (see on_chosen).
    uint64_t hole_slot = 0;
    uint64_t logged_tid = 0;  // the highest max_tid delivered, held back or not
  };

  // Each write of the entry being installed, in order, for prefetching ahead (replay.cc).
  struct PrefetchTarget {
    const txn::TableBase* table;
    const uint64_t* key_words;
  };
  // Fills targets_ with the writes of records [first_record, ...) of `entry`.
  void collect_targets(const LogEntryView& entry, uint32_t first_record);

  txn::Engine& engine_;
  // Reused across entries: grows to the most writes an entry held (bounded by the entry's
  // bytes, at least 24 per write), so steady state does not allocate.
  std::vector<PrefetchTarget> targets_;
  ShardWatermark wm_;
  std::vector<std::deque<Pending>> queues_;
  std::vector<Position> positions_;
  ReplayStats stats_;
  uint64_t bootstrap_tid_ = 0;
  uint64_t held_min_ = UINT64_MAX;  // the lowest TID of a queued record (applied_tid())
  uint64_t held_installed_ = 0;     // install_held() installed every record at or below it
  // After restore(): how many streams have not delivered since (restore_waiting_) and the
  // cut's applied TID.
  uint32_t restore_awaiting_ = 0;
  std::vector<bool> restore_waiting_;
  uint64_t restore_applied_ = 0;
  // Epoch changes seen, in epoch order (bounded by kEpochFencesMax).
  void add_fence(uint64_t epoch, uint64_t final_tid);
  // Records of an entry of `epoch` above this TID are discarded (UINT64_MAX: none).
  uint64_t discard_above(uint64_t epoch) const;
  std::vector<EpochFence> fences_;
  std::shared_ptr<DecisionLog> decisions_ = std::make_shared<DecisionLog>();
  bool ignore_fences_for_test_ = false;
  std::shared_ptr<ReplayObserver> observer_;
};

}  // namespace shoal::repl

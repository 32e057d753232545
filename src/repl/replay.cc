#include "src/repl/replay.h"

#include <time.h>

#include <algorithm>

#include "src/base/ebr.h"

namespace shoal::repl {
uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

txn::WriteKind kind_of(WriteOp op) {
  switch (op) {
    case WriteOp::kPut:
      return txn::WriteKind::kPut;
    case WriteOp::kInsert:
      return txn::WriteKind::kInsert;
    case WriteOp::kRemove:
      return txn::WriteKind::kRemove;
    case WriteOp::kPatch:
      break;  // installed by apply_replicated_patch
  }
  return txn::WriteKind::kPut;
}

void apply_patch_bytes(void* ctx, void* data) {
  static_cast<const WriteView*>(ctx)->apply_patch(static_cast<std::byte*>(data));
}

// Replay's writes land on random keys of big indexes (TPC-C: STOCK, CUSTOMER, ORDER_LINE), so
// one write at a time stalls on a cache miss at every level below the hot top of the tree and
// on the record. The prefetcher keeps the index descents of the next kPrefetchDistance writes
// in flight, one step each per installed write: by the time a write is installed, its leaf
// and record are in cache (txn::TableBase::prefetch_step). A descent takes about one step per
// level (TPC-C's ORDER_LINE index has 5) and the distance gives it 7: of 3, 4, 6 and 8, 6
// measured best (replay CPU per txn). A finished descent also hands the install its record,
// or for an absent key its leaf, which an insert then goes into without a second descent.
//
// Many writes of an entry are neighbours of an earlier one in the same table (an order's ten
// order lines, inserted by NewOrder and patched by Delivery): each table keeps a finger, the
// leaf its last finished descent ended at, and a descent to a key that leaf covers jumps there
// (BasicBTree::prefetch_jump), one step instead of five. A descent in flight looks again each
// time its table's finger moves: the order lines' descents start together, before the first
// has reached its leaf. Fingers live for one entry: the entry's ebr::Guard keeps their memory.
constexpr size_t kPrefetchDistance = 6;
constexpr uint32_t kFingerTables = 32;  // tables with ids above get no finger

template <typename Target>
class WritePrefetcher {
 public:
  explicit WritePrefetcher(std::span<const Target> targets) : targets_(targets) {}
  // Call before installing write i (targets' order); starts write i + kPrefetchDistance.
  void before(size_t i) {
    for (; started_ < targets_.size() && started_ <= i + kPrefetchDistance; ++started_) {
      Slot& slot = ring_[started_ % kRing];
      slot.index = started_;
      slot.table = targets_[started_].table;
      slot.table->prefetch_start(targets_[started_].key_words, &slot.cursor);
      slot.finger_moves = ~finger_moves(slot.table);  // look at the finger before the step
    }
    for (Slot& slot : ring_) {
      if (slot.table == nullptr) continue;
      const uint32_t id = slot.table->id();
      if (id < kFingerTables && slot.finger_moves != fingers_[id].moves) {
        slot.finger_moves = fingers_[id].moves;
        if (fingers_[id].leaf != nullptr &&
            slot.table->prefetch_jump(&slot.cursor, fingers_[id].leaf)) {
          ++jumps_;
        }
      }
      if (slot.table->prefetch_step(&slot.cursor)) continue;
      if (slot.cursor.leaf != nullptr && id < kFingerTables) {
        fingers_[id].leaf = slot.cursor.leaf;
        ++fingers_[id].moves;
      }
      slot.table = nullptr;
    }
  }
  // The record write i's key led to, when its descent is over and found one (the install
  // then skips its own lookup); else nullptr. REQUIRES: before(i) was the last call.
  void* known(size_t i) const {
    const Slot& slot = ring_[i % kRing];
    return slot.index == i && slot.table == nullptr ? slot.cursor.value : nullptr;
  }
  // Descents that jumped to a finger so far.
  uint64_t jumps() const { return jumps_; }
  // The leaf write i's descent ended at (its key present or not), or nullptr. REQUIRES: as
  // known().
  const void* leaf(size_t i) const {
    const Slot& slot = ring_[i % kRing];
    return slot.index == i && slot.table == nullptr ? slot.cursor.leaf : nullptr;
  }

 private:
  struct Slot {
    const txn::TableBase* table = nullptr;  // nullptr: no descent in progress
    size_t index = SIZE_MAX;                // the write it is (or was) for
    uint32_t finger_moves = 0;              // its table's finger looked at (Finger::moves)
    BTreePrefetch cursor;
  };
  struct Finger {
    const void* leaf = nullptr;
    uint32_t moves = 0;  // how often leaf changed
  };
  uint32_t finger_moves(const txn::TableBase* table) const {
    return table->id() < kFingerTables ? fingers_[table->id()].moves : 0;
  }
  // Writes i .. i + kPrefetchDistance have descents at once.
  static constexpr size_t kRing = kPrefetchDistance + 1;
  std::span<const Target> targets_;
  size_t started_ = 0;
  Slot ring_[kRing];
  Finger fingers_[kFingerTables];
  uint64_t jumps_ = 0;
};

}  // namespace

size_t ReplayApplier::queued_entries() const {
  size_t n = 0;
  for (const auto& q : queues_) n += q.size();
  return n;
}

void ReplayApplier::collect_targets(const LogEntryView& entry, uint32_t first_record) {
  const auto& tables = engine_.tables();
  targets_.clear();
  uint32_t index = 0;
  entry.for_each_record([&](const RecordView& r) {
    if (index++ < first_record) return;
    r.for_each_write([&](const WriteView& w) {
      SHOAL_ASSERT(w.table_id < tables.size(), "replayed write to table %u of %zu", w.table_id,
                   tables.size());
      // A byte key goes to a BytesTable (key_words 0), key words to a table of that width.
      SHOAL_ASSERT(tables[w.table_id]->key_words() == (w.bytes_key ? 0 : w.key_word_count),
                   "replayed write of a %u-word key to table %u of %zu-word keys", w.key_word_count,
                   w.table_id, tables[w.table_id]->key_words());
      // Keys are little-endian words in place; entries are 8-byte aligned, so are the words.
      targets_.push_back(
          PrefetchTarget{tables[w.table_id].get(), reinterpret_cast<const uint64_t*>(w.key_bytes)});
    });
  });
}

bool ReplayApplier::install(std::span<const std::byte> bytes, uint32_t* next) {
  // The stream verified these bytes (checksum included) before it accepted them.
  Result<LogEntryView> view = LogEntryView::reparse(bytes);
  SHOAL_ASSERT(view.ok(), "replay of an entry that does not parse: %s",
               view.status().to_string().c_str());
  const uint64_t limit = wm_.shard();
  const uint64_t discard = discard_above(view->epoch());
  uint32_t index = 0;
  bool done = true;
  ebr::Guard guard;  // one per entry: apply_replicated and the prefetcher require it
  collect_targets(*view, *next);
  WritePrefetcher<PrefetchTarget> prefetcher(targets_);
  size_t write_index = 0;
  view->for_each_record([&](const RecordView& r) {
    if (index++ < *next || !done) return;
    if (r.commit_tid() <= held_installed_) return;  // install_held() took it out of order
    if (r.commit_tid() > limit) {
      done = false;
      *next = index - 1;
      return;
    }
    if (r.commit_tid() > discard) {  // the failed epoch's unacknowledged tail
      r.for_each_write([&](const WriteView&) { prefetcher.before(write_index++); });
      ++stats_.discarded_txns;
      return;
    }
    const bool observed = observer_ != nullptr && r.dep_count() > 0;
    r.for_each_write([&](const WriteView& w) {
      prefetcher.before(write_index);
      observe(observed, r, w, targets_[write_index].key_words, prefetcher.known(write_index));
      apply_write(w, targets_[write_index].key_words, r.commit_tid(), prefetcher.known(write_index),
                  prefetcher.leaf(write_index));
      ++write_index;
    });
    if (r.dist_txn_id() != 0) decisions_->note(r);
    ++stats_.txns;
  });
  stats_.finger_jumps += prefetcher.jumps();
  if (done) *next = view->record_count();
  return done;
}

void ReplayApplier::apply_write(const WriteView& w, const uint64_t* key, uint64_t tid, void* known,
                                const void* leaf) {
  txn::TableBase& table = *engine_.tables()[w.table_id];
  const bool applied =
      w.op == WriteOp::kPatch
          ? table.apply_replicated_patch(key, w.patch_base_tid(), w.patch_value_bytes,
                                         &apply_patch_bytes, const_cast<WriteView*>(&w), tid, known)
          : table.apply_replicated(key, kind_of(w.op), w.value.data(),
                                   static_cast<uint32_t>(w.value.size()), tid, known, leaf);
  ++stats_.writes;
  if (known != nullptr) ++stats_.known_writes;
  if (!applied) ++stats_.skipped_writes;
}

uint64_t ReplayApplier::applied_tid() const {
  uint64_t applied = wm_.shard();
  if (held_min_ != UINT64_MAX) applied = std::min(applied, held_min_ - 1);
  if (restore_awaiting_ != 0) applied = std::min(applied, restore_applied_);
  return applied;
}

uint64_t ReplayApplier::Pending::lowest_tid(uint64_t installed_upto) {
  if (min_from != next_record) {
    min_from = next_record;
    min_tid = UINT64_MAX;
    Result<LogEntryView> view = LogEntryView::reparse(bytes.span());
    SHOAL_ASSERT(view.ok(), "%s", "a queued entry that does not parse");
    uint32_t index = 0;
    view->for_each_record([&](const RecordView& r) {
      if (index++ >= next_record && r.commit_tid() > installed_upto) {
        min_tid = std::min(min_tid, r.commit_tid());
      }
    });
  }
  return min_tid;
}

void ReplayApplier::update_held_min() {
  // Bounded by the entries queued (what the other streams lag behind); a whole entry's lowest
  // TID is computed once.
  held_min_ = UINT64_MAX;
  for (auto& q : queues_) {
    for (Pending& p : q) held_min_ = std::min(held_min_, p.lowest_tid(held_installed_));
  }
}

void ReplayApplier::install_held() {
  const uint64_t limit = wm_.shard();
  ebr::Guard guard;
  for (auto& q : queues_) {
    for (Pending& p : q) {
      Result<LogEntryView> view = LogEntryView::reparse(p.bytes.span());
      SHOAL_ASSERT(view.ok(), "%s", "a queued entry that does not parse");
      const uint64_t discard = discard_above(view->epoch());
      uint32_t index = 0;
      view->for_each_record([&](const RecordView& r) {
        if (index++ < p.next_record || r.commit_tid() > limit) return;
        if (r.commit_tid() > discard) {
          ++stats_.discarded_txns;
          return;
        }
        const bool observed = observer_ != nullptr && r.dep_count() > 0;
        r.for_each_write([&](const WriteView& w) {
          const auto* key = reinterpret_cast<const uint64_t*>(w.key_bytes);
          observe(observed, r, w, key, nullptr);
          apply_write(w, key, r.commit_tid(), nullptr, nullptr);
        });
        if (r.dist_txn_id() != 0) decisions_->note(r);
        ++stats_.txns;
      });
    }
  }
  held_installed_ = limit;
  restore_awaiting_ = 0;
  for (auto& q : queues_) {
    for (Pending& p : q) p.min_from = UINT32_MAX;  // what is left is above the limit
  }
  update_held_min();
}

ReplayCut ReplayApplier::cut() const {
  ReplayCut c;
  c.applied_tid = applied_tid();
  c.bootstrap_tid = bootstrap_tid_;
  c.fences = fences_;
  c.streams.resize(queues_.size());
  for (uint32_t s = 0; s < queues_.size(); ++s) {
    StreamCut& sc = c.streams[s];
    sc.stream_tid = wm_.stream(s);
    if (queues_[s].empty()) {
      sc.next_slot = positions_[s].next_slot;
      sc.next_record = 0;
    } else {  // the head is the oldest entry not wholly installed
      const Pending& head = queues_[s].front();
      sc.next_slot = load_u64(head.bytes.span().data() + 24);
      sc.next_record = head.next_record;
    }
    // Behind a hole nothing is installed: restart at the no-op, which holds the stream again.
    const uint64_t hole = positions_[s].hole_slot;
    if (hole != 0 && hole < sc.next_slot) {
      sc.next_slot = hole;
      sc.next_record = 0;
    }
  }
  return c;
}

void ReplayApplier::restore(const ReplayCut& cut) {
  SHOAL_ASSERT(stats_.entries == 0, "%s", "restore() after entries were replayed");
  SHOAL_ASSERT(cut.streams.size() == queues_.size(), "cut of %zu streams, applier of %zu",
               cut.streams.size(), queues_.size());
  bootstrap_tid_ = cut.bootstrap_tid;
  // Records queued at the cut (at or below the watermark, behind one above it) come back when
  // their stream delivers again: until then the store is the cut's.
  restore_applied_ = cut.applied_tid;
  restore_awaiting_ = static_cast<uint32_t>(queues_.size());
  restore_waiting_.assign(queues_.size(), true);
  for (const EpochFence& f : cut.fences) add_fence(f.epoch, f.final_tid);
  for (uint32_t s = 0; s < queues_.size(); ++s) {
    wm_.advance(s, cut.streams[s].stream_tid);
    positions_[s] = Position{cut.streams[s].next_slot, cut.streams[s].next_record, 0,
                             cut.streams[s].stream_tid};
  }
}

void ReplayApplier::on_chosen(uint32_t stream, std::span<const std::byte> bytes) {
  const uint64_t start = thread_cpu_ns();
  ++stats_.entries;
  const uint64_t max_tid = entry_max_tid(bytes.data());
  // Slots arrive in order from the restored position (PaxosStream delivers the chosen prefix
  // in order from the store's base, which a restart sets to the checkpoint's cut).
  Position& pos = positions_[stream];
  const uint64_t slot = load_u64(bytes.data() + 24);
  SHOAL_ASSERT(slot == pos.next_slot, "stream %u delivered slot %lu, replay expected %lu", stream,
               slot, pos.next_slot);
  const uint32_t skip = pos.skip_records;
  if (restore_awaiting_ != 0 && restore_waiting_[stream]) {
    restore_waiting_[stream] = false;
    --restore_awaiting_;
  }
  pos.next_slot = slot + 1;
  pos.skip_records = 0;
  const uint16_t flags = load_u16(bytes.data() + 6);
  if ((flags & kLogFlagBootstrapEnd) != 0) bootstrap_tid_ = std::max(bootstrap_tid_, max_tid);
  // Before the watermark moves, so the records it releases are judged by the fence. The log
  // alone does not always bring a fence in time: an epoch start chosen on some streams only
  // (its leader crashed) lets another stream's later entries, or an old entry a later
  // leader's phase 1 revived where the start was lost, carry the watermark past F before
  // any start arrives. The replica's owner gives it the published fences first
  // (learn_fence); this is the same fence again, or the only source where none is published
  // (a restart from disk without a configuration manager).
  if ((flags & kLogFlagEpochStart) != 0) {
    add_fence(load_u64(bytes.data() + 16), load_u64(bytes.data() + 40));
    pos.hole_slot = 0;
  }
  // A no-op is a hole a new leader's phase 1 filled: whatever the failed leader proposed there
  // is lost, so the old entries phase 1 recovered after it (their max_tid above the hole's
  // records) do not prove that every record at or below their max_tid is chosen. The stream's
  // watermark stays where it was until the new epoch starts on it; its records after the hole
  // wait, and are above the final watermark the takeover computes from this watermark, so the
  // fence discards them. Judged from this stream's own log order alone, every replica decides
  // alike (without it, one whose other stream ran ahead installed them before the fence).
  if ((flags & kLogFlagNoop) != 0 && pos.hole_slot == 0) pos.hole_slot = slot;
  pos.logged_tid = std::max(pos.logged_tid, max_tid);
  if ((flags & kLogFlagPromiseHeld) != 0) {  // records above the promise: a new floor's too
    Result<LogEntryView> view = LogEntryView::reparse(bytes);
    SHOAL_ASSERT(view.ok(), "%s", "a chosen entry that does not parse");
    view->for_each_record(
        [&](const RecordView& r) { pos.logged_tid = std::max(pos.logged_tid, r.commit_tid()); });
  }
  if (pos.hole_slot == 0) wm_.advance(stream, max_tid);
  auto& q = queues_[stream];
  if (q.empty()) {
    uint32_t next = skip;
    if (!install(bytes, &next)) q.push_back(Pending{EntryBuffer(bytes), next});
  } else {
    q.push_back(Pending{EntryBuffer(bytes), skip});
  }
  drain_queues();
  update_held_min();
  stats_.cpu_ns += thread_cpu_ns() - start;
}

void ReplayApplier::add_fence(uint64_t epoch, uint64_t final_tid) {
  // Every stream of the shard starts the epoch with the same fence: keep one.
  for (const EpochFence& f : fences_) {
    if (f.epoch == epoch) {
      SHOAL_ASSERT(f.final_tid == final_tid,
                   "epoch %lu started with final watermarks %lx and %lx on two streams", epoch,
                   f.final_tid, final_tid);
      return;
    }
  }
  SHOAL_ASSERT(fences_.size() < kEpochFencesMax, "more than %zu epoch changes", kEpochFencesMax);
  // Not necessarily after the last one: a takeover that crashed after its epoch start was
  // chosen on some streams only leaves that start before the next epoch's on those streams,
  // a replica catching up may deliver another stream's later start first (found by
  // sim/epoch_change_sim_test.cc; this asserted), and learn_fence() brings fences from the
  // configuration manager. discard_above() does not depend on the order; the cut keeps them
  // in epoch order.
  const auto at = std::lower_bound(fences_.begin(), fences_.end(), epoch,
                                   [](const EpochFence& f, uint64_t e) { return f.epoch < e; });
  fences_.insert(at, EpochFence{epoch, final_tid});
}

uint64_t ReplayApplier::discard_above(uint64_t epoch) const {
  uint64_t limit = UINT64_MAX;
  if (ignore_fences_for_test_) return limit;
  for (const EpochFence& f : fences_) {
    if (f.epoch > epoch) limit = std::min(limit, f.final_tid);
  }
  return limit;
}

void ReplayApplier::drain_queues() {
  // Bounded: every pass installs or leaves each queue's head waiting for the watermark.
  for (auto& q : queues_) {
    while (!q.empty()) {
      Pending& p = q.front();
      if (!install(p.bytes.span(), &p.next_record)) break;
      q.pop_front();
    }
  }
}

}  // namespace shoal::repl

// DiscardJournal: what a shard leader needs to discard the versions a failover elsewhere lost
// (the FVW; docs/REPLICATION.md, "Failover across shards").
//
// When shard X fails over, its TIDs in (F, floor] are lost (F its final watermark). A version
// on this shard whose dependency vector names one of them is the surviving half of a
// cross-shard transaction whose other half is gone, or read such a half: it must go too, so
// that each transaction is wholly in the surviving state or wholly out. Only versions whose
// vector is not yet covered by the vectorized watermark can name a lost TID (a covered entry is
// at or below its shard's watermark, hence at or below F). So each worker journals, for every
// transaction it commits whose vector has an uncovered entry for another shard, each write
// with what it overwrote (a put's old value and its TID; an insert's absence), and forgets
// entries once the watermark covers them. discard_lost() undoes, newest first, every journaled
// write of a lost transaction that is still its record's newest version (following each
// record's chain of journaled versions down), with compensating writes committed through a
// logged txn::Worker, so the shard's followers replay the discard too.
//
// A version's vector as installed is not always the transaction's final one: a coordinator
// that decides by its own vote (coordinator.h C6) installs on its own shard first, naming the
// other shards' proposed TIDs, and they install at or above them (participant.h F10). So the
// coordinator's worker updates its own writes' entries with the final vector after the commit
// (update), and marks them in doubt at each shard whose install went unanswered (C2). When such
// a shard fails over, the survivor asks its new leader, before the discard, which of them its
// log kept (resolve: kept there at a TID the failover did not lose) and judges the rest lost;
// each transaction's verdict is then kept for its coordinator (outcome), which tells its client
// committed or lost instead of "in doubt".
//
// A lost transaction is undone wholly or not at all. It is kept (counted, never guessed) when
// one of its writes cannot be undone: a put or a remove whose old value was not kept (a byte-key
// table's), a write under a newer version that stays (not lost, or kept itself), or a write on
// a record some context holds locked (the server first ends the contexts the failed shard
// coordinated that cannot commit: ShardServer::release_undecided). A remove is
// undone by putting its old value back, and is on top of its record's chain while the record is
// absent.
// Writes beyond the journal's bounds (overflow) are not journaled: counted.
//
// A replica promoted to lead committed nothing of what it replayed as a follower, yet its store
// holds halves of cross-shard transactions whose other half may be lost too (a region failing:
// every shard's leader at once). So a follower keeps a journal of its replay as well
// (ReplayJournal below): each write of a record naming another shard (its vector's entries the
// leader's watermark did not cover when it logged it), with what it overwrote, handed over at
// the takeover (repl::TakeoverResult::observer) and walked by the FVW discard with the
// workers' journals. A follower knows no vectorized watermark to trim by, so its journal keeps
// the newest writes: when full, the oldest entry goes (counted: forgotten).
//
// Threads: a journal is written by its worker's loop thread (record, trim), or the replay's
// (push_replayed, until the takeover is over); discard_lost runs on another thread while every
// worker is paused (shard_failover.cc), which orders it.
// Bounds: kEntriesMax entries and kBytesMax bytes of old values per journal; no allocation
// after construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shoal/status.h"
#include "src/repl/replay.h"
#include "src/txn/depvec.h"
#include "src/txn/engine.h"

namespace shoal::server {

struct DiscardJournalStats {
  uint64_t recorded = 0;   // writes journaled
  uint64_t trimmed = 0;    // forgotten once covered
  uint64_t overflow = 0;   // writes not journaled: the journal was full of uncovered entries
  uint64_t forgotten = 0;  // replayed writes dropped, oldest first, to make room (push_replayed)
};

// A write a follower's replay is about to install (ReplayJournal), and what undoing it means:
// kInsert, the key was absent before; kPut or kRemove, it held old_value at base_tid (without
// has_old_value: unknown, not undoable).
struct ReplayedWrite {
  uint64_t tid = 0;  // the record's commit TID
  std::span<const txn::DepEntry> deps;
  uint32_t table_id = 0;
  std::span<const uint64_t> key_words;
  txn::WriteKind kind = txn::WriteKind::kPut;
  bool has_old_value = false;
  std::span<const uint8_t> old_value;
  uint64_t base_tid = 0;
};

class DiscardJournal {
 public:
  static constexpr size_t kEntriesMax = 1 << 15;
  static constexpr size_t kBytesMax = 8 << 20;
  static constexpr uint32_t kDepsMax = 8;  // other shards' entries kept per write
  static constexpr uint32_t kKeyWordsMax = 8;
  static constexpr uint64_t kInDoubt = UINT64_MAX - 1;   // a dep entry: lost if its shard fails
  static constexpr size_t kUpdateScanMax = kEntriesMax;  // entries update() looks at, newest first

  // `shard`: this shard (its own entries are never lost). `covered(vector-entry)`: whether the
  // worker's vectorized watermark covers shard s at ts.
  explicit DiscardJournal(uint32_t shard);

  // Journals `txn`'s writes (REQUIRES: right after its install: its deps() hold its vector)
  // if its vector has another shard's entry that `covered` does not cover, or, `ours` (a
  // cross-shard transaction this worker coordinates), if it names another shard at all: its
  // entries there may be proposals, below what that shard installs; they stay (pending) until
  // update() gives the final vector. Trims first.
  template <typename Covered>
  void record(const txn::Txn& txn, bool ours, Covered&& covered);
  // Journals a replayed write (ReplayJournal); when full, the oldest entries go first.
  void push_replayed(const ReplayedWrite& w);
  // A promoted replica's takeover: each journaled version still its record's newest gets its
  // vector back (this shard's entry, its TID, and the other shards' it was logged with;
  // TableBase::set_takeover_deps), so that the new leader's transactions reading it depend on
  // what it depends on: a half the discard undoes then takes its readers with it, where a
  // reader without the entry would be a version that stays on top of it (and keep the lost
  // transaction whole). Returns how many versions. REQUIRES: `engine` quiescent.
  size_t restore_version_deps(txn::Engine& engine) const;
  // Forgets the oldest entries whose other-shard entries are all covered.
  template <typename Covered>
  void trim(Covered&& covered);

  // The transaction `dist_txn_id` that installed `tid` here (among this worker's newest
  // kUpdateScanMax entries, in any TID order: participant.h F10)
  // committed with `vector` (raises its entries' deps), its installs at `doubtful` shards
  // unconfirmed (their entries become kInDoubt). Owner thread.
  void update(uint64_t tid, const txn::DepVec& vector, std::span<const uint32_t> doubtful,
              uint64_t dist_txn_id);
  // After a cross-shard transaction this journal's worker coordinated ended (`settled`:
  // committed, or in doubt after its decision): update() of its own writes here, if it wrote
  // here (`written`: the shards it installed on). One that did not write here has for our
  // shard in its vector the newest version it *read* here, another transaction's TID:
  // updating that one's entries with this vector would make the discard judge the writer
  // by the reader's dependencies, and undo it, acknowledged, when what the reader read
  // elsewhere is lost (issue 14: read-only audits across shards).
  void note_outcome(bool settled, std::span<const uint32_t> written, const txn::DepVec& vector,
                    std::span<const uint32_t> doubtful, uint64_t dist_txn_id);
  // Appends the ids of this journal's transactions in doubt at `shard`, each once.
  void in_doubt_ids(uint32_t shard, std::vector<uint64_t>* out) const;
  // `shard`'s new leader holds `dist_txn_id`'s half, at `tid_there` (at or below its final
  // watermark): no longer in doubt there, and committed (outcome).
  void resolve(uint64_t dist_txn_id, uint32_t shard, uint64_t tid_there);
  // After a discard judged `shard`'s failover: its entries still kInDoubt were judged lost,
  // undone unless their transaction was kept whole (`kept`: its TIDs here, sorted); their
  // outcome says which, and the entries are settled (covered).
  void settle(uint32_t shard, std::span<const uint64_t> kept);

  // What a failover decided of a transaction this worker left in doubt at `shard`.
  enum class Verdict : uint8_t {
    kPending,    // not judged yet (or forgotten: kOutcomesMax)
    kCommitted,  // its half there survived, at tid
    kLost,       // gone there, and undone here
    kKept,       // gone there, but kept whole here (a write could not be undone)
  };
  struct Outcome {
    Verdict verdict = Verdict::kPending;
    uint64_t tid = 0;  // kCommitted: its TID at that shard
  };
  static constexpr size_t kOutcomesMax = 4096;
  Outcome outcome(uint64_t dist_txn_id, uint32_t shard) const;

  size_t size() const { return count_; }
  const DiscardJournalStats& stats() const { return stats_; }

  struct Entry {
    uint64_t tid = 0;       // the version this write installed
    uint64_t base_tid = 0;  // the version it overwrote (puts); 0: absent before (inserts)
    uint32_t table_id = 0;
    uint32_t key_word_count = 0;
    uint64_t key[kKeyWordsMax] = {};
    txn::WriteKind kind = txn::WriteKind::kPut;
    bool undoable = false;                  // a put or remove with its old value, or an insert
    uint32_t old_offset = 0, old_size = 0;  // the old value in bytes_ (puts)
    uint32_t ring_bytes = 0;                // bytes_ it holds, a wrap's skipped end included
    uint32_t dep_count = 0;
    bool deps_overflow = false;  // more other-shard entries than kDepsMax: lost is unknown
    bool pending = false;        // ours, awaiting update(): never trimmed before
    uint64_t dist_txn_id = 0;    // ours and in doubt somewhere (update)
    txn::DepEntry deps[kDepsMax] = {};
  };
  // Entries oldest first (i = 0 .. size()-1). REQUIRES: the owner thread is paused.
  const Entry& at(size_t i) const { return entries_[(head_ + i) % kEntriesMax]; }
  std::span<const uint8_t> old_value(const Entry& e) const {
    return {bytes_.data() + e.old_offset, e.old_size};
  }

 private:
  bool push(const txn::Txn& txn, const txn::WriteView& w, bool pending);
  void set_deps(Entry* e, std::span<const txn::DepEntry> deps) const;
  // Copies `value` into the ring for *e; with `evict`, drops the oldest entries until it fits.
  bool keep_old_value(Entry* e, std::span<const uint8_t> value, bool evict);
  void append(const Entry& e);  // REQUIRES: count_ < kEntriesMax
  void pop_front();
  void note_outcome(uint64_t dist_txn_id, uint32_t shard, Outcome o);

  uint32_t shard_;
  std::vector<Entry> entries_;  // ring of kEntriesMax
  size_t head_ = 0, count_ = 0;
  std::vector<uint8_t> bytes_;  // ring of kBytesMax: old values, in entry order
  size_t bytes_used_ = 0, bytes_tail_ = 0;
  DiscardJournalStats stats_;
  struct JudgedTxn {
    uint64_t dist_txn_id = 0;
    uint32_t shard = 0;
    Outcome outcome;
  };
  std::vector<JudgedTxn> judged_;  // grows to kOutcomesMax, then a ring (judged_next_: oldest)
  size_t judged_next_ = 0;
};

// A follower's discard journal (see the header): as a repl::ReplayObserver it journals each
// replayed write of a record naming another shard with the version it overwrites, read from
// the store just before the install. Threads: the replay's, then (after the takeover) the
// discard's, ordered by the takeover's hand-over.
class ReplayJournal final : public repl::ReplayObserver {
 public:
  explicit ReplayJournal(uint32_t shard) : journal_(shard), old_(txn::TableBase::kValueBytesMax) {}
  void before_install(const repl::RecordView& r, const repl::WriteView& w,
                      const uint64_t* key_words, const void* known, txn::TableBase& table) override;
  DiscardJournal& journal() { return journal_; }

 private:
  DiscardJournal journal_;
  std::vector<uint8_t> old_;  // the value before_install read
};

// Shard `shard`'s TIDs in (above, through] are lost.
struct LostRange {
  uint32_t shard = 0;
  uint64_t above = 0, through = 0;
  bool names(const txn::DepEntry* deps, uint32_t count) const {
    for (uint32_t i = 0; i < count; ++i) {
      if (deps[i].shard != shard) continue;
      if (deps[i].ts == DiscardJournal::kInDoubt) return true;
      if (deps[i].ts > above && deps[i].ts <= through) return true;
    }
    return false;
  }
};

struct DiscardResult {
  uint64_t lost_writes = 0;    // journaled writes of transactions naming a lost TID
  uint64_t restored = 0;       // records put back to what the first lost write overwrote
  uint64_t removed = 0;        // records a lost insert created, removed
  uint64_t not_discarded = 0;  // lost writes left in place: their transaction is kept
  uint64_t kept_txns = 0;      // lost transactions kept whole: a write could not be undone
  uint64_t unknown = 0;        // journaled writes whose vector overflowed: not judged
  std::vector<std::pair<const DiscardJournal*, uint64_t>> kept;  // the kept whole, by TID
  // Why transactions were kept whole (writes that could not be undone): under a version that
  // stays, a remove or a put without its old value.
  uint64_t blocked_under = 0, blocked_removes = 0, blocked_no_old_value = 0;
  uint64_t blocked_locked = 0;  // on a record a context holds locked: not readable, nor undone
};

// Undoes every lost write still visible (see the header), through `compensator` (a Worker of
// this shard's engine whose commit hook logs; its TIDs go above its stream's promise).
// REQUIRES: no other thread runs a transaction on the engine meanwhile.
[[nodiscard]] Result<DiscardResult> discard_lost(std::span<DiscardJournal* const> journals,
                                                 txn::Engine& engine, txn::Worker& compensator,
                                                 const LostRange& range);

// ---- implementation of the templates ----

template <typename Covered>
void DiscardJournal::trim(Covered&& covered) {
  while (count_ > 0) {  // bounded by kEntriesMax
    const Entry& e = entries_[head_];
    // A pending entry whose update never came (beyond kUpdateScanMax) is let go at half full.
    if (e.pending && count_ < kEntriesMax / 2) break;
    if (e.deps_overflow) break;
    bool all = true;
    for (uint32_t i = 0; i < e.dep_count && all; ++i) all = covered(e.deps[i].shard, e.deps[i].ts);
    if (!all) break;
    pop_front();
    ++stats_.trimmed;
  }
}

template <typename Covered>
void DiscardJournal::record(const txn::Txn& txn, bool ours, Covered&& covered) {
  trim(covered);
  bool uncovered = false, other = false;
  for (const txn::DepEntry& d : txn.deps().entries()) {
    if (d.shard == shard_) continue;
    other = true;
    if (!covered(d.shard, d.ts)) uncovered = true;
  }
  if (!uncovered && !(ours && other)) return;
  txn.for_each_write([&](const txn::WriteView& w) {
    if (push(txn, w, ours && other)) {
      ++stats_.recorded;
    } else {
      ++stats_.overflow;
    }
  });
}

}  // namespace shoal::server

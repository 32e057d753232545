#include "src/server/discard_journal.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "src/base/assert.h"
#include "src/base/env.h"

namespace shoal::server {

DiscardJournal::DiscardJournal(uint32_t shard)
    : shard_(shard), entries_(kEntriesMax), bytes_(kBytesMax) {}

bool DiscardJournal::push(const txn::Txn& txn, const txn::WriteView& w, bool pending) {
  if (count_ == kEntriesMax || w.key_word_count > kKeyWordsMax) return false;
  Entry e;
  e.tid = txn.last_commit_tid();
  e.table_id = w.table_id;
  e.key_word_count = w.key_word_count;
  std::copy_n(w.key_words, w.key_word_count, e.key);
  e.kind = w.kind;
  e.pending = pending;
  set_deps(&e, txn.deps().entries());
  if (w.kind == txn::WriteKind::kInsert) {
    e.undoable = true;                  // before it: absent (base_tid 0)
  } else if (w.old_value != nullptr) {  // put or remove
    const std::span<const uint8_t> old(static_cast<const uint8_t*>(w.old_value), w.old_size_bytes);
    if (!keep_old_value(&e, old, /*evict=*/false)) return false;
    e.base_tid = w.base_tid;
    e.undoable = true;
  }
  append(e);
  return true;
}

void DiscardJournal::set_deps(Entry* e, std::span<const txn::DepEntry> deps) const {
  for (const txn::DepEntry& d : deps) {
    if (d.shard == shard_) continue;
    if (e->dep_count == kDepsMax) {
      e->deps_overflow = true;
      break;
    }
    e->deps[e->dep_count++] = d;
  }
}

bool DiscardJournal::keep_old_value(Entry* e, std::span<const uint8_t> value, bool evict) {
  // The old value goes at the ring's tail, or at its start if the end is too short.
  const size_t size = value.size();
  if (size > kBytesMax) return false;
  for (;;) {  // bounded by count_: each pass evicts one entry
    const size_t offset = bytes_tail_ + size <= kBytesMax ? bytes_tail_ : 0;
    const size_t consumed =
        offset == 0 && bytes_tail_ != 0 ? (kBytesMax - bytes_tail_) + size : size;
    if (bytes_used_ + consumed <= kBytesMax) {
      std::memcpy(bytes_.data() + offset, value.data(), size);
      e->old_offset = static_cast<uint32_t>(offset);
      e->old_size = static_cast<uint32_t>(size);
      e->ring_bytes = static_cast<uint32_t>(consumed);
      bytes_used_ += consumed;
      bytes_tail_ = offset + size;
      return true;
    }
    if (!evict || count_ == 0) return false;
    pop_front();
    ++stats_.forgotten;
  }
}

void DiscardJournal::append(const Entry& e) {
  entries_[(head_ + count_) % kEntriesMax] = e;
  ++count_;
}

void DiscardJournal::push_replayed(const ReplayedWrite& w) {
  if (w.key_words.size() > kKeyWordsMax) {
    ++stats_.overflow;
    return;
  }
  if (count_ == kEntriesMax) {  // the oldest is the likeliest covered by now
    pop_front();
    ++stats_.forgotten;
  }
  // Built in its slot (replay's path: no copy); evictions below leave the slot where it is.
  Entry& e = entries_[(head_ + count_) % kEntriesMax];
  e = Entry{};
  e.tid = w.tid;
  e.table_id = w.table_id;
  e.key_word_count = static_cast<uint32_t>(w.key_words.size());
  std::copy(w.key_words.begin(), w.key_words.end(), e.key);
  e.kind = w.kind;
  set_deps(&e, w.deps);
  e.base_tid = w.base_tid;
  if (w.kind == txn::WriteKind::kInsert) {
    e.undoable = true;
  } else if (w.has_old_value) {
    e.undoable = keep_old_value(&e, w.old_value, /*evict=*/true);
  }
  ++count_;
  ++stats_.recorded;
}

void ReplayJournal::before_install(const repl::RecordView& r, const repl::WriteView& w,
                                   const uint64_t* key_words, const void* known,
                                   txn::TableBase& table) {
  // One more than kept, so that a longer vector marks the entry overflowed (not judged).
  txn::DepEntry deps[DiscardJournal::kDepsMax + 1];
  const uint32_t dep_count = std::min<uint32_t>(r.dep_count(), DiscardJournal::kDepsMax + 1);
  for (uint32_t i = 0; i < dep_count; ++i) deps[i] = r.dep(i);
  uint32_t size = 0;
  uint64_t version = 0;
  const Status s = table.peek_replicated(key_words, known, old_.data(),
                                         static_cast<uint32_t>(old_.size()), &size, &version);
  if (version >= r.commit_tid()) return;  // not newer: replay leaves the key as it is
  ReplayedWrite rw;
  rw.tid = r.commit_tid();
  rw.deps = {deps, dep_count};
  rw.table_id = w.table_id;
  rw.key_words = {key_words, w.key_word_count};
  rw.kind = w.op == repl::WriteOp::kRemove ? txn::WriteKind::kRemove : txn::WriteKind::kPut;
  if (s.ok()) {
    rw.has_old_value = true;
    rw.old_value = {old_.data(), size};
    rw.base_tid = version;
  } else if (s.code() == Code::kNotFound) {
    if (w.op == repl::WriteOp::kRemove) return;  // absent before and after: nothing to undo
    rw.kind = txn::WriteKind::kInsert;
  }  // else the table cannot say what it held: journaled, not undoable (its transaction kept)
  journal_.push_replayed(rw);
}

size_t DiscardJournal::restore_version_deps(txn::Engine& engine) const {
  size_t restored = 0;
  txn::DepVec vector;
  for (size_t i = 0; i < count_; ++i) {  // bounded by kEntriesMax
    const Entry& e = at(i);
    if (e.deps_overflow || e.dep_count == 0 || e.kind == txn::WriteKind::kRemove) continue;
    vector.clear();
    vector.raise(shard_, e.tid);
    for (uint32_t d = 0; d < e.dep_count; ++d) vector.raise(e.deps[d].shard, e.deps[d].ts);
    restored += engine.tables()[e.table_id]->set_takeover_deps(e.key, e.tid, vector);
  }
  return restored;
}

void DiscardJournal::update(uint64_t tid, const txn::DepVec& vector,
                            std::span<const uint32_t> doubtful, uint64_t dist_txn_id) {
  for (size_t back = 0; back < std::min(count_, kUpdateScanMax); ++back) {
    Entry& e = entries_[(head_ + count_ - 1 - back) % kEntriesMax];
    // No early stop at a lower TID: a worker's journal is not in TID order, since a 2PC
    // install lands at the TID its context reserved (participant.h F10), below records the
    // worker logged after that reservation; stopping there left the entries of the
    // transaction updated here without its final vector and its in-doubt marks (issue 14).
    if (e.tid != tid) continue;
    e.pending = false;
    if (!doubtful.empty()) e.dist_txn_id = dist_txn_id;
    for (const txn::DepEntry& d : vector.entries()) {
      if (d.shard == shard_) continue;
      const bool in_doubt = std::find(doubtful.begin(), doubtful.end(), d.shard) != doubtful.end();
      const uint64_t ts = in_doubt ? kInDoubt : d.ts;
      uint32_t i = 0;
      while (i < e.dep_count && e.deps[i].shard != d.shard) ++i;
      if (i == e.dep_count) {
        if (e.dep_count == kDepsMax) {
          e.deps_overflow = true;
          continue;
        }
        e.deps[e.dep_count++] = {d.shard, 0};
      }
      if (e.deps[i].ts != kInDoubt) e.deps[i].ts = std::max(e.deps[i].ts, ts);
    }
  }
}

void DiscardJournal::note_outcome(bool settled, std::span<const uint32_t> written,
                                  const txn::DepVec& vector, std::span<const uint32_t> doubtful,
                                  uint64_t dist_txn_id) {
  if (!settled || std::find(written.begin(), written.end(), shard_) == written.end()) return;
  const uint64_t own = vector.get(shard_);  // where it installed here
  if (own != 0) update(own, vector, doubtful, dist_txn_id);
}

void DiscardJournal::in_doubt_ids(uint32_t shard, std::vector<uint64_t>* out) const {
  const size_t first = out->size();
  for (size_t i = 0; i < count_; ++i) {  // bounded by kEntriesMax
    const Entry& e = at(i);
    if (e.dist_txn_id == 0) continue;
    for (uint32_t d = 0; d < e.dep_count; ++d) {
      if (e.deps[d].shard != shard || e.deps[d].ts != kInDoubt) continue;
      // A transaction's writes are adjacent entries: one look back finds a repeat.
      if (out->size() == first || out->back() != e.dist_txn_id) out->push_back(e.dist_txn_id);
    }
  }
}

void DiscardJournal::resolve(uint64_t dist_txn_id, uint32_t shard, uint64_t tid_there) {
  SHOAL_ASSERT(dist_txn_id != 0 && tid_there != kInDoubt, "resolve %lu at %lu", dist_txn_id,
               tid_there);
  bool found = false;
  for (size_t i = 0; i < count_; ++i) {  // bounded by kEntriesMax
    Entry& e = entries_[(head_ + i) % kEntriesMax];
    if (e.dist_txn_id != dist_txn_id) continue;
    for (uint32_t d = 0; d < e.dep_count; ++d) {
      if (e.deps[d].shard == shard && e.deps[d].ts == kInDoubt) {
        e.deps[d].ts = tid_there;
        found = true;
      }
    }
  }
  if (found) note_outcome(dist_txn_id, shard, {Verdict::kCommitted, tid_there});
}

void DiscardJournal::settle(uint32_t shard, std::span<const uint64_t> kept) {
  for (size_t i = 0; i < count_; ++i) {  // bounded by kEntriesMax
    Entry& e = entries_[(head_ + i) % kEntriesMax];
    for (uint32_t d = 0; d < e.dep_count; ++d) {
      if (e.deps[d].shard != shard || e.deps[d].ts != kInDoubt) continue;
      e.deps[d].ts = 0;
      if (e.dist_txn_id == 0) continue;
      const bool whole = std::binary_search(kept.begin(), kept.end(), e.tid);
      note_outcome(e.dist_txn_id, shard, {whole ? Verdict::kKept : Verdict::kLost, 0});
    }
  }
}

void DiscardJournal::note_outcome(uint64_t dist_txn_id, uint32_t shard, Outcome o) {
  for (JudgedTxn& j : judged_) {  // bounded by kOutcomesMax
    if (j.dist_txn_id == dist_txn_id && j.shard == shard) {
      j.outcome = o;
      return;
    }
  }
  if (judged_.size() < kOutcomesMax) {
    judged_.push_back({dist_txn_id, shard, o});
    return;
  }
  judged_[judged_next_] = {dist_txn_id, shard, o};  // the oldest verdict goes
  judged_next_ = (judged_next_ + 1) % kOutcomesMax;
}

DiscardJournal::Outcome DiscardJournal::outcome(uint64_t dist_txn_id, uint32_t shard) const {
  for (const JudgedTxn& j : judged_) {  // bounded by kOutcomesMax; asked once per doubt
    if (j.dist_txn_id == dist_txn_id && j.shard == shard) return j.outcome;
  }
  return {};
}

void DiscardJournal::pop_front() {
  SHOAL_ASSERT(count_ > 0, "%s", "pop from an empty discard journal");
  bytes_used_ -= entries_[head_].ring_bytes;
  head_ = (head_ + 1) % kEntriesMax;
  if (--count_ == 0) {
    SHOAL_ASSERT(bytes_used_ == 0, "discard journal: %zu bytes left", bytes_used_);
    bytes_tail_ = 0;
  }
}

namespace {

// A journaled record's state during a discard: its newest version as the pass goes down its
// chain, and the write to undo to (the oldest lost one above what stays).
struct RecordState {
  uint64_t newest = 0;   // TID of the record's newest version (0: absent)
  bool settled = false;  // a kept version is on top: nothing under it changes
  const DiscardJournal::Entry* undo_to = nullptr;
  const DiscardJournal* journal = nullptr;  // undo_to's
};

using RecordKey = std::vector<uint64_t>;  // table id, then the key words

RecordKey record_key(const DiscardJournal::Entry& e) {
  RecordKey k{e.table_id};
  k.insert(k.end(), e.key, e.key + e.key_word_count);
  return k;
}

// newest_tid of a record a context holds locked (a prepared half, or a lock taken before the
// pause): what is under the lock cannot be judged, nor compensated.
constexpr uint64_t kLockedTid = UINT64_MAX;

// The TID of the record's newest version (0 when absent, kLockedTid when locked). A fresh
// read, aborted.
uint64_t newest_tid(txn::Engine& engine, const DiscardJournal::Entry& e) {
  txn::TableBase* table = engine.tables()[e.table_id].get();
  txn::Txn t(&engine, 1);
  t.begin();
  static thread_local uint8_t buf[txn::TableBase::kValueBytesMax];
  uint32_t size = 0;
  const Status s = table->txn_get(t, e.key, buf, sizeof buf, &size);
  const uint64_t tid = s.ok() ? t.max_seen_version() : s.code() == Code::kAborted ? kLockedTid : 0;
  t.abort();
  return tid;
}

struct Compensation {
  txn::TableBase* table;
  const uint64_t* key;
  std::span<const uint8_t> value;  // the value before, unless absent_before
  bool absent_before = false;
};

// Puts the record back to what it was before the oldest lost write of its chain: absent
// (that write was an insert) or `value`. Lost writes above it may have left the record present
// or absent (a remove), so either is met here.
Status compensate(txn::Txn& t, const void* args, void*) {
  const auto* c = static_cast<const Compensation*>(args);
  if (c->absent_before) {
    const Status s = c->table->txn_remove(t, c->key);
    return s.code() == Code::kNotFound ? Status::Ok() : s;
  }
  const auto size = static_cast<uint32_t>(c->value.size());
  const Status s = c->table->txn_put(t, c->key, c->value.data(), size);
  return s.code() == Code::kNotFound ? c->table->txn_insert(t, c->key, c->value.data(), size) : s;
}

}  // namespace

namespace {

using Journaled = std::pair<const DiscardJournal::Entry*, const DiscardJournal*>;
using TxnKey = std::pair<const DiscardJournal*, uint64_t>;  // a worker's TIDs are unique

// One pass down every record's chain, newest first, with the transactions in `kept` taken as
// not lost: what to undo per record, and the lost transactions with a write that cannot be
// undone (added to *blocked).
std::map<RecordKey, RecordState> plan(const std::vector<Journaled>& all, const LostRange& range,
                                      const std::set<TxnKey>& kept,
                                      std::map<RecordKey, uint64_t>* newest_cache,
                                      txn::Engine& engine, std::set<TxnKey>* blocked,
                                      DiscardResult* reasons) {
  std::map<RecordKey, RecordState> records;
  for (const auto& [e, journal] : all) {  // newest first
    if (e->deps_overflow) continue;
    const bool lost = range.names(e->deps, e->dep_count) && !kept.contains(TxnKey{journal, e->tid});
    RecordKey key = record_key(*e);
    auto [it, fresh] = records.try_emplace(key);
    RecordState& r = it->second;
    if (fresh) {
      auto [c, uncached] = newest_cache->try_emplace(std::move(key), 0);
      if (uncached) c->second = newest_tid(engine, *e);
      r.newest = c->second;
    }
    // A remove left the record absent: it is on top while the record is (a later insert of
    // the key would be journaled above it, or would be a version that stays).
    const bool on_top =
        !r.settled && (e->kind == txn::WriteKind::kRemove ? r.newest == 0 : e->tid == r.newest);
    if (!lost) {
      if (on_top) r.settled = true;
      continue;
    }
    if (!on_top || !e->undoable) {  // under a kept version, off the chain, or a remove
      blocked->insert(TxnKey{journal, e->tid});
      if (r.newest == kLockedTid) {
        ++reasons->blocked_locked;
      } else if (!on_top) {
        ++reasons->blocked_under;
      } else if (e->kind == txn::WriteKind::kRemove) {
        ++reasons->blocked_removes;
      } else {
        ++reasons->blocked_no_old_value;
      }
      r.settled = true;
      continue;
    }
    r.undo_to = e;
    r.journal = journal;
    r.newest = e->kind == txn::WriteKind::kInsert ? 0 : e->base_tid;
  }
  return records;
}

}  // namespace

// Tracing by hand (SHOAL_DISCARD_TRACE): every journaled write naming a lost TID, whether it
// is kept, its deps, and the record's newest version (a bank account's value as 3 words).
static void trace_lost(const std::vector<Journaled>& all, const LostRange& range,
                       const std::set<TxnKey>& kept, txn::Engine& engine) {
  const uint64_t wall_us = RealEnv::instance().wall_us();
  fmt::print(stderr, "discard-trace at {:.3f}: shard {} lost ({:#x}, {:#x}]\n",
             static_cast<double>(wall_us % 1'000'000'000) / 1e6, range.shard, range.above,
             range.through);
  for (const auto& [e, journal] : all) {
    const bool names = range.names(e->deps, e->dep_count);
    if (!names) continue;
    std::string deps;
    for (uint32_t i = 0; i < e->dep_count; ++i)
      deps += fmt::format(" {}:{:#x}", e->deps[i].shard, e->deps[i].ts);
    txn::TableBase* table = engine.tables()[e->table_id].get();
    txn::Txn t(&engine, 1);
    t.begin();
    uint64_t v[3] = {};
    uint32_t size = 0;
    const Status s = table->txn_get(t, e->key, v, sizeof v, &size);
    const uint64_t newest = s.ok() ? t.max_seen_version() : 0;
    t.abort();
    uint64_t old[3] = {};
    const auto ov = journal->old_value(*e);
    if (e->kind != txn::WriteKind::kInsert)
      std::memcpy(old, ov.data(), std::min(ov.size(), sizeof old));
    fmt::print(stderr,
               "discard-trace key {} tid {:#x} base {:#x} {} {} deps{} pending {} id {:#x} | "
               "newest {:#x} value {} {} {:#x} | old {} {} {:#x}\n",
               e->key[0], e->tid, e->base_tid, names ? "LOST" : "ok",
               kept.contains(TxnKey{journal, e->tid}) ? "KEPT" : "-", deps, e->pending,
               e->dist_txn_id, newest, static_cast<int64_t>(v[0]), v[1], v[2],
               static_cast<int64_t>(old[0]), old[1], old[2]);
  }
}

Result<DiscardResult> discard_lost(std::span<DiscardJournal* const> journals, txn::Engine& engine,
                                   txn::Worker& compensator, const LostRange& range) {
  DiscardResult out;
  std::vector<Journaled> all;
  for (const DiscardJournal* j : journals) {
    for (size_t i = 0; i < j->size(); ++i) all.emplace_back(&j->at(i), j);
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first->tid > b.first->tid; });
  // Only the records a lost write touched are planned: on the others nothing is undone and
  // nothing blocks. A promoted replica's replay journal is full (kEntriesMax), nearly all of it
  // on such records, and planning costs a read and a map node per record while every worker
  // is paused.
  std::set<RecordKey> lost_records;
  for (const auto& [e, journal] : all) {
    if (!e->deps_overflow && range.names(e->deps, e->dep_count))
      lost_records.insert(record_key(*e));
  }
  std::vector<Journaled> touched;
  for (const Journaled& j : all) {
    if (!lost_records.empty() && lost_records.contains(record_key(*j.first))) touched.push_back(j);
  }
  // A transaction is undone wholly or not at all: one with a write that cannot be undone is
  // kept, which may block others under it; repeat until nothing more is blocked (bounded: each
  // round keeps at least one more transaction).
  std::set<TxnKey> kept;
  std::map<RecordKey, uint64_t> newest_cache;
  std::map<RecordKey, RecordState> records;
  for (size_t round = 0; round <= touched.size(); ++round) {
    std::set<TxnKey> blocked;
    records = plan(touched, range, kept, &newest_cache, engine, &blocked, &out);
    const size_t before = kept.size();
    kept.insert(blocked.begin(), blocked.end());
    if (kept.size() == before) break;
  }
  for (const auto& [e, journal] : all) {
    if (e->deps_overflow) {
      ++out.unknown;
    } else if (range.names(e->deps, e->dep_count)) {
      ++out.lost_writes;
      out.not_discarded += kept.contains(TxnKey{journal, e->tid});
    }
  }
  out.kept_txns = kept.size();
  out.kept.assign(kept.begin(), kept.end());
  if (std::getenv("SHOAL_DISCARD_TRACE") != nullptr) trace_lost(all, range, kept, engine);
  for (const auto& [key, r] : records) {
    if (r.undo_to == nullptr) continue;
    const DiscardJournal::Entry& e = *r.undo_to;
    const bool insert = e.kind == txn::WriteKind::kInsert;
    Compensation c{engine.tables()[e.table_id].get(), e.key,
                   insert ? std::span<const uint8_t>() : r.journal->old_value(e), insert};
    const Status s = compensator.run(&compensate, &c);
    if (!s.ok()) {
      return Status::Unavailable(
          fmt::format("discarding a lost write of table {}: {}", e.table_id, s.to_string()));
    }
    if (insert) {
      ++out.removed;
    } else {
      ++out.restored;
    }
  }
  return out;
}

}  // namespace shoal::server

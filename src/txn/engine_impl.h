// Template bodies of src/txn/engine.h. Include engine.h, not this file.
#pragma once

#include <algorithm>
#include <optional>

#include "src/base/arena.h"

namespace shoal::txn {

// Per-K operations a Txn needs on a table after it has forgotten the table's type: unlinking a
// deleted record, swapping in a larger record, re-reading a leaf version.
struct TableOps {
  bool (*remove)(TableBase* table, const uint64_t* key_words, const void* expected);
  bool (*replace)(TableBase* table, const uint64_t* key_words, void* value);
  uint64_t (*leaf_version)(const void* leaf);
  bool bytes_key;  // a BytesTable's: keys are packed byte strings
};

template <size_t K>
struct TableOpsFor {
  static BTree<K>& tree(TableBase* table) { return static_cast<Table<K>*>(table)->index_; }
  static bool remove(TableBase* table, const uint64_t* key_words, const void* expected) {
    return tree(table).remove(Table<K>::key_of(key_words), expected);
  }
  static bool replace(TableBase* table, const uint64_t* key_words, void* value) {
    return tree(table).update(Table<K>::key_of(key_words), value);
  }
  static constexpr TableOps ops{&remove, &replace, &BTree<K>::leaf_version, false};
};

struct ReadEntry {
  Record* rec;
  uint64_t observed;  // version word without the lock bit
};

struct WriteEntry {
  Record* rec;
  uint64_t* value;  // arena copy; nullptr for kRemove
  uint32_t size_bytes;
  WriteKind kind;
  bool fresh;  // this transaction created rec (an absent placeholder) in the index
  TableBase* table;
  const TableOps* ops;
  const uint64_t* key_words;  // arena copy
  uint32_t key_word_count;
  uint64_t base_tid = 0;  // version of rec when locked for commit
  // kPut with keep_old_values_: an arena copy of what the put overwrote.
  const uint64_t* old_value = nullptr;
  uint32_t old_size_bytes = 0;
};

struct NodeEntry {
  const void* leaf;
  uint64_t version;
  uint64_t (*current)(const void*);
};

struct TxnBuffers {
  std::vector<ReadEntry> reads;
  std::vector<WriteEntry> writes;
  std::vector<NodeEntry> nodes;
  Arena arena;
  std::optional<ebr::Guard> guard;
  uint64_t max_seen_version = 0;  // largest TID read or overwritten
  // The last record found by get(), so that the usual get-then-put skips a second lookup.
  const void* last_table = nullptr;
  uint64_t last_key[8] = {};
  Record* last_rec = nullptr;
  // The same for byte keys: the record a byte-key get or write last found, so that INCR's
  // get-then-put and a key written twice in one MSET skip the second index descent.
  const void* last_bytes_table = nullptr;
  std::string last_bytes_key;  // its capacity is kept across transactions
  Record* last_bytes_rec = nullptr;
  std::vector<uint64_t> scratch;  // one value's words, for scans
  // Bytes the byte-key writes so far take against kBytesTxnWriteBytesMax (bytes_table.h).
  size_t bytes_written = 0;
};

template <size_t K>
Status Table<K>::load(const KeyT& key, const void* value, uint32_t size_bytes) {
  SHOAL_ASSERT(size_bytes <= kValueBytesMax, "value of %u bytes", size_bytes);
  Record* rec = Record::make(size_bytes, Tid::make(1, 0));
  rec->write_locked(value, size_bytes);
  ebr::Guard guard;
  typename BTree<K>::NodeRef before{};
  uint64_t after = 0;
  if (index_.insert_if_absent(key, rec, &before, &after) != nullptr) {
    Record::free(rec);
    return Status::AlreadyExists("load: duplicate key in table " + name());
  }
  record_bytes_.add(static_cast<int64_t>(Record::alloc_bytes(rec->capacity_words)));
  return Status::Ok();
}

template <size_t K>
Status Table<K>::peek(const KeyT& key, void* out, uint32_t size_bytes) const {
  ebr::Guard guard;
  uint32_t size = 0;
  uint64_t version = 0;
  return peek_replicated(key.w.data(), nullptr, out, size_bytes, &size, &version);
}

template <size_t K>
Status Table<K>::peek_replicated(const uint64_t* key_words, const void* known, void* out,
                                 uint32_t out_bytes, uint32_t* size_out,
                                 uint64_t* version_out) const {
  *version_out = 0;
  const auto* rec = static_cast<const Record*>(known);
  // A known record replaced (grown) since the prefetch found it is looked up again.
  if (rec == nullptr || (rec->word.load(std::memory_order_acquire) & Tid::kUnlinked) != 0) {
    rec = static_cast<const Record*>(index_.get(key_of(key_words), nullptr));
  }
  if (rec == nullptr) return Status::NotFound();
  // No other writer on a follower's engine: the head cannot change under this read.
  const uint64_t word = rec->word.load(std::memory_order_acquire);
  *version_out = Tid::version(word);
  if (word & Tid::kStateMask) return Status::NotFound();
  *size_out = rec->size_bytes;
  std::memcpy(out, rec->data, std::min(out_bytes, rec->size_bytes));
  return Status::Ok();
}

template <size_t K>
bool Table<K>::set_takeover_deps(const uint64_t* key_words, uint64_t tid, const DepVec& deps) {
  ebr::Guard guard;
  auto* rec = static_cast<Record*>(index_.get(key_of(key_words), nullptr));
  if (rec == nullptr) return false;
  const uint64_t word = rec->word.load(std::memory_order_acquire);
  if ((word & Tid::kStateMask) != 0 || Tid::version(word) != tid) return false;
  const DepVec* old = rec->deps.exchange(new DepVec(deps), std::memory_order_acq_rel);
  if (old != nullptr) {
    ebr::retire(const_cast<DepVec*>(old), [](void* p) { delete static_cast<DepVec*>(p); });
  }
  return true;
}

template <size_t K>
Status Table<K>::peek_chain_for_tests(
    const KeyT& key, const std::function<void(const void*, uint64_t, const DepVec*)>& fn) const {
  ebr::Guard guard;
  auto* rec = static_cast<const Record*>(index_.get(key, nullptr));
  if (rec == nullptr) return Status::NotFound();
  for (int depth = 0; rec != nullptr && depth < (1 << 20); ++depth, rec = rec->older) {
    fn(rec->data, rec->word.load(std::memory_order_acquire),
       rec->deps.load(std::memory_order_acquire));
  }
  return Status::Ok();
}

template <size_t K>
void Table<K>::for_each(const KeyT& lo, const KeyT& hi,
                        const std::function<bool(const KeyT&, const void*, uint32_t)>& fn) const {
  ebr::Guard guard;
  index_.scan(
      lo, hi,
      [&](const KeyT& key, void* value) {
        auto* rec = static_cast<Record*>(value);
        if (rec->word.load(std::memory_order_acquire) & Tid::kStateMask) return true;
        return fn(key, rec->data, rec->size_bytes);
      },
      [](const typename BTree<K>::NodeRef&) {});
}

template <class IndexAt>
bool TableBase::install_replicated(const IndexAt& at, WriteKind kind, const void* value,
                                   uint32_t size_bytes, uint64_t tid, void* known) {
  SHOAL_ASSERT(tid != 0 && tid <= Tid::kVersionMask, "replicated TID %lu", tid);
  const bool remove = kind == WriteKind::kRemove;
  // An insert is almost always of a key the replica has never held (TPC-C: orders, order
  // lines, history): one descent that inserts, instead of a lookup and then an insert.
  bool try_insert = kind == WriteKind::kInsert && known == nullptr;
  // Bounded in practice: a pass repeats only when another replayer of the same key changed
  // the index between our lookup and our insert/lock (it then holds a newer state).
  for (;;) {
    auto* rec = known != nullptr ? static_cast<Record*>(known) : try_insert ? nullptr : at.lookup();
    try_insert = false;
    known = nullptr;
    if (rec == nullptr) {
      Record* fresh = Record::make(remove ? 0 : size_bytes, remove ? (tid | Tid::kAbsent) : tid);
      if (!remove) fresh->write_locked(value, size_bytes);
      if (!at.insert(fresh)) {
        Record::free(fresh);  // the key is held (a tombstone, or replayed already): look it up
        continue;
      }
      record_bytes_.add(static_cast<int64_t>(Record::alloc_bytes(fresh->capacity_words)));
      return true;
    }
    uint64_t observed = 0;
    if (!rec->try_lock(&observed, 1u << 20)) continue;
    if (observed & Tid::kUnlinked) {  // replaced by a grown record meanwhile: look up again
      rec->unlock();
      continue;
    }
    if (Tid::version(observed) >= tid) {
      rec->unlock();
      return false;
    }
    const bool chains = engine_ != nullptr && engine_->options().keep_version_chains;
    if (chains) push_replicated_version(rec);
    if (remove) {
      if (chains) trim_chain(rec, tid);
      rec->unlock_with(tid | Tid::kAbsent);  // a tombstone: stays in the index
      return true;
    }
    if (Record::words_for(size_bytes) > rec->capacity_words) {
      Record* grown = Record::make(size_bytes, tid | Tid::kLock);
      grown->write_locked(value, size_bytes);
      // The chain moves to the grown record; readers still on rec walk the same (shared)
      // chain, so rec is freed alone (free_one), never its chain.
      std::atomic_ref<Record*>(grown->older)
          .store(std::atomic_ref<Record*>(rec->older).load(std::memory_order_relaxed),
                 std::memory_order_release);
      if (chains) trim_chain(grown, tid);
      const bool replaced = at.replace(grown);
      SHOAL_ASSERT(replaced, "%s", "a locked record was missing from its index");
      grown->unlock_with(tid);
      rec->word.store(tid | Tid::kAbsent | Tid::kUnlinked, std::memory_order_release);
      record_bytes_.add(static_cast<int64_t>(Record::alloc_bytes(grown->capacity_words)) -
                        static_cast<int64_t>(Record::alloc_bytes(rec->capacity_words)));
      ebr::retire(rec, &Record::free_one);
      return true;
    }
    if (chains) trim_chain(rec, tid);
    rec->write_locked(value, size_bytes);
    rec->unlock_with(tid);
    return true;
  }
}

template <size_t K>
bool Table<K>::apply_replicated(const uint64_t* key_words, WriteKind kind, const void* value,
                                uint32_t size_bytes, uint64_t tid, void* known,
                                const void* leaf_hint) {
  SHOAL_ASSERT(size_bytes <= kValueBytesMax, "replicated value of %u bytes", size_bytes);
  struct At {
    BTree<K>& index;
    const KeyT key;
    const void* leaf_hint;
    Record* lookup() const { return static_cast<Record*>(index.get(key, nullptr)); }
    bool insert(Record* rec) const {
      return index.insert_if_absent_at(key, rec, leaf_hint) == nullptr;
    }
    bool replace(Record* rec) const { return index.update(key, rec); }
  };
  return install_replicated(At{index_, key_of(key_words), leaf_hint}, kind, value, size_bytes, tid,
                            known);
}

template <size_t K>
bool Table<K>::apply_replicated_patch(const uint64_t* key_words, uint64_t base_tid,
                                      uint32_t size_bytes, PatchFn patch, void* ctx, uint64_t tid,
                                      void* known) {
  SHOAL_ASSERT(tid != 0 && tid <= Tid::kVersionMask && base_tid < tid,
               "replicated patch TID %lu on %lu", tid, base_tid);
  const KeyT key = key_of(key_words);
  // Bounded in practice: a pass repeats only when the record was replaced meanwhile.
  for (;;) {
    auto* rec = known != nullptr ? static_cast<Record*>(known)
                                 : static_cast<Record*>(index_.get(key, nullptr));
    known = nullptr;
    SHOAL_ASSERT(rec != nullptr, "replicated patch of a key this replica does not hold (TID %lu)",
                 tid);
    uint64_t observed = 0;
    if (!rec->try_lock(&observed, 1u << 20)) continue;
    if (observed & Tid::kUnlinked) {
      rec->unlock();
      continue;
    }
    const uint64_t version = Tid::version(observed);
    if (version >= tid) {
      rec->unlock();
      return false;
    }
    SHOAL_ASSERT(!(observed & Tid::kAbsent) && version >= base_tid && rec->size_bytes == size_bytes,
                 "replicated patch at TID %lu against version %lu does not fit the held version "
                 "%lu (%u bytes, want %u)",
                 tid, base_tid, version, rec->size_bytes, size_bytes);
    // Follower reads (src/txn/snapshot.h): the version the patch overwrites stays readable.
    if (engine_ != nullptr && engine_->options().keep_version_chains) {
      push_replicated_version(rec);
      trim_chain(rec, tid);
    }
    patch(ctx, rec->data);
    rec->unlock_with(tid);
    return true;
  }
}

template <size_t K>
void Table<K>::scan_committed(const ScanFn& fn) const {
  ebr::Guard guard;
  index_.scan(
      KeyT::min(), KeyT::max(),
      [&](const KeyT& key, void* value) {
        auto* rec = static_cast<Record*>(value);
        const uint64_t word = rec->word.load(std::memory_order_acquire);
        if (word & Tid::kStateMask) return true;
        return fn(key.w.data(), rec->data, rec->size_bytes, Tid::version(word));
      },
      [](const typename BTree<K>::NodeRef&) {});
}

template <size_t K>
size_t Table<K>::purge_tombstones() {
  ebr::Guard guard;
  std::vector<std::pair<KeyT, Record*>> dead;  // collected first, removed after the scan
  index_.scan(
      KeyT::min(), KeyT::max(),
      [&](const KeyT& key, void* value) {
        auto* rec = static_cast<Record*>(value);
        const uint64_t word = rec->word.load(std::memory_order_acquire);
        const bool tombstone = (word & (Tid::kLock | Tid::kStateMask)) == Tid::kAbsent;
        if (tombstone && std::atomic_ref<Record*>(rec->older).load() == nullptr) {
          dead.emplace_back(key, rec);
        }
        return true;
      },
      [](const typename BTree<K>::NodeRef&) {});
  size_t purged = 0;
  for (const auto& [key, rec] : dead) {  // bounded by the scan
    if (!index_.remove(key, rec)) continue;
    retire_purged(rec);
    ++purged;
  }
  return purged;
}

template <size_t K>
Table<K>::~Table() {
  // Records are owned by the table; the tree frees its own nodes.
  ebr::Guard guard;
  std::vector<Record*> recs;
  index_.scan(
      KeyT::min(), KeyT::max(),
      [&](const KeyT&, void* value) {
        recs.push_back(static_cast<Record*>(value));
        return true;
      },
      [](const typename BTree<K>::NodeRef&) {});
  for (Record* r : recs) Record::free(r);
}

template <size_t K>
Table<K>* Engine::create_table(const std::string& name) {
  SHOAL_ASSERT(find_table(name) == nullptr, "table %s exists", name.c_str());
  auto table = std::make_unique<Table<K>>(name, static_cast<uint32_t>(tables_.size()));
  Table<K>* raw = table.get();
  raw->engine_ = this;
  tables_.push_back(std::move(table));
  return raw;
}

// ---- Txn reads ----

inline uint64_t Txn::observe(Record* rec, void* out, uint32_t out_bytes, uint32_t* size_out) {
  TxnBuffers& b = *bufs_;
  const uint64_t word =
      rec->stable_read(out, out_bytes, size_out, engine_->options().lock_wait_spins_max);
  if (word & Tid::kLock) return word;
  b.reads.push_back(ReadEntry{rec, word});
  b.max_seen_version = std::max(b.max_seen_version, Tid::version(word));
  if (const DepVec* d = rec->deps.load(std::memory_order_acquire)) deps_.merge(*d);
  return word;
}

inline Status Txn::read_record(Record* rec, void* out, uint32_t size_bytes, uint32_t* size_out) {
  uint32_t got = 0;
  const uint64_t word = observe(rec, out, size_bytes, &got);
  if (word & Tid::kLock) return Status::Aborted();
  if (word & Tid::kStateMask) return Status::NotFound();
  if (size_out != nullptr) {
    *size_out = got;
  } else if (got != size_bytes) {
    return Status::InvalidArgument("value size mismatch");
  }
  return Status::Ok();
}

inline Status Txn::read_unrecorded(const Record* rec, void* out, uint32_t size_bytes,
                                   uint32_t* size_out) {
  if (rec == nullptr) return Status::NotFound();
  uint32_t got = 0;
  // A read-only table's records are never locked after the load: no spinning here.
  const uint64_t word = rec->stable_read(out, size_bytes, &got, 0);
  if (word & (Tid::kLock | Tid::kStateMask)) return Status::NotFound();
  if (size_out != nullptr) {
    *size_out = got;
  } else if (got != size_bytes) {
    return Status::InvalidArgument("value size mismatch");
  }
  return Status::Ok();
}

template <size_t K>
Status Txn::get(Table<K>& table, const Key<K>& key, void* out, uint32_t size_bytes,
                uint32_t* size_out) {
  TxnBuffers& b = *bufs_;
  typename BTree<K>::NodeRef leaf;
  for (int attempt = 0; attempt < 64; ++attempt) {
    auto* rec = static_cast<Record*>(table.index_.get(key, &leaf));
    if (table.read_only()) return read_unrecorded(rec, out, size_bytes, size_out);
    if (rec == nullptr) {
      record_node(leaf.leaf, leaf.version, &BTree<K>::leaf_version);
      note_removes_seen(table);
      return Status::NotFound();
    }
    if (!b.writes.empty()) {
      if (WriteEntry* w = find_write(rec)) {
        if (w->kind == WriteKind::kRemove) return Status::NotFound();
        if (size_out != nullptr) *size_out = w->size_bytes;
        std::memcpy(out, w->value, std::min(size_bytes, w->size_bytes));
        return Status::Ok();
      }
    }
    if (rec->word.load(std::memory_order_acquire) & Tid::kUnlinked) continue;  // look up again
    Status s = read_record(rec, out, size_bytes, size_out);
    if (s.is_not_found() && (b.reads.back().observed & Tid::kUnlinked)) {
      // Removed after our lookup. A dead record's word never changes again, so it cannot
      // stand for "absent": a later insert of the key lands in the index, not in it. Look
      // again, so the leaf (or the new record) guards the answer.
      b.reads.pop_back();
      continue;
    }
    if (s.ok()) {
      b.last_table = &table;
      std::copy(key.w.begin(), key.w.end(), b.last_key);
      b.last_rec = rec;
    }
    return s;
  }
  return Status::Aborted();
}

// ---- Txn writes ----

template <size_t K>
Status Txn::put(Table<K>& table, const Key<K>& key, const void* value, uint32_t size_bytes) {
  SHOAL_ASSERT(size_bytes <= TableBase::kValueBytesMax, "value of %u bytes", size_bytes);
  if (table.read_only()) return refuse_read_only(table);
  TxnBuffers& b = *bufs_;
  const bool last = b.last_table == &table && std::equal(key.w.begin(), key.w.end(), b.last_key);
  for (int attempt = 0; attempt < 64; ++attempt) {
    Record* rec = nullptr;
    if (last && attempt == 0) {
      rec = b.last_rec;
    } else {
      rec = lookup_for_write(table, key);
      if (rec == nullptr) return Status::NotFound();
    }
    if (WriteEntry* w = b.writes.empty() ? nullptr : find_write(rec)) {
      if (w->kind == WriteKind::kRemove) return Status::NotFound();
      w->value = buffer_value(value, size_bytes);
      w->size_bytes = size_bytes;
      return Status::Ok();
    }
    const uint64_t word = rec->word.load(std::memory_order_acquire);
    if (word & Tid::kUnlinked) continue;  // removed meanwhile: look up again
    if (word & Tid::kAbsent) return absent_seen(rec, word);
    stage_write(table, key, rec, buffer_value(value, size_bytes), size_bytes, WriteKind::kPut,
                false);
    return Status::Ok();
  }
  return Status::Aborted();
}

template <size_t K>
Record* Txn::lookup_for_write(Table<K>& table, const Key<K>& key) {
  typename BTree<K>::NodeRef leaf;
  auto* rec = static_cast<Record*>(table.index_.get(key, &leaf));
  if (rec == nullptr) {
    record_node(leaf.leaf, leaf.version, &BTree<K>::leaf_version);
    note_removes_seen(table);
  }
  return rec;
}

template <size_t K>
void Txn::stage_write(Table<K>& table, const Key<K>& key, Record* rec, uint64_t* buffered_value,
                      uint32_t size_bytes, WriteKind kind, bool fresh) {
  uint64_t* key_copy = bufs_->arena.allocate_words(K);
  std::copy(key.w.begin(), key.w.end(), key_copy);
  bufs_->writes.push_back(WriteEntry{rec, buffered_value, size_bytes, kind, fresh, &table,
                                     &TableOpsFor<K>::ops, key_copy, K});
}

inline Status Txn::absent_seen(Record* rec, uint64_t word) {
  if (word & Tid::kLock) return Status::Aborted();  // being committed: its outcome is unknown
  bufs_->reads.push_back(ReadEntry{rec, word});
  return Status::NotFound();
}

template <size_t K>
Status Txn::insert(Table<K>& table, const Key<K>& key, const void* value, uint32_t size_bytes) {
  SHOAL_ASSERT(size_bytes <= TableBase::kValueBytesMax, "value of %u bytes", size_bytes);
  if (table.read_only()) return refuse_read_only(table);
  TxnBuffers& b = *bufs_;
  for (int attempt = 0; attempt < 64; ++attempt) {
    typename BTree<K>::NodeRef leaf;
    auto* rec = static_cast<Record*>(table.index_.get(key, &leaf));
    bool fresh = false;
    if (rec == nullptr) {
      Record* mine = Record::make(size_bytes, Tid::kAbsent);
      typename BTree<K>::NodeRef before{};
      uint64_t after = 0;
      if (table.index_.insert_if_absent(key, mine, &before, &after) != nullptr) {
        Record::free(mine);  // lost a race with another inserter; never published
        continue;
      }
      table.record_bytes_.add(static_cast<int64_t>(Record::alloc_bytes(mine->capacity_words)));
      note_own_insert(before.leaf, before.version, after);
      rec = mine;
      fresh = true;
    } else if (WriteEntry* w = b.writes.empty() ? nullptr : find_write(rec)) {
      if (w->kind != WriteKind::kRemove) return Status::AlreadyExists();
      w->kind = WriteKind::kPut;  // delete then insert in one transaction: an overwrite
      w->value = buffer_value(value, size_bytes);
      w->size_bytes = size_bytes;
      return Status::Ok();
    } else {
      const uint64_t word = rec->word.load(std::memory_order_acquire);
      if (word & Tid::kUnlinked) continue;
      if (word & Tid::kLock) return Status::Aborted();
      // Present: a read of existence. Absent: we take the placeholder over.
      b.reads.push_back(ReadEntry{rec, word});
      b.max_seen_version = std::max(b.max_seen_version, Tid::version(word));
      if (!(word & Tid::kAbsent)) return Status::AlreadyExists();
    }
    stage_write(table, key, rec, buffer_value(value, size_bytes), size_bytes, WriteKind::kInsert,
                fresh);
    return Status::Ok();
  }
  return Status::Aborted();
}

template <size_t K>
Status Txn::remove(Table<K>& table, const Key<K>& key) {
  if (table.read_only()) return refuse_read_only(table);
  TxnBuffers& b = *bufs_;
  for (int attempt = 0; attempt < 64; ++attempt) {
    Record* rec = lookup_for_write(table, key);
    if (rec == nullptr) return Status::NotFound();
    if (WriteEntry* w = b.writes.empty() ? nullptr : find_write(rec)) {
      if (w->kind == WriteKind::kRemove) return Status::NotFound();
      w->kind = WriteKind::kRemove;
      w->value = nullptr;
      return Status::Ok();
    }
    const uint64_t word = rec->word.load(std::memory_order_acquire);
    if (word & Tid::kUnlinked) continue;  // removed meanwhile: look up again
    if (word & Tid::kAbsent) return absent_seen(rec, word);
    stage_write(table, key, rec, nullptr, 0, WriteKind::kRemove, false);
    return Status::Ok();
  }
  return Status::Aborted();
}

// ---- Txn scans ----

template <bool kReverse, size_t K, typename Fn>
Status Txn::scan_impl(Table<K>& table, const Key<K>& from, const Key<K>& to, size_t limit, Fn& fn) {
  if (limit == 0) return Status::Ok();
  TxnBuffers& b = *bufs_;
  size_t delivered = 0;
  Status status;
  const bool recorded = !table.read_only();
  auto on_leaf = [&](const typename BTree<K>::NodeRef& ref) {
    if (recorded) record_node(ref.leaf, ref.version, &BTree<K>::leaf_version);
  };
  auto on_entry = [&](const Key<K>& key, void* value) -> bool {
    auto* rec = static_cast<Record*>(value);
    const void* data = b.scratch.data();
    uint32_t size = 0;
    if (!recorded) {
      if (!read_unrecorded(rec, b.scratch.data(), TableBase::kValueBytesMax, &size).ok()) {
        return true;  // absent: a read-only table holds none after its load
      }
    } else if (WriteEntry* w = b.writes.empty() ? nullptr : find_write(rec)) {
      if (w->kind == WriteKind::kRemove) return true;
      data = w->value;
      size = w->size_bytes;
    } else {
      const uint64_t word = observe(rec, b.scratch.data(), TableBase::kValueBytesMax, &size);
      if (word & Tid::kLock) {
        status = Status::Aborted();
        return false;
      }
      if (word & Tid::kStateMask) return true;
    }
    ++delivered;
    return fn(key, data, size) && delivered < limit;
  };
  if constexpr (kReverse) {
    table.index_.rscan(from, to, on_entry, on_leaf);
  } else {
    table.index_.scan(from, to, on_entry, on_leaf);
  }
  if (recorded) note_removes_seen(table);  // after the scan: it saw their unlinks
  return status;
}

template <size_t K, typename Fn>
Status Txn::scan(Table<K>& table, const Key<K>& lo, const Key<K>& hi, size_t limit, Fn&& fn) {
  return scan_impl<false>(table, lo, hi, limit, fn);
}

template <size_t K, typename Fn>
Status Txn::rscan(Table<K>& table, const Key<K>& hi, const Key<K>& lo, size_t limit, Fn&& fn) {
  return scan_impl<true>(table, hi, lo, limit, fn);
}

// ---- untyped table access ----

template <size_t K>
Status Table<K>::txn_get(Txn& txn, const uint64_t* key_words, void* out, uint32_t out_bytes,
                         uint32_t* size_out) {
  return txn.get(*this, key_of(key_words), out, out_bytes, size_out);
}
template <size_t K>
Status Table<K>::txn_put(Txn& txn, const uint64_t* key_words, const void* value,
                         uint32_t size_bytes) {
  return txn.put(*this, key_of(key_words), value, size_bytes);
}
template <size_t K>
Status Table<K>::txn_insert(Txn& txn, const uint64_t* key_words, const void* value,
                            uint32_t size_bytes) {
  return txn.insert(*this, key_of(key_words), value, size_bytes);
}
template <size_t K>
Status Table<K>::txn_remove(Txn& txn, const uint64_t* key_words) {
  return txn.remove(*this, key_of(key_words));
}

template <typename Fn>
void Txn::for_each_write(Fn&& fn) const {
  for (const WriteEntry& w : bufs_->writes) {
    fn(WriteView{w.table->id(), w.key_words, w.key_word_count, w.kind, w.value, w.size_bytes,
                 w.old_value, w.old_size_bytes, w.base_tid, w.ops->bytes_key});
  }
}

}  // namespace shoal::txn

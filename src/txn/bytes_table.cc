#include <algorithm>
#include <vector>

#include "src/txn/engine.h"

namespace shoal::txn {

// TableOps of a BytesTable: write entries carry its keys packed (bytes_table.h).
struct BytesTableOps {
  static BytesTree& tree(TableBase* table) { return static_cast<BytesTable*>(table)->index_; }
  static bool remove(TableBase* table, const uint64_t* key_words, const void* expected) {
    return tree(table).remove(unpack_key(key_words), expected) == BytesTree::Result::kOk;
  }
  static bool replace(TableBase* table, const uint64_t* key_words, void* value) {
    return tree(table).update(unpack_key(key_words), value) == BytesTree::Result::kOk;
  }
  static constexpr TableOps ops{&remove, &replace, &BytesTree::leaf_version, true};
};

namespace {
Status check_key(std::string_view key) {
  if (!BytesTree::valid_key(key)) {
    return Status::InvalidArgument("key of " + std::to_string(key.size()) + " bytes (1.." +
                                   std::to_string(kBytesKeyBytesMax) + ")");
  }
  return Status::Ok();
}
Status check_value(std::string_view value) {
  if (value.size() > kBytesValueBytesMax) {
    return Status::InvalidArgument("value of " + std::to_string(value.size()) + " bytes (at most " +
                                   std::to_string(kBytesValueBytesMax) + ")");
  }
  return Status::Ok();
}
// What one byte-key write counts against kBytesTxnWriteBytesMax.
size_t write_cost(std::string_view key, size_t value_bytes) {
  return key.size() + value_bytes + kBytesWriteOverheadBytes;
}
uint32_t relaxed_size(const Record* rec) {
  return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(rec->size_bytes))
      .load(std::memory_order_relaxed);
}
}  // namespace

// ---- BytesTable ----

BytesTable::~BytesTable() {
  // Records are owned by the table; the tree frees its own nodes.
  ebr::Guard guard;
  std::vector<Record*> recs;
  scan_records([&](std::string_view, Record* rec) {
    recs.push_back(rec);
    return true;
  });
  for (Record* r : recs) Record::free(r);
}

template <class Fn>
void BytesTable::scan_records(Fn&& fn) const {
  index_.scan(
      std::string_view(), std::nullopt,
      [&](std::string_view key, void* value) { return fn(key, static_cast<Record*>(value)); },
      [](const BytesTree::NodeRef&) {});
}

Status BytesTable::txn_get(Txn& txn, const uint64_t* key_words, void* out, uint32_t out_bytes,
                           uint32_t* size_out) {
  std::string value;
  uint64_t version = 0;
  SHOAL_TRY(txn.get(*this, unpack_key(key_words), &value, &version));
  if (size_out != nullptr) {
    *size_out = static_cast<uint32_t>(value.size());
  } else if (value.size() != out_bytes) {
    return Status::InvalidArgument("value size mismatch");
  }
  std::memcpy(out, value.data(), std::min<size_t>(out_bytes, value.size()));
  return Status::Ok();
}

Status BytesTable::txn_put(Txn& txn, const uint64_t* key_words, const void* value,
                           uint32_t size_bytes) {
  return txn.put(*this, unpack_key(key_words),
                 std::string_view(static_cast<const char*>(value), size_bytes));
}

Status BytesTable::txn_insert(Txn& txn, const uint64_t* key_words, const void* value,
                              uint32_t size_bytes) {
  return txn.insert(*this, unpack_key(key_words),
                    std::string_view(static_cast<const char*>(value), size_bytes));
}

Status BytesTable::txn_remove(Txn& txn, const uint64_t* key_words) {
  return txn.remove(*this, unpack_key(key_words));
}

bool BytesTable::apply_replicated(const uint64_t* key_words, WriteKind kind, const void* value,
                                  uint32_t size_bytes, uint64_t tid, void* known, const void*) {
  SHOAL_ASSERT(size_bytes <= kBytesValueBytesMax, "replicated value of %u bytes", size_bytes);
  struct At {
    BytesTree& index;
    std::string_view key;
    Record* lookup() const {
      void* v = nullptr;
      return index.get(key, &v, nullptr) == BytesTree::Result::kOk ? static_cast<Record*>(v)
                                                                   : nullptr;
    }
    bool insert(Record* rec) const {
      return index.insert_if_absent(key, rec, nullptr, nullptr, nullptr) == BytesTree::Result::kOk;
    }
    bool replace(Record* rec) const { return index.update(key, rec) == BytesTree::Result::kOk; }
  };
  const std::string_view key = unpack_key(key_words);
  SHOAL_ASSERT(BytesTree::valid_key(key), "replicated key of %zu bytes", key.size());
  return install_replicated(At{index_, key}, kind, value, size_bytes, tid, known);
}

bool BytesTable::apply_replicated_patch(const uint64_t*, uint64_t, uint32_t, PatchFn, void*,
                                        uint64_t tid, void*) {
  SHOAL_ASSERT(false, "replicated patch of a byte key (TID %lu): the log refuses them", tid);
  return false;
}

void BytesTable::prefetch_start(const uint64_t*, BTreePrefetch* p) const {
  p->node = nullptr;
  p->value = nullptr;
  p->leaf = nullptr;
}

bool BytesTable::prefetch_step(BTreePrefetch*) const {
  return false;
}

bool BytesTable::prefetch_jump(BTreePrefetch*, const void*) const {
  return false;
}

void BytesTable::scan_committed(const ScanFn& fn) const {
  ebr::Guard guard;
  std::vector<uint64_t> packed(kPackedKeyWordsMax);
  scan_records([&](std::string_view key, Record* rec) {
    const uint64_t word = rec->word.load(std::memory_order_acquire);
    if (word & Tid::kStateMask) return true;
    pack_key(key, packed.data());
    return fn(packed.data(), rec->data, rec->size_bytes, Tid::version(word));
  });
}

void BytesTable::for_each_committed(
    const std::function<bool(std::string_view, std::string_view, uint64_t)>& fn) const {
  ebr::Guard guard;
  scan_records([&](std::string_view key, Record* rec) {
    const uint64_t word = rec->word.load(std::memory_order_acquire);
    if (word & Tid::kStateMask) return true;
    return fn(key, std::string_view(reinterpret_cast<const char*>(rec->data), rec->size_bytes),
              Tid::version(word));
  });
}

size_t BytesTable::purge_tombstones() {
  ebr::Guard guard;
  std::vector<std::pair<std::string, Record*>> dead;  // collected first, removed after the scan
  scan_records([&](std::string_view key, Record* rec) {
    const uint64_t word = rec->word.load(std::memory_order_acquire);
    const bool tombstone = (word & (Tid::kLock | Tid::kStateMask)) == Tid::kAbsent;
    if (tombstone && std::atomic_ref<Record*>(rec->older).load() == nullptr) {
      dead.emplace_back(std::string(key), rec);
    }
    return true;
  });
  size_t purged = 0;
  for (const auto& [key, rec] : dead) {  // bounded by the scan
    if (index_.remove(key, rec) != BytesTree::Result::kOk) continue;
    retire_purged(rec);
    ++purged;
  }
  return purged;
}

Status BytesTable::load(std::string_view key, std::string_view value) {
  SHOAL_TRY(check_key(key));
  SHOAL_TRY(check_value(value));
  const auto size = static_cast<uint32_t>(value.size());
  Record* rec = Record::make(size, Tid::make(1, 0));
  rec->write_locked(value.data(), size);
  ebr::Guard guard;
  if (index_.insert_if_absent(key, rec, nullptr, nullptr, nullptr) != BytesTree::Result::kOk) {
    Record::free(rec);
    return Status::AlreadyExists("load: duplicate key in table " + name());
  }
  record_bytes_.add(static_cast<int64_t>(Record::alloc_bytes(rec->capacity_words)));
  return Status::Ok();
}

// ---- Txn on byte-key tables ----

uint64_t Txn::observe_bytes(Record* rec, std::string* value) {
  // Sized by a racy look at the record; a value that grew meanwhile is read again (bounded:
  // each pass sizes the buffer for what the record held).
  for (int attempt = 0; attempt < 16; ++attempt) {
    const uint32_t hint = relaxed_size(rec);
    if (value->size() < hint) value->resize(hint);
    uint32_t got = 0;
    const uint64_t word = observe(rec, value->data(), static_cast<uint32_t>(value->size()), &got);
    if (word & Tid::kLock) return word;
    if (got <= value->size()) {
      value->resize(word & Tid::kStateMask ? 0 : got);
      return word;
    }
    bufs_->reads.pop_back();  // copied only part of it: read again, larger
  }
  return Tid::kLock;  // a conflict: it kept changing size
}

namespace {
// The record this transaction last found for `key` (nullptr: look it up). It may have been
// unlinked since; the callers check, as after any lookup.
Record* cached_bytes_record(const TxnBuffers& b, const BytesTable& table, std::string_view key) {
  return b.last_bytes_table == &table && b.last_bytes_key == key ? b.last_bytes_rec : nullptr;
}
void cache_bytes_record(TxnBuffers& b, const BytesTable& table, std::string_view key, Record* rec) {
  b.last_bytes_table = &table;
  b.last_bytes_key.assign(key);
  b.last_bytes_rec = rec;
}
}  // namespace

Record* Txn::lookup_bytes(BytesTable& table, std::string_view key) {
  BytesTree::NodeRef leaf{};
  void* found = nullptr;
  if (table.index_.get(key, &found, &leaf) == BytesTree::Result::kOk) {
    return static_cast<Record*>(found);
  }
  record_node(leaf.leaf, leaf.version, &BytesTree::leaf_version);
  note_removes_seen(table);
  return nullptr;
}

Status Txn::get(BytesTable& table, std::string_view key, std::string* value, uint64_t* version) {
  SHOAL_TRY(check_key(key));
  TxnBuffers& b = *bufs_;
  *version = 0;
  for (int attempt = 0; attempt < 64; ++attempt) {
    Record* rec = lookup_bytes(table, key);
    if (rec == nullptr) return Status::NotFound();
    if (WriteEntry* w = b.writes.empty() ? nullptr : find_write(rec)) {
      if (w->kind == WriteKind::kRemove) return Status::NotFound();
      value->assign(reinterpret_cast<const char*>(w->value), w->size_bytes);
      return Status::Ok();
    }
    if (rec->word.load(std::memory_order_acquire) & Tid::kUnlinked) continue;  // look up again
    cache_bytes_record(b, table, key, rec);
    const uint64_t word = observe_bytes(rec, value);
    if (word & Tid::kLock) return Status::Aborted();
    if (word & Tid::kUnlinked) {
      // Removed after our lookup: a dead record cannot stand for "absent" (engine.h); look
      // again so the leaf or the new record guards the answer.
      b.reads.pop_back();
      continue;
    }
    *version = Tid::version(word);
    return word & Tid::kAbsent ? Status::NotFound() : Status::Ok();
  }
  return Status::Aborted();
}

Status Txn::put(BytesTable& table, std::string_view key, std::string_view value) {
  return write_bytes(table, key, value, BytesWriteMode::kUpsert);
}

Status Txn::insert(BytesTable& table, std::string_view key, std::string_view value) {
  return write_bytes(table, key, value, BytesWriteMode::kInsertOnly);
}

void Txn::stage_bytes_write(BytesTable& table, std::string_view key, Record* rec,
                            uint64_t* buffered_value, uint32_t size_bytes, WriteKind kind,
                            bool fresh) {
  const size_t words = packed_key_words(key.size());
  uint64_t* packed = bufs_->arena.allocate_words(words);
  pack_key(key, packed);
  bufs_->writes.push_back(WriteEntry{rec, buffered_value, size_bytes, kind, fresh, &table,
                                     &BytesTableOps::ops, packed, static_cast<uint32_t>(words)});
}

Status Txn::rewrite_bytes(WriteEntry& w, std::string_view value, BytesWriteMode mode) {
  if (w.kind != WriteKind::kRemove) {
    if (mode == BytesWriteMode::kInsertOnly) return Status::AlreadyExists();
  } else {
    // Removed earlier in this transaction, written again: an insert of a placeholder (our own,
    // or one we took over), else an overwrite of the committed record (whose lock at commit
    // catches a remove by someone else meanwhile: then it is unlinked).
    const uint64_t word = w.rec->word.load(std::memory_order_acquire);
    w.kind = (word & Tid::kStateMask) == Tid::kAbsent ? WriteKind::kInsert : WriteKind::kPut;
  }
  const auto size = static_cast<uint32_t>(value.size());
  w.value = buffer_value(value.data(), size);
  w.size_bytes = size;
  return Status::Ok();
}

Status Txn::write_bytes(BytesTable& table, std::string_view key, std::string_view value,
                        BytesWriteMode mode) {
  SHOAL_TRY(check_key(key));
  SHOAL_TRY(check_value(value));
  if (table.read_only()) return refuse_read_only(table);
  TxnBuffers& b = *bufs_;
  const auto size = static_cast<uint32_t>(value.size());
  SHOAL_TRY(charge_bytes_write(key, value.size()));
  Record* const cached = cached_bytes_record(b, table, key);
  for (int attempt = 0; attempt < 64; ++attempt) {
    void* found = cached;
    if ((attempt > 0 || cached == nullptr) &&
        table.index_.get(key, &found, nullptr) != BytesTree::Result::kOk) {
      Record* mine = Record::make(size, Tid::kAbsent);
      BytesTree::NodeRef before{};
      uint64_t after = 0;
      if (table.index_.insert_if_absent(key, mine, nullptr, &before, &after) !=
          BytesTree::Result::kOk) {
        Record::free(mine);  // lost a race with another inserter; never published
        continue;
      }
      table.record_bytes_.add(static_cast<int64_t>(Record::alloc_bytes(mine->capacity_words)));
      note_own_insert(before.leaf, before.version, after);
      stage_bytes_write(table, key, mine, buffer_value(value.data(), size), size,
                        WriteKind::kInsert, true);
      cache_bytes_record(b, table, key, mine);
      return Status::Ok();
    }
    auto* rec = static_cast<Record*>(found);
    if (WriteEntry* w = b.writes.empty() ? nullptr : find_write(rec)) {
      return rewrite_bytes(*w, value, mode);
    }
    const uint64_t word = rec->word.load(std::memory_order_acquire);
    if (word & Tid::kUnlinked) continue;  // removed meanwhile: look up again
    // A blind overwrite of a present record needs no stable word (its lock at commit decides);
    // "absent" and "present" as answers do, and a locked record's is being decided.
    if ((word & Tid::kLock) && ((word & Tid::kAbsent) || mode == BytesWriteMode::kInsertOnly)) {
      return Status::Aborted();
    }
    WriteKind kind = WriteKind::kPut;
    if (word & Tid::kAbsent) {
      // Absent: we take the placeholder (or tombstone) over; "absent" is a read of it.
      b.reads.push_back(ReadEntry{rec, word});
      b.max_seen_version = std::max(b.max_seen_version, Tid::version(word));
      kind = WriteKind::kInsert;
    } else if (mode == BytesWriteMode::kInsertOnly) {
      b.reads.push_back(ReadEntry{rec, word});  // present: a read of existence
      b.max_seen_version = std::max(b.max_seen_version, Tid::version(word));
      return Status::AlreadyExists();
    }
    stage_bytes_write(table, key, rec, buffer_value(value.data(), size), size, kind, false);
    cache_bytes_record(b, table, key, rec);
    return Status::Ok();
  }
  return Status::Aborted();
}

Status Txn::charge_bytes_write(std::string_view key, size_t value_bytes) {
  const size_t after = bufs_->bytes_written + write_cost(key, value_bytes);
  if (after > kBytesTxnWriteBytesMax) {
    return Status::InvalidArgument("transaction writes more than " +
                                   std::to_string(kBytesTxnWriteBytesMax) +
                                   " bytes of byte keys and values");
  }
  bufs_->bytes_written = after;
  return Status::Ok();
}

Status Txn::remove(BytesTable& table, std::string_view key) {
  SHOAL_TRY(check_key(key));
  if (table.read_only()) return refuse_read_only(table);
  SHOAL_TRY(charge_bytes_write(key, 0));
  TxnBuffers& b = *bufs_;
  for (int attempt = 0; attempt < 64; ++attempt) {
    Record* rec = lookup_bytes(table, key);
    if (rec == nullptr) return Status::NotFound();
    if (WriteEntry* w = b.writes.empty() ? nullptr : find_write(rec)) {
      if (w->kind == WriteKind::kRemove) return Status::NotFound();
      w->kind = WriteKind::kRemove;
      w->value = nullptr;
      w->size_bytes = 0;
      return Status::Ok();
    }
    const uint64_t word = rec->word.load(std::memory_order_acquire);
    if (word & Tid::kUnlinked) continue;  // removed meanwhile: look up again
    if (word & Tid::kAbsent) return absent_seen(rec, word);
    stage_bytes_write(table, key, rec, nullptr, 0, WriteKind::kRemove, false);
    return Status::Ok();
  }
  return Status::Aborted();
}

Status Txn::scan_bytes(BytesTable& table, const BytesScan& scan, BytesVisit visit, void* ctx) {
  if (scan.limit == 0) return Status::Ok();
  if (scan.start.size() > kBytesKeyBytesMax || (scan.end && scan.end->size() > kBytesKeyBytesMax)) {
    return Status::InvalidArgument("scan bound over the key size limit");
  }
  if (scan.end && *scan.end <= scan.start) return Status::Ok();
  TxnBuffers& b = *bufs_;
  const size_t prefix_bytes = std::min<size_t>(scan.value_prefix_bytes, kBytesValueBytesMax);
  if (b.scratch.size() * 8 < prefix_bytes) b.scratch.resize(prefix_bytes / 8 + 1);
  const bool recorded = !table.read_only();
  size_t delivered = 0;
  Status status;
  auto on_leaf = [&](const BytesTree::NodeRef& ref) {
    if (recorded) record_node(ref.leaf, ref.version, &BytesTree::leaf_version);
  };
  auto on_entry = [&](std::string_view key, void* value) -> bool {
    if (scan.end && key >= *scan.end) return false;
    if (!scan.start_inclusive && key == scan.start) return true;
    auto* rec = static_cast<Record*>(value);
    const char* data = reinterpret_cast<const char*>(b.scratch.data());
    uint32_t size = 0;
    uint64_t version = 0;
    if (WriteEntry* w = b.writes.empty() ? nullptr : find_write(rec)) {
      if (w->kind == WriteKind::kRemove) return true;
      data = reinterpret_cast<const char*>(w->value);
      size = w->size_bytes;
    } else {
      const uint64_t word =
          recorded
              ? observe(rec, b.scratch.data(), static_cast<uint32_t>(prefix_bytes), &size)
              : rec->stable_read(b.scratch.data(), static_cast<uint32_t>(prefix_bytes), &size, 0);
      if (word & Tid::kLock) {
        status = Status::Aborted();
        return false;
      }
      if (word & Tid::kStateMask) return true;
      version = Tid::version(word);
    }
    ++delivered;
    const BytesEntry entry{key, std::string_view(data, std::min<size_t>(size, prefix_bytes)), size,
                           version};
    return visit(ctx, entry) && delivered < scan.limit;
  };
  // The tree's bound is inclusive; the key equal to an exclusive end is skipped above.
  table.index_.scan(scan.start, scan.end, on_entry, on_leaf);
  if (recorded) note_removes_seen(table);  // after the scan: it saw their unlinks
  return status;
}

}  // namespace shoal::txn

// BytesTable: an engine table of byte-string keys (1 B to 8 KiB, memcmp order) and values of
// 0 B to kBytesValueBytesMax, beside the fixed-key Table<K>s, under the same Silo OCC.
// Include src/txn/engine.h, not this file.
//
// Index: a BytesTree (src/index/bytes_tree.h) from key to Record. Each record is allocated for
// its own value (Record::make), so a 1 MiB value costs one allocation and the fixed-key tables'
// paths are unchanged. Phantom protection is the tree's leaf versions: a miss or a scan records
// the leaves it read in the node set (any layer of the tree), a later insert or remove of a key
// they vouch for changes one of them.
//
// Transactions use the Txn calls of engine.h ("Byte-key tables"):
//   get(table, key, &value, &version)     Ok / NotFound (version: TID, or 0 when absent)
//   put(table, key, value)                insert or overwrite
//   insert(table, key, value)             AlreadyExists if present
//   remove(table, key)                    NotFound if absent
//   scan(table, BytesScan{...}, fn)       ascending; fn(const BytesEntry&) -> bool
// with the rules of Table<K>: inserts put an absent placeholder into the index at once
// (concurrent inserts of the key conflict on it) and propose TIDs above the table's
// removed_tid_max_; removes unlink at commit; a transaction sees its own writes.
//
// Untyped keys (TableBase's key_words, the log, replay, checkpoints): a packed key, word 0 the
// key's length in bytes, then its bytes zero padded to whole words (pack_key). key_words() is 0.
//
// Threads: as Table<K> (shared; created before workers start). Replication: apply_replicated
// as Table<K>'s; a BytesTable never receives patches (writers log its puts whole).
// Not done: snapshot reads (SnapshotReader) of a BytesTable; descending scans.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "src/index/bytes_tree.h"

namespace shoal::txn {

inline constexpr size_t kBytesKeyBytesMax = BytesTree::kKeyBytesMax;
// A Redis string of 1 MiB with its stored header (src/resp/value_format.h), and room to spare.
inline constexpr uint32_t kBytesValueBytesMax = (1u << 20) + 64;
// What one transaction may write to byte-key tables: the sum over its put/insert/remove calls
// of key bytes + value bytes + kBytesWriteOverheadBytes (a call beyond it is refused with
// InvalidArgument). It bounds the transaction's replication log record, which must fit one
// log entry (src/repl/log_format.h: kLogLargeEntryBytes): one largest value with its key, or
// many smaller writes. The overhead is a write's log header and key padding.
inline constexpr size_t kBytesWriteOverheadBytes = 40;
inline constexpr size_t kBytesTxnWriteBytesMax = (1u << 20) + (64u << 10);
// Words of a packed key of key_bytes bytes; the most a packed key takes.
inline constexpr size_t packed_key_words(size_t key_bytes) {
  return 1 + (key_bytes + 7) / 8;
}
inline constexpr size_t kPackedKeyWordsMax = packed_key_words(kBytesKeyBytesMax);
// Writes key packed into out (packed_key_words(key.size()) words).
inline void pack_key(std::string_view key, uint64_t* out) {
  const size_t words = packed_key_words(key.size());
  out[0] = key.size();
  out[words - 1] = 0;  // the padding of the last word
  std::memcpy(out + 1, key.data(), key.size());
}
// Words of an untyped key of a table whose key_words() is table_key_words: those, or for a
// BytesTable (0) the packed key's.
inline size_t untyped_key_words(size_t table_key_words, const uint64_t* key) {
  return table_key_words != 0 ? table_key_words : packed_key_words(key[0]);
}
// The bytes of a packed key. REQUIRES: packed[0] <= kBytesKeyBytesMax.
inline std::string_view unpack_key(const uint64_t* packed) {
  return {reinterpret_cast<const char*>(packed + 1), static_cast<size_t>(packed[0])};
}

// A transactional scan's range and cut: keys k with start <= k (start < k when
// !start_inclusive) and, when end is set, k < end; at most `limit` of them; each value cut to
// its first value_prefix_bytes bytes (BytesEntry::value_bytes has its full size).
struct BytesScan {
  std::string_view start = {};  // empty: from the smallest key
  bool start_inclusive = true;
  std::optional<std::string_view> end = std::nullopt;  // exclusive; nullopt: to the largest key
  size_t limit = 0;
  size_t value_prefix_bytes = kBytesValueBytesMax;
};

// One entry a scan delivers. The views are valid only during the callback.
struct BytesEntry {
  std::string_view key;
  std::string_view value;  // at most BytesScan::value_prefix_bytes of it
  uint32_t value_bytes;    // the value's full size
  uint64_t version;        // commit TID; 0 for a key this transaction wrote
};

class BytesTable final : public TableBase {
 public:
  using TableBase::TableBase;
  ~BytesTable() override;
  size_t key_words() const override { return 0; }
  size_t record_count() const override { return index_.size(); }
  // Records only: the tree does not count its nodes (bytes_tree.h, "Not done").
  size_t memory_bytes() const override { return static_cast<size_t>(record_bytes_.sum()); }
  Status txn_get(Txn& txn, const uint64_t* key_words, void* out, uint32_t out_bytes,
                 uint32_t* size_out) override;
  Status txn_put(Txn& txn, const uint64_t* key_words, const void* value,
                 uint32_t size_bytes) override;
  Status txn_insert(Txn& txn, const uint64_t* key_words, const void* value,
                    uint32_t size_bytes) override;
  Status txn_remove(Txn& txn, const uint64_t* key_words) override;
  using TableBase::apply_replicated;
  using TableBase::apply_replicated_patch;
  // REQUIRES (besides TableBase's): size_bytes <= kBytesValueBytesMax. No leaf hints.
  bool apply_replicated(const uint64_t* key_words, WriteKind kind, const void* value,
                        uint32_t size_bytes, uint64_t tid, void* known,
                        const void* leaf_hint) override;
  // Never called: the log refuses patches of byte keys (asserts).
  bool apply_replicated_patch(const uint64_t* key_words, uint64_t base_tid, uint32_t size_bytes,
                              PatchFn patch, void* ctx, uint64_t tid, void* known) override;
  // No prefetching descents in a BytesTree: the descent is over at once, knowing nothing.
  void prefetch_start(const uint64_t* key_words, BTreePrefetch* p) const override;
  bool prefetch_step(BTreePrefetch* p) const override;
  bool prefetch_jump(BTreePrefetch* p, const void* finger) const override;
  // key_words: packed keys.
  void scan_committed(const ScanFn& fn) const override;
  size_t purge_tombstones() override;

  // Non-transactional insert for loaders and tests. REQUIRES: no concurrent transactions.
  Status load(std::string_view key, std::string_view value);
  // Visits every live record in key order: fn(key, value, version) -> bool (false stops).
  // REQUIRES: quiescent.
  void for_each_committed(
      const std::function<bool(std::string_view, std::string_view, uint64_t)>& fn) const;

 private:
  friend class Txn;
  friend struct BytesTableOps;
  // Visits every record in key order, tombstones and placeholders too: fn(key, rec) -> bool.
  template <class Fn>
  void scan_records(Fn&& fn) const;
  BytesTree index_;
};

template <typename Fn>
Status Txn::scan(BytesTable& table, const BytesScan& scan, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  return scan_bytes(
      table, scan,
      [](void* ctx, const BytesEntry& entry) -> bool { return (*static_cast<F*>(ctx))(entry); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace shoal::txn

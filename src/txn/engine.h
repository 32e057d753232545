// The single-shard transactional engine: tables over the concurrent index, Silo-style OCC.
//
// Threads: an Engine is shared by all worker threads. Each worker thread owns one Worker (and
// its Txn); a Txn is never touched by two threads. Tables are created before workers start
// (REQUIRES: no concurrent transactions during create_table / bulk load).
//
// A transaction is a registered stored procedure: a function of (Txn&, args) that reads and
// writes through the Txn. Worker::run executes it, commits with Silo's protocol and retries
// on conflict (bounded). Commit protocol (docs/ARCHITECTURE.md, "The transaction path on one
// shard"):
//   1. lock the write set in a global order (record address);
//   2. read the global epoch; compute the commit TID (> every TID read or overwritten, > this
//      worker's previous TID, in the current epoch);
//   3. validate the read set (TID unchanged, not locked by others) and the node set (leaf
//      versions unchanged: no phantoms);
//   4. install the writes with the new TID and dependency vector, unlocking each record.
// Serializable: the commit TID order is a serial order of committed transactions.
//
// Reads copy values out (the caller's buffer); writes are buffered in the Txn until commit.
// A transaction sees its own writes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shoal/status.h"
#include "src/base/ebr.h"
#include "src/base/env.h"
#include "src/base/striped_counter.h"
#include "src/index/btree.h"
#include "src/index/key.h"
#include "src/txn/depvec.h"
#include "src/txn/record.h"

namespace shoal::txn {

class Engine;
class Txn;
class BytesTable;
struct BytesScan;
struct BytesEntry;
enum class WriteKind : uint8_t { kPut, kInsert, kRemove };
template <size_t K>
struct TableOpsFor;
// A transaction's read, write and node sets (defined in engine_impl.h).
struct ReadEntry;
struct WriteEntry;
struct NodeEntry;
struct TxnBuffers;

// A table: an ordered map from Key<K> to variable-size values (at most kValueBytesMax).
class TableBase {
 public:
  static constexpr uint32_t kValueBytesMax = 4096;
  TableBase(std::string name, uint32_t id) : name_(std::move(name)), id_(id) {}
  virtual ~TableBase() = default;
  const std::string& name() const { return name_; }
  uint32_t id() const { return id_; }
  // Words of a Key<K> table's keys; 0 for a BytesTable, whose untyped keys (below) are packed
  // byte strings (bytes_table.h: pack_key).
  virtual size_t key_words() const = 0;
  virtual size_t record_count() const = 0;
  virtual size_t memory_bytes() const = 0;
  // Bytes of older versions kept for snapshot reads (part of memory_bytes()).
  size_t version_chain_bytes() const { return static_cast<size_t>(chain_bytes_.sum()); }

  // Read-only from now on (TPC-C's ITEM and the customer-by-name index: loaded, never
  // written). Reads of a read-only table are not recorded, so they cost no validation and can
  // never conflict; transactional writes to it are refused (InvalidArgument). Replication's
  // apply_replicated still installs into it (a follower's copy of the load).
  // REQUIRES: no transaction runs on the engine while it is called (after the load, before
  // workers start: thread start orders it before every read).
  void make_read_only() { read_only_ = true; }
  bool read_only() const { return read_only_; }

  // Untyped access for code that knows a table only by id (remote requests, log replay):
  // keys are key_words() 64-bit words (a BytesTable: a packed byte key). The same semantics as
  // the typed Txn calls (a BytesTable's txn_put inserts or overwrites).
  virtual Status txn_get(Txn& txn, const uint64_t* key_words, void* out, uint32_t out_bytes,
                         uint32_t* size_out) = 0;
  virtual Status txn_put(Txn& txn, const uint64_t* key_words, const void* value,
                         uint32_t size_bytes) = 0;
  virtual Status txn_insert(Txn& txn, const uint64_t* key_words, const void* value,
                            uint32_t size_bytes) = 0;
  virtual Status txn_remove(Txn& txn, const uint64_t* key_words) = 0;

  // ---- Replication (followers; src/repl/follower.h) ----
  // Installs one replicated write at commit TID `tid` if it is newer than what the key holds
  // (replay is idempotent and may see a key's writes from different streams out of TID
  // order). A remove leaves a tombstone (an absent record carrying `tid`) in the index, so an
  // older write of the key replayed later from another stream stays dead; tombstones are
  // invisible to reads, peek, for_each and scan_committed. Returns true when applied, false
  // when skipped as not newer. Safe against concurrent replay of other keys; two replayers of
  // one key serialize on its record lock. REQUIRES: the calling thread holds an ebr::Guard
  // (a replayer takes one per log entry, not one per write); no read-write transactions run on
  // this engine (a follower's engine); size_bytes <= kValueBytesMax; kRemove has no value.
  // `known`: the record the key led to a moment ago (replay's prefetch, BTreePrefetch::value,
  // found under the caller's current guard), used instead of an index lookup; a record
  // replaced since then is marked unlinked, and the install then looks the key up as usual.
  // nullptr: look it up. `leaf_hint`: where that prefetch ended (BTreePrefetch::leaf, same
  // guard), or nullptr: an insert of an absent key goes straight into it when it still covers
  // the key and has room (BasicBTree::insert_if_absent_at), without a second descent.
  virtual bool apply_replicated(const uint64_t* key_words, enum WriteKind kind, const void* value,
                                uint32_t size_bytes, uint64_t tid, void* known,
                                const void* leaf_hint) = 0;
  bool apply_replicated(const uint64_t* key_words, enum WriteKind kind, const void* value,
                        uint32_t size_bytes, uint64_t tid, void* known) {
    return apply_replicated(key_words, kind, value, size_bytes, tid, known, nullptr);
  }
  bool apply_replicated(const uint64_t* key_words, enum WriteKind kind, const void* value,
                        uint32_t size_bytes, uint64_t tid) {
    return apply_replicated(key_words, kind, value, size_bytes, tid, nullptr, nullptr);
  }
  // Installs a replicated in-place update of the present value of `size_bytes`: `patch(ctx,
  // data)` rewrites some of its bytes under the record lock, and the record gets `tid`.
  // Skipped (false) when the key already holds `tid` or newer (idempotent replay). The caller
  // guarantees, by replaying the key's writes in TID order, that the key holds the version the
  // update was computed against: `base_tid` or, for a bootstrapped row, a later bootstrap TID
  // (REQUIRES, asserted: present, of size_bytes, version >= base_tid). Same locking and guard
  // rules as apply_replicated, and the same `known`.
  using PatchFn = void (*)(void* ctx, void* data);
  virtual bool apply_replicated_patch(const uint64_t* key_words, uint64_t base_tid,
                                      uint32_t size_bytes, PatchFn patch, void* ctx, uint64_t tid,
                                      void* known) = 0;
  bool apply_replicated_patch(const uint64_t* key_words, uint64_t base_tid, uint32_t size_bytes,
                              PatchFn patch, void* ctx, uint64_t tid) {
    return apply_replicated_patch(key_words, base_tid, size_bytes, patch, ctx, tid, nullptr);
  }
  // Replay's prefetching (src/repl/replay.cc): the index descent to key_words cut into steps
  // (BasicBTree::prefetch_step), so the replayer overlaps the cache misses of its next writes
  // with the one it installs. prefetch_step returns false once the descent is over. REQUIRES:
  // the ebr::Guard held across a descent's steps; key_words holds key_words() words.
  virtual void prefetch_start(const uint64_t* key_words, BTreePrefetch* p) const = 0;
  // A descent in progress jumps to `finger`, the leaf an earlier descent into this table
  // ended at under the same guard (BTreePrefetch::leaf), if it covers the key
  // (BasicBTree::prefetch_jump); returns whether it did. A BytesTable never does.
  virtual bool prefetch_jump(BTreePrefetch* p, const void* finger) const = 0;
  virtual bool prefetch_step(BTreePrefetch* p) const = 0;
  // Visits every live (committed, not removed) record in key order:
  // fn(key_words, value, size_bytes, version) returns false to stop. REQUIRES: quiescent.
  using ScanFn = std::function<bool(const uint64_t* key_words, const void* value,
                                    uint32_t size_bytes, uint64_t version)>;
  virtual void scan_committed(const ScanFn& fn) const = 0;
  // A follower's engine becoming a leader's (Engine::start_leading): removes from the index
  // the tombstones replay left (absent records kept so that an older replayed write stays
  // dead) that carry no version chain; returns how many. A leader's own removes unlink at once,
  // and its scans (TPC-C Delivery's oldest NEW-ORDER) would otherwise step over every row ever
  // delivered. REQUIRES: quiescent (no replay, no transactions).
  virtual size_t purge_tombstones() = 0;
  // Replay's look at what a write is about to overwrite (src/repl/replay.h, ReplayObserver):
  // the key's newest version, its TID in *version_out (0 when never written) and, if present,
  // its value (at most out_bytes copied; its size in *size_out). Ok: present; NotFound: absent
  // (a tombstone's TID, or 0); NotSupported: this table cannot say (a BytesTable). `known`: as
  // apply_replicated's (replay's prefetch found it: no index descent), or nullptr. REQUIRES:
  // the replay thread of a follower's engine (no other writer), or quiescent (Table::peek); an
  // ebr::Guard held.
  [[nodiscard]] virtual Status peek_replicated(const uint64_t* key_words, const void* known,
                                               void* out, uint32_t out_bytes, uint32_t* size_out,
                                               uint64_t* version_out) const {
    (void)key_words, (void)known, (void)out, (void)out_bytes, (void)size_out;
    *version_out = 0;
    return Status::NotSupported("peek_replicated");
  }
  // A promoted replica's takeover: the key's newest version, if it is `tid` and present, gets
  // the dependency vector `deps` that replay did not install (its writer logged it), so that
  // the new leader's transactions reading it inherit it, as they would on the leader that
  // wrote it. Returns whether it did. REQUIRES: quiescent (no transactions, no replay).
  virtual bool set_takeover_deps(const uint64_t* key_words, uint64_t tid, const DepVec& deps) {
    (void)key_words, (void)tid, (void)deps;
    return false;
  }

 protected:
  friend class Txn;
  friend class Engine;
  // The body of apply_replicated over any index. `at` is bound to the key: at.lookup() ->
  // Record* (nullptr: absent), at.insert(Record*) -> bool (false: the key is held, nothing
  // changed), at.replace(Record*) -> bool (false: absent). Defined in engine_impl.h.
  template <class IndexAt>
  bool install_replicated(const IndexAt& at, WriteKind kind, const void* value, uint32_t size_bytes,
                          uint64_t tid, void* known);
  // With version chains: pushes rec's current version (tombstones too) onto its chain, for
  // snapshot readers (src/txn/snapshot.h). REQUIRES: rec locked by the caller.
  void push_replicated_version(Record* rec);
  // Cuts rec's chain below the newest version <= the engine's version horizon (the head's
  // new version being head_tid) and retires the cut part. REQUIRES: rec locked by the caller.
  void trim_chain(Record* rec, uint64_t head_tid);
  // purge_tombstones: rec, a tombstone, has just left the index; retire it.
  void retire_purged(Record* rec);
  Engine* engine_ = nullptr;     // set by create_table / create_bytes_table
  StripedCounter record_bytes_;  // bytes of records (and their headers) in this table
  StripedCounter chain_bytes_;   // of them, bytes of older versions kept for snapshot reads
  // The largest TID that removed a key of this table. Removed records leave the index at once,
  // taking their TID with them; an insert of the same key later must still get a larger TID,
  // or TID order (the log's replay order, src/repl) would put the insert before the remove.
  // So inserts propose TIDs above this (one load per insert; removes raise it).
  std::atomic<uint64_t> removed_tid_max_{0};
  bool read_only_ = false;

 private:
  std::string name_;
  uint32_t id_;
};

// What a committed transaction wrote, for logging and shipping (valid until the Txn's next
// begin()).
struct WriteView {
  uint32_t table_id;
  const uint64_t* key_words;
  uint32_t key_word_count;
  WriteKind kind;
  const void* value;  // nullptr for kRemove
  uint32_t size_bytes;
  // kPut or kRemove of a Table<K> only, when the worker keeps old values (a commit hook is
  // installed): the bytes the write overwrote or removed (else nullptr) and their version, so a
  // log can carry only what a put changed, and a discard can put a removed row back.
  const void* old_value = nullptr;
  uint32_t old_size_bytes = 0;
  uint64_t base_tid = 0;
  // A BytesTable's write: key_words is a packed byte key (bytes_table.h: unpack_key).
  bool bytes_key = false;
};

template <size_t K>
class Table final : public TableBase {
 public:
  using KeyT = Key<K>;
  using TableBase::TableBase;
  ~Table() override;
  size_t key_words() const override { return K; }
  size_t record_count() const override { return index_.size(); }
  size_t memory_bytes() const override {
    return index_.memory_bytes() + static_cast<size_t>(record_bytes_.sum());
  }
  Status txn_get(Txn& txn, const uint64_t* key_words, void* out, uint32_t out_bytes,
                 uint32_t* size_out) override;
  Status txn_put(Txn& txn, const uint64_t* key_words, const void* value,
                 uint32_t size_bytes) override;
  Status txn_insert(Txn& txn, const uint64_t* key_words, const void* value,
                    uint32_t size_bytes) override;
  Status txn_remove(Txn& txn, const uint64_t* key_words) override;
  using TableBase::apply_replicated;
  using TableBase::apply_replicated_patch;
  bool apply_replicated(const uint64_t* key_words, WriteKind kind, const void* value,
                        uint32_t size_bytes, uint64_t tid, void* known,
                        const void* leaf_hint) override;
  bool apply_replicated_patch(const uint64_t* key_words, uint64_t base_tid, uint32_t size_bytes,
                              PatchFn patch, void* ctx, uint64_t tid, void* known) override;
  void prefetch_start(const uint64_t* key_words, BTreePrefetch* p) const override {
    index_.prefetch_start(key_words, p);
  }
  bool prefetch_jump(BTreePrefetch* p, const void* finger) const override {
    return index_.prefetch_jump(p, finger);
  }
  bool prefetch_step(BTreePrefetch* p) const override { return index_.prefetch_step(p); }
  void scan_committed(const ScanFn& fn) const override;
  size_t purge_tombstones() override;
  Status peek_replicated(const uint64_t* key_words, const void* known, void* out,
                         uint32_t out_bytes, uint32_t* size_out,
                         uint64_t* version_out) const override;
  bool set_takeover_deps(const uint64_t* key_words, uint64_t tid, const DepVec& deps) override;
  static KeyT key_of(const uint64_t* words) {
    KeyT k;
    std::copy(words, words + K, k.w.begin());
    return k;
  }

  // Non-transactional insert for loaders. REQUIRES: no concurrent transactions on this table.
  Status load(const KeyT& key, const void* value, uint32_t size_bytes);
  template <typename T>
  Status load(const KeyT& key, const T& value) {
    return load(key, &value, sizeof(T));
  }

  // Non-transactional read of the latest committed value, for checks after a run.
  // REQUIRES: quiescent (no concurrent transactions).
  Status peek(const KeyT& key, void* out, uint32_t size_bytes) const;
  // Visits the newest version of key, then each older one kept in its chain:
  // fn(data, word, deps) (deps nullptr: the version depends on this shard only).
  // REQUIRES: quiescent.
  Status peek_chain_for_tests(
      const KeyT& key, const std::function<void(const void*, uint64_t, const DepVec*)>& fn) const;
  // Non-transactional ascending scan of committed values in [lo, hi]; fn(key, value, size)
  // returns false to stop. REQUIRES: quiescent.
  void for_each(const KeyT& lo, const KeyT& hi,
                const std::function<bool(const KeyT&, const void*, uint32_t)>& fn) const;

 private:
  friend class Txn;
  friend class Engine;
  friend class SnapshotReader;
  friend struct TableOpsFor<K>;
  BTree<K> index_;
};

struct EngineOptions {
  // How often the global epoch advances (Silo: 40 ms).
  uint64_t epoch_interval_ns = 40'000'000;
  // Run the background epoch ticker. Off under the simulator, which advances epochs itself
  // (advance_epoch_for_tests) so runs stay deterministic.
  bool epoch_ticker = true;
  // Keep chains of older versions (needed by snapshot reads on followers).
  bool keep_version_chains = false;
  // How long (in pause instructions, ~10-40 ns each) a reader or a committer waits on a locked
  // record before calling it a conflict. On one shard locks live for an install (well under a
  // microsecond), so a short wait beats an abort; across shards they live for network round
  // trips, and a worker's event loop must not stall on them: distributed setups set this low.
  uint32_t lock_wait_spins_max = 1 << 12;
  // Conflict retries before Worker::run gives up with Aborted.
  uint32_t max_retries = 1000;
  // Our shard id in dependency vectors.
  uint32_t shard_id = 0;
  // Track dependency vectors on versions (docs/ARCHITECTURE.md, "Across shards"): a version written
  // by a transaction that depends on other shards carries the vector, and readers merge it. Off
  // when nothing consumes them: a cluster without replication has its vectorized watermark at
  // the head of every shard, so every entry is covered at once and would only cost an
  // allocation per written record and a pointer chase per read.
  bool track_dependencies = true;
  // Test-only: skip read validation (so the serializability checker can be shown to catch it).
  bool unsafe_skip_read_validation = false;
  // The destructor frees everything EBR holds, every thread's, ignoring epochs
  // (ebr::drain_all_for_tests): right for a process's only engine at its end, and what tests
  // count on. False for an engine destroyed while another one runs in the process (a lone
  // replica's compaction rebuild, src/repl/compaction.h): draining would free versions the
  // other engine's readers may still hold; what this one retired is freed by epochs instead.
  bool drain_reclamation_on_destroy = true;
};

// A stored procedure: reads `args`, may write `result`; returns Ok to commit, UserAbort to roll
// back deliberately, Aborted (from a Txn call) to retry.
using Procedure = Status (*)(Txn& txn, const void* args, void* result);

struct TxnStats {
  uint64_t committed = 0;
  uint64_t conflict_aborts = 0;  // each retry counts once
  uint64_t user_aborts = 0;
};

// Per-transaction state. Reused across transactions by its Worker; memory is kept between
// transactions, so steady state does not allocate.
class Txn {
 public:
  // One per in-flight transaction; Workers own one, a 2PC participant one per remote
  // transaction it serves. Owned and used by one thread at a time.
  explicit Txn(Engine* engine, uint64_t seed);
  ~Txn();
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;

  // Reads key into out (size_bytes = capacity of out; the value's size must equal it unless
  // `size_out` is given). NotFound if absent; Aborted on a detected conflict.
  template <size_t K>
  Status get(Table<K>& table, const Key<K>& key, void* out, uint32_t size_bytes,
             uint32_t* size_out = nullptr);
  template <typename T, size_t K>
  Status get(Table<K>& table, const Key<K>& key, T* out) {
    return get(table, key, out, sizeof(T));
  }
  // Overwrites an existing key. NotFound if absent.
  template <size_t K>
  Status put(Table<K>& table, const Key<K>& key, const void* value, uint32_t size_bytes);
  template <typename T, size_t K>
  Status put(Table<K>& table, const Key<K>& key, const T& value) {
    return put(table, key, &value, sizeof(T));
  }
  // Inserts a new key. AlreadyExists if present.
  template <size_t K>
  Status insert(Table<K>& table, const Key<K>& key, const void* value, uint32_t size_bytes);
  template <typename T, size_t K>
  Status insert(Table<K>& table, const Key<K>& key, const T& value) {
    return insert(table, key, &value, sizeof(T));
  }
  // Deletes a key. NotFound if absent.
  template <size_t K>
  Status remove(Table<K>& table, const Key<K>& key);

  // Ascending scan over [lo, hi]: fn(const Key<K>&, const void* value, uint32_t size) -> bool
  // (false stops). At most `limit` entries. The range is protected against phantoms up to the
  // last key delivered (or hi).
  template <size_t K, typename Fn>
  Status scan(Table<K>& table, const Key<K>& lo, const Key<K>& hi, size_t limit, Fn&& fn);
  // Descending scan from hi down to lo.
  template <size_t K, typename Fn>
  Status rscan(Table<K>& table, const Key<K>& hi, const Key<K>& lo, size_t limit, Fn&& fn);

  // ---- Byte-key tables (BytesTable, src/txn/bytes_table.h) ----
  // Keys of 1..kBytesKeyBytesMax bytes, values of 0..kBytesValueBytesMax bytes, and at most
  // kBytesTxnWriteBytesMax written per transaction; others are refused (InvalidArgument). Any call
  // may return Aborted: a conflict, abort() and retry. The transaction sees its own writes (get,
  // remove and scan after put/remove). Plain synchronous calls on this Txn, usable wherever a Txn
  // is (a Worker's procedure, a 2PC fragment). Reads key: Ok with *value replaced by the value and
  // *version its commit TID; NotFound with *version the TID of the absent record that holds the
  // key's place (a tombstone a follower's replay left), else 0. A key this transaction wrote
  // reports version 0.
  Status get(BytesTable& table, std::string_view key, std::string* value, uint64_t* version);
  // Inserts the key or overwrites its value.
  Status put(BytesTable& table, std::string_view key, std::string_view value);
  // Inserts a new key. AlreadyExists if present.
  Status insert(BytesTable& table, std::string_view key, std::string_view value);
  // Deletes a key. NotFound if absent (the absence is then part of what commit validates).
  Status remove(BytesTable& table, std::string_view key);
  // Ascending scan of scan.start .. scan.end (BytesScan), at most scan.limit entries:
  // fn(const BytesEntry&) -> bool (false stops). Protected against phantoms up to the last key
  // delivered (or the range's end).
  template <typename Fn>
  Status scan(BytesTable& table, const BytesScan& scan, Fn&& fn);

  // Whether install() keeps an arena copy of what each put overwrites or remove takes away
  // (WriteView::old_value), so a commit hook can log a put as a patch of its changed bytes
  // (src/repl/appender.h) and journal a remove for its undoing (discard_journal.h).
  // Worker::set_commit_hook sets it; whoever logs from a Txn it drives itself (a 2PC
  // participant, a shard server's terminals) sets it the same way. REQUIRES: between
  // transactions.
  void set_keep_old_values(bool keep) { keep_old_values_ = keep; }

  // ---- Lifecycle: Worker::run drives these; a 2PC participant drives them itself. ----
  // Starts a transaction (takes the EBR guard). REQUIRES: the previous one ended.
  void begin();
  // certify() then install_and_unlock() with the proposed TID.
  Status commit();
  // Transaction certification, the participant's half of two-phase commit: lock_write_set()
  // then validate_read_set(). Across shards a coordinator must finish locking on every
  // participant before any of them validates (else write skew slips between shards), so the
  // two steps are also offered apart. On Ok the locks are held until install_and_unlock() or
  // release_certified(); on error nothing is held.
  Status certify(uint64_t* proposed_tid);
  // Locks the write set and proposes this shard's commit TID (its timestamp in 2PC).
  // REQUIRES: execution (every read this shard serves) has ended.
  Status lock_write_set(uint64_t* proposed_tid);
  // Validates reads and nodes. REQUIRES: lock_write_set() returned Ok.
  Status validate_read_set();
  // True when every record this transaction read is one it holds locked for writing and it
  // read no index nodes (no range scan of a writable table, no miss): then no other
  // transaction can change what it read until it installs or releases, so validating now
  // stays true until then (coordinator.h C6). REQUIRES: lock_write_set() returned Ok.
  bool reads_pinned() const;
  // Installs the writes at `tid` and releases the locks; each new version carries the
  // transaction's dependency vector (merged with `vector`, the coordinator's, if given).
  // REQUIRES: certify() returned Ok and tid >= the TID it proposed (a coordinator may raise
  // it to the transaction's vector entry for this shard).
  void install_and_unlock(uint64_t tid, const DepVec* vector);
  // Gives up a certified transaction: releases its locks (then call abort()).
  void release_certified();
  // REQUIRES: commit() failed or was not called; no locks held.
  void abort();
  // Ends the transaction (drops the EBR guard).
  void end();

  // Visits the write set: fn(const WriteView&). After commit() it is what was installed.
  template <typename Fn>
  void for_each_write(Fn&& fn) const;

  // The transaction's dependency vector so far (merged over every version read).
  const DepVec& deps() const { return deps_; }
  // The largest version this transaction has read or overwritten so far.
  uint64_t max_seen_version() const;
  // The commit TID of the last committed transaction of this Txn object.
  uint64_t last_commit_tid() const { return last_tid_; }
  // Every TID this Txn proposes from now on is above *floor, read at each proposal. A shard
  // server's worker logs the commits of several Txns (its own, its 2PC participant's) on one
  // replication stream, which promises its TIDs only increase (src/repl/appender.h): they all
  // share the stream's floor. nullptr: none. REQUIRES: *floor outlives this Txn's use of it
  // and is written only by this Txn's thread.
  void set_tid_floor(const uint64_t* floor) { tid_floor_ = floor; }
  uint64_t tid_floor() const { return tid_floor_ != nullptr ? *tid_floor_ : 0; }
  Rng& rng() { return rng_; }
  Engine& engine() { return *engine_; }

 private:
  friend class Engine;
  friend class Worker;

  // True when every read and node observation still holds.
  bool validate(bool holding_locks);
  bool locked_by_me(const Record* rec) const;
  void install(uint64_t tid);
  void push_old_version(Record* rec);
  void set_version_deps(Record* rec);
  void install_grown(WriteEntry& w, uint64_t tid);
  void keep_old_value(WriteEntry& w);
  // Implementation helpers, defined in engine_impl.h.
  // Stable-reads rec into out and records the read; returns the word (kLock set: conflict).
  uint64_t observe(Record* rec, void* out, uint32_t out_bytes, uint32_t* size_out);
  Status read_record(Record* rec, void* out, uint32_t size_bytes, uint32_t* size_out);
  // A write found `rec` holding no committed value (word has kAbsent, not kUnlinked): the key
  // is absent until that insert commits, so the answer NotFound is recorded as a read of it.
  Status absent_seen(Record* rec, uint64_t word);
  // The key's record in the index, or nullptr with the leaf recorded (guarding "absent").
  template <size_t K>
  Record* lookup_for_write(Table<K>& table, const Key<K>& key);
  // Adds `rec` to the write set with a copy of its key (buffered_value: from buffer_value()).
  template <size_t K>
  void stage_write(Table<K>& table, const Key<K>& key, Record* rec, uint64_t* buffered_value,
                   uint32_t size_bytes, WriteKind kind, bool fresh);
  // A read of a read-only table: copied, not recorded (TableBase::make_read_only).
  static Status read_unrecorded(const Record* rec, void* out, uint32_t size_bytes,
                                uint32_t* size_out);
  static Status refuse_read_only(const TableBase& table);
  template <bool kReverse, size_t K, typename Fn>
  Status scan_impl(Table<K>& table, const Key<K>& from, const Key<K>& to, size_t limit, Fn& fn);
  // Byte-key tables (bytes_table.cc).
  enum class BytesWriteMode : uint8_t { kUpsert, kInsertOnly };
  Status write_bytes(BytesTable& table, std::string_view key, std::string_view value,
                     BytesWriteMode mode);
  // An existing write of this transaction to the key's record, turned into a put of value.
  Status rewrite_bytes(WriteEntry& w, std::string_view value, BytesWriteMode mode);
  // Counts a byte-key write against kBytesTxnWriteBytesMax; InvalidArgument beyond it.
  Status charge_bytes_write(std::string_view key, size_t value_bytes);
  // The key's record, or nullptr with the leaf recorded (guarding "absent").
  Record* lookup_bytes(BytesTable& table, std::string_view key);
  // A key found missing (or a range scanned) may owe its absence to a remove that unlinked the
  // key and took its TID along (TableBase::removed_tid_max_). What the transaction saw then
  // depends on that remove: max_seen_version rises to the table's newest one, so that an
  // acknowledgement that waits on it (a GET's reply, a TPC-C Delivery that found no new order)
  // never reports as gone a key whose remove a crash could still lose. Byte-key and fixed-key
  // tables alike. Conservative: any newer remove of the table counts.
  void note_removes_seen(const TableBase& table);
  // Copies rec's value into *value (resized) and records the read; returns the word.
  uint64_t observe_bytes(Record* rec, std::string* value);
  using BytesVisit = bool (*)(void* ctx, const BytesEntry& entry);
  Status scan_bytes(BytesTable& table, const BytesScan& scan, BytesVisit visit, void* ctx);
  void stage_bytes_write(BytesTable& table, std::string_view key, Record* rec,
                         uint64_t* buffered_value, uint32_t size_bytes, WriteKind kind, bool fresh);
  WriteEntry* find_write(const Record* rec);
  uint64_t* buffer_value(const void* value, uint32_t size_bytes);
  void record_node(const void* leaf, uint64_t version, uint64_t (*current)(const void*));
  void note_own_insert(const void* leaf, uint64_t before, uint64_t after);

  Engine* engine_;
  Rng rng_;
  std::unique_ptr<TxnBuffers> bufs_;
  DepVec deps_;
  uint64_t last_tid_ = 0;
  const uint64_t* tid_floor_ = nullptr;  // set_tid_floor
  bool keep_old_values_ = false;  // install() copies what each put or remove overwrites (arena)
};

// Called on the worker's thread after each successful commit (read-only ones included), while
// the Txn still holds what it installed: last_commit_tid(), deps(), for_each_write(). This is
// where a replication stream appends the transaction's log record (src/repl/appender.h).
// A non-ok Status means the transaction is installed here but not logged (the stream stopped,
// e.g. at shutdown): the caller returns that Status instead of Ok (Worker::run, the 2PC
// participant), so it is never reported committed or acknowledged.
// REQUIRES: does not run transactions on the Worker; returns quickly (it is on the commit path).
using CommitHook = Status (*)(void* ctx, const Txn& txn);

// One per worker thread: its Txn, its statistics, and the retry loop.
class Worker {
 public:
  // Installs (or, with nullptr, removes) the commit hook. REQUIRES: on the worker's thread,
  // or before that thread starts.
  void set_commit_hook(CommitHook hook, void* ctx) {
    commit_hook_ = hook;
    commit_hook_ctx_ = ctx;
    txn_.set_keep_old_values(hook != nullptr);  // the hook may log patches
  }
  // Runs procedure `proc` to commit, retrying on conflicts (at most max_retries).
  // Returns Ok (committed), UserAbort (rolled back by the procedure), Aborted (gave up), or
  // the procedure's other error.
  Status run(Procedure proc, const void* args, void* result = nullptr);
  const TxnStats& stats() const { return stats_; }
  Txn& txn() { return txn_; }
  uint32_t id() const { return id_; }

 private:
  friend class Engine;
  Worker(Engine* engine, uint32_t id, uint64_t seed);
  Engine* engine_;
  uint32_t id_;
  Txn txn_;
  TxnStats stats_;
  uint64_t runs_ = 0;
  CommitHook commit_hook_ = nullptr;
  void* commit_hook_ctx_ = nullptr;
};

class Engine {
 public:
  explicit Engine(EngineOptions options = {}, Env* env = &RealEnv::instance());
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // REQUIRES: called before transactions run; name unique.
  template <size_t K>
  Table<K>* create_table(const std::string& name);
  // create_table<K> with K chosen at run time (a follower creating the leader's schema); 0
  // creates a BytesTable. InvalidArgument for key widths no table uses (supported: 0, 1, 2, 3,
  // 4 words).
  [[nodiscard]] Result<TableBase*> create_table_with_key_words(const std::string& name,
                                                               size_t key_words);
  // A table of byte-string keys (bytes_table.h). REQUIRES: as create_table.
  BytesTable* create_bytes_table(const std::string& name);
  TableBase* find_table(const std::string& name) const;
  const std::vector<std::unique_ptr<TableBase>>& tables() const { return tables_; }

  // Each worker thread takes one Worker. REQUIRES: called before the thread starts its work.
  Worker* make_worker();

  // The global epoch (advanced by a background ticker, or by tests).
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  void advance_epoch_for_tests() { epoch_.fetch_add(1, std::memory_order_acq_rel); }
  // A follower's engine becoming a leader's (docs/REPLICATION.md, "Failover"): its commits must
  // take TIDs above every TID the old leader logged, so the epoch jumps to at least `at_least`, and
  // the ticker (off while it followed) starts. `leader_options` (a leader's: dependency tracking,
  // lock waits), when given, replace the follower's; shard_id stays. Call before any worker
  // commits and before any thread but the caller's uses the engine.
  // Replay's tombstones are purged (TableBase::purge_tombstones). Returns how many.
  size_t start_leading(uint64_t at_least_epoch, const EngineOptions* leader_options = nullptr);

  const EngineOptions& options() const { return options_; }
  Env& env() { return *env_; }
  size_t memory_bytes() const;

  // Snapshot reads (src/txn/snapshot.h): older versions at or below the horizon beyond the
  // newest one are no longer needed by any reader; apply_replicated trims chains to it.
  // 0 (the default) trims nothing. Set by SnapshotRegistry (any thread).
  void set_version_horizon(uint64_t tid) { version_horizon_.store(tid, std::memory_order_release); }
  uint64_t version_horizon() const { return version_horizon_.load(std::memory_order_acquire); }
  // Bytes held in older versions (chains), over all tables.
  size_t version_chain_bytes() const;

 private:
  friend class Txn;
  EngineOptions options_;
  Env* env_;
  std::atomic<uint64_t> epoch_{1};
  std::atomic<uint64_t> version_horizon_{0};
  std::atomic<bool> stop_{false};
  std::thread ticker_;
  std::mutex ticker_mu_;  // with ticker_cv_: the destructor wakes the ticker
  std::condition_variable ticker_cv_;
  void start_ticker();
  // The ticker sleeps until `deadline_ns` (env_ time) or until stop_.
  void ticker_sleep_until(uint64_t deadline_ns);
  std::vector<std::unique_ptr<TableBase>> tables_;
  std::mutex workers_mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint32_t> next_worker_id_{0};
};

}  // namespace shoal::txn

#include "src/txn/bytes_table.h"
#include "src/txn/engine_impl.h"

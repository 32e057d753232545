#include "src/txn/engine.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace shoal::txn {

namespace {
constexpr size_t kScratchWords = TableBase::kValueBytesMax / 8 + 1;
// Conflict retries back off with a growing, bounded pause so two workers hammering one
// district row stop colliding in lockstep.
constexpr uint32_t kBackoffPausesMax = 1 << 12;
}  // namespace

// ---- Txn ----

Txn::Txn(Engine* engine, uint64_t seed)
    : engine_(engine), rng_(seed), bufs_(std::make_unique<TxnBuffers>()) {
  bufs_->scratch.resize(kScratchWords);
  bufs_->reads.reserve(256);
  bufs_->writes.reserve(64);
  bufs_->nodes.reserve(64);
}

Txn::~Txn() = default;

uint64_t Txn::max_seen_version() const {
  return bufs_->max_seen_version;
}

void Txn::note_removes_seen(const TableBase& table) {
  TxnBuffers& b = *bufs_;
  b.max_seen_version =
      std::max(b.max_seen_version, table.removed_tid_max_.load(std::memory_order_acquire));
}

void Txn::begin() {
  TxnBuffers& b = *bufs_;
  b.reads.clear();
  b.writes.clear();
  b.nodes.clear();
  b.arena.reset();
  b.max_seen_version = 0;
  b.bytes_written = 0;
  b.last_table = nullptr;
  b.last_rec = nullptr;
  b.last_bytes_table = nullptr;
  deps_.clear();
  b.guard.emplace();
}

WriteEntry* Txn::find_write(const Record* rec) {
  for (WriteEntry& w : bufs_->writes) {
    if (w.rec == rec) return &w;
  }
  return nullptr;
}

uint64_t* Txn::buffer_value(const void* value, uint32_t size_bytes) {
  const uint32_t nwords = Record::words_for(size_bytes == 0 ? 1 : size_bytes);
  uint64_t* copy = bufs_->arena.allocate_words(nwords);
  copy[nwords - 1] = 0;
  std::memcpy(copy, value, size_bytes);
  return copy;
}

void Txn::record_node(const void* leaf, uint64_t version, uint64_t (*current)(const void*)) {
  for (NodeEntry& n : bufs_->nodes) {
    if (n.leaf == leaf) {
      // Seen twice: the first observation stands; a different version now is a conflict that
      // validation will catch.
      return;
    }
  }
  bufs_->nodes.push_back(NodeEntry{leaf, version, current});
}

void Txn::note_own_insert(const void* leaf, uint64_t before, uint64_t after) {
  // Our own insert changed the leaf: if we had seen exactly the version before it, the change
  // is ours and not a phantom, so move our observation forward (Silo does the same).
  for (NodeEntry& n : bufs_->nodes) {
    if (n.leaf == leaf && n.version == before) n.version = after;
  }
}

namespace {
void release_locks(std::vector<WriteEntry>& writes, size_t locked) {
  for (size_t i = 0; i < locked; ++i) writes[i].rec->unlock();
}

// Hands a record that left its index to EBR, and takes it off its table's memory count.
void retire_record(Record* rec, StripedCounter* table_bytes) {
  table_bytes->add(-static_cast<int64_t>(Record::alloc_bytes(rec->capacity_words)));
  ebr::retire(rec, &Record::free);
}
}  // namespace

Status Txn::commit() {
  uint64_t tid = 0;
  SHOAL_TRY(certify(&tid));
  install_and_unlock(tid, nullptr);
  return Status::Ok();
}

Status Txn::certify(uint64_t* proposed_tid) {
  SHOAL_TRY(lock_write_set(proposed_tid));
  return validate_read_set();
}

Status Txn::lock_write_set(uint64_t* proposed_tid) {
  TxnBuffers& b = *bufs_;
  std::vector<WriteEntry>& writes = b.writes;
  // Address order is a global order: two transactions never wait on each other in a cycle.
  std::sort(writes.begin(), writes.end(),
            [](const WriteEntry& x, const WriteEntry& y) { return x.rec < y.rec; });
  for (size_t i = 0; i < writes.size(); ++i) {
    WriteEntry& w = writes[i];
    uint64_t observed = 0;
    if (!w.rec->try_lock(&observed, engine_->options().lock_wait_spins_max)) {
      release_locks(writes, i);
      return Status::Aborted("lock");
    }
    const bool absent = observed & Tid::kAbsent;
    // A remove may target our own insert's placeholder (absent); present records only leave
    // by being unlinked, so for removes "not unlinked" is the whole check.
    bool state_ok = !(observed & Tid::kUnlinked);
    if (w.kind == WriteKind::kInsert) {
      state_ok = state_ok && absent;
      // Above any remove of a key of this table that this insert may follow (see
      // TableBase::removed_tid_max_): the remove published it before unlinking the key we
      // found absent.
      b.max_seen_version =
          std::max(b.max_seen_version, w.table->removed_tid_max_.load(std::memory_order_acquire));
    }
    if (w.kind == WriteKind::kPut) state_ok = state_ok && !absent;
    if (!state_ok) {
      release_locks(writes, i + 1);
      return Status::Aborted("write target changed");
    }
    b.max_seen_version = std::max(b.max_seen_version, Tid::version(observed));
    w.base_tid = Tid::version(observed);
  }
  // The epoch is read after the locks are taken (Silo's serialization point). The TID is
  // above everything this shard saw (reads are complete: execution has ended) and above this
  // worker's last, in the current epoch.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint64_t epoch = engine_->epoch();
  *proposed_tid =
      std::max({last_tid_ + 1, b.max_seen_version + 1, Tid::make(epoch, 0), tid_floor() + 1});
  SHOAL_ASSERT(*proposed_tid <= Tid::kVersionMask, "TID overflow");
  return Status::Ok();
}

Status Txn::validate_read_set() {
  if (!validate(/*holding_locks=*/true)) {
    release_locks(bufs_->writes, bufs_->writes.size());
    return Status::Aborted("validation");
  }
  return Status::Ok();
}

void Txn::install_and_unlock(uint64_t tid, const DepVec* vector) {
  if (vector != nullptr) deps_.merge(*vector);
  deps_.raise(engine_->options().shard_id, tid);
  SHOAL_ASSERT(tid > last_tid_, "commit TIDs of a worker must increase");
  SHOAL_ASSERT(tid > tid_floor(), "commit TID %#llx not above the stream's floor %#llx",
               static_cast<unsigned long long>(tid), static_cast<unsigned long long>(tid_floor()));
  install(tid);
  last_tid_ = tid;
}

void Txn::release_certified() {
  release_locks(bufs_->writes, bufs_->writes.size());
}

bool Txn::validate(bool holding_locks) {
  TxnBuffers& b = *bufs_;
  const bool skip_reads = engine_->options().unsafe_skip_read_validation;
  for (const ReadEntry& r : b.reads) {
    if (skip_reads) break;
    const uint64_t now = r.rec->word.load(std::memory_order_acquire);
    if ((now & ~Tid::kLock) != r.observed) return false;
    if ((now & Tid::kLock) && !(holding_locks && locked_by_me(r.rec))) return false;
  }
  for (const NodeEntry& n : b.nodes) {
    if (n.current(n.leaf) != n.version) return false;
  }
  return true;
}

bool Txn::reads_pinned() const {
  if (!bufs_->nodes.empty()) return false;
  for (const ReadEntry& r : bufs_->reads) {
    if (!locked_by_me(r.rec)) return false;
  }
  return true;
}

Status Txn::refuse_read_only(const TableBase& table) {
  return Status::InvalidArgument("table " + table.name() + " is read-only");
}

bool Txn::locked_by_me(const Record* rec) const {
  const auto& writes = bufs_->writes;  // sorted by address during commit
  auto it = std::lower_bound(writes.begin(), writes.end(), rec,
                             [](const WriteEntry& w, const Record* r) { return w.rec < r; });
  return it != writes.end() && it->rec == rec;
}

void Txn::install(uint64_t tid) {
  TxnBuffers& b = *bufs_;
  const bool keep_chains = engine_->options().keep_version_chains;
  for (WriteEntry& w : b.writes) {
    Record* rec = w.rec;
    if (w.kind == WriteKind::kRemove) {
      // What a remove takes away is kept too: a failover elsewhere may have to put it back
      // (src/server/discard_journal.h).
      if (keep_old_values_ && !w.ops->bytes_key) keep_old_value(w);
      // Dead records leave the index at once so scans (TPC-C Delivery over NEW-ORDER) never
      // wade through tombstones; readers holding the pointer see kUnlinked and fail validation.
      rec->word.store(tid | Tid::kAbsent | Tid::kUnlinked | Tid::kLock, std::memory_order_release);
      uint64_t seen = w.table->removed_tid_max_.load(std::memory_order_relaxed);
      // Bounded: each failed exchange saw a larger value; it stops once seen >= tid.
      while (seen < tid && !w.table->removed_tid_max_.compare_exchange_weak(
                               seen, tid, std::memory_order_acq_rel)) {
      }
      const bool removed = w.ops->remove(w.table, w.key_words, rec);
      SHOAL_ASSERT(removed, "a locked, present record was missing from its index");
      rec->unlock();
      retire_record(rec, &w.table->record_bytes_);
      continue;
    }
    // Byte-key puts are logged whole (no patches), and may be 1 MiB: no old copy for them.
    if (keep_old_values_ && w.kind == WriteKind::kPut && !w.ops->bytes_key) keep_old_value(w);
    if (Record::words_for(w.size_bytes) > rec->capacity_words) {
      install_grown(w, tid);
      continue;
    }
    if (keep_chains && !(rec->word.load(std::memory_order_relaxed) & Tid::kAbsent)) {
      push_old_version(rec);
    }
    rec->write_locked(w.value, w.size_bytes);
    set_version_deps(rec);
    rec->unlock_with(tid);
  }
}

void Txn::keep_old_value(WriteEntry& w) {
  // The record is locked by us: its bytes are the version the put overwrites.
  const Record* rec = w.rec;
  uint64_t* copy = bufs_->arena.allocate_words(Record::words_for(rec->size_bytes));
  std::memcpy(copy, rec->data, rec->size_bytes);
  w.old_value = copy;
  w.old_size_bytes = rec->size_bytes;
}

void Txn::set_version_deps(Record* rec) {
  // Versions that depend only on their own shard (every single-shard transaction) carry no
  // vector at all: the TID in the version word is the whole story.
  if (!engine_->options().track_dependencies) return;  // no version ever carries one
  const uint32_t own = engine_->options().shard_id;
  const auto& e = deps_.entries();
  const bool remote = e.size() > 1 || (e.size() == 1 && e[0].shard != own);
  if (!remote && rec->deps.load(std::memory_order_relaxed) == nullptr) return;
  const DepVec* fresh = remote ? new DepVec(deps_) : nullptr;
  const DepVec* old = rec->deps.exchange(fresh, std::memory_order_acq_rel);
  if (old != nullptr) {
    ebr::retire(const_cast<DepVec*>(old), [](void* p) { delete static_cast<DepVec*>(p); });
  }
}

void Txn::push_old_version(Record* rec) {
  Record* old =
      Record::make(rec->size_bytes, rec->word.load(std::memory_order_relaxed) & ~Tid::kLock);
  std::memcpy(old->data, rec->data, rec->size_bytes);
  old->older = rec->older;
  const DepVec* d = rec->deps.load(std::memory_order_relaxed);
  old->deps.store(d != nullptr ? new DepVec(*d) : nullptr, std::memory_order_relaxed);
  rec->older = old;
}

void Txn::install_grown(WriteEntry& w, uint64_t tid) {
  // The value outgrew its record: publish a bigger one in the index and retire the old one.
  Record* old = w.rec;
  Record* grown = Record::make(w.size_bytes, tid | Tid::kLock);
  grown->write_locked(w.value, w.size_bytes);
  set_version_deps(grown);
  const bool replaced = w.ops->replace(w.table, w.key_words, grown);
  SHOAL_ASSERT(replaced, "a locked, present record was missing from its index");
  grown->unlock_with(tid);
  old->word.store(tid | Tid::kAbsent | Tid::kUnlinked, std::memory_order_release);
  w.table->record_bytes_.add(static_cast<int64_t>(Record::alloc_bytes(grown->capacity_words)));
  retire_record(old, &w.table->record_bytes_);
}

void Txn::abort() {
  TxnBuffers& b = *bufs_;
  // Placeholders this transaction put in the index and nobody committed over are removed, so
  // aborted inserts leave nothing behind.
  for (WriteEntry& w : b.writes) {
    if (!w.fresh) continue;
    uint64_t observed = 0;
    if (!w.rec->try_lock(&observed, engine_->options().lock_wait_spins_max))
      continue;  // someone else is committing it
    if ((observed & Tid::kStateMask) == Tid::kAbsent && Tid::version(observed) == 0) {
      w.rec->word.store(Tid::kAbsent | Tid::kUnlinked | Tid::kLock, std::memory_order_release);
      const bool removed = w.ops->remove(w.table, w.key_words, w.rec);
      SHOAL_ASSERT(removed, "placeholder missing from its index");
      w.rec->unlock();
      retire_record(w.rec, &w.table->record_bytes_);
    } else {
      w.rec->unlock();
    }
  }
}

void Txn::end() {
  bufs_->guard.reset();
}

// ---- TableBase (replication) ----

void TableBase::push_replicated_version(Record* rec) {
  const uint64_t word = rec->word.load(std::memory_order_relaxed) & ~Tid::kLock;
  Record* old = Record::make(rec->size_bytes, word);
  std::memcpy(old->data, rec->data, rec->size_bytes);
  old->older = std::atomic_ref<Record*>(rec->older).load(std::memory_order_relaxed);
  chain_bytes_.add(static_cast<int64_t>(Record::alloc_bytes(old->capacity_words)));
  record_bytes_.add(static_cast<int64_t>(Record::alloc_bytes(old->capacity_words)));
  // Release: a reader that loads the pointer sees the copy's word and data.
  std::atomic_ref<Record*>(rec->older).store(old, std::memory_order_release);
}

void TableBase::trim_chain(Record* rec, uint64_t head_tid) {
  const uint64_t horizon = engine_->version_horizon();
  if (horizon == 0) return;  // no registry publishes one: keep everything
  // Keep the versions newer than the horizon and the newest one at or below it.
  Record* keep = rec;
  uint64_t version = head_tid;
  for (int depth = 0; version > horizon; ++depth) {
    SHOAL_ASSERT(depth < (1 << 20), "%s", "version chain cycle");
    keep = std::atomic_ref<Record*>(keep->older).load(std::memory_order_relaxed);
    if (keep == nullptr) return;
    version = Tid::version(keep->word.load(std::memory_order_relaxed));
  }
  Record* cut = std::atomic_ref<Record*>(keep->older).load(std::memory_order_relaxed);
  if (cut == nullptr) return;
  std::atomic_ref<Record*>(keep->older).store(nullptr, std::memory_order_release);
  int64_t bytes = 0;
  for (const Record* r = cut; r != nullptr; r = r->older) {
    bytes += static_cast<int64_t>(Record::alloc_bytes(r->capacity_words));
  }
  chain_bytes_.add(-bytes);
  record_bytes_.add(-bytes);
  ebr::retire(cut, &Record::free);  // frees the cut versions and their chain
}

void TableBase::retire_purged(Record* rec) {
  rec->word.fetch_or(Tid::kUnlinked, std::memory_order_acq_rel);
  record_bytes_.add(-static_cast<int64_t>(Record::alloc_bytes(rec->capacity_words)));
  ebr::retire(rec, &Record::free_one);
}

// ---- Worker ----

Worker::Worker(Engine* engine, uint32_t id, uint64_t seed)
    : engine_(engine), id_(id), txn_(engine, seed) {}

Status Worker::run(Procedure proc, const void* args, void* result) {
  const uint32_t retries_max = engine_->options().max_retries;
  uint32_t backoff = 1;
  for (uint32_t attempt = 0;; ++attempt) {
    txn_.begin();
    Status s = proc(txn_, args, result);
    if (s.ok()) {
      s = txn_.commit();
      if (s.ok() && commit_hook_ != nullptr) {
        Status logged = commit_hook_(commit_hook_ctx_, txn_);
        if (!logged.ok()) {  // installed, not logged: never reported committed (CommitHook)
          txn_.end();
          return logged;
        }
      }
    } else if (!s.is_aborted() && !txn_.validate(/*holding_locks=*/false)) {
      // The procedure gave up (NotFound, AlreadyExists, UserAbort, ...) on reads that were
      // not a consistent snapshot: its answer is meaningless, so run it again.
      s = Status::Aborted("inconsistent reads");
    }
    if (!s.ok()) txn_.abort();
    txn_.end();
    if ((++runs_ & 63) == 0) ebr::quiesce();
    if (s.ok()) {
      ++stats_.committed;
      return s;
    }
    if (s.is_user_abort()) {
      ++stats_.user_aborts;
      return s;
    }
    if (!s.is_aborted()) return s;
    ++stats_.conflict_aborts;
    if (attempt + 1 >= retries_max) return Status::Aborted("retries exhausted");
    for (uint32_t i = 0; i < backoff; ++i) _mm_pause();
    backoff = std::min(backoff * 2, kBackoffPausesMax);
  }
}

// ---- Engine ----

Engine::Engine(EngineOptions options, Env* env) : options_(options), env_(env) {
  if (options_.epoch_ticker) start_ticker();
}

size_t Engine::start_leading(uint64_t at_least_epoch, const EngineOptions* leader_options) {
  uint64_t e = epoch_.load(std::memory_order_acquire);
  while (e < at_least_epoch && !epoch_.compare_exchange_weak(e, at_least_epoch)) {
  }
  if (leader_options != nullptr) {
    const uint32_t shard = options_.shard_id;
    const bool chains = options_.keep_version_chains;
    options_ = *leader_options;
    options_.shard_id = shard;
    options_.keep_version_chains = chains;  // records already carry (or lack) their chains
  }
  if (!ticker_.joinable()) {
    options_.epoch_ticker = true;
    start_ticker();
  }
  size_t purged = 0;
  for (auto& t : tables_) purged += t->purge_tombstones();
  return purged;
}

void Engine::start_ticker() {
  ticker_ = std::thread([this] {
    uint64_t next_ns = env_->now_ns() + options_.epoch_interval_ns;
    while (!stop_.load(std::memory_order_acquire)) {
      ticker_sleep_until(next_ns);
      if (env_->now_ns() >= next_ns) {
        epoch_.fetch_add(1, std::memory_order_acq_rel);
        next_ns += options_.epoch_interval_ns;
      }
    }
  });
}

void Engine::ticker_sleep_until(uint64_t deadline_ns) {
  const uint64_t now_ns = env_->now_ns();
  if (now_ns >= deadline_ns) return;
  if (env_ != &RealEnv::instance()) {  // another clock: slices, each checking stop_
    env_->sleep_ns(std::min<uint64_t>(deadline_ns - now_ns, 5'000'000));
    return;
  }
  // One wake-up per epoch, not one per 5 ms slice (200 a second on every idle leader); the
  // destructor's notify ends the wait at once.
  std::unique_lock<std::mutex> lock(ticker_mu_);
  ticker_cv_.wait_for(lock, std::chrono::nanoseconds(deadline_ns - now_ns),
                      [this] { return stop_.load(std::memory_order_acquire); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(ticker_mu_);  // orders the store before the ticker's check
    stop_.store(true, std::memory_order_release);
  }
  ticker_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  workers_.clear();
  tables_.clear();
  if (options_.drain_reclamation_on_destroy) ebr::drain_all_for_tests();
}

BytesTable* Engine::create_bytes_table(const std::string& name) {
  SHOAL_ASSERT(find_table(name) == nullptr, "table %s exists", name.c_str());
  auto table = std::make_unique<BytesTable>(name, static_cast<uint32_t>(tables_.size()));
  BytesTable* raw = table.get();
  raw->engine_ = this;
  tables_.push_back(std::move(table));
  return raw;
}

Result<TableBase*> Engine::create_table_with_key_words(const std::string& name, size_t key_words) {
  switch (key_words) {
    case 0:
      return static_cast<TableBase*>(create_bytes_table(name));
    case 1:
      return static_cast<TableBase*>(create_table<1>(name));
    case 2:
      return static_cast<TableBase*>(create_table<2>(name));
    case 3:
      return static_cast<TableBase*>(create_table<3>(name));
    case 4:
      return static_cast<TableBase*>(create_table<4>(name));
    default:
      return Status::InvalidArgument("table " + name + ": keys of " + std::to_string(key_words) +
                                     " words are not supported (0..4)");
  }
}

TableBase* Engine::find_table(const std::string& name) const {
  for (const auto& t : tables_) {
    if (t->name() == name) return t.get();
  }
  return nullptr;
}

Worker* Engine::make_worker() {
  const uint32_t id = next_worker_id_.fetch_add(1);
  std::lock_guard<std::mutex> lock(workers_mu_);
  workers_.push_back(std::unique_ptr<Worker>(new Worker(this, id, env_->seed())));
  return workers_.back().get();
}

size_t Engine::version_chain_bytes() const {
  size_t total = 0;
  for (const auto& t : tables_) total += t->version_chain_bytes();
  return total;
}

size_t Engine::memory_bytes() const {
  size_t total = 0;
  for (const auto& t : tables_) total += t->memory_bytes();
  return total;
}

}  // namespace shoal::txn

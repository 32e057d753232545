#include "src/server/dist_kv.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/base/ebr.h"
#include "src/server/kv_fragments.h"

namespace shoal::server {
namespace {

constexpr size_t kGetBufferBytes = 512;        // a get's first result buffer (grows on demand)
constexpr size_t kScanBufferBytes = 64 << 10;  // a scan fragment's result (more: go on)
constexpr size_t kKeptBufferBytes = 64 << 10;  // larger buffers are freed after a transaction
constexpr uint32_t kCountBatchKeys = 10'000;   // DBSIZE: keys per read-only transaction
// A scanned value's bytes carried by a scan fragment (a batch's result must fit a message);
// longer ones are read by a get each.
constexpr size_t kScanValueBytesMax = dist::kFragmentBytesMax / 2;

// Aborted and Timeout: worth a retry from begin() (the session's loop, kv_backend.h).
Status retryable(Status s) {
  if (s.code() == Code::kTimeout) {
    return Status::Aborted("timed out (" + s.message() + ")");
  }
  return s;
}

std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

class DistKvTxn final : public resp::KvTxn {
 public:
  DistKvTxn(DistKvBackend& backend, bool local_fast_path)
      : backend_(backend), o_(backend.options()), local_fast_path_(local_fast_path) {}
  ~DistKvTxn() override {
    if (txn_ != nullptr) backend_.give_back(std::move(txn_));
  }

  void begin() override {
    SHOAL_ASSERT(mode_ == Mode::kNone, "%s", "DistKvTxn::begin with a transaction open");
    open_ = true;
  }

  rt::Task<Status> get(std::string_view key, std::string* value, uint64_t* version) override;
  rt::Task<Status> put(std::string_view key, std::string_view value) override;
  rt::Task<Status> del(std::string_view key) override;
  rt::Task<Status> scan(const resp::ScanRange& range, size_t limit, size_t value_prefix_bytes,
                        std::vector<resp::KeyValue>* out) override;
  rt::Task<Result<resp::CommitInfo>> commit() override;
  rt::Task<void> abort() override;

 private:
  // kLocal: on the worker's Txn (the fast path); kDist: through the coordinator.
  enum class Mode : uint8_t { kNone, kLocal, kDist };

  uint32_t shard_of(std::string_view key) const {
    // One shard: no split key to search (a call per key of every command).
    return o_.config->kv_split_keys.empty() ? 0 : o_.config->shard_for_kv_key(key);
  }
  // Makes the transaction able to touch `shard`: starts it locally or through 2PC, or, when
  // a local transaction reaches another shard, ends the attempt (Aborted) so that the
  // session's retry runs it through 2PC.
  Status enter(uint32_t shard);
  // Notes a conflict for the backoff before the retry.
  Status note(Status s) {
    if (s.ok()) [[likely]]
      return s;
    s = retryable(std::move(s));
    conflicted_ |= s.is_aborted();
    return s;
  }
  // The remote halves of get/put/del (coroutines: a fragment's round trip). get/put/del
  // themselves are not: on the local fast path they answer with a ready task (no frame).
  rt::Task<Status> get_remote(uint32_t shard, std::string_view key, std::string* value,
                              uint64_t* version);
  rt::Task<Status> put_remote(uint32_t shard, std::string_view key, std::string_view value);
  rt::Task<Status> del_remote(uint32_t shard, std::string_view key);
  // commit()'s end after a local or empty commit: the wait for an ack token when it did not
  // come at once, then the backoff after a conflict.
  rt::Task<Result<resp::CommitInfo>> commit_tail(Result<resp::CommitInfo> done,
                                                 rt::Task<uint64_t> token);
  // commit() through 2PC (or when a local commit's token must wait).
  rt::Task<Result<resp::CommitInfo>> commit_dist();
  rt::Task<void> back_off();
  // A commit ended without a conflict: the next transaction starts afresh.
  void settled(bool committed) {
    if (committed) conflicts_ = 0;
    force_dist_ = false;
  }
  // `range` clipped to `shard`'s keys (its split keys).
  KvScanArgs clip(uint32_t shard, const resp::ScanRange& range) const;
  Status scan_local(const KvScanArgs& a, size_t limit, std::vector<resp::KeyValue>* out);
  // One shard's part of a scan through 2PC.
  rt::Task<Status> scan_shard(uint32_t shard, KvScanArgs a, size_t limit,
                              std::vector<resp::KeyValue>* out);
  // Commits on the worker's Txn; with `vector`, sets it to what the acknowledgement waits on
  // (nullptr: no acknowledgement, nothing to compute).
  Result<resp::CommitInfo> commit_local(txn::DepVec* vector);
  // A local transaction of one get and nothing else (no write, no scan): see commit_local.
  bool one_read() const { return !local_wrote_ && local_reads_ <= 1; }
  // Ends the worker's Txn after its commit or abort.
  void end_local() {
    o_.local->end();
    if ((++local_runs_ & 63) == 0) ebr::quiesce();  // as txn::Worker::run does
  }
  void close() {
    if (result_.capacity() > kKeptBufferBytes) std::vector<uint8_t>().swap(result_);
    if (args_.capacity() > kKeptBufferBytes) std::vector<uint8_t>().swap(args_);
    if (txn_ != nullptr) backend_.give_back(std::move(txn_));
    mode_ = Mode::kNone;
    open_ = false;
  }

  DistKvBackend& backend_;
  const DistKvOptions& o_;
  const bool local_fast_path_;  // may run on o_.local (never between a client's requests)
  Mode mode_ = Mode::kNone;
  bool open_ = false;
  bool force_dist_ = false;   // the last attempt reached a second shard: 2PC from the start
  bool local_wrote_ = false;  // kLocal: a put or del
  uint32_t local_reads_ = 0;  // kLocal: gets (a scan counts as two: it reads a range)
  bool conflicted_ = false;   // the open attempt met a conflict
  uint32_t conflicts_ = 0;    // in a row (backoff)
  uint64_t local_runs_ = 0;
  std::unique_ptr<dist::DistTxn> txn_;  // kDist
  txn::DepVec local_vector_;            // a local commit's vector (kept: no allocation per commit)
  std::vector<uint8_t> args_;
  std::vector<uint8_t> result_;
  std::string cursor_;  // a scan's last key, while it goes on
};

Status DistKvTxn::enter(uint32_t shard) {
  SHOAL_ASSERT(open_, "%s", "DistKvTxn: a call without begin()");
  if (mode_ == Mode::kDist) return Status::Ok();
  if (shard == o_.own_shard && o_.local != nullptr && local_fast_path_ && !force_dist_) {
    if (mode_ == Mode::kNone) {
      o_.local->begin();
      mode_ = Mode::kLocal;
      local_wrote_ = false;
      local_reads_ = 0;
    }
    return Status::Ok();
  }
  if (mode_ == Mode::kLocal) {
    force_dist_ = true;
    return Status::Aborted("kv: the transaction reaches another shard: again through 2PC");
  }
  txn_ = backend_.take_txn();
  o_.coordinator->begin(*txn_);
  mode_ = Mode::kDist;
  return Status::Ok();
}

rt::Task<void> DistKvTxn::back_off() {
  if (o_.loop == nullptr) co_return;
  ++conflicts_;
  // The lock in the way may be a remote coordinator's, released by a message this loop has
  // yet to read: let the loop run first, then wait a little longer each time (as the
  // coordinator's own retries do, coordinator.h).
  if (conflicts_ <= 2) {
    co_await o_.loop->yield();
    co_return;
  }
  const uint64_t d = std::min<uint64_t>(2'000'000, uint64_t{20'000} << std::min(conflicts_, 7u));
  const uint64_t mix =
      (reinterpret_cast<uintptr_t>(this) * 0x9e3779b97f4a7c15ULL + conflicts_) >> 33;
  (co_await o_.loop->sleep_for(d / 2 + mix % (d / 2 + 1))).ignore();
}

rt::Task<Status> DistKvTxn::get(std::string_view key, std::string* value, uint64_t* version) {
  const uint32_t shard = shard_of(key);
  if (Status s = enter(shard); !s.ok()) return rt::Task<Status>::ready(std::move(s));
  if (mode_ == Mode::kLocal) {
    ++local_reads_;
    Status s = o_.local->get(*o_.table, key, value, version);
    if (s.ok() || s.is_not_found()) [[likely]]
      return rt::Task<Status>::ready(std::move(s));
    return rt::Task<Status>::ready(note(std::move(s)));
  }
  return get_remote(shard, key, value, version);
}

rt::Task<Status> DistKvTxn::get_remote(uint32_t shard, std::string_view key, std::string* value,
                                       uint64_t* version) {
  if (result_.size() < kGetBufferBytes) result_.resize(kGetBufferBytes);
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second with room for the value
    uint32_t size = 0;
    SHOAL_CO_TRY(note(co_await txn_->exec(shard, kFragKvGet, as_bytes(key), result_, &size)));
    KvGetResult r;
    SHOAL_CO_TRY(decode_kv_get({result_.data(), size}, &r));
    *version = r.version;
    if (r.kind == kKvFound) {
      value->assign(r.value);
      co_return Status::Ok();
    }
    if (r.kind == kKvAbsent) co_return Status::NotFound();
    result_.resize(r.needed);
  }
  co_return Status::Corruption("kv get: the value grew inside its own transaction");
}

rt::Task<Status> DistKvTxn::put(std::string_view key, std::string_view value) {
  const uint32_t shard = shard_of(key);
  if (Status s = enter(shard); !s.ok()) return rt::Task<Status>::ready(std::move(s));
  if (mode_ == Mode::kLocal) {
    local_wrote_ = true;
    return rt::Task<Status>::ready(note(o_.local->put(*o_.table, key, value)));
  }
  return put_remote(shard, key, value);
}

rt::Task<Status> DistKvTxn::put_remote(uint32_t shard, std::string_view key,
                                       std::string_view value) {
  encode_kv_put(key, value, &args_);
  co_return note(co_await txn_->exec(shard, kFragKvPut, args_, {}));
}

rt::Task<Status> DistKvTxn::del(std::string_view key) {
  const uint32_t shard = shard_of(key);
  if (Status s = enter(shard); !s.ok()) return rt::Task<Status>::ready(std::move(s));
  if (mode_ == Mode::kLocal) {
    local_wrote_ = true;
    Status s = o_.local->remove(*o_.table, key);
    return rt::Task<Status>::ready(s.is_not_found() ? Status::Ok() : note(std::move(s)));
  }
  return del_remote(shard, key);
}

rt::Task<Status> DistKvTxn::del_remote(uint32_t shard, std::string_view key) {
  co_return note(co_await txn_->exec(shard, kFragKvDel, as_bytes(key), {}));
}

KvScanArgs DistKvTxn::clip(uint32_t shard, const resp::ScanRange& range) const {
  const cluster::ClusterConfig& config = *o_.config;
  KvScanArgs a;
  a.start = range.start;
  a.start_inclusive = range.start_inclusive;
  if (shard > 0 && (a.start.empty() || a.start < config.kv_split_keys[shard - 1])) {
    a.start = config.kv_split_keys[shard - 1];  // the shard's first key
    a.start_inclusive = true;
  }
  a.has_end = !range.end.empty();
  a.end = range.end;
  if (shard + 1 < config.shards.size() && (!a.has_end || config.kv_split_keys[shard] < range.end)) {
    a.has_end = true;  // the next shard's first key
    a.end = config.kv_split_keys[shard];
  }
  return a;
}

Status DistKvTxn::scan_local(const KvScanArgs& a, size_t limit, std::vector<resp::KeyValue>* out) {
  txn::BytesScan scan;
  scan.start = a.start;
  scan.start_inclusive = a.start_inclusive;
  if (a.has_end) scan.end = a.end;
  scan.limit = limit;
  scan.value_prefix_bytes = a.value_prefix_bytes;
  local_reads_ += 2;
  return note(o_.local->scan(*o_.table, scan, [&](const txn::BytesEntry& e) {
    out->push_back({std::string(e.key), std::string(e.value)});
    return true;
  }));
}

rt::Task<Status> DistKvTxn::scan_shard(uint32_t shard, KvScanArgs a, size_t limit,
                                       std::vector<resp::KeyValue>* out) {
  if (result_.size() < kScanBufferBytes) result_.resize(kScanBufferBytes);
  for (size_t got = 0; got < limit;) {  // each pass delivers >= 1 key or grows the buffer
    a.limit = static_cast<uint32_t>(limit - got);
    encode_kv_scan(a, &args_);
    uint32_t size = 0, count = 0;
    SHOAL_CO_TRY(note(co_await txn_->exec(shard, kFragKvScan, args_, result_, &size)));
    bool more = false;
    std::string_view last;
    SHOAL_CO_TRY(decode_kv_scan({result_.data(), size}, false, out, &more, &count, &last));
    got += count;
    if (!more) break;
    if (count == 0) {  // one entry larger than the buffer: grow it (bounded by the message)
      if (result_.size() >= dist::kFragmentBytesMax) co_return Status::Corruption("kv scan");
      result_.resize(std::min<size_t>(result_.size() * 4, dist::kFragmentBytesMax));
      continue;
    }
    cursor_.assign(last);
    a.start = cursor_;
    a.start_inclusive = false;
  }
  co_return Status::Ok();
}

rt::Task<Status> DistKvTxn::scan(const resp::ScanRange& range, size_t limit,
                                 size_t value_prefix_bytes, std::vector<resp::KeyValue>* out) {
  const cluster::ClusterConfig& config = *o_.config;
  const size_t before = out->size();
  // Shards in key order, from the one owning the range's start, until the range ends.
  for (uint32_t shard = range.start.empty() ? 0 : shard_of(range.start);
       shard < config.shards.size() && out->size() - before < limit; ++shard) {
    if (shard > 0 && !range.end.empty() && !(config.kv_split_keys[shard - 1] < range.end)) break;
    SHOAL_CO_TRY(enter(shard));
    KvScanArgs a = clip(shard, range);
    const size_t cap = std::min<size_t>(value_prefix_bytes, kScanValueBytesMax);
    a.value_prefix_bytes = static_cast<uint32_t>(cap);
    const size_t left = limit - (out->size() - before);
    const size_t first = out->size();
    if (mode_ == Mode::kLocal) {
      SHOAL_CO_TRY(scan_local(a, left, out));
    } else {
      SHOAL_CO_TRY(co_await scan_shard(shard, a, left, out));
    }
    // Values a scan fragment cut at its cap are read whole (a get each), as asked.
    for (size_t i = first; cap < value_prefix_bytes && i < out->size(); ++i) {
      if ((*out)[i].value.size() < cap) continue;
      uint64_t version = 0;
      Status s = co_await get((*out)[i].key, &(*out)[i].value, &version);
      if (s.is_not_found()) s = Status::Aborted("kv scan: a key scanned is gone");
      SHOAL_CO_TRY(s);
      if ((*out)[i].value.size() > value_prefix_bytes) (*out)[i].value.resize(value_prefix_bytes);
    }
  }
  co_return Status::Ok();
}

Result<resp::CommitInfo> DistKvTxn::commit_local(txn::DepVec* vector) {
  txn::Txn& t = *o_.local;
  // A transaction of one get and nothing else (a GET, EXISTS or STRLEN of one key) commits
  // at its read: Txn::get returned a version it copied unlocked and stable, or a miss the
  // leaf showed, so that read is the transaction's serialization point (kv_backend.h: a
  // one-read transaction is trivially serializable). No lock, no validation, no TID: what
  // Txn::commit adds for it is a fresh TID the acknowledgement below ignores anyway. The
  // vector is still the read's (t.deps() and max_seen_version() come from Txn::get).
  Status s = one_read() ? Status::Ok() : t.commit();
  if (s.ok() && local_wrote_ && o_.commit_hook != nullptr) {
    Status logged = o_.commit_hook(o_.commit_hook_ctx, t);
    if (!logged.ok()) {  // installed, not logged: never acknowledged (txn::CommitHook)
      end_local();
      return logged;
    }
  }
  if (!s.ok()) {
    t.abort();
  } else if (vector != nullptr) {
    // As the TPC-C terminals' acknowledgement (shard_load.cc ack_vector): what it read
    // depends on, and our shard's entry at its commit TID or the newest version it read.
    if (local_wrote_) {
      *vector = t.deps();
    } else {
      // A read-only commit also raised deps() to a fresh TID of ours (Txn::install_and_unlock),
      // which an idle shard's watermark passes only at its next floor entry: every GET of an
      // existing key waited about 50 ms. It needs only what it read.
      for (const txn::DepEntry& e : t.deps().entries()) {
        if (e.shard != o_.own_shard) vector->raise(e.shard, e.ts);
      }
    }
    vector->raise(o_.own_shard,
                  std::max(t.max_seen_version(), local_wrote_ ? t.last_commit_tid() : 0));
  }
  end_local();
  if (!s.ok()) return note(std::move(s));
  return resp::CommitInfo{};
}

// Not a coroutine: a local (or empty) commit whose ack token comes at once, and that met no
// conflict, answers with a ready task; the rest goes on in commit_tail or commit_dist.
rt::Task<Result<resp::CommitInfo>> DistKvTxn::commit() {
  SHOAL_ASSERT(open_, "%s", "commit without begin");
  if (mode_ == Mode::kDist) return commit_dist();
  const bool local = mode_ == Mode::kLocal;
  if (local && one_read() && o_.acks == nullptr && !conflicted_) {
    // A GET replying at its commit: nothing to validate (commit_local), no vector, no token.
    end_local();
    close();
    settled(true);
    return rt::Task<Result<resp::CommitInfo>>::ready(resp::CommitInfo{});
  }
  Result<resp::CommitInfo> done = resp::CommitInfo{};
  if (local) {
    local_vector_.clear();
    done = commit_local(o_.acks != nullptr ? &local_vector_ : nullptr);
  }
  close();
  rt::Task<uint64_t> token;
  if (done.ok() && local && o_.acks != nullptr) {
    token = o_.acks->token_for(local_vector_);
    if (token.start_inline()) {
      done->durable_token = token.take();
      token = rt::Task<uint64_t>();
    }
  }
  if (!conflicted_ && !token.valid()) {
    settled(done.ok());
    return rt::Task<Result<resp::CommitInfo>>::ready(std::move(done));
  }
  return commit_tail(std::move(done), std::move(token));
}

rt::Task<Result<resp::CommitInfo>> DistKvTxn::commit_tail(Result<resp::CommitInfo> done,
                                                          rt::Task<uint64_t> token) {
  if (token.valid()) done->durable_token = co_await token.join();
  if (conflicted_) {
    conflicted_ = false;
    co_await back_off();
  } else {
    settled(done.ok());
  }
  co_return done;
}

rt::Task<Result<resp::CommitInfo>> DistKvTxn::commit_dist() {
  Result<resp::CommitInfo> done = resp::CommitInfo{};
  Status s = note(co_await o_.coordinator->finish(*txn_));
  if (!s.ok()) done = s;
  if (done.ok() && o_.acks != nullptr) {
    done->durable_token = co_await o_.acks->token_for(txn_->vector());
  }
  close();
  co_return co_await commit_tail(std::move(done), rt::Task<uint64_t>());
}

rt::Task<void> DistKvTxn::abort() {
  if (mode_ == Mode::kLocal) {
    o_.local->abort();
    o_.local->end();
  } else if (mode_ == Mode::kDist) {
    co_await o_.coordinator->abort(*txn_);
  }
  close();
  if (conflicted_) {
    conflicted_ = false;
    co_await back_off();
  }
}

}  // namespace

// ---- KvAcks ----

KvAcks::KvAcks(rt::EventLoop& loop, dist::VectorWatermark& watermark, uint32_t slots,
               uint32_t own_shard)
    : loop_(loop), watermark_(watermark), slots_(slots), own_shard_(own_shard), own_(slots) {
  SHOAL_ASSERT(slots >= 1 && slots < (1u << kSlotBits), "%u ack slots", slots);
  for (uint32_t i = slots; i > 0; --i) free_.push_back(i - 1);
}

KvAcks::~KvAcks() = default;

rt::Task<uint64_t> KvAcks::token_for(const txn::DepVec& vector) {
  if (watermark_.covers(vector)) co_return 0;
  if (!free_.empty()) {
    const uint32_t slot = free_.back();
    Slot& s = slots_[slot];
    s.vector = vector;
    s.token = (++s.generation << kSlotBits) | slot;
    if (own_only(vector) && queue_own(slot)) co_return s.token;
    if (!own_only(vector) && loop_.spawn(watch(this, slot)).ok()) {
      free_.pop_back();
      ++pending_;
      co_return s.token;
    }
    s.token = 0;  // no task room: wait here instead
  }
  const txn::DepVec copy = vector;                    // the caller's may change while we wait
  (co_await watermark_.wait_covered(copy)).ignore();  // released at shutdown: nobody waits
  co_return 0;
}

bool KvAcks::is_durable(uint64_t token) const {
  const uint64_t slot = token & ((uint64_t{1} << kSlotBits) - 1);
  return slot >= slots_.size() || slots_[slot].token != token;
}

bool KvAcks::queue_own(uint32_t slot) {
  SHOAL_ASSERT(!free_.empty() && free_.back() == slot, "%s", "queued an ack slot not free");
  if (!draining_) {
    // spawn() only schedules the task: it first runs after this slot is queued.
    if (!loop_.spawn(drain_own(this)).ok()) return false;  // no task room: the caller waits
    draining_ = true;
  }
  free_.pop_back();
  ++pending_;
  // At most slots_.size() are pending, so the ring never overflows.
  own_[own_tail_++ % own_.size()] = slot;
  return true;
}

void KvAcks::acknowledge(uint32_t slot) {
  Slot& s = slots_[slot];
  s.token = 0;
  free_.push_back(slot);
  --pending_;
  ++acknowledged_;
}

rt::Task<void> KvAcks::watch(KvAcks* acks, uint32_t slot) {
  // A wait ended otherwise (released at shutdown, a fence) frees the token all the same.
  (co_await acks->watermark_.wait_covered(acks->slots_[slot].vector)).ignore();
  acks->acknowledge(slot);
}

rt::Task<void> KvAcks::drain_own(KvAcks* acks) {
  // Waits on the oldest queued vector; once covered, frees every queued one now covered, in
  // queue order. A later one covered first (a lower TID: a read's version) waits for those
  // before it: late, never early.
  while (acks->own_head_ != acks->own_tail_) {
    const uint32_t head = acks->own_[acks->own_head_ % acks->own_.size()];
    const Status st = co_await acks->watermark_.wait_covered(acks->slots_[head].vector);
    // As watch() would for each: released (shutdown) frees every queued token, a fence (its
    // vector lost in a failover) this one.
    const bool released = st.code() == Code::kUnavailable;
    ++acks->own_head_;
    acks->acknowledge(head);
    while (acks->own_head_ != acks->own_tail_) {
      const uint32_t slot = acks->own_[acks->own_head_ % acks->own_.size()];
      if (!released && !acks->watermark_.covers(acks->slots_[slot].vector)) break;
      ++acks->own_head_;
      acks->acknowledge(slot);
    }
  }
  acks->draining_ = false;
}

// ---- DistKvBackend ----

DistKvBackend::DistKvBackend(DistKvOptions options) : options_(options) {
  SHOAL_ASSERT(options_.coordinator != nullptr && options_.config != nullptr, "%s",
               "DistKvBackend without coordinator or config");
}

DistKvBackend::~DistKvBackend() = default;

std::unique_ptr<resp::KvTxn> DistKvBackend::open() {
  return std::make_unique<DistKvTxn>(*this, true);
}

std::unique_ptr<resp::KvTxn> DistKvBackend::open_interactive() {
  return std::make_unique<DistKvTxn>(*this, false);
}

std::unique_ptr<dist::DistTxn> DistKvBackend::take_txn() {
  if (pool_.empty()) return std::make_unique<dist::DistTxn>();
  auto t = std::move(pool_.back());
  pool_.pop_back();
  return t;
}

void DistKvBackend::give_back(std::unique_ptr<dist::DistTxn> txn) {
  if (pool_.size() < options_.pooled_txns_max) pool_.push_back(std::move(txn));
}

rt::Task<Result<uint64_t>> DistKvBackend::count_keys() {
  uint64_t total = 0;
  std::vector<uint8_t> args, result(kScanBufferBytes);
  std::string cursor;
  for (uint32_t shard = 0; shard < options_.config->shards.size(); ++shard) {
    KvScanArgs a;
    a.count_only = true;
    a.limit = kCountBatchKeys;
    if (shard > 0) a.start = options_.config->kv_split_keys[shard - 1];
    if (shard + 1 < options_.config->shards.size()) {
      a.has_end = true;
      a.end = options_.config->kv_split_keys[shard];
    }
    for (;;) {  // one batch per pass; ends when a batch counts fewer than its limit
      dist::DistTxn txn;
      options_.coordinator->begin(txn);
      encode_kv_scan(a, &args);
      uint32_t size = 0, count = 0;
      Status s = co_await txn.exec(shard, kFragKvScan, args, result, &size);
      bool more = false;
      std::string_view last;
      if (s.ok()) s = decode_kv_scan({result.data(), size}, true, nullptr, &more, &count, &last);
      if (s.ok()) cursor.assign(last);
      co_await options_.coordinator->abort(txn);  // read-only and not one snapshot: no commit
      if (!s.ok()) co_return s;
      total += count;
      if (count < a.limit) break;
      a.start = cursor;
      a.start_inclusive = false;
    }
  }
  co_return total;
}

}  // namespace shoal::server

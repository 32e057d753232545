#include "src/server/dist_kv.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/server/kv_fragments.h"

namespace shoal::server {
namespace {

constexpr size_t kGetBufferBytes = 512;        // a get's first result buffer (grows on demand)
constexpr size_t kScanBufferBytes = 64 << 10;  // a scan fragment's result (more: go on)
constexpr size_t kKeptBufferBytes = 64 << 10;  // larger buffers are freed after a transaction
constexpr uint32_t kCountBatchKeys = 10'000;   // DBSIZE: keys per read-only transaction

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
  explicit DistKvTxn(DistKvBackend& backend) : backend_(backend) {}
  ~DistKvTxn() override {
    if (txn_ != nullptr) backend_.give_back(std::move(txn_));
  }

  void begin() override {
    SHOAL_ASSERT(txn_ == nullptr, "%s", "DistKvTxn::begin with a transaction open");
    txn_ = backend_.take_txn();
    backend_.options().coordinator->begin(*txn_);
  }

  rt::Task<Status> get(std::string_view key, std::string* value, uint64_t* version) override;
  rt::Task<Status> put(std::string_view key, std::string_view value) override;
  rt::Task<Status> del(std::string_view key) override;
  rt::Task<Status> scan(const resp::ScanRange& range, size_t limit, size_t value_prefix_bytes,
                        std::vector<resp::KeyValue>* out) override;
  rt::Task<Result<resp::CommitInfo>> commit() override;
  rt::Task<void> abort() override;

 private:
  uint32_t shard_of(std::string_view key) const {
    return backend_.options().config->shard_for_kv_key(key);
  }
  // One shard's part of a scan: keys of `range` on `shard` (clipped to its split keys).
  rt::Task<Status> scan_shard(uint32_t shard, const resp::ScanRange& range, size_t limit,
                              size_t value_prefix_bytes, std::vector<resp::KeyValue>* out);
  void close() {
    if (result_.capacity() > kKeptBufferBytes) std::vector<uint8_t>().swap(result_);
    if (args_.capacity() > kKeptBufferBytes) std::vector<uint8_t>().swap(args_);
    backend_.give_back(std::move(txn_));
  }

  DistKvBackend& backend_;
  std::unique_ptr<dist::DistTxn> txn_;  // while a transaction is open
  std::vector<uint8_t> args_;
  std::vector<uint8_t> result_;
  std::string cursor_;  // a scan's last key, while it goes on
};

rt::Task<Status> DistKvTxn::get(std::string_view key, std::string* value, uint64_t* version) {
  if (result_.size() < kGetBufferBytes) result_.resize(kGetBufferBytes);
  const uint32_t shard = shard_of(key);
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second with room for the value
    uint32_t size = 0;
    SHOAL_CO_TRY(retryable(co_await txn_->exec(shard, kFragKvGet, as_bytes(key), result_, &size)));
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
  encode_kv_put(key, value, &args_);
  co_return retryable(co_await txn_->exec(shard_of(key), kFragKvPut, args_, {}));
}

rt::Task<Status> DistKvTxn::del(std::string_view key) {
  co_return retryable(co_await txn_->exec(shard_of(key), kFragKvDel, as_bytes(key), {}));
}

rt::Task<Status> DistKvTxn::scan_shard(uint32_t shard, const resp::ScanRange& range, size_t limit,
                                       size_t value_prefix_bytes,
                                       std::vector<resp::KeyValue>* out) {
  const cluster::ClusterConfig& config = *backend_.options().config;
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
  a.value_prefix_bytes =
      static_cast<uint32_t>(std::min<size_t>(value_prefix_bytes, dist::kFragmentBytesMax / 2));
  if (result_.size() < kScanBufferBytes) result_.resize(kScanBufferBytes);
  for (size_t got = 0; got < limit;) {  // each pass delivers >= 1 key or grows the buffer
    a.limit = static_cast<uint32_t>(limit - got);
    encode_kv_scan(a, &args_);
    uint32_t size = 0, count = 0;
    SHOAL_CO_TRY(retryable(co_await txn_->exec(shard, kFragKvScan, args_, result_, &size)));
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
  const cluster::ClusterConfig& config = *backend_.options().config;
  const size_t before = out->size();
  // Shards in key order, from the one owning the range's start, until the range ends.
  for (uint32_t shard = range.start.empty() ? 0 : shard_of(range.start);
       shard < config.shards.size() && out->size() - before < limit; ++shard) {
    if (shard > 0 && !range.end.empty() && !(config.kv_split_keys[shard - 1] < range.end)) break;
    SHOAL_CO_TRY(
        co_await scan_shard(shard, range, limit - (out->size() - before), value_prefix_bytes, out));
  }
  co_return Status::Ok();
}

rt::Task<Result<resp::CommitInfo>> DistKvTxn::commit() {
  SHOAL_ASSERT(txn_ != nullptr, "%s", "commit without begin");
  const Status s = retryable(co_await backend_.options().coordinator->finish(*txn_));
  resp::CommitInfo info;
  if (s.ok() && backend_.options().acks != nullptr) {
    info.durable_token = co_await backend_.options().acks->token_for(txn_->vector());
  }
  close();
  if (!s.ok()) co_return s;
  co_return info;
}

rt::Task<void> DistKvTxn::abort() {
  if (txn_ == nullptr) co_return;
  co_await backend_.options().coordinator->abort(*txn_);
  close();
}

}  // namespace

// ---- KvAcks ----

KvAcks::KvAcks(rt::EventLoop& loop, dist::VectorWatermark& watermark, uint32_t slots)
    : loop_(loop), watermark_(watermark), slots_(slots) {
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
    if (loop_.spawn(watch(this, slot)).ok()) {
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

rt::Task<void> KvAcks::watch(KvAcks* acks, uint32_t slot) {
  Slot& s = acks->slots_[slot];
  // Released at shutdown (Unavailable): the replies then never leave, as the process stops.
  (co_await acks->watermark_.wait_covered(s.vector)).ignore();
  s.token = 0;
  acks->free_.push_back(slot);
  --acks->pending_;
  ++acks->acknowledged_;
}

// ---- DistKvBackend ----

DistKvBackend::DistKvBackend(DistKvOptions options) : options_(options) {
  SHOAL_ASSERT(options_.coordinator != nullptr && options_.config != nullptr, "%s",
               "DistKvBackend without coordinator or config");
}

DistKvBackend::~DistKvBackend() = default;

std::unique_ptr<resp::KvTxn> DistKvBackend::open() {
  return std::make_unique<DistKvTxn>(*this);
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

#include "src/kv/engine_kv_backend.h"

#include <immintrin.h>

#include <algorithm>

namespace shoal::kv {
namespace {

constexpr uint32_t kBackoffPausesMax = 1 << 12;

class EngineKvTxn final : public resp::KvTxn {
 public:
  EngineKvTxn(txn::Engine& engine, txn::BytesTable& table)
      : table_(table), txn_(&engine, engine.env().seed()) {}
  ~EngineKvTxn() override { abort_now(); }

  void begin() override {
    SHOAL_ASSERT(!open_, "%s", "KvTxn::begin with a transaction open");
    txn_.begin();
    open_ = true;
    wrote_ = false;
  }

  // Every call completes inline: the engine answers from memory.
  rt::Task<Status> get(std::string_view key, std::string* value, uint64_t* version) override {
    co_return txn_.get(table_, key, value, version);
  }

  rt::Task<Status> put(std::string_view key, std::string_view value) override {
    wrote_ = true;
    co_return txn_.put(table_, key, value);
  }

  rt::Task<Status> del(std::string_view key) override {
    wrote_ = true;
    const Status s = txn_.remove(table_, key);
    co_return s.is_not_found() ? Status::Ok() : s;  // deleting an absent key is not an error
  }

  rt::Task<Status> scan(const resp::ScanRange& range, size_t limit, size_t value_prefix_bytes,
                        std::vector<resp::KeyValue>* out) override {
    co_return scan_now(range, limit, value_prefix_bytes, out);
  }

  rt::Task<Result<resp::CommitInfo>> commit() override { co_return commit_now(); }

  rt::Task<void> abort() override {
    abort_now();
    co_return;
  }

 private:
  Status scan_now(const resp::ScanRange& range, size_t limit, size_t value_prefix_bytes,
                  std::vector<resp::KeyValue>* out) {
    txn::BytesScan scan;
    scan.start = range.start;
    scan.start_inclusive = range.start_inclusive;
    if (!range.end.empty()) scan.end = range.end;
    scan.limit = limit;
    scan.value_prefix_bytes = value_prefix_bytes;
    return txn_.scan(table_, scan, [&](const txn::BytesEntry& e) {
      out->push_back(resp::KeyValue{std::string(e.key), std::string(e.value)});
      return true;
    });
  }

  Result<resp::CommitInfo> commit_now() {
    SHOAL_ASSERT(open_, "%s", "KvTxn::commit without a transaction");
    const Status s = txn_.commit();
    resp::CommitInfo info;
    if (s.ok()) {
      // A read-only transaction commits no version: what must be durable is what it read.
      info.durable_token = wrote_ ? txn_.last_commit_tid() : txn_.max_seen_version();
      backoff_pauses_ = 1;
    } else {
      txn_.abort();
    }
    close();
    if (!s.ok()) {
      if (s.is_aborted()) back_off();
      return s;
    }
    return info;
  }

  void abort_now() {
    if (!open_) return;
    txn_.abort();
    close();
  }

  // The session retries an aborted transaction at once; sessions hammering one key (INCR)
  // would collide in lockstep, so a conflict pauses first, doubling up to kBackoffPausesMax
  // (as Worker::run does).
  void back_off() {
    for (uint32_t i = 0; i < backoff_pauses_; ++i) _mm_pause();
    backoff_pauses_ = std::min(backoff_pauses_ * 2, kBackoffPausesMax);
  }

  void close() {
    txn_.end();
    open_ = false;
    if ((++transactions_ & 63) == 0) ebr::quiesce();
  }

  txn::BytesTable& table_;
  txn::Txn txn_;
  bool open_ = false;
  bool wrote_ = false;
  uint64_t transactions_ = 0;
  uint32_t backoff_pauses_ = 1;
};

}  // namespace

std::unique_ptr<resp::KvTxn> EngineKvBackend::open() {
  return std::make_unique<EngineKvTxn>(engine_, table_);
}

OwnedEngineKvBackend::OwnedEngineKvBackend(txn::EngineOptions options)
    : engine_(std::make_unique<txn::Engine>(options)),
      table_(engine_->create_bytes_table("kv")),
      backend_(std::make_unique<EngineKvBackend>(*engine_, *table_)) {}

}  // namespace shoal::kv

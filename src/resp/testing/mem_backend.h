// MemBackend: a KvBackend over a std::map, for tests, the fuzzer and the benchmark only (no
// shipped binary links it). Optimistic like the engine: a transaction buffers its writes,
// records the version of every key it reads, and commit() validates those versions under the
// store's mutex (Aborted when one changed), then installs the writes with a fresh version
// each. Deletes leave a tombstone holding the delete's version. Tests can make the next
// commits fail (fail_next_commits) to exercise the session's retry path.
// Every call completes inline (its task never suspends), as a local engine's would.
// Threads: the store is thread-safe (one mutex); each MemTxn belongs to one thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "src/resp/kv_backend.h"

namespace shoal::resp::testing {

class MemBackend final : public KvBackend {
 public:
  struct Entry {
    std::optional<std::string> value;  // nullopt: a tombstone
    uint64_t version = 0;
  };

  std::unique_ptr<KvTxn> open() override;
  rt::Task<Result<uint64_t>> count_keys() override { co_return count_keys_now(); }
  Result<uint64_t> count_keys_now() {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t n = 0;
    for (const auto& [k, e] : store_) n += e.value.has_value() ? 1 : 0;
    return n;
  }
  void fail_next_commits(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_commits_ = n;
  }
  uint64_t commits() {
    std::lock_guard<std::mutex> lock(mu_);
    return commits_;
  }
  // A snapshot of a stored value (tests inspect the encoding).
  std::optional<std::string> raw(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = store_.find(key);
    return it == store_.end() ? std::nullopt : it->second.value;
  }

 private:
  friend class MemTxn;
  std::mutex mu_;
  std::map<std::string, Entry, std::less<>> store_;
  uint64_t clock_ = 0;
  uint64_t commits_ = 0;
  int fail_commits_ = 0;
};

class MemTxn final : public KvTxn {
 public:
  explicit MemTxn(MemBackend& b) : b_(b) {}

  void begin() override {
    SHOAL_ASSERT(!open_, "MemTxn::begin with a transaction open");
    open_ = true;
    reads_.clear();
    writes_.clear();
  }

  rt::Task<Status> get(std::string_view key, std::string* value, uint64_t* version) override {
    co_return get_now(key, value, version);
  }
  rt::Task<Status> put(std::string_view key, std::string_view value) override {
    co_return put_now(key, value);
  }
  rt::Task<Status> del(std::string_view key) override { co_return del_now(key); }
  rt::Task<Status> scan(const ScanRange& range, size_t limit, size_t value_prefix_bytes,
                        std::vector<KeyValue>* out) override {
    co_return scan_now(range, limit, value_prefix_bytes, out);
  }
  rt::Task<Result<CommitInfo>> commit() override { co_return commit_now(); }
  rt::Task<void> abort() override {
    open_ = false;
    co_return;
  }

  // The same calls, synchronous.
  Status get_now(std::string_view key, std::string* value, uint64_t* version) {
    SHOAL_ASSERT(open_ && !key.empty() && key.size() <= kMaxKeyBytes, "get");
    if (auto w = writes_.find(key); w != writes_.end()) {
      *version = kAbsentVersion;  // unspecified for the transaction's own writes
      if (!w->second) return Status::NotFound();
      *value = *w->second;
      return Status::Ok();
    }
    std::lock_guard<std::mutex> lock(b_.mu_);
    auto it = b_.store_.find(key);
    *version = it == b_.store_.end() ? kAbsentVersion : it->second.version;
    reads_.emplace(std::string(key), *version);
    if (it == b_.store_.end() || !it->second.value) return Status::NotFound();
    *value = *it->second.value;
    return Status::Ok();
  }

  Status put_now(std::string_view key, std::string_view value) {
    SHOAL_ASSERT(open_ && !key.empty() && key.size() <= kMaxKeyBytes, "put");
    writes_.insert_or_assign(std::string(key), std::string(value));
    return Status::Ok();
  }

  Status del_now(std::string_view key) {
    SHOAL_ASSERT(open_ && !key.empty() && key.size() <= kMaxKeyBytes, "del");
    writes_.insert_or_assign(std::string(key), std::nullopt);
    return Status::Ok();
  }

  Status scan_now(const ScanRange& range, size_t limit, size_t value_prefix_bytes,
                  std::vector<KeyValue>* out);
  Result<CommitInfo> commit_now();

 private:
  bool in_range(const ScanRange& r, std::string_view k) const {
    const bool after_start = r.start_inclusive ? k >= r.start : k > r.start;
    return after_start && (r.end.empty() || k < r.end);
  }

  MemBackend& b_;
  bool open_ = false;
  std::map<std::string, uint64_t, std::less<>> reads_;
  std::map<std::string, std::optional<std::string>, std::less<>> writes_;
};

inline std::unique_ptr<KvTxn> MemBackend::open() {
  return std::make_unique<MemTxn>(*this);
}

// Merges the store with the transaction's own writes, in key order.
inline Status MemTxn::scan_now(const ScanRange& range, size_t limit, size_t value_prefix_bytes,
                               std::vector<KeyValue>* out) {
  SHOAL_ASSERT(open_ && limit >= 1, "scan");
  std::lock_guard<std::mutex> lock(b_.mu_);
  auto s = range.start_inclusive ? b_.store_.lower_bound(range.start)
                                 : b_.store_.upper_bound(range.start);
  auto w =
      range.start_inclusive ? writes_.lower_bound(range.start) : writes_.upper_bound(range.start);
  size_t added = 0;
  while (added < limit) {  // each pass advances s or w
    const bool s_ok = s != b_.store_.end() && in_range(range, s->first);
    const bool w_ok = w != writes_.end() && in_range(range, w->first);
    if (!s_ok && !w_ok) break;
    const std::optional<std::string>* value;
    std::string key;
    if (w_ok && (!s_ok || w->first <= s->first)) {
      if (s_ok && s->first == w->first) ++s;
      key = w->first;
      value = &w->second;
      ++w;
    } else {
      reads_.emplace(s->first, s->second.version);
      key = s->first;
      value = &s->second.value;
      ++s;
    }
    if (!value->has_value()) continue;
    out->push_back({std::move(key), (*value)->substr(0, value_prefix_bytes)});
    ++added;
  }
  return Status::Ok();
}

inline Result<CommitInfo> MemTxn::commit_now() {
  SHOAL_ASSERT(open_, "commit without begin");
  open_ = false;
  std::lock_guard<std::mutex> lock(b_.mu_);
  if (b_.fail_commits_ > 0) {
    --b_.fail_commits_;
    return Status::Aborted("injected conflict");
  }
  for (const auto& [key, version] : reads_) {
    auto it = b_.store_.find(key);
    const uint64_t now = it == b_.store_.end() ? kAbsentVersion : it->second.version;
    if (now != version) return Status::Aborted("read validation failed");
  }
  CommitInfo info;
  if (!writes_.empty()) {
    const uint64_t version = ++b_.clock_;
    for (auto& [key, value] : writes_)
      b_.store_[key] = MemBackend::Entry{std::move(value), version};
    info.durable_token = version;
  }
  ++b_.commits_;
  return info;
}

}  // namespace shoal::resp::testing

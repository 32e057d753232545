// The command layer's test fixture (src/resp/commands_test.cc), parameterized by the backend
// the sessions run over: resp_test instantiates it over MemBackend; kv_test (src/kv) compiles
// the same tests and adds the storage engine's backend (INSTANTIATE_TEST_SUITE_P(Engine,
// Commands, ...)), so every command test also runs against the engine.
// FaultBackend wraps a backend to make its next commits fail with Aborted (the session's retry
// path) whatever the backend. Tests only. Threads: as the wrapped backend's.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "src/resp/kv_backend.h"
#include "src/resp/testing/test_client.h"

namespace shoal::resp::testing {

class FaultBackend final : public KvBackend {
 public:
  explicit FaultBackend(std::unique_ptr<KvBackend> inner) : inner_(std::move(inner)) {}
  std::unique_ptr<KvTxn> open() override { return std::make_unique<Txn>(inner_->open(), this); }
  rt::Task<Result<uint64_t>> count_keys() override { return inner_->count_keys(); }
  // The next n commits abort the inner transaction and return Aborted.
  void fail_next_commits(int n) { fail_commits_.store(n); }
  // The stored value of key (tests inspect the encoding), read in a transaction of its own.
  std::optional<std::string> raw(std::string_view key) {
    std::unique_ptr<KvTxn> t = inner_->open();
    for (int attempt = 0; attempt < 64; ++attempt) {  // a conflict only with concurrent writers
      t->begin();
      std::string value;
      uint64_t version = 0;
      const Status s = now(t->get(key, &value, &version));
      if (!s.ok() && !s.is_not_found()) {
        now(t->abort());
        continue;
      }
      if (now(t->commit()).ok()) return s.ok() ? std::optional<std::string>(value) : std::nullopt;
    }
    ADD_FAILURE() << "raw(" << key << "): conflicts";
    return std::nullopt;
  }

 private:
  class Txn final : public KvTxn {
   public:
    Txn(std::unique_ptr<KvTxn> inner, FaultBackend* owner)
        : inner_(std::move(inner)), owner_(owner) {}
    void begin() override { inner_->begin(); }
    rt::Task<Status> get(std::string_view k, std::string* v, uint64_t* version) override {
      return inner_->get(k, v, version);
    }
    rt::Task<Status> put(std::string_view k, std::string_view v) override {
      return inner_->put(k, v);
    }
    rt::Task<Status> del(std::string_view k) override { return inner_->del(k); }
    rt::Task<Status> scan(const ScanRange& r, size_t limit, size_t prefix,
                          std::vector<KeyValue>* out) override {
      return inner_->scan(r, limit, prefix, out);
    }
    rt::Task<Result<CommitInfo>> commit() override {
      if (owner_->fail_commits_.fetch_sub(1) > 0) {
        co_await inner_->abort();
        co_return Status::Aborted("injected conflict");
      }
      owner_->fail_commits_.store(0);
      co_return co_await inner_->commit();
    }
    rt::Task<void> abort() override { return inner_->abort(); }

   private:
    std::unique_ptr<KvTxn> inner_;
    FaultBackend* owner_;
  };
  std::unique_ptr<KvBackend> inner_;
  std::atomic<int> fail_commits_{0};
};

struct BackendCase {
  const char* name;  // the test name's suffix
  std::unique_ptr<KvBackend> (*make)();
};

inline std::string backend_name(const ::testing::TestParamInfo<BackendCase>& info) {
  return info.param.name;
}

class Commands : public ::testing::TestWithParam<BackendCase> {
 protected:
  FaultBackend backend{GetParam().make()};
  ManualEnv env;
  TestClient c{backend, env};
};

}  // namespace shoal::resp::testing

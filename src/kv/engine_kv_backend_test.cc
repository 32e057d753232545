// The engine's KvBackend: every command-layer test (src/resp/commands_test.cc, compiled into
// this binary) over it, concurrent INCRs through separate sessions, and scans that race inserts.
#include "src/kv/engine_kv_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "src/resp/testing/commands_fixture.h"
#include "src/resp/testing/test_client.h"

namespace shoal::kv {
namespace {

using resp::testing::BackendCase;
using resp::testing::Commands;
using resp::testing::now;

INSTANTIATE_TEST_SUITE_P(
    Engine, Commands,
    ::testing::Values(BackendCase{
        "Engine",
        [] { return std::unique_ptr<resp::KvBackend>(std::make_unique<OwnedEngineKvBackend>()); }}),
    resp::testing::backend_name);

// Tests scale down under sanitizers (SHOAL_TEST_SCALE=small).
int scaled(int n) {
  const char* s = std::getenv("SHOAL_TEST_SCALE");
  return (s != nullptr && std::string(s) == "small") ? std::max(1, n / 10) : n;
}

TEST(EngineKvBackend, ConcurrentIncrThroughSeparateSessionsSumsExactly) {
  OwnedEngineKvBackend backend;
  constexpr int kThreads = 4;
  const int per_thread = scaled(3000);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      resp::testing::ManualEnv env;
      resp::testing::TestClient client{backend, env};
      for (int n = 0; n < per_thread; ++n) {
        const std::string key = "counter:" + std::to_string((n + i) % 3);
        // The session gives up after 64 conflicts in a row (slow sanitizer builds get there);
        // a client then tries again, as the error says.
        std::string reply = client.call({"INCR", key});
        for (int again = 0; again < 100 && reply.find("conflicted") != std::string::npos; ++again) {
          reply = client.call({"INCR", key});
        }
        ASSERT_EQ(reply[0], ':') << reply;
      }
    });
  }
  for (auto& t : threads) t.join();
  resp::testing::ManualEnv env;
  resp::testing::TestClient client{backend, env};
  long sum = 0;
  for (int k = 0; k < 3; ++k) {
    const std::string reply = client.call({"GET", "counter:" + std::to_string(k)});
    ASSERT_EQ(reply[0], '$') << reply;
    sum += std::stol(reply.substr(reply.find("\r\n") + 2));
  }
  EXPECT_EQ(sum, static_cast<long>(kThreads) * per_thread);
}

// A writer flips pairs of keys in and out of the range a reader scans twice per transaction
// (both keys of a pair inserted, or both removed, in one transaction). A committed reader sees
// the same keys in both scans and an even number of them: no phantom appeared or vanished
// between its scans, and never half of a pair.
TEST(EngineKvBackend, ScansInsideATransactionSeeNoPhantoms) {
  OwnedEngineKvBackend backend;
  const uint64_t scans = static_cast<uint64_t>(scaled(300));
  std::atomic<bool> done{false};
  std::atomic<uint64_t> flips{0};
  std::thread writer([&] {
    std::unique_ptr<resp::KvTxn> t = backend.open();
    for (uint64_t i = 0; !done.load(); ++i) {  // bounded by the reader's scans
      const std::string k = "r:" + std::to_string(i * 7919 % 400);
      t->begin();
      std::string v;
      uint64_t version = 0;
      Status s = now(t->get(k + "a", &v, &version));
      const bool present = s.ok();
      if (s.ok() || s.is_not_found())
        s = present ? now(t->del(k + "a")) : now(t->put(k + "a", "x"));
      if (s.ok()) s = present ? now(t->del(k + "b")) : now(t->put(k + "b", "y"));
      if (!s.ok()) {
        now(t->abort());
        continue;
      }
      if (now(t->commit()).ok()) flips.fetch_add(1);
    }
  });
  std::unique_ptr<resp::KvTxn> r = backend.open();
  uint64_t committed = 0, conflicts = 0;
  const resp::ScanRange range{"r:", true, "r;"};
  // Bounded: the writer's flips abort only some scans, and it flips on while we scan.
  while (committed < scans || flips.load() < 10 * scans) {
    std::vector<resp::KeyValue> first, second;
    r->begin();
    Status s = now(r->scan(range, 100000, 4, &first));
    if (s.ok()) s = now(r->scan(range, 100000, 4, &second));
    if (!s.ok()) {
      now(r->abort());
      ++conflicts;
      continue;
    }
    if (!now(r->commit()).ok()) {
      ++conflicts;
      continue;
    }
    ++committed;
    ASSERT_EQ(first.size(), second.size());
    for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(first[i].key, second[i].key);
    ASSERT_EQ(first.size() % 2, 0u);
  }
  done.store(true);
  writer.join();
  RecordProperty("committed_scans", static_cast<int>(committed));
  RecordProperty("aborted_scans", static_cast<int>(conflicts));
  RecordProperty("writer_flips", static_cast<int>(flips.load()));
}

TEST(EngineKvBackend, VersionsAndDurableTokens) {
  OwnedEngineKvBackend backend;
  std::unique_ptr<resp::KvTxn> t = backend.open();
  std::string v;
  uint64_t version = 99;
  t->begin();
  EXPECT_TRUE(now(t->get("k", &v, &version)).is_not_found());
  EXPECT_EQ(version, resp::kAbsentVersion);
  ASSERT_TRUE(now(t->put("k", "1")).ok());
  auto put = now(t->commit());
  ASSERT_TRUE(put.ok());
  EXPECT_GT(put->durable_token, 0u);
  t->begin();
  ASSERT_TRUE(now(t->get("k", &v, &version)).ok());
  EXPECT_EQ(version, put->durable_token);  // the version read is the write's commit TID
  auto read = now(t->commit());
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->durable_token, put->durable_token);  // a reader waits for what it read
  t->begin();
  ASSERT_TRUE(now(t->del("absent")).ok());
  ASSERT_TRUE(now(t->del("k")).ok());
  ASSERT_TRUE(now(t->commit()).ok());
  EXPECT_EQ(now(backend.count_keys()).value(), 0u);
  t->begin();
  ASSERT_TRUE(now(t->put("k", std::string(300, 'x'))).ok());
  now(t->abort());  // nothing installed, nothing left in the index
  EXPECT_EQ(now(backend.count_keys()).value(), 0u);
}

}  // namespace
}  // namespace shoal::kv

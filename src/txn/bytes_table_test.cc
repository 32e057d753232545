#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "src/base/test_scale.h"
#include "src/txn/engine.h"

namespace shoal::txn {
namespace {

template <typename F>
Status run_fn(Worker* w, F&& fn) {
  return w->run([](Txn& t, const void* args, void*) { return (*static_cast<const F*>(args))(t); },
                &fn);
}

class BytesTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = std::make_unique<Engine>(options_);
    table_ = engine_->create_bytes_table("kv");
    worker_ = engine_->make_worker();
  }
  // Every (key, value) committed, in key order.
  std::map<std::string, std::string> contents() const {
    std::map<std::string, std::string> out;
    table_->for_each_committed([&](std::string_view k, std::string_view v, uint64_t) {
      out.emplace(k, v);
      return true;
    });
    return out;
  }
  Status put(std::string_view k, std::string_view v) {
    return run_fn(worker_, [&](Txn& t) { return t.put(*table_, k, v); });
  }
  // Keys a full scan of [start, end) delivers in one transaction.
  std::vector<std::string> scan_keys(const BytesScan& scan) {
    std::vector<std::string> keys;
    const Status s = run_fn(worker_, [&](Txn& t) {
      keys.clear();
      return t.scan(*table_, scan, [&](const BytesEntry& e) {
        keys.emplace_back(e.key);
        return true;
      });
    });
    EXPECT_TRUE(s.ok()) << s.to_string();
    return keys;
  }
  EngineOptions options_;
  std::unique_ptr<Engine> engine_;
  BytesTable* table_ = nullptr;
  Worker* worker_ = nullptr;
};

TEST_F(BytesTableTest, PutGetRemoveWithVersions) {
  ASSERT_TRUE(put("alpha", "one").ok());
  const uint64_t put_tid = worker_->txn().last_commit_tid();
  std::string v;
  uint64_t version = 99;
  ASSERT_TRUE(run_fn(worker_, [&](Txn& t) { return t.get(*table_, "alpha", &v, &version); }).ok());
  EXPECT_EQ(v, "one");
  EXPECT_EQ(version, put_tid);
  const uint64_t first = version;
  ASSERT_TRUE(put("alpha", "one").ok());  // an equal value still changes the version
  ASSERT_TRUE(run_fn(worker_, [&](Txn& t) { return t.get(*table_, "alpha", &v, &version); }).ok());
  EXPECT_GT(version, first);
  EXPECT_EQ(run_fn(worker_, [&](Txn& t) { return t.insert(*table_, "alpha", "x"); }).code(),
            Code::kAlreadyExists);
  ASSERT_TRUE(run_fn(worker_, [&](Txn& t) { return t.remove(*table_, "alpha"); }).ok());
  EXPECT_TRUE(run_fn(worker_, [&](Txn& t) {
                return t.get(*table_, "alpha", &v, &version);
              }).is_not_found());
  EXPECT_EQ(version, 0u);
  EXPECT_TRUE(run_fn(worker_, [&](Txn& t) { return t.remove(*table_, "alpha"); }).is_not_found());
  // Inserted again after the remove: the insert's TID is above the remove's.
  const uint64_t removed_at = worker_->txn().last_commit_tid();
  ASSERT_TRUE(run_fn(worker_, [&](Txn& t) { return t.insert(*table_, "alpha", "two"); }).ok());
  EXPECT_GT(worker_->txn().last_commit_tid(), removed_at);
  EXPECT_EQ(contents(), (std::map<std::string, std::string>{{"alpha", "two"}}));
}

TEST_F(BytesTableTest, KeyAndValueLimits) {
  const std::string longest(kBytesKeyBytesMax, 'k');
  const std::string big(kBytesValueBytesMax, 'v');
  EXPECT_EQ(put("", "x").code(), Code::kInvalidArgument);
  EXPECT_EQ(put(longest + "k", "x").code(), Code::kInvalidArgument);
  EXPECT_EQ(put("k", big + "v").code(), Code::kInvalidArgument);
  ASSERT_TRUE(put(longest, big).ok());
  ASSERT_TRUE(put(std::string(1, '\0'), "").ok());  // one zero byte, an empty value
  std::string v;
  uint64_t version = 0;
  ASSERT_TRUE(run_fn(worker_, [&](Txn& t) { return t.get(*table_, longest, &v, &version); }).ok());
  EXPECT_EQ(v, big);
  ASSERT_TRUE(run_fn(worker_, [&](Txn& t) {
                return t.get(*table_, std::string(1, '\0'), &v, &version);
              }).ok());
  EXPECT_EQ(v, "");
}

TEST_F(BytesTableTest, ValuesGrowAndShrinkAcrossTheOldLimit) {
  // A record outgrows its allocation (swapped for a larger one), then shrinks in place.
  for (const size_t size : {size_t{3}, size_t{5000}, size_t{1} << 20, size_t{10}, size_t{70000}}) {
    const std::string value(size, static_cast<char>('a' + size % 26));
    ASSERT_TRUE(put("grow", value).ok());
    std::string v;
    uint64_t version = 0;
    ASSERT_TRUE(run_fn(worker_, [&](Txn& t) { return t.get(*table_, "grow", &v, &version); }).ok());
    EXPECT_EQ(v, value);
  }
}

TEST_F(BytesTableTest, ReadYourWritesAcrossPutRemoveGetScan) {
  ASSERT_TRUE(put("b", "committed-b").ok());
  ASSERT_TRUE(put("d", "committed-d").ok());
  const Status s = run_fn(worker_, [&](Txn& t) -> Status {
    std::string v;
    uint64_t version = 0;
    SHOAL_TRY(t.put(*table_, "a", "mine-a"));
    SHOAL_TRY(t.put(*table_, "b", "mine-b"));
    SHOAL_TRY(t.remove(*table_, "d"));
    EXPECT_TRUE(t.get(*table_, "a", &v, &version).ok());
    EXPECT_EQ(v, "mine-a");
    EXPECT_TRUE(t.get(*table_, "d", &v, &version).is_not_found());
    EXPECT_TRUE(t.remove(*table_, "d").is_not_found());
    std::vector<std::string> seen;
    SHOAL_TRY(t.scan(*table_, BytesScan{.limit = 10}, [&](const BytesEntry& e) {
      seen.push_back(std::string(e.key) + "=" + std::string(e.value));
      return true;
    }));
    EXPECT_EQ(seen, (std::vector<std::string>{"a=mine-a", "b=mine-b"}));
    // Put after remove brings the key back; remove of an own insert drops it.
    SHOAL_TRY(t.put(*table_, "d", "again-d"));
    SHOAL_TRY(t.put(*table_, "e", "gone"));
    SHOAL_TRY(t.remove(*table_, "e"));
    EXPECT_TRUE(t.get(*table_, "e", &v, &version).is_not_found());
    SHOAL_TRY(t.put(*table_, "e", "back-e"));
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(contents(), (std::map<std::string, std::string>{
                            {"a", "mine-a"}, {"b", "mine-b"}, {"d", "again-d"}, {"e", "back-e"}}));
}

TEST_F(BytesTableTest, AbortLeavesNothing) {
  ASSERT_TRUE(put("keep", "1").ok());
  const Status s = run_fn(worker_, [&](Txn& t) -> Status {
    SHOAL_TRY(t.put(*table_, "new", "x"));
    SHOAL_TRY(t.put(*table_, "keep", "2"));
    SHOAL_TRY(t.remove(*table_, "keep"));
    return Status::UserAbort();
  });
  EXPECT_TRUE(s.is_user_abort());
  EXPECT_EQ(contents(), (std::map<std::string, std::string>{{"keep", "1"}}));
  EXPECT_EQ(table_->record_count(), 1u);  // the aborted insert's placeholder is gone
}

TEST_F(BytesTableTest, ScanBoundsLimitAndValuePrefix) {
  for (const char* k : {"a", "ab", "ab\x01", "abc", "abcdefghij", "abd", "b", "c"}) {
    ASSERT_TRUE(put(k, std::string("value-of-") + k).ok());
  }
  using V = std::vector<std::string>;
  EXPECT_EQ(scan_keys(BytesScan{.start = "ab", .end = "abd", .limit = 100}),
            (V{"ab", "ab\x01", "abc", "abcdefghij"}));
  EXPECT_EQ(scan_keys(BytesScan{.start = "ab", .start_inclusive = false, .end = "b", .limit = 100}),
            (V{"ab\x01", "abc", "abcdefghij", "abd"}));
  EXPECT_EQ(scan_keys(BytesScan{.start = "abd", .limit = 100}), (V{"abd", "b", "c"}));
  EXPECT_EQ(scan_keys(BytesScan{.limit = 3}), (V{"a", "ab", "ab\x01"}));
  EXPECT_EQ(scan_keys(BytesScan{.start = "b", .end = "b", .limit = 3}), V{});
  std::vector<std::pair<std::string, uint32_t>> cut;
  ASSERT_TRUE(run_fn(worker_, [&](Txn& t) {
                cut.clear();
                return t.scan(*table_, BytesScan{.start = "c", .limit = 5, .value_prefix_bytes = 4},
                              [&](const BytesEntry& e) {
                                EXPECT_GT(e.version, 0u);
                                cut.emplace_back(std::string(e.value), e.value_bytes);
                                return true;
                              });
              }).ok());
  EXPECT_EQ(cut, (std::vector<std::pair<std::string, uint32_t>>{{"valu", 10}}));
}

// Two transactions interleaved by hand on two workers' Txns.
class BytesConflictTest : public BytesTableTest {
 protected:
  void SetUp() override {
    BytesTableTest::SetUp();
    a_ = &worker_->txn();
    b_ = &engine_->make_worker()->txn();
  }
  // Commits b's writes (a single put or remove) at once.
  void commit_b(const std::function<Status(Txn&)>& fn) {
    b_->begin();
    ASSERT_TRUE(fn(*b_).ok());
    ASSERT_TRUE(b_->commit().ok());
    b_->end();
  }
  // a commits; Aborted expected when a conflicting write came in between.
  Status finish_a() {
    Status s = a_->commit();
    if (!s.ok()) a_->abort();
    a_->end();
    return s;
  }
  Txn* a_ = nullptr;
  Txn* b_ = nullptr;
};

TEST_F(BytesConflictTest, ReadValidatedAtCommit) {
  ASSERT_TRUE(put("k", "0").ok());
  a_->begin();
  std::string v;
  uint64_t version = 0;
  ASSERT_TRUE(a_->get(*table_, "k", &v, &version).ok());
  ASSERT_TRUE(a_->put(*table_, "other", "x").ok());
  commit_b([&](Txn& t) { return t.put(*table_, "k", "1"); });
  EXPECT_TRUE(finish_a().is_aborted());
}

TEST_F(BytesConflictTest, AbsentKeyIsProtected) {
  a_->begin();
  std::string v;
  uint64_t version = 0;
  ASSERT_TRUE(a_->get(*table_, "missing", &v, &version).is_not_found());
  ASSERT_TRUE(a_->put(*table_, "other", "x").ok());
  commit_b([&](Txn& t) { return t.put(*table_, "missing", "now"); });
  EXPECT_TRUE(finish_a().is_aborted());
}

// The record a get or write found is remembered for the next write of the same key (no
// second index descent): a key read, written again and again, and a new key written twice
// commit their last values.
TEST_F(BytesTableTest, AKeyWrittenAgainInOneTransactionKeepsItsLastValue) {
  ASSERT_TRUE(put("k", "0").ok());
  ASSERT_TRUE(run_fn(worker_, [&](Txn& t) {
                std::string v;
                uint64_t version = 0;
                SHOAL_TRY(t.get(*table_, "k", &v, &version));
                SHOAL_TRY(t.put(*table_, "k", v + "1"));
                SHOAL_TRY(t.put(*table_, "new", "a"));
                SHOAL_TRY(t.put(*table_, "k", "2"));
                SHOAL_TRY(t.put(*table_, "new", "b"));
                SHOAL_TRY(t.put(*table_, "new", "c"));
                SHOAL_TRY(t.get(*table_, "k", &v, &version));
                return t.put(*table_, "k", v + "3");
              }).ok());
  const std::map<std::string, std::string> want{{"k", "23"}, {"new", "c"}};
  EXPECT_EQ(contents(), want);
}

// A remembered record removed by another transaction since: the write lands on it, and the
// commit aborts (its target was unlinked) instead of installing a value nobody can see.
TEST_F(BytesConflictTest, ARememberedRecordRemovedMeanwhileAbortsTheCommit) {
  ASSERT_TRUE(put("k", "0").ok());
  a_->begin();
  ASSERT_TRUE(a_->put(*table_, "k", "1").ok());
  commit_b([&](Txn& t) { return t.remove(*table_, "k"); });
  ASSERT_TRUE(a_->put(*table_, "k", "2").ok());
  EXPECT_TRUE(finish_a().is_aborted());
  EXPECT_TRUE(contents().empty());
  ASSERT_TRUE(put("k", "3").ok());  // and the key takes writes again
  const std::map<std::string, std::string> want{{"k", "3"}};
  EXPECT_EQ(contents(), want);
}

TEST_F(BytesConflictTest, ScannedRangeHasNoPhantoms) {
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(put("key" + std::to_string(1000 + i), "v").ok());
    ASSERT_TRUE(put("zz" + std::to_string(1000 + i), "v").ok());  // leaves beyond the range
  }
  ASSERT_TRUE(put("key1100-with-a-long-tail-x", "v").ok());  // a sub-layer under "key1100-"
  // Inserts inside the range (both at the end of a long shared prefix and in a sub-layer),
  // and a remove, each make the scanning transaction abort; one after the range does not.
  const std::vector<std::pair<std::string, bool>> cases = {
      {"key1050x", true},
      {"key1100-with-a-long-tail-into-sublayers", true},
      {"key1100", true},
      {"zz1100x", false}};
  for (const auto& [key, conflicts] : cases) {
    a_->begin();
    size_t n = 0;
    ASSERT_TRUE(a_->scan(*table_, BytesScan{.start = "key1000", .end = "key1199", .limit = 1000},
                         [&](const BytesEntry&) {
                           ++n;
                           return true;
                         })
                    .ok());
    EXPECT_GE(n, 199u);
    ASSERT_TRUE(a_->put(*table_, "elsewhere", "x").ok());
    if (key == "key1100") {
      commit_b([&](Txn& t) { return t.remove(*table_, key); });
    } else {
      commit_b([&](Txn& t) { return t.put(*table_, key, "phantom"); });
    }
    EXPECT_EQ(finish_a().is_aborted(), conflicts) << key;
  }
}

TEST_F(BytesConflictTest, ConcurrentInsertsOfOneKeyConflict) {
  a_->begin();
  ASSERT_TRUE(a_->insert(*table_, "race", "a").ok());
  b_->begin();
  // b takes the placeholder over; whoever commits second aborts.
  ASSERT_TRUE(b_->put(*table_, "race", "b").ok());
  ASSERT_TRUE(b_->commit().ok());
  b_->end();
  EXPECT_TRUE(finish_a().is_aborted());
  EXPECT_EQ(contents(), (std::map<std::string, std::string>{{"race", "b"}}));
}

TEST_F(BytesTableTest, UntypedCallsTakePackedKeys) {
  std::vector<uint64_t> packed(packed_key_words(5));
  pack_key("hello", packed.data());
  EXPECT_EQ(unpack_key(packed.data()), "hello");
  const Status s = run_fn(worker_, [&](Txn& t) -> Status {
    SHOAL_TRY(table_->txn_insert(t, packed.data(), "world", 5));
    char out[8] = {};
    uint32_t size = 0;
    SHOAL_TRY(table_->txn_get(t, packed.data(), out, sizeof out, &size));
    EXPECT_EQ(std::string_view(out, size), "world");
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(engine_->find_table("kv"), table_);
  EXPECT_EQ(table_->key_words(), 0u);
}

TEST_F(BytesTableTest, CommitHookSeesPackedByteKeyWrites) {
  ASSERT_TRUE(put("x", "old").ok());
  std::vector<std::string> seen;
  struct Ctx {
    std::vector<std::string>* seen;
    uint32_t table_id;
  } ctx{&seen, table_->id()};
  worker_->set_commit_hook(
      [](void* c, const Txn& txn) {
        auto* ctx = static_cast<Ctx*>(c);
        txn.for_each_write([&](const WriteView& w) {
          EXPECT_EQ(w.table_id, ctx->table_id);
          EXPECT_EQ(w.key_word_count, packed_key_words(w.key_words[0]));
          std::string line(unpack_key(w.key_words));
          if (w.value != nullptr) {
            line += "=" + std::string(static_cast<const char*>(w.value), w.size_bytes);
          }
          if (w.old_value != nullptr) {
            line += " was " + std::string(static_cast<const char*>(w.old_value), w.old_size_bytes);
          }
          ctx->seen->push_back(line);
        });
        return Status::Ok();
      },
      &ctx);
  ASSERT_TRUE(run_fn(worker_, [&](Txn& t) -> Status {
                SHOAL_TRY(t.put(*table_, "x", "new"));
                SHOAL_TRY(t.remove(*table_, "x"));
                return t.put(*table_, "y", "why");
              }).ok());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"x", "y=why"}));
  worker_->set_commit_hook(nullptr, nullptr);
}

TEST_F(BytesTableTest, ReplicatedWritesNewestWinsWithTombstones) {
  std::vector<uint64_t> k(packed_key_words(3));
  pack_key("rep", k.data());
  ebr::Guard guard;
  const uint64_t t1 = Tid::make(5, 1), t2 = Tid::make(5, 2), t3 = Tid::make(5, 3);
  const std::string big(100000, 'B');
  EXPECT_TRUE(table_->apply_replicated(k.data(), WriteKind::kInsert, "v1", 2, t1));
  EXPECT_TRUE(table_->apply_replicated(k.data(), WriteKind::kRemove, nullptr, 0, t3));
  EXPECT_FALSE(table_->apply_replicated(k.data(), WriteKind::kPut, big.data(),
                                        static_cast<uint32_t>(big.size()), t2));
  EXPECT_FALSE(table_->apply_replicated(k.data(), WriteKind::kRemove, nullptr, 0, t3));
  EXPECT_TRUE(contents().empty());
  // A tombstone reports its TID to a read.
  Txn& txn = worker_->txn();
  txn.begin();
  std::string v;
  uint64_t version = 0;
  EXPECT_TRUE(txn.get(*table_, "rep", &v, &version).is_not_found());
  EXPECT_EQ(version, t3);
  txn.abort();
  txn.end();
  EXPECT_TRUE(table_->apply_replicated(k.data(), WriteKind::kPut, big.data(),
                                       static_cast<uint32_t>(big.size()), Tid::make(6, 1)));
  EXPECT_EQ(contents(), (std::map<std::string, std::string>{{"rep", big}}));
  pack_key("rep", k.data());
  std::vector<uint64_t> other(packed_key_words(5));
  pack_key("other", other.data());
  EXPECT_TRUE(table_->apply_replicated(other.data(), WriteKind::kRemove, nullptr, 0, t1));
  size_t visited = 0;
  table_->scan_committed([&](const uint64_t* key, const void*, uint32_t size, uint64_t tid) {
    EXPECT_EQ(unpack_key(key), "rep");
    EXPECT_EQ(size, big.size());
    EXPECT_EQ(tid, Tid::make(6, 1));
    ++visited;
    return true;
  });
  EXPECT_EQ(visited, 1u);
  EXPECT_EQ(table_->purge_tombstones(), 1u);
  EXPECT_EQ(table_->record_count(), 1u);
}

TEST_F(BytesTableTest, ConcurrentIncrementsSumExactly) {
  constexpr int kThreads = 4;
  const int per_thread = scaled(2000);
  std::vector<std::thread> threads;
  std::vector<Worker*> workers;
  for (int i = 0; i < kThreads; ++i) workers.push_back(engine_->make_worker());
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, w = workers[i]] {
      for (int n = 0; n < per_thread; ++n) {
        const std::string key = "counter" + std::to_string(n % 3);
        const Status s = run_fn(w, [&](Txn& t) -> Status {
          std::string v;
          uint64_t version = 0;
          Status got = t.get(*table_, key, &v, &version);
          if (!got.ok() && !got.is_not_found()) return got;
          const long next = (got.ok() ? std::stol(v) : 0) + 1;
          return t.put(*table_, key, std::to_string(next));
        });
        ASSERT_TRUE(s.ok()) << s.to_string();
      }
    });
  }
  for (auto& t : threads) t.join();
  long sum = 0;
  for (const auto& [k, v] : contents()) sum += std::stol(v);
  EXPECT_EQ(sum, static_cast<long>(kThreads) * per_thread);
}

}  // namespace
}  // namespace shoal::txn

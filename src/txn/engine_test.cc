#include "src/txn/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "src/base/test_scale.h"

namespace shoal::txn {
namespace engine_test {  // named, not anonymous: unique in a unity build

struct Account {
  int64_t balance;
  uint64_t pad[3];
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = std::make_unique<Engine>(options_);
    table_ = engine_->create_table<1>("accounts");
  }
  EngineOptions options_;
  std::unique_ptr<Engine> engine_;
  Table<1>* table_ = nullptr;
};

// A procedure built from a lambda: args points at the callable.
template <typename F>
Status run_fn(Worker* w, F&& fn) {
  return w->run([](Txn& t, const void* args, void*) { return (*static_cast<const F*>(args))(t); },
                &fn);
}

TEST_F(EngineTest, InsertGetPutRemove) {
  Worker* w = engine_->make_worker();
  Table<1>& t = *table_;
  ASSERT_TRUE(run_fn(w, [&](Txn& txn) { return txn.insert(t, key1(7), Account{100, {}}); }).ok());
  Account a{};
  ASSERT_TRUE(run_fn(w, [&](Txn& txn) { return txn.get(t, key1(7), &a); }).ok());
  EXPECT_EQ(a.balance, 100);
  EXPECT_TRUE(run_fn(w, [&](Txn& txn) {
                return txn.insert(t, key1(7), Account{1, {}});
              }).code() == Code::kAlreadyExists);
  ASSERT_TRUE(run_fn(w, [&](Txn& txn) { return txn.put(t, key1(7), Account{55, {}}); }).ok());
  ASSERT_TRUE(t.peek(key1(7), &a, sizeof(a)).ok());
  EXPECT_EQ(a.balance, 55);
  ASSERT_TRUE(run_fn(w, [&](Txn& txn) { return txn.remove(t, key1(7)); }).ok());
  EXPECT_TRUE(t.peek(key1(7), &a, sizeof(a)).is_not_found());
  EXPECT_TRUE(run_fn(w, [&](Txn& txn) { return txn.get(t, key1(7), &a); }).is_not_found());
  EXPECT_TRUE(run_fn(w, [&](Txn& txn) { return txn.put(t, key1(7), a); }).is_not_found());
  // A removed key can be inserted again.
  ASSERT_TRUE(run_fn(w, [&](Txn& txn) { return txn.insert(t, key1(7), Account{9, {}}); }).ok());
  EXPECT_EQ(t.record_count(), 1u);
}

// A removed key leaves the index with its TID, so a transaction that finds it missing (or scans
// over where it was) read no version of the remove: it must still depend on it, or its answer
// ("gone") could be acknowledged before the remove is durable (Txn::note_removes_seen).
TEST_F(EngineTest, AMissOrAScanDependsOnTheRemoveThatMadeIt) {
  Worker* remover = engine_->make_worker();
  Worker* reader = engine_->make_worker();
  Table<1>& t = *table_;
  for (uint64_t k = 1; k <= 3; ++k) ASSERT_TRUE(t.load(key1(k), Account{1, {}}).ok());
  ASSERT_TRUE(run_fn(remover, [&](Txn& txn) { return txn.remove(t, key1(2)); }).ok());
  const uint64_t removed_at = remover->txn().last_commit_tid();
  ASSERT_GT(removed_at, 0u);

  uint64_t seen_by_get = 0, seen_by_scan = 0, seen_by_hit = 0;
  Account a{};
  ASSERT_TRUE(run_fn(reader, [&](Txn& txn) -> Status {
                EXPECT_TRUE(txn.get(t, key1(2), &a).is_not_found());
                seen_by_get = txn.max_seen_version();
                return Status::Ok();
              }).ok());
  ASSERT_TRUE(run_fn(reader, [&](Txn& txn) -> Status {
                size_t n = 0;
                SHOAL_TRY(
                    txn.scan(t, key1(1), key1(3), 10, [&](const Key1&, const void*, uint32_t) {
                      ++n;
                      return true;
                    }));
                EXPECT_EQ(n, 2u);
                seen_by_scan = txn.max_seen_version();
                return Status::Ok();
              }).ok());
  ASSERT_TRUE(run_fn(reader, [&](Txn& txn) -> Status {
                SHOAL_TRY(txn.get(t, key1(1), &a));  // a hit reads its own version only
                seen_by_hit = txn.max_seen_version();
                return Status::Ok();
              }).ok());
  EXPECT_GE(seen_by_get, removed_at);
  EXPECT_GE(seen_by_scan, removed_at);
  EXPECT_LT(seen_by_hit, removed_at);
}

TEST_F(EngineTest, ReadsOwnWritesAndScansThem) {
  Worker* w = engine_->make_worker();
  Table<1>& t = *table_;
  for (uint64_t k = 0; k < 10; ++k) ASSERT_TRUE(t.load(key1(k * 2), Account{int64_t(k), {}}).ok());
  Status s = run_fn(w, [&](Txn& txn) -> Status {
    SHOAL_TRY(txn.put(t, key1(4), Account{1000, {}}));
    SHOAL_TRY(txn.insert(t, key1(5), Account{500, {}}));
    SHOAL_TRY(txn.remove(t, key1(6)));
    Account a{};
    SHOAL_TRY(txn.get(t, key1(4), &a));
    EXPECT_EQ(a.balance, 1000);
    std::vector<std::pair<uint64_t, int64_t>> seen;
    SHOAL_TRY(txn.scan(t, key1(3), key1(9), 100, [&](const Key1& k, const void* v, uint32_t) {
      seen.emplace_back(k.w[0], static_cast<const Account*>(v)->balance);
      return true;
    }));
    std::vector<std::pair<uint64_t, int64_t>> want{{4, 1000}, {5, 500}, {8, 4}};
    EXPECT_EQ(seen, want);
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  std::vector<uint64_t> rev;
  ASSERT_TRUE(run_fn(w, [&](Txn& txn) {
                return txn.rscan(t, key1(100), key1(0), 3,
                                 [&](const Key1& k, const void*, uint32_t) {
                                   rev.push_back(k.w[0]);
                                   return true;
                                 });
              }).ok());
  EXPECT_EQ(rev, (std::vector<uint64_t>{18, 16, 14}));
}

TEST_F(EngineTest, UserAbortLeavesNoTrace) {
  Worker* w = engine_->make_worker();
  Table<1>& t = *table_;
  ASSERT_TRUE(t.load(key1(1), Account{10, {}}).ok());
  Status s = run_fn(w, [&](Txn& txn) -> Status {
    SHOAL_TRY(txn.put(t, key1(1), Account{99, {}}));
    SHOAL_TRY(txn.insert(t, key1(2), Account{99, {}}));
    return Status::UserAbort();
  });
  EXPECT_TRUE(s.is_user_abort());
  EXPECT_EQ(w->stats().user_aborts, 1u);
  Account a{};
  ASSERT_TRUE(t.peek(key1(1), &a, sizeof(a)).ok());
  EXPECT_EQ(a.balance, 10);
  EXPECT_TRUE(t.peek(key1(2), &a, sizeof(a)).is_not_found());
  EXPECT_EQ(t.record_count(), 1u) << "the aborted insert's placeholder must leave the index";
}

// Interleaves two transactions on one thread: `inner` commits on worker B while worker A's
// transaction is between its reads and its commit.
TEST_F(EngineTest, ReadWriteConflictAbortsAndRetries) {
  Worker* a = engine_->make_worker();
  Worker* b = engine_->make_worker();
  Table<1>& t = *table_;
  ASSERT_TRUE(t.load(key1(1), Account{10, {}}).ok());
  ASSERT_TRUE(t.load(key1(2), Account{0, {}}).ok());
  int attempts = 0;
  Status s = run_fn(a, [&](Txn& txn) -> Status {
    Account x{};
    SHOAL_TRY(txn.get(t, key1(1), &x));
    if (attempts++ == 0) {
      Status inner = run_fn(b, [&](Txn& tb) { return tb.put(t, key1(1), Account{20, {}}); });
      EXPECT_TRUE(inner.ok());
    }
    return txn.put(t, key1(2), Account{x.balance, {}});
  });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(a->stats().conflict_aborts, 1u);
  Account y{};
  ASSERT_TRUE(t.peek(key1(2), &y, sizeof(y)).ok());
  EXPECT_EQ(y.balance, 20) << "the retry must see the committed write";
}

TEST_F(EngineTest, PhantomInsertIntoScannedRangeAborts) {
  Worker* a = engine_->make_worker();
  Worker* b = engine_->make_worker();
  Table<1>& t = *table_;
  for (uint64_t k = 0; k < 100; k += 10) ASSERT_TRUE(t.load(key1(k), Account{1, {}}).ok());
  int attempts = 0;
  int64_t counted = 0;
  Status s = run_fn(a, [&](Txn& txn) -> Status {
    counted = 0;
    SHOAL_TRY(txn.scan(t, key1(0), key1(99), 1000, [&](const Key1&, const void* v, uint32_t) {
      counted += static_cast<const Account*>(v)->balance;
      return true;
    }));
    if (attempts++ == 0) {
      EXPECT_TRUE(run_fn(b, [&](Txn& tb) { return tb.insert(t, key1(55), Account{1, {}}); }).ok());
    }
    return txn.put(t, key1(0), Account{counted, {}});
  });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(counted, 11);
}

TEST_F(EngineTest, MissedGetIsProtectedAgainstLaterInsert) {
  Worker* a = engine_->make_worker();
  Worker* b = engine_->make_worker();
  Table<1>& t = *table_;
  ASSERT_TRUE(t.load(key1(1), Account{0, {}}).ok());
  int attempts = 0;
  Status s = run_fn(a, [&](Txn& txn) -> Status {
    Account x{};
    Status g = txn.get(t, key1(42), &x);
    if (!g.is_not_found()) return Status::UserAbort("key 42 must be absent on the first try");
    if (attempts++ == 0) {
      EXPECT_TRUE(run_fn(b, [&](Txn& tb) { return tb.insert(t, key1(42), Account{1, {}}); }).ok());
    }
    return txn.put(t, key1(1), Account{1, {}});
  });
  EXPECT_TRUE(s.is_user_abort()) << "the retry sees key 42: " << s.to_string();
  EXPECT_EQ(attempts, 1);
  EXPECT_EQ(a->stats().conflict_aborts, 1u);
}

TEST_F(EngineTest, CommitTidsIncreaseAndDominateReads) {
  Worker* w = engine_->make_worker();
  Table<1>& t = *table_;
  ASSERT_TRUE(t.load(key1(1), Account{0, {}}).ok());
  uint64_t prev = 0;
  for (int i = 0; i < 100; ++i) {
    if (i % 10 == 0) engine_->advance_epoch_for_tests();
    ASSERT_TRUE(run_fn(w, [&](Txn& txn) -> Status {
                  Account a{};
                  SHOAL_TRY(txn.get(t, key1(1), &a));
                  ++a.balance;
                  return txn.put(t, key1(1), a);
                }).ok());
    const uint64_t tid = w->txn().last_commit_tid();
    EXPECT_GT(tid, prev);
    EXPECT_GE(Tid::epoch(tid), engine_->epoch() - 1);
    EXPECT_EQ(w->txn().deps().get(0), tid);
    prev = tid;
  }
}

// The participant's half of 2PC: certify holds the locks, so a concurrent writer of the same
// record cannot commit until install_and_unlock (at a coordinator-raised TID) or release.
TEST_F(EngineTest, CertifyHoldsLocksUntilInstallOrRelease) {
  Worker* a = engine_->make_worker();
  Worker* b = engine_->make_worker();
  Table<1>& t = *table_;
  ASSERT_TRUE(t.load(key1(1), Account{0, {}}).ok());
  for (bool install : {true, false}) {
    Txn& txn = a->txn();
    txn.begin();
    ASSERT_TRUE(txn.put(t, key1(1), Account{install ? 7 : 8, {}}).ok());
    uint64_t proposed = 0;
    ASSERT_TRUE(txn.certify(&proposed).ok());
    // While certified, another writer's commit cannot take the lock.
    Txn& other = b->txn();
    other.begin();
    ASSERT_TRUE(other.put(t, key1(1), Account{99, {}}).ok());
    uint64_t other_tid = 0;
    EXPECT_TRUE(other.certify(&other_tid).is_aborted());
    other.abort();
    other.end();
    if (install) {
      txn.install_and_unlock(proposed + 1000, nullptr);
      EXPECT_EQ(txn.last_commit_tid(), proposed + 1000);
    } else {
      txn.release_certified();
      txn.abort();
    }
    txn.end();
    Account v{};
    ASSERT_TRUE(t.peek(key1(1), &v, sizeof(v)).ok());
    EXPECT_EQ(v.balance, 7) << "install=" << install;
  }
}

// A read-only table (TPC-C's ITEM): reads are served but never recorded, so a writer of
// another table cannot invalidate them and no transaction can write the table.
TEST_F(EngineTest, ReadOnlyTableReadsAreUnrecordedAndWritesRefused) {
  Worker* w = engine_->make_worker();
  Table<1>& items = *engine_->create_table<1>("items");
  ASSERT_TRUE(items.load(key1(1), Account{42, {}}).ok());
  ASSERT_TRUE(items.load(key1(2), Account{43, {}}).ok());
  items.make_read_only();
  ASSERT_TRUE(table_->load(key1(5), Account{0, {}}).ok());
  Txn& txn = w->txn();
  txn.begin();
  Account a{};
  ASSERT_TRUE(txn.get(items, key1(1), &a).ok());
  EXPECT_EQ(a.balance, 42);
  EXPECT_TRUE(txn.get(items, key1(9), &a).is_not_found());
  int seen = 0;
  ASSERT_TRUE(txn.scan(items, key1(0), key1(100), 10,
                       [&](const Key<1>&, const void*, uint32_t) {
                         ++seen;
                         return true;
                       })
                  .ok());
  EXPECT_EQ(seen, 2);
  const Status refused = txn.put(items, key1(1), Account{0, {}});
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  EXPECT_NE(refused.message().find("items is read-only"), std::string::npos);
  EXPECT_EQ(txn.insert(items, key1(3), Account{0, {}}).code(), Code::kInvalidArgument);
  EXPECT_EQ(txn.remove(items, key1(2)).code(), Code::kInvalidArgument);
  // Nothing was recorded: with a write elsewhere locked, every read is pinned (vacuously).
  ASSERT_TRUE(txn.put(*table_, key1(5), Account{1, {}}).ok());
  uint64_t proposed = 0;
  ASSERT_TRUE(txn.lock_write_set(&proposed).ok());
  EXPECT_TRUE(txn.reads_pinned());
  txn.release_certified();
  txn.abort();
  txn.end();
}

// reads_pinned(): true only when every recorded read is a row the transaction holds locked
// and it read no index nodes.
TEST_F(EngineTest, ReadsPinnedOnlyWhenEveryReadIsLockedByUs) {
  Worker* w = engine_->make_worker();
  Table<1>& t = *table_;
  ASSERT_TRUE(t.load(key1(1), Account{10, {}}).ok());
  ASSERT_TRUE(t.load(key1(2), Account{20, {}}).ok());
  Txn& txn = w->txn();
  auto pinned_after = [&](auto&& body) {
    txn.begin();
    body();
    uint64_t proposed = 0;
    EXPECT_TRUE(txn.lock_write_set(&proposed).ok());
    const bool pinned = txn.reads_pinned();
    txn.release_certified();
    txn.abort();
    txn.end();
    return pinned;
  };
  Account a{};
  // Read and written: pinned.
  EXPECT_TRUE(pinned_after([&] {
    ASSERT_TRUE(txn.get(t, key1(1), &a).ok());
    ASSERT_TRUE(txn.put(t, key1(1), Account{11, {}}).ok());
  }));
  // A second row only read: not pinned.
  EXPECT_FALSE(pinned_after([&] {
    ASSERT_TRUE(txn.get(t, key1(1), &a).ok());
    ASSERT_TRUE(txn.get(t, key1(2), &a).ok());
    ASSERT_TRUE(txn.put(t, key1(1), Account{11, {}}).ok());
  }));
  // A miss records an index node: not pinned.
  EXPECT_FALSE(pinned_after([&] {
    EXPECT_TRUE(txn.get(t, key1(7), &a).is_not_found());
    ASSERT_TRUE(txn.put(t, key1(1), Account{11, {}}).ok());
  }));
}

// Remote requests and log replay know tables only by id: the untyped calls must behave like
// the typed ones, and the write set must read back exactly what was written.
TEST_F(EngineTest, UntypedAccessAndWriteSetView) {
  Worker* w = engine_->make_worker();
  TableBase* base = engine_->find_table("accounts");
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(table_->load(key1(3), Account{30, {}}).ok());
  Txn& txn = w->txn();
  txn.begin();
  const uint64_t k3 = 3, k4 = 4;
  Account a{};
  uint32_t size = 0;
  ASSERT_TRUE(base->txn_get(txn, &k3, &a, sizeof(a), &size).ok());
  EXPECT_EQ(a.balance, 30);
  EXPECT_EQ(size, sizeof(Account));
  a.balance = 31;
  ASSERT_TRUE(base->txn_put(txn, &k3, &a, sizeof(a)).ok());
  ASSERT_TRUE(base->txn_insert(txn, &k4, &a, sizeof(a)).ok());
  EXPECT_EQ(base->txn_insert(txn, &k4, &a, sizeof(a)).code(), Code::kAlreadyExists);
  std::vector<std::pair<uint64_t, WriteKind>> seen;
  ASSERT_TRUE(txn.commit().ok());
  txn.for_each_write([&](const WriteView& v) {
    EXPECT_EQ(v.table_id, base->id());
    EXPECT_EQ(v.key_word_count, 1u);
    EXPECT_EQ(v.size_bytes, sizeof(Account));
    EXPECT_EQ(static_cast<const Account*>(v.value)->balance, 31);
    seen.emplace_back(v.key_words[0], v.kind);
  });
  txn.end();
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::pair<uint64_t, WriteKind>>{{3, WriteKind::kPut},
                                                               {4, WriteKind::kInsert}}));
  txn.begin();
  ASSERT_TRUE(base->txn_remove(txn, &k4).ok());
  ASSERT_TRUE(txn.commit().ok());
  txn.end();
  EXPECT_TRUE(table_->peek(key1(4), &a, sizeof(a)).is_not_found());
}

TEST(EngineChains, KeepsOlderVersions) {
  EngineOptions options;
  options.keep_version_chains = true;
  Engine engine(options);
  Table<1>* t = engine.create_table<1>("t");
  ASSERT_TRUE(t->load(key1(1), Account{0, {}}).ok());
  Worker* w = engine.make_worker();
  for (int64_t v = 1; v <= 5; ++v) {
    ASSERT_TRUE(run_fn(w, [&](Txn& txn) { return txn.put(*t, key1(1), Account{v, {}}); }).ok());
  }
  std::vector<int64_t> chain;
  ASSERT_TRUE(t->peek_chain_for_tests(key1(1), [&](const void* data, uint64_t, const DepVec*) {
                 chain.push_back(static_cast<const Account*>(data)->balance);
               }).ok());
  EXPECT_EQ(chain, (std::vector<int64_t>{5, 4, 3, 2, 1, 0}));
}

// Money moves between accounts on two threads while read-only audits sum every account; a
// committed audit must always see the invariant total.
TEST(EngineConcurrent, ConcurrentBankTransfersKeepTotal) {
  Engine engine;
  Table<1>* t = engine.create_table<1>("bank");
  constexpr int kAccounts = 64;
  constexpr int64_t kInitial = 1000;
  for (int i = 0; i < kAccounts; ++i) ASSERT_TRUE(t->load(key1(i), Account{kInitial, {}}).ok());
  const int transfers = scaled(20000);
  std::atomic<int> bad_audits{0};
  auto body = [&](int seed) {
    Worker* w = engine.make_worker();
    Rng rng(seed);
    for (int i = 0; i < transfers; ++i) {
      if (i % 16 == 0) {
        int64_t sum = 0;
        Status s = run_fn(w, [&](Txn& txn) {
          sum = 0;
          return txn.scan(*t, key1(0), key1(kAccounts), kAccounts,
                          [&](const Key1&, const void* v, uint32_t) {
                            sum += static_cast<const Account*>(v)->balance;
                            return true;
                          });
        });
        if (s.ok() && sum != kAccounts * kInitial) bad_audits.fetch_add(1);
        continue;
      }
      const uint64_t from = rng.uniform(0, kAccounts - 1);
      const uint64_t to = (from + 1 + rng.uniform(0, kAccounts - 2)) % kAccounts;
      const int64_t amount = static_cast<int64_t>(rng.uniform(1, 50));
      Status s = run_fn(w, [&](Txn& txn) -> Status {
        Account a{}, b{};
        SHOAL_TRY(txn.get(*t, key1(from), &a));
        SHOAL_TRY(txn.get(*t, key1(to), &b));
        if (a.balance < amount) return Status::UserAbort();
        a.balance -= amount;
        b.balance += amount;
        SHOAL_TRY(txn.put(*t, key1(from), a));
        return txn.put(*t, key1(to), b);
      });
      ASSERT_TRUE(s.ok() || s.is_user_abort()) << s.to_string();
    }
  };
  std::thread t1(body, 1), t2(body, 2);
  t1.join();
  t2.join();
  EXPECT_EQ(bad_audits.load(), 0);
  int64_t total = 0;
  t->for_each(key1(0), key1(kAccounts), [&](const Key1&, const void* v, uint32_t) {
    total += static_cast<const Account*>(v)->balance;
    return true;
  });
  EXPECT_EQ(total, kAccounts * kInitial);
}

// Inserts and deletes race on overlapping keys; every key ends either present exactly once or
// absent, and the counts add up.
TEST(EngineConcurrent, ConcurrentInsertRemoveChurn) {
  Engine engine;
  Table<1>* t = engine.create_table<1>("churn");
  const int ops = scaled(20000);
  std::atomic<int64_t> net{0};
  auto body = [&](int seed) {
    Worker* w = engine.make_worker();
    Rng rng(seed);
    for (int i = 0; i < ops; ++i) {
      const uint64_t k = rng.uniform(0, 255);
      if (rng.uniform(0, 1) == 0) {
        Status s = run_fn(w, [&](Txn& txn) { return txn.insert(*t, key1(k), Account{1, {}}); });
        if (s.ok()) net.fetch_add(1);
      } else {
        Status s = run_fn(w, [&](Txn& txn) { return txn.remove(*t, key1(k)); });
        if (s.ok()) net.fetch_sub(1);
      }
    }
  };
  std::thread t1(body, 3), t2(body, 4);
  t1.join();
  t2.join();
  int64_t present = 0;
  t->for_each(key1(0), key1(1000), [&](const Key1&, const void*, uint32_t) {
    ++present;
    return true;
  });
  EXPECT_EQ(present, net.load());
  EXPECT_EQ(static_cast<int64_t>(t->record_count()), present);
}

// Read, then insert if absent, else update or remove (a counter that is reset now and then):
// the answer the procedure acts on must hold at commit, so no run may end in AlreadyExists
// (the insert of a key it read as absent) or NotFound: a changed read means run it again.
TEST(EngineConcurrent, ConcurrentReadThenInsertOrRemoveNeverLeaksAConflict) {
  Engine engine;
  Table<1>* t = engine.create_table<1>("bump");
  const int ops = scaled(20000);
  auto body = [&](int seed) {
    Worker* w = engine.make_worker();
    Rng rng(seed);
    for (int i = 0; i < ops; ++i) {
      const uint64_t k = rng.uniform(0, 63);
      Status s = run_fn(w, [&](Txn& txn) {
        Account a{};
        Status got = txn.get(*t, key1(k), &a);
        if (got.is_not_found()) return txn.insert(*t, key1(k), Account{1, {}});
        SHOAL_TRY(got);
        if (a.balance % 7 == 6) return txn.remove(*t, key1(k));
        a.balance++;
        return txn.put(*t, key1(k), a);
      });
      ASSERT_TRUE(s.ok()) << s.to_string() << " at op " << i;
    }
  };
  std::thread t1(body, 5), t2(body, 6);
  t1.join();
  t2.join();
}

}  // namespace engine_test
}  // namespace shoal::txn

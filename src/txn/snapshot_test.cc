// Snapshot reads on a follower's engine (src/txn/snapshot.h): reads at S see the newest
// version <= S and never a newer one, through puts, removes, re-inserts and grown records;
// chains are trimmed to the oldest snapshot in use; concurrent replay (TSan: Concurrent*);
// the planted "read the newest version" bug tears a snapshot.
#include "src/txn/snapshot.h"

#include <gtest/gtest.h>

#include <chrono>

#include <atomic>
#include <thread>
#include <vector>

namespace shoal::txn {
namespace snapshot_test {  // named, not anonymous: unique in a unity build

struct Small {
  uint64_t x;
};
struct Big {
  uint64_t x;
  uint64_t pad[15];
};

struct Fixture {
  Fixture() : engine(options()), registry(engine) { table = engine.create_table<1>("t"); }
  static EngineOptions options() {
    EngineOptions o;
    o.epoch_ticker = false;
    o.keep_version_chains = true;
    return o;
  }
  void put(uint64_t k, uint64_t x, uint64_t tid) {
    ebr::Guard guard;
    const Small v{x};
    table->apply_replicated(&k, WriteKind::kPut, &v, sizeof v, tid);
  }
  void put_big(uint64_t k, uint64_t x, uint64_t tid) {
    ebr::Guard guard;
    Big v{};
    v.x = x;
    table->apply_replicated(&k, WriteKind::kPut, &v, sizeof v, tid);
  }
  void remove(uint64_t k, uint64_t tid) {
    ebr::Guard guard;
    table->apply_replicated(&k, WriteKind::kRemove, nullptr, 0, tid);
  }
  Engine engine;
  SnapshotRegistry registry;
  Table<1>* table = nullptr;
};

// Returns x of the key at the reader's snapshot, or -1 if absent there.
int64_t read_x(SnapshotReader& r, Table<1>& t, uint64_t k) {
  uint64_t words[16] = {};
  uint32_t size = 0;
  Status s = r.get(t, key1(k), words, sizeof words, &size);
  if (s.is_not_found()) return -1;
  EXPECT_TRUE(s.ok()) << s.to_string();
  return static_cast<int64_t>(words[0]);
}

TEST(SnapshotRead, SeesTheNewestVersionAtOrBelowTheSnapshot) {
  Fixture f;
  f.put(1, 1, 10);  // key 1: 10, 20, then 40 (after S)
  f.put(1, 2, 20);
  f.put(3, 3, 10);  // key 3: removed at 35, after S
  f.put(4, 4, 10);  // key 4: removed at 20, re-inserted at 40: absent at S
  f.remove(4, 20);
  f.put(5, 5, 10);  // key 5: grows into a bigger record at 40
  f.registry.publish_applied(30);
  SnapshotReader r(f.registry);
  ASSERT_TRUE(r.begin().ok());
  EXPECT_EQ(r.snapshot_tid(), 30u);
  f.put(1, 4, 40);
  f.put(2, 9, 40);  // key 2: inserted after S
  f.remove(3, 35);
  f.put(4, 44, 40);
  f.put_big(5, 55, 40);
  f.registry.publish_applied(40);
  EXPECT_EQ(read_x(r, *f.table, 1), 2);
  EXPECT_EQ(read_x(r, *f.table, 2), -1);
  EXPECT_EQ(read_x(r, *f.table, 3), 3);
  EXPECT_EQ(read_x(r, *f.table, 4), -1);
  EXPECT_EQ(read_x(r, *f.table, 5), 5);
  std::vector<uint64_t> keys;
  ASSERT_TRUE(r.scan(*f.table, key1(0), key1(100), 10, [&](const Key<1>& k, const void*, uint32_t) {
                 keys.push_back(k.w[0]);
                 return true;
               }).ok());
  EXPECT_EQ(keys, (std::vector<uint64_t>{1, 3, 5}));
  keys.clear();
  ASSERT_TRUE(r.rscan(*f.table, key1(100), key1(0), 2, [&](const Key<1>& k, const void*, uint32_t) {
                 keys.push_back(k.w[0]);
                 return true;
               }).ok());
  EXPECT_EQ(keys, (std::vector<uint64_t>{5, 3}));
  r.end();
  // A new snapshot is at 40: the newest of everything.
  ASSERT_TRUE(r.begin().ok());
  EXPECT_EQ(read_x(r, *f.table, 1), 4);
  EXPECT_EQ(read_x(r, *f.table, 2), 9);
  EXPECT_EQ(read_x(r, *f.table, 3), -1);
  EXPECT_EQ(read_x(r, *f.table, 4), 44);
  EXPECT_EQ(read_x(r, *f.table, 5), 55);
}

TEST(SnapshotRead, ChainsAreTrimmedToTheOldestSnapshotInUse) {
  Fixture f;
  const size_t version_bytes = Record::alloc_bytes(Record::words_for(sizeof(Small)));
  f.put(1, 0, 1);
  f.registry.publish_applied(1);
  SnapshotReader held(f.registry);
  ASSERT_TRUE(held.begin().ok());  // pins versions newer than 1 and the newest <= 1
  for (uint64_t tid = 2; tid <= 101; ++tid) {
    f.put(1, tid, tid);
    f.registry.publish_applied(tid);
  }
  EXPECT_EQ(f.registry.horizon(), 1u);
  EXPECT_EQ(f.engine.version_chain_bytes(), 100 * version_bytes);  // nothing trimmed
  EXPECT_EQ(read_x(held, *f.table, 1), 0);
  held.end();
  EXPECT_EQ(f.registry.horizon(), 101u);
  f.put(1, 102, 102);  // the next write trims to the newest version <= 101
  f.registry.publish_applied(102);
  EXPECT_EQ(f.engine.version_chain_bytes(), 1 * version_bytes);
  for (uint64_t tid = 103; tid <= 1000; ++tid) {
    f.put(1, tid, tid);
    f.registry.publish_applied(tid);
  }
  EXPECT_EQ(f.engine.version_chain_bytes(), 1 * version_bytes);  // bounded without readers
  // Retired versions are freed through EBR.
  ebr::drain_all_for_tests();
  EXPECT_EQ(ebr::pending_count(), 0u);
}

TEST(SnapshotRead, SlotsAreBoundedWithAClearError) {
  Fixture f;
  std::vector<std::unique_ptr<SnapshotReader>> readers;
  for (uint32_t i = 0; i < SnapshotRegistry::kSnapshotsMax; ++i) {
    readers.push_back(std::make_unique<SnapshotReader>(f.registry));
    ASSERT_TRUE(readers.back()->begin().ok());
  }
  SnapshotReader extra(f.registry);
  Status s = extra.begin();
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.to_string().find("snapshot slots"), std::string::npos) << s.to_string();
  readers.back()->end();
  EXPECT_TRUE(extra.begin().ok());
}

// ---- Transfers between accounts: the sum is invariant in every consistent snapshot ----

constexpr uint64_t kAccounts = 8;
constexpr uint64_t kInitial = 1000;

// Transaction t (TID t + 1; TID 1 is the load) moves 1 from account a(t) to account b(t).
uint64_t from_of(uint64_t t) {
  return t % kAccounts;
}
uint64_t to_of(uint64_t t) {
  return (t + 1 + (t / kAccounts) % (kAccounts - 1)) % kAccounts;
}

struct Account {
  uint64_t balance;
  uint64_t tid;     // the TID that wrote this version
  uint64_t pad[6];  // used on every third write: the record grows and shrinks back
};

class Bank {
 public:
  explicit Bank(Fixture& f) : f_(f) {
    for (uint64_t k = 0; k < kAccounts; ++k) balance_[k] = kInitial;
    for (uint64_t k = 0; k < kAccounts; ++k) write(k, 1);
    f.registry.publish_applied(1);
  }
  // Replays transaction t: both writes at TID t + 1, then publishes the applied TID.
  void replay(uint64_t t) {
    --balance_[from_of(t)];
    ++balance_[to_of(t)];
    write(from_of(t), t + 1);
    write(to_of(t), t + 1);
    f_.registry.publish_applied(t + 1);
  }

 private:
  void write(uint64_t k, uint64_t tid) {
    ebr::Guard guard;
    Account a{};
    a.balance = balance_[k];
    a.tid = tid;
    const uint32_t size = tid % 3 == 0 ? sizeof(Account) : 16;
    f_.table->apply_replicated(&k, WriteKind::kPut, &a, size, tid);
  }
  Fixture& f_;
  uint64_t balance_[kAccounts];
};

// The TID of account k's newest write at or below snapshot s.
uint64_t expected_tid(uint64_t k, uint64_t s) {
  for (uint64_t tid = s; tid > 1; --tid) {
    if (from_of(tid - 1) == k || to_of(tid - 1) == k) return tid;
  }
  return 1;
}

// Reads every account at the reader's snapshot; counts violations (a sum off the invariant, a
// version newer than S, or not the newest <= S).
uint64_t violations_at_snapshot(SnapshotReader& r, Table<1>& t) {
  uint64_t sum = 0, bad = 0, seen = 0;
  Status s = r.scan(t, key1(0), key1(kAccounts - 1), kAccounts,
                    [&](const Key<1>& key, const void* v, uint32_t) {
                      Account a;
                      std::memcpy(&a, v, 16);
                      sum += a.balance;
                      ++seen;
                      if (a.tid > r.snapshot_tid()) ++bad;
                      if (a.tid != expected_tid(key.w[0], r.snapshot_tid())) ++bad;
                      return true;
                    });
  EXPECT_TRUE(s.ok());
  if (seen != kAccounts || sum != kAccounts * kInitial) ++bad;
  return bad;
}

TEST(SnapshotRead, PlantedNewestVersionBugTearsASnapshot) {
  Fixture f;
  Bank bank(f);
  for (uint64_t t = 1; t <= 10; ++t) bank.replay(t);
  SnapshotReader good(f.registry);
  SnapshotReader planted(f.registry, SnapshotReaderOptions{.unsafe_read_newest = true});
  ASSERT_TRUE(good.begin().ok());
  ASSERT_TRUE(planted.begin().ok());
  // Replay runs on while both read: transaction 11 writes only accounts 3 and 4, and replay is
  // still between its two writes (the second not installed yet), as it is at any instant.
  ebr::Guard guard;
  Account a{};
  a.balance = 0;
  a.tid = 12;
  const uint64_t k = from_of(11);
  f.table->apply_replicated(&k, WriteKind::kPut, &a, 16, 12);
  EXPECT_EQ(violations_at_snapshot(good, *f.table), 0u);
  EXPECT_GT(violations_at_snapshot(planted, *f.table), 0u);
}

TEST(ConcurrentSnapshotRead, ReadersNeverSeeATornSnapshotDuringReplay) {
  Fixture f;
  Bank bank(f);
  constexpr uint64_t kTxns = 20000;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> bad{0}, snapshots{0};
  std::atomic<uint32_t> readers_started{0};
  auto reader = [&] {
    SnapshotReader r(f.registry);
    readers_started.fetch_add(1, std::memory_order_acq_rel);
    // Bounded by the replayer finishing (kTxns installs).
    while (!done.load(std::memory_order_acquire)) {
      ASSERT_TRUE(r.begin().ok());
      bad += violations_at_snapshot(r, *f.table);
      // Point reads at the same snapshot agree with the scan.
      for (uint64_t k = 0; k < kAccounts; ++k) {
        Account a{};
        uint32_t size = 0;
        ASSERT_TRUE(r.get(*f.table, key1(k), &a, sizeof a, &size).ok());
        if (a.tid != expected_tid(k, r.snapshot_tid())) ++bad;
      }
      r.end();
      ++snapshots;
    }
  };
  std::thread r1(reader), r2(reader);
  // On a loaded machine the readers may start late: replay only once both run (bounded: ~10 s),
  // so the reads really overlap replay.
  for (int i = 0; i < 10'000 && readers_started.load(std::memory_order_acquire) < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (uint64_t t = 1; t <= kTxns; ++t) bank.replay(t);
  for (int i = 0; i < 10'000 && snapshots.load(std::memory_order_acquire) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  done.store(true, std::memory_order_release);
  r1.join();
  r2.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(snapshots.load(), 0u);
  // Without readers the chains are trimmed back to one version below the head per key.
  for (uint64_t t = kTxns + 1; t <= kTxns + kAccounts * kAccounts; ++t) bank.replay(t);
  EXPECT_LE(f.engine.version_chain_bytes(),
            kAccounts * Record::alloc_bytes(Record::words_for(sizeof(Account))));
}

}  // namespace snapshot_test
}  // namespace shoal::txn

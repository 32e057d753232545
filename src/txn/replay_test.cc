// The replication hooks of the engine: the commit hook, apply_replicated (newer TID wins,
// tombstones), scan_committed, create_table_with_key_words, and the TID order of an insert
// that follows a remove of the same key.
#include <gtest/gtest.h>

#include <vector>

#include "src/txn/engine.h"

namespace shoal::txn {
namespace {

struct V {
  uint64_t x;
};

std::vector<std::pair<uint64_t, uint64_t>> contents(const TableBase& t) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  t.scan_committed([&](const uint64_t* key, const void* value, uint32_t size, uint64_t) {
    EXPECT_EQ(size, sizeof(V));
    out.emplace_back(key[0], static_cast<const V*>(value)->x);
    return true;
  });
  return out;
}

TEST(ReplayApply, NewerTidWinsAndReplayIsIdempotent) {
  EngineOptions o;
  o.epoch_ticker = false;
  Engine e(o);
  auto t = e.create_table_with_key_words("t", 1);
  ASSERT_TRUE(t.ok());
  TableBase& table = **t;
  ebr::Guard guard;
  const uint64_t k = 7;
  const V a{1}, b{2};
  EXPECT_TRUE(table.apply_replicated(&k, WriteKind::kInsert, &a, sizeof a, 10));
  EXPECT_TRUE(table.apply_replicated(&k, WriteKind::kPut, &b, sizeof b, 20));
  EXPECT_FALSE(table.apply_replicated(&k, WriteKind::kPut, &a, sizeof a, 15));  // older
  EXPECT_FALSE(table.apply_replicated(&k, WriteKind::kPut, &b, sizeof b, 20));  // again
  EXPECT_EQ(contents(table), (std::vector<std::pair<uint64_t, uint64_t>>{{7, 2}}));
}

TEST(ReplayApply, RemoveLeavesATombstoneThatOlderWritesCannotRevive) {
  EngineOptions o;
  o.epoch_ticker = false;
  Engine e(o);
  TableBase& table = **e.create_table_with_key_words("t", 1);
  ebr::Guard guard;
  const uint64_t k = 3;
  const V a{1}, c{3};
  // Streams deliver out of TID order: the remove (30) before the insert (10) it follows.
  EXPECT_TRUE(table.apply_replicated(&k, WriteKind::kRemove, nullptr, 0, 30));
  EXPECT_FALSE(table.apply_replicated(&k, WriteKind::kInsert, &a, sizeof a, 10));
  EXPECT_TRUE(contents(table).empty());
  // A newer insert over the tombstone; the value grows the empty tombstone record.
  EXPECT_TRUE(table.apply_replicated(&k, WriteKind::kInsert, &c, sizeof c, 40));
  EXPECT_EQ(contents(table), (std::vector<std::pair<uint64_t, uint64_t>>{{3, 3}}));
}

// A follower promoted to leader (Engine::start_leading) drops replay's tombstones: the index
// keeps only live rows, reads and scans see the same, and the engine commits on top.
TEST(ReplayApply, StartLeadingPurgesTombstones) {
  EngineOptions o;
  o.epoch_ticker = false;
  Engine e(o);
  auto t = e.create_table_with_key_words("t", 1);
  ASSERT_TRUE(t.ok());
  TableBase& table = **t;
  {
    ebr::Guard guard;
    for (uint64_t k = 0; k < 1000; ++k) {
      const V v{k};
      ASSERT_TRUE(table.apply_replicated(&k, WriteKind::kInsert, &v, sizeof v, 10 + k));
    }
    for (uint64_t k = 0; k < 1000; k += 2) {
      ASSERT_TRUE(table.apply_replicated(&k, WriteKind::kRemove, nullptr, 0, 5000 + k));
    }
  }
  EXPECT_EQ(table.record_count(), 1000u);  // 500 of them tombstones
  const auto before = contents(table);
  EXPECT_EQ(before.size(), 500u);
  EXPECT_EQ(e.start_leading(uint64_t{1} << 20), 500u);
  EXPECT_EQ(table.record_count(), 500u);
  EXPECT_EQ(contents(table), before);
  EXPECT_GE(e.epoch(), uint64_t{1} << 20);
}

TEST(ReplayApply, ValuesMayGrow) {
  EngineOptions o;
  o.epoch_ticker = false;
  Engine e(o);
  TableBase& table = **e.create_table_with_key_words("t", 2);
  ebr::Guard guard;
  const uint64_t k[2] = {1, 2};
  const char small[8] = "abc";
  char big[200] = "xyz";
  EXPECT_TRUE(table.apply_replicated(k, WriteKind::kInsert, small, sizeof small, 5));
  EXPECT_TRUE(table.apply_replicated(k, WriteKind::kPut, big, sizeof big, 6));
  uint32_t seen = 0;
  table.scan_committed([&](const uint64_t*, const void* v, uint32_t size, uint64_t version) {
    EXPECT_EQ(size, sizeof big);
    EXPECT_STREQ(static_cast<const char*>(v), "xyz");
    EXPECT_EQ(version, 6u);
    ++seen;
    return true;
  });
  EXPECT_EQ(seen, 1u);
  EXPECT_FALSE(e.create_table_with_key_words("wide", 9).ok());
}

struct HookLog {
  std::vector<uint64_t> tids;
  std::vector<size_t> writes;
};

Status put_or_insert(Txn& txn, const void* args, void*) {
  auto* t = static_cast<Table<1>*>(txn.engine().tables()[0].get());
  const uint64_t k = *static_cast<const uint64_t*>(args);
  V v{};
  const Status s = txn.get(*t, Key<1>{{k}}, &v);
  if (s.is_not_found()) return txn.insert(*t, Key<1>{{k}}, V{k});
  SHOAL_TRY(s);
  return txn.remove(*t, Key<1>{{k}});
}

TEST(CommitHook, SeesEveryCommitWithItsTidAndWrites) {
  EngineOptions o;
  o.epoch_ticker = false;
  Engine e(o);
  e.create_table<1>("t");
  Worker* w = e.make_worker();
  HookLog log;
  w->set_commit_hook(
      [](void* ctx, const Txn& txn) {
        auto* l = static_cast<HookLog*>(ctx);
        l->tids.push_back(txn.last_commit_tid());
        size_t n = 0;
        txn.for_each_write([&](const WriteView&) { ++n; });
        l->writes.push_back(n);
        return Status::Ok();
      },
      &log);
  for (uint64_t k : {1, 2, 1}) ASSERT_TRUE(w->run(&put_or_insert, &k).ok());
  ASSERT_EQ(log.tids.size(), 3u);
  EXPECT_LT(log.tids[0], log.tids[1]);
  EXPECT_LT(log.tids[1], log.tids[2]);
  EXPECT_EQ(log.writes, (std::vector<size_t>{1, 1, 1}));
  w->set_commit_hook(nullptr, nullptr);
  const uint64_t k = 5;
  ASSERT_TRUE(w->run(&put_or_insert, &k).ok());
  EXPECT_EQ(log.tids.size(), 3u);
}

// Adds 1 to the value of key 1 (a put), or inserts it as 100.
Status bump(Txn& txn, const void*, void*) {
  auto* t = static_cast<Table<1>*>(txn.engine().tables()[0].get());
  V v{};
  const Status s = txn.get(*t, Key<1>{{1}}, &v);
  if (s.is_not_found()) return txn.insert(*t, Key<1>{{1}}, V{100});
  SHOAL_TRY(s);
  return txn.put(*t, Key<1>{{1}}, V{v.x + 1});
}

// With a commit hook, a put shows what it overwrote and that version's TID (a log can then
// carry only the changed bytes); without one, nothing is kept.
TEST(CommitHook, PutShowsTheValueAndVersionItOverwrote) {
  EngineOptions o;
  o.epoch_ticker = false;
  Engine e(o);
  e.create_table<1>("t");
  Worker* w = e.make_worker();
  struct Seen {
    uint64_t tid = 0, base_tid = 0, old_x = 0, new_x = 0;
    bool has_old = false;
  };
  std::vector<Seen> seen;
  w->set_commit_hook(
      [](void* ctx, const Txn& txn) {
        Seen s;
        s.tid = txn.last_commit_tid();
        txn.for_each_write([&](const WriteView& v) {
          s.new_x = static_cast<const V*>(v.value)->x;
          s.base_tid = v.base_tid;
          s.has_old = v.old_value != nullptr;
          if (s.has_old) {
            EXPECT_EQ(v.old_size_bytes, sizeof(V));
            s.old_x = static_cast<const V*>(v.old_value)->x;
          }
        });
        static_cast<std::vector<Seen>*>(ctx)->push_back(s);
        return Status::Ok();
      },
      &seen);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->run(&bump, nullptr).ok());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_FALSE(seen[0].has_old);  // an insert
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_TRUE(seen[i].has_old);
    EXPECT_EQ(seen[i].base_tid, seen[i - 1].tid);
    EXPECT_EQ(seen[i].old_x, seen[i - 1].new_x);
    EXPECT_EQ(seen[i].new_x, seen[i].old_x + 1);
  }
  w->set_commit_hook(nullptr, nullptr);
  ASSERT_TRUE(w->run(&bump, nullptr).ok());
  bool has_old = true;
  w->txn().for_each_write([&](const WriteView& v) { has_old = v.old_value != nullptr; });
  EXPECT_FALSE(has_old);
}

void add_seven_at_byte_2(void* ctx, void* data) {
  static_cast<uint8_t*>(data)[2] = static_cast<uint8_t>(*static_cast<int*>(ctx) + 7);
}

// A patch rewrites bytes of the held version in place; replayed again it changes nothing.
TEST(ReplayApply, PatchAppliesOnceOntoTheHeldVersion) {
  EngineOptions o;
  o.epoch_ticker = false;
  Engine e(o);
  TableBase& table = **e.create_table_with_key_words("t", 1);
  ebr::Guard guard;
  const uint64_t k = 9;
  const V a{0x1111111111111111};
  ASSERT_TRUE(table.apply_replicated(&k, WriteKind::kInsert, &a, sizeof a, 10));
  int ctx = 1;
  // Computed against version 5 (a bootstrapped row carries a later snapshot TID: 10).
  EXPECT_TRUE(table.apply_replicated_patch(&k, 5, sizeof(V), &add_seven_at_byte_2, &ctx, 20));
  const uint64_t want = 0x1111111111081111;
  EXPECT_EQ(contents(table), (std::vector<std::pair<uint64_t, uint64_t>>{{9, want}}));
  ctx = 50;  // the same TID again (a replayed entry): skipped, value unchanged
  EXPECT_FALSE(table.apply_replicated_patch(&k, 10, sizeof(V), &add_seven_at_byte_2, &ctx, 20));
  EXPECT_EQ(contents(table), (std::vector<std::pair<uint64_t, uint64_t>>{{9, want}}));
  EXPECT_DEATH(table.apply_replicated_patch(&k, 30, sizeof(V), &add_seven_at_byte_2, &ctx, 40),
               "does not fit the held version");
}

// A remove unlinks the key at once, taking its TID along; a later insert of that key by
// another worker (whose own TIDs lag) must still get a larger TID, or the log's TID order
// would replay the insert before the remove.
TEST(CommitHook, InsertAfterRemoveOfTheKeyGetsALargerTid) {
  EngineOptions o;
  o.epoch_ticker = false;
  Engine e(o);
  e.create_table<1>("t");
  Worker* a = e.make_worker();
  Worker* b = e.make_worker();
  // Worker a commits many transactions so its TIDs run ahead of b's.
  for (uint64_t k = 100; k < 150; ++k) ASSERT_TRUE(a->run(&put_or_insert, &k).ok());
  const uint64_t k = 1;
  ASSERT_TRUE(a->run(&put_or_insert, &k).ok());  // insert
  ASSERT_TRUE(a->run(&put_or_insert, &k).ok());  // remove
  const uint64_t remove_tid = a->txn().last_commit_tid();
  ASSERT_TRUE(b->run(&put_or_insert, &k).ok());  // insert again, by b
  EXPECT_GT(b->txn().last_commit_tid(), remove_tid);
}

}  // namespace
}  // namespace shoal::txn

// ShardWatermark (min over streams) and the appender's floors for idle streams.
#include "src/repl/watermark.h"

#include <gtest/gtest.h>

#include "src/repl/appender.h"

namespace shoal::repl {
namespace {

TEST(ShardWatermark, IsTheMinimumOverStreams) {
  ShardWatermark w(3);
  EXPECT_EQ(w.advance(0, 50), 0u);
  EXPECT_EQ(w.advance(1, 30), 0u);
  EXPECT_EQ(w.advance(2, 40), 30u);
  EXPECT_EQ(w.advance(1, 60), 40u);
  EXPECT_EQ(w.advance(2, 70), 50u);
  EXPECT_EQ(w.advance(0, 45), 50u);  // lower values (an empty entry without a floor): ignored
  EXPECT_EQ(w.stream(0), 50u);
}

class FakeEnv final : public Env {
 public:
  uint64_t now_ns() override { return now; }
  uint64_t wall_us() override { return now / 1000; }
  void sleep_ns(uint64_t ns) override { now += ns; }
  uint64_t seed() override { return 1; }
  uint64_t now = 1'000'000'000;
};

// Drains sealed entries the way the replication thread does; returns their max_tid values.
std::vector<uint64_t> take(StreamAppender& a) {
  std::vector<uint64_t> out;
  SealedEntry e;
  while (a.pop_sealed(&e)) {
    auto view = LogEntryView::parse({a.buffer(e.buffer).data(), e.bytes});
    EXPECT_TRUE(view.ok()) << view.status().to_string();
    EXPECT_EQ(view->max_tid(), e.max_tid);
    out.push_back(e.max_tid);
    a.recycle(e.buffer);
  }
  return out;
}

// Stream 1 never commits: without floors it would hold the shard watermark at 0 forever.
// An idle worker's tick() seals an empty entry at (epoch << 32) - 1 once idle_ns passed.
TEST(ShardWatermark, IdleStreamsAdvanceByFloorEntries) {
  txn::EngineOptions eo;
  eo.epoch_ticker = false;
  txn::Engine engine(eo);
  FakeEnv env;
  AppenderOptions o;
  o.limits.batch_txns_max = 2;
  o.limits.batch_bytes_max = 4096;
  o.pool_buffers = 4;
  o.idle_ns = 1'000'000;
  StreamAppender busy(o, engine, env, nullptr, nullptr);
  o.stream = 1;
  StreamAppender idle(o, engine, env, nullptr, nullptr);
  ShardWatermark w(2);
  const uint64_t key[1] = {1};
  const std::byte value[8] = {};
  const TxnWrite write{0, WriteOp::kPut, key, value};
  const uint64_t t1 = (uint64_t{1} << 32) + 5, t2 = t1 + 1;
  ASSERT_TRUE(busy.append_record(t1, {}, {&write, 1}).ok());
  ASSERT_TRUE(busy.append_record(t2, {}, {&write, 1}).ok());  // count seal
  for (uint64_t tid : take(busy)) w.advance(0, tid);
  EXPECT_EQ(w.shard(), 0u);
  idle.tick();  // not idle long enough yet
  EXPECT_TRUE(take(idle).empty());
  env.now += 2'000'000;
  engine.advance_epoch_for_tests();  // epoch 2: the idle worker can only commit above 2 << 32
  idle.tick();
  const std::vector<uint64_t> floors = take(idle);
  ASSERT_EQ(floors.size(), 1u);
  EXPECT_EQ(floors[0], (uint64_t{2} << 32) - 1);
  for (uint64_t tid : floors) w.advance(1, tid);
  EXPECT_EQ(w.shard(), t2);  // now the busy stream's progress is the watermark
  // finish() closes a stream above everything it logged.
  ASSERT_TRUE(busy.finish(t2 + 100).ok());
  for (uint64_t tid : take(busy)) w.advance(0, tid);
  EXPECT_EQ(w.stream(0), t2 + 100);
}

// One stream, two Txns (a shard server's worker and its 2PC participant): each proposes above
// what the stream promised (txn::Txn::set_tid_floor), so a floor sealed after one's commit
// is never undercut by the other's; logging below the promise is a broken invariant.
TEST(ShardWatermark, TxnsSharingAStreamCommitAboveItsPromise) {
  txn::EngineOptions eo;
  eo.epoch_ticker = false;
  txn::Engine engine(eo);
  auto* table = engine.create_table<1>("t");
  ASSERT_TRUE(table->load(Key<1>{{1}}, uint64_t{0}).ok());
  FakeEnv env;
  AppenderOptions o;
  o.limits.batch_txns_max = 1;
  o.pool_buffers = 4;
  StreamAppender stream(o, engine, env, nullptr, nullptr);
  txn::Worker* worker = engine.make_worker();
  txn::Txn participant(&engine, 99);
  worker->set_commit_hook(&StreamAppender::commit_hook, &stream);
  worker->txn().set_tid_floor(stream.promised_tid());
  participant.set_tid_floor(stream.promised_tid());
  auto bump = [](txn::Txn& t, const void* tbl, void*) {
    auto& tb = *static_cast<txn::Table<1>*>(const_cast<void*>(tbl));
    uint64_t v = 0;
    SHOAL_TRY(t.get(tb, Key<1>{{1}}, &v));
    return t.put(tb, Key<1>{{1}}, v + 1);
  };
  ASSERT_TRUE(worker->run(bump, table).ok());
  ASSERT_TRUE(stream.finish(worker->txn().last_commit_tid() + 1000).ok());  // far above it
  take(stream);
  participant.begin();
  ASSERT_TRUE(bump(participant, table, nullptr).ok());
  ASSERT_TRUE(participant.commit().ok());
  EXPECT_GT(participant.last_commit_tid(), *stream.promised_tid());
  ASSERT_TRUE(StreamAppender::commit_hook(&stream, participant).ok());
  participant.end();
  EXPECT_EQ(take(stream), std::vector<uint64_t>{participant.last_commit_tid()});
  // Without the floor, a Txn whose own TIDs lag would log below the promise: refused loudly.
  txn::Txn lagging(&engine, 98);
  lagging.begin();
  ASSERT_TRUE(bump(lagging, table, nullptr).ok());
  ASSERT_TRUE(stream.finish(participant.last_commit_tid() + 1000).ok());
  ASSERT_TRUE(lagging.commit().ok());
  EXPECT_DEATH(StreamAppender::commit_hook(&stream, lagging).ignore(), "at or below its promise");
  lagging.end();
}

}  // namespace
}  // namespace shoal::repl

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

TEST(WatermarkHistory, LagIsHowLongAgoTheWatermarkPassedTheReplayedTid) {
  WatermarkHistory h;
  EXPECT_EQ(h.lag_ns(0, 100), 0u);  // no history: level
  h.note(10, 1'000);
  h.note(10, 2'000);  // not a rise: ignored
  h.note(20, 3'000);
  h.note(30, 5'000);
  EXPECT_EQ(h.lag_ns(30, 9'000), 0u);      // level with the watermark
  EXPECT_EQ(h.lag_ns(40, 9'000), 0u);      // ahead (a report racing the sample)
  EXPECT_EQ(h.lag_ns(25, 9'000), 4'000u);  // the watermark went above 25 at 5'000
  EXPECT_EQ(h.lag_ns(20, 9'000), 4'000u);
  EXPECT_EQ(h.lag_ns(19, 9'000), 6'000u);  // above 19 at 3'000
  EXPECT_EQ(h.lag_ns(0, 9'000), 8'000u);   // the first sample
}

// The ratekeeper's resume measure (backlog_ns): the lag while the watermark rises at least
// every gap; a standstill (proposals stopped) counts at most the gap, between two rises and
// since the newest, so a replica that replays during it is seen to catch up before it has
// replayed everything, where its lag only grows until then.
TEST(WatermarkHistory, BacklogCountsAStandstillAtMostTheGap) {
  WatermarkHistory h(3'000);
  WatermarkHistory uncapped;
  for (WatermarkHistory* w : {&h, &uncapped}) {
    w->note(10, 1'000);
    w->note(20, 3'000);
    w->note(30, 5'000);
  }
  EXPECT_EQ(h.backlog_ns(15, 6'000), 3'000u);  // rising every 2'000: the lag
  EXPECT_EQ(h.lag_ns(15, 6'000), 3'000u);
  // Standing still since 5'000: the lag grows, the backlog stops 3'000 past the newest rise.
  EXPECT_EQ(h.lag_ns(15, 50'000), 47'000u);
  EXPECT_EQ(h.backlog_ns(15, 50'000), 2'000u + 3'000u);
  // The replica replays on meanwhile: its backlog shrinks, its lag does not.
  EXPECT_EQ(h.backlog_ns(25, 50'000), 3'000u);
  EXPECT_EQ(h.lag_ns(25, 50'000), 45'000u);
  EXPECT_EQ(h.backlog_ns(30, 50'000), 0u);
  // Rising again: the standstill between 5'000 and 50'000 counts 3'000.
  for (WatermarkHistory* w : {&h, &uncapped}) {
    w->note(40, 50'000);
    w->note(50, 52'000);
  }
  EXPECT_EQ(h.backlog_ns(15, 52'000), 2'000u + 3'000u + 2'000u);
  EXPECT_EQ(h.lag_ns(15, 52'000), 49'000u);
  // Uncapped (no lead bound): the backlog is the lag.
  EXPECT_EQ(uncapped.backlog_ns(15, 52'000), 49'000u);
  EXPECT_EQ(uncapped.backlog_ns(15, 60'000), uncapped.lag_ns(15, 60'000));
}

TEST(WatermarkHistory, KeepsTheNewestSamplesWhenFull) {
  WatermarkHistory h;
  const size_t n = WatermarkHistory::kSamples + 100;
  for (size_t i = 1; i <= n; ++i) h.note(i * 10, i * 1'000);
  // Sample i is at tid 10i, time 1000i; the first 100 fell out of the ring.
  EXPECT_EQ(h.lag_ns(n * 10 - 5, n * 1'000), 0u);
  EXPECT_EQ(h.lag_ns((n - 1) * 10, n * 1'000 + 500), 500u);
  EXPECT_EQ(h.lag_ns(500 * 10 + 3, n * 1'000), (n - 501) * 1'000);
  // Older than the history: the oldest kept sample (i = 101) bounds it from below.
  EXPECT_EQ(h.lag_ns(5, n * 1'000), (n - 101) * 1'000);
}

}  // namespace
}  // namespace shoal::repl

// StreamAppender's wait for a free log buffer (src/repl/appender.h, Backpressure): it sleeps
// rather than spins, a stop request from another thread ends it within a bound, and a stopped
// stream logs nothing more; a transaction whose commit hook failed is never reported
// committed by txn::Worker::run.
#include "src/repl/appender.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "src/repl/replay.h"  // thread_cpu_ns

namespace shoal::repl {
namespace {

struct OneTable {
  OneTable() : engine(options()) { table = engine.create_table<1>("t"); }
  static txn::EngineOptions options() {
    txn::EngineOptions o;
    o.epoch_ticker = false;
    return o;
  }
  txn::Engine engine;
  txn::Table<1>* table = nullptr;
};

// A pool of 2 buffers, one record per entry, and no replication thread taking entries: the
// third record waits for a buffer that never comes, until stop is set.
TEST(StreamAppender, AWaitForABufferEndsWhenStopIsRequested) {
  OneTable t;
  Env& env = RealEnv::instance();
  std::atomic<bool> stop{false};
  AppenderOptions o;
  o.limits.batch_txns_max = 1;
  o.pool_buffers = 2;
  o.stop = &stop;
  StreamAppender a(o, t.engine, env, nullptr, nullptr);
  uint64_t key = 1;
  const uint64_t value = 7;
  const TxnWrite write{t.table->id(),
                       WriteOp::kPut,
                       {&key, 1},
                       {reinterpret_cast<const std::byte*>(&value), sizeof value}};
  const uint64_t tid = uint64_t{2} << 32;
  ASSERT_TRUE(a.append_record(tid + 1, {}, {&write, 1}).ok());
  ASSERT_TRUE(a.append_record(tid + 2, {}, {&write, 1}).ok());
  std::atomic<bool> returned{false};
  std::atomic<uint64_t> returned_ns{0}, cpu_ns{0};
  Status result;
  std::thread waiter([&] {
    const uint64_t cpu_start = thread_cpu_ns();
    result = a.append_record(tid + 3, {}, {&write, 1});
    cpu_ns = thread_cpu_ns() - cpu_start;
    returned_ns = env.now_ns();
    returned = true;
  });
  constexpr uint64_t kWaitMs = 300;
  std::this_thread::sleep_for(std::chrono::milliseconds(kWaitMs));
  EXPECT_FALSE(returned.load()) << "no buffer was free: the append must wait";
  const uint64_t stop_ns = env.now_ns();
  stop = true;
  waiter.join();
  ASSERT_TRUE(returned.load());
  // Bounded: the wait sleeps at most 1 ms between looks at the flag (2 s for a loaded box).
  EXPECT_LT(returned_ns.load() - stop_ns, uint64_t{2'000'000'000});
  // No busy spin: a few wake-ups per millisecond cost far less than the 300 ms waited.
  EXPECT_LT(cpu_ns.load(), kWaitMs * 1'000'000 / 4) << "the wait spun";
  EXPECT_EQ(result.code(), Code::kUnavailable);
  EXPECT_NE(result.to_string().find("stopped while waiting for a log buffer"), std::string::npos)
      << result.to_string();
  EXPECT_EQ(a.stats().buffer_waits, 1u);
  EXPECT_GE(a.stats().buffer_wait_ns, kWaitMs * 1'000'000 / 2);  // the thread started late
  // Stopped for good: nothing is logged after a transaction that was not.
  EXPECT_EQ(a.stopped().code(), Code::kUnavailable);
  EXPECT_EQ(a.finish(tid + 10).code(), Code::kUnavailable);
  a.tick();
  EXPECT_EQ(a.stats().entries, 2u);
}

Status bump(txn::Txn& txn, const void* table, void*) {
  auto& tb = *static_cast<txn::Table<1>*>(const_cast<void*>(table));
  uint64_t v = 0;
  const Status s = txn.get(tb, Key<1>{{1}}, &v);
  if (s.is_not_found()) return txn.insert(tb, Key<1>{{1}}, uint64_t{1});
  SHOAL_TRY(s);
  return txn.put(tb, Key<1>{{1}}, v + 1);
}

// The commit hook of a stopped stream fails, and Worker::run returns that failure: the
// transaction is installed on the leader but not logged, so it is never reported committed.
TEST(StreamAppender, AStoppedStreamFailsTheCommitAndTheWorkerReportsIt) {
  OneTable t;
  std::atomic<bool> stop{true};  // stopped before any buffer is free
  AppenderOptions o;
  o.limits.batch_txns_max = 1;
  o.pool_buffers = 1;
  o.stop = &stop;
  StreamAppender a(o, t.engine, RealEnv::instance(), nullptr, nullptr);
  txn::Worker* w = t.engine.make_worker();
  w->set_commit_hook(&StreamAppender::commit_hook, &a);
  w->txn().set_tid_floor(a.promised_tid());
  ASSERT_TRUE(w->run(&bump, t.table).ok());  // the one buffer is free: logged
  const Status s = w->run(&bump, t.table);   // no buffer free and stop set
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.to_string();
  EXPECT_EQ(w->stats().committed, 1u);
  EXPECT_EQ(a.stats().txns, 1u);
  w->set_commit_hook(nullptr, nullptr);
}

}  // namespace
}  // namespace shoal::repl

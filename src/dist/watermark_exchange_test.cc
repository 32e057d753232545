// WatermarkExchange: the tick raises our own entry from the source every period_ns, and
// notify() (another thread: the replication leader's chosen callback) raises it at once, so a
// waiter on our own shard resumes promptly even when the period is far away; notifications
// coalesce into one post.
#include "src/dist/watermark_exchange.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace shoal::dist {
namespace {

constexpr uint64_t kLongPeriodNs = 3'600'000'000'000;  // an hour: no tick during a test

rt::Task<void> wait_for(VectorWatermark& vw, const txn::DepVec* v, std::atomic<bool>* done) {
  Status s = co_await vw.wait_covered(*v);
  EXPECT_TRUE(s.ok()) << s.to_string();
  done->store(true);
}

// Runs `loop` on this thread until `done` or `deadline_ms` passes; how long it took.
std::chrono::milliseconds run_until(rt::EventLoop& loop, const std::atomic<bool>& done,
                                    uint64_t deadline_ms) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(deadline_ms);
  while (!done.load() && std::chrono::steady_clock::now() < deadline) {
    if (!loop.run_once()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start);
}

TEST(WatermarkExchange, NotifyRaisesOwnEntryWithoutWaitingForTheTick) {
  rt::EventLoop loop(RealEnv::instance());
  VectorWatermark vw(loop, 2, 4);
  std::atomic<uint64_t> source{0};
  WatermarkExchangeOptions o;
  o.shard = 1;
  o.period_ns = kLongPeriodNs;
  o.source = &source;
  WatermarkExchange x(loop, vw, o);
  x.start();
  txn::DepVec v;
  v.raise(1, 40);
  std::atomic<bool> done{false};
  ASSERT_TRUE(loop.spawn(wait_for(vw, &v, &done)).ok());
  run_until(loop, done, 20);
  ASSERT_FALSE(done.load());  // parked: nothing covers 40 yet

  // The "replication thread": raises the source below the wait, then to it.
  std::thread leader([&] {
    source.store(30, std::memory_order_release);
    x.notify();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    source.store(40, std::memory_order_release);
    x.notify();
  });
  const auto took = run_until(loop, done, 10000);
  leader.join();
  EXPECT_TRUE(done.load());
  EXPECT_LT(took.count(), 3000) << "the wait ended only by the deadline";
  EXPECT_EQ(vw.get(1), 40u);
  EXPECT_EQ(x.stats().ticks, 0u);  // no tick ran: the notifications raised it
  EXPECT_GE(x.stats().notified_raises, 1u);
  EXPECT_EQ(x.notifies(), 2u);
  x.stop();
}

TEST(WatermarkExchange, NotificationsCoalesceIntoOnePendingPost) {
  rt::EventLoop loop(RealEnv::instance());
  VectorWatermark vw(loop, 1, 4);
  std::atomic<uint64_t> source{0};
  WatermarkExchangeOptions o;
  o.period_ns = kLongPeriodNs;
  o.source = &source;
  WatermarkExchange x(loop, vw, o);
  // While the loop does not run, a thousand rises post once; the post reads the newest.
  for (uint64_t w = 1; w <= 1000; ++w) {
    source.store(w, std::memory_order_release);
    x.notify();
  }
  EXPECT_EQ(loop.stats().posts_run, 0u);
  for (int i = 0; i < 10 && loop.run_once(); ++i) {
  }
  EXPECT_EQ(x.stats().notified_raises, 1u);
  EXPECT_EQ(loop.stats().posts_run, 1u);
  EXPECT_EQ(vw.get(0), 1000u);
  // Once it ran, the next rise posts again.
  source.store(1001, std::memory_order_release);
  x.notify();
  for (int i = 0; i < 10 && loop.run_once(); ++i) {
  }
  EXPECT_EQ(x.stats().notified_raises, 2u);
  EXPECT_EQ(vw.get(0), 1001u);
}

// One shard, a source at 7, a 1 ms tick, started.
struct TickingExchange {
  static WatermarkExchangeOptions options(const std::atomic<uint64_t>* source) {
    WatermarkExchangeOptions o;
    o.period_ns = 1'000'000;  // 1 ms
    o.source = source;
    return o;
  }
  TickingExchange() { x.start(); }
  ~TickingExchange() { x.stop(); }
  rt::EventLoop loop{RealEnv::instance()};
  VectorWatermark vw{loop, 1, 4};
  std::atomic<uint64_t> source{7};
  WatermarkExchange x{loop, vw, options(&source)};
};

TEST(WatermarkExchange, TheTickStillRaisesOwnEntryWithoutNotifications) {
  TickingExchange t;
  std::atomic<bool> done{false};
  txn::DepVec v;
  v.raise(0, 7);
  ASSERT_TRUE(t.loop.spawn(wait_for(t.vw, &v, &done)).ok());
  run_until(t.loop, done, 10000);
  EXPECT_TRUE(done.load());
  EXPECT_GE(t.x.stats().ticks, 1u);
  EXPECT_EQ(t.x.stats().notified_raises, 0u);
}

TEST(WatermarkExchange, AnIdleExchangeStopsTickingUntilAWaitParks) {
  TickingExchange t;
  std::atomic<bool> never{false};
  for (int i = 0; i < 10'000 && t.x.stats().ticks == 0; ++i) run_until(t.loop, never, 1);
  ASSERT_EQ(t.x.stats().ticks, 1u);  // the tick start() armed
  run_until(t.loop, never, 30);      // about 30 periods with nobody waiting
  EXPECT_EQ(t.x.stats().ticks, 1u) << "an exchange nobody waits on kept ticking";
  EXPECT_EQ(t.vw.get(0), 7u);

  // The source rises without a notification (a refused post): the first wait to park re-arms
  // the tick, which reads it.
  t.source.store(9, std::memory_order_release);
  std::atomic<bool> done{false};
  txn::DepVec v;
  v.raise(0, 9);
  ASSERT_TRUE(t.loop.spawn(wait_for(t.vw, &v, &done)).ok());
  run_until(t.loop, done, 10000);
  EXPECT_TRUE(done.load());
  EXPECT_EQ(t.x.stats().ticks, 2u);
  run_until(t.loop, never, 20);  // and sleeps again once nobody waits
  EXPECT_EQ(t.x.stats().ticks, 2u);
}

}  // namespace
}  // namespace shoal::dist

// StreamAppender's wait for a free log buffer (src/repl/appender.h, Backpressure): it sleeps
// rather than spins, a stop request ends it at its next look (on virtual time), and a stopped
// stream logs nothing more; a transaction whose commit hook failed is never reported
// committed by txn::Worker::run.
#include "src/repl/appender.h"

#include <atomic>

#include <gtest/gtest.h>

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

// Virtual time for the wait: sleep_ns() advances the clock and counts the wake-ups; after
// stop_after_sleeps of them it sets the stop flag itself, as another thread would.
class WaitClock final : public Env {
 public:
  WaitClock(std::atomic<bool>* stop, uint64_t stop_after_sleeps)
      : stop_(stop), stop_after_sleeps_(stop_after_sleeps) {}
  uint64_t now_ns() override { return now_ns_; }
  uint64_t wall_us() override { return now_ns_ / 1000; }
  void sleep_ns(uint64_t ns) override {
    now_ns_ += ns;
    if (++sleeps == stop_after_sleeps_) {
      stop_ns = now_ns_;
      stop_->store(true);
    }
  }
  uint64_t seed() override { return 1; }
  uint64_t sleeps = 0;
  uint64_t stop_ns = 0;

 private:
  std::atomic<bool>* stop_;
  uint64_t stop_after_sleeps_;
  uint64_t now_ns_ = 1'000'000'000;
};

// A pool of 2 buffers, one record per entry, and no replication thread taking entries: the
// third record waits for a buffer that never comes, until stop is set. On virtual time, so
// what it checks does not depend on the machine's load: the wait sleeps (a wake-up per
// millisecond once its sleep has grown), and it ends at its first look after the stop.
TEST(StreamAppender, AWaitForABufferEndsWhenStopIsRequested) {
  OneTable t;
  std::atomic<bool> stop{false};
  constexpr uint64_t kSleeps = 1000;
  WaitClock clock(&stop, kSleeps);
  AppenderOptions o;
  o.limits.batch_txns_max = 1;
  o.pool_buffers = 2;
  o.stop = &stop;
  StreamAppender a(o, t.engine, clock, nullptr, nullptr);
  uint64_t key = 1;
  const uint64_t value = 7;
  const TxnWrite write{t.table->id(),
                       WriteOp::kPut,
                       {&key, 1},
                       {reinterpret_cast<const std::byte*>(&value), sizeof value}};
  const uint64_t tid = uint64_t{2} << 32;
  ASSERT_TRUE(a.append_record(tid + 1, {}, {&write, 1}).ok());
  ASSERT_TRUE(a.append_record(tid + 2, {}, {&write, 1}).ok());
  const Status result = a.append_record(tid + 3, {}, {&write, 1});
  // It slept rather than spun: kSleeps wake-ups covered most of a virtual second (the sleep
  // doubles from 50 us to 1 ms within its first 80 sleeps), and none after the stop.
  EXPECT_EQ(clock.sleeps, kSleeps);
  EXPECT_GE(clock.stop_ns - 1'000'000'000, (kSleeps - 100) * 1'000'000);
  EXPECT_EQ(a.stats().buffer_wait_ns, clock.stop_ns - 1'000'000'000);
  EXPECT_EQ(result.code(), Code::kUnavailable);
  EXPECT_NE(result.to_string().find("stopped while waiting for a log buffer"), std::string::npos)
      << result.to_string();
  EXPECT_EQ(a.stats().buffer_waits, 1u);
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

// Dependencies are logged compact (src/txn/depvec.h): the other shards' entries the base
// covers are left out of the record, our own is the commit TID; stats().deps counts both.
TEST(StreamAppender, DependenciesTheBaseCoversAreNotLogged) {
  OneTable t;
  AppenderOptions o;
  o.limits.batch_txns_max = 1;  // each record seals its own entry
  StreamAppender a(o, t.engine, RealEnv::instance(), nullptr, nullptr);
  struct Base {  // shard 1 stable up to 50, shard 3 up to 70
    static bool stable(const void*, uint32_t shard, uint64_t ts) {
      return (shard == 1 && ts <= 50) || (shard == 3 && ts <= 70);
    }
  };
  a.set_dep_base(txn::DepBase{&Base::stable, nullptr});
  const uint64_t tid0 = uint64_t{1} << 32;
  // Logs one transaction of vector `deps`; returns its record's dependencies.
  const auto log = [&](uint64_t tid, std::initializer_list<txn::DepEntry> deps) {
    txn::DepVec v;
    for (const txn::DepEntry& e : deps) v.raise(e.shard, e.ts);
    txn::Txn x(&t.engine, 1);
    x.begin();
    EXPECT_TRUE(x.insert(*t.table, Key<1>{{tid}}, tid).ok());
    uint64_t proposed = 0;
    EXPECT_TRUE(x.lock_write_set(&proposed).ok());
    EXPECT_TRUE(x.validate_read_set().ok());
    x.install_and_unlock(tid, &v);
    EXPECT_TRUE(a.append(x).ok());
    SealedEntry e;
    EXPECT_TRUE(a.pop_sealed(&e));
    auto view = LogEntryView::parse(a.buffer(e.buffer).first(e.bytes));
    EXPECT_TRUE(view.ok()) << view.status().to_string();
    std::vector<txn::DepEntry> out;
    view->for_each_record([&](const RecordView& r) {
      for (uint32_t i = 0; i < r.dep_count(); ++i) out.push_back(r.dep(i));
    });
    a.recycle(e.buffer);
    return out;
  };
  // Covered entries (1 at 40, 3 at 70) go, the others stay; our own shard's is the TID.
  EXPECT_EQ(log(tid0 + 1, {{1, 40}, {2, 5}, {3, 70}, {4, 9}}),
            (std::vector<txn::DepEntry>{{2, 5}, {4, 9}}));
  // Every entry above the base: all logged.
  EXPECT_EQ(log(tid0 + 2, {{1, 51}, {3, 71}}), (std::vector<txn::DepEntry>{{1, 51}, {3, 71}}));
  // Every entry covered, and a vector naming only our own shard: nothing logged.
  EXPECT_TRUE(log(tid0 + 3, {{1, 50}, {3, 1}}).empty());
  EXPECT_TRUE(log(tid0 + 4, {}).empty());
  const txn::DepVecBytes& d = a.stats().deps;
  EXPECT_EQ(d.vectors, 4u);
  EXPECT_EQ(d.entries, 4u);
  EXPECT_EQ(d.omitted, 4u);
  EXPECT_EQ(d.bytes, log_dep_bytes(2) + log_dep_bytes(2));
  EXPECT_EQ(d.full_bytes, log_dep_bytes(4) + log_dep_bytes(2) + log_dep_bytes(2));
}

}  // namespace
}  // namespace shoal::repl

// StreamAppender's wait for a free log buffer (src/repl/appender.h, Backpressure): it sleeps
// rather than spins, a stop request ends it at its next look (on virtual time), and a stopped
// stream logs nothing more; a transaction whose commit hook failed is never reported
// committed by txn::Worker::run.
#include "src/repl/appender.h"

#include <atomic>
#include <cstring>
#include <deque>
#include <optional>
#include <vector>

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

// One put of key 1 in t's table, to append as a record.
struct OnePut {
  explicit OnePut(const OneTable& t)
      : write{t.table->id(),
              WriteOp::kPut,
              {&key, 1},
              {reinterpret_cast<const std::byte*>(&value), sizeof value}} {}
  OnePut(const OnePut&) = delete;  // write points into this object
  OnePut& operator=(const OnePut&) = delete;
  uint64_t key = 1;
  uint64_t value = 7;
  TxnWrite write;
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

// A ring of 2 entries, one record per entry, and no replication thread taking entries: the
// third record waits for ring space that never comes, until stop is set. On virtual time, so
// what it checks does not depend on the machine's load: the wait sleeps (a wake-up per
// millisecond once its sleep has grown), and it ends at its first look after the stop.
TEST(StreamAppender, AWaitForABufferEndsWhenStopIsRequested) {
  OneTable t;
  std::atomic<bool> stop{false};
  constexpr uint64_t kSleeps = 1000;
  WaitClock clock(&stop, kSleeps);
  AppenderOptions o;
  o.limits.batch_txns_max = 1;
  o.pool_entries = 2;
  o.stop = &stop;
  StreamAppender a(o, t.engine, clock, nullptr, nullptr);
  const OnePut put(t);
  const TxnWrite& write = put.write;
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

// The lead bound's hold (set_lead_hold): with room in the ring, a held worker opens no batch;
// the open one still takes records up to its limit; an idle tick seals no floor; the hold
// lifted, the next append opens at once. On virtual time: the wait ends at the stop.
TEST(StreamAppender, ALeadHoldKeepsTheNextBatchFromOpening) {
  OneTable t;
  std::atomic<bool> stop{false};
  WaitClock clock(&stop, 100);
  AppenderOptions o;
  o.limits.batch_txns_max = 2;
  o.stop = &stop;
  StreamAppender a(o, t.engine, clock, nullptr, nullptr);
  const OnePut put(t);
  const TxnWrite& write = put.write;
  const uint64_t tid = uint64_t{2} << 32;
  ASSERT_TRUE(a.append_record(tid + 1, {}, {&write, 1}).ok());  // opens a batch
  a.set_lead_hold(true);
  ASSERT_TRUE(a.append_record(tid + 2, {}, {&write, 1}).ok());  // fills and seals it
  EXPECT_EQ(a.stats().entries, 1u);
  EXPECT_EQ(clock.sleeps, 0u);
  SealedEntry e;
  ASSERT_TRUE(a.pop_sealed(&e));
  EXPECT_EQ(e.sealed_ns, clock.now_ns());
  a.recycle(e.buffer);
  // Idle past idle_ns while held: no floor entry (it would only make the worker wait).
  clock.sleep_ns(o.idle_ns);
  a.tick();
  EXPECT_EQ(a.stats().entries, 1u);
  EXPECT_EQ(a.stats().floor_entries, 0u);
  // Released: the next record opens a batch without waiting.
  a.set_lead_hold(false);
  const uint64_t sleeps = clock.sleeps;
  ASSERT_TRUE(a.append_record(tid + 3, {}, {&write, 1}).ok());
  EXPECT_EQ(clock.sleeps, sleeps);
  EXPECT_EQ(a.stats().buffer_waits, 0u);
  // Held again with the batch sealed: the next one waits, until the stop.
  a.flush();
  a.set_lead_hold(true);
  const Status held = a.append_record(tid + 4, {}, {&write, 1});
  EXPECT_EQ(held.code(), Code::kUnavailable);
  EXPECT_EQ(a.stats().buffer_waits, 1u);
  EXPECT_EQ(a.stats().lead_waits, 1u);
  EXPECT_GT(a.stats().buffer_wait_ns, 0u);
}

// A light load's appender: the default limits of a shard server (400 txns, 4 ms) on virtual
// time, and one put to log.
struct LightLoad {
  explicit LightLoad(bool seal_when_idle) : clock(&stop, 1000), put(t) {
    o.limits.batch_txns_max = 400;
    o.limits.batch_age_ns_max = 4'000'000;
    o.seal_when_idle = seal_when_idle;
    o.idle_seal_inflight_max = 2;
    a.emplace(o, t.engine, clock, nullptr, nullptr);
  }
  Status log(uint64_t tid) { return a->append_record(tid, {}, {&put.write, 1}); }
  OneTable t;
  std::atomic<bool> stop{false};
  WaitClock clock;
  AppenderOptions o;
  const OnePut put;
  std::optional<StreamAppender> a;
};

// Group commit (appender.h): a worker that runs out of work seals its open batch at once, not
// at its age, unless idle_seal_inflight_max entries are sealed and unsettled (the batch grows
// meanwhile, and the age still seals it) or the leader holds the worker; without
// seal_when_idle only the limits seal. On virtual time: nothing depends on how long a call takes.
TEST(StreamAppender, AnIdleWorkerSealsItsOpenBatchWhileFewEntriesAreInFlight) {
  LightLoad l(/*seal_when_idle=*/true);
  StreamAppender& a = *l.a;
  WaitClock& clock = l.clock;
  const uint64_t tid = uint64_t{2} << 32;
  EXPECT_FALSE(a.idle());  // nothing open: nothing to seal
  ASSERT_TRUE(l.log(tid + 1).ok());
  ASSERT_TRUE(l.log(tid + 2).ok());
  a.tick();  // not aged: the limits alone would keep it open
  EXPECT_EQ(a.stats().entries, 0u);
  EXPECT_TRUE(a.idle());
  EXPECT_FALSE(a.idle());  // sealed already
  EXPECT_EQ(a.stats().entries, 1u);
  EXPECT_EQ(a.stats().idle_seals, 1u);
  SealedEntry e;
  ASSERT_TRUE(a.pop_sealed(&e));
  EXPECT_EQ(e.max_tid, tid + 2);
  EXPECT_EQ(e.sealed_ns, clock.now_ns());  // at once, no age waited for
  a.recycle(e.buffer);

  // One in flight: the second may still go.
  ASSERT_TRUE(l.log(tid + 3).ok());
  EXPECT_TRUE(a.idle());
  // Two in flight: the next batch stays open and takes more records ...
  ASSERT_TRUE(l.log(tid + 4).ok());
  EXPECT_FALSE(a.idle());
  ASSERT_TRUE(l.log(tid + 5).ok());
  EXPECT_EQ(a.stats().entries, 2u);
  // ... until the age seals it, whatever is in flight,
  clock.sleep_ns(l.o.limits.batch_age_ns_max);
  a.tick();
  EXPECT_EQ(a.stats().entries, 3u);
  EXPECT_EQ(a.stats().idle_seals, 2u);
  // or until the first entries settle (chosen: the leader's LeadBound counts them).
  ASSERT_TRUE(l.log(tid + 6).ok());
  EXPECT_FALSE(a.idle());
  a.note_settled(1);
  EXPECT_FALSE(a.idle());  // still two of three in flight
  a.note_settled(2);
  EXPECT_TRUE(a.idle());
  EXPECT_EQ(a.stats().idle_seals, 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(a.pop_sealed(&e));
    a.recycle(e.buffer);
  }
  EXPECT_EQ(e.max_tid, tid + 6);
  a.note_settled(4);

  // Held by the leader: the batch stays open (a seal would make the next append wait).
  ASSERT_TRUE(l.log(tid + 7).ok());
  a.set_lead_hold(true);
  EXPECT_FALSE(a.idle());
  a.set_lead_hold(false);
  EXPECT_TRUE(a.idle());
  EXPECT_EQ(a.stats().idle_seals, 4u);
  EXPECT_EQ(a.stats().entries, 5u);
}

TEST(StreamAppender, WithoutSealWhenIdleOnlyTheAgeSealsALightLoad) {
  LightLoad l(/*seal_when_idle=*/false);
  StreamAppender& a = *l.a;
  WaitClock& clock = l.clock;
  const AppenderOptions& o = l.o;
  const uint64_t tid = uint64_t{2} << 32;
  ASSERT_TRUE(l.log(tid + 1).ok());
  const uint64_t first_ns = clock.now_ns();
  EXPECT_FALSE(a.idle());
  clock.sleep_ns(o.limits.batch_age_ns_max - 1);
  a.tick();
  EXPECT_EQ(a.stats().entries, 0u);
  clock.sleep_ns(1);
  a.tick();
  EXPECT_EQ(a.stats().entries, 1u);
  EXPECT_EQ(a.stats().idle_seals, 0u);
  SealedEntry e;
  ASSERT_TRUE(a.pop_sealed(&e));
  EXPECT_EQ(e.sealed_ns - first_ns, o.limits.batch_age_ns_max);
}

// A participant's reservation (src/dist/participant.h F10): while TID r is reserved the stream
// promises below r, even over higher records (kLogFlagPromiseHeld); the install logged later at
// r is above the promise, and once it ended the promise moves on.
TEST(StreamAppender, AReservationHoldsThePromiseBelowIt) {
  OneTable t;
  std::atomic<bool> stop{false};
  WaitClock clock(&stop, 0);
  AppenderOptions o;
  o.limits.batch_txns_max = 1;  // an entry per record
  o.pool_buffers = 4;
  StreamAppender a(o, t.engine, clock, nullptr, nullptr);
  static uint64_t reserved = UINT64_MAX;
  a.set_reservations([](const void*) { return reserved; }, nullptr);
  uint64_t key = 1;
  const uint64_t value = 7;
  const TxnWrite write{t.table->id(),
                       WriteOp::kPut,
                       {&key, 1},
                       {reinterpret_cast<const std::byte*>(&value), sizeof value}};
  const uint64_t tid = uint64_t{2} << 32;
  ASSERT_TRUE(a.append_record(tid + 1, {}, {&write, 1}).ok());
  reserved = tid + 2;  // a context locks, proposing just above the promise
  ASSERT_TRUE(a.append_record(tid + 100, {}, {&write, 1}).ok());  // the worker goes on
  EXPECT_EQ(*a.promised_tid(), tid + 1);
  // The worker's next commits go above what was logged, not above the held promise: else
  // they would take TID tid + 2 .. tid + 100 again (one TID, two transactions).
  EXPECT_EQ(*a.logged_floor_tid(), tid + 100);
  ASSERT_TRUE(a.append_record(tid + 2, {}, {&write, 1}).ok());  // the install, at its TID
  reserved = UINT64_MAX;                                        // its context ended
  ASSERT_TRUE(a.append_record(tid + 101, {}, {&write, 1}).ok());
  EXPECT_EQ(*a.promised_tid(), tid + 101);
  EXPECT_EQ(*a.logged_floor_tid(), tid + 101);
  std::vector<std::pair<uint64_t, uint16_t>> got;  // (max_tid, flags) of each entry
  SealedEntry e;
  while (a.pop_sealed(&e)) {
    const std::byte* b = a.buffer(e.buffer).data();
    got.emplace_back(load_u64(b + 48), load_u16(b + 6));
    a.recycle(e.buffer);
  }
  const std::vector<std::pair<uint64_t, uint16_t>> want = {
      {tid + 1, 0},
      {tid + 1, kLogFlagPromiseHeld},
      {tid + 1, kLogFlagPromiseHeld},  // sealed before its context ended
      {tid + 101, 0}};
  EXPECT_EQ(got, want);
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

// The replication thread's hold on a sealed entry is an EntryBuffer over the log ring's own
// bytes (take(): no copy), and the space comes back when the last handle goes. Entries of
// 0.1-3 KB cycle through a ring of three buffers twice while a window of them is held
// (released mostly oldest first, sometimes out of order): every held entry stays intact
// (checksum, TID, value), and the worker never waits. (Three: a batch needs a buffer's worth
// of contiguous space, so at the ring's end it needs the held entries out of the ring's
// first buffer; with two, the window would have to be empty then.)
TEST(StreamAppender, TakenEntriesAreTheRingsBytesAndFreeTheirSpaceWhenDropped) {
  OneTable t;
  AppenderOptions o;
  o.limits.batch_txns_max = 1;
  o.pool_buffers = 3;
  o.pool_entries = 8;
  StreamAppender a(o, t.engine, RealEnv::instance(), nullptr, nullptr);
  struct Held {
    EntryBuffer entry;
    uint64_t tid;
    size_t value_bytes;
  };
  std::deque<Held> held;
  std::vector<std::byte> value(4096);
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<std::byte>(i * 7 + 1);
  const uint64_t tid0 = uint64_t{2} << 32;
  uint64_t logged_bytes = 0;
  for (uint64_t i = 1; i <= 6000; ++i) {
    uint64_t key = i;
    const size_t n = (i * 397) % 3000 + 8;
    const TxnWrite write{t.table->id(), WriteOp::kPut, {&key, 1}, {value.data(), n}};
    ASSERT_TRUE(a.append_record(tid0 + i, {}, {&write, 1}).ok()) << i;
    SealedEntry e;
    ASSERT_TRUE(a.pop_sealed(&e));
    const std::byte* in_ring = a.buffer(e.buffer).data();
    Held h{a.take(e.buffer), tid0 + i, n};
    ASSERT_EQ(h.entry.span().data(), in_ring) << "a copy, not the ring's bytes";
    ASSERT_EQ(h.entry.span().size(), e.bytes);
    logged_bytes += e.bytes;
    held.push_back(std::move(h));
    if (held.size() > 6) held.erase(held.begin() + (i % 5 == 0 ? 1 : 0));
    for (const Held& k : held) {  // nothing held was overwritten
      auto view = LogEntryView::parse(k.entry.span());
      ASSERT_TRUE(view.ok()) << i << ": " << view.status().to_string();
      ASSERT_EQ(view->min_tid(), k.tid) << i;
      view->for_each_record([&](const RecordView& r) {
        r.for_each_write([&](const WriteView& w) {
          ASSERT_EQ(w.value.size(), k.value_bytes);
          ASSERT_EQ(std::memcmp(w.value.data(), value.data(), k.value_bytes), 0);
        });
      });
    }
  }
  EXPECT_GT(logged_bytes, 2 * 3 * kLogLargeEntryBytes);  // around the ring twice at least
  // Never waited; short_of_space() may be set (ahead of a wait: near the ring's end the next
  // batch needs the held entries out of its first buffer).
  EXPECT_EQ(a.stats().buffer_waits, 0u);
}

// Entries the replication thread holds fill the ring: the worker says it is short of space,
// and wakes the leader once, while the batch it opens still fits (no wait), and says so no
// more once a batch finds room again.
TEST(StreamAppender, SaysItIsShortOfSpaceBeforeItHasToWait) {
  OneTable t;
  AppenderOptions o;
  o.limits.batch_txns_max = 1;
  o.pool_buffers = 4;  // a quarter: one buffer
  o.pool_entries = 64;
  int wakes = 0;
  StreamAppender a(
      o, t.engine, RealEnv::instance(), [](void* n) { ++*static_cast<int*>(n); }, &wakes);
  std::vector<std::byte> value(300 << 10, std::byte{5});
  std::vector<EntryBuffer> held;
  const uint64_t tid0 = uint64_t{2} << 32;
  uint64_t i = 1;
  for (; i <= 64 && !a.short_of_space(); ++i) {  // bounded: 64 entries of 300 KB
    uint64_t key = i;
    const TxnWrite write{t.table->id(), WriteOp::kPut, {&key, 1}, {value.data(), value.size()}};
    ASSERT_TRUE(a.append_record(tid0 + i, {}, {&write, 1}).ok()) << i;
    SealedEntry e;
    ASSERT_TRUE(a.pop_sealed(&e));
    held.push_back(a.take(e.buffer));
  }
  EXPECT_TRUE(a.short_of_space());
  EXPECT_LE(held.size() * value.size(), 3 * kLogLargeEntryBytes);  // a quarter still free
  EXPECT_EQ(a.stats().buffer_waits, 0u);
  EXPECT_EQ(wakes, static_cast<int>(held.size()) + 1);  // one per seal, one when short
  held.clear();                                         // the leader let go of them
  uint64_t key = i;
  const TxnWrite write{t.table->id(), WriteOp::kPut, {&key, 1}, {value.data(), value.size()}};
  ASSERT_TRUE(a.append_record(tid0 + i, {}, {&write, 1}).ok());
  EXPECT_FALSE(a.short_of_space());
  EXPECT_EQ(a.stats().buffer_waits, 0u);
  SealedEntry e;
  ASSERT_TRUE(a.pop_sealed(&e));
  a.recycle(e.buffer);
}

// A clock whose sleeps stand for the replication thread: while the worker waits for ring
// space it sees short_of_space(), and after a few sleeps lets go of the entry it holds.
class ReleasingClock final : public Env {
 public:
  uint64_t now_ns() override { return now_ns_; }
  uint64_t wall_us() override { return now_ns_ / 1000; }
  void sleep_ns(uint64_t ns) override {
    now_ns_ += ns;
    short_seen = short_seen || appender->short_of_space();
    if (++sleeps == 5) held = EntryBuffer();
  }
  uint64_t seed() override { return 1; }
  StreamAppender* appender = nullptr;
  EntryBuffer held;
  uint64_t sleeps = 0;
  bool short_seen = false;

 private:
  uint64_t now_ns_ = 1'000'000'000;
};

// One buffer's ring and an entry held by the replication thread: the next batch waits, says
// it is short of space, and goes on as soon as the entry is let go.
TEST(StreamAppender, AWaitForRingSpaceEndsWhenTheHeldEntryIsLetGo) {
  OneTable t;
  ReleasingClock clock;
  AppenderOptions o;
  o.limits.batch_txns_max = 1;
  o.pool_buffers = 1;
  StreamAppender a(o, t.engine, clock, nullptr, nullptr);
  clock.appender = &a;
  const OnePut put(t);
  const TxnWrite& write = put.write;
  const uint64_t tid = uint64_t{2} << 32;
  ASSERT_TRUE(a.append_record(tid + 1, {}, {&write, 1}).ok());
  SealedEntry e;
  ASSERT_TRUE(a.pop_sealed(&e));
  clock.held = a.take(e.buffer);
  ASSERT_TRUE(a.append_record(tid + 2, {}, {&write, 1}).ok());
  EXPECT_TRUE(clock.short_seen);
  EXPECT_EQ(clock.sleeps, 5u);
  EXPECT_EQ(a.stats().buffer_waits, 1u);
  EXPECT_FALSE(a.short_of_space());
  ASSERT_TRUE(a.pop_sealed(&e));
  auto view = LogEntryView::parse(a.buffer(e.buffer));
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  EXPECT_EQ(view->max_tid(), tid + 2);
  a.recycle(e.buffer);
}

// The ratekeeper's pace (set_pace_rate): at 1,000 transactions a second, batches of 10 open
// 10 ms apart on virtual time, the worker sleeping meanwhile in slices of at most 1 ms; each
// sealed entry says how many records it holds; unpaced, nothing waits; a stop request ends a
// paced wait and the stream.
TEST(StreamAppender, APacedWorkerSleepsBeforeEachBatchAtTheRate) {
  OneTable t;
  std::atomic<bool> stop{false};
  WaitClock clock(&stop, 1000);
  AppenderOptions o;
  o.limits.batch_txns_max = 10;
  o.stop = &stop;
  StreamAppender a(o, t.engine, clock, nullptr, nullptr);
  const OnePut put(t);
  const TxnWrite& write = put.write;
  uint64_t tid = uint64_t{2} << 32;
  const auto log = [&](int txns) {
    Status st = Status::Ok();
    for (int i = 0; i < txns && st.ok(); ++i) st = a.append_record(++tid, {}, {&write, 1});
    SealedEntry e;
    while (a.pop_sealed(&e)) {
      EXPECT_EQ(e.txns, 10u);
      a.recycle(e.buffer);
    }
    return st;
  };
  a.set_pace_rate(1000);
  const uint64_t start_ns = clock.now_ns();
  ASSERT_TRUE(log(50).ok());
  // The first batch opens at once (nothing logged before it), each of the other four 10 ms
  // after the one before.
  EXPECT_NEAR(static_cast<double>(clock.now_ns() - start_ns), 40e6, 1e3);
  EXPECT_EQ(a.stats().pace_waits, 4u);
  EXPECT_EQ(a.stats().pace_wait_ns, clock.now_ns() - start_ns);
  EXPECT_EQ(clock.sleeps, 40u);  // 10 slices of 1 ms each
  EXPECT_EQ(a.stats().buffer_waits, 0u);
  a.set_pace_rate(0);
  ASSERT_TRUE(log(50).ok());
  EXPECT_EQ(clock.sleeps, 40u);
  EXPECT_EQ(a.stats().pace_waits, 4u);
  // One a second: the next batch owes 10 s; the stop comes at the 1,000th sleep.
  a.set_pace_rate(1);
  const Status paced = log(10);
  EXPECT_EQ(paced.code(), Code::kUnavailable);
  EXPECT_NE(paced.to_string().find("the ratekeeper's pace"), std::string::npos)
      << paced.to_string();
  EXPECT_EQ(clock.sleeps, 1000u);
  EXPECT_EQ(a.stopped().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace shoal::repl

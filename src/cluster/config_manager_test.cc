// The configuration manager: one conformance suite run against InMemoryConfigManager and
// against a real etcd (EtcdConfigManager on an EtcdProcess of its own, 127.0.0.1 only), the
// typed ClusterStateStore on both, and etcd's failure cases (not running, killed, restarted).
// The etcd tests skip only when /usr/bin/etcd is absent.
#include "src/cluster/config_manager.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <filesystem>
#include <set>
#include <thread>

#include "src/base/temp_dir.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/etcd_config_manager.h"
#include "src/cluster/etcd_process.h"

namespace shoal::cluster {
namespace {

constexpr const char* kEtcdBinary = "/usr/bin/etcd";

bool etcd_installed() {
  return access(kEtcdBinary, X_OK) == 0;
}

uint64_t now_ms() {
  return RealEnv::instance().now_ns() / 1'000'000;
}

// Real time plus an offset the test moves forward: leases expire at once when told to, and
// sleeps (wait_for_change's polls) still take real time, so threads can race a waiter.
class OffsetEnv final : public Env {
 public:
  uint64_t now_ns() override { return RealEnv::instance().now_ns() + offset_ns_.load(); }
  uint64_t wall_us() override { return RealEnv::instance().wall_us(); }
  void sleep_ns(uint64_t ns) override { RealEnv::instance().sleep_ns(ns); }
  uint64_t seed() override { return 1; }
  void advance_ms(uint64_t ms) { offset_ns_ += ms * 1'000'000; }

 private:
  std::atomic<uint64_t> offset_ns_{0};
};

EtcdProcessOptions fast_etcd(const std::string& dir) {
  EtcdProcessOptions o;
  o.data_dir = dir + "/data";
  o.binary = kEtcdBinary;
  // Minimum lease TTL = 1.5 x election timeout, rounded up to a second: 1 s.
  o.heartbeat_ms = 10;
  o.election_ms = 100;
  return o;
}

// ---- The two backends of the conformance suite.

struct InMemoryBackend {
  static constexpr bool kEtcd = false;
  static void start_shared() {}
  static void stop_shared() {}
  OffsetEnv env;
  InMemoryConfigManager manager{env};
  // Every "client" is the one thread-safe store.
  ConfigManager& client(size_t) { return manager; }
  // Moves the lease clock: virtual, instant.
  void pass_ms(uint64_t ms) { env.advance_ms(ms); }
};

struct EtcdBackend {
  static constexpr bool kEtcd = true;
  // One etcd for the whole suite (starting one takes about a second); tests keep apart by
  // key prefix.
  static inline TempDir* dir = nullptr;
  static inline EtcdProcess* etcd = nullptr;
  static void start_shared() {
    if (!etcd_installed()) return;
    dir = new TempDir("shoal-etcd");
    auto p = EtcdProcess::start(fast_etcd(dir->path()));
    SHOAL_ASSERT(p.ok(), "starting etcd: %s", p.status().to_string().c_str());
    etcd = p->release();
  }
  static void stop_shared() {
    delete etcd;
    etcd = nullptr;
    delete dir;
    dir = nullptr;
  }
  // One client per racing thread, as separate processes would have.
  std::vector<std::unique_ptr<EtcdConfigManager>> clients;
  ConfigManager& client(size_t i) {
    while (clients.size() <= i) {
      auto c = EtcdConfigManager::create(EtcdOptions{{etcd->endpoint()}, 2000, 5});
      SHOAL_ASSERT(c.ok(), "%s", c.status().to_string().c_str());
      clients.push_back(std::move(*c));
    }
    return *clients[i];
  }
  // Real time for a real server.
  void pass_ms(uint64_t ms) { RealEnv::instance().sleep_ns(ms * 1'000'000); }
};

template <typename B>
class ConfigManagerConformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { B::start_shared(); }
  static void TearDownTestSuite() { B::stop_shared(); }
  void SetUp() override {
    if (B::kEtcd && !etcd_installed()) {
      GTEST_SKIP() << kEtcdBinary << " not installed (Debian package etcd-server): skipping "
                   << "the etcd half of the conformance suite";
    }
    static std::atomic<int> test_number{0};
    prefix_ = "/test" + std::to_string(test_number++) + "/";
  }
  ConfigManager& cm(size_t i = 0) { return backend_.client(i); }
  std::string key(const std::string& name) const { return prefix_ + name; }

  B backend_;
  std::string prefix_;
};

using Backends = ::testing::Types<InMemoryBackend, EtcdBackend>;
class BackendNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return T::kEtcd ? "Etcd" : "InMemory";
  }
};
TYPED_TEST_SUITE(ConfigManagerConformance, Backends, BackendNames);

TYPED_TEST(ConfigManagerConformance, PutGetRangeRemoveAndRevisionsMoveUp) {
  ConfigManager& cm = this->cm();
  auto missing = cm.get(this->key("nothing"));
  ASSERT_TRUE(missing.ok()) << missing.status().to_string();
  EXPECT_FALSE(missing->has_value());

  const std::string binary("\0\xff\x01 bytes", 9);
  auto r1 = cm.put(this->key("b"), binary);
  auto r2 = cm.put(this->key("a"), "");
  auto r3 = cm.put(this->key("c"), "three");
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok()) << r1.status().to_string();
  EXPECT_LT(*r1, *r2);
  EXPECT_LT(*r2, *r3);
  ASSERT_TRUE(cm.put(this->prefix_ + "x/other", "outside").ok());  // sorts after, same prefix
  ASSERT_TRUE(cm.put(this->prefix_.substr(0, this->prefix_.size() - 1) + "z", "no").ok());

  auto b = cm.get(this->key("b"));
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->value, binary);
  EXPECT_EQ((*b)->mod_revision, *r1);
  EXPECT_EQ((*b)->lease, 0);

  auto all = cm.range(this->prefix_);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].key, this->key("a"));
  EXPECT_EQ((*all)[0].versioned.value, "");
  EXPECT_EQ((*all)[0].versioned.mod_revision, *r2);
  EXPECT_EQ((*all)[1].key, this->key("b"));
  EXPECT_EQ((*all)[2].key, this->key("c"));
  EXPECT_EQ((*all)[3].key, this->key("x/other"));

  auto overwritten = cm.put(this->key("a"), "again");
  ASSERT_TRUE(overwritten.ok());
  EXPECT_GT(*overwritten, *r3);
  auto gone = cm.remove(this->key("a"));
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(*gone);
  auto again = cm.remove(this->key("a"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  auto after = cm.get(this->key("a"));
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value());
  // A removal moved the revision too: the next write is above the overwrite's.
  auto next = cm.put(this->key("a"), "back");
  ASSERT_TRUE(next.ok());
  EXPECT_GT(*next, *overwritten + 1);
}

TYPED_TEST(ConfigManagerConformance, CasLosesWithTheCurrentValue) {
  ConfigManager& cm = this->cm();
  const std::string k = this->key("cas");
  auto created = cm.cas(k, 0, "v1");
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  ASSERT_TRUE(created->won);
  auto again = cm.cas(k, 0, "other");  // must not exist: it does
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->won);
  ASSERT_TRUE(again->current.has_value());
  EXPECT_EQ(again->current->value, "v1");
  EXPECT_EQ(again->current->mod_revision, created->mod_revision);
  auto stale = cm.cas(k, created->mod_revision - 1, "stale");
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale->won);
  auto next = cm.cas(k, created->mod_revision, "v2");
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->won);
  EXPECT_GT(next->mod_revision, created->mod_revision);
  auto v = cm.get(k);
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_EQ((*v)->value, "v2");
  // A lost cas on a missing key reports it missing.
  auto absent = cm.cas(this->key("absent"), 5, "x");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->won);
  EXPECT_FALSE(absent->current.has_value());
}

// Threads increment one counter by CAS, retrying against the value a lost CAS returns: every
// revision of the counter has exactly one winner, so no increment is lost or doubled.
TYPED_TEST(ConfigManagerConformance, CasRaceHasExactlyOneWinnerPerRevision) {
  constexpr int kThreads = 4;
  constexpr int kIncrementsEach = 10;
  const std::string k = this->key("counter");
  ASSERT_TRUE(this->cm().put(k, "0").ok());
  for (int t = 0; t < kThreads; ++t) this->cm(t);  // clients made before the threads
  std::vector<std::vector<int64_t>> won_revisions(kThreads);
  std::vector<std::string> errors(kThreads);
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ConfigManager& cm = this->cm(t);
      start.arrive_and_wait();
      auto cur = cm.get(k);
      if (!cur.ok() || !cur->has_value()) {
        errors[t] = "get failed";
        return;
      }
      Versioned seen = **cur;
      for (int done = 0, attempts = 0; done < kIncrementsEach && attempts < 10'000; ++attempts) {
        const std::string next = std::to_string(std::stoll(seen.value) + 1);
        auto r = cm.cas(k, seen.mod_revision, next);
        if (!r.ok()) {
          errors[t] = r.status().to_string();
          return;
        }
        if (r->won) {
          won_revisions[t].push_back(r->mod_revision);
          seen = Versioned{next, r->mod_revision, 0};
          ++done;
        } else {
          if (!r->current) {
            errors[t] = "counter vanished";
            return;
          }
          seen = *r->current;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<int64_t> revisions;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_EQ(won_revisions[t].size(), size_t(kIncrementsEach)) << "thread " << t;
    revisions.insert(won_revisions[t].begin(), won_revisions[t].end());
  }
  EXPECT_EQ(revisions.size(), size_t(kThreads * kIncrementsEach)) << "two winners of a revision";
  auto final_value = this->cm().get(k);
  ASSERT_TRUE(final_value.ok() && final_value->has_value());
  EXPECT_EQ((*final_value)->value, std::to_string(kThreads * kIncrementsEach));
}

TYPED_TEST(ConfigManagerConformance, TxnIsAllOrNothing) {
  ConfigManager& cm = this->cm();
  const std::string x = this->key("x"), y = this->key("y");
  auto rx = cm.put(x, "x0");
  ASSERT_TRUE(rx.ok());
  // y does not exist: a compare expecting it at rx fails, and neither put happens.
  auto failed = cm.txn({{x, *rx}, {y, *rx}}, {{x, "x1", 0}, {y, "y1", 0}});
  ASSERT_TRUE(failed.ok()) << failed.status().to_string();
  EXPECT_FALSE(failed->succeeded);
  ASSERT_EQ(failed->current.size(), 2u);
  ASSERT_TRUE(failed->current[0].has_value());
  EXPECT_EQ(failed->current[0]->value, "x0");
  EXPECT_FALSE(failed->current[1].has_value());
  auto x_now = cm.get(x);
  ASSERT_TRUE(x_now.ok() && x_now->has_value());
  EXPECT_EQ((*x_now)->value, "x0");

  auto ok = cm.txn({{x, *rx}, {y, 0}}, {{x, "x1", 0}, {y, "y1", 0}});
  ASSERT_TRUE(ok.ok());
  ASSERT_TRUE(ok->succeeded);
  EXPECT_TRUE(ok->current.empty());
  auto both = cm.range(this->prefix_);
  ASSERT_TRUE(both.ok());
  ASSERT_EQ(both->size(), 2u);
  for (const KeyValue& kv : *both) EXPECT_EQ(kv.versioned.mod_revision, ok->revision);
}

// Writers move two keys together by txn while a reader ranges over both: it never sees one
// moved without the other.
TYPED_TEST(ConfigManagerConformance, ConcurrentTxnsAreAtomicToReaders) {
  constexpr int kWriters = 2;
  constexpr int kMovesEach = 8;
  const std::string x = this->key("pair/x"), y = this->key("pair/y");
  const std::string pair_prefix = this->key("pair/");
  ASSERT_TRUE(this->cm().txn({}, {{x, "0", 0}, {y, "0", 0}}).ok());
  for (int t = 0; t <= kWriters; ++t) this->cm(t);
  std::atomic<int> writers_done{0};
  std::barrier start(kWriters + 1);
  std::atomic<int> torn{0}, reads{0}, moves{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&, t] {
      ConfigManager& cm = this->cm(t);
      start.arrive_and_wait();
      for (int attempts = 0, done = 0; done < kMovesEach && attempts < 10'000; ++attempts) {
        auto state = cm.range(pair_prefix);
        if (!state.ok() || state->size() != 2) break;
        const KeyValue& kx = (*state)[0];
        const KeyValue& ky = (*state)[1];
        const std::string next = std::to_string(std::stoll(kx.versioned.value) + 1);
        auto r = cm.txn({{kx.key, kx.versioned.mod_revision}, {ky.key, ky.versioned.mod_revision}},
                        {{x, next, 0}, {y, next, 0}});
        if (!r.ok()) break;
        if (r->succeeded) ++done, ++moves;
      }
      ++writers_done;
    });
  }
  threads.emplace_back([&] {
    ConfigManager& cm = this->cm(kWriters);
    start.arrive_and_wait();
    // While the writers run, and at least 100 times (in memory they may be done at once).
    for (int i = 0; i < 100'000 && (writers_done.load() < kWriters || i < 100); ++i) {
      auto state = cm.range(pair_prefix);
      if (!state.ok() || state->size() != 2) {
        ++torn;
        continue;
      }
      ++reads;
      if ((*state)[0].versioned.value != (*state)[1].versioned.value) ++torn;
    }
  });
  for (auto& th : threads) th.join();
  EXPECT_EQ(moves.load(), kWriters * kMovesEach);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  auto final_x = this->cm().get(x);
  ASSERT_TRUE(final_x.ok() && final_x->has_value());
  EXPECT_EQ((*final_x)->value, std::to_string(kWriters * kMovesEach));
}

TYPED_TEST(ConfigManagerConformance, LeaseExpiryRemovesTheKeyAndKeepAliveKeepsIt) {
  ConfigManager& cm = this->cm();
  auto lease = cm.grant_lease(1000);
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_GE(lease->ttl_ms, 1000u);
  const std::string k = this->key("alive");
  auto rev = cm.put(k, "leader", lease->id);
  ASSERT_TRUE(rev.ok()) << rev.status().to_string();
  auto v = cm.get(k);
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_EQ((*v)->lease, lease->id);

  // Renewed after 60% of the TTL, twice: the key outlives its first TTL.
  for (int i = 0; i < 2; ++i) {
    this->backend_.pass_ms(lease->ttl_ms * 6 / 10);
    ASSERT_TRUE(cm.keep_alive(lease->id).ok());
  }
  auto still = cm.get(k);
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE(still->has_value()) << "the key went while its lease was renewed";

  // Not renewed: it goes (etcd checks expiry every 500 ms, so allow some seconds).
  const uint64_t start_ms = now_ms();
  this->backend_.pass_ms(lease->ttl_ms);
  auto change = cm.wait_for_change(k, *rev, 4000);
  ASSERT_TRUE(change.ok()) << change.status().to_string();
  EXPECT_TRUE(change->changed);
  EXPECT_FALSE(change->current.has_value()) << "expired lease's key still there";
  EXPECT_LT(now_ms() - start_ms, 4500u);
  EXPECT_TRUE(cm.keep_alive(lease->id).is_not_found());
  EXPECT_TRUE(cm.put(k, "late", lease->id).status().is_not_found());
}

TYPED_TEST(ConfigManagerConformance, RevokeRemovesTheLeasesKeys) {
  ConfigManager& cm = this->cm();
  auto lease = cm.grant_lease(30'000);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(cm.put(this->key("l1"), "a", lease->id).ok());
  ASSERT_TRUE(cm.txn({}, {{this->key("l2"), "b", lease->id}, {this->key("kept"), "c", 0}}).ok());
  ASSERT_TRUE(cm.revoke(lease->id).ok());
  auto left = cm.range(this->prefix_);
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].key, this->key("kept"));
  EXPECT_TRUE(cm.revoke(lease->id).is_not_found());
  EXPECT_TRUE(cm.keep_alive(lease->id).is_not_found());
}

TYPED_TEST(ConfigManagerConformance, WaitForChangeWakesOnAWriteAndTimesOut) {
  ConfigManager& cm = this->cm();
  const std::string k = this->key("watched");
  auto rev = cm.put(k, "v1");
  ASSERT_TRUE(rev.ok());

  uint64_t start_ms = now_ms();
  auto quiet = cm.wait_for_change(k, *rev, 150);
  ASSERT_TRUE(quiet.ok()) << quiet.status().to_string();
  EXPECT_FALSE(quiet->changed);
  ASSERT_TRUE(quiet->current.has_value());
  EXPECT_EQ(quiet->current->value, "v1");
  EXPECT_GE(now_ms() - start_ms, 150u);
  EXPECT_LT(now_ms() - start_ms, 1500u);

  this->cm(1);
  std::thread writer([&] {
    RealEnv::instance().sleep_ns(100'000'000);
    this->cm(1).put(k, "v2").status().ignore();
  });
  start_ms = now_ms();
  auto woke = cm.wait_for_change(k, *rev, 5000);
  writer.join();
  ASSERT_TRUE(woke.ok()) << woke.status().to_string();
  EXPECT_TRUE(woke->changed);
  ASSERT_TRUE(woke->current.has_value());
  EXPECT_EQ(woke->current->value, "v2");
  EXPECT_LT(now_ms() - start_ms, 2000u);

  // A removal is a change for a caller that saw the key; absence is none for one that did not.
  ASSERT_TRUE(cm.remove(k).ok());
  auto removed = cm.wait_for_change(k, woke->current->mod_revision, 1000);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->changed);
  EXPECT_FALSE(removed->current.has_value());
  auto still_absent = cm.wait_for_change(k, 0, 50);
  ASSERT_TRUE(still_absent.ok());
  EXPECT_FALSE(still_absent->changed);
}

// ---- The typed layer, on both backends.

std::vector<ShardState> two_shards() {
  return {ShardState{0, {0, 1, 2}, 0, 0}, ShardState{0, {0, 1, 2}, 0, 0}};
}

// A leader publishes its predecessor's final watermark only while etcd still names it: one
// that hung until a successor was appointed is refused, and nothing is written.
TYPED_TEST(ConfigManagerConformance, ADeposedLeaderCannotPublishAFinalWatermark) {
  const std::string name = "d" + this->prefix_.substr(1, this->prefix_.size() - 2);
  ClusterStateStore store(this->cm(), name);
  ASSERT_TRUE(store.initialize(two_shards()).ok());
  auto to_1 = store.begin_epoch_change(1, 0, 1);  // replica 1 leads shard 0 in epoch 2
  ASSERT_TRUE(to_1.ok() && to_1->won);
  auto to_2 = store.begin_epoch_change(2, 0, 2);  // it hangs; replica 2 leads in epoch 3
  ASSERT_TRUE(to_2.ok() && to_2->won);
  auto late = store.publish_final_watermark_as_leader(1, 0, 1234, 1, 2);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), Code::kAborted);
  EXPECT_NE(late.status().message().find("deposed: shard 0 is led by replica 2 since epoch 3"),
            std::string::npos)
      << late.status().to_string();
  EXPECT_FALSE(store.final_watermark(1, 0)->has_value());
  // The leader etcd names publishes, once; a retry returns what is stored.
  auto now = store.publish_final_watermark_as_leader(2, 0, 5678, 2, 3);
  ASSERT_TRUE(now.ok()) << now.status().to_string();
  EXPECT_EQ(*now, 5678u);
  auto again = store.publish_final_watermark_as_leader(2, 0, 1, 2, 3);
  ASSERT_TRUE(again.ok() && *again == 5678u);
  // Another shard's epoch change moves the cluster's epoch, not shard 0's leader.
  ASSERT_TRUE(store.begin_epoch_change(3, 1, 1).ok());
  auto after = store.publish_final_watermark_as_leader(3, 0, 9, 2, 4);
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  // The same replica appointed again later is a new incarnation: the old one is deposed.
  ASSERT_TRUE(store.begin_epoch_change(4, 0, 1).ok());
  ASSERT_TRUE(store.begin_epoch_change(5, 0, 2).ok());
  auto old_incarnation = store.publish_final_watermark_as_leader(5, 0, 7, 2, 3);
  EXPECT_EQ(old_incarnation.status().code(), Code::kAborted);
}

// A new leader records its failover (final watermark, floor, FVW) in one write; a retry, or
// an attempt that finds part of it stored by an earlier one, keeps what is stored; a deposed
// leader records nothing.
TYPED_TEST(ConfigManagerConformance, ATakeoverRecordIsOneWriteAndKeepsWhatIsStored) {
  const std::string name = "t" + this->prefix_.substr(1, this->prefix_.size() - 2);
  ClusterStateStore store(this->cm(), name);
  ASSERT_TRUE(store.initialize(two_shards()).ok());
  auto to_1 = store.begin_epoch_change(1, 0, 1);  // replica 1 leads shard 0 in epoch 2
  ASSERT_TRUE(to_1.ok() && to_1->won);
  auto before = store.load_state();
  ASSERT_TRUE(before.ok());
  const int64_t revision_before = before->epoch_revision;

  auto rec = store.publish_takeover(1, 0, 1234, 5000, 1, 2);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(rec->final_watermark, 1234u);
  EXPECT_EQ(rec->floor, 5000u);
  EXPECT_EQ(rec->fvw, (std::vector<uint64_t>{1234, kInfiniteWatermark}));
  auto fw = this->cm().get(store.final_watermark_key(1, 0));
  auto fl = this->cm().get(store.epoch_floor_key(1, 0));
  auto fvw = this->cm().get(store.fvw_key(1));
  ASSERT_TRUE(fw.ok() && fw->has_value() && fl.ok() && fl->has_value() && fvw.ok() &&
              fvw->has_value());
  EXPECT_EQ((*fw)->mod_revision, revision_before + 1) << "one write for the three keys";
  EXPECT_EQ((*fl)->mod_revision, revision_before + 1);
  EXPECT_EQ((*fvw)->mod_revision, revision_before + 1);
  EXPECT_EQ(**store.epoch_floor(1, 0), 5000u);
  EXPECT_EQ(**store.load_fvw(1), rec->fvw);

  auto again = store.publish_takeover(1, 0, 1, 2, 1, 2);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->final_watermark, 1234u);
  EXPECT_EQ(again->floor, 5000u);
  EXPECT_EQ(again->fvw, rec->fvw);

  // Shard 1 fails over next; an earlier attempt stored only its final watermark.
  ASSERT_TRUE(store.begin_epoch_change(2, 1, 2).ok());  // replica 2 leads shard 1 in epoch 3
  ASSERT_TRUE(store.publish_final_watermark_as_leader(2, 1, 777, 2, 3).ok());
  auto partial = store.publish_takeover(2, 1, 999, 888, 2, 3);
  ASSERT_TRUE(partial.ok()) << partial.status().to_string();
  EXPECT_EQ(partial->final_watermark, 777u);
  EXPECT_EQ(partial->floor, 888u);
  EXPECT_EQ(partial->fvw, (std::vector<uint64_t>{kInfiniteWatermark, 777}));

  // Replica 1 of shard 0 is deposed by replica 0 in epoch 4: it records nothing of epoch 3.
  ASSERT_TRUE(store.begin_epoch_change(3, 0, 0).ok());
  auto deposed = store.publish_takeover(3, 0, 42, 43, 1, 2);
  ASSERT_FALSE(deposed.ok());
  EXPECT_EQ(deposed.status().code(), Code::kAborted) << deposed.status().to_string();
  EXPECT_FALSE(store.final_watermark(3, 0)->has_value());
  EXPECT_FALSE(store.epoch_floor(3, 0)->has_value());
  EXPECT_FALSE(store.load_fvw(3)->has_value());
}

// A whole cluster restarting from disk moves the epoch past every failover it saw, keeps the
// leaders the failovers appointed, and makes every leader's since_epoch the restart's; a
// restart planned against a stale epoch loses and gets the state as it is.
TYPED_TEST(ConfigManagerConformance, ARestartKeepsTheLeadersInANewEpoch) {
  const std::string name = "r" + this->prefix_.substr(1, this->prefix_.size() - 2);
  ClusterStateStore store(this->cm(), name);
  ASSERT_TRUE(store.initialize(two_shards()).ok());
  auto failover = store.begin_epoch_change(1, 1, 2);  // replica 2 leads shard 1 in epoch 2
  ASSERT_TRUE(failover.ok() && failover->won);
  auto stale = store.restart_in_epoch(1, 5);
  ASSERT_TRUE(stale.ok()) << stale.status().to_string();
  EXPECT_FALSE(stale->won);
  EXPECT_EQ(stale->state.epoch, 2u);
  auto restarted = store.restart_in_epoch(2, 5);
  ASSERT_TRUE(restarted.ok()) << restarted.status().to_string();
  ASSERT_TRUE(restarted->won);
  auto state = store.load_state();
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  EXPECT_EQ(state->epoch, 5u);
  ASSERT_EQ(state->shards.size(), 2u);
  EXPECT_EQ(state->shards[0].leader_replica, 0u);
  EXPECT_EQ(state->shards[1].leader_replica, 2u);
  EXPECT_EQ(state->shards[0].since_epoch, 5u);
  EXPECT_EQ(state->shards[1].since_epoch, 5u);
  EXPECT_EQ(state->shards[1].members, (std::vector<uint32_t>{0, 1, 2}));
  // A failover after the restart moves on from it.
  auto next = store.begin_epoch_change(5, 0, 1);
  ASSERT_TRUE(next.ok() && next->won);
  EXPECT_EQ(next->state.epoch, 6u);
}

// A restart from disk may name other leaders (`cluster up`: the replica whose log reaches
// furthest), in the same compare-and-swap; leaders that are not members, or not one per
// shard, are refused and nothing is written.
TYPED_TEST(ConfigManagerConformance, ARestartMayNameOtherLeadersInTheSameSwap) {
  const std::string name = "l" + this->prefix_.substr(1, this->prefix_.size() - 2);
  ClusterStateStore store(this->cm(), name);
  ASSERT_TRUE(store.initialize(two_shards()).ok());
  for (const std::vector<uint32_t>& bad :
       {std::vector<uint32_t>{1}, std::vector<uint32_t>{1, 2, 0}, std::vector<uint32_t>{1, 7}}) {
    auto refused = store.restart_in_epoch(1, 2, bad);
    ASSERT_FALSE(refused.ok()) << bad.size();
    EXPECT_EQ(refused.status().code(), Code::kInvalidArgument) << refused.status().to_string();
  }
  auto unchanged = store.load_state();
  ASSERT_TRUE(unchanged.ok()) << unchanged.status().to_string();
  EXPECT_EQ(unchanged->epoch, 1u);
  EXPECT_EQ(unchanged->shards[1].leader_replica, 0u);
  auto stale = store.restart_in_epoch(3, 4, {2, 1});
  ASSERT_TRUE(stale.ok()) << stale.status().to_string();
  EXPECT_FALSE(stale->won);
  auto restarted = store.restart_in_epoch(1, 4, {2, 1});
  ASSERT_TRUE(restarted.ok()) << restarted.status().to_string();
  ASSERT_TRUE(restarted->won);
  EXPECT_EQ(restarted->state.shards[0].leader_replica, 2u);
  auto state = store.load_state();
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  EXPECT_EQ(state->epoch, 4u);
  EXPECT_EQ(state->shards[0].leader_replica, 2u);
  EXPECT_EQ(state->shards[1].leader_replica, 1u);
  EXPECT_EQ(state->shards[0].since_epoch, 4u);
  EXPECT_EQ(state->shards[1].since_epoch, 4u);
  EXPECT_EQ(state->shards[0].members, (std::vector<uint32_t>{0, 1, 2}));
}

TYPED_TEST(ConfigManagerConformance, ClusterStateRoundTripsAndPublishesOnce) {
  const std::string name = "c" + this->prefix_.substr(1, this->prefix_.size() - 2);
  ClusterStateStore store(this->cm(), name);
  EXPECT_TRUE(store.load_state().status().is_not_found());
  auto created = store.initialize(two_shards());
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  EXPECT_TRUE(*created);
  auto again = store.initialize({ShardState{1, {1}, 0, 0}});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again) << "a second initialize must leave the cluster alone";
  EXPECT_EQ(store.initialize({ShardState{3, {0, 1}, 0, 0}}).status().code(),
            Code::kInvalidArgument);

  auto state = store.load_state();
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  EXPECT_EQ(state->epoch, 1u);
  ASSERT_EQ(state->shards.size(), 2u);
  EXPECT_EQ(state->shards[1].members, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(state->shards[1].since_epoch, 1u);

  // Final watermarks and the FVW are written once: the first publisher's value stays.
  auto wm = store.publish_final_watermark(1, 0, 1234);
  ASSERT_TRUE(wm.ok()) << wm.status().to_string();
  EXPECT_EQ(*wm, 1234u);
  auto wm2 = store.publish_final_watermark(1, 0, 999);
  ASSERT_TRUE(wm2.ok());
  EXPECT_EQ(*wm2, 1234u);
  auto inf = store.publish_final_watermark(1, 1, kInfiniteWatermark);
  ASSERT_TRUE(inf.ok());
  EXPECT_EQ(*inf, kInfiniteWatermark);
  auto read_inf = store.final_watermark(1, 1);
  ASSERT_TRUE(read_inf.ok() && read_inf->has_value());
  EXPECT_EQ(**read_inf, kInfiniteWatermark);
  auto none = store.final_watermark(2, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // The floor of a failed-over shard's old TIDs, written once too.
  EXPECT_FALSE(store.epoch_floor(1, 0)->has_value());
  auto floor = store.publish_epoch_floor(1, 0, 5000);
  ASSERT_TRUE(floor.ok() && *floor == 5000u);
  auto floor2 = store.publish_epoch_floor(1, 0, 7);
  ASSERT_TRUE(floor2.ok() && *floor2 == 5000u);
  auto read_floor = store.epoch_floor(1, 0);
  ASSERT_TRUE(read_floor.ok() && read_floor->has_value());
  EXPECT_EQ(**read_floor, 5000u);
  auto fvw = store.publish_fvw(1, {1234, 5678});
  ASSERT_TRUE(fvw.ok());
  auto fvw2 = store.publish_fvw(1, {1, 1});
  ASSERT_TRUE(fvw2.ok());
  EXPECT_EQ(*fvw2, (std::vector<uint64_t>{1234, 5678}));
  auto loaded_fvw = store.load_fvw(1);
  ASSERT_TRUE(loaded_fvw.ok() && loaded_fvw->has_value());
  EXPECT_EQ(**loaded_fvw, (std::vector<uint64_t>{1234, 5678}));

  // The liveness key goes with its lease.
  auto lease = this->cm().grant_lease(30'000);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store.announce_alive(1, 2, lease->id).ok());
  auto alive = store.alive_replica(1);
  ASSERT_TRUE(alive.ok() && alive->has_value());
  EXPECT_EQ(**alive, 2u);
  ASSERT_TRUE(this->cm().revoke(lease->id).ok());
  auto dead = store.alive_replica(1);
  ASSERT_TRUE(dead.ok());
  EXPECT_FALSE(dead->has_value());
}

TYPED_TEST(ConfigManagerConformance, TwoRacingEpochChangesHaveOneWinner) {
  const std::string name = "race" + this->prefix_.substr(5, this->prefix_.size() - 6);
  ASSERT_TRUE(ClusterStateStore(this->cm(), name).initialize(two_shards()).ok());
  // Rounds of two callers (separate clients) each trying to move the same epoch on, one
  // naming replica 1, the other replica 2 as shard 1's new leader.
  for (uint64_t epoch = 1; epoch <= 4; ++epoch) {
    this->cm(1);
    this->cm(2);
    std::barrier start(2);
    Result<EpochChange> results[2] = {Status::Aborted(), Status::Aborted()};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        ClusterStateStore store(this->cm(t + 1), name);
        start.arrive_and_wait();
        results[t] = store.begin_epoch_change(epoch, 1, uint32_t(t + 1));
      });
    }
    for (auto& th : threads) th.join();
    ASSERT_TRUE(results[0].ok()) << results[0].status().to_string();
    ASSERT_TRUE(results[1].ok()) << results[1].status().to_string();
    ASSERT_NE(results[0]->won, results[1]->won) << "epoch " << epoch << ": not one winner";
    const int winner = results[0]->won ? 0 : 1;
    for (int t = 0; t < 2; ++t) {
      // Both see the winner's state: the next epoch, the winner's leader.
      EXPECT_EQ(results[t]->state.epoch, epoch + 1);
      EXPECT_EQ(results[t]->state.shards[1].leader_replica, uint32_t(winner + 1));
      EXPECT_EQ(results[t]->state.shards[1].since_epoch, epoch + 1);
      EXPECT_EQ(results[t]->state.shards[0].leader_replica, 0u);
    }
  }
  ClusterStateStore store(this->cm(), name);
  auto stale = store.begin_epoch_change(1, 1, 0);
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale->won);
  EXPECT_EQ(stale->state.epoch, 5u);
  EXPECT_EQ(store.begin_epoch_change(5, 1, 7).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store.begin_epoch_change(5, 9, 0).status().code(), Code::kInvalidArgument);
}

// What is stored is read through validation: bad values are Corruption naming the key.
TYPED_TEST(ConfigManagerConformance, MalformedValuesAreCorruptionNamingTheKey) {
  const std::string name = "bad" + this->prefix_.substr(5, this->prefix_.size() - 6);
  ConfigManager& cm = this->cm();
  ClusterStateStore store(cm, name);
  ASSERT_TRUE(store.initialize(two_shards()).ok());
  auto expect_corrupt = [&](const std::string& key, const std::string& value,
                            const std::string& words) {
    auto before = cm.get(key);
    ASSERT_TRUE(cm.put(key, value).ok());
    auto s = store.load_state();
    EXPECT_EQ(s.status().code(), Code::kCorruption) << value;
    EXPECT_NE(s.status().message().find("'" + key + "'"), std::string::npos)
        << s.status().to_string();
    EXPECT_NE(s.status().message().find(words), std::string::npos) << s.status().to_string();
    ASSERT_TRUE(before.ok() && before->has_value());
    ASSERT_TRUE(cm.put(key, (*before)->value).ok());  // repaired for the next case
    ASSERT_TRUE(store.load_state().ok());
  };
  expect_corrupt(store.epoch_key(), "{not json", "not JSON");
  expect_corrupt(store.epoch_key(), "[1,2]", "not a JSON object");
  expect_corrupt(store.epoch_key(), R"({"epoch":"3"})", "'epoch' is not an unsigned");
  expect_corrupt(store.epoch_key(), R"({"epoch":-3})", "'epoch' is not an unsigned");
  expect_corrupt(store.epoch_key(), R"({"epoch":2.5})", "'epoch' is not an unsigned");
  expect_corrupt(store.epoch_key(), R"({"epic":3})", "'epoch' missing");
  expect_corrupt(store.shard_key(1), R"({"leader_replica":1,"since_epoch":1})",
                 "'members' missing");
  expect_corrupt(store.shard_key(1), R"({"leader_replica":5,"members":[0,1],"since_epoch":1})",
                 "not among the members");
  expect_corrupt(store.shard_key(1),
                 R"({"leader_replica":0,"members":[0,4294967296],"since_epoch":1})",
                 "'members' holds");
  expect_corrupt(store.shard_key(0),
                 R"({"leader_replica":4294967296,"members":[0],"since_epoch":1})", "32 bits");
  // A gap in the shard numbers.
  ASSERT_TRUE(
      cm.put(store.shard_key(3), R"({"leader_replica":0,"members":[0],"since_epoch":1})").ok());
  auto gap = store.load_state();
  EXPECT_EQ(gap.status().code(), Code::kCorruption);
  EXPECT_NE(gap.status().message().find(store.shard_key(2)), std::string::npos);
  ASSERT_TRUE(cm.remove(store.shard_key(3)).ok());
  ASSERT_TRUE(cm.put(store.prefix() + "shards/x1", "{}").ok());
  EXPECT_NE(store.load_state().status().message().find("not a shard number"), std::string::npos);
  ASSERT_TRUE(cm.remove(store.prefix() + "shards/x1").ok());

  ASSERT_TRUE(cm.put(store.fvw_key(1), R"({"fvw":[1,"2"]})").ok());
  auto fvw = store.load_fvw(1);
  EXPECT_EQ(fvw.status().code(), Code::kCorruption);
  EXPECT_NE(fvw.status().message().find(store.fvw_key(1)), std::string::npos);
  auto published = store.publish_fvw(1, {1, 2});  // lost to the bad value: reads it back
  EXPECT_EQ(published.status().code(), Code::kCorruption);
  ASSERT_TRUE(cm.put(store.final_watermark_key(1, 0), "17").ok());
  EXPECT_EQ(store.final_watermark(1, 0).status().code(), Code::kCorruption);
  ASSERT_TRUE(cm.put(store.alive_key(0), R"({"replica":null})").ok());
  EXPECT_EQ(store.alive_replica(0).status().code(), Code::kCorruption);
}

// ---- Helpers and etcd's failure cases.

// The leader a shard restarts with: etcd's unless it cannot lead or trails by more than the
// slots kept, then the replica of least lag over every stream (etcd's on a tie, else the
// lowest id); the report names the stream and a replica ahead.
TEST(RestartLeaderPick, KeepsTheNamedLeaderUnlessItLagsOrHoldsNoLog) {
  using Reach = std::vector<std::optional<std::vector<uint64_t>>>;
  // Replica 2 missed 2,800 slots of stream 0 (it was down): not kept; 0 and 1 are level on
  // stream 0, replica 1 is a slot short on stream 1, so replica 0 leads.
  RestartLeaderPick p = pick_restart_leader(Reach{{{5000, 900}}, {{5000, 899}}, {{2200, 900}}},
                                            /*named=*/2, /*keep_lag_slots=*/64);
  EXPECT_EQ(p.leader, 0u);
  EXPECT_TRUE(p.named_can_lead);
  EXPECT_EQ(p.named_lag, 2800u);
  EXPECT_EQ(p.stream, 0u);
  EXPECT_EQ(p.ahead, 0u);
  // Within the slots kept: etcd's leader stays, though another is ahead.
  p = pick_restart_leader(Reach{{{5000, 900}}, {{5064, 900}}, {{5030, 901}}}, 0, 64);
  EXPECT_EQ(p.leader, 0u);
  EXPECT_EQ(p.named_lag, 64u);
  p = pick_restart_leader(Reach{{{5000, 900}}, {{5065, 800}}, {{5030, 901}}}, 0, 64);
  EXPECT_EQ(p.leader, 2u);  // lag 35 (stream 0), against replica 1's 101 (stream 1)
  EXPECT_EQ(p.named_lag, 65u);
  EXPECT_EQ(p.ahead, 1u);  // furthest on stream 0, where replica 0 trails most
  p = pick_restart_leader(Reach{{{5000, 900}}, {{5065, 900}}, {{5030, 901}}}, 0, 0);
  EXPECT_EQ(p.leader, 1u);  // lag 1 against replica 2's 35
  EXPECT_EQ(p.named_lag, 65u);
  EXPECT_EQ(p.ahead, 1u);
  // A tie on the least lag keeps etcd's leader, else the lowest id.
  p = pick_restart_leader(Reach{{{10, 500}}, {{500, 10}}, {{500, 10}}}, 2, 0);
  EXPECT_EQ(p.leader, 2u);
  p = pick_restart_leader(Reach{{{10, 10}}, {{500, 500}}, {{500, 500}}}, 0, 0);
  EXPECT_EQ(p.leader, 1u);
  // A replica whose directory holds no log never leads; the named one is replaced by the
  // furthest that can.
  p = pick_restart_leader(Reach{{{300}}, std::nullopt, {{400}}}, 1, 64);
  EXPECT_EQ(p.leader, 2u);
  EXPECT_FALSE(p.named_can_lead);
  p = pick_restart_leader(Reach{{{300}}, std::nullopt, {{400}}}, 2, 64);
  EXPECT_EQ(p.leader, 2u);
  // Nobody can lead: etcd's stays (the caller refuses to restart).
  p = pick_restart_leader(Reach{std::nullopt, std::nullopt, std::nullopt}, 1, 64);
  EXPECT_EQ(p.leader, 1u);
  EXPECT_FALSE(p.named_can_lead);
}

TEST(ConfigManagerHelpers, Base64RoundTripsAndRejectsGarbage) {
  for (const std::string& s :
       {std::string(), std::string("f"), std::string("fo"), std::string("foo"), std::string("foob"),
        std::string("\0\xff\x80", 3), std::string("/shoal/c/epoch")}) {
    std::string back;
    ASSERT_TRUE(base64_decode(base64_encode(s), &back)) << s;
    EXPECT_EQ(back, s);
  }
  EXPECT_EQ(base64_encode("/a"), "L2E=");
  std::string out;
  EXPECT_FALSE(base64_decode("L2E", &out));
  EXPECT_FALSE(base64_decode("L2*=", &out));
  EXPECT_FALSE(base64_decode("L=E=", &out));
  EXPECT_FALSE(base64_decode("L2E=L2E=", &out));
}

TEST(ConfigManagerHelpers, PrefixRangeEnd) {
  EXPECT_EQ(prefix_range_end("/a/"), "/a0");
  EXPECT_EQ(prefix_range_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(prefix_range_end(std::string("\xff\xff", 2)), "");
}

TEST(EtcdConfigManager, RejectsBadOptions) {
  EXPECT_EQ(EtcdConfigManager::create(EtcdOptions{{}, 1000, 10}).status().code(),
            Code::kInvalidArgument);
  for (const char* bad : {"localhost", "127.0.0.1:", ":2379", "h:0", "h:70000", "h:12x"}) {
    auto r = EtcdConfigManager::create(EtcdOptions{{bad}, 1000, 10});
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos);
  }
  EXPECT_EQ(EtcdConfigManager::create(EtcdOptions{{"h:1"}, 0, 10}).status().code(),
            Code::kInvalidArgument);
}

TEST(EtcdConfigManager, NotRunningIsUnavailableWithinTheTimeoutNamingTheEndpoint) {
  auto port = free_loopback_port();  // nothing listens there
  ASSERT_TRUE(port.ok());
  const std::string endpoint = "127.0.0.1:" + std::to_string(*port);
  auto cm = EtcdConfigManager::create(EtcdOptions{{endpoint}, 500, 10});
  ASSERT_TRUE(cm.ok());
  const uint64_t start_ms = now_ms();
  auto get = (*cm)->get("/k");
  EXPECT_EQ(get.status().code(), Code::kUnavailable);
  EXPECT_NE(get.status().message().find(endpoint), std::string::npos) << get.status().to_string();
  auto put = (*cm)->put("/k", "v");
  EXPECT_EQ(put.status().code(), Code::kUnavailable);
  EXPECT_NE(put.status().message().find(endpoint), std::string::npos);
  EXPECT_EQ((*cm)->grant_lease(1000).status().code(), Code::kUnavailable);
  EXPECT_LT(now_ms() - start_ms, 1500u);
}

TEST(EtcdConfigManager, FailsOverToALiveEndpoint) {
  if (!etcd_installed()) GTEST_SKIP() << kEtcdBinary << " not installed (etcd-server)";
  TempDir dir("shoal-etcd");
  auto etcd = EtcdProcess::start(fast_etcd(dir.path()));
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  auto dead = free_loopback_port();
  ASSERT_TRUE(dead.ok());
  auto cm = EtcdConfigManager::create(
      EtcdOptions{{"127.0.0.1:" + std::to_string(*dead), (*etcd)->endpoint()}, 1000, 10});
  ASSERT_TRUE(cm.ok());
  // The dead endpoint refuses the connection: even a write may go on to the next one.
  auto put = (*cm)->put("/failover", "v");
  ASSERT_TRUE(put.ok()) << put.status().to_string();
  auto get = (*cm)->get("/failover");
  ASSERT_TRUE(get.ok() && get->has_value());
  EXPECT_EQ((*get)->value, "v");
}

TEST(EtcdConfigManager, KilledIsUnavailableThenWorksAfterARestartOnTheSameDataDir) {
  if (!etcd_installed()) GTEST_SKIP() << kEtcdBinary << " not installed (etcd-server)";
  TempDir dir("shoal-etcd");
  auto started = EtcdProcess::start(fast_etcd(dir.path()));
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  EtcdProcess& etcd = **started;
  auto cm = EtcdConfigManager::create(EtcdOptions{{etcd.endpoint()}, 500, 10});
  ASSERT_TRUE(cm.ok());
  ClusterStateStore store(**cm, "crash");
  ASSERT_TRUE(store.initialize(two_shards()).ok());
  auto won = store.begin_epoch_change(1, 0, 2);
  ASSERT_TRUE(won.ok() && won->won);

  etcd.kill();
  const uint64_t start_ms = now_ms();
  auto down = store.load_state();
  EXPECT_EQ(down.status().code(), Code::kUnavailable);
  EXPECT_NE(down.status().message().find(etcd.endpoint()), std::string::npos)
      << down.status().to_string();
  EXPECT_EQ((*cm)->put("/x", "y").status().code(), Code::kUnavailable);
  EXPECT_LT(now_ms() - start_ms, 1500u);

  ASSERT_TRUE(etcd.restart().ok());
  auto up = store.load_state();
  ASSERT_TRUE(up.ok()) << up.status().to_string();
  EXPECT_EQ(up->epoch, 2u);
  EXPECT_EQ(up->shards[0].leader_replica, 2u);
  auto next = store.begin_epoch_change(2, 1, 1);
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_TRUE(next->won);
  ASSERT_TRUE(etcd.stop().ok());
  EXPECT_FALSE(etcd.running());
}

TEST(EtcdProcess, MissingBinaryAndTakenPortAreClearErrors) {
  TempDir dir("shoal-etcd");
  EtcdProcessOptions missing = fast_etcd(dir.path());
  missing.binary = dir.path() + "/no-such-etcd";
  auto r = EtcdProcess::start(missing);
  EXPECT_TRUE(r.status().is_not_found());
  EXPECT_NE(r.status().message().find("no-such-etcd"), std::string::npos);
  EtcdProcessOptions not_in_path = fast_etcd(dir.path());
  not_in_path.binary = "shoal-no-such-etcd";
  EXPECT_TRUE(EtcdProcess::start(not_in_path).status().is_not_found());

  if (!etcd_installed()) GTEST_SKIP() << kEtcdBinary << " not installed (etcd-server)";
  // A listener of our own holds the port.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  EtcdProcessOptions taken = fast_etcd(dir.path());
  taken.client_port = ntohs(addr.sin_port);
  auto t = EtcdProcess::start(taken);
  close(fd);
  EXPECT_EQ(t.status().code(), Code::kAlreadyExists);
  EXPECT_NE(t.status().message().find("client port 127.0.0.1:" + std::to_string(taken.client_port)),
            std::string::npos)
      << t.status().to_string();
}

}  // namespace
}  // namespace shoal::cluster

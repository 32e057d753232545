// DepositionWatch over the in-memory configuration manager: silent while the cluster state
// names us, reports the successor once another replica leads our shard.
#include "src/server/deposition_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <tuple>
#include <vector>

#include "src/base/env.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/config_manager.h"

namespace shoal::server {
namespace {

std::vector<cluster::ShardState> two_shards_of_three() {
  return {{0, {0, 1, 2}, 0, 0}, {0, {0, 1, 2}, 0, 0}};
}

TEST(DepositionWatch, SilentWhileNamedThenReportsTheSuccessor) {
  cluster::InMemoryConfigManager manager(RealEnv::instance());
  cluster::ClusterStateStore store(manager, "c");
  ASSERT_TRUE(store.initialize(two_shards_of_three()).ok());
  uint64_t seen_epoch = 0;
  uint32_t seen_leader = 99;
  int calls = 0;
  DepositionWatchOptions o;
  o.cluster = "c";
  o.shard = 1;
  o.replica = 0;
  o.epoch = 1;
  DepositionWatch watch(manager, o, [&](uint64_t epoch, uint32_t leader) {
    seen_epoch = epoch;
    seen_leader = leader;
    ++calls;
  });
  EXPECT_FALSE(watch.check_once());
  // Another shard's leader changes: not ours.
  auto other = store.begin_epoch_change(1, 0, 2);
  ASSERT_TRUE(other.ok() && other->won);
  EXPECT_FALSE(watch.check_once());
  EXPECT_EQ(calls, 0);
  auto ours = store.begin_epoch_change(2, 1, 1);
  ASSERT_TRUE(ours.ok() && ours->won);
  EXPECT_TRUE(watch.check_once());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen_epoch, 3u);
  EXPECT_EQ(seen_leader, 1u);
}

TEST(DepositionWatch, TellsEachOtherShardsLeaderChangeOnce) {
  cluster::InMemoryConfigManager manager(RealEnv::instance());
  cluster::ClusterStateStore store(manager, "c");
  ASSERT_TRUE(store.initialize(two_shards_of_three()).ok());
  std::vector<std::tuple<uint32_t, uint32_t, uint64_t>> changes;
  int deposed = 0;
  DepositionWatchOptions o;
  o.cluster = "c";
  o.shard = 1;
  o.replica = 0;
  o.epoch = 1;
  o.leaders = {0, 0};
  DepositionWatch watch(
      manager, o, [&](uint64_t, uint32_t) { ++deposed; },
      [&](uint32_t shard, uint32_t leader, uint64_t epoch) {
        changes.emplace_back(shard, leader, epoch);
      });
  EXPECT_FALSE(watch.check_once());
  EXPECT_TRUE(changes.empty());
  ASSERT_TRUE(store.begin_epoch_change(1, 0, 2).ok());
  EXPECT_FALSE(watch.check_once());
  EXPECT_FALSE(watch.check_once());                     // told once, not on every look
  ASSERT_TRUE(store.begin_epoch_change(2, 0, 1).ok());  // a second failover of shard 0
  EXPECT_FALSE(watch.check_once());
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0], std::make_tuple(0u, 2u, uint64_t{2}));
  EXPECT_EQ(changes[1], std::make_tuple(0u, 1u, uint64_t{3}));
  EXPECT_EQ(deposed, 0);
}

TEST(DepositionWatch, AnUninitializedClusterIsNotADeposition) {
  cluster::InMemoryConfigManager manager(RealEnv::instance());
  DepositionWatchOptions o;
  o.cluster = "missing";
  int calls = 0;
  DepositionWatch watch(manager, o, [&](uint64_t, uint32_t) { ++calls; });
  EXPECT_FALSE(watch.check_once());
  EXPECT_FALSE(watch.check_once());  // said once, still polling
  EXPECT_EQ(calls, 0);
}

TEST(DepositionWatch, TheThreadCallsOnceAndStops) {
  cluster::InMemoryConfigManager manager(RealEnv::instance());
  cluster::ClusterStateStore store(manager, "c");
  ASSERT_TRUE(store.initialize(two_shards_of_three()).ok());
  std::atomic<int> calls{0};
  DepositionWatchOptions o;
  o.cluster = "c";
  o.poll_ms = 5;
  DepositionWatch watch(manager, o, [&](uint64_t, uint32_t) { calls.fetch_add(1); });
  watch.start();
  ASSERT_TRUE(store.begin_epoch_change(1, 0, 2).ok());
  // Bounded wait: the thread looks every 5 ms.
  for (int i = 0; i < 2000 && calls.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace shoal::server

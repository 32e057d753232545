// The argument checks of a watched run's kills (`bench --kill-leader-at`, `--kill-shard`,
// `--kill-region`): what is refused before any process starts, and which replicas a region
// kill stops. The kills themselves run end to end in the cli_smoke_tpcc_kill_* tests.
#include <gtest/gtest.h>

#include "src/cluster/config.h"
#include "src/server/failover_run.h"

namespace shoal::server {
namespace {

// The bench's layout: every leader in region-0, followers in region-1...
cluster::ClusterConfig layout(uint32_t shards, uint32_t replicas) {
  auto c = cluster::make_local_config(shards, replicas, 1, shards, 20000);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : cluster::ClusterConfig{};
}

TEST(KillSchedule, OneShardPerTimeOrOneForAll) {
  auto one = make_kill_schedule({2, 5}, {1}, 2);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  ASSERT_EQ(one->size(), 2u);
  EXPECT_EQ((*one)[0].shard, 1u);
  EXPECT_EQ((*one)[1].shard, 1u);
  auto each = make_kill_schedule({2, 5}, {1, 0}, 2);
  ASSERT_TRUE(each.ok());
  EXPECT_EQ((*each)[1].shard, 0u);
  auto none = make_kill_schedule({}, {}, 2);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(KillSchedule, RefusesBadListsNamingTheFlag) {
  auto unequal = make_kill_schedule({2, 5}, {0, 1, 0}, 2);
  EXPECT_NE(unequal.status().message().find("--kill-shard: 3 shards for 2 kill times"),
            std::string::npos);
  auto decreasing = make_kill_schedule({5, 2}, {}, 2);
  EXPECT_NE(decreasing.status().message().find("times must increase"), std::string::npos);
  auto range = make_kill_schedule({2}, {2}, 2);
  EXPECT_NE(range.status().message().find("not a shard of the run"), std::string::npos);
  auto alone = make_kill_schedule({}, {1}, 2);
  EXPECT_NE(alone.status().message().find("needs --kill-leader-at"), std::string::npos);
}

TEST(RegionKill, TheLeadersRegionHoldsEveryShardsLeader) {
  auto r = region_replicas(layout(3, 3), "region-0");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 3u);
  for (uint32_t s = 0; s < 3; ++s) {
    EXPECT_EQ((*r)[s].shard, s);
    EXPECT_EQ((*r)[s].replica, 0u);
  }
  auto followers = region_replicas(layout(2, 3), "region-2");
  ASSERT_TRUE(followers.ok());
  ASSERT_EQ(followers->size(), 2u);
  EXPECT_EQ((*followers)[1].replica, 2u);
}

TEST(RegionKill, RefusesAnUnknownRegionNamingTheKnownOnes) {
  auto r = region_replicas(layout(2, 3), "r0");
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "--kill-region: no region 'r0' in the run (its regions: region-0, region-1, "
            "region-2)");
}

TEST(RegionKill, RefusesARegionHoldingHalfOfAShard) {
  // Hand-built (validate() refuses two replicas of one shard in one region, so a valid config
  // reaches this only with two replicas): shard 1 keeps two of its three replicas in "a".
  cluster::ClusterConfig c = layout(2, 3);
  c.regions.push_back({"a"});
  c.shards[1].replicas[1].region = "a";
  c.shards[1].replicas[2].region = "a";
  auto r = region_replicas(c, "a");
  ASSERT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("region 'a' holds 2 of shard 1's 3 replicas"),
            std::string::npos)
      << r.status().message();
  // Two replicas: either region is half of every shard.
  auto two = region_replicas(layout(2, 2), "region-1");
  EXPECT_NE(two.status().message().find("no failover possible"), std::string::npos);
}

TEST(RegionKill, RefusesARegionWithoutReplicas) {
  cluster::ClusterConfig c = layout(2, 3);
  c.regions.push_back({"empty"});
  auto r = region_replicas(c, "empty");
  EXPECT_NE(r.status().message().find("holds no replica"), std::string::npos);
}

TEST(RegionKill, FlagsNeedOneTimeAndNoShardOrHang) {
  const cluster::ClusterConfig c = layout(2, 3);
  EXPECT_TRUE(check_region_kill({5}, false, false, c, "region-0").ok());
  EXPECT_NE(check_region_kill({2, 5}, false, false, c, "region-0")
                .message()
                .find("needs one --kill-leader-at time"),
            std::string::npos);
  EXPECT_NE(
      check_region_kill({5}, true, false, c, "region-0").message().find("not with --kill-shard"),
      std::string::npos);
  EXPECT_NE(
      check_region_kill({5}, false, true, c, "region-0").message().find("not with --hang-leader"),
      std::string::npos);
  EXPECT_NE(check_region_kill({5}, false, false, c, "eu").message().find("no region 'eu'"),
            std::string::npos);
}

}  // namespace
}  // namespace shoal::server

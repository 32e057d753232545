// MicroStats travel from each shard to the controller as JSON: the commit (acknowledged)
// latency histogram survives the trip and merges, and a malformed one is refused naming it.
#include "src/server/dist_micro.h"

#include <gtest/gtest.h>

namespace shoal::server {
namespace {

TEST(MicroStats, CommitLatencyRoundTripsAndMerges) {
  MicroStats a;
  a.committed = 3;
  for (uint64_t ns : {1'000'000ULL, 2'000'000ULL, 60'000'000ULL}) a.latency_commit.record(ns);
  a.latency_local.record(10'000);
  a.unacknowledged = 2;
  auto back = MicroStats::from_json(a.to_json());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->latency_commit.count(), 3u);
  // Buckets come back as midpoints: within 1% of what was recorded.
  EXPECT_NEAR(static_cast<double>(back->latency_commit.max()), 60e6, 0.01 * 60e6);
  EXPECT_EQ(back->latency_local.count(), 1u);
  EXPECT_EQ(back->unacknowledged, 2u);
  MicroStats total;
  total.merge(*back);
  total.merge(*back);
  EXPECT_EQ(total.latency_commit.count(), 6u);
  EXPECT_EQ(total.unacknowledged, 4u);
}

TEST(MicroStats, MalformedCommitLatencyIsRefusedNamingTheField) {
  nlohmann::json j = MicroStats{}.to_json();
  j["latency_commit"] = nlohmann::json::array({nlohmann::json::array({1, "x"})});
  auto back = MicroStats::from_json(j);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), Code::kInvalidArgument);
  EXPECT_NE(back.status().message().find("stats.latency_commit"), std::string::npos)
      << back.status().to_string();
}

}  // namespace
}  // namespace shoal::server

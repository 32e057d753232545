// The cluster configuration fills the WAN shaper's matrix. The adapter is a template in
// src/net (wan_matrix_from_config), so src/net does not depend on src/cluster; this test, in a
// module above both, checks that the real ClusterConfig type fits it. Only config.h's plain
// fields are used, so nothing from the cluster library needs to be linked here.
#include <gtest/gtest.h>

#include "src/cluster/config.h"
#include "src/net/wan_shaper.h"

namespace shoal::server {
namespace {

TEST(WanConfig, ClusterConfigFillsTheWanMatrix) {
  cluster::ClusterConfig c;
  c.regions = {{"us-east"}, {"eu-west"}};
  c.wan = {{"us-east", "eu-west", 35.0, 1.5}};
  auto m = net::wan_matrix_from_config(c);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const size_t us = *m->region("us-east");
  const size_t eu = *m->region("eu-west");
  EXPECT_EQ(m->between(us, eu).one_way_delay_ns, 35'000'000u);
  EXPECT_EQ(m->between(eu, us).jitter_ns, 1'500'000u);
  EXPECT_EQ(m->between(us, us).one_way_delay_ns, 0u);
}

}  // namespace
}  // namespace shoal::server

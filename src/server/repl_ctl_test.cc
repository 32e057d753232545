// replica_verdict (repl_ctl.h) over hand-built states: digests, checks and follower reads
// (a torn snapshot fails the verdict naming the replica; the reads appear in the table and
// the JSON only for followers serving them).
#include "src/server/repl_ctl.h"

#include <gtest/gtest.h>

namespace shoal::server {
namespace {

ShardReplicaStates shard_with_followers(uint32_t shard, uint32_t followers) {
  ShardReplicaStates st;
  st.shard = shard;
  st.floor = 0x100;
  st.leader_digest = 0xabc;
  for (uint32_t r = 1; r <= followers; ++r) {
    ReplicaState f;
    f.replica = r;
    f.digest = 0xabc;
    f.checked = true;
    st.followers.push_back(f);
  }
  return st;
}

repl::FollowerReadStats reads(uint64_t transactions, uint64_t torn) {
  repl::FollowerReadStats s;
  s.threads = 1;
  s.transactions = transactions;
  s.snapshots = transactions / 2;
  s.torn = torn;
  s.seconds = 2;
  s.lag_epochs_mean = 1.5;
  s.lag_epochs_max = 4;
  if (torn > 0) s.first_violation = "district (1, 3): D_NEXT_O_ID - 1 = 9, max(O_ID) = 8";
  return s;
}

TEST(ReplicaVerdict, FollowerReadsAreReportedPerFollower) {
  std::vector<ShardReplicaStates> states = {shard_with_followers(0, 2), shard_with_followers(1, 2)};
  states[0].followers[0].reads = reads(1000, 0);
  states[1].followers[1].reads = reads(600, 0);
  std::string table;
  nlohmann::json json;
  const Status s = replica_verdict(states, &table, &json);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_NE(table.find("shard 0 replica 1: digest 0000000000000abc = leader, consistency ok\n"
                       "  follower reads: 500 read-only txn/s (1000 txns, 500 snapshots, 0 torn)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("shard 1 replica 2: digest 0000000000000abc = leader, consistency ok\n"
                       "  follower reads: 300 read-only txn/s (600 txns, 300 snapshots, 0 torn)"),
            std::string::npos)
      << table;
  ASSERT_EQ(json.size(), 6u) << json.dump();  // 2 shards x (leader + 2 followers)
  EXPECT_EQ(json[1]["follower_reads"]["transactions"], 1000) << json.dump();
  EXPECT_TRUE(json[2]["follower_reads"].is_null()) << json.dump();  // serves no reads
  EXPECT_EQ(json[5]["follower_reads"]["torn"], 0) << json.dump();
}

TEST(ReplicaVerdict, ATornSnapshotFailsNamingTheReplica) {
  std::vector<ShardReplicaStates> states = {shard_with_followers(0, 2), shard_with_followers(1, 2)};
  states[1].followers[0].reads = reads(1000, 3);
  std::string table;
  nlohmann::json json;
  const Status s = replica_verdict(states, &table, &json);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("shard 1 replica 1: 3 torn snapshots in follower reads: district "
                             "(1, 3)"),
            std::string::npos)
      << s.to_string();
  EXPECT_EQ(json[4]["follower_reads"]["torn"], 3) << json.dump();
}

TEST(ReplicaVerdict, TheFirstFailureInTableOrderOutranksAMissingShard) {
  std::vector<ShardReplicaStates> states = {shard_with_followers(0, 2), shard_with_followers(1, 1)};
  states[0].followers[0].reads = reads(10, 1);
  states[0].followers[1].digest = 0xdef;  // later in the table, but a digest difference
  ShardReplicaStates gone;
  gone.shard = 2;
  gone.error = "no answer";
  states.push_back(gone);
  std::string table;
  nlohmann::json json;
  bool unverified = false;
  const Status s = replica_verdict(states, &table, &json, &unverified);
  EXPECT_EQ(s.code(), Code::kCorruption);
  // The first failure in table order stands: replica 1's torn reads come before replica 2.
  EXPECT_NE(s.message().find("shard 0 replica 1: 1 torn snapshots"), std::string::npos)
      << s.to_string();
  EXPECT_NE(table.find("shard 0 replica 2: digest 0000000000000def DIFFERS from the leader"),
            std::string::npos)
      << table;
  EXPECT_TRUE(unverified);
}

}  // namespace
}  // namespace shoal::server

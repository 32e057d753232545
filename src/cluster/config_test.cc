#include "src/cluster/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace shoal::cluster {
namespace {

constexpr const char* kGood = R"(
[cluster]
name = "geo"
transport = "shm"
workers = 2
replicas = 3

[[region]]
name = "us"
[[region]]
name = "eu"
[[region]]
name = "ap"

[[wan]]
from = "us"
to = "eu"
one_way_ms = 40.0
jitter_ms = 2.0

[[shard]]
id = 0
partition_lo = 1
partition_hi = 3
[[shard.replica]]
region = "us"
host = "127.0.0.1"
port = 7000
[[shard.replica]]
region = "eu"
host = "127.0.0.1"
port = 7002
[[shard.replica]]
region = "ap"
host = "127.0.0.1"
port = 7004
)";

TEST(ClusterConfig, ParsesAGoodFile) {
  auto c = parse_config(kGood);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->name, "geo");
  EXPECT_EQ(c->transport, TransportKind::kShm);
  EXPECT_EQ(c->workers_per_shard, 2u);
  ASSERT_EQ(c->shards.size(), 1u);
  EXPECT_EQ(c->shards[0].replicas[1].region, "eu");
  EXPECT_EQ(c->shard_for_partition(2), &c->shards[0]);
  EXPECT_EQ(c->shard_for_partition(3), nullptr);
  EXPECT_DOUBLE_EQ(c->one_way_ms("eu", "us"), 40.0);
  EXPECT_DOUBLE_EQ(c->one_way_ms("ap", "us"), 0.0);
}

TEST(ClusterConfig, BatchingDefaultsToMakosAndIsConfigurable) {
  auto defaults = parse_config(kGood);
  ASSERT_TRUE(defaults.ok()) << defaults.status().to_string();
  EXPECT_EQ(defaults->batch_txns, 400u);
  EXPECT_DOUBLE_EQ(defaults->batch_us, 4000.0);
  std::string text = kGood;
  text.replace(text.find("replicas = 3"), 12, "replicas = 3\nbatch_txns = 100\nbatch_us = 250.5");
  auto c = parse_config(text);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->batch_txns, 100u);
  EXPECT_DOUBLE_EQ(c->batch_us, 250.5);
  auto again = parse_config(c->to_toml());  // the bench writes its local config this way
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << c->to_toml();
  EXPECT_EQ(again->batch_txns, 100u);
  EXPECT_DOUBLE_EQ(again->batch_us, 250.5);
  // An integer is a valid batch_us too.
  text.replace(text.find("250.5"), 5, "2000");
  auto integral = parse_config(text);
  ASSERT_TRUE(integral.ok()) << integral.status().to_string();
  EXPECT_DOUBLE_EQ(integral->batch_us, 2000.0);
}

TEST(ClusterConfig, RoundTripsThroughToml) {
  auto c = make_local_config(3, 3, 2, 10, 9000);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto again = parse_config(c->to_toml());
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << c->to_toml();
  EXPECT_EQ(again->to_toml(), c->to_toml());
  // Partitions 1..10 split over 3 shards, no gaps.
  for (uint64_t w = 1; w <= 10; ++w) EXPECT_NE(again->shard_for_partition(w), nullptr) << w;
}

// transport = "fabric" (issue 16): parsed with its provider and written back the same; one
// host only.
TEST(ClusterConfig, FabricTransportAndProviderRoundTrip) {
  std::string text = kGood;
  const std::string from = "transport = \"shm\"";
  text.replace(text.find(from), from.size(),
               "transport = \"fabric\"\nfabric_provider = \"tcp;ofi_rxm\"");
  auto c = parse_config(text);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->transport, TransportKind::kFabric);
  EXPECT_EQ(c->fabric_provider, "tcp;ofi_rxm");
  auto again = parse_config(c->to_toml());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->to_toml(), c->to_toml());
  EXPECT_EQ(again->transport, TransportKind::kFabric);
  EXPECT_EQ(again->fabric_provider, "tcp;ofi_rxm");
  // One host only (the software provider binds 127.0.0.1; the rendezvous is a unix name).
  const std::string host = "host = \"127.0.0.1\"";
  text.replace(text.find(host), host.size(), "host = \"10.0.0.1\"");
  auto remote = parse_config(text);
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find(
                "shard[0].replica[0].host: '10.0.0.1': transport fabric runs on one host"),
            std::string::npos)
      << remote.status().to_string();
}

TEST(ClusterConfig, MetricsPortIsOptionalAndRoundTrips) {
  auto plain = parse_config(kGood);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->shards[0].replicas[0].metrics_port, 0);  // none unless configured
  EXPECT_EQ(plain->to_toml().find("metrics_port"), std::string::npos);
  std::string text = kGood;
  text.replace(text.find("port = 7002"), 11, "port = 7002\nmetrics_port = 9102");
  auto c = parse_config(text);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->shards[0].replicas[1].metrics_port, 9102);
  auto again = parse_config(c->to_toml());
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << c->to_toml();
  EXPECT_EQ(again->shards[0].replicas[1].metrics_port, 9102);
  EXPECT_EQ(again->to_toml(), c->to_toml());
}

// kGood with two more shards (3 in all).
std::string three_shards() {
  std::string text = kGood;
  for (int s = 1; s <= 2; ++s) {
    text += fmt::format("[[shard]]\nid = {}\npartition_lo = {}\npartition_hi = {}\n", s, 2 * s + 1,
                        2 * s + 3);
    int port = 7000 + 100 * s;
    for (const char* region : {"us", "eu", "ap"}) {
      text += fmt::format("[[shard.replica]]\nregion = \"{}\"\nhost = \"127.0.0.1\"\nport = {}\n",
                          region, port);
      port += 2;
    }
  }
  return text;
}

TEST(ClusterConfig, RespPortAndKvSplitKeys) {
  auto plain = parse_config(three_shards());
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->shards[0].replicas[0].resp_port, 0);
  EXPECT_EQ(plain->kv_split_keys, default_kv_split_keys(3));
  std::string text = three_shards();
  text.replace(text.find("port = 7002"), 11, "port = 7002\nresp_port = 6380\nclient_port = 6390");
  text.replace(text.find("replicas = 3"), 12,
               "replicas = 3\nkv_split_keys = [\"g\", \"q\\u0001\\\"\"]");
  auto c = parse_config(text);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->shards[0].replicas[1].resp_port, 6380);
  EXPECT_EQ(c->shards[0].replicas[1].client_port, 6390);
  ASSERT_EQ(c->kv_split_keys.size(), 2u);
  EXPECT_EQ(c->kv_split_keys[1], std::string("q\x01\""));
  auto again = parse_config(c->to_toml());
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << c->to_toml();
  EXPECT_EQ(again->to_toml(), c->to_toml());
  EXPECT_EQ(again->kv_split_keys, c->kv_split_keys);
  EXPECT_EQ(c->shard_for_kv_key("a"), 0u);
  EXPECT_EQ(c->shard_for_kv_key("fzzz"), 0u);
  EXPECT_EQ(c->shard_for_kv_key("g"), 1u);  // a split key belongs to the shard it starts
  EXPECT_EQ(c->shard_for_kv_key("q"), 1u);
  EXPECT_EQ(c->shard_for_kv_key("q\x01\""), 2u);
  EXPECT_EQ(c->shard_for_kv_key("\xff"), 2u);
  const std::vector<std::pair<std::string, std::string>> bad_cases = {
      {"[\"m\"]", "cluster.kv_split_keys: 1 split keys for 3 shards: give shards - 1"},
      {"[\"m\", \"m\"]", "cluster.kv_split_keys[1]: split keys must be strictly ascending"},
      {"[\"m\", \"b\"]", "cluster.kv_split_keys[1]: split keys must be strictly ascending"},
      {"[\"m\", \"\"]", "cluster.kv_split_keys[1]: must be 1 to 8192 bytes"},
      {"[1, 2]", "cluster.kv_split_keys[0]: expected a string"},
      {"\"m\"", "cluster.kv_split_keys: expected an array of strings"}};
  for (const auto& [keys, expect] : bad_cases) {
    std::string bad = three_shards();
    bad.replace(bad.find("replicas = 3"), 12, "replicas = 3\nkv_split_keys = " + keys);
    auto r = parse_config(bad);
    ASSERT_FALSE(r.ok()) << keys;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  }
}

// [cluster] etcd names an existing configuration manager: its members round-trip; a member
// that is not host:port, or too many, is refused naming the entry.
TEST(ClusterConfig, EtcdMembers) {
  auto plain = parse_config(three_shards());
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_TRUE(plain->etcd.empty());
  std::string text = three_shards();
  text.replace(text.find("replicas = 3"), 12,
               "replicas = 3\netcd = [\"10.0.0.1:2379\", \"etcd-b.example:2379\"]");
  auto c = parse_config(text);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->etcd, (std::vector<std::string>{"10.0.0.1:2379", "etcd-b.example:2379"}));
  auto again = parse_config(c->to_toml());
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << c->to_toml();
  EXPECT_EQ(again->etcd, c->etcd);
  const std::vector<std::pair<std::string, std::string>> bad_cases = {
      {"[\"nohost\"]", "cluster.etcd[0]: 'nohost': expected host:port"},
      {"[\"h:1\", \"h:0\"]", "cluster.etcd[1]: 'h:0': expected host:port"},
      {"[\"h:70000\"]", "cluster.etcd[0]: 'h:70000'"},
      {"[\":2379\"]", "cluster.etcd[0]: ':2379'"},
      {"[\"h:2379x\"]", "cluster.etcd[0]: 'h:2379x'"},
      {"[2379]", "cluster.etcd[0]: expected a string host:port"},
      {"\"h:2379\"", "cluster.etcd: expected an array of host:port"},
      {"[\"a:1\",\"a:2\",\"a:3\",\"a:4\",\"a:5\",\"a:6\",\"a:7\",\"a:8\"]",
       "cluster.etcd: at most 7 members, not 8"}};
  for (const auto& [members, expect] : bad_cases) {
    std::string bad = three_shards();
    bad.replace(bad.find("replicas = 3"), 12, "replicas = 3\netcd = " + members);
    auto r = parse_config(bad);
    ASSERT_FALSE(r.ok()) << members;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  }
}

TEST(ClusterConfig, DefaultKvSplitKeysAreAscending) {
  EXPECT_EQ(default_kv_split_keys(1), std::vector<std::string>{});
  EXPECT_EQ(default_kv_split_keys(2), std::vector<std::string>{"n"});
  for (uint32_t shards : {3u, 26u, 27u, 100u, 600u}) {
    const auto keys = default_kv_split_keys(shards);
    ASSERT_EQ(keys.size(), shards - 1);
    for (size_t i = 1; i < keys.size(); ++i) EXPECT_LT(keys[i - 1], keys[i]) << shards;
  }
  auto local = make_local_config(2, 1, 1, 2, 7000);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->shard_for_kv_key("apple"), 0u);
  EXPECT_EQ(local->shard_for_kv_key("zebra"), 1u);
}

// Each bad config must fail with a message naming the offending field.
struct BadCase {
  std::string from, to, expect;
};

TEST(ClusterConfig, BadConfigsNameTheField) {
  const std::vector<BadCase> cases = {
      {"transport = \"shm\"", "transport = \"carrier-pigeon\"",
       "cluster.transport: 'carrier-pigeon' is not tcp, shm or fabric"},
      {"transport = \"shm\"", "transport = \"uring\"",
       "cluster.transport: 'uring' is not available to shard servers and replication (a "
       "blocked uring send stops receiving"},
      {"transport = \"shm\"", "transport = \"shm\"\nfabric_provider = \"sockets\"",
       "cluster.fabric_provider: applies to transport = \"fabric\" only"},
      {"transport = \"shm\"",
       "transport = \"fabric\"\nfabric_provider = \"a-provider-name-of-thirty-two-by\"",
       "cluster.fabric_provider: at most 31 bytes"},
      {"transport = \"shm\"", "transport = \"sim\"", "cluster.transport: 'sim' is the simulator's"},
      {"workers = 2", "workers = 0", "cluster.workers"},
      {"workers = 2", "workers = \"two\"", "cluster.workers: expected an integer"},
      {"region = \"eu\"\nhost", "region = \"mars\"\nhost",
       "shard[0].replica[1].region: unknown region 'mars'"},
      {"port = 7002", "port = 7000", "address 127.0.0.1:7000 is used twice"},
      {"port = 7004", "port = 70000", "shard[0].replica[2].port"},
      {"port = 7002", "port = 7001",
       "shard[0].replica[0].port: its replication port 127.0.0.1:7001 (port + 1) is another"},
      {"port = 7000", "port = 65535", "shard[0].replica[0].port: 65535 leaves no replication"},
      {"partition_hi = 3", "partition_hi = 1", "shard[0].partition"},
      {"replicas = 3", "replicas = 2", "has 3 replicas, cluster.replicas is 2"},
      {"jitter_ms = 2.0", "jitter_ms = 99.0", "wan[0].jitter_ms"},
      {"to = \"eu\"", "to = \"moon\"", "wan[0].to: unknown region 'moon'"},
      {"name = \"geo\"", "name = \"geo\"\ncolour = \"blue\"", "cluster.colour: unknown key"},
      {"[cluster]", "[clutser]", "unknown key"},
      {"id = 0", "id = 4", "shard[0].id"},
      {"replicas = 3", "replicas = 3\nbatch_txns = 0",
       "cluster.batch_txns: must be in [1, 65535], not 0"},
      {"replicas = 3", "replicas = 3\nbatch_txns = 65536",
       "cluster.batch_txns: must be in [1, 65535]"},
      {"replicas = 3", "replicas = 3\nbatch_txns = -3",
       "cluster.batch_txns: must be in [1, 65535]"},
      {"replicas = 3", "replicas = 3\nbatch_txns = 1.5", "cluster.batch_txns: expected an integer"},
      {"replicas = 3", "replicas = 3\nbatch_us = 0",
       "cluster.batch_us: must be in (0, 1e7], not 0"},
      {"replicas = 3", "replicas = 3\nbatch_us = -1.0", "cluster.batch_us: must be in (0, 1e7]"},
      {"replicas = 3", "replicas = 3\nbatch_us = 2e7", "cluster.batch_us: must be in (0, 1e7]"},
      {"replicas = 3", "replicas = 3\nbatch_us = nan", "cluster.batch_us: must be in (0, 1e7]"},
      {"replicas = 3", "replicas = 3\nreplay_lag_ms = 600001", "cluster.replay_lag_ms"},
      {"replicas = 3", "replicas = 3\nreplay_lag_ms = -5", "cluster.replay_lag_ms"},
      {"replicas = 3", "replicas = 3\nleader_timeout_ms = 5",
       "cluster.leader_timeout_ms: must be in [30, 600000], not 5"},
      {"replicas = 3", "replicas = 3\nbatch_us = \"fast\"", "cluster.batch_us: expected a number"},
      {"name = \"geo\"", "name = ", "config:"},  // a TOML syntax error, with line and column
      {"port = 7004", "port = 7004\nmetrics_port = 0",
       "shard[0].replica[2].metrics_port: must be in [1, 65535], not 0"},
      {"port = 7004", "port = 7004\nmetrics_port = 7002",
       "shard[0].replica[2].metrics_port: address 127.0.0.1:7002 is used twice"},
      {"port = 7000", "port = 7000\nmetrics_port = 7001",
       "its replication port 127.0.0.1:7001 (port + 1) is another replica's address"},
      {"port = 7004", "port = 7004\nmetrics_port = \"x\"",
       "shard[0].replica[2].metrics_port: expected an integer"},
      {"port = 7004", "port = 7004\nresp_port = 0",
       "shard[0].replica[2].resp_port: must be in [1, 65535], not 0"},
      {"port = 7004", "port = 7004\nmetrics_port = 9000\nresp_port = 9000",
       "shard[0].replica[2].resp_port: address 127.0.0.1:9000 is used twice"},
      {"port = 7004", "port = 7004\nresp_port = 9000\nclient_port = 9000",
       "shard[0].replica[2].client_port: address 127.0.0.1:9000 is used twice"},
      {"port = 7000", "port = 7000\nresp_port = 7001",
       "its replication port 127.0.0.1:7001 (port + 1) is another replica's address"},
  };
  for (const BadCase& bc : cases) {
    std::string text = kGood;
    const size_t at = text.find(bc.from);
    ASSERT_NE(at, std::string::npos) << bc.from;
    text.replace(at, bc.from.size(), bc.to);
    auto c = parse_config(text);
    ASSERT_FALSE(c.ok()) << "accepted: " << bc.to;
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
    EXPECT_NE(c.status().message().find(bc.expect), std::string::npos)
        << "message '" << c.status().message() << "' lacks '" << bc.expect << "'";
  }
}

TEST(ClusterConfig, OverlappingShardsAreRejected) {
  auto c = make_local_config(2, 1, 1, 4, 9100);
  ASSERT_TRUE(c.ok());
  c->shards[1].partition_lo = 2;
  Status s = c->validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shard[1].partition: overlaps shard 0"), std::string::npos)
      << s.message();
}

// resp_password_file: relative to the config file's directory, round-trips, and the file's
// first line is the password; an unreadable, empty or oversized one is refused, naming it.
TEST(ClusterConfig, RespPasswordFileIsReadFromTheConfigsDirectory) {
  const std::string dir = ::testing::TempDir() + fmt::format("shoal-pw-{}", getpid());
  std::filesystem::create_directories(dir);
  std::string text = kGood;
  text.replace(text.find("replicas = 3"), 12, "replicas = 3\nresp_password_file = \"pw\"");
  std::ofstream(dir + "/c.toml") << text;
  std::ofstream(dir + "/pw") << "s3cret\r\nsecond line ignored\n";
  auto c = load_config_file(dir + "/c.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->resp_password_file, dir + "/pw");
  auto again = parse_config(c->to_toml());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->resp_password_file, dir + "/pw");
  auto pw = read_password_file(c->resp_password_file, "cluster.resp_password_file");
  ASSERT_TRUE(pw.ok()) << pw.status().to_string();
  EXPECT_EQ(*pw, "s3cret");

  std::ofstream(dir + "/empty") << "\nnot the first line\n";
  std::ofstream(dir + "/long") << std::string(kPasswordBytesMax + 1, 'x');
  const std::vector<std::pair<std::string, std::string>> bad = {
      {dir + "/missing", "cluster.resp_password_file: cannot read '" + dir + "/missing'"},
      {dir + "/empty", "starts with an empty line"},
      {dir + "/long", "longer than 4096 bytes"}};
  for (const auto& [path, expect] : bad) {
    auto r = read_password_file(path, "cluster.resp_password_file");
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  }
  std::filesystem::remove_all(dir);
}

TEST(ClusterConfig, MissingFileIsAClearError) {
  auto c = load_config_file("/nonexistent/shoal.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/shoal.toml"), std::string::npos);
  EXPECT_FALSE(make_local_config(4, 1, 1, 2, 9000).ok());
}

}  // namespace
}  // namespace shoal::cluster

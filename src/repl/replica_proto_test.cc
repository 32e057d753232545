// The leader/follower control messages (replica_proto.h) from a peer that sends garbage: a
// malformed message is an error naming the field, never an exception.
#include "src/repl/replica_proto.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shoal::repl {
namespace {

FollowerReport sample_report() {
  FollowerReport r;
  r.replica = 2;
  r.applied_tid = 12345;
  r.digest_done = true;
  r.digest = 0xdeadbeefcafef00dULL;
  r.checked = true;
  r.check_failures = {"condition 3"};
  r.replay_txns = 1000;
  r.reads.threads = 1;
  r.reads.torn = 4;
  r.reads.first_violation = "torn";
  r.copies.entry_bytes_received = 4096;
  r.copies.bytes[static_cast<size_t>(CopyHop::kAcceptorStore)] = 4096;
  r.copies.bytes[static_cast<size_t>(CopyHop::kWalWrite)] = 8192;
  return r;
}

TEST(ReplicaProto, ReportRoundTrips) {
  auto back = FollowerReport::parse(sample_report().to_json());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->replica, 2u);
  EXPECT_EQ(back->applied_tid, 12345u);
  EXPECT_EQ(back->digest, 0xdeadbeefcafef00dULL);
  EXPECT_EQ(back->check_failures, std::vector<std::string>{"condition 3"});
  EXPECT_EQ(back->reads.torn, 4u);
  EXPECT_EQ(back->reads.first_violation, "torn");
  EXPECT_EQ(back->copies.entry_bytes_received, 4096u);
  EXPECT_EQ(back->copies.bytes, sample_report().copies.bytes);
}

TEST(ReplicaProto, MalformedReportsNameTheField) {
  struct Case {
    const char* what;
    nlohmann::json message;
    const char* error;
  };
  nlohmann::json wrong_tid = sample_report().to_json();
  wrong_tid["applied_tid"] = "12345";
  nlohmann::json no_replica = sample_report().to_json();
  no_replica.erase("replica");
  nlohmann::json bad_failures = sample_report().to_json();
  bad_failures["check_failures"] = {1, 2};
  nlohmann::json bad_reads = sample_report().to_json();
  bad_reads["reads"]["torn"] = -1;
  nlohmann::json bad_copies = sample_report().to_json();
  bad_copies["copies"]["wal_write"] = "8192";
  nlohmann::json negative_replica = sample_report().to_json();
  negative_replica["replica"] = -2;
  const Case cases[] = {
      {"wrong type", wrong_tid,
       "follower status: 'applied_tid': a string, not an unsigned integer of 64 bits"},
      {"missing field", no_replica, "follower status: 'replica': missing"},
      {"list of numbers", bad_failures,
       "follower status: 'check_failures': an array, not a list of strings"},
      {"nested", bad_reads,
       "follower status: reads.'torn': the number -1, not an unsigned integer of 64 bits"},
      {"copies", bad_copies,
       "follower status: copies.'wal_write': a string, not an unsigned integer of 64 bits"},
      {"negative id", negative_replica,
       "follower status: 'replica': the number -2, not an unsigned integer of 32 bits"},
      {"not an object", nlohmann::json::array({1, 2}),
       "follower status: 'replica': the message is an array, not an object"},
  };
  for (const Case& c : cases) {
    auto r = FollowerReport::parse(c.message);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().message(), c.error) << c.what;
  }
}

TEST(ReplicaProto, MalformedSchemasAreCorruptionNamingTheField) {
  Schema s;
  s.tables = {{"warehouse", 1}, {"stock", 2}};
  s.workload = "tpcc";
  auto back = Schema::from_json(s.to_json());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tables.size(), 2u);
  EXPECT_EQ(back->tables[1].key_words, 2u);
  EXPECT_EQ(back->workload, "tpcc");

  nlohmann::json words_text = s.to_json();
  words_text["tables"][1]["key_words"] = "2";
  nlohmann::json no_name = s.to_json();
  no_name["tables"][0].erase("name");
  nlohmann::json workload_number = s.to_json();
  workload_number["workload"] = 7;
  nlohmann::json tables_object = s.to_json();
  tables_object["tables"] = {{"a", 1}};
  const std::pair<nlohmann::json, const char*> cases[] = {
      {words_text, "schema: 'key_words': a string, not an unsigned integer of 32 bits"},
      {no_name, "schema: 'name': missing"},
      {workload_number, "schema: 'workload': the number 7, not a string"},
      {tables_object, "schema: 'tables': not a list"},
      {nlohmann::json("schema"), "schema: 'tables': the message is a string, not an object"},
      {nlohmann::json::object(), "schema: 'tables': missing"},
  };
  for (const auto& [message, error] : cases) {
    auto r = Schema::from_json(message);
    ASSERT_FALSE(r.ok()) << message.dump();
    EXPECT_EQ(r.status().code(), Code::kCorruption);
    EXPECT_EQ(r.status().message(), error);
  }
}

TEST(ReplicaProto, ReadStatsAreOptionalButTyped) {
  auto empty = FollowerReadStats::parse(nlohmann::json::object());
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->threads, 0u);
  auto wrong = FollowerReadStats::parse({{"seconds", "1.5"}});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "'seconds': a string, not a number");
  EXPECT_FALSE(FollowerReadStats::parse(nlohmann::json(nullptr)).ok());
}

// A follower's checkpoint note round-trips; a note for another stream count, with a kept cut
// above its covered one, or without its fields is refused naming what is wrong.
TEST(ReplicaProto, CheckpointNotesRoundTripAndMalformedOnesAreRefused) {
  CheckpointNote n;
  n.seq = 7;
  n.bytes = 4096;
  n.covered = {100, 90};
  n.kept = {50, 0};
  auto back = CheckpointNote::parse(n.to_json(), 2);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->seq, 7u);
  EXPECT_EQ(back->bytes, 4096u);
  EXPECT_EQ(back->covered, n.covered);
  EXPECT_EQ(back->kept, n.kept);

  auto other_streams = CheckpointNote::parse(n.to_json(), 3);
  ASSERT_FALSE(other_streams.ok());
  EXPECT_NE(other_streams.status().message().find("array of 3 slots"), std::string::npos)
      << other_streams.status().to_string();
  nlohmann::json j = n.to_json();
  j["kept"] = {101, 0};
  auto above = CheckpointNote::parse(j, 2);
  ASSERT_FALSE(above.ok());
  EXPECT_NE(above.status().message().find("kept 101 above covered 100"), std::string::npos)
      << above.status().to_string();
  j = n.to_json();
  j["covered"] = {100, "x"};
  EXPECT_FALSE(CheckpointNote::parse(j, 2).ok());
  j = n.to_json();
  j.erase("seq");
  auto no_seq = CheckpointNote::parse(j, 2);
  ASSERT_FALSE(no_seq.ok());
  EXPECT_NE(no_seq.status().message().find("seq"), std::string::npos);
  j = n.to_json();
  j["bytes"] = 0;
  EXPECT_FALSE(CheckpointNote::parse(j, 2).ok());
}

// A chunk is its header and bytes; a short message, another magic, more bytes than were
// asked for (a peer sending a too-large chunk) and a range beyond the file are refused.
TEST(ReplicaProto, CheckpointChunksParseAndBadOnesAreRefused) {
  std::vector<uint8_t> msg(kCheckpointChunkHeaderBytes + 10);
  encode_checkpoint_chunk_header(3, 20, 100, msg.data());
  for (size_t i = 0; i < 10; ++i) msg[kCheckpointChunkHeaderBytes + i] = uint8_t(i);
  auto c = parse_checkpoint_chunk(msg, 10);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->seq, 3u);
  EXPECT_EQ(c->offset, 20u);
  EXPECT_EQ(c->total, 100u);
  ASSERT_EQ(c->bytes.size(), 10u);
  EXPECT_EQ(c->bytes[9], 9u);

  auto too_large = parse_checkpoint_chunk(msg, 9);
  ASSERT_FALSE(too_large.ok());
  EXPECT_NE(too_large.status().message().find("more than the 9 asked for"), std::string::npos)
      << too_large.status().to_string();
  auto short_msg = parse_checkpoint_chunk({msg.data(), 31}, 10);
  ASSERT_FALSE(short_msg.ok());
  EXPECT_NE(short_msg.status().message().find("shorter than"), std::string::npos);
  std::vector<uint8_t> bad = msg;
  bad[0] ^= 1;
  auto magic = parse_checkpoint_chunk(bad, 10);
  ASSERT_FALSE(magic.ok());
  EXPECT_NE(magic.status().message().find("bad magic"), std::string::npos);
  encode_checkpoint_chunk_header(3, 95, 100, msg.data());
  auto beyond = parse_checkpoint_chunk(msg, 10);
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.status().message().find("beyond the file's 100 bytes"), std::string::npos)
      << beyond.status().to_string();
}

}  // namespace
}  // namespace shoal::repl

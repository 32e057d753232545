// Byte-key tables (src/txn/bytes_table.h) through replication: a leader's commits logged by a
// StreamAppender (1 MiB values included), replayed on a follower created from the leader's
// schema, compared by engine_digest, replayed twice, checkpointed and restored, and promoted.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "src/repl/appender.h"
#include "src/repl/checkpoint.h"
#include "src/repl/replay.h"
#include "src/repl/replica_proto.h"
#include "src/txn/engine.h"

namespace shoal::repl {
namespace {

txn::EngineOptions quiet() {
  txn::EngineOptions o;
  o.epoch_ticker = false;
  return o;
}

std::map<std::string, std::string> contents(const txn::BytesTable& t) {
  std::map<std::string, std::string> out;
  t.for_each_committed([&](std::string_view k, std::string_view v, uint64_t) {
    out.emplace(k, v);
    return true;
  });
  return out;
}

template <typename F>
Status run_on(txn::Worker* w, const F& fn) {
  return w->run(
      [](txn::Txn& t, const void* args, void*) { return (*static_cast<const F*>(args))(t); }, &fn);
}

class BytesReplicationTest : public ::testing::Test {
 protected:
  BytesReplicationTest() : leader_(quiet()), follower_(quiet()) {
    kv_ = leader_.create_bytes_table("kv");
    leader_.create_table<1>("fixed");
    worker_ = leader_.make_worker();
    appender_ = std::make_unique<StreamAppender>(AppenderOptions{}, leader_, RealEnv::instance(),
                                                 nullptr, nullptr);
    worker_->set_commit_hook(
        [](void* ctx, const txn::Txn& txn) {
          return static_cast<StreamAppender*>(ctx)->append(txn);
        },
        appender_.get());
    EXPECT_TRUE(Schema::of(leader_, "kv").create_tables(follower_).ok());
  }
  template <typename F>
  Status run(const F& fn) {
    return run_on(worker_, fn);
  }
  // Seals what the leader logged (with a floor above its last commit) and keeps the entries.
  void ship() {
    ASSERT_TRUE(appender_->finish(worker_->txn().last_commit_tid()).ok());
    SealedEntry e;
    while (appender_->pop_sealed(&e)) {
      const std::span<const std::byte> bytes = appender_->buffer(e.buffer).first(e.bytes);
      ASSERT_TRUE(LogEntryView::parse(bytes, 0, kLogLargeEntryBytes).ok());
      shipped_.emplace_back(bytes.size() / 8);
      std::memcpy(shipped_.back().data(), bytes.data(), bytes.size());
      appender_->recycle(e.buffer);
    }
  }
  void replay_into(ReplayApplier& applier, size_t from = 0) {
    for (size_t i = from; i < shipped_.size(); ++i) {
      applier.on_chosen(
          0, {reinterpret_cast<const std::byte*>(shipped_[i].data()), shipped_[i].size() * 8});
    }
  }
  txn::Engine leader_, follower_;
  txn::BytesTable* kv_ = nullptr;
  txn::Worker* worker_ = nullptr;
  std::unique_ptr<StreamAppender> appender_;
  std::vector<std::vector<uint64_t>> shipped_;
};

TEST_F(BytesReplicationTest, FollowerConvergesThroughLargeValuesRemovesAndReplayTwice) {
  const std::string mib(txn::kBytesValueBytesMax, 'M');  // over the 1 MiB batch limit
  const std::string long_key(txn::kBytesKeyBytesMax, 'k');
  ASSERT_TRUE(run([&](txn::Txn& t) -> Status {
                for (int i = 0; i < 300; ++i) {
                  SHOAL_TRY(t.put(*kv_, "key" + std::to_string(i), std::string(i, 'v')));
                }
                return Status::Ok();
              }).ok());
  ASSERT_TRUE(run([&](txn::Txn& t) { return t.put(*kv_, long_key, mib); }).ok());
  ASSERT_TRUE(run([&](txn::Txn& t) { return t.put(*kv_, "key7", "changed"); }).ok());
  ASSERT_TRUE(run([&](txn::Txn& t) -> Status {
                SHOAL_TRY(t.remove(*kv_, "key8"));
                return t.remove(*kv_, "key9");
              }).ok());
  ASSERT_TRUE(run([&](txn::Txn& t) { return t.put(*kv_, "key9", "back"); }).ok());
  ASSERT_TRUE(run([&](txn::Txn& t) { return t.put(*kv_, "small-after-big", "x"); }).ok());
  // A transaction's byte-key writes are bounded so its record fits one entry.
  EXPECT_EQ(run([&](txn::Txn& t) -> Status {
              SHOAL_TRY(t.put(*kv_, "a", mib));
              return t.put(*kv_, "b", mib);
            }).code(),
            Code::kInvalidArgument);
  ship();
  ASSERT_GE(shipped_.size(), 2u);

  ReplayApplier applier(follower_, 1);
  replay_into(applier);
  EXPECT_EQ(applier.applied_tid(), worker_->txn().last_commit_tid());
  auto* replica = static_cast<txn::BytesTable*>(follower_.find_table("kv"));
  ASSERT_NE(replica, nullptr);
  EXPECT_EQ(contents(*replica), contents(*kv_));
  EXPECT_EQ(contents(*replica).at(long_key), mib);
  EXPECT_EQ(engine_digest(follower_), engine_digest(leader_));

  // The same entries again (a restart replaying its WAL): every write is skipped as not newer.
  ReplayApplier again(follower_, 1);
  replay_into(again);
  EXPECT_EQ(again.stats().skipped_writes, again.stats().writes);
  EXPECT_EQ(engine_digest(follower_), engine_digest(leader_));

  // The digest covers the byte table: one changed value changes it.
  ASSERT_TRUE(run([&](txn::Txn& t) { return t.put(*kv_, "key1", "different"); }).ok());
  EXPECT_NE(engine_digest(follower_), engine_digest(leader_));
}

TEST_F(BytesReplicationTest, CheckpointRestoresTheByteTableAndPromotionPurgesTombstones) {
  const std::string big(300000, 'B');
  ASSERT_TRUE(run([&](txn::Txn& t) -> Status {
                SHOAL_TRY(t.put(*kv_, "big", big));
                SHOAL_TRY(t.put(*kv_, "gone", "soon"));
                return t.put(*kv_, std::string("\0bin\xff", 5), "binary key");
              }).ok());
  ASSERT_TRUE(run([&](txn::Txn& t) { return t.remove(*kv_, "gone"); }).ok());
  ship();
  ReplayApplier applier(follower_, 1);
  replay_into(applier);
  ASSERT_EQ(engine_digest(follower_), engine_digest(leader_));

  const std::string dir =
      std::filesystem::temp_directory_path() / ("shoal_bytes_ckpt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/c.ckpt";
  auto written = write_checkpoint(path, follower_, applier.cut());
  ASSERT_TRUE(written.ok()) << written.status().to_string();
  EXPECT_EQ(written->rows, 2u);  // live rows only (the tombstone of "gone" is not saved)
  txn::Engine restored(quiet());
  ASSERT_TRUE(Schema::of(leader_, "kv").create_tables(restored).ok());
  auto cut = load_checkpoint(path, restored, 1);
  ASSERT_TRUE(cut.ok()) << cut.status().to_string();
  EXPECT_EQ(cut->applied_tid, applier.applied_tid());
  EXPECT_EQ(engine_digest(restored), engine_digest(leader_));
  std::filesystem::remove_all(dir);

  // The follower becomes a leader: replay's tombstone of "gone" leaves its index, and the
  // promoted engine serves transactions on the byte table, above every replicated TID.
  EXPECT_EQ(follower_.start_leading(leader_.epoch() + 1), 1u);
  auto* kv = static_cast<txn::BytesTable*>(follower_.find_table("kv"));
  txn::Worker* w = follower_.make_worker();
  ASSERT_TRUE(run_on(w, [&](txn::Txn& t) { return t.insert(*kv, "gone", "again"); }).ok());
  EXPECT_GT(w->txn().last_commit_tid(), applier.applied_tid());
  EXPECT_EQ(contents(*kv).at("gone"), "again");
}

}  // namespace
}  // namespace shoal::repl

// Checkpoint files: a round trip restores every row (digest equal) and the cut; a corrupted,
// torn or newer-format file, or one written for another shape, is refused with a one-line
// error naming the file, before any row is installed.
#include "src/repl/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "src/base/ebr.h"
#include "src/repl/replica_proto.h"

namespace shoal::repl {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shoal_checkpoint_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::unique_ptr<txn::Engine> make_engine() {
    auto e = std::make_unique<txn::Engine>();
    e->create_table<1>("one");
    e->create_table<2>("two");
    return e;
  }
  // Rows of every size up to the largest value, some removed again (tombstones are not
  // written: the scan skips them).
  static void fill(txn::Engine& e, uint64_t rows) {
    ebr::Guard guard;
    std::vector<uint8_t> value(txn::TableBase::kValueBytesMax);
    for (uint64_t k = 1; k <= rows; ++k) {
      const uint32_t size = static_cast<uint32_t>((k * 37) % (value.size() + 1));
      for (uint32_t i = 0; i < size; ++i) value[i] = static_cast<uint8_t>(k + i);
      const uint64_t key1[1] = {k};
      const uint64_t key2[2] = {k, k * 3};
      ASSERT_TRUE(e.tables()[0]->apply_replicated(key1, txn::WriteKind::kInsert, value.data(), size,
                                                  100 + k));
      ASSERT_TRUE(e.tables()[1]->apply_replicated(key2, txn::WriteKind::kInsert, value.data(),
                                                  size / 2, 200 + k));
      if (k % 5 == 0) {
        ASSERT_TRUE(e.tables()[0]->apply_replicated(key1, txn::WriteKind::kRemove, nullptr, 0,
                                                    100'000 + k));
      }
    }
  }
  static ReplayCut make_cut() {
    ReplayCut c;
    c.applied_tid = 123'456;
    c.bootstrap_tid = 77;
    c.streams = {{41, 3, 123'500}, {9, 0, 123'456}};
    c.fences = {{2, 100'000}, {5, 120'000}};  // two epoch changes (LOG_FORMAT.md)
    return c;
  }
  std::string write(uint64_t seq, uint64_t rows) {
    auto e = make_engine();
    fill(*e, rows);
    digest_ = engine_digest(*e);
    const std::string path = checkpoint_path(dir_, seq);
    auto st = write_checkpoint(path + ".tmp", *e, make_cut());
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_TRUE(publish_checkpoint(path + ".tmp", path).ok());
    return path;
  }
  static void flip_byte(const std::string& path, uint64_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(c ^ 0x5a));
  }

  std::string dir_;
  uint64_t digest_ = 0;
};

TEST_F(CheckpointTest, RoundTripRestoresEveryRowAndTheCut) {
  // Over 3 MB of rows: the writer's and the reader's buffers wrap several times.
  const std::string path = write(1, 3000);
  EXPECT_GT(std::filesystem::file_size(path), 3 * kCheckpointChunkBytes);
  auto e = make_engine();
  auto cut = load_checkpoint(path, *e, 2);
  ASSERT_TRUE(cut.ok()) << cut.status().to_string();
  EXPECT_EQ(engine_digest(*e), digest_);
  EXPECT_EQ(e->tables()[0]->record_count() + e->tables()[1]->record_count(), 3000u - 600 + 3000);
  EXPECT_EQ(cut->applied_tid, 123'456u);
  EXPECT_EQ(cut->bootstrap_tid, 77u);
  ASSERT_EQ(cut->streams.size(), 2u);
  EXPECT_EQ(cut->streams[0].next_slot, 41u);
  EXPECT_EQ(cut->streams[0].next_record, 3u);
  EXPECT_EQ(cut->streams[0].stream_tid, 123'500u);
  EXPECT_EQ(cut->streams[1].next_slot, 9u);
  ASSERT_EQ(cut->fences.size(), 2u);
  EXPECT_EQ(cut->fences[1].epoch, 5u);
  EXPECT_EQ(cut->fences[1].final_tid, 120'000u);
  // Versions are kept: a replayed write older than a row's TID is skipped, a newer one lands.
  ebr::Guard guard;
  const uint64_t key[1] = {1};
  EXPECT_FALSE(e->tables()[0]->apply_replicated(key, txn::WriteKind::kPut, "x", 1, 101));
  EXPECT_TRUE(e->tables()[0]->apply_replicated(key, txn::WriteKind::kPut, "x", 1, 102));
  // An empty engine round-trips too.
  auto empty = make_engine();
  ASSERT_TRUE(write_checkpoint(dir_ + "/empty", *empty, make_cut()).ok());
  auto back = make_engine();
  ASSERT_TRUE(load_checkpoint(dir_ + "/empty", *back, 2).ok());
  EXPECT_EQ(engine_digest(*back), engine_digest(*empty));
}

TEST_F(CheckpointTest, CorruptedTornAndNewerFilesAreRefusedBeforeLoading) {
  const std::string path = write(1, 200);
  const uint64_t size = std::filesystem::file_size(path);
  ASSERT_TRUE(verify_checkpoint(path).ok());

  const std::string corrupt = dir_ + "/corrupt.ckpt";
  std::filesystem::copy_file(path, corrupt);
  flip_byte(corrupt, size / 2);
  auto e = make_engine();
  auto r = load_checkpoint(corrupt, *e, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_EQ(r.status().message(),
            "checkpoint " + corrupt + ": checksum mismatch (corrupted); refused");
  EXPECT_EQ(e->tables()[0]->record_count(), 0u) << "rows loaded from a refused file";

  const std::string torn = dir_ + "/torn.ckpt";
  std::filesystem::copy_file(path, torn);
  std::filesystem::resize_file(torn, size - 4096);
  r = load_checkpoint(torn, *e, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("torn or truncated"), std::string::npos)
      << r.status().to_string();
  std::filesystem::resize_file(torn, 10);
  EXPECT_EQ(load_checkpoint(torn, *e, 2).status().message(),
            "checkpoint " + torn + ": 10 bytes, shorter than a header and trailer; refused");

  const std::string newer = dir_ + "/newer.ckpt";
  std::filesystem::copy_file(path, newer);
  flip_byte(newer, 4);  // version 3 -> 0x59
  r = load_checkpoint(newer, *e, 2);
  EXPECT_EQ(r.status().code(), Code::kNotSupported);
  EXPECT_EQ(r.status().message(),
            "checkpoint " + newer + ": format version 89, this binary reads up to 3; refused");

  r = load_checkpoint(path, *e, 3);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "checkpoint " + path + ": written for 2 streams, this shard has 3; refused");
  EXPECT_EQ(e->tables()[0]->record_count(), 0u);
  ASSERT_TRUE(load_checkpoint(path, *e, 2).ok());  // the intact file still loads
  EXPECT_EQ(engine_digest(*e), digest_);
}

TEST_F(CheckpointTest, ListsPublishedCheckpointsInOrder) {
  write(12, 1);
  write(3, 1);
  std::ofstream(checkpoint_path(dir_, 40) + ".tmp") << "unfinished";
  std::ofstream(dir_ + "/stream-0.wal") << "";
  auto seqs = list_checkpoints(dir_);
  ASSERT_TRUE(seqs.ok());
  EXPECT_EQ(*seqs, (std::vector<uint64_t>{3, 12}));
}

}  // namespace
}  // namespace shoal::repl

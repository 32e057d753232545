// WAL: restart from the log with each fsync policy and write path, torn and corrupted tails cut
// (never replayed), appends continuing after the cut, preallocated zero tails kept as the clean
// end, and the refusals (newer format, lock).
#include "src/repl/wal.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace shoal::repl {
namespace {

// Sealed entries, each in its own 8-aligned buffer (as a buffer pool would hold them).
struct Entries {
  std::vector<std::vector<uint64_t>> bufs;
  std::vector<std::span<const std::byte>> sealed;
};

Entries make_entries(size_t n, uint64_t first_sequence, uint64_t seed, uint32_t stream = 0) {
  Entries out;
  Rng rng(seed);
  out.bufs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    out.bufs[i].resize(2048);
    std::span<std::byte> buf{reinterpret_cast<std::byte*>(out.bufs[i].data()), 2048 * 8};
    LogBatchBuilder b;
    b.reset(buf, {1, stream, 1, first_sequence + i}, BatchLimits{});
    const size_t txns = rng.uniform(0, 6);
    for (size_t t = 0; t < txns; ++t) {
      uint64_t key[2] = {rng.next(), rng.next()};
      std::vector<std::byte> value(rng.uniform(0, 300), std::byte{0x5a});
      const TxnWrite w{3, WriteOp::kPut, key, value};
      const txn::DepEntry dep{1, first_sequence + i};
      EXPECT_EQ(b.append(first_sequence + i, {&dep, 1}, {&w, 1}), AppendResult::kOk);
    }
    out.sealed.push_back(b.seal());
  }
  return out;
}

class WalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shoal_wal_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/stream0.wal";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Wal> open_wal(WalOptions o) {
    auto w = Wal::open(path_, o);
    EXPECT_TRUE(w.ok()) << w.status().to_string();
    return w.ok() ? std::move(*w) : nullptr;
  }
  // Reopens and recovers, collecting the sequences and checksums replayed.
  WalRecovery reopen(WalOptions o, std::vector<uint64_t>* seqs = nullptr,
                     std::vector<uint64_t>* sums = nullptr, std::unique_ptr<Wal>* keep = nullptr) {
    auto w = open_wal(o);
    auto r = w->recover([&](const LogEntryView& e) {
      if (seqs) seqs->push_back(e.id().sequence);
      if (sums) sums->push_back(e.checksum());
      return Status::Ok();
    });
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (keep) *keep = std::move(w);
    return r.ok() ? *r : WalRecovery{};
  }
  uint64_t file_bytes() { return std::filesystem::file_size(path_); }
  void write_at(uint64_t off, const void* p, size_t n) {
    const int fd = ::open(path_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, p, n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
    ::close(fd);
  }
  // Appends `e` in groups of 1..7 entries.
  void append_all(Wal& wal, const Entries& e) {
    for (size_t i = 0; i < e.sealed.size();) {
      const size_t n = std::min<size_t>(e.sealed.size() - i, 1 + i % 7);
      std::vector<WalWrite> group;
      for (size_t j = i; j < i + n; ++j) group.push_back({e.sealed[j]});
      ASSERT_TRUE(wal.append(group).ok());
      i += n;
    }
  }

  std::string dir_, path_;
};

struct Mode {
  FsyncPolicy fsync;
  bool uring;
};

std::string mode_name(const ::testing::TestParamInfo<Mode>& info) {
  static const char* const kPolicy[] = {"None", "Batch", "Always"};
  return std::string(kPolicy[static_cast<int>(info.param.fsync)]) +
         (info.param.uring ? "Uring" : "Pwrite");
}

class WalRestart : public WalTest, public ::testing::WithParamInterface<Mode> {};

TEST_P(WalRestart, AppendReopenRecoverAll) {
  const WalOptions o{GetParam().fsync, GetParam().uring, 8};  // small ring: chunked groups
  const Entries e = make_entries(150, 1, 7);
  {
    auto wal = open_wal(o);
    EXPECT_EQ(wal->uses_io_uring(), GetParam().uring);  // io_uring works on this machine
    auto r = wal->recover([](const LogEntryView&) { return Status::Ok(); });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->entries_kept, 0u);
    append_all(*wal, e);
    uint64_t total = 0;
    for (auto s : e.sealed) total += s.size();
    EXPECT_EQ(wal->end_offset(), total);
  }
  std::vector<uint64_t> seqs, sums;
  const WalRecovery r = reopen(o, &seqs, &sums);
  EXPECT_EQ(r.entries_kept, 150u);
  EXPECT_EQ(r.bytes_cut, 0u);
  EXPECT_TRUE(r.cut_reason.empty());
  EXPECT_EQ(r.last_sequence, 150u);
  ASSERT_EQ(seqs.size(), 150u);
  for (size_t i = 0; i < 150; ++i) {
    EXPECT_EQ(seqs[i], i + 1);
    EXPECT_EQ(sums[i], LogEntryView::parse(e.sealed[i])->checksum());  // the same bytes
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, WalRestart,
    ::testing::Values(Mode{FsyncPolicy::kNone, true}, Mode{FsyncPolicy::kBatch, true},
                      Mode{FsyncPolicy::kAlways, true}, Mode{FsyncPolicy::kNone, false},
                      Mode{FsyncPolicy::kBatch, false}, Mode{FsyncPolicy::kAlways, false}),
    mode_name);

TEST_F(WalTest, RegisteredBuffersWriteFixed) {
  const Entries e = make_entries(20, 1, 3);
  std::vector<iovec> iov;
  for (const auto& b : e.bufs) iov.push_back({const_cast<uint64_t*>(b.data()), b.size() * 8});
  {
    auto wal = open_wal({FsyncPolicy::kBatch, true});
    ASSERT_TRUE(wal->register_buffers(iov).ok());
    ASSERT_TRUE(wal->recover([](const LogEntryView&) { return Status::Ok(); }).ok());
    for (size_t i = 0; i < e.sealed.size(); ++i) {
      ASSERT_TRUE(wal->append(e.sealed[i], static_cast<int>(i)).ok());
    }
  }
  EXPECT_EQ(reopen({}).entries_kept, 20u);
}

// Writes `n` entries with the pwrite path and returns their end offsets.
std::vector<uint64_t> fill(WalTest* t, std::unique_ptr<Wal> wal, const Entries& e) {
  std::vector<uint64_t> ends;
  auto r = wal->recover([](const LogEntryView&) { return Status::Ok(); });
  EXPECT_TRUE(r.ok());
  for (auto s : e.sealed) {
    EXPECT_TRUE(wal->append(s).ok());
    ends.push_back(wal->end_offset());
  }
  (void)t;
  return ends;
}

TEST_F(WalTest, TornTailCutThenAppendsFollowTheGoodPrefix) {
  const WalOptions quiet{FsyncPolicy::kBatch, true, 64, kLogEntryBytesMax, true};
  const Entries e = make_entries(10, 1, 9);
  const auto ends = fill(this, open_wal(quiet), e);
  // Cut the last entry in the middle of its payload.
  const uint64_t good = ends[8];
  ASSERT_EQ(::truncate(path_.c_str(), static_cast<off_t>(good + 100)), 0);
  std::unique_ptr<Wal> wal;
  std::vector<uint64_t> seqs;
  const WalRecovery r = reopen(quiet, &seqs, nullptr, &wal);
  EXPECT_EQ(r.entries_kept, 9u);
  EXPECT_EQ(r.bytes_kept, good);
  EXPECT_EQ(r.bytes_cut, 100u);
  EXPECT_NE(r.cut_reason.find("truncated entry"), std::string::npos) << r.cut_reason;
  EXPECT_EQ(file_bytes(), good);  // the file itself was cut
  EXPECT_EQ(seqs.back(), 9u);
  // New entries land right after the good prefix.
  const Entries more = make_entries(3, 10, 10);
  for (auto s : more.sealed) ASSERT_TRUE(wal->append(s).ok());
  wal.reset();
  seqs.clear();
  const WalRecovery r2 = reopen(quiet, &seqs);
  EXPECT_EQ(r2.entries_kept, 12u);
  EXPECT_EQ(r2.bytes_cut, 0u);
  EXPECT_EQ(seqs.back(), 12u);
}

TEST_F(WalTest, EveryTruncationLengthKeepsTheWholeEntriesBeforeIt) {
  const WalOptions quiet{FsyncPolicy::kNone, false, 64, kLogEntryBytesMax, true};
  const Entries e = make_entries(3, 1, 4);
  const auto ends = fill(this, open_wal(quiet), e);
  std::vector<char> full(ends.back());
  {
    std::ifstream in(path_, std::ios::binary);
    in.read(full.data(), static_cast<std::streamsize>(full.size()));
  }
  for (uint64_t len = 0; len <= ends.back(); ++len) {
    {
      std::ofstream out(path_, std::ios::binary | std::ios::trunc);
      out.write(full.data(), static_cast<std::streamsize>(len));
    }
    size_t whole = 0;
    while (whole < ends.size() && ends[whole] <= len) ++whole;
    const WalRecovery r = reopen(quiet);
    ASSERT_EQ(r.entries_kept, whole) << len;
    const uint64_t good = whole == 0 ? 0 : ends[whole - 1];
    ASSERT_EQ(r.bytes_cut, len - good) << len;
    ASSERT_EQ(file_bytes(), good) << len;
  }
}

TEST_F(WalTest, CorruptedLastEntryIsCutNotReplayed) {
  const WalOptions quiet{FsyncPolicy::kBatch, true, 64, kLogEntryBytesMax, true};
  const Entries e = make_entries(5, 1, 5);
  const auto ends = fill(this, open_wal(quiet), e);
  const std::byte junk{0xff};
  write_at(ends[3] + kLogHeaderBytes + 5, &junk, 1);  // a payload byte of entry 5
  std::vector<uint64_t> seqs;
  const WalRecovery r = reopen(quiet, &seqs);
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_NE(r.cut_reason.find("checksum mismatch"), std::string::npos) << r.cut_reason;
  EXPECT_NE(r.cut_reason.find("offset " + std::to_string(ends[3])), std::string::npos);
  EXPECT_EQ(file_bytes(), ends[3]);
}

// Zeros where an entry would begin are the clean end only if they run to the end of the file;
// entries after them, stale or of another stream, are cut like any bad tail.
TEST_F(WalTest, ZerosFollowedByDataOrStaleEntriesAreCut) {
  WalOptions quiet{FsyncPolicy::kNone, true, 64, kLogEntryBytesMax, true};
  quiet.preallocate_bytes = 0;  // the file ends at the last entry: the tails below are whole
  const Entries e = make_entries(4, 1, 6);
  const auto ends = fill(this, open_wal(quiet), e);
  ASSERT_EQ(file_bytes(), ends.back());
  // A crash after the file grew but before all of its data landed: zeros, then data.
  std::vector<char> zeros(4096, 0);
  write_at(ends.back(), zeros.data(), zeros.size());
  const char data = 1;
  write_at(ends.back() + 4000, &data, 1);
  WalRecovery r = reopen(quiet);
  EXPECT_EQ(r.entries_kept, 4u);
  EXPECT_EQ(r.bytes_cut, 4096u);
  EXPECT_EQ(r.bytes_preallocated, 0u);
  EXPECT_NE(r.cut_reason.find("zeros at offset " + std::to_string(ends.back()) +
                              " followed by data at offset " + std::to_string(ends.back() + 4000)),
            std::string::npos)
      << r.cut_reason;
  EXPECT_EQ(file_bytes(), ends.back());
  // A valid entry with an old sequence after the last one (a stale block) is cut too.
  write_at(ends.back(), e.sealed[1].data(), e.sealed[1].size());
  r = reopen(quiet);
  EXPECT_EQ(r.entries_kept, 4u);
  EXPECT_NE(r.cut_reason.find("sequence 2 does not follow 4"), std::string::npos) << r.cut_reason;
  // So is an entry of another stream.
  const Entries other = make_entries(1, 5, 6, /*stream=*/9);
  write_at(ends.back(), other.sealed[0].data(), other.sealed[0].size());
  r = reopen(quiet);
  EXPECT_EQ(r.entries_kept, 4u);
  EXPECT_NE(r.cut_reason.find("shard 1 stream 9"), std::string::npos) << r.cut_reason;
  EXPECT_EQ(file_bytes(), ends.back());
}

// Preallocation: the file runs ahead of the last entry in whole blocks that read as zeros, by at
// most one step, whose size doubles with the file from kPreallocateMinBytes up to
// preallocate_bytes.
TEST_F(WalTest, PreallocationStaysOneBoundedStepAheadOfTheEnd) {
  WalOptions o{FsyncPolicy::kNone, false};
  o.preallocate_bytes = 256u << 10;
  auto wal = open_wal(o);
  ASSERT_TRUE(wal->recover([](const LogEntryView&) { return Status::Ok(); }).ok());
  const Entries e = make_entries(1600, 1, 11);
  ASSERT_TRUE(wal->append(e.sealed[0]).ok());
  // The first step: kPreallocateMinBytes past the entry, rounded up to a page.
  EXPECT_EQ(wal->allocated_end(), (e.sealed[0].size() + kPreallocateMinBytes + 4095) / 4096 * 4096);
  uint64_t steps = 1, ahead_max = 0;
  for (size_t i = 1; i < e.sealed.size(); ++i) {
    const uint64_t before = wal->allocated_end();
    ASSERT_TRUE(wal->append(e.sealed[i]).ok());
    steps += wal->allocated_end() != before;
    ASSERT_EQ(file_bytes(), wal->allocated_end());
    ASSERT_EQ(wal->allocated_end() % 4096, 0u);
    ASSERT_GE(wal->allocated_end(), wal->end_offset());
    ahead_max = std::max(ahead_max, wal->allocated_end() - wal->end_offset());
  }
  EXPECT_LE(ahead_max, o.preallocate_bytes + 4096);
  // Doubling, then fixed steps: far fewer steps than appends.
  EXPECT_GE(wal->end_offset(), 1u << 20);
  EXPECT_LE(steps, 3 + wal->end_offset() / o.preallocate_bytes) << wal->end_offset();
  // Everything past the last entry reads as zeros.
  std::vector<char> tail(wal->allocated_end() - wal->end_offset());
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(wal->end_offset()));
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  EXPECT_EQ(std::count(tail.begin(), tail.end(), 0), static_cast<ptrdiff_t>(tail.size()));
  // Without preallocation the file is exactly its entries.
  wal.reset();
  std::filesystem::remove(path_);
  o.preallocate_bytes = 0;
  const auto ends = fill(this, open_wal(o), e);
  EXPECT_EQ(file_bytes(), ends.back());
}

// Bytes of `path` at or past `from` that lie in unwritten extents (fallocated, never written),
// by FIEMAP; -1 where the file system cannot say.
int64_t unwritten_bytes_from(const std::string& path, uint64_t from) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  constexpr uint32_t kExtents = 256;
  std::vector<uint8_t> buf(sizeof(fiemap) + kExtents * sizeof(fiemap_extent));
  auto* fm = reinterpret_cast<fiemap*>(buf.data());
  fm->fm_start = 0;
  fm->fm_length = FIEMAP_MAX_OFFSET;
  fm->fm_flags = FIEMAP_FLAG_SYNC;
  fm->fm_extent_count = kExtents;
  const int rc = ::ioctl(fd, FS_IOC_FIEMAP, fm);
  ::close(fd);
  if (rc != 0) return -1;
  int64_t unwritten = 0;
  for (uint32_t i = 0; i < fm->fm_mapped_extents; ++i) {
    const fiemap_extent& e = fm->fm_extents[i];
    const uint64_t end = e.fe_logical + e.fe_length;
    if ((e.fe_flags & FIEMAP_EXTENT_UNWRITTEN) == 0 || end <= from) continue;
    unwritten += static_cast<int64_t>(end - std::max<uint64_t>(e.fe_logical, from));
  }
  return unwritten;
}

// Preallocation by writing zeros (an fsync-always acceptor's): the tail ahead of the last
// entry is written and allocated, not an unwritten extent, so an append's sync converts
// nothing; steps stay within kZeroStepBytesMax; a restart keeps every entry and the zeros.
// fallocate (the default) is the control: its tail is unwritten.
TEST_F(WalTest, ZeroPreallocationLeavesNoUnwrittenExtentAheadOfTheEnd) {
  const Entries e = make_entries(300, 1, 15);
  for (const bool zeros : {false, true}) {
    SCOPED_TRACE(zeros ? "zeros" : "fallocate");
    std::filesystem::remove(path_);
    WalOptions o{FsyncPolicy::kNone, false};
    o.preallocate_with_zeros = zeros;
    auto wal = open_wal(o);
    ASSERT_TRUE(wal->recover([](const LogEntryView&) { return Status::Ok(); }).ok());
    uint64_t ahead_max = 0;
    for (auto s : e.sealed) {
      ASSERT_TRUE(wal->append(s).ok());
      ahead_max = std::max(ahead_max, wal->allocated_end() - wal->end_offset());
    }
    ASSERT_EQ(file_bytes(), wal->allocated_end());
    ASSERT_GT(wal->allocated_end(), wal->end_offset());
    const int64_t unwritten = unwritten_bytes_from(path_, wal->end_offset());
    if (unwritten < 0) GTEST_SKIP() << "FIEMAP unsupported here";
    if (zeros) {
      EXPECT_EQ(unwritten, 0);
      EXPECT_LE(ahead_max, kZeroStepBytesMax + 4096);
    } else {
      EXPECT_GT(unwritten, 0);  // ext4 and xfs keep fallocated blocks unwritten
    }
    const uint64_t end = wal->end_offset();
    wal.reset();
    const WalRecovery r = reopen(o);
    EXPECT_EQ(r.entries_kept, e.sealed.size());
    EXPECT_EQ(r.bytes_kept, end);
    EXPECT_EQ(r.bytes_cut, 0u);
    EXPECT_EQ(r.bytes_preallocated, file_bytes() - end);
  }
}

// A restart over a preallocated tail: every entry kept, nothing cut or said on stderr, the
// zeros kept; appends go on where the log really ended, and a later restart sees them all.
// trim_preallocation() then makes the file end at its last entry.
TEST_F(WalTest, RestartOverAPreallocatedTailKeepsEverythingAndAppendsAtTheEnd) {
  const WalOptions o{FsyncPolicy::kBatch, false};  // quiet = false: a cut would print
  const Entries e = make_entries(40, 1, 12);
  const auto ends = fill(this, open_wal(o), e);
  const uint64_t allocated = file_bytes();
  ASSERT_GT(allocated, ends.back());
  std::unique_ptr<Wal> wal;
  std::vector<uint64_t> seqs;
  ::testing::internal::CaptureStderr();
  const WalRecovery r = reopen(o, &seqs, nullptr, &wal);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(r.entries_kept, 40u);
  EXPECT_EQ(r.bytes_kept, ends.back());
  EXPECT_EQ(r.bytes_cut, 0u);
  EXPECT_TRUE(r.cut_reason.empty()) << r.cut_reason;
  EXPECT_EQ(r.bytes_preallocated, allocated - ends.back());
  EXPECT_EQ(file_bytes(), allocated);  // kept: appends overwrite it
  EXPECT_EQ(wal->end_offset(), ends.back());
  const Entries more = make_entries(5, 41, 13);
  for (auto s : more.sealed) ASSERT_TRUE(wal->append(s).ok());
  const uint64_t end = wal->end_offset();
  wal.reset();
  seqs.clear();
  const WalRecovery r2 = reopen(o, &seqs, nullptr, &wal);
  EXPECT_EQ(r2.entries_kept, 45u);
  EXPECT_EQ(r2.bytes_kept, end);
  EXPECT_EQ(r2.bytes_cut, 0u);
  ASSERT_EQ(seqs.size(), 45u);
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], i + 1);
  ASSERT_TRUE(wal->trim_preallocation().ok());
  EXPECT_EQ(file_bytes(), end);
  EXPECT_EQ(wal->allocated_end(), end);
  wal.reset();
  const WalRecovery r3 = reopen(o);
  EXPECT_EQ(r3.entries_kept, 45u);
  EXPECT_EQ(r3.bytes_preallocated, 0u);
}

// A torn entry in the preallocated region (its first page landed, the rest still zeros) is cut
// at the entry, with the zeros after it; appends follow the good prefix.
TEST_F(WalTest, TornEntryBeforeTheZeroTailIsCutAtTheEntry) {
  const WalOptions quiet{FsyncPolicy::kBatch, false, 64, kLogEntryBytesMax, true};
  const Entries e = make_entries(20, 1, 14);
  const auto ends = fill(this, open_wal(quiet), e);
  // The next entry, big enough to span pages, half written.
  const Entries next = make_entries(1, 21, 15);
  std::vector<uint64_t> buf(4096);
  LogBatchBuilder b;
  b.reset({reinterpret_cast<std::byte*>(buf.data()), buf.size() * 8}, {1, 0, 1, 21}, BatchLimits{});
  std::vector<std::byte> value(3000, std::byte{0x5a});
  const uint64_t key[1] = {21};
  const TxnWrite w{3, WriteOp::kPut, key, value};
  ASSERT_EQ(b.append(21, {}, {&w, 1}), AppendResult::kOk);
  const auto torn = b.seal();
  ASSERT_GT(file_bytes(), ends.back() + torn.size());  // inside the preallocated zeros
  write_at(ends.back(), torn.data(), torn.size() / 2);
  std::unique_ptr<Wal> wal;
  const WalRecovery r = reopen(quiet, nullptr, nullptr, &wal);
  EXPECT_EQ(r.entries_kept, 20u);
  EXPECT_EQ(r.bytes_kept, ends.back());
  EXPECT_EQ(r.bytes_preallocated, 0u);
  EXPECT_NE(r.cut_reason.find("offset " + std::to_string(ends.back())), std::string::npos)
      << r.cut_reason;
  EXPECT_NE(r.cut_reason.find("checksum mismatch"), std::string::npos) << r.cut_reason;
  EXPECT_EQ(file_bytes(), ends.back());  // cut at the entry, zeros included
  for (auto s : next.sealed) ASSERT_TRUE(wal->append(s).ok());
  wal.reset();
  std::vector<uint64_t> seqs;
  const WalRecovery r2 = reopen(quiet, &seqs);
  EXPECT_EQ(r2.entries_kept, 21u);
  EXPECT_EQ(r2.bytes_cut, 0u);
  EXPECT_EQ(seqs.back(), 21u);
}

TEST_F(WalTest, NewerFormatStopsRecoveryAndTouchesNothing) {
  const Entries e = make_entries(3, 1, 8);
  const auto ends = fill(this, open_wal({}), e);
  const uint64_t allocated = file_bytes();
  std::vector<uint64_t> words(e.sealed[2].size() / 8);
  std::memcpy(words.data(), e.sealed[2].data(), e.sealed[2].size());
  auto* p = reinterpret_cast<std::byte*>(words.data());
  store_u16(p + 4, kLogFormatVersion + 1);
  store_u64(p + 56, log_entry_checksum(p, e.sealed[2].size() - kLogHeaderBytes));
  write_at(ends[1], p, e.sealed[2].size());
  auto wal = open_wal({});
  auto r = wal->recover([](const LogEntryView&) { return Status::Ok(); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotSupported);
  const std::string newer = "version " + std::to_string(kLogFormatVersion + 1) +
                            " is newer than this reader's " + std::to_string(kLogFormatVersion);
  EXPECT_NE(r.status().message().find(newer), std::string::npos) << r.status().to_string();
  EXPECT_EQ(file_bytes(), allocated);
}

TEST_F(WalTest, ReplayErrorStopsWithoutCutting) {
  const Entries e = make_entries(3, 1, 2);
  fill(this, open_wal({}), e);
  const uint64_t allocated = file_bytes();
  auto wal = open_wal({});
  int seen = 0;
  auto r = wal->recover([&](const LogEntryView&) {
    return ++seen == 2 ? Status::Unavailable("replay target full") : Status::Ok();
  });
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(file_bytes(), allocated);
}

TEST_F(WalTest, SecondOpenOfTheSameFileRefused) {
  auto first = open_wal({});
  auto second = Wal::open(path_, {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
}

// The one directory-sync helper (WAL creation, the acceptor log's segments, checkpoints):
// failures are errors naming the directory, not ignored.
TEST_F(WalTest, DirectorySyncReportsFailuresNamingTheDirectory) {
  EXPECT_TRUE(sync_dir(dir_).ok());
  EXPECT_TRUE(sync_parent_dir(path_).ok());
  EXPECT_TRUE(sync_parent_dir("no-slash.wal").ok());  // the working directory
  const Status missing = sync_dir(dir_ + "/missing");
  EXPECT_EQ(missing.code(), Code::kIOError);
  EXPECT_NE(missing.message().find("open directory " + dir_ + "/missing"), std::string::npos)
      << missing.to_string();
  const Status parent = sync_parent_dir(dir_ + "/missing/x.wal");
  EXPECT_EQ(parent.code(), Code::kIOError);
  EXPECT_NE(parent.message().find(dir_ + "/missing"), std::string::npos) << parent.to_string();
  // A file is no directory: open(O_DIRECTORY) fails with ENOTDIR.
  std::ofstream(dir_ + "/plain") << "x";
  EXPECT_EQ(sync_dir(dir_ + "/plain").code(), Code::kIOError);
}

// Pages of `path` in the page cache (mincore over a read-only mapping).
size_t resident_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  EXPECT_NE(map, MAP_FAILED);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  EXPECT_EQ(::mincore(map, bytes, in_core.data()), 0);
  ::munmap(map, bytes);
  ::close(fd);
  size_t n = 0;
  for (unsigned char c : in_core) n += c & 1;
  return n;
}

// A WAL keeps only its tail in the page cache (WalOptions::cache_keep_bytes), and what it
// dropped from the cache is still all there on disk.
TEST_F(WalTest, DropsAllButItsTailFromThePageCache) {
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir_.c_str(), &fs), 0);
  if (fs.f_type == 0x01021994 /* TMPFS_MAGIC */) {
    GTEST_SKIP() << dir_ << " is on tmpfs, whose pages are the data and cannot be dropped";
  }
  constexpr uint64_t kKeep = 1u << 20;
  WalOptions o;
  o.cache_keep_bytes = kKeep;
  auto wal = open_wal(o);
  ASSERT_TRUE(wal->recover([](const LogEntryView&) { return Status::Ok(); }).ok());
  // 200 entries of about 64 KiB: 12.5 MiB.
  std::vector<uint64_t> buf(8192);
  std::vector<std::byte> value(300, std::byte{0x5a});
  for (uint64_t seq = 1; seq <= 200; ++seq) {
    LogBatchBuilder b;
    b.reset({reinterpret_cast<std::byte*>(buf.data()), buf.size() * 8}, {1, 0, 1, seq},
            BatchLimits{});
    for (uint64_t t = 0; t < 190; ++t) {
      uint64_t key[1] = {seq * 1000 + t};
      const TxnWrite w{3, WriteOp::kPut, key, value};
      ASSERT_EQ(b.append(seq, {}, {&w, 1}), AppendResult::kOk);
    }
    ASSERT_TRUE(wal->append(b.seal()).ok());
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t file_pages = file_bytes() / page;
  ASSERT_GT(file_bytes(), 12u << 20);
  // At most 2 * kKeep behind the end stays cached (the drop runs once per kKeep appended, to
  // a 2 MiB boundary), and the preallocated tail ahead of it.
  const uint64_t cached_max = 2 * kKeep + (2u << 20) + o.preallocate_bytes + (64u << 10);
  EXPECT_LE(resident_pages(path_), cached_max / page + 1) << "of " << file_pages << " pages";
  wal.reset();
  std::vector<uint64_t> seqs;
  const WalRecovery r = reopen({}, &seqs);
  EXPECT_EQ(r.entries_kept, 200u);
  EXPECT_EQ(r.bytes_cut, 0u);
  ASSERT_EQ(seqs.size(), 200u);
  EXPECT_EQ(seqs.back(), 200u);
}

}  // namespace
}  // namespace shoal::repl

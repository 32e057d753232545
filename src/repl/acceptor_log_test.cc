// AcceptorLog as a ChosenSlotSource: chosen slots read back from the WAL byte for byte, the
// copy the journal names winning over later or unnamed copies, corrupted copies refused with a
// clear status, reads bounded by entries and bytes, learned values persisted and recovered,
// and an index of well under a byte per slot.
#include "src/repl/acceptor_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <vector>

namespace shoal::repl {
namespace {

using Bytes = std::vector<std::byte>;

// A sealed entry of stream 0 for `slot`; `variant` changes the value (another proposal).
Bytes make_entry(uint64_t slot, uint64_t variant = 0) {
  alignas(8) std::byte buf[1024];
  LogBatchBuilder b;
  b.reset(buf, {0, 0, 1, slot}, BatchLimits{});
  const uint64_t key[1] = {slot};
  std::byte value[40];
  for (size_t i = 0; i < sizeof value; ++i) value[i] = std::byte(slot * 7 + variant + i);
  const TxnWrite w{1, WriteOp::kPut, key, {value, sizeof value}};
  EXPECT_EQ(b.append(slot * 10 + variant, {}, {&w, 1}), AppendResult::kOk);
  const auto e = b.seal();
  return Bytes(e.begin(), e.end());
}

Bytes to_bytes(std::span<const std::byte> s) {
  return Bytes(s.begin(), s.end());
}

class AcceptorLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shoal_acceptor_log_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    log_.reset();
    std::filesystem::remove_all(dir_);
  }
  // (Re)opens the log over a fresh store and installs its hooks; slots <= covered are a
  // checkpoint's.
  AcceptorRecovery open(uint64_t covered = 0) {
    log_.reset();
    store_ = std::make_unique<PaxosAcceptorStore>(/*retain_chosen_slots=*/16);
    auto l = AcceptorLog::open(dir_, 0, FsyncPolicy::kNone);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    log_ = std::move(*l);
    auto rec = log_->recover(*store_, covered);
    EXPECT_TRUE(rec.ok()) << rec.status().to_string();
    store_->set_hooks(log_->hooks());
    return rec.ok() ? *rec : AcceptorRecovery{};
  }
  // Accepts slots [from, to] in ballot b, remembering the bytes as the expected value.
  void accept(uint64_t from, uint64_t to, Ballot b, uint64_t variant = 0) {
    for (uint64_t s = from; s <= to; ++s) {
      const Bytes e = make_entry(s, variant);
      ASSERT_TRUE(store_->accept(s, b, e).ok());
      expected_[s] = e;
    }
  }
  // Marks slots up to `index` chosen in the store and tells the log.
  void choose(uint64_t index) {
    for (uint64_t s = store_->chosen_index() + 1; s <= index; ++s) store_->mark_chosen(s);
    store_->advance();
    log_->note_chosen(index);
    store_->trim();
  }
  // Reads every slot in [from, to] through read() in pieces of at most `max_entries` and
  // checks each against the expected bytes. Returns the number of read() calls.
  int read_all(uint64_t from, uint64_t to, uint32_t max_entries, size_t max_bytes) {
    std::vector<ChosenEntry> out;
    int calls = 0;
    for (uint64_t s = from; s <= to && calls < 100'000; ++calls) {
      const Status st = log_->read(s, to, max_entries, max_bytes, &out);
      EXPECT_TRUE(st.ok()) << st.to_string();
      if (!st.ok() || out.empty()) return calls;
      EXPECT_LE(out.size(), max_entries);
      size_t bytes = 0;
      for (const ChosenEntry& e : out) {
        EXPECT_EQ(e.slot, s);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(e.bytes.data()) % 8, 0u);
        EXPECT_EQ(to_bytes(e.bytes), expected_[s]) << "slot " << s;
        bytes += e.bytes.size();
        ++s;
      }
      EXPECT_LE(bytes, max_bytes);
    }
    return calls;
  }
  uint64_t wal_offset_of(uint64_t slot) const {  // for slots written once, in order, from 1
    return (slot - 1) * make_entry(1).size();
  }

  std::string dir_;
  std::unique_ptr<PaxosAcceptorStore> store_;
  std::unique_ptr<AcceptorLog> log_;
  std::map<uint64_t, Bytes> expected_;
};

TEST_F(AcceptorLogTest, ServesChosenSlotsByteForByteAcrossGroupsAndRewrites) {
  open();
  accept(1, 200, make_ballot(1, 0));
  // Slot 150 accepted again in a higher ballot with another value: the last copy counts.
  const Bytes old150 = expected_[150];
  accept(150, 150, make_ballot(2, 0), /*variant=*/1);
  ASSERT_NE(old150, expected_[150]);
  // A higher ballot for bytes already held writes no second copy (only a journal record).
  accept(151, 151, make_ballot(2, 0));
  choose(200);
  // Groups 1-64 and 65-128 lie back to back; 129-192 is irregular (150's copy is at the end);
  // 193-200 are not sealed yet. Every piece size crosses those boundaries somewhere.
  for (uint32_t n : {1u, 3u, 64u}) EXPECT_GT(read_all(1, 200, n, 1 << 20), 0) << n;
  read_all(131, 170, 7, 1 << 20);  // starting mid-group: hops over the headers before it
  read_all(190, 200, 64, 1 << 20);
  // Not chosen yet: refused.
  std::vector<ChosenEntry> out;
  accept(201, 201, make_ballot(2, 0));
  const Status st = log_->read(201, 201, 1, 1 << 20, &out);
  EXPECT_EQ(st.code(), Code::kNotFound) << st.to_string();
  EXPECT_TRUE(out.empty());
}

TEST_F(AcceptorLogTest, ReadsAreBoundedByEntriesAndBytes) {
  open();
  accept(1, 100, make_ballot(1, 0));
  choose(100);
  const size_t size = expected_[1].size();
  std::vector<ChosenEntry> out;
  ASSERT_TRUE(log_->read(10, 100, 64, 3 * size + size / 2, &out).ok());
  ASSERT_EQ(out.size(), 3u);  // three fit in the bytes
  EXPECT_EQ(out[2].slot, 12u);
  ASSERT_TRUE(log_->read(10, 100, 5, 1 << 20, &out).ok());
  EXPECT_EQ(out.size(), 5u);  // five by count
  ASSERT_TRUE(log_->read(98, 1000, 64, 1 << 20, &out).ok());
  EXPECT_EQ(out.size(), 3u);  // up to the chosen index, not past it
  // One entry larger than the budget: a clear refusal, not a partial entry.
  const Status st = log_->read(10, 100, 64, size - 8, &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("slot 10 holds " + std::to_string(size) + " bytes"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(out.empty());
  // The index is sparse: well under one byte per chosen slot once groups are sealed.
  accept(101, 4000, make_ballot(1, 0));
  choose(4000);
  EXPECT_LT(log_->index_bytes(), 4000u) << log_->index_bytes();
  read_all(3900, 4000, 64, 1 << 20);
}

TEST_F(AcceptorLogTest, CorruptedCopyIsRefusedWithItsSlotAndNeverServed) {
  open();
  accept(1, 100, make_ballot(1, 0));
  choose(100);
  // A disk flips a byte of slot 70's copy while the log is open (recovery would have cut
  // it as a bad tail, so behind the log's back).
  {
    const int fd = ::open((dir_ + "/stream-0.wal").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    std::byte b{};
    ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(wal_offset_of(70) + 72)), 1);
    b ^= std::byte{0xff};
    ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(wal_offset_of(70) + 72)), 1);
    ::close(fd);
  }
  std::vector<ChosenEntry> out;
  // A read that reaches it stops before it with the good prefix ...
  ASSERT_TRUE(log_->read(65, 100, 64, 1 << 20, &out).ok());
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out.back().slot, 69u);
  // ... and the read starting there says what is wrong, naming the slot.
  const Status st = log_->read(70, 100, 64, 1 << 20, &out);
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("slot 70"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("not served"), std::string::npos) << st.message();
  EXPECT_TRUE(out.empty());
  read_all(71, 100, 64, 1 << 20);  // the others are fine
}

TEST_F(AcceptorLogTest, CopyTheJournalDoesNotNameIsNotServedAfterRecovery) {
  open();
  accept(1, 130, make_ballot(1, 0));
  log_.reset();
  // A crash between the two writes of a rewrite: the WAL got a new copy of slot 120, the
  // journal no record naming it. Append that copy behind the log's back.
  {
    WalOptions wo;
    wo.use_io_uring = false;
    wo.allow_rewrites = true;
    wo.fsync = FsyncPolicy::kNone;
    auto wal = Wal::open(dir_ + "/stream-0.wal", wo);
    ASSERT_TRUE(wal.ok());
    ASSERT_TRUE((*wal)->recover([](const LogEntryView&) { return Status::Ok(); }).ok());
    const Bytes unnamed = make_entry(120, /*variant=*/9);
    ASSERT_TRUE((*wal)->append(unnamed).ok());
  }
  const AcceptorRecovery rec = open();
  EXPECT_EQ(rec.slots, 130u);
  EXPECT_EQ(rec.dropped, 1u);
  // The new copy is the last one in the file; the journal names the first: that one is served.
  choose(130);
  read_all(1, 130, 64, 1 << 20);
  read_all(120, 120, 1, 1 << 20);
}

TEST_F(AcceptorLogTest, LearnedValuesArePersistedRecoveredChosenAndServed) {
  open();
  accept(1, 10, make_ballot(1, 0));
  // Slot 5 held another value (a stale acceptance); catch-up brings the chosen one.
  const Bytes chosen5 = make_entry(5, /*variant=*/3);
  ASSERT_TRUE(store_->learn(5, chosen5).ok());
  expected_[5] = chosen5;
  for (uint64_t s = 11; s <= 80; ++s) {  // slots this replica never accepted
    expected_[s] = make_entry(s);
    ASSERT_TRUE(store_->learn(s, expected_[s]).ok());
  }
  for (uint64_t s = 1; s <= 10; ++s) {
    if (s != 5) store_->mark_chosen(s);
  }
  EXPECT_EQ(store_->advance(), 80u);
  log_->note_chosen(80);
  read_all(1, 80, 64, 1 << 20);
  // After a restart the learned slots come back chosen (the chosen hint alone would not mark
  // slot 5 chosen with the right value) and are served the same way.
  const AcceptorRecovery rec = open();
  EXPECT_EQ(rec.chosen_index, 80u);
  EXPECT_EQ(to_bytes(store_->find(5)->value.span()), chosen5);
  read_all(1, 80, 64, 1 << 20);
}

// Segments: rotate() starts a new pair of files whose journal repeats the promise and the
// chosen hint; drop_covered_segments() deletes only closed segments whose every slot is
// covered; recovery over the remaining segments with that cut restores the promise, the
// accepted-but-unchosen slots above it (acknowledged: they must survive) and the chosen ones,
// and holds nothing below it.
TEST_F(AcceptorLogTest, SegmentsRotateAndOnlyCoveredOnesAreDeleted) {
  open();
  ASSERT_TRUE(store_->promise(7).ok());
  accept(1, 100, 7);
  choose(90);  // 91..100 accepted, not chosen
  const uint64_t first_bytes = log_->wal_bytes();
  ASSERT_TRUE(log_->rotate().ok());
  EXPECT_EQ(log_->segments(), 2u);
  accept(101, 200, 7);
  choose(180);
  ASSERT_TRUE(log_->rotate().ok());
  accept(201, 220, 7);
  // Segment 0 holds slots up to 100: a cut at 95 must not delete it (96..100 live there).
  auto freed = log_->drop_covered_segments(95);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 0u);
  EXPECT_EQ(log_->segments(), 3u);
  freed = log_->drop_covered_segments(150);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, first_bytes);
  EXPECT_EQ(log_->segments(), 2u);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/stream-0.wal"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/stream-0.acc"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/stream-0.1.wal"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/stream-0.2.acc"));
  // Reads serve only the active segment's copies: older ones say NotFound.
  std::vector<ChosenEntry> out;
  EXPECT_EQ(log_->read(150, 160, 4, 1 << 20, &out).code(), Code::kNotFound);

  const AcceptorRecovery rec = open(/*covered=*/150);
  EXPECT_EQ(rec.promised, 7u);  // carried into the segments after the one that held it
  EXPECT_EQ(rec.chosen_index, 180u);
  EXPECT_EQ(rec.slots, 70u);  // 151..220
  EXPECT_EQ(store_->first_slot(), 151u);
  EXPECT_EQ(store_->find(150), nullptr);
  for (uint64_t s = 151; s <= 220; ++s) {
    const PaxosSlot* p = store_->find(s);
    ASSERT_NE(p, nullptr) << s;
    EXPECT_EQ(to_bytes(p->value.span()), expected_[s]) << s;
    EXPECT_EQ(p->chosen, s <= 180) << s;
  }
  // Appends go on in the newest segment, and another restart still sees them.
  accept(221, 230, 7);
  choose(230);
  const AcceptorRecovery again = open(150);
  EXPECT_EQ(again.chosen_index, 230u);
  EXPECT_EQ(again.slots, 80u);
  // A cut at 200 covers segment 1 whole: recovery skips reading it, still counts its bytes.
  const uint64_t bytes = log_->wal_bytes();
  const AcceptorRecovery skipped = open(200);
  EXPECT_EQ(skipped.chosen_index, 230u);
  EXPECT_EQ(skipped.slots, 30u);
  EXPECT_EQ(log_->wal_bytes(), bytes);
  EXPECT_EQ(store_->find(200), nullptr);
}

}  // namespace
}  // namespace shoal::repl

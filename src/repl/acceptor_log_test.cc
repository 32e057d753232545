// AcceptorLog: ballots recovered from the position of each WAL copy relative to the journal's
// promise records (several promises, re-accepts, learned copies, torn tails, crashes around a
// promise record, chosen hints the WAL does not reach, segments), refusal of other journal
// formats and of copies without a ballot; and as a ChosenSlotSource: chosen slots read back
// from the WAL byte for byte, corrupted copies refused with a clear status, reads bounded by
// entries and bytes, and an index of well under a byte per slot.
#include "src/repl/acceptor_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <xxhash.h>

#include <filesystem>
#include <fstream>
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
    auto rec = try_open(covered);
    EXPECT_TRUE(rec.ok()) << rec.status().to_string();
    return rec.ok() ? *rec : AcceptorRecovery{};
  }
  Result<AcceptorRecovery> try_open(uint64_t covered = 0) {
    log_.reset();
    store_ = std::make_unique<PaxosAcceptorStore>(/*retain_chosen_slots=*/16);
    auto l = AcceptorLog::open(dir_, 0, fsync_);
    if (!l.ok()) return l.status();
    log_ = std::move(*l);
    auto rec = log_->recover(*store_, covered);
    if (rec.ok()) store_->set_hooks(log_->hooks());
    return rec;
  }
  // A crash that kept only the first `bytes` of a file (the rest was never synced).
  void crash_keeping(const std::string& file, uint64_t bytes) {
    log_.reset();
    std::filesystem::resize_file(dir_ + "/" + file, bytes);
  }
  uint64_t file_bytes(const std::string& file) const {
    return std::filesystem::file_size(dir_ + "/" + file);
  }
  Ballot ballot_of(uint64_t slot) const {
    const PaxosSlot* p = store_->find(slot);
    return p == nullptr ? Ballot{999} : p->accepted;
  }
  // Checks that every slot in [from, to] holds its expected bytes in ballot b.
  void expect_slots(uint64_t from, uint64_t to, Ballot b) {
    for (uint64_t s = from; s <= to; ++s) {
      const PaxosSlot* p = store_->find(s);
      ASSERT_NE(p, nullptr) << s;
      EXPECT_EQ(to_bytes(p->value.span()), expected_[s]) << s;
      EXPECT_EQ(p->accepted, b) << s;
    }
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
  FsyncPolicy fsync_ = FsyncPolicy::kNone;  // the log's policy at the next open
  std::unique_ptr<PaxosAcceptorStore> store_;
  std::unique_ptr<AcceptorLog> log_;
  std::map<uint64_t, Bytes> expected_;
};

// Group commit (acceptor_log.h): accepted copies leave the log dirty for its owner's one
// sync per group (a follower's before it replies), under --fsync always as under batch; the
// WAL does not sync each entry by itself. none never syncs.
TEST_F(AcceptorLogTest, AcceptsWaitForTheOwnersGroupSyncUnderBatchAndAlways) {
  for (const FsyncPolicy p : {FsyncPolicy::kBatch, FsyncPolicy::kAlways, FsyncPolicy::kNone}) {
    log_.reset();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    expected_.clear();
    fsync_ = p;
    open();
    accept(1, 3, 5);
    EXPECT_EQ(log_->dirty(), p != FsyncPolicy::kNone) << static_cast<int>(p);
    ASSERT_TRUE(log_->sync().ok());
    EXPECT_FALSE(log_->dirty());
    open();  // what was synced comes back
    expect_slots(1, 3, 5);
  }
}

TEST_F(AcceptorLogTest, ServesChosenSlotsByteForByteAcrossGroupsAndRewrites) {
  open();
  accept(1, 200, make_ballot(1, 0));
  // Slot 150 accepted again in a higher ballot with another value: the last copy counts.
  const Bytes old150 = expected_[150];
  accept(150, 150, make_ballot(2, 0), /*variant=*/1);
  ASSERT_NE(old150, expected_[150]);
  // A higher ballot for bytes already held writes them again (their copy carries the ballot).
  accept(151, 151, make_ballot(2, 0));
  choose(200);
  // Groups 1-64 and 65-128 lie back to back; 129-192 is irregular (150's and 151's last
  // copies are at the end);
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

constexpr size_t kRecord = 48;  // journal record bytes

// Each copy's ballot is that of the last promise record at or below its offset: promises
// through phase 1 (store.promise) and through an accept above the promise, across restarts.
TEST_F(AcceptorLogTest, BallotsComeFromThePromiseBelowEachCopy) {
  const Ballot b1 = make_ballot(1, 0), b2 = make_ballot(2, 1), b3 = make_ballot(3, 2);
  open();
  ASSERT_TRUE(store_->promise(b1).ok());
  accept(1, 5, b1);
  ASSERT_TRUE(store_->promise(b2).ok());
  accept(6, 8, b2);
  accept(9, 9, b3);  // raises the promise itself
  AcceptorRecovery rec = open();
  EXPECT_EQ(rec.promised, b3);
  EXPECT_EQ(rec.slots, 9u);
  expect_slots(1, 5, b1);
  expect_slots(6, 8, b2);
  expect_slots(9, 9, b3);
  // Appends go on after a restart in the recovered promise, then in a higher one.
  accept(10, 10, b3);
  accept(11, 11, make_ballot(4, 0));
  rec = open();
  expect_slots(1, 5, b1);
  expect_slots(10, 10, b3);
  expect_slots(11, 11, make_ballot(4, 0));
  // Only promise records (plus the format record) are in the journal: no record per entry.
  EXPECT_EQ(file_bytes("stream-0.acc"), 5 * kRecord);
}

// A higher ballot for bytes already held appends them again: the new copy, above the new
// promise, carries the new ballot; the old one is superseded.
TEST_F(AcceptorLogTest, ReacceptInAHigherBallotIsANewCopy) {
  open();
  accept(1, 3, make_ballot(1, 0));
  const uint64_t entry = expected_[1].size();
  accept(2, 2, make_ballot(2, 0));  // same bytes
  EXPECT_EQ(log_->wal_bytes(), 4 * entry);
  const AcceptorRecovery rec = open();
  EXPECT_EQ(rec.slots, 3u);
  EXPECT_EQ(rec.superseded, 1u);
  expect_slots(1, 1, make_ballot(1, 0));
  expect_slots(2, 2, make_ballot(2, 0));
  expect_slots(3, 3, make_ballot(1, 0));
}

// Copies learned before any promise lie under a promise of ballot 0 and come back chosen
// without a hint; copies learned later pair with the promise like any copy.
TEST_F(AcceptorLogTest, LearnedCopiesBeforeAnyPromiseComeBackChosen) {
  open();
  for (uint64_t s = 1; s <= 3; ++s) {
    expected_[s] = make_entry(s);
    ASSERT_TRUE(store_->learn(s, expected_[s]).ok());
  }
  accept(4, 4, make_ballot(1, 0));
  expected_[5] = make_entry(5);
  ASSERT_TRUE(store_->learn(5, expected_[5]).ok());
  AcceptorRecovery rec = open();  // no chosen hint was written
  EXPECT_EQ(rec.chosen_index, 3u);
  EXPECT_EQ(rec.promised, make_ballot(1, 0));
  for (uint64_t s = 1; s <= 3; ++s) EXPECT_TRUE(store_->find(s)->chosen) << s;
  expect_slots(4, 5, make_ballot(1, 0));
  EXPECT_FALSE(store_->find(5)->chosen);
}

// A torn WAL tail after a promise record: the copies before the tear keep their ballots, the
// torn one is gone, and a copy written again at the cut pairs with the same promise.
TEST_F(AcceptorLogTest, TornWalTailAfterAPromiseRecord) {
  open();
  accept(1, 3, make_ballot(1, 0));
  accept(4, 6, make_ballot(2, 0));
  const uint64_t entry = expected_[1].size();
  crash_keeping("stream-0.wal", 5 * entry + entry / 2);
  AcceptorRecovery rec = open();
  EXPECT_EQ(rec.slots, 5u);
  EXPECT_EQ(rec.promised, make_ballot(2, 0));
  expect_slots(1, 3, make_ballot(1, 0));
  expect_slots(4, 5, make_ballot(2, 0));
  EXPECT_EQ(store_->find(6), nullptr);
  accept(6, 6, make_ballot(2, 0));
  rec = open();
  expect_slots(4, 6, make_ballot(2, 0));
}

// A crash before the promise record's sync loses the record: no copy can depend on it (they
// follow its sync), the old promise holds. A crash after it but before the next WAL sync
// keeps the promise and the copies before it.
TEST_F(AcceptorLogTest, CrashAroundThePromiseRecordsSync) {
  open();
  accept(1, 3, make_ballot(1, 0));
  ASSERT_TRUE(store_->promise(make_ballot(2, 0)).ok());
  crash_keeping("stream-0.acc", file_bytes("stream-0.acc") - kRecord);  // before
  AcceptorRecovery rec = open();
  EXPECT_EQ(rec.promised, make_ballot(1, 0));
  expect_slots(1, 3, make_ballot(1, 0));
  accept(4, 5, make_ballot(2, 0));  // the new promise again, then its copies
  const uint64_t entry = expected_[1].size();
  crash_keeping("stream-0.wal", 3 * entry);  // after: the copies in ballot 2 were unsynced
  rec = open();
  EXPECT_EQ(rec.promised, make_ballot(2, 0));
  EXPECT_EQ(rec.slots, 3u);
  expect_slots(1, 3, make_ballot(1, 0));
  accept(4, 4, make_ballot(2, 0));
  open();
  expect_slots(4, 4, make_ballot(2, 0));
}

// Without syncs (kNone) an OS crash may keep a promise record whose offset the WAL no longer
// reaches: recovery cuts the journal there and writes the promise again at the WAL's end, so
// the copies appended next carry that promise across the following restart too.
TEST_F(AcceptorLogTest, PromiseBeyondTheWalEndIsRewrittenAtTheEnd) {
  open();
  accept(1, 3, make_ballot(1, 0));
  ASSERT_TRUE(store_->promise(make_ballot(2, 0)).ok());  // record at 3 entries
  const uint64_t entry = expected_[1].size();
  crash_keeping("stream-0.wal", 2 * entry);
  AcceptorRecovery rec = open();
  EXPECT_EQ(rec.promised, make_ballot(2, 0));
  expect_slots(1, 2, make_ballot(1, 0));
  accept(3, 4, make_ballot(2, 0));
  rec = open();
  expect_slots(1, 2, make_ballot(1, 0));
  expect_slots(3, 4, make_ballot(2, 0));
}

// A chosen hint is trusted only if the WAL reaches the offset it was written at: a lost
// re-accept must not leave the older value of its slot marked chosen.
TEST_F(AcceptorLogTest, ChosenHintBeyondTheWalEndIsNotTrusted) {
  open();
  accept(1, 3, make_ballot(1, 0));
  choose(2);
  const Bytes old3 = expected_[3];
  accept(3, 3, make_ballot(2, 0), /*variant=*/1);
  choose(3);
  const uint64_t entry = expected_[1].size();
  crash_keeping("stream-0.wal", 3 * entry);  // slot 3's second copy lost, the hint kept
  AcceptorRecovery rec = open();
  EXPECT_EQ(rec.chosen_index, 2u);
  EXPECT_FALSE(store_->find(3)->chosen);
  EXPECT_EQ(to_bytes(store_->find(3)->value.span()), old3);
  EXPECT_EQ(ballot_of(3), make_ballot(1, 0));
}

// A WAL copy below the journal's first promise record has lost its ballot: refused, naming
// the files, never restored with a made-up ballot.
TEST_F(AcceptorLogTest, CopyBelowTheFirstPromiseRecordIsCorruption) {
  open();
  accept(1, 2, make_ballot(1, 0));
  crash_keeping("stream-0.acc", kRecord);  // the format record alone
  const auto rec = try_open();
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.status().code(), Code::kCorruption);
  EXPECT_NE(rec.status().message().find("stream-0.wal: the copy of slot 1 at offset 0 lies below "
                                        "the first promise record of " +
                                        dir_ + "/stream-0.acc"),
            std::string::npos)
      << rec.status().message();
}

// A journal of format 1 (records per accepted entry, no format record) is refused with one
// line naming the file and what to do; so is a newer format.
TEST_F(AcceptorLogTest, OtherJournalFormatsAreRefused) {
  auto write_record = [&](uint32_t kind, uint64_t value) {
    alignas(8) std::byte r[kRecord] = {};
    store_u32(r, 0x4a414853);
    store_u32(r + 4, kind);
    store_u64(r + 8, value);
    store_u64(r + 16, make_ballot(1, 0));
    store_u64(r + 40, XXH3_64bits(r, 40));
    const int fd = ::open((dir_ + "/stream-0.acc").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, r, kRecord), static_cast<ssize_t>(kRecord));
    ::close(fd);
  };
  write_record(/*promise, format 1*/ 1, 0);
  auto rec = try_open();
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.status().code(), Code::kNotSupported);
  EXPECT_EQ(rec.status().message(),
            "acceptor journal " + dir_ +
                "/stream-0.acc: format 1 (a record per accepted entry), this binary reads format "
                "2; move the directory away and start the replica on an empty one (a follower "
                "bootstraps from its leader)");
  write_record(/*format*/ 5, 3);
  rec = try_open();
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.status().code(), Code::kNotSupported);
  EXPECT_NE(rec.status().message().find("format record 3 at offset 0"), std::string::npos)
      << rec.status().message();
  EXPECT_EQ(file_bytes("stream-0.acc"), kRecord);  // refused, not cut
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
  // After a restart the learned slots come back chosen through the hint (slot 5 with the
  // learned value: its last copy) and are served the same way.
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
  // A crash between deleting a WAL and its journal leaves the journal: the next open deletes it.
  std::ofstream(dir_ + "/stream-0.acc").put('x');
  // Reads serve the copies of every live segment; a deleted segment's slots are NotFound.
  std::vector<ChosenEntry> out;
  EXPECT_EQ(read_all(150, 180, 7, 1 << 20), 5);
  EXPECT_EQ(log_->read(50, 60, 4, 1 << 20, &out).code(), Code::kNotFound);

  const AcceptorRecovery rec = open(/*covered=*/150);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/stream-0.acc"));
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
    EXPECT_EQ(p->accepted, 7u) << s;  // from each segment's promise record at offset 0
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

// The active WAL runs ahead of its last copy in preallocated zeros (Wal preallocation): a
// restart keeps every copy with its ballot and says nothing on stderr, copies accepted after
// it land where the log ended, rotate() leaves the closed segment exactly its copies long (its
// size is what a restart counts for a covered segment), and the new segment preallocates again.
TEST_F(AcceptorLogTest, PreallocatedTailsSurviveRestartsAndRotationTrimsThem) {
  open();
  ASSERT_TRUE(store_->promise(5).ok());
  accept(1, 40, 5);
  choose(30);
  ASSERT_TRUE(log_->sync().ok());
  const uint64_t logical = log_->wal_bytes();
  ASSERT_GT(file_bytes("stream-0.wal"), logical);
  ::testing::internal::CaptureStderr();
  AcceptorRecovery rec = open();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(rec.slots, 40u);
  EXPECT_EQ(rec.wal_bytes, logical);
  EXPECT_EQ(rec.chosen_index, 30u);
  expect_slots(1, 40, 5);
  accept(41, 50, 5);
  choose(50);
  rec = open();
  EXPECT_EQ(rec.slots, 50u);
  expect_slots(1, 50, 5);
  EXPECT_EQ(read_all(1, 50, 16, 1 << 20), 4);

  const uint64_t first_bytes = log_->wal_bytes();
  ASSERT_TRUE(log_->rotate().ok());
  EXPECT_EQ(file_bytes("stream-0.wal"), first_bytes);
  accept(51, 60, 5);
  choose(60);
  EXPECT_GT(file_bytes("stream-0.1.wal"), log_->wal_bytes() - first_bytes);
  EXPECT_EQ(read_all(1, 60, 16, 1 << 20), 4);  // across the boundary
  // A restart whose checkpoint covers segment 0 counts it by its size: offsets still line up.
  ASSERT_TRUE(log_->sync().ok());
  const uint64_t total = log_->wal_bytes();
  rec = open(/*covered=*/50);
  EXPECT_EQ(rec.slots, 10u);
  EXPECT_EQ(rec.wal_bytes, total);
  EXPECT_EQ(read_all(51, 60, 16, 1 << 20), 1);
  auto freed = log_->drop_covered_segments(50);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, first_bytes);
  EXPECT_EQ(read_all(51, 60, 16, 1 << 20), 1);
}

// A leader rotates while serving catch-up: slots whose copies lie in closed segments are read
// back byte for byte, across the boundaries (a group of 64 slots spanning two segments), also
// after a restart (recovery indexes every segment it reads); deleting segments shrinks the
// index, and their slots are then NotFound, never another slot's bytes.
TEST_F(AcceptorLogTest, ReadsSpanRetainedSegmentsAndForgetDeletedOnes) {
  open();
  ASSERT_TRUE(store_->promise(3).ok());
  accept(1, 100, 3);  // slots 65..128 form one group across the first rotation
  choose(100);
  ASSERT_TRUE(log_->rotate().ok());
  accept(101, 300, 3);
  choose(300);
  ASSERT_TRUE(log_->rotate().ok());
  accept(301, 400, 3);
  choose(390);
  EXPECT_EQ(log_->segments(), 3u);
  EXPECT_EQ(read_all(1, 390, 16, 1 << 20), 25);
  const size_t index_before = log_->index_bytes();

  auto freed = log_->drop_covered_segments(150);  // segment 0 (slots 1..100) goes
  ASSERT_TRUE(freed.ok());
  EXPECT_GT(*freed, 0u);
  EXPECT_EQ(log_->oldest_segment_max_slot(), 300u);
  EXPECT_LT(log_->index_bytes(), index_before);
  std::vector<ChosenEntry> out;
  const Status gone = log_->read(10, 20, 4, 1 << 20, &out);
  EXPECT_EQ(gone.code(), Code::kNotFound) << gone.to_string();
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(read_all(101, 390, 32, 1 << 20), 10);

  // After a restart over a checkpoint at 150 (the leader's own, which the deletion needed),
  // every slot above it is served again, those of the group the cut splits (129..192) too.
  open(/*covered=*/150);
  EXPECT_EQ(read_all(151, 390, 64, 1 << 20), 4);
  EXPECT_EQ(log_->read(140, 150, 4, 1 << 20, &out).code(), Code::kNotFound);
  open(/*covered=*/200);
  EXPECT_EQ(read_all(201, 390, 64, 1 << 20), 3);
}

// Every file of the directory with its bytes: what a read-only summary must leave as it was.
std::map<std::string, std::string> directory_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().filename().string()] =
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

// read_acceptor_reach: the chosen hint and the highest slot of a directory an AcceptorLog
// wrote, read beside the open log and after it closed, without a byte of the directory
// changing; the scan after the hint stops at its bound; a stream with no files reaches nothing.
TEST_F(AcceptorLogTest, ReachIsTheChosenHintAndTheHighestCopyReadWithoutWriting) {
  for (const FsyncPolicy p : {FsyncPolicy::kNone, FsyncPolicy::kAlways}) {  // kAlways: zeros ahead
    SCOPED_TRACE(static_cast<int>(p));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    fsync_ = p;
    open();
    ASSERT_TRUE(store_->promise(7).ok());
    // As a follower logs: each slot accepted, chosen (a hint) ten slots later.
    for (uint64_t slot = 1; slot <= 1000; ++slot) {
      accept(slot, slot, 7);
      if (slot > 10) choose(slot - 10);
    }
    ASSERT_TRUE(log_->sync().ok());
    const auto before = directory_bytes(dir_);
    auto reach = read_acceptor_reach(dir_, 0);
    ASSERT_TRUE(reach.ok()) << reach.status().to_string();
    EXPECT_EQ(reach->chosen, 990u);
    EXPECT_EQ(reach->highest_slot, 1000u);  // copies before the last hint's offset included
    EXPECT_TRUE(reach->highest_exact);
    EXPECT_EQ(reach->segments, 1u);
    EXPECT_GE(reach->wal_bytes, 1000 * expected_[1].size());
    EXPECT_EQ(reach->journal_bytes_torn, 0u);
    EXPECT_EQ(directory_bytes(dir_), before);
    // Bounded: three entries from where the copies above the hint can begin, then it stops
    // (highest_slot is then a lower bound: here the chosen index).
    reach = read_acceptor_reach(dir_, 0, 3 * expected_[1].size());
    ASSERT_TRUE(reach.ok()) << reach.status().to_string();
    EXPECT_EQ(reach->chosen, 990u);
    EXPECT_EQ(reach->highest_slot, 990u);
    EXPECT_FALSE(reach->highest_exact);
    log_.reset();
    reach = read_acceptor_reach(dir_, 0);
    ASSERT_TRUE(reach.ok()) << reach.status().to_string();
    EXPECT_EQ(reach->chosen, 990u);
    EXPECT_EQ(reach->highest_slot, 1000u);
    EXPECT_EQ(directory_bytes(dir_), before);
    // Recovery agrees on the chosen index.
    EXPECT_EQ(open().chosen_index, 990u);
    auto other = read_acceptor_reach(dir_, 1);  // no stream-1 files
    ASSERT_TRUE(other.ok()) << other.status().to_string();
    EXPECT_EQ(other->chosen, 0u);
    EXPECT_EQ(other->highest_slot, 0u);
    EXPECT_EQ(other->segments, 0u);
  }
}

// Across rotations and truncation (the WAL's head deleted behind a checkpoint): the new
// journal repeats the chosen hint, and the sealed record names a closed segment's highest slot.
TEST_F(AcceptorLogTest, ReachSpansSegmentsAndATruncatedHead) {
  open();
  ASSERT_TRUE(store_->promise(7).ok());
  accept(1, 100, 7);
  choose(90);
  ASSERT_TRUE(log_->rotate().ok());
  accept(101, 200, 7);
  choose(180);
  ASSERT_TRUE(log_->rotate().ok());  // segment 2 holds only the promise and hint 180
  auto reach = read_acceptor_reach(dir_, 0);
  ASSERT_TRUE(reach.ok()) << reach.status().to_string();
  EXPECT_EQ(reach->chosen, 180u);
  EXPECT_EQ(reach->highest_slot, 200u);  // segment 1's sealed record
  EXPECT_EQ(reach->segments, 3u);
  accept(201, 220, 7);
  ASSERT_TRUE(log_->drop_covered_segments(150).ok());
  reach = read_acceptor_reach(dir_, 0);
  ASSERT_TRUE(reach.ok()) << reach.status().to_string();
  EXPECT_EQ(reach->chosen, 180u);
  EXPECT_EQ(reach->highest_slot, 220u);
  EXPECT_EQ(reach->segments, 2u);
  choose(215);
  reach = read_acceptor_reach(dir_, 0);
  ASSERT_TRUE(reach.ok()) << reach.status().to_string();
  EXPECT_EQ(reach->chosen, 215u);
  EXPECT_EQ(reach->highest_slot, 220u);
  EXPECT_EQ(open(/*covered=*/150).chosen_index, 215u);
}

// A torn journal tail is counted, not cut (recovery cuts it later and finds the same chosen
// index); a hint naming WAL bytes that are gone is not trusted, as recovery does not; a
// missing directory is NotFound and a journal of another format NotSupported.
TEST_F(AcceptorLogTest, ReachOfATornJournalALostWalTailAMissingDirectoryAndAnOldFormat) {
  open();
  accept(1, 50, make_ballot(1, 0));
  choose(40);
  log_.reset();
  {
    std::ofstream acc(dir_ + "/stream-0.acc", std::ios::binary | std::ios::app);
    acc << std::string(kRecord + 10, '\xab');  // a whole record's worth of garbage, and a torn one
  }
  const uint64_t journal = file_bytes("stream-0.acc");
  auto reach = read_acceptor_reach(dir_, 0);
  ASSERT_TRUE(reach.ok()) << reach.status().to_string();
  EXPECT_EQ(reach->chosen, 40u);
  EXPECT_EQ(reach->highest_slot, 50u);
  EXPECT_EQ(reach->journal_bytes_torn, kRecord + 10);
  EXPECT_EQ(file_bytes("stream-0.acc"), journal);  // not cut
  EXPECT_EQ(open().chosen_index, 40u);
  EXPECT_EQ(file_bytes("stream-0.acc"), journal - kRecord - 10);  // recovery cut it

  // As ChosenHintBeyondTheWalEndIsNotTrusted: slot 3's second copy lost, its hint kept.
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  expected_.clear();
  open();
  accept(1, 3, make_ballot(1, 0));
  choose(2);
  accept(3, 3, make_ballot(2, 0), /*variant=*/1);
  choose(3);
  crash_keeping("stream-0.wal", 3 * expected_[1].size());
  reach = read_acceptor_reach(dir_, 0);
  ASSERT_TRUE(reach.ok()) << reach.status().to_string();
  EXPECT_EQ(reach->chosen, 2u);
  EXPECT_EQ(reach->highest_slot, 3u);
  EXPECT_EQ(open().chosen_index, 2u);

  log_.reset();
  auto missing = read_acceptor_reach(dir_ + "/none", 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find(dir_ + "/none: no replica directory"),
            std::string::npos)
      << missing.status().message();

  alignas(8) std::byte r[kRecord] = {};  // format 1: a promise record first
  store_u32(r, 0x4a414853);
  store_u32(r + 4, 1);
  store_u64(r + 40, XXH3_64bits(r, 40));
  const int fd = ::open((dir_ + "/stream-0.acc").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, r, kRecord), static_cast<ssize_t>(kRecord));
  ::close(fd);
  auto old = read_acceptor_reach(dir_, 0);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), Code::kNotSupported);
  EXPECT_NE(old.status().message().find("stream-0.acc: format 1"), std::string::npos)
      << old.status().message();
}

// The rejoin mark (a stream whose directory was lost): written before any log file, read at
// open (the store starts rejoining), reported by the reach, kept across a crash during the
// catch-up, and deleted by on_rejoined once the WAL is synced; its content does not matter.
TEST_F(AcceptorLogTest, RejoinMarkIsKeptUntilTheStreamRejoinsThenDeleted) {
  auto held = AcceptorLog::holds_stream_log(dir_, 0);
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(*held);
  ASSERT_TRUE(AcceptorLog::mark_rejoining(dir_, 0).ok());
  const std::string mark = AcceptorLog::rejoin_mark_path(dir_, 0);
  ASSERT_TRUE(std::filesystem::exists(mark));
  open();
  EXPECT_TRUE(log_->rejoining());
  store_->set_rejoining(log_->rejoining());
  EXPECT_TRUE(*AcceptorLog::holds_stream_log(dir_, 0));
  const Bytes e1 = make_entry(1);
  ASSERT_TRUE(store_->promise(make_ballot(2, 0)).ok());
  ASSERT_TRUE(store_->accept(1, make_ballot(2, 0), e1).ok());
  auto reach = read_acceptor_reach(dir_, 0);
  ASSERT_TRUE(reach.ok());
  EXPECT_TRUE(reach->rejoining);

  std::ofstream(mark, std::ios::trunc) << "garbage";  // damaged: still a mark
  open();                                             // a crash during the catch-up
  EXPECT_TRUE(log_->rejoining());
  store_->set_rejoining(log_->rejoining());
  ASSERT_NE(store_->find(1), nullptr);
  ASSERT_TRUE(store_->finish_rejoin().ok());
  EXPECT_FALSE(store_->rejoining());
  EXPECT_FALSE(log_->rejoining());
  EXPECT_FALSE(std::filesystem::exists(mark));
  EXPECT_FALSE(read_acceptor_reach(dir_, 0)->rejoining);
  open();
  EXPECT_FALSE(log_->rejoining());
  EXPECT_TRUE(store_->find(1)->value.same_bytes(e1));
  log_.reset();
  std::filesystem::remove(dir_ + "/stream-0.wal");  // its journal alone is no log
  EXPECT_FALSE(*AcceptorLog::holds_stream_log(dir_, 0));
}

}  // namespace
}  // namespace shoal::repl

// The bank's history plumbing without processes: a log paged out and parsed back, the cap,
// dropping what read from unrecorded transactions, stand-ins for them, the history files a
// killed process leaves (torn tail, another run's file), and readable ids in witnesses.
#include "src/server/dist_bank.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "src/check/serializability.h"
#include "src/dist/participant.h"

namespace shoal::server {
namespace {

BankTxnRecord transfer(uint64_t id, uint64_t a, uint64_t a_seq, uint64_t a_writer, uint64_t b,
                       uint64_t b_seq, uint64_t b_writer) {
  BankTxnRecord r;
  r.id = id;
  r.reads = 2;
  r.read_key[0] = a;
  r.read_seq[0] = a_seq;
  r.read_writer[0] = a_writer;
  r.read_key[1] = b;
  r.read_seq[1] = b_seq;
  r.read_writer[1] = b_writer;
  r.writes = 2;
  r.write_key[0] = a;
  r.write_seq[0] = a_seq + 1;
  r.write_key[1] = b;
  r.write_seq[1] = b_seq + 1;
  return r;
}

// Appends r to *h the way the controller gets it from a server: paged out and parsed back.
void append_through_a_page(const BankTxnRecord& r, check::History* h) {
  std::string body;
  BankHistory one;
  one.add(r);
  (void)one.page(0, 1 << 20, &body);
  ASSERT_TRUE(parse_bank_page(nlohmann::json::parse("[" + body + "]"), &h->txns).ok());
}

TEST(DistBank, PagesRoundTripAndTheCapCounts) {
  BankHistory log(/*cap=*/50);
  for (uint64_t i = 0; i < 60; ++i) {
    log.add(transfer(dist::make_txn_id(1, 2, i + 1), 2 * i, 0, 0, 2 * i + 1, 0, 0));
  }
  EXPECT_EQ(log.size(), 50u);
  EXPECT_EQ(log.dropped(), 10u);
  std::vector<check::TxnRecord> parsed;
  size_t from = 0, pages = 0;
  while (from < log.size()) {
    std::string body;
    const size_t next = log.page(from, 300, &body);  // a few transactions per page
    ASSERT_GT(next, from);
    ASSERT_LE(body.size(), 300u);
    auto j = nlohmann::json::parse("[" + body + "]");
    ASSERT_TRUE(parse_bank_page(j, &parsed).ok());
    from = next;
    ++pages;
  }
  EXPECT_GT(pages, 5u);
  ASSERT_EQ(parsed.size(), 50u);
  EXPECT_EQ(parsed[7].id, dist::make_txn_id(1, 2, 8));
  ASSERT_EQ(parsed[7].ops.size(), 4u);
  EXPECT_EQ(parsed[7].ops[1].key, 15u);
  EXPECT_EQ(parsed[7].ops[3].version, 1u);
  EXPECT_FALSE(parse_bank_page(nlohmann::json::parse("[[1,2,3]]"), &parsed).ok());
}

TEST(DistBank, ReadersOfUnrecordedTransactionsAreLeftOutTransitively) {
  check::History h;
  auto add = [&h](const BankTxnRecord& r) { append_through_a_page(r, &h); };
  add(transfer(1, 10, 0, 0, 11, 0, 0));   // kept: reads the load
  add(transfer(2, 10, 1, 1, 12, 0, 0));   // kept: reads 1
  add(transfer(3, 11, 1, 1, 13, 7, 99));  // 99 was not recorded: left out
  add(transfer(4, 13, 8, 3, 14, 0, 0));   // reads 3: left out too
  add(transfer(5, 12, 1, 2, 15, 0, 0));   // kept
  EXPECT_EQ(drop_unrecorded_readers(&h), 2u);
  ASSERT_EQ(h.txns.size(), 3u);
  EXPECT_EQ(h.txns[0].id, 1u);
  EXPECT_EQ(h.txns[0].ops.size(), 4u);  // kept transactions keep their operations
  EXPECT_EQ(h.txns[2].id, 5u);
  EXPECT_TRUE(check::check(h).empty());
}

// On a hot bank, leaving out the readers of one unrecorded transaction leaves out nearly all
// that follows; a stand-in of the versions read keeps them, and still catches a version
// written twice (a transaction read, then undone and its version written again).
TEST(DistBank, StandInsKeepReadersOfUnrecordedTransactions) {
  check::History h;
  auto add = [&h](const BankTxnRecord& r) { append_through_a_page(r, &h); };
  add(transfer(1, 11, 0, 0, 20, 0, 0));
  add(transfer(3, 11, 1, 1, 13, 7, 99));  // 99 (unrecorded) wrote k=13 v=7
  add(transfer(4, 13, 8, 3, 14, 7, 99));  // and k=14 v=7
  add(transfer(5, 13, 9, 4, 15, 0, 0));
  check::History lossy = h;
  EXPECT_EQ(drop_unrecorded_readers(&lossy), 3u);  // 3 and 4 read from 99, 5 from 4
  check::History kept = h;
  EXPECT_EQ(add_stand_ins(&kept), 1u);
  ASSERT_EQ(kept.txns.size(), 5u);
  EXPECT_EQ(kept.txns[4].id, 99u);
  ASSERT_EQ(kept.txns[4].ops.size(), 2u);  // the two versions read from it, no reads
  EXPECT_EQ(kept.txns[4].ops[0].kind, check::OpKind::kWrite);
  EXPECT_EQ(kept.txns[4].ops[1].key, 14u);
  const check::CheckReport whole = check::check_report(kept);
  EXPECT_TRUE(whole.serializable()) << whole.to_string();
  // 99's write of k=13 v=7 undone, then written again by 6 (which read v=6 from 50, also
  // unrecorded): two committed writers of one version.
  add(transfer(6, 13, 6, 50, 21, 0, 0));
  kept = h;
  EXPECT_EQ(add_stand_ins(&kept), 2u);
  const check::CheckReport report = check::check_report(kept);
  EXPECT_TRUE(report.has(check::AnomalyKind::kImpossible)) << report.to_string();
}

// A history file as a killed worker leaves it: records written, the last one cut short.
class BankHistoryFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           fmt::format("bank-history-test-{}", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes n transfers (ids 1..n) and one unacknowledged marker (id 1000) to a file of `run`.
  std::string write_file(uint64_t run, uint32_t worker, uint64_t n) {
    const BankHistoryFileHeader header{run, 2, 1, worker, 1};
    const std::string path = bank_history_path(dir_.string(), header, 77);
    BankHistory log;
    EXPECT_TRUE(log.open_file(path, header).ok());
    for (uint64_t i = 1; i <= n; ++i) log.add(transfer(i, 2 * i, 0, 0, 2 * i + 1, 0, 0));
    log.add_unrecorded(1000);
    log.clear();  // closes, flushing
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(BankHistoryFileTest, RoundTripsAndToleratesATornLastRecord) {
  constexpr uint64_t kRun = 0x5eed;
  const std::string path = write_file(kRun, 0, 5);
  auto whole = read_bank_history_file(path, kRun);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_EQ(whole->header.shard, 2u);
  EXPECT_EQ(whole->header.replica, 1u);
  ASSERT_EQ(whole->txns.size(), 5u);
  EXPECT_EQ(whole->unacknowledged, 1u);
  EXPECT_EQ(whole->torn_bytes, 0u);
  EXPECT_EQ(whole->txns[2].id, 3u);
  ASSERT_EQ(whole->txns[2].ops.size(), 4u);
  EXPECT_EQ(whole->txns[2].ops[1].key, 7u);
  EXPECT_EQ(whole->txns[2].ops[3].version, 1u);
  // Cut inside the marker, then inside the fifth transfer: the rest reads back.
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 3);
  auto torn = read_bank_history_file(path, kRun);
  ASSERT_TRUE(torn.ok()) << torn.status().to_string();
  EXPECT_EQ(torn->txns.size(), 5u);
  EXPECT_EQ(torn->unacknowledged, 0u);
  EXPECT_GT(torn->torn_bytes, 0u);
  std::filesystem::resize_file(path, size - 40);
  torn = read_bank_history_file(path, kRun);
  ASSERT_TRUE(torn.ok()) << torn.status().to_string();
  EXPECT_EQ(torn->txns.size(), 4u);
  // The directory's reader merges files and counts the torn one.
  (void)write_file(kRun, 1, 3);
  const BankHistoryFiles all = read_bank_history_files(dir_.string(), kRun);
  EXPECT_TRUE(all.errors.empty());
  EXPECT_EQ(all.files, 2u);
  EXPECT_EQ(all.txns.size(), 7u);
  EXPECT_EQ(all.torn_files, 1u);
  EXPECT_EQ(all.unacknowledged, 1u);
}

TEST_F(BankHistoryFileTest, RefusesAnotherRunsFileAndAMalformedRecord) {
  const std::string path = write_file(/*run=*/41, 0, 3);
  auto other = read_bank_history_file(path, /*run=*/42);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), Code::kInvalidArgument);
  EXPECT_NE(other.status().message().find("from another run"), std::string::npos)
      << other.status().to_string();
  const BankHistoryFiles all = read_bank_history_files(dir_.string(), 42);
  EXPECT_EQ(all.files, 0u);
  ASSERT_EQ(all.errors.size(), 1u);
  EXPECT_NE(all.errors[0].find("from another run"), std::string::npos) << all.errors[0];
  // A record claiming 9 reads in the middle of the file: not a torn tail, corruption.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kBankHistoryHeaderBytes));
    f.put(9);
  }
  auto bad = read_bank_history_file(path, 41);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorruption) << bad.status().to_string();
  // Not a history file at all.
  std::ofstream(dir_ / "bank-history-junk.bin") << "hello, world: no magic here";
  auto junk = read_bank_history_file((dir_ / "bank-history-junk.bin").string(), 41);
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("not a bank history file"), std::string::npos);
}

TEST(DistBank, WitnessIdsNameShardWorkerAndAttempt) {
  const uint64_t a = dist::make_txn_id(1, 0, 42), b = dist::make_txn_id(0, 3, 7);
  EXPECT_EQ(readable_txn_ids(fmt::format("T{} -rw(k=5,v=3)-> T{}", a, b)),
            "T1.0.42 -rw(k=5,v=3)-> T0.3.7");
}

}  // namespace
}  // namespace shoal::server

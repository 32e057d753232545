// The bank's history plumbing without processes: a log paged out and parsed back, the cap,
// dropping what read from unrecorded transactions, and readable ids in witnesses.
#include "src/server/dist_bank.h"

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

TEST(DistBank, PagesRoundTripAndTheCapCounts) {
  BankHistory log(/*cap=*/50);
  for (uint64_t i = 0; i < 60; ++i) {
    log.add(transfer(dist::make_txn_id(1, 2, i + 1), 2 * i, 0, 0, 2 * i + 1, 0, 0));
  }
  EXPECT_EQ(log.size(), 50u);
  EXPECT_EQ(log.dropped(), 10u);
  std::vector<sim::TxnRecord> parsed;
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
  sim::History h;
  auto add = [&h](const BankTxnRecord& r) {
    std::string body;
    BankHistory one;
    one.add(r);
    (void)one.page(0, 1 << 20, &body);
    ASSERT_TRUE(parse_bank_page(nlohmann::json::parse("[" + body + "]"), &h.txns).ok());
  };
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
  EXPECT_TRUE(sim::check(h).empty());
}

TEST(DistBank, WitnessIdsNameShardWorkerAndAttempt) {
  const uint64_t a = dist::make_txn_id(1, 0, 42), b = dist::make_txn_id(0, 3, 7);
  EXPECT_EQ(readable_txn_ids(fmt::format("T{} -rw(k=5,v=3)-> T{}", a, b)),
            "T1.0.42 -rw(k=5,v=3)-> T0.3.7");
}

}  // namespace
}  // namespace shoal::server

// Follower reads of TPC-C (src/workload/tpcc/tpcc_follower_reads.h): at a consistent snapshot every
// round passes while replay has installed half of a newer transaction; the planted
// newest-version bug reads that half and every round reports the torn district.
#include "src/workload/tpcc/tpcc_follower_reads.h"

#include <gtest/gtest.h>

#include "src/workload/tpcc/tpcc.h"

namespace shoal::workload::tpcc {
namespace {

TEST(TpccFollowerReads, ConsistentSnapshotPassesAndNewestVersionBugTears) {
  txn::EngineOptions eo;
  eo.epoch_ticker = false;
  eo.keep_version_chains = true;
  txn::Engine engine(eo);
  TpccOptions opt;
  opt.warehouses = 1;
  TpccWorkload workload(opt);
  LoadOptions lo;
  lo.warehouses = 1;
  lo.seed = 7;
  ASSERT_TRUE(workload.load(engine, lo, [](double) {}).ok());
  const Tables& t = workload.tables();
  txn::SnapshotRegistry registry(engine);
  const uint64_t loaded_tid = txn::Tid::make(1, 0);  // what the loader stamps
  registry.publish_applied(loaded_tid);
  txn::SnapshotReader good(registry);
  txn::SnapshotReader planted(registry, {.unsafe_read_newest = true});
  ASSERT_TRUE(good.begin().ok());
  ASSERT_TRUE(planted.begin().ok());

  // Replay is inside a NewOrder of every district: D_NEXT_O_ID advanced, its ORDER and
  // NEW-ORDER rows not installed yet (the applied TID stays below it).
  {
    ebr::Guard guard;
    for (uint32_t d = 1; d <= kDistrictsPerWarehouse; ++d) {
      DistrictRow row;
      ASSERT_TRUE(t.district->peek(district_key(1, d), &row, sizeof row).ok());
      row.next_o_id += 1;
      const Key<1> k = district_key(1, d);
      ASSERT_TRUE(t.district->apply_replicated(k.w.data(), txn::WriteKind::kPut, &row, sizeof row,
                                               loaded_tid + 1));
    }
  }
  Rng rng(11);
  uint64_t good_txns = 0;
  for (int round = 0; round < 20; ++round) {
    txn::ReadRoundResult r;
    ASSERT_TRUE(snapshot_read_round(good, t, rng, &r).ok());
    EXPECT_FALSE(r.torn) << r.violation;
    good_txns += r.transactions;
  }
  EXPECT_EQ(good_txns, 40u);  // OrderStatus and StockLevel each round
  txn::ReadRoundResult r;
  ASSERT_TRUE(snapshot_read_round(planted, t, rng, &r).ok());
  EXPECT_TRUE(r.torn);
  EXPECT_NE(r.violation.find("D_NEXT_O_ID - 1 = 3001, max(O_ID) = 3000"), std::string::npos)
      << r.violation;
}

}  // namespace
}  // namespace shoal::workload::tpcc

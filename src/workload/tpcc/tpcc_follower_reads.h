// TPC-C's read-only transactions served by a follower at its snapshot (docs/REPLICATION.md,
// "Follower reads"; src/txn/snapshot.h), each checked against conditions that hold in every
// consistent TPC-C state, so a torn snapshot (one that mixes versions from before and after some
// transaction) is counted rather than silently served.
//
// One round at one snapshot: pick a warehouse of this shard and a district, then
//   * district read (clause 3.3.2.2 / 3.3.2.3): D_NEXT_O_ID - 1 = max(O_ID) of the district's
//     ORDER rows = max(NO_O_ID) of its NEW-ORDER rows (when it has any);
//   * OrderStatus (clause 2.6) of a random customer: its latest order is below D_NEXT_O_ID and
//     has exactly O_OL_CNT order lines (clause 3.3.2.8), every row it needs present;
//   * StockLevel (clause 2.8) of the district: every row it needs present.
// A violation is a torn snapshot. Procedures return Aborted for a missing required row.
//
// Threads: called on a follower's reader thread with its own SnapshotReader and Rng.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/status.h"
#include "src/base/env.h"
#include "src/txn/snapshot.h"
#include "src/workload/tpcc/tpcc_schema.h"

namespace shoal::workload::tpcc {

// Runs one round at the reader's open snapshot. InvalidArgument if the engine holds no TPC-C
// warehouse at the snapshot. REQUIRES: reader.open(); tables found in the reader's engine.
[[nodiscard]] Status snapshot_read_round(txn::SnapshotReader& reader, const Tables& tables,
                                         Rng& rng, txn::ReadRoundResult* result);

}  // namespace shoal::workload::tpcc

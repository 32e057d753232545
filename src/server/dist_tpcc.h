// TPC-C across shard processes: warehouses partitioned over shards, transactions coordinated by
// the shard of their home warehouse.
//
// Placement: shard s owns warehouses [partition_lo, partition_hi) of the cluster config (the
// partition keys are warehouse ids) with all their rows (WAREHOUSE, DISTRICT, CUSTOMER and its
// by-name index, ORDER and its by-customer index, NEW-ORDER, ORDER-LINE, STOCK) and the HISTORY
// rows of the Payments made at them (whose customer may live elsewhere); ITEM is read-only and
// loaded on every shard (same seed, same rows).
//
// Execution: a transaction whose rows all live on its home shard (OrderStatus, Delivery,
// StockLevel; NewOrder with only home-warehouse stock, Payment of a home-warehouse customer)
// runs the single-shard procedure on the worker's own Txn, start to commit without suspending
// (OCC retries after a yield, so a remote coordinator's prepared locks on this worker's loop
// can be released meanwhile). The others run as coroutine procedures on the worker's
// Coordinator, as fragments (src/dist, DistTxn::exec) on the shard owning their rows: a
// NewOrder runs its remote stock lines first, a Payment its remote customer (each locking there
// in the same round trip), then the home part with their results, then commits: the remote
// shard validates and installs in one more round trip (the last agent). The home part runs
// last so that nothing changes its reads before our own validation, and the home rows (the
// hot warehouse and district) stay locked for one round trip only.
// The fragments are TpccFragment below, registered on every shard.
//
// Consistency across the cluster: each shard checks its warehouses (clause 3.3.2) with the
// HISTORY sums that other shards hold for them added in (workload::foreign_payments).
//
// Threads: a TpccShardClient belongs to one worker loop; the fragment table is read-only and
// shared by a shard's workers.
#pragma once

#include <cstdint>
#include <vector>

#include "shoal/status.h"
#include "src/cluster/config.h"
#include "src/dist/coordinator.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/task.h"
#include "src/server/dist_micro.h"
#include "src/workload/tpcc/tpcc.h"

namespace shoal::server {

enum TpccFragment : uint32_t {
  kFragNewOrderStock = 0,    // workload::tpcc::new_order_stock
  kFragNewOrderHome = 1,     // workload::tpcc::new_order_home
  kFragPaymentCustomer = 2,  // workload::tpcc::payment_customer
  kFragPaymentHome = 3,      // workload::tpcc::payment_home
};

// The fragment table over a shard's TPC-C tables. REQUIRES: *tables outlives its use.
dist::FragmentTable make_tpcc_fragments(const workload::tpcc::Tables* tables);

// Which shard owns each warehouse (from the config's partitions).
class WarehouseMap {
 public:
  explicit WarehouseMap(const cluster::ClusterConfig& config);
  uint32_t warehouses() const { return static_cast<uint32_t>(shard_of_.size()) - 1; }
  // REQUIRES: w in [1, warehouses()].
  uint32_t shard_of(uint32_t w) const { return shard_of_[w]; }
  // The warehouses of `shard`: [first(shard), last(shard)].
  uint32_t first(uint32_t shard) const;
  uint32_t last(uint32_t shard) const;

 private:
  std::vector<uint32_t> shard_of_;  // by warehouse id; [0] unused
};

// What a worker's TPC-C terminals share.
struct TpccShardContext {
  workload::TpccWorkload* workload = nullptr;  // loaded with this shard's warehouses
  const WarehouseMap* map = nullptr;
  uint32_t shard = 0;
  dist::Coordinator* coordinator = nullptr;
  txn::Worker* local = nullptr;  // the worker's Txn for single-shard transactions
  rt::EventLoop* loop = nullptr;
  // A single-shard transaction retries its conflicts for this long before it gives up
  // ("retries exhausted"). The lock in its way may be a cross-shard transaction's, which holds
  // it across 2PC round trips: up to a participant's lease (2 s) on a starved machine. The
  // count bound of 1,000 it had gave up after about 1.3 s of backoff, before such a lock was
  // released (ServerCli.FollowerReadsOnEveryShard failed so under load).
  uint64_t local_retry_ns_max = 6'000'000'000;
  uint64_t local_runs = 0;
  // Called after each local commit, as txn::Worker::run calls its hook (a replicated shard:
  // its stream's StreamAppender::commit_hook). nullptr: none.
  txn::CommitHook commit_hook = nullptr;
  void* commit_hook_ctx = nullptr;
};

// Outcome of one terminal transaction.
struct TpccOutcome {
  Status status;           // Ok / UserAbort: completed business; else failed
  bool cross = false;      // ran across shards
  uint32_t conflicts = 0;  // local retries (a cross-shard run's are the coordinator's)
  uint32_t o_id = 0;       // a NewOrder that completed: its order's id (the journal's key)
};

// Runs `in` to completion (retrying conflicts), across shards when its rows are elsewhere.
rt::Task<TpccOutcome> run_tpcc_txn(TpccShardContext& ctx, dist::DistTxn& dtxn,
                                   workload::TpccInput& in);

}  // namespace shoal::server

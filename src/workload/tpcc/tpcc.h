// TPC-C (revision 5.11) as a workload::Workload: the nine tables (plus the CUSTOMER-by-name and
// ORDER-by-customer secondary indexes), the loader of clause 4.3.3, the five transactions in
// the standard mix (45/43/4/4/4), and the twelve consistency conditions of clause 3.3.2.
//
// Threads: load() and check() run with no transactions in flight; load() may use
// LoadOptions::workers threads internally (each loads different warehouses). One Client per
// runner thread; client i is bound to home warehouse i % W + 1 (and, for StockLevel, to a
// fixed district, as clause 2.8.1.2 asks of a terminal).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/workload/tpcc/tpcc_random.h"
#include "src/workload/tpcc/tpcc_schema.h"
#include "src/workload/tpcc/tpcc_txns.h"
#include "src/workload/workload.h"

namespace shoal::workload {

struct TpccOptions {
  uint32_t warehouses = 1;  // LoadOptions::warehouses overrides it when non-zero
  // Percentages of the mix, in TxnType order; must sum to 100 (clause 5.2.3 minimums).
  uint32_t mix_percent[tpcc::kTxnTypes] = {45, 43, 4, 4, 4};
  // Percent of NewOrders with an unused item id (rolled back), of remote order lines (when
  // W > 1), of remote Payment customers (when W > 1), of by-last-name customer selections.
  uint32_t invalid_item_percent = 1;
  uint32_t remote_item_percent = 1;
  uint32_t remote_payment_percent = 15;
  uint32_t by_last_name_percent = 60;
  // Warehouses [load_first_warehouse, load_last_warehouse] are loaded (with ITEM); 0 means
  // all. A shard of a partitioned cluster loads its own; `warehouses` stays the cluster's.
  uint32_t load_first_warehouse = 0;
  uint32_t load_last_warehouse = 0;
  // After the load, ITEM and the customer-by-name index become read-only tables
  // (TableBase::make_read_only): no transaction writes them, so their reads are not recorded
  // or validated, and a cross-shard fragment reading them stays pinned (participant.h F9).
  // TPC-C does not ask for that validation to be skipped; false keeps them ordinary tables, to
  // measure what the hint buys (`shoal bench tpcc --no-read-only-hint`, docs/RESULTS.md).
  bool read_only_hint = true;
};

// sum(H_AMOUNT) over the HISTORY rows of this engine that count for warehouses it does not
// hold: a shard of a partitioned cluster keeps a Payment's HISTORY row with the warehouse
// paid, so a customer paying another shard's warehouse needs these sums for its condition 10
// (and, were rows kept elsewhere, the paid warehouse's conditions 8 and 9).
struct ForeignPayments {
  std::unordered_map<uint64_t, int64_t> by_warehouse;  // key: H_W_ID
  std::unordered_map<uint64_t, int64_t> by_district;   // key: pack_wd(H_W_ID, H_D_ID)
  std::unordered_map<uint64_t, int64_t> by_customer;   // key: pack_wd(H_C_W_ID, H_C_D_ID, H_C_ID)
};
ForeignPayments foreign_payments(txn::Engine& engine);

// The consistency conditions over a quiescent engine loaded by TPC-C: one human-readable line
// per violation, empty when all hold. Condition 11 holds as stated only in the initial state:
// with after_load it is checked as stated (count(ORDER) - count(NEW-ORDER) = 2100 per district);
// otherwise in the form that Delivery preserves, count(ORDER) - count(NEW-ORDER) = 2100 +
// sum(C_DELIVERY_CNT) over the district's customers (each Delivery removes one NEW-ORDER row
// and counts one delivery for the order's customer). Also checks that the two secondary
// indexes agree with their tables.
// `foreign` adds other shards' payments of this engine's customers (may be nullptr).
std::vector<std::string> check_tpcc_conditions(txn::Engine& engine, bool after_load,
                                               const ForeignPayments* foreign = nullptr);

// One transaction's generated input: its type and the matching args.
struct TpccInput {
  tpcc::TxnType type = tpcc::kNewOrder;
  union {
    tpcc::NewOrderArgs new_order;
    tpcc::PaymentArgs payment;
    tpcc::OrderStatusArgs order_status;
    tpcc::DeliveryArgs delivery;
    tpcc::StockLevelArgs stock_level;
  };
  TpccInput() : new_order() {}
};

class TpccWorkload;

// One runner thread's terminal. Generates inputs by the specification's rules (clauses
// 2.4.1-2.8.1) into fixed buffers and runs them through its Worker.
class TpccClient final : public Client {
 public:
  // HISTORY keys are (history_source << 48) | (history_run << 32) | n: a server's terminals
  // pass the number of the load they run (a standing cluster keeps earlier loads' rows).
  // REQUIRES: history_source < 2^16, history_run < 2^16.
  TpccClient(TpccWorkload& workload, txn::Worker& worker, uint32_t worker_index, uint64_t seed,
             uint64_t history_source, uint32_t history_run = 0);
  Outcome run_one() override;
  // Runs one transaction of the given type (tests drive each type directly).
  Outcome run_type(tpcc::TxnType type);
  // Draws the next transaction of the mix and its input (run_one without running it).
  void make_input(TpccInput* in);
  // The input of a transaction of the given type.
  void make_input_of(tpcc::TxnType type, TpccInput* in);
  // Binds this terminal to home warehouse `w` (default: worker_index % W + 1) and StockLevel
  // district `d`. REQUIRES: w in [1, W], d in [1, 10].
  void bind_home(uint32_t w, uint32_t d);

  // Input generation, exposed for tests.
  void make_new_order(tpcc::NewOrderArgs* args);
  void make_payment(tpcc::PaymentArgs* args);
  void make_order_status(tpcc::OrderStatusArgs* args);
  void make_delivery(tpcc::DeliveryArgs* args);
  void make_stock_level(tpcc::StockLevelArgs* args);
  uint32_t home_warehouse() const { return home_w_; }

 private:
  tpcc::TxnType draw_type();  // by the mix
  tpcc::CustomerSelector make_customer_selector();
  uint32_t other_warehouse();
  uint64_t now_us();

  TpccWorkload& workload_;
  txn::Worker& worker_;
  Rng rng_;
  uint32_t warehouses_;
  uint32_t home_w_;
  uint32_t stock_level_d_;
  uint64_t history_source_;
  uint64_t history_seq_ = 0;
};

class TpccWorkload final : public Workload {
 public:
  explicit TpccWorkload(const TpccOptions& options);
  std::string name() const override { return "tpcc"; }
  std::vector<std::string> txn_types() const override;
  Status load(txn::Engine& engine, const LoadOptions& options,
              const std::function<void(double)>& progress) override;
  std::unique_ptr<Client> make_client(txn::Worker& worker, uint32_t worker_index,
                                      uint64_t seed) override;
  // Serves tables loaded elsewhere and replicated into `engine` (a follower promoted to
  // leader: docs/REPLICATION.md, "Failover"): finds them and derives the NURand constants from
  // options.seed exactly as load() did, and marks the read-only tables as load() does
  // (TpccOptions::read_only_hint). Corruption when a TPC-C table is missing.
  [[nodiscard]] Status attach(txn::Engine& engine, const LoadOptions& options);
  std::vector<std::string> check(txn::Engine& engine) override {
    return check_tpcc_conditions(engine, /*after_load=*/false);
  }

  const TpccOptions& options() const { return options_; }
  const tpcc::Tables& tables() const { return tables_; }
  const tpcc::NurandConstants& nurand() const { return nurand_; }
  uint32_t warehouses() const { return warehouses_; }

 private:
  TpccOptions options_;
  uint32_t warehouses_;
  tpcc::Tables tables_;
  tpcc::NurandConstants nurand_;
  // HISTORY key sources: 0 is the loader, each Client takes the next (keys stay unique even
  // when several Clients share a worker index over time).
  std::atomic<uint64_t> next_history_source_{1};
};

std::unique_ptr<Workload> make_tpcc_workload(const TpccOptions& options);

}  // namespace shoal::workload

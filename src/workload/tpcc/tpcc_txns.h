// The five TPC-C transactions (clauses 2.4-2.8) as txn::Procedure functions.
//
// Each procedure takes its complete input in an args struct generated outside the transaction
// (by the Client), so a conflict retry re-runs the same business transaction. Args and results
// are plain fixed-size structs: a transaction allocates nothing. Every read and write goes
// through the Txn, so OCC validates all of it (scans included, against phantoms).
//
// Return values: Ok commits; UserAbort is NewOrder's deliberate rollback on an unused item id;
// Aborted retries. A row that must exist by the schema's invariants but reads as NotFound can
// only be a concurrent writer's uncommitted insert or delete, which validation would reject:
// procedures turn it into Aborted so the Worker retries.
#pragma once

#include <cstdint>

#include "shoal/status.h"
#include "src/txn/engine.h"
#include "src/workload/tpcc/tpcc_schema.h"

namespace shoal::txn {
class SnapshotReader;  // src/txn/snapshot.h
}  // namespace shoal::txn

namespace shoal::workload::tpcc {

enum TxnType : uint32_t {
  kNewOrder = 0,
  kPayment = 1,
  kOrderStatus = 2,
  kDelivery = 3,
  kStockLevel = 4,
  kTxnTypes = 5,
};

// Selects a customer by id or, when by_last_name, by (C_LAST, midpoint of C_FIRST order).
struct CustomerSelector {
  bool by_last_name = false;
  uint32_t c_id = 0;      // when !by_last_name
  uint32_t last_num = 0;  // when by_last_name: C_LAST syllable number
};

struct NewOrderItem {
  uint32_t i_id;
  uint16_t supply_w_id;
  uint8_t quantity;
};

struct NewOrderArgs {
  const Tables* tables = nullptr;
  uint16_t w_id = 0;
  uint8_t d_id = 0;
  uint32_t c_id = 0;
  uint8_t ol_cnt = 0;
  uint8_t all_local = 1;
  uint64_t entry_d_us = 0;
  NewOrderItem items[kMaxOrderLines] = {};
};
struct NewOrderResult {
  uint32_t o_id = 0;
  int64_t total_cents = 0;  // sum(OL_AMOUNT) * (1 - C_DISCOUNT) * (1 + W_TAX + D_TAX)
  char brand_generic[kMaxOrderLines] = {};
};

struct PaymentArgs {
  const Tables* tables = nullptr;
  uint16_t w_id = 0;
  uint8_t d_id = 0;
  uint16_t c_w_id = 0;
  uint8_t c_d_id = 0;
  CustomerSelector customer;
  int64_t amount_cents = 0;
  uint64_t date_us = 0;
  uint64_t history_source = 0;  // HISTORY key = history_key(history_source, history_seq)
  uint64_t history_seq = 0;
};
struct PaymentResult {
  uint32_t c_id = 0;
  int64_t c_balance_cents = 0;
};

struct OrderStatusArgs {
  const Tables* tables = nullptr;
  uint16_t w_id = 0;
  uint8_t d_id = 0;
  CustomerSelector customer;
};
struct OrderStatusResult {
  uint32_t c_id = 0;
  int64_t c_balance_cents = 0;
  uint32_t o_id = 0;  // 0: the customer has no order
  uint8_t carrier_id = 0;
  uint8_t ol_cnt = 0;  // order lines returned
  struct Line {
    uint32_t i_id;
    uint16_t supply_w_id;
    uint8_t quantity;
    int64_t amount_cents;
    uint64_t delivery_d_us;
  } lines[kMaxOrderLines] = {};
};

struct DeliveryArgs {
  const Tables* tables = nullptr;
  uint16_t w_id = 0;
  uint8_t carrier_id = 0;
  uint64_t delivery_d_us = 0;
};
struct DeliveryResult {
  uint32_t delivered_o_id[kDistrictsPerWarehouse] = {};  // 0: district had no new order
  uint32_t skipped = 0;
};

struct StockLevelArgs {
  const Tables* tables = nullptr;
  uint16_t w_id = 0;
  uint8_t d_id = 0;
  int32_t threshold = 0;
};
struct StockLevelResult {
  uint32_t low_stock = 0;
};

// ---- Cross-shard pieces (warehouses partitioned over shards) ----
// NewOrder and Payment are the transactions that may touch a second warehouse. Across shards
// they run as fragments on the shard owning each row (src/dist: DistTxn::exec): the remote
// stock lines of a NewOrder, the remote customer of a Payment; the rest runs on the home shard
// with the remote results as input. Local transactions use the procedures below unchanged.
// Every struct here is trivially copyable and pointer-free (it crosses processes as bytes).

// What the home part of NewOrder needs of a stock line another shard updated.
struct RemoteStockLine {
  char dist_info[24];  // S_DIST_xx of the order's district
  uint8_t original;    // S_DATA contains "ORIGINAL"
  uint8_t pad[7];
};
struct StockFragmentArgs {
  uint16_t home_w_id = 0;  // the order's warehouse (S_REMOTE_CNT counts lines of others)
  uint8_t d_id = 0;
  uint8_t count = 0;  // <= kMaxOrderLines
  uint32_t pad = 0;
  NewOrderItem items[kMaxOrderLines] = {};
};
struct StockFragmentResult {
  RemoteStockLine lines[kMaxOrderLines] = {};
};
struct NewOrderHomeArgs {
  NewOrderArgs order;        // `tables` is ignored: the home shard uses its own
  uint32_t remote_mask = 0;  // bit n: order line n's stock was updated elsewhere, see remote[n]
  RemoteStockLine remote[kMaxOrderLines] = {};
};
// Payment's home part, with the customer its shard resolved.
struct PaymentHomeArgs {
  PaymentArgs payment;  // `tables` is ignored
  uint32_t c_id = 0;
};

// Updates the stock rows of `a.items` on this shard (reading ITEM for the invalid-item
// rollback: UserAbort) and returns what the home part needs of each, in order.
[[nodiscard]] Status new_order_stock(txn::Txn& txn, const Tables& t, const StockFragmentArgs& a,
                                     StockFragmentResult* r);
// NewOrder on its home shard, with the stock lines in `a.remote_mask` already done elsewhere.
[[nodiscard]] Status new_order_home(txn::Txn& txn, const Tables& t, const NewOrderHomeArgs& a,
                                    NewOrderResult* r);
// Payment's customer part on the customer's shard: select and balance update.
[[nodiscard]] Status payment_customer(txn::Txn& txn, const Tables& t, const PaymentArgs& a,
                                      PaymentResult* r);
// Payment's home part: warehouse and district YTD, and the HISTORY row (kept with the
// warehouse that was paid; its customer may live on another shard).
[[nodiscard]] Status payment_home(txn::Txn& txn, const Tables& t, const PaymentHomeArgs& a);

// The procedures (Procedure signature). `result` may be nullptr.
[[nodiscard]] Status new_order(txn::Txn& txn, const void* args, void* result);
[[nodiscard]] Status payment(txn::Txn& txn, const void* args, void* result);
[[nodiscard]] Status order_status(txn::Txn& txn, const void* args, void* result);
[[nodiscard]] Status delivery(txn::Txn& txn, const void* args, void* result);
[[nodiscard]] Status stock_level(txn::Txn& txn, const void* args, void* result);
// The two read-only transactions at a follower's snapshot (src/txn/snapshot.h): the same
// reads as above, through the reader. A row the schema guarantees but the snapshot lacks
// reads as Aborted (at a consistent snapshot it never happens:
// src/workload/tpcc/tpcc_follower_reads.h). REQUIRES: reader.open().
[[nodiscard]] Status order_status_at_snapshot(txn::SnapshotReader& reader,
                                              const OrderStatusArgs& args,
                                              OrderStatusResult* result);
[[nodiscard]] Status stock_level_at_snapshot(txn::SnapshotReader& reader,
                                             const StockLevelArgs& args, StockLevelResult* result);

// The procedure of each type (its args struct is the one named after it).
txn::Procedure procedure_of(TxnType type);

}  // namespace shoal::workload::tpcc

// TPC-C (revision 5.11) schema: the nine tables' rows, their key packing, and the table set.
//
// Rows are fixed-size, trivially copyable structs holding every column of the specification
// (clause 1.3): strings are char arrays of the column's maximum length, zero-padded and not
// necessarily NUL-terminated; money is int64 cents (exact sums for the consistency checks);
// rates (tax, discount) are int32 in units of 1/10000; dates are microseconds since the Unix
// epoch with 0 meaning null. Rows are read and written whole through the Txn.
//
// Keys: composite keys are packed so that word order is the order the transactions need.
// The common packing is [w:16][d:8][x:32][y:8] in one word, so ORDER, NEW-ORDER, ORDER-LINE and
// CUSTOMER are one-word keys and a district's rows form one contiguous range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "src/index/key.h"
#include "src/txn/engine.h"

namespace shoal::workload::tpcc {

// Scale constants of clause 1.2 / 4.3.
inline constexpr uint32_t kDistrictsPerWarehouse = 10;
inline constexpr uint32_t kCustomersPerDistrict = 3000;
inline constexpr uint32_t kItems = 100000;
inline constexpr uint32_t kInitialOrdersPerDistrict = 3000;
inline constexpr uint32_t kInitialNewOrdersPerDistrict = 900;
inline constexpr uint32_t kFirstUndeliveredOrderId = 2101;  // orders >= this start undelivered
inline constexpr uint32_t kMinOrderLines = 5;
inline constexpr uint32_t kMaxOrderLines = 15;
inline constexpr uint32_t kLastNames = 1000;       // syllable numbers 0..999
inline constexpr uint32_t kMaxWarehouses = 65535;  // 16 bits in the packed keys

// W_YTD and D_YTD live in rows of their own (YtdRow; vertical partitioning, clause 1.6): only
// Payment writes them, while every NewOrder reads W_TAX and D_TAX. In one row, a Payment that
// holds its warehouse locked across shards for a network round trip would stall every
// NewOrder of that warehouse meanwhile.
struct WarehouseRow {
  int32_t tax_bp;  // W_TAX in 1/10000
  uint16_t id;
  char name[10];
  char street_1[20];
  char street_2[20];
  char city[20];
  char state[2];
  char zip[9];
};

struct YtdRow {
  int64_t ytd_cents;  // W_YTD or D_YTD
};

struct DistrictRow {
  int32_t tax_bp;
  uint32_t next_o_id;
  uint16_t w_id;
  uint8_t id;
  char name[10];
  char street_1[20];
  char street_2[20];
  char city[20];
  char state[2];
  char zip[9];
};

struct CustomerRow {
  int64_t credit_lim_cents;
  int64_t balance_cents;
  int64_t ytd_payment_cents;
  uint64_t since_us;
  int32_t discount_bp;
  uint32_t payment_cnt;
  uint32_t delivery_cnt;
  uint32_t id;
  uint16_t w_id;
  uint8_t d_id;
  char first[16];
  char middle[2];
  char last[16];
  char street_1[20];
  char street_2[20];
  char city[20];
  char state[2];
  char zip[9];
  char phone[16];
  char credit[2];  // "GC" or "BC"
  char data[500];
};

struct HistoryRow {
  int64_t amount_cents;
  uint64_t date_us;
  uint32_t c_id;
  uint16_t c_w_id;
  uint16_t w_id;
  uint8_t c_d_id;
  uint8_t d_id;
  char data[24];
};

struct NewOrderRow {
  uint32_t o_id;
  uint16_t w_id;
  uint8_t d_id;
};

struct OrderRow {
  uint64_t entry_d_us;
  uint32_t id;
  uint32_t c_id;
  uint16_t w_id;
  uint8_t d_id;
  uint8_t carrier_id;  // 0 = null
  uint8_t ol_cnt;
  uint8_t all_local;
};

struct OrderLineRow {
  int64_t amount_cents;
  uint64_t delivery_d_us;  // 0 = null
  uint32_t o_id;
  uint32_t i_id;
  uint16_t w_id;
  uint16_t supply_w_id;
  uint8_t d_id;
  uint8_t number;
  uint8_t quantity;
  char dist_info[24];
};

struct ItemRow {
  int64_t price_cents;
  uint32_t id;
  uint32_t im_id;
  char name[24];
  char data[50];
};

struct StockRow {
  uint32_t i_id;
  uint16_t w_id;
  int16_t quantity;
  uint32_t ytd;
  uint32_t order_cnt;
  uint32_t remote_cnt;
  char dist[kDistrictsPerWarehouse][24];  // S_DIST_01 .. S_DIST_10
  char data[50];
};

// Values of the secondary indexes: the primary key's varying part.
struct CustomerNameValue {
  uint32_t c_id;
};
struct OrderCustomerValue {
  uint32_t o_id;
};

static_assert(std::is_trivially_copyable_v<CustomerRow> && std::is_trivially_copyable_v<StockRow>);

// [w:16][d:8][x:32][y:8]: district (x = y = 0), customer (x = c), order / new-order (x = o),
// order-line (x = o, y = ol).
constexpr uint64_t pack_wd(uint32_t w, uint32_t d, uint64_t x = 0, uint32_t y = 0) {
  return (uint64_t{w} << 48) | (uint64_t{d} << 40) | (x << 8) | y;
}
constexpr Key<1> warehouse_key(uint32_t w) {
  return key1(w);
}
constexpr Key<1> district_key(uint32_t w, uint32_t d) {
  return key1(pack_wd(w, d));
}
constexpr Key<1> customer_key(uint32_t w, uint32_t d, uint32_t c) {
  return key1(pack_wd(w, d, c));
}
constexpr Key<1> order_key(uint32_t w, uint32_t d, uint32_t o) {
  return key1(pack_wd(w, d, o));
}
constexpr Key<1> order_line_key(uint32_t w, uint32_t d, uint32_t o, uint32_t ol) {
  return key1(pack_wd(w, d, o, ol));
}
constexpr Key<1> item_key(uint32_t i) {
  return key1(i);
}
constexpr Key<1> stock_key(uint32_t w, uint32_t i) {
  return key1((uint64_t{w} << 48) | i);
}
// HISTORY has no primary key in the specification; ours is (source << 48 | sequence), where
// source 0 is the loader (sequence = packed w, d, c) and each Client has its own source.
constexpr Key<1> history_key(uint64_t source, uint64_t seq) {
  return key1((source << 48) | seq);
}
inline constexpr uint64_t kHistorySeqMask = (uint64_t{1} << 48) - 1;

// CUSTOMER by (W, D, C_LAST, C_FIRST): word 0 (w, d, last-name number), words 1-2 C_FIRST
// big-endian, word 3 the customer id (makes the key unique).
inline Key<4> customer_name_key(uint32_t w, uint32_t d, uint32_t last_num, const char* first,
                                uint32_t c) {
  Key<4> k;
  k.w[0] = pack_wd(w, d, last_num);
  pack_string(first, strnlen(first, 16), &k.w[1], 2);
  k.w[3] = c;
  return k;
}
// ORDER by (W, D, C, O): the latest order of a customer is one reverse scan.
constexpr Key<2> order_customer_key(uint32_t w, uint32_t d, uint32_t c, uint32_t o) {
  return Key<2>{{pack_wd(w, d, c), o}};
}

// The tables, created by the loader. Procedures reach them through their args.
struct Tables {
  txn::Table<1>* warehouse = nullptr;
  txn::Table<1>* warehouse_ytd = nullptr;  // W_YTD, by warehouse_key
  txn::Table<1>* district = nullptr;
  txn::Table<1>* district_ytd = nullptr;  // D_YTD, by district_key
  txn::Table<1>* customer = nullptr;
  txn::Table<4>* customer_name = nullptr;
  txn::Table<1>* history = nullptr;
  txn::Table<1>* new_order = nullptr;
  txn::Table<1>* order = nullptr;
  txn::Table<2>* order_customer = nullptr;
  txn::Table<1>* order_line = nullptr;
  txn::Table<1>* item = nullptr;
  txn::Table<1>* stock = nullptr;
};

// Table names as created in the engine.
inline constexpr const char* kWarehouseTable = "tpcc.warehouse";
inline constexpr const char* kDistrictTable = "tpcc.district";
inline constexpr const char* kWarehouseYtdTable = "tpcc.warehouse_ytd";
inline constexpr const char* kDistrictYtdTable = "tpcc.district_ytd";
inline constexpr const char* kCustomerTable = "tpcc.customer";
inline constexpr const char* kCustomerNameTable = "tpcc.customer_name";
inline constexpr const char* kHistoryTable = "tpcc.history";
inline constexpr const char* kNewOrderTable = "tpcc.new_order";
inline constexpr const char* kOrderTable = "tpcc.order";
inline constexpr const char* kOrderCustomerTable = "tpcc.order_customer";
inline constexpr const char* kOrderLineTable = "tpcc.order_line";
inline constexpr const char* kItemTable = "tpcc.item";
inline constexpr const char* kStockTable = "tpcc.stock";

// Finds the tables of an engine loaded by TPC-C; false if any is missing.
[[nodiscard]] bool find_tables(const txn::Engine& engine, Tables* out);

// Length of a zero-padded fixed string.
template <size_t N>
size_t fixed_len(const char (&s)[N]) {
  return strnlen(s, N);
}

}  // namespace shoal::workload::tpcc

#include "src/workload/tpcc/tpcc_follower_reads.h"

#include <fmt/format.h>

#include "src/workload/tpcc/tpcc_txns.h"

namespace shoal::workload::tpcc {
namespace {

// The largest order id of (w, d) in a table keyed by order_key (ORDER or NEW-ORDER); 0: none.
Status max_order_id(txn::SnapshotReader& reader, txn::Table<1>& table, uint32_t w, uint32_t d,
                    uint32_t* o_id) {
  *o_id = 0;
  return reader.rscan(table, order_key(w, d, ~uint32_t{0}), order_key(w, d, 0), 1,
                      [&](const Key<1>& key, const void*, uint32_t) {
                        *o_id = static_cast<uint32_t>((key.w[0] >> 8) & 0xffffffffu);
                        return false;
                      });
}

// A warehouse of this shard, uniformly among those present at the snapshot (0: none).
Status pick_warehouse(txn::SnapshotReader& reader, const Tables& t, Rng& rng, uint32_t* w_id) {
  uint32_t ids[64];
  uint32_t n = 0;
  SHOAL_TRY(reader.scan(*t.warehouse, warehouse_key(0), warehouse_key(kMaxWarehouses), 64,
                        [&](const Key<1>& key, const void*, uint32_t) {
                          ids[n++] = static_cast<uint32_t>(key.w[0]);
                          return true;
                        }));
  *w_id = n == 0 ? 0 : ids[rng.uniform(0, n - 1)];
  return Status::Ok();
}

Status check_district(txn::SnapshotReader& reader, const Tables& t, uint32_t w, uint32_t d,
                      uint32_t* next_o_id, txn::ReadRoundResult* out) {
  DistrictRow row;
  if (!reader.get(*t.district, district_key(w, d), &row).ok()) {
    out->torn = true;
    out->violation = fmt::format("district ({}, {}) missing", w, d);
    return Status::Ok();
  }
  *next_o_id = row.next_o_id;
  uint32_t max_o = 0, max_no = 0;
  SHOAL_TRY(max_order_id(reader, *t.order, w, d, &max_o));
  SHOAL_TRY(max_order_id(reader, *t.new_order, w, d, &max_no));
  if (max_o != row.next_o_id - 1 || (max_no != 0 && max_no != row.next_o_id - 1)) {
    out->torn = true;
    out->violation =
        fmt::format("district ({}, {}): D_NEXT_O_ID - 1 = {}, max(O_ID) = {}, max(NO_O_ID) = {}", w,
                    d, row.next_o_id - 1, max_o, max_no);
  }
  return Status::Ok();
}

void note_missing_row(const char* what, const Status& s, txn::ReadRoundResult* out) {
  out->torn = true;
  out->violation = fmt::format("{}: a required row is missing ({})", what, s.to_string());
}

}  // namespace

Status snapshot_read_round(txn::SnapshotReader& reader, const Tables& t, Rng& rng,
                           txn::ReadRoundResult* out) {
  *out = txn::ReadRoundResult{};
  uint32_t w = 0;
  SHOAL_TRY(pick_warehouse(reader, t, rng, &w));
  if (w == 0) return Status::InvalidArgument("follower reads: no TPC-C warehouse at the snapshot");
  const auto d = static_cast<uint8_t>(rng.uniform(1, kDistrictsPerWarehouse));
  uint32_t next_o_id = 0;
  SHOAL_TRY(check_district(reader, t, w, d, &next_o_id, out));
  if (out->torn) return Status::Ok();

  OrderStatusArgs os;
  os.tables = &t;
  os.w_id = static_cast<uint16_t>(w);
  os.d_id = d;
  os.customer.by_last_name = rng.uniform(1, 100) <= 60;  // clause 2.6.1.2
  os.customer.c_id = static_cast<uint32_t>(rng.uniform(1, kCustomersPerDistrict));
  os.customer.last_num = static_cast<uint32_t>(rng.uniform(0, kLastNames - 1));
  OrderStatusResult osr;
  Status s = order_status_at_snapshot(reader, os, &osr);
  ++out->transactions;
  if (s.is_aborted()) {
    note_missing_row("OrderStatus", s, out);
    return Status::Ok();
  }
  SHOAL_TRY(s);
  if (osr.o_id != 0) {
    OrderRow o;
    const bool found = reader.get(*t.order, order_key(w, d, osr.o_id), &o).ok();
    if (!found || osr.o_id >= next_o_id || osr.ol_cnt != o.ol_cnt) {
      out->torn = true;
      out->violation = fmt::format(
          "OrderStatus ({}, {}, customer {}): order {} of {} lines read with {} (D_NEXT_O_ID {})",
          w, d, osr.c_id, osr.o_id, found ? o.ol_cnt : 0, osr.ol_cnt, next_o_id);
      return Status::Ok();
    }
  }

  StockLevelArgs sl;
  sl.tables = &t;
  sl.w_id = static_cast<uint16_t>(w);
  sl.d_id = d;
  sl.threshold = static_cast<int32_t>(rng.uniform(10, 20));
  StockLevelResult slr;
  s = stock_level_at_snapshot(reader, sl, &slr);
  ++out->transactions;
  if (s.is_aborted()) {
    note_missing_row("StockLevel", s, out);
    return Status::Ok();
  }
  return s;
}

}  // namespace shoal::workload::tpcc

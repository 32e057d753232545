// The consistency conditions of clause 3.3.2 over a quiescent database, read with
// Table::for_each / peek (no transactions). One pass over HISTORY, then per district one pass
// over each of ORDER, NEW-ORDER, ORDER-LINE, CUSTOMER and the two secondary indexes.
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "src/workload/tpcc/tpcc.h"

namespace shoal::workload {

namespace {

using namespace tpcc;  // NOLINT: the checker speaks the schema's vocabulary throughout

// Collects violation lines, at most kMaxPerCondition per condition (then a count).
class Failures {
 public:
  static constexpr uint32_t kMaxPerCondition = 10;
  static constexpr uint32_t kSlots = 14;  // conditions 1..12, 13 = secondary indexes

  void add(uint32_t cond, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    if (++counts_[cond] > kMaxPerCondition) return;
    char buf[256];
    int n = cond == 13 ? std::snprintf(buf, sizeof(buf), "index ")
                       : std::snprintf(buf, sizeof(buf), "3.3.2.%u ", cond);
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf + n, sizeof(buf) - n, fmt, args);
    va_end(args);
    lines_.emplace_back(buf);
  }
  std::vector<std::string> finish() {
    for (uint32_t cond = 1; cond < kSlots; ++cond) {
      if (counts_[cond] > kMaxPerCondition) {
        char label[16] = "index";
        if (cond != 13) std::snprintf(label, sizeof(label), "3.3.2.%u", cond);
        char buf[96];
        std::snprintf(buf, sizeof(buf), "%s: %llu more violations not listed", label,
                      static_cast<unsigned long long>(counts_[cond] - kMaxPerCondition));
        lines_.emplace_back(buf);
      }
    }
    return std::move(lines_);
  }

 private:
  uint64_t counts_[kSlots] = {};
  std::vector<std::string> lines_;
};

template <typename Row>
Row as_row(const void* value, uint32_t size) {
  SHOAL_ASSERT(size == sizeof(Row), "row of %u bytes, expected %zu", size, sizeof(Row));
  Row row;
  std::memcpy(&row, value, sizeof(Row));
  return row;
}

// sum(H_AMOUNT) by warehouse, by district, and by customer (keys: pack_wd).
struct HistorySums {
  std::unordered_map<uint64_t, int64_t> by_warehouse;  // H_W_ID
  std::unordered_map<uint64_t, int64_t> by_district;   // (H_W_ID, H_D_ID)
  std::unordered_map<uint64_t, int64_t> by_customer;   // (H_C_W_ID, H_C_D_ID, H_C_ID)
};

HistorySums sum_history(const Tables& t, const ForeignPayments* foreign) {
  HistorySums s;
  if (foreign != nullptr) {
    s.by_warehouse = foreign->by_warehouse;
    s.by_district = foreign->by_district;
    s.by_customer = foreign->by_customer;
  }
  t.history->for_each(Key<1>::min(), Key<1>::max(),
                      [&](const Key<1>&, const void* v, uint32_t size) {
                        const auto h = as_row<HistoryRow>(v, size);
                        s.by_warehouse[h.w_id] += h.amount_cents;
                        s.by_district[pack_wd(h.w_id, h.d_id)] += h.amount_cents;
                        s.by_customer[pack_wd(h.c_w_id, h.c_d_id, h.c_id)] += h.amount_cents;
                        return true;
                      });
  return s;
}

int64_t lookup(const std::unordered_map<uint64_t, int64_t>& m, uint64_t key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

struct OrderInfo {
  bool present = false;
  bool has_new_order = false;
  uint8_t carrier_id = 0;
  uint8_t ol_cnt = 0;
  uint32_t c_id = 0;
  uint32_t lines = 0;
};

// One district's aggregates, filled pass by pass.
struct DistrictScan {
  uint32_t w = 0;
  uint32_t d = 0;
  DistrictRow row{};
  int64_t ytd_cents = 0;                         // D_YTD
  std::vector<OrderInfo> orders;                 // by O_ID
  std::vector<int64_t> delivered_cents;          // by C_ID: sum(OL_AMOUNT) of delivered lines
  std::vector<std::array<char, 32>> cust_names;  // by C_ID: C_LAST, C_FIRST (index check)
  uint64_t order_count = 0, max_o_id = 0, sum_ol_cnt = 0;
  uint64_t new_order_count = 0, min_no_id = 0, max_no_id = 0;
  uint64_t order_line_count = 0, customer_count = 0, delivery_cnt_sum = 0;
};

OrderInfo* order_at(DistrictScan& s, uint32_t o_id) {
  if (o_id >= s.orders.size()) s.orders.resize(o_id + 1);
  return &s.orders[o_id];
}

void scan_orders(const Tables& t, DistrictScan& s, Failures& f) {
  t.order->for_each(order_key(s.w, s.d, 0), order_key(s.w, s.d, ~uint32_t{0}),
                    [&](const Key<1>&, const void* v, uint32_t size) {
                      const auto o = as_row<OrderRow>(v, size);
                      OrderInfo* info = order_at(s, o.id);
                      info->present = true;
                      info->carrier_id = o.carrier_id;
                      info->ol_cnt = o.ol_cnt;
                      info->c_id = o.c_id;
                      ++s.order_count;
                      s.max_o_id = std::max<uint64_t>(s.max_o_id, o.id);
                      s.sum_ol_cnt += o.ol_cnt;
                      return true;
                    });
  t.new_order->for_each(
      order_key(s.w, s.d, 0), order_key(s.w, s.d, ~uint32_t{0}),
      [&](const Key<1>&, const void* v, uint32_t size) {
        const auto no = as_row<NewOrderRow>(v, size);
        OrderInfo* info = order_at(s, no.o_id);
        info->has_new_order = true;
        if (!info->present) {
          f.add(5, "(district %u/%u): NEW-ORDER %u has no ORDER row", s.w, s.d, no.o_id);
        }
        s.min_no_id = s.new_order_count == 0 ? no.o_id : std::min<uint64_t>(s.min_no_id, no.o_id);
        s.max_no_id = std::max<uint64_t>(s.max_no_id, no.o_id);
        ++s.new_order_count;
        return true;
      });
}

void scan_order_lines(const Tables& t, DistrictScan& s, Failures& f) {
  s.delivered_cents.assign(kCustomersPerDistrict + 1, 0);
  t.order_line->for_each(
      order_line_key(s.w, s.d, 0, 0), order_line_key(s.w, s.d, ~uint32_t{0}, 0xff),
      [&](const Key<1>&, const void* v, uint32_t size) {
        const auto ol = as_row<OrderLineRow>(v, size);
        ++s.order_line_count;
        OrderInfo* o = order_at(s, ol.o_id);
        ++o->lines;
        if (!o->present) {
          f.add(6, "(district %u/%u): ORDER-LINE %u/%u has no ORDER row", s.w, s.d, ol.o_id,
                ol.number);
          return true;
        }
        if ((ol.delivery_d_us == 0) != (o->carrier_id == 0)) {
          f.add(7, "(order %u/%u/%u line %u): OL_DELIVERY_D %s but O_CARRIER_ID=%u", s.w, s.d,
                ol.o_id, ol.number, ol.delivery_d_us == 0 ? "null" : "set", o->carrier_id);
        }
        if (ol.delivery_d_us != 0) {
          if (o->c_id >= s.delivered_cents.size()) s.delivered_cents.resize(o->c_id + 1, 0);
          s.delivered_cents[o->c_id] += ol.amount_cents;
        }
        return true;
      });
}

void check_orders(DistrictScan& s, Failures& f) {
  const uint64_t next_minus_1 = s.row.next_o_id - 1;
  if (next_minus_1 != s.max_o_id) {
    f.add(2, "(district %u/%u): D_NEXT_O_ID-1=%llu but max(O_ID)=%llu", s.w, s.d,
          static_cast<unsigned long long>(next_minus_1),
          static_cast<unsigned long long>(s.max_o_id));
  }
  if (s.new_order_count > 0 && next_minus_1 != s.max_no_id) {
    f.add(2, "(district %u/%u): D_NEXT_O_ID-1=%llu but max(NO_O_ID)=%llu", s.w, s.d,
          static_cast<unsigned long long>(next_minus_1),
          static_cast<unsigned long long>(s.max_no_id));
  }
  if (s.new_order_count > 0 && s.max_no_id - s.min_no_id + 1 != s.new_order_count) {
    f.add(3, "(district %u/%u): max(NO_O_ID)-min(NO_O_ID)+1=%llu but %llu NEW-ORDER rows", s.w, s.d,
          static_cast<unsigned long long>(s.max_no_id - s.min_no_id + 1),
          static_cast<unsigned long long>(s.new_order_count));
  }
  if (s.sum_ol_cnt != s.order_line_count) {
    f.add(4, "(district %u/%u): sum(O_OL_CNT)=%llu but %llu ORDER-LINE rows", s.w, s.d,
          static_cast<unsigned long long>(s.sum_ol_cnt),
          static_cast<unsigned long long>(s.order_line_count));
  }
  for (uint32_t o = 0; o < s.orders.size(); ++o) {
    const OrderInfo& info = s.orders[o];
    if (!info.present) continue;
    if ((info.carrier_id == 0) != info.has_new_order) {
      f.add(5, "(order %u/%u/%u): O_CARRIER_ID=%u but NEW-ORDER row %s", s.w, s.d, o,
            info.carrier_id, info.has_new_order ? "exists" : "missing");
    }
    if (info.ol_cnt != info.lines) {
      f.add(6, "(order %u/%u/%u): O_OL_CNT=%u but %u ORDER-LINE rows", s.w, s.d, o, info.ol_cnt,
            info.lines);
    }
  }
}

void check_customers(const Tables& t, DistrictScan& s, const HistorySums& h, Failures& f) {
  s.cust_names.assign(kCustomersPerDistrict + 1, {});
  t.customer->for_each(
      customer_key(s.w, s.d, 0), customer_key(s.w, s.d, ~uint32_t{0}),
      [&](const Key<1>&, const void* v, uint32_t size) {
        const auto c = as_row<CustomerRow>(v, size);
        ++s.customer_count;
        s.delivery_cnt_sum += c.delivery_cnt;
        const int64_t delivered = c.id < s.delivered_cents.size() ? s.delivered_cents[c.id] : 0;
        const int64_t paid = lookup(h.by_customer, pack_wd(s.w, s.d, c.id));
        if (c.balance_cents != delivered - paid) {
          f.add(10, "(customer %u/%u/%u): C_BALANCE=%lld but sum(OL_AMOUNT)-sum(H_AMOUNT)=%lld",
                s.w, s.d, c.id, static_cast<long long>(c.balance_cents),
                static_cast<long long>(delivered - paid));
        }
        if (c.balance_cents + c.ytd_payment_cents != delivered) {
          f.add(12, "(customer %u/%u/%u): C_BALANCE+C_YTD_PAYMENT=%lld but sum(OL_AMOUNT)=%lld",
                s.w, s.d, c.id, static_cast<long long>(c.balance_cents + c.ytd_payment_cents),
                static_cast<long long>(delivered));
        }
        if (c.id < s.cust_names.size()) {
          std::memcpy(s.cust_names[c.id].data(), c.last, 16);
          std::memcpy(s.cust_names[c.id].data() + 16, c.first, 16);
        }
        return true;
      });
}

void check_condition_9_11(DistrictScan& s, const HistorySums& h, bool after_load, Failures& f) {
  const int64_t paid = lookup(h.by_district, pack_wd(s.w, s.d));
  if (s.ytd_cents != paid) {
    f.add(9, "(district %u/%u): D_YTD=%lld but sum(H_AMOUNT)=%lld", s.w, s.d,
          static_cast<long long>(s.ytd_cents), static_cast<long long>(paid));
  }
  const int64_t delivered_orders =
      static_cast<int64_t>(s.order_count) - static_cast<int64_t>(s.new_order_count);
  const int64_t expected =
      kFirstUndeliveredOrderId - 1 + (after_load ? 0 : static_cast<int64_t>(s.delivery_cnt_sum));
  if (delivered_orders != expected) {
    f.add(11, "(district %u/%u): count(ORDER)-count(NEW-ORDER)=%lld but expected %lld%s", s.w, s.d,
          static_cast<long long>(delivered_orders), static_cast<long long>(expected),
          after_load ? "" : " (2100 + sum(C_DELIVERY_CNT))");
  }
}

// The secondary indexes must hold exactly one entry per row, with the row's key columns.
void check_indexes(const Tables& t, DistrictScan& s, Failures& f) {
  uint64_t names = 0;
  Key<4> lo, hi;
  lo.w = {pack_wd(s.w, s.d, 0), 0, 0, 0};
  hi.w = {pack_wd(s.w, s.d, kLastNames - 1), ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
  t.customer_name->for_each(lo, hi, [&](const Key<4>& k, const void*, uint32_t) {
    ++names;
    const uint32_t c = static_cast<uint32_t>(k.w[3]);
    const uint32_t last_num = static_cast<uint32_t>((k.w[0] >> 8) & 0xffffffffu);
    char expect_last[kLastNameMax];
    last_name(last_num, expect_last);
    const bool ok = c < s.cust_names.size() &&
                    std::memcmp(s.cust_names[c].data(), expect_last, 16) == 0 &&
                    customer_name_key(s.w, s.d, last_num, s.cust_names[c].data() + 16, c) == k;
    if (!ok) f.add(13, "(district %u/%u): customer-name entry for C_ID %u is stale", s.w, s.d, c);
    return true;
  });
  if (names != s.customer_count) {
    f.add(13, "(district %u/%u): %llu customer-name entries for %llu customers", s.w, s.d,
          static_cast<unsigned long long>(names),
          static_cast<unsigned long long>(s.customer_count));
  }
  uint64_t entries = 0;
  t.order_customer->for_each(
      order_customer_key(s.w, s.d, 0, 0), order_customer_key(s.w, s.d, ~uint32_t{0}, ~uint32_t{0}),
      [&](const Key<2>& k, const void*, uint32_t) {
        ++entries;
        const uint32_t c = static_cast<uint32_t>((k.w[0] >> 8) & 0xffffffffu);
        const uint32_t o = static_cast<uint32_t>(k.w[1]);
        if (o >= s.orders.size() || !s.orders[o].present || s.orders[o].c_id != c) {
          f.add(13, "(district %u/%u): order-customer entry (%u, %u) has no such order", s.w, s.d,
                c, o);
        }
        return true;
      });
  if (entries != s.order_count) {
    f.add(13, "(district %u/%u): %llu order-customer entries for %llu orders", s.w, s.d,
          static_cast<unsigned long long>(entries), static_cast<unsigned long long>(s.order_count));
  }
}

// Conditions 2-7 and 9-12 for one district; returns D_YTD for condition 1.
int64_t check_district(const Tables& t, uint32_t w, uint32_t d, const HistorySums& h,
                       bool after_load, Failures& f) {
  DistrictScan s;
  s.w = w;
  s.d = d;
  if (!t.district->peek(district_key(w, d), &s.row, sizeof(s.row)).ok()) {
    f.add(1, "(district %u/%u): DISTRICT row missing", w, d);
    return 0;
  }
  YtdRow ytd{};
  if (!t.district_ytd->peek(district_key(w, d), &ytd, sizeof(ytd)).ok()) {
    f.add(1, "(district %u/%u): D_YTD row missing", w, d);
    return 0;
  }
  s.ytd_cents = ytd.ytd_cents;
  s.orders.reserve(s.row.next_o_id + 1);
  scan_orders(t, s, f);
  scan_order_lines(t, s, f);
  check_orders(s, f);
  check_customers(t, s, h, f);
  check_condition_9_11(s, h, after_load, f);
  check_indexes(t, s, f);
  return s.ytd_cents;
}

}  // namespace

ForeignPayments foreign_payments(txn::Engine& engine) {
  ForeignPayments out;
  Tables t;
  if (!find_tables(engine, &t)) return out;
  std::unordered_map<uint32_t, bool> local;  // warehouse id -> present here
  auto is_local = [&](uint32_t w) {
    auto [it, fresh] = local.try_emplace(w, false);
    if (fresh) {
      WarehouseRow row;
      it->second = t.warehouse->peek(warehouse_key(w), &row, sizeof(row)).ok();
    }
    return it->second;
  };
  t.history->for_each(Key<1>::min(), Key<1>::max(),
                      [&](const Key<1>&, const void* v, uint32_t size) {
                        const auto h = as_row<HistoryRow>(v, size);
                        if (!is_local(h.w_id)) {
                          out.by_warehouse[h.w_id] += h.amount_cents;
                          out.by_district[pack_wd(h.w_id, h.d_id)] += h.amount_cents;
                        }
                        if (!is_local(h.c_w_id)) {
                          out.by_customer[pack_wd(h.c_w_id, h.c_d_id, h.c_id)] += h.amount_cents;
                        }
                        return true;
                      });
  return out;
}

std::vector<std::string> check_tpcc_conditions(txn::Engine& engine, bool after_load,
                                               const ForeignPayments* foreign) {
  Tables t;
  if (!find_tables(engine, &t)) return {"tpcc: the engine does not hold the TPC-C tables"};
  Failures f;
  const HistorySums h = sum_history(t, foreign);
  std::vector<WarehouseRow> warehouses;
  t.warehouse->for_each(Key<1>::min(), Key<1>::max(),
                        [&](const Key<1>&, const void* v, uint32_t size) {
                          warehouses.push_back(as_row<WarehouseRow>(v, size));
                          return true;
                        });
  for (const WarehouseRow& wr : warehouses) {
    int64_t d_ytd_sum = 0;
    for (uint32_t d = 1; d <= kDistrictsPerWarehouse; ++d) {
      d_ytd_sum += check_district(t, wr.id, d, h, after_load, f);
    }
    YtdRow w_ytd{};
    if (!t.warehouse_ytd->peek(warehouse_key(wr.id), &w_ytd, sizeof(w_ytd)).ok()) {
      f.add(1, "(warehouse %u): W_YTD row missing", unsigned{wr.id});
      continue;
    }
    if (w_ytd.ytd_cents != d_ytd_sum) {
      f.add(1, "(warehouse %u): W_YTD=%lld but sum(D_YTD)=%lld", unsigned{wr.id},
            static_cast<long long>(w_ytd.ytd_cents), static_cast<long long>(d_ytd_sum));
    }
    const int64_t paid = lookup(h.by_warehouse, wr.id);
    if (w_ytd.ytd_cents != paid) {
      f.add(8, "(warehouse %u): W_YTD=%lld but sum(H_AMOUNT)=%lld", unsigned{wr.id},
            static_cast<long long>(w_ytd.ytd_cents), static_cast<long long>(paid));
    }
  }
  if (warehouses.empty()) f.add(1, "no WAREHOUSE rows");
  return f.finish();
}

}  // namespace shoal::workload

#include "src/workload/tpcc/tpcc_txns.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "src/txn/snapshot.h"
#include "src/workload/tpcc/tpcc_random.h"

namespace shoal::workload::tpcc {

namespace {

using txn::Txn;

// A row the schema guarantees (e.g. the customer of an order) reads as NotFound only when a
// concurrent transaction's uncommitted insert or delete is in the way; validation would fail,
// so retry now rather than surface NotFound to the Worker.
inline Status must_exist(Status s) {
  if (s.is_not_found()) [[unlikely]]
    return Status::Aborted();
  return s;
}

// NewOrder's keys come from D_NEXT_O_ID, so an insert meeting an existing key means our read of
// the district is already stale (a concurrent NewOrder committed that id): retry.
inline Status must_be_new(Status s) {
  if (s.code() == Code::kAlreadyExists) [[unlikely]]
    return Status::Aborted();
  return s;
}

// Resolves a CustomerSelector to a customer id (clause 2.5.2.2: by last name, the row at
// position ceil(n / 2) of the matching customers sorted by C_FIRST).
// Reader: a Txn, or a SnapshotReader on a follower (the same read calls).
template <typename Reader>
Status resolve_customer(Reader& txn, const Tables& t, uint32_t w, uint32_t d,
                        const CustomerSelector& sel, uint32_t* c_id) {
  if (!sel.by_last_name) {
    *c_id = sel.c_id;
    return Status::Ok();
  }
  Key<4> lo;
  lo.w = {pack_wd(w, d, sel.last_num), 0, 0, 0};
  Key<4> hi;
  hi.w = {pack_wd(w, d, sel.last_num), ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
  uint32_t ids[kCustomersPerDistrict];
  uint32_t n = 0;
  SHOAL_TRY(txn.scan(*t.customer_name, lo, hi, kCustomersPerDistrict,
                     [&](const Key<4>& key, const void*, uint32_t) {
                       ids[n++] = static_cast<uint32_t>(key.w[3]);
                       return n < kCustomersPerDistrict;
                     }));
  // Every last name exists in every district from the load on (customers 1..1000).
  if (n == 0) return Status::Aborted();
  *c_id = ids[(n - 1) / 2];
  return Status::Ok();
}

// W_YTD or D_YTD += cents (their rows of their own: tpcc_schema.h).
Status add_ytd(Txn& txn, txn::Table<1>& table, const Key<1>& key, int64_t cents) {
  YtdRow ytd;
  SHOAL_TRY(must_exist(txn.get(table, key, &ytd)));
  ytd.ytd_cents += cents;
  return must_exist(txn.put(table, key, ytd));
}

// Applies clause 2.4.2.2's stock update for one order line.
void update_stock(StockRow* s, uint32_t quantity, bool remote) {
  if (s->quantity >= static_cast<int32_t>(quantity) + 10) {
    s->quantity = static_cast<int16_t>(s->quantity - quantity);
  } else {
    s->quantity = static_cast<int16_t>(s->quantity - quantity + 91);
  }
  s->ytd += quantity;
  s->order_cnt += 1;
  if (remote) s->remote_cnt += 1;
}

}  // namespace

namespace {

// NewOrder's body; order lines in remote_mask take their stock outcome from remote[n].
Status new_order_core(Txn& txn, const Tables& t, const NewOrderArgs& a, NewOrderResult& r,
                      uint32_t remote_mask, const RemoteStockLine* remote) {
  WarehouseRow w;
  SHOAL_TRY(must_exist(txn.get(*t.warehouse, warehouse_key(a.w_id), &w)));
  DistrictRow d;
  const Key<1> dk = district_key(a.w_id, a.d_id);
  SHOAL_TRY(must_exist(txn.get(*t.district, dk, &d)));
  const uint32_t o_id = d.next_o_id;
  d.next_o_id += 1;
  SHOAL_TRY(must_exist(txn.put(*t.district, dk, d)));
  CustomerRow c;
  SHOAL_TRY(must_exist(txn.get(*t.customer, customer_key(a.w_id, a.d_id, a.c_id), &c)));

  const OrderRow order{a.entry_d_us, o_id, a.c_id, a.w_id, a.d_id, 0, a.ol_cnt, a.all_local};
  SHOAL_TRY(must_be_new(txn.insert(*t.order, order_key(a.w_id, a.d_id, o_id), order)));
  SHOAL_TRY(
      must_be_new(txn.insert(*t.order_customer, order_customer_key(a.w_id, a.d_id, a.c_id, o_id),
                             OrderCustomerValue{o_id})));
  SHOAL_TRY(must_be_new(txn.insert(*t.new_order, order_key(a.w_id, a.d_id, o_id),
                                   NewOrderRow{o_id, a.w_id, a.d_id})));

  int64_t sum_cents = 0;
  for (uint32_t n = 0; n < a.ol_cnt; ++n) {
    const NewOrderItem& in = a.items[n];
    ItemRow item;
    const Status is = txn.get(*t.item, item_key(in.i_id), &item);
    // The unused item id: the specification's rollback after the failed item look-up.
    if (is.is_not_found()) return Status::UserAbort();
    SHOAL_TRY(is);
    OrderLineRow ol;
    bool stock_original = false;
    if ((remote_mask >> n) & 1) {
      std::memcpy(ol.dist_info, remote[n].dist_info, sizeof(ol.dist_info));
      stock_original = remote[n].original != 0;
    } else {
      StockRow s;
      const Key<1> sk = stock_key(in.supply_w_id, in.i_id);
      SHOAL_TRY(must_exist(txn.get(*t.stock, sk, &s)));
      update_stock(&s, in.quantity, in.supply_w_id != a.w_id);
      SHOAL_TRY(must_exist(txn.put(*t.stock, sk, s)));
      std::memcpy(ol.dist_info, s.dist[a.d_id - 1], sizeof(ol.dist_info));
      stock_original = has_original(s.data, sizeof(s.data));
    }
    ol.amount_cents = static_cast<int64_t>(in.quantity) * item.price_cents;
    ol.delivery_d_us = 0;
    ol.o_id = o_id;
    ol.i_id = in.i_id;
    ol.w_id = a.w_id;
    ol.supply_w_id = in.supply_w_id;
    ol.d_id = a.d_id;
    ol.number = static_cast<uint8_t>(n + 1);
    ol.quantity = in.quantity;
    SHOAL_TRY(
        must_be_new(txn.insert(*t.order_line, order_line_key(a.w_id, a.d_id, o_id, n + 1), ol)));
    sum_cents += ol.amount_cents;
    const bool original = has_original(item.data, sizeof(item.data)) && stock_original;
    r.brand_generic[n] = original ? 'B' : 'G';
  }
  r.o_id = o_id;
  // Output only: a double is exact enough for display (clause 2.4.3.3).
  r.total_cents =
      static_cast<int64_t>(static_cast<double>(sum_cents) * (1.0 - c.discount_bp / 10000.0) *
                           (1.0 + (w.tax_bp + d.tax_bp) / 10000.0));
  return Status::Ok();
}

}  // namespace

Status new_order(Txn& txn, const void* args_ptr, void* result_ptr) {
  const auto& a = *static_cast<const NewOrderArgs*>(args_ptr);
  NewOrderResult scratch_result;
  auto& r = result_ptr != nullptr ? *static_cast<NewOrderResult*>(result_ptr) : scratch_result;
  return new_order_core(txn, *a.tables, a, r, 0, nullptr);
}

Status new_order_home(Txn& txn, const Tables& t, const NewOrderHomeArgs& a, NewOrderResult* r) {
  if (a.order.ol_cnt > kMaxOrderLines || a.order.d_id < 1 ||
      a.order.d_id > kDistrictsPerWarehouse) {
    return Status::InvalidArgument("new_order_home: order out of range");
  }
  return new_order_core(txn, t, a.order, *r, a.remote_mask, a.remote);
}

Status new_order_stock(Txn& txn, const Tables& t, const StockFragmentArgs& a,
                       StockFragmentResult* r) {
  if (a.count > kMaxOrderLines || a.d_id < 1 || a.d_id > kDistrictsPerWarehouse) {
    return Status::InvalidArgument("new_order_stock: lines out of range");
  }
  for (uint32_t n = 0; n < a.count; ++n) {
    const NewOrderItem& in = a.items[n];
    ItemRow item;
    const Status is = txn.get(*t.item, item_key(in.i_id), &item);
    if (is.is_not_found()) return Status::UserAbort();  // the unused item id, as at home
    SHOAL_TRY(is);
    StockRow s;
    const Key<1> sk = stock_key(in.supply_w_id, in.i_id);
    SHOAL_TRY(must_exist(txn.get(*t.stock, sk, &s)));
    update_stock(&s, in.quantity, in.supply_w_id != a.home_w_id);
    SHOAL_TRY(must_exist(txn.put(*t.stock, sk, s)));
    RemoteStockLine& line = r->lines[n];
    std::memcpy(line.dist_info, s.dist[a.d_id - 1], sizeof(line.dist_info));
    line.original = has_original(s.data, sizeof(s.data)) ? 1 : 0;
  }
  return Status::Ok();
}

namespace {

// C_DATA for a bad-credit customer: the payment's ids and amount prepended, cut at 500.
void prepend_payment_data(CustomerRow* c, const PaymentArgs& a, uint32_t c_id) {
  char head[64];
  const int n = std::snprintf(head, sizeof(head), "%u %u %u %u %u %lld.%02lld ", c_id,
                              unsigned{a.c_d_id}, unsigned{a.c_w_id}, unsigned{a.d_id},
                              unsigned{a.w_id}, static_cast<long long>(a.amount_cents / 100),
                              static_cast<long long>(a.amount_cents % 100));
  const size_t head_len = static_cast<size_t>(std::max(n, 0));
  const size_t keep = sizeof(c->data) - head_len;
  std::memmove(c->data + head_len, c->data, keep);
  std::memcpy(c->data, head, head_len);
}

}  // namespace

Status payment_customer(Txn& txn, const Tables& t, const PaymentArgs& a, PaymentResult* r) {
  if (a.c_d_id < 1 || a.c_d_id > kDistrictsPerWarehouse) {
    return Status::InvalidArgument("payment_customer: district out of range");
  }
  uint32_t c_id = 0;
  SHOAL_TRY(resolve_customer(txn, t, a.c_w_id, a.c_d_id, a.customer, &c_id));
  CustomerRow c;
  const Key<1> ck = customer_key(a.c_w_id, a.c_d_id, c_id);
  SHOAL_TRY(must_exist(txn.get(*t.customer, ck, &c)));
  c.balance_cents -= a.amount_cents;
  c.ytd_payment_cents += a.amount_cents;
  c.payment_cnt += 1;
  if (c.credit[0] == 'B' && c.credit[1] == 'C') prepend_payment_data(&c, a, c_id);
  SHOAL_TRY(must_exist(txn.put(*t.customer, ck, c)));
  r->c_id = c_id;
  r->c_balance_cents = c.balance_cents;
  return Status::Ok();
}

Status payment_home(Txn& txn, const Tables& t, const PaymentHomeArgs& args) {
  const PaymentArgs& a = args.payment;
  if (a.d_id < 1 || a.d_id > kDistrictsPerWarehouse) {
    return Status::InvalidArgument("payment_home: district out of range");
  }
  WarehouseRow w;
  const Key<1> wk = warehouse_key(a.w_id);
  SHOAL_TRY(must_exist(txn.get(*t.warehouse, wk, &w)));
  SHOAL_TRY(add_ytd(txn, *t.warehouse_ytd, wk, a.amount_cents));
  DistrictRow d;
  const Key<1> dk = district_key(a.w_id, a.d_id);
  SHOAL_TRY(must_exist(txn.get(*t.district, dk, &d)));
  SHOAL_TRY(add_ytd(txn, *t.district_ytd, dk, a.amount_cents));

  HistoryRow h;
  h.amount_cents = a.amount_cents;
  h.date_us = a.date_us;
  h.c_id = args.c_id;
  h.c_w_id = a.c_w_id;
  h.w_id = a.w_id;
  h.c_d_id = a.c_d_id;
  h.d_id = a.d_id;
  // H_DATA = W_NAME, four spaces, D_NAME (clause 2.5.2.2).
  std::memset(h.data, 0, sizeof(h.data));
  const size_t wn = fixed_len(w.name);
  std::memcpy(h.data, w.name, wn);
  std::memcpy(h.data + wn, "    ", 4);
  std::memcpy(h.data + wn + 4, d.name, fixed_len(d.name));
  return txn.insert(*t.history, history_key(a.history_source, a.history_seq), h);
}

Status payment(Txn& txn, const void* args_ptr, void* result_ptr) {
  const auto& a = *static_cast<const PaymentArgs*>(args_ptr);
  PaymentResult r;
  SHOAL_TRY(payment_customer(txn, *a.tables, a, &r));
  PaymentHomeArgs home;
  home.payment = a;
  home.c_id = r.c_id;
  SHOAL_TRY(payment_home(txn, *a.tables, home));
  if (result_ptr != nullptr) *static_cast<PaymentResult*>(result_ptr) = r;
  return Status::Ok();
}

namespace {

// Clause 2.6.2.2, for a Txn or a SnapshotReader.
template <typename Reader>
Status order_status_with(Reader& txn, const OrderStatusArgs& a, OrderStatusResult& r) {
  const Tables& t = *a.tables;

  uint32_t c_id = 0;
  SHOAL_TRY(resolve_customer(txn, t, a.w_id, a.d_id, a.customer, &c_id));
  CustomerRow c;
  SHOAL_TRY(must_exist(txn.get(*t.customer, customer_key(a.w_id, a.d_id, c_id), &c)));
  r.c_id = c_id;
  r.c_balance_cents = c.balance_cents;

  // The customer's latest order: the highest (w, d, c, o) of the ORDER secondary index.
  uint32_t o_id = 0;
  SHOAL_TRY(txn.rscan(*t.order_customer, order_customer_key(a.w_id, a.d_id, c_id, ~uint32_t{0}),
                      order_customer_key(a.w_id, a.d_id, c_id, 0), 1,
                      [&](const Key<2>& key, const void*, uint32_t) {
                        o_id = static_cast<uint32_t>(key.w[1]);
                        return false;
                      }));
  r.o_id = o_id;
  r.ol_cnt = 0;
  if (o_id == 0) return Status::Ok();
  OrderRow o;
  SHOAL_TRY(must_exist(txn.get(*t.order, order_key(a.w_id, a.d_id, o_id), &o)));
  r.carrier_id = o.carrier_id;
  SHOAL_TRY(txn.scan(*t.order_line, order_line_key(a.w_id, a.d_id, o_id, 0),
                     order_line_key(a.w_id, a.d_id, o_id, 0xff), kMaxOrderLines,
                     [&](const Key<1>&, const void* v, uint32_t size) {
                       SHOAL_ASSERT(size == sizeof(OrderLineRow), "order line of %u bytes", size);
                       OrderLineRow ol;
                       std::memcpy(&ol, v, sizeof(ol));
                       r.lines[r.ol_cnt++] = {ol.i_id, ol.supply_w_id, ol.quantity, ol.amount_cents,
                                              ol.delivery_d_us};
                       return r.ol_cnt < kMaxOrderLines;
                     }));
  return Status::Ok();
}

}  // namespace

Status order_status(Txn& txn, const void* args_ptr, void* result_ptr) {
  OrderStatusResult scratch_result;
  auto& r = result_ptr != nullptr ? *static_cast<OrderStatusResult*>(result_ptr) : scratch_result;
  return order_status_with(txn, *static_cast<const OrderStatusArgs*>(args_ptr), r);
}

Status order_status_at_snapshot(txn::SnapshotReader& reader, const OrderStatusArgs& args,
                                OrderStatusResult* result) {
  return order_status_with(reader, args, *result);
}

namespace {

// Delivers the oldest undelivered order of one district (clause 2.7.4.2); *o_id = 0 when the
// district has none (skipped).
Status deliver_district(Txn& txn, const DeliveryArgs& a, uint32_t d_id, uint32_t* o_id_out) {
  const Tables& t = *a.tables;
  const uint32_t w_id = a.w_id;
  uint32_t o_id = 0;
  SHOAL_TRY(txn.scan(*t.new_order, order_key(w_id, d_id, 0), order_key(w_id, d_id, ~uint32_t{0}), 1,
                     [&](const Key<1>& key, const void*, uint32_t) {
                       o_id = static_cast<uint32_t>((key.w[0] >> 8) & 0xffffffffu);
                       return false;
                     }));
  *o_id_out = o_id;
  if (o_id == 0) return Status::Ok();
  SHOAL_TRY(must_exist(txn.remove(*t.new_order, order_key(w_id, d_id, o_id))));

  OrderRow o;
  const Key<1> ok = order_key(w_id, d_id, o_id);
  SHOAL_TRY(must_exist(txn.get(*t.order, ok, &o)));
  o.carrier_id = a.carrier_id;
  SHOAL_TRY(must_exist(txn.put(*t.order, ok, o)));

  OrderLineRow lines[kMaxOrderLines];
  uint32_t n = 0;
  SHOAL_TRY(txn.scan(*t.order_line, order_line_key(w_id, d_id, o_id, 0),
                     order_line_key(w_id, d_id, o_id, 0xff), kMaxOrderLines,
                     [&](const Key<1>&, const void* v, uint32_t size) {
                       SHOAL_ASSERT(size == sizeof(OrderLineRow), "order line of %u bytes", size);
                       std::memcpy(&lines[n++], v, sizeof(OrderLineRow));
                       return n < kMaxOrderLines;
                     }));
  int64_t sum_cents = 0;
  for (uint32_t i = 0; i < n; ++i) {
    lines[i].delivery_d_us = a.delivery_d_us;
    sum_cents += lines[i].amount_cents;
    SHOAL_TRY(must_exist(
        txn.put(*t.order_line, order_line_key(w_id, d_id, o_id, lines[i].number), lines[i])));
  }

  CustomerRow c;
  const Key<1> ck = customer_key(w_id, d_id, o.c_id);
  SHOAL_TRY(must_exist(txn.get(*t.customer, ck, &c)));
  c.balance_cents += sum_cents;
  c.delivery_cnt += 1;
  return must_exist(txn.put(*t.customer, ck, c));
}

}  // namespace

Status delivery(Txn& txn, const void* args_ptr, void* result_ptr) {
  const auto& a = *static_cast<const DeliveryArgs*>(args_ptr);
  DeliveryResult scratch_result;
  auto& r = result_ptr != nullptr ? *static_cast<DeliveryResult*>(result_ptr) : scratch_result;
  r.skipped = 0;
  for (uint32_t d = 1; d <= kDistrictsPerWarehouse; ++d) {
    SHOAL_TRY(deliver_district(txn, a, d, &r.delivered_o_id[d - 1]));
    if (r.delivered_o_id[d - 1] == 0) ++r.skipped;
  }
  return Status::Ok();
}

txn::Procedure procedure_of(TxnType type) {
  switch (type) {
    case kNewOrder:
      return &new_order;
    case kPayment:
      return &payment;
    case kOrderStatus:
      return &order_status;
    case kDelivery:
      return &delivery;
    case kStockLevel:
      return &stock_level;
    default:
      SHOAL_ASSERT(false, "unknown TPC-C transaction type %u", static_cast<unsigned>(type));
      return nullptr;
  }
}

namespace {

// Clause 2.8.2.2, for a Txn or a SnapshotReader.
template <typename Reader>
Status stock_level_with(Reader& txn, const StockLevelArgs& a, StockLevelResult* result) {
  const Tables& t = *a.tables;
  DistrictRow d;
  SHOAL_TRY(must_exist(txn.get(*t.district, district_key(a.w_id, a.d_id), &d)));
  // Order lines of orders [D_NEXT_O_ID - 20, D_NEXT_O_ID) (clause 2.8.2.2).
  constexpr uint32_t kLastOrders = 20;
  const uint32_t first_o = d.next_o_id > kLastOrders ? d.next_o_id - kLastOrders : 1;
  uint32_t items[kLastOrders * kMaxOrderLines];
  uint32_t n = 0;
  SHOAL_TRY(txn.scan(*t.order_line, order_line_key(a.w_id, a.d_id, first_o, 0),
                     order_line_key(a.w_id, a.d_id, d.next_o_id - 1, 0xff),
                     kLastOrders * kMaxOrderLines, [&](const Key<1>&, const void* v, uint32_t) {
                       uint32_t i_id;
                       std::memcpy(&i_id,
                                   static_cast<const char*>(v) + offsetof(OrderLineRow, i_id),
                                   sizeof(i_id));
                       items[n++] = i_id;
                       return n < kLastOrders * kMaxOrderLines;
                     }));
  std::sort(items, items + n);
  const uint32_t distinct = static_cast<uint32_t>(std::unique(items, items + n) - items);
  uint32_t low = 0;
  for (uint32_t i = 0; i < distinct; ++i) {
    StockRow s;
    SHOAL_TRY(must_exist(txn.get(*t.stock, stock_key(a.w_id, items[i]), &s)));
    if (s.quantity < a.threshold) ++low;
  }
  if (result != nullptr) result->low_stock = low;
  return Status::Ok();
}

}  // namespace

Status stock_level(Txn& txn, const void* args_ptr, void* result_ptr) {
  return stock_level_with(txn, *static_cast<const StockLevelArgs*>(args_ptr),
                          static_cast<StockLevelResult*>(result_ptr));
}

Status stock_level_at_snapshot(txn::SnapshotReader& reader, const StockLevelArgs& args,
                               StockLevelResult* result) {
  return stock_level_with(reader, args, result);
}

}  // namespace shoal::workload::tpcc

#include "src/workload/tpcc/tpcc.h"

namespace shoal::workload {

using namespace tpcc;  // NOLINT: the workload speaks the schema's vocabulary throughout

namespace tpcc {

bool find_tables(const txn::Engine& engine, Tables* out) {
  auto get1 = [&](const char* name) {
    return static_cast<txn::Table<1>*>(engine.find_table(name));
  };
  out->warehouse = get1(kWarehouseTable);
  out->district = get1(kDistrictTable);
  out->warehouse_ytd = get1(kWarehouseYtdTable);
  out->district_ytd = get1(kDistrictYtdTable);
  out->customer = get1(kCustomerTable);
  out->history = get1(kHistoryTable);
  out->new_order = get1(kNewOrderTable);
  out->order = get1(kOrderTable);
  out->order_line = get1(kOrderLineTable);
  out->item = get1(kItemTable);
  out->stock = get1(kStockTable);
  out->customer_name = static_cast<txn::Table<4>*>(engine.find_table(kCustomerNameTable));
  out->order_customer = static_cast<txn::Table<2>*>(engine.find_table(kOrderCustomerTable));
  txn::TableBase* all[] = {
      out->warehouse_ytd, out->district_ytd,  out->warehouse,     out->district,   out->customer,
      out->history,       out->new_order,     out->order,         out->order_line, out->item,
      out->stock,         out->customer_name, out->order_customer};
  for (txn::TableBase* table : all) {
    if (table == nullptr) return false;
  }
  // The casts above are only valid for the key widths the loader created.
  return out->customer_name->key_words() == 4 && out->order_customer->key_words() == 2 &&
         out->stock->key_words() == 1;
}

}  // namespace tpcc

// ---- TpccClient ----

TpccClient::TpccClient(TpccWorkload& workload, txn::Worker& worker, uint32_t worker_index,
                       uint64_t seed, uint64_t history_source, uint32_t history_run)
    : workload_(workload),
      worker_(worker),
      rng_(seed),
      warehouses_(workload.warehouses()),
      home_w_(worker_index % workload.warehouses() + 1),
      stock_level_d_((worker_index / workload.warehouses()) % kDistrictsPerWarehouse + 1),
      history_source_(history_source),
      history_seq_(uint64_t{history_run} << 32) {
  SHOAL_ASSERT(history_source < (uint64_t{1} << 16), "history source %llu overflows its bits",
               static_cast<unsigned long long>(history_source));
  SHOAL_ASSERT(history_run < (uint32_t{1} << 16), "history run %u overflows its bits", history_run);
}

uint64_t TpccClient::now_us() {
  return worker_.txn().engine().env().wall_us();
}

uint32_t TpccClient::other_warehouse() {
  SHOAL_DCHECK(warehouses_ > 1);
  const uint32_t w = static_cast<uint32_t>(rng_.uniform(1, warehouses_ - 1));
  return w >= home_w_ ? w + 1 : w;
}

CustomerSelector TpccClient::make_customer_selector() {
  const NurandConstants& c = workload_.nurand();
  CustomerSelector sel;
  sel.by_last_name = rng_.uniform(1, 100) <= workload_.options().by_last_name_percent;
  if (sel.by_last_name) {
    sel.last_num = nurand(rng_, 255, 0, kLastNames - 1, c.c_last_run);
  } else {
    sel.c_id = nurand(rng_, 1023, 1, kCustomersPerDistrict, c.c_id);
  }
  return sel;
}

void TpccClient::make_new_order(NewOrderArgs* a) {
  const NurandConstants& c = workload_.nurand();
  const TpccOptions& opt = workload_.options();
  a->tables = &workload_.tables();
  a->w_id = static_cast<uint16_t>(home_w_);
  a->d_id = static_cast<uint8_t>(rng_.uniform(1, kDistrictsPerWarehouse));
  a->c_id = nurand(rng_, 1023, 1, kCustomersPerDistrict, c.c_id);
  a->ol_cnt = static_cast<uint8_t>(rng_.uniform(kMinOrderLines, kMaxOrderLines));
  const bool rollback = rng_.uniform(1, 100) <= opt.invalid_item_percent;
  a->all_local = 1;
  for (uint32_t n = 0; n < a->ol_cnt; ++n) {
    NewOrderItem& it = a->items[n];
    it.i_id = nurand(rng_, 8191, 1, kItems, c.ol_i_id);
    it.supply_w_id = a->w_id;
    if (warehouses_ > 1 && rng_.uniform(1, 100) <= opt.remote_item_percent) {
      it.supply_w_id = static_cast<uint16_t>(other_warehouse());
      a->all_local = 0;
    }
    it.quantity = static_cast<uint8_t>(rng_.uniform(1, 10));
  }
  // Clause 2.4.1.4: the rolled-back NewOrder's last item carries an unused id.
  if (rollback) a->items[a->ol_cnt - 1].i_id = kItems + 1;
  a->entry_d_us = now_us();
}

void TpccClient::make_payment(PaymentArgs* a) {
  const TpccOptions& opt = workload_.options();
  a->tables = &workload_.tables();
  a->w_id = static_cast<uint16_t>(home_w_);
  a->d_id = static_cast<uint8_t>(rng_.uniform(1, kDistrictsPerWarehouse));
  if (warehouses_ > 1 && rng_.uniform(1, 100) <= opt.remote_payment_percent) {
    a->c_w_id = static_cast<uint16_t>(other_warehouse());
    a->c_d_id = static_cast<uint8_t>(rng_.uniform(1, kDistrictsPerWarehouse));
  } else {
    a->c_w_id = a->w_id;
    a->c_d_id = a->d_id;
  }
  a->customer = make_customer_selector();
  a->amount_cents = static_cast<int64_t>(rng_.uniform(100, 500'000));  // [1.00, 5,000.00]
  a->date_us = now_us();
  a->history_source = history_source_;
  a->history_seq = ++history_seq_;
  SHOAL_ASSERT((history_seq_ & 0xffffffff) != 0, "history sequence overflow (2^32 per run)");
}

void TpccClient::make_order_status(OrderStatusArgs* a) {
  a->tables = &workload_.tables();
  a->w_id = static_cast<uint16_t>(home_w_);
  a->d_id = static_cast<uint8_t>(rng_.uniform(1, kDistrictsPerWarehouse));
  a->customer = make_customer_selector();
}

void TpccClient::make_delivery(DeliveryArgs* a) {
  a->tables = &workload_.tables();
  a->w_id = static_cast<uint16_t>(home_w_);
  a->carrier_id = static_cast<uint8_t>(rng_.uniform(1, 10));
  a->delivery_d_us = now_us();
}

void TpccClient::make_stock_level(StockLevelArgs* a) {
  a->tables = &workload_.tables();
  a->w_id = static_cast<uint16_t>(home_w_);
  a->d_id = static_cast<uint8_t>(stock_level_d_);
  a->threshold = static_cast<int32_t>(rng_.uniform(10, 20));
}

Outcome TpccClient::run_type(TxnType type) {
  TpccInput in;
  make_input_of(type, &in);
  Outcome out;
  out.type = type;
  out.status = worker_.run(procedure_of(type), &in.new_order);  // any member: same address
  return out;
}

Outcome TpccClient::run_one() {
  return run_type(draw_type());
}

TxnType TpccClient::draw_type() {
  const uint32_t* mix = workload_.options().mix_percent;
  uint32_t x = static_cast<uint32_t>(rng_.uniform(1, 100));
  uint32_t type = 0;
  while (type + 1 < kTxnTypes && x > mix[type]) x -= mix[type++];
  return static_cast<TxnType>(type);
}

void TpccClient::make_input(TpccInput* in) {
  make_input_of(draw_type(), in);
}

void TpccClient::make_input_of(TxnType type, TpccInput* in) {
  in->type = type;
  switch (type) {
    case kNewOrder:
      in->new_order = NewOrderArgs{};
      make_new_order(&in->new_order);
      break;
    case kPayment:
      in->payment = PaymentArgs{};
      make_payment(&in->payment);
      break;
    case kOrderStatus:
      in->order_status = OrderStatusArgs{};
      make_order_status(&in->order_status);
      break;
    case kDelivery:
      in->delivery = DeliveryArgs{};
      make_delivery(&in->delivery);
      break;
    case kStockLevel:
      in->stock_level = StockLevelArgs{};
      make_stock_level(&in->stock_level);
      break;
    default:
      SHOAL_ASSERT(false, "unknown TPC-C transaction type %u", static_cast<unsigned>(type));
  }
}

void TpccClient::bind_home(uint32_t w, uint32_t d) {
  SHOAL_ASSERT(w >= 1 && w <= warehouses_ && d >= 1 && d <= kDistrictsPerWarehouse,
               "home %u/%u out of range", w, d);
  home_w_ = w;
  stock_level_d_ = d;
}

// ---- TpccWorkload ----

TpccWorkload::TpccWorkload(const TpccOptions& options)
    : options_(options), warehouses_(options.warehouses) {
  uint32_t sum = 0;
  for (uint32_t p : options_.mix_percent) sum += p;
  SHOAL_ASSERT(sum == 100, "TPC-C mix sums to %u, not 100", sum);
}

std::vector<std::string> TpccWorkload::txn_types() const {
  return {"NewOrder", "Payment", "OrderStatus", "Delivery", "StockLevel"};
}

std::unique_ptr<Client> TpccWorkload::make_client(txn::Worker& worker, uint32_t worker_index,
                                                  uint64_t seed) {
  SHOAL_ASSERT(tables_.warehouse != nullptr, "make_client before load");
  const uint64_t source = next_history_source_.fetch_add(1, std::memory_order_relaxed);
  return std::make_unique<TpccClient>(*this, worker, worker_index, seed, source);
}

std::unique_ptr<Workload> make_tpcc_workload(const TpccOptions& options) {
  return std::make_unique<TpccWorkload>(options);
}

}  // namespace shoal::workload

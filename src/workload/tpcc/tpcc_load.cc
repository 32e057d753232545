// The TPC-C loader: clause 4.3.3.1's population of every table, one warehouse per task, tasks
// spread over LoadOptions::workers threads (Table::load is safe for different keys
// concurrently; no transactions run during the load).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "src/workload/tpcc/tpcc.h"

namespace shoal::workload {

namespace {

using namespace tpcc;  // NOLINT: the loader speaks the schema's vocabulary throughout

// Rows loaded so far, for progress (relaxed: only a display).
struct LoadProgress {
  std::atomic<uint64_t> rows{0};
  uint64_t total_rows = 0;
};

void random_address(Rng& rng, char* street_1, char* street_2, char* city, char* state, char* zip) {
  random_astring(rng, 10, 20, street_1, 20);
  random_astring(rng, 10, 20, street_2, 20);
  random_astring(rng, 10, 20, city, 20);
  for (int i = 0; i < 2; ++i) state[i] = static_cast<char>('A' + rng.uniform(0, 25));
  random_zip(rng, zip);
}

Status load_items(const Tables& t, Rng& rng, LoadProgress* progress) {
  for (uint32_t i = 1; i <= kItems; ++i) {
    ItemRow row;
    std::memset(&row, 0, sizeof(row));
    row.id = i;
    row.im_id = static_cast<uint32_t>(rng.uniform(1, 10000));
    random_astring(rng, 14, 24, row.name, sizeof(row.name));
    row.price_cents = static_cast<int64_t>(rng.uniform(100, 10000));
    random_data_with_original(rng, row.data);
    SHOAL_TRY(t.item->load(item_key(i), row));
  }
  progress->rows.fetch_add(kItems, std::memory_order_relaxed);
  return Status::Ok();
}

Status load_warehouse_and_stock(const Tables& t, uint32_t w, Rng& rng, LoadProgress* progress) {
  WarehouseRow wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.id = static_cast<uint16_t>(w);
  random_astring(rng, 6, 10, wr.name, sizeof(wr.name));
  random_address(rng, wr.street_1, wr.street_2, wr.city, wr.state, wr.zip);
  wr.tax_bp = static_cast<int32_t>(rng.uniform(0, 2000));
  SHOAL_TRY(t.warehouse->load(warehouse_key(w), wr));
  SHOAL_TRY(t.warehouse_ytd->load(warehouse_key(w), YtdRow{30'000'000}));  // 300,000.00
  for (uint32_t i = 1; i <= kItems; ++i) {
    StockRow s;
    s.i_id = i;
    s.w_id = static_cast<uint16_t>(w);
    s.quantity = static_cast<int16_t>(rng.uniform(10, 100));
    s.ytd = 0;
    s.order_cnt = 0;
    s.remote_cnt = 0;
    for (auto& dist : s.dist) random_astring(rng, 24, 24, dist, sizeof(dist));
    random_data_with_original(rng, s.data);
    SHOAL_TRY(t.stock->load(stock_key(w, i), s));
  }
  progress->rows.fetch_add(kItems + 1, std::memory_order_relaxed);
  return Status::Ok();
}

Status load_customer(const Tables& t, uint32_t w, uint32_t d, uint32_t c, uint32_t last_num,
                     uint64_t now_us, Rng& rng) {
  CustomerRow row;
  std::memset(&row, 0, sizeof(row));
  row.id = c;
  row.d_id = static_cast<uint8_t>(d);
  row.w_id = static_cast<uint16_t>(w);
  last_name(last_num, row.last);
  std::memcpy(row.middle, "OE", 2);
  random_astring(rng, 8, 16, row.first, sizeof(row.first));
  random_address(rng, row.street_1, row.street_2, row.city, row.state, row.zip);
  random_nstring(rng, 16, 16, row.phone, sizeof(row.phone));
  row.since_us = now_us;
  std::memcpy(row.credit, rng.uniform(1, 100) <= 10 ? "BC" : "GC", 2);
  row.credit_lim_cents = 5'000'000;  // 50,000.00
  row.discount_bp = static_cast<int32_t>(rng.uniform(0, 5000));
  row.balance_cents = -1000;  // -10.00
  row.ytd_payment_cents = 1000;
  row.payment_cnt = 1;
  row.delivery_cnt = 0;
  random_astring(rng, 300, 500, row.data, sizeof(row.data));
  SHOAL_TRY(t.customer->load(customer_key(w, d, c), row));
  SHOAL_TRY(
      t.customer_name->load(customer_name_key(w, d, last_num, row.first, c), CustomerNameValue{c}));

  HistoryRow h;
  std::memset(&h, 0, sizeof(h));
  h.c_id = c;
  h.c_d_id = h.d_id = static_cast<uint8_t>(d);
  h.c_w_id = h.w_id = static_cast<uint16_t>(w);
  h.date_us = now_us;
  h.amount_cents = 1000;
  random_astring(rng, 12, 24, h.data, sizeof(h.data));
  // Loader HISTORY keys: source 0, sequence (w, d, c) in 40 bits.
  const uint64_t seq = (uint64_t{w} << 24) | (uint64_t{d} << 16) | c;
  return t.history->load(history_key(0, seq), h);
}

Status load_order(const Tables& t, uint32_t w, uint32_t d, uint32_t o, uint32_t c, uint64_t now_us,
                  Rng& rng, uint64_t* rows) {
  const bool delivered = o < kFirstUndeliveredOrderId;
  OrderRow order;
  std::memset(&order, 0, sizeof(order));
  order.id = o;
  order.c_id = c;
  order.d_id = static_cast<uint8_t>(d);
  order.w_id = static_cast<uint16_t>(w);
  order.entry_d_us = now_us;
  order.carrier_id = delivered ? static_cast<uint8_t>(rng.uniform(1, 10)) : 0;
  order.ol_cnt = static_cast<uint8_t>(rng.uniform(kMinOrderLines, kMaxOrderLines));
  order.all_local = 1;
  SHOAL_TRY(t.order->load(order_key(w, d, o), order));
  SHOAL_TRY(t.order_customer->load(order_customer_key(w, d, c, o), OrderCustomerValue{o}));
  if (!delivered) {
    SHOAL_TRY(t.new_order->load(order_key(w, d, o), NewOrderRow{o, order.w_id, order.d_id}));
  }
  for (uint32_t n = 1; n <= order.ol_cnt; ++n) {
    OrderLineRow ol;
    std::memset(&ol, 0, sizeof(ol));
    ol.o_id = o;
    ol.d_id = order.d_id;
    ol.w_id = order.w_id;
    ol.number = static_cast<uint8_t>(n);
    ol.i_id = static_cast<uint32_t>(rng.uniform(1, kItems));
    ol.supply_w_id = order.w_id;
    ol.delivery_d_us = delivered ? now_us : 0;
    ol.quantity = 5;
    ol.amount_cents = delivered ? 0 : static_cast<int64_t>(rng.uniform(1, 999'999));
    random_astring(rng, 24, 24, ol.dist_info, sizeof(ol.dist_info));
    SHOAL_TRY(t.order_line->load(order_line_key(w, d, o, n), ol));
  }
  *rows += 2 + order.ol_cnt + (delivered ? 0 : 1);
  return Status::Ok();
}

Status load_district(const Tables& t, uint32_t w, uint32_t d, uint32_t c_last_load, uint64_t now_us,
                     Rng& rng, LoadProgress* progress) {
  DistrictRow dr;
  std::memset(&dr, 0, sizeof(dr));
  dr.id = static_cast<uint8_t>(d);
  dr.w_id = static_cast<uint16_t>(w);
  random_astring(rng, 6, 10, dr.name, sizeof(dr.name));
  random_address(rng, dr.street_1, dr.street_2, dr.city, dr.state, dr.zip);
  dr.tax_bp = static_cast<int32_t>(rng.uniform(0, 2000));
  dr.next_o_id = kInitialOrdersPerDistrict + 1;
  SHOAL_TRY(t.district->load(district_key(w, d), dr));
  SHOAL_TRY(t.district_ytd->load(district_key(w, d), YtdRow{3'000'000}));  // 30,000.00

  for (uint32_t c = 1; c <= kCustomersPerDistrict; ++c) {
    // Clause 4.3.2.3: the first 1000 customers take every last name once.
    const uint32_t last_num = c <= kLastNames ? c - 1 : nurand(rng, 255, 0, 999, c_last_load);
    SHOAL_TRY(load_customer(t, w, d, c, last_num, now_us, rng));
  }
  progress->rows.fetch_add(3 * kCustomersPerDistrict, std::memory_order_relaxed);

  // O_C_ID: a random permutation of the customer ids.
  uint32_t perm[kCustomersPerDistrict];
  std::iota(perm, perm + kCustomersPerDistrict, 1u);
  for (uint32_t i = kCustomersPerDistrict - 1; i > 0; --i) {
    std::swap(perm[i], perm[rng.uniform(0, i)]);
  }
  uint64_t rows = 0;
  for (uint32_t o = 1; o <= kInitialOrdersPerDistrict; ++o) {
    SHOAL_TRY(load_order(t, w, d, o, perm[o - 1], now_us, rng, &rows));
  }
  progress->rows.fetch_add(rows, std::memory_order_relaxed);
  return Status::Ok();
}

// Task 0 loads ITEM; task w (1..W) loads warehouse w's rows.
Status load_task(const Tables& t, uint32_t task, uint64_t seed, uint32_t c_last_load,
                 uint64_t now_us, LoadProgress* progress) {
  Rng rng(seed ^ (0x9e3779b97f4a7c15ULL * (task + 1)));
  if (task == 0) return load_items(t, rng, progress);
  SHOAL_TRY(load_warehouse_and_stock(t, task, rng, progress));
  for (uint32_t d = 1; d <= kDistrictsPerWarehouse; ++d) {
    SHOAL_TRY(load_district(t, task, d, c_last_load, now_us, rng, progress));
  }
  return Status::Ok();
}

Tables create_tables(txn::Engine& engine) {
  Tables t;
  t.warehouse = engine.create_table<1>(kWarehouseTable);
  t.district = engine.create_table<1>(kDistrictTable);
  t.warehouse_ytd = engine.create_table<1>(kWarehouseYtdTable);
  t.district_ytd = engine.create_table<1>(kDistrictYtdTable);
  t.customer = engine.create_table<1>(kCustomerTable);
  t.customer_name = engine.create_table<4>(kCustomerNameTable);
  t.history = engine.create_table<1>(kHistoryTable);
  t.new_order = engine.create_table<1>(kNewOrderTable);
  t.order = engine.create_table<1>(kOrderTable);
  t.order_customer = engine.create_table<2>(kOrderCustomerTable);
  t.order_line = engine.create_table<1>(kOrderLineTable);
  t.item = engine.create_table<1>(kItemTable);
  t.stock = engine.create_table<1>(kStockTable);
  return t;
}

}  // namespace

Status TpccWorkload::attach(txn::Engine& engine, const LoadOptions& options) {
  if (options.warehouses != 0) warehouses_ = options.warehouses;
  if (warehouses_ == 0 || warehouses_ > kMaxWarehouses) {
    return Status::InvalidArgument("tpcc: warehouses must be in [1, 65535]");
  }
  if (!find_tables(engine, &tables_)) {
    return Status::Corruption("tpcc: the engine lacks TPC-C tables (nothing replicated here?)");
  }
  Rng rng(options.seed);
  nurand_ = NurandConstants::make(rng);  // the draw load() makes first
  if (options_.read_only_hint) {         // as load() leaves them (a promoted follower's tables)
    tables_.item->make_read_only();
    tables_.customer_name->make_read_only();
  }
  return Status::Ok();
}

Status TpccWorkload::load(txn::Engine& engine, const LoadOptions& options,
                          const std::function<void(double)>& progress) {
  if (options.warehouses != 0) warehouses_ = options.warehouses;
  if (warehouses_ == 0 || warehouses_ > kMaxWarehouses) {
    return Status::InvalidArgument("tpcc: warehouses must be in [1, 65535]");
  }
  if (engine.find_table(kWarehouseTable) != nullptr) {
    return Status::InvalidArgument("tpcc: engine already holds TPC-C tables");
  }
  tables_ = create_tables(engine);
  Rng rng(options.seed);
  nurand_ = NurandConstants::make(rng);

  LoadProgress prog;
  // Per warehouse: stock + warehouse, and per district ~ 3 rows per customer, 2 per order,
  // ~10 order lines per order, 900 new orders.
  const uint64_t per_district =
      3 * kCustomersPerDistrict + 12 * kInitialOrdersPerDistrict + kInitialNewOrdersPerDistrict;
  const uint64_t now_us = engine.env().wall_us();
  const uint32_t first_w = options_.load_first_warehouse == 0 ? 1 : options_.load_first_warehouse;
  const uint32_t last_w =
      options_.load_last_warehouse == 0 ? warehouses_ : options_.load_last_warehouse;
  if (first_w > last_w || last_w > warehouses_) {
    return Status::InvalidArgument(fmt::format(
        "tpcc: warehouses to load [{}, {}] not within [1, {}]", first_w, last_w, warehouses_));
  }
  prog.total_rows =
      kItems + (last_w - first_w + 1) * (kItems + 1 + kDistrictsPerWarehouse * per_district);
  // Task 0 loads ITEM, task i > 0 warehouse first_w + i - 1.
  const uint32_t tasks = last_w - first_w + 2;
  const uint32_t threads = std::clamp<uint32_t>(options.workers, 1, tasks);
  std::atomic<uint32_t> next_task{0};
  std::atomic<uint32_t> running{threads};
  std::mutex mu;
  Status first_error;
  auto loader = [&] {
    for (uint32_t task = next_task++; task < tasks; task = next_task++) {
      const uint32_t what = task == 0 ? 0 : first_w + task - 1;
      Status s = load_task(tables_, what, options.seed, nurand_.c_last_load, now_us, &prog);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = std::move(s);
        next_task = tasks;  // stop handing out work
      }
    }
    running.fetch_sub(1, std::memory_order_release);
  };
  std::vector<std::thread> pool;
  for (uint32_t i = 0; i < threads; ++i) pool.emplace_back(loader);
  // This (the loading) thread reports progress while the pool works.
  while (running.load(std::memory_order_acquire) != 0) {
    if (progress) {
      progress(std::min(1.0, static_cast<double>(prog.rows.load(std::memory_order_relaxed)) /
                                 static_cast<double>(prog.total_rows)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& th : pool) th.join();
  if (!first_error.ok()) return first_error;
  // No transaction writes ITEM or the customer-by-name index (clause 1.4: customers and items
  // are never added, C_LAST never changes): reads of them need no validation.
  if (options_.read_only_hint) {
    tables_.item->make_read_only();
    tables_.customer_name->make_read_only();
  }
  if (progress) progress(1.0);
  return Status::Ok();
}

}  // namespace shoal::workload

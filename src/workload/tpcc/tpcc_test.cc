// Tests of the TPC-C workload: the generators, the loader's population and consistency, each
// transaction type on its own, the invalid-item rollback, and a concurrent two-warehouse run.
// TPCC_TEST_TXNS scales the per-thread transaction count of the run tests (smaller under TSan).
#include "src/workload/tpcc/tpcc.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>

namespace shoal::workload {
namespace {

using namespace tpcc;  // NOLINT

uint32_t test_txns(uint32_t default_count) {
  const char* env = std::getenv("TPCC_TEST_TXNS");
  if (env == nullptr) return default_count;
  const long v = std::strtol(env, nullptr, 10);
  return v > 0 ? static_cast<uint32_t>(v) : default_count;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

struct Loaded {
  std::unique_ptr<txn::Engine> engine = std::make_unique<txn::Engine>();
  std::unique_ptr<TpccWorkload> workload;

  explicit Loaded(uint32_t warehouses, uint32_t load_workers = 1, bool read_only_hint = true) {
    TpccOptions opt;
    opt.warehouses = warehouses;
    opt.read_only_hint = read_only_hint;
    workload = std::make_unique<TpccWorkload>(opt);
    LoadOptions lo;
    lo.warehouses = warehouses;
    lo.workers = load_workers;
    lo.seed = 42;
    double last = -1;
    Status s = workload->load(*engine, lo, [&](double f) {
      EXPECT_GE(f, last);
      last = f;
    });
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(last, 1.0);
  }
  const Tables& t() const { return workload->tables(); }
};

TEST(TpccRandom, NurandStaysInRangeAndIsSkewed) {
  Rng rng(7);
  std::vector<uint32_t> hits(3001, 0);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t v = nurand(rng, 1023, 1, 3000, 259);
    ASSERT_GE(v, 1u);
    ASSERT_LE(v, 3000u);
    ++hits[v];
  }
  const uint32_t max_hits = *std::max_element(hits.begin(), hits.end());
  // Uniform would give ~67 per value; NURand's OR concentrates mass on some values.
  EXPECT_GT(max_hits, 200u);
  for (int i = 0; i < 10000; ++i) {
    const uint32_t v = nurand(rng, 255, 0, 999, 0);
    ASSERT_LE(v, 999u);
  }
}

TEST(TpccRandom, RunConstantsRespectTheDeltaRule) {
  Rng rng(3);
  for (int i = 0; i < 1000; ++i) {
    const NurandConstants c = NurandConstants::make(rng);
    EXPECT_LE(c.c_last_load, 255u);
    EXPECT_LE(c.c_id, 1023u);
    EXPECT_LE(c.ol_i_id, 8191u);
    EXPECT_TRUE(NurandConstants::valid_delta(c.c_last_load, c.c_last_run));
  }
  EXPECT_FALSE(NurandConstants::valid_delta(100, 196));  // delta 96 is excluded
  EXPECT_FALSE(NurandConstants::valid_delta(0, 64));
  EXPECT_TRUE(NurandConstants::valid_delta(0, 65));
}

TEST(TpccRandom, LastNamesFollowTheSyllables) {
  char buf[kLastNameMax];
  EXPECT_EQ(last_name(0, buf), 9u);
  EXPECT_EQ(std::string(buf, 9), "BARBARBAR");
  last_name(371, buf);
  EXPECT_EQ(std::string(buf, strnlen(buf, 16)), "PRICALLYOUGHT");
  last_name(999, buf);
  EXPECT_EQ(std::string(buf, strnlen(buf, 16)), "EINGEINGEING");
  std::set<std::string> names;
  for (uint32_t n = 0; n < 1000; ++n) {
    const size_t len = last_name(n, buf);
    ASSERT_LE(len, 15u);
    names.emplace(buf, len);
  }
  EXPECT_EQ(names.size(), 1000u);  // the number -> name map is one-to-one
}

TEST(TpccRandom, StringsAndOriginal) {
  Rng rng(5);
  char data[50];
  int originals = 0;
  for (int i = 0; i < 10000; ++i) {
    random_data_with_original(rng, data);
    const size_t len = strnlen(data, 50);
    ASSERT_GE(len, 26u);
    ASSERT_LE(len, 50u);
    originals += has_original(data, 50);
  }
  EXPECT_GT(originals, 800);
  EXPECT_LT(originals, 1200);
  char zip[9];
  random_zip(rng, zip);
  EXPECT_EQ(std::string(zip + 4, 5), "11111");
}

TEST(TpccLoad, RowCountsAndAllTwelveConditions) {
  Loaded db(1);
  const Tables& t = db.t();
  EXPECT_EQ(t.warehouse->record_count(), 1u);
  EXPECT_EQ(t.district->record_count(), 10u);
  EXPECT_EQ(t.customer->record_count(), 30000u);
  EXPECT_EQ(t.customer_name->record_count(), 30000u);
  EXPECT_EQ(t.history->record_count(), 30000u);
  EXPECT_EQ(t.order->record_count(), 30000u);
  EXPECT_EQ(t.order_customer->record_count(), 30000u);
  EXPECT_EQ(t.new_order->record_count(), 9000u);
  EXPECT_EQ(t.item->record_count(), 100000u);
  EXPECT_EQ(t.stock->record_count(), 100000u);
  const size_t lines = t.order_line->record_count();
  EXPECT_GT(lines, 290000u);  // 30,000 orders x uniform [5, 15] lines: ~300,000
  EXPECT_LT(lines, 310000u);
  EXPECT_EQ(join(check_tpcc_conditions(*db.engine, /*after_load=*/true)), "");
  EXPECT_EQ(join(db.workload->check(*db.engine)), "");

  // Spot checks of the population rules.
  CustomerRow c;
  ASSERT_TRUE(t.customer->peek(customer_key(1, 3, 7), &c, sizeof(c)).ok());
  char name[kLastNameMax];
  last_name(6, name);
  EXPECT_EQ(std::memcmp(c.last, name, 16), 0);
  EXPECT_EQ(c.balance_cents, -1000);
  DistrictRow d;
  ASSERT_TRUE(t.district->peek(district_key(1, 10), &d, sizeof(d)).ok());
  EXPECT_EQ(d.next_o_id, 3001u);
}

// TpccOptions::read_only_hint: ITEM and the customer-name index become read-only after the
// load (their reads unrecorded), and only then; every other table stays writable. Without the
// hint the mix runs the same and the conditions hold.
TEST(TpccLoad, ReadOnlyHintMarksItemAndTheNameIndexOnly) {
  Loaded with(1);
  EXPECT_TRUE(with.t().item->read_only());
  EXPECT_TRUE(with.t().customer_name->read_only());
  EXPECT_FALSE(with.t().stock->read_only());
  EXPECT_FALSE(with.t().customer->read_only());

  Loaded without(1, 1, /*read_only_hint=*/false);
  EXPECT_FALSE(without.t().item->read_only());
  EXPECT_FALSE(without.t().customer_name->read_only());
  txn::Worker* worker = without.engine->make_worker();
  auto client = without.workload->make_client(*worker, 0, 11);
  auto* tc = static_cast<TpccClient*>(client.get());
  for (uint32_t i = 0; i < test_txns(300); ++i) {
    for (uint32_t type = 0; type < kTxnTypes; ++type) {
      const Outcome out = tc->run_type(static_cast<TxnType>(type));
      ASSERT_TRUE(out.status.ok() || (type == kNewOrder && out.status.is_user_abort()))
          << "type " << type << ": " << out.status.to_string();
    }
  }
  EXPECT_EQ(join(without.workload->check(*without.engine)), "");
}

// A promoted follower's workload attaches to replicated tables: with the hint it marks them
// as load() would have (a failover must not turn the hint off), without it it leaves them.
TEST(TpccLoad, AttachAppliesTheReadOnlyHintAsLoadDid) {
  Loaded replicated(1, 1, /*read_only_hint=*/false);
  LoadOptions lo;
  lo.warehouses = 1;
  lo.seed = 42;
  TpccOptions hint_off;
  hint_off.read_only_hint = false;
  TpccWorkload without(hint_off);
  ASSERT_TRUE(without.attach(*replicated.engine, lo).ok());
  EXPECT_FALSE(replicated.t().item->read_only());
  TpccWorkload with(TpccOptions{});
  ASSERT_TRUE(with.attach(*replicated.engine, lo).ok());
  EXPECT_TRUE(replicated.t().item->read_only());
  EXPECT_TRUE(replicated.t().customer_name->read_only());
  EXPECT_FALSE(replicated.t().customer->read_only());
}

TEST(TpccLoad, CheckReportsABrokenCondition) {
  Loaded db(1);
  txn::Worker* worker = db.engine->make_worker();
  // Break condition 1 (and 8) with a raw warehouse update through a transaction.
  struct Args {
    const Tables* t;
  } args{&db.t()};
  Status s = worker->run(
      [](txn::Txn& txn, const void* a, void*) -> Status {
        const Tables& t = *static_cast<const Args*>(a)->t;
        YtdRow w;
        SHOAL_TRY(txn.get(*t.warehouse_ytd, warehouse_key(1), &w));
        w.ytd_cents += 1;
        return txn.put(*t.warehouse_ytd, warehouse_key(1), w);
      },
      &args);
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto failures = db.workload->check(*db.engine);
  ASSERT_EQ(failures.size(), 2u) << join(failures);
  EXPECT_EQ(failures[0], "3.3.2.1 (warehouse 1): W_YTD=30000001 but sum(D_YTD)=30000000");
  EXPECT_EQ(failures[1], "3.3.2.8 (warehouse 1): W_YTD=30000001 but sum(H_AMOUNT)=30000000");

  // A half-done delivery (NEW-ORDER row gone, carrier still null) breaks 3, 5 and 11.
  s = worker->run(
      [](txn::Txn& txn, const void* a, void*) -> Status {
        const Tables& t = *static_cast<const Args*>(a)->t;
        return txn.remove(*t.new_order, order_key(1, 2, 2500));
      },
      &args);
  ASSERT_TRUE(s.ok()) << s.to_string();
  failures = check_tpcc_conditions(*db.engine, /*after_load=*/true);
  const std::string all = join(failures);
  EXPECT_NE(all.find("3.3.2.3 (district 1/2)"), std::string::npos) << all;
  EXPECT_NE(all.find("3.3.2.5 (order 1/2/2500)"), std::string::npos) << all;
  EXPECT_NE(all.find("3.3.2.11 (district 1/2)"), std::string::npos) << all;
}

TEST(TpccTxns, EachTypeDirectlyThenConditionsHold) {
  Loaded db(1);
  txn::Worker* worker = db.engine->make_worker();
  auto client = db.workload->make_client(*worker, 0, 11);
  auto* tc = static_cast<TpccClient*>(client.get());
  const uint32_t n = test_txns(300);
  for (uint32_t type = 0; type < kTxnTypes; ++type) {
    uint32_t user_aborts = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const Outcome out = tc->run_type(static_cast<TxnType>(type));
      if (type == kNewOrder && out.status.is_user_abort()) {
        ++user_aborts;
        continue;
      }
      ASSERT_TRUE(out.status.ok()) << "type " << type << ": " << out.status.to_string();
    }
    if (type == kNewOrder) {
      EXPECT_LT(user_aborts, n / 10 + 5);
    }
    EXPECT_EQ(join(db.workload->check(*db.engine)), "") << "after type " << type;
  }
  EXPECT_EQ(worker->stats().conflict_aborts, 0u);  // one thread: no conflicts
}

TEST(TpccTxns, ResultsMatchTheDatabase) {
  Loaded db(1);
  txn::Worker* worker = db.engine->make_worker();
  const Tables* t = &db.t();

  // Delivery after the load takes order 2101 in every district.
  DeliveryArgs da;
  da.tables = t;
  da.w_id = 1;
  da.carrier_id = 4;
  da.delivery_d_us = 123;
  DeliveryResult dr;
  ASSERT_TRUE(worker->run(&delivery, &da, &dr).ok());
  for (uint32_t d = 0; d < kDistrictsPerWarehouse; ++d) {
    EXPECT_EQ(dr.delivered_o_id[d], 2101u);
  }
  OrderRow o;
  ASSERT_TRUE(t->order->peek(order_key(1, 5, 2101), &o, sizeof(o)).ok());
  EXPECT_EQ(o.carrier_id, 4);

  // OrderStatus of that order's customer sees it delivered.
  OrderStatusArgs oa;
  oa.tables = t;
  oa.w_id = 1;
  oa.d_id = 5;
  oa.customer.c_id = o.c_id;
  OrderStatusResult orr;
  ASSERT_TRUE(worker->run(&order_status, &oa, &orr).ok());
  EXPECT_EQ(orr.o_id, 2101u);
  EXPECT_EQ(orr.carrier_id, 4);
  ASSERT_EQ(orr.ol_cnt, o.ol_cnt);
  EXPECT_EQ(orr.lines[0].delivery_d_us, 123u);

  // Payment by last name picks the midpoint by C_FIRST among that name's customers.
  PaymentArgs pa;
  pa.tables = t;
  pa.w_id = pa.c_w_id = 1;
  pa.d_id = pa.c_d_id = 2;
  pa.customer.by_last_name = true;
  pa.customer.last_num = 17;
  pa.amount_cents = 500;
  pa.history_source = 999;
  pa.history_seq = 1;
  PaymentResult pr;
  ASSERT_TRUE(worker->run(&payment, &pa, &pr).ok());
  std::vector<std::pair<std::string, uint32_t>> matches;
  char want[kLastNameMax];
  last_name(17, want);
  for (uint32_t c = 1; c <= kCustomersPerDistrict; ++c) {
    CustomerRow cr;
    ASSERT_TRUE(t->customer->peek(customer_key(1, 2, c), &cr, sizeof(cr)).ok());
    if (std::memcmp(cr.last, want, 16) == 0) matches.emplace_back(std::string(cr.first, 16), c);
  }
  std::sort(matches.begin(), matches.end());
  ASSERT_FALSE(matches.empty());
  EXPECT_EQ(pr.c_id, matches[(matches.size() - 1) / 2].second);
  EXPECT_EQ(join(db.workload->check(*db.engine)), "");
}

TEST(TpccTxns, InvalidItemNewOrderLeavesNoTrace) {
  Loaded db(1);
  txn::Worker* worker = db.engine->make_worker();
  auto client = db.workload->make_client(*worker, 0, 5);
  auto* tc = static_cast<TpccClient*>(client.get());
  const Tables& t = db.t();
  NewOrderArgs a;
  tc->make_new_order(&a);
  a.items[a.ol_cnt - 1].i_id = kItems + 1;
  StockRow before;
  ASSERT_TRUE(
      t.stock->peek(stock_key(a.items[0].supply_w_id, a.items[0].i_id), &before, sizeof(before))
          .ok());
  const size_t counts[] = {t.order->record_count(), t.new_order->record_count(),
                           t.order_line->record_count(), t.order_customer->record_count()};
  const Status s = worker->run(&new_order, &a);
  EXPECT_TRUE(s.is_user_abort()) << s.to_string();
  EXPECT_EQ(worker->stats().user_aborts, 1u);

  DistrictRow d;
  ASSERT_TRUE(t.district->peek(district_key(a.w_id, a.d_id), &d, sizeof(d)).ok());
  EXPECT_EQ(d.next_o_id, 3001u);
  OrderRow o;
  EXPECT_TRUE(t.order->peek(order_key(a.w_id, a.d_id, 3001), &o, sizeof(o)).is_not_found());
  NewOrderRow no;
  EXPECT_TRUE(t.new_order->peek(order_key(a.w_id, a.d_id, 3001), &no, sizeof(no)).is_not_found());
  StockRow after;
  ASSERT_TRUE(
      t.stock->peek(stock_key(a.items[0].supply_w_id, a.items[0].i_id), &after, sizeof(after))
          .ok());
  EXPECT_EQ(std::memcmp(&before, &after, sizeof(before)), 0);
  // Placeholders of rolled-back inserts may stay in the index but must read as absent.
  size_t visible = 0;
  t.order_line->for_each(order_line_key(a.w_id, a.d_id, 3001, 0),
                         order_line_key(a.w_id, a.d_id, 3001, 0xff),
                         [&](const Key<1>&, const void*, uint32_t) {
                           ++visible;
                           return true;
                         });
  EXPECT_EQ(visible, 0u);
  (void)counts;
  EXPECT_EQ(join(check_tpcc_conditions(*db.engine, /*after_load=*/true)), "");

  // The next valid NewOrder takes the id the rolled-back one did not consume.
  a.items[a.ol_cnt - 1].i_id = 1;
  NewOrderResult r;
  ASSERT_TRUE(worker->run(&new_order, &a, &r).ok());
  EXPECT_EQ(r.o_id, 3001u);
  EXPECT_EQ(join(db.workload->check(*db.engine)), "");
}

// Runs `threads` clients concurrently for n transactions each; every outcome must be a commit
// (or NewOrder's deliberate rollback) and all conditions must hold afterwards.
void run_concurrently(Loaded& db, uint32_t threads, uint32_t n) {
  std::vector<txn::Worker*> workers;
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t i = 0; i < threads; ++i) {
    workers.push_back(db.engine->make_worker());
    clients.push_back(db.workload->make_client(*workers[i], i, 100 + i));
  }
  std::vector<std::array<uint64_t, kTxnTypes>> ok(threads), failed(threads);
  std::vector<std::thread> pool;
  for (uint32_t i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      ok[i].fill(0);
      failed[i].fill(0);
      for (uint32_t k = 0; k < n; ++k) {
        const Outcome out = clients[i]->run_one();
        const bool good = out.status.ok() || (out.type == kNewOrder && out.status.is_user_abort());
        ++(good ? ok[i] : failed[i])[out.type];
      }
    });
  }
  for (auto& th : pool) th.join();
  uint64_t total_ok = 0;
  for (uint32_t i = 0; i < threads; ++i) {
    for (uint32_t type = 0; type < kTxnTypes; ++type) {
      EXPECT_EQ(failed[i][type], 0u) << "thread " << i << " type " << type;
      total_ok += ok[i][type];
    }
  }
  EXPECT_EQ(total_ok, uint64_t{n} * threads);
  EXPECT_EQ(join(db.workload->check(*db.engine)), "");
}

// Two warehouses, one worker each (the standard binding), with remote items and customers.
TEST(TpccTxns, ConcurrentTpccTwoWarehousesTwoWorkers) {
  Loaded db(2, /*load_workers=*/2);
  run_concurrently(db, 2, test_txns(4000));
}

// Both workers on one warehouse: every Payment and NewOrder conflicts on hot rows.
TEST(TpccTxns, ConcurrentTpccOneWarehouseContended) {
  Loaded db(1);
  run_concurrently(db, 2, test_txns(4000) / 2);
}

}  // namespace
}  // namespace shoal::workload

#include "src/server/dist_tpcc.h"

#include <cstring>

#include <fmt/format.h>

#include "src/base/ebr.h"

namespace shoal::server {

using namespace workload::tpcc;  // NOLINT: the TPC-C vocabulary throughout
using workload::TpccInput;

namespace {

// Fragment adapters: arguments arrive as bytes (they may have crossed processes), so sizes
// are checked before the typed piece runs on the shard's own tables.
template <typename Args>
Status parse_args(std::span<const uint8_t> bytes, Args* out) {
  if (bytes.size() != sizeof(Args)) {
    return Status::InvalidArgument(
        fmt::format("tpcc fragment: {} argument bytes, expected {}", bytes.size(), sizeof(Args)));
  }
  std::memcpy(out, bytes.data(), sizeof(Args));
  return Status::Ok();
}

template <typename Args, typename Out, Status (*Fn)(txn::Txn&, const Tables&, const Args&, Out*)>
Status typed_fragment(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args,
                      std::span<uint8_t> out, uint32_t* out_size) {
  Args a;
  SHOAL_TRY(parse_args(args, &a));
  if (out.size() < sizeof(Out)) return Status::InvalidArgument("tpcc fragment: result too small");
  Out r{};
  SHOAL_TRY(Fn(txn, *static_cast<const Tables*>(ctx), a, &r));
  std::memcpy(out.data(), &r, sizeof(Out));
  *out_size = sizeof(Out);
  return Status::Ok();
}

Status payment_home_fragment(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args,
                             std::span<uint8_t>, uint32_t* out_size) {
  PaymentHomeArgs a;
  SHOAL_TRY(parse_args(args, &a));
  *out_size = 0;
  return payment_home(txn, *static_cast<const Tables*>(ctx), a);
}

// What a distributed procedure gets: the terminal's context and its input.
struct DistArgs {
  const TpccShardContext* ctx;
  const TpccInput* in;
  uint32_t* o_id;  // NewOrder: where its order id goes
};

rt::Task<Status> dist_new_order(dist::DistTxn& txn, const void* args, void*) {
  const auto& x = *static_cast<const DistArgs*>(args);
  const NewOrderArgs& a = x.in->new_order;
  const uint32_t home = x.ctx->shard;
  NewOrderHomeArgs h;
  h.order = a;
  h.order.tables = nullptr;
  // One stock fragment per remote shard, carrying that shard's order lines.
  for (uint32_t n = 0; n < a.ol_cnt; ++n) {
    const uint32_t shard = x.ctx->map->shard_of(a.items[n].supply_w_id);
    if (shard == home || ((h.remote_mask >> n) & 1)) continue;
    StockFragmentArgs sa;
    sa.home_w_id = a.w_id;
    sa.d_id = a.d_id;
    uint8_t line_of[kMaxOrderLines];
    for (uint32_t m = n; m < a.ol_cnt; ++m) {
      if (x.ctx->map->shard_of(a.items[m].supply_w_id) != shard) continue;
      line_of[sa.count] = static_cast<uint8_t>(m);
      sa.items[sa.count++] = a.items[m];
      h.remote_mask |= 1u << m;
    }
    StockFragmentResult sr;
    SHOAL_CO_TRY(co_await txn.exec(shard, kFragNewOrderStock, sa, &sr, /*last_on_shard=*/true));
    for (uint32_t k = 0; k < sa.count; ++k) h.remote[line_of[k]] = sr.lines[k];
  }
  NewOrderResult r;
  const Status s = co_await txn.exec(home, kFragNewOrderHome, h, &r);
  *x.o_id = r.o_id;
  co_return s;
}

// The customer's part first, on its shard (locking there in the same round trip: it returns
// the customer id, which the HISTORY row needs), then the home part, then the commit (the
// customer's shard validates and installs in one more round trip). Home reads come last, right
// before our own validation: nothing can change them in between.
rt::Task<Status> dist_payment(dist::DistTxn& txn, const void* args, void*) {
  const auto& x = *static_cast<const DistArgs*>(args);
  PaymentHomeArgs h;
  h.payment = x.in->payment;
  h.payment.tables = nullptr;
  PaymentResult r;
  SHOAL_CO_TRY(co_await txn.exec(x.ctx->map->shard_of(h.payment.c_w_id), kFragPaymentCustomer,
                                 h.payment, &r, /*last_on_shard=*/true));
  h.c_id = r.c_id;
  co_return co_await txn.exec(x.ctx->shard, kFragPaymentHome,
                              {reinterpret_cast<const uint8_t*>(&h), sizeof(h)}, {}, nullptr);
}

// Which procedure runs `in`, and whether it leaves the home shard.
bool crosses_shards(const TpccShardContext& ctx, const TpccInput& in) {
  if (in.type == kPayment) return ctx.map->shard_of(in.payment.c_w_id) != ctx.shard;
  if (in.type != kNewOrder) return false;
  for (uint32_t n = 0; n < in.new_order.ol_cnt; ++n) {
    if (ctx.map->shard_of(in.new_order.items[n].supply_w_id) != ctx.shard) return true;
  }
  return false;
}

// One attempt on the worker's Txn: begin, run, commit (and the commit hook); nothing held
// afterwards.
Status attempt_local(const TpccShardContext& ctx, txn::Procedure proc, const void* args,
                     void* result) {
  txn::Txn& txn = ctx.local->txn();
  txn.begin();
  Status s = proc(txn, args, result);
  if (s.ok()) s = txn.commit();
  if (s.ok() && ctx.commit_hook != nullptr) {
    Status logged = ctx.commit_hook(ctx.commit_hook_ctx, txn);
    if (!logged.ok()) {  // installed, not logged: never acknowledged (txn::CommitHook)
      txn.end();
      return logged;
    }
  }
  if (!s.ok()) txn.abort();
  txn.end();
  return s;
}

constexpr uint32_t kLocalAttemptsMax = 1'000'000;

rt::Task<TpccOutcome> run_local(TpccShardContext& ctx, const TpccInput& in) {
  TpccOutcome out;
  const txn::Procedure proc = procedure_of(in.type);
  const void* args = &in.new_order;  // every member of the union starts at its address
  const uint64_t give_up_ns = ctx.loop->now_ns() + ctx.local_retry_ns_max;
  // Bounded by the time (every attempt from the fifth sleeps at least 20 us); the count is a
  // backstop.
  for (uint32_t attempt = 0; attempt < kLocalAttemptsMax; ++attempt) {
    if (attempt > 0 && ctx.loop->now_ns() >= give_up_ns) break;
    NewOrderResult r;  // only NewOrder writes one
    out.status = attempt_local(ctx, proc, args, in.type == kNewOrder ? &r : nullptr);
    if (out.status.ok() && in.type == kNewOrder) out.o_id = r.o_id;
    if ((++ctx.local_runs & 63) == 0) ebr::quiesce();  // as txn::Worker::run does
    if (!out.status.is_aborted()) co_return out;
    ++out.conflicts;
    // The lock in the way may be a remote coordinator's, released by a message this loop
    // has yet to read: let the loop run before trying again.
    if (attempt < 4) {
      co_await ctx.loop->yield();
    } else {
      (co_await ctx.loop->sleep_for(uint64_t{20'000} << std::min<uint32_t>(attempt - 4, 6)))
          .ignore();
    }
  }
  out.status = Status::Aborted("retries exhausted");
  co_return out;
}

}  // namespace

dist::FragmentTable make_tpcc_fragments(const Tables* tables) {
  dist::FragmentTable t;
  t.ctx = tables;
  t.fns[kFragNewOrderStock] =
      &typed_fragment<StockFragmentArgs, StockFragmentResult, &new_order_stock>;
  t.fns[kFragNewOrderHome] = &typed_fragment<NewOrderHomeArgs, NewOrderResult, &new_order_home>;
  t.fns[kFragPaymentCustomer] = &typed_fragment<PaymentArgs, PaymentResult, &payment_customer>;
  t.fns[kFragPaymentHome] = &payment_home_fragment;
  return t;
}

WarehouseMap::WarehouseMap(const cluster::ClusterConfig& config) {
  uint64_t last = 0;
  for (const auto& s : config.shards) last = std::max(last, s.partition_hi - 1);
  shard_of_.assign(last + 1, 0);
  for (uint32_t s = 0; s < config.shards.size(); ++s) {
    for (uint64_t w = config.shards[s].partition_lo; w < config.shards[s].partition_hi; ++w) {
      shard_of_[w] = s;
    }
  }
}

uint32_t WarehouseMap::first(uint32_t shard) const {
  for (uint32_t w = 1; w < shard_of_.size(); ++w) {
    if (shard_of_[w] == shard) return w;
  }
  return 0;
}

uint32_t WarehouseMap::last(uint32_t shard) const {
  for (uint32_t w = static_cast<uint32_t>(shard_of_.size()) - 1; w >= 1; --w) {
    if (shard_of_[w] == shard) return w;
  }
  return 0;
}

rt::Task<TpccOutcome> run_tpcc_txn(TpccShardContext& ctx, dist::DistTxn& dtxn, TpccInput& in) {
  if (!crosses_shards(ctx, in)) co_return co_await run_local(ctx, in);
  TpccOutcome out;
  out.cross = true;
  const DistArgs args{&ctx, &in, &out.o_id};
  const dist::DistProcedure proc = in.type == kPayment ? &dist_payment : &dist_new_order;
  // Its conflict retries are counted by the coordinator (CoordinatorStats).
  out.status = co_await ctx.coordinator->run(dtxn, proc, &args, nullptr);
  co_return out;
}

}  // namespace shoal::server

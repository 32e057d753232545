// RPC over the simulated network: echo, window, timeouts, peer death; a replicated counter
// surviving loss, duplication, reordering and partitions over many seeds; determinism (same
// seed -> same trace hash, different seed -> different); WAN shaper round trip.
// Every failure message carries the seed; SHOAL_SIM_SEED=<seed> reruns just that seed.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "sim/sim_network.h"
#include "src/net/wan_shaper.h"
#include "src/runtime/rpc.h"

namespace shoal::sim {
namespace sim_rpc_test {  // named, not anonymous: unique in a unity build

using rt::EventLoop;
using rt::MsgBuffer;
using rt::RpcEndpoint;
using rt::RpcRequest;
using rt::Task;
using Rpc = RpcEndpoint<SimEndpoint>;

constexpr uint16_t kEcho = 1;
constexpr uint16_t kIncr = 2;
constexpr uint16_t kApply = 3;
constexpr uint64_t kMs = 1'000'000;

MsgBuffer u64_msg(Rpc& rpc, uint64_t v) {
  MsgBuffer b = rpc.buffer(8);
  std::memcpy(b.payload().data(), &v, 8);
  return b;
}
uint64_t u64_of(std::span<const uint8_t> p) {
  uint64_t v = 0;
  if (p.size() == 8) std::memcpy(&v, p.data(), 8);
  return v;
}

// One RPC link between two nodes, each end on its node's loop.
struct Link {
  SimEndpoint ep[2];
  std::unique_ptr<Rpc> rpc[2];
};

struct Cluster {
  Cluster(uint64_t seed, uint32_t nodes, NetworkOptions o = {}) : env(seed), net(env, nodes, o) {
    for (uint32_t i = 0; i < nodes; ++i) {
      loops.push_back(std::make_unique<EventLoop>(env));
      env.attach(*loops.back());
    }
  }
  ~Cluster() {
    for (auto& l : links) l.reset();  // RPC endpoints before loops
  }
  Link& connect(NodeId a, NodeId b, rt::RpcOptions o) {
    auto pair = net.connect(a, b);
    SHOAL_CHECK(pair.ok());
    auto link = std::make_unique<Link>();
    link->ep[0] = std::move(pair->first);
    link->ep[1] = std::move(pair->second);
    link->rpc[0] = std::make_unique<Rpc>(*loops[a], link->ep[0], o);
    link->rpc[1] = std::make_unique<Rpc>(*loops[b], link->ep[1], o);
    SHOAL_CHECK(link->rpc[0]->start().ok());
    SHOAL_CHECK(link->rpc[1]->start().ok());
    links.push_back(std::move(link));
    return *links.back();
  }
  SimEnv env;
  SimNetwork net;
  std::vector<std::unique_ptr<EventLoop>> loops;
  std::vector<std::unique_ptr<Link>> links;
};

rt::RpcHandler echo_handler() {
  return [](RpcRequest& r) -> Task<Status> {
    r.response->assign(r.payload);
    co_return Status::Ok();
  };
}

TEST(SimRpc, EchoAndWindowBound) {
  Cluster c(11, 2);
  rt::RpcOptions o;
  o.window = 4;
  Link& l = c.connect(0, 1, o);
  uint32_t max_running = 0, running = 0;
  l.rpc[1]->handle(kEcho, [&](RpcRequest& r) -> Task<Status> {
    max_running = std::max(max_running, ++running);
    (void)co_await c.loops[1]->sleep_for(kMs);
    --running;
    r.response->assign(r.payload);
    co_return Status::Ok();
  });
  int ok = 0;
  for (uint64_t i = 0; i < 40; ++i) {
    ASSERT_TRUE(c.loops[0]
                    ->spawn([](Rpc* rpc, uint64_t v, int* ok) -> Task<void> {
                      auto r = co_await rpc->call(0, kEcho, u64_msg(*rpc, v));
                      if (r.ok() && u64_of(r->payload()) == v) ++*ok;
                    }(l.rpc[0].get(), i, &ok))
                    .ok());
  }
  ASSERT_TRUE(c.env.run_until(rt::kNever).ok());
  EXPECT_EQ(ok, 40);
  EXPECT_EQ(max_running, 4u);  // the window (4) bounds concurrent requests per session
  EXPECT_EQ(l.rpc[0]->outstanding(), 0u);
}

TEST(SimRpc, UnknownMethodReportsNotSupported) {
  Cluster c(12, 2);
  Link& l = c.connect(0, 1, {});
  Status got;
  ASSERT_TRUE(c.loops[0]
                  ->spawn([](Rpc* rpc, Status* s) -> Task<void> {
                    auto r = co_await rpc->call(3, 99, rpc->buffer(0));
                    *s = r.status();
                  }(l.rpc[0].get(), &got))
                  .ok());
  ASSERT_TRUE(c.env.run_until(rt::kNever).ok());
  EXPECT_EQ(got.code(), Code::kNotSupported);
}

TEST(SimRpc, PartitionedCallTimesOut) {
  Cluster c(13, 2);
  rt::RpcOptions o;
  o.timeout_ns = 100 * kMs;
  o.retransmit_ns = 5 * kMs;
  Link& l = c.connect(0, 1, o);
  l.rpc[1]->handle(kEcho, echo_handler());
  c.net.partition(0, 1);
  Status got;
  uint64_t done_at = 0;
  ASSERT_TRUE(c.loops[0]
                  ->spawn([](Rpc* rpc, EventLoop* loop, Status* s, uint64_t* t) -> Task<void> {
                    auto r = co_await rpc->call(0, kEcho, rpc->buffer(16));
                    *s = r.status();
                    *t = loop->now_ns();
                  }(l.rpc[0].get(), c.loops[0].get(), &got, &done_at))
                  .ok());
  ASSERT_TRUE(c.env.run_until(rt::kNever).ok());
  EXPECT_EQ(got.code(), Code::kTimeout) << got.to_string();
  EXPECT_GE(done_at, 100 * kMs);
  EXPECT_LE(done_at, 102 * kMs);  // tick granularity (1 ms)
  EXPECT_GE(l.rpc[0]->stats().retransmits, 4u);
}

TEST(SimRpc, PeerCrashFailsOutstandingCallsWithUnavailable) {
  Cluster c(14, 2);
  Link& l = c.connect(0, 1, {});
  l.rpc[1]->handle(kEcho, [&](RpcRequest&) -> Task<Status> {
    (void)co_await c.loops[1]->sleep_for(10'000 * kMs);  // never answers in time
    co_return Status::Ok();
  });
  std::vector<Status> got(6);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(c.loops[0]
                    ->spawn([](Rpc* rpc, uint32_t session, Status* s) -> Task<void> {
                      auto r = co_await rpc->call(session, kEcho, rpc->buffer(8));
                      *s = r.status();
                    }(l.rpc[0].get(), static_cast<uint32_t>(i % 2), &got[i]))
                    .ok());
  }
  ASSERT_TRUE(c.env.run_for(5 * kMs).ok());
  EXPECT_EQ(l.rpc[0]->outstanding(), 6u);
  c.net.crash(1);
  c.env.detach(*c.loops[1]);  // the crashed node's core stops running
  ASSERT_TRUE(c.env.run_for(10 * kMs).ok());
  for (const Status& s : got) EXPECT_EQ(s.code(), Code::kUnavailable) << s.to_string();
  EXPECT_EQ(l.rpc[0]->outstanding(), 0u);
  // Later calls fail at once.
  Status later;
  ASSERT_TRUE(c.loops[0]
                  ->spawn([](Rpc* rpc, Status* s) -> Task<void> {
                    *s = (co_await rpc->call(0, kEcho, rpc->buffer(8))).status();
                  }(l.rpc[0].get(), &later))
                  .ok());
  ASSERT_TRUE(c.env.run_for(kMs).ok());
  EXPECT_EQ(later.code(), Code::kUnavailable);
}

TEST(SimRpc, HandlersRunAtMostOnceUnderLossAndDuplication) {
  NetworkOptions no;
  no.faults.loss = 0.3;
  no.faults.duplicate = 0.3;
  no.faults.reorder = 0.3;
  Cluster c(15, 2, no);
  rt::RpcOptions o;
  o.retransmit_ns = 2 * kMs;
  o.timeout_ns = 10'000 * kMs;
  Link& l = c.connect(0, 1, o);
  std::vector<int> runs(400, 0);
  l.rpc[1]->handle(kEcho, [&](RpcRequest& r) -> Task<Status> {
    ++runs[u64_of(r.payload)];
    r.response->assign(r.payload);
    co_return Status::Ok();
  });
  int ok = 0;
  for (uint64_t i = 0; i < runs.size(); ++i) {
    ASSERT_TRUE(c.loops[0]
                    ->spawn([](Rpc* rpc, uint64_t v, int* ok) -> Task<void> {
                      auto r =
                          co_await rpc->call(static_cast<uint32_t>(v % 8), kEcho, u64_msg(*rpc, v));
                      if (r.ok() && u64_of(r->payload()) == v) ++*ok;
                    }(l.rpc[0].get(), i, &ok))
                    .ok());
  }
  ASSERT_TRUE(c.env.run_until(rt::kNever).ok());
  EXPECT_EQ(ok, 400) << c.env.replay_hint();
  for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i], 1) << "request " << i;
  const auto& cs = l.rpc[0]->stats();
  const auto& ss = l.rpc[1]->stats();
  EXPECT_GT(cs.retransmits, 0u);
  EXPECT_GT(ss.duplicate_requests + ss.cached_replies, 0u);
  EXPECT_GT(cs.stale_responses, 0u);
}

// ---------------- replicated counter ----------------
//
// Node 0 leads, 1 and 2 follow, 3 is a client with 4 sessions of sequential increments.
// kIncr at the leader: value += 1, then kApply(value) to each follower; succeeds once a
// follower acknowledged (a majority with the leader). Followers keep max(applied). After the
// client finishes, partitions heal and the leader pushes its value until both followers have
// it. Checks: acknowledged increments returned distinct values; acked <= value <= acked +
// failed (a failed call may or may not have run: at-most-once); handler runs == value
// (no duplicate execution); followers == leader at the end.

struct CounterRun {
  uint64_t trace_hash = 0;
  uint64_t value = 0;
  uint64_t acked = 0;
  uint64_t failed = 0;
  uint64_t follower[2] = {0, 0};
  uint64_t incr_runs = 0;
  bool distinct = true;
  bool finished = false;
  std::string hint;
  std::string summary;  // network and RPC counters, for the log
};

struct Chaos {
  SimNetwork* net;
  Rng rng;
  uint64_t until_ns;
  static void tick(void* self, uint64_t) {
    auto* c = static_cast<Chaos*>(self);
    if (c->net->env().now_ns() >= c->until_ns) return;
    const auto a = static_cast<NodeId>(c->rng.uniform(0, 3));
    const auto b = static_cast<NodeId>(c->rng.uniform(0, 3));
    const uint64_t dice = c->rng.uniform(0, 9);
    if (dice < 3 && a != b)
      c->net->partition(a, b);
    else if (dice < 6)
      c->net->heal_all();
    else if (dice == 6)
      c->net->isolate({static_cast<NodeId>(c->rng.uniform(0, 2))});
    c->net->env().after(c->rng.uniform(2, 30) * kMs, &Chaos::tick, self);
  }
};

CounterRun run_counter(uint64_t seed, int increments_per_session = 25) {
  NetworkOptions no;
  no.faults.loss = 0.1;
  no.faults.duplicate = 0.1;
  no.faults.reorder = 0.1;
  Cluster c(seed, 4, no);
  rt::RpcOptions o;
  o.window = 4;
  o.retransmit_ns = 3 * kMs;
  o.timeout_ns = 150 * kMs;
  Link& cl = c.connect(3, 0, o);  // client -> leader
  Link& f1 = c.connect(0, 1, o);
  Link& f2 = c.connect(0, 2, o);
  Rpc* followers[2] = {f1.rpc[0].get(), f2.rpc[0].get()};
  CounterRun out;
  uint64_t value = 0;
  for (int f = 0; f < 2; ++f) {
    Link& fl = f == 0 ? f1 : f2;
    fl.rpc[1]->handle(kApply, [&out, f](RpcRequest& r) -> Task<Status> {
      out.follower[f] = std::max(out.follower[f], u64_of(r.payload));
      co_return Status::Ok();
    });
  }
  cl.rpc[1]->handle(kIncr, [&](RpcRequest& r) -> Task<Status> {
    ++out.incr_runs;
    const uint64_t v = ++value;
    c.env.trace(1000, v);
    int acks = 0;
    for (Rpc* f : followers) {
      auto a = co_await f->call(r.session, kApply, u64_msg(*f, v), 40 * kMs);
      if (a.ok()) ++acks;
    }
    if (acks == 0) co_return Status::Unavailable("no follower acknowledged");
    r.response->assign({reinterpret_cast<const uint8_t*>(&v), 8});
    co_return Status::Ok();
  });
  std::set<uint64_t> seen;
  int sessions_done = 0;
  for (uint32_t s = 0; s < 4; ++s) {
    SHOAL_CHECK(
        c.loops[3]
            ->spawn([](Rpc* rpc, uint32_t session, int n, CounterRun* out, std::set<uint64_t>* seen,
                       int* done, SimEnv* env, EventLoop* loop) -> Task<void> {
              Rng think(env->seed());
              for (int i = 0; i < n; ++i) {
                // Think time spreads the run over ~0.5 s of chaos.
                (void)co_await loop->sleep_for(think.uniform(1, 40) * kMs);
                auto r = co_await rpc->call(session, kIncr, rpc->buffer(0));
                if (r.ok()) {
                  ++out->acked;
                  out->distinct &= seen->insert(u64_of(r->payload())).second;
                  env->trace(1001, session, u64_of(r->payload()));
                } else {
                  ++out->failed;
                  env->trace(1002, session, static_cast<uint64_t>(r.status().code()));
                }
              }
              ++*done;
            }(cl.rpc[0].get(), s, increments_per_session, &out, &seen, &sessions_done, &c.env,
                                                                c.loops[3].get()))
            .ok());
  }
  Chaos chaos{&c.net, Rng(seed ^ 0xc4a05), 2'000 * kMs};
  c.env.after(10 * kMs, &Chaos::tick, &chaos);
  Status st = c.env.run_until_true([&] { return sessions_done == 4; }, 60'000 * kMs);
  out.hint = c.env.replay_hint();
  if (!st.ok()) return out;
  // Quiesce: stop the chaos, heal, let late handlers and messages drain (follower calls time
  // out after 40 ms, messages live < 1 ms), then push the final value to both followers.
  chaos.until_ns = 0;
  c.net.heal_all();
  st = c.env.run_for(1'000 * kMs);
  if (!st.ok()) return out;
  bool synced = false;
  SHOAL_CHECK(c.loops[0]
                  ->spawn([](Rpc** fs, uint64_t* value, bool* synced) -> Task<void> {
                    for (Rpc* f : {fs[0], fs[1]}) {
                      for (int attempt = 0; attempt < 100; ++attempt) {  // bounded retries
                        auto a = co_await f->call(63, kApply, u64_msg(*f, *value), 50 * kMs);
                        if (a.ok()) break;
                      }
                    }
                    *synced = true;
                  }(followers, &value, &synced))
                  .ok());
  st = c.env.run_until_true([&] { return synced; }, c.env.now_ns() + 60'000 * kMs);
  if (!st.ok()) return out;
  out.finished = true;
  out.value = value;
  const NetworkStats& ns = c.net.stats();
  out.summary = fmt::format(
      "virtual {} ms, {} events; net sent {} delivered {} lost {} dup {} reordered {} "
      "partition-dropped {}; leader rpc: retransmits {} timeouts {}; dup requests at leader {}",
      c.env.now_ns() / kMs, c.env.events_run(), ns.sent, ns.delivered, ns.lost, ns.duplicated,
      ns.reordered, ns.partition_drops, cl.rpc[0]->stats().retransmits, cl.rpc[0]->stats().timeouts,
      cl.rpc[1]->stats().duplicate_requests + cl.rpc[1]->stats().cached_replies);
  c.env.trace(1003, value, out.follower[0] ^ (out.follower[1] << 32));
  out.trace_hash = c.env.trace_hash();
  return out;
}

void check_counter(const CounterRun& r, int total) {
  ASSERT_TRUE(r.finished) << "did not finish; " << r.hint;
  EXPECT_EQ(r.acked + r.failed, static_cast<uint64_t>(total)) << r.hint;
  EXPECT_TRUE(r.distinct) << "two increments acknowledged the same value; " << r.hint;
  EXPECT_GE(r.value, r.acked) << r.hint;
  EXPECT_LE(r.value, r.acked + r.failed) << r.hint;
  EXPECT_EQ(r.incr_runs, r.value) << "an increment ran twice; " << r.hint;
  EXPECT_EQ(r.follower[0], r.value) << r.hint;
  EXPECT_EQ(r.follower[1], r.value) << r.hint;
}

TEST(SimCounter, SurvivesFaultsOverManySeeds) {
  const uint64_t only = SimEnv::seed_from_env(0);
  const uint64_t first = only != 0 ? only : 1000;
  const uint64_t count = only != 0 ? 1 : 120;
  uint64_t acked = 0, failed = 0;
  for (uint64_t seed = first; seed < first + count; ++seed) {
    CounterRun r = run_counter(seed);
    check_counter(r, 100);
    if (::testing::Test::HasFailure()) {
      std::fprintf(stderr, "replicated counter failed: %s\n", r.hint.c_str());
      return;
    }
    acked += r.acked;
    failed += r.failed;
  }
  std::printf("replicated counter: %lu seeds, %lu increments acknowledged, %lu failed\n", count,
              acked, failed);
  EXPECT_GT(acked, count * 50);  // faults must not make the protocol useless
}

TEST(SimDeterminism, SameSeedSameTraceDifferentSeedDifferentTrace) {
  const uint64_t seed = SimEnv::seed_from_env(4242);
  const CounterRun a = run_counter(seed);
  const CounterRun b = run_counter(seed);
  const CounterRun other = run_counter(seed + 1);
  ASSERT_TRUE(a.finished && b.finished && other.finished) << a.hint;
  EXPECT_EQ(a.trace_hash, b.trace_hash) << "same seed, different run: " << a.hint;
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(a.acked, b.acked);
  EXPECT_NE(a.trace_hash, other.trace_hash) << a.hint;
  std::printf("seed %lu: trace %016lx; %s\n", seed, a.trace_hash, a.summary.c_str());
}

TEST(SimRpc, WanShaperAddsOneWayDelayBothWays) {
  NetworkOptions no;
  no.faults.min_delay_ns = no.faults.max_delay_ns = 10'000;
  Cluster c(16, 2, no);
  auto pair = c.net.connect(0, 1);
  ASSERT_TRUE(pair.ok());
  net::WanMatrix wan(2);
  wan.set(0, 1, {25 * kMs, 2 * kMs});
  using Shaped = net::WanShaped<SimEndpoint>;
  // Each side delays what it receives: node 0 receives from region 1 and vice versa.
  Shaped s0(std::move(pair->first), wan.between(1, 0), c.env);
  Shaped s1(std::move(pair->second), wan.between(0, 1), c.env);
  RpcEndpoint<Shaped> r0(*c.loops[0], s0), r1(*c.loops[1], s1);
  ASSERT_TRUE(r0.start().ok() && r1.start().ok());
  r1.handle(kEcho, echo_handler());
  std::vector<uint64_t> rtts;
  ASSERT_TRUE(c.loops[0]
                  ->spawn([](RpcEndpoint<Shaped>* rpc, EventLoop* loop,
                             std::vector<uint64_t>* rtts) -> Task<void> {
                    for (int i = 0; i < 20; ++i) {
                      const uint64_t t0 = loop->now_ns();
                      auto r = co_await rpc->call(0, kEcho, rpc->buffer(32));
                      if (r.ok()) rtts->push_back(loop->now_ns() - t0);
                    }
                  }(&r0, c.loops[0].get(), &rtts))
                  .ok());
  ASSERT_TRUE(c.env.run_until(rt::kNever).ok());
  ASSERT_EQ(rtts.size(), 20u);
  for (uint64_t rtt : rtts) {
    EXPECT_GE(rtt, 50 * kMs + 20'000);
    EXPECT_LE(rtt, 54 * kMs + 20'000);
  }
}

}  // namespace sim_rpc_test
}  // namespace shoal::sim

// SimEnv scheduling and SimNetwork fault semantics.
#include "sim/sim_network.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/net/wan_shaper.h"

namespace shoal::sim {
namespace {

static_assert(net::TransportEndpoint<net::WanShaped<SimEndpoint>>);

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Drains every pending completion of `ep` into strings.
std::vector<std::string> drain(SimEndpoint& ep) {
  std::vector<std::string> out;
  net::Completion c[16];
  for (;;) {
    auto n = ep.poll(c, 16);
    if (!n.ok() || *n == 0) break;
    for (size_t i = 0; i < *n; ++i) out.emplace_back(c[i].bytes.begin(), c[i].bytes.end());
    ep.release();
  }
  return out;
}

TEST(SimEnv, EventsRunInTimeThenInsertionOrder) {
  SimEnv env(1);
  std::vector<int> order;
  struct Ctx {
    std::vector<int>* order;
  } ctx{&order};
  auto rec = [](void* c, uint64_t arg) {
    static_cast<Ctx*>(c)->order->push_back(static_cast<int>(arg));
  };
  env.at(300, rec, &ctx, 3);
  env.at(100, rec, &ctx, 1);
  env.at(200, rec, &ctx, 2);
  env.at(200, rec, &ctx, 22);
  ASSERT_TRUE(env.run_until(250).ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 22}));
  EXPECT_EQ(env.now_ns(), 250u);
  ASSERT_TRUE(env.run_until(rt::kNever).ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 22, 3}));
  EXPECT_EQ(env.now_ns(), 300u);
}

TEST(SimEnv, DrivesLoopTimersInVirtualTime) {
  SimEnv env(2);
  rt::EventLoop loop(env);
  env.attach(loop);
  uint64_t woke = 0;
  ASSERT_TRUE(loop.spawn([](rt::EventLoop* l, uint64_t* w) -> rt::Task<void> {
                    (void)co_await l->sleep_for(5'000'000'000ULL);  // 5 s of virtual time
                    *w = l->now_ns();
                  }(&loop, &woke))
                  .ok());
  ASSERT_TRUE(env.run_until(rt::kNever).ok());
  EXPECT_EQ(woke, 5'000'000'000ULL);
}

TEST(SimNetwork, DeliversInOrderAfterDelay) {
  SimEnv env(3);
  SimNetwork net(env, 2);
  auto link = net.connect(0, 1);
  ASSERT_TRUE(link.ok());
  auto& [a, b] = *link;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(a.send(7, bytes_of(std::to_string(i))).ok());
  EXPECT_TRUE(drain(b).empty());  // nothing arrives before its delay
  ASSERT_TRUE(env.run_until(rt::kNever).ok());
  auto got = drain(b);
  ASSERT_EQ(got.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(got[i], std::to_string(i));
  EXPECT_GE(env.now_ns(), 20'000u);
  EXPECT_LE(env.now_ns(), 80'000u);
}

TEST(SimNetwork, LossDuplicationReorderAreCounted) {
  SimEnv env(4);
  NetworkOptions o;
  o.faults.loss = 0.2;
  o.faults.duplicate = 0.2;
  o.faults.reorder = 0.2;
  SimNetwork net(env, 2, o);
  auto link = net.connect(0, 1);
  ASSERT_TRUE(link.ok());
  auto& [a, b] = *link;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(a.send(0, bytes_of(std::to_string(i))).ok());
  ASSERT_TRUE(env.run_until(rt::kNever).ok());
  auto got = drain(b);
  EXPECT_EQ(got.size(), net.stats().delivered);
  EXPECT_GT(net.stats().lost, 100u);
  EXPECT_GT(net.stats().duplicated, 100u);
  EXPECT_GT(net.stats().reordered, 100u);
  bool out_of_order = false;
  for (size_t i = 1; i < got.size(); ++i) out_of_order |= std::stoi(got[i]) < std::stoi(got[i - 1]);
  EXPECT_TRUE(out_of_order);
}

TEST(SimNetwork, PartitionDropsUntilHealed) {
  SimEnv env(5);
  SimNetwork net(env, 3);
  auto link = net.connect(0, 1);
  ASSERT_TRUE(link.ok());
  auto& [a, b] = *link;
  net.partition(0, 1);
  ASSERT_TRUE(a.send(0, bytes_of("lost")).ok());
  ASSERT_TRUE(env.run_for(1'000'000).ok());
  EXPECT_TRUE(drain(b).empty());
  net.heal(0, 1);
  ASSERT_TRUE(a.send(0, bytes_of("kept")).ok());
  // A message in flight when the partition starts is dropped on arrival.
  net.isolate({1});
  ASSERT_TRUE(env.run_for(1'000'000).ok());
  EXPECT_TRUE(drain(b).empty());
  net.heal_all();
  ASSERT_TRUE(a.send(0, bytes_of("after")).ok());
  ASSERT_TRUE(env.run_for(1'000'000).ok());
  EXPECT_EQ(drain(b), (std::vector<std::string>{"after"}));
  EXPECT_EQ(net.stats().partition_drops, 2u);
}

TEST(SimNetwork, CrashFailsBothEndsAndRestartReconnects) {
  SimEnv env(6);
  SimNetwork net(env, 2);
  auto link = net.connect(0, 1);
  ASSERT_TRUE(link.ok());
  auto& [a, b] = *link;
  ASSERT_TRUE(a.send(0, bytes_of("in flight")).ok());
  net.crash(1);
  EXPECT_EQ(b.poll(nullptr, 0).status().code(), Code::kUnavailable);  // its own end: at once
  net::Completion c;
  auto n = a.poll(&c, 1);
  ASSERT_TRUE(n.ok());  // the peer has not noticed yet (detect_ns)
  ASSERT_TRUE(env.run_for(2'000'000).ok());
  n = a.poll(&c, 1);
  EXPECT_EQ(n.status().code(), Code::kUnavailable);
  EXPECT_EQ(a.send(0, bytes_of("x")).code(), Code::kUnavailable);
  EXPECT_EQ(net.connect(0, 1).status().code(), Code::kUnavailable);
  net.restart(1);
  auto again = net.connect(0, 1);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->first.send(0, bytes_of("hello")).ok());
  ASSERT_TRUE(env.run_for(1'000'000).ok());
  EXPECT_EQ(drain(again->second), (std::vector<std::string>{"hello"}));
}

TEST(SimNetwork, CloseDeliversThenReportsUnavailable) {
  SimEnv env(7);
  SimNetwork net(env, 2);
  auto link = net.connect(0, 1);
  ASSERT_TRUE(link.ok());
  auto& [a, b] = *link;
  ASSERT_TRUE(a.send(0, bytes_of("last words")).ok());
  a.close();
  net::Completion c;
  auto n = b.poll(&c, 1);
  ASSERT_TRUE(n.ok());  // the message is still on the wire
  EXPECT_EQ(*n, 0u);
  ASSERT_TRUE(env.run_for(1'000'000).ok());
  EXPECT_EQ(drain(b), (std::vector<std::string>{"last words"}));
  EXPECT_EQ(b.poll(&c, 1).status().code(), Code::kUnavailable);
}

TEST(SimNetwork, FencedWritesAreRefusedOrDropped) {
  SimEnv env(8);
  SimNetwork net(env, 2);
  auto link = net.connect(0, 1);
  ASSERT_TRUE(link.ok());
  auto& [a, b] = *link;
  ASSERT_TRUE(a.write_with_imm(1, 9, bytes_of("stale in flight")).ok());
  ASSERT_TRUE(b.set_fence_epoch(2).ok());
  EXPECT_EQ(a.write_with_imm(1, 9, bytes_of("stale")).code(), Code::kAborted);
  ASSERT_TRUE(a.write_with_imm(2, 9, bytes_of("fresh")).ok());
  ASSERT_TRUE(env.run_for(1'000'000).ok());
  EXPECT_EQ(drain(b), (std::vector<std::string>{"fresh"}));
  EXPECT_EQ(net.stats().fenced_drops, 1u);
}

// The shaper delays on the receiving side, so it works over the simulated link and its
// virtual clock: what arrives at 0 is handed out between 50 and 55 ms, in order.
TEST(WanShaper, HoldsMessagesForOneWayDelayInOrder) {
  SimEnv env(9);
  NetworkOptions o;
  o.faults.min_delay_ns = o.faults.max_delay_ns = 0;
  SimNetwork net(env, 2, o);
  auto link = net.connect(0, 1);
  ASSERT_TRUE(link.ok());
  net::WanMatrix wan(2);
  wan.set(0, 1, {50'000'000, 5'000'000});
  net::WanShaped<SimEndpoint> shaped(std::move(link->second), wan.between(0, 1), env);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(link->first.send(0, bytes_of(std::to_string(i))).ok());
  ASSERT_TRUE(env.run_until(0).ok());  // delivered into the inner endpoint at once
  net::Completion c[32];
  auto n = shaped.poll(c, 32);  // ingests everything, hands out nothing yet
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(shaped.held_messages(), 20u);
  EXPECT_GE(shaped.next_due_ns(), 50'000'000u);
  EXPECT_LE(shaped.next_due_ns(), 55'000'000u);
  ASSERT_TRUE(env.run_until(49'999'999).ok());
  n = shaped.poll(c, 32);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  ASSERT_TRUE(env.run_until(55'000'000).ok());
  n = shaped.poll(c, 32);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(std::string(c[i].bytes.begin(), c[i].bytes.end()), std::to_string(i));
  }
  shaped.release();
}

// What a sender wrote before it crashed still arrives, after the delay; then Unavailable.
TEST(WanShaper, MessagesSentBeforeACrashStillArrive) {
  SimEnv env(10);
  NetworkOptions o;
  o.faults.min_delay_ns = o.faults.max_delay_ns = 10'000;
  o.detect_ns = 1'000'000;
  SimNetwork net(env, 2, o);
  auto link = net.connect(0, 1);
  ASSERT_TRUE(link.ok());
  net::WanShaped<SimEndpoint> shaped(std::move(link->second), {20'000'000, 0}, env);
  ASSERT_TRUE(link->first.send(0, bytes_of("last words")).ok());
  ASSERT_TRUE(env.run_until(10'000).ok());
  net::Completion c[4];
  auto n = shaped.poll(c, 4);  // ingested at 10 us, due at 20.01 ms
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  net.crash(0);
  ASSERT_TRUE(env.run_until(5'000'000).ok());  // the crash is detected at ~1 ms
  n = shaped.poll(c, 4);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  ASSERT_TRUE(env.run_until(20'010'000).ok());
  n = shaped.poll(c, 4);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 1u);
  EXPECT_EQ(std::string(c[0].bytes.begin(), c[0].bytes.end()), "last words");
  shaped.release();
  EXPECT_EQ(shaped.poll(c, 4).status().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace shoal::sim

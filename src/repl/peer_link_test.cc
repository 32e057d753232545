// PeerLink over TCP on an event loop that sleeps on its socket (rt::PollerWake), as the
// replication leader's and a follower's loops do: the link reads its socket only after a wake
// (TcpEndpoint::set_recv_after_wake, which PeerLink turns on), and still every message a
// bursty sender sends arrives, in order, with the loop sleeping between bursts.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "src/base/env.h"
#include "src/repl/peer_link.h"
#include "src/runtime/event_loop.h"

namespace shoal::repl {
namespace peer_link_test {  // named, not anonymous: unique in a unity build

TEST(PeerLink, ATcpLinkOnASleepingLoopReceivesEveryMessageInOrder) {
  net::EndpointOptions o;
  o.tcp_buffer_bytes = 64 << 10;
  o.max_message_bytes = 8 << 10;
  o.spin_ns = 0;
  auto pair = net::TcpEndpoint::pair(o);
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  net::TcpEndpoint tx = std::move(pair->first);
  PeerLink rx(RawEndpoint(std::move(pair->second)), net::LinkShape{});
  rt::LoopOptions lo;
  lo.spin_ns = 5'000;  // as the replication loops
  rt::EventLoop loop(RealEnv::instance(), lo);
  constexpr int kMessages = 3000;
  struct Ctx {
    PeerLink* rx;
    rt::EventLoop* loop;
    int next = 0;
    bool in_order = true;
  } ctx{&rx, &loop};
  rt::PollerWake wake;
  wake.prepare = [](void* c, int fds[rt::kMaxPollerFds]) {
    return static_cast<Ctx*>(c)->rx->arm(fds);
  };
  wake.end = [](void* c) { static_cast<Ctx*>(c)->rx->end_block(); };
  const auto poll = [](void* c) {
    auto* x = static_cast<Ctx*>(c);
    net::Completion got[16];
    auto n = x->rx->poll(got, 16);
    if (!n.ok() || *n == 0) return false;
    for (size_t i = 0; i < *n; ++i) {
      x->in_order = x->in_order && got[i].bytes.size() == 100 &&
                    got[i].bytes[0] == static_cast<uint8_t>(x->next);
      if (++x->next == kMessages) x->loop->stop();
    }
    x->rx->release();
    return true;
  };
  ASSERT_TRUE(loop.add_poller(poll, &ctx, nullptr, wake).ok());
  // A stall (a message left unread in the socket) fails instead of hanging: stop after 20 s.
  ASSERT_TRUE(loop.add_timer(
                      loop.now_ns() + 20'000'000'000,
                      [](void* l, uint64_t) { static_cast<rt::EventLoop*>(l)->stop(); }, &loop)
                  .ok());
  // Bursts of 1 to 7 messages with pauses between them: the loop drains, sleeps, and is woken
  // by the socket.
  std::thread sender([&] {
    for (int i = 0; i < kMessages; ++i) {
      const std::vector<uint8_t> msg(100, static_cast<uint8_t>(i));
      if (!tx.send(7, msg).ok() || !tx.flush().ok()) return;
      if (i % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  loop.run();
  sender.join();
  EXPECT_EQ(ctx.next, kMessages);
  EXPECT_TRUE(ctx.in_order);
  EXPECT_GT(loop.stats().blocks, 100u);  // it did sleep between bursts
}

}  // namespace peer_link_test
}  // namespace shoal::repl

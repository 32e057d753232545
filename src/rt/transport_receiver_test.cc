#include "src/rt/transport_receiver.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"

namespace shoal::rt {
namespace {

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

template <typename E>
Task<void> echo_server(E* ep, TransportReceiver<E>* rx) {
  for (;;) {  // until the link fails
    auto c = co_await rx->next();
    if (!c.ok()) co_return;
    if (!ep->send(c->imm, c->bytes).ok() || !ep->flush().ok()) co_return;
  }
}

template <typename E>
Task<void> client(EventLoop* loop, E* ep, TransportReceiver<E>* rx, int rounds, int* done) {
  for (int i = 0; i < rounds; ++i) {
    const std::string body = "ping " + std::to_string(i);
    EXPECT_TRUE(ep->send(static_cast<uint32_t>(i), as_bytes(body)).ok());
    EXPECT_TRUE(ep->flush().ok());
    auto reply = co_await rx->next();
    EXPECT_TRUE(reply.ok()) << reply.status().to_string();
    if (!reply.ok()) break;
    EXPECT_EQ(reply->imm, static_cast<uint32_t>(i));
    EXPECT_EQ(std::string(reply->bytes.begin(), reply->bytes.end()), body);
    ++*done;
  }
  loop->stop();
}

template <typename E>
void echo_on_one_loop(std::pair<E, E>& link) {
  EventLoop loop(RealEnv::instance());
  auto client_rx = TransportReceiver<E>::create(loop, link.first);
  auto server_rx = TransportReceiver<E>::create(loop, link.second);
  ASSERT_TRUE(client_rx.ok() && server_rx.ok());
  int done = 0;
  ASSERT_TRUE(loop.spawn(echo_server(&link.second, server_rx->get())).ok());
  ASSERT_TRUE(loop.spawn(client(&loop, &link.first, client_rx->get(), 2000, &done)).ok());
  loop.run();
  EXPECT_EQ(done, 2000);
}

TEST(TransportReceiverTest, CoAwaitCompletionsShm) {
  auto link = net::ShmEndpoint::pair();
  ASSERT_TRUE(link.ok());
  echo_on_one_loop(*link);
}

TEST(TransportReceiverTest, CoAwaitCompletionsTcp) {
  auto link = net::TcpEndpoint::pair();
  ASSERT_TRUE(link.ok());
  echo_on_one_loop(*link);
}

Task<void> await_failure(EventLoop* loop, TransportReceiver<net::ShmEndpoint>* rx, Status* out) {
  auto c = co_await rx->next();
  *out = c.status();
  loop->stop();
}

Task<void> close_later(EventLoop* loop, net::ShmEndpoint* ep) {
  auto s = co_await loop->sleep_for(20'000'000);
  EXPECT_TRUE(s.ok());
  ep->close();  // the peer goes away while the other task waits
}

TEST(TransportReceiverTest, PeerDeathResumesTheWaiterWithUnavailable) {
  auto link = net::ShmEndpoint::pair();
  ASSERT_TRUE(link.ok());
  EventLoop loop(RealEnv::instance());
  auto rx = TransportReceiver<net::ShmEndpoint>::create(loop, link->first);
  ASSERT_TRUE(rx.ok());
  Status got;
  ASSERT_TRUE(loop.spawn(await_failure(&loop, rx->get(), &got)).ok());
  ASSERT_TRUE(loop.spawn(close_later(&loop, &link->second)).ok());
  loop.run();
  EXPECT_EQ(got.code(), Code::kUnavailable) << got.to_string();
}

// A coroutine waiting in next() on a sleeping loop is resumed when the peer sends, through the
// endpoint's wait fd (max_block_ns is raised so 1 ms slices cannot be what wakes the loop).
TEST(TransportReceiverTest, SleepingLoopResumesTheWaiterWhenThePeerSends) {
  auto link = net::TcpEndpoint::pair();
  ASSERT_TRUE(link.ok());
  LoopOptions o;
  o.max_block_ns = 10'000'000'000;
  EventLoop loop(RealEnv::instance(), o);
  auto rx = TransportReceiver<net::TcpEndpoint>::create(loop, link->first);
  ASSERT_TRUE(rx.ok());
  std::atomic<uint64_t> resumed_ns{0};
  ASSERT_TRUE(loop.spawn([](EventLoop* loop, TransportReceiver<net::TcpEndpoint>* rx,
                            std::atomic<uint64_t>* at) -> Task<void> {
                    auto c = co_await rx->next();
                    EXPECT_TRUE(c.ok());
                    at->store(net::mono_ns());
                    loop->stop();
                  }(&loop, rx->get(), &resumed_ns))
                  .ok());
  std::thread t([&] { loop.run(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the loop is asleep by now
  const uint64_t sent_ns = net::mono_ns();
  ASSERT_TRUE(link->second.send(3, as_bytes("wake")).ok());
  ASSERT_TRUE(link->second.flush().ok());
  t.join();
  EXPECT_GE(loop.stats().fd_wakes, 1u);
  EXPECT_LT(resumed_ns.load() - sent_ns, 200'000'000u);
}

}  // namespace
}  // namespace shoal::rt

// TcpEndpoint::set_recv_after_wake: once a recv found the socket drained, poll() leaves the
// socket alone until end_block() (its loop slept) or kDrainedPollsMax skipped polls; nothing
// sent is lost or reordered, and the default endpoint reads on every poll. (An event loop over
// such an endpoint: src/repl/peer_link_test.cc.)
#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <vector>

#include "src/net/tcp_transport.h"

namespace shoal::net {
namespace tcp_recv_after_wake_test {  // named, not anonymous: unique in a unity build

struct Pair {
  explicit Pair(bool recv_after_wake) {
    EndpointOptions o;
    o.tcp_buffer_bytes = 64 << 10;
    o.max_message_bytes = 8 << 10;
    o.spin_ns = 0;
    auto p = TcpEndpoint::pair(o);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    tx = std::move(p->first);
    rx = std::move(p->second);
    rx.set_recv_after_wake(recv_after_wake);
  }
  void send(uint8_t fill) {
    const std::vector<uint8_t> msg(100, fill);
    ASSERT_TRUE(tx.send(7, msg).ok());
    ASSERT_TRUE(tx.flush().ok());
    pollfd p{rx.wait_fd(), POLLIN, 0};  // in rx's socket before we poll
    ASSERT_EQ(::poll(&p, 1, 2000), 1);
  }
  // One poll: the message's fill byte, or -1 when none was delivered.
  int poll_one() {
    auto n = rx.poll(c, 1);
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    if (!n.ok() || *n == 0) return -1;
    const int fill = c[0].bytes.size() == 100 ? c[0].bytes[0] : -2;
    rx.release();
    return fill;
  }
  TcpEndpoint tx, rx;
  Completion c[1];
};

TEST(TcpRecvAfterWake, ADrainedSocketIsReadAgainAfterEndBlockOrABoundedNumberOfPolls) {
  Pair p(/*recv_after_wake=*/true);
  EXPECT_EQ(p.poll_one(), -1);  // EAGAIN: drained
  p.send(1);
  // Skipped: nothing said a recv could find something since the drain.
  EXPECT_EQ(p.poll_one(), -1);
  p.rx.end_block();  // the loop slept (ppoll would have returned at once: the socket is readable)
  EXPECT_EQ(p.poll_one(), 1);
  // Its read came back short: drained again. A loop that never sleeps still reads within
  // kDrainedPollsMax polls.
  p.send(2);
  int got = -1;
  uint32_t polls = 0;
  while (got == -1 && polls <= TcpEndpoint::kDrainedPollsMax) {  // bounded
    got = p.poll_one();
    ++polls;
  }
  EXPECT_EQ(got, 2);
  EXPECT_EQ(polls, TcpEndpoint::kDrainedPollsMax);
  // Several messages after a wake: all, in order.
  for (uint8_t i = 3; i < 8; ++i) p.send(i);
  p.rx.end_block();
  for (int i = 3; i < 8; ++i) EXPECT_EQ(p.poll_one(), i);
}

TEST(TcpRecvAfterWake, OffByDefaultEveryPollReads) {
  Pair p(/*recv_after_wake=*/false);
  EXPECT_EQ(p.poll_one(), -1);
  p.send(1);
  EXPECT_EQ(p.poll_one(), 1);
  EXPECT_EQ(p.poll_one(), -1);
  p.send(2);
  EXPECT_EQ(p.poll_one(), 2);
}

}  // namespace tcp_recv_after_wake_test
}  // namespace shoal::net

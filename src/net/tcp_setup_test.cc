// Setting up a tcp endpoint (TcpEndpoint::adopt, under accept and connect) writes none of its
// send buffer: a replication leader accepts its followers on its replication thread, and
// zeroing a replication link's 8.7 MB buffer there took 30-120 ms of page faults on a loaded
// 2-core machine, during which its other followers heard nothing and suspected it (a cluster
// restarted from disk was deposed as it started; docs/RESULTS.md).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "src/base/process_memory.h"
#include "src/net/tcp_transport.h"

namespace shoal::net {
namespace tcp_setup_test {  // named, not anonymous: unique in a unity build

TEST(TcpSetup, AnEndpointTouchesNoneOfItsSendBufferUntilItSends) {
  EndpointOptions o;
  o.tcp_buffer_bytes = size_t{64} << 20;  // each endpoint's send buffer
  o.max_message_bytes = size_t{1} << 20;
  o.spin_ns = 0;
  const uint64_t before = current_rss_bytes();
  auto p = TcpEndpoint::pair(o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const uint64_t after = current_rss_bytes();
  const uint64_t grew = after > before ? after - before : 0;
  // Zeroed, both buffers would be resident: 128 MiB.
  EXPECT_LT(grew, uint64_t{32} << 20) << "the endpoints' setup wrote their send buffers";
  // The buffer still carries what is written into it.
  std::vector<uint8_t> msg(100'000);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE(p->first.send(3, msg).ok());
  ASSERT_TRUE(p->first.flush().ok());
  Completion c[1];
  bool received = false;
  for (int i = 0; i < 200 && !received; ++i) {  // bounded: 200 waits of 10 ms
    auto n = p->second.poll(c, 1);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    if (*n == 1) {
      received = true;
      EXPECT_EQ(c[0].imm, 3u);
      ASSERT_EQ(c[0].bytes.size(), msg.size());
      EXPECT_EQ(std::memcmp(c[0].bytes.data(), msg.data(), msg.size()), 0);
      p->second.release();
    } else if (Status s = p->second.wait(10'000'000); !s.ok() && s.code() != Code::kTimeout) {
      FAIL() << s.to_string();
    }
  }
  EXPECT_TRUE(received);
}

}  // namespace tcp_setup_test
}  // namespace shoal::net

// Stress test of the TCP transport: two endpoints, each on its own thread, send a mix of small,
// medium and multi-megabyte (fragmented) messages to each other at the same time, over small
// kernel socket buffers (partial writes and reads everywhere), with a CPU hog stealing a core.
// Every received byte is checked against what the peer sent, in order.
//
// It reproduces two bugs found in replication (docs/REPLICATION.md, docs/TRANSPORTS.md):
//   - a poll batch that delivered a small message and then ended inside a fragmented message
//     (the rest not yet received) lost the fragments absorbed so far at release(): the message
//     arrived with its head missing (MessageAssembler::release reset a partial message);
//   - both sides blocked in send() on a full socket without reading each other's bytes, so big
//     messages both ways stalled until send_timeout_ns.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "src/base/env.h"
#include "src/net/tcp_transport.h"
#include "src/net/transport_test_util.h"

namespace shoal::net {
namespace {

using test_util::kSecondNs;
using test_util::pattern;

constexpr size_t kMessagesPerSide = 120;
constexpr uint64_t kDeadlineNs = 30 * kSecondNs;

// The messages one side sends: mostly small, some medium, one in eight 0.5-1.5 MiB.
std::vector<std::vector<uint8_t>> plan_messages(uint64_t side) {
  Rng rng(0x5eed0000 + side);
  std::vector<std::vector<uint8_t>> out;
  out.reserve(kMessagesPerSide);
  for (size_t i = 0; i < kMessagesPerSide; ++i) {
    const uint64_t kind = rng.next() % 8;
    size_t size;
    if (kind < 5) {
      size = rng.next() % 300;
    } else if (kind < 7) {
      size = rng.next() % (100 * 1024);
    } else {
      size = (512 * 1024) + rng.next() % (1024 * 1024);
    }
    out.push_back(pattern(size, (side << 32) | i));
  }
  return out;
}

// One side: sends its plan (flushing now and then) while polling batches of up to 16
// completions and checking each against the peer's plan. Returns "" or the first failure.
std::string run_side(TcpEndpoint& ep, const std::vector<std::vector<uint8_t>>& mine,
                     const std::vector<std::vector<uint8_t>>& theirs) {
  size_t sent = 0;
  size_t received = 0;
  const uint64_t deadline = mono_ns() + kDeadlineNs;
  while (sent < mine.size() || received < theirs.size()) {  // bounded by the deadline
    if (mono_ns() > deadline) {
      return "deadline: sent " + std::to_string(sent) + ", received " + std::to_string(received);
    }
    if (sent < mine.size()) {
      if (Status s = ep.send(static_cast<uint32_t>(sent), mine[sent]); !s.ok()) {
        return "send " + std::to_string(sent) + ": " + s.to_string();
      }
      ++sent;
      if (sent % 3 == 0 || sent == mine.size()) {
        if (Status s = ep.flush(); !s.ok()) return "flush: " + s.to_string();
      }
    }
    Completion c[16];
    auto n = ep.poll(c, 16);
    if (!n.ok()) return "poll after " + std::to_string(received) + ": " + n.status().to_string();
    for (size_t i = 0; i < *n; ++i, ++received) {
      if (received >= theirs.size()) return "more messages than the peer sent";
      const auto& want = theirs[received];
      if (c[i].imm != received) {
        return "message " + std::to_string(received) + " has session " + std::to_string(c[i].imm);
      }
      if (c[i].bytes.size() != want.size() ||
          !std::equal(want.begin(), want.end(), c[i].bytes.begin())) {
        return "message " + std::to_string(received) + " of " + std::to_string(want.size()) +
               " bytes arrived with " + std::to_string(c[i].bytes.size()) + " bytes, differing";
      }
    }
    ep.release();
    if (*n == 0 && sent == mine.size()) {
      Status s = ep.wait(10'000'000);
      if (!s.ok() && s.code() != Code::kTimeout) return "wait: " + s.to_string();
    }
  }
  return "";
}

void shrink_socket_buffers(const TcpEndpoint& ep) {
  const int bytes = 32 * 1024;
  ASSERT_EQ(setsockopt(ep.wait_fd(), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)), 0);
  ASSERT_EQ(setsockopt(ep.wait_fd(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)), 0);
}

TEST(TcpTransportStress, LargeMessagesBothWaysWithSmallBuffersUnderACpuHog) {
  EndpointOptions o;
  o.tcp_buffer_bytes = 1u << 20;  // frames of at most 256 KiB: big messages fragment
  o.max_message_bytes = 4u << 20;
  o.spin_ns = 0;
  o.send_timeout_ns = 5 * kSecondNs;  // a regression fails in seconds, not minutes
  auto link = TcpEndpoint::pair(o);
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  shrink_socket_buffers(a);
  shrink_socket_buffers(b);
  const auto plan_a = plan_messages(1);
  const auto plan_b = plan_messages(2);

  std::atomic<bool> stop{false};
  std::thread hog([&] {
    uint64_t x = 1;
    while (!stop.load(std::memory_order_relaxed)) x = x * 6364136223846793005ULL + 1;
    EXPECT_NE(x, 0u);
  });
  std::string error_a;
  std::string error_b;
  std::thread side_b([&] { error_b = run_side(b, plan_b, plan_a); });
  error_a = run_side(a, plan_a, plan_b);
  side_b.join();
  stop.store(true);
  hog.join();
  EXPECT_EQ(error_a, "");
  EXPECT_EQ(error_b, "");
  // Every byte of a message above a frame's payload was reassembled, that is copied in user
  // space, and received_copied_bytes() says so (the replication path counts it).
  const auto fragmented_bytes = [](const std::vector<std::vector<uint8_t>>& plan) {
    uint64_t sum = 0;
    for (const auto& m : plan) sum += m.size() > (256u << 10) ? m.size() : 0;
    return sum;
  };
  EXPECT_GT(fragmented_bytes(plan_b), 0u);
  EXPECT_GE(a.received_copied_bytes(), fragmented_bytes(plan_b));
  EXPECT_GE(b.received_copied_bytes(), fragmented_bytes(plan_a));
}

// A send while a poll batch is out blocks and reads meanwhile; a fragmented message it
// completes must survive the release() of that batch and come out of the next poll().
TEST(TcpTransportStress, MessageCompletedDuringASendSurvivesTheBatchRelease) {
  EndpointOptions o;
  o.tcp_buffer_bytes = 256 * 1024;  // frames of at most 64 KiB
  o.max_message_bytes = 512 * 1024;
  o.spin_ns = 0;
  o.send_timeout_ns = 5 * kSecondNs;
  auto link = TcpEndpoint::pair(o);
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  shrink_socket_buffers(a);
  shrink_socket_buffers(b);
  const auto small = pattern(100, 1);
  const auto fragmented = pattern(150 * 1024, 2);  // three fragments
  const auto piece = pattern(16 * 1024, 3);        // whole frames: b cannot move them out
  constexpr int kPieces = 200;                     // 3.2 MB: more than b buffers
  std::string error_b;
  std::thread side_b([&] {
    Status s = b.send(1, small);
    if (s.ok()) s = b.flush();
    if (s.ok()) s = b.send(2, fragmented);  // a reads it only inside its own blocked sends
    if (s.ok()) s = b.flush();
    // Not reading yet: a's sends stay blocked, so a reads all of the fragmented message there.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int i = 0; i < kPieces && s.ok(); ++i) {
      test_util::Received r;
      s = test_util::recv_one(b, &r);
      if (s.ok() && r.bytes != piece) error_b = "a piece arrived changed";
    }
    if (!s.ok()) error_b = s.to_string();
  });
  Completion c[1];
  size_t n = 0;
  const uint64_t deadline = mono_ns() + 10 * kSecondNs;
  while (n == 0 && mono_ns() < deadline) {  // the small message, alone in its batch
    auto got = a.poll(c, 1);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    n = *got;
    if (n == 0) (void)a.wait(1'000'000);
  }
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(c[0].imm, 1u);
  // The batch is out while these sends block and absorb b's fragmented message.
  for (int i = 0; i < kPieces; ++i) ASSERT_TRUE(a.send(3, piece).ok()) << i;
  ASSERT_TRUE(a.flush().ok());
  a.release();
  test_util::Received r;
  const Status got = test_util::recv_one(a, &r, 2 * kSecondNs);
  ASSERT_TRUE(got.ok()) << got.to_string();
  EXPECT_EQ(r.imm, 2u);
  EXPECT_TRUE(r.bytes == fragmented)
      << "the fragmented message arrived with " << r.bytes.size() << " bytes";
  side_b.join();
  EXPECT_EQ(error_b, "");
}

}  // namespace
}  // namespace shoal::net

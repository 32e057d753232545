// The transport conformance properties (see transport_conformance_test.cc) for the io_uring
// transport, plus what is specific to it: every ring mode, frames spanning provided buffers,
// buffer exhaustion (ENOBUFS re-arm), zero-copy send accounting, a tcp client served by a
// uring endpoint adopted from an accepted socket (the same frames both ways: what a server
// serving uring would need), and close() of a moved-from endpoint. Peers that
// must be able to die run in a fork()ed child that reports through its exit code. Every test skips
// when this kernel (or its sandbox) offers no io_uring.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "src/base/env.h"
#include "src/net/tcp_transport.h"
#include "src/net/transport_test_util.h"
#include "src/net/uring_transport.h"

namespace shoal::net {
namespace uring_transport_test {  // named, not anonymous: unique in a unity build

using namespace ::shoal::net::test_util;  // NOLINT: test helpers

EndpointOptions small_options() {
  EndpointOptions o;
  o.tcp_buffer_bytes = 64 * 1024;  // 2 KiB provided buffers: most frames span two
  return o;
}

class UringTransport : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!UringEndpoint::supported(&why)) GTEST_SKIP() << "io_uring unavailable: " << why;
  }
};

// Echoes sizes 1 B .. max_message_bytes through a forked peer with the given ring options.
void echo_sizes(const UringOptions& uring) {
  auto link = UringEndpoint::pair({}, uring);
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  const pid_t pid = spawn_peer(b, echo_until_quit<UringEndpoint>);
  const size_t frag = a.max_write_bytes();
  const size_t sizes[] = {1,        7,        8,        63,       64,
                          65,       4095,     4096,     32767,    32768,
                          32769,    65536,    frag - 1, frag,     frag + 1,
                          2 * frag, 1u << 20, 3333333,  8u << 20, a.max_message_bytes()};
  for (size_t size : sizes) {
    const auto body = pattern(size, size);
    ASSERT_TRUE(a.send(static_cast<uint32_t>(size), body).ok());
    ASSERT_TRUE(a.flush().ok());
    Received r;
    Status s = recv_one(a, &r);
    ASSERT_TRUE(s.ok()) << size << ": " << s.to_string();
    EXPECT_EQ(r.imm, static_cast<uint32_t>(size));
    ASSERT_EQ(r.bytes.size(), size);
    EXPECT_TRUE(r.bytes == body) << "payload differs at size " << size;
  }
  std::vector<uint8_t> too_big(a.max_message_bytes() + 1);
  EXPECT_EQ(a.send(1, too_big).code(), Code::kInvalidArgument);
  ASSERT_TRUE(a.send(kQuitSession, {}).ok());
  ASSERT_TRUE(a.flush().ok());
  EXPECT_EQ(wait_child(pid), 0);
}

TEST_F(UringTransport, EchoSizesWithZeroCopySend) {
  UringOptions u;
  u.zero_copy_send = true;
  u.zero_copy_min_bytes = 16 * 1024;
  echo_sizes(u);
}

// The transport-independent properties (ordering, sizes, peer death, malformed frames, stale
// epochs, zero-copy, batching, wait fds) run for uring in transport_conformance_test.cc; these
// are the io_uring-specific ones.
TEST_F(UringTransport, EveryRingModeWorksAndAutoPrefersDeferTaskrun) {
  for (UringMode mode :
       {UringMode::kAuto, UringMode::kDeferTaskrun, UringMode::kCoopTaskrun, UringMode::kDefault}) {
    SCOPED_TRACE(uring_mode_name(mode));
    UringOptions u;
    u.mode = mode;
    auto link = UringEndpoint::pair(small_options(), u);
    ASSERT_TRUE(link.ok()) << link.status().to_string();
    auto& [a, b] = *link;
    for (uint32_t i = 0; i < 200; ++i) {
      const auto body = pattern(1 + (i * 97) % 9000, i);  // up to ~4 provided buffers
      ASSERT_TRUE(a.send(i, body).ok());
      ASSERT_TRUE(a.flush().ok());
      Received r;
      ASSERT_TRUE(recv_one(b, &r).ok()) << i;
      EXPECT_EQ(r.imm, i);
      ASSERT_TRUE(r.bytes == body) << i;
    }
    if (mode == UringMode::kAuto) {
      // This kernel (>= 6.1) has DEFER_TASKRUN; falling back here would be a regression.
      EXPECT_EQ(a.setup_mode(), UringMode::kDeferTaskrun);
    } else {
      EXPECT_EQ(a.setup_mode(), mode);
    }
  }
}

// Many frames in flight against few, small provided buffers: frames split at every possible
// offset, the kernel runs out of buffers (ENOBUFS ends the multishot receive), and the
// receiver re-arms once it returns them.
TEST_F(UringTransport, FramesSpanningBuffersAndBufferExhaustion) {
  auto link = UringEndpoint::pair(small_options());
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  Rng rng(5);
  uint32_t sent = 0, got = 0;
  for (int round = 0; round < 40; ++round) {
    // ~200 KiB per round: more than the 64 KiB of provided buffers.
    for (int i = 0; i < 100; ++i, ++sent) {
      ASSERT_TRUE(a.send(sent, pattern(rng.uniform(0, 4000), sent)).ok());
    }
    ASSERT_TRUE(a.flush().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    while (got < sent) {
      Received r;
      Status st = recv_one(b, &r);
      ASSERT_TRUE(st.ok()) << got << ": " << st.to_string();
      ASSERT_EQ(r.imm, got);
      ASSERT_TRUE(r.bytes == pattern(r.bytes.size(), got)) << got;
      ++got;
    }
  }
}

// A truncated frame that spans provided buffers (so it sits in the staging area at EOF).
TEST_F(UringTransport, TruncatedFrameInStagingIsCorruption) {
  auto link = UringEndpoint::pair(small_options());
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  std::vector<uint8_t> f(frame_bytes(6000));
  encode_frame(f.data(), 0, 0, 5, 0, pattern(6000, 3));
  f.resize(5000);
  ASSERT_TRUE(a.inject_raw_for_test(f).ok());
  a.close();
  Received r;
  Status s = recv_one(b, &r, 5 * kSecondNs);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.to_string();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
}

// Large zero-copy batches: every SEND_ZC notification is counted, and on loopback the kernel
// reports that it copied (IORING_NOTIF_USAGE_ZC_COPIED), which is why the flag is off by default.
TEST_F(UringTransport, ZeroCopySendCountsCopiedNotifications) {
  UringOptions u;
  u.zero_copy_send = true;
  u.zero_copy_min_bytes = 16 * 1024;
  auto link = UringEndpoint::pair({}, u);
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  const auto body = pattern(1u << 20, 1);
  // The receiver runs in its own thread: a SEND_ZC slot is reusable only once the receiver
  // has consumed the data (the notification comes when the kernel frees the skb).
  std::thread receiver([&] {
    for (int i = 0; i < 4; ++i) {
      Received r;
      Status st = recv_one(b, &r);
      EXPECT_TRUE(st.ok()) << st.to_string();
      EXPECT_TRUE(r.bytes == body);
    }
    EXPECT_TRUE(b.send(0, as_bytes("done")).ok());
    EXPECT_TRUE(b.flush().ok());
  });
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(a.send(static_cast<uint32_t>(i), body).ok());
    ASSERT_TRUE(a.flush().ok());
  }
  Received done;
  ASSERT_TRUE(recv_one(a, &done).ok());  // also reaps the notifications that arrived so far
  receiver.join();
  a.wait(10'000'000).ignore();
  EXPECT_GT(a.zero_copy_sends(), 0u);
  EXPECT_LE(a.zero_copy_copied(), a.zero_copy_sends());
  std::printf("zero-copy sends %llu, of which the kernel copied %llu\n",
              static_cast<unsigned long long>(a.zero_copy_sends()),
              static_cast<unsigned long long>(a.zero_copy_copied()));
}

// A tcp client (as the shard servers' control clients are) against a uring endpoint adopted
// from the accepted socket: messages both ways, one of them fragmented, and a one-sided write.
TEST_F(UringTransport, ServesATcpClient) {
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(lfd, 1), 0);
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const uint16_t port = ntohs(addr.sin_port);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the tcp client
    auto ep = TcpEndpoint::connect("127.0.0.1", port);
    if (!ep.ok()) _exit(1);
    Received r;
    if (!recv_one(*ep, &r).ok()) _exit(2);
    if (!ep->send(r.imm + 1, r.bytes).ok() || !ep->flush().ok()) _exit(3);
    if (!ep->write_with_imm(5, 77, as_bytes("one-sided")).ok() || !ep->flush().ok()) _exit(4);
    if (!recv_one(*ep, &r).ok()) _exit(5);  // the server's goodbye
    _exit(0);
  }
  const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(lfd);
  ASSERT_GE(fd, 0);
  auto ep = UringEndpoint::adopt(fd);
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  const auto big = pattern(3 << 20, 3);  // above a frame: fragmented
  ASSERT_TRUE(ep->send(10, big).ok());
  ASSERT_TRUE(ep->flush().ok());
  Received r;
  ASSERT_TRUE(recv_one(*ep, &r).ok());
  EXPECT_EQ(r.imm, 11u);
  EXPECT_TRUE(r.bytes == big);
  ASSERT_TRUE(recv_one(*ep, &r).ok());
  EXPECT_EQ(r.kind, Completion::Kind::kWrite);
  EXPECT_EQ(r.imm, 77u);
  EXPECT_EQ(r.epoch, 5u);
  ASSERT_TRUE(ep->send(0, as_bytes("bye")).ok());
  ASSERT_TRUE(ep->flush().ok());
  EXPECT_EQ(wait_child(pid), 0);
  // What replication's leader does with an endpoint it moved into a peer link.
  UringEndpoint moved = std::move(*ep);
  ep->close();
  moved.close();
}

}  // namespace uring_transport_test
}  // namespace shoal::net

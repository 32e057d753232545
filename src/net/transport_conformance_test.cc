// Conformance suite every TransportEndpoint must pass. Peers that must be able to die run in a
// fork()ed child; a child reports failure through its exit code (gtest asserts are not used
// there) and ends with _exit so it never runs the parent's test machinery.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "src/base/env.h"
#include "src/net/fabric_transport.h"
#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"
#include "src/net/transport_test_util.h"
#include "src/net/uring_transport.h"
#include "src/net/wan_shaper.h"

namespace shoal::net {
namespace {

using namespace ::shoal::net::test_util;  // NOLINT: test helpers

EndpointOptions small_options() {
  EndpointOptions o;
  o.ring_bytes = 64 * 1024;  // small rings: exercise wrap-around and credit constantly
  o.tcp_buffer_bytes = 64 * 1024;
  return o;
}

template <typename E>
class TransportConformance : public ::testing::Test {
 protected:
  // A kernel without usable io_uring (old, or disabled by sysctl/seccomp) skips the uring
  // instantiation instead of failing it.
  void SetUp() override {
    if constexpr (std::is_same_v<E, UringEndpoint>) {
      std::string why;
      if (!UringEndpoint::supported(&why)) GTEST_SKIP() << "io_uring unavailable: " << why;
    }
    if constexpr (std::is_same_v<E, FabricEndpoint>) {
      std::string why;
      if (!FabricEndpoint::supported(&why)) {
        GTEST_SKIP() << "no libfabric provider with FI_EP_RDM + FI_RMA + remote CQ data works "
                        "on 127.0.0.1: "
                     << why;
      }
    }
  }
};
using Transports = ::testing::Types<ShmEndpoint, TcpEndpoint, WanShaped<ShmEndpoint>, UringEndpoint,
                                    FabricEndpoint>;
class TransportNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, ShmEndpoint>) return "shm";
    if (std::is_same_v<T, TcpEndpoint>) return "tcp";
    if (std::is_same_v<T, UringEndpoint>) return "uring";
    if (std::is_same_v<T, FabricEndpoint>) return "fabric";
    return "shm_wan";
  }
};
TYPED_TEST_SUITE(TransportConformance, Transports, TransportNames);

TYPED_TEST(TransportConformance, PerSessionOrderingAcrossManySessions) {
  auto link = TypeParam::pair(small_options());
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  constexpr uint32_t kMessages = 30000, kSessions = 64;
  const pid_t pid = spawn_peer(b, [&](TypeParam& ep) {
    Rng rng(1);
    uint32_t seq[kSessions] = {};
    for (uint32_t i = 0; i < kMessages; ++i) {
      const auto session = static_cast<uint32_t>(rng.uniform(0, kSessions - 1));
      auto body = pattern(8 + rng.uniform(0, 300), i);
      std::memcpy(body.data(), &seq[session], 4);
      ++seq[session];
      if (!ep.send(session, body).ok()) return 1;
    }
    if (!ep.flush().ok()) return 2;
    Received quit;  // stay alive until the parent has everything
    return recv_one(ep, &quit).ok() && quit.imm == kQuitSession ? 0 : 3;
  });
  Rng rng(1);
  uint32_t want[kSessions] = {};
  for (uint32_t i = 0; i < kMessages; ++i) {
    Received r;
    ASSERT_TRUE(recv_one(a, &r).ok()) << i;
    const auto session = static_cast<uint32_t>(rng.uniform(0, kSessions - 1));
    auto body = pattern(8 + rng.uniform(0, 300), i);
    std::memcpy(body.data(), &want[session], 4);
    ASSERT_EQ(r.imm, session) << i;
    ASSERT_EQ(r.bytes, body) << "message " << i << " session " << session;
    ++want[session];
  }
  ASSERT_TRUE(a.send(kQuitSession, {}).ok());
  ASSERT_TRUE(a.flush().ok());
  EXPECT_EQ(wait_child(pid), 0);
}

TYPED_TEST(TransportConformance, EchoSizesFromOneByteTo8MiB) {
  auto link = TypeParam::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  const pid_t pid = spawn_peer(b, echo_until_quit<TypeParam>);
  const size_t frag = a.max_write_bytes();
  const size_t sizes[] = {1,
                          7,
                          8,
                          63,
                          64,
                          65,
                          4095,
                          4096,
                          65536,
                          frag - 1,
                          frag,
                          frag + 1,
                          2 * frag,
                          1u << 20,
                          3333333,
                          8u << 20,
                          a.max_message_bytes()};
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
  // Over the limit: refused up front, the link stays usable.
  std::vector<uint8_t> too_big(a.max_message_bytes() + 1);
  EXPECT_EQ(a.send(1, too_big).code(), Code::kInvalidArgument);
  ASSERT_TRUE(a.send(kQuitSession, {}).ok());
  ASSERT_TRUE(a.flush().ok());
  EXPECT_EQ(wait_child(pid), 0);
}

// send_gather: a message given as pieces of odd sizes (empty ones too, up to
// kGatherPiecesMax of them, spanning several frames) arrives as the one message their
// concatenation is, exactly as send() of it would (the echo uses send); too many pieces, or
// too many bytes, are refused up front and the link stays usable. sent_copied_bytes() counts
// every payload byte the transport copied: all of them, except the frames tcp hands to the
// kernel by reference (kGatherBytes and up).
TYPED_TEST(TransportConformance, GatheredSendIsTheConcatenationOfItsPieces) {
  auto link = TypeParam::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  const pid_t pid = spawn_peer(b, echo_until_quit<TypeParam>);
  const size_t frag = a.max_write_bytes();
  std::vector<size_t> many(kGatherPiecesMax);
  // 0 .. 150 bytes each, about 19 KiB in all: one frame, which tcp hands to the kernel by
  // reference (a sendmsg of kGatherPiecesMax + 2 iovecs).
  for (size_t i = 0; i < many.size(); ++i) many[i] = (i * 37) % 151;
  const std::vector<std::vector<size_t>> messages = {
      {1, 3, 7, 0, 13},
      {0, 0},
      {frag - 3, 5, 0, frag + 11, 1, 2 * frag + 7},
      {TcpEndpoint::kGatherBytes + 5, 3, TcpEndpoint::kGatherBytes - 1},
      many,
  };
  uint32_t session = 1;
  for (const std::vector<size_t>& sizes : messages) {
    size_t total = 0;
    for (size_t n : sizes) total += n;
    const std::vector<uint8_t> body = pattern(total, session);
    std::vector<std::span<const uint8_t>> pieces;
    size_t at = 0;
    for (size_t n : sizes) {
      pieces.emplace_back(body.data() + at, n);
      at += n;
    }
    const uint64_t copied_before = a.sent_copied_bytes();
    ASSERT_TRUE(a.send_gather(session, pieces).ok()) << session;
    ASSERT_TRUE(a.flush().ok());
    // What the transport copied: every fragment's payload, but tcp's large frames' none.
    uint64_t copied_want = 0;
    for (size_t off = 0; off < total || (total == 0 && off == 0); off += frag) {
      const size_t n = std::min(frag, total - off);
      if (!std::is_same_v<TypeParam, TcpEndpoint> || n < TcpEndpoint::kGatherBytes) {
        copied_want += n;
      }
      if (total == 0) break;
    }
    EXPECT_EQ(a.sent_copied_bytes() - copied_before, copied_want) << "message " << session;
    Received r;
    const Status st = recv_one(a, &r);
    ASSERT_TRUE(st.ok()) << session << ": " << st.to_string();
    EXPECT_EQ(r.imm, session);
    ASSERT_EQ(r.bytes.size(), total) << "message " << session;
    EXPECT_TRUE(r.bytes == body) << "message " << session << " differs";
    ++session;
  }
  // Refused up front: one piece too many, one byte too many. The link stays usable.
  const uint8_t byte = 7;
  std::vector<std::span<const uint8_t>> too_many(kGatherPiecesMax + 1, {&byte, 1});
  EXPECT_EQ(a.send_gather(1, too_many).code(), Code::kInvalidArgument);
  std::vector<uint8_t> half(a.max_message_bytes() / 2 + 1);
  const std::span<const uint8_t> too_big[2] = {half, half};
  EXPECT_EQ(a.send_gather(1, too_big).code(), Code::kInvalidArgument);
  const std::string still = "still ", usable = "usable";
  const std::span<const uint8_t> last[2] = {as_bytes(still), as_bytes(usable)};
  ASSERT_TRUE(a.send_gather(session, last).ok());
  ASSERT_TRUE(a.flush().ok());
  Received r;
  ASSERT_TRUE(recv_one(a, &r).ok());
  EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), "still usable");
  ASSERT_TRUE(a.send(kQuitSession, {}).ok());
  ASSERT_TRUE(a.flush().ok());
  EXPECT_EQ(wait_child(pid), 0);
}

TYPED_TEST(TransportConformance, ManyEndpointsInterleaved) {
  constexpr int kLinks = 24, kMessages = 50;
  std::vector<std::pair<TypeParam, TypeParam>> links;
  for (int i = 0; i < kLinks; ++i) {
    auto link = TypeParam::pair(small_options());
    ASSERT_TRUE(link.ok()) << link.status().to_string();
    links.push_back(std::move(*link));
  }
  for (int m = 0; m < kMessages; ++m) {
    for (int i = 0; i < kLinks; ++i) {
      const std::string body = std::to_string(i) + ":" + std::to_string(m);
      ASSERT_TRUE(links[i].first.send(static_cast<uint32_t>(m), as_bytes(body)).ok());
    }
  }
  for (auto& link : links) ASSERT_TRUE(link.first.flush().ok());
  for (int i = 0; i < kLinks; ++i) {
    for (int m = 0; m < kMessages; ++m) {
      Received r;
      ASSERT_TRUE(recv_one(links[i].second, &r).ok());
      EXPECT_EQ(r.imm, static_cast<uint32_t>(m));
      const std::string body = std::to_string(i) + ":" + std::to_string(m);
      EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), body);
    }
  }
}

TYPED_TEST(TransportConformance, PeerDeathIsUnavailableAfterItsMessages) {
  auto link = TypeParam::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  const pid_t pid = spawn_peer(b, [](TypeParam& ep) {
    for (uint32_t i = 0; i < 3; ++i) {
      if (!ep.send(i, as_bytes("last words")).ok()) return 1;
    }
    if (!ep.flush().ok()) return 2;
    raise(SIGKILL);  // no clean shutdown
    return 3;
  });
  for (uint32_t i = 0; i < 3; ++i) {
    Received r;
    ASSERT_TRUE(recv_one(a, &r).ok());
    EXPECT_EQ(r.imm, i);
  }
  const uint64_t start = mono_ns();
  Received r;
  Status s = recv_one(a, &r, 5 * kSecondNs);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.to_string();
  EXPECT_LT(mono_ns() - start, 2 * kSecondNs);  // noticed promptly, not by a long timeout
  // Stays failed.
  Completion c;
  EXPECT_EQ(a.poll(&c, 1).status().code(), Code::kUnavailable);
  EXPECT_EQ(wait_child(pid), 128 + SIGKILL);
}

// Frames for the malformed-input cases, built at stream position 32 (after one 2-byte message).
std::vector<uint8_t> frame_at_32(size_t payload_bytes) {
  std::vector<uint8_t> f(frame_bytes(payload_bytes));
  encode_frame(f.data(), 32, 0, 5, 0, pattern(payload_bytes, 9));
  return f;
}

TYPED_TEST(TransportConformance, MalformedFramesAreRejectedWithoutCrashing) {
  enum Case { kGarbage, kBadCanary, kHugeLength, kBadFlags, kWrongPosition, kTruncated };
  for (int kind = kGarbage; kind <= kTruncated; ++kind) {
    SCOPED_TRACE(kind);
    auto link = TypeParam::pair();
    ASSERT_TRUE(link.ok()) << link.status().to_string();
    auto& [a, b] = *link;
    ASSERT_TRUE(a.send(1, as_bytes("ok")).ok());  // delivered before the bad bytes
    std::vector<uint8_t> bad = frame_at_32(40);
    if (kind == kGarbage) bad = pattern(64, 77);
    if (kind == kBadCanary) bad.back() ^= 0x40;
    if (kind == kHugeLength) bad[3] = 0x0f;       // length ~ 250 MiB
    if (kind == kBadFlags) bad[3] = 0x20 | 0x40;  // write + more
    if (kind == kWrongPosition) {
      bad.assign(frame_bytes(40), 0);
      encode_frame(bad.data(), 0, 0, 5, 0, pattern(40, 9));
    }
    if (kind == kTruncated) bad.resize(24);
    ASSERT_TRUE(a.inject_raw_for_test(bad).ok());
    if (kind == kTruncated) a.close();
    Received r;
    ASSERT_TRUE(recv_one(b, &r).ok());
    EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), "ok");
    Status s = recv_one(b, &r, 5 * kSecondNs);
    EXPECT_EQ(s.code(), Code::kCorruption) << s.to_string();
    EXPECT_FALSE(s.message().empty());
    if (kind == kTruncated) {
      EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
    }
    EXPECT_EQ(b.send(1, as_bytes("x")).code(), s.code());  // the endpoint stays failed
  }
}

TYPED_TEST(TransportConformance, OneSidedWritesAndStaleEpochFence) {
  auto link = TypeParam::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  ASSERT_TRUE(a.write_with_imm(1, 11, as_bytes("log batch 1")).ok());
  std::vector<uint8_t> too_big(a.max_write_bytes() + 1);
  EXPECT_EQ(a.write_with_imm(1, 12, too_big).code(), Code::kInvalidArgument);
  ASSERT_TRUE(a.flush().ok());
  Received r;
  ASSERT_TRUE(recv_one(b, &r).ok());
  EXPECT_EQ(r.kind, Completion::Kind::kWrite);
  EXPECT_EQ(r.imm, 11u);
  EXPECT_EQ(r.epoch, 1u);
  EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), "log batch 1");

  // b fences epoch 5. A writer that has not heard yet is refused or its write is dropped.
  ASSERT_TRUE(b.set_fence_epoch(5).ok());
  Status raced = a.write_with_imm(3, 13, as_bytes("stale"));
  EXPECT_TRUE(raced.ok() || raced.code() == Code::kAborted) << raced.to_string();
  ASSERT_TRUE(a.send(7, as_bytes("after")).ok());
  ASSERT_TRUE(a.flush().ok());
  ASSERT_TRUE(recv_one(b, &r).ok());
  EXPECT_EQ(r.kind, Completion::Kind::kRecv);  // the stale write never surfaces
  EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), "after");
  EXPECT_EQ(b.fenced_drops(), raced.ok() ? 1u : 0u);

  // Once the writer has heard from b (after the fence), a stale write is refused up front.
  ASSERT_TRUE(b.send(0, as_bytes("sync")).ok());
  ASSERT_TRUE(b.flush().ok());
  ASSERT_TRUE(recv_one(a, &r).ok());
  Status stale = a.write_with_imm(4, 14, as_bytes("stale"));
  EXPECT_EQ(stale.code(), Code::kAborted) << stale.to_string();
  ASSERT_TRUE(a.write_with_imm(5, 15, as_bytes("current")).ok());
  ASSERT_TRUE(a.flush().ok());
  ASSERT_TRUE(recv_one(b, &r).ok());
  EXPECT_EQ(r.imm, 15u);
  EXPECT_EQ(r.epoch, 5u);
  EXPECT_EQ(b.set_fence_epoch(4).code(), Code::kInvalidArgument);
}

TYPED_TEST(TransportConformance, ZeroCopyReserveAndCommit) {
  auto link = TypeParam::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  auto span = a.reserve(100);
  ASSERT_TRUE(span.ok());
  ASSERT_EQ(span->size(), 100u);
  std::memcpy(span->data(), "in place", 8);
  ASSERT_TRUE(a.poll(nullptr, 0).ok());   // polling with a reservation outstanding is allowed
  ASSERT_TRUE(a.commit_send(3, 8).ok());  // shorter than reserved
  auto cancelled = a.reserve(10);
  ASSERT_TRUE(cancelled.ok());
  a.cancel();
  ASSERT_TRUE(b.set_fence_epoch(2).ok());
  ASSERT_TRUE(b.send(0, as_bytes("sync")).ok());
  ASSERT_TRUE(b.flush().ok());
  Received r;
  ASSERT_TRUE(recv_one(a, &r).ok());  // a has now seen b's fence
  auto w = a.reserve(5);
  ASSERT_TRUE(w.ok());
  std::memcpy(w->data(), "stale", 5);
  EXPECT_EQ(a.commit_write(1, 9, 5).code(), Code::kAborted);
  w = a.reserve(5);
  ASSERT_TRUE(w.ok());
  std::memcpy(w->data(), "fresh", 5);
  ASSERT_TRUE(a.commit_write(2, 9, 5).ok());
  EXPECT_EQ(a.reserve(a.max_write_bytes() + 1).status().code(), Code::kInvalidArgument);
  ASSERT_TRUE(a.flush().ok());
  ASSERT_TRUE(recv_one(b, &r).ok());
  EXPECT_EQ(r.kind, Completion::Kind::kRecv);
  EXPECT_EQ(r.imm, 3u);
  EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), "in place");
  ASSERT_TRUE(recv_one(b, &r).ok());
  EXPECT_EQ(r.kind, Completion::Kind::kWrite);
  EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), "fresh");
  EXPECT_EQ(b.fenced_drops(), 0u);
}

TYPED_TEST(TransportConformance, BatchedPollReturnsManyCompletions) {
  auto link = TypeParam::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  for (uint32_t i = 0; i < 100; ++i) ASSERT_TRUE(a.send(i, as_bytes("m")).ok());
  ASSERT_TRUE(a.flush().ok());
  Completion batch[32];
  uint32_t got = 0;
  size_t largest = 0;
  const uint64_t deadline = mono_ns() + 5 * kSecondNs;
  while (got < 100 && mono_ns() < deadline) {
    auto n = b.poll(batch, 32);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    largest = std::max(largest, *n);
    for (size_t i = 0; i < *n; ++i) EXPECT_EQ(batch[i].imm, got++);
    b.release();
    if (*n == 0) b.wait(kSecondNs).ignore();
  }
  EXPECT_EQ(got, 100u);
  EXPECT_GT(largest, 1u);
}

// An event loop blocks in poll(2) on several endpoints' fds at once; data or the peer's death
// must wake it, and an idle wait must not burn the CPU.
template <typename E>
int block_on(E& ep, int timeout_ms) {
  if (!ep.prepare_to_block()) return 1;  // work pending: a loop would not block
  pollfd fds[2] = {{ep.wait_fd(), POLLIN, 0}, {ep.liveness_fd(), POLLIN | POLLRDHUP, 0}};
  const int r = ::poll(fds, 2, timeout_ms);
  ep.end_block();
  return r;
}

TYPED_TEST(TransportConformance, EventLoopBlocksOnWaitFds) {
  auto link = TypeParam::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  // Nothing pending: blocks for the whole timeout.
  const uint64_t t0 = mono_ns();
  EXPECT_EQ(block_on(b, 100), 0);
  EXPECT_GE(mono_ns() - t0, 90'000'000u);
  // Data from another thread wakes it.
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(a.send(4, as_bytes("wake up")).ok());
    EXPECT_TRUE(a.flush().ok());
  });
  const uint64_t t1 = mono_ns();
  EXPECT_GT(block_on(b, 5000), 0);
  EXPECT_LT(mono_ns() - t1, 2'000'000'000u);
  sender.join();
  Received r;
  ASSERT_TRUE(recv_one(b, &r).ok());
  EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), "wake up");
  // The peer's death wakes it too.
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    a.close();
  });
  EXPECT_GT(block_on(b, 5000), 0);
  closer.join();
  EXPECT_EQ(recv_one(b, &r, 5 * kSecondNs).code(), Code::kUnavailable);
}

// ---- transport-specific: rendezvous and reconnect.

TEST(ShmTransportTest, RendezvousByNameAcrossProcesses) {
  const std::string name = "shoal-test-" + std::to_string(getpid());
  auto listener = ShmListener::listen(name);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto ep = ShmEndpoint::connect(name);
    if (!ep.ok()) _exit(1);
    Received r;
    if (!recv_one(*ep, &r).ok()) _exit(2);
    if (!ep->send(r.imm + 1, r.bytes).ok()) _exit(3);
    if (!recv_one(*ep, &r).ok()) _exit(4);  // wait for the parent's goodbye
    _exit(0);
  }
  auto ep = listener->accept();
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  ASSERT_TRUE(ep->send(41, as_bytes("hello")).ok());
  Received r;
  ASSERT_TRUE(recv_one(*ep, &r).ok());
  EXPECT_EQ(r.imm, 42u);
  ASSERT_TRUE(ep->send(0, as_bytes("bye")).ok());
  ASSERT_TRUE(ep->flush().ok());
  EXPECT_EQ(wait_child(pid), 0);
}

TEST(ShmTransportTest, IdleWaiterSleepsInsteadOfSpinning) {
  auto link = ShmEndpoint::pair();
  ASSERT_TRUE(link.ok());
  auto& [a, b] = *link;
  timespec cpu0, cpu1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
  EXPECT_EQ(b.wait(300'000'000).code(), Code::kTimeout);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
  const double cpu_ms = (cpu1.tv_sec - cpu0.tv_sec) * 1e3 + (cpu1.tv_nsec - cpu0.tv_nsec) / 1e6;
  EXPECT_LT(cpu_ms, 30.0) << "an idle wait burned the CPU";
  (void)a;
}

TEST(TcpTransportTest, ReconnectAfterTheServerSideDrops) {
  auto listener = TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  auto client = TcpEndpoint::connect("127.0.0.1", listener->port());
  ASSERT_TRUE(client.ok());
  {
    auto server = listener->accept();
    ASSERT_TRUE(server.ok());
    ASSERT_TRUE(client->send(1, as_bytes("one")).ok());
    ASSERT_TRUE(client->flush().ok());
    Received r;
    ASSERT_TRUE(recv_one(*server, &r).ok());
  }  // the server side goes away
  Received r;
  EXPECT_EQ(recv_one(*client, &r, 5 * kSecondNs).code(), Code::kUnavailable);
  ASSERT_TRUE(client->reconnect().ok());
  auto server = listener->accept();
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE(client->send(2, as_bytes("two")).ok());
  ASSERT_TRUE(client->flush().ok());
  ASSERT_TRUE(recv_one(*server, &r).ok());
  EXPECT_EQ(r.imm, 2u);
  EXPECT_EQ(std::string(r.bytes.begin(), r.bytes.end()), "two");
}

}  // namespace
}  // namespace shoal::net

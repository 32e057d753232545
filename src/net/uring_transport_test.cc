// The transport conformance properties (see transport_conformance_test.cc) for the io_uring
// transport, plus what is specific to it: every ring mode, frames spanning provided buffers,
// buffer exhaustion (ENOBUFS re-arm), and zero-copy send accounting. Peers that must be able
// to die run in a fork()ed child that reports through its exit code. Every test skips when
// this kernel (or its sandbox) offers no io_uring.
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
#include "src/net/uring_transport.h"

namespace shoal::net {
namespace {

constexpr uint64_t kSecondNs = 1'000'000'000;
constexpr uint32_t kQuitSession = 0xfffffff0;

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  Rng rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng.next();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

struct Received {
  Completion::Kind kind;
  uint32_t imm;
  uint64_t epoch;
  std::vector<uint8_t> bytes;
};

Status recv_one(UringEndpoint& ep, Received* out, uint64_t timeout_ns = 10 * kSecondNs) {
  const uint64_t deadline = mono_ns() + timeout_ns;
  for (;;) {  // bounded by the deadline
    Completion c;
    auto n = ep.poll(&c, 1);
    if (!n.ok()) return n.status();
    if (*n == 1) {
      *out = {c.kind, c.imm, c.epoch, {c.bytes.begin(), c.bytes.end()}};
      ep.release();
      return Status::Ok();
    }
    const uint64_t now = mono_ns();
    if (now >= deadline) return Status::Timeout("recv_one");
    Status s = ep.wait(deadline - now);
    if (!s.ok() && s.code() != Code::kTimeout) return s;
  }
}

template <typename Fn>
pid_t spawn_peer(UringEndpoint& child_end, Fn fn) {
  const pid_t pid = fork();
  SHOAL_CHECK(pid >= 0);
  if (pid == 0) _exit(fn(child_end));
  child_end.close();
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

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

TEST_F(UringTransport, PerSessionOrderingAcrossManySessions) {
  auto link = UringEndpoint::pair(small_options());
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  constexpr uint32_t kMessages = 30000, kSessions = 64;
  const pid_t pid = spawn_peer(b, [&](UringEndpoint& ep) {
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

// Echoes sizes 1 B .. max_message_bytes through a forked peer with the given ring options.
void echo_sizes(const UringOptions& uring) {
  auto link = UringEndpoint::pair({}, uring);
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  const pid_t pid = spawn_peer(b, [](UringEndpoint& ep) {
    for (int i = 0; i < 100; ++i) {  // echo until told to quit
      Received r;
      if (!recv_one(ep, &r).ok()) return 1;
      if (r.imm == kQuitSession) return 0;
      if (!ep.send(r.imm, r.bytes).ok()) return 2;
      if (!ep.flush().ok()) return 3;
    }
    return 4;
  });
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

TEST_F(UringTransport, EchoSizesFromOneByteTo8MiB) {
  echo_sizes({});
}

TEST_F(UringTransport, EchoSizesWithZeroCopySend) {
  UringOptions u;
  u.zero_copy_send = true;
  u.zero_copy_min_bytes = 16 * 1024;
  echo_sizes(u);
}

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

TEST_F(UringTransport, ManyEndpointsInterleaved) {
  constexpr int kLinks = 24, kMessages = 50;
  std::vector<std::pair<UringEndpoint, UringEndpoint>> links;
  for (int i = 0; i < kLinks; ++i) {
    auto link = UringEndpoint::pair(small_options());
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

TEST_F(UringTransport, PeerDeathIsUnavailableAfterItsMessages) {
  auto link = UringEndpoint::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  const pid_t pid = spawn_peer(b, [](UringEndpoint& ep) {
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
  Completion c;
  EXPECT_EQ(a.poll(&c, 1).status().code(), Code::kUnavailable);  // stays failed
  EXPECT_EQ(a.send(1, as_bytes("x")).code(), Code::kUnavailable);
  EXPECT_EQ(wait_child(pid), 128 + SIGKILL);
}

// Frames for the malformed-input cases, built at stream position 32 (after one 2-byte message).
std::vector<uint8_t> frame_at_32(size_t payload_bytes) {
  std::vector<uint8_t> f(frame_bytes(payload_bytes));
  encode_frame(f.data(), 32, 0, 5, 0, pattern(payload_bytes, 9));
  return f;
}

TEST_F(UringTransport, MalformedFramesAreRejectedWithoutCrashing) {
  enum Case { kGarbage, kBadCanary, kHugeLength, kBadFlags, kWrongPosition, kTruncated };
  for (int kind = kGarbage; kind <= kTruncated; ++kind) {
    SCOPED_TRACE(kind);
    auto link = UringEndpoint::pair();
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

TEST_F(UringTransport, OneSidedWritesAndStaleEpochFence) {
  auto link = UringEndpoint::pair();
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
  Status st = recv_one(b, &r);
  ASSERT_TRUE(st.ok()) << st.to_string();
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
  st = recv_one(b, &r);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(r.imm, 15u);
  EXPECT_EQ(r.epoch, 5u);
  EXPECT_EQ(b.set_fence_epoch(4).code(), Code::kInvalidArgument);
}

TEST_F(UringTransport, ZeroCopyReserveAndCommit) {
  auto link = UringEndpoint::pair();
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

TEST_F(UringTransport, BatchedPollReturnsManyCompletions) {
  auto link = UringEndpoint::pair();
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

int block_on(UringEndpoint& ep, int timeout_ms) {
  if (!ep.prepare_to_block()) return 1;  // work pending: a loop would not block
  pollfd fds[2] = {{ep.wait_fd(), POLLIN, 0}, {ep.liveness_fd(), POLLIN | POLLRDHUP, 0}};
  const int r = ::poll(fds, 2, timeout_ms);
  ep.end_block();
  return r;
}

TEST_F(UringTransport, EventLoopBlocksOnWaitFds) {
  auto link = UringEndpoint::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  const uint64_t t0 = mono_ns();
  EXPECT_EQ(block_on(b, 100), 0);
  EXPECT_GE(mono_ns() - t0, 90'000'000u);
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
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    a.close();
  });
  EXPECT_GT(block_on(b, 5000), 0);
  closer.join();
  EXPECT_EQ(recv_one(b, &r, 5 * kSecondNs).code(), Code::kUnavailable);
}

}  // namespace
}  // namespace shoal::net

// The tcp endpoint's kept regions (TcpEndpoint::keep_received): recv() fills the receive ring
// only up to the oldest region still kept, so a receiver that holds too much stops reading
// (the sender's bytes wait in the socket) and reads on, every byte intact, once it lets go;
// frames that run over the ring's end arrive whole (the ring is mapped twice); keeping is
// refused past three quarters of the ring, outside it (a reassembled message), for empty or
// misaligned bytes; malformed input still fails the endpoint without touching what is kept;
// and kept bytes outlive the endpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "src/net/tcp_transport.h"
#include "src/net/transport_test_util.h"

namespace shoal::net {
namespace tcp_keep_test {  // named, not anonymous: unique in a unity build

constexpr size_t kMessage = 4000;  // frame_bytes 4024: frames straddle the ring's end

struct TcpPair {
  explicit TcpPair(size_t max_message_bytes = 8 << 10) {
    o.tcp_buffer_bytes = 64 << 10;  // the smallest ring: a frame carries up to 16 KiB
    o.max_message_bytes = max_message_bytes;
    o.spin_ns = 0;
    auto p = TcpEndpoint::pair(o);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    tx = std::move(p->first);
    rx = std::move(p->second);
  }
  // Sends one message of `size` bytes of `fill`.
  void send(uint8_t fill, size_t size = kMessage) {
    const std::vector<uint8_t> msg(size, fill);
    ASSERT_TRUE(tx.send(7, msg).ok());
    ASSERT_TRUE(tx.flush().ok());
  }
  // Polls one message, waiting up to 50 ms: its bytes, or empty when none came whole.
  std::span<const uint8_t> receive() {
    for (int i = 0; i < 10; ++i) {  // bounded: 10 waits of 5 ms
      auto n = rx.poll(c, 1);
      EXPECT_TRUE(n.ok()) << n.status().to_string();
      if (!n.ok()) return {};
      if (*n == 1) return c[0].bytes;
      if (Status s = rx.wait(5'000'000); !s.ok() && s.code() != Code::kTimeout) return {};
    }
    return {};
  }
  std::span<const uint8_t> round(uint8_t fill, size_t size = kMessage) {
    send(fill, size);
    return receive();
  }
  EndpointOptions o;
  TcpEndpoint tx, rx;
  Completion c[1];
};

using test_util::all_of;

TEST(TcpKeep, AReceiverThatHoldsTooMuchStopsReadingAndReadsOnIntactOnceItLetsGo) {
  TcpPair p;
  ASSERT_EQ(p.rx.receive_ring_bytes(), 64u << 10);
  std::shared_ptr<const uint64_t[]> kept = p.rx.keep_received(p.round(0x3c));
  ASSERT_TRUE(kept);
  EXPECT_EQ(p.rx.kept_regions(), 1u);
  p.rx.release();
  EXPECT_EQ(p.rx.receive_held_bytes(), frame_bytes(kMessage) - kFrameHeaderBytes);
  // Every message read goes at once; the kept one pins the ring: recv stops short of it.
  int received = 1;
  for (; received < 40; ++received) {  // bounded: two and a half laps' worth
    const std::span<const uint8_t> b = p.round(static_cast<uint8_t>(received));
    if (b.empty()) break;
    ASSERT_TRUE(all_of(b, static_cast<uint8_t>(received))) << received;
    p.rx.release();
  }
  const size_t ring_frames = p.rx.receive_ring_bytes() / frame_bytes(kMessage);
  EXPECT_LT(received, 40);
  EXPECT_GE(static_cast<size_t>(received), ring_frames - 1);
  EXPECT_LE(static_cast<size_t>(received), ring_frames + 1);
  EXPECT_TRUE(all_of(kept, kMessage, 0x3c));
  // The ring is full: an event loop gets no fd to sleep on (the socket stays readable).
  EXPECT_TRUE(p.rx.prepare_to_block());
  EXPECT_EQ(p.rx.wait_fd(), -1);
  p.rx.end_block();
  // Let go: the message waiting in the socket comes whole, and so does everything after it,
  // several laps around the ring (frames cut by the ring's end included).
  kept.reset();
  EXPECT_TRUE(p.rx.prepare_to_block());
  EXPECT_GE(p.rx.wait_fd(), 0);
  p.rx.end_block();
  const std::span<const uint8_t> waiting = p.receive();
  ASSERT_EQ(waiting.size(), kMessage);
  EXPECT_TRUE(all_of(waiting, static_cast<uint8_t>(received)));
  p.rx.release();
  for (int i = 0; i < 3 * static_cast<int>(ring_frames); ++i) {
    const std::span<const uint8_t> b = p.round(static_cast<uint8_t>(i + 100));
    ASSERT_EQ(b.size(), kMessage) << i;
    ASSERT_TRUE(all_of(b, static_cast<uint8_t>(i + 100))) << i;
    // Keep every fifth for a while: out-of-order lets-go leave the rest intact.
    if (i % 5 == 0) kept = p.rx.keep_received(b);
    p.rx.release();
    if (i % 5 == 0) {
      EXPECT_TRUE(all_of(kept, kMessage, static_cast<uint8_t>(i + 100)));
    }
  }
  kept.reset();
  EXPECT_TRUE(test_util::kept_bytes_outlive_both_ends(p, kMessage));
}

TEST(TcpKeep, KeepingStopsAtThreeQuartersOfTheRingAndOutsideIt) {
  TcpPair p(/*max_message_bytes=*/64 << 10);
  std::vector<std::shared_ptr<const uint64_t[]>> kept;
  const int refused = test_util::keep_every_round(p, 14, &kept);
  EXPECT_EQ(kept.size(), (p.rx.receive_ring_bytes() / 4 * 3) / frame_bytes(kMessage));
  EXPECT_EQ(refused, 14 - static_cast<int>(kept.size()));
  EXPECT_GT(refused, 0);
  // Not in the ring, empty, misaligned, beyond the message's frame: refused.
  const std::vector<uint8_t> elsewhere(kMessage);
  const std::span<const uint8_t> b = p.round(1);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(p.rx.keep_received(elsewhere), nullptr);
  EXPECT_EQ(p.rx.keep_received(b.subspan(0, 0)), nullptr);
  EXPECT_EQ(p.rx.keep_received(b.subspan(4)), nullptr);
  EXPECT_EQ(p.rx.keep_received({b.data(), b.size() + 64}), nullptr);
  p.rx.release();
  for (size_t i = 0; i < kept.size(); ++i)
    EXPECT_TRUE(all_of(kept[i], kMessage, static_cast<uint8_t>(i)));
  kept.clear();
  // A message above a frame's payload is reassembled outside the ring: not kept.
  const std::span<const uint8_t> big = p.round(9, 40 << 10);
  ASSERT_EQ(big.size(), 40u << 10);
  EXPECT_FALSE(p.rx.in_receive_ring(big.data()));
  EXPECT_EQ(p.rx.keep_received(big), nullptr);
  p.rx.release();
}

// Malformed input after a kept region: the endpoint fails (Corruption), the kept bytes stay.
TEST(TcpKeep, MalformedOrTruncatedInputFailsTheEndpointAndLeavesKeptBytesIntact) {
  for (const bool truncated : {false, true}) {
    TcpPair p;
    std::shared_ptr<const uint64_t[]> kept = p.rx.keep_received(p.round(0x77));
    ASSERT_TRUE(kept);
    p.rx.release();
    std::vector<uint8_t> frame(frame_bytes(64), 0xee);  // a bad canary (and flags)
    const uint32_t length = 64;
    std::memcpy(frame.data(), &length, 4);
    if (truncated) frame.resize(40);  // cut inside the payload, then the peer closes
    ASSERT_TRUE(p.tx.inject_raw_for_test(frame).ok());
    if (truncated) p.tx.close();
    Status failure;
    for (int i = 0; i < 20 && failure.ok(); ++i) {  // bounded: 20 waits of 5 ms
      auto n = p.rx.poll(p.c, 1);
      if (!n.ok()) failure = n.status();
      if (n.ok() && *n != 0) p.rx.release();
      if (failure.ok()) (void)p.rx.wait(5'000'000);
    }
    EXPECT_EQ(failure.code(), Code::kCorruption) << failure.to_string();
    if (truncated) {
      EXPECT_NE(failure.message().find("truncated"), std::string::npos);
    }
    EXPECT_TRUE(all_of(kept, kMessage, 0x77));
  }
}

}  // namespace tcp_keep_test
}  // namespace shoal::net

#include "src/net/ring.h"
#include "src/net/transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "src/base/env.h"
#include "src/net/transport_test_util.h"

namespace shoal::net {
namespace ring_test {  // named, not anonymous: unique in a unity build

using Region = test_util::RingRegion;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

TEST(FrameCodecTest, RoundTripAndIncompletePrefixes) {
  const auto payload = pattern(13, 1);
  std::vector<uint8_t> buf(frame_bytes(payload.size()));
  ASSERT_EQ(buf.size(), 16u + 16u + 8u);
  encode_frame(buf.data(), 4096, kFlagWrite, 77, 9, payload);
  auto f = decode_frame(buf, 4096, 1024);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->frame_bytes, buf.size());
  EXPECT_EQ(f->flags, kFlagWrite);
  EXPECT_EQ(f->imm, 77u);
  EXPECT_EQ(f->epoch, 9u);
  ASSERT_EQ(f->payload_bytes, payload.size());
  EXPECT_EQ(0, std::memcmp(f->payload, payload.data(), payload.size()));
  // Every strict prefix is "incomplete", never an error.
  for (size_t n = 0; n < buf.size(); ++n) {
    auto p = decode_frame({buf.data(), n}, 4096, 1024);
    ASSERT_TRUE(p.ok()) << n;
    EXPECT_EQ(p->frame_bytes, 0u) << n;
  }
}

TEST(FrameCodecTest, RejectsCorruption) {
  const auto payload = pattern(64, 3);
  std::vector<uint8_t> buf(frame_bytes(payload.size()));
  encode_frame(buf.data(), 0, 0, 1, 2, payload);
  // Wrong position (a stale frame from another lap or offset).
  auto at_wrong_pos = decode_frame(buf, 8, 1024);
  ASSERT_FALSE(at_wrong_pos.ok());
  EXPECT_EQ(at_wrong_pos.status().code(), Code::kCorruption);
  // Every single-bit flip in header or canary is caught (as corruption or as a length so
  // large that the frame is incomplete, which a ring reports as truncated).
  for (size_t byte : {0u, 1u, 4u, 8u, 15u, 80u, 87u}) {
    for (int bit = 0; bit < 8; ++bit) {
      auto copy = buf;
      copy[byte] ^= static_cast<uint8_t>(1u << bit);
      auto f = decode_frame(copy, 0, 1u << 20);
      if (f.ok()) {
        EXPECT_EQ(f->frame_bytes, 0u) << "byte " << byte << " bit " << bit;
      } else {
        EXPECT_EQ(f.status().code(), Code::kCorruption);
      }
    }
  }
  // Length above the receiver's limit.
  auto too_long = decode_frame(buf, 0, 63);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("exceeds the limit"), std::string::npos);
  // Pad marker and illegal flag combinations.
  uint32_t pad = kFlagPad;
  std::memcpy(buf.data(), &pad, 4);
  EXPECT_FALSE(decode_frame(buf, 0, 1024).ok());
  uint32_t bad = kFlagWrite | kFlagMore | 64;
  std::memcpy(buf.data(), &bad, 4);
  EXPECT_FALSE(decode_frame(buf, 0, 1024).ok());
}

TEST(RingTest, PushPollRelease) {
  Region r(4096);
  RingProducer prod(r.span());
  RingConsumer cons(r.span());
  auto f0 = cons.next();
  ASSERT_TRUE(f0.ok());
  EXPECT_EQ(f0->frame_bytes, 0u);
  const auto a = pattern(1, 5), b = pattern(100, 6);
  ASSERT_TRUE(prod.try_push(0, 1, 0, a));
  ASSERT_TRUE(prod.try_push(kFlagMore, 2, 0, b));
  auto f1 = cons.next();
  auto f2 = cons.next();
  ASSERT_TRUE(f1.ok() && f2.ok());
  EXPECT_EQ(f1->imm, 1u);
  EXPECT_EQ(f1->payload_bytes, 1u);
  EXPECT_EQ(f2->imm, 2u);
  EXPECT_EQ(f2->flags, kFlagMore);
  EXPECT_EQ(0, std::memcmp(f2->payload, b.data(), b.size()));
  cons.release();
  EXPECT_FALSE(cons.has_data());
}

TEST(RingTest, FullRingBackpressureWithoutOverwrite) {
  Region r(4096);
  RingProducer prod(r.span());
  RingConsumer cons(r.span());
  const auto p = pattern(200, 9);
  int pushed = 0;
  while (prod.try_push(0, static_cast<uint32_t>(pushed), 0, p)) ++pushed;
  EXPECT_EQ(pushed, static_cast<int>(4096 / frame_bytes(200)));
  // Reading without release() returns no credit: still full.
  auto first = cons.next();
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(prod.try_push(0, 999, 0, p));
  // Every frame still intact and in order.
  EXPECT_EQ(first->imm, 0u);
  for (int i = 1; i < pushed; ++i) {
    auto f = cons.next();
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_EQ(f->imm, static_cast<uint32_t>(i));
    EXPECT_EQ(0, std::memcmp(f->payload, p.data(), p.size()));
  }
  cons.release();
  cons.flush_credit();
  EXPECT_TRUE(prod.try_push(0, 1000, 0, p));
}

TEST(RingTest, WrapAroundManyLapsWithVaryingSizes) {
  Region r(8192);
  RingProducer prod(r.span());
  RingConsumer cons(r.span());
  Rng rng(42);
  uint32_t sent = 0, got = 0;
  std::vector<uint32_t> sizes;
  for (int step = 0; step < 20000; ++step) {
    const auto n = static_cast<uint32_t>(rng.uniform(0, prod.max_payload_bytes()));
    auto p = pattern(n, static_cast<uint8_t>(sent));
    if (prod.try_push(0, sent, 0, p)) {
      sizes.push_back(n);
      ++sent;
    }
    // Consume a random number of frames.
    for (uint64_t k = rng.uniform(0, 3); k > 0; --k) {
      auto f = cons.next();
      ASSERT_TRUE(f.ok()) << f.status().to_string();
      if (f->frame_bytes == 0) break;
      ASSERT_EQ(f->imm, got);
      ASSERT_EQ(f->payload_bytes, sizes[got]);
      auto want = pattern(sizes[got], static_cast<uint8_t>(got));
      ASSERT_TRUE(want.empty() || std::memcmp(f->payload, want.data(), want.size()) == 0);
      ++got;
      cons.release();
    }
  }
  EXPECT_GT(prod.tail(), 50u * 8192u);  // many laps
  EXPECT_GT(got, 1000u);
}

TEST(RingTest, StaleEpochWriteIsRefused) {
  Region r(4096);
  RingProducer prod(r.span());
  RingConsumer cons(r.span());
  cons.set_fence_epoch(5);
  EXPECT_EQ(prod.fence_epoch(), 5u);
  // A writer that raced the fence: the consumer drops it; messages are not fenced.
  ASSERT_TRUE(prod.try_push(kFlagWrite, 1, 4, pattern(8, 0)));
  ASSERT_TRUE(prod.try_push(kFlagWrite, 2, 5, pattern(8, 0)));
  ASSERT_TRUE(prod.try_push(0, 3, 0, pattern(8, 0)));
  auto f = cons.next();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->imm, 2u);
  EXPECT_EQ(cons.fenced_drops(), 1u);
  auto g = cons.next();
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->imm, 3u);
}

TEST(RingTest, CorruptedCanaryAndLengthRejected) {
  for (int mode = 0; mode < 4; ++mode) {
    Region r(4096);
    RingProducer prod(r.span());
    RingConsumer cons(r.span());
    ASSERT_TRUE(prod.try_push(0, 1, 0, pattern(40, 1)));
    auto data = prod.raw_data_for_test();
    if (mode == 0) data[16 + 40] ^= 0xff;          // canary
    if (mode == 1) data[0] = 48;                   // length grows: canary looked up elsewhere
    if (mode == 2) data[2] = 0x7f;                 // length far beyond the limit
    if (mode == 3) prod.publish_raw_for_test(24);  // garbage published after the frame
    auto f = cons.next();
    if (mode == 3) {
      ASSERT_TRUE(f.ok());
      f = cons.next();
    }
    ASSERT_FALSE(f.ok()) << "mode " << mode;
    EXPECT_EQ(f.status().code(), Code::kCorruption) << f.status().to_string();
  }
}

TEST(RingTest, TruncatedFrameRejected) {
  Region r(4096);
  RingProducer prod(r.span());
  RingConsumer cons(r.span());
  // Header claims 100 bytes but only 24 are published.
  auto data = prod.raw_data_for_test();
  uint32_t lf = 100;
  std::memcpy(data.data(), &lf, 4);
  prod.publish_raw_for_test(24);
  auto f = cons.next();
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status().message();
}

TEST(RingTest, ConcurrentProducerConsumerWithSleeping) {
  Region r(16384);
  RingProducer prod(r.span());
  RingConsumer cons(r.span());
  constexpr uint32_t kCount = 200000;
  std::thread producer([&] {
    Rng rng(7);
    for (uint32_t i = 0; i < kCount;) {
      const auto n = static_cast<uint32_t>(rng.uniform(0, 300));
      uint8_t* dst = prod.try_reserve(n);
      if (dst == nullptr) {
        prod.wait_for_credit(1'000'000);
        continue;
      }
      for (uint32_t k = 0; k < n; ++k) dst[k] = static_cast<uint8_t>(i + k);
      prod.commit(0, i, 0, n);
      ++i;
      if (i % 5000 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  uint32_t got = 0;
  while (got < kCount) {
    auto f = cons.next();
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    if (f->frame_bytes == 0) {
      cons.wait_for_data(1'000'000);
      continue;
    }
    ASSERT_EQ(f->imm, got);
    for (uint32_t k = 0; k < f->payload_bytes; ++k) {
      ASSERT_EQ(f->payload[k], static_cast<uint8_t>(got + k));
    }
    ++got;
    cons.release();
  }
  producer.join();
}

}  // namespace ring_test
}  // namespace shoal::net

namespace shoal::net {
namespace ring_test {  // named, not anonymous: unique in a unity build

TEST(MessageAssemblerTest, ReassemblesAndRejectsForeignFragments) {
  MessageAssembler assembler(100);
  const uint8_t part[40] = {1, 2, 3};
  Frame first{kFlagMore, 7, 0, part, 40, 72};
  Frame last{0, 7, 0, part, 40, 72};
  auto s1 = assembler.feed(first);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(*s1, MessageAssembler::Step::kAbsorbed);
  auto s2 = assembler.feed(last);
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(*s2, MessageAssembler::Step::kComplete);
  EXPECT_EQ(assembler.message().size(), 80u);
  EXPECT_EQ(assembler.copied_bytes(), 80u);  // both fragments were copied
  assembler.release();
  // A single-frame message is delivered in place: nothing copied.
  auto s3 = assembler.feed(last);
  ASSERT_TRUE(s3.ok());
  EXPECT_EQ(*s3, MessageAssembler::Step::kInPlace);
  EXPECT_EQ(assembler.copied_bytes(), 80u);
  // Another session's frame inside a fragmented message, and a message above the limit.
  ASSERT_TRUE(assembler.feed(first).ok());
  Frame foreign{0, 8, 0, part, 40, 72};
  EXPECT_EQ(assembler.feed(foreign).status().code(), Code::kCorruption);
  MessageAssembler small(60);
  ASSERT_TRUE(small.feed(first).ok());
  EXPECT_EQ(small.feed(last).status().code(), Code::kCorruption);
}

// A poll batch can end between two fragments of a message (the rest not received yet); the
// endpoint then calls release() for the batch. The fragments absorbed so far must stay.
TEST(MessageAssemblerTest, ReleaseBetweenFragmentsKeepsThePartialMessage) {
  MessageAssembler assembler(1000);
  uint8_t head[40];
  uint8_t tail[24];
  for (int i = 0; i < 40; ++i) head[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 24; ++i) tail[i] = static_cast<uint8_t>(100 + i);
  ASSERT_TRUE(assembler.feed(Frame{kFlagMore, 7, 0, head, 40, 72}).ok());
  assembler.release();  // the batch ended here
  EXPECT_TRUE(assembler.active());
  EXPECT_EQ(assembler.imm(), 7u);
  auto last = assembler.feed(Frame{0, 7, 0, tail, 24, 48});
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(*last, MessageAssembler::Step::kComplete);
  const auto m = assembler.message();
  ASSERT_EQ(m.size(), 64u);
  EXPECT_TRUE(std::equal(head, head + 40, m.begin()));
  EXPECT_TRUE(std::equal(tail, tail + 24, m.begin() + 40));
  assembler.release();
  EXPECT_FALSE(assembler.holding());
  EXPECT_FALSE(assembler.active());
}

}  // namespace ring_test
}  // namespace shoal::net

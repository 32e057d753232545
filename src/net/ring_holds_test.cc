// RingHolds and the shared-memory endpoint's kept regions: the floor is the oldest region
// still held whatever order holds are let go in, a ring's producer never writes over a held
// region and gets the space back once it is let go, ShmEndpoint::keep_received() refuses
// past three quarters of the ring, and kept bytes outlive the endpoint that received them.
#include "src/net/ring_holds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "src/net/ring.h"
#include "src/net/shm_transport.h"
#include "src/net/transport_test_util.h"

namespace shoal::net {
namespace ring_holds_test {  // named, not anonymous: unique in a unity build

// A RingHolds that owns no mapping, released by the test's reference at scope exit.
struct Table {
  explicit Table(uint32_t capacity) : holds(RingHolds::create(capacity, nullptr, 0)) {}
  ~Table() { holds->unref(); }
  RingHolds* holds;
};

TEST(RingHolds, TheFloorIsTheOldestRegionStillHeldWhateverOrderTheyGoIn) {
  Table t(8);
  alignas(8) static uint8_t bytes[4096];
  auto a = t.holds->hold(bytes, 100, 64);
  auto b = t.holds->hold(bytes + 512, 600, 64);
  auto c = t.holds->hold(bytes + 1024, 1100, 64);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(b.get()), bytes + 512);
  EXPECT_EQ(t.holds->floor(2000), 100u);
  b.reset();  // out of order: the oldest still pins the floor
  EXPECT_EQ(t.holds->floor(2000), 100u);
  EXPECT_EQ(t.holds->records_in_use(), 3u);
  auto a2 = a;  // a second handle: the region stays held until both go
  a.reset();
  EXPECT_EQ(t.holds->floor(2000), 100u);
  a2.reset();
  EXPECT_EQ(t.holds->floor(2000), 1100u);  // the released middle one is passed too
  EXPECT_EQ(t.holds->records_in_use(), 1u);
  c.reset();
  EXPECT_EQ(t.holds->floor(2000), 2000u);  // nothing held: up to the cursor
  EXPECT_EQ(t.holds->records_in_use(), 0u);
}

TEST(RingHolds, RefusesWhenEveryRecordIsInUseOrTheRegionIsOlderThanTheNewest) {
  Table t(2);
  alignas(8) static uint8_t bytes[256];
  auto a = t.holds->hold(bytes, 0, 8);
  auto b = t.holds->hold(bytes + 8, 8, 8);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(t.holds->hold(bytes + 16, 16, 8), nullptr);  // full
  a.reset();
  EXPECT_EQ(t.holds->hold(bytes + 16, 16, 8), nullptr);  // still full until floor() passes a
  EXPECT_EQ(t.holds->floor(24), 8u);
  auto c = t.holds->hold(bytes + 16, 16, 8);
  ASSERT_TRUE(c);
  b.reset();
  EXPECT_EQ(t.holds->floor(24), 16u);
  EXPECT_EQ(t.holds->hold(bytes, 0, 8), nullptr);  // behind the newest hold: out of order
  EXPECT_EQ(t.holds->holds_refused(), 3u);
  EXPECT_EQ(t.holds->holds_made(), 3u);
}

using Region = test_util::RingRegion;

// The producer fills the ring around a held frame payload: it stops short of it (try_push
// fails) instead of writing over it, and goes on once the region is let go and the consumer
// returns the credit.
TEST(RingHolds, AProducerNeverWritesOverAHeldRegionAndGetsItBackOnceLetGo) {
  constexpr size_t kData = 4096;
  Region r(kData);
  RingProducer producer(r.span());
  RingConsumer consumer(r.span());
  Table t(8);
  std::vector<uint8_t> payload(248, 0xa5);
  ASSERT_TRUE(producer.try_push(0, 1, 0, payload));
  auto first = consumer.next();
  ASSERT_TRUE(first.ok() && first->frame_bytes != 0);
  const uint64_t begin = consumer.position_of(first->payload);
  EXPECT_EQ(begin, kFrameHeaderBytes);
  auto held = t.holds->hold(first->payload, begin, first->payload_bytes);
  ASSERT_TRUE(held);
  consumer.release_to(t.holds->floor(consumer.cursor()));
  consumer.flush_credit();
  EXPECT_EQ(consumer.released(), begin);
  // Fill: every other frame is consumed and released at once, so only the hold limits.
  uint64_t pushed_bytes = 0;
  for (int i = 0; i < 100; ++i) {  // bounded: a few laps' worth
    std::fill(payload.begin(), payload.end(), static_cast<uint8_t>(i));
    if (!producer.try_push(0, 1, 0, payload)) break;
    pushed_bytes += frame_bytes(payload.size());
    auto f = consumer.next();
    ASSERT_TRUE(f.ok() && f->frame_bytes != 0);
    consumer.release_to(t.holds->floor(consumer.cursor()));
    consumer.flush_credit();
  }
  EXPECT_LE(pushed_bytes, kData);
  EXPECT_GE(pushed_bytes, kData - 2 * frame_bytes(payload.size()));  // stopped by the hold only
  const auto* kept = reinterpret_cast<const uint8_t*>(held.get());
  EXPECT_TRUE(std::all_of(kept, kept + 248, [](uint8_t b) { return b == 0xa5; }));
  held.reset();
  consumer.release_to(t.holds->floor(consumer.cursor()));
  consumer.flush_credit();
  EXPECT_EQ(consumer.released(), consumer.cursor());
  EXPECT_TRUE(producer.try_push(0, 1, 0, payload));
}

// Over a real endpoint pair: the sender stops short of a kept payload (its send times out)
// instead of writing over it, goes on once it is let go, and the kept bytes outlive both
// endpoints' close.
struct ShmPair {
  ShmPair() {
    o.ring_bytes = 64 << 10;
    o.max_message_bytes = 8 << 10;
    o.send_timeout_ns = 20'000'000;
    auto p = ShmEndpoint::pair(o);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    tx = std::move(p->first);
    rx = std::move(p->second);
  }
  // Sends one 4 KiB message of `fill` and polls it: its bytes, or empty when the send failed.
  std::span<const uint8_t> round(uint8_t fill) {
    std::vector<uint8_t> msg(4096, fill);
    if (!tx.send(7, msg).ok() || !tx.flush().ok()) return {};
    auto n = rx.poll(c, 4);
    EXPECT_TRUE(n.ok() && *n == 1);
    return c[0].bytes;
  }
  EndpointOptions o;
  ShmEndpoint tx, rx;
  Completion c[4];
};

TEST(ShmKeep, TheSenderStopsShortOfAKeptPayloadWhichOutlivesBothEndpoints) {
  ShmPair p;
  std::shared_ptr<const uint64_t[]> kept = p.rx.keep_received(p.round(0x3c));
  ASSERT_TRUE(kept);
  EXPECT_EQ(p.rx.kept_regions(), 1u);
  p.rx.release();
  EXPECT_EQ(p.rx.receive_held_bytes(), frame_bytes(4096) - kFrameHeaderBytes);
  int sent = 1;
  for (; sent < 40; ++sent) {  // bounded: two and a half laps' worth
    if (p.round(static_cast<uint8_t>(sent)).empty()) break;
    p.rx.release();
  }
  EXPECT_LT(sent, 40);  // the sender timed out short of the kept bytes
  EXPECT_GE(static_cast<size_t>(sent) * frame_bytes(4096), p.o.ring_bytes - 2 * frame_bytes(4096));
  const auto* bytes = reinterpret_cast<const uint8_t*>(kept.get());
  EXPECT_TRUE(std::all_of(bytes, bytes + 4096, [](uint8_t b) { return b == 0x3c; }));
  // Kept bytes let go: the next poll returns the space and sends go on around the ring.
  auto still = kept;
  kept.reset();
  EXPECT_TRUE(p.round(0).empty());  // `still` holds it
  still.reset();
  auto n = p.rx.poll(p.c, 4);
  ASSERT_TRUE(n.ok());
  for (int i = 0; i < 40; ++i) {
    ASSERT_FALSE(p.round(static_cast<uint8_t>(i)).empty()) << i;
    p.rx.release();
  }
  kept = p.rx.keep_received(p.round(0x5a));
  ASSERT_TRUE(kept);
  p.rx.release();
  p.tx.close();
  p.rx.close();
  bytes = reinterpret_cast<const uint8_t*>(kept.get());
  EXPECT_TRUE(std::all_of(bytes, bytes + 4096, [](uint8_t b) { return b == 0x5a; }));
  kept.reset();  // the last reference: unmapped now
}

// Keeping is refused once kept regions would hold more than three quarters of the ring back
// from the sender (the receiver then copies), and for bytes that are not in the ring.
TEST(ShmKeep, KeepingStopsAtThreeQuartersOfTheRingAndOutsideIt) {
  ShmPair p;
  std::vector<std::shared_ptr<const uint64_t[]>> kept;
  const int refused = test_util::keep_every_round(p, 12, &kept);
  EXPECT_EQ(kept.size(), (p.o.ring_bytes / 4 * 3) / frame_bytes(4096));
  EXPECT_EQ(refused, 12 - static_cast<int>(kept.size()));
  const std::vector<uint8_t> elsewhere(4096);
  ASSERT_FALSE(p.round(1).empty());
  EXPECT_EQ(p.rx.keep_received(elsewhere), nullptr);
  p.rx.release();
  for (size_t i = 0; i < kept.size(); ++i) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(kept[i].get());
    EXPECT_EQ(bytes[0], i) << i;
  }
}

}  // namespace ring_holds_test
}  // namespace shoal::net

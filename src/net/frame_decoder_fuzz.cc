// libFuzzer target for the frame decoder: decode_frame() over arbitrary bytes, and a
// RingConsumer draining a ring whose published bytes are the fuzz input. Neither may crash,
// read out of bounds or loop forever; every rejection must be Status::Corruption.
//
// This file is part of the net library as an empty translation unit; it becomes a fuzzer only
// when compiled by clang with SHOAL_FUZZ_TARGET defined:  src/net/fuzz/build.sh
#if defined(SHOAL_FUZZ_TARGET)

#include <cstdlib>
#include <cstring>

#include "src/net/ring.h"

namespace {

constexpr size_t kRingBytes = 4096;

void check_decode(const uint8_t* data, size_t size) {
  // Try every 8-aligned start, as a stream reader would after accepting the frames before it.
  for (size_t pos = 0; pos < size; pos += 8) {
    auto f = shoal::net::decode_frame({data + pos, size - pos}, pos, 1u << 20);
    if (!f.ok()) {
      if (f.status().code() != shoal::Code::kCorruption) std::abort();
      continue;
    }
    if (f->frame_bytes > size - pos) std::abort();
    if (f->payload_bytes != 0 && f->payload + f->payload_bytes > data + size) std::abort();
  }
}

void check_ring(const uint8_t* data, size_t size) {
  alignas(64) static uint8_t region[shoal::net::ring_region_bytes(kRingBytes)];
  shoal::net::ring_init(region, kRingBytes);
  shoal::net::RingProducer producer(region);
  const size_t n = std::min(size, kRingBytes) & ~size_t{7};
  std::memcpy(producer.raw_data_for_test().data(), data, n);
  producer.publish_raw_for_test(n);
  shoal::net::RingConsumer consumer(region);
  for (int i = 0; i < 1000; ++i) {  // each successful next() consumes >= 8 bytes
    auto f = consumer.next();
    if (!f.ok()) {
      if (f.status().code() != shoal::Code::kCorruption) std::abort();
      return;
    }
    if (f->frame_bytes == 0 && !consumer.has_data()) return;
    consumer.release();
  }
}

// Near-valid input: well-formed frames (sizes and flags from the input) pushed through the
// ring, then one byte flipped, so the decoder's deeper paths see almost-right bytes.
void check_mutated_frames(const uint8_t* data, size_t size) {
  if (size < 4) return;
  alignas(64) static uint8_t region[shoal::net::ring_region_bytes(kRingBytes)];
  shoal::net::ring_init(region, kRingBytes);
  shoal::net::RingProducer producer(region);
  shoal::net::RingConsumer consumer(region);
  const uint16_t flip_at = static_cast<uint16_t>(data[0] | (data[1] << 8));
  const uint8_t flip_mask = data[2] == 0 ? 1 : data[2];
  static constexpr uint32_t kFlags[4] = {0, shoal::net::kFlagMore, shoal::net::kFlagWrite,
                                         shoal::net::kFlagControl};
  for (size_t i = 3; i + 1 < size; i += 2) {  // bounded by the input
    const uint32_t len = data[i] % 200;
    const uint8_t payload[200] = {};
    if (!producer.try_push(kFlags[data[i + 1] & 3], data[i + 1], data[i + 1] >> 2,
                           {payload, len})) {
      break;
    }
  }
  producer.raw_data_for_test()[flip_at % kRingBytes] ^= flip_mask;
  for (int i = 0; i < 1000; ++i) {
    auto f = consumer.next();
    if (!f.ok()) {
      if (f.status().code() != shoal::Code::kCorruption) std::abort();
      return;
    }
    if (f->frame_bytes == 0 && !consumer.has_data()) return;
    consumer.release();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_decode(data, size);
  check_ring(data, size);
  check_mutated_frames(data, size);
  return 0;
}

#endif  // SHOAL_FUZZ_TARGET

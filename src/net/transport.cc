#include "src/net/transport.h"

#include <time.h>

#include <algorithm>

#include <fmt/format.h>

namespace shoal::net {

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

Result<size_t> gather_message_bytes(GatherList pieces, size_t max_message_bytes) {
  if (pieces.size() > kGatherPiecesMax) {
    return Status::InvalidArgument(
        fmt::format("gathered message of {} pieces above {}", pieces.size(), kGatherPiecesMax));
  }
  size_t total = 0;
  for (const std::span<const uint8_t> p : pieces) total += p.size();
  if (total > max_message_bytes) {
    return Status::InvalidArgument(
        fmt::format("message of {} bytes above max_message_bytes {}", total, max_message_bytes));
  }
  return total;
}

Result<MessageAssembler::Step> MessageAssembler::feed(const Frame& frame) {
  SHOAL_ASSERT(!complete_, "MessageAssembler::feed with an unreleased message");
  const bool more = (frame.flags & kFlagMore) != 0;
  if (!active_ && !more) return Step::kInPlace;
  if (!active_) {
    imm_ = frame.imm;
  } else if (frame.imm != imm_) {
    // One sender writes a message's fragments back to back: another session in between
    // means the stream is not what the sender wrote.
    return Status::Corruption(
        fmt::format("fragment of session {} inside a message of session {}", frame.imm, imm_));
  }
  if (size_ + frame.payload_bytes > max_bytes_) {
    return Status::Corruption(
        fmt::format("fragmented message grows past max_message_bytes {} (at {} + {} bytes)",
                    max_bytes_, size_, frame.payload_bytes));
  }
  if (size_ + frame.payload_bytes > capacity_) {
    // Cold path: first message this large. Grow geometrically, bounded by max_bytes_.
    const size_t want = std::min(max_bytes_, std::max<size_t>(2 * capacity_, size_t{1} << 20));
    const size_t cap = std::max(want, size_ + frame.payload_bytes);
    auto bigger = std::make_unique<uint8_t[]>(cap);
    if (size_ != 0) std::memcpy(bigger.get(), buf_.get(), size_);
    buf_ = std::move(bigger);
    capacity_ = cap;
  }
  if (frame.payload_bytes != 0) std::memcpy(buf_.get() + size_, frame.payload, frame.payload_bytes);
  size_ += frame.payload_bytes;
  copied_bytes_ += frame.payload_bytes;
  active_ = more;
  if (more) return Step::kAbsorbed;
  complete_ = true;
  return Step::kComplete;
}

}  // namespace shoal::net

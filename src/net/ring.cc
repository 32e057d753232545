#include "src/net/ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>

#include <fmt/format.h>

namespace shoal::net {

namespace {

using detail::load_u32;
using detail::load_u64;
using detail::store_u32;

RingControl* control_of(std::span<uint8_t> region) {
  return reinterpret_cast<RingControl*>(region.data());
}

}  // namespace

void encode_frame(uint8_t* dst, uint64_t pos, uint32_t flags, uint32_t imm, uint64_t epoch,
                  std::span<const uint8_t> payload) {
  if (!payload.empty()) std::memcpy(dst + kFrameHeaderBytes, payload.data(), payload.size());
  seal_frame(dst, pos, flags, imm, epoch, static_cast<uint32_t>(payload.size()));
}

Status decode_error(Decode result, std::span<const uint8_t> input, uint64_t pos,
                    uint32_t max_payload_bytes) {
  const uint32_t length_flags = input.size() >= 4 ? load_u32(input.data()) : 0;
  const uint32_t length = length_flags & kLengthMask;
  switch (result) {
    case Decode::kPad:
      return Status::Corruption(
          fmt::format("frame at stream position {}: pad marker (0x{:08x}) where a frame must start",
                      pos, length_flags));
    case Decode::kBadFlags:
      return Status::Corruption(
          fmt::format("frame at stream position {}: invalid flag combination 0x{:08x}", pos,
                      length_flags & kFlagMask));
    case Decode::kTooLong:
      return Status::Corruption(
          fmt::format("frame at stream position {}: length {} exceeds the limit of {} bytes", pos,
                      length, max_payload_bytes));
    case Decode::kBadCanary:
      return Status::Corruption(
          fmt::format("frame at stream position {} (length {}): canary mismatch; corrupted "
                      "header, torn write or stale bytes",
                      pos, length));
    case Decode::kFrame:
    case Decode::kIncomplete:
      break;
  }
  return Status::Ok();
}

Result<Frame> decode_frame(std::span<const uint8_t> input, uint64_t pos,
                           uint32_t max_payload_bytes) {
  Frame frame;
  const Decode d = decode_frame_fast(input, pos, max_payload_bytes, &frame);
  if (d == Decode::kFrame || d == Decode::kIncomplete) return frame;
  return decode_error(d, input, pos, max_payload_bytes);
}

void ring_init(std::span<uint8_t> region, size_t data_bytes) {
  SHOAL_ASSERT(std::has_single_bit(data_bytes) && data_bytes >= kRingMinDataBytes,
               "ring data_bytes %zu must be a power of two >= %zu", data_bytes, kRingMinDataBytes);
  SHOAL_ASSERT(region.size() >= ring_region_bytes(data_bytes), "ring region too small");
  SHOAL_ASSERT(reinterpret_cast<uintptr_t>(region.data()) % 64 == 0, "ring region misaligned");
  auto* ctl = new (region.data()) RingControl{};
  ctl->magic = RingControl::kMagic;
  ctl->version = RingControl::kVersion;
  ctl->data_bytes = data_bytes;
  ctl->fence_epoch.store(0, std::memory_order_relaxed);
  ctl->tail.store(0, std::memory_order_relaxed);
  ctl->head.store(0, std::memory_order_relaxed);
  // The first slot's marker (the Commit rule): nothing committed yet.
  const uint32_t marker = kFrameMarker;
  std::memcpy(region.data() + sizeof(RingControl), &marker, sizeof(marker));
  std::atomic_thread_fence(std::memory_order_release);
}

Status ring_validate(std::span<const uint8_t> region) {
  if (region.size() < sizeof(RingControl)) return Status::Corruption("ring region too small");
  const auto* ctl = reinterpret_cast<const RingControl*>(region.data());
  if (ctl->magic != RingControl::kMagic || ctl->version != RingControl::kVersion) {
    return Status::Corruption("ring region: bad magic or version");
  }
  const uint64_t n = ctl->data_bytes;
  if (!std::has_single_bit(n) || n < kRingMinDataBytes || ring_region_bytes(n) > region.size()) {
    return Status::Corruption(fmt::format("ring region: bad data_bytes {}", n));
  }
  return Status::Ok();
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000ULL),
              static_cast<long>(timeout_ns % 1'000'000'000ULL)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// ---------------------------------------------------------------------------------------------
// Producer

RingProducer::RingProducer(std::span<uint8_t> region)
    : ctl_(control_of(region)),
      data_(region.data() + sizeof(RingControl)),
      data_bytes_(ctl_->data_bytes) {
  tail_ = published_tail_ = ctl_->tail.load(std::memory_order_acquire);
  cached_head_ = ctl_->head.load(std::memory_order_acquire);
  max_payload_bytes_ = static_cast<uint32_t>(
      std::min<uint64_t>(data_bytes_ / 4 - kFrameHeaderBytes - kFrameCanaryBytes, kLengthMask));
}

void RingProducer::wake_consumer(uint32_t how) {
  if (how == RingConsumer::kSleepDoorbell && doorbell_fd_ >= 0) {
    const uint64_t one = 1;
    // EAGAIN (counter saturated) still leaves the fd readable: nothing to handle.
    [[maybe_unused]] const ssize_t n = ::write(doorbell_fd_, &one, sizeof(one));
    return;
  }
  ctl_->wake_seq.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&ctl_->wake_seq);
}

uint8_t* RingProducer::ask_for_credit() {
  flush();  // the consumer can only return credit for bytes it can see
  // Asks the consumer to write head back eagerly instead of once per quarter ring.
  if (!asked_for_credit_) {
    asked_for_credit_ = true;
    ctl_->producer_waiting.store(1, std::memory_order_seq_cst);
  }
  return nullptr;
}

uint8_t* RingProducer::try_reserve_slow(uint32_t payload_bytes) {
  SHOAL_ASSERT(payload_bytes <= max_payload_bytes_, "payload %u above ring limit %u", payload_bytes,
               max_payload_bytes_);
  const uint64_t need = frame_bytes(payload_bytes);
  const uint64_t left = data_bytes_ - (tail_ & (data_bytes_ - 1));
  if (need > left) {
    // Pad to the end first and publish it, so the consumer can release the pad even when the
    // ring is otherwise empty (else a large frame could wait forever for credit). The pad is
    // committed like a frame: the next lap's first slot gets its marker first.
    if (credit() < left + kFrameMarkerBytes) {
      cached_head_ = ctl_->head.load(std::memory_order_acquire);
      if (credit() < left + kFrameMarkerBytes) return ask_for_credit();
    }
    put_first_word(tail_ + left, kFrameMarker, std::memory_order_relaxed);
    put_first_word(tail_, kFlagPad, std::memory_order_release);
    tail_ += left;
    publish();
  }
  if (credit() < need + kFrameMarkerBytes) {
    cached_head_ = ctl_->head.load(std::memory_order_acquire);
    if (credit() < need + kFrameMarkerBytes) return ask_for_credit();
  }
  if (asked_for_credit_) [[unlikely]] {
    asked_for_credit_ = false;
    ctl_->producer_waiting.store(0, std::memory_order_relaxed);
  }
  reserved_bytes_ = payload_bytes;
  return data_ + (tail_ & (data_bytes_ - 1)) + kFrameHeaderBytes;
}

bool RingProducer::try_push(uint32_t flags, uint32_t imm, uint64_t epoch,
                            std::span<const uint8_t> payload, bool publish_now) {
  const auto n = static_cast<uint32_t>(payload.size());
  uint8_t* dst = try_reserve(n);
  if (dst == nullptr) return false;
  if (n != 0) std::memcpy(dst, payload.data(), n);
  commit(flags, imm, epoch, n, publish_now);
  return true;
}

void RingProducer::wait_for_credit(uint64_t timeout_ns) {
  // 2 = asleep: the consumer must wake us (1 only asks it to write head back eagerly).
  asked_for_credit_ = true;
  ctl_->producer_waiting.store(2, std::memory_order_seq_cst);
  const uint32_t seq = ctl_->credit_seq.load(std::memory_order_seq_cst);
  const uint64_t head = ctl_->head.load(std::memory_order_seq_cst);
  if (head == cached_head_) futex_wait(&ctl_->credit_seq, seq, timeout_ns);
  ctl_->producer_waiting.store(1, std::memory_order_relaxed);
}

void RingProducer::publish_raw_for_test(uint64_t bytes) {
  tail_ += bytes;
  publish();
}

void RingProducer::inject_raw_for_test(std::span<const uint8_t> bytes) {
  const uint64_t offset = tail_ & (data_bytes_ - 1);
  const size_t n = round_up8(bytes.size());
  SHOAL_ASSERT(offset + n <= data_bytes_ && n + kFrameMarkerBytes <= credit(), "%s",
               "inject: no room before the wrap");
  uint8_t* dst = data_ + offset;
  if (bytes.size() > 4) std::memcpy(dst + 4, bytes.data() + 4, bytes.size() - 4);
  put_first_word(tail_ + n, kFrameMarker, std::memory_order_relaxed);
  uint32_t first = kFrameMarker;  // fewer than 4 bytes: only the tail says they are there
  if (bytes.size() >= 4) std::memcpy(&first, bytes.data(), 4);
  put_first_word(tail_, first, std::memory_order_release);
  publish_raw_for_test(n);
}

// ---------------------------------------------------------------------------------------------
// Consumer

RingConsumer::RingConsumer(std::span<uint8_t> region)
    : ctl_(control_of(region)),
      data_(region.data() + sizeof(RingControl)),
      data_bytes_(ctl_->data_bytes) {
  cursor_ = released_ = published_head_ = ctl_->head.load(std::memory_order_acquire);
  cached_tail_ = cursor_;
  max_payload_bytes_ = static_cast<uint32_t>(
      std::min<uint64_t>(data_bytes_ / 4 - kFrameHeaderBytes - kFrameCanaryBytes, kLengthMask));
}

bool RingConsumer::next_into_slow(Frame* out, Status* error) {
  // Bounded: each iteration consumes a pad or a fenced frame; give the caller control back
  // after a burst of them rather than looping over a ring's worth here.
  for (int skips = 0; skips < 64; ++skips) {
    const uint64_t offset = cursor_ & (data_bytes_ - 1);
    const uint64_t left = data_bytes_ - offset;
    const uint32_t first = first_word(cursor_);
    if (first == kFlagPad) {  // committed: the next lap's first slot has its marker
      cursor_ += left;
      continue;
    }
    if (first != kFrameMarker) {  // committed, so whole (the Commit rule)
      const Decode d = decode_frame_fast({data_ + offset, left}, cursor_, max_payload_bytes_, out);
      if (d == Decode::kFrame) {
        cursor_ += out->frame_bytes;
        if ((out->flags & kFlagWrite) && out->epoch < fence_epoch()) [[unlikely]] {
          ++fenced_drops_;  // a write that raced our fence: refused, its bytes released later
          continue;
        }
        took_frames_ = true;
        return true;
      }
    }
    // Nothing committed here, or bytes that do not decode: judge them by the published tail,
    // so that errors are reported only against published bytes (a test hook injects raw
    // bytes, and a producer may be half-way through them).
    cached_tail_ = ctl_->tail.load(std::memory_order_acquire);
    if (!ahead_of_cursor(cached_tail_)) {
      if (cursor_ - cached_tail_ > data_bytes_) [[unlikely]] {
        *error = Status::Corruption(fmt::format(
            "ring: producer tail {} is far behind the cursor {}", cached_tail_, cursor_));
      } else {
        service_credit();
      }
      return false;
    }
    // The tail covers the cursor and was stored after everything below it was committed: a
    // frame committed since we looked is there now (then take it the committed way).
    if (first_word(cursor_) != first) continue;
    if ((cached_tail_ & 7) != 0 || cached_tail_ - released_ > data_bytes_) [[unlikely]] {
      *error =
          Status::Corruption(fmt::format("ring: producer tail {} is misaligned or outside [{}, {}]",
                                         cached_tail_, cursor_, released_ + data_bytes_));
      return false;
    }
    const uint64_t avail = std::min(cached_tail_ - cursor_, left);
    const std::span<const uint8_t> input(data_ + offset, avail);
    const Decode d = decode_frame_fast(input, cursor_, max_payload_bytes_, out);
    if (d == Decode::kFrame) [[unlikely]] {  // cannot decode with less input than above
      *error = Status::Corruption(
          fmt::format("ring: frame at position {} below the tail was not committed", cursor_));
      return false;
    }
    *error = d == Decode::kIncomplete
                 ? Status::Corruption(fmt::format(
                       "ring: truncated frame at position {}: {} bytes published before the "
                       "tail or the wrap",
                       cursor_, avail))
                 : decode_error(d, input, cursor_, max_payload_bytes_);
    return false;
  }
  return false;
}

Result<Frame> RingConsumer::next() {
  took_frames_ = false;
  Frame frame;
  Status error;
  if (next_into(&frame, &error)) return frame;
  if (!error.ok()) return error;
  return Frame{};
}

void RingConsumer::release_to(uint64_t pos) {
  SHOAL_DCHECK(pos >= released_ && pos <= cursor_);
  released_ = pos;
  if (released_ - published_head_ >= data_bytes_ / 4 ||
      ctl_->producer_waiting.load(std::memory_order_relaxed) != 0) {
    flush_credit();
  }
}

void RingConsumer::flush_credit() {
  if (released_ == published_head_) return;
  published_head_ = released_;
  ctl_->head.exchange(released_, std::memory_order_seq_cst);  // full barrier, see publish()
  if (ctl_->producer_waiting.load(std::memory_order_seq_cst) == 2) {
    ctl_->credit_seq.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&ctl_->credit_seq);
  }
}

void RingConsumer::set_fence_epoch(uint64_t epoch) {
  SHOAL_ASSERT(epoch >= fence_epoch(), "fence epoch moves backwards");
  ctl_->fence_epoch.store(epoch, std::memory_order_release);
}

void RingConsumer::wait_for_data(uint64_t timeout_ns) {
  if (has_data()) return;
  flush_credit();  // the producer may be waiting for exactly these bytes
  ctl_->consumer_sleeping.store(kSleepFutex, std::memory_order_seq_cst);
  const uint32_t seq = ctl_->wake_seq.load(std::memory_order_seq_cst);
  // Dekker with publish() on (tail, consumer_sleeping): a frame committed but not yet
  // published is published later, and that publish sees the flag.
  if (!ahead_of_cursor(ctl_->tail.load(std::memory_order_seq_cst)) &&
      first_word(cursor_) == kFrameMarker) {
    futex_wait(&ctl_->wake_seq, seq, timeout_ns);
  }
  ctl_->consumer_sleeping.store(kSleepAwake, std::memory_order_relaxed);
}

bool RingConsumer::begin_doorbell_wait() {
  if (has_data()) return false;
  flush_credit();
  ctl_->consumer_sleeping.store(kSleepDoorbell, std::memory_order_seq_cst);
  if (ahead_of_cursor(ctl_->tail.load(std::memory_order_seq_cst)) ||
      first_word(cursor_) != kFrameMarker) {
    ctl_->consumer_sleeping.store(kSleepAwake, std::memory_order_relaxed);
    return false;
  }
  return true;
}

}  // namespace shoal::net

// The one ring layout every Shoal transport uses, its frame codec, and a single-producer
// single-consumer ring over any memory region (heap, memfd shared between processes, or, later,
// an RDMA-registered region).
//
// FRAME (a record; also the unit on a TCP stream). Little-endian, 8-byte aligned:
//
//   offset  size  field
//   0       4     length_flags  [31] kFlagPad  [30] kFlagMore  [29] kFlagWrite  [28] kFlagControl
//                               [27..0] payload length in bytes (< 256 MiB, further capped by
//                               the receiver's max_payload_bytes)
//   4       4     imm           one-sided write: the immediate; message: the session tag
//   8       8     epoch         the writer's epoch (fenced on one-sided writes)
//   16      L     payload       L = payload length
//   16+L    P     padding       zeros up to the next multiple of 8 (P < 8)
//   16+L+P  8     canary        frame_canary(stream position, length_flags, imm, epoch)
//
//   frame_bytes(L) = 16 + round_up(L, 8) + 8; a 64 B message takes 88 bytes.
//
// The canary binds a frame to its position, header and epoch: a corrupted length makes the
// decoder look for the canary at the wrong place, a frame left over from an earlier lap of the
// ring or a torn write does not match, and both are rejected as Corruption instead of being
// delivered. It is not a checksum of the payload (that belongs to the log format, which keeps
// its own CRC): the transport guards framing, the log guards contents.
//
// RING. A region = one RingControl block (256 bytes) followed by data_bytes of records
// (a power of two, at least 4 KiB). Positions are 64-bit byte counts that never wrap; the byte
// offset of position p is p & (data_bytes - 1).
//   - Wrap-around: a frame never straddles the end of the data area. When the next frame does
//     not fit in the bytes left before the end, the producer writes a pad marker (the 32-bit
//     word kFlagPad, nothing else) at the current offset; the pad covers every byte up to the
//     end and the consumer skips to offset 0. Since offsets are 8-aligned, at least 8 bytes are
//     always left, so the marker always fits.
//   - Credit: the producer may write bytes [tail, head + data_bytes); `head` is the consumer's
//     published position. The producer caches head and re-reads it only when its cached credit
//     is short, so a full ring makes try_reserve() fail (backpressure), never overwrite.
//   - Head write-back is lazy: the consumer publishes head when it has released a quarter of
//     the ring since the last write-back, when the producer has raised producer_waiting (it
//     found the ring full; checked on release(), on an empty next() and by service_credit()
//     in spin loops), or on flush_credit() (before it blocks). One remote store per quarter
//     ring instead of one per record.
//   - Publication: the producer writes header, payload and canary, then stores tail with
//     release; the consumer loads tail with acquire, so everything below tail is complete.
//     A producer may seal several frames and publish them with one tail store (batching).
//   - Epoch fence: fence_epoch is written by the consumer's owner only. Frames carrying
//     kFlagWrite with epoch < fence_epoch are dropped by the consumer (counted in
//     fenced_drops()); a producer checks the fence before writing so a stale writer learns at
//     once (Status::Aborted).
//   - Sleeping: a consumer that found nothing for a while sets consumer_sleeping, re-checks
//     tail, and futex-waits on wake_seq; a producer that published a frame wakes it only when
//     the flag is set (one load on the fast path). The producer waits for credit the same way
//     on credit_seq / producer_waiting. A consumer that blocks in an event loop instead (on
//     many sources at once) sets consumer_sleeping = kSleepDoorbell: the producer then writes
//     the consumer's doorbell eventfd (set_doorbell_fd) instead of waking the futex.
//
// OWNERSHIP of bytes: [head, tail) belongs to the consumer (it reads frames in place; a
// payload pointer stays valid until it releases past that frame); [tail, head + data_bytes)
// belongs to the producer (try_reserve() hands the payload bytes of the reserved frame to the
// caller, who fills them in place until commit()). Nothing is copied by the ring itself.
//
// THREADS: one producer thread and one consumer thread (possibly in different processes);
// RingProducer and RingConsumer are each owned by their thread. RingControl atomics are
// lock-free and therefore address-free, so they work across processes in shared memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "shoal/status.h"
#include "src/base/assert.h"

namespace shoal::net {

inline constexpr uint32_t kFlagPad = 1u << 31;
inline constexpr uint32_t kFlagMore = 1u << 30;     // more fragments of this message follow
inline constexpr uint32_t kFlagWrite = 1u << 29;    // one-sided write-with-immediate
inline constexpr uint32_t kFlagControl = 1u << 28;  // transport control (imm = control type)
inline constexpr uint32_t kFlagMask = kFlagPad | kFlagMore | kFlagWrite | kFlagControl;
inline constexpr uint32_t kLengthMask = ~kFlagMask;
inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr size_t kFrameCanaryBytes = 8;
inline constexpr size_t kFrameAlignBytes = 8;

constexpr size_t round_up8(size_t n) {
  return (n + 7) & ~size_t{7};
}
constexpr size_t frame_bytes(size_t payload_bytes) {
  return kFrameHeaderBytes + round_up8(payload_bytes) + kFrameCanaryBytes;
}

// The trailing word of a frame at stream position `pos`.
inline uint64_t frame_canary(uint64_t pos, uint32_t length_flags, uint32_t imm, uint64_t epoch) {
  uint64_t x = pos * 0x9e3779b97f4a7c15ULL;
  x ^= ((uint64_t{length_flags} << 32) | imm) * 0xc2b2ae3d27d4eb4fULL;
  x ^= epoch + 0x5ca1ab1e0ddba11ULL;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ULL;
  return x ^ (x >> 32);
}

// A decoded frame. payload points into the decoder's input and is only as long-lived as it.
struct Frame {
  uint32_t flags = 0;  // length_flags & kFlagMask
  uint32_t imm = 0;
  uint64_t epoch = 0;
  const uint8_t* payload = nullptr;
  uint32_t payload_bytes = 0;
  uint32_t frame_bytes = 0;  // 0: the input holds only part of a frame (need more bytes)
};

// Writes a complete frame (header, payload copy, padding, canary) at `dst`.
// REQUIRES: dst has frame_bytes(payload.size()) bytes and is 8-byte aligned;
// payload.size() <= kLengthMask; flags has no bits outside kFlagMore|kFlagWrite|kFlagControl.
void encode_frame(uint8_t* dst, uint64_t pos, uint32_t flags, uint32_t imm, uint64_t epoch,
                  std::span<const uint8_t> payload);
// Writes header, padding and canary around a payload already placed at dst + 16.
void seal_frame(uint8_t* dst, uint64_t pos, uint32_t flags, uint32_t imm, uint64_t epoch,
                uint32_t payload_bytes);

// Outcome of decode_frame_fast(); everything after kIncomplete is corruption.
enum class Decode : uint8_t { kFrame, kIncomplete, kPad, kBadFlags, kTooLong, kBadCanary };
// The data-path decoder: no Status, no allocation. Fills *out only for kFrame.
[[nodiscard]] Decode decode_frame_fast(std::span<const uint8_t> input, uint64_t pos,
                                       uint32_t max_payload_bytes, Frame* out);
// The Corruption status (with position and cause) for a decode_frame_fast() failure. Cold.
[[nodiscard]] Status decode_error(Decode result, std::span<const uint8_t> input, uint64_t pos,
                                  uint32_t max_payload_bytes);

// Decodes the frame at the start of `input`, which sits at stream position `pos`.
// Returns a Frame with frame_bytes == 0 when `input` is a valid but incomplete prefix, and
// Status::Corruption (saying what is wrong and where) for a pad marker, unknown flag bits, a
// length above max_payload_bytes, or a canary mismatch. Never reads outside `input`.
[[nodiscard]] Result<Frame> decode_frame(std::span<const uint8_t> input, uint64_t pos,
                                         uint32_t max_payload_bytes);

// Shared control block at the start of a ring region; see the layout comment above.
struct alignas(64) RingControl {
  static constexpr uint64_t kMagic = 0x53686f616c52696eULL;  // "ShoalRin"
  static constexpr uint32_t kVersion = 1;
  // Line 0: set once at init (fence_epoch: by the consumer's owner only).
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t data_bytes;
  std::atomic<uint64_t> fence_epoch;
  // Line 1: written by the producer.
  alignas(64) std::atomic<uint64_t> tail;
  std::atomic<uint32_t> producer_waiting;
  std::atomic<uint32_t> credit_seq;  // futex word; bumped by the consumer
  // Line 2: written by the consumer.
  alignas(64) std::atomic<uint64_t> head;
  std::atomic<uint32_t> consumer_sleeping;
  std::atomic<uint32_t> wake_seq;  // futex word; bumped by the producer
  alignas(64) uint8_t line3[64];
};
static_assert(sizeof(RingControl) == 256);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

inline constexpr size_t kRingMinDataBytes = 4096;
// Bytes a region needs for a ring with data_bytes of records.
constexpr size_t ring_region_bytes(size_t data_bytes) {
  return sizeof(RingControl) + data_bytes;
}

// Formats a fresh, empty ring in `region`.
// REQUIRES: region is 64-byte aligned and ring_region_bytes(data_bytes) long; data_bytes is a
// power of two >= kRingMinDataBytes; no producer or consumer is attached yet.
void ring_init(std::span<uint8_t> region, size_t data_bytes);
// Checks that `region` holds a ring a peer formatted (magic, version, size). Corruption if not.
[[nodiscard]] Status ring_validate(std::span<const uint8_t> region);

// futex on a 32-bit word that may live in shared memory (not FUTEX_PRIVATE).
// Returns when woken, when *word != expected, on a signal, or after timeout_ns.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns);
void futex_wake_all(std::atomic<uint32_t>* word);

class RingProducer {
 public:
  RingProducer() = default;
  // REQUIRES: region passed ring_validate (or ring_init).
  explicit RingProducer(std::span<uint8_t> region);

  // Largest payload one frame may carry: a quarter of the ring, so a maximal frame plus the
  // worst wrap pad always fits and several frames are in flight.
  uint32_t max_payload_bytes() const { return max_payload_bytes_; }
  uint64_t fence_epoch() const { return ctl_->fence_epoch.load(std::memory_order_acquire); }

  // Reserves a frame for payload_bytes and returns where to write the payload, or nullptr when
  // the consumer has not yet returned enough credit (the ring is full; nothing was written
  // except, possibly, a published wrap pad). REQUIRES: payload_bytes <= max_payload_bytes();
  // no reservation outstanding.
  uint8_t* try_reserve(uint32_t payload_bytes);
  // Seals the reserved frame. With publish_now (the default) it is published at once (tail
  // store, wake-up check); otherwise it waits for flush(), which lets a sender batch many
  // frames behind one tail store and one fence (the doorbell batching of RDMA NICs).
  // Unpublished bytes are published anyway once they reach an eighth of the ring, and before
  // try_reserve() reports a full ring. REQUIRES: a reservation of at least payload_bytes (a
  // frame may end up shorter than reserved).
  void commit(uint32_t flags, uint32_t imm, uint64_t epoch, uint32_t payload_bytes,
              bool publish_now = true);
  // Abandons the outstanding reservation (nothing becomes visible).
  void cancel() { reserved_bytes_ = UINT32_MAX; }
  // try_reserve + copy + commit. False when the ring is full.
  bool try_push(uint32_t flags, uint32_t imm, uint64_t epoch, std::span<const uint8_t> payload,
                bool publish_now = true);
  // Publishes every committed frame.
  void flush() {
    if (tail_ != published_tail_) publish();
  }

  // The consumer's eventfd, written when it sleeps in doorbell mode (-1: none). Not owned.
  void set_doorbell_fd(int fd) { doorbell_fd_ = fd; }

  // Sleeps until the consumer may have returned credit (or timeout_ns). Call after a failed
  // try_reserve and a spin; raises producer_waiting so the consumer writes head back at once.
  void wait_for_credit(uint64_t timeout_ns);

  uint64_t tail() const { return tail_; }
  // Test hook: the raw data area and the position of the next frame.
  std::span<uint8_t> raw_data_for_test() { return {data_, data_bytes_}; }
  // Test hook: publishes tail = tail() + bytes without sealing anything (for malformed frames).
  void publish_raw_for_test(uint64_t bytes);

 private:
  uint64_t credit() const { return cached_head_ + data_bytes_ - tail_; }
  void publish();
  void wake_consumer(uint32_t how);
  uint8_t* ask_for_credit();

  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t data_bytes_ = 0;
  uint64_t tail_ = 0;
  uint64_t published_tail_ = 0;
  uint64_t cached_head_ = 0;
  uint32_t max_payload_bytes_ = 0;
  uint32_t reserved_bytes_ = UINT32_MAX;  // UINT32_MAX: no reservation
  bool asked_for_credit_ = false;         // we raised producer_waiting
  int doorbell_fd_ = -1;
};

class RingConsumer {
 public:
  RingConsumer() = default;
  // REQUIRES: region passed ring_validate (or ring_init).
  explicit RingConsumer(std::span<uint8_t> region);

  uint32_t max_payload_bytes() const { return max_payload_bytes_; }
  // True when a frame (or pad) is published beyond the read cursor. One acquire load.
  bool has_data() const { return ctl_->tail.load(std::memory_order_acquire) != cursor_; }

  // Decodes the next frame at the read cursor and moves the cursor past it; the frame's bytes
  // stay owned by the caller until release(). Returns a Frame with frame_bytes == 0 when the
  // ring is empty. Skips pads and fenced one-sided writes. Corruption when the published bytes
  // do not hold a valid frame; the ring is then unusable (the caller closes the endpoint).
  [[nodiscard]] Result<Frame> next();
  // The same without Result on the data path: true and *out for a frame; false when the ring
  // is empty, or false with *error set on corruption.
  [[nodiscard]] bool next_into(Frame* out, Status* error);
  // Returns every byte before the read cursor to the producer (lazily, see header comment).
  void release();
  // Publishes head now (before blocking, or when the caller wants credit returned at once).
  void flush_credit();
  // Publishes head if the producer has asked for credit (one load of the line that holds
  // tail, which a spinning consumer has in cache anyway). For spin loops.
  void service_credit() {
    if (released_ != published_head_ && ctl_->producer_waiting.load(std::memory_order_relaxed) != 0)
        [[unlikely]] {
      flush_credit();
    }
  }

  // Raises the epoch fence: one-sided writes with a lower epoch are refused from now on.
  // REQUIRES: epoch >= the current fence (fences only move forward).
  void set_fence_epoch(uint64_t epoch);
  uint64_t fence_epoch() const { return ctl_->fence_epoch.load(std::memory_order_relaxed); }
  uint64_t fenced_drops() const { return fenced_drops_; }

  // Sleeps until a producer publishes (or timeout_ns); returns at once if data is pending.
  void wait_for_data(uint64_t timeout_ns);
  // Doorbell mode, for a caller that blocks elsewhere (epoll/poll on the doorbell eventfd):
  // returns false when data is already pending (do not block); else the producer will ring
  // the doorbell on its next publish. REQUIRES: end_doorbell_wait() after the wait.
  [[nodiscard]] bool begin_doorbell_wait();
  void end_doorbell_wait() {
    ctl_->consumer_sleeping.store(kSleepAwake, std::memory_order_relaxed);
  }

  static constexpr uint32_t kSleepAwake = 0;
  static constexpr uint32_t kSleepFutex = 1;
  static constexpr uint32_t kSleepDoorbell = 2;

 private:
  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t data_bytes_ = 0;
  uint64_t cursor_ = 0;          // next frame to decode
  uint64_t released_ = 0;        // everything below is returned to the producer (locally)
  uint64_t published_head_ = 0;  // last head value stored to the control block
  uint64_t cached_tail_ = 0;
  uint64_t fenced_drops_ = 0;
  uint32_t max_payload_bytes_ = 0;
};

}  // namespace shoal::net

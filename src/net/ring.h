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
//   - Commit: the producer writes a frame's payload, padding, canary and the rest of its
//     header, then kFrameMarker into the first word of the NEXT frame's slot, and the frame's
//     own first word (length_flags, or kFlagPad) last, with release. The first word of the
//     slot at the producer's tail is therefore always kFrameMarker until a frame (or pad) is
//     committed there, and a consumer that loads a first word other than kFrameMarker with
//     acquire sees that whole frame, before any tail store (ring_init() puts the first
//     marker at offset 0; every reservation and pad keeps room for the next slot's marker).
//   - Publication: the producer then stores tail with release (seq_cst: see Sleeping); a
//     producer may commit several frames and publish them with one tail store (batching).
//     Tail is what sleeping and waking, has_data() and error reporting go by: bytes below
//     tail must be frames, and what is wrong with them is reported against it (a frame cut
//     off by tail is "truncated", a marker below tail is corruption).
//   - Consumption: the consumer polls the first word at its cursor, so a frame is taken
//     one cache-line transfer after it is committed, without waiting for the tail's line
//     (the tail line's transfer was a whole extra hop of every ping-pong). A committed frame
//     that decodes cleanly (canary included) is taken at once; anything else (a pad, a
//     fenced write, bytes that do not decode) goes by the tail as described above, so a
//     consumer may run ahead of the published tail but never reports an error the tail does
//     not show.
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

#include <algorithm>
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
// The first word of a ring slot no frame has been committed to yet (see the ring's Commit
// rule). All four flag bits: not a valid length_flags, not a pad marker.
inline constexpr uint32_t kFrameMarker = 0xffffffffu;
// Room a ring reservation keeps after its frame for the next slot's marker (8: alignment).
inline constexpr size_t kFrameMarkerBytes = 8;
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

namespace detail {
inline void store_u32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}
inline void store_u64(uint8_t* p, uint64_t v) {
  std::memcpy(p, &v, 8);
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
}  // namespace detail

// Writes a complete frame (header, payload copy, padding, canary) at `dst`.
// REQUIRES: dst has frame_bytes(payload.size()) bytes and is 8-byte aligned;
// payload.size() <= kLengthMask; flags has no bits outside kFlagMore|kFlagWrite|kFlagControl.
void encode_frame(uint8_t* dst, uint64_t pos, uint32_t flags, uint32_t imm, uint64_t epoch,
                  std::span<const uint8_t> payload);
// Writes everything of a frame around a payload already placed at dst + 16 except its first
// word (length_flags): the rest of the header, padding and canary. A ring commits the first
// word last (RingProducer::commit); a stream writes it with seal_frame().
inline void seal_frame_rest(uint8_t* dst, uint64_t pos, uint32_t flags, uint32_t imm,
                            uint64_t epoch, uint32_t payload_bytes) {
  SHOAL_DCHECK((flags & ~(kFlagMore | kFlagWrite | kFlagControl)) == 0);
  SHOAL_DCHECK(payload_bytes <= kLengthMask);
  const uint32_t length_flags = flags | payload_bytes;
  detail::store_u32(dst + 4, imm);
  detail::store_u64(dst + 8, epoch);
  // Zero the alignment padding so no stale bytes from an earlier lap leak to the peer.
  const size_t padded = round_up8(payload_bytes);
  for (size_t i = kFrameHeaderBytes + payload_bytes; i < kFrameHeaderBytes + padded; ++i)
    dst[i] = 0;
  detail::store_u64(dst + kFrameHeaderBytes + padded, frame_canary(pos, length_flags, imm, epoch));
}
// Writes header, padding and canary around a payload already placed at dst + 16. Inline: it is
// on every send.
inline void seal_frame(uint8_t* dst, uint64_t pos, uint32_t flags, uint32_t imm, uint64_t epoch,
                       uint32_t payload_bytes) {
  detail::store_u32(dst, flags | payload_bytes);
  seal_frame_rest(dst, pos, flags, imm, epoch, payload_bytes);
}

// Outcome of decode_frame_fast(); everything after kIncomplete is corruption.
enum class Decode : uint8_t { kFrame, kIncomplete, kPad, kBadFlags, kTooLong, kBadCanary };
// The data-path decoder: no Status, no allocation. Fills *out only for kFrame. Inline: it is on
// every receive.
[[nodiscard]] inline Decode decode_frame_fast(std::span<const uint8_t> input, uint64_t pos,
                                              uint32_t max_payload_bytes, Frame* out) {
  if (input.size() < kFrameHeaderBytes) return Decode::kIncomplete;
  const uint8_t* p = input.data();
  const uint32_t length_flags = detail::load_u32(p);
  if (length_flags & kFlagPad) [[unlikely]]
    return Decode::kPad;
  const uint32_t flags = length_flags & kFlagMask;
  // One-sided writes land whole in the peer's ring; they are never fragments or control.
  if ((flags & kFlagWrite) && (flags & (kFlagMore | kFlagControl))) [[unlikely]] {
    return Decode::kBadFlags;
  }
  const uint32_t length = length_flags & kLengthMask;
  if (length > max_payload_bytes) [[unlikely]]
    return Decode::kTooLong;
  const size_t total = frame_bytes(length);
  if (input.size() < total) return Decode::kIncomplete;
  const uint32_t imm = detail::load_u32(p + 4);
  const uint64_t epoch = detail::load_u64(p + 8);
  const uint64_t canary = detail::load_u64(p + kFrameHeaderBytes + round_up8(length));
  if (canary != frame_canary(pos, length_flags, imm, epoch)) [[unlikely]] {
    return Decode::kBadCanary;
  }
  *out = Frame{flags, imm, epoch, p + kFrameHeaderBytes, length, static_cast<uint32_t>(total)};
  return Decode::kFrame;
}
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
  static constexpr uint32_t kVersion = 2;  // 2: the credit handshake moved to line 3
  // Line 0: set once at init (fence_epoch: by the consumer's owner only).
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t data_bytes;
  std::atomic<uint64_t> fence_epoch;
  // Line 1: written by the producer on every publish.
  alignas(64) std::atomic<uint64_t> tail;
  // Line 2: written by the consumer (head once per quarter ring, the rest around sleeps).
  alignas(64) std::atomic<uint64_t> head;
  std::atomic<uint32_t> consumer_sleeping;
  std::atomic<uint32_t> wake_seq;  // futex word; bumped by the producer
  // Line 3: the credit handshake, written only when the producer runs out of credit. Not on
  // the tail's line: the consumer reads producer_waiting on every release(), and the tail's
  // line has usually just been written by the producer, so each read was a cache miss.
  alignas(64) std::atomic<uint32_t> producer_waiting;
  std::atomic<uint32_t> credit_seq;  // futex word; bumped by the consumer
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
  uint8_t* try_reserve(uint32_t payload_bytes) {
    SHOAL_DCHECK(reserved_bytes_ == UINT32_MAX);
    const uint64_t need = frame_bytes(payload_bytes);
    const uint64_t offset = tail_ & (data_bytes_ - 1);
    // Fast path: fits before the wrap, cached credit suffices, no credit request to withdraw.
    if (payload_bytes <= max_payload_bytes_ && need <= data_bytes_ - offset &&
        need + kFrameMarkerBytes <= credit() && !asked_for_credit_) [[likely]] {
      reserved_bytes_ = payload_bytes;
      return data_ + offset + kFrameHeaderBytes;
    }
    return try_reserve_slow(payload_bytes);
  }
  // Seals the reserved frame. With publish_now (the default) it is published at once (tail
  // store, wake-up check); otherwise it waits for flush(), which lets a sender batch many
  // frames behind one tail store and one fence (the doorbell batching of RDMA NICs).
  // Unpublished bytes are published anyway once they reach an eighth of the ring, and before
  // try_reserve() reports a full ring. REQUIRES: a reservation of at least payload_bytes (a
  // frame may end up shorter than reserved).
  void commit(uint32_t flags, uint32_t imm, uint64_t epoch, uint32_t payload_bytes,
              bool publish_now = true) {
    SHOAL_ASSERT(reserved_bytes_ != UINT32_MAX && payload_bytes <= reserved_bytes_,
                 "commit of %u bytes, reserved %u", payload_bytes, reserved_bytes_);
    reserved_bytes_ = UINT32_MAX;
    uint8_t* dst = data_ + (tail_ & (data_bytes_ - 1));
    const uint32_t length_flags = flags | payload_bytes;
    // All but the first word, then the next slot's marker, then the first word: see the
    // Commit rule.
    seal_frame_rest(dst, tail_, flags, imm, epoch, payload_bytes);
    tail_ += frame_bytes(payload_bytes);
    put_first_word(tail_, kFrameMarker, std::memory_order_relaxed);
    put_first_word(tail_ - frame_bytes(payload_bytes), length_flags, std::memory_order_release);
    if (publish_now || tail_ - published_tail_ >= data_bytes_ / 8) publish();
  }
  // Abandons the outstanding reservation (nothing becomes visible).
  void cancel() { reserved_bytes_ = UINT32_MAX; }
  // try_reserve + copy + commit. False when the ring is full.
  bool try_push(uint32_t flags, uint32_t imm, uint64_t epoch, std::span<const uint8_t> payload,
                bool publish_now = true);
  // Publishes every committed frame.
  void flush() {
    if (tail_ != published_tail_) publish();
  }
  bool flushed() const { return tail_ == published_tail_; }

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
  // Test hook: commits raw bytes at tail() as the Commit rule does (first word last, a marker
  // after them) and publishes them. REQUIRES: they fit before the wrap, with credit.
  void inject_raw_for_test(std::span<const uint8_t> bytes);

 private:
  uint64_t credit() const { return cached_head_ + data_bytes_ - tail_; }
  uint8_t* try_reserve_slow(uint32_t payload_bytes);
  // Stores the first word of the slot at stream position pos (an atomic word: consumers poll
  // it while we write).
  void put_first_word(uint64_t pos, uint32_t word, std::memory_order order) {
    std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(data_ + (pos & (data_bytes_ - 1))))
        .store(word, order);
  }
  void publish() {
    published_tail_ = tail_;
    // Dekker with wait_for_data(): either the consumer sees the new tail after raising its
    // flag, or we see the flag here. exchange() is one locked instruction (a full barrier); g++
    // would emit the slower mov+mfence for a seq_cst store or fence. A lost wake-up would cost
    // a sleep. (A release store instead measured no faster across processes: the peer sees
    // the tail no sooner, only this core continues earlier.)
    ctl_->tail.exchange(tail_, std::memory_order_seq_cst);
    const uint32_t sleeping = ctl_->consumer_sleeping.load(std::memory_order_seq_cst);
    if (sleeping != 0) [[unlikely]]
      wake_consumer(sleeping);
  }
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
  // True when a frame (or pad) is committed at the read cursor or published beyond it.
  bool has_data() const {
    return first_word(cursor_) != kFrameMarker ||
           ahead_of_cursor(ctl_->tail.load(std::memory_order_acquire));
  }

  // Decodes the next frame at the read cursor and moves the cursor past it; the frame's bytes
  // stay owned by the caller until release(). Returns a Frame with frame_bytes == 0 when the
  // ring is empty. Skips pads and fenced one-sided writes. Corruption when the published bytes
  // do not hold a valid frame; the ring is then unusable (the caller closes the endpoint).
  // Always checks an empty ring against the tail (next_into() may leave that to its next
  // call).
  [[nodiscard]] Result<Frame> next();
  // The same without Result on the data path: true and *out for a frame; false when the ring
  // is empty, or false with *error set on corruption. The common cases (empty; a whole,
  // valid message frame before the wrap) are inline; pads, fenced writes and errors are not.
  [[nodiscard]] bool next_into(Frame* out, Status* error) {
    const uint32_t first = first_word(cursor_);
    if (first == kFrameMarker) {
      // Nothing committed here. Published bytes here would be corruption (the slow path says
      // so), but the marker that ends a run of frames is not checked against the tail: its
      // line has usually just been written by the producer (a cache miss in the middle of
      // handling a message); the next call checks.
      if (took_frames_) [[likely]] {
        took_frames_ = false;
        return false;
      }
      cached_tail_ = ctl_->tail.load(std::memory_order_acquire);
      if (!ahead_of_cursor(cached_tail_)) [[likely]] {
        service_credit();
        return false;
      }
    } else if (first != kFlagPad) [[likely]] {
      // A committed frame: whole, published or not (the Commit rule).
      const uint64_t offset = cursor_ & (data_bytes_ - 1);
      const uint64_t room = data_bytes_ - offset;
      prefetch_frame(offset, std::min<uint64_t>(frame_bytes(first & kLengthMask), room));
      if (decode_frame_fast({data_ + offset, room}, cursor_, max_payload_bytes_, out) ==
              Decode::kFrame &&
          !(out->flags & kFlagWrite)) [[likely]] {
        cursor_ += out->frame_bytes;
        took_frames_ = true;
        return true;
      }
    }
    return next_into_slow(out, error);
  }
  // The lines of a frame arrive from the producer's core: ask for the rest of them (up to 4
  // lines in all) as soon as the first word gives the length, so the misses overlap instead
  // of running back to back (the canary's line, then the payload's when it is copied out). A
  // 64 B RPC's frame spans two or three lines.
  void prefetch_frame(uint64_t offset, uint64_t bytes) const {
    const uint8_t* p = data_ + offset;
    const uint64_t first_line = reinterpret_cast<uintptr_t>(p) & 63;
    const uint64_t end = std::min<uint64_t>(bytes, 4 * 64 - first_line);
    for (uint64_t at = 64 - first_line; at < end; at += 64) __builtin_prefetch(p + at);
  }
  // True when nothing is committed at the cursor and no credit is owed: what an idle poll
  // checks, on the line the next frame will land in (and the rarely written credit line).
  // It does not look at the tail (the producer writes its line on every publish); the caller
  // checks has_data() now and then so that published garbage is still reported.
  // Credit counts as owed while anything below the cursor is unpublished: bytes a receiver
  // still holds (release_to) may be let go meanwhile, and a waiting producer needs them.
  bool idle() const {
    return first_word(cursor_) == kFrameMarker &&
           (cursor_ == published_head_ ||
            ctl_->producer_waiting.load(std::memory_order_relaxed) == 0);
  }
  // Returns every byte before the read cursor to the producer (lazily, see header comment).
  void release() { release_to(cursor_); }
  // The same up to `pos` only: a receiver that keeps bytes of frames it took (ring_holds.h)
  // returns the bytes below the oldest one it holds. REQUIRES: released() <= pos <= cursor().
  void release_to(uint64_t pos);
  uint64_t cursor() const { return cursor_; }
  uint64_t released() const { return released_; }
  // Whether the producer asked for credit and waits for it.
  bool producer_waiting() const {
    return ctl_->producer_waiting.load(std::memory_order_relaxed) != 0;
  }
  // The stream position of a byte of the consumer's area [released(), cursor()), or UINT64_MAX
  // when `p` is not in the ring's data area.
  uint64_t position_of(const uint8_t* p) const {
    if (p < data_ || p >= data_ + data_bytes_) return UINT64_MAX;
    const uint64_t offset = static_cast<uint64_t>(p - data_);
    return released_ + ((offset - (released_ & (data_bytes_ - 1))) & (data_bytes_ - 1));
  }
  uint64_t data_bytes() const { return data_bytes_; }
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
  bool next_into_slow(Frame* out, Status* error);
  // The first word of the slot at stream position pos (acquire: see the Commit rule).
  uint32_t first_word(uint64_t pos) const {
    return std::atomic_ref<uint32_t>(
               *reinterpret_cast<uint32_t*>(data_ + (pos & (data_bytes_ - 1))))
        .load(std::memory_order_acquire);
  }
  // Whether a published tail covers bytes beyond the cursor (the cursor may run ahead of it).
  bool ahead_of_cursor(uint64_t tail) const { return static_cast<int64_t>(tail - cursor_) > 0; }

  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t data_bytes_ = 0;
  uint64_t cursor_ = 0;          // next frame to decode
  uint64_t released_ = 0;        // everything below is returned to the producer (locally)
  uint64_t published_head_ = 0;  // last head value stored to the control block
  uint64_t cached_tail_ = 0;
  uint64_t fenced_drops_ = 0;
  uint32_t max_payload_bytes_ = 0;
  bool took_frames_ = false;  // next_into() took frames since it last checked the tail
};

}  // namespace shoal::net

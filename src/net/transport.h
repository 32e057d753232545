// The Transport concept: what every Shoal transport endpoint (shm, tcp; later uring, verbs,
// sim) provides, checked at compile time so the data path makes no virtual calls.
//
// An endpoint is one end of a reliable, ordered, bidirectional link between two processes.
// Many logical sessions share one endpoint: every message carries a 32-bit session tag
// (the frame's imm), and order is preserved per endpoint, hence per session.
//
//   send(session, bytes)       two-sided message, 0 B .. max_message_bytes (8 MiB by default);
//                              fragmented into ring-sized frames and reassembled by the peer.
//   send_gather(session, pieces)
//                              (GatherEndpoint) the same message given as pieces, at most
//                              kGatherPiecesMax of them: the message is their concatenation,
//                              on the wire exactly as if send() had it in one buffer. The
//                              transport copies each piece once, where send() copies its
//                              bytes (shm: into the peer's ring), or hands the pieces to the
//                              kernel by reference (tcp: a gathered sendmsg for large frames).
//   write_with_imm(epoch, imm, bytes)
//                              one-sided write of one frame into the peer's receive ring; the
//                              peer sees a kWrite completion carrying imm. Refused with
//                              Status::Aborted when epoch is below the peer's fence, and dropped
//                              by the peer if the fence rose while the write was in flight.
//   reserve(bytes) -> span     (ZeroCopyEndpoint) space for one frame of <= max_write_bytes,
//                              directly in the peer's ring (shm) or the send buffer (tcp);
//   commit_send(session, n)    then seal the first n bytes as a message, or
//   commit_write(epoch, imm, n)  as a one-sided write (fence checked here), or cancel().
//   set_fence_epoch(epoch)     raises this side's fence (fences only move forward).
//   flush()                    makes buffered sends visible; every transport may batch sends
//                              until flush(), poll() or wait() (one doorbell per batch).
//   poll(out, max)             batched polled completions; never blocks.
//   release()                  ends the batch: returns the batch's bytes to the transport.
//   wait(timeout_ns)           adaptive: spin, then block (futex / poll) until data may be
//                              ready. Ok: data may be ready; Timeout; Unavailable: peer gone.
//
// Buffer ownership at each hand-off:
//   - send()/send_gather()/write_with_imm(): the caller's bytes are copied into the peer's ring
//     (shm) or the socket buffer (tcp) before the call returns; the caller keeps its buffer.
//     sent_copied_bytes() counts the payload bytes such copies moved in user space.
//   - reserve(): the returned span belongs to the caller until commit_*() or cancel(), then
//     to the transport (shm: to the peer, who reads it in place). One reservation at a time;
//     no other send may run while it is outstanding.
//   - poll(): completion bytes point into the receive ring (shm), the socket receive buffer
//     (tcp), or the endpoint's reassembly buffer for fragmented messages. They are the
//     caller's, read-only, until release(); after that they belong to the transport again.
//     REQUIRES: release() before the next poll() whenever poll() returned completions.
//
// Errors: Corruption (malformed or truncated frame; the endpoint is then closed for good),
// Unavailable (the peer died or closed; reported after every frame it published before that
// was delivered), Timeout (a send waited send_timeout_ns for credit), InvalidArgument.
//
// Threads: an endpoint is owned by one thread. Both ends may live in one process (tests) or
// in two (fork, or rendezvous by name).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "shoal/status.h"
#include "src/net/ring.h"

namespace shoal::net {

struct Completion {
  enum class Kind : uint8_t { kRecv, kWrite };
  Kind kind = Kind::kRecv;
  uint32_t imm = 0;    // kRecv: the session tag; kWrite: the immediate
  uint64_t epoch = 0;  // kWrite: the writer's epoch
  std::span<const uint8_t> bytes;
};

inline constexpr size_t kMaxMessageBytesLimit = size_t{1} << 30;

struct EndpointOptions {
  size_t ring_bytes = size_t{1} << 20;        // shm: data bytes of each direction's ring
  size_t tcp_buffer_bytes = size_t{1} << 20;  // tcp: receive buffer; frames <= a quarter
  // tcp: the receive ring's bytes (rounded up to a power of two, at least tcp_buffer_bytes; 0:
  // tcp_buffer_bytes rounded up). Larger only for a receiver that keeps what it received
  // (TcpEndpoint::keep_received: a replication follower's store).
  size_t tcp_receive_ring_bytes = 0;
  size_t max_message_bytes = size_t{8} << 20;  // largest message; <= kMaxMessageBytesLimit
  uint64_t spin_ns = 50'000;                   // busy-poll this long before blocking
  uint64_t send_timeout_ns = 10'000'000'000;   // send() gives up waiting for credit after this
};

template <typename E>
concept TransportEndpoint = requires(E& e, const E& ce, std::span<const uint8_t> bytes,
                                     Completion* out, uint32_t u32, uint64_t u64, size_t n) {
  { e.send(u32, bytes) } -> std::same_as<Status>;
  { e.write_with_imm(u64, u32, bytes) } -> std::same_as<Status>;
  { e.set_fence_epoch(u64) } -> std::same_as<Status>;
  { e.flush() } -> std::same_as<Status>;
  { e.poll(out, n) } -> std::same_as<Result<size_t>>;
  { e.release() } -> std::same_as<void>;
  { e.wait(u64) } -> std::same_as<Status>;
  { ce.max_message_bytes() } -> std::same_as<size_t>;
  { ce.max_write_bytes() } -> std::same_as<size_t>;
  // Test hook: puts raw bytes on the wire / into the peer's ring, bypassing the encoder.
  { e.inject_raw_for_test(bytes) } -> std::same_as<Status>;
};

// A message given as pieces (send_gather): the message is the pieces' concatenation.
using GatherList = std::span<const std::span<const uint8_t>>;
// Pieces per gathered message: bounds the iovecs a frame needs (tcp: one sendmsg per frame).
inline constexpr size_t kGatherPiecesMax = 256;

// Reads a gather list front to back, across piece boundaries (empty pieces are skipped).
class GatherCursor {
 public:
  explicit GatherCursor(GatherList pieces) : pieces_(pieces) {}
  // The next contiguous bytes: at most max_bytes, within one piece; empty at the end.
  std::span<const uint8_t> take(size_t max_bytes) {
    while (piece_ < pieces_.size() && offset_ == pieces_[piece_].size()) {  // bounded: pieces
      ++piece_;
      offset_ = 0;
    }
    if (piece_ == pieces_.size()) return {};
    const std::span<const uint8_t> p = pieces_[piece_];
    const size_t n = std::min(max_bytes, p.size() - offset_);
    const std::span<const uint8_t> out = p.subspan(offset_, n);
    offset_ += n;
    return out;
  }
  // Copies the next `bytes` bytes to dst. REQUIRES: that many are left.
  void copy_to(uint8_t* dst, size_t bytes) {
    while (bytes > 0) {  // bounded: one piece per iteration
      const std::span<const uint8_t> chunk = take(bytes);
      SHOAL_ASSERT(!chunk.empty(), "%s", "gather list shorter than its copy");
      std::memcpy(dst, chunk.data(), chunk.size());
      dst += chunk.size();
      bytes -= chunk.size();
    }
  }

 private:
  GatherList pieces_;
  size_t piece_ = 0;
  size_t offset_ = 0;  // into pieces_[piece_]
};

// The message size of a gather list, or InvalidArgument: more than kGatherPiecesMax pieces, or
// more than max_message_bytes in all.
[[nodiscard]] Result<size_t> gather_message_bytes(GatherList pieces, size_t max_message_bytes);

// A transport that sends a message given as pieces, each copied once at most (send_gather), and
// counts what it copies in user space on the way out (sent_copied_bytes(): payload bytes
// written into the peer's ring, a send buffer, a registered mirror or a send slot; a payload
// the kernel takes by reference is not counted). The replication leader's links need it.
template <typename E>
concept GatherEndpoint = TransportEndpoint<E> &&
    requires(E& e, const E& ce, uint32_t u32, GatherList pieces) {
  { e.send_gather(u32, pieces) } -> std::same_as<Status>;
  { ce.sent_copied_bytes() } -> std::same_as<uint64_t>;
};

// A transport that can hand out send space in place (shm: in the peer's ring; tcp: in the
// send buffer). Separate from TransportEndpoint so simpler endpoints (sim) need not offer it.
template <typename E>
concept ZeroCopyEndpoint = TransportEndpoint<E> &&
    requires(E& e, uint32_t u32, uint64_t u64, size_t n) {
  { e.reserve(n) } -> std::same_as<Result<std::span<uint8_t>>>;
  { e.commit_send(u32, n) } -> std::same_as<Status>;
  { e.commit_write(u64, u32, n) } -> std::same_as<Status>;
  { e.cancel() } -> std::same_as<void>;
};

// A transport an event loop can block on together with other sources: poll(2)/epoll for
// POLLIN on wait_fd() and liveness_fd() between prepare_to_block() (false: work is pending,
// do not block) and end_block(). The loop then polls the endpoint as usual.
template <typename E>
concept BlockableEndpoint = TransportEndpoint<E> && requires(E& e, const E& ce) {
  { ce.wait_fd() } -> std::same_as<int>;
  { ce.liveness_fd() } -> std::same_as<int>;
  { e.prepare_to_block() } -> std::same_as<bool>;
  { e.end_block() } -> std::same_as<void>;
};

// Reassembles fragmented messages (frames with kFlagMore, then a final frame without) into
// one contiguous buffer. The buffer grows on the first large message up to max_message_bytes
// (a cold path) and is then reused. Owned by the endpoint's thread.
class MessageAssembler {
 public:
  enum class Step { kInPlace, kAbsorbed, kComplete };
  explicit MessageAssembler(size_t max_message_bytes) : max_bytes_(max_message_bytes) {}

  // kInPlace: a whole message in one frame (deliver the frame's payload as is); kAbsorbed:
  // copied, more fragments follow; kComplete: message() holds the whole message.
  // REQUIRES: !holding() (a completed message was released).
  [[nodiscard]] Result<Step> feed(const Frame& frame);
  std::span<const uint8_t> message() const { return {buf_.get(), size_}; }
  bool holding() const { return complete_; }
  bool active() const { return active_; }
  uint32_t imm() const { return imm_; }  // the session of the message being (re)assembled
  // Payload bytes copied into the reassembly buffer so far (the copy a fragmented message
  // costs; the replication path counts it: src/repl/copy_count.h).
  uint64_t copied_bytes() const { return copied_bytes_; }
  // Ends the delivery of a complete message. A message still being reassembled stays: a poll
  // batch may end between two of its fragments (the rest not received yet), and its release()
  // must not drop the fragments absorbed so far.
  void release() {
    if (!complete_) return;
    complete_ = false;
    size_ = 0;
  }

 private:
  size_t max_bytes_;
  std::unique_ptr<uint8_t[]> buf_;
  size_t capacity_ = 0;
  size_t size_ = 0;
  uint32_t imm_ = 0;       // session of the message being reassembled
  bool active_ = false;    // inside a fragmented message
  bool complete_ = false;  // message() is pending delivery/release
  uint64_t copied_bytes_ = 0;
};

// The poll loop shared by every endpoint. Source provides:
//   bool next_frame(Frame*, Status*);  next decoded frame; false: none now, or *error set
//   void release_consumed();          return consumed frame bytes now (nothing is pinned)
//   void on_control(const Frame&);    transport control frames
//   void defer_error(Status);         remember a failure to report on the next call
template <typename Source>
[[nodiscard]] Result<size_t> poll_frames(Source& src, MessageAssembler& assembler, Completion* out,
                                         size_t max) {
  size_t n = 0;
  Frame f;
  Status error;
  while (n < max) {
    if (!src.next_frame(&f, &error)) {
      if (error.ok()) break;
      if (n == 0) return error;
      src.defer_error(std::move(error));  // deliver the good frames first; fail on the next call
      break;
    }
    if (f.flags & kFlagControl) [[unlikely]] {
      src.on_control(f);
      if (n == 0) src.release_consumed();
      continue;
    }
    if (f.flags & kFlagWrite) {
      out[n++] = {Completion::Kind::kWrite, f.imm, f.epoch, {f.payload, f.payload_bytes}};
      continue;
    }
    if (!(f.flags & kFlagMore) && !assembler.active()) [[likely]] {  // whole message: in place
      out[n++] = {Completion::Kind::kRecv, f.imm, f.epoch, {f.payload, f.payload_bytes}};
      continue;
    }
    auto step = assembler.feed(f);
    if (!step.ok()) return step.status();
    if (*step == MessageAssembler::Step::kAbsorbed) {
      // Copied out: free the ring space now so an 8 MiB message streams through a 1 MiB ring.
      if (n == 0) src.release_consumed();
    } else {
      if (n == 0) src.release_consumed();
      out[n++] = {Completion::Kind::kRecv, f.imm, f.epoch, assembler.message()};
      break;  // the reassembly buffer is pinned until release()
    }
  }
  return n;
}

// Monotonic nanoseconds (vDSO clock_gettime; ~20 ns). Used on slow paths only.
uint64_t mono_ns();
inline void cpu_relax() {
  __builtin_ia32_pause();
}

}  // namespace shoal::net

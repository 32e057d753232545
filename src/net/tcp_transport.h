// TCP transport (satisfies TransportEndpoint): the same frames as the rings (src/net/ring.h)
// on a kernel TCP stream, the canary bound to the stream position of each frame.
//
// Sending: frames are encoded into a bounded send buffer and written with one sendmsg per
// batch at flush(), poll() or wait() (or when the buffer fills), so a burst of small messages
// costs one system call. Frames with payloads >= kGatherBytes skip the copy: header, the
// caller's payload (send_gather(): its pieces) and the canary go out in one gathered sendmsg.
// sent_copied_bytes() counts the payload bytes copied into the send buffer (the kernel's copy
// of what sendmsg writes is the caller's to count). TCP_NODELAY is set.
//
// Receiving: a bounded receive ring (tcp_buffer_bytes, or tcp_receive_ring_bytes, rounded up
// to a power of two; frames carry at most a quarter of tcp_buffer_bytes) read with non-blocking
// recv; completions point into it until release(). The ring's memory is mapped twice back to
// back (a memfd), so a frame that runs over the ring's end is contiguous all the same: the
// receiver never moves a partly received frame. Larger messages are fragmented and
// reassembled exactly as on shm.
//
// Keeping received bytes (keep_received), as on shm: a receiver may keep part of a polled
// message where it is in the receive ring past release() (a replication follower's store keeps
// each log entry so). Holds are records of a RingHolds table (net/ring_holds.h: no allocation
// per keep); recv() then fills the ring only up to the oldest region still held, so a receiver
// that holds too much stops reading and TCP pushes back on the sender. keep_received() refuses
// (the caller copies) when keeping would hold more than three quarters of the ring, leaving
// room for the largest frame; a receiver that runs short lets go of what it holds
// (receive_held_bytes(); a follower: Follower::shed_for_ring).
//
// One-sided writes are frames flagged kFlagWrite that the receiver checks against its fence;
// set_fence_epoch() also sends a control frame, so the writer refuses stale writes itself once
// it has polled that frame.
//
// Failures: peer close/reset -> Unavailable (after every complete frame it sent is delivered);
// EOF inside a frame -> Corruption (truncated); malformed frames -> Corruption. Both are
// final; reconnect() (connecting side only) starts a fresh stream: frames in flight on the old
// one are lost, so the layer above retries (at-most-once delivery per connection).
//
// A blocking send (socket buffer full) waits for POLLOUT up to send_timeout_ns and keeps
// reading meanwhile: fragments of an incoming message go into the reassembly buffer (one
// complete message is then held for the next poll()), whole frames into the receive buffer,
// which grows for that (a new ring of twice the size, up to the power of two at or above
// tcp_buffer_bytes + max_message_bytes; regions kept in the old one stay valid there) only
// while no completion points into it. So two peers sending each other messages of up to
// max_message_bytes both progress as long as each polls between sends. A side that sends while a
// poll batch is out (its receive buffer pinned), or a peer that sends more than those bounds while
// the other never polls, can still stall both until the timeout (bounded memory).
//
// Threads: an endpoint is owned by one thread (a kept region's handle may be dropped on any).
#pragma once

#include <netinet/in.h>

#include <string>
#include <utility>

#include "src/net/ring_holds.h"
#include "src/net/transport.h"

namespace shoal::net {

class TcpEndpoint {
 public:
  static constexpr size_t kGatherBytes = 16 * 1024;

  // Connects to host:port (IPv4 dotted quad), retrying refused connections until timeout_ms.
  [[nodiscard]] static Result<TcpEndpoint> connect(const std::string& host, uint16_t port,
                                                   const EndpointOptions& options = {},
                                                   uint64_t timeout_ms = 5000);
  // Both ends of a loopback connection in this process (fork() after this for two processes).
  [[nodiscard]] static Result<std::pair<TcpEndpoint, TcpEndpoint>> pair(
      const EndpointOptions& options = {});

  TcpEndpoint() = default;
  TcpEndpoint(TcpEndpoint&& other) noexcept { *this = std::move(other); }
  TcpEndpoint& operator=(TcpEndpoint&& other) noexcept;
  ~TcpEndpoint() {
    close();
    unmap_receive_ring();
  }

  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes);
  // The message as pieces (GatherEndpoint): a frame below kGatherBytes is copied into the send
  // buffer, a larger one goes out as header, its pieces and canary in one sendmsg.
  // InvalidArgument above kGatherPiecesMax pieces or max_message_bytes.
  [[nodiscard]] Status send_gather(uint32_t session, GatherList pieces);
  uint64_t sent_copied_bytes() const { return sent_copied_bytes_; }
  // Bytes copied in user space on the way in so far: fragments reassembled, and unread bytes
  // moved when the receive ring grows (a blocked send's read_while_blocked).
  uint64_t received_copied_bytes() const { return moved_bytes_ + assembler_.copied_bytes(); }
  [[nodiscard]] Status write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes);
  // Zero-copy send into the send buffer. REQUIRES: bytes <= max_write_bytes().
  [[nodiscard]] Result<std::span<uint8_t>> reserve(size_t bytes);
  [[nodiscard]] Status commit_send(uint32_t session, size_t bytes);
  [[nodiscard]] Status commit_write(uint64_t epoch, uint32_t imm, size_t bytes);
  void cancel() { reserved_ = false; }
  [[nodiscard]] Status set_fence_epoch(uint64_t epoch);
  [[nodiscard]] Status flush();
  [[nodiscard]] Result<size_t> poll(Completion* out, size_t max);
  void release();
  // Keeps `bytes` (a part of a message of the current poll batch) where they are in the
  // receive ring until the last handle of the returned pointer goes, past release(),
  // close() and the endpoint's end. Null, and the caller copies them, when they are not in
  // the ring (a message reassembled from fragments), empty or not 8-byte aligned, when
  // keeping them would hold more than three quarters of the ring, or when kKeepRecords
  // regions are held.
  // REQUIRES: a batch is outstanding and `bytes` lie within one of its completions.
  std::shared_ptr<const uint64_t[]> keep_received(std::span<const uint8_t> bytes);
  // Receive-ring bytes recv() may not fill because this side has not let them go: from the
  // oldest region still kept (or the last release) to the read cursor.
  uint64_t receive_held_bytes() const { return in_cursor_ - in_begin_; }
  uint64_t receive_ring_bytes() const { return in_capacity_; }
  // Whether `p` points into the receive ring (kept bytes are there).
  bool in_receive_ring(const void* p) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return in_ != nullptr && b >= in_ && b < in_ + 2 * in_capacity_;
  }
  // Regions kept so far (since the ring last grew).
  uint64_t kept_regions() const { return holds_ != nullptr ? holds_->holds_made() : 0; }
  static constexpr uint32_t kKeepRecords = 4096;
  [[nodiscard]] Status wait(uint64_t timeout_ns);
  [[nodiscard]] Status inject_raw_for_test(std::span<const uint8_t> bytes);
  // Drops the current connection and connects again to the same address.
  // REQUIRES: this endpoint was made by connect() (or is pair().second).
  [[nodiscard]] Status reconnect(uint64_t timeout_ms = 5000);

  // Event-loop integration (BlockableEndpoint): the socket is both the wait and the liveness
  // fd. prepare_to_block() flushes and returns false when a frame is already buffered. A
  // receive ring full of kept regions offers no fd (-1): the socket would stay readable, so
  // the loop sleeps until its next timer, by which the holder may have let go.
  int wait_fd() const { return holds_ != nullptr && !receive_room() ? -1 : fd_; }
  int liveness_fd() const { return wait_fd(); }
  [[nodiscard]] bool prepare_to_block();
  void end_block() {}

  size_t max_message_bytes() const { return options_.max_message_bytes; }
  size_t max_write_bytes() const { return max_payload_bytes_; }
  uint64_t fenced_drops() const { return fenced_drops_; }
  void close();

  // poll_frames() source interface.
  bool next_frame(Frame* out, Status* error);
  void release_consumed();
  void on_control(const Frame& frame);
  void defer_error(Status status) { fail(std::move(status)).ignore(); }

 private:
  friend class TcpListener;
  static Result<TcpEndpoint> adopt(int fd, const EndpointOptions& options);
  void reset_stream();
  [[nodiscard]] Status append_frame(uint32_t flags, uint32_t imm, uint64_t epoch,
                                    std::span<const uint8_t> payload);
  // One frame whose payload is the next `bytes` bytes of `cursor`.
  [[nodiscard]] Status append_frame(uint32_t flags, uint32_t imm, uint64_t epoch,
                                    GatherCursor& cursor, size_t bytes);
  [[nodiscard]] Status send_fragments(uint32_t session, GatherCursor& cursor, size_t bytes);
  [[nodiscard]] Status write_all(iovec* iov, int count);
  // Seals the frame reserved at out_ + out_len_ and flushes when half the buffer is pending.
  [[nodiscard]] Status seal_reserved(uint32_t flags, uint32_t imm, uint64_t epoch, size_t bytes);
  // One non-blocking recv into the receive ring. Sets peer_closed_ on EOF.
  [[nodiscard]] Status fill();
  // Drops the ring: unmapped now, or by the holds table once no kept region is left.
  void unmap_receive_ring();
  uint8_t* in_at(uint64_t position) const { return in_ + (position & (in_capacity_ - 1)); }
  bool frame_ready() const;
  // A frame, a message completed during a send, or the peer's close waits for poll().
  bool input_ready() const;
  // Whether fill() can read: the ring is not full of unreleased or kept bytes.
  bool receive_room() const;
  // Outside a poll batch: returns to recv the ring bytes of kept regions let go since (on any
  // thread).
  void let_go_of_kept();
  // Called while a send waits for socket space: reads what the peer sent and moves the
  // fragments of a message into the reassembly buffer, so the receive buffer keeps room and
  // two peers sending to each other both progress. Whole frames stay for poll().
  [[nodiscard]] Status read_while_blocked();
  // While a send is blocked and the receive ring is full of frames that must wait for poll():
  // doubles it, up to the power of two at or above tcp_buffer_bytes + max_message_bytes,
  // when no completion points into it. Regions kept in the old ring stay there.
  void grow_receive_buffer();
  Status fail(Status status);

  EndpointOptions options_;
  int fd_ = -1;
  bool connector_ = false;
  sockaddr_in remote_{};
  uint32_t max_payload_bytes_ = 0;
  std::unique_ptr<uint8_t[]> out_;
  size_t out_len_ = 0;
  uint64_t tx_pos_ = 0;  // stream position of the next frame we send
  // The receive ring, mapped twice (2 * in_capacity_ bytes). Positions below are ring
  // positions: byte counts that never wrap (in_at() maps them), kept across reconnect().
  uint8_t* in_ = nullptr;
  size_t in_capacity_ = 0;  // grows during blocked sends (read_while_blocked)
  uint64_t in_begin_ = 0;   // first byte still owned by the caller (unreleased, or kept)
  uint64_t in_cursor_ = 0;  // next frame to decode
  uint64_t in_end_ = 0;     // end of received bytes
  uint64_t rx_pos_ = 0;     // stream position of the frame at in_cursor_
  // Created by the first keep_received(); from then on it owns the ring's mapping.
  RingHolds* holds_ = nullptr;
  bool peer_closed_ = false;
  uint64_t fence_epoch_ = 0;
  uint64_t peer_fence_epoch_ = 0;
  uint64_t fenced_drops_ = 0;
  MessageAssembler assembler_{0};
  bool batch_outstanding_ = false;
  bool assembled_out_ = false;  // the outstanding batch delivered the reassembled message
  bool reserved_ = false;
  uint64_t sent_copied_bytes_ = 0;
  uint64_t moved_bytes_ = 0;  // unread bytes moved by a growth (received_copied_bytes)
  Status failed_;
};

class TcpListener {
 public:
  // Listens on host:port; port 0 picks a free port (see port()).
  [[nodiscard]] static Result<TcpListener> listen(const std::string& host, uint16_t port,
                                                  const EndpointOptions& options = {});
  TcpListener() = default;
  TcpListener(TcpListener&& other) noexcept
      : options_(other.options_), fd_(std::exchange(other.fd_, -1)), port_(other.port_) {}
  TcpListener& operator=(TcpListener&& other) noexcept;
  ~TcpListener();
  uint16_t port() const { return port_; }
  [[nodiscard]] Result<TcpEndpoint> accept(uint64_t timeout_ms = 5000);

 private:
  EndpointOptions options_;
  int fd_ = -1;
  uint16_t port_ = 0;
};

static_assert(ZeroCopyEndpoint<TcpEndpoint>);
static_assert(BlockableEndpoint<TcpEndpoint>);
static_assert(GatherEndpoint<TcpEndpoint>);

}  // namespace shoal::net

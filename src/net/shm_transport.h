// Shared-memory transport between processes on one host (satisfies TransportEndpoint).
//
// One memfd per endpoint pair holds two rings (src/net/ring.h), one per direction; each side
// is the only producer of one ring and the only consumer of the other. A send or a one-sided
// write is a memcpy straight into the peer's receive ring (the RDMA WRITE_WITH_IMM of this
// transport); the peer decodes frames in place and returns credit lazily. Frames written by
// send()/write_with_imm() become visible to the peer at flush(), poll() or wait() (or when an
// eighth of the ring is pending), so a burst costs one tail store and one fence.
//
// Rendezvous: the accepting side creates the memfd and passes it over a unix-domain socket
// with SCM_RIGHTS (ShmListener / ShmEndpoint::connect, abstract socket names), or pair() makes
// both ends over a socketpair (tests, fork). Each side also passes its doorbell eventfd, which
// the peer writes only when this side blocks in an event loop (prepare_to_block()).
// Access: abstract socket names carry no permissions, so both ends check the other's user
// (SO_PEERCRED): a peer of another uid is refused (PermissionDenied) before any ring is
// shared; the memfd is mode 0600 (its owner's alone). Same-user processes are trusted: the
// cluster secret (auth.h) guards TCP only. The socket then
// carries no data: it stays open only so that a peer's death (even SIGKILL) shows up as a hang-up,
// which this side checks when it is idle (every 64th empty poll(), at most once per
// millisecond, and between futex sleeps), never per message.
//
// Adaptive waiting: wait() spins spin_ns on the ring's tail, then futex-waits on a word in the
// shared control block; the peer's producer issues FUTEX_WAKE only when the sleeping flag is
// set. A sender short of credit waits symmetrically.
//
// Keeping received bytes (keep_received): a receiver may keep parts of a message it polled
// where they are in the receive ring, past release() (a replication follower's store keeps
// each log entry so: net/ring_holds.h). Credit then goes back to the peer only up to the
// oldest region still held, which bounds what is kept: keep_received() refuses (the caller
// copies) when keeping would leave the peer less than a quarter of the ring (its largest
// frame), and the receiver lets go of what it holds when it runs short (a replication
// follower: Follower::shed_for_ring), so a sender is never blocked by held bytes for long. The
// ring's mapping lives until the endpoint is closed and the last held region is let go.
//
// Threads: an endpoint is owned by one thread (a kept region's handle may be dropped on any).
// Invariant: after Corruption or Unavailable the endpoint stays failed (every call returns
// that status).
#pragma once

#include <cstring>
#include <string>
#include <utility>

#include "src/net/ring_holds.h"
#include "src/net/transport.h"

namespace shoal::net {

// An owned file descriptor (closed on destruction). Cold paths only.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  bool ok() const { return fd_ >= 0; }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset();

 private:
  int fd_;
};

class ShmEndpoint {
 public:
  // Both ends of a link in this process (fork() after this to put one end in a child).
  [[nodiscard]] static Result<std::pair<ShmEndpoint, ShmEndpoint>> pair(
      const EndpointOptions& options = {});
  // Connects to a ShmListener bound to `name` (an abstract unix socket name).
  // PermissionDenied when the listener runs as another user.
  [[nodiscard]] static Result<ShmEndpoint> connect(const std::string& name,
                                                   const EndpointOptions& options = {},
                                                   uint64_t timeout_ms = 5000);

  ShmEndpoint() = default;
  ShmEndpoint(ShmEndpoint&& other) noexcept { *this = std::move(other); }
  ShmEndpoint& operator=(ShmEndpoint&& other) noexcept;
  ~ShmEndpoint() { close(); }

  // Inline fast path: one frame with credit at hand (a memcpy into the peer's ring).
  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes) {
    const auto n = static_cast<uint32_t>(bytes.size());
    if (bytes.size() <= fast_send_bytes_ && failed_.ok() && !reserved_ && prefaulted_) [[likely]] {
      if (uint8_t* dst = tx_.try_reserve(n)) [[likely]] {
        if (n != 0) std::memcpy(dst, bytes.data(), n);
        tx_.commit(0, session, 0, n, /*publish_now=*/false);
        sent_copied_bytes_ += n;
        return Status::Ok();
      }
    }
    return send_slow(session, bytes);
  }
  // The message as pieces (GatherEndpoint): each piece copied once, straight into the peer's
  // ring, fragmented as send() fragments. InvalidArgument above kGatherPiecesMax pieces or
  // max_message_bytes.
  [[nodiscard]] Status send_gather(uint32_t session, GatherList pieces);
  // Payload bytes copied into the peer's ring by send(), send_gather() and write_with_imm().
  uint64_t sent_copied_bytes() const { return sent_copied_bytes_; }
  // Bytes copied in user space on the way in so far: fragments reassembled (a message larger
  // than a frame); whole messages are read in place.
  uint64_t received_copied_bytes() const { return assembler_.copied_bytes(); }
  [[nodiscard]] Status write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes);
  // Zero-copy send into the peer's ring. REQUIRES: bytes <= max_write_bytes().
  [[nodiscard]] Result<std::span<uint8_t>> reserve(size_t bytes);
  [[nodiscard]] Status commit_send(uint32_t session, size_t bytes);
  [[nodiscard]] Status commit_write(uint64_t epoch, uint32_t imm, size_t bytes);
  void cancel() {
    tx_.cancel();
    reserved_ = false;
  }
  [[nodiscard]] Status set_fence_epoch(uint64_t epoch);
  // Publishes buffered sends (one tail store and one fence for the whole batch).
  [[nodiscard]] Status flush() {
    tx_.flush();
    return failed_;
  }
  // Inline fast path for the idle poll an event loop makes between messages: nothing to
  // publish, nothing committed at the cursor, no credit asked for (and not the 64th idle poll
  // in a row, which also looks at the tail and the peer's liveness).
  [[nodiscard]] Result<size_t> poll(Completion* out, size_t max) {
    if (rx_.idle() && failed_.ok() && prefaulted_ && !batch_outstanding_ && tx_.flushed())
        [[likely]] {
      if ((++empty_polls_ & 63) != 0) [[likely]]
        return size_t{0};
      return idle_check(out, max);
    }
    return poll_slow(out, max);
  }
  void release();
  // Keeps `bytes` (a part of a message of the current poll batch) where they are in the
  // receive ring until the last handle of the returned pointer goes, past release() and
  // close(). Null, and the caller copies them, when they are not in the ring (a message
  // reassembled from fragments), empty or not 8-byte aligned, when keeping them would hold
  // more than three quarters of the ring back from the peer, or when kKeepRecords regions
  // are held.
  // REQUIRES: a batch is outstanding and `bytes` lie within one of its completions.
  std::shared_ptr<const uint64_t[]> keep_received(std::span<const uint8_t> bytes);
  // Receive-ring bytes the peer may not write yet because this side has not returned them:
  // from the oldest region still kept (or the last release) to the read cursor.
  uint64_t receive_held_bytes() const { return rx_.cursor() - rx_.released(); }
  uint64_t receive_ring_bytes() const { return rx_.data_bytes(); }
  // Whether `p` points into the receive ring (kept bytes are there).
  bool in_receive_ring(const void* p) const {
    return rx_.position_of(static_cast<const uint8_t*>(p)) != UINT64_MAX;
  }
  // Regions kept so far.
  uint64_t kept_regions() const { return holds_ != nullptr ? holds_->holds_made() : 0; }
  static constexpr uint32_t kKeepRecords = 4096;
  [[nodiscard]] Status wait(uint64_t timeout_ns);
  [[nodiscard]] Status inject_raw_for_test(std::span<const uint8_t> bytes);

  // Event-loop integration (BlockableEndpoint): block in poll/epoll on wait_fd() (readable
  // when the peer published after prepare_to_block()) and liveness_fd() (hang-up when the
  // peer is gone), between prepare_to_block() -- false: work is pending, do not block -- and
  // end_block().
  int wait_fd() const { return doorbell_fd_; }
  int liveness_fd() const { return sock_; }
  [[nodiscard]] bool prepare_to_block();
  void end_block();

  size_t max_message_bytes() const { return options_.max_message_bytes; }
  size_t max_write_bytes() const { return tx_.max_payload_bytes(); }
  uint64_t fenced_drops() const { return rx_.fenced_drops(); }
  bool is_open() const { return map_ != nullptr; }
  // Releases the mapping and the socket (the peer sees a hang-up).
  void close();

  // poll_frames() source interface.
  bool next_frame(Frame* out, Status* error) { return rx_.next_into(out, error); }
  void release_consumed() {
    if (holds_ == nullptr) [[likely]] {
      rx_.release();
    } else {
      rx_.release_to(holds_->floor(rx_.cursor()));
    }
  }
  void on_control(const Frame&) {}
  void defer_error(Status status) { fail(std::move(status)).ignore(); }

 private:
  friend class ShmListener;
  // Maps `memfd` (already sized) and attaches to ring `side` as producer (0: ring 0).
  // `doorbell` is this side's eventfd; the peer's is added with set_peer_doorbell().
  [[nodiscard]] static Result<ShmEndpoint> attach(Fd memfd, Fd sock, Fd doorbell, size_t ring_bytes,
                                                  int side, bool init,
                                                  const EndpointOptions& options);
  [[nodiscard]] static Result<ShmEndpoint> handshake(Fd sock, const EndpointOptions& options,
                                                     uint64_t timeout_ms);
  void set_peer_doorbell(Fd fd);
  [[nodiscard]] Status send_slow(uint32_t session, std::span<const uint8_t> bytes);
  // Frames of at most a quarter ring, the payload copied from `cursor` ("bytes" in all).
  [[nodiscard]] Status send_fragments(uint32_t session, GatherCursor& cursor, size_t bytes);
  [[nodiscard]] Result<size_t> poll_slow(Completion* out, size_t max);
  // Every 64th idle poll: published bytes the idle check does not see (polled now), and is the
  // peer still there? The count, 0, or the failure.
  [[nodiscard]] Result<size_t> idle_check(Completion* out, size_t max);
  [[nodiscard]] Status push(uint32_t flags, uint32_t imm, uint64_t epoch,
                            std::span<const uint8_t> payload);
  // Waits (spin, then futex) until try_reserve(bytes) succeeds; returns the payload pointer.
  [[nodiscard]] Result<uint8_t*> reserve_blocking(uint32_t bytes);
  [[nodiscard]] Status check_peer();
  Status fail(Status status);
  void prefault();
  void prefault_once();

  EndpointOptions options_;
  uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  int sock_ = -1;
  int doorbell_fd_ = -1;       // our eventfd: the peer rings it when we block in a loop
  int peer_doorbell_fd_ = -1;  // the peer's eventfd, rung by tx_
  RingProducer tx_;
  RingConsumer rx_;
  MessageAssembler assembler_{0};
  bool batch_outstanding_ = false;
  bool reserved_ = false;
  bool prefaulted_ = false;       // prefault_once() ran: the first poll()/send in this process
  uint32_t fast_send_bytes_ = 0;  // min(max_message_bytes, one frame): send()'s fast path
  uint64_t last_liveness_check_ns_ = 0;
  uint32_t empty_polls_ = 0;
  uint64_t sent_copied_bytes_ = 0;
  // Created by the first keep_received(); from then on it owns the mapping (close() drops
  // this side's reference).
  RingHolds* holds_ = nullptr;
  Status failed_;
};

// Accepts ShmEndpoint::connect() calls on an abstract unix socket name.
class ShmListener {
 public:
  [[nodiscard]] static Result<ShmListener> listen(const std::string& name,
                                                  const EndpointOptions& options = {});
  ShmListener() = default;
  ShmListener(ShmListener&& other) noexcept
      : options_(other.options_), fd_(std::exchange(other.fd_, -1)) {}
  ShmListener& operator=(ShmListener&& other) noexcept;
  ~ShmListener();
  // Waits up to timeout_ms for a connect(), then creates and shares the rings, waiting up to
  // handshake_timeout_ms for the peer's half (a loop polling with timeout 0 still lets a
  // connecting peer finish). PermissionDenied (the socket closed) when the peer runs as
  // another user.
  [[nodiscard]] Result<ShmEndpoint> accept(uint64_t timeout_ms = 5000,
                                           uint64_t handshake_timeout_ms = 5000);

 private:
  EndpointOptions options_;
  int fd_ = -1;
};

static_assert(ZeroCopyEndpoint<ShmEndpoint>);
static_assert(BlockableEndpoint<ShmEndpoint>);
static_assert(GatherEndpoint<ShmEndpoint>);

}  // namespace shoal::net

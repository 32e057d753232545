// Shared-memory transport between processes on one host (satisfies TransportEndpoint).
//
// One memfd per endpoint pair holds two rings (src/net/ring.h), one per direction; each side
// is the only producer of one ring and the only consumer of the other. A send or a one-sided
// write is a memcpy straight into the peer's receive ring (the RDMA WRITE_WITH_IMM of this
// transport); the peer decodes frames in place and returns credit lazily.
//
// Rendezvous: the accepting side creates the memfd and passes it over a unix-domain socket
// with SCM_RIGHTS (ShmListener / ShmEndpoint::connect, abstract socket names), or pair() makes
// both ends over a socketpair (tests, fork). The socket then carries no data: it stays open
// only so that a peer's death (even SIGKILL) shows up as a hang-up, which this side checks
// when it is idle (every 1024 empty polls, and between futex sleeps), never per message.
//
// Adaptive waiting: wait() spins spin_ns on the ring's tail, then futex-waits on a word in the
// shared control block; the peer's producer issues FUTEX_WAKE only when the sleeping flag is
// set. A sender short of credit waits symmetrically.
//
// Threads: an endpoint is owned by one thread. Invariant: after Corruption or Unavailable the
// endpoint stays failed (every call returns that status).
#pragma once

#include <string>
#include <utility>

#include "src/net/transport.h"

namespace shoal::net {

class ShmEndpoint {
 public:
  // Both ends of a link in this process (fork() after this to put one end in a child).
  [[nodiscard]] static Result<std::pair<ShmEndpoint, ShmEndpoint>> pair(
      const EndpointOptions& options = {});
  // Connects to a ShmListener bound to `name` (an abstract unix socket name).
  [[nodiscard]] static Result<ShmEndpoint> connect(const std::string& name,
                                                   const EndpointOptions& options = {},
                                                   uint64_t timeout_ms = 5000);

  ShmEndpoint() = default;
  ShmEndpoint(ShmEndpoint&& other) noexcept { *this = std::move(other); }
  ShmEndpoint& operator=(ShmEndpoint&& other) noexcept;
  ~ShmEndpoint() { close(); }

  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes);
  [[nodiscard]] Status write_with_imm(uint64_t epoch, uint32_t imm,
                                      std::span<const uint8_t> bytes);
  [[nodiscard]] Status set_fence_epoch(uint64_t epoch);
  [[nodiscard]] Status flush() { return failed_; }  // sends are published at once
  [[nodiscard]] Result<size_t> poll(Completion* out, size_t max);
  void release();
  [[nodiscard]] Status wait(uint64_t timeout_ns);
  [[nodiscard]] Status inject_raw_for_test(std::span<const uint8_t> bytes);

  size_t max_message_bytes() const { return options_.max_message_bytes; }
  size_t max_write_bytes() const { return tx_.max_payload_bytes(); }
  uint64_t fenced_drops() const { return rx_.fenced_drops(); }
  bool is_open() const { return map_ != nullptr; }
  // Releases the mapping and the socket (the peer sees a hang-up).
  void close();

  // poll_frames() source interface.
  Result<Frame> next_frame();
  void release_consumed() { rx_.release(); }
  void on_control(const Frame&) {}
  void defer_error(Status status) { fail(std::move(status)).ignore(); }

 private:
  friend class ShmListener;
  // Maps `memfd` (already sized) and attaches to ring `side` as producer (0: ring 0).
  [[nodiscard]] static Result<ShmEndpoint> attach(int memfd, int sock, size_t ring_bytes,
                                                  int side, bool init,
                                                  const EndpointOptions& options);
  [[nodiscard]] Status push(uint32_t flags, uint32_t imm, uint64_t epoch,
                            std::span<const uint8_t> payload);
  [[nodiscard]] Status check_peer();
  Status fail(Status status);

  EndpointOptions options_;
  uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  int sock_ = -1;
  RingProducer tx_;
  RingConsumer rx_;
  MessageAssembler assembler_{0};
  bool batch_outstanding_ = false;
  uint32_t empty_polls_ = 0;
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
  // Waits up to timeout_ms for a connect(), then creates and shares the rings.
  [[nodiscard]] Result<ShmEndpoint> accept(uint64_t timeout_ms = 5000);

 private:
  EndpointOptions options_;
  int fd_ = -1;
};

static_assert(TransportEndpoint<ShmEndpoint>);

}  // namespace shoal::net

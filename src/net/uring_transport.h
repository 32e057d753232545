// io_uring transport (satisfies TransportEndpoint, ZeroCopyEndpoint, BlockableEndpoint): the
// same frames as tcp_transport on a loopback/LAN TCP stream, moved by io_uring instead of
// send/recv system calls.
//
// Ring: created lazily by the owning thread on first use (so an endpoint made before fork()
// is usable in the child; an io_uring with SINGLE_ISSUER belongs to the task that created it).
// Setup tries DEFER_TASKRUN|SINGLE_ISSUER|TASKRUN_FLAG (completions are processed only when we
// enter the kernel: no inter-processor interrupt per completion), then COOP_TASKRUN|
// TASKRUN_FLAG, then a default ring; the mode used is logged once per process and reported by
// setup_mode(). The socket is a registered (fixed) file.
//
// Sending: frames are encoded into one of two send slots of a registered buffer; flush() (or
// poll()/wait(), or a full slot) submits the slot as one IORING_OP_SEND (MSG_NOSIGNAL) and
// switches to the other slot, so encoding the next batch overlaps the kernel sending this one.
// With UringOptions::zero_copy_send, a batch of >= zero_copy_min_bytes goes out as SEND_ZC
// from the registered buffer instead; the slot is reusable only after the notification CQE.
// Notifications flagged IORING_NOTIF_USAGE_ZC_COPIED (the kernel copied anyway; always the
// case on loopback) are counted in zero_copy_copied().
//
// Receiving: one multishot RECV with buffer selection from a provided buffer ring (32 buffers
// of tcp_buffer_bytes / 32). Filled buffers queue in arrival order; frames are decoded in
// place. A frame that spans buffers is copied into a staging area of frame_bytes(
// max_write_bytes()) (the only receive-side copy). If the kernel runs out of buffers
// (ENOBUFS) the multishot ends and is re-armed once buffers are returned.
//
// Buffer ownership at each hand-off:
//   - send()/write_with_imm(): the caller's bytes are copied into a send slot before return.
//   - reserve(): the span is in the active send slot (registered memory); it is the caller's
//     until commit_*()/cancel(), then the transport's.
//   - a submitted send slot belongs to the kernel until its CQE (and, for SEND_ZC, its
//     notification CQE); it is never written in between.
//   - a provided buffer belongs to the kernel until its recv CQE; then to the endpoint; poll()
//     lends its bytes (and the staging area) to the caller until release(), after which fully
//     decoded buffers go back to the kernel's buffer ring.
//
// Invariants: send slots are written only when idle; at most kRecvBuffers buffers are queued
// (each buffer id is either in the kernel's ring or in our queue, never both); the staging
// area holds at most one frame and is not refilled while a completion points into it.
//
// Failures: as tcp_transport: peer close/reset -> Unavailable after every complete frame it
// sent; EOF inside a frame -> Corruption ("truncated"); malformed frame -> Corruption; both
// final. A send waiting longer than send_timeout_ns for a slot -> Timeout.
//
// Threads: an endpoint is owned by one thread (the one that first uses it). Not copyable;
// movable before or after first use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "src/net/transport.h"

namespace shoal::net {

enum class UringMode : uint8_t {
  kAuto,          // DEFER_TASKRUN, falling back to COOP_TASKRUN, then default
  kDeferTaskrun,  // only DEFER_TASKRUN|SINGLE_ISSUER (fails if unsupported)
  kCoopTaskrun,   // only COOP_TASKRUN
  kDefault,       // a plain ring: completions run from task work interrupts
};
const char* uring_mode_name(UringMode mode);

struct UringOptions {
  UringMode mode = UringMode::kAuto;
  // SEND_ZC for send batches of at least zero_copy_min_bytes. Off by default: on loopback the
  // kernel copies anyway (counted in zero_copy_copied()) and pays for the notification.
  bool zero_copy_send = false;
  size_t zero_copy_min_bytes = 64 * 1024;
};

class UringEndpoint {
 public:
  // True when this kernel lets us create an io_uring with a provided buffer ring (not
  // disabled by sysctl/seccomp). Cheap enough for a test's skip check; not for a data path.
  static bool supported(std::string* why_not = nullptr);
  // Both ends of a loopback TCP connection in this process (fork() after this is fine: the
  // rings are created on first use).
  [[nodiscard]] static Result<std::pair<UringEndpoint, UringEndpoint>> pair(
      const EndpointOptions& options = {}, const UringOptions& uring = {});
  // Connects to host:port (IPv4), retrying refused connections until timeout_ms; with a
  // cluster secret (net/auth.h) proves it first, as TcpEndpoint::connect does (so a
  // TcpListener, which verifies it, can accept it: the frames are tcp's).
  [[nodiscard]] static Result<UringEndpoint> connect(const std::string& host, uint16_t port,
                                                     const EndpointOptions& options = {},
                                                     const UringOptions& uring = {},
                                                     uint64_t timeout_ms = 5000);
  // Takes ownership of a connected TCP socket (blocking mode; e.g. from accept()).
  [[nodiscard]] static Result<UringEndpoint> adopt(int fd, const EndpointOptions& options = {},
                                                   const UringOptions& uring = {});

  UringEndpoint();
  UringEndpoint(UringEndpoint&&) noexcept;
  UringEndpoint& operator=(UringEndpoint&&) noexcept;
  ~UringEndpoint();

  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes);
  // The message as pieces (GatherEndpoint): each piece copied once, into the send slot, as
  // send() copies its bytes. InvalidArgument above kGatherPiecesMax pieces or
  // max_message_bytes.
  [[nodiscard]] Status send_gather(uint32_t session, GatherList pieces);
  // Payload bytes copied into the send slots (send, send_gather, write_with_imm).
  uint64_t sent_copied_bytes() const;
  [[nodiscard]] Status write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes);
  // REQUIRES: bytes <= max_write_bytes(); no reservation outstanding.
  [[nodiscard]] Result<std::span<uint8_t>> reserve(size_t bytes);
  // REQUIRES: a reservation of at least `bytes`.
  [[nodiscard]] Status commit_send(uint32_t session, size_t bytes);
  [[nodiscard]] Status commit_write(uint64_t epoch, uint32_t imm, size_t bytes);
  void cancel();
  [[nodiscard]] Status set_fence_epoch(uint64_t epoch);
  [[nodiscard]] Status flush();
  // REQUIRES: release() of the previous batch if it returned completions.
  [[nodiscard]] Result<size_t> poll(Completion* out, size_t max);
  void release();
  [[nodiscard]] Status wait(uint64_t timeout_ns);
  [[nodiscard]] Status inject_raw_for_test(std::span<const uint8_t> bytes);

  // BlockableEndpoint: wait_fd() is an eventfd the ring signals when completion work arrives;
  // liveness_fd() is the socket (POLLRDHUP on peer close).
  int wait_fd() const;
  int liveness_fd() const;
  [[nodiscard]] bool prepare_to_block();
  void end_block() {}

  size_t max_message_bytes() const;
  size_t max_write_bytes() const;
  uint64_t fenced_drops() const;
  // The ring mode in use (kAuto before first use).
  UringMode setup_mode() const;
  uint64_t zero_copy_sends() const;   // SEND_ZC notifications seen
  uint64_t zero_copy_copied() const;  // of those, flagged IORING_NOTIF_USAGE_ZC_COPIED
  // Waits (bounded by send_timeout_ns) for submitted sends, then tears down ring and socket.
  void close();

  struct State;  // defined in uring_transport.cc

 private:
  explicit UringEndpoint(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

static_assert(TransportEndpoint<UringEndpoint>);
static_assert(ZeroCopyEndpoint<UringEndpoint>);
static_assert(BlockableEndpoint<UringEndpoint>);
static_assert(GatherEndpoint<UringEndpoint>);

}  // namespace shoal::net

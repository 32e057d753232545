// libfabric RMA transport (satisfies TransportEndpoint, ZeroCopyEndpoint, BlockableEndpoint):
// the ring protocol of shm_transport with the memcpy into the peer's ring replaced by an RMA
// write (fi_writedata) into a registered copy of that ring. This is the software rehearsal of
// the RDMA transport (docs/TRANSPORTS.md, "Mapping onto RDMA verbs and libfabric").
//
// Provider: FI_EP_RDM endpoints with FI_RMA, remote CQ data and FI_ORDER_RMA_WAW, on
// 127.0.0.1 only. The default is `net` (libfabric's tcp provider with native RDM endpoints:
// the fastest here, and it gives a CQ wait fd); FabricOptions::provider or
// SHOAL_FABRIC_PROVIDER picks another. Measured on Debian 12's libfabric 1.17 without an RDMA
// NIC: net, tcp;ofi_rxm, sockets, udp;ofi_rxd and shm all complete fi_writedata with remote CQ
// data over loopback; only net, tcp;ofi_rxm and sockets give FI_WAIT_FD (without one, idle
// waits nap in 50 us slices instead of blocking; see wait()). The CQ waits on a wait set of
// ours so that net's wait fd can be slept on (open_cq() in the .cc says why).
//
// Memory. Each side registers one region (FI_REMOTE_WRITE) the peer writes into:
//   [0, 256)                mailbox: words the peer writes with its control messages
//   [256, 512)              RingControl (ring.h), formatted by ring_init: magic, size
//   [512, 512 + ring_bytes) the receive ring's data area: frames exactly as on shm
// and keeps a local "mirror" of the peer's ring (same size, registered as an RMA source). A
// RingProducer builds frames in the mirror exactly as shm builds them in the peer's ring
// (wrap pads, credit from head, fence); sync_tx() then RMA-writes each new byte range
// [sent, tail) to the same offsets of the peer's ring (two writes when it wraps), each
// fi_writedata carrying remote CQ data kFrames | (end position / 8). Because software providers
// place bytes in no particular order, the receiver never polls ring memory: it decodes only up
// to the position the latest completion announced (FI_ORDER_RMA_WAW makes that complete).
//
// Remote CQ data, 32 bits (what verbs' imm_data carries): [31..30] kind, [29..0] value.
//   kFrames         value = end position / 8 (mod 2^30): frames are readable up to it
//   kCredit         value = consumer head / 8: the writer may reuse the mirror up to head
//   kFence          the peer raised its fence; the 64-bit epoch is in our mailbox
//   kSignal         value 0: the writer ran out of credit, send kCredit now, not at a quarter
//                   ring; value 1: the peer is closing, this is its last write (see Closing)
// Positions are reconstructed from 30 bits against the last known one (rings are <= 1 GiB,
// the window is 8 GiB). Control messages are 8-byte fi_writedata into the mailbox from
// registered words after the mirror, with a completion each, counted against the same
// in-flight bound as frames. Never fi_inject_writedata: libfabric 1.17's tcp provider queues
// an injected RMA write without its inject flag or a context, and when the connection breaks
// with one still queued (the peer stopped reading, then closed or died) ofi_rxm dereferences
// the NULL context of its cancellation and segfaults (docs/TRANSPORTS.md, fabric).
//
// Flow control: the writer may write [tail, head + ring_bytes) only, as on shm; the reader
// returns credit (kCredit) once per quarter ring, on request, and before it blocks. A
// completion announcing bytes past released + ring_bytes is a writer overrunning the ring:
// Corruption ("write past the ring's bounds"), and the endpoint is closed for good.
//
// Keeping received bytes (keep_received), as on shm and tcp: a receiver may keep part of a
// polled message where the peer's RMA write put it in our registered ring, past release() (a
// replication follower's store, WAL write and replay queue use each log entry so). Holds are
// records of a RingHolds table (net/ring_holds.h: no allocation per keep); credit (kCredit)
// then goes back only up to the oldest region still held, so the writer never writes over a
// held byte, and a receiver that holds too much stops returning credit: the writer, out of
// credit, asks once (kSignal 0) and blocks on its CQ until credit comes. Regions let go on
// other threads are noticed on the receiver's next poll(), wait() slice (at most 10 ms) or
// prepare_to_block(), and their credit sent then (at once when the writer asked). A keep is
// refused (the caller copies) for bytes not in the ring (a reassembled message), empty or
// misaligned ones, and when keeping would hold more than three quarters of the ring (a frame
// carries at most a quarter). Frames never straddle the ring's end (wrap pads, as on shm), so a
// kept payload is contiguous. The region is mmap'd; once a region is kept the table owns it:
// close() closes the registration and the last held region unmaps it.
//
// Rendezvous: fabric address, region address, key and ring size are exchanged as a
// FabricHello over a stream socket (RDMA systems use a side channel the same way):
// FabricListener/connect() on loopback TCP, listen_local()/connect_local() on an abstract unix
// socket name (the shard servers and replication), pair() on a socketpair. The socket stays open
// afterwards only to report the peer's death (hang-up), checked when idle, as on shm. Each side
// then sends one small RMA write so that the provider's connection is up before the first
// frame (tcp;ofi_rxm connects lazily). A hello whose ring is too small, not a power of two,
// larger than 1 GiB, or whose registration does not cover its ring is refused
// (InvalidArgument) and so is one from another provider.
//
// Lazy start: pair() creates only the socket pair; fabric resources are opened by each end's
// first use, in the process that uses it. So an endpoint made before fork() works in the child
// (libfabric state must not cross a fork). When both ends are still in the creating process
// the first use starts both (one thread drives both handshakes).
// REQUIRES: fork() only before an endpoint's first use; never use one end in two processes.
//
// Waiting: wait() spins spin_ns polling the CQ (manual progress: software providers move data
// only inside fi_cq_read), then blocks in poll(2) on the CQ's wait fd (FI_WAIT_FD, fetched with
// fi_control(FI_GETWAIT); fi_trywait() first) and the liveness socket. prepare_to_block() does
// the same for an event loop; without a wait fd it returns false (the loop spins).
//
// Completions: our writes complete when the provider has taken their bytes
// (FI_INJECT_COMPLETE), not when the peer's provider acknowledges them: tcp;ofi_rxm's
// FI_TRANSMIT_COMPLETE is such an acknowledgement, one more message each way per write.
//
// Closing: close() posts what was committed and waits until every write of ours has its
// completion; then the goodbyes (kSignal value 1): ours, with FI_TRANSMIT_COMPLETE (its
// acknowledgement says the peer has all we wrote), and the peer's in return, which it posts in
// the progress() call that reads ours and which is its last write: once it has arrived,
// nothing of the peer's can be half received when fi_close tears the connection down
// (libfabric 1.17's tcp;ofi_rxm crashes on a cancelled incoming write too; see
// say_goodbye()). 1 s in all at most; not waited for when the other end of a pair() is in
// this process (the thread closing us may be the one that would poll it). A peer that has
// read a goodbye writes nothing more (no frames, no credit) and reports Unavailable ("fabric
// peer closed the link") after the frames that came before it. A write of ours that fails
// (FI_ECANCELED when the provider drops a broken connection, resets) is Unavailable too,
// reported after the frames that arrived before it.
//
// Errors: as shm_transport (Corruption, Unavailable, Timeout, InvalidArgument, Aborted), plus
// IOError for provider failures (naming the call and fi_strerror), NotSupported when no
// provider with FI_RMA works. Failures are final: every later call returns them.
//
// Threads: an endpoint is owned by one thread at a time (a kept region's handle may be dropped
// on any). Not copyable; movable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "src/net/transport.h"

namespace shoal::net {

struct FabricOptions {
  // libfabric provider name ("net", "tcp;ofi_rxm", "sockets", "udp;ofi_rxd", "shm"). Empty: the
  // environment's SHOAL_FABRIC_PROVIDER, else kDefaultFabricProvider.
  std::string provider;
  uint64_t handshake_timeout_ms = 10'000;
};
inline constexpr const char* kDefaultFabricProvider = "net";

// The rendezvous message (fixed layout, host byte order: both ends are on one host).
struct FabricHello {
  static constexpr uint64_t kMagic = 0x53686f616c466162ULL;  // "ShoalFab"
  static constexpr uint32_t kVersion = 1;
  uint64_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t address_bytes = 0;   // of `address`
  uint64_t ring_bytes = 0;      // data bytes of the sender's receive ring
  uint64_t region_bytes = 0;    // bytes the sender registered (mailbox + control + ring)
  uint64_t region_address = 0;  // RMA address of the region (0 unless FI_MR_VIRT_ADDR)
  uint64_t region_key = 0;      // fi_mr_key of the region
  char provider[32] = {};
  uint8_t address[128] = {};  // fi_getname of the sender's endpoint
};

// Region layout (see the file comment).
inline constexpr size_t kFabricMailboxBytes = 256;
constexpr size_t fabric_region_bytes(size_t ring_bytes) {
  return kFabricMailboxBytes + ring_region_bytes(ring_bytes);
}

class FabricEndpoint {
 public:
  // True when a pair on `options.provider` passes one message each way in this process. The
  // first call costs tens of ms (provider loading); the answer is cached per provider.
  static bool supported(std::string* why_not = nullptr, const FabricOptions& options = {});
  // The provider an endpoint with these options uses.
  static std::string provider_name(const FabricOptions& options = {});
  // Both ends, joined by a socketpair; fabric resources are opened on first use.
  [[nodiscard]] static Result<std::pair<FabricEndpoint, FabricEndpoint>> pair(
      const EndpointOptions& options = {}, const FabricOptions& fabric = {});
  // Connects to a FabricListener at host:port (loopback) and completes the handshake.
  [[nodiscard]] static Result<FabricEndpoint> connect(const std::string& host, uint16_t port,
                                                      const EndpointOptions& options = {},
                                                      const FabricOptions& fabric = {},
                                                      uint64_t timeout_ms = 5000);
  // The same with the rendezvous on an abstract unix socket name (FabricListener::
  // listen_local), as shm names its listeners: how the shard servers and replication meet,
  // with no port to allocate. Retries a name nobody listens on yet until timeout_ms; the
  // listener must run as our uid (PermissionDenied otherwise).
  [[nodiscard]] static Result<FabricEndpoint> connect_local(const std::string& name,
                                                            const EndpointOptions& options = {},
                                                            const FabricOptions& fabric = {},
                                                            uint64_t timeout_ms = 5000);

  FabricEndpoint();
  FabricEndpoint(FabricEndpoint&&) noexcept;
  FabricEndpoint& operator=(FabricEndpoint&&) noexcept;
  ~FabricEndpoint();

  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes);
  // The message as pieces (GatherEndpoint): each piece copied once, into the registered mirror
  // of the peer's ring (the RMA source), as send() copies its bytes. InvalidArgument above
  // kGatherPiecesMax pieces or max_message_bytes.
  [[nodiscard]] Status send_gather(uint32_t session, GatherList pieces);
  // Payload bytes copied into the mirror (send, send_gather, write_with_imm); what the
  // provider then does with them (tcp;ofi_rxm: a socket send) is the caller's to count.
  uint64_t sent_copied_bytes() const;
  // Bytes copied in user space on the way in so far: fragments reassembled (a message larger
  // than a frame); whole messages are read in place, where the peer's provider wrote them.
  uint64_t received_copied_bytes() const;
  [[nodiscard]] Status write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes);
  // Zero-copy: the span is in the registered mirror of the peer's ring.
  // REQUIRES: bytes <= max_write_bytes(); no reservation outstanding.
  [[nodiscard]] Result<std::span<uint8_t>> reserve(size_t bytes);
  [[nodiscard]] Status commit_send(uint32_t session, size_t bytes);
  [[nodiscard]] Status commit_write(uint64_t epoch, uint32_t imm, size_t bytes);
  void cancel();
  [[nodiscard]] Status set_fence_epoch(uint64_t epoch);
  [[nodiscard]] Status flush();
  // REQUIRES: release() of the previous batch if it returned completions.
  [[nodiscard]] Result<size_t> poll(Completion* out, size_t max);
  void release();
  // Keeps `bytes` (a part of a message of the current poll batch) where they are in the
  // receive ring until the last handle of the returned pointer goes, past release(), close()
  // and the endpoint's end. Null, and the caller copies them, when they are not in the ring
  // (a message reassembled from fragments), empty or not 8-byte aligned, when keeping them
  // would hold more than three quarters of the ring back from the writer, or when
  // kKeepRecords regions are held.
  // REQUIRES: a batch is outstanding and `bytes` lie within one of its completions.
  std::shared_ptr<const uint64_t[]> keep_received(std::span<const uint8_t> bytes);
  // Receive-ring bytes the writer may not write yet because this side has not let them go:
  // from the oldest region still kept (or the last release) to the read cursor.
  uint64_t receive_held_bytes() const;
  uint64_t receive_ring_bytes() const;
  // Whether `p` points into the receive ring (kept bytes are there).
  bool in_receive_ring(const void* p) const;
  // Regions kept so far.
  uint64_t kept_regions() const;
  static constexpr uint32_t kKeepRecords = 4096;
  [[nodiscard]] Status wait(uint64_t timeout_ns);
  [[nodiscard]] Status inject_raw_for_test(std::span<const uint8_t> bytes);
  // Test hook: announces frames up to stream position `end` (kFrames) without writing any, as a
  // writer that ignores its credit would.
  [[nodiscard]] Status announce_for_test(uint64_t end);

  // BlockableEndpoint: wait_fd() is the CQ's FI_WAIT_FD (-1 before first use or without
  // one), liveness_fd() the rendezvous socket.
  int wait_fd() const;
  int liveness_fd() const;
  [[nodiscard]] bool prepare_to_block();
  void end_block() {}

  size_t max_message_bytes() const;
  size_t max_write_bytes() const;
  uint64_t fenced_drops() const;
  const std::string& provider() const;
  // Sends what is committed and the goodbye, waits (up to 1 s) for the provider to take it and
  // for the peer's goodbye in return (see the file comment), closes everything.
  void close();

  struct State;  // defined in fabric_transport.cc

 private:
  friend class FabricListener;
  explicit FabricEndpoint(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// Accepts FabricEndpoint::connect() on a loopback TCP port, or connect_local() on an
// abstract unix socket name.
class FabricListener {
 public:
  // Port 0 picks a free port (see port()). REQUIRES: host is a loopback address.
  [[nodiscard]] static Result<FabricListener> listen(const std::string& host, uint16_t port,
                                                     const EndpointOptions& options = {},
                                                     const FabricOptions& fabric = {});
  // On an abstract unix socket name (port() is 0); a dialer of another uid is refused at
  // accept() (PermissionDenied); IOError (EADDRINUSE) when the name is taken.
  [[nodiscard]] static Result<FabricListener> listen_local(const std::string& name,
                                                           const EndpointOptions& options = {},
                                                           const FabricOptions& fabric = {});
  FabricListener() = default;
  FabricListener(FabricListener&& other) noexcept { *this = std::move(other); }
  FabricListener& operator=(FabricListener&& other) noexcept;
  ~FabricListener();
  uint16_t port() const { return port_; }
  // Waits up to timeout_ms for a connection, then completes the handshake (bounded by
  // FabricOptions::handshake_timeout_ms). A bad hello fails this accept only.
  [[nodiscard]] Result<FabricEndpoint> accept(uint64_t timeout_ms = 5000);

 private:
  EndpointOptions options_;
  FabricOptions fabric_;
  int fd_ = -1;
  uint16_t port_ = 0;
  bool local_ = false;  // listen_local: check the dialer's uid
};

static_assert(TransportEndpoint<FabricEndpoint>);
static_assert(ZeroCopyEndpoint<FabricEndpoint>);
static_assert(BlockableEndpoint<FabricEndpoint>);
static_assert(GatherEndpoint<FabricEndpoint>);

}  // namespace shoal::net

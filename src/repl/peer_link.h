// PeerLink: one replication connection, over TCP or, between replicas on one host, shared
// memory (the leader's send is then one memcpy of the entry into the follower's receive ring:
// no socket copies, no loopback stack) or fabric (the same ring written by libfabric RMA:
// net/fabric_transport.h). WAN-shaped when its shape has a delay: the shaper holds each
// received message where the endpoint received it (net/wan_shaper.h), so a shaped link's
// entries are kept in its receive ring as an unshaped one's are. Without a delay it is the
// bare endpoint: no hold queue to pass through.
//
// Shared-memory sends become visible to the peer at flush() or at the next poll(); the owners
// poll every connection on each pass of their loop and flush after a batch of replies.
//
// Threads: owned by one thread, like the endpoint.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "src/net/fabric_transport.h"
#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"
#include "src/net/wan_shaper.h"
#include "src/repl/copy_count.h"
#include "src/runtime/endpoint_wake.h"

namespace shoal::repl {

// TCP buffers large enough that a message of max_message_bytes travels as one frame (frames
// carry at most a quarter of the buffer): no reassembly copy on the receiver (and, measured,
// fragmented multi-megabyte messages interleaved with small ones arrived corrupted at times:
// see docs/REPLICATION.md).
inline size_t tcp_buffer_bytes_for(size_t max_message_bytes) {
  return 4 * (max_message_bytes + (64u << 10));
}

// Shared-memory rings four times that capacity (a power of two, as rings need): sixteen of the
// largest messages in flight. A follower keeps received entries in its ring until they are
// chosen and replayed (Follower::shed_for_ring), and the leader keeps a quarter of the ring
// unchosen (PaxosOptions::pipeline_bytes): at the tcp buffer's size (16 MiB for TPC-C's 2 MiB
// messages) the bootstrap's and a lagging replay's entries outgrew it and were copied out
// (0.2-0.3 copies per replicated byte, docs/RESULTS.md); at 64 MiB none were. The cost: 128
// MiB of shared memory per follower link (both directions are this size), which is more than
// ShmEndpoint prefaults (the first lap page-faults). A tcp follower's receive ring
// (TcpEndpoint::keep_received) is this size too: 64 MiB, populated at connect; so is a fabric
// follower's registered ring (FabricEndpoint::keep_received), populated when it is mapped.
inline size_t shm_ring_bytes_for(size_t max_message_bytes) {
  return 4 * std::bit_ceil(tcp_buffer_bytes_for(max_message_bytes));
}

// The abstract unix-socket name a shard leader's replication listener takes for followers on
// its host: unique per (host, replication port), so several clusters and tests coexist.
inline std::string replication_shm_name(const std::string& host, uint16_t port) {
  return "shoal-repl-" + host + "-" + std::to_string(port);
}

// The abstract unix-socket name of the same listener's fabric rendezvous (LinkKind::kFabric).
inline std::string replication_fabric_name(const std::string& host, uint16_t port) {
  return "shoal-repl-fabric-" + host + "-" + std::to_string(port);
}

// How followers reach their leader: TCP always works; shared memory and fabric (loopback
// software providers until an RDMA NIC) only on one host.
enum class LinkKind : uint8_t { kTcp, kShm, kFabric };

using RawEndpoint = std::variant<net::TcpEndpoint, net::ShmEndpoint, net::FabricEndpoint>;

class PeerLink {
  // The endpoints whose receive ring keeps received bytes (keep_received): shm, tcp and
  // fabric, and a WAN shaper over one of them (it holds each message in that ring).
  template <typename E>
  static constexpr bool kKeeps = net::KeepingEndpoint<E>;

 public:
  PeerLink(RawEndpoint ep, net::LinkShape shape) {
    const bool shaped = shape.one_way_delay_ns != 0 || shape.jitter_ns != 0;
    std::visit(
        [&](auto&& raw) {
          using E = std::decay_t<decltype(raw)>;
          if (shaped) {
            ep_.template emplace<net::WanShaped<E>>(std::move(raw), shape);
          } else {
            ep_.template emplace<E>(std::move(raw));
          }
        },
        ep);
  }
  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes) {
    return std::visit([&](auto& e) { return e.send(session, bytes); }, ep_);
  }
  // A message as pieces (net::GatherEndpoint): shm copies them straight into the peer's ring,
  // tcp hands large frames' pieces to sendmsg, fabric copies them into its mirror.
  [[nodiscard]] Status send_gather(uint32_t session, net::GatherList pieces) {
    return std::visit([&](auto& e) { return e.send_gather(session, pieces); }, ep_);
  }
  // Bytes the endpoint copied in user space on their way in so far (count_receive); 0 for a
  // transport that reads every message in place.
  uint64_t received_copied_bytes() const {
    return std::visit(
        [](const auto& e) -> uint64_t {
          if constexpr (requires { e.received_copied_bytes(); }) {
            return e.received_copied_bytes();
          } else {
            return 0;
          }
        },
        ep_);
  }
  // Payload bytes the endpoint copied in user space on their way out so far (count_send).
  uint64_t sent_copied_bytes() const {
    return std::visit([](const auto& e) { return e.sent_copied_bytes(); }, ep_);
  }
  [[nodiscard]] Status flush() {
    return std::visit([](auto& e) { return e.flush(); }, ep_);
  }
  [[nodiscard]] Result<size_t> poll(net::Completion* out, size_t max) {
    return std::visit([&](auto& e) { return e.poll(out, max); }, ep_);
  }
  void release() {
    std::visit([](auto& e) { e.release(); }, ep_);
  }
  // An event loop's sleep (rt::PollerWake): false means input is pending, do not sleep;
  // true fills fds (the doorbell and, for shared memory, the socket whose hang-up reports
  // the peer's death) and owes an end_block() after the sleep.
  [[nodiscard]] bool arm(int fds[rt::kMaxPollerFds]) {
    return std::visit([&](auto& e) { return rt::arm_endpoint(e, fds); }, ep_);
  }
  void end_block() {
    std::visit([](auto& e) { e.end_block(); }, ep_);
  }
  uint64_t next_due_ns() const {
    return std::visit(
        [](const auto& e) -> uint64_t {
          if constexpr (requires { e.next_due_ns(); }) {
            return e.next_due_ns();
          } else {
            return UINT64_MAX;
          }
        },
        ep_);
  }
  void close() {
    std::visit([](auto& e) { e.close(); }, ep_);
  }
  // Keeps received bytes where they arrived past release(): shared memory's receive ring
  // (ShmEndpoint::keep_received), tcp's (TcpEndpoint::keep_received) or fabric's registered
  // ring the leader's RMA writes fill (FabricEndpoint::keep_received), shaped or not (a
  // shaped link's message stays where the shaper held it: WanShaped::keep_received). Null:
  // the caller copies them.
  std::shared_ptr<const uint64_t[]> keep_received(std::span<const uint8_t> bytes) {
    return std::visit(
        [&](auto& e) -> std::shared_ptr<const uint64_t[]> {
          if constexpr (kKeeps<std::decay_t<decltype(e)>>) {
            return e.keep_received(bytes);
          } else {
            return nullptr;
          }
        },
        ep_);
  }
  // Whether `bytes` were kept in this link's receive ring.
  bool in_receive_ring(std::span<const std::byte> bytes) const {
    return std::visit(
        [&](const auto& e) {
          if constexpr (kKeeps<std::decay_t<decltype(e)>>) {
            return !bytes.empty() && e.in_receive_ring(bytes.data());
          } else {
            return false;
          }
        },
        ep_);
  }
  // Whether kept bytes hold back more than half the receive ring from the peer: the owner
  // should let go of what it can (a follower sheds its retained chosen slots).
  bool receive_short() const {
    return std::visit(
        [](const auto& e) {
          if constexpr (kKeeps<std::decay_t<decltype(e)>>) {
            return e.receive_held_bytes() > e.receive_ring_bytes() / 2;
          } else {
            return false;
          }
        },
        ep_);
  }
  // Counts (copy_count.h) what a Paxos message of `bytes` cost on this link, of which the
  // endpoint copied `copied_bytes` in user space (sent_copied_bytes() across the send): on
  // its way out, shared memory copies it into the peer's ring; tcp copies a frame below 16 KiB
  // into its send buffer, and fabric every frame into its registered mirror (send_buffer);
  // a socket copies it in the kernel (fabric too: its software providers here run over
  // sockets; an RDMA NIC would DMA it from the mirror); on its way in, a socket copied it out
  // in the kernel, a ring is read in place, and a WAN shaper holds every received message
  // where it arrived, or a copy of it where the inner endpoint cannot keep it (counted as the
  // shaper copies it, like the endpoint's own copies below).
  void count_send(size_t bytes, size_t copied_bytes) const {
    if (is_shm()) {
      count_copy(CopyHop::kRingWrite, copied_bytes);
      return;
    }
    if (copied_bytes != 0) count_copy(CopyHop::kSendBuffer, copied_bytes);
    count_copy(CopyHop::kSocketSend, bytes);
  }
  // Also counts, once, what the endpoint copied in user space on the way in since the last
  // call (reassembled fragments, tcp's receive-ring growth): those bytes may belong to
  // the next messages or to control frames, so this errs towards counting too much.
  void count_receive(size_t bytes) const {
    if (!is_shm()) count_copy(CopyHop::kSocketReceive, bytes);
    const uint64_t shaper_copied = shaper_copied_bytes();
    if (shaper_copied != shaper_copied_counted_) {
      count_copy(CopyHop::kShaperHold, shaper_copied - shaper_copied_counted_);
      shaper_copied_counted_ = shaper_copied;
    }
    const uint64_t copied = received_copied_bytes();
    if (copied != received_copied_counted_) {
      count_copy(CopyHop::kReceiveCopy, copied - received_copied_counted_);
      received_copied_counted_ = copied;
    }
  }

 private:
  bool is_shm() const {
    return std::holds_alternative<net::ShmEndpoint>(ep_) ||
           std::holds_alternative<net::WanShaped<net::ShmEndpoint>>(ep_);
  }
  // Bytes a WAN shaper copied into its hold queue so far (0 unshaped).
  uint64_t shaper_copied_bytes() const {
    return std::visit(
        [](const auto& e) -> uint64_t {
          if constexpr (requires { e.copied_bytes(); }) {
            return e.copied_bytes();
          } else {
            return 0;
          }
        },
        ep_);
  }

  std::variant<net::TcpEndpoint, net::WanShaped<net::TcpEndpoint>, net::ShmEndpoint,
               net::WanShaped<net::ShmEndpoint>, net::FabricEndpoint,
               net::WanShaped<net::FabricEndpoint>>
      ep_;
  mutable uint64_t received_copied_counted_ = 0;  // received_copied_bytes() counted so far
  mutable uint64_t shaper_copied_counted_ = 0;    // shaper_copied_bytes() counted so far
};

}  // namespace shoal::repl

// PeerLink: one replication connection (TCP), WAN-shaped when its shape has a delay. Without
// a delay it is the bare endpoint: the shaper copies every received message into its hold
// queue, a copy a 100+ MB/s log stream should not pay for nothing.
//
// Threads: owned by one thread, like the endpoint.
#pragma once

#include <optional>

#include "src/net/tcp_transport.h"
#include "src/net/wan_shaper.h"

namespace shoal::repl {

// TCP buffers large enough that a message of max_message_bytes travels as one frame (frames
// carry at most a quarter of the buffer): no reassembly copy on the receiver (and, measured,
// fragmented multi-megabyte messages interleaved with small ones arrived corrupted at times:
// see docs/REPLICATION.md).
inline size_t tcp_buffer_bytes_for(size_t max_message_bytes) {
  return 4 * (max_message_bytes + (64u << 10));
}

class PeerLink {
 public:
  PeerLink(net::TcpEndpoint ep, net::LinkShape shape) {
    if (shape.one_way_delay_ns == 0 && shape.jitter_ns == 0) {
      raw_.emplace(std::move(ep));
    } else {
      shaped_.emplace(std::move(ep), shape);
    }
  }
  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes) {
    return raw_ ? raw_->send(session, bytes) : shaped_->send(session, bytes);
  }
  [[nodiscard]] Status flush() { return raw_ ? raw_->flush() : shaped_->flush(); }
  [[nodiscard]] Result<size_t> poll(net::Completion* out, size_t max) {
    return raw_ ? raw_->poll(out, max) : shaped_->poll(out, max);
  }
  void release() { raw_ ? raw_->release() : shaped_->release(); }
  [[nodiscard]] bool prepare_to_block() {
    return raw_ ? raw_->prepare_to_block() : shaped_->prepare_to_block();
  }
  void end_block() { raw_ ? raw_->end_block() : shaped_->end_block(); }
  int wait_fd() const { return raw_ ? raw_->wait_fd() : shaped_->wait_fd(); }
  uint64_t next_due_ns() const { return raw_ ? UINT64_MAX : shaped_->next_due_ns(); }
  void close() { raw_ ? raw_->close() : shaped_->close(); }

 private:
  std::optional<net::TcpEndpoint> raw_;
  std::optional<net::WanShaped<net::TcpEndpoint>> shaped_;
};

}  // namespace shoal::repl

// RPC wire header and message buffers (shared by every RpcEndpoint<E>; see rpc.h).
//
// RPC HEADER: 24 bytes in front of every RPC payload, little-endian, inside one transport
// message (the transport's own 16-byte frame header and its session tag come on top):
//
//   offset size field
//   0      2    magic          0x5352 ("SR")
//   2      1    version        1
//   3      1    kind           1 request, 2 response
//   4      2    method         handler id (< RpcOptions::max_methods)
//   6      1    code           response: shoal::Code of the handler's Status; request: 0
//   7      1    flags          bit 0: retransmission (diagnostics only)
//   8      4    session        logical session (also the transport message's session tag)
//   12     4    payload_bytes  must equal message length - 24
//   16     8    rpc_id         per-session sequence number, 1, 2, 3, ... (window + dedup key)
//
// MsgBuffer: an owning byte buffer with kRpcHeaderBytes of headroom in front of the payload,
// so a sender writes its payload in place and the RPC layer writes the header in front and
// hands header+payload to the transport as one span: no copy to assemble a message.
// Threads: buffers are plain values; pools are per RpcEndpoint (one thread).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shoal/status.h"

namespace shoal::rt {

inline constexpr size_t kRpcHeaderBytes = 24;
inline constexpr uint16_t kRpcMagic = 0x5352;
inline constexpr uint8_t kRpcVersion = 1;
inline constexpr uint8_t kRpcFlagRetransmit = 1;

enum class RpcKind : uint8_t { kRequest = 1, kResponse = 2 };

struct RpcHeader {
  RpcKind kind = RpcKind::kRequest;
  uint8_t flags = 0;
  uint16_t method = 0;
  Code code = Code::kOk;
  uint32_t session = 0;
  uint32_t payload_bytes = 0;
  uint64_t rpc_id = 0;
};

static_assert(std::endian::native == std::endian::little, "big-endian hosts need byte swaps");

// REQUIRES: dst has kRpcHeaderBytes. Inline, like the decoder: both run on every message.
inline void encode_rpc_header(const RpcHeader& h, uint8_t* dst) {
  const uint32_t word0 = uint32_t{kRpcMagic} | uint32_t{kRpcVersion} << 16 |
                         uint32_t{static_cast<uint8_t>(h.kind)} << 24;
  const uint32_t word1 =
      uint32_t{h.method} | uint32_t{static_cast<uint8_t>(h.code)} << 16 | uint32_t{h.flags} << 24;
  std::memcpy(dst + 0, &word0, 4);
  std::memcpy(dst + 4, &word1, 4);
  std::memcpy(dst + 8, &h.session, 4);
  std::memcpy(dst + 12, &h.payload_bytes, 4);
  std::memcpy(dst + 16, &h.rpc_id, 8);
}
// The data-path decoder: false when the magic, version, kind, code or length is wrong (then
// decode_rpc_header() says which). Never reads past msg.
[[nodiscard]] inline bool decode_rpc_header_fast(std::span<const uint8_t> msg, RpcHeader* out) {
  if (msg.size() < kRpcHeaderBytes) return false;
  const uint8_t* p = msg.data();
  uint32_t word0, word1;
  std::memcpy(&word0, p, 4);
  std::memcpy(&word1, p + 4, 4);
  const auto kind = static_cast<uint8_t>(word0 >> 24);
  const auto code = static_cast<uint8_t>(word1 >> 16);
  if ((word0 & 0xffffff) != (uint32_t{kRpcMagic} | uint32_t{kRpcVersion} << 16) ||
      (kind != static_cast<uint8_t>(RpcKind::kRequest) &&
       kind != static_cast<uint8_t>(RpcKind::kResponse)) ||
      code > static_cast<uint8_t>(kLastCode)) {
    return false;
  }
  out->kind = static_cast<RpcKind>(kind);
  out->method = static_cast<uint16_t>(word1);
  out->code = static_cast<Code>(code);
  out->flags = static_cast<uint8_t>(word1 >> 24);
  std::memcpy(&out->session, p + 8, 4);
  std::memcpy(&out->payload_bytes, p + 12, 4);
  std::memcpy(&out->rpc_id, p + 16, 8);
  return out->payload_bytes == msg.size() - kRpcHeaderBytes;
}
// Corruption (saying what is wrong) when the magic, version, kind, code or length is wrong.
// Never reads past msg.
[[nodiscard]] Result<RpcHeader> decode_rpc_header(std::span<const uint8_t> msg);

class MsgBuffer {
 public:
  MsgBuffer() = default;
  explicit MsgBuffer(size_t payload_capacity) { reserve(payload_capacity); }
  MsgBuffer(MsgBuffer&& o) noexcept
      : data_(std::move(o.data_)),
        cap_(std::exchange(o.cap_, 0)),
        size_(std::exchange(o.size_, 0)) {}
  MsgBuffer& operator=(MsgBuffer&& o) noexcept {
    data_ = std::move(o.data_);
    cap_ = std::exchange(o.cap_, 0);
    size_ = std::exchange(o.size_, 0);
    return *this;
  }

  size_t size() const { return size_; }
  size_t capacity() const { return cap_; }
  std::span<uint8_t> payload() { return {data_.get() + kRpcHeaderBytes, size_}; }
  std::span<const uint8_t> payload() const { return {data_.get() + kRpcHeaderBytes, size_}; }
  // Sets the payload size, growing the storage if needed (an allocation: cold once warm).
  void resize(size_t n) {
    reserve(n);
    size_ = n;
  }
  void assign(std::span<const uint8_t> bytes) {
    resize(bytes.size());
    if (!bytes.empty()) std::memcpy(data_.get() + kRpcHeaderBytes, bytes.data(), bytes.size());
  }
  // The headroom in front of the payload. REQUIRES: storage exists (any resize/reserve).
  uint8_t* header() { return data_.get(); }
  // Header + payload, as handed to the transport.
  std::span<const uint8_t> wire() const { return {data_.get(), kRpcHeaderBytes + size_}; }
  // Inline: a pooled buffer almost always has room already, and this runs several times per RPC.
  void reserve(size_t payload_capacity) {
    if (data_ == nullptr || payload_capacity > cap_) [[unlikely]]
      grow(payload_capacity);
  }

 private:
  void grow(size_t payload_capacity);

  std::unique_ptr<uint8_t[]> data_;
  size_t cap_ = 0;   // payload capacity (storage is cap_ + kRpcHeaderBytes)
  size_t size_ = 0;  // payload bytes
};

// A bounded free list of buffers: steady-state RPC traffic reuses storage instead of
// allocating. Owned by one thread.
class BufferPool {
 public:
  explicit BufferPool(size_t max_pooled) : max_pooled_(max_pooled) { free_.reserve(max_pooled); }
  MsgBuffer get(size_t payload_bytes) {
    MsgBuffer b;
    if (!free_.empty()) {
      b = std::move(free_.back());
      free_.pop_back();
    }
    b.resize(payload_bytes);
    return b;
  }
  // Buffers over kPooledBytesMax go back to the heap: a message carrying a large value (the
  // Redis front end's 1 MiB strings) must not pin that much in each of max_pooled slots.
  static constexpr size_t kPooledBytesMax = size_t{64} << 10;
  void put(MsgBuffer b) {
    if (b.capacity() != 0 && b.capacity() <= kPooledBytesMax && free_.size() < max_pooled_) {
      free_.push_back(std::move(b));
    }
  }

 private:
  size_t max_pooled_;
  std::vector<MsgBuffer> free_;
};

}  // namespace shoal::rt

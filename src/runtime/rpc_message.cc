#include "src/runtime/rpc_message.h"

#include <algorithm>

#include <fmt/format.h>

namespace shoal::rt {

namespace {
template <typename T>
T get_le(const uint8_t* src) {
  T v;
  std::memcpy(&v, src, sizeof(v));
  return v;
}
}  // namespace

Result<RpcHeader> decode_rpc_header(std::span<const uint8_t> msg) {
  RpcHeader fast;
  if (decode_rpc_header_fast(msg, &fast)) return fast;
  // Cold: say what is wrong.
  if (msg.size() < kRpcHeaderBytes) {
    return Status::Corruption(fmt::format("rpc message of {} bytes < header", msg.size()));
  }
  const uint8_t* p = msg.data();
  if (get_le<uint16_t>(p) != kRpcMagic || p[2] != kRpcVersion) {
    return Status::Corruption("rpc header: bad magic or version");
  }
  RpcHeader h;
  if (p[3] != static_cast<uint8_t>(RpcKind::kRequest) &&
      p[3] != static_cast<uint8_t>(RpcKind::kResponse)) {
    return Status::Corruption(fmt::format("rpc header: unknown kind {}", p[3]));
  }
  h.kind = static_cast<RpcKind>(p[3]);
  h.method = get_le<uint16_t>(p + 4);
  if (p[6] > static_cast<uint8_t>(kLastCode)) {
    return Status::Corruption(fmt::format("rpc header: unknown status code {}", p[6]));
  }
  h.code = static_cast<Code>(p[6]);
  h.flags = p[7];
  h.session = get_le<uint32_t>(p + 8);
  h.payload_bytes = get_le<uint32_t>(p + 12);
  h.rpc_id = get_le<uint64_t>(p + 16);
  if (h.payload_bytes != msg.size() - kRpcHeaderBytes) {
    return Status::Corruption(fmt::format("rpc header: payload_bytes {} but {} bytes follow",
                                          h.payload_bytes, msg.size() - kRpcHeaderBytes));
  }
  return h;
}

void MsgBuffer::grow(size_t payload_capacity) {
  // Grow geometrically so a buffer reused for growing messages settles quickly.
  const size_t cap = std::max({payload_capacity, 2 * cap_, size_t{64}});
  auto bigger = std::make_unique<uint8_t[]>(cap + kRpcHeaderBytes);
  if (data_ != nullptr) std::memcpy(bigger.get(), data_.get(), kRpcHeaderBytes + size_);
  data_ = std::move(bigger);
  cap_ = cap;
}

}  // namespace shoal::rt

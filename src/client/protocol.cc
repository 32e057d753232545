#include "src/client/protocol.h"

#include <bit>

#include <fmt/format.h>

#include "src/base/constant_time.h"

namespace shoal::client::proto {

static_assert(std::endian::native == std::endian::little,
              "the client protocol's integers are copied as little-endian");

const char* op_name(uint8_t op) {
  switch (static_cast<Op>(op)) {
    case Op::kBegin:
      return "begin";
    case Op::kGet:
      return "get";
    case Op::kPut:
      return "put";
    case Op::kDel:
      return "del";
    case Op::kScan:
      return "scan";
    case Op::kCommit:
      return "commit";
    case Op::kAbort:
      return "abort";
    case Op::kGetOne:
      return "single-key get";
    case Op::kPutOne:
      return "single-key put";
    case Op::kDelOne:
      return "single-key del";
  }
  return "unknown";
}

Result<FrameView> next_frame(std::string_view buf, uint32_t max_frame_bytes) {
  FrameView f;
  if (buf.size() < kLengthBytes) return f;
  uint32_t len = 0;
  std::memcpy(&len, buf.data(), sizeof(len));
  if (len > max_frame_bytes) {
    return Status::InvalidArgument(
        fmt::format("frame of {} bytes exceeds the maximum of {}", len, max_frame_bytes));
  }
  if (len < kFrameMinBytes) {
    return Status::InvalidArgument(
        fmt::format("frame of {} bytes is shorter than its header ({})", len, kFrameMinBytes));
  }
  if (buf.size() - kLengthBytes < len) return f;
  FrameReader r(buf.substr(kLengthBytes, kFrameMinBytes));
  f.id = r.u64();
  f.op_or_code = r.u8();
  f.body = buf.substr(kLengthBytes + kFrameMinBytes, len - kFrameMinBytes);
  f.total_bytes = kLengthBytes + len;
  return f;
}

std::string hello(uint16_t version, std::string_view password) {
  SHOAL_ASSERT(password.size() <= kMaxPasswordBytes, "password of %zu bytes", password.size());
  std::string out(kMagic, sizeof(kMagic));
  FrameWriter w(&out);
  w.u16(version);
  w.u16(version >= 2 ? static_cast<uint16_t>(password.size()) : 0);
  if (version >= 2) out.append(password);
  return out;
}

Result<Hello> parse_hello(std::string_view buf) {
  Hello h;
  if (buf.size() < kHelloBytes) return h;
  if (std::memcmp(buf.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::InvalidArgument(
        "bad magic: not a Shoal client hello (expected \"SHLC\", docs/CLIENT.md)");
  }
  FrameReader r(buf.substr(sizeof(kMagic), kHelloBytes - sizeof(kMagic)));
  h.version = r.u16();
  const uint16_t password_bytes = r.u16();
  if (h.version < kMinVersion || h.version > kVersion) {
    return Status::InvalidArgument(
        fmt::format("unsupported client protocol version {} (this server speaks {} to {})",
                    h.version, kMinVersion, kVersion));
  }
  if (h.version == 1) {
    h.bytes = kHelloBytes;
    return h;
  }
  if (password_bytes > kMaxPasswordBytes) {
    return Status::InvalidArgument(fmt::format("hello: a password of {} bytes (at most {})",
                                               password_bytes, kMaxPasswordBytes));
  }
  if (buf.size() < kHelloBytes + password_bytes) return Hello{};
  h.password = buf.substr(kHelloBytes, password_bytes);
  h.bytes = kHelloBytes + password_bytes;
  return h;
}

Status check_password(const Hello& hello, std::string_view required) {
  if (required.empty()) return Status::Ok();
  if (hello.version < 2) {
    return Status::PermissionDenied(
        "this server asks for a password, which client protocol version 1 cannot carry "
        "(update the client library)");
  }
  if (hello.password.empty()) {
    return Status::PermissionDenied(
        "this server asks for a password (ClientOptions::password, `shoal kv --password-file`)");
  }
  if (!constant_time_equal(required, hello.password)) {
    return Status::PermissionDenied("wrong password");
  }
  return Status::Ok();
}

Status check_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument(
        fmt::format("key of {} bytes: keys are 1 to {} bytes", key.size(), kMaxKeyBytes));
  }
  return Status::Ok();
}

Status check_value(std::string_view value) {
  if (value.size() > kMaxValueBytes) {
    return Status::InvalidArgument(fmt::format("value of {} bytes: values are at most {} bytes",
                                               value.size(), kMaxValueBytes));
  }
  return Status::Ok();
}

}  // namespace shoal::client::proto

// The Shoal client protocol's wire format (docs/CLIENT.md): the bytes between the client
// library (include/shoal/client.h) and a server's client port (src/server/client_connection.h).
//
// A connection opens with the client's hello; then both sides send frames. Every integer is
// little-endian.
//   hello v2 = "SHLC" | u16 2 | u16 password length P (0..kMaxPasswordBytes) | P bytes
//   hello v1 = "SHLC" | u16 1 | u16 (ignored)          (no password: accepted only by a
//              server that asks none, so that clients older than the password keep working)
// A server with a password ([cluster] resp_password_file, the Redis port's) refuses a hello
// without it or with another with a PermissionDenied error frame and closes: nothing else a
// connection sends is executed before its hello was accepted. The password travels in clear, as
// Redis's AUTH: the port authenticates, it does not encrypt.
//   frame   = u32 length (of what follows) | u64 request id | u8 opcode (request) or status
//             code (reply, shoal::Code) | body
//   string  = u32 length | bytes
// The server answers the hello with a reply frame of id 0: kOk and (u16 version: the
// hello's, u32 max request frame bytes, u32 max replies held per connection), or an error
// (a wrong magic, version or password) after which it closes. Replies come in request order
// and echo the request's id. An error reply's body is a string (the message); an ok reply's
// body depends on the opcode (see Op). Limits: a request frame is at most
// kMaxRequestFrameBytes, a reply frame at most kMaxReplyFrameBytes; an oversized or malformed
// frame gets an error reply and the connection closes; an unknown opcode gets an error reply
// and the connection goes on.
//
// Threads: plain functions and value types; FrameWriter/FrameReader belong to their caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "shoal/status.h"

namespace shoal::client::proto {

inline constexpr char kMagic[4] = {'S', 'H', 'L', 'C'};
// What this library sends, and the oldest hello a server accepts.
inline constexpr uint16_t kVersion = 2;
inline constexpr uint16_t kMinVersion = 1;
// The hello's fixed part (v2's password follows it).
inline constexpr size_t kHelloBytes = 8;
// As the config's password files (cluster::kPasswordBytesMax).
inline constexpr size_t kMaxPasswordBytes = 4096;
inline constexpr size_t kLengthBytes = 4;
// id and opcode/status: the smallest frame after its length field.
inline constexpr uint32_t kFrameMinBytes = 9;
inline constexpr size_t kMaxKeyBytes = 8 * 1024;
inline constexpr size_t kMaxValueBytes = size_t{1} << 20;
// A put of the largest key and value, with room for the fields around them.
inline constexpr uint32_t kMaxRequestFrameBytes = (1u << 20) + (16u << 10);
// A scan reply stops adding entries once it holds kScanReplyBudgetBytes; its batches are
// at most kScanBatchMax entries of at most a key and a value each, so it stays below this.
inline constexpr size_t kScanReplyBudgetBytes = size_t{1} << 20;
inline constexpr uint32_t kScanBatchMax = 16;
inline constexpr uint32_t kMaxReplyFrameBytes = 24u << 20;
inline constexpr uint32_t kScanLimitMax = 100'000;
// Replies a server holds per connection waiting for durability; beyond, it stops reading the
// connection until they leave (the bound on requests in flight).
inline constexpr uint32_t kMaxHeldReplies = 256;

// Request opcodes and their bodies (-> the ok reply's body).
enum class Op : uint8_t {
  kBegin = 1,  // (empty) -> (empty). Error when a transaction is open.
  kGet = 2,    // key -> value; NotFound (empty message) when absent
  kPut = 3,    // key, value -> (empty)
  kDel = 4,    // key -> (empty); deleting an absent key is not an error
  // start, u8 start_exclusive, end (empty: unbounded), u32 limit -> u32 n, n x (key, value),
  // u8 more (1: stopped at the reply's byte budget; go on after the last key)
  kScan = 5,
  kCommit = 6,  // u8 durability -> u8 durable (1: the watermark covers it)
  kAbort = 7,   // (empty) -> (empty); a no-op without a transaction
  // Single-key operations, each one transaction (retried on conflicts by the server); they
  // run beside an open transaction, not in it.
  kGetOne = 8,   // u8 durability, key -> value, u8 durable; NotFound when absent
  kPutOne = 9,   // u8 durability, key, value -> u8 durable
  kDelOne = 10,  // u8 durability, key -> u8 durable
};
inline constexpr uint8_t kOpMax = 10;
const char* op_name(uint8_t op);

enum class Durability : uint8_t { kDurable = 0, kSpeculative = 1 };

// Appends frames to a string: begin(), fields, end() (which fills in the length).
class FrameWriter {
 public:
  explicit FrameWriter(std::string* out) : out_(out) {}
  // A frame's header: the id and the opcode (request) or status code (reply).
  void begin(uint64_t id, uint8_t op_or_code) {
    start_ = out_->size();
    u32(0);
    u64(id);
    u8(op_or_code);
  }
  void u8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void u16(uint16_t v) { raw(&v, sizeof(v)); }
  void u32(uint32_t v) { raw(&v, sizeof(v)); }
  void u64(uint64_t v) { raw(&v, sizeof(v)); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out_->append(s);
  }
  // Returns the frame's length after its length field.
  uint32_t end() {
    const auto n = static_cast<uint32_t>(out_->size() - start_ - kLengthBytes);
    std::memcpy(out_->data() + start_, &n, sizeof(n));
    return n;
  }

 private:
  // The protocol is little-endian, as every host this builds for (static_assert in .cc).
  void raw(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }
  std::string* out_;
  size_t start_ = 0;
};

// Reads fields of one frame's body; any read past its end fails (ok() false) and yields
// zeros / empty strings, so a caller checks ok() once after reading every field.
class FrameReader {
 public:
  explicit FrameReader(std::string_view body) : p_(body) {}
  uint8_t u8() { return static_cast<uint8_t>(fixed(1)); }
  uint16_t u16() { return static_cast<uint16_t>(fixed(2)); }
  uint32_t u32() { return static_cast<uint32_t>(fixed(4)); }
  uint64_t u64() { return fixed(8); }
  std::string_view str() {
    const uint32_t n = u32();
    if (!ok_ || n > p_.size()) {
      ok_ = false;
      return {};
    }
    std::string_view s = p_.substr(0, n);
    p_.remove_prefix(n);
    return s;
  }
  bool ok() const { return ok_; }
  // Every field read and nothing left over.
  bool done() const { return ok_ && p_.empty(); }

 private:
  uint64_t fixed(size_t n) {
    if (!ok_ || p_.size() < n) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    std::memcpy(&v, p_.data(), n);
    p_.remove_prefix(n);
    return v;
  }
  std::string_view p_;
  bool ok_ = true;
};

struct FrameView {
  uint64_t id = 0;
  uint8_t op_or_code = 0;
  std::string_view body;
  size_t total_bytes = 0;  // with the length field: what to consume
};

// The first frame of `buf`: Ok with total_bytes 0 when it is not complete yet;
// InvalidArgument when its length is over `max_frame_bytes` or under kFrameMinBytes.
[[nodiscard]] Result<FrameView> next_frame(std::string_view buf, uint32_t max_frame_bytes);

// The client's hello (version 1 carries no password; tests send it as an old client would).
// REQUIRES: password.size() <= kMaxPasswordBytes.
std::string hello(uint16_t version = kVersion, std::string_view password = {});

struct Hello {
  uint16_t version = 0;
  std::string_view password;  // into the parsed bytes; empty for version 1
  size_t bytes = 0;           // the hello's length; 0: not complete yet
};
// The hello at the start of `buf`: bytes 0 while it is incomplete; InvalidArgument naming what
// is wrong (magic, version, password length) as soon as the bytes show it.
[[nodiscard]] Result<Hello> parse_hello(std::string_view buf);
// Whether a hello may proceed on a server whose password is `required` (empty: none asked):
// PermissionDenied saying whether the password is missing or wrong. The comparison takes the
// same time wherever the passwords differ.
[[nodiscard]] Status check_password(const Hello& hello, std::string_view required);

// A key's and a value's size against the byte tables' limits (InvalidArgument saying which).
[[nodiscard]] Status check_key(std::string_view key);
[[nodiscard]] Status check_value(std::string_view value);

}  // namespace shoal::client::proto

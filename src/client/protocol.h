// The Shoal client protocol's wire format (docs/CLIENT.md): the bytes between the client
// library (include/shoal/client.h) and a server's client port (src/server/client_connection.h).
//
// A connection opens with the client's 8-byte hello (magic "SHLC", version u16, zero u16);
// then both sides send frames. Every integer is little-endian.
//   frame   = u32 length (of what follows) | u64 request id | u8 opcode (request) or status
//             code (reply, shoal::Code) | body
//   string  = u32 length | bytes
// The server answers the hello with a reply frame of id 0: kOk and (u16 version, u32
// max request frame bytes, u32 max replies held per connection), or an error (a wrong magic
// or version) after which it closes. Replies come in request order and echo the request's id.
// An error reply's body is a string (the message); an ok reply's body depends on the opcode
// (see Op). Limits: a request frame is at most kMaxRequestFrameBytes, a reply frame at most
// kMaxReplyFrameBytes; an oversized or malformed frame gets an error reply and the connection
// closes; an unknown opcode gets an error reply and the connection goes on.
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
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kHelloBytes = 8;
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

// The client's hello.
std::string hello(uint16_t version = kVersion);
// Checks a hello's 8 bytes: InvalidArgument naming what is wrong.
[[nodiscard]] Status check_hello(std::string_view bytes);

// A key's and a value's size against the byte tables' limits (InvalidArgument saying which).
[[nodiscard]] Status check_key(std::string_view key);
[[nodiscard]] Status check_value(std::string_view value);

}  // namespace shoal::client::proto

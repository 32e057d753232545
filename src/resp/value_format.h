// The encoding of a Redis string value as a stored value (what KvTxn::put receives):
//
//   byte 0       format: 0x00 plain, 0x01 with expiry
//   bytes 1..8   (format 0x01 only) absolute expiry, Unix time in milliseconds, little-endian
//   rest         the string's bytes (0 to kMaxValueBytes)
//
// A key whose expiry is at or before the current time (Env::wall_us() / 1000 of the server
// running the command) is absent to every command; its record stays until a write replaces or
// deletes it (no background reclamation yet). Other format bytes are reserved for other Redis
// types (a command meeting one replies WRONGTYPE); today they are Corruption.
// Threads: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shoal/status.h"
#include "src/resp/kv_backend.h"

namespace shoal::resp {

inline constexpr uint8_t kFormatPlain = 0x00;
inline constexpr uint8_t kFormatExpiring = 0x01;
inline constexpr size_t kMaxStoredValueBytes = kMaxValueBytes + 9;
inline constexpr uint64_t kNoExpiry = 0;

struct StoredString {
  std::string_view payload;        // views the stored bytes
  uint64_t expiry_ms = kNoExpiry;  // Unix ms, or kNoExpiry
  bool expired(uint64_t now_ms) const { return expiry_ms != kNoExpiry && expiry_ms <= now_ms; }
};

// Replaces *out with the encoding of payload (expiry_ms == kNoExpiry: plain).
void encode_string(std::string_view payload, uint64_t expiry_ms, std::string* out);
// Decodes a stored value; the result views `stored`. Corruption when malformed.
[[nodiscard]] Result<StoredString> decode_string(std::string_view stored);

}  // namespace shoal::resp

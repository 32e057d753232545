#include "src/resp/value_format.h"

namespace shoal::resp {

void encode_string(std::string_view payload, uint64_t expiry_ms, std::string* out) {
  out->clear();
  if (expiry_ms == kNoExpiry) {
    out->reserve(payload.size() + 1);
    out->push_back(static_cast<char>(kFormatPlain));
  } else {
    out->reserve(payload.size() + 9);
    out->push_back(static_cast<char>(kFormatExpiring));
    for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(expiry_ms >> (8 * i)));
  }
  out->append(payload);
}

Result<StoredString> decode_string(std::string_view stored) {
  if (stored.empty()) return Status::Corruption("stored value is empty");
  const auto format = static_cast<uint8_t>(stored[0]);
  if (format == kFormatPlain) return StoredString{stored.substr(1), kNoExpiry};
  if (format != kFormatExpiring) return Status::Corruption("stored value has an unknown format");
  if (stored.size() < 9) return Status::Corruption("stored value's expiry is truncated");
  uint64_t expiry = 0;
  for (int i = 0; i < 8; ++i) expiry |= uint64_t{static_cast<uint8_t>(stored[1 + i])} << (8 * i);
  if (expiry == kNoExpiry) return Status::Corruption("stored value's expiry is zero");
  return StoredString{stored.substr(9), expiry};
}

}  // namespace shoal::resp

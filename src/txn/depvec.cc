#include "src/txn/depvec.h"

#include <cstring>

#include <fmt/format.h>

#include "src/base/assert.h"

namespace shoal::txn {

uint32_t compact_entries(const DepVec& v, const DepBase& base, uint32_t skip_shard,
                         std::vector<DepEntry>* out) {
  out->clear();
  uint32_t omitted = 0;
  for (const DepEntry& e : v.entries()) {
    if (e.shard == skip_shard) continue;
    if (base.covers(e.shard, e.ts)) {
      ++omitted;
    } else {
      out->push_back(e);
    }
  }
  return omitted;
}

size_t dep_wire_entries(const DepVec& v, const DepBase& base) {
  size_t n = 0;
  for (const DepEntry& e : v.entries()) n += base.covers(e.shard, e.ts) ? 0 : 1;
  return n;
}

void encode_dep_wire(const DepVec& v, const DepBase& base, std::span<uint8_t> out,
                     DepVecBytes* counted) {
  SHOAL_ASSERT(out.size() >= kDepWireHeaderBytes &&
                   (out.size() - kDepWireHeaderBytes) % kDepWireEntryBytes == 0,
               "compact vector buffer of %zu bytes", out.size());
  const size_t n = (out.size() - kDepWireHeaderBytes) / kDepWireEntryBytes;
  SHOAL_ASSERT(n <= kDepWireShardsMax, "compact vector of %zu entries", n);
  const auto count = static_cast<uint16_t>(n);
  std::memcpy(out.data(), &count, 2);
  size_t at = kDepWireHeaderBytes, written = 0;
  for (const DepEntry& e : v.entries()) {
    if (base.covers(e.shard, e.ts)) continue;
    // The base must answer as it did for dep_wire_entries (same thread, nothing between).
    SHOAL_ASSERT(written < n && e.shard < kDepWireShardsMax && e.ts != 0,
                 "compact vector entry %zu: shard %u ts %llu (of %zu)", written, e.shard,
                 static_cast<unsigned long long>(e.ts), n);
    const auto shard = static_cast<uint16_t>(e.shard);
    std::memcpy(out.data() + at, &shard, 2);
    std::memcpy(out.data() + at + 2, &e.ts, 8);
    at += kDepWireEntryBytes;
    ++written;
  }
  SHOAL_ASSERT(written == n, "compact vector: %zu entries above the base, %zu room", written, n);
  if (counted != nullptr) {
    ++counted->vectors;
    counted->entries += n;
    counted->omitted += v.size() - n;
    counted->bytes += out.size();
    counted->full_bytes += v.full_wire_bytes();
  }
}

Status decode_dep_wire(std::span<const uint8_t> in, DepVec* out, const char* what) {
  out->clear();
  if (in.size() < kDepWireHeaderBytes) {
    return Status::Corruption(fmt::format(
        "dist wire: {}: truncated dependency vector count ({} of 2 bytes)", what, in.size()));
  }
  uint16_t count = 0;
  std::memcpy(&count, in.data(), 2);
  if (count > kDepWireShardsMax) {
    return Status::InvalidArgument(fmt::format("dist wire: {}: dependency vector count {} above {}",
                                               what, count, kDepWireShardsMax));
  }
  const size_t need = dep_wire_bytes(count);
  if (in.size() < need) {
    const size_t whole = (in.size() - kDepWireHeaderBytes) / kDepWireEntryBytes;
    return Status::Corruption(
        fmt::format("dist wire: {}: truncated dependency vector entry {} of {} ({} of {} bytes)",
                    what, whole, count, in.size(), need));
  }
  if (in.size() > need) {
    return Status::Corruption(fmt::format(
        "dist wire: {}: {} trailing bytes after the dependency vector", what, in.size() - need));
  }
  uint32_t previous = 0;
  for (uint32_t i = 0; i < count; ++i) {  // bounded: count <= kDepWireShardsMax
    const uint8_t* p = in.data() + kDepWireHeaderBytes + size_t{i} * kDepWireEntryBytes;
    uint16_t shard = 0;
    uint64_t ts = 0;
    std::memcpy(&shard, p, 2);
    std::memcpy(&ts, p + 2, 8);
    if (shard >= kDepWireShardsMax) {
      return Status::InvalidArgument(fmt::format(
          "dist wire: {}: dependency vector entry {}: shard {} out of range", what, i, shard));
    }
    if (i > 0 && shard <= previous) {
      return Status::InvalidArgument(
          fmt::format("dist wire: {}: dependency vector entry {}: shard {} not above shard {}",
                      what, i, shard, previous));
    }
    if (ts == 0) {
      return Status::InvalidArgument(
          fmt::format("dist wire: {}: dependency vector entry {}: timestamp 0", what, i));
    }
    previous = shard;
    out->raise(shard, ts);  // sorted input: appends at the end
  }
  return Status::Ok();
}

}  // namespace shoal::txn

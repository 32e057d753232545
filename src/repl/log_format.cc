#include "src/repl/log_format.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack: no allocation per checksum
#include <xxhash.h>

#include <fmt/format.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <bit>

namespace shoal::repl {

namespace {

// Header field offsets (docs/LOG_FORMAT.md, "Entry header").
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffFlags = 6;
constexpr size_t kOffShard = 8;
constexpr size_t kOffStream = 12;
constexpr size_t kOffEpoch = 16;
constexpr size_t kOffSequence = 24;
constexpr size_t kOffPayloadBytes = 32;
constexpr size_t kOffRecordCount = 36;
constexpr size_t kOffMinTid = 40;
constexpr size_t kOffMaxTid = 48;
constexpr size_t kOffChecksum = 56;
static_assert(kOffChecksum + 8 == kLogHeaderBytes);

bool aligned8(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 7) == 0;
}

Status corrupt(uint64_t offset, std::string_view what) {
  return Status::Corruption(fmt::format("log entry at offset {}: {}", offset, what));
}

// The first index in [i, size) where a and b differ; size if none. The equal stretches of a
// patched row are most of it (a STOCK row changes 4 fields of 17), so they are skipped 16
// bytes per compare where SSE2 is there (every x86-64), else 8.
size_t first_difference(const std::byte* a, const std::byte* b, size_t i, size_t size) {
#if defined(__SSE2__)
  for (; i + 16 <= size; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    const auto equal = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)));
    if (equal != 0xffffu) return i + static_cast<size_t>(std::countr_one(equal));
  }
#endif
  static_assert(std::endian::native == std::endian::little, "byte order of load_u64");
  for (; i + 8 <= size; i += 8) {
    const uint64_t differ = load_u64(a + i) ^ load_u64(b + i);
    if (differ != 0) return i + static_cast<size_t>(std::countr_zero(differ)) / 8;
  }
  for (; i < size; ++i) {
    if (a[i] != b[i]) return i;
  }
  return size;
}

}  // namespace

uint64_t log_entry_checksum(const std::byte* entry, size_t payload_bytes) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, entry, kOffChecksum);
  XXH3_64bits_update(&state, entry + kLogHeaderBytes, payload_bytes);
  return XXH3_64bits_digest(&state);
}

size_t log_record_bytes(size_t dep_count, std::span<const TxnWrite> writes, bool dist_txn) {
  size_t bytes =
      kLogRecordHeaderBytes + (dist_txn ? kLogRecordDistTxnBytes : 0) + log_dep_bytes(dep_count);
  for (const TxnWrite& w : writes) bytes += log_write_bytes(w.key.size(), w.value.size());
  return bytes;
}

size_t encode_patch(std::span<const std::byte> old_value, std::span<const std::byte> new_value,
                    uint64_t base_tid, std::span<std::byte> out, uint16_t* range_count) {
  SHOAL_ASSERT(old_value.size() == new_value.size() && new_value.size() <= kLogPatchValueBytesMax,
               "patch of %zu bytes onto %zu", new_value.size(), old_value.size());
  const std::byte* a = old_value.data();
  const std::byte* b = new_value.data();
  const size_t size = new_value.size();
  // Not worth it unless the body ends up smaller than the value it replaces.
  const size_t limit = std::min(out.size(), size);
  if (limit < kLogPatchHeaderBytes) return 0;
  store_u64(out.data(), base_tid);
  size_t n = kLogPatchHeaderBytes;
  uint32_t count = 0;
  size_t i = first_difference(a, b, 0, size);
  while (i < size) {  // bounded: i grows every pass
    // A run of changes; it ends at 4 equal bytes in a row (what a new range header costs).
    size_t end = i + 1;
    for (size_t j = i + 1, equal = 0; j < size && equal < kLogPatchRangeHeaderBytes; ++j) {
      if (a[j] != b[j]) {
        end = j + 1;
        equal = 0;
      } else {
        ++equal;
      }
    }
    const size_t len = end - i;
    if (n + kLogPatchRangeHeaderBytes + len >= limit || count == UINT16_MAX) return 0;
    store_u16(out.data() + n, static_cast<uint16_t>(i));
    store_u16(out.data() + n + 2, static_cast<uint16_t>(len));
    std::memcpy(out.data() + n + kLogPatchRangeHeaderBytes, b + i, len);
    n += kLogPatchRangeHeaderBytes + len;
    ++count;
    i = first_difference(a, b, end, size);
  }
  *range_count = static_cast<uint16_t>(count);
  return n;
}

void WriteView::apply_patch(std::byte* data) const {
  const std::byte* p = value.data() + kLogPatchHeaderBytes;
  for (uint32_t i = 0; i < patch_ranges; ++i) {
    const uint16_t offset = load_u16(p);
    const uint16_t len = load_u16(p + 2);
    std::memcpy(data + offset, p + kLogPatchRangeHeaderBytes, len);
    p += kLogPatchRangeHeaderBytes + len;
  }
}

// ---- LogBatchBuilder ------------------------------------------------------------------------

void LogBatchBuilder::reset(std::span<std::byte> buffer, const LogEntryId& id,
                            const BatchLimits& limits) {
  SHOAL_ASSERT(aligned8(buffer.data()), "log buffer must be 8-byte aligned");
  capacity_bytes_ = std::min<size_t>({buffer.size(), limits.batch_bytes_max, kLogEntryBytesMax});
  capacity_bytes_ &= ~size_t{7};
  SHOAL_ASSERT(capacity_bytes_ >= kLogHeaderBytes + kLogRecordHeaderBytes,
               "log buffer of %zu bytes cannot hold a header and a record", capacity_bytes_);
  SHOAL_ASSERT(limits.batch_txns_max > 0, "batch_txns_max must be > 0");
  buf_ = buffer.data();
  used_bytes_ = kLogHeaderBytes;
  txn_count_ = 0;
  txns_max_ = limits.batch_txns_max;
  min_tid_ = ~uint64_t{0};
  max_tid_ = 0;
  id_ = id;
  open_ = true;
  refused_full_ = false;
}

AppendResult LogBatchBuilder::append(uint64_t commit_tid, std::span<const txn::DepEntry> deps,
                                     std::span<const TxnWrite> writes, uint64_t dist_txn_id) {
  SHOAL_ASSERT(open_, "append to a sealed or never-reset batch");
  const bool dist_txn = dist_txn_id != 0;
  const size_t need = log_record_bytes(deps.size(), writes, dist_txn);
  if (deps.size() > kLogRecordDepsMax || writes.size() > UINT16_MAX || need > UINT32_MAX ||
      need > capacity_bytes_ - kLogHeaderBytes) {
    return AppendResult::kNeverFits;
  }
  if (txn_count_ >= txns_max_ || need > capacity_bytes_ - used_bytes_) {
    refused_full_ = true;
    return AppendResult::kFull;
  }
  std::byte* r = buf_ + used_bytes_;
  store_u64(r, commit_tid);
  store_u32(r + 8, static_cast<uint32_t>(need));
  store_u16(r + 12, static_cast<uint16_t>(deps.size() | (dist_txn ? kLogRecordDistTxn : 0)));
  store_u16(r + 14, static_cast<uint16_t>(writes.size()));
  if (dist_txn) store_u64(r + kLogRecordHeaderBytes, dist_txn_id);
  // Dependencies as two arrays (timestamps, then shards) so every u64 stays aligned.
  std::byte* ts = r + kLogRecordHeaderBytes + (dist_txn ? kLogRecordDistTxnBytes : 0);
  std::byte* shards = ts + 8 * deps.size();
  for (size_t i = 0; i < deps.size(); ++i) {
    store_u64(ts + 8 * i, deps[i].ts);
    store_u32(shards + 4 * i, deps[i].shard);
  }
  std::byte* w = ts + log_dep_bytes(deps.size());
  if ((deps.size() & 1) != 0) store_u32(w - 4, 0);  // zero the shard array's padding
  for (const TxnWrite& tw : writes) {
    if (tw.bytes_key) {
      SHOAL_ASSERT(!tw.key.empty() && tw.key[0] >= 1 && tw.key[0] <= kLogBytesKeyBytesMax &&
                       tw.key.size() == log_packed_key_words(tw.key[0]) && tw.op != WriteOp::kPatch,
                   "byte key of %zu words", tw.key.size());
    } else {
      SHOAL_ASSERT(!tw.key.empty() && tw.key.size() <= kLogKeyWordsMax, "key of %zu words",
                   tw.key.size());
    }
    SHOAL_ASSERT(tw.op != WriteOp::kRemove || tw.value.empty(), "a remove carries no value");
    const bool patch = tw.op == WriteOp::kPatch;
    store_u32(w, tw.table_id);
    w[4] = static_cast<std::byte>(tw.op);
    w[5] = static_cast<std::byte>(tw.bytes_key ? 0 : tw.key.size());
    store_u16(w + 6, patch ? tw.patch_ranges : 0);
    store_u32(w + 8, static_cast<uint32_t>(tw.value.size()));
    store_u32(w + 12, patch ? tw.patch_value_bytes : 0);
    std::memcpy(w + kLogWriteHeaderBytes, tw.key.data(), tw.key.size() * 8);
    std::byte* v = w + kLogWriteHeaderBytes + tw.key.size() * 8;
    const size_t padded = pad8(tw.value.size());
    if (padded != 0) store_u64(v + padded - 8, 0);  // zero padding first, then the value
    if (!tw.value.empty()) std::memcpy(v, tw.value.data(), tw.value.size());
    w = v + padded;
  }
  SHOAL_ASSERT(w == r + need, "record size mismatch");
  used_bytes_ += need;
  ++txn_count_;
  min_tid_ = std::min(min_tid_, commit_tid);
  max_tid_ = std::max(max_tid_, commit_tid);
  return AppendResult::kOk;
}

std::span<const std::byte> LogBatchBuilder::seal(uint16_t flags, uint64_t floor_tid,
                                                 uint64_t final_tid, uint64_t promise_cap) {
  SHOAL_ASSERT(open_, "seal of a sealed or never-reset batch");
  SHOAL_ASSERT((flags & ~kLogFlagsKnown) == 0 && (flags & kLogFlagPromiseHeld) == 0,
               "unknown flags 0x%x", flags);
  const uint64_t natural_max = std::max(txn_count_ == 0 ? 0 : max_tid_, floor_tid);
  const uint64_t promise = std::min(natural_max, promise_cap);
  if (txn_count_ > 0 && max_tid_ > promise) flags |= kLogFlagPromiseHeld;
  SHOAL_ASSERT(
      (flags & (kLogFlagNoop | kLogFlagBootstrapEnd | kLogFlagEpochStart)) == 0 || txn_count_ == 0,
      "a no-op, bootstrap-end or epoch-start entry has no records (flags 0x%x)", flags);
  SHOAL_ASSERT((flags & kLogFlagEpochStart) != 0 || final_tid == 0, "%s",
               "only an epoch-start entry carries a final watermark");
  std::byte* h = buf_;
  store_u32(h + kOffMagic, kLogMagic);
  store_u16(h + kOffVersion, kLogFormatVersion);
  store_u16(h + kOffFlags, flags);
  store_u32(h + kOffShard, id_.shard);
  store_u32(h + kOffStream, id_.stream);
  store_u64(h + kOffEpoch, id_.epoch);
  store_u64(h + kOffSequence, id_.sequence);
  const size_t payload = used_bytes_ - kLogHeaderBytes;
  store_u32(h + kOffPayloadBytes, static_cast<uint32_t>(payload));
  store_u32(h + kOffRecordCount, txn_count_);
  store_u64(h + kOffMinTid, txn_count_ == 0 ? final_tid : min_tid_);
  store_u64(h + kOffMaxTid, promise);
  store_u64(h + kOffChecksum, log_entry_checksum(h, payload));
  open_ = false;
  return {buf_, used_bytes_};
}

// ---- BatchPolicy ----------------------------------------------------------------------------

void BatchPolicy::note_append(const LogBatchBuilder& builder) {
  if (builder.txn_count() == 1 || first_append_ns_ == 0) {
    first_append_ns_ = std::max<uint64_t>(env_->now_ns(), 1);
  }
}

BatchPolicy::Reason BatchPolicy::should_seal(const LogBatchBuilder& builder) {
  if (builder.txn_count() >= limits_.batch_txns_max) return Reason::kCount;
  if (builder.refused_full() || builder.entry_bytes() >= builder.capacity_bytes()) {
    return Reason::kBytes;
  }
  if (first_append_ns_ != 0 && env_->now_ns() - first_append_ns_ >= limits_.batch_age_ns_max) {
    return Reason::kAge;
  }
  return Reason::kNone;
}

// ---- Reading --------------------------------------------------------------------------------

txn::DepEntry RecordView::dep(uint32_t i) const {
  SHOAL_DCHECK(i < dep_count());
  const std::byte* ts = deps_begin();
  const std::byte* shards = ts + 8 * size_t{dep_count()};
  return txn::DepEntry{load_u32(shards + 4 * size_t{i}), load_u64(ts + 8 * size_t{i})};
}

WriteView RecordView::decode_write(const std::byte* w) {
  const bool bytes_key = w[5] == std::byte{0};
  const auto key_words =
      static_cast<uint32_t>(bytes_key ? log_packed_key_words(load_u64(w + kLogWriteHeaderBytes))
                                      : static_cast<uint8_t>(w[5]));
  const auto op = static_cast<WriteOp>(w[4]);
  const bool patch = op == WriteOp::kPatch;
  return WriteView{load_u32(w),
                   op,
                   key_words,
                   w + kLogWriteHeaderBytes,
                   {w + kLogWriteHeaderBytes + 8 * size_t{key_words}, load_u32(w + 8)},
                   patch ? load_u32(w + 12) : 0,
                   patch ? load_u16(w + 6) : uint16_t{0},
                   bytes_key};
}

LogEntryId LogEntryView::id() const {
  return LogEntryId{load_u32(p_ + kOffShard), load_u32(p_ + kOffStream), load_u64(p_ + kOffEpoch),
                    load_u64(p_ + kOffSequence)};
}

Result<size_t> LogEntryView::peek_entry_bytes(std::span<const std::byte> header, uint64_t offset,
                                              uint32_t entry_bytes_max) {
  if (header.size() < kLogHeaderBytes) {
    return corrupt(
        offset, fmt::format("truncated header ({} of {} bytes)", header.size(), kLogHeaderBytes));
  }
  const std::byte* h = header.data();
  const uint32_t magic = load_u32(h + kOffMagic);
  if (magic != kLogMagic) return corrupt(offset, fmt::format("bad magic 0x{:08x}", magic));
  const uint16_t version = load_u16(h + kOffVersion);
  if (version > kLogFormatVersion) {
    return Status::NotSupported(
        fmt::format("log entry at offset {}: log format version {} is newer than this reader's {}",
                    offset, version, kLogFormatVersion));
  }
  if (version < kLogFormatMinVersion) {
    return corrupt(offset, fmt::format("invalid log format version {}", version));
  }
  const uint32_t payload = load_u32(h + kOffPayloadBytes);
  const uint64_t limit = std::min(entry_bytes_max, kLogEntryBytesMax);
  if (payload % 8 != 0 || kLogHeaderBytes + uint64_t{payload} > limit) {
    return corrupt(offset, fmt::format("payload_bytes {} is not a multiple of 8 or exceeds the "
                                       "{}-byte entry limit",
                                       payload, limit));
  }
  return kLogHeaderBytes + size_t{payload};
}

namespace {

// Checks a kPatch body: its ranges fill it exactly, in order, without overlap, inside a value
// of value_bytes. Returns nullptr or what is wrong.
const char* check_patch(const std::byte* body, uint32_t body_bytes, uint32_t ranges,
                        uint32_t value_bytes) {
  if (body_bytes < kLogPatchHeaderBytes) return "patch without a base TID";
  if (value_bytes > kLogPatchValueBytesMax) return "patch of a value too large";
  const std::byte* p = body + kLogPatchHeaderBytes;
  const std::byte* const end = body + body_bytes;
  uint32_t covered = 0;  // end of the previous range
  for (uint32_t i = 0; i < ranges; ++i) {
    if (end - p < static_cast<ptrdiff_t>(kLogPatchRangeHeaderBytes)) return "patch range header";
    const uint32_t offset = load_u16(p);
    const uint32_t len = load_u16(p + 2);
    if (len == 0 || offset < covered || offset + len > value_bytes) return "patch range bounds";
    if (end - p - static_cast<ptrdiff_t>(kLogPatchRangeHeaderBytes) < static_cast<ptrdiff_t>(len)) {
      return "patch range overruns its body";
    }
    covered = offset + len;
    p += kLogPatchRangeHeaderBytes + len;
  }
  return p == end ? nullptr : "patch ranges do not fill the body";
}

// Checks a packed byte key at k (within [k, end)): its length word, room and zero padding.
// Returns the bytes it takes (length word included), or 0 when malformed (`why` says).
uint64_t check_byte_key(const std::byte* k, const std::byte* end, const char** why) {
  if (end - k < 8) return *why = "byte key length overruns its record", 0;
  const uint64_t len = load_u64(k);
  if (len < 1 || len > kLogBytesKeyBytesMax) return *why = "byte key length", 0;
  const uint64_t packed = 8 * log_packed_key_words(len);
  if (packed > static_cast<uint64_t>(end - k)) return *why = "byte key overruns its record", 0;
  for (uint64_t i = 8 + len; i < packed; ++i) {
    if (k[i] != std::byte{0}) return *why = "byte key padding", 0;
  }
  return packed;
}

// Checks one write at w (within [w, end)); returns its size or 0 when malformed (`why` says).
size_t check_write(const std::byte* w, const std::byte* end, uint16_t version, const char** why) {
  if (end - w < static_cast<ptrdiff_t>(kLogWriteHeaderBytes)) return *why = "write header", 0;
  const uint8_t op = static_cast<uint8_t>(w[4]);
  const uint32_t key_words = static_cast<uint8_t>(w[5]);
  const uint32_t value_bytes = load_u32(w + 8);
  const bool patch = op == static_cast<uint8_t>(WriteOp::kPatch);
  if (op < 1 || op > 4 || (patch && version < kLogFormatPatchVersion)) {
    return *why = "unknown write op", 0;
  }
  uint64_t key_bytes = 8 * uint64_t{key_words};
  if (key_words == 0 && version >= kLogFormatBytesKeyVersion) {
    key_bytes = check_byte_key(w + kLogWriteHeaderBytes, end, why);
    if (key_bytes == 0) return 0;
    if (patch) return *why = "patch of a byte key", 0;
  } else if (key_words < 1 || key_words > kLogKeyWordsMax) {
    return *why = "key word count", 0;
  }
  if (!patch && (load_u16(w + 6) != 0 || load_u32(w + 12) != 0)) {
    return *why = "reserved write bits", 0;
  }
  if (op == static_cast<uint8_t>(WriteOp::kRemove) && value_bytes != 0) {
    return *why = "remove with a value", 0;
  }
  const uint64_t size = kLogWriteHeaderBytes + key_bytes + pad8(value_bytes);
  if (size > static_cast<uint64_t>(end - w)) return *why = "write overruns its record", 0;
  if (patch) {
    const std::byte* body = w + kLogWriteHeaderBytes + 8 * size_t{key_words};
    if (const char* bad = check_patch(body, value_bytes, load_u16(w + 6), load_u32(w + 12))) {
      return *why = bad, 0;
    }
  }
  return size;
}

// Validates the records of a checksum-valid payload; the view's iteration relies on it.
Status check_records(const std::byte* entry, uint64_t offset) {
  const uint32_t payload = load_u32(entry + kOffPayloadBytes);
  const uint32_t count = load_u32(entry + kOffRecordCount);
  const uint64_t min_tid = load_u64(entry + kOffMinTid);
  const uint64_t max_tid = load_u64(entry + kOffMaxTid);
  const uint16_t version = load_u16(entry + kOffVersion);
  const bool promise_held = (load_u16(entry + kOffFlags) & kLogFlagPromiseHeld) != 0;
  const std::byte* r = entry + kLogHeaderBytes;
  const std::byte* const end = r + payload;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t at = offset + static_cast<uint64_t>(r - entry);
    const auto bad = [&](std::string_view why) {
      return corrupt(offset, fmt::format("record {} at offset {}: {}", i, at, why));
    };
    if (end - r < static_cast<ptrdiff_t>(kLogRecordHeaderBytes)) return bad("header overruns");
    const uint32_t rbytes = load_u32(r + 8);
    if (rbytes % 8 != 0 || rbytes > static_cast<uint64_t>(end - r)) return bad("record_bytes");
    const uint64_t tid = load_u64(r);
    if (tid < min_tid || (tid > max_tid && !promise_held)) {
      return bad("commit TID outside the entry's range");
    }
    const uint16_t deps_field = load_u16(r + 12);
    const bool dist_txn = (deps_field & kLogRecordDistTxn) != 0;
    if (dist_txn && version < kLogFormatDistTxnVersion) return bad("dependency count");
    const size_t deps_end = kLogRecordHeaderBytes + (dist_txn ? kLogRecordDistTxnBytes : 0) +
                            log_dep_bytes(deps_field & kLogRecordDepsMax);
    if (deps_end > rbytes) return bad("dependency vector overruns");
    if (dist_txn && load_u64(r + kLogRecordHeaderBytes) == 0) return bad("distributed txn id 0");
    const std::byte* const rend = r + rbytes;
    const std::byte* w = r + deps_end;
    for (uint32_t j = 0, n = load_u16(r + 14); j < n; ++j) {
      const char* why = "";
      const size_t wbytes = check_write(w, rend, version, &why);
      if (wbytes == 0) return bad(fmt::format("write {}: {}", j, why));
      w += wbytes;
    }
    if (w != rend) return bad("writes do not fill record_bytes");
    r = rend;
  }
  if (r != end) return corrupt(offset, "records do not fill payload_bytes");
  // An empty entry has min_tid 0 (an epoch start: the final watermark); its max_tid may carry
  // the stream's floor (seal()).
  const bool epoch_start = (load_u16(entry + kOffFlags) & kLogFlagEpochStart) != 0;
  if (count == 0 && min_tid != 0 && !epoch_start) {
    return corrupt(offset, "TID range of no records");
  }
  return Status::Ok();
}

}  // namespace

Result<size_t> LogEntryView::check_header(std::span<const std::byte> bytes, uint64_t offset,
                                          uint32_t entry_bytes_max) {
  SHOAL_ASSERT(aligned8(bytes.data()), "log entries are decoded in place from 8-aligned bytes");
  Result<size_t> size = peek_entry_bytes(bytes, offset, entry_bytes_max);
  if (!size.ok()) return size.status();
  if (bytes.size() < *size) {
    return corrupt(offset, fmt::format("truncated entry ({} of {} bytes)", bytes.size(), *size));
  }
  return size;
}

Result<LogEntryView> LogEntryView::reparse(std::span<const std::byte> bytes) {
  SHOAL_TRY(check_header(bytes, 0, kLogEntryBytesMax).status());
  return LogEntryView(bytes.data());
}

Result<LogEntryView> LogEntryView::parse(std::span<const std::byte> bytes, uint64_t offset,
                                         uint32_t entry_bytes_max) {
  Result<size_t> size = check_header(bytes, offset, entry_bytes_max);
  if (!size.ok()) return size.status();
  const std::byte* e = bytes.data();
  const uint64_t stored = load_u64(e + kOffChecksum);
  const uint64_t computed = log_entry_checksum(e, *size - kLogHeaderBytes);
  if (stored != computed) {
    return corrupt(offset, fmt::format("checksum mismatch (stored {:016x}, computed {:016x})",
                                       stored, computed));
  }
  const uint16_t flags = load_u16(e + kOffFlags);
  if ((flags & ~log_flags_known(load_u16(e + kOffVersion))) != 0) {
    return Status::NotSupported(
        fmt::format("log entry at offset {}: unknown flags 0x{:04x} (written by a newer format?)",
                    offset, flags));
  }
  if ((flags & kLogFlagNoop) != 0 && load_u32(e + kOffRecordCount) != 0) {
    return corrupt(offset, "a no-op entry with records");
  }
  if ((flags & kLogFlagBootstrapEnd) != 0 && load_u32(e + kOffRecordCount) != 0) {
    return corrupt(offset, "a bootstrap-end entry with records");
  }
  if ((flags & kLogFlagEpochStart) != 0 && load_u32(e + kOffRecordCount) != 0) {
    return corrupt(offset, "an epoch-start entry with records");
  }
  SHOAL_TRY(check_records(e, offset));
  return LogEntryView(e);
}

}  // namespace shoal::repl

#include "src/server/kv_fragments.h"

#include <cstring>

#include <fmt/format.h>

#include "src/txn/engine.h"

namespace shoal::server {
namespace {

// Bounds-checked reading of a fragment's arguments or result.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool u8(uint8_t* v) { return copy(v, 1); }
  bool u32(uint32_t* v) { return copy(v, 4); }
  bool u64(uint64_t* v) { return copy(v, 8); }
  bool bytes(size_t n, std::string_view* v) {
    if (bytes_.size() - at_ < n) return false;
    *v = {reinterpret_cast<const char*>(bytes_.data() + at_), n};
    at_ += n;
    return true;
  }
  // A u32 length, then that many bytes.
  bool sized(std::string_view* v) {
    uint32_t n = 0;
    return u32(&n) && bytes(n, v);
  }
  std::string_view rest() {
    std::string_view v;
    (void)bytes(bytes_.size() - at_, &v);
    return v;
  }
  size_t left() const { return bytes_.size() - at_; }

 private:
  bool copy(void* v, size_t n) {
    if (bytes_.size() - at_ < n) return false;
    std::memcpy(v, bytes_.data() + at_, n);
    at_ += n;
    return true;
  }
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

// Appends to a fragment's result while it has room.
class ByteWriter {
 public:
  explicit ByteWriter(std::span<uint8_t> out) : out_(out) {}
  bool fits(size_t n) const { return out_.size() - at_ >= n; }
  void u8(uint8_t v) { put(&v, 1); }
  void u32(uint32_t v) { put(&v, 4); }
  void u64(uint64_t v) { put(&v, 8); }
  void bytes(std::string_view v) { put(v.data(), v.size()); }
  void u32_at(size_t offset, uint32_t v) { std::memcpy(out_.data() + offset, &v, 4); }
  uint32_t size() const { return static_cast<uint32_t>(at_); }

 private:
  void put(const void* v, size_t n) {
    SHOAL_ASSERT(fits(n), "fragment result overflow (%zu bytes)", n);
    if (n > 0) std::memcpy(out_.data() + at_, v, n);
    at_ += n;
  }
  std::span<uint8_t> out_;
  size_t at_ = 0;
};

Status bad_args(std::string_view what) {
  return Status::InvalidArgument(fmt::format("kv fragment: malformed {} arguments", what));
}

bool key_ok(std::string_view key) {
  return !key.empty() && key.size() <= resp::kMaxKeyBytes;
}

txn::BytesTable& table_of(const void* ctx) {
  return *static_cast<txn::BytesTable*>(const_cast<void*>(ctx));
}

// The value a get read: the participant's thread reuses one buffer (fragments never nest).
std::string& get_scratch() {
  thread_local std::string value;
  return value;
}

Status kv_get(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args, std::span<uint8_t> out,
              uint32_t* out_size) {
  const std::string_view key(reinterpret_cast<const char*>(args.data()), args.size());
  if (!key_ok(key) || out.size() < kKvGetResultMin) return bad_args("get");
  std::string& value = get_scratch();
  uint64_t version = 0;
  Status s = txn.get(table_of(ctx), key, &value, &version);
  if (!s.ok() && !s.is_not_found()) return s;
  ByteWriter w(out);
  if (s.is_not_found()) {
    w.u8(kKvAbsent);
    w.u64(version);
  } else if (!w.fits(kKvGetHeaderBytes + value.size())) {
    w.u8(kKvTooSmall);  // the coordinator asks again with room; the read stays in the read set
    w.u64(version);
    w.u32(static_cast<uint32_t>(kKvGetHeaderBytes + value.size()));
  } else {
    w.u8(kKvFound);
    w.u64(version);
    w.bytes(value);
  }
  if (value.capacity() > (size_t{64} << 10)) std::string().swap(value);  // no 1 MiB kept
  *out_size = w.size();
  return Status::Ok();
}

Status kv_put(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args, std::span<uint8_t>,
              uint32_t* out_size) {
  ByteReader r(args);
  std::string_view key;
  if (!r.sized(&key) || !key_ok(key)) return bad_args("put");
  *out_size = 0;
  return txn.put(table_of(ctx), key, r.rest());
}

Status kv_del(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args, std::span<uint8_t>,
              uint32_t* out_size) {
  const std::string_view key(reinterpret_cast<const char*>(args.data()), args.size());
  if (!key_ok(key)) return bad_args("del");
  *out_size = 0;
  Status s = txn.remove(table_of(ctx), key);
  return s.is_not_found() ? Status::Ok() : s;  // deleting an absent key is no error
}

Status decode_scan_args(std::span<const uint8_t> args, KvScanArgs* a) {
  ByteReader r(args);
  uint8_t inclusive = 0, has_end = 0, count_only = 0;
  if (!r.u8(&inclusive) || !r.u8(&has_end) || !r.u8(&count_only) || !r.sized(&a->start) ||
      !r.sized(&a->end) || !r.u32(&a->limit) || !r.u32(&a->value_prefix_bytes) || r.left() != 0 ||
      inclusive > 1 || has_end > 1 || count_only > 1 || a->limit == 0 ||
      a->start.size() > resp::kMaxKeyBytes || a->end.size() > resp::kMaxKeyBytes) {
    return bad_args("scan");
  }
  a->start_inclusive = inclusive != 0;
  a->has_end = has_end != 0;
  a->count_only = count_only != 0;
  return Status::Ok();
}

Status kv_scan(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args,
               std::span<uint8_t> out, uint32_t* out_size) {
  KvScanArgs a;
  SHOAL_TRY(decode_scan_args(args, &a));
  if (out.size() < kKvScanHeaderBytes + 8 + resp::kMaxKeyBytes) return bad_args("scan");
  txn::BytesScan scan;
  scan.start = a.start;
  scan.start_inclusive = a.start_inclusive;
  if (a.has_end) scan.end = a.end;
  scan.limit = a.limit;
  scan.value_prefix_bytes = a.count_only ? 0 : a.value_prefix_bytes;
  ByteWriter w(out);
  w.u8(0);
  w.u32(0);
  bool more = false;
  uint32_t count = 0;
  std::string last;  // count mode: only the last key is written
  SHOAL_TRY(txn.scan(table_of(ctx), scan, [&](const txn::BytesEntry& e) {
    if (a.count_only) {
      last.assign(e.key);
      ++count;
      return true;
    }
    if (!w.fits(8 + e.key.size() + e.value.size())) {
      more = true;  // the coordinator goes on after the last key delivered
      return false;
    }
    w.u32(static_cast<uint32_t>(e.key.size()));
    w.bytes(e.key);
    w.u32(static_cast<uint32_t>(e.value.size()));
    w.bytes(e.value);
    ++count;
    return true;
  }));
  if (a.count_only && count > 0) {
    w.u32(static_cast<uint32_t>(last.size()));
    w.bytes(last);
    w.u32(0);
  }
  out[0] = more ? 1 : 0;
  w.u32_at(1, count);
  *out_size = w.size();
  return Status::Ok();
}

}  // namespace

Result<txn::BytesTable*> kv_table(txn::Engine& engine) {
  if (txn::TableBase* t = engine.find_table(kKvTableName)) {
    auto* bytes = dynamic_cast<txn::BytesTable*>(t);
    if (bytes == nullptr) {
      return Status::InvalidArgument(
          fmt::format("table '{}' exists and is not a byte-key table", kKvTableName));
    }
    return bytes;
  }
  return engine.create_bytes_table(kKvTableName);
}

void register_kv_fragments(dist::FragmentTable* table, txn::BytesTable* kv) {
  const std::pair<KvFragment, dist::Fragment> fns[] = {
      {kFragKvGet, &kv_get}, {kFragKvPut, &kv_put}, {kFragKvDel, &kv_del}, {kFragKvScan, &kv_scan}};
  for (const auto& [id, fn] : fns) {
    SHOAL_ASSERT(table->fns[id] == nullptr, "fragment %u registered twice", id);
    table->fns[id] = fn;
    table->ctx_of[id] = kv;
  }
}

void encode_kv_put(std::string_view key, std::string_view value, std::vector<uint8_t>* out) {
  out->resize(4 + key.size() + value.size());
  const auto n = static_cast<uint32_t>(key.size());
  std::memcpy(out->data(), &n, 4);
  std::memcpy(out->data() + 4, key.data(), key.size());
  if (!value.empty()) std::memcpy(out->data() + 4 + key.size(), value.data(), value.size());
}

void encode_kv_scan(const KvScanArgs& a, std::vector<uint8_t>* out) {
  out->resize(3 + 4 + a.start.size() + 4 + a.end.size() + 8);
  ByteWriter w(*out);
  w.u8(a.start_inclusive ? 1 : 0);
  w.u8(a.has_end ? 1 : 0);
  w.u8(a.count_only ? 1 : 0);
  w.u32(static_cast<uint32_t>(a.start.size()));
  w.bytes(a.start);
  w.u32(static_cast<uint32_t>(a.end.size()));
  w.bytes(a.end);
  w.u32(a.limit);
  w.u32(a.value_prefix_bytes);
}

Status decode_kv_get(std::span<const uint8_t> result, KvGetResult* out) {
  ByteReader r(result);
  uint8_t kind = 0;
  if (!r.u8(&kind) || !r.u64(&out->version) || kind > kKvTooSmall) {
    return Status::Corruption("kv get: malformed result");
  }
  out->kind = static_cast<KvGetKind>(kind);
  if (kind == kKvFound) out->value = r.rest();
  if (kind == kKvTooSmall && (!r.u32(&out->needed) || out->needed > dist::kFragmentBytesMax)) {
    return Status::Corruption("kv get: malformed result");
  }
  if (kind != kKvFound && r.left() != 0) return Status::Corruption("kv get: malformed result");
  return Status::Ok();
}

Status decode_kv_scan(std::span<const uint8_t> result, bool count_only,
                      std::vector<resp::KeyValue>* out, bool* more, uint32_t* count,
                      std::string_view* last_key) {
  ByteReader r(result);
  uint8_t m = 0;
  if (!r.u8(&m) || !r.u32(count) || m > 1) return Status::Corruption("kv scan: malformed result");
  *more = m != 0;
  *last_key = {};
  const uint32_t entries = count_only ? (*count > 0 ? 1 : 0) : *count;
  for (uint32_t i = 0; i < entries; ++i) {
    std::string_view key, value;
    if (!r.sized(&key) || !r.sized(&value) || !key_ok(key)) {
      return Status::Corruption("kv scan: malformed result");
    }
    if (!count_only) out->push_back({std::string(key), std::string(value)});
    *last_key = key;
  }
  if (r.left() != 0) return Status::Corruption("kv scan: malformed result");
  return Status::Ok();
}

}  // namespace shoal::server

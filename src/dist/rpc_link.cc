#include "src/dist/rpc_link.h"

#include <algorithm>
#include <cstring>

namespace shoal::dist {
namespace {

constexpr uint32_t kKeyWordsMax = 8;
constexpr size_t kWriteHeaderBytes = 12;  // table u32, key_words u8, kind u8, reserved u16, size
constexpr uint32_t kNoFragment = ~uint32_t{0};

// Appends fixed-size little-endian fields into a buffer sized in advance.
class Writer {
 public:
  explicit Writer(std::span<uint8_t> dst) : dst_(dst) {}
  template <typename T>
  void put(T v) {
    SHOAL_ASSERT(pos_ + sizeof(T) <= dst_.size(), "%s", "wire writer overflow");
    std::memcpy(dst_.data() + pos_, &v, sizeof(T));
    pos_ += sizeof(T);
  }
  void bytes(const void* p, size_t n) {
    SHOAL_ASSERT(pos_ + n <= dst_.size(), "%s", "wire writer overflow");
    if (n != 0) std::memcpy(dst_.data() + pos_, p, n);
    pos_ += n;
  }
  bool full() const { return pos_ == dst_.size(); }

 private:
  std::span<uint8_t> dst_;
  size_t pos_ = 0;
};

// Reads fields with bounds checks: a read past the end fails (and stays failed).
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> src) : src_(src) {}
  template <typename T>
  [[nodiscard]] bool get(T* v) {
    if (src_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, src_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  [[nodiscard]] bool bytes(size_t n, const uint8_t** p) {
    if (src_.size() - pos_ < n) return false;
    *p = src_.data() + pos_;
    pos_ += n;
    return true;
  }
  size_t left() const { return src_.size() - pos_; }
  std::span<const uint8_t> rest() const { return src_.subspan(pos_); }

 private:
  std::span<const uint8_t> src_;
  size_t pos_ = 0;
};

Status truncated(const char* what) {
  return Status::Corruption(fmt::format("dist wire: truncated {}", what));
}
Status trailing(const char* what, size_t n) {
  return Status::Corruption(fmt::format("dist wire: {} trailing bytes after {}", n, what));
}

static_assert(txn::kDepWireShardsMax == DistTxn::kShardsMax);

// A vector ends every message that carries one: its compact form (src/txn/depvec.h) fills the
// rest of the buffer, whose size the caller computed with the same base.
void encode_vector(const txn::DepVec& v, const txn::DepBase& base, std::span<uint8_t> rest,
                   txn::DepVecBytes* counted) {
  txn::encode_dep_wire(v, base, rest, counted);
}

// Reads a vector that must end the message.
Status decode_vector(Reader& r, txn::DepVec* out, const char* what) {
  return txn::decode_dep_wire(r.rest(), out, what);
}

}  // namespace

namespace wire {

Status encode_read(TxnId id, uint64_t epoch, uint32_t table_id, const uint64_t* key,
                   uint32_t key_word_count, uint32_t out_bytes, bool want_size,
                   rt::MsgBuffer* out) {
  if (key_word_count == 0 || key_word_count > kKeyWordsMax) {
    return Status::InvalidArgument(fmt::format("read with {}-word key", key_word_count));
  }
  out->resize(kTxnHeaderBytes + 16 + size_t{key_word_count} * 8);
  Writer w(out->payload());
  w.put(id);
  w.put(epoch);
  w.put(table_id);
  w.put(key_word_count);
  w.put(std::min<uint32_t>(out_bytes, txn::TableBase::kValueBytesMax));
  w.put(want_size ? kReadWantSize : uint32_t{0});
  w.bytes(key, size_t{key_word_count} * 8);
  return Status::Ok();
}

Status encode_lock(TxnId id, uint64_t epoch, const StagedWrite* writes, size_t count,
                   rt::MsgBuffer* out) {
  if (count > DistTxn::kWritesMax) {
    return Status::InvalidArgument(fmt::format("lock with {} writes", count));
  }
  size_t bytes = kTxnHeaderBytes + 4;
  for (size_t i = 0; i < count; ++i) {
    const StagedWrite& sw = writes[i];
    if (sw.key_word_count == 0 || sw.key_word_count > kKeyWordsMax ||
        sw.size_bytes > txn::TableBase::kValueBytesMax) {
      return Status::InvalidArgument("lock: write out of bounds");
    }
    bytes += kWriteHeaderBytes + size_t{sw.key_word_count} * 8 +
             (sw.kind == txn::WriteKind::kRemove ? 0 : sw.size_bytes);
  }
  out->resize(bytes);
  Writer w(out->payload());
  w.put(id);
  w.put(epoch);
  w.put(static_cast<uint32_t>(count));
  for (size_t i = 0; i < count; ++i) {
    const StagedWrite& sw = writes[i];
    const uint32_t size = sw.kind == txn::WriteKind::kRemove ? 0 : sw.size_bytes;
    w.put(sw.table_id);
    w.put(static_cast<uint8_t>(sw.key_word_count));
    w.put(static_cast<uint8_t>(sw.kind));
    w.put(uint16_t{0});
    w.put(size);
    w.bytes(sw.key, size_t{sw.key_word_count} * 8);
    w.bytes(sw.value, size);
  }
  SHOAL_ASSERT(w.full(), "%s", "lock request size miscounted");
  return Status::Ok();
}

void encode_txn_only(TxnId id, uint64_t epoch, rt::MsgBuffer* out) {
  out->resize(kTxnHeaderBytes);
  Writer w(out->payload());
  w.put(id);
  w.put(epoch);
}

Status encode_exec(TxnId id, uint64_t epoch, uint32_t fragment, std::span<const uint8_t> args,
                   uint32_t out_bytes, uint32_t flags, rt::MsgBuffer* out) {
  if (!exec_request_flags_valid(flags)) {
    return Status::InvalidArgument(fmt::format("exec with flags {:#x}", flags));
  }
  if (args.size() > kFragmentBytesMax || out_bytes > kFragmentBytesMax) {
    return Status::InvalidArgument(
        fmt::format("exec with {} argument / {} result bytes", args.size(), out_bytes));
  }
  out->resize(kTxnHeaderBytes + 16 + args.size());
  Writer w(out->payload());
  w.put(id);
  w.put(epoch);
  w.put(fragment);
  w.put(out_bytes);
  w.put(static_cast<uint32_t>(args.size()));
  w.put(flags);
  w.bytes(args.data(), args.size());
  return Status::Ok();
}

Status encode_install(TxnId id, uint64_t epoch, uint64_t tid, const txn::DepVec& vector,
                      rt::MsgBuffer* out, const txn::DepBase& base, txn::DepVecBytes* counted) {
  if (vector.size() > DistTxn::kShardsMax) {
    return Status::InvalidArgument(fmt::format("install with {} vector entries", vector.size()));
  }
  constexpr size_t kHead = kTxnHeaderBytes + 8;
  out->resize(kHead + txn::dep_wire_bytes(txn::dep_wire_entries(vector, base)));
  Writer w(out->payload().first(kHead));
  w.put(id);
  w.put(epoch);
  w.put(tid);
  encode_vector(vector, base, out->payload().subspan(kHead), counted);
  return Status::Ok();
}

Status encode_validate_install(TxnId id, uint64_t epoch, const txn::DepVec& vector,
                               const FragmentCall* fragment, rt::MsgBuffer* out,
                               const txn::DepBase& base, txn::DepVecBytes* counted) {
  const size_t args = fragment != nullptr ? fragment->args.size() : 0;
  if (vector.size() > DistTxn::kShardsMax || args > kFragmentBytesMax) {
    return Status::InvalidArgument(fmt::format(
        "validate_install with {} vector entries, {} argument bytes", vector.size(), args));
  }
  const size_t padded = (args + 7) & ~size_t{7};
  const size_t head = kTxnHeaderBytes + 8 + padded;
  out->resize(head + txn::dep_wire_bytes(txn::dep_wire_entries(vector, base)));
  Writer w(out->payload().first(head));
  w.put(id);
  w.put(epoch);
  w.put(fragment != nullptr ? fragment->fragment : kNoFragment);
  w.put(static_cast<uint32_t>(args));
  if (args != 0) w.bytes(fragment->args.data(), args);
  const uint8_t zeros[8] = {};
  w.bytes(zeros, padded - args);
  encode_vector(vector, base, out->payload().subspan(head), counted);
  return Status::Ok();
}

Status decode_read_reply(std::span<const uint8_t> reply, void* out, uint32_t out_bytes,
                         uint32_t* size_out) {
  Reader r(reply);
  uint32_t size = 0;
  if (!r.get(&size)) return truncated("read reply");
  const size_t copied = std::min<size_t>(size, out_bytes);
  if (size > txn::TableBase::kValueBytesMax) {
    return Status::InvalidArgument(fmt::format("dist wire: read reply of {} bytes", size));
  }
  if (r.left() != copied) {
    return r.left() < copied ? truncated("read reply") : trailing("read reply", r.left() - copied);
  }
  if (copied != 0) std::memcpy(out, r.rest().data(), copied);
  if (size_out != nullptr) *size_out = size;
  return Status::Ok();
}

Status decode_lock_reply(std::span<const uint8_t> reply, uint64_t* proposed_tid) {
  Reader r(reply);
  if (!r.get(proposed_tid)) return truncated("lock reply");
  if (r.left() != 0) return trailing("lock reply", r.left());
  return Status::Ok();
}

Status decode_validate_reply(std::span<const uint8_t> reply, txn::DepVec* deps) {
  Reader r(reply);
  return decode_vector(r, deps, "validate reply");
}

void encode_tid_vector_reply(uint64_t tid, const txn::DepVec& vector, rt::MsgBuffer* out,
                             const txn::DepBase& base, txn::DepVecBytes* counted) {
  out->resize(8 + txn::dep_wire_bytes(txn::dep_wire_entries(vector, base)));
  std::memcpy(out->payload().data(), &tid, 8);
  encode_vector(vector, base, out->payload().subspan(8), counted);
}

Status decode_validate_install_reply(std::span<const uint8_t> reply, txn::DepVec* deps,
                                     uint64_t* tid) {
  Reader r(reply);
  if (!r.get(tid)) return truncated("validate_install reply");
  return decode_vector(r, deps, "validate_install reply");
}

Status split_watermark(std::span<const uint8_t> reply, std::span<const uint8_t>* body,
                       uint64_t* watermark) {
  if (reply.size() < kWatermarkTrailerBytes) return truncated("reply: no watermark trailer");
  const size_t body_bytes = reply.size() - kWatermarkTrailerBytes;
  std::memcpy(watermark, reply.data() + body_bytes, sizeof *watermark);
  *body = reply.first(body_bytes);
  return Status::Ok();
}

void append_watermark(uint64_t watermark, rt::MsgBuffer* reply) {
  const size_t body_bytes = reply->size();
  reply->resize(body_bytes + kWatermarkTrailerBytes);
  std::memcpy(reply->payload().data() + body_bytes, &watermark, sizeof watermark);
}

void encode_watermark(uint32_t shard, uint64_t watermark, rt::MsgBuffer* out) {
  out->resize(kWatermarkRequestBytes);
  Writer w(out->payload());
  w.put(shard);
  w.put(uint32_t{0});
  w.put(watermark);
}

Status decode_watermark(std::span<const uint8_t> request, uint32_t* shard, uint64_t* watermark) {
  Reader r(request);
  uint32_t reserved = 0;
  if (!r.get(shard) || !r.get(&reserved) || !r.get(watermark)) return truncated("watermark");
  if (r.left() != 0) return trailing("watermark", r.left());
  if (reserved != 0) {
    return Status::InvalidArgument(
        fmt::format("dist wire: watermark reserved field {:#x}, not 0", reserved));
  }
  return Status::Ok();
}

Status decode_install_reply(std::span<const uint8_t> reply, uint64_t* tid) {
  Reader r(reply);
  uint64_t installed = 0;
  if (!r.get(&installed)) return truncated("install reply");
  if (r.left() != 0) return trailing("install reply", r.left());
  if (tid != nullptr) *tid = installed;
  return Status::Ok();
}

Status decode_empty_reply(std::span<const uint8_t> reply) {
  if (!reply.empty()) return trailing("empty reply", reply.size());
  return Status::Ok();
}

Status decode_exec_reply(std::span<const uint8_t> reply, std::span<uint8_t> out, uint32_t* out_size,
                         bool* wrote, uint64_t* proposed_tid, ExecPrepared* prepared) {
  Reader r(reply);
  uint32_t flags = 0, size = 0;
  if (!r.get(&flags) || !r.get(proposed_tid) || !r.get(&size)) return truncated("exec reply");
  const bool is_prepared = (flags & kExecPrepared) != 0;
  if ((flags & ~(kExecWrote | kExecPrepared)) != 0 || size > out.size() ||
      (is_prepared && (prepared == nullptr || (flags & kExecWrote) == 0))) {
    return Status::InvalidArgument(
        fmt::format("dist wire: exec reply flags {:#x}, {} of {} bytes", flags, size, out.size()));
  }
  if (r.left() < size) return truncated("exec reply");
  if (!is_prepared && r.left() != size) return trailing("exec reply", r.left() - size);
  const uint8_t* result = nullptr;
  if (!r.bytes(size, &result)) return truncated("exec reply");
  if (size != 0) std::memcpy(out.data(), result, size);
  if (is_prepared) SHOAL_TRY(decode_vector(r, &prepared->deps, "exec reply"));
  if (prepared != nullptr) prepared->prepared = is_prepared;
  *out_size = size;
  *wrote = (flags & kExecWrote) != 0;
  return Status::Ok();
}

}  // namespace wire

// ---- ParticipantService ----

ParticipantService::ParticipantService(Participant& participant, rt::EventLoop& loop)
    : participant_(participant), loop_(loop) {}

ParticipantService::~ParticipantService() {
  if (expiry_armed_) loop_.cancel_timer(expiry_timer_);
}

Status ParticipantService::serve(uint16_t method, std::span<const uint8_t> request,
                                 rt::MsgBuffer* response) {
  Reader r(request);
  TxnId id = 0;
  uint64_t epoch = 0;
  Status s;
  if (method < wire::kMethodFirst || method > wire::kMethodLast) {
    s = Status::NotSupported(fmt::format("dist wire: method {}", method));
  } else if (method == wire::kWatermark) {  // no transaction header
    response->resize(0);
    s = serve_watermark(request);
  } else if (!r.get(&id) || !r.get(&epoch)) {
    s = truncated("request header");
  } else {
    response->resize(0);
    switch (method) {
      case wire::kRead:
        s = serve_read(id, epoch, r.rest(), response);
        break;
      case wire::kLock:
        s = serve_lock(id, epoch, r.rest(), response);
        break;
      case wire::kValidate:
        s = serve_validate(id, epoch, r.rest(), response);
        break;
      case wire::kInstall:
        s = serve_install(id, epoch, r.rest(), response);
        break;
      case wire::kExec:
        s = serve_exec(id, epoch, r.rest(), response);
        break;
      case wire::kValidateInstall:
        s = serve_validate_install(id, epoch, r.rest(), response);
        break;
      case wire::kResolve:
        s = serve_resolve(id, r.rest(), response);
        break;
      default:  // kAbort
        s = r.left() == 0 ? Status::Ok() : trailing("abort", r.left());
        if (s.ok()) participant_.abort(id);
        break;
    }
  }
  if (s.code() == Code::kCorruption || s.code() == Code::kInvalidArgument ||
      s.code() == Code::kNotSupported) {
    ++malformed_;
  }
  arm_expiry();
  return s;
}

Status ParticipantService::serve_read(TxnId id, uint64_t epoch, std::span<const uint8_t> rest,
                                      rt::MsgBuffer* out) {
  Reader r(rest);
  uint32_t table_id = 0, key_words = 0, out_bytes = 0, flags = 0;
  if (!r.get(&table_id) || !r.get(&key_words) || !r.get(&out_bytes) || !r.get(&flags)) {
    return truncated("read");
  }
  if (key_words == 0 || key_words > kKeyWordsMax || out_bytes > txn::TableBase::kValueBytesMax ||
      (flags & ~wire::kReadWantSize) != 0) {
    return Status::InvalidArgument("dist wire: read fields out of range");
  }
  if (r.left() != size_t{key_words} * 8) {
    return r.left() < size_t{key_words} * 8 ? truncated("read") : trailing("read", r.left());
  }
  uint64_t key[kKeyWordsMax];
  std::memcpy(key, r.rest().data(), size_t{key_words} * 8);
  out->resize(4 + size_t{out_bytes});
  uint32_t size = out_bytes;
  const bool want_size = (flags & wire::kReadWantSize) != 0;
  SHOAL_TRY(participant_.read(id, epoch, table_id, key, key_words, out->payload().data() + 4,
                              out_bytes, want_size ? &size : nullptr));
  std::memcpy(out->payload().data(), &size, 4);
  out->resize(4 + std::min(size, out_bytes));
  return Status::Ok();
}

Status ParticipantService::serve_lock(TxnId id, uint64_t epoch, std::span<const uint8_t> rest,
                                      rt::MsgBuffer* out) {
  Reader r(rest);
  uint32_t count = 0;
  if (!r.get(&count)) return truncated("lock");
  // Each write takes at least its header and one key word: bound the loop by the bytes too.
  if (count > DistTxn::kWritesMax || size_t{count} * (kWriteHeaderBytes + 8) > r.left()) {
    return Status::InvalidArgument(fmt::format("dist wire: lock with {} writes", count));
  }
  writes_.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    StagedWrite& w = writes_[i];
    uint8_t key_words = 0, kind = 0;
    uint16_t reserved = 0;
    const uint8_t* p = nullptr;
    if (!r.get(&w.table_id) || !r.get(&key_words) || !r.get(&kind) || !r.get(&reserved) ||
        !r.get(&w.size_bytes)) {
      return truncated("lock write");
    }
    if (key_words == 0 || key_words > kKeyWordsMax ||
        kind > static_cast<uint8_t>(txn::WriteKind::kRemove) || reserved != 0 ||
        w.size_bytes > txn::TableBase::kValueBytesMax) {
      return Status::InvalidArgument("dist wire: lock write fields out of range");
    }
    w.key_word_count = key_words;
    w.kind = static_cast<txn::WriteKind>(kind);
    if (!r.bytes(size_t{key_words} * 8, &p)) return truncated("lock key");
    std::memcpy(w.key, p, size_t{key_words} * 8);
    if (!r.bytes(w.size_bytes, &p)) return truncated("lock value");
    w.value = p;  // points into the request payload, valid for this call (as lock() requires)
  }
  if (r.left() != 0) return trailing("lock", r.left());
  uint64_t tid = 0;
  SHOAL_TRY(participant_.lock(id, epoch, writes_.data(), writes_.size(), &tid));
  out->resize(8);
  std::memcpy(out->payload().data(), &tid, 8);
  return Status::Ok();
}

Status ParticipantService::serve_validate(TxnId id, uint64_t epoch, std::span<const uint8_t> rest,
                                          rt::MsgBuffer* out) {
  if (!rest.empty()) return trailing("validate", rest.size());
  txn::DepVec deps;
  SHOAL_TRY(participant_.validate(id, epoch, &deps));
  const txn::DepBase base = dep_base();
  out->resize(txn::dep_wire_bytes(txn::dep_wire_entries(deps, base)));
  encode_vector(deps, base, out->payload(), &dep_bytes_);
  return Status::Ok();
}

Status ParticipantService::serve_install(TxnId id, uint64_t epoch, std::span<const uint8_t> rest,
                                         rt::MsgBuffer* out) {
  Reader r(rest);
  uint64_t tid = 0;
  if (!r.get(&tid)) return truncated("install");
  txn::DepVec vector;
  SHOAL_TRY(decode_vector(r, &vector, "install"));
  uint64_t installed = 0;
  SHOAL_TRY(participant_.install(id, epoch, tid, vector, &installed));
  out->resize(8);
  std::memcpy(out->payload().data(), &installed, 8);
  return Status::Ok();
}

Status ParticipantService::serve_exec(TxnId id, uint64_t epoch, std::span<const uint8_t> rest,
                                      rt::MsgBuffer* out) {
  Reader r(rest);
  uint32_t fragment = 0, out_bytes = 0, args_bytes = 0, flags = 0;
  if (!r.get(&fragment) || !r.get(&out_bytes) || !r.get(&args_bytes) || !r.get(&flags)) {
    return truncated("exec");
  }
  if (out_bytes > kFragmentBytesMax || args_bytes > kFragmentBytesMax ||
      !wire::exec_request_flags_valid(flags)) {
    return Status::InvalidArgument("dist wire: exec fields out of range");
  }
  if (r.left() != args_bytes) {
    return r.left() < args_bytes ? truncated("exec") : trailing("exec", r.left() - args_bytes);
  }
  constexpr size_t kHead = 16;  // flags u32, proposed TID u64, size u32
  out->resize(kHead + size_t{out_bytes});
  uint32_t size = 0;
  bool wrote = false;
  uint64_t tid = 0;
  ExecPrepared prepared;
  SHOAL_TRY(participant_.exec(id, epoch, fragment, r.rest(),
                              out->payload().subspan(kHead, out_bytes), &size, &wrote,
                              (flags & wire::kExecLockAfter) != 0 ? &tid : nullptr,
                              (flags & wire::kExecPrepareIfPinned) != 0 ? &prepared : nullptr));
  const uint32_t reply_flags =
      (wrote ? wire::kExecWrote : 0) | (prepared.prepared ? wire::kExecPrepared : 0);
  std::memcpy(out->payload().data(), &reply_flags, 4);
  std::memcpy(out->payload().data() + 4, &tid, 8);
  std::memcpy(out->payload().data() + 12, &size, 4);
  const txn::DepBase base = dep_base();
  const size_t vector_bytes =
      prepared.prepared ? txn::dep_wire_bytes(txn::dep_wire_entries(prepared.deps, base)) : 0;
  out->resize(kHead + size_t{size} + vector_bytes);
  if (prepared.prepared) {
    encode_vector(prepared.deps, base, out->payload().subspan(kHead + size), &dep_bytes_);
  }
  return Status::Ok();
}

Status ParticipantService::serve_validate_install(TxnId id, uint64_t epoch,
                                                  std::span<const uint8_t> rest,
                                                  rt::MsgBuffer* out) {
  Reader r(rest);
  uint32_t fragment = 0, args_bytes = 0;
  const uint8_t* args = nullptr;
  if (!r.get(&fragment) || !r.get(&args_bytes)) return truncated("validate_install");
  if (args_bytes > kFragmentBytesMax || (fragment == kNoFragment && args_bytes != 0)) {
    return Status::InvalidArgument("dist wire: validate_install fields out of range");
  }
  const size_t padded = (size_t{args_bytes} + 7) & ~size_t{7};
  if (!r.bytes(padded, &args)) return truncated("validate_install arguments");
  txn::DepVec vector;
  SHOAL_TRY(decode_vector(r, &vector, "validate_install"));
  txn::DepVec deps;
  uint64_t tid = 0;
  const FragmentCall call{fragment, {args, args_bytes}};
  SHOAL_TRY(participant_.validate_install(id, epoch, vector, &deps, &tid,
                                          fragment == kNoFragment ? nullptr : &call));
  wire::encode_tid_vector_reply(tid, deps, out, dep_base(), &dep_bytes_);
  return Status::Ok();
}

Status ParticipantService::serve_resolve(TxnId id, std::span<const uint8_t> rest,
                                         rt::MsgBuffer* out) {
  if (!rest.empty()) return trailing("resolve", rest.size());
  txn::DepVec vector;
  uint64_t tid = 0;
  SHOAL_TRY(participant_.decision(id, &tid, &vector));
  wire::encode_tid_vector_reply(tid, vector, out, dep_base(), &dep_bytes_);
  return Status::Ok();
}

Status ParticipantService::serve_watermark(std::span<const uint8_t> request) {
  uint32_t shard = 0;
  uint64_t w = 0;
  SHOAL_TRY(wire::decode_watermark(request, &shard, &w));
  if (vector_watermark_ != nullptr) return vector_watermark_->raise(shard, w);
  return Status::Ok();
}

void ParticipantService::arm_expiry() {
  if (expiry_armed_) return;
  const uint64_t due_ns = participant_.next_expiry_ns();
  if (due_ns == UINT64_MAX) return;  // nothing can expire: no timer keeps the loop busy
  auto timer = loop_.add_timer(due_ns, &expiry_thunk, this);
  if (!timer.ok()) return;  // timers full: the next request re-arms
  expiry_armed_ = true;
  expiry_timer_ = *timer;
}

void ParticipantService::expiry_thunk(void* self, uint64_t) {
  auto* me = static_cast<ParticipantService*>(self);
  me->expiry_armed_ = false;
  me->participant_.expire_idle();
  me->arm_expiry();
}

}  // namespace shoal::dist

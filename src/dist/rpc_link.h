// The distributed transaction protocol over RPC: RpcLink<E>, a ShardLink that encodes each
// coordinator request into an RPC call on an rt::RpcEndpoint<E>, and ParticipantService, which
// decodes them on the shard's side and calls its Participant.
//
// WIRE FORMAT (the RPC payload; little-endian; every request starts with txn id u64, epoch u64):
//   method       request after (txn id, epoch)                     Ok response
//   kRead    40  table u32, key_words u32, out_bytes u32,           size u32, then
//                flags u32 (bit 0: caller wants the size), keys     min(size, out_bytes) bytes
//   kLock    41  count u32, then count writes: table u32,           proposed TID u64
//                key_words u8, kind u8, reserved u16 (0), size u32,
//                keys (key_words u64), value (size bytes)
//   kValidate 42 -                                                  count u32, (shard u32, ts u64)*
//   kInstall 43  tid u64, count u32, (shard u32, ts u64)*            installed TID u64 (F10)
//   kAbort   44  -                                                  -
//   kExec    45  fragment u32, out_bytes u32, args_bytes u32,        flags u32 (bit 0: the
//                flags u32 (bit 0: lock after, bit 1: prepare        context holds writes, bit
//                if pinned, F9, only with bit 0), args               1: prepared, F9), proposed
//                                                                   TID u64 (0 when not
//                                                                   locked), size u32, size
//                                                                   bytes; if prepared the
//                                                                   deps as kValidate's
//   kValidateInstall 46  fragment u32 (~0: none), args_bytes u32,      tid u64, count u32,
//                        args padded to 8, then the vector as          (shard u32, ts u64)*
//                        kInstall's: count u32, (shard u32, ts u64)*
// Every Ok response then ends with the participant shard's watermark u64 (the trailer,
// appended by the RPC handler after the method's reply above: UINT64_MAX when the shard does
// not replicate, i.e. everything it has is covered). The coordinator's RpcLink strips it and
// raises its VectorWatermark's entry for the shard (vector_watermark.h): 8 bytes per reply.
//   kWatermark 47 (the periodic exchange, watermark_exchange.h; not a transaction: no txn
//                 header) the asker's shard u32, reserved u32 (0),       empty (the trailer
//                 the asker's shard watermark u64                        is the answer)
//   kResolve 48 (F11: asked of a coordinator shard's new leader)  tid u64, count u32,
//                -                                                 (shard u32, ts u64)*: the
//                                                                   decision its log holds;
//                                                                   NotFound: not committed
// A non-Ok participant Status travels as the RPC response code (its message stays behind).
// Bounds, checked before any loop or copy: key_words 1..8, out_bytes and size <= the engine's
// kValueBytesMax, writes <= DistTxn::kWritesMax, vector entries <= DistTxn::kShardsMax, a
// request no larger than the transport's message limit. Decoding never reads past the payload:
// a short or overlong message is Corruption, an out-of-range field InvalidArgument.
//
// Fault handling (rules F1-F5 in participant.h, C1-C3 in coordinator.h): read/lock/validate
// are one RPC call each (the RPC layer retransmits and deduplicates within the call; after its
// deadline the call fails with Timeout and the coordinator aborts). install and abort are
// retried with fresh calls until the participant answers, at most `end_attempts_max` times,
// stopping early when the endpoint reports the shard gone (Unavailable).
//
// Threads: an RpcLink and the coordinator using it run on the loop owning the RpcEndpoint; a
// ParticipantService and its Participant on the shard's loop. Handlers run to completion
// without suspending, so requests for one participant never interleave.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "shoal/status.h"
#include "src/dist/coordinator.h"
#include "src/dist/participant.h"
#include "src/dist/vector_watermark.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"
#include "src/txn/depvec.h"

namespace shoal::dist {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

namespace wire {

enum Method : uint16_t {
  kRead = 40,
  kLock = 41,
  kValidate = 42,
  kInstall = 43,
  kAbort = 44,
  kExec = 45,
  kValidateInstall = 46,
};
inline constexpr uint16_t kMethodFirst = kRead;
inline constexpr uint16_t kWatermark = 47;
inline constexpr uint16_t kResolve = 48;
inline constexpr uint16_t kMethodLast = kResolve;
inline constexpr size_t kWatermarkTrailerBytes = 8;
inline constexpr size_t kWatermarkRequestBytes = 16;
// What a shard without replication reports: every version it has is covered.
inline constexpr uint64_t kNoReplicationWatermark = UINT64_MAX;
inline constexpr uint32_t kExecWrote = 1;            // reply flag
inline constexpr uint32_t kExecPrepared = 2;         // reply flag (F9), the deps follow
inline constexpr uint32_t kExecLockAfter = 1;        // request flag
inline constexpr uint32_t kExecPrepareIfPinned = 2;  // request flag (F9), with kExecLockAfter
// Prepare-if-pinned only with lock-after; no unknown bits.
inline constexpr bool exec_request_flags_valid(uint32_t flags) {
  return (flags & ~(kExecLockAfter | kExecPrepareIfPinned)) == 0 &&
         ((flags & kExecPrepareIfPinned) == 0 || (flags & kExecLockAfter) != 0);
}
inline constexpr size_t kTxnHeaderBytes = 16;  // txn id, epoch
inline constexpr uint32_t kReadWantSize = 1;

// Request encoders: fill *out (resized to fit). InvalidArgument for out-of-bound fields.
[[nodiscard]] Status encode_read(TxnId id, uint64_t epoch, uint32_t table_id, const uint64_t* key,
                                 uint32_t key_word_count, uint32_t out_bytes, bool want_size,
                                 rt::MsgBuffer* out);
[[nodiscard]] Status encode_lock(TxnId id, uint64_t epoch, const StagedWrite* writes, size_t count,
                                 rt::MsgBuffer* out);
void encode_txn_only(TxnId id, uint64_t epoch, rt::MsgBuffer* out);  // kValidate, kAbort
[[nodiscard]] Status encode_exec(TxnId id, uint64_t epoch, uint32_t fragment,
                                 std::span<const uint8_t> args, uint32_t out_bytes, uint32_t flags,
                                 rt::MsgBuffer* out);
// Vectors go in their compact form (src/txn/depvec.h): the entries `base` covers are left
// out (the sender's vectorized watermark; a default base leaves out none), and *counted, when
// given, adds what was written.
[[nodiscard]] Status encode_install(TxnId id, uint64_t epoch, uint64_t tid,
                                    const txn::DepVec& vector, rt::MsgBuffer* out,
                                    const txn::DepBase& base = {},
                                    txn::DepVecBytes* counted = nullptr);
[[nodiscard]] Status encode_validate_install(TxnId id, uint64_t epoch, const txn::DepVec& vector,
                                             const FragmentCall* fragment, rt::MsgBuffer* out,
                                             const txn::DepBase& base = {},
                                             txn::DepVecBytes* counted = nullptr);

// Response decoders (the coordinator's side). Corruption/InvalidArgument on malformed input.
[[nodiscard]] Status decode_read_reply(std::span<const uint8_t> reply, void* out,
                                       uint32_t out_bytes, uint32_t* size_out);
[[nodiscard]] Status decode_lock_reply(std::span<const uint8_t> reply, uint64_t* proposed_tid);
[[nodiscard]] Status decode_validate_reply(std::span<const uint8_t> reply, txn::DepVec* deps);
[[nodiscard]] Status decode_empty_reply(std::span<const uint8_t> reply);
// kInstall's reply: the TID it installed at (a participant that no longer knows it answers
// NotFound instead, F5). tid may be nullptr.
[[nodiscard]] Status decode_install_reply(std::span<const uint8_t> reply, uint64_t* tid);
// kValidateInstall's and kResolve's reply: a TID and a vector.
void encode_tid_vector_reply(uint64_t tid, const txn::DepVec& vector, rt::MsgBuffer* out,
                             const txn::DepBase& base = {}, txn::DepVecBytes* counted = nullptr);
[[nodiscard]] Status decode_validate_install_reply(std::span<const uint8_t> reply,
                                                   txn::DepVec* deps, uint64_t* tid);
// A reply flagged prepared needs `prepared` (InvalidArgument without: not asked for).
[[nodiscard]] Status decode_exec_reply(std::span<const uint8_t> reply, std::span<uint8_t> out,
                                       uint32_t* out_size, bool* wrote, uint64_t* proposed_tid,
                                       ExecPrepared* prepared = nullptr);

// The watermark trailer of an Ok reply: *body is the reply before it. Corruption when the
// reply is shorter than the trailer.
[[nodiscard]] Status split_watermark(std::span<const uint8_t> reply, std::span<const uint8_t>* body,
                                     uint64_t* watermark);
void append_watermark(uint64_t watermark, rt::MsgBuffer* reply);
// kWatermark requests.
void encode_watermark(uint32_t shard, uint64_t watermark, rt::MsgBuffer* out);
[[nodiscard]] Status decode_watermark(std::span<const uint8_t> request, uint32_t* shard,
                                      uint64_t* watermark);

}  // namespace wire

// The shard side: decodes requests and runs them on the Participant. Also runs the
// participant's lease expiry (F4) on the shard's loop while it has contexts.
class ParticipantService {
 public:
  ParticipantService(Participant& participant, rt::EventLoop& loop);
  ~ParticipantService();
  ParticipantService(const ParticipantService&) = delete;
  ParticipantService& operator=(const ParticipantService&) = delete;

  // Registers the protocol's handlers on `rpc` (one service may serve many coordinators'
  // endpoints). REQUIRES: rpc runs on this service's loop and outlives no longer than it.
  template <net::TransportEndpoint E>
  void attach(rt::RpcEndpoint<E>& rpc) {
    for (uint16_t m = wire::kMethodFirst; m <= wire::kMethodLast; ++m) {
      rpc.handle_sync(m, &serve_thunk, this);  // handlers never suspend (see above)
    }
  }

  // Decodes one request, runs it, writes the reply payload into *response. Never crashes on
  // malformed input: Corruption / InvalidArgument / NotSupported (unknown method).
  [[nodiscard]] Status serve(uint16_t method, std::span<const uint8_t> request,
                             rt::MsgBuffer* response);
  // serve() and, on Ok, the watermark trailer (the RPC path).
  static Status serve_thunk(void* self, rt::RpcRequest& r) {
    auto* me = static_cast<ParticipantService*>(self);
    Status s = me->serve(r.method, r.payload, r.response);
    if (s.ok()) wire::append_watermark(me->watermark(), r.response);
    return s;
  }
  // With a VectorWatermark (the worker's, on this loop), a kWatermark request raises the
  // asker's entry with the asker's watermark. REQUIRES: outlives this.
  void set_vector_watermark(VectorWatermark* vw) { vector_watermark_ = vw; }
  // Where the trailer's watermark comes from: the shard's ReplicationLeader::watermark()
  // (any thread may store it). Without one, kNoReplicationWatermark. REQUIRES: outlives this.
  void set_watermark_source(const std::atomic<uint64_t>* source) { watermark_source_ = source; }
  uint64_t watermark() const {
    return watermark_source_ == nullptr ? wire::kNoReplicationWatermark
                                        : watermark_source_->load(std::memory_order_acquire);
  }

  uint64_t malformed() const { return malformed_; }
  // The dependency vectors this service's replies carried (compact against the vector
  // watermark given to set_vector_watermark; all of every vector without one). Loop thread.
  const txn::DepVecBytes& dep_bytes() const { return dep_bytes_; }
  // Off: replies carry every entry, as before compact vectors (a measurement's baseline).
  void set_compact_vectors(bool on) { compact_vectors_ = on; }

 private:
  txn::DepBase dep_base() const {
    return vector_watermark_ != nullptr && compact_vectors_ ? vector_watermark_->base()
                                                            : txn::DepBase{};
  }
  Status serve_read(TxnId id, uint64_t epoch, std::span<const uint8_t> rest, rt::MsgBuffer* out);
  Status serve_lock(TxnId id, uint64_t epoch, std::span<const uint8_t> rest, rt::MsgBuffer* out);
  Status serve_validate(TxnId id, uint64_t epoch, std::span<const uint8_t> rest,
                        rt::MsgBuffer* out);
  Status serve_install(TxnId id, uint64_t epoch, std::span<const uint8_t> rest, rt::MsgBuffer* out);
  Status serve_exec(TxnId id, uint64_t epoch, std::span<const uint8_t> rest, rt::MsgBuffer* out);
  Status serve_validate_install(TxnId id, uint64_t epoch, std::span<const uint8_t> rest,
                                rt::MsgBuffer* out);
  Status serve_watermark(std::span<const uint8_t> request);
  Status serve_resolve(TxnId id, std::span<const uint8_t> rest, rt::MsgBuffer* out);
  void arm_expiry();
  static void expiry_thunk(void* self, uint64_t);

  Participant& participant_;
  rt::EventLoop& loop_;
  std::vector<StagedWrite> writes_;  // decoded lock request (reused; bounded by kWritesMax)
  bool expiry_armed_ = false;
  uint64_t expiry_timer_ = 0;
  uint64_t malformed_ = 0;
  const std::atomic<uint64_t>* watermark_source_ = nullptr;
  VectorWatermark* vector_watermark_ = nullptr;
  txn::DepVecBytes dep_bytes_;
  bool compact_vectors_ = true;
};

struct RpcLinkOptions {
  uint32_t shard = 0;          // the shard this link reaches (for messages)
  uint32_t first_session = 0;  // transactions spread over [first_session, +session_count)
  uint32_t session_count = 8;
  uint64_t call_timeout_ns = 50'000'000;  // per read/lock/validate call, and per end attempt
  uint32_t end_attempts_max = 200;        // install/abort attempts before giving up (Timeout)
  // Raised with every reply's watermark trailer (entry `shard`); nullptr: trailers are checked
  // and dropped. REQUIRES: on the link's loop, outlives the link.
  VectorWatermark* watermark = nullptr;
  // Adds the dependency vectors this link's requests carried; nullptr: not counted. Compact
  // against `watermark` (src/txn/depvec.h), all of every vector without one. REQUIRES: on the
  // link's loop, outlives the link.
  txn::DepVecBytes* dep_bytes = nullptr;
  // Off: requests carry every entry, as before compact vectors (a measurement's baseline).
  bool compact_vectors = true;
};

// The coordinator side. REQUIRES: every call from tasks on the RpcEndpoint's loop; the
// endpoint outlives the link.
template <net::TransportEndpoint E>
class RpcLink final : public ShardLink {
 public:
  RpcLink(rt::RpcEndpoint<E>& rpc, RpcLinkOptions options) : rpc_(rpc), options_(options) {
    SHOAL_ASSERT(options_.session_count > 0 && options_.end_attempts_max > 0, "%s",
                 "bad RpcLinkOptions");
  }

  rt::Task<Status> read(TxnId id, uint64_t epoch, uint32_t table_id, const uint64_t* key,
                        uint32_t key_word_count, void* out, uint32_t out_bytes,
                        uint32_t* size_out) override {
    rt::MsgBuffer req = rpc_.buffer(0);
    SHOAL_CO_TRY(wire::encode_read(id, epoch, table_id, key, key_word_count, out_bytes,
                                   size_out != nullptr, &req));
    auto reply =
        co_await rpc_.call(session_for(id), wire::kRead, std::move(req), options_.call_timeout_ns);
    if (!reply.ok()) co_return annotate(reply.status());
    std::span<const uint8_t> body;
    Status s = strip_watermark(reply->payload(), &body);
    if (s.ok()) s = wire::decode_read_reply(body, out, out_bytes, size_out);
    rpc_.recycle(std::move(*reply));
    co_return s;
  }
  rt::Task<Status> exec(TxnId id, uint64_t epoch, uint32_t fragment, std::span<const uint8_t> args,
                        std::span<uint8_t> out, uint32_t* out_size, bool* wrote,
                        uint64_t* proposed_tid, ExecPrepared* prepared) override {
    rt::MsgBuffer req = rpc_.buffer(0);
    const uint32_t flags = (proposed_tid != nullptr ? wire::kExecLockAfter : 0) |
                           (prepared != nullptr ? wire::kExecPrepareIfPinned : 0);
    SHOAL_CO_TRY(wire::encode_exec(id, epoch, fragment, args, static_cast<uint32_t>(out.size()),
                                   flags, &req));
    auto reply =
        co_await rpc_.call(session_for(id), wire::kExec, std::move(req), options_.call_timeout_ns);
    if (!reply.ok()) co_return annotate(reply.status());
    uint64_t tid = 0;
    std::span<const uint8_t> body;
    Status s = strip_watermark(reply->payload(), &body);
    if (s.ok()) s = wire::decode_exec_reply(body, out, out_size, wrote, &tid, prepared);
    if (proposed_tid != nullptr) *proposed_tid = tid;
    rpc_.recycle(std::move(*reply));
    co_return s;
  }
  rt::Task<Status> lock(TxnId id, uint64_t epoch, const StagedWrite* writes, size_t count,
                        uint64_t* proposed_tid) override {
    rt::MsgBuffer req = rpc_.buffer(0);
    SHOAL_CO_TRY(wire::encode_lock(id, epoch, writes, count, &req));
    auto reply =
        co_await rpc_.call(session_for(id), wire::kLock, std::move(req), options_.call_timeout_ns);
    if (!reply.ok()) co_return annotate(reply.status());
    std::span<const uint8_t> body;
    Status s = strip_watermark(reply->payload(), &body);
    if (s.ok()) s = wire::decode_lock_reply(body, proposed_tid);
    rpc_.recycle(std::move(*reply));
    co_return s;
  }
  rt::Task<Status> validate(TxnId id, uint64_t epoch, txn::DepVec* deps) override {
    rt::MsgBuffer req = rpc_.buffer(0);
    wire::encode_txn_only(id, epoch, &req);
    auto reply = co_await rpc_.call(session_for(id), wire::kValidate, std::move(req),
                                    options_.call_timeout_ns);
    if (!reply.ok()) co_return annotate(reply.status());
    std::span<const uint8_t> body;
    Status s = strip_watermark(reply->payload(), &body);
    if (s.ok()) s = wire::decode_validate_reply(body, deps);
    rpc_.recycle(std::move(*reply));
    co_return s;
  }
  rt::Task<Status> install(TxnId id, uint64_t epoch, uint64_t tid, const txn::DepVec& vector,
                           uint64_t* installed_tid) override {
    rt::MsgBuffer req = rpc_.buffer(0);
    SHOAL_CO_TRY(
        wire::encode_install(id, epoch, tid, vector, &req, dep_base(), options_.dep_bytes));
    co_return co_await call_until_answered(id, wire::kInstall, std::move(req), nullptr,
                                           installed_tid);
  }
  rt::Task<Status> abort(TxnId id, uint64_t epoch) override {
    rt::MsgBuffer req = rpc_.buffer(0);
    wire::encode_txn_only(id, epoch, &req);
    co_return co_await call_until_answered(id, wire::kAbort, std::move(req));
  }
  // One kWatermark call; the reply's trailer is the shard's watermark (strip_watermark).
  rt::Task<Status> exchange_watermark(uint32_t own_shard, uint64_t own_watermark) override {
    rt::MsgBuffer req = rpc_.buffer(0);
    wire::encode_watermark(own_shard, own_watermark, &req);
    auto reply = co_await rpc_.call(options_.first_session, wire::kWatermark, std::move(req),
                                    options_.call_timeout_ns);
    if (!reply.ok()) co_return annotate(reply.status());
    std::span<const uint8_t> body;
    Status s = strip_watermark(reply->payload(), &body);
    if (s.ok()) s = wire::decode_empty_reply(body);
    rpc_.recycle(std::move(*reply));
    co_return s;
  }
  // F11: one call, retried like install until answered (the answer is final: a log).
  rt::Task<Status> decision(TxnId id, uint64_t* tid, txn::DepVec* vector) override {
    rt::MsgBuffer req = rpc_.buffer(0);
    wire::encode_txn_only(id, 0, &req);
    co_return co_await call_until_answered(id, wire::kResolve, std::move(req), vector, tid);
  }
  rt::Task<Status> validate_install(TxnId id, uint64_t epoch, const txn::DepVec& vector,
                                    txn::DepVec* deps, uint64_t* tid,
                                    const FragmentCall* fragment) override {
    rt::MsgBuffer req = rpc_.buffer(0);
    SHOAL_CO_TRY(wire::encode_validate_install(id, epoch, vector, fragment, &req, dep_base(),
                                               options_.dep_bytes));
    co_return co_await call_until_answered(id, wire::kValidateInstall, std::move(req), deps, tid);
  }

 private:
  uint32_t session_for(TxnId id) const {
    return options_.first_session + static_cast<uint32_t>(id % options_.session_count);
  }
  // Our vectorized watermark as the base, except for the shard this link reaches: its own
  // entry is the TID it installs at (or at or above), so it always travels.
  txn::DepBase dep_base() const {
    return options_.watermark != nullptr && options_.compact_vectors
               ? txn::DepBase{&stable_elsewhere, this}
               : txn::DepBase{};
  }
  static bool stable_elsewhere(const void* self, uint32_t shard, uint64_t ts) {
    const auto* me = static_cast<const RpcLink*>(self);
    return shard != me->options_.shard && me->options_.watermark->stable(shard, ts);
  }
  // Splits off an Ok reply's watermark trailer and raises our entry for the shard with it.
  Status strip_watermark(std::span<const uint8_t> reply, std::span<const uint8_t>* body) {
    uint64_t w = 0;
    SHOAL_TRY(wire::split_watermark(reply, body, &w));
    if (options_.watermark != nullptr) return options_.watermark->raise(options_.shard, w);
    return Status::Ok();
  }
  // Names the shard in transport-level failures, so a client sees which shard is gone.
  Status annotate(const Status& s) const {
    if (s.code() == Code::kUnavailable) {
      return Status::Unavailable(
          fmt::format("shard {} unreachable: {}", options_.shard, s.message()));
    }
    if (s.code() == Code::kTimeout) {
      return Status::Timeout(fmt::format("shard {}: {}", options_.shard, s.message()));
    }
    return s;
  }
  // install/abort/validate_install: each attempt is a fresh call (the RPC layer's dedup covers
  // one call only; the participant's idempotence covers the rest). Ends on any answer from
  // the participant. validate_install's reply fills *deps and *tid, install's *tid.
  rt::Task<Status> call_until_answered(TxnId id, uint16_t method, rt::MsgBuffer request,
                                       txn::DepVec* deps = nullptr, uint64_t* tid = nullptr) {
    Status last;
    for (uint32_t attempt = 0; attempt < options_.end_attempts_max; ++attempt) {
      rt::MsgBuffer req = rpc_.buffer(0);
      req.assign(request.payload());
      auto reply =
          co_await rpc_.call(session_for(id), method, std::move(req), options_.call_timeout_ns);
      if (reply.ok()) {
        std::span<const uint8_t> body;
        Status s = strip_watermark(reply->payload(), &body);
        if (s.ok()) {
          s = method == wire::kValidateInstall || method == wire::kResolve
                  ? wire::decode_validate_install_reply(body, deps, tid)
              : method == wire::kInstall ? wire::decode_install_reply(body, tid)
                                         : wire::decode_empty_reply(body);
        }
        rpc_.recycle(std::move(*reply));
        rpc_.recycle(std::move(request));
        co_return s;
      }
      last = annotate(reply.status());
      if (last.code() != Code::kTimeout) break;  // answered with an error, or shard gone
    }
    rpc_.recycle(std::move(request));
    if (last.code() == Code::kTimeout) {
      co_return Status::Timeout(
          fmt::format("shard {}: method {} for {:#x} unanswered after {} "
                      "attempts",
                      options_.shard, method, id, options_.end_attempts_max));
    }
    co_return last;
  }

  rt::RpcEndpoint<E>& rpc_;
  RpcLinkOptions options_;
};

}  // namespace shoal::dist

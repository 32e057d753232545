// RpcEndpoint<E>: request/response RPC over any net::TransportEndpoint (shm, tcp, sim, a WAN
// shaper around any of them), run by one EventLoop.
//
// Sessions: up to max_sessions logical sessions share the one transport endpoint; the session
// id travels in the RPC header and as the transport's session tag. Each direction keeps its
// own tables, so both ends may call and serve at once.
//
// Calls: `co_await rpc.call(session, method, request, timeout_ns)` from a task on the owning
// loop sends header+request (header written into the buffer's headroom, no copy) and
// suspends; the poller, on the response, copies the payload into the call's request buffer
// (the caller's now) and, once the transport batch is released, resumes the caller itself
// (never from inside the batch); a call that ends otherwise (timeout, failure) is scheduled
// on the loop. A caller resumed by the poller may destroy the endpoint (the poller notices).
//
// Serving: the poller copies each request's payload out of the transport batch into its
// server slot, releases the batch, and then runs the handler inline, in the poller: a handler
// that finishes without suspending (the common case) is answered at once, without a task of
// its own or a trip through the ready queue, and the poller flushes the responses before it
// returns. A handler that suspends is adopted by a task of the loop and answered when it ends.
// Both cases count against the loop's max_tasks: a request that arrives while the loop is at
// its limit is dropped (busy_drops) as before.
//
// Window: per session, request rpc_id r may be outstanding only while every id <= r - window
// has finished at the caller (a sliding window, like TCP's): a caller beyond it waits (FIFO),
// which bounds the work a session can queue at the server.
//
// Deadlines (timeout, retransmission) are stamped by the sweep (every tick_ns), not by call():
// the first sweep after a call was sent sets deadline = its clock reading + timeout, so a call
// costs no clock read and a deadline never starts before the send (a task that computed for
// long inside one loop iteration does not get an early one). A call therefore times out
// between timeout and timeout + 2 ticks after it was sent (was: + 1 tick).
//
// Loss and duplication (chosen policy: retransmit + dedup, then Timeout):
//   - retransmit_ns > 0: an unanswered request is re-sent retransmit_ns after its deadline was
//     stamped, doubling up to max_retransmit_ns, until its deadline; then the call completes
//     with Timeout. retransmit_ns == 0 (reliable transports): sent once; Timeout at the deadline.
//   - The server executes each (session, rpc_id) at most once: it remembers, per session, the
//     last `window` ids with their state; a duplicate of a running request is dropped, a
//     duplicate of a finished one gets the cached response again, and an id at or below
//     max_seen - window is known to be finished at the caller and is dropped. So a handler
//     runs at most once per call, even under duplication and retransmission; after a Timeout
//     the caller cannot know whether it ran (at-most-once).
//   - The client ignores responses for ids that are not outstanding (duplicates, late ones).
//   REQUIRES: both ends use the same `window`.
//
// Peer death: a transport poll/send error Unavailable or Corruption fails the endpoint: every
// outstanding call and every window waiter completes with that status, later calls fail at
// once. Handlers that are still running finish, but their responses are not sent.
//
// Sleeping: start() registers the transport's poller with the endpoint's deadline (a WAN
// shaper's next held message) and, for a BlockableEndpoint, its wait fds, so an idle loop
// sleeps until the transport has input instead of in max_block_ns slices. A failed endpoint
// watches no fd (it never polls again, and a dead peer's hang-up would keep waking the loop).
//
// Threads: owned by the loop's thread; call() only from tasks on that loop; a handler must
// end on that thread (its response is sent from where it ends).
// Allocation: a handler's coroutine frame per request (the loop thread's frame pool, task.h),
// plus a task only for a handler that suspends; message buffers are the server slots' own
// (reused, a large one goes back to the bounded pool) or the pool's (steady state: no
// allocation); error paths format messages. One copy per received message (out of the
// transport's receive buffer, so handlers and callers never run inside a poll batch).
// Lifetime: destroy the RpcEndpoint before its loop and transport are destroyed, and only when
// no task on the loop will resume a call or a suspended handler on it again (the loop destroys
// suspended callers); never from inside one of its own handlers.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "src/net/transport.h"
#include "src/runtime/endpoint_wake.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc_message.h"

namespace shoal::rt {

struct RpcOptions {
  uint32_t max_sessions = 64;
  uint32_t window = 8;                       // outstanding requests per session
  uint32_t max_methods = 256;                // method ids [0, max_methods)
  uint64_t timeout_ns = 1'000'000'000;       // default per-call deadline
  uint64_t retransmit_ns = 0;                // first retransmission timeout; 0: never
  uint64_t max_retransmit_ns = 100'000'000;  // backoff cap
  uint64_t tick_ns = 1'000'000;              // sweep period for deadlines/retransmits
  uint32_t poll_batch = 32;                  // completions per transport poll (<= 64)
  uint32_t max_pooled_buffers = 512;
};

struct RpcStats {
  uint64_t calls = 0, completed = 0, timeouts = 0, retransmits = 0;
  uint64_t handler_runs = 0, duplicate_requests = 0, cached_replies = 0, busy_drops = 0;
  uint64_t stale_responses = 0, malformed = 0, writes_ignored = 0;
};

// What a handler sees. payload stays valid until the handler's task finishes.
struct RpcRequest {
  uint32_t session;
  uint16_t method;
  uint64_t rpc_id;
  std::span<const uint8_t> payload;
  MsgBuffer* response;  // resize() and fill; sent when the handler returns Ok
};
// Returns the Status sent back (its code crosses the wire; a non-ok status sends no payload).
using RpcHandler = std::function<Task<Status>(RpcRequest&)>;
// A handler that never suspends: a plain function, run inline with no coroutine frame and no
// std::function call (a dozen nanoseconds per request on the small-RPC path). `ctx` is passed
// back as given.
using RpcSyncHandler = Status (*)(void* ctx, RpcRequest& request);

template <net::TransportEndpoint E>
class RpcEndpoint {
 public:
  RpcEndpoint(EventLoop& loop, E& transport, RpcOptions options = {});
  ~RpcEndpoint();
  RpcEndpoint(const RpcEndpoint&) = delete;
  RpcEndpoint& operator=(const RpcEndpoint&) = delete;

  // Registers the transport poller on the loop. REQUIRES: called once, on the loop thread.
  [[nodiscard]] Status start();
  // REQUIRES: method < max_methods; before traffic for it arrives.
  void handle(uint16_t method, RpcHandler handler);
  // The same for a handler that completes without suspending (RpcSyncHandler). A method has
  // one handler: registering either kind replaces the other.
  void handle_sync(uint16_t method, RpcSyncHandler handler, void* ctx);

  // A pooled buffer with payload_bytes of payload (headroom in front).
  MsgBuffer buffer(size_t payload_bytes) { return pool_.get(payload_bytes); }
  void recycle(MsgBuffer b) { pool_.put(std::move(b)); }

  class Call;
  // `co_await rpc.call(...)` sends `request` on `session` and completes with the response
  // payload or: Timeout (deadline passed; at-most-once), Unavailable/Corruption (endpoint
  // failed), InvalidArgument, or the handler's own non-ok status. timeout_ns 0:
  // options.timeout_ns. Lazy like a Task: nothing is sent until the result is co_awaited.
  // REQUIRES: co_awaited once, by a task on this endpoint's loop.
  Call call(uint32_t session, uint16_t method, MsgBuffer request, uint64_t timeout_ns = 0) {
    return Call(this, session, method, std::move(request), timeout_ns);
  }

  // The awaitable that call() returns (a hand-written awaiter rather than a Task: no coroutine
  // frame, and the Result is built once, in the awaiting coroutine). While it waits for room in
  // its session's window it is queued there; when room opens, the call that finished sends it
  // on its behalf.
  class [[nodiscard]] Call {
   public:
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    bool await_ready() { return !rpc_->admit(*this); }
    void await_suspend(std::coroutine_handle<> caller) { rpc_->start_or_queue(*this, caller); }
    Result<MsgBuffer> await_resume() { return rpc_->take_result(*this); }

   private:
    friend class RpcEndpoint;
    Call(RpcEndpoint* rpc, uint32_t session, uint16_t method, MsgBuffer request,
         uint64_t timeout_ns)
        : rpc_(rpc),
          session_(session),
          method_(method),
          timeout_ns_(timeout_ns),
          request_(std::move(request)) {}

    RpcEndpoint* rpc_;
    uint32_t session_;
    uint16_t method_;
    uint64_t timeout_ns_;
    MsgBuffer request_;  // until sent; then the slot holds it
    uint64_t seq_ = 0;   // the rpc id once sent; 0: not sent (then `early_` is the result)
    Status early_;       // the result of a call that was never sent
    std::coroutine_handle<> caller_;
    Call* next_ = nullptr;  // window queue
  };

  // Fails the endpoint (every outstanding call completes with `why`). Idempotent.
  void fail(Status why);
  const Status& status() const { return failed_; }
  const RpcStats& stats() const { return stats_; }
  uint32_t outstanding() const { return outstanding_; }
  E& transport() { return transport_; }

 private:
  struct ClientSlot {
    bool active = false;  // between send and the caller taking the result
    bool done = false;    // result is set
    uint16_t method = 0;
    uint64_t seq = 0;
    uint64_t timeout_ns = 0;
    uint64_t deadline_ns = kUnstamped;  // stamped by the first sweep after the send
    uint64_t next_rto_ns = kNever;
    uint64_t rto_ns = 0;
    MsgBuffer request;  // kept for retransmission; then holds the response payload
    MsgBuffer response;
    Status status;
    std::coroutine_handle<> waiter;
  };
  struct ClientSession {
    uint64_t next_seq = 1;
    uint64_t base_seq = 1;  // lowest id not yet finished at the caller
    uint32_t active = 0;
    Call* wait_head = nullptr;  // calls waiting for room in the window, FIFO
    Call* wait_tail = nullptr;
  };
  enum class ServerState : uint8_t { kEmpty, kRunning, kDone };
  // One per (session, id % window); the handler of the id it holds sees `request`, whose
  // payload is `payload`, until it ends. Reused by id + window, which the window only lets in
  // after this id finished at the caller.
  struct ServerSlot {
    uint64_t seq = 0;
    ServerState state = ServerState::kEmpty;
    RpcRequest request{};
    MsgBuffer payload;   // kRunning: the request's bytes, copied out of the transport batch
    MsgBuffer response;  // kRunning: filled by the handler; kDone: header + payload, re-sent
                         // to duplicates
  };
  // A request taken from a poll batch, run after the batch is released.
  struct Pending {
    uint32_t session;
    uint64_t rpc_id;
  };
  static constexpr uint64_t kUnstamped = 0;
  // A request payload buffer above this goes back to the pool when its handler ends instead of
  // staying in the slot (the pool is bounded; slots are max_sessions * window).
  static constexpr size_t kSlotKeepBytes = 16 * 1024;

  ClientSlot& cslot(uint32_t session, uint64_t seq) {
    return client_slots_[size_t{session} * options_.window + seq % options_.window];
  }
  ServerSlot& sslot(uint32_t session, uint64_t seq) {
    return server_slots_[size_t{session} * options_.window + seq % options_.window];
  }

  static bool poll_thunk(void* self) { return static_cast<RpcEndpoint*>(self)->poll_once(); }
  static uint64_t deadline_thunk(void* self) {
    return endpoint_due_ns(static_cast<RpcEndpoint*>(self)->transport_);
  }
  static bool prepare_wake_thunk(void* self, int fds[kMaxPollerFds]) {
    auto* me = static_cast<RpcEndpoint*>(self);
    if (!me->failed_.ok()) return true;  // never polls again: nothing to wait for
    if (me->needs_flush_) return false;  // let poll_once() flush (and see its status) first
    me->armed_ = arm_endpoint(me->transport_, fds);
    return me->armed_;
  }
  static void end_wake_thunk(void* self) {
    auto* me = static_cast<RpcEndpoint*>(self);
    if (me->armed_) disarm_endpoint(me->transport_);
    me->armed_ = false;
  }
  static void tick_thunk(void* self, uint64_t) {
    auto* me = static_cast<RpcEndpoint*>(self);
    me->tick_armed_ = false;
    me->sweep();
    me->arm_tick();
  }

  bool poll_once();
  void on_message(const net::Completion& c);
  void on_request(const RpcHeader& h, std::span<const uint8_t> payload);
  void on_response(const RpcHeader& h, std::span<const uint8_t> payload);
  void run_handler(uint32_t session, uint64_t rpc_id);
  Task<void> finish_suspended(Task<Status> handler, uint32_t session, uint64_t rpc_id);
  void answer(uint32_t session, uint64_t rpc_id, Status status);
  void send_wire(uint32_t session, std::span<const uint8_t> wire);
  bool admit(Call& call);
  void start_or_queue(Call& call, std::coroutine_handle<> caller);
  void start(Call& call);
  Result<MsgBuffer> take_result(Call& call);
  // Sets the call's result and schedules its caller on the loop, or, from on_response() (with
  // resume_after_batch), leaves it for poll_once() to resume once the batch is released.
  void complete(ClientSlot& slot, Status status, MsgBuffer response,
                bool resume_after_batch = false);
  void finish_slot(uint32_t session, ClientSlot& slot);
  void arm_tick();
  void sweep();

  EventLoop& loop_;
  E& transport_;
  RpcOptions options_;
  RpcStats stats_;
  BufferPool pool_;
  std::vector<RpcHandler> handlers_;
  struct SyncHandler {
    RpcSyncHandler fn = nullptr;
    void* ctx = nullptr;
  };
  std::vector<SyncHandler> sync_handlers_;
  std::vector<ClientSession> client_;
  std::vector<ClientSlot> client_slots_;  // [session * window + seq % window]
  std::vector<uint64_t> server_max_seq_;  // per session
  std::vector<ServerSlot> server_slots_;  // [session * window + seq % window]
  uint32_t outstanding_ = 0;
  bool started_ = false;
  bool needs_flush_ = false;
  bool tick_armed_ = false;
  bool armed_ = false;  // the transport is prepared to block; end_block() is owed
  uint64_t tick_id_ = 0;
  Status failed_;
  // Completions of one poll. A member, not a local: a local array of 64 would be zeroed (2 KiB)
  // on every poll, mostly empty ones.
  net::Completion batch_[64];
  Pending pending_[64];  // requests of the current batch, run after its release
  uint32_t pending_count_ = 0;
  std::coroutine_handle<> answered_[64];  // callers whose responses came in the current batch
  uint32_t answered_count_ = 0;
  bool* alive_ = nullptr;  // while poll_once() resumes callers: the destructor clears it
};

// ================= implementation =================

template <net::TransportEndpoint E>
RpcEndpoint<E>::RpcEndpoint(EventLoop& loop, E& transport, RpcOptions options)
    : loop_(loop),
      transport_(transport),
      options_(options),
      pool_(options.max_pooled_buffers),
      handlers_(options.max_methods),
      sync_handlers_(options.max_methods),
      client_(options.max_sessions),
      client_slots_(size_t{options.max_sessions} * options.window),
      server_max_seq_(options.max_sessions, 0),
      server_slots_(size_t{options.max_sessions} * options.window) {
  SHOAL_ASSERT(options_.window > 0 && options_.max_sessions > 0, "%s", "bad RpcOptions");
  SHOAL_ASSERT(options_.poll_batch > 0 && options_.poll_batch <= 64, "%s", "poll_batch 1..64");
}

template <net::TransportEndpoint E>
RpcEndpoint<E>::~RpcEndpoint() {
  if (alive_ != nullptr) *alive_ = false;  // destroyed by a caller poll_once() resumed
  if (tick_armed_) loop_.cancel_timer(tick_id_);
  if (started_) loop_.remove_poller(this);
}

template <net::TransportEndpoint E>
Status RpcEndpoint<E>::start() {
  SHOAL_ASSERT(!started_, "%s", "RpcEndpoint::start twice");
  PollerWake wake;
  if constexpr (kEndpointCanWake<E>) wake = {&prepare_wake_thunk, &end_wake_thunk};
  SHOAL_TRY(loop_.add_poller(&poll_thunk, this, &deadline_thunk, wake));
  started_ = true;
  return Status::Ok();
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::handle(uint16_t method, RpcHandler handler) {
  SHOAL_ASSERT(method < handlers_.size(), "method %u >= max_methods", method);
  handlers_[method] = std::move(handler);
  sync_handlers_[method] = SyncHandler{};
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::handle_sync(uint16_t method, RpcSyncHandler handler, void* ctx) {
  SHOAL_ASSERT(method < handlers_.size(), "method %u >= max_methods", method);
  SHOAL_ASSERT(handler != nullptr, "%s", "handle_sync without a handler");
  handlers_[method] = nullptr;
  sync_handlers_[method] = SyncHandler{handler, ctx};
}

// Checks that can fail a call before it is sent; false: the call completes at once with
// call.early_.
template <net::TransportEndpoint E>
bool RpcEndpoint<E>::admit(Call& call) {
  if (!failed_.ok()) [[unlikely]] {
    call.early_ = failed_;
    return false;
  }
  if (call.session_ >= options_.max_sessions) [[unlikely]] {
    call.early_ =
        Status::InvalidArgument(fmt::format("rpc session {} >= max_sessions", call.session_));
    return false;
  }
  if (call.request_.size() + kRpcHeaderBytes > transport_.max_message_bytes()) [[unlikely]] {
    call.early_ = Status::InvalidArgument(
        fmt::format("rpc request of {} bytes too large", call.request_.size()));
    return false;
  }
  call.request_.reserve(call.request_.size());  // the headroom exists even for empty payloads
  return true;
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::start_or_queue(Call& call, std::coroutine_handle<> caller) {
  call.caller_ = caller;
  ClientSession& cs = client_[call.session_];
  if (cs.wait_head == nullptr && cs.next_seq - cs.base_seq < options_.window) [[likely]] {
    start(call);
    return;
  }
  // Beyond the window (or behind others waiting for it): FIFO; finish_slot() starts it.
  if (cs.wait_tail != nullptr) {
    cs.wait_tail->next_ = &call;
  } else {
    cs.wait_head = &call;
  }
  cs.wait_tail = &call;
}

// Sends the call; its caller stays suspended until complete() schedules it.
template <net::TransportEndpoint E>
void RpcEndpoint<E>::start(Call& call) {
  const uint32_t session = call.session_;
  ClientSession& cs = client_[session];
  const uint64_t seq = cs.next_seq++;
  ClientSlot& slot = cslot(session, seq);
  SHOAL_ASSERT(!slot.active, "rpc slot reused while active (session %u id %lu)", session, seq);
  // No clock read here (~25 ns of every round trip on a VM): sweep() stamps the deadline.
  slot.active = true;
  slot.done = false;
  slot.method = call.method_;
  slot.seq = seq;
  slot.timeout_ns = call.timeout_ns_ != 0 ? call.timeout_ns_ : options_.timeout_ns;
  slot.deadline_ns = kUnstamped;
  slot.rto_ns = options_.retransmit_ns;
  slot.next_rto_ns = kNever;
  slot.waiter = call.caller_;
  if (!slot.status.ok()) slot.status = Status::Ok();  // an earlier call's failure
  RpcHeader h{RpcKind::kRequest, 0, call.method_, Code::kOk, session,
              static_cast<uint32_t>(call.request_.size()), seq};
  encode_rpc_header(h, call.request_.header());
  slot.request = std::move(call.request_);
  call.seq_ = seq;
  ++cs.active;
  ++outstanding_;
  ++stats_.calls;
  arm_tick();
  send_wire(session, slot.request.wire());  // a failure completes the slot (and schedules us)
}

template <net::TransportEndpoint E>
Result<MsgBuffer> RpcEndpoint<E>::take_result(Call& call) {
  if (call.seq_ == 0) return std::move(call.early_);
  ClientSlot& slot = cslot(call.session_, call.seq_);
  SHOAL_ASSERT(slot.active && slot.done && slot.seq == call.seq_, "%s",
               "rpc call resumed before its slot completed");
  // Built from the buffer or the status: a Result moved whole would also move the Status's
  // string.
  if (slot.status.ok()) [[likely]] {
    MsgBuffer response = std::move(slot.response);
    finish_slot(call.session_, slot);
    return response;
  }
  Status failed = std::move(slot.status);
  slot.status = Status::Ok();
  finish_slot(call.session_, slot);
  return failed;
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::finish_slot(uint32_t session, ClientSlot& slot) {
  ClientSession& cs = client_[session];
  slot.active = false;
  slot.done = false;
  slot.waiter = {};
  pool_.put(std::move(slot.request));
  --cs.active;
  --outstanding_;
  ++stats_.completed;
  // Slide the window past every finished id; each step is one slot, at most `window`.
  while (cs.base_seq < cs.next_seq && !cslot(session, cs.base_seq).active) ++cs.base_seq;
  // Start as many waiting calls as the window has room for, in FIFO order (they stay suspended
  // until their responses arrive). A failed endpoint has completed every waiter already.
  while (cs.wait_head != nullptr && cs.next_seq - cs.base_seq < options_.window) {
    Call* next = cs.wait_head;
    cs.wait_head = next->next_;
    if (cs.wait_head == nullptr) cs.wait_tail = nullptr;
    start(*next);
  }
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::complete(ClientSlot& slot, Status status, MsgBuffer response,
                              bool resume_after_batch) {
  SHOAL_ASSERT(slot.active && !slot.done, "%s", "completing an idle rpc slot");
  slot.done = true;
  if (!status.ok()) slot.status = std::move(status);  // call() left it Ok
  slot.response = std::move(response);
  if (slot.waiter) {
    if (resume_after_batch) {
      answered_[answered_count_++] = slot.waiter;  // at most one per completion of the batch
    } else {
      loop_.schedule(slot.waiter);
    }
    slot.waiter = {};
  }
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::send_wire(uint32_t session, std::span<const uint8_t> wire) {
  if (!failed_.ok()) return;
  Status s = transport_.send(session, wire);
  if (s.ok()) {
    needs_flush_ = true;
    return;
  }
  // A dead or corrupt link fails everything; anything else (credit timeout) is a lost message
  // that retransmission or the deadline takes care of.
  if (s.code() == Code::kUnavailable || s.code() == Code::kCorruption) fail(std::move(s));
}

template <net::TransportEndpoint E>
bool RpcEndpoint<E>::poll_once() {
  if (!failed_.ok()) return false;
  if (needs_flush_) {
    needs_flush_ = false;
    Status s = transport_.flush();
    if (!s.ok() && (s.code() == Code::kUnavailable || s.code() == Code::kCorruption)) {
      fail(std::move(s));
      return true;
    }
  }
  auto n = transport_.poll(batch_, options_.poll_batch);
  if (!n.ok()) {
    fail(n.status());
    return true;
  }
  if (*n == 0) return false;
  pending_count_ = 0;
  answered_count_ = 0;
  for (size_t i = 0; i < *n; ++i) on_message(batch_[i]);
  transport_.release();
  // Handlers run now, outside the batch (their payloads were copied out), in arrival order.
  const uint32_t pending = pending_count_;
  for (uint32_t i = 0; i < pending; ++i) run_handler(pending_[i].session, pending_[i].rpc_id);
  // Then the callers whose responses arrived, directly rather than through the loop's ready
  // queue and a second pass over its pollers. One of them may destroy this endpoint: the
  // handles are copied out first, and the destructor clears `alive`.
  if (const uint32_t answered = answered_count_; answered != 0) {
    std::coroutine_handle<> callers[64];
    std::copy_n(answered_, answered, callers);
    answered_count_ = 0;
    bool alive = true;
    alive_ = &alive;
    for (uint32_t i = 0; i < answered; ++i) {
      callers[i].resume();
      if (!alive) return true;
    }
    alive_ = nullptr;
  }
  // Publish what the handlers and the callers sent now, not on the loop's next pass over its
  // pollers (frames are visible to the peer as they are committed; this is the tail store).
  if (needs_flush_ && failed_.ok()) {
    needs_flush_ = false;
    Status s = transport_.flush();
    if (!s.ok() && (s.code() == Code::kUnavailable || s.code() == Code::kCorruption)) {
      fail(std::move(s));
    }
  }
  return true;
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::on_message(const net::Completion& c) {
  if (c.kind != net::Completion::Kind::kRecv) {
    ++stats_.writes_ignored;  // one-sided writes belong to the log shipper, not RPC
    return;
  }
  RpcHeader h;
  if (!decode_rpc_header_fast(c.bytes, &h) || h.session >= options_.max_sessions) [[unlikely]] {
    ++stats_.malformed;  // dropped: the caller times out; the link itself stays usable
    return;
  }
  const auto payload = c.bytes.subspan(kRpcHeaderBytes);
  if (h.kind == RpcKind::kRequest) {
    on_request(h, payload);
  } else {
    on_response(h, payload);
  }
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::on_request(const RpcHeader& h, std::span<const uint8_t> payload) {
  uint64_t& max_seq = server_max_seq_[h.session];
  if (h.rpc_id == 0 || h.rpc_id + options_.window <= max_seq) {
    ++stats_.duplicate_requests;  // finished at the caller already
    return;
  }
  ServerSlot& sl = sslot(h.session, h.rpc_id);
  if (sl.seq == h.rpc_id) {
    if (sl.state == ServerState::kDone) {
      ++stats_.cached_replies;
      send_wire(h.session, sl.response.wire());
    } else {
      ++stats_.duplicate_requests;
    }
    return;
  }
  if (sl.state == ServerState::kRunning) {
    ++stats_.busy_drops;  // an older id still runs in this slot; the caller retransmits
    return;
  }
  // Each request of the batch may become a task (if its handler suspends), so the limit is
  // checked with those already taken from this batch counted.
  if (pending_count_ >= loop_.task_room()) {
    ++stats_.busy_drops;  // loop full: drop, the caller retransmits or times out
    return;
  }
  if (sl.payload.capacity() < payload.size()) {
    MsgBuffer bigger = pool_.get(payload.size());
    pool_.put(std::move(sl.payload));
    sl.payload = std::move(bigger);
  }
  sl.payload.assign(payload);
  sl.seq = h.rpc_id;
  sl.state = ServerState::kRunning;
  sl.request = RpcRequest{h.session, h.method, h.rpc_id, sl.payload.payload(), &sl.response};
  max_seq = std::max(max_seq, h.rpc_id);
  pending_[pending_count_++] = {h.session, h.rpc_id};
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::run_handler(uint32_t session, uint64_t rpc_id) {
  ServerSlot& sl = sslot(session, rpc_id);
  SHOAL_ASSERT(sl.seq == rpc_id && sl.state == ServerState::kRunning, "%s",
               "rpc server slot changed before its handler ran");
  sl.response.resize(0);  // also makes sure the header's headroom exists
  const uint16_t method = sl.request.method;
  if (method < sync_handlers_.size() && sync_handlers_[method].fn != nullptr) {
    ++stats_.handler_runs;
    const SyncHandler& sh = sync_handlers_[method];
    answer(session, rpc_id, sh.fn(sh.ctx, sl.request));
    return;
  }
  if (method >= handlers_.size() || !handlers_[method]) {
    answer(session, rpc_id, Status::NotSupported(fmt::format("no rpc handler for method {}", method)));
    return;
  }
  ++stats_.handler_runs;
  Task<Status> handler = handlers_[method](sl.request);
  if (handler.start_inline()) {
    answer(session, rpc_id, handler.take());
    return;
  }
  // Suspended: a task of the loop waits for its end (on_request reserved room for it).
  loop_.adopt(finish_suspended(std::move(handler), session, rpc_id));
}

template <net::TransportEndpoint E>
Task<void> RpcEndpoint<E>::finish_suspended(Task<Status> handler, uint32_t session,
                                            uint64_t rpc_id) {
  // Runs from the ready queue, so the loop's pass over its pollers right after flushes.
  answer(session, rpc_id, co_await handler.join());
}

// Sends the response of a handler that ended with `status` and keeps it for duplicates.
template <net::TransportEndpoint E>
void RpcEndpoint<E>::answer(uint32_t session, uint64_t rpc_id, Status status) {
  ServerSlot& sl = sslot(session, rpc_id);
  SHOAL_ASSERT(sl.seq == rpc_id && sl.state == ServerState::kRunning, "%s",
               "rpc server slot changed under a running handler");
  if (!status.ok()) sl.response.resize(0);
  sl.response.reserve(0);  // a handler may have moved the buffer out: the header needs room
  RpcHeader h{RpcKind::kResponse,
              0,
              sl.request.method,
              status.code(),
              session,
              static_cast<uint32_t>(sl.response.size()),
              rpc_id};
  encode_rpc_header(h, sl.response.header());
  sl.state = ServerState::kDone;
  send_wire(session, sl.response.wire());
  sl.request.payload = {};
  if (sl.payload.capacity() > kSlotKeepBytes) pool_.put(std::move(sl.payload));
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::on_response(const RpcHeader& h, std::span<const uint8_t> payload) {
  ClientSlot& slot = cslot(h.session, h.rpc_id);
  if (!slot.active || slot.done || slot.seq != h.rpc_id) {
    ++stats_.stale_responses;  // duplicate, or the call already timed out
    return;
  }
  if (h.code != Code::kOk) {
    complete(slot, status_from_code(h.code, fmt::format("rpc method {}: remote handler", h.method)),
             {}, /*resume_after_batch=*/true);
    return;
  }
  // The request buffer is not needed any more (no retransmission after a response): the
  // response payload goes into it, saving a pool round trip.
  MsgBuffer resp = std::move(slot.request);
  resp.assign(payload);
  complete(slot, Status::Ok(), std::move(resp), /*resume_after_batch=*/true);
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::arm_tick() {
  if (tick_armed_ || outstanding_ == 0 || !failed_.ok()) return;
  // The iteration's clock suffices: an early sweep only stamps deadlines, which use its own
  // exact reading.
  auto id = loop_.add_timer(loop_.iteration_now_ns() + options_.tick_ns, &tick_thunk, this);
  SHOAL_ASSERT(id.ok(), "rpc tick timer: %s", id.status().to_string().c_str());
  tick_armed_ = true;
  tick_id_ = *id;
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::sweep() {
  const uint64_t now = loop_.now_ns();
  for (uint32_t s = 0; s < options_.max_sessions; ++s) {
    if (client_[s].active == 0) continue;
    for (uint32_t i = 0; i < options_.window; ++i) {
      ClientSlot& slot = client_slots_[size_t{s} * options_.window + i];
      if (!slot.active || slot.done) continue;
      if (slot.deadline_ns == kUnstamped) {  // sent since the last sweep
        slot.deadline_ns = now + slot.timeout_ns;
        slot.next_rto_ns = slot.rto_ns != 0 ? now + slot.rto_ns : kNever;
        continue;
      }
      if (now >= slot.deadline_ns) {
        ++stats_.timeouts;
        complete(slot,
                 Status::Timeout(fmt::format("rpc method {} session {} id {}: no response",
                                             slot.method, s, slot.seq)),
                 {});
      } else if (now >= slot.next_rto_ns) {
        ++stats_.retransmits;
        slot.request.header()[7] |= kRpcFlagRetransmit;
        send_wire(s, slot.request.wire());
        slot.rto_ns = std::min(slot.rto_ns * 2, options_.max_retransmit_ns);
        slot.next_rto_ns = now + slot.rto_ns;
      }
    }
  }
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::fail(Status why) {
  if (!failed_.ok()) return;
  SHOAL_ASSERT(!why.ok(), "%s", "RpcEndpoint::fail with an ok status");
  failed_ = std::move(why);
  for (uint32_t s = 0; s < options_.max_sessions; ++s) {
    for (uint32_t i = 0; i < options_.window; ++i) {
      ClientSlot& slot = client_slots_[size_t{s} * options_.window + i];
      if (slot.active && !slot.done) complete(slot, failed_, {});
    }
    ClientSession& cs = client_[s];
    while (Call* waiting = cs.wait_head) {  // never sent: they complete with the failure
      cs.wait_head = waiting->next_;
      waiting->early_ = failed_;
      loop_.schedule(waiting->caller_);
    }
    cs.wait_tail = nullptr;
  }
}

}  // namespace shoal::rt

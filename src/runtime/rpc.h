// RpcEndpoint<E>: request/response RPC over any net::TransportEndpoint (shm, tcp, sim, a WAN
// shaper around any of them), run by one EventLoop.
//
// Sessions: up to max_sessions logical sessions share the one transport endpoint; the session
// id travels in the RPC header and as the transport's session tag. Each direction keeps its
// own tables, so both ends may call and serve at once.
//
// Calls: `co_await rpc.call(session, method, request, timeout_ns)` from a task on the owning
// loop sends header+request (header written into the buffer's headroom, no copy) and
// suspends; the poller, on the response, copies the payload into a pooled buffer and schedules
// the caller, which the loop resumes in the same iteration right after the pollers (never
// inline from inside the transport's poll batch); a request's handler task starts the same way.
//
// Window: per session, request rpc_id r may be outstanding only while every id <= r - window
// has finished at the caller (a sliding window, like TCP's): a caller beyond it waits (FIFO),
// which bounds the work a session can queue at the server.
//
// Loss and duplication (chosen policy: retransmit + dedup, then Timeout):
//   - retransmit_ns > 0: an unanswered request is re-sent after retransmit_ns, doubling up to
//     max_retransmit_ns, until its deadline; then the call completes with Timeout.
//     retransmit_ns == 0 (reliable transports): sent once; Timeout at the deadline.
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
// Threads: owned by the loop's thread; call() only from tasks on that loop.
// Allocation: each served request spawns one handler task (coroutine frames: the loop thread's
// frame pool, task.h, so none in steady state); message buffers come from a bounded pool
// (steady state: no allocation); error paths format messages. One copy per received message
// (out of the transport's receive buffer, because the task that consumes it runs after the
// transport batch is released).
// Lifetime: destroy the RpcEndpoint before its loop and transport are destroyed, and only when
// no task on the loop will resume a call on it again (the loop destroys suspended callers).
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

  // A pooled buffer with payload_bytes of payload (headroom in front).
  MsgBuffer buffer(size_t payload_bytes) { return pool_.get(payload_bytes); }
  void recycle(MsgBuffer b) { pool_.put(std::move(b)); }

  // Sends `request` on `session` and completes with the response payload or: Timeout (deadline
  // passed; at-most-once), Unavailable/Corruption (endpoint failed), InvalidArgument, or the
  // handler's own non-ok status. timeout_ns 0: options.timeout_ns.
  Task<Result<MsgBuffer>> call(uint32_t session, uint16_t method, MsgBuffer request,
                               uint64_t timeout_ns = 0);

  // Fails the endpoint (every outstanding call completes with `why`). Idempotent.
  void fail(Status why);
  const Status& status() const { return failed_; }
  const RpcStats& stats() const { return stats_; }
  uint32_t outstanding() const { return outstanding_; }
  E& transport() { return transport_; }

 private:
  struct Waiter {
    std::coroutine_handle<> h;
    Waiter* next = nullptr;
  };
  struct ClientSlot {
    bool active = false;  // between send and the caller taking the result
    bool done = false;    // result is set
    uint16_t method = 0;
    uint64_t seq = 0;
    uint64_t deadline_ns = 0;
    uint64_t next_rto_ns = kNever;
    uint64_t rto_ns = 0;
    MsgBuffer request;  // kept for retransmission
    MsgBuffer response;
    Status status;
    std::coroutine_handle<> waiter;
  };
  struct ClientSession {
    uint64_t next_seq = 1;
    uint64_t base_seq = 1;  // lowest id not yet finished at the caller
    uint32_t active = 0;
    Waiter* wait_head = nullptr;
    Waiter* wait_tail = nullptr;
  };
  enum class ServerState : uint8_t { kEmpty, kRunning, kDone };
  struct ServerSlot {
    uint64_t seq = 0;
    ServerState state = ServerState::kEmpty;
    MsgBuffer response;  // kDone: header + payload, re-sent to duplicates
  };

  struct SlotAwaiter {
    ClientSlot* slot;
    bool await_ready() const noexcept { return slot->done; }
    void await_suspend(std::coroutine_handle<> h) noexcept { slot->waiter = h; }
    void await_resume() const noexcept {}
  };
  struct WindowAwaiter {
    ClientSession* cs;
    Waiter* w;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept {
      w->h = h;
      if (cs->wait_tail != nullptr)
        cs->wait_tail->next = w;
      else
        cs->wait_head = w;
      cs->wait_tail = w;
    }
    void await_resume() const noexcept {}
  };

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
  Task<void> serve(uint32_t session, uint64_t rpc_id, uint16_t method, MsgBuffer request);
  void send_wire(uint32_t session, std::span<const uint8_t> wire);
  void complete(ClientSlot& slot, Status status, MsgBuffer response);
  void finish_slot(uint32_t session, ClientSlot& slot);
  void wake_one(ClientSession& cs);
  void arm_tick();
  void sweep();

  EventLoop& loop_;
  E& transport_;
  RpcOptions options_;
  RpcStats stats_;
  BufferPool pool_;
  std::vector<RpcHandler> handlers_;
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
};

// ================= implementation =================

template <net::TransportEndpoint E>
RpcEndpoint<E>::RpcEndpoint(EventLoop& loop, E& transport, RpcOptions options)
    : loop_(loop),
      transport_(transport),
      options_(options),
      pool_(options.max_pooled_buffers),
      handlers_(options.max_methods),
      client_(options.max_sessions),
      client_slots_(size_t{options.max_sessions} * options.window),
      server_max_seq_(options.max_sessions, 0),
      server_slots_(size_t{options.max_sessions} * options.window) {
  SHOAL_ASSERT(options_.window > 0 && options_.max_sessions > 0, "%s", "bad RpcOptions");
  SHOAL_ASSERT(options_.poll_batch > 0 && options_.poll_batch <= 64, "%s", "poll_batch 1..64");
}

template <net::TransportEndpoint E>
RpcEndpoint<E>::~RpcEndpoint() {
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
}

template <net::TransportEndpoint E>
Task<Result<MsgBuffer>> RpcEndpoint<E>::call(uint32_t session, uint16_t method, MsgBuffer request,
                                             uint64_t timeout_ns) {
  if (!failed_.ok()) co_return failed_;
  if (session >= options_.max_sessions) {
    co_return Status::InvalidArgument(fmt::format("rpc session {} >= max_sessions", session));
  }
  if (request.size() + kRpcHeaderBytes > transport_.max_message_bytes()) {
    co_return Status::InvalidArgument(
        fmt::format("rpc request of {} bytes too large", request.size()));
  }
  request.reserve(request.size());  // make sure the headroom exists even for empty payloads
  ClientSession& cs = client_[session];
  while (cs.next_seq - cs.base_seq >= options_.window) {  // bounded by the window
    Waiter w;
    co_await WindowAwaiter{&cs, &w};
    if (!failed_.ok()) co_return failed_;
  }
  const uint64_t seq = cs.next_seq++;
  ClientSlot& slot = cslot(session, seq);
  SHOAL_ASSERT(!slot.active, "rpc slot reused while active (session %u id %lu)", session, seq);
  // The exact clock, not iteration_now_ns(): a task that computed for long in this iteration
  // would otherwise get an early deadline (measured: the read costs ~5 ns of round trip).
  const uint64_t now = loop_.now_ns();
  slot.active = true;
  slot.done = false;
  slot.method = method;
  slot.seq = seq;
  slot.deadline_ns = now + (timeout_ns != 0 ? timeout_ns : options_.timeout_ns);
  slot.rto_ns = options_.retransmit_ns;
  slot.next_rto_ns = slot.rto_ns != 0 ? now + slot.rto_ns : kNever;
  if (!slot.status.ok()) slot.status = Status::Ok();  // an earlier call's failure
  RpcHeader h{
      RpcKind::kRequest, 0, method, Code::kOk, session, static_cast<uint32_t>(request.size()), seq};
  encode_rpc_header(h, request.header());
  slot.request = std::move(request);
  ++cs.active;
  ++outstanding_;
  ++stats_.calls;
  arm_tick();
  send_wire(session, slot.request.wire());
  co_await SlotAwaiter{&slot};
  // Built in the promise from the buffer or the status: a Result moved whole would also move
  // the Status's string.
  if (slot.status.ok()) {
    MsgBuffer response = std::move(slot.response);
    finish_slot(session, slot);
    co_return std::move(response);
  }
  Status failed = std::move(slot.status);
  finish_slot(session, slot);
  co_return std::move(failed);
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
  // Wake as many waiters as the window has room for; they take ids in FIFO order.
  for (uint64_t room = options_.window - (cs.next_seq - cs.base_seq); room > 0; --room) {
    if (cs.wait_head == nullptr) break;
    wake_one(cs);
  }
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::wake_one(ClientSession& cs) {
  if (cs.wait_head == nullptr) return;
  Waiter* w = cs.wait_head;
  cs.wait_head = w->next;
  if (cs.wait_head == nullptr) cs.wait_tail = nullptr;
  loop_.schedule(w->h);
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::complete(ClientSlot& slot, Status status, MsgBuffer response) {
  SHOAL_ASSERT(slot.active && !slot.done, "%s", "completing an idle rpc slot");
  slot.done = true;
  if (!status.ok()) slot.status = std::move(status);  // call() left it Ok
  slot.response = std::move(response);
  if (slot.waiter) {
    loop_.schedule(slot.waiter);
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
  for (size_t i = 0; i < *n; ++i) on_message(batch_[i]);
  transport_.release();
  return true;
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::on_message(const net::Completion& c) {
  if (c.kind != net::Completion::Kind::kRecv) {
    ++stats_.writes_ignored;  // one-sided writes belong to the log shipper, not RPC
    return;
  }
  auto h = decode_rpc_header(c.bytes);
  if (!h.ok() || h->session >= options_.max_sessions) {
    ++stats_.malformed;  // dropped: the caller times out; the link itself stays usable
    return;
  }
  const auto payload = c.bytes.subspan(kRpcHeaderBytes);
  if (h->kind == RpcKind::kRequest) {
    on_request(*h, payload);
  } else {
    on_response(*h, payload);
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
  MsgBuffer req = pool_.get(payload.size());
  if (!payload.empty()) std::memcpy(req.payload().data(), payload.data(), payload.size());
  Status s = loop_.spawn(serve(h.session, h.rpc_id, h.method, std::move(req)));
  if (!s.ok()) {
    ++stats_.busy_drops;  // loop full: drop, the caller retransmits or times out
    return;
  }
  pool_.put(std::move(sl.response));
  sl.seq = h.rpc_id;
  sl.state = ServerState::kRunning;
  max_seq = std::max(max_seq, h.rpc_id);
}

template <net::TransportEndpoint E>
Task<void> RpcEndpoint<E>::serve(uint32_t session, uint64_t rpc_id, uint16_t method,
                                 MsgBuffer request) {
  MsgBuffer response = pool_.get(0);
  Status st;
  RpcRequest r{session, method, rpc_id, request.payload(), &response};
  if (method < handlers_.size() && handlers_[method]) {
    ++stats_.handler_runs;
    st = co_await handlers_[method](r);
  } else {
    st = Status::NotSupported(fmt::format("no rpc handler for method {}", method));
  }
  if (!st.ok()) response.resize(0);
  RpcHeader h{RpcKind::kResponse,
              0,
              method,
              st.code(),
              session,
              static_cast<uint32_t>(response.size()),
              rpc_id};
  encode_rpc_header(h, response.header());
  ServerSlot& sl = sslot(session, rpc_id);
  SHOAL_ASSERT(sl.seq == rpc_id && sl.state == ServerState::kRunning, "%s",
               "rpc server slot changed under a running handler");
  sl.response = std::move(response);
  sl.state = ServerState::kDone;
  pool_.put(std::move(request));
  send_wire(session, sl.response.wire());
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
             {});
    return;
  }
  MsgBuffer resp = pool_.get(payload.size());
  if (!payload.empty()) std::memcpy(resp.payload().data(), payload.data(), payload.size());
  complete(slot, Status::Ok(), std::move(resp));
}

template <net::TransportEndpoint E>
void RpcEndpoint<E>::arm_tick() {
  if (tick_armed_ || outstanding_ == 0 || !failed_.ok()) return;
  auto id = loop_.add_timer(loop_.now_ns() + options_.tick_ns, &tick_thunk, this);
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
    while (client_[s].wait_head != nullptr) wake_one(client_[s]);
  }
}

}  // namespace shoal::rt

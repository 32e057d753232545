// TransportReceiver<E>: lets a coroutine on the per-core EventLoop (src/runtime) co_await the
// next completion of a transport endpoint (src/net):
//
//   auto rx = TransportReceiver<ShmEndpoint>::create(loop, endpoint);   // cold path
//   Result<net::Completion> c = co_await (*rx)->next();
//
// The receiver registers itself as one of the loop's pollers; each loop iteration polls the
// endpoint only while a coroutine waits, and resumes it with the first completion of a batch
// (later ones are handed out by the following next() calls without polling). The bytes of a
// completion stay valid until the next co_await next(): the batch is released then, as the
// transport contract requires (release() before the next poll()).
//
// Sleeping: for a net::BlockableEndpoint the receiver also registers the endpoint's wait fds
// (PollerWake), so a loop whose coroutine waits here sleeps until data or the peer's death
// arrives, not in 1 ms slices; fds are watched only while a coroutine waits (otherwise unread
// data would keep waking the loop). A WAN shaper's next_due_ns() is the poller's deadline.
//
// Threads: owned by the loop's thread; one waiting coroutine at a time. Errors from the
// endpoint (Unavailable, Corruption) are returned by next() and stay sticky.
#pragma once

#include <memory>
#include <utility>

#include "src/net/transport.h"
#include "src/runtime/endpoint_wake.h"
#include "src/runtime/event_loop.h"

namespace shoal::rt {

template <net::TransportEndpoint E>
class TransportReceiver {
 public:
  // REQUIRES: on the loop's thread; `endpoint` and `loop` outlive the receiver.
  [[nodiscard]] static Result<std::unique_ptr<TransportReceiver>> create(EventLoop& loop,
                                                                         E& endpoint) {
    std::unique_ptr<TransportReceiver> rx(new TransportReceiver(loop, endpoint));
    PollerWake wake;
    if constexpr (kEndpointCanWake<E>) wake = {&prepare_wake, &end_wake};
    SHOAL_TRY(loop.add_poller(&TransportReceiver::poll_fn, rx.get(), &due_ns, wake));
    return rx;
  }
  ~TransportReceiver() {
    loop_.remove_poller(this);
    if (batch_live_) ep_.release();
  }
  TransportReceiver(const TransportReceiver&) = delete;
  TransportReceiver& operator=(const TransportReceiver&) = delete;

  struct NextAwaiter {
    TransportReceiver* rx;
    bool await_ready() { return rx->try_fill(); }
    void await_suspend(std::coroutine_handle<> h) {
      SHOAL_ASSERT(!rx->waiter_, "%s", "two coroutines wait on one TransportReceiver");
      rx->waiter_ = h;
    }
    Result<net::Completion> await_resume() {
      if (!rx->error_.ok()) return rx->error_;
      return rx->batch_[rx->index_++];
    }
  };
  NextAwaiter next() { return {this}; }

 private:
  static constexpr size_t kBatch = 32;

  TransportReceiver(EventLoop& loop, E& endpoint) : loop_(loop), ep_(endpoint) {}

  // True when a completion (or an error) is ready for the awaiter.
  bool try_fill() {
    if (!error_.ok() || index_ < count_) return true;
    if (batch_live_) {
      ep_.release();  // the previous completion's bytes go back to the transport
      batch_live_ = false;
    }
    auto n = ep_.poll(batch_, kBatch);
    if (!n.ok()) {
      error_ = n.status();
      return true;
    }
    count_ = *n;
    index_ = 0;
    batch_live_ = count_ > 0;
    return count_ > 0;
  }

  static bool poll_fn(void* ctx) {
    auto* self = static_cast<TransportReceiver*>(ctx);
    if (!self->waiter_ || !self->try_fill()) return false;
    self->loop_.schedule(std::exchange(self->waiter_, {}));
    return true;
  }

  static uint64_t due_ns(void* ctx) {
    return endpoint_due_ns(static_cast<TransportReceiver*>(ctx)->ep_);
  }
  static bool prepare_wake(void* ctx, int fds[kMaxPollerFds]) {
    auto* self = static_cast<TransportReceiver*>(ctx);
    if (!self->waiter_ || !self->error_.ok()) return true;  // nobody to wake: watch nothing
    if (self->index_ < self->count_) return false;          // handed out on the next poll
    self->armed_ = arm_endpoint(self->ep_, fds);
    return self->armed_;
  }
  static void end_wake(void* ctx) {
    auto* self = static_cast<TransportReceiver*>(ctx);
    if (self->armed_) disarm_endpoint(self->ep_);
    self->armed_ = false;
  }

  EventLoop& loop_;
  E& ep_;
  bool armed_ = false;  // the endpoint is prepared to block; end_block() is owed
  net::Completion batch_[kBatch];
  size_t count_ = 0;
  size_t index_ = 0;
  bool batch_live_ = false;
  std::coroutine_handle<> waiter_;
  Status error_;
};

}  // namespace shoal::rt

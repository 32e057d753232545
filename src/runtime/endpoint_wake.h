// Glue between transport endpoints (src/net) and the EventLoop's sleep: what a poller that
// serves an endpoint hands to EventLoop::add_poller so that the loop can sleep until the
// endpoint has input (PollerWake) and wakes for the endpoint's own timers (deadline).
//
//   - arm_endpoint(ep, fds): for a net::BlockableEndpoint (shm, tcp, uring, WanShaped of one
//     of them): ep.prepare_to_block(); false means input is pending, so the loop must not
//     sleep. True: fds[] gets wait_fd() and liveness_fd() (once when they are the same fd),
//     and the loop owes ep.end_block() after the sleep (disarm_endpoint).
//   - endpoint_due_ns(ep): when the endpoint must be polled without input (a WAN shaper's
//     next held message), kNever for endpoints without such a clock.
//   - kEndpointCanWake<E>: whether a poller over E can offer a PollerWake at all; pollers over
//     other endpoints (the simulator's) register without one and, in real time, make the
//     loop sleep in max_block_ns slices.
//
// Threads: the loop's thread, like the endpoint.
#pragma once

#include "src/net/transport.h"
#include "src/runtime/event_loop.h"

namespace shoal::rt {

template <typename E>
inline constexpr bool kEndpointCanWake = net::BlockableEndpoint<E>;

template <net::BlockableEndpoint E>
[[nodiscard]] bool arm_endpoint(E& ep, int fds[kMaxPollerFds]) {
  if (!ep.prepare_to_block()) return false;
  fds[0] = ep.wait_fd();
  const int live = ep.liveness_fd();
  fds[1] = live == fds[0] ? -1 : live;  // tcp: one socket serves both
  return true;
}

template <net::BlockableEndpoint E>
void disarm_endpoint(E& ep) {
  ep.end_block();
}

template <typename E>
uint64_t endpoint_due_ns(E& ep) {
  if constexpr (requires { ep.next_due_ns(); }) {
    return ep.next_due_ns();
  } else {
    return kNever;
  }
}

}  // namespace shoal::rt

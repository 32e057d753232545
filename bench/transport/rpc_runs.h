// The RPC side of `shoal bench transport`: real request/response calls through
// rt::RpcEndpoint<E> (24-byte RPC header, sessions, windows, pooled buffers) over any transport
// endpoint E, between two processes (two_process.h): the server in the child on CPU 1, the
// client here on CPU 0. Both run an rt::EventLoop that busy-polls (spin_ns of a second): the
// raw baselines busy-poll too, so the comparison is like for like.
//
//   rpc_pingpong:   one session, one call outstanding; `iterations` sequential echo calls of
//                   `bytes` each way; the round trip is timed in the calling task, from before
//                   call() until the task has been resumed with the response.
//   rpc_pipelined:  `outstanding` calling tasks (sessions of kRpcWindow callers each) issue
//                   calls back to back for `seconds`; a request of `bytes` is answered with its
//                   first min(bytes, 64) bytes, so large requests stream one way and the acks
//                   cannot fill the client's receive ring (which, with full-size echoes in
//                   flight both ways, could leave both sides blocked in send()). Calls finishing
//                   after a warm-up (a fifth of the run, at most 0.2 s) and before the end count.
//
// Shutdown: the client finishes its calls, tears down its loop and closes its endpoint; the
// server's RpcEndpoint then fails with Unavailable, which is the server's normal way out.
// Errors: the first failed call's Status (Timeout, Unavailable, Corruption), a wrong response
// size (Corruption), or the harness's (fork, a server that fails or does not exit).
// REQUIRES: link is a fresh connected pair that nothing has used yet (E's rings may be created
// lazily by their first user, as UringEndpoint's are).
#pragma once

#include <algorithm>
#include <memory>
#include <utility>

#include "bench/transport/latency.h"
#include "bench/transport/two_process.h"
#include "src/base/env.h"
#include "src/net/transport.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"

namespace shoal::bench::transport {

inline constexpr uint16_t kEchoMethod = 1;  // response: the request's payload
inline constexpr uint16_t kAckMethod = 2;   // response: the first min(n, kAckBytes) bytes
inline constexpr size_t kAckBytes = 64;
inline constexpr uint32_t kRpcWindow = 8;
inline constexpr uint32_t kRpcSessions = 64;
inline constexpr uint32_t kMaxOutstanding = kRpcWindow * kRpcSessions;

struct PipelinedResult {
  double rpcs_per_sec = 0;
  uint64_t measured_rpcs = 0;
  double measured_seconds = 0;
};

template <net::TransportEndpoint E>
[[nodiscard]] Result<LatencyUs> rpc_pingpong(std::pair<E, E>& link, size_t bytes, int iterations);

// REQUIRES: 1 <= outstanding <= kMaxOutstanding; seconds > 0.
template <net::TransportEndpoint E>
[[nodiscard]] Result<PipelinedResult> rpc_pipelined(std::pair<E, E>& link, size_t bytes,
                                                    double seconds, uint32_t outstanding);

// ---- implementation

rt::RpcOptions bench_rpc_options();
rt::LoopOptions bench_loop_options();
// Synchronous handlers (RpcEndpoint::handle_sync): neither suspends.
Status echo_handler(void* ctx, rt::RpcRequest& request);
Status ack_handler(void* ctx, rt::RpcRequest& request);

// The client's shared state; every calling task of a run points at one.
template <net::TransportEndpoint E>
struct CallPlan {
  rt::EventLoop* loop = nullptr;
  rt::RpcEndpoint<E>* rpc = nullptr;
  uint16_t method = kEchoMethod;
  size_t request_bytes = 0;
  size_t response_bytes = 0;
  int iterations = 0;            // ping-pong
  Histogram* latency = nullptr;  // ping-pong
  uint64_t measure_from_ns = 0;  // pipelined
  uint64_t stop_at_ns = 0;       // pipelined
  uint64_t measured_rpcs = 0;    // pipelined
  uint32_t live_callers = 0;
  Status error;

  // Takes a call's outcome; not ok ends the run.
  Status take(Result<rt::MsgBuffer>& response) {
    if (!response.ok()) return response.status();
    const bool size_ok = response->size() == response_bytes;
    rpc->recycle(std::move(*response));
    if (size_ok) return Status::Ok();
    return Status::Corruption("transport bench: response of the wrong size");
  }
  void caller_done() {
    if (--live_callers == 0) loop->stop();
  }
};

template <net::TransportEndpoint E>
rt::Task<void> pingpong_caller(CallPlan<E>* plan) {
  for (int i = 0; i < plan->iterations; ++i) {
    const uint64_t t0 = net::mono_ns();
    auto response =
        co_await plan->rpc->call(0, plan->method, plan->rpc->buffer(plan->request_bytes));
    plan->error = plan->take(response);
    if (!plan->error.ok()) break;
    if (i >= first_recorded(plan->iterations)) plan->latency->record(net::mono_ns() - t0);
  }
  plan->caller_done();
}

template <net::TransportEndpoint E>
rt::Task<void> pipelined_caller(CallPlan<E>* plan, uint32_t session) {
  // Bounded by stop_at_ns (every call completes or times out) or the first error. The loop's
  // iteration clock, not a clock read per call (two reads would be ~6% of a 64 B call): the run
  // window is then exact to within one loop iteration.
  while (plan->error.ok() && plan->loop->iteration_now_ns() < plan->stop_at_ns) {
    auto response =
        co_await plan->rpc->call(session, plan->method, plan->rpc->buffer(plan->request_bytes));
    if (Status s = plan->take(response); !s.ok()) {
      plan->error = std::move(s);
      break;
    }
    const uint64_t now = plan->loop->iteration_now_ns();
    if (now >= plan->measure_from_ns && now < plan->stop_at_ns) ++plan->measured_rpcs;
  }
  plan->caller_done();
}

// Runs the client side: `callers` tasks on a fresh loop until the last one finishes.
// pipelined: callers use sessions of kRpcWindow each; otherwise one ping-pong caller.
template <net::TransportEndpoint E>
Status drive_calls(E& endpoint, CallPlan<E>& plan, uint32_t callers, bool pipelined) {
  RealEnv env;
  rt::EventLoop loop(env, bench_loop_options());
  rt::RpcEndpoint<E> rpc(loop, endpoint, bench_rpc_options());
  SHOAL_TRY(rpc.start());
  plan.loop = &loop;
  plan.rpc = &rpc;
  plan.live_callers = callers;
  for (uint32_t i = 0; i < callers; ++i) {
    SHOAL_TRY(
        loop.spawn(pipelined ? pipelined_caller(&plan, i / kRpcWindow) : pingpong_caller(&plan)));
  }
  loop.run();
  return plan.error;
}

// Stops the server's loop once its RpcEndpoint has failed (the client closed its end).
template <net::TransportEndpoint E>
struct StopOnFailure {
  rt::EventLoop* loop;
  rt::RpcEndpoint<E>* rpc;
  static bool poll(void* self) {
    auto* me = static_cast<StopOnFailure*>(self);
    if (!me->rpc->status().ok()) me->loop->stop();
    return false;
  }
};

// The child's whole life: serve echo and ack calls until the client closes. Exit code 0 when
// the client went away cleanly.
template <net::TransportEndpoint E>
int serve_calls(E& endpoint) {
  RealEnv env;
  rt::EventLoop loop(env, bench_loop_options());
  rt::RpcEndpoint<E> rpc(loop, endpoint, bench_rpc_options());
  if (!rpc.start().ok()) return 10;
  rpc.handle_sync(kEchoMethod, &echo_handler, nullptr);
  rpc.handle_sync(kAckMethod, &ack_handler, nullptr);
  StopOnFailure<E> stop{&loop, &rpc};
  if (!loop.add_poller(&StopOnFailure<E>::poll, &stop).ok()) return 11;
  loop.run();
  loop.remove_poller(&stop);
  return rpc.status().code() == Code::kUnavailable ? 0 : 12;
}

// Forks the server onto link.second and runs client(link.first) here; each side closes its
// copy of the other's end first, so the client's close() reaches the server.
template <net::TransportEndpoint E, typename Client>
Status with_server(const char* what, std::pair<E, E>& link, Client client) {
  return run_two_processes(
      what,
      [&] {
        link.first.close();
        return serve_calls(link.second);
      },
      [&] {
        link.second.close();
        Status s = client(link.first);
        link.first.close();
        return s;
      });
}

template <net::TransportEndpoint E>
Result<LatencyUs> rpc_pingpong(std::pair<E, E>& link, size_t bytes, int iterations) {
  auto latency = std::make_unique<Histogram>();
  CallPlan<E> plan;
  plan.method = kEchoMethod;
  plan.request_bytes = plan.response_bytes = bytes;
  plan.iterations = iterations;
  plan.latency = latency.get();
  SHOAL_TRY(with_server("rpc ping-pong", link,
                        [&](E& ep) { return drive_calls(ep, plan, 1, /*pipelined=*/false); }));
  return latency_of(*latency);
}

template <net::TransportEndpoint E>
Result<PipelinedResult> rpc_pipelined(std::pair<E, E>& link, size_t bytes, double seconds,
                                      uint32_t outstanding) {
  SHOAL_ASSERT(outstanding >= 1 && outstanding <= kMaxOutstanding && seconds > 0, "%s",
               "rpc_pipelined arguments");
  CallPlan<E> plan;
  plan.method = kAckMethod;
  plan.request_bytes = bytes;
  plan.response_bytes = std::min(bytes, kAckBytes);
  const auto run_ns = static_cast<uint64_t>(seconds * 1e9);
  const uint64_t warmup_ns = std::min<uint64_t>(run_ns / 5, 200'000'000);
  SHOAL_TRY(with_server("rpc pipelined", link, [&](E& ep) {
    const uint64_t start = net::mono_ns();
    plan.measure_from_ns = start + warmup_ns;
    plan.stop_at_ns = start + run_ns;
    return drive_calls(ep, plan, outstanding, /*pipelined=*/true);
  }));
  PipelinedResult r;
  r.measured_rpcs = plan.measured_rpcs;
  r.measured_seconds = static_cast<double>(run_ns - warmup_ns) / 1e9;
  r.rpcs_per_sec = static_cast<double>(r.measured_rpcs) / r.measured_seconds;
  return r;
}

}  // namespace shoal::bench::transport

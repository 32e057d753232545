#include "bench/transport/rpc_runs.h"

namespace shoal::bench::transport {

rt::RpcOptions bench_rpc_options() {
  rt::RpcOptions o;
  o.max_sessions = kRpcSessions;
  o.window = kRpcWindow;
  o.timeout_ns = 10'000'000'000;  // a 1 MiB call on a loaded machine must not time out
  o.retransmit_ns = 0;            // every transport here is reliable
  return o;
}

rt::LoopOptions bench_loop_options() {
  rt::LoopOptions o;
  // Busy-poll through the whole run (an idle loop would block in 1 ms slices and the first
  // message after a sleep would pay the wake-up): latency is measured against busy-polled
  // raw baselines. A loop that really idles for a second still goes to sleep.
  o.spin_ns = 1'000'000'000;
  return o;
}

Status echo_handler(void*, rt::RpcRequest& request) {
  request.response->assign(request.payload);
  return Status::Ok();
}

Status ack_handler(void*, rt::RpcRequest& request) {
  request.response->assign(request.payload.first(std::min(request.payload.size(), kAckBytes)));
  return Status::Ok();
}

}  // namespace shoal::bench::transport

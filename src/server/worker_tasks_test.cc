// worker_tasks.h: a worker loop whose load's acknowledgements all wait still answers another
// shard's request.
#include "src/server/worker_tasks.h"

#include <gtest/gtest.h>

#include <cstring>

#include "src/base/env.h"
#include "src/dist/vector_watermark.h"
#include "src/net/shm_transport.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"
#include "src/txn/depvec.h"

namespace shoal::server {
namespace worker_tasks_test {

constexpr uint16_t kInstall = 7;

struct Fill {
  dist::VectorWatermark* vw;
  txn::DepVec never;  // names shard 0 above anything its entry reaches here
  uint32_t ended = 0;
};

rt::Task<void> ack_waiter(Fill* f) {
  (void)co_await f->vw->wait_covered(f->never);
  ++f->ended;
}

// The loop filled as a worker's load fills it when its watermark stops: every terminal and
// every pending-acknowledgement slot a task waiting for a vector that is never covered,
// spawned until the loop refuses (tpcc_client then waits itself). The request that would end
// a prepared half here (an install, answered by a sync handler as the participant's are)
// must still be served: with the loop's budget not counting the acknowledgements (before the
// fix, max_tasks 4096 for 4096 acknowledgements and the terminals) it was dropped (busy_drops)
// at every retransmission and the call timed out.
TEST(WorkerTasks, StalledAcknowledgementsLeaveRoomForAnotherShardsRequest) {
  auto pair = net::ShmEndpoint::pair();
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  RealEnv env;
  WorkerTaskNeeds needs;
  needs.load_acks = kPendingAcksMax;
  needs.terminals = 8;
  rt::LoopOptions lo;
  lo.max_tasks = worker_max_tasks(needs);
  rt::EventLoop loop(env, lo);
  rt::RpcOptions ro;
  ro.retransmit_ns = 20'000'000;
  rt::RpcEndpoint<net::ShmEndpoint> caller(loop, pair->first, ro);
  rt::RpcEndpoint<net::ShmEndpoint> worker(loop, pair->second, ro);
  ASSERT_TRUE(caller.start().ok());
  ASSERT_TRUE(worker.start().ok());
  uint32_t installs = 0;
  worker.handle_sync(
      kInstall,
      [](void* ctx, rt::RpcRequest& r) {
        ++*static_cast<uint32_t*>(ctx);
        r.response->assign(r.payload);
        return Status::Ok();
      },
      &installs);
  dist::VectorWatermark vw(loop, 2, kPendingAcksMax + kTerminalsMax);
  Fill fill{&vw, {}, 0};
  fill.never.raise(0, 1);

  Status answer = Status::Aborted("not run");
  uint32_t spawned = 0;
  ASSERT_TRUE(loop.spawn([](rt::RpcEndpoint<net::ShmEndpoint>* rpc, Status* answer,
                            dist::VectorWatermark* vw, Fill* fill, const uint32_t* spawned,
                            rt::EventLoop* loop) -> rt::Task<void> {
                    co_await loop->yield();  // every waiter parked first
                    rt::MsgBuffer b = rpc->buffer(8);
                    std::memset(b.payload().data(), 1, 8);
                    auto r = co_await rpc->call(0, kInstall, std::move(b), 500'000'000);
                    *answer = r.status();
                    if (r.ok()) rpc->recycle(std::move(*r));
                    vw->release_all(Status::Timeout("test over"));
                    while (fill->ended < *spawned) co_await loop->yield();  // bounded: all end
                    loop->stop();
                  }(&caller, &answer, &vw, &fill, &spawned, &loop))
                  .ok());
  for (uint32_t i = 0; i < needs.load_acks + needs.terminals; ++i) {
    if (!loop.spawn(ack_waiter(&fill)).ok()) break;  // the loop refuses: the terminal waits
    ++spawned;
  }
  EXPECT_EQ(spawned, needs.load_acks + needs.terminals);
  loop.run();
  EXPECT_TRUE(answer.ok()) << answer.to_string()
                           << " (requests dropped: " << worker.stats().busy_drops << ")";
  EXPECT_EQ(installs, 1u);
  EXPECT_EQ(fill.ended, spawned);
}

// Every need at its bound leaves kServingTasks for the rest.
TEST(WorkerTasks, EveryNeedAtItsBoundLeavesTheServingRoom) {
  WorkerTaskNeeds n;
  EXPECT_EQ(worker_max_tasks(n), kServingTasks);
  n.load_acks = kPendingAcksMax;
  n.terminals = kTerminalsMax;
  n.resp_connections = 100;
  n.client_connections = 50;
  n.kv_acks = kPendingAcksMax;
  EXPECT_EQ(worker_max_tasks(n) - n.load_acks - n.terminals - n.resp_connections -
                n.client_connections - n.kv_acks,
            kServingTasks);
}

}  // namespace worker_tasks_test
}  // namespace shoal::server

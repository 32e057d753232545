// The task budget of a shard server's worker loop (rt::LoopOptions::max_tasks, make_worker in
// shard_server.cc).
//
// A worker loop runs as tasks: its load's clients, the acknowledgements they hand off (one
// task per transaction waiting for the vectorized watermark, tpcc_client in shard_load.cc),
// the Redis and client ports' connections and acknowledgements, and the handlers of other
// shards' requests. The RPC layer admits a request only while the loop has room for a task
// (rpc.h: otherwise it is dropped, busy_drops, and the caller retransmits until its deadline),
// sync handlers included. So every other kind of task must have room of its own: if waiting
// acknowledgements could take the whole table, a worker whose acknowledgements stalled would
// drop every request of the other shards, among them the installs and aborts that end the
// prepared halves holding its own stream's promise (participant.h F10), and with it the
// watermark those acknowledgements wait for: a stall would never end (the "collapse" of kill
// runs, docs/RESULTS.md).
//
// Invariant: worker_max_tasks(n) - every need of n at its bound >= kServingTasks.
// Threads: constants and pure functions.
#pragma once

#include <cstdint>

namespace shoal::server {

// Transactions per worker waiting for their acknowledgement while their terminal goes on; a
// terminal that finds every slot taken waits for its own (backpressure).
inline constexpr uint32_t kPendingAcksMax = 4096;
inline constexpr uint32_t kTerminalsMax = 1024;  // TPC-C terminals per shard (on_start)
// Room kept for everything else: request handlers (each admitted request may need a task),
// failover tasks (resolve_prepared), timers' tasks. The loop's default budget.
inline constexpr uint32_t kServingTasks = 4096;

// What a worker's loop may hold as tasks besides kServingTasks, each at its bound.
struct WorkerTaskNeeds {
  uint32_t load_acks = 0;  // kPendingAcksMax when the load waits for the watermark, else 0
  uint32_t terminals = 0;  // load clients: at most kTerminalsMax
  uint32_t resp_connections = 0;
  uint32_t client_connections = 0;
  uint32_t kv_acks = 0;  // the key-value ports' pending acknowledgements (KvAcks)
};

inline uint32_t worker_max_tasks(const WorkerTaskNeeds& n) {
  return kServingTasks + n.load_acks + n.terminals + n.resp_connections + n.client_connections +
         n.kv_acks;
}

}  // namespace shoal::server

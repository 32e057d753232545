// The Redis front end's backend inside a shard server: resp::KvBackend / KvTxn over the
// worker's dist::Coordinator, so any server coordinates any transaction, across shards.
//
// A key's shard comes from the config's kv_split_keys (ClusterConfig::shard_for_kv_key). A
// transaction that stays on the server's own shard runs on the worker's local Txn (the fast
// path, DistKvOptions::local); otherwise each get/put/del is one fragment (kv_fragments.h) executed
// on the owning shard in the transaction's context: the local shard's through the worker's direct
// LocalLink (a function call: a GET on a local key never suspends), another shard's over its
// RpcLink. A scan walks the shards in key order, each shard's part of the range by fragments of
// bounded results. commit() is the coordinator's 2PC (Coordinator::finish); Aborted and Timeout
// come back as Aborted, which the session retries from begin().
//
// Acknowledgement (KvAcks): a committed transaction's CommitInfo::durable_token names its
// dependency vector until the vectorized watermark covers it (a shard's own entry comes from
// its replication leader's watermark: durable on a majority of every shard it touched), as
// the TPC-C terminals' acknowledgement. Without replication anywhere in the cluster, or when
// the server replies at the speculative commit, tokens are 0.
//
// Frames: on the local fast path get, put, del and commit are not coroutines: they answer with
// ready tasks (rt::Task<T>::ready), so a local command pays no coroutine frame for them; a call
// to another shard, or a wait (an ack token's, the backoff after a conflict), goes on in one.
//
// Memory: an idle session's DistKvTxn holds no DistTxn (taken from the backend's pool at
// begin(), returned at the end) and no large buffer (results over 64 KiB are freed after the
// transaction).
// Threads: everything here belongs to one worker's loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/cluster/config.h"
#include "src/dist/coordinator.h"
#include "src/dist/vector_watermark.h"
#include "src/resp/kv_backend.h"
#include "src/runtime/event_loop.h"
#include "src/txn/engine.h"

namespace shoal::server {

// Durability tokens for one worker's sessions: token t stands for a committed transaction's
// vector until the vectorized watermark covers it. A vector naming only our own shard (every
// local transaction's) joins a queue in commit order watched by one task, which a raise of
// our entry resumes once to free every token it covered; any other vector gets an ack task of
// its own. (The worker's loop resumes one ready task per iteration, polling between: with a
// task per token, the few hundred tokens of one chosen entry took as many iterations, about
// 10 ms under redis-benchmark -P 16.) Bounded: `slots` tokens pending at once; beyond, or
// without task room, token_for() waits for coverage itself (back-pressure on the committing
// session) and returns 0.
class KvAcks {
 public:
  // own_shard: the worker's shard, whose single-entry vectors share one waiting task.
  KvAcks(rt::EventLoop& loop, dist::VectorWatermark& watermark, uint32_t slots, uint32_t own_shard);
  ~KvAcks();
  KvAcks(const KvAcks&) = delete;
  KvAcks& operator=(const KvAcks&) = delete;

  // 0 when `vector` is covered already; else a token for is_durable().
  rt::Task<uint64_t> token_for(const txn::DepVec& vector);
  bool is_durable(uint64_t token) const;
  // Counts acknowledgements: a server re-checks its gated replies when it moves.
  uint64_t acknowledged() const { return acknowledged_; }
  uint64_t pending() const { return pending_; }

 private:
  // A token is (generation << kSlotBits) | slot; a slot's token changes when it is freed
  // (covered) and again when reused, so a token not in its slot any more is durable.
  static constexpr uint32_t kSlotBits = 20;
  struct Slot {
    uint64_t token = 0;  // 0: free
    uint64_t generation = 0;
    txn::DepVec vector;
  };
  // Vectors naming only our own shard (every local transaction's) queue in commit order for
  // one task, drain_own; others get a task each (watch).
  bool own_only(const txn::DepVec& v) const {
    return v.size() == 1 && v.entries()[0].shard == own_shard_;
  }
  // Queues `slot` (free_.back(), its token set) for drain_own, spawning it if needed; false
  // without task room (nothing queued).
  bool queue_own(uint32_t slot);
  void acknowledge(uint32_t slot);  // covered: the token becomes durable, the slot free
  static rt::Task<void> watch(KvAcks* acks, uint32_t slot);
  static rt::Task<void> drain_own(KvAcks* acks);

  rt::EventLoop& loop_;
  dist::VectorWatermark& watermark_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  uint64_t acknowledged_ = 0;
  uint64_t pending_ = 0;
  uint32_t own_shard_;
  std::vector<uint32_t> own_;  // ring of queued slots (as many as slots: never full)
  uint64_t own_head_ = 0;
  uint64_t own_tail_ = 0;
  bool draining_ = false;  // drain_own runs
};

struct DistKvOptions {
  dist::Coordinator* coordinator = nullptr;
  const cluster::ClusterConfig* config = nullptr;
  KvAcks* acks = nullptr;          // nullptr: reply at the speculative commit
  uint32_t pooled_txns_max = 256;  // DistTxns kept for reuse
  rt::EventLoop* loop = nullptr;   // backoff after a conflict (nullptr: none)
  // The local fast path (nullptr: every transaction through 2PC): a transaction whose keys
  // are all on own_shard runs on this Txn of the worker's and commits there, as TPC-C's local
  // terminals do (commit_hook logs it to the worker's replication stream). Its first key on
  // another shard aborts the attempt, and the session's retry runs it through 2PC. Local
  // transactions never suspend, so one Txn serves every session of the loop.
  txn::Txn* local = nullptr;
  txn::BytesTable* table = nullptr;
  uint32_t own_shard = 0;
  txn::CommitHook commit_hook = nullptr;
  void* commit_hook_ctx = nullptr;
};

class DistKvBackend final : public resp::KvBackend {
 public:
  explicit DistKvBackend(DistKvOptions options);
  ~DistKvBackend() override;
  std::unique_ptr<resp::KvTxn> open() override;
  // Without the local fast path (one Txn shared by the loop's sessions): every transaction
  // through the coordinator, so an open one holds only its own DistTxn. A participant drops
  // a transaction's state when its coordinator is silent for its lease (ParticipantOptions::
  // lease_ns): an interactive transaction idle that long fails at its next call.
  std::unique_ptr<resp::KvTxn> open_interactive() override;
  // DBSIZE: every shard's keys, counted in batches of short read-only transactions (not one
  // snapshot, as the interface allows).
  rt::Task<Result<uint64_t>> count_keys() override;

  const DistKvOptions& options() const { return options_; }
  std::unique_ptr<dist::DistTxn> take_txn();
  void give_back(std::unique_ptr<dist::DistTxn> txn);

 private:
  DistKvOptions options_;
  std::vector<std::unique_ptr<dist::DistTxn>> pool_;
};

}  // namespace shoal::server

// The participant side of Shoal's distributed transactions (design section 3, steps 1-6): one
// per shard worker. It serves a remote coordinator's reads, takes its buffered writes, and
// runs the shard's part of certification on a txn::Txn of its own per remote transaction.
//
// Protocol, per transaction and participant:
//   read*            execution: served from this shard, recorded for validation
//   lock(writes)     stages the writes, locks them, proposes this shard's TID (timestamp)
//   validate         checks every read this shard served; only after every participant locked
//   install(vector)  installs at the vector's entry for this shard, unlocks: visible at once
//   abort            at any point: releases whatever is held
// A read-only participant gets validate then finish (install with no writes).
//
// Every request carries the coordinator's epoch; a request from an older epoch than the
// participant's is refused (Aborted, "stale epoch"), so a deposed coordinator cannot touch
// data after a failover.
//
// Threads: owned by one worker thread; every call runs there. Bounds: at most
// `inflight_max` remote transactions at once (Unavailable beyond: backpressure).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "shoal/status.h"
#include "src/txn/engine.h"

namespace shoal::dist {

// Globally unique: coordinator shard (16 bits) | coordinator worker (8) | sequence (40).
using TxnId = uint64_t;
inline TxnId make_txn_id(uint32_t shard, uint32_t worker, uint64_t seq) {
  return (uint64_t{shard} << 48) | (uint64_t{worker & 0xff} << 40) | (seq & ((1ULL << 40) - 1));
}

// One buffered write, as the coordinator ships it with lock().
struct StagedWrite {
  uint32_t table_id = 0;
  uint32_t key_word_count = 0;
  uint64_t key[8] = {};
  txn::WriteKind kind = txn::WriteKind::kPut;
  const void* value = nullptr;  // valid for the duration of the lock() call
  uint32_t size_bytes = 0;
};

class Participant {
 public:
  Participant(txn::Engine& engine, uint32_t shard_id, uint32_t inflight_max = 1024);
  ~Participant();

  uint32_t shard_id() const { return shard_id_; }
  uint64_t epoch() const { return epoch_; }
  // Epochs only move forward.
  void advance_epoch(uint64_t epoch);

  // Reads a key for transaction `id` (starting its context on first contact).
  [[nodiscard]] Status read(TxnId id, uint64_t epoch, uint32_t table_id, const uint64_t* key,
                            uint32_t key_word_count, void* out, uint32_t out_bytes,
                            uint32_t* size_out);
  // Stages the writes, locks them, and proposes this shard's TID.
  [[nodiscard]] Status lock(TxnId id, uint64_t epoch, const StagedWrite* writes, size_t count,
                            uint64_t* proposed_tid);
  // Validates the reads served here; on Ok *deps holds what they depend on. A participant
  // that only served reads (never locked) is finished after a successful validate.
  [[nodiscard]] Status validate(TxnId id, uint64_t epoch, txn::DepVec* deps);
  // Installs at `tid` with the transaction's vector and forgets the transaction.
  [[nodiscard]] Status install(TxnId id, uint64_t epoch, uint64_t tid, const txn::DepVec& vector);
  // Releases everything held for `id` (no-op for an unknown id: aborts may race finishes).
  void abort(TxnId id);

  size_t active() const { return active_.size(); }

 private:
  enum class Phase : uint8_t { kExecuting, kLocked };
  struct Slot {
    std::unique_ptr<txn::Txn> txn;
    Phase phase = Phase::kExecuting;
    bool in_use = false;
  };
  [[nodiscard]] Status check_epoch(uint64_t epoch) const;
  // The context of `id`, started if `start` and absent; nullptr with *status set otherwise.
  Slot* slot_for(TxnId id, bool start, Status* status);
  void finish(TxnId id, Slot* slot);
  [[nodiscard]] Status stage(txn::Txn& txn, const StagedWrite& w);

  txn::Engine& engine_;
  uint32_t shard_id_;
  uint32_t inflight_max_;
  uint64_t epoch_ = 1;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::unordered_map<TxnId, uint32_t> active_;
};

}  // namespace shoal::dist

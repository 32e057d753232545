// DecisionLog: the distributed transactions whose half a shard's log holds (its coordinator's
// decisions, and the halves other shards' coordinators installed here), as replay installs them
// (records flagged DIST_TXN, docs/LOG_FORMAT.md), so that the replica that takes over after
// the leader's process died can answer the other shards: those still holding a prepared half
// of a transaction it coordinated, and coordinators that left a transaction in doubt here:
// committed (here is where, and its vector) or not (docs/REPLICATION.md,
// "Failover across shards").
//
// Only installed records are noted: replay never installs a record above an epoch fence, so a
// new leader's log holds exactly the decisions at or below its final watermark, the ones that
// survived. Bounded: the latest `capacity` decisions, oldest forgotten first; a prepared half
// waits for its answer at most a failover's length, while capacity covers many seconds of a
// shard's cross-shard commits (kDecisionsMax). A vector longer than kDecisionDepsMax keeps its
// first entries and is counted (truncated()).
//
// Threads: note() on the replay thread; find() from any thread (a new leader's workers answer
// from it while nothing is noted any more). A mutex: find() is rare (a failover), note() one
// uncontended lock per cross-shard transaction replayed.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "src/repl/log_format.h"
#include "src/txn/depvec.h"

namespace shoal::repl {

inline constexpr size_t kDecisionsMax = size_t{1} << 15;
inline constexpr uint32_t kDecisionDepsMax = 8;

class DecisionLog {
 public:
  // REQUIRES: capacity >= 1.
  explicit DecisionLog(size_t capacity = kDecisionsMax) : capacity_(capacity) {}

  // An installed record; records without a distributed transaction id are ignored.
  void note(const RecordView& record);
  // The decision for `dist_txn_id`: true with its commit TID at this shard and its vector (the
  // record's dependencies plus this shard's entry, `shard`), false when not noted.
  [[nodiscard]] bool find(uint64_t dist_txn_id, uint32_t shard, uint64_t* commit_tid,
                          txn::DepVec* vector) const;
  size_t size() const;
  uint64_t truncated() const;

 private:
  struct Decision {
    uint64_t dist_txn_id = 0;
    uint64_t commit_tid = 0;
    uint32_t dep_count = 0;
    txn::DepEntry deps[kDecisionDepsMax];
  };
  const size_t capacity_;
  mutable std::mutex mu_;
  // A ring once full (next_ is the oldest); grows to capacity_ first, so a short-lived applier
  // (tests, the simulator) does not pay for the whole of it.
  std::vector<Decision> ring_;
  size_t next_ = 0;
  uint64_t truncated_ = 0;
};

}  // namespace shoal::repl

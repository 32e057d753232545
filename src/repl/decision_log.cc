#include "src/repl/decision_log.h"

#include <algorithm>

namespace shoal::repl {

void DecisionLog::note(const RecordView& record) {
  const uint64_t id = record.dist_txn_id();
  if (id == 0) return;
  Decision d;
  d.dist_txn_id = id;
  d.commit_tid = record.commit_tid();
  d.dep_count = std::min(record.dep_count(), kDecisionDepsMax);
  for (uint32_t i = 0; i < d.dep_count; ++i) d.deps[i] = record.dep(i);
  std::lock_guard<std::mutex> lock(mu_);
  if (record.dep_count() > kDecisionDepsMax) ++truncated_;
  if (ring_.size() < capacity_) {
    ring_.push_back(d);
    return;
  }
  ring_[next_] = d;
  next_ = (next_ + 1) % capacity_;
}

bool DecisionLog::find(uint64_t dist_txn_id, uint32_t shard, uint64_t* commit_tid,
                       txn::DepVec* vector) const {
  std::lock_guard<std::mutex> lock(mu_);
  // A linear scan: asked a handful of times per failover, never on a transaction's path.
  for (const Decision& d : ring_) {
    if (d.dist_txn_id != dist_txn_id) continue;
    *commit_tid = d.commit_tid;
    vector->clear();
    for (uint32_t i = 0; i < d.dep_count; ++i) vector->raise(d.deps[i].shard, d.deps[i].ts);
    vector->raise(shard, d.commit_tid);
    return true;
  }
  return false;
}

size_t DecisionLog::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ring_.size();
}

uint64_t DecisionLog::truncated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return truncated_;
}

}  // namespace shoal::repl

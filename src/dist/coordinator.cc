#include "src/dist/coordinator.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace shoal::dist {

// ---- DistTxn ----

void DistTxn::reset(TxnId id, uint64_t epoch) {
  id_ = id;
  epoch_ = epoch;
  touched_.clear();
  writes_.clear();
  values_.reset();
  vector_.clear();
}

void DistTxn::touch(uint32_t shard) {
  if (std::find(touched_.begin(), touched_.end(), shard) == touched_.end()) {
    touched_.push_back(shard);
  }
}

DistTxn::Buffered* DistTxn::find_buffered(uint32_t shard, uint32_t table_id, const uint64_t* key,
                                          uint32_t key_word_count) {
  for (Buffered& b : writes_) {
    if (b.shard == shard && b.write.table_id == table_id &&
        b.write.key_word_count == key_word_count &&
        std::equal(key, key + key_word_count, b.write.key)) {
      return &b;
    }
  }
  return nullptr;
}

Status DistTxn::buffer(uint32_t shard, uint32_t table_id, const uint64_t* key,
                       uint32_t key_word_count, txn::WriteKind kind, const void* value,
                       uint32_t size_bytes) {
  if (shard >= coordinator_->shard_count()) return Status::InvalidArgument("no such shard");
  if (key_word_count == 0 || key_word_count > 8) return Status::InvalidArgument("key words");
  if (size_bytes > txn::TableBase::kValueBytesMax) return Status::InvalidArgument("value size");
  void* copy = nullptr;
  if (value != nullptr) {
    copy = values_.allocate(size_bytes == 0 ? 1 : size_bytes);
    std::memcpy(copy, value, size_bytes);
  }
  if (Buffered* b = find_buffered(shard, table_id, key, key_word_count)) {
    // A second write to one key, merged as the engine merges them: inserting then updating
    // stays an insert; removing then inserting is an overwrite. (Inserting then removing
    // stays a remove of a key the shard does not have: it fails there with NotFound.)
    using txn::WriteKind;
    if (b->write.kind == WriteKind::kRemove && kind == WriteKind::kInsert) {
      b->write.kind = WriteKind::kPut;
    } else if (!(b->write.kind == WriteKind::kInsert && kind == WriteKind::kPut)) {
      b->write.kind = kind;
    }
    b->write.value = copy;
    b->write.size_bytes = size_bytes;
    return Status::Ok();
  }
  if (writes_.size() >= kWritesMax) return Status::InvalidArgument("too many writes");
  touch(shard);
  Buffered b;
  b.shard = shard;
  b.write.table_id = table_id;
  b.write.key_word_count = key_word_count;
  std::copy(key, key + key_word_count, b.write.key);
  b.write.kind = kind;
  b.write.value = copy;
  b.write.size_bytes = size_bytes;
  writes_.push_back(b);
  return Status::Ok();
}

rt::Task<Status> DistTxn::get(uint32_t shard, uint32_t table_id, const uint64_t* key,
                              uint32_t key_word_count, void* out, uint32_t out_bytes,
                              uint32_t* size_out) {
  if (shard >= coordinator_->shard_count()) co_return Status::InvalidArgument("no such shard");
  if (const Buffered* b = find_buffered(shard, table_id, key, key_word_count)) {
    if (b->write.kind == txn::WriteKind::kRemove) co_return Status::NotFound();
    std::memcpy(out, b->write.value, std::min(out_bytes, b->write.size_bytes));
    if (size_out != nullptr) *size_out = b->write.size_bytes;
    co_return Status::Ok();
  }
  touch(shard);
  co_return co_await coordinator_->links_[shard]->read(id_, epoch_, table_id, key, key_word_count,
                                                       out, out_bytes, size_out);
}

// ---- Coordinator ----

Coordinator::Coordinator(CoordinatorOptions options, std::vector<ShardLink*> links,
                         const uint64_t* epoch)
    : options_(options), links_(std::move(links)), epoch_(epoch) {
  SHOAL_ASSERT(!links_.empty() && links_.size() <= DistTxn::kShardsMax, "%zu shard links",
               links_.size());
  SHOAL_ASSERT(options_.shard_id < links_.size(), "own shard %u out of range", options_.shard_id);
}

rt::Task<Status> Coordinator::run(DistTxn& txn, DistProcedure proc, const void* args,
                                  void* result) {
  txn.coordinator_ = this;
  for (uint32_t attempt = 0; attempt < options_.max_retries; ++attempt) {
    txn.reset(make_txn_id(options_.shard_id, options_.worker_id, next_seq_++), *epoch_);
    bool decided = false;
    Status s = co_await proc(txn, args, result);
    if (s.ok()) s = co_await commit(txn, &decided);
    if (s.ok()) {
      ++stats_.committed;
      if (txn.touched_.size() > 1) ++stats_.cross_shard;
      co_return s;
    }
    if (decided) {  // C2: committed; some install unconfirmed. Never abort now.
      ++stats_.in_doubt;
      co_return s;
    }
    co_await abort_all(txn);  // C1
    if (s.is_user_abort()) {
      ++stats_.user_aborts;
      co_return s;
    }
    if (s.is_aborted()) {
      ++stats_.conflict_aborts;
      if (options_.backoff_loop != nullptr) {
        const uint64_t d = std::min(options_.backoff_max_ns,
                                    options_.backoff_min_ns << std::min<uint32_t>(attempt, 20));
        // A cheap hash of the id spreads retries of transactions that collided together.
        const uint64_t mix = (txn.id_ * 0x9e3779b97f4a7c15ULL) >> 32;
        const uint64_t delay = d / 2 + (d / 2 == 0 ? 0 : mix % (d / 2 + 1));
        (co_await options_.backoff_loop->sleep_for(delay)).ignore();  // full timers: no wait
      }
      continue;
    }
    if (s.code() == Code::kTimeout) {
      ++stats_.timeouts;  // the message or its answer was lost; a new attempt may get through
      continue;
    }
    if (s.code() == Code::kUnavailable) ++stats_.unavailable;
    ++stats_.failed;
    co_return s;
  }
  ++stats_.failed;
  co_return Status::Aborted("retries exhausted");
}

rt::Task<Status> Coordinator::lock_all(DistTxn& txn, std::vector<uint64_t>* proposed) {
  // Group the buffered writes by shard; remote shards lock first, our own last (Mako).
  std::stable_sort(
      txn.writes_.begin(), txn.writes_.end(),
      [](const DistTxn::Buffered& a, const DistTxn::Buffered& b) { return a.shard < b.shard; });
  std::vector<StagedWrite> staged;
  staged.reserve(txn.writes_.size());
  for (const DistTxn::Buffered& b : txn.writes_) staged.push_back(b.write);
  const uint32_t own = options_.shard_id;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < txn.writes_.size();) {
      const uint32_t shard = txn.writes_[i].shard;
      size_t j = i;
      while (j < txn.writes_.size() && txn.writes_[j].shard == shard) ++j;
      if ((pass == 0) == (shard != own)) {
        uint64_t tid = 0;
        Status s = co_await links_[shard]->lock(txn.id_, txn.epoch_, &staged[i], j - i, &tid);
        if (!s.ok()) co_return s;
        proposed->push_back(tid);
        txn.vector_.raise(shard, tid);
      }
      i = j;
    }
  }
  co_return Status::Ok();
}

rt::Task<Status> Coordinator::commit(DistTxn& txn, bool* decided) {
  std::vector<uint64_t> proposed;
  if (!txn.writes_.empty()) {
    Status s = co_await lock_all(txn, &proposed);
    if (!s.ok()) co_return s;
  }
  // Validate everywhere only now that every lock is held.
  for (uint32_t shard : txn.touched_) {
    txn::DepVec deps;
    Status s = co_await links_[shard]->validate(txn.id_, txn.epoch_, &deps);
    if (!s.ok()) co_return s;
    txn.vector_.merge(deps);
  }
  *decided = true;  // C1: every shard voted yes
  co_return co_await install_all(txn);
}

rt::Task<Status> Coordinator::install_all(DistTxn& txn) {
  // The vector's entry for a written shard is at least its proposal (raised in lock_all) and
  // at least every dependency on that shard, so installing there keeps the vector above
  // everything the transaction read. Every shard gets its install even when one fails (C2).
  // Remote shards install first and our own shard last, as they lock: if this process dies
  // midway, its own writes were never visible, so a survivor that releases the transaction
  // (Participant::abort_coordinated_by) cannot strand a reader of them.
  Status first_failure;
  const uint32_t own = options_.shard_id;
  for (int pass = 0; pass < 2; ++pass) {
    uint32_t last_shard = UINT32_MAX;
    for (const DistTxn::Buffered& b : txn.writes_) {
      if (b.shard == last_shard || (pass == 0) != (b.shard != own)) continue;
      last_shard = b.shard;
      Status s = co_await links_[b.shard]->install(txn.id_, txn.epoch_, txn.vector_.get(b.shard),
                                                   txn.vector_);
      if (!s.ok() && first_failure.ok()) {
        first_failure = Status::Unavailable(
            fmt::format("transaction {:#x} committed, but its install at shard {} is in doubt: {}",
                        txn.id_, b.shard, s.to_string()));
      }
    }
  }
  co_return first_failure;
}

rt::Task<void> Coordinator::abort_all(DistTxn& txn) {
  for (uint32_t shard : txn.touched_) {
    Status s = co_await links_[shard]->abort(txn.id_, txn.epoch_);
    // Unreachable or never acknowledged: that shard's lease (F4) ends what is not prepared,
    // and a prepared context there waits for failover (F3).
    s.ignore();
  }
}

}  // namespace shoal::dist

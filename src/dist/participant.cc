#include "src/dist/participant.h"

#include <fmt/format.h>

namespace shoal::dist {

Participant::Participant(txn::Engine& engine, uint32_t shard_id, uint32_t inflight_max)
    : engine_(engine), shard_id_(shard_id), inflight_max_(inflight_max) {
  SHOAL_ASSERT(inflight_max > 0, "%s", "a participant needs room for one transaction");
  slots_.resize(inflight_max);
  free_slots_.reserve(inflight_max);
  for (uint32_t i = inflight_max; i-- > 0;) free_slots_.push_back(i);
  active_.reserve(inflight_max);
}

Participant::~Participant() {
  // Leave no locks behind (a coordinator that vanished mid-protocol).
  std::vector<TxnId> ids;
  for (const auto& [id, index] : active_) ids.push_back(id);
  for (TxnId id : ids) abort(id);
}

void Participant::advance_epoch(uint64_t epoch) {
  if (epoch > epoch_) epoch_ = epoch;
}

Status Participant::check_epoch(uint64_t epoch) const {
  if (epoch < epoch_) [[unlikely]] {
    return Status::Aborted(
        fmt::format("stale epoch {} < {} at shard {}", epoch, epoch_, shard_id_));
  }
  return Status::Ok();
}

Participant::Slot* Participant::slot_for(TxnId id, bool start, Status* status) {
  auto it = active_.find(id);
  if (it != active_.end()) return &slots_[it->second];
  if (!start) {
    *status = Status::Aborted(fmt::format("transaction {:#x} unknown at shard {}", id, shard_id_));
    return nullptr;
  }
  if (free_slots_.empty()) {
    *status = Status::Unavailable(
        fmt::format("shard {} has {} remote transactions in flight", shard_id_, inflight_max_));
    return nullptr;
  }
  const uint32_t index = free_slots_.back();
  free_slots_.pop_back();
  Slot& slot = slots_[index];
  if (!slot.txn) slot.txn = std::make_unique<txn::Txn>(&engine_, id);
  slot.txn->begin();
  slot.phase = Phase::kExecuting;
  slot.in_use = true;
  active_.emplace(id, index);
  return &slot;
}

void Participant::finish(TxnId id, Slot* slot) {
  slot->txn->end();
  slot->in_use = false;
  auto it = active_.find(id);
  SHOAL_ASSERT(it != active_.end(), "finishing an unknown transaction %llx",
               static_cast<unsigned long long>(id));
  free_slots_.push_back(it->second);
  active_.erase(it);
}

Status Participant::read(TxnId id, uint64_t epoch, uint32_t table_id, const uint64_t* key,
                         uint32_t key_word_count, void* out, uint32_t out_bytes,
                         uint32_t* size_out) {
  SHOAL_TRY(check_epoch(epoch));
  const auto& tables = engine_.tables();
  if (table_id >= tables.size() || tables[table_id]->key_words() != key_word_count) {
    return Status::InvalidArgument(fmt::format("shard {}: no table {} with {}-word keys", shard_id_,
                                               table_id, key_word_count));
  }
  Status status;
  Slot* slot = slot_for(id, /*start=*/true, &status);
  if (slot == nullptr) return status;
  if (slot->phase != Phase::kExecuting) return Status::Aborted("read after lock");
  return tables[table_id]->txn_get(*slot->txn, key, out, out_bytes, size_out);
}

Status Participant::stage(txn::Txn& txn, const StagedWrite& w) {
  const auto& tables = engine_.tables();
  if (w.table_id >= tables.size() || tables[w.table_id]->key_words() != w.key_word_count) {
    return Status::InvalidArgument(fmt::format("shard {}: no table {} with {}-word keys", shard_id_,
                                               w.table_id, w.key_word_count));
  }
  txn::TableBase& table = *tables[w.table_id];
  switch (w.kind) {
    case txn::WriteKind::kPut:
      return table.txn_put(txn, w.key, w.value, w.size_bytes);
    case txn::WriteKind::kInsert:
      return table.txn_insert(txn, w.key, w.value, w.size_bytes);
    case txn::WriteKind::kRemove:
      return table.txn_remove(txn, w.key);
  }
  return Status::InvalidArgument("bad write kind");
}

Status Participant::lock(TxnId id, uint64_t epoch, const StagedWrite* writes, size_t count,
                         uint64_t* proposed_tid) {
  SHOAL_TRY(check_epoch(epoch));
  Status status;
  Slot* slot = slot_for(id, /*start=*/true, &status);
  if (slot == nullptr) return status;
  if (slot->phase != Phase::kExecuting) return Status::Aborted("locked twice");
  for (size_t i = 0; i < count; ++i) {
    status = stage(*slot->txn, writes[i]);
    if (!status.ok()) {
      abort(id);
      return status;
    }
  }
  status = slot->txn->lock_write_set(proposed_tid);
  if (!status.ok()) {
    slot->txn->abort();  // nothing is held after a failed lock step
    finish(id, slot);
    return status;
  }
  slot->phase = Phase::kLocked;
  return Status::Ok();
}

Status Participant::validate(TxnId id, uint64_t epoch, txn::DepVec* deps) {
  Status status = check_epoch(epoch);
  if (!status.ok()) {
    abort(id);
    return status;
  }
  Slot* slot = slot_for(id, /*start=*/false, &status);
  if (slot == nullptr) return status;
  if (slot->phase == Phase::kLocked) {
    status = slot->txn->validate_read_set();  // releases the locks when it fails
  } else {
    // Read-only here: validation without locks, then the transaction is done on this shard.
    uint64_t unused = 0;
    status = slot->txn->certify(&unused);
    if (status.ok()) slot->txn->release_certified();
  }
  if (status.ok()) {
    // What the reads here depend on: their versions on this shard, and their own vectors.
    *deps = slot->txn->deps();
    deps->raise(shard_id_, slot->txn->max_seen_version());
  }
  if (!status.ok() || slot->phase != Phase::kLocked) {
    slot->txn->abort();
    finish(id, slot);
  }
  return status;
}

Status Participant::install(TxnId id, uint64_t epoch, uint64_t tid, const txn::DepVec& vector) {
  Status status;
  Slot* slot = slot_for(id, /*start=*/false, &status);
  if (slot == nullptr) return status;
  // No epoch check here: a transaction that passed validation is committed by its
  // coordinator's decision; refusing the install would leave a hole in it.
  (void)epoch;
  SHOAL_ASSERT(slot->phase == Phase::kLocked, "install before lock of %llx",
               static_cast<unsigned long long>(id));
  slot->txn->install_and_unlock(tid, &vector);
  finish(id, slot);
  return Status::Ok();
}

void Participant::abort(TxnId id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  Slot* slot = &slots_[it->second];
  if (slot->phase == Phase::kLocked) slot->txn->release_certified();
  slot->txn->abort();
  finish(id, slot);
}

}  // namespace shoal::dist

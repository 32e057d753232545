#include "src/dist/participant.h"

#include "src/txn/engine_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

namespace shoal::dist {

Participant::Participant(txn::Engine& engine, uint32_t shard_id, ParticipantOptions options)
    : engine_(engine), shard_id_(shard_id), options_(options) {
  SHOAL_ASSERT(options_.inflight_max > 0, "%s", "a participant needs room for one transaction");
  SHOAL_ASSERT(options_.tombstones_max > 0, "%s", "a participant needs room for one tombstone");
  slots_.resize(options_.inflight_max);
  free_slots_.reserve(options_.inflight_max);
  for (uint32_t i = options_.inflight_max; i-- > 0;) free_slots_.push_back(i);
  active_.reserve(options_.inflight_max);
  scratch_ids_.reserve(options_.inflight_max);
  const char* trace = std::getenv("SHOAL_RESERVATION_TRACE");
  trace_reservations_ = trace != nullptr && trace[0] == '1';
}

Participant::~Participant() {
  // Leave no locks behind (a coordinator that vanished mid-protocol).
  scratch_ids_.clear();
  for (const auto& [id, index] : active_) scratch_ids_.push_back(id);
  for (TxnId id : scratch_ids_) abort(id);
}

void Participant::advance_epoch(uint64_t epoch) {
  if (epoch > epoch_) epoch_ = epoch;
}

void Participant::await_failover_of(uint32_t shard) {
  if (std::find(awaited_failovers_.begin(), awaited_failovers_.end(), shard) ==
      awaited_failovers_.end()) {
    awaited_failovers_.push_back(shard);
  }
}

bool Participant::followed_failover_of(uint32_t shard) {
  return std::erase(awaited_failovers_, shard) > 0;
}

Status Participant::check_epoch(uint64_t epoch) const {
  if (!awaited_failovers_.empty()) [[unlikely]] {
    return Status::Aborted(
        fmt::format("shard {} has not yet followed shard {}'s failover (discarded what it lost)",
                    shard_id_, awaited_failovers_.front()));
  }
  if (epoch < epoch_) [[unlikely]] {
    return Status::Aborted(
        fmt::format("stale epoch {} < {} at shard {}", epoch, epoch_, shard_id_));
  }
  if (epoch > epoch_) [[unlikely]] {
    // Not yet ours: this shard has not fenced and discarded what that epoch's failover lost,
    // and a transaction of the new epoch could depend on a lost version here. Retried.
    return Status::Aborted(fmt::format("epoch {} not yet reached at shard {} (in epoch {})", epoch,
                                       shard_id_, epoch_));
  }
  return Status::Ok();
}

Status Participant::check_not_ended(TxnId id) {
  if (tombstones_.empty()) return Status::Ok();
  drop_expired_tombstones(now_ns());
  if (tombstones_.find(id) == tombstones_.end()) return Status::Ok();
  ++stats_.refused_ended;
  return Status::Aborted(fmt::format("transaction {:#x} already ended at shard {}", id, shard_id_));
}

void Participant::drop_expired_tombstones(uint64_t now_ns) {
  while (!tombstone_fifo_.empty() && tombstone_fifo_.front().second <= now_ns) {
    const auto [id, expires_ns] = tombstone_fifo_.front();
    tombstone_fifo_.pop_front();
    auto it = tombstones_.find(id);
    if (it != tombstones_.end() && it->second.expires_ns == expires_ns) tombstones_.erase(it);
  }
}

void Participant::bury(TxnId id, Ended how, uint64_t tid) {
  const uint64_t now = now_ns();
  drop_expired_tombstones(now);
  // Bounded: evict the oldest. An evicted id loses F1's protection early; F4's lease still
  // ends any context a late request re-creates for it.
  while (tombstone_fifo_.size() >= options_.tombstones_max) {
    const auto [old_id, expires_ns] = tombstone_fifo_.front();
    tombstone_fifo_.pop_front();
    auto it = tombstones_.find(old_id);
    if (it != tombstones_.end() && it->second.expires_ns == expires_ns) {
      tombstones_.erase(it);
      ++stats_.tombstones_evicted;
    }
  }
  const uint64_t expires_ns = now + options_.tombstone_ns;
  auto [it, fresh] = tombstones_.try_emplace(id, Tombstone{how, expires_ns, tid});
  if (!fresh) {
    // A commit is never downgraded by a late abort.
    if (it->second.how != Ended::kCommitted) {
      it->second.how = how;
      it->second.tid = tid;
    }
    it->second.expires_ns = expires_ns;
  }
  tombstone_fifo_.emplace_back(id, expires_ns);
}

Participant::Slot* Participant::slot_for(TxnId id, bool start, Status* status) {
  auto it = active_.find(id);
  if (it != active_.end()) {
    Slot* slot = &slots_[it->second];
    slot->last_contact_ns = now_ns();
    return slot;
  }
  if (!start) {
    *status = Status::Aborted(fmt::format("transaction {:#x} unknown at shard {}", id, shard_id_));
    return nullptr;
  }
  *status = check_not_ended(id);
  if (!status->ok()) return nullptr;
  if (free_slots_.empty()) {
    *status = Status::Aborted(fmt::format("shard {} busy: {} remote transactions in flight",
                                          shard_id_, options_.inflight_max));
    return nullptr;
  }
  const uint32_t index = free_slots_.back();
  free_slots_.pop_back();
  Slot& slot = slots_[index];
  if (!slot.txn) slot.txn = std::make_unique<txn::Txn>(&engine_, id);
  // Installs go above the promise alone: a reserved TID may lie below records logged since.
  slot.txn->set_tid_floor(tid_floor_);
  slot.txn->set_keep_old_values(commit_hook_ != nullptr);
  slot.txn->begin();
  slot.phase = Phase::kExecuting;
  slot.in_use = true;
  slot.last_contact_ns = now_ns();
  active_.emplace(id, index);
  return &slot;
}

void Participant::release_reservation(Slot* slot) {
  if (slot->reserved && slot->proposed_tid == reserved_min_) reserved_min_stale_ = true;
  slot->reserved = false;
}

void Participant::drop_reservation(TxnId id) {
  const auto it = active_.find(id);
  if (it == active_.end() || !slots_[it->second].reserved) return;
  release_reservation(&slots_[it->second]);
  ++stats_.reservations_dropped;
}

void Participant::trace_reservations() const {
  // SHOAL_RESERVATION_TRACE=1 (diagnosis, off by default): every second at most, each live
  // reservation older than a second, which holds the stream's promise (F10).
  const uint64_t now = engine_.env().now_ns();
  if (now < trace_next_ns_) return;
  trace_next_ns_ = now + 1'000'000'000;
  static const char* const kPhase[] = {"executing", "locked", "prepared"};
  for (const auto& [id, index] : active_) {
    const Slot& slot = slots_[index];
    if (!slot.reserved || now - slot.last_contact_ns < 1'000'000'000) continue;
    fmt::print(stderr,
               "reservation-trace shard {} txn {:#x} {} proposed {:#x} floor {:#x} idle {} ms\n",
               shard_id_, id, kPhase[static_cast<int>(slot.phase)], slot.proposed_tid, floor_tid(),
               (now - slot.last_contact_ns) / 1'000'000);
  }
}

uint64_t Participant::lowest_reserved_tid() const {
  if (trace_reservations_) trace_reservations();
  if (reserved_min_stale_) {  // bounded by the contexts in flight (inflight_max)
    reserved_min_ = UINT64_MAX;
    for (const auto& [id, index] : active_) {
      const Slot& slot = slots_[index];
      if (slot.reserved) reserved_min_ = std::min(reserved_min_, slot.proposed_tid);
    }
    reserved_min_stale_ = false;
  }
  return reserved_min_;
}

void Participant::finish(TxnId id, Slot* slot, Ended how, uint64_t tid) {
  release_reservation(slot);  // after the install's record was logged (the callers' order)
  slot->txn->end();
  slot->in_use = false;
  auto it = active_.find(id);
  SHOAL_ASSERT(it != active_.end(), "finishing an unknown transaction %llx",
               static_cast<unsigned long long>(id));
  free_slots_.push_back(it->second);
  active_.erase(it);
  bury(id, how, tid);
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

Status Participant::exec(TxnId id, uint64_t epoch, uint32_t fragment, std::span<const uint8_t> args,
                         std::span<uint8_t> out, uint32_t* out_size, bool* wrote,
                         uint64_t* proposed_tid, ExecPrepared* prepared) {
  if (prepared != nullptr) prepared->prepared = false;
  SHOAL_TRY(check_epoch(epoch));
  if (fragments_ == nullptr || fragment >= kFragmentsMax || fragments_->fns[fragment] == nullptr) {
    return Status::InvalidArgument(
        fmt::format("shard {}: no fragment {} registered", shard_id_, fragment));
  }
  if (args.size() > kFragmentBytesMax || out.size() > kFragmentBytesMax) {
    return Status::InvalidArgument(fmt::format("shard {}: fragment {} with {} / {} bytes",
                                               shard_id_, fragment, args.size(), out.size()));
  }
  Status status;
  Slot* slot = slot_for(id, /*start=*/true, &status);
  if (slot == nullptr) return status;
  if (slot->phase != Phase::kExecuting) return Status::Aborted("fragment after lock");
  *out_size = 0;
  const void* ctx =
      fragments_->ctx_of[fragment] != nullptr ? fragments_->ctx_of[fragment] : fragments_->ctx;
  SHOAL_TRY(fragments_->fns[fragment](*slot->txn, ctx, args, out, out_size));
  SHOAL_ASSERT(*out_size <= out.size(), "fragment %u wrote %u of %zu bytes", fragment, *out_size,
               out.size());
  bool any = false;
  slot->txn->for_each_write([&](const txn::WriteView&) { any = true; });
  *wrote = any;
  if (proposed_tid == nullptr || !any) return Status::Ok();
  SHOAL_TRY(lock_context(id, slot, proposed_tid));
  if (prepared == nullptr || !slot->txn->reads_pinned()) return Status::Ok();
  return prepare_pinned(id, slot, prepared);
}

void Participant::vote_deps(const Slot& slot, txn::DepVec* out) const {
  // What the reads here depend on: their versions on this shard, and their own vectors.
  *out = slot.txn->deps();
  out->raise(shard_id_, slot.txn->max_seen_version());
}

Status Participant::prepare_pinned(TxnId id, Slot* slot, ExecPrepared* prepared) {
  // F9: every read is a row we hold locked, so this vote cannot go stale before the decision.
  Status status = slot->txn->validate_read_set();  // releases the locks when it fails
  if (!status.ok()) {
    slot->txn->abort();
    finish(id, slot, Ended::kAborted);
    return status;
  }
  vote_deps(*slot, &prepared->deps);
  prepared->prepared = true;
  slot->phase = Phase::kPrepared;  // F3: only the coordinator ends it now
  return status;
}

Status Participant::lock_context(TxnId id, Slot* slot, uint64_t* proposed_tid) {
  Status status = slot->txn->lock_write_set(proposed_tid);
  if (!status.ok()) {
    slot->txn->abort();  // nothing is held after a failed lock step
    finish(id, slot, Ended::kAborted);
    return status;
  }
  slot->phase = Phase::kLocked;
  // F10: ahead of the stream's promise, and reserved there until the context ends.
  // Each proposal above every earlier one: a reservation holds the promise, so two contexts
  // proposing over the same floor would install at one TID (F10).
  const uint64_t* base = proposal_floor_ != nullptr ? proposal_floor_ : tid_floor_;
  if (base != nullptr) {
    *proposed_tid = std::max({*proposed_tid, *base + kProposalLeadTids, last_proposed_tid_ + 1});
    last_proposed_tid_ = *proposed_tid;
  }
  slot->proposed_tid = *proposed_tid;
  slot->reserved = true;
  reserved_min_ = std::min(reserved_min_, *proposed_tid);
  return Status::Ok();
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
  if (slot->phase != Phase::kExecuting) {
    // The coordinator lost track of this transaction: end it rather than guess, unless it
    // already voted yes here (F3: then only the coordinator's decision ends it).
    if (slot->phase != Phase::kPrepared) abort(id);
    return Status::Aborted("locked twice");
  }
  for (size_t i = 0; i < count; ++i) {
    status = stage(*slot->txn, writes[i]);
    if (!status.ok()) {
      abort(id);
      return status;
    }
  }
  return lock_context(id, slot, proposed_tid);
}

Status Participant::validate(TxnId id, uint64_t epoch, txn::DepVec* deps) {
  Status status = check_epoch(epoch);
  if (!status.ok()) {
    abort_unless_prepared(id);
    return status;
  }
  // A validate never starts a context: an unknown id expired (F4) or never reached us, and
  // an ended one must stay ended (F1). Either way the vote is no.
  Slot* slot = slot_for(id, /*start=*/false, &status);
  if (slot == nullptr) {
    bury(id, Ended::kAborted);
    return status;
  }
  if (slot->phase == Phase::kPrepared) {
    return Status::Aborted("validated twice");  // F3: the first yes vote stands
  }
  if (slot->phase == Phase::kLocked) {
    status = slot->txn->validate_read_set();  // releases the locks when it fails
  } else {
    // Read-only here: validation without locks, then the transaction is done on this shard.
    uint64_t unused = 0;
    status = slot->txn->certify(&unused);
    if (status.ok()) slot->txn->release_certified();
  }
  if (status.ok()) {
    vote_deps(*slot, deps);
  }
  if (!status.ok() || slot->phase != Phase::kLocked) {
    slot->txn->abort();
    finish(id, slot, status.ok() ? Ended::kCommitted : Ended::kAborted);
    return status;
  }
  slot->phase = Phase::kPrepared;  // F3: only the coordinator ends it now
  return status;
}

Status Participant::install(TxnId id, uint64_t epoch, uint64_t tid, const txn::DepVec& vector,
                            uint64_t* installed_tid) {
  if (installed_tid != nullptr) *installed_tid = 0;
  // No epoch check: a transaction that passed validation is committed by its coordinator's
  // decision; refusing the install would leave a hole in it.
  (void)epoch;
  auto it = active_.find(id);
  if (it == active_.end()) {
    drop_expired_tombstones(now_ns());
    auto t = tombstones_.find(id);
    if (t != tombstones_.end() && t->second.how == Ended::kAborted) {
      return Status::InvalidArgument(
          fmt::format("install of transaction {:#x}, aborted at shard {}", id, shard_id_));
    }
    ++stats_.repeated_installs;  // F2 (tombstone says committed) or F5 (no tombstone)
    if (t == tombstones_.end() || t->second.tid == 0) {
      // F5: the TID it was installed (and logged) at is not known here any more, so Ok would
      // let the coordinator acknowledge on its own, maybe lower, TID (F10).
      ++stats_.unknown_installs;
      return Status::NotFound(
          fmt::format("install of transaction {:#x}: unknown at shard {} (ended over {} ms ago, or "
                      "installed but not logged); its installed TID is not known",
                      id, shard_id_, options_.tombstone_ns / 1'000'000));
    }
    if (installed_tid != nullptr) *installed_tid = t->second.tid;
    return Status::Ok();
  }
  Slot* slot = &slots_[it->second];
  if (slot->phase != Phase::kPrepared) {
    return Status::InvalidArgument(fmt::format(
        "install of transaction {:#x} before its validation at shard {}", id, shard_id_));
  }
  if (tid > txn::Tid::kVersionMask) {
    return Status::InvalidArgument(
        fmt::format("install of transaction {:#x} at TID {:#x}: not a version", id, tid));
  }
  if (tid < slot->proposed_tid) {
    return Status::InvalidArgument(fmt::format(
        "install of transaction {:#x} at TID {:#x} below the proposed {:#x} at shard {}", id, tid,
        slot->proposed_tid, shard_id_));
  }
  tid = std::max(tid, floor_tid() + 1);  // F10
  slot->txn->install_and_unlock(tid, &vector);
  logging_id_ = id;
  Status logged = log_commit(*slot->txn);
  logging_id_ = 0;
  // Installed either way; a tombstone without a TID makes repeats answer as F5 (not logged).
  finish(id, slot, Ended::kCommitted, logged.ok() ? tid : 0);
  if (!logged.ok()) return logged;
  if (installed_tid != nullptr) *installed_tid = tid;
  return Status::Ok();
}

Status Participant::log_commit(const txn::Txn& txn) {
  if (commit_hook_ == nullptr) return Status::Ok();
  Status logged = commit_hook_(commit_hook_ctx_, txn);
  if (logged.ok()) return logged;
  ++stats_.unlogged_installs;
  return Status::Unavailable(
      fmt::format("shard {}: installed but not logged: {}", shard_id_, logged.to_string()));
}

Status Participant::validate_install(TxnId id, uint64_t epoch, const txn::DepVec& vector,
                                     txn::DepVec* deps, uint64_t* tid,
                                     const FragmentCall* fragment) {
  auto it = active_.find(id);
  if (it == active_.end()) {
    drop_expired_tombstones(now_ns());
    auto t = tombstones_.find(id);
    if (t != tombstones_.end() && t->second.how == Ended::kCommitted) {
      ++stats_.repeated_installs;  // F7: our answer was lost; the TID is remembered
      if (t->second.tid == 0) {    // installed but not logged (log_commit failed)
        ++stats_.unknown_installs;
        return Status::Unavailable(fmt::format(
            "validate_install of transaction {:#x}: installed at shard {} but not logged", id,
            shard_id_));
      }
      deps->clear();
      *tid = t->second.tid;
      return Status::Ok();
    }
    if (fragment == nullptr || t != tombstones_.end()) {
      bury(id, Ended::kAborted);  // refuse whatever of it is still in flight (F1)
      return Status::Aborted(
          fmt::format("transaction {:#x} ended or unknown at shard {}", id, shard_id_));
    }
  }
  Slot* slot = nullptr;
  if (fragment != nullptr) {
    // F8: run the fragment and lock what it wrote, then go on as a locked context.
    uint32_t out_size = 0;
    bool wrote = false;
    uint64_t proposed = 0;
    scratch_out_.resize(kUnreadFragmentResultBytesMax);  // its result: nobody waits for it
    Status status = exec(id, epoch, fragment->fragment, fragment->args, scratch_out_, &out_size,
                         &wrote, &proposed);
    if (!status.ok()) {
      if (active_.count(id) != 0) abort(id);  // F8: a failed fragment ends the context
      return status;
    }
    slot = slot_for(id, /*start=*/false, &status);
    if (slot == nullptr) return status;
    if (slot->phase == Phase::kExecuting) {  // nothing written anywhere here: lock the empty set
      uint64_t tid = 0;
      SHOAL_TRY(lock_context(id, slot, &tid));
    }
  } else {
    slot = &slots_[it->second];
  }
  if (slot->phase != Phase::kLocked) {
    return Status::InvalidArgument(
        fmt::format("validate_install of transaction {:#x} not locked at shard {}", id, shard_id_));
  }
  Status status = check_epoch(epoch);
  if (status.ok())
    status = slot->txn->validate_read_set();  // releases the locks on failure
  else
    slot->txn->release_certified();
  if (!status.ok()) {
    slot->txn->abort();
    finish(id, slot, Ended::kAborted);
    return status;
  }
  vote_deps(*slot, deps);
  *tid = std::max({vector.get(shard_id_), slot->proposed_tid, floor_tid() + 1});  // F10
  if (*tid > txn::Tid::kVersionMask) {
    slot->txn->release_certified();
    slot->txn->abort();
    finish(id, slot, Ended::kAborted);
    return Status::InvalidArgument(
        fmt::format("validate_install of transaction {:#x} at TID {:#x}: not a version", id, *tid));
  }
  txn::DepVec full = vector;
  full.merge(*deps);
  full.raise(shard_id_, *tid);
  slot->txn->install_and_unlock(*tid, &full);
  logging_id_ = id;
  Status logged = log_commit(*slot->txn);
  logging_id_ = 0;
  finish(id, slot, Ended::kCommitted, logged.ok() ? *tid : 0);
  return logged;
}

void Participant::abort(TxnId id) {
  auto it = active_.find(id);
  if (it == active_.end()) {
    if (tombstones_.find(id) == tombstones_.end()) ++stats_.early_aborts;
    bury(id, Ended::kAborted);  // F1: refuse the lock this abort may have overtaken
    return;
  }
  Slot* slot = &slots_[it->second];
  if (slot->phase != Phase::kExecuting) slot->txn->release_certified();
  slot->txn->abort();
  finish(id, slot, Ended::kAborted);
}

void Participant::abort_unless_prepared(TxnId id) {
  auto it = active_.find(id);
  if (it != active_.end() && slots_[it->second].phase == Phase::kPrepared) return;
  abort(id);
}

// Whether `id` was coordinated by `shard`'s leader of an epoch other than spare_epoch.
static bool coordinated_before(TxnId id, uint32_t shard, uint64_t spare_epoch) {
  return (id >> 48) == shard &&
         (spare_epoch == kSpareNoEpoch || txn_leader_epoch_byte(id) != (spare_epoch & 0xff));
}

size_t Participant::abort_coordinated_by(uint32_t coordinator_shard, bool keep_prepared,
                                         uint64_t spare_epoch) {
  scratch_ids_.clear();
  for (const auto& [id, index] : active_) {
    if (!coordinated_before(id, coordinator_shard, spare_epoch)) continue;
    if (keep_prepared && slots_[index].phase == Phase::kPrepared) continue;
    scratch_ids_.push_back(id);
  }
  std::sort(scratch_ids_.begin(), scratch_ids_.end());  // deterministic order
  for (TxnId id : scratch_ids_) abort(id);
  stats_.orphaned += scratch_ids_.size();
  return scratch_ids_.size();
}

void Participant::prepared_coordinated_by(uint32_t coordinator_shard, std::vector<TxnId>* out,
                                          uint64_t spare_epoch) const {
  out->clear();
  for (const auto& [id, index] : active_) {
    if (coordinated_before(id, coordinator_shard, spare_epoch) &&
        slots_[index].phase == Phase::kPrepared) {
      out->push_back(id);
    }
  }
  std::sort(out->begin(), out->end());
}

size_t Participant::abort_undecided(uint32_t coordinator_shard, std::span<const TxnId> committed,
                                    uint64_t spare_epoch) {
  abort_coordinated_by(coordinator_shard, /*keep_prepared=*/true, spare_epoch);
  std::vector<TxnId> prepared;
  prepared_coordinated_by(coordinator_shard, &prepared, spare_epoch);
  size_t aborted = 0;
  for (const TxnId id : prepared) {
    if (std::binary_search(committed.begin(), committed.end(), id)) continue;
    abort(id);
    ++stats_.resolved_aborted;
    ++aborted;
  }
  return aborted;
}

Status Participant::resolve(TxnId id, bool committed, const txn::DepVec& vector, uint64_t* tid) {
  *tid = 0;
  const auto it = active_.find(id);
  if (it == active_.end() || slots_[it->second].phase != Phase::kPrepared) {
    return Status::NotFound(fmt::format("transaction {:#x} is not prepared here", id));
  }
  if (!committed) {
    abort(id);
    ++stats_.resolved_aborted;
    return Status::Aborted(
        fmt::format("transaction {:#x}: its coordinator's half did not survive", id));
  }
  // Where the coordinator logged it said which TID this shard proposed (its vector's entry).
  const uint64_t at = std::max(vector.get(shard_id_), slots_[it->second].proposed_tid);
  SHOAL_TRY(install(id, epoch_, at, vector, tid));
  ++stats_.resolved_committed;
  return Status::Ok();
}

Status Participant::decision(TxnId id, uint64_t* tid, txn::DepVec* vector) const {
  if (decision_lookup_ == nullptr) {
    return Status::Unavailable(fmt::format(
        "shard {} knows no decisions of its coordinator (it did not take over from a log)",
        shard_id_));
  }
  if (!decision_lookup_(decision_lookup_ctx_, id, tid, vector)) {
    return Status::NotFound(
        fmt::format("transaction {:#x} is not committed in shard {}'s log", id, shard_id_));
  }
  return Status::Ok();
}

size_t Participant::expire_idle() {
  const uint64_t now = now_ns();
  scratch_ids_.clear();
  for (const auto& [id, index] : active_) {
    const Slot& slot = slots_[index];
    if (slot.phase != Phase::kPrepared && now - slot.last_contact_ns >= options_.lease_ns) {
      scratch_ids_.push_back(id);
    }
  }
  // Deterministic order (the map's iteration order is an implementation detail).
  std::sort(scratch_ids_.begin(), scratch_ids_.end());
  for (TxnId id : scratch_ids_) abort(id);
  stats_.expired += scratch_ids_.size();
  return scratch_ids_.size();
}

uint64_t Participant::next_expiry_ns() const {
  uint64_t next = UINT64_MAX;
  for (const auto& [id, index] : active_) {
    const Slot& slot = slots_[index];
    if (slot.phase != Phase::kPrepared) {
      next = std::min(next, slot.last_contact_ns + options_.lease_ns);
    }
  }
  return next;
}

}  // namespace shoal::dist

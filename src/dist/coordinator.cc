#include "src/dist/coordinator.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace shoal::dist {

// ---- DistTxn ----

void DistTxn::reset(TxnId id, uint64_t epoch) {
  id_ = id;
  epoch_ = epoch;
  in_doubt_ = false;
  doubtful_.clear();
  touched_.clear();
  fragment_written_.clear();
  locked_early_.clear();
  prepared_early_.clear();
  written_.clear();
  last_agent_ = UINT32_MAX;
  deferred_shard_ = UINT32_MAX;
  deferred_ = FragmentCall{};
  writes_.clear();
  values_.reset();
  vector_.clear();
}

void DistTxn::settle_doubt(bool committed, std::span<const uint64_t> tids) {
  SHOAL_ASSERT(in_doubt_ && (!committed || tids.size() == doubtful_.size()),
               "settle_doubt of transaction %lu (in doubt: %d, %zu tids for %zu shards)", id_,
               in_doubt_, tids.size(), doubtful_.size());
  in_doubt_ = false;
  if (committed) {
    for (size_t i = 0; i < tids.size(); ++i) vector_.raise(doubtful_[i], tids[i]);
  }
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

rt::Task<Status> DistTxn::exec(uint32_t shard, uint32_t fragment, std::span<const uint8_t> args,
                               std::span<uint8_t> out, uint32_t* out_size, bool last_on_shard) {
  if (shard >= coordinator_->shard_count()) co_return Status::InvalidArgument("no such shard");
  touch(shard);
  uint32_t size = 0;
  bool wrote = false;
  uint64_t tid = 0;
  ExecPrepared prepared;
  Status s = co_await coordinator_->links_[shard]->exec(id_, epoch_, fragment, args, out, &size,
                                                        &wrote, last_on_shard ? &tid : nullptr,
                                                        last_on_shard ? &prepared : nullptr);
  if (!s.ok()) co_return s;
  if (wrote && std::find(fragment_written_.begin(), fragment_written_.end(), shard) ==
                   fragment_written_.end()) {
    fragment_written_.push_back(shard);
  }
  if (wrote && last_on_shard) note_locked_early(shard, tid, prepared);
  if (out_size != nullptr) *out_size = size;
  co_return Status::Ok();
}

void DistTxn::note_locked_early(uint32_t shard, uint64_t tid, const ExecPrepared& prepared) {
  locked_early_.push_back(shard);
  vector_.raise(shard, tid);
  if (prepared.prepared) {  // F9: its vote is in; commit skips its validate (C6)
    prepared_early_.push_back(shard);
    vector_.merge(prepared.deps);
  }
}

bool DistTxn::prepared_early(uint32_t shard) const {
  return std::find(prepared_early_.begin(), prepared_early_.end(), shard) != prepared_early_.end();
}

Status DistTxn::exec_at_commit(uint32_t shard, uint32_t fragment, std::span<const uint8_t> args) {
  if (shard >= coordinator_->shard_count()) return Status::InvalidArgument("no such shard");
  if (deferred_shard_ != UINT32_MAX) return Status::InvalidArgument("a second exec_at_commit");
  if (std::find(touched_.begin(), touched_.end(), shard) != touched_.end() ||
      shard == coordinator_->options_.shard_id) {
    return Status::InvalidArgument("exec_at_commit on a shard the transaction touched");
  }
  if (args.size() > kFragmentBytesMax) return Status::InvalidArgument("fragment arguments");
  void* copy = values_.allocate(args.empty() ? 1 : args.size());
  if (!args.empty()) std::memcpy(copy, args.data(), args.size());
  deferred_shard_ = shard;
  deferred_.fragment = fragment;
  deferred_.args = {static_cast<const uint8_t*>(copy), args.size()};
  return Status::Ok();
}

// ---- Coordinator ----

Coordinator::Coordinator(CoordinatorOptions options, std::vector<ShardLink*> links,
                         const uint64_t* epoch)
    : options_(options),
      links_(std::move(links)),
      link_generation_(links_.size(), 0),
      epoch_(epoch),
      next_seq_(options.first_seq) {
  SHOAL_ASSERT(!links_.empty() && links_.size() <= DistTxn::kShardsMax, "%zu shard links",
               links_.size());
  SHOAL_ASSERT(options_.shard_id < links_.size(), "own shard %u out of range", options_.shard_id);
}

void Coordinator::begin(DistTxn& txn) {
  txn.coordinator_ = this;
  txn.reset(make_txn_id(options_.shard_id, options_.worker_id, next_seq_++), *epoch_);
}

rt::Task<Status> Coordinator::finish(DistTxn& txn) {
  bool decided = false;
  Status s = co_await commit(txn, &decided);
  if (s.ok()) {
    ++stats_.committed;
    if (txn.touched_.size() > 1) ++stats_.cross_shard;
    co_return s;
  }
  if (decided) {  // C2: committed; some install unconfirmed. Never abort now.
    ++stats_.in_doubt;
    txn.in_doubt_ = true;
    co_return s;
  }
  co_await abort_all(txn);  // C1
  if (s.is_aborted()) {
    ++stats_.conflict_aborts;
  } else if (s.code() == Code::kTimeout) {
    ++stats_.timeouts;
  } else {
    if (s.code() == Code::kUnavailable) ++stats_.unavailable;
    ++stats_.failed;
  }
  co_return s;
}

rt::Task<void> Coordinator::abort(DistTxn& txn) {
  ++stats_.user_aborts;
  co_await abort_all(txn);
}

void Coordinator::set_link(uint32_t shard, ShardLink* link) {
  SHOAL_ASSERT(shard < links_.size() && link != nullptr, "set_link: shard %u of %zu", shard,
               links_.size());
  links_[shard] = link;
  ++link_generation_[shard];
}

rt::Task<Status> Coordinator::ask_new_leader(DistTxn& txn, uint32_t shard, uint64_t* tid,
                                             txn::DepVec* vector) {
  rt::EventLoop* loop = options_.backoff_loop;
  if (loop == nullptr || options_.in_doubt_wait_ns == 0) {
    co_return Status::Unavailable("no wait for a new leader");
  }
  constexpr uint64_t kPollNs = 5'000'000;
  const uint64_t generation = link_generation_[shard];
  const uint64_t deadline_ns = loop->now_ns() + options_.in_doubt_wait_ns;
  while (link_generation_[shard] == generation && loop->now_ns() < deadline_ns) {  // bounded
    (co_await loop->sleep_for(kPollNs)).ignore();
  }
  if (link_generation_[shard] == generation) {
    co_return Status::Unavailable(fmt::format("no new leader of shard {} within {} ms", shard,
                                              options_.in_doubt_wait_ns / 1'000'000));
  }
  co_return co_await links_[shard]->decision(txn.id_, tid, vector);
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
      txn.in_doubt_ = true;
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

void Coordinator::order_written_shards(DistTxn& txn) {
  // Group the buffered writes by shard (lock ships each shard's slice).
  std::stable_sort(
      txn.writes_.begin(), txn.writes_.end(),
      [](const DistTxn::Buffered& a, const DistTxn::Buffered& b) { return a.shard < b.shard; });
  txn.written_ = txn.fragment_written_;
  for (const DistTxn::Buffered& b : txn.writes_) {
    if (std::find(txn.written_.begin(), txn.written_.end(), b.shard) == txn.written_.end()) {
      txn.written_.push_back(b.shard);
    }
  }
  // Remote shards first, our own last (Mako): see install_all for why.
  const uint32_t own = options_.shard_id;
  std::sort(txn.written_.begin(), txn.written_.end(),
            [own](uint32_t a, uint32_t b) { return (a == own) != (b == own) ? b == own : a < b; });
}

rt::Task<Status> Coordinator::lock_all(DistTxn& txn) {
  std::vector<StagedWrite> staged;
  staged.reserve(txn.writes_.size());
  for (const DistTxn::Buffered& b : txn.writes_) staged.push_back(b.write);
  for (uint32_t shard : txn.written_) {
    if (std::find(txn.locked_early_.begin(), txn.locked_early_.end(), shard) !=
        txn.locked_early_.end()) {
      continue;  // its exec locked it
    }
    const auto first =
        std::lower_bound(txn.writes_.begin(), txn.writes_.end(), shard,
                         [](const DistTxn::Buffered& b, uint32_t s) { return b.shard < s; });
    size_t i = static_cast<size_t>(first - txn.writes_.begin()), j = i;
    while (j < txn.writes_.size() && txn.writes_[j].shard == shard) ++j;
    uint64_t tid = 0;
    Status s = co_await links_[shard]->lock(txn.id_, txn.epoch_, staged.data() + i, j - i, &tid);
    if (!s.ok()) co_return s;
    txn.vector_.raise(shard, tid);
  }
  co_return Status::Ok();
}

rt::Task<Status> Coordinator::commit(DistTxn& txn, bool* decided) {
  if (txn.deferred_shard_ != UINT32_MAX && !txn.touched_.empty()) {
    // C5: the deferred fragment must hold its locks before any other shard validates. Run in
    // the last agent's message (F8) it would lock after those validations: a transaction
    // committing in between could overwrite a row validated here and write a row the
    // fragment then reads, a cycle. So it runs now, locking at once, and its shard takes the
    // plain last-agent path; one-shot F8 remains for a transaction touching no other shard.
    const uint32_t shard = txn.deferred_shard_;
    txn.deferred_shard_ = UINT32_MAX;
    txn.touch(shard);  // from here on abort_all reaches it
    auto* out = static_cast<uint8_t*>(txn.values_.allocate(kUnreadFragmentResultBytesMax));
    uint32_t size = 0;
    bool wrote = false;
    uint64_t tid = 0;
    ExecPrepared prepared;
    Status s = co_await links_[shard]->exec(
        txn.id_, txn.epoch_, txn.deferred_.fragment, txn.deferred_.args,
        {out, kUnreadFragmentResultBytesMax}, &size, &wrote, &tid, &prepared);
    if (!s.ok()) co_return s;
    if (wrote) {
      txn.fragment_written_.push_back(shard);
      txn.note_locked_early(shard, tid, prepared);
    }
  }
  order_written_shards(txn);
  if (!txn.written_.empty()) {
    Status s = co_await lock_all(txn);
    if (!s.ok()) co_return s;
  }
  // C6: when our own shard writes, its vote decides and its install (logged with the
  // transaction's id) comes before any other: the decision outlives this process in our
  // shard's log (participant.h F11). Otherwise C4: the last remote shard with writes that has
  // not voted yet is the last agent (F7): it validates after every other participant voted
  // yes and installs at once.
  const uint32_t own = options_.shard_id;
  const bool own_writes =
      std::find(txn.written_.begin(), txn.written_.end(), own) != txn.written_.end();
  txn.last_agent_ = txn.deferred_shard_;  // F8's shard, if any, decides
  for (uint32_t shard : txn.written_) {
    if (!own_writes && shard != own && txn.last_agent_ == UINT32_MAX &&
        !txn.prepared_early(shard)) {
      txn.last_agent_ = shard;
    }
  }
  if (txn.deferred_shard_ != UINT32_MAX) {
    txn.touch(txn.deferred_shard_);
    txn.written_.insert(txn.written_.begin(), txn.deferred_shard_);  // excluded from install_all
  }
  // Validate everywhere only now that every lock is held; our own shard first (no round
  // trip: a conflict there saves the remote ones).
  std::stable_partition(txn.touched_.begin(), txn.touched_.end(),
                        [own](uint32_t s) { return s == own; });
  for (uint32_t shard : txn.touched_) {
    if (shard == txn.last_agent_ || txn.prepared_early(shard)) continue;
    txn::DepVec deps;
    Status s = co_await links_[shard]->validate(txn.id_, txn.epoch_, &deps);
    if (!s.ok()) co_return s;
    txn.vector_.merge(deps);
  }
  if (txn.last_agent_ != UINT32_MAX) {
    txn::DepVec deps;
    uint64_t tid = 0;
    Status s = co_await links_[txn.last_agent_]->validate_install(
        txn.id_, txn.epoch_, txn.vector_, &deps, &tid,
        txn.last_agent_ == txn.deferred_shard_ ? &txn.deferred_ : nullptr);
    if (s.code() == Code::kUnavailable) {
      // Gone: its new leader's log will say (C4). The others stay prepared meanwhile.
      txn::DepVec logged;
      const Status answer = co_await ask_new_leader(txn, txn.last_agent_, &tid, &logged);
      if (answer.code() == Code::kNotFound) {
        co_return Status::Unavailable(
            fmt::format("transaction {:#x}: shard {} failed over before deciding it", txn.id_,
                        txn.last_agent_));
      }
      if (answer.ok()) {
        deps = logged;
        s = Status::Ok();
      }
    }
    if (s.code() == Code::kUnavailable || s.code() == Code::kTimeout) {
      // Decided there or not: we cannot know. Release the rest (C4) and say so.
      ++stats_.in_doubt;
      txn.in_doubt_ = true;
      co_return Status::Unavailable(
          fmt::format("transaction {:#x} in doubt: shard {} took its commit decision and did "
                      "not answer ({}); the other shards released it",
                      txn.id_, txn.last_agent_, s.to_string()));
    }
    if (!s.ok()) co_return s;  // it voted no: nothing installed anywhere
    txn.vector_.merge(deps);
    txn.vector_.raise(txn.last_agent_, tid);
  }
  *decided = true;  // C1: every shard voted yes
  if (txn.last_agent_ == UINT32_MAX && own_writes) {
    // C6: our own vote decided; install here first: our shard logs the decision before any
    // other shard shows the transaction, and our rows (the hot ones) are released without
    // waiting for a round trip.
    const auto mine = std::find(txn.written_.begin(), txn.written_.end(), own);
    std::rotate(txn.written_.begin(), mine, txn.written_.end());
    if (txn.written_.size() > 1) ++stats_.own_decided;
  }
  co_return co_await install_all(txn);
}

rt::Task<Status> Coordinator::install_all(DistTxn& txn) {
  // The vector's entry for a written shard is at least its proposal (raised in lock_all) and
  // at least every dependency on that shard, so installing there keeps the vector above
  // everything the transaction read. Every shard gets its install even when one fails (C2).
  // Our own shard first when it writes (C6, commit() put it there): the vector the others
  // install at then names the TID our shard logged it at (F10 may raise it above our
  // proposal), so a failover that loses our half loses theirs too (the FVW discard). Else
  // remote shards in order, after the last agent (C4).
  Status first_failure;
  for (uint32_t shard : txn.written_) {
    if (shard == txn.last_agent_) continue;  // installed by its validate_install (F7)
    uint64_t installed = 0;
    Status s = co_await links_[shard]->install(txn.id_, txn.epoch_, txn.vector_.get(shard),
                                               txn.vector_, &installed);
    // F10: a replicated shard may install above our entry; acknowledgement waits for that.
    if (s.ok()) txn.vector_.raise(shard, installed);
    if (!s.ok()) txn.doubtful_.push_back(shard);
    if (!s.ok() && first_failure.ok()) {
      first_failure = Status::Unavailable(
          fmt::format("transaction {:#x} committed, but its install at shard {} is in doubt: {}",
                      txn.id_, shard, s.to_string()));
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

#include "src/txn/snapshot.h"

#include <immintrin.h>

namespace shoal::txn {

SnapshotRegistry::SnapshotRegistry(Engine& engine) : engine_(engine) {
  SHOAL_ASSERT(engine.options().keep_version_chains, "%s",
               "snapshot reads need an engine that keeps version chains");
}

void SnapshotRegistry::publish_applied(uint64_t applied_tid) {
  std::lock_guard<std::mutex> lock(mu_);
  SHOAL_ASSERT(applied_tid >= applied_tid_, "applied TID went back from %lu to %lu", applied_tid_,
               applied_tid);
  applied_tid_ = applied_tid;
  publish_horizon_locked();
}

uint64_t SnapshotRegistry::applied_tid() const {
  std::lock_guard<std::mutex> lock(mu_);
  return applied_tid_;
}

uint64_t SnapshotRegistry::horizon() const {
  return engine_.version_horizon();
}

void SnapshotRegistry::publish_horizon_locked() {
  uint64_t h = applied_tid_;
  for (uint32_t i = 0; i < kSnapshotsMax; ++i) {
    if (in_use_[i]) h = std::min(h, active_[i]);
  }
  engine_.set_version_horizon(h);
}

Status SnapshotRegistry::acquire(uint32_t* slot, uint64_t* snapshot_tid) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t i = 0; i < kSnapshotsMax; ++i) {
    if (in_use_[i]) continue;
    in_use_[i] = true;
    active_[i] = applied_tid_;
    *slot = i;
    *snapshot_tid = applied_tid_;
    return Status::Ok();
  }
  return Status::Unavailable("snapshot reads: all " + std::to_string(kSnapshotsMax) +
                             " snapshot slots are in use");
}

void SnapshotRegistry::release(uint32_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  SHOAL_ASSERT(slot < kSnapshotsMax && in_use_[slot], "release of snapshot slot %u", slot);
  in_use_[slot] = false;
  publish_horizon_locked();
}

Status SnapshotReader::begin() {
  SHOAL_ASSERT(!open_, "%s", "snapshot begin() with one open");
  SHOAL_TRY(registry_.acquire(&slot_, &snapshot_tid_));
  guard_.emplace();
  open_ = true;
  return Status::Ok();
}

void SnapshotReader::end() {
  if (!open_) return;
  guard_.reset();
  registry_.release(slot_);
  open_ = false;
}

SnapshotReader::ReadOutcome SnapshotReader::read_at(const Record* rec, uint32_t* size_out) {
  // Bounded: the head stays locked only while replay installs one write.
  for (uint32_t round = 0; round < (1u << 20); ++round) {
    const uint64_t head = rec->stable_read(scratch_, sizeof(scratch_), size_out, 1u << 10);
    if (head & Tid::kLock) {
      _mm_pause();
      continue;
    }
    if (head & Tid::kUnlinked) return ReadOutcome::kRetry;  // replaced by a grown record
    if (Tid::version(head) <= snapshot_tid_ || options_.unsafe_read_newest) {
      return (head & Tid::kAbsent) ? ReadOutcome::kAbsent : ReadOutcome::kFound;
    }
    // The head is newer than S: walk back to the newest version <= S. Older versions are
    // immutable once linked; versions <= the horizon (<= S) beyond the first are trimmed, so
    // the one we need is never cut.
    const Record* v =
        std::atomic_ref<Record*>(const_cast<Record*&>(rec->older)).load(std::memory_order_acquire);
    for (int depth = 0; v != nullptr; ++depth) {
      SHOAL_ASSERT(depth < (1 << 20), "%s", "version chain cycle");
      if (Tid::version(v->word.load(std::memory_order_acquire)) <= snapshot_tid_) break;
      v = std::atomic_ref<Record*>(const_cast<Record*&>(v->older)).load(std::memory_order_acquire);
    }
    ReadOutcome outcome = ReadOutcome::kAbsent;
    if (v != nullptr && !(v->word.load(std::memory_order_acquire) & Tid::kAbsent)) {
      std::memcpy(scratch_, v->data, v->size_bytes);
      *size_out = v->size_bytes;
      outcome = ReadOutcome::kFound;
    }
    // The chain hung off this head as of `head`; if the head changed meanwhile (grown and
    // unlinked), start over.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (rec->word.load(std::memory_order_relaxed) != head) continue;
    return outcome;
  }
  SHOAL_ASSERT(false, "%s", "a snapshot read found its record locked for too long");
  return ReadOutcome::kRetry;
}

}  // namespace shoal::txn

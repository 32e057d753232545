#include "src/repl/appender.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

namespace shoal::repl {
namespace {

WriteOp op_of(txn::WriteKind kind) {
  switch (kind) {
    case txn::WriteKind::kPut:
      return WriteOp::kPut;
    case txn::WriteKind::kInsert:
      return WriteOp::kInsert;
    case txn::WriteKind::kRemove:
      return WriteOp::kRemove;
  }
  return WriteOp::kPut;
}

}  // namespace

// A transaction's byte-key writes (bounded by the engine) fit one large entry with room for its
// header, dependencies and some fixed-key writes.
static_assert(txn::kBytesTxnWriteBytesMax + (64u << 10) <= kLogLargeEntryBytes);
static_assert(txn::kBytesKeyBytesMax == kLogBytesKeyBytesMax);
static_assert(txn::packed_key_words(5) == log_packed_key_words(5));

// The allocator of the shared_ptr inside a taken entry's EntryBuffer: its control block goes
// into the entry's own slot (no allocation per entry), and giving it back, which the last
// handle's release does after everything else, frees the entry's ring space.
template <typename T>
struct StreamAppender::ControlAllocator {
  using value_type = T;
  RingEntry* entry;
  explicit ControlAllocator(RingEntry* e) : entry(e) {}
  template <typename U>
  ControlAllocator(const ControlAllocator<U>& other) : entry(other.entry) {}  // NOLINT: rebind
  T* allocate(size_t n) {
    static_assert(sizeof(T) <= kControlBytes && alignof(T) <= 16,
                  "the shared_ptr control block must fit a ring entry's slot");
    SHOAL_ASSERT(n == 1, "control block allocation of %zu", n);
    return reinterpret_cast<T*>(entry->control);
  }
  void deallocate(T*, size_t) { entry->held.store(false, std::memory_order_release); }
  template <typename U>
  bool operator==(const ControlAllocator<U>& other) const {
    return entry == other.entry;
  }
};

StreamAppender::StreamAppender(const AppenderOptions& options, txn::Engine& engine, Env& env,
                               WakeFn wake, void* wake_ctx)
    : options_(options),
      engine_(engine),
      env_(env),
      wake_(wake),
      wake_ctx_(wake_ctx),
      buffer_bytes_(pad8(std::max(options.limits.batch_bytes_max, kLogLargeEntryBytes))),
      ring_bytes_(buffer_bytes_ * options.pool_buffers),
      sealed_(options.pool_entries),
      pacer_(options.pace_burst_ns),
      policy_(options.limits, &env) {
  SHOAL_ASSERT(options.pool_buffers >= 1, "pool_buffers %u", options.pool_buffers);
  // One allocation for the whole ring, 64-byte aligned (entries need 8; the WAL's registered
  // buffers and cache lines like 64).
  ring_storage_ = std::make_unique<std::byte[]>(ring_bytes_ + 64);
  const auto addr = reinterpret_cast<uintptr_t>(ring_storage_.get());
  ring_ = ring_storage_.get() + ((64 - addr % 64) % 64);
  entries_ = std::make_unique<RingEntry[]>(options.pool_entries);
  writes_.reserve(256);
  deps_.reserve(16);
  patch_scratch_.resize(kPatchScratchBytes);
  last_seal_ns_ = env.now_ns();
}

EntryBuffer StreamAppender::take(uint32_t index) {
  RingEntry& e = entries_[index];
  SHOAL_ASSERT(e.held.load(std::memory_order_relaxed), "take() of free ring entry %u", index);
  // The deleter has nothing to do: the memory is the ring's; the allocator frees the space.
  const auto* words = reinterpret_cast<const uint64_t*>(ring_ + e.offset);
  taken_count_.fetch_add(1, std::memory_order_release);
  return EntryBuffer::adopt(std::shared_ptr<const uint64_t[]>(
                                words, [](const uint64_t*) {}, ControlAllocator<uint64_t>(&e)),
                            e.bytes);
}

void StreamAppender::recycle(uint32_t index) {
  RingEntry& e = entries_[index];
  SHOAL_ASSERT(e.held.load(std::memory_order_relaxed), "recycle() of free ring entry %u", index);
  taken_count_.fetch_add(1, std::memory_order_release);
  e.held.store(false, std::memory_order_release);
}

StreamAppender::Place StreamAppender::try_place_batch() {
  if (lead_hold_.load(std::memory_order_acquire)) return Place::kLeadHold;
  // Proposals lag: wait as a pool of pool_buffers buffers made the worker wait.
  if (sealed_count_ - taken_count_.load(std::memory_order_acquire) >= options_.pool_buffers) {
    return Place::kBacklog;
  }
  // Free the oldest entries nobody holds (acquire: their last readers are done with them).
  // Bounded by the entries sealed.
  const uint64_t mask = options_.pool_entries - 1;
  while (freed_count_ < sealed_count_ &&
         !entries_[freed_count_ & mask].held.load(std::memory_order_acquire)) {
    ++freed_count_;
  }
  if (sealed_count_ - freed_count_ == options_.pool_entries) return Place::kNoSpace;
  // A batch never crosses the ring's end: it starts at the next lap instead.
  uint64_t at = tail_;
  const uint64_t offset = at % ring_bytes_;
  if (ring_bytes_ - offset < buffer_bytes_) at += ring_bytes_ - offset;
  // Free: everything from tail_ up to the oldest held entry's space one lap later (all of
  // the ring when none is held).
  if (freed_count_ < sealed_count_ &&
      at + buffer_bytes_ > entries_[freed_count_ & mask].begin + ring_bytes_) {
    return Place::kNoSpace;
  }
  batch_begin_ = tail_;
  batch_at_ = at;
  note_space_left(at);
  return Place::kPlaced;
}

void StreamAppender::note_space_left(uint64_t at) {
  bool low = false;
  if (freed_count_ < sealed_count_) {  // nothing held: nothing to let go of
    const uint64_t mask = options_.pool_entries - 1;
    const uint64_t limit = entries_[freed_count_ & mask].begin + ring_bytes_;
    const uint64_t left_bytes = limit - (at + buffer_bytes_);  // try_place_batch: >= 0
    const uint64_t left_entries = options_.pool_entries - (sealed_count_ - freed_count_) - 1;
    low = left_bytes < std::max(ring_bytes_ / 4, buffer_bytes_) ||
          left_entries < options_.pool_entries / 4;
  }
  if (low == short_of_space_.load(std::memory_order_relaxed)) return;
  short_of_space_.store(low, std::memory_order_release);
  if (low && wake_ != nullptr) wake_(wake_ctx_);
}

Status StreamAppender::stop_waiting(const char* what) {
  short_of_space_.store(false, std::memory_order_release);
  stopped_ = Status::Unavailable(
      fmt::format("replication: stream {} of shard {} stopped while waiting for {}; "
                  "transaction not logged",
                  options_.stream, options_.shard, what));
  return stopped_;
}

Status StreamAppender::wait_for_pace() {
  // Unpaced: one load, no clock.
  uint64_t rate = pace_rate_.load(std::memory_order_relaxed);
  uint64_t txns = stats_.txns - paced_txns_;
  paced_txns_ = stats_.txns;
  if (rate == 0) {
    (void)pacer_.wait_ns(0, 0, 0);
    return Status::Ok();
  }
  // Bounded: the debt is at most a batch's transactions at the rate (the rate's last value;
  // unpaced ends it), and a stop request ends it at the next slice. Sleeps, never spins: the
  // followers the ratekeeper waits for may need this core.
  constexpr uint64_t kSliceNsMax = 1'000'000;
  uint64_t wait_start_ns = 0;
  for (;;) {
    const uint64_t now_ns = env_.now_ns();
    const uint64_t wait_ns = pacer_.wait_ns(rate, txns, now_ns);
    txns = 0;
    if (wait_ns == 0) break;
    if (wait_start_ns == 0) {
      wait_start_ns = now_ns;
      ++stats_.pace_waits;
    }
    if (options_.stop != nullptr && options_.stop->load(std::memory_order_acquire)) {
      stats_.pace_wait_ns += now_ns - wait_start_ns;
      return stop_waiting("the ratekeeper's pace");
    }
    env_.sleep_ns(std::min(wait_ns, kSliceNsMax));
    rate = pace_rate_.load(std::memory_order_relaxed);
  }
  if (wait_start_ns != 0) stats_.pace_wait_ns += env_.now_ns() - wait_start_ns;
  return Status::Ok();
}

Status StreamAppender::open_batch() {
  if (!stopped_.ok()) return stopped_;
  SHOAL_TRY(wait_for_pace());
  // Bounded by the replication thread, which takes every entry once proposed and whose store
  // lets go of them (at once when we say we are short), or by a stop request. After a few
  // yields the worker sleeps: it waits for followers (the leader holds proposals while one
  // lags), which on a shared machine need the CPU a spinning worker would take; the sleep
  // doubles up to 1 ms, so a long wait costs a wake-up per millisecond.
  constexpr uint64_t kYields = 64, kSleepMinNs = 50'000, kSleepMaxNs = 1'000'000;
  uint64_t wait_start_ns = 0;
  uint64_t last_ns = 0;                       // of the previous attempt, when waiting
  Place last = Place::kPlaced;                // its outcome: the reason the time since counts for
  const auto charge = [&](uint64_t now_ns) {  // the time since the last attempt, by reason
    if (last == Place::kLeadHold) stats_.lead_hold_wait_ns += now_ns - last_ns;
    if (last == Place::kBacklog) stats_.backlog_wait_ns += now_ns - last_ns;
    last_ns = now_ns;
  };
  for (uint64_t spins = 0;; ++spins) {
    const Place place = try_place_batch();
    if (spins > 0) charge(env_.now_ns());
    last = place;
    if (place == Place::kPlaced) break;

    // Short of space: ask the replication thread to let go of what its store retains (its
    // next drain or poll; a full post queue delays that to its next tick). A backlog of
    // entries to propose is not helped by that.
    if (place == Place::kNoSpace && !short_of_space_.load(std::memory_order_relaxed)) {
      short_of_space_.store(true, std::memory_order_release);
      if (wake_ != nullptr) wake_(wake_ctx_);
    }
    if (spins == 0) {
      ++stats_.buffer_waits;
      if (place == Place::kLeadHold) ++stats_.lead_waits;
      wait_start_ns = last_ns = env_.now_ns();
    }
    if (options_.stop != nullptr && options_.stop->load(std::memory_order_acquire)) {
      stats_.buffer_wait_ns += env_.now_ns() - wait_start_ns;
      return stop_waiting("a log buffer (the followers took no entry)");
    }
    if (spins < kYields) {
      std::this_thread::yield();
    } else {
      const uint64_t doublings = std::min<uint64_t>((spins - kYields) / 16, 5);
      env_.sleep_ns(std::min(kSleepMinNs << doublings, kSleepMaxNs));
    }
  }
  if (wait_start_ns != 0) stats_.buffer_wait_ns += env_.now_ns() - wait_start_ns;
  ++sequence_;
  reset_builder(/*whole_buffer=*/false);
  return Status::Ok();
}

void StreamAppender::reset_builder(bool whole_buffer) {
  LogEntryId id;
  id.shard = options_.shard;
  id.stream = options_.stream;
  id.epoch = options_.epoch;
  id.sequence = sequence_;
  BatchLimits limits = options_.limits;
  if (whole_buffer) limits.batch_bytes_max = static_cast<uint32_t>(buffer_bytes_);
  builder_.reset({ring_ + batch_at_ % ring_bytes_, buffer_bytes_}, id, limits);
}

void StreamAppender::seal(uint64_t floor_tid, uint16_t flags, uint64_t final_tid) {
  SHOAL_ASSERT(builder_.open(), "%s", "seal without an open batch");
  const uint64_t cap = promise_cap();
  SHOAL_ASSERT(cap >= promised_tid_, "stream %u: a reservation at or below its promise %#llx",
               options_.stream, static_cast<unsigned long long>(promised_tid_));
  const std::span<const std::byte> bytes = builder_.seal(flags, floor_tid, final_tid, cap);
  // What the entry promised (its max_tid): records appended under a lower cap, released
  // since, may have lifted it above what append_record() counted.
  promised_tid_ = std::max(promised_tid_, entry_max_tid(bytes.data()));
  logged_floor_tid_ = std::max(logged_floor_tid_, promised_tid_);
  policy_.note_sealed();
  // The entry keeps its own bytes of the batch's space; the rest is free for the next batch.
  const auto index = static_cast<uint32_t>(sealed_count_ & (options_.pool_entries - 1));
  RingEntry& r = entries_[index];
  r.begin = batch_begin_;
  r.end = batch_at_ + pad8(bytes.size());
  r.offset = batch_at_ % ring_bytes_;
  r.bytes = static_cast<uint32_t>(bytes.size());
  r.held.store(true, std::memory_order_relaxed);  // published by the sealed queue's push
  ++sealed_count_;
  tail_ = r.end;
  last_seal_ns_ = env_.now_ns();
  const SealedEntry e{index, static_cast<uint32_t>(bytes.size()), entry_max_tid(bytes.data()),
                      last_seal_ns_, entry_record_count(bytes.data())};
  // The queue holds pool_entries, and at most pool_entries entries are held.
  SHOAL_ASSERT(sealed_.push(e), "%s", "sealed ring overflow (more sealed than entry slots)");
  ++stats_.entries;
  stats_.bytes += bytes.size();
  if (wake_ != nullptr) wake_(wake_ctx_);
}

Status StreamAppender::append_record(uint64_t tid, std::span<const txn::DepEntry> deps,
                                     std::span<const TxnWrite> writes, uint64_t dist_txn_id) {
  if (!builder_.open()) SHOAL_TRY(open_batch());
  AppendResult r = builder_.append(tid, deps, writes, dist_txn_id);
  if (r == AppendResult::kFull) {
    seal(0);
    SHOAL_TRY(open_batch());
    r = builder_.append(tid, deps, writes, dist_txn_id);
  }
  if (r == AppendResult::kNeverFits) {
    // Larger than a batch (a byte key's large value): a batch as large as the whole buffer
    // (kLogLargeEntryBytes at least), which the next refused append or the age seals.
    if (builder_.txn_count() > 0) {
      seal(0);
      SHOAL_TRY(open_batch());
    }
    reset_builder(/*whole_buffer=*/true);  // nothing is in the open batch yet
    r = builder_.append(tid, deps, writes, dist_txn_id);
  }
  SHOAL_ASSERT(r == AppendResult::kOk,
               "a transaction of %zu writes does not fit an empty log batch of %zu bytes",
               writes.size(), builder_.capacity_bytes());
  policy_.note_append(builder_);
  ++stats_.txns;
  last_logged_tid_ = tid;
  promised_tid_ = std::max(promised_tid_, std::min(tid, promise_cap()));
  logged_floor_tid_ = std::max({logged_floor_tid_, promised_tid_, tid});
  if (policy_.should_seal(builder_) != BatchPolicy::Reason::kNone) seal(0);
  return Status::Ok();
}

TxnWrite StreamAppender::log_write(const txn::WriteView& w, size_t* scratch_used) {
  TxnWrite out{w.table_id,
               op_of(w.kind),
               {w.key_words, w.key_word_count},
               {static_cast<const std::byte*>(w.value),
                w.kind == txn::WriteKind::kRemove ? 0 : w.size_bytes}};
  out.bytes_key = w.bytes_key;
  if (!options_.log_patches || w.bytes_key || w.kind != txn::WriteKind::kPut ||
      w.old_value == nullptr || w.old_size_bytes != w.size_bytes ||
      w.size_bytes > kLogPatchValueBytesMax) {
    return out;
  }
  // Only the changed bytes: the follower applies them onto the version the put overwrote,
  // which the stream's order guarantees it holds (docs/LOG_FORMAT.md, "Patch").
  const std::span<std::byte> room(patch_scratch_.data() + *scratch_used,
                                  patch_scratch_.size() - *scratch_used);
  uint16_t ranges = 0;
  const size_t body = encode_patch({static_cast<const std::byte*>(w.old_value), w.size_bytes},
                                   out.value, w.base_tid, room, &ranges);
  if (body == 0) return out;  // not smaller, or no scratch left: the whole value
  out.op = WriteOp::kPatch;
  out.value = room.first(body);
  out.patch_value_bytes = w.size_bytes;
  out.patch_ranges = ranges;
  *scratch_used += pad8(body);
  ++stats_.patches;
  return out;
}

Status StreamAppender::append(const txn::Txn& txn, uint64_t dist_txn_id) {
  const uint64_t tid = txn.last_commit_tid();
  writes_.clear();
  size_t scratch_used = 0;
  txn.for_each_write(
      [&](const txn::WriteView& w) { writes_.push_back(log_write(w, &scratch_used)); });
  if (writes_.empty()) return Status::Ok();  // read-only: nothing to replicate
  // A shard server's stream also logs its 2PC participant's installs: they install above the
  // stream's promise (set_tid_floor), or a follower could apply them after a watermark that
  // already covered their TID, and an acknowledgement could come before they are chosen.
  SHOAL_ASSERT(tid > promised_tid_, "stream %u logs TID %#llx at or below its promise %#llx",
               options_.stream, static_cast<unsigned long long>(tid),
               static_cast<unsigned long long>(promised_tid_));
  last_commit_tid_ = std::max(last_commit_tid_, tid);
  // Our own entry is the commit TID itself; the others only above the stable base.
  const uint32_t omitted =
      txn::compact_entries(txn.deps(), dep_base_, engine_.options().shard_id, &deps_);
  SHOAL_TRY(append_record(tid, deps_, writes_, dist_txn_id));
  txn::DepVecBytes& d = stats_.deps;
  ++d.vectors;
  d.entries += deps_.size();
  d.omitted += omitted;
  d.bytes += log_dep_bytes(deps_.size());
  d.full_bytes += log_dep_bytes(deps_.size() + omitted);
  return Status::Ok();
}

bool StreamAppender::idle() {
  if (!options_.seal_when_idle || !builder_.open() || builder_.txn_count() == 0) return false;
  // The leader holds us: a seal now would make the next append wait for the hold.
  if (lead_hold_.load(std::memory_order_relaxed)) return false;
  // Enough in flight: the batch grows while their round runs (the age still bounds it).
  if (sealed_count_ - settled_count_.load(std::memory_order_acquire) >=
      options_.idle_seal_inflight_max) {
    return false;
  }
  ++stats_.idle_seals;
  seal(0);
  return true;
}

void StreamAppender::tick() {
  if (builder_.open()) {
    if (builder_.txn_count() > 0 && policy_.should_seal(builder_) != BatchPolicy::Reason::kNone) {
      seal(0);
    }
    return;
  }
  if (env_.now_ns() - last_seal_ns_ < options_.idle_ns) return;
  // Held by the leader: entries are unchosen, and the watermark rises with them; a floor
  // would only make the idle worker wait.
  if (lead_hold_.load(std::memory_order_acquire)) return;
  // This worker is between transactions: its next commit reads the epoch after this point, so
  // its TID is >= epoch << 32, and it is above every TID it committed.
  const uint64_t epoch_floor = (engine_.epoch() << 32) - 1;
  if (!open_batch().ok()) return;  // stopped: nothing more is logged (stopped() says why)
  ++stats_.floor_entries;
  seal(std::max(last_commit_tid_, epoch_floor));
}

void StreamAppender::flush() {
  if (builder_.open() && builder_.txn_count() > 0) seal(0);
}

Status StreamAppender::finish(uint64_t floor_tid, uint16_t flags, uint64_t final_tid) {
  if (!stopped_.ok()) return stopped_;
  flush();
  if (!builder_.open()) SHOAL_TRY(open_batch());
  ++stats_.floor_entries;
  seal(floor_tid, flags, final_tid);
  return Status::Ok();
}

}  // namespace shoal::repl

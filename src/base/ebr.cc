#include "src/base/ebr.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "src/base/assert.h"

namespace shoal::ebr {
namespace {

constexpr size_t kMaxThreads = 1024;
constexpr uint64_t kIdle = ~uint64_t{0};
// retire() runs quiesce() whenever the list grew by this many entries since the last try, so
// the slot scan is amortized over many retirements even while a long Guard blocks the epoch.
constexpr size_t kQuiesceEvery = 64;
// Frees per quiesce() call: bounds the pause a worker takes for reclamation.
constexpr size_t kMaxFreePerCall = 4096;
constexpr size_t kBatch = 256;
// drain_all_for_tests() repeats while free functions retire more; this bounds that chain.
constexpr int kMaxDrainRounds = 1000;

struct Retired {
  void* p;
  void (*free_fn)(void*);
  uint64_t epoch;
};

// One per registered thread. `announce` is read by every thread; the list is owned by the
// slot's thread but guarded by `mu` so that drain_all_for_tests() may empty it.
struct alignas(64) Slot {
  std::atomic<uint64_t> announce{kIdle};
  std::atomic<bool> owned{false};
  std::atomic<size_t> pending{0};
  // Owner-only fields. Live guards entered at `low` (count_low, > 0 while depth > 0) or at
  // low + 1 (count_high): the slot announces low, so the global epoch cannot pass low + 1 and
  // a new guard always enters at one of the two.
  uint32_t depth = 0;
  uint64_t low = 0;
  uint32_t count_low = 0;
  uint32_t count_high = 0;
  size_t quiesce_at = kQuiesceEvery;
  std::mutex mu;
  std::vector<Retired> list;  // epochs nondecreasing; live entries are [head, size)
  size_t head = 0;
};

// Global epoch. Starts at 2 so that "epoch - 2" never wraps for the first retirements.
std::atomic<uint64_t> g_epoch{2};
// Slots in use are all below this index; scans stop here.
std::atomic<size_t> g_slot_high{0};

struct Orphans {
  std::mutex mu;
  std::vector<Retired> list;
  std::atomic<size_t> count{0};
};

// Leaked on purpose: thread exit handlers of late threads may still touch them during static
// destruction.
Slot* slots() {
  static Slot* s = new Slot[kMaxThreads];
  return s;
}
Orphans& orphans() {
  static Orphans* o = new Orphans;
  return *o;
}

// A full fence that orders this thread's earlier stores before its later loads. TSan does not
// model std::atomic_thread_fence (GCC warns, and warnings are errors); it does not need the
// fence for its happens-before analysis either, so TSan builds get a hardware fence only.
inline void full_fence() {
#if defined(__SANITIZE_THREAD__)
#if defined(__x86_64__)
  asm volatile("mfence" ::: "memory");
#else
  __sync_synchronize();
#endif
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

void release_slot(Slot* s);

thread_local Slot* t_slot = nullptr;

// Constructed on a thread's first registration only, so the Guard fast path reads t_slot
// (constant-initialized, no TLS wrapper) and never this object.
struct ThreadExit {
  bool armed = false;
  ~ThreadExit() {
    if (armed && t_slot != nullptr) release_slot(t_slot);
    t_slot = nullptr;
  }
};
thread_local ThreadExit t_exit;

Slot* register_thread() {
  Slot* all = slots();
  for (size_t i = 0; i < kMaxThreads; ++i) {
    Slot& s = all[i];
    if (s.owned.load(std::memory_order_relaxed)) continue;
    if (s.owned.exchange(true, std::memory_order_acquire)) continue;
    // Publish the slot before this thread first announces (see try_advance()).
    // Bounded: each failed exchange means another thread raised the mark, at most kMaxThreads.
    size_t high = g_slot_high.load(std::memory_order_relaxed);
    while (high < i + 1 &&
           !g_slot_high.compare_exchange_weak(high, i + 1, std::memory_order_seq_cst)) {
    }
    {
      // drain_all_for_tests() rewrites quiesce_at under the slot's lock (TSan saw the race).
      std::lock_guard<std::mutex> lock(s.mu);
      s.depth = 0;
      s.count_low = 0;
      s.count_high = 0;
      s.quiesce_at = kQuiesceEvery;
    }
    t_slot = &s;
    t_exit.armed = true;
    return &s;
  }
  SHOAL_ASSERT(false, "more than %zu threads use ebr at once", kMaxThreads);
}

inline Slot* my_slot() {
  Slot* s = t_slot;
  return s != nullptr ? s : register_thread();
}

void add_orphans(std::vector<Retired>&& items) {
  if (items.empty()) return;
  Orphans& o = orphans();
  std::lock_guard<std::mutex> lock(o.mu);
  o.list.insert(o.list.end(), items.begin(), items.end());
  o.count.store(o.list.size(), std::memory_order_relaxed);
}

void release_slot(Slot* s) {
  SHOAL_ASSERT(s->depth == 0, "thread exits inside an ebr::Guard (depth %u)", s->depth);
  std::vector<Retired> left;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    left.assign(s->list.begin() + static_cast<ptrdiff_t>(s->head), s->list.end());
    s->list.clear();
    s->list.shrink_to_fit();
    s->head = 0;
    s->pending.store(0, std::memory_order_relaxed);
  }
  add_orphans(std::move(left));
  s->announce.store(kIdle, std::memory_order_release);
  s->owned.store(false, std::memory_order_release);
}

// Advances the epoch from E to E+1 if every thread inside a critical section entered at E.
bool try_advance() {
  uint64_t e = g_epoch.load(std::memory_order_acquire);
  // Pairs with the fence in Guard(): either we see a thread's announcement, or that thread
  // sees every unlink that happened before the retirements we may free.
  full_fence();
  const size_t n = g_slot_high.load(std::memory_order_acquire);
  Slot* all = slots();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = all[i].announce.load(std::memory_order_acquire);
    if (a != kIdle && a != e) return false;
  }
  return g_epoch.compare_exchange_strong(e, e + 1, std::memory_order_acq_rel);
}

void free_batch(const Retired* items, size_t n) {
  for (size_t i = 0; i < n; ++i) items[i].free_fn(items[i].p);
}

// Frees up to kMaxFreePerCall entries of s's list tagged at most safe_epoch. Free functions
// run without the lock, since they may retire more objects.
void free_own(Slot* s, uint64_t safe_epoch) {
  Retired batch[kBatch];
  for (size_t freed = 0; freed < kMaxFreePerCall;) {
    size_t n = 0;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      while (n < kBatch && s->head < s->list.size() && s->list[s->head].epoch <= safe_epoch) {
        batch[n++] = s->list[s->head++];
      }
      if (s->head == s->list.size()) {
        s->list.clear();
        s->head = 0;
      } else if (s->head >= 1024 && s->head * 2 >= s->list.size()) {
        s->list.erase(s->list.begin(), s->list.begin() + static_cast<ptrdiff_t>(s->head));
        s->head = 0;
      }
      s->pending.fetch_sub(n, std::memory_order_relaxed);
    }
    if (n == 0) return;
    free_batch(batch, n);
    freed += n;
  }
}

// Frees orphans tagged at most safe_epoch, one bounded batch.
void free_orphans(uint64_t safe_epoch) {
  Orphans& o = orphans();
  Retired batch[kBatch];
  size_t n = 0;
  {
    std::unique_lock<std::mutex> lock(o.mu, std::try_to_lock);
    if (!lock.owns_lock()) return;
    // Orphan lists of several threads interleave, so their epochs are not sorted.
    auto keep = o.list.begin();
    for (auto it = o.list.begin(); it != o.list.end(); ++it) {
      if (n < kBatch && it->epoch <= safe_epoch) {
        batch[n++] = *it;
      } else {
        *keep++ = *it;
      }
    }
    o.list.erase(keep, o.list.end());
    o.count.store(o.list.size(), std::memory_order_relaxed);
  }
  free_batch(batch, n);
}

}  // namespace

Guard::Guard() {
  Slot* s = my_slot();
  const uint64_t e = g_epoch.load(std::memory_order_relaxed);
  entry_epoch_ = e;
  if (s->depth++ != 0) {
    // Guards of coroutines on one thread end in any order, so each counts under the epoch it
    // entered at and the slot announces the oldest (see ~Guard()).
    SHOAL_ASSERT(e == s->low || e == s->low + 1, "ebr: guard entered at %llu, slot at %llu",
                 static_cast<unsigned long long>(e), static_cast<unsigned long long>(s->low));
    (e == s->low ? s->count_low : s->count_high)++;
    return;
  }
  s->low = e;
  s->count_low = 1;
  s->count_high = 0;
#if defined(__SANITIZE_THREAD__)
  s->announce.exchange(e, std::memory_order_seq_cst);
#else
  s->announce.store(e, std::memory_order_release);
#endif
  // Orders the announcement before every load of shared pointers in the critical section.
  full_fence();
}

Guard::~Guard() {
  Slot* s = t_slot;
  SHOAL_DCHECK(s != nullptr && s->depth > 0);
  (entry_epoch_ == s->low ? s->count_low : s->count_high)--;
  if (--s->depth == 0) {
    s->announce.store(kIdle, std::memory_order_release);
    return;
  }
  if (s->count_low == 0) {
    // The oldest guards are gone: announce the newer epoch so the global one can move on
    // while younger guards (other in-flight transactions on this thread) are still alive.
    s->low += 1;
    s->count_low = s->count_high;
    s->count_high = 0;
    s->announce.store(s->low, std::memory_order_release);
  }
}

void retire(void* p, void (*free_fn)(void*)) {
  SHOAL_DCHECK(p != nullptr && free_fn != nullptr);
  Slot* s = my_slot();
  // Orders the caller's unlink before the epoch read, so the tag is not older than the unlink.
  full_fence();
  const uint64_t e = g_epoch.load(std::memory_order_acquire);
  size_t live;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->list.push_back(Retired{p, free_fn, e});
    live = s->list.size() - s->head;
    s->pending.fetch_add(1, std::memory_order_relaxed);
  }
  if (live >= s->quiesce_at) quiesce();
}

void quiesce() {
  Slot* s = my_slot();
  // Two advances make this thread's newest retirements freeable when nobody else is active.
  if (try_advance()) try_advance();
  const uint64_t e = g_epoch.load(std::memory_order_acquire);
  free_own(s, e - 2);
  if (orphans().count.load(std::memory_order_relaxed) != 0) free_orphans(e - 2);
  std::lock_guard<std::mutex> lock(s->mu);
  s->quiesce_at = s->list.size() - s->head + kQuiesceEvery;
}

void drain_all_for_tests() {
  Slot* all = slots();
  for (int round = 0; round < kMaxDrainRounds; ++round) {
    std::vector<Retired> items;
    const size_t n = g_slot_high.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      Slot& s = all[i];
      std::lock_guard<std::mutex> lock(s.mu);
      items.insert(items.end(), s.list.begin() + static_cast<ptrdiff_t>(s.head), s.list.end());
      s.list.clear();
      s.head = 0;
      s.quiesce_at = kQuiesceEvery;
      s.pending.store(0, std::memory_order_relaxed);
    }
    {
      Orphans& o = orphans();
      std::lock_guard<std::mutex> lock(o.mu);
      items.insert(items.end(), o.list.begin(), o.list.end());
      o.list.clear();
      o.count.store(0, std::memory_order_relaxed);
    }
    if (items.empty()) return;
    free_batch(items.data(), items.size());
  }
  SHOAL_ASSERT(false, "ebr free functions kept retiring for %d rounds", kMaxDrainRounds);
}

size_t pending_count() {
  size_t total = orphans().count.load(std::memory_order_relaxed);
  const size_t n = g_slot_high.load(std::memory_order_acquire);
  Slot* all = slots();
  for (size_t i = 0; i < n; ++i) total += all[i].pending.load(std::memory_order_relaxed);
  return total;
}

}  // namespace shoal::ebr

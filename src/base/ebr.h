// Epoch-based memory reclamation (EBR) for the lock-free / optimistic data structures.
//
// A reader that follows pointers into a shared structure without locks holds a Guard; memory
// unlinked by a writer is handed to retire() and freed only once every Guard that might still
// see it has ended.
//
// Scheme: a global epoch counter. Each thread owns a slot (one of kMaxThreads, reused after
// the thread exits) in which it announces the epoch it entered its critical section at, or
// "idle". A retired object is tagged with the global epoch read after it was unlinked. The
// epoch advances from E to E+1 only when every non-idle slot announces E, so a thread that
// entered at E blocks the epoch at E+1; an object tagged T is freed once the epoch is >= T+2,
// when no critical section that could have seen it (entered at <= T) is still running.
//
// Threads: every function may be called from any thread. Guards nest and may end in any order
// (coroutine transactions on one thread): the slot announces the oldest epoch among its live
// guards, so the epoch keeps advancing while a thread always has some guard open. A thread that
// exits hands its unfreed objects to a global orphan list that quiesce() frees later.
//
// Costs: entering a Guard is one store plus one full fence; retire() appends to a
// thread-local list and, every kQuiesceEvery retirements, runs quiesce(), which scans the
// announced epochs of registered threads and frees a bounded batch.
//
// A Guard held forever stops reclamation for everybody: retired memory then only grows.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shoal::ebr {

// RAII critical section for the calling thread. Pointers to nodes/records loaded while a
// Guard is alive stay valid (not freed) until the Guard ends. Reentrant, in any order.
// REQUIRES: destroyed on the thread that constructed it.
class Guard {
 public:
  Guard();
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  uint64_t entry_epoch_;
};

// Schedules free_fn(p) once no thread can still hold a reference taken before now. Callable
// with or without a Guard held. REQUIRES: p is already unreachable for threads that enter a
// critical section from now on. free_fn may itself call retire().
void retire(void* p, void (*free_fn)(void*));

// Tries to advance the global epoch and frees what is safe on this thread's list (at most a
// bounded batch per call), plus orphans of exited threads. Workers call it now and then.
void quiesce();

// Frees everything retired by all threads, ignoring epochs.
// REQUIRES: no thread holds a Guard or calls retire() concurrently (tests, shutdown).
void drain_all_for_tests();

// Count of retired-but-not-yet-freed objects over all threads (for tests/metrics).
size_t pending_count();

}  // namespace shoal::ebr

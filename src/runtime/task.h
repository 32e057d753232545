// Task<T>: a minimal lazy C++20 coroutine for the per-core runtime.
//
// Contract:
//   - Lazy: creating a Task runs nothing; the body starts when it is co_awaited (or spawned on
//     an EventLoop, src/runtime/event_loop.h, which owns detached root tasks).
//   - Awaiting uses symmetric transfer in both directions (start: caller -> child; finish:
//     child -> caller), so arbitrarily deep chains of co_await never grow the machine stack
//     (in builds that make no tail calls, through the trampoline below and the EventLoop).
//   - A Task owns its coroutine frame and destroys it in its destructor; co_await on a Task
//     moves the result out of the frame (await once). REQUIRES: a Task is awaited at most once.
//   - No exceptions: errors travel as Status / Result<T> values; an exception escaping a body
//     is a broken invariant and aborts.
//   - Ready tasks (Task<T> only): Task<T>::ready(v) holds its value without a coroutine frame.
//     A function that can often answer at once (a backend call whose data is at hand) returns
//     one on that path and a coroutine's task otherwise; awaiting a ready task neither
//     suspends nor allocates, so the answer costs a call, not a frame.
//   - REQUIRES: a Task is not moved while a co_await or join() on it is suspended (the
//     awaiter holds the Task, not its frame, so that a ready task can be awaited too).
//   - Inline start (Task<T> and Task<void>, for a runtime that runs the synchronous part of a task
//   at once, as
//     RpcEndpoint does with a request's handler): start_inline() runs the body on the caller's
//     stack until its first suspension or its end and says whether it ended; an ended task
//     hands over its value with take(); a suspended one is co_awaited later through join(),
//     which waits for its end without resuming it. REQUIRES: the task is resumed (and ends) on
//     this thread, so nothing runs it between start_inline() returning and join().
// Threads: a Task runs on the thread of the loop that resumes it; it is not thread-safe.
// Allocation: every coroutine frame comes from the promise's operator new: frames up to
// kPooledFrameBytes are recycled through a bounded per-thread free list per 64-byte size class
// (allocate_frame / free_frame), so steady-state tasks (an RPC handler per request) do not call
// malloc; larger frames, and every frame in sanitizer builds, use the heap (docs/RUNTIME.md).
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <utility>

#include "src/base/assert.h"

namespace shoal::rt {

template <typename T = void>
class Task;

namespace detail {

// Frame pool. Per thread rather than per loop: operator new cannot see the loop, and one loop
// runs on one thread, so this is the same list without a lookup. A frame freed on another
// thread (a task moved with post_resume) joins that thread's list; any block of a class fits.
inline constexpr size_t kFrameClassBytes = 64;
inline constexpr size_t kFrameClasses = 16;
inline constexpr size_t kPooledFrameBytes = kFrameClassBytes * kFrameClasses;  // 1 KiB
inline constexpr size_t kMaxCachedFrameBytes = size_t{256} << 10;  // per thread, all classes
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kPoolFrames = false;  // sanitizers must see each frame's lifetime
#else
inline constexpr bool kPoolFrames = true;
#endif

// Trivially constructible and destructible, so that the thread_local below needs no
// initialisation guard: every access was a call to its TLS init function, on every frame
// allocated and freed. Thread exit is handled by FrameCacheReaper.
struct FrameCache {
  struct Free {
    Free* next;
  };
  Free* head[kFrameClasses];
  size_t cached_bytes;
  // Set at thread exit: frames freed later in it (a static EventLoop's tasks) go straight back
  // to the heap.
  bool closed;
  bool reaper_armed;  // the thread's FrameCacheReaper exists (armed by the first frame cached)
};
inline constinit thread_local FrameCache t_frame_cache{};

// Hands the thread's cached frames back to the heap when the thread exits.
struct FrameCacheReaper {
  FrameCacheReaper() = default;
  FrameCacheReaper(const FrameCacheReaper&) = delete;
  FrameCacheReaper& operator=(const FrameCacheReaper&) = delete;
  ~FrameCacheReaper() {
    FrameCache& cache = t_frame_cache;
    cache.closed = true;
    for (size_t c = 0; c < kFrameClasses; ++c) {
      while (FrameCache::Free* f = cache.head[c]) {
        cache.head[c] = f->next;
        ::operator delete(f, (c + 1) * kFrameClassBytes);
      }
    }
    cache.cached_bytes = 0;
  }
};
inline thread_local FrameCacheReaper t_frame_cache_reaper;

// Cold: constructs this thread's reaper (registering its destructor for thread exit).
[[gnu::noinline]] inline void arm_frame_cache_reaper() {
  t_frame_cache.reaper_armed = true;
  [[maybe_unused]] FrameCacheReaper* volatile reaper = &t_frame_cache_reaper;
}

inline void* allocate_frame(size_t bytes) {
  const size_t c = (bytes - 1) / kFrameClassBytes;  // a frame is never empty
  if (!kPoolFrames || c >= kFrameClasses) return ::operator new(bytes);
  FrameCache& cache = t_frame_cache;
  if (FrameCache::Free* f = cache.head[c]) {
    cache.head[c] = f->next;
    cache.cached_bytes -= (c + 1) * kFrameClassBytes;
    return f;
  }
  return ::operator new((c + 1) * kFrameClassBytes);
}

// REQUIRES: bytes is what allocate_frame() was given for p.
inline void free_frame(void* p, size_t bytes) {
  const size_t c = (bytes - 1) / kFrameClassBytes;
  if (!kPoolFrames || c >= kFrameClasses) return ::operator delete(p, bytes);
  const size_t class_bytes = (c + 1) * kFrameClassBytes;
  FrameCache& cache = t_frame_cache;
  if (cache.closed || cache.cached_bytes + class_bytes > kMaxCachedFrameBytes) {
    return ::operator delete(p, class_bytes);  // bounded: beyond the cap frames go back
  }
  if (!cache.reaper_armed) [[unlikely]]
    arm_frame_cache_reaper();
  cache.head[c] = new (p) FrameCache::Free{cache.head[c]};
  cache.cached_bytes += class_bytes;
}

// Trampoline. Symmetric transfer keeps the stack flat only when the compiler turns the
// transfer into a tail call: g++ does at -O2, not at -O0, -O1 nor under ASan or TSan. There a
// chain of synchronous completions (a loop of co_awaits on a local link that answers at once)
// nests one resume per hop until the stack overflows. So in those builds every transfer looks
// at how deep the stack has grown since the running EventLoop's iteration began, and past
// kTrampolineStackBytes hands the next coroutine to that loop's ready queue instead: the stack
// unwinds to the loop, which resumes it in its next pass. The loop (event_loop.cc) fills
// t_trampoline for the length of each iteration; a transfer outside any iteration, or with
// the ready queue full, nests as before.
#if defined(SHOAL_TASK_TRAMPOLINE)
// Set by the build to force it on or off.
#elif defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__OPTIMIZE__) || \
    defined(__NO_INLINE__)
#define SHOAL_TASK_TRAMPOLINE 1
#else
#define SHOAL_TASK_TRAMPOLINE 0
#endif
inline constexpr bool kTaskTrampoline = SHOAL_TASK_TRAMPOLINE != 0;
inline constexpr uintptr_t kTrampolineStackBytes = uintptr_t{256} << 10;

struct Trampoline {
  uintptr_t stack_base;  // a frame address at the start of the loop's iteration; 0: none
  void* loop;            // the EventLoop iterating on this thread, or null
  // Queues h on `loop` (false when its ready queue is full).
  bool (*defer)(void* loop, std::coroutine_handle<> h);
  uint64_t deferred;  // transfers deferred on this thread (for tests)
};
inline constinit thread_local Trampoline t_trampoline{};

// What an awaiter's await_suspend returns to transfer to `next`.
[[gnu::always_inline]] inline std::coroutine_handle<> transfer_to(
    std::coroutine_handle<> next) noexcept {
  if constexpr (kTaskTrampoline) {
    Trampoline& t = t_trampoline;
    const auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    if (t.loop != nullptr && t.stack_base > sp && t.stack_base - sp > kTrampolineStackBytes &&
        next.address() != std::noop_coroutine().address() && t.defer(t.loop, next)) {
      ++t.deferred;
      return std::noop_coroutine();  // unwinds to the loop, which resumes `next`
    }
  }
  return next;
}

struct TaskPromiseBase {
  static void* operator new(size_t bytes) { return allocate_frame(bytes); }
  static void operator delete(void* p, size_t bytes) { free_frame(p, bytes); }

  // Who resumes when this task finishes; noop for a task nobody awaits (never happens for
  // Task: spawned tasks are awaited by their detached root).
  std::coroutine_handle<> continuation = std::noop_coroutine();

  std::suspend_always initial_suspend() noexcept { return {}; }

  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <typename P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> self) noexcept {
      return transfer_to(self.promise().continuation);  // symmetric transfer to the awaiter
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }

  void unhandled_exception() noexcept {
    SHOAL_ASSERT(false, "%s", "an exception escaped a shoal::rt::Task (the runtime never throws)");
  }
};

template <typename Promise>
struct TaskAwaiter {
  std::coroutine_handle<Promise> child;
  bool await_ready() noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) noexcept {
    child.promise().continuation = caller;
    return transfer_to(child);  // symmetric transfer into the child
  }
};

}  // namespace detail

template <typename T>
class [[nodiscard]] Task {
 public:
  struct promise_type : detail::TaskPromiseBase {
    std::optional<T> value;
    Task get_return_object() noexcept {
      return Task(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    template <typename U>
    void return_value(U&& v) {
      value.emplace(std::forward<U>(v));
    }
  };
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  // A task that has its value already, without a coroutine frame (the header's "Ready tasks").
  static Task ready(T value) {
    Task t;
    t.ready_.emplace(std::move(value));
    return t;
  }
  Task(Task&& other) noexcept : h_(std::exchange(other.h_, {})), ready_(std::move(other.ready_)) {
    other.ready_.reset();
  }
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (h_) h_.destroy();
      h_ = std::exchange(other.h_, {});
      ready_ = std::move(other.ready_);
      other.ready_.reset();
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (h_) h_.destroy();
  }

  bool valid() const { return h_ || ready_.has_value(); }
  bool done() const { return ready_.has_value() || (h_ && h_.done()); }
  // Built by ready(): its value is here, there is no body to run.
  bool is_ready() const { return ready_.has_value(); }

  // REQUIRES: valid(); awaited once.
  auto operator co_await() noexcept {
    SHOAL_ASSERT(ready_.has_value() || (h_ && !h_.done()), "%s",
                 "co_await on an empty or finished Task");
    struct Awaiter {
      Task* task;
      bool await_ready() noexcept { return task->ready_.has_value(); }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) noexcept {
        return detail::TaskAwaiter<promise_type>{task->h_}.await_suspend(caller);
      }
      T await_resume() { return task->value(); }
    };
    return Awaiter{this};
  }

  // Runs the body now until its first suspension or its end; true when it ended (a ready task
  // has). Its end returns here (the continuation is still the no-op one), not to an awaiter.
  // REQUIRES: valid(); never started or awaited.
  bool start_inline() {
    if (ready_.has_value()) return true;
    h_.resume();
    return h_.done();
  }
  // The value of an ended task. REQUIRES: done(); taken once.
  T take() {
    SHOAL_ASSERT(done(), "%s", "take() from an unfinished Task");
    return value();
  }
  // Awaits a task that start_inline() left suspended: resumes the awaiter when the task ends
  // (at once if it already has), without resuming the task. REQUIRES: started; joined once.
  auto join() noexcept {
    struct Joiner {
      Task* task;
      bool await_ready() noexcept { return task->done(); }
      void await_suspend(std::coroutine_handle<> awaiter) noexcept {
        task->h_.promise().continuation = awaiter;  // the task's end transfers here
      }
      T await_resume() { return task->value(); }
    };
    SHOAL_ASSERT(valid(), "%s", "join() on an empty Task");
    return Joiner{this};
  }

 private:
  explicit Task(Handle h) : h_(h) {}
  // Moves the value out: the ready one, or the ended body's.
  T value() {
    if (ready_.has_value()) return std::move(*ready_);
    SHOAL_ASSERT(h_.promise().value.has_value(), "%s", "Task finished without value");
    return std::move(*h_.promise().value);
  }

  Handle h_;
  std::optional<T> ready_;  // engaged: a ready task (no frame, h_ empty)
};

template <>
class [[nodiscard]] Task<void> {
 public:
  struct promise_type : detail::TaskPromiseBase {
    Task get_return_object() noexcept {
      return Task(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    void return_void() noexcept {}
  };
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  Task(Task&& other) noexcept : h_(std::exchange(other.h_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (h_) h_.destroy();
      h_ = std::exchange(other.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (h_) h_.destroy();
  }

  bool valid() const { return static_cast<bool>(h_); }
  bool done() const { return h_ && h_.done(); }

  auto operator co_await() noexcept {
    SHOAL_ASSERT(h_ && !h_.done(), "%s", "co_await on an empty or finished Task");
    struct Awaiter : detail::TaskAwaiter<promise_type> {
      void await_resume() noexcept {}
    };
    return Awaiter{{h_}};
  }

  // As Task<T>'s: runs the body now until its first suspension or its end (true: ended).
  bool start_inline() {
    h_.resume();
    return h_.done();
  }
  // As Task<T>'s: awaits a task start_inline() left suspended. REQUIRES: started; joined once.
  auto join() noexcept {
    struct Joiner {
      Handle child;
      bool await_ready() noexcept { return child.done(); }
      void await_suspend(std::coroutine_handle<> awaiter) noexcept {
        child.promise().continuation = awaiter;
      }
      void await_resume() noexcept {}
    };
    SHOAL_ASSERT(h_, "%s", "join() on an empty Task");
    return Joiner{h_};
  }

 private:
  explicit Task(Handle h) : h_(h) {}
  Handle h_;
};

}  // namespace shoal::rt

// EventLoop: one per worker thread (core). Runs coroutine tasks, timers and transport pollers.
//
// One iteration (run_once) does, in this order: drain cross-thread posts, fire due timers,
// resume up to ready_batch ready tasks, call every poller once; if the pollers made tasks
// ready (a response's caller, a request's handler), resume those and call the pollers once
// more (which flushes what they sent). run() repeats it, reading the clock only every 16th
// pass while idle (every pass when passes make system calls); when an iteration finds no work the
// loop spins for spin_ns and then blocks in ppoll on its eventfd plus the wake fds of its pollers
// (PollerWake: a transport's wait/liveness fds), timeout = next timer or poller deadline. Only
// while some poller has no PollerWake (it cannot wake us) is one sleep capped at max_block_ns.
// The spin is skipped after a sleep that ran to its deadline until input comes in (a post, a
// poller that did work): an idle process woken only by its timers (heartbeats, ticks) then
// pays one pass per tick instead of spin_ns of passes, while traffic keeps the spin.
// post() from any thread rings the eventfd only when the loop announced it is asleep (one atomic
// load on the fast path).
//
// Time comes from the Env given at construction: RealEnv on real threads, SimEnv under the
// simulator, where the simulator calls run_once() itself and never run() (virtual time does
// not pass while a loop spins).
//
// Threads: every method except post() and stop() must be called on the owning thread (the one
// that calls run()/run_once(); checked in debug builds). Invariants: a task is in the ready
// queue at most once; the ready queue holds at most max_tasks + kReadySlack handles, and
// spawn() refuses beyond max_tasks live tasks, so schedule() never overflows; timers fire in
// (deadline, insertion order).
// Allocation: none per iteration; spawn() allocates the coroutine frames (the task's and a
// 64-byte root frame) from the per-thread frame pool (task.h), the heap only when it is empty.
// Timer heap, ready ring, poller table and post ring are sized up front.
#pragma once

#include <poll.h>

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "shoal/status.h"
#include "src/base/env.h"
#include "src/runtime/task.h"

namespace shoal::rt {

class EventLoop;

struct LoopOptions {
  uint32_t max_tasks = 4096;          // live spawned (root) tasks; spawn() refuses beyond
  uint32_t max_timers = 65536;        // pending timers; add_timer() refuses beyond
  uint32_t max_pollers = 16;          // registered pollers
  uint32_t post_capacity = 4096;      // cross-thread posts waiting to run; post() refuses beyond
  uint32_t ready_batch = 256;         // tasks resumed per iteration before pollers run again
  uint64_t spin_ns = 50'000;          // idle spin before blocking (0: block at once)
  uint64_t max_block_ns = 1'000'000;  // one sleep's cap while a poller without PollerWake exists
};

// Counters, owned by the loop thread (read them there, or after the loop stopped).
struct LoopStats {
  uint64_t iterations = 0;
  uint64_t resumes = 0;
  uint64_t timers_fired = 0;
  uint64_t posts_run = 0;
  uint64_t blocks = 0;         // times the loop went to sleep on the eventfd
  uint64_t eventfd_wakes = 0;  // post() calls that had to write the eventfd
  uint64_t fd_wakes = 0;       // sleeps ended by a poller's wake fd
  uint64_t spins_skipped = 0;  // idle spins skipped: the last sleep ran out, no input since
};

using TimerFn = void (*)(void* ctx, uint64_t arg);
using PostFn = void (*)(void* ctx);
// Polls one source; returns true when it did work (so the loop keeps spinning).
using PollFn = bool (*)(void* ctx);
// The loop ran out of work (set_idle_hook); returns true when it did some (the loop goes on
// as after any work).
using IdleFn = bool (*)(void* ctx);
// Earliest virtual/real time at which a poller needs to run even without input
// (e.g. a WAN shaper releasing a held message); UINT64_MAX: none.
using DeadlineFn = uint64_t (*)(void* ctx);

// How a poller lets its source wake a sleeping loop (a transport that can signal an fd).
// Before sleeping, the loop calls prepare(ctx, fds) with fds[] preset to -1:
//   - false: input is already pending; the loop does not sleep (and does not call end);
//   - true: the loop may sleep until any fd the poller wrote into fds[] is readable or hung
//     up (it may write none: "nothing can arrive that needs me"). After the sleep the loop
//     calls end(ctx) (may be null), before any poller runs again.
// A poller registered without one may have input the loop cannot see, so while any exists a
// sleep is capped at LoopOptions::max_block_ns.
inline constexpr size_t kMaxPollerFds = 2;
using PrepareWakeFn = bool (*)(void* ctx, int fds[kMaxPollerFds]);
using EndWakeFn = void (*)(void* ctx);
struct PollerWake {
  PrepareWakeFn prepare = nullptr;  // null: this poller cannot wake the loop
  EndWakeFn end = nullptr;
};

inline constexpr uint64_t kNever = UINT64_MAX;
inline constexpr uint32_t kReadySlack = 64;

namespace detail {
// The root coroutine of a spawned task: awaits the Task, is linked into its loop's list of live
// roots (so the loop can destroy unfinished ones), and frees itself when done.
struct Root {
  struct promise_type {
    static void* operator new(size_t bytes) { return allocate_frame(bytes); }
    static void operator delete(void* p, size_t bytes) { free_frame(p, bytes); }
    EventLoop* loop = nullptr;
    promise_type* prev = nullptr;
    promise_type* next = nullptr;
    Root get_return_object() noexcept {
      return Root{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { SHOAL_ASSERT(false, "%s", "exception in a root task"); }
    ~promise_type();  // unlinks from the loop
  };
  std::coroutine_handle<promise_type> handle;
};
}  // namespace detail

class EventLoop {
 public:
  explicit EventLoop(Env& env, LoopOptions options = {});
  // Destroys unfinished spawned tasks without resuming them. REQUIRES: owning thread; nothing
  // else (RPC endpoints, other loops) still holds handles of this loop's tasks.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  Env& env() { return env_; }
  uint64_t now_ns() { return env_.now_ns(); }
  // The clock as this iteration read it (run_once() always reads it first; run() does on every
  // iteration after work and every kIdleClockPasses empty ones), so stale by the time the
  // iteration has run so far. For hot loops that can live with that (a benchmark's run window)
  // where a clock read (~30 ns on a VM) would show; deadlines use now_ns(). Under the simulator
  // it equals now_ns() (time does not pass within an iteration).
  uint64_t iteration_now_ns() const { return now_cache_ns_; }
  const LoopStats& stats() const { return stats_; }
  uint32_t live_tasks() const { return live_tasks_; }

  // Starts `task` as a detached root on this loop (it first runs on the next iteration).
  // Unavailable when max_tasks tasks are live (backpressure; the task is destroyed unrun).
  [[nodiscard]] Status spawn(Task<void> task);
  // How many more tasks spawn() would accept now.
  uint32_t task_room() const {
    return live_tasks_ >= options_.max_tasks ? 0 : options_.max_tasks - live_tasks_;
  }
  // spawn() without the max_tasks check, for work admitted before it needed a task of its own:
  // RpcEndpoint runs a batch's handlers inline and adopts one only when it suspends, having
  // admitted the batch's requests only while task_room() covered all of them. Handlers may
  // spawn up to the limit in between, so live tasks may exceed max_tasks by at most one poll
  // batch (<= kReadySlack), which the ready ring's slack holds.
  void adopt(Task<void> task);
  // Makes a suspended task runnable. REQUIRES: owning thread; h belongs to a live task of this
  // loop and is not already queued.
  void schedule(std::coroutine_handle<> h);

  // One-shot timer: fn(ctx, arg) runs on this loop at or after deadline_ns. Returns an id for
  // cancel_timer(). Unavailable when max_timers are pending.
  [[nodiscard]] Result<uint64_t> add_timer(uint64_t deadline_ns, TimerFn fn, void* ctx,
                                           uint64_t arg = 0);
  // Cancels a pending timer (no-op if it already fired). O(pending timers): a cold path.
  void cancel_timer(uint64_t id);

  // Awaitables, for tasks running on this loop. They resume with the add_timer() Status.
  struct SleepAwaiter {
    EventLoop* loop;
    uint64_t deadline_ns;
    Status status;
    bool await_ready() { return loop->now_ns() >= deadline_ns; }
    bool await_suspend(std::coroutine_handle<> h) {
      auto id = loop->add_timer(
          deadline_ns,
          [](void* ctx, uint64_t arg) {
            static_cast<EventLoop*>(ctx)->schedule(
                std::coroutine_handle<>::from_address(reinterpret_cast<void*>(arg)));
          },
          loop, reinterpret_cast<uint64_t>(h.address()));
      if (id.ok()) return true;
      status = id.status();  // timer table full: resume at once with the error
      return false;
    }
    Status await_resume() { return std::move(status); }
  };
  struct YieldAwaiter {
    EventLoop* loop;
    bool await_ready() noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { loop->schedule(h); }
    void await_resume() noexcept {}
  };
  SleepAwaiter sleep_until(uint64_t deadline_ns) { return {this, deadline_ns, Status::Ok()}; }
  SleepAwaiter sleep_for(uint64_t duration_ns) { return sleep_until(now_ns() + duration_ns); }
  // Re-queues the current task behind every other ready task.
  YieldAwaiter yield() { return {this}; }

  // Registers a poller: fn runs every iteration; deadline (optional) says when it must run
  // even without input; wake (optional) lets the loop sleep until its source has input.
  // Unavailable when max_pollers are registered.
  [[nodiscard]] Status add_poller(PollFn fn, void* ctx, DeadlineFn deadline = nullptr,
                                  PollerWake wake = {});
  // Removes every poller registered with ctx.
  void remove_poller(void* ctx);
  // fn(ctx) runs in run() on the first pass without work after a pass with work or a sleep
  // (one hook; nullptr removes it). Not from run_once(): a caller driving iterations knows when it
  // is idle.
  void set_idle_hook(IdleFn fn, void* ctx) {
    idle_hook_ = fn;
    idle_ctx_ = ctx;
  }

  // Any thread: runs fn(ctx) on this loop soon; wakes the loop if it sleeps. Unavailable when
  // post_capacity posts are pending.
  [[nodiscard]] Status post(PostFn fn, void* ctx);
  // Any thread: resumes h on this loop (a continuation handed across cores).
  [[nodiscard]] Status post_resume(std::coroutine_handle<> h) {
    return post([](void* p) { std::coroutine_handle<>::from_address(p).resume(); }, h.address());
  }

  // Makes the calling thread the loop's owner: a loop built on one thread and run on another
  // calls it first on the thread that will run it, before registering timers or pollers
  // there (run() takes ownership too). REQUIRES: the previous owner no longer touches the loop.
  void take_ownership();

  // One non-blocking iteration. Returns true when it did any work.
  bool run_once();
  // Runs iterations with adaptive spin/block until stop(). REQUIRES: a real-time Env.
  void run();
  // Any thread: makes run() return after the current iteration.
  void stop();
  // Earliest timer or poller deadline (kNever if none). Owning thread.
  uint64_t next_deadline_ns();
  bool has_ready() const { return ready_head_ != ready_tail_; }

 private:
  friend struct detail::Root::promise_type;
  struct Timer {
    uint64_t deadline_ns;
    uint64_t id;  // insertion order; also the cancel handle
    TimerFn fn;
    void* ctx;
    uint64_t arg;
  };
  struct Poller {
    PollFn fn;
    void* ctx;
    DeadlineFn deadline;
    PollerWake wake;
    bool armed;  // prepare() returned true for the current sleep; end() is owed
  };
  struct Post {
    PostFn fn;
    void* ctx;
  };

  bool iterate(bool read_clock);
  static bool defer_transfer(void* loop, std::coroutine_handle<> h);
  bool run_posts();
  bool run_timers(uint64_t now_ns);
  bool run_ready();
  bool run_pollers();
  enum class SleepEnd { kNotSlept, kDeadline, kInput };
  SleepEnd block(uint64_t now_ns);
  uint64_t sleep_timeout_ns(uint64_t now_ns);
  bool arm_pollers(size_t* nfds);
  void disarm_pollers();
  SleepEnd sleep_on_fds(size_t nfds, uint64_t timeout_ns);
  void unlink_root(detail::Root::promise_type* p);
  void check_thread();

  // Empty passes of run()'s spin between two clock reads, while passes are cheap: at most
  // kCheapPassNs each on average (no system call among the pollers); one otherwise.
  static constexpr uint64_t kIdleClockPasses = 16;
  static constexpr uint64_t kCheapPassNs = 250;

  Env& env_;
  LoopOptions options_;
  LoopStats stats_;
  uint64_t now_cache_ns_ = 0;  // iteration_now_ns()
  // The last sleep ran to its deadline and no post or poller input has come in since: run()
  // then blocks without its idle spin. A timer's work alone (a tick, a heartbeat sent) seldom
  // brings an answer within spin_ns, and an idle process's timers would otherwise pay the whole
  // spin (at 500 Hz with a system call per pass, ~5% of a core per loop) for nothing.
  bool quiet_since_sleep_ = false;
  std::thread::id owner_;

  // Ready ring (power-of-two capacity).
  std::vector<std::coroutine_handle<>> ready_;
  uint64_t ready_head_ = 0;
  uint64_t ready_tail_ = 0;

  std::vector<Timer> timers_;  // min-heap on (deadline_ns, id)
  uint64_t next_timer_id_ = 1;

  std::vector<Poller> pollers_;
  uint32_t pollers_without_wake_ = 0;
  IdleFn idle_hook_ = nullptr;
  void* idle_ctx_ = nullptr;
  // ppoll set: [0] the eventfd, then the armed pollers' fds. Sized at construction.
  std::vector<pollfd> wait_fds_;

  detail::Root::promise_type* roots_ = nullptr;  // intrusive list of live roots
  uint32_t live_tasks_ = 0;

  // Cross-thread posts: a bounded ring under a mutex (posting is not on the per-message path).
  std::mutex post_mu_;
  std::vector<Post> posts_;
  uint64_t post_head_ = 0;
  uint64_t post_tail_ = 0;
  // The spinning loop loads posts_pending_ and stop_ on every pass (every ~40 ns). Each sits on
  // its own cache line, away from the mutex and ring indices that a poster updates, so the
  // spinning does not steal those lines from the poster in the middle of post().
  std::atomic<uint32_t> posts_pending_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};  // written only around a sleep: stays shared
  int event_fd_ = -1;
};

}  // namespace shoal::rt

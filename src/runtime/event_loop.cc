#include "src/runtime/event_loop.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <optional>

namespace shoal::rt {

namespace detail {
Root::promise_type::~promise_type() {
  if (loop != nullptr) loop->unlink_root(this);
}
}  // namespace detail

namespace {
// Min-heap order for std::push_heap (which builds a max-heap on `less`).
struct TimerLater {
  template <typename T>
  bool operator()(const T& a, const T& b) const {
    return a.deadline_ns != b.deadline_ns ? a.deadline_ns > b.deadline_ns : a.id > b.id;
  }
};

detail::Root run_root(Task<void> task) {
  co_await task;
}

void cpu_relax() {
  __builtin_ia32_pause();
}
}  // namespace

EventLoop::EventLoop(Env& env, LoopOptions options)
    : env_(env),
      options_(options),
      now_cache_ns_(env.now_ns()),
      owner_(std::this_thread::get_id()) {
  SHOAL_ASSERT(options_.max_tasks > 0 && options_.ready_batch > 0, "%s", "bad LoopOptions");
  ready_.resize(std::bit_ceil(uint64_t{options_.max_tasks} + kReadySlack));
  timers_.reserve(options_.max_timers);
  pollers_.reserve(options_.max_pollers);
  wait_fds_.resize(1 + size_t{options_.max_pollers} * kMaxPollerFds);
  posts_.resize(std::bit_ceil(uint64_t{std::max<uint32_t>(options_.post_capacity, 1)}));
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  SHOAL_ASSERT(event_fd_ >= 0, "%s", "eventfd failed");
  wait_fds_[0] = {event_fd_, POLLIN, 0};
}

EventLoop::~EventLoop() {
  // Destroying a root destroys the Task it awaits, hence the whole suspended chain.
  while (roots_ != nullptr) {
    auto h = std::coroutine_handle<detail::Root::promise_type>::from_promise(*roots_);
    h.destroy();  // the promise destructor unlinks it
  }
  close(event_fd_);
}

void EventLoop::take_ownership() {
  owner_ = std::this_thread::get_id();
}

void EventLoop::check_thread() {
  SHOAL_DCHECK(std::this_thread::get_id() == owner_);
}

Status EventLoop::spawn(Task<void> task) {
  if (task_room() == 0) return Status::Unavailable("event loop: max_tasks live tasks");
  adopt(std::move(task));
  return Status::Ok();
}

void EventLoop::adopt(Task<void> task) {
  check_thread();
  SHOAL_ASSERT(task.valid(), "%s", "spawn of an empty Task");
  SHOAL_ASSERT(live_tasks_ < options_.max_tasks + kReadySlack, "%s",
               "adopt() beyond max_tasks + kReadySlack: callers must check task_room() first");
  detail::Root root = run_root(std::move(task));
  auto& p = root.handle.promise();
  p.loop = this;
  p.next = roots_;
  if (roots_ != nullptr) roots_->prev = &p;
  roots_ = &p;
  ++live_tasks_;
  schedule(root.handle);
}

void EventLoop::unlink_root(detail::Root::promise_type* p) {
  if (p->prev != nullptr) p->prev->next = p->next;
  if (p->next != nullptr) p->next->prev = p->prev;
  if (roots_ == p) roots_ = p->next;
  --live_tasks_;
}

void EventLoop::schedule(std::coroutine_handle<> h) {
  check_thread();
  SHOAL_ASSERT(ready_tail_ - ready_head_ < ready_.size(), "%s",
               "ready queue overflow: a task was scheduled twice or does not belong here");
  ready_[ready_tail_++ & (ready_.size() - 1)] = h;
}

Result<uint64_t> EventLoop::add_timer(uint64_t deadline_ns, TimerFn fn, void* ctx, uint64_t arg) {
  check_thread();
  if (timers_.size() >= options_.max_timers) {
    return Status::Unavailable("event loop: max_timers pending");
  }
  const uint64_t id = next_timer_id_++;
  timers_.push_back({deadline_ns, id, fn, ctx, arg});
  std::push_heap(timers_.begin(), timers_.end(), TimerLater{});
  return id;
}

void EventLoop::cancel_timer(uint64_t id) {
  check_thread();
  for (size_t i = 0; i < timers_.size(); ++i) {
    if (timers_[i].id != id) continue;
    timers_[i] = timers_.back();
    timers_.pop_back();
    std::make_heap(timers_.begin(), timers_.end(), TimerLater{});
    return;
  }
}

Status EventLoop::add_poller(PollFn fn, void* ctx, DeadlineFn deadline, PollerWake wake) {
  check_thread();
  if (pollers_.size() >= options_.max_pollers) {
    return Status::Unavailable("event loop: max_pollers registered");
  }
  pollers_.push_back({fn, ctx, deadline, wake, false});
  if (wake.prepare == nullptr) ++pollers_without_wake_;
  return Status::Ok();
}

void EventLoop::remove_poller(void* ctx) {
  check_thread();
  std::erase_if(pollers_, [this, ctx](const Poller& p) {
    if (p.ctx != ctx) return false;
    if (p.wake.prepare == nullptr) --pollers_without_wake_;
    return true;
  });
}

Status EventLoop::post(PostFn fn, void* ctx) {
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    if (post_tail_ - post_head_ >= options_.post_capacity) {
      return Status::Unavailable("event loop: post queue full");
    }
    posts_[post_tail_++ & (posts_.size() - 1)] = {fn, ctx};
  }
  // Announced after the unlock: a spinning loop that sees the count at once then finds the
  // mutex free instead of contending for it (a futex sleep and wake, ~1 us, in 1% of posts when
  // it was announced inside). The loop may meanwhile have taken this entry with an earlier
  // post's and subtracted it already; the count then wraps below zero until this add, which
  // only makes the loop look for posts once more.
  posts_pending_.fetch_add(1, std::memory_order_seq_cst);
  // Dekker pairing with block(): we published the post (seq_cst) before reading sleeping_;
  // the loop publishes sleeping_ before re-reading posts_pending_. One of us sees the other.
  if (sleeping_.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
  }
  return Status::Ok();
}

void EventLoop::stop() {
  stop_.store(true, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
  }
}

bool EventLoop::run_posts() {
  if (posts_pending_.load(std::memory_order_acquire) == 0) return false;
  // Take a bounded batch under the lock, run it outside (a post may post again).
  Post batch[64];
  size_t n = 0;
  {
    // Never sleep on the mutex on the loop thread: a poster holds it for a few stores, so if it
    // is busy, look again on the next pass.
    std::unique_lock<std::mutex> lock(post_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    while (n < 64 && post_head_ != post_tail_)
      batch[n++] = posts_[post_head_++ & (posts_.size() - 1)];
    posts_pending_.fetch_sub(static_cast<uint32_t>(n), std::memory_order_relaxed);
  }
  for (size_t i = 0; i < n; ++i) batch[i].fn(batch[i].ctx);
  stats_.posts_run += n;
  return n != 0;
}

bool EventLoop::run_timers(uint64_t now_ns) {
  // Only timers due at entry: a timer that adds a due timer runs it next iteration (bounded).
  size_t budget = timers_.size();
  bool did = false;
  while (budget-- > 0 && !timers_.empty() && timers_.front().deadline_ns <= now_ns) {
    std::pop_heap(timers_.begin(), timers_.end(), TimerLater{});
    const Timer t = timers_.back();
    timers_.pop_back();
    t.fn(t.ctx, t.arg);
    ++stats_.timers_fired;
    did = true;
  }
  return did;
}

bool EventLoop::run_ready() {
  uint32_t n = 0;
  while (n < options_.ready_batch && ready_head_ != ready_tail_) {
    std::coroutine_handle<> h = ready_[ready_head_++ & (ready_.size() - 1)];
    h.resume();
    ++n;
  }
  stats_.resumes += n;
  return n != 0;
}

bool EventLoop::run_pollers() {
  bool did = false;
  for (size_t i = 0; i < pollers_.size(); ++i) did |= pollers_[i].fn(pollers_[i].ctx);
  return did;
}

bool EventLoop::run_once() {
  check_thread();
  return iterate(/*read_clock=*/true);
}

// The trampoline's hand-off (task.h): queues a transfer that nested too deep.
bool EventLoop::defer_transfer(void* loop, std::coroutine_handle<> h) {
  EventLoop* self = static_cast<EventLoop*>(loop);
  if (self->ready_tail_ - self->ready_head_ >= self->ready_.size()) return false;
  self->ready_[self->ready_tail_++ & (self->ready_.size() - 1)] = h;
  return true;
}

bool EventLoop::iterate(bool read_clock) {
  ++stats_.iterations;
  // For the length of the iteration, transfers that nest too deep come back to this loop
  // (only in builds without tail calls; the previous owner is restored for a nested loop).
  struct TrampolineScope {
    detail::Trampoline saved;
    explicit TrampolineScope(EventLoop* loop) : saved(detail::t_trampoline) {
      detail::Trampoline& t = detail::t_trampoline;
      t.stack_base = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
      t.loop = loop;
      t.defer = &EventLoop::defer_transfer;
    }
    ~TrampolineScope() {
      const uint64_t deferred = detail::t_trampoline.deferred;
      detail::t_trampoline = saved;
      detail::t_trampoline.deferred = deferred;
    }
  };
  [[maybe_unused]] std::optional<TrampolineScope> trampoline;
  if constexpr (detail::kTaskTrampoline) trampoline.emplace(this);
  bool did = run_posts();
  if (did) quiet_since_sleep_ = false;
  if (read_clock) {
    now_cache_ns_ = env_.now_ns();
    if (!timers_.empty()) did |= run_timers(now_cache_ns_);
  }
  did |= run_ready();
  if (!run_pollers()) return did;
  quiet_since_sleep_ = false;
  // What the pollers just made runnable (a caller whose response arrived, the handler of a new
  // request) runs now instead of one iteration later, after every transport batch has been
  // released; then the pollers run once more, which flushes what those tasks sent. Once per
  // iteration, so an iteration stays bounded.
  if (has_ready()) {
    run_ready();
    run_pollers();
  }
  return true;
}

uint64_t EventLoop::next_deadline_ns() {
  uint64_t d = timers_.empty() ? kNever : timers_.front().deadline_ns;
  for (const Poller& p : pollers_) {
    if (p.deadline != nullptr) d = std::min(d, p.deadline(p.ctx));
  }
  return d;
}

uint64_t EventLoop::sleep_timeout_ns(uint64_t now_ns) {
  const uint64_t deadline = next_deadline_ns();
  uint64_t timeout_ns = deadline > now_ns ? deadline - now_ns : 0;
  // A poller that cannot wake us may have input we would not see: sleep in slices then.
  if (pollers_without_wake_ > 0) timeout_ns = std::min(timeout_ns, options_.max_block_ns);
  return std::min<uint64_t>(timeout_ns, 1'000'000'000);  // stop() check at least 1/s
}

// Asks every poller whether the loop may sleep, collecting their fds behind the eventfd.
// False (and nothing left armed) when one of them has input pending.
bool EventLoop::arm_pollers(size_t* nfds) {
  size_t n = 1;
  for (Poller& p : pollers_) {
    if (p.wake.prepare == nullptr) continue;
    int fds[kMaxPollerFds] = {-1, -1};
    if (!p.wake.prepare(p.ctx, fds)) {
      disarm_pollers();
      return false;
    }
    p.armed = true;
    for (int fd : fds) {
      if (fd >= 0) wait_fds_[n++] = {fd, POLLIN | POLLRDHUP, 0};
    }
  }
  *nfds = n;
  return true;
}

void EventLoop::disarm_pollers() {
  for (Poller& p : pollers_) {
    if (!p.armed) continue;
    p.armed = false;
    if (p.wake.end != nullptr) p.wake.end(p.ctx);
  }
}

EventLoop::SleepEnd EventLoop::sleep_on_fds(size_t nfds, uint64_t timeout_ns) {
  ++stats_.blocks;
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
              static_cast<long>(timeout_ns % 1'000'000'000)};
  const int ready = ppoll(wait_fds_.data(), nfds, &ts, nullptr);
  if (ready == 0) return SleepEnd::kDeadline;
  if (ready < 0) return SleepEnd::kInput;  // EINTR: maybe input; spin as after any
  if (wait_fds_[0].revents != 0) {
    uint64_t v;
    if (read(event_fd_, &v, sizeof(v)) > 0) ++stats_.eventfd_wakes;
  }
  for (size_t i = 1; i < nfds; ++i) {
    if (wait_fds_[i].revents != 0) {
      ++stats_.fd_wakes;
      break;
    }
  }
  return SleepEnd::kInput;
}

EventLoop::SleepEnd EventLoop::block(uint64_t now_ns) {
  const uint64_t timeout_ns = sleep_timeout_ns(now_ns);
  if (timeout_ns == 0 || has_ready()) return SleepEnd::kNotSlept;
  sleeping_.store(true, std::memory_order_seq_cst);
  // Dekker pairing with post(): sleeping_ is published before posts_pending_ is re-read.
  size_t nfds = 0;
  SleepEnd end = SleepEnd::kNotSlept;
  if (posts_pending_.load(std::memory_order_seq_cst) == 0 && !stop_.load() && arm_pollers(&nfds)) {
    end = sleep_on_fds(nfds, timeout_ns);
    disarm_pollers();
  }
  sleeping_.store(false, std::memory_order_relaxed);
  return end;
}

void EventLoop::run() {
  take_ownership();  // the loop may be built on one thread, run on another
  uint64_t idle_since_ns = 0;
  uint64_t idle_passes = 0;  // empty iterations since the last one that did work
  uint64_t clock_stride = kIdleClockPasses;
  uint64_t last_clock_ns = 0;  // the idle spin's previous clock read
  while (!stop_.load(std::memory_order_relaxed)) {
    // A clock read costs about as much as a whole empty pass over shm rings (~30 ns on a VM),
    // so an idle spin reads it (timers, spin budget) only every kIdleClockPasses passes; an
    // iteration after work always does. Timers therefore fire at most that many empty passes
    // (~1 us) late. A pass whose pollers make system calls (a TCP socket's recv, 1-3 us)
    // costs far more than the read: then every pass reads it, or the spin would last
    // kIdleClockPasses such passes (50-100 us) instead of spin_ns on every wake-up.
    const bool read_clock = idle_passes % clock_stride == 0;
    if (iterate(read_clock)) {
      idle_passes = 0;
      continue;
    }
    // The first empty pass after work (read_clock is true on it): about to go idle.
    if (idle_passes == 0 && idle_hook_ != nullptr && idle_hook_(idle_ctx_)) continue;
    if (!read_clock) {
      ++idle_passes;
      cpu_relax();
      continue;
    }
    const uint64_t now = now_cache_ns_;
    if (idle_passes > 0) {
      clock_stride = now - last_clock_ns > clock_stride * kCheapPassNs ? 1 : kIdleClockPasses;
    }
    last_clock_ns = now;
    if (idle_passes++ == 0) {
      idle_since_ns = now;
      if (quiet_since_sleep_) ++stats_.spins_skipped;
    }
    if (!quiet_since_sleep_ && now - idle_since_ns < options_.spin_ns) {
      cpu_relax();
      continue;
    }
    // Not slept (a timer fell due, input pending): whatever held before still holds.
    const SleepEnd end = block(now);
    if (end != SleepEnd::kNotSlept) quiet_since_sleep_ = end == SleepEnd::kDeadline;
    idle_passes = 0;  // after a wake-up, spin again before the next sleep (unless quiet)
  }
  stop_.store(false);  // a stop() before run() is not lost; the next run() starts afresh
}

}  // namespace shoal::rt

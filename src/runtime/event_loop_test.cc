// Task and EventLoop: results through await chains, deep recursion without stack growth,
// timers in deadline order (real and manual time), spawn backpressure, teardown of unfinished
// tasks, cross-thread post waking a blocked loop; a loop asleep on a transport's wait fds
// waking when the peer sends, and an idle loop with a transport that does not spin.
#include "src/runtime/event_loop.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"
#include "src/runtime/endpoint_wake.h"

namespace shoal::rt {
namespace {

// An Env whose clock the test moves by hand.
class ManualEnv final : public Env {
 public:
  uint64_t now_ns() override { return now; }
  uint64_t wall_us() override { return now / 1000; }
  void sleep_ns(uint64_t ns) override { now += ns; }
  uint64_t seed() override { return 42; }
  uint64_t now = 1000;
};

Task<int> leaf(int x) {
  co_return x * 2;
}
Task<int> middle(int x) {
  const int a = co_await leaf(x);
  const int b = co_await leaf(a);
  co_return a + b;
}
Task<int> deep(int depth) {
  if (depth == 0) co_return 0;
  co_return 1 + co_await deep(depth - 1);
}
Task<Result<int>> may_fail(bool fail) {
  if (fail) co_return Status::NotFound("nope");
  co_return 7;
}

TEST(Task, ValuesFlowThroughAwaitChains) {
  ManualEnv env;
  EventLoop loop(env);
  int out = 0;
  Result<int> err = Status::Aborted("unset");
  ASSERT_TRUE(loop.spawn([](int* o, Result<int>* e) -> Task<void> {
                    *o = co_await middle(5);
                    *e = co_await may_fail(true);
                  }(&out, &err))
                  .ok());
  while (loop.run_once()) {
  }
  EXPECT_EQ(out, 30);
  EXPECT_EQ(err.status().code(), Code::kNotFound);
  EXPECT_EQ(loop.live_tasks(), 0u);
}

// Symmetric transfer is a tail call only when the compiler optimizes (g++ -O0 keeps a frame per
// resume, and TSan's function entry/exit hooks and ASan's stack instrumentation forbid tail
// calls: 200 000 levels overflowed the stack under ASan before the trampoline). In those builds
// the trampoline (task.h) hands the transfer back to the loop once the stack is deep, so the
// same depth runs in every build.
constexpr int kDepth = 200'000;
TEST(Task, DeepRecursionUsesSymmetricTransfer) {
  ManualEnv env;
  EventLoop loop(env);
  int out = 0;
  const uint64_t deferred_before = detail::t_trampoline.deferred;
  ASSERT_TRUE(loop.spawn([](int* o) -> Task<void> { *o = co_await deep(kDepth); }(&out)).ok());
  while (loop.run_once()) {
  }
  EXPECT_EQ(out, kDepth);
  EXPECT_EQ(detail::t_trampoline.deferred > deferred_before, detail::kTaskTrampoline);
}

// A loop of co_awaits that each complete at once (as a call over a local link answers): without
// tail calls every iteration nested two resumes deeper, and an ASan or debug shard server died
// of it under load. Ten million iterations would need gigabytes of stack that way.
Task<int> count_synchronously(int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += co_await leaf(1);
  co_return sum;
}
TEST(Task, LongLoopOfSynchronousAwaitsRunsInBoundedStack) {
  ManualEnv env;
  EventLoop loop(env);
  int out = 0;
  constexpr int kIterations = 2'000'000;
  ASSERT_TRUE(
      loop.spawn([](int* o) -> Task<void> { *o = co_await count_synchronously(kIterations); }(&out))
          .ok());
  while (loop.run_once()) {
  }
  EXPECT_EQ(out, 2 * kIterations);
  EXPECT_EQ(loop.live_tasks(), 0u);
}

// Outside a loop's iteration nothing can take a deferred transfer: it nests (bounded only by
// the stack, as before), and the task still finishes on the caller's stack.
TEST(Task, TransferOutsideALoopNests) {
  Task<int> t = middle(3);
  ASSERT_TRUE(t.start_inline());
  EXPECT_EQ(t.take(), 18);
}

// A function that answers at once for even x (a ready task, no frame) and through a coroutine
// otherwise, as a backend's local and remote paths do.
Task<int> halve_or_wait(int x, EventLoop* loop) {
  if (x % 2 == 0) return Task<int>::ready(x / 2);
  return [](int y, EventLoop* l) -> Task<int> {
    co_await l->yield();
    co_return y;
  }(x, loop);
}

Task<int> sum_halves(EventLoop* loop, int* suspended_calls) {
  int sum = 0;
  for (int x : {2, 3, 8, 5}) {
    Task<int> t = halve_or_wait(x, loop);
    if (!t.is_ready()) ++*suspended_calls;
    sum += co_await t;
  }
  co_return sum;
}

TEST(Task, ReadyTasksHoldTheirValueWithoutABody) {
  Task<int> ready = Task<int>::ready(7);
  EXPECT_TRUE(ready.valid());
  EXPECT_TRUE(ready.is_ready());
  EXPECT_TRUE(ready.done());
  Task<int> moved = std::move(ready);
  EXPECT_FALSE(ready.valid());  // NOLINT: moved-from state is part of the contract
  ASSERT_TRUE(moved.start_inline());
  EXPECT_EQ(moved.take(), 7);

  EventLoop loop(RealEnv::instance());
  int suspended = 0;
  int result = 0;
  ASSERT_TRUE(loop.spawn([](EventLoop* l, int* s, int* out) -> Task<void> {
                    *out = co_await sum_halves(l, s);
                  }(&loop, &suspended, &result))
                  .ok());
  for (int i = 0; i < 100 && loop.live_tasks() > 0; ++i) loop.run_once();
  EXPECT_EQ(result, 1 + 3 + 4 + 5);
  EXPECT_EQ(suspended, 2);  // only the odd ones made a coroutine
}

TEST(Task, JoinOnAReadyTaskDoesNotWait) {
  Task<std::string> t = Task<std::string>::ready("at hand");
  ASSERT_TRUE(t.start_inline());
  std::string got;
  Task<void> joiner = [](Task<std::string>* task, std::string* out) -> Task<void> {
    *out = co_await task->join();
  }(&t, &got);
  ASSERT_TRUE(joiner.start_inline());
  EXPECT_EQ(got, "at hand");
}

TEST(EventLoop, TimersFireInDeadlineOrderOnManualTime) {
  ManualEnv env;
  EventLoop loop(env);
  std::vector<int> order;
  auto sleeper = [](EventLoop* l, std::vector<int>* o, int id, uint64_t ns) -> Task<void> {
    Status s = co_await l->sleep_for(ns);
    EXPECT_TRUE(s.ok());
    o->push_back(id);
  };
  ASSERT_TRUE(loop.spawn(sleeper(&loop, &order, 3, 300)).ok());
  ASSERT_TRUE(loop.spawn(sleeper(&loop, &order, 1, 100)).ok());
  ASSERT_TRUE(loop.spawn(sleeper(&loop, &order, 2, 200)).ok());
  ASSERT_TRUE(loop.spawn(sleeper(&loop, &order, 4, 200)).ok());  // same deadline: FIFO
  while (loop.run_once()) {
  }
  EXPECT_TRUE(order.empty());
  EXPECT_EQ(loop.next_deadline_ns(), 1100u);
  for (int step = 0; step < 4; ++step) {
    env.now = loop.next_deadline_ns();
    while (loop.run_once()) {
    }
  }
  EXPECT_EQ(order, (std::vector<int>{1, 2, 4, 3}));
  EXPECT_EQ(loop.next_deadline_ns(), kNever);
}

TEST(EventLoop, CancelledTimerDoesNotFire) {
  ManualEnv env;
  EventLoop loop(env);
  int fired = 0;
  auto bump = [](void* c, uint64_t) { ++*static_cast<int*>(c); };
  auto a = loop.add_timer(2000, bump, &fired);
  auto b = loop.add_timer(3000, bump, &fired);
  ASSERT_TRUE(a.ok() && b.ok());
  loop.cancel_timer(*a);
  env.now = 5000;
  loop.run_once();
  EXPECT_EQ(fired, 1);
}

TEST(EventLoop, SpawnRefusesBeyondMaxTasks) {
  ManualEnv env;
  LoopOptions o;
  o.max_tasks = 2;
  EventLoop loop(env, o);
  auto forever = [](EventLoop* l) -> Task<void> { (void)co_await l->sleep_for(1'000'000); };
  EXPECT_TRUE(loop.spawn(forever(&loop)).ok());
  EXPECT_TRUE(loop.spawn(forever(&loop)).ok());
  EXPECT_EQ(loop.spawn(forever(&loop)).code(), Code::kUnavailable);
}

struct Counted {
  explicit Counted(int* n) : n(n) { ++*n; }
  ~Counted() { --*n; }
  int* n;
};

TEST(EventLoop, DestroysUnfinishedTasks) {
  ManualEnv env;
  int alive = 0;
  {
    EventLoop loop(env);
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(loop.spawn([](EventLoop* l, int* n) -> Task<void> {
                        Counted c(n);
                        (void)co_await l->sleep_for(1'000'000);
                      }(&loop, &alive))
                      .ok());
    }
    while (loop.run_once()) {
    }
    EXPECT_EQ(alive, 10);
  }
  EXPECT_EQ(alive, 0);
}

TEST(EventLoop, RealTimeSleep) {
  RealEnv env;
  EventLoop loop(env);
  const uint64_t t0 = env.now_ns();
  uint64_t woke = 0;
  ASSERT_TRUE(loop.spawn([](EventLoop* l, uint64_t* w) -> Task<void> {
                    (void)co_await l->sleep_for(2'000'000);
                    *w = l->now_ns();
                    l->stop();
                  }(&loop, &woke))
                  .ok());
  loop.run();
  EXPECT_GE(woke - t0, 2'000'000u);
  EXPECT_LT(woke - t0, 200'000'000u);
}

// The idle hook (set_idle_hook) runs on the first pass without work after the work: every
// post of the burst ran before it; a hook that reports work gets the next empty pass too.
TEST(EventLoop, TheIdleHookRunsOnceTheBurstOfWorkIsDone) {
  RealEnv env;
  EventLoop loop(env);
  struct State {
    EventLoop* loop;
    int posts_run = 0;
    int idle_calls = 0;
    int posts_seen_by_first_call = -1;
  } st{&loop};
  loop.set_idle_hook(
      [](void* p) {
        auto* s = static_cast<State*>(p);
        if (++s->idle_calls == 1) {
          s->posts_seen_by_first_call = s->posts_run;
          return true;  // "did work" (a seal): the loop goes on as after any work
        }
        s->loop->stop();
        return false;
      },
      &st);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(loop.post([](void* p) { ++static_cast<State*>(p)->posts_run; }, &st).ok());
  }
  loop.run();
  EXPECT_EQ(st.posts_seen_by_first_call, 3);
  EXPECT_EQ(st.idle_calls, 2);
}

// A blocked loop (spin 0) is woken by post() from another thread well before its 1 s timer.
TEST(EventLoop, CrossThreadPostWakesBlockedLoop) {
  RealEnv env;
  LoopOptions o;
  o.spin_ns = 0;
  EventLoop loop(env, o);
  auto never = loop.add_timer(
      env.now_ns() + 10'000'000'000ULL, [](void*, uint64_t) {}, nullptr);
  ASSERT_TRUE(never.ok());
  std::atomic<int> got{0};
  std::thread t([&] { loop.run(); });
  for (int i = 0; i < 100; ++i) {
    const int before = got.load();
    ASSERT_TRUE(
        loop.post([](void* c) { static_cast<std::atomic<int>*>(c)->fetch_add(1); }, &got).ok());
    const uint64_t deadline = env.now_ns() + 2'000'000'000ULL;
    while (got.load() == before) ASSERT_LT(env.now_ns(), deadline) << "post did not wake loop";
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // let it fall asleep again
  }
  loop.stop();
  t.join();
  EXPECT_EQ(got.load(), 100);
  EXPECT_GT(loop.stats().blocks, 50u);
  EXPECT_GT(loop.stats().eventfd_wakes, 50u);
}

// post_resume hands a continuation to another loop: the task hops threads and back.
TEST(EventLoop, PostResumeMovesTaskAcrossLoops) {
  RealEnv env;
  EventLoop a(env), b(env);
  std::thread tb([&] { b.run(); });
  std::thread::id ran_on_b;
  struct Hop {
    EventLoop* to;
    bool await_ready() { return false; }
    void await_suspend(std::coroutine_handle<> h) { SHOAL_CHECK(to->post_resume(h).ok()); }
    void await_resume() {}
  };
  ASSERT_TRUE(a.spawn([](EventLoop* a, EventLoop* b, std::thread::id* on_b) -> Task<void> {
                 co_await Hop{b};
                 *on_b = std::this_thread::get_id();
                 co_await Hop{a};
                 a->stop();
               }(&a, &b, &ran_on_b))
                  .ok());
  const std::thread::id b_id = tb.get_id();
  a.run();
  b.stop();
  tb.join();
  EXPECT_EQ(ran_on_b, b_id);
}

// A poller that counts what it receives on one endpoint; with_wake registers the endpoint's
// wait fds with the loop (otherwise the loop can only sleep in max_block_ns slices).
template <typename E>
struct CountingPoller {
  E* ep;
  std::atomic<int> received{0};
  std::atomic<bool> failed{false};
  static bool poll(void* self) {
    auto* p = static_cast<CountingPoller*>(self);
    if (p->failed.load()) return false;
    net::Completion c[8];
    auto n = p->ep->poll(c, 8);
    if (!n.ok()) {
      p->failed.store(true);
      return true;
    }
    if (*n == 0) return false;
    p->ep->release();
    p->received.fetch_add(static_cast<int>(*n));
    return true;
  }
  static bool prepare(void* self, int fds[kMaxPollerFds]) {
    auto* p = static_cast<CountingPoller*>(self);
    return p->failed.load() || arm_endpoint(*p->ep, fds);  // failed: nothing to wait for
  }
  static void end(void* self) {
    auto* p = static_cast<CountingPoller*>(self);
    if (!p->failed.load()) disarm_endpoint(*p->ep);
  }
  Status register_on(EventLoop& loop, bool with_wake) {
    PollerWake wake;
    if (with_wake) wake = {&prepare, &end};
    return loop.add_poller(&poll, this, nullptr, wake);
  }
};

// Waits (bounded) until pred() holds; returns how long that took.
template <typename Pred>
uint64_t wait_until(Env& env, Pred pred, uint64_t limit_ns) {
  const uint64_t t0 = env.now_ns();
  while (!pred() && env.now_ns() - t0 < limit_ns) std::this_thread::yield();
  return env.now_ns() - t0;
}

// A sleeping loop wakes for the peer's message through the endpoint's wait fd, and for the
// peer's death through its liveness fd. max_block_ns is raised so that slices cannot be what
// wakes it: without the fds each wake-up would take up to the 1 s stop() check.
template <typename E>
void wakes_on_message_and_death() {
  auto link = E::pair();
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto& [a, b] = *link;
  RealEnv env;
  LoopOptions o;
  o.max_block_ns = 10'000'000'000;
  EventLoop loop(env, o);
  CountingPoller<E> p{&b};
  ASSERT_TRUE(p.register_on(loop, true).ok());
  std::thread t([&] { loop.run(); });
  for (int i = 1; i <= 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the loop falls asleep
    ASSERT_TRUE(a.send(1, {}).ok());
    ASSERT_TRUE(a.flush().ok());
    const uint64_t took = wait_until(
        env, [&] { return p.received.load() == i; }, 2'000'000'000);
    EXPECT_LT(took, 200'000'000u) << "message " << i << " did not wake the loop";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  a.close();
  const uint64_t took = wait_until(
      env, [&] { return p.failed.load(); }, 2'000'000'000);
  EXPECT_LT(took, 200'000'000u) << "the peer's death did not wake the loop";
  loop.stop();
  t.join();
  EXPECT_EQ(p.received.load(), 5);
  EXPECT_TRUE(p.failed.load());
  EXPECT_GE(loop.stats().fd_wakes, 5u);
}

TEST(EventLoop, SleepingLoopWakesWhenShmPeerSendsOrDies) {
  wakes_on_message_and_death<net::ShmEndpoint>();
}
TEST(EventLoop, SleepingLoopWakesWhenTcpPeerSendsOrDies) {
  wakes_on_message_and_death<net::TcpEndpoint>();
}

// A loop serving an idle endpoint sleeps until its 1 s stop() check: a handful of sleeps in
// 300 ms. Without the wait fds it sleeps in 1 ms slices (about 300 sleeps). The count of
// sleeps is what is checked (not the CPU the thread used, which a loaded machine skews).
TEST(EventLoop, IdleLoopWithTransportDoesNotSpin) {
  for (const bool with_wake : {true, false}) {
    auto link = net::ShmEndpoint::pair();
    ASSERT_TRUE(link.ok());
    RealEnv env;
    EventLoop loop(env);
    CountingPoller<net::ShmEndpoint> p{&link->second};
    ASSERT_TRUE(p.register_on(loop, with_wake).ok());
    std::thread t([&] { loop.run(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    loop.stop();
    t.join();
    if (with_wake) {
      EXPECT_LE(loop.stats().blocks, 3u);
    } else {
      EXPECT_GE(loop.stats().blocks, 50u);  // the slices this change removes where it can
    }
  }
}

// A poller that makes a system call (a TCP socket's recv: 1-3 us) makes every pass of the idle
// spin cost that much. The spin must still end after about spin_ns, not after the 16 passes it
// counts between clock reads while passes are cheap (16 x 2 us instead of 5 us, on every
// wake-up of a replication thread). Checked by the poller calls per sleep, which a loaded
// machine only lowers (a preempted pass is longer). The wake-ups are posts (input: the loop
// spins after them; after a sleep that only ran out it would not spin at all).
TEST(EventLoop, AnIdleSpinOverSlowPollersLastsAboutSpinNs) {
  RealEnv env;
  EventLoop loop(env, LoopOptions{.spin_ns = 5'000});
  struct SlowPoller {
    RealEnv* env;
    uint64_t calls = 0;
  } slow{&env};
  ASSERT_TRUE(loop.add_poller(
                      [](void* ctx) {
                        auto* p = static_cast<SlowPoller*>(ctx);
                        ++p->calls;
                        const uint64_t until = p->env->now_ns() + 2'000;
                        while (p->env->now_ns() < until) {
                        }
                        return false;
                      },
                      &slow)
                  .ok());
  constexpr int kWakeUps = 40;
  std::atomic<int> posts_run{0};
  std::thread t([&] { loop.run(); });
  for (int i = 0; i < kWakeUps; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    ASSERT_TRUE(
        loop.post([](void* c) { static_cast<std::atomic<int>*>(c)->fetch_add(1); }, &posts_run)
            .ok());
  }
  while (posts_run.load() < kWakeUps) std::this_thread::yield();
  loop.stop();
  t.join();
  ASSERT_GE(loop.stats().blocks, static_cast<uint64_t>(kWakeUps) / 2);
  // About 3 passes of spin and 2 of work per wake-up; 17 or more when the spin counted passes.
  EXPECT_LT(slow.calls, 10 * loop.stats().blocks)
      << slow.calls << " calls, " << loop.stats().blocks << " sleeps";
}

// An idle loop woken only by its timers (a replication tick, a watermark exchange every 2 ms)
// goes back to sleep after one empty pass instead of spinning spin_ns first: with a 1 ms spin
// and a 3 ms tick it would otherwise spin a third of the time (thousands of passes per tick).
// Counted in passes, not time, so a slow machine does not make it flaky.
TEST(EventLoop, AnIdleLoopWokenOnlyByTimersDoesNotSpin) {
  RealEnv env;
  EventLoop loop(env, LoopOptions{.spin_ns = 1'000'000});
  constexpr int kTicks = 30;
  // Counted from the first tick after a sleep that ran out: before it the loop spins after the
  // spawn (work), and a preempted spin may outlast a tick or two.
  uint64_t passes_at_mark = 0, skipped_at_mark = 0;
  ASSERT_TRUE(loop.spawn([](EventLoop* l, uint64_t* passes, uint64_t* skipped) -> Task<void> {
                    for (int i = 0; i < 100 && l->stats().spins_skipped == 0; ++i) {
                      (void)co_await l->sleep_for(3'000'000);
                    }
                    *passes = l->stats().iterations;
                    *skipped = l->stats().spins_skipped;
                    for (int i = 0; i < kTicks; ++i) (void)co_await l->sleep_for(3'000'000);
                    l->stop();
                  }(&loop, &passes_at_mark, &skipped_at_mark))
                  .ok());
  loop.run();
  const LoopStats& st = loop.stats();
  ASSERT_GT(skipped_at_mark, 0u) << "no sleep ran out in 100 ticks";
  EXPECT_GE(st.spins_skipped - skipped_at_mark, static_cast<uint64_t>(kTicks) - 1);
  // Per tick: the timer's pass, one empty pass, the sleep (a 1 ms spin is ~10^4 passes).
  EXPECT_LT(st.iterations - passes_at_mark, 10u * kTicks)
      << st.iterations - passes_at_mark << " passes over " << kTicks << " ticks";
}

// Input brings the spin back: a post wakes a loop that had only timers to do, and the loop then
// spins spin_ns before sleeping again (traffic must not pay a wake-up per message).
TEST(EventLoop, InputAfterQuietSleepsRestoresTheSpin) {
  RealEnv env;
  EventLoop loop(env, LoopOptions{.spin_ns = 2'000'000});
  std::atomic<uint64_t> passes_before_post{0};
  ASSERT_TRUE(loop.spawn([](EventLoop* l, std::atomic<uint64_t>* mark) -> Task<void> {
                    for (int i = 0; i < 5; ++i) (void)co_await l->sleep_for(5'000'000);
                    mark->store(l->stats().iterations);
                  }(&loop, &passes_before_post))
                  .ok());
  std::atomic<int> posts_run{0};
  std::thread t([&] { loop.run(); });
  while (passes_before_post.load() == 0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // asleep, quiet
  ASSERT_TRUE(
      loop.post([](void* c) { static_cast<std::atomic<int>*>(c)->fetch_add(1); }, &posts_run).ok());
  while (posts_run.load() < 1) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  loop.stop();
  t.join();
  const LoopStats& st = loop.stats();
  EXPECT_GE(st.spins_skipped, 4u);  // the timer wake-ups
  EXPECT_GE(st.eventfd_wakes, 1u);  // the post woke the sleeping loop (stop() may too)
  // After the post the loop spun 2 ms: far more passes than the few of a quiet wake-up.
  EXPECT_GT(st.iterations - passes_before_post.load(), 1'000u);
}

}  // namespace
}  // namespace shoal::rt

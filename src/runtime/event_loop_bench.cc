// EventLoop costs: the price of each adaptive-polling switch and of the per-task machinery.
//   - cross-thread ping-pong between two loops (post() there, post() back), both spinning vs
//     both blocking (spin_ns = 0: every hop is eventfd write + ppoll wake-up);
//   - one-way post -> callback latency into a spinning vs a sleeping loop;
//   - single-thread costs: an empty iteration, spawn+run+finish of a task, a timer add+fire,
//     a co_await of a ready child task.
//   - transport wake-up: a loop that serves one shm or tcp endpoint and is asleep between
//     messages; latency from the peer's send to the loop's poller seeing the message;
//   - idle: a loop serving one idle endpoint for N seconds (measure its CPU with time -v).
// Usage: runtime_bench [iterations]   (default 20000). Threads are pinned to CPUs 0 and 1.
//        runtime_bench wake shm|tcp [samples [fds|slices]]
//        runtime_bench idle shm|tcp [seconds [fds|slices]]
//        (fds: the poller registers the endpoint's wait fds, the default; slices: it does not)
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <cstring>
#include <string>

#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"
#include "src/runtime/endpoint_wake.h"
#include "src/runtime/event_loop.h"

namespace shoal::rt {
namespace {

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

void report(const char* what, std::vector<uint64_t>& ns) {
  std::sort(ns.begin(), ns.end());
  std::printf("%-58s p50 %8.2f us  p99 %8.2f us  (n=%zu)\n", what, ns[ns.size() / 2] / 1e3,
              ns[ns.size() * 99 / 100] / 1e3, ns.size());
}

// Both loops' threads do the work: A posts to B, B posts back to A, A records the round trip
// and starts the next one. The main thread only sleeps in join(), so two spinning loops own
// the two cores.
struct PingPong {
  RealEnv* env;
  EventLoop* a;
  EventLoop* b;
  int remaining;
  uint64_t t0 = 0;
  std::vector<uint64_t> rtt;
  static void at_b(void* self) {
    auto* p = static_cast<PingPong*>(self);
    SHOAL_CHECK(p->a->post(&PingPong::at_a, p).ok());
  }
  static void at_a(void* self) {
    auto* p = static_cast<PingPong*>(self);
    const uint64_t now = p->env->now_ns();
    if (p->t0 != 0) p->rtt.push_back(now - p->t0);
    if (--p->remaining < 0) {
      p->a->stop();
      return;
    }
    p->t0 = p->env->now_ns();
    SHOAL_CHECK(p->b->post(&PingPong::at_b, p).ok());
  }
};

void ping_pong(uint64_t spin_ns, int iterations, const char* label) {
  RealEnv env;
  LoopOptions o;
  o.spin_ns = spin_ns;
  EventLoop a(env, o), b(env, o);
  PingPong p{&env, &a, &b, iterations, 0, {}};
  p.rtt.reserve(iterations);
  std::thread tb([&] {
    pin_to(1);
    b.run();
  });
  std::thread ta([&] {
    pin_to(0);
    SHOAL_CHECK(a.post(&PingPong::at_a, &p).ok());
    a.run();
  });
  ta.join();
  b.stop();
  tb.join();
  report(label, p.rtt);
  std::printf("%-58s blocks a=%lu b=%lu eventfd wakes a=%lu b=%lu\n", "", a.stats().blocks,
              b.stats().blocks, a.stats().eventfd_wakes, b.stats().eventfd_wakes);
}

// One-way: the main thread (pinned to CPU 1) posts a timestamp; the loop (CPU 0) records
// arrival - post time. gap_us lets a blocking loop fall asleep between posts.
void one_way(uint64_t spin_ns, int iterations, int gap_us, const char* label) {
  RealEnv env;
  LoopOptions o;
  o.spin_ns = spin_ns;
  EventLoop loop(env, o);
  struct Ctx {
    RealEnv* env;
    std::atomic<uint64_t> sent_ns{0};
    std::atomic<uint64_t> lat_ns{0};
  } ctx{&env};
  std::thread t([&] {
    pin_to(0);
    loop.run();
  });
  pin_to(1);
  std::vector<uint64_t> lat;
  for (int i = 0; i < iterations; ++i) {
    ctx.lat_ns.store(0);
    ctx.sent_ns.store(env.now_ns());
    SHOAL_CHECK(loop.post(
                        [](void* c) {
                          auto* x = static_cast<Ctx*>(c);
                          x->lat_ns.store(x->env->now_ns() - x->sent_ns.load() + 1);
                        },
                        &ctx)
                    .ok());
    while (ctx.lat_ns.load() == 0) {
    }
    lat.push_back(ctx.lat_ns.load() - 1);
    const uint64_t until = env.now_ns() + gap_us * 1000ULL;
    while (env.now_ns() < until) {
    }
  }
  loop.stop();
  t.join();
  report(label, lat);
}

Task<int> child() {
  co_return 1;
}
Task<void> parent(int* sink) {
  *sink += co_await child();
}

void single_thread_costs(int iterations) {
  RealEnv env;
  LoopOptions o;
  o.max_tasks = 1 << 16;
  EventLoop loop(env, o);
  uint64_t t0 = env.now_ns();
  for (int i = 0; i < iterations * 10; ++i) loop.run_once();
  std::printf("%-58s %8.1f ns\n", "empty run_once() iteration",
              static_cast<double>(env.now_ns() - t0) / (iterations * 10));

  int sink = 0;
  t0 = env.now_ns();
  for (int i = 0; i < iterations; ++i) {
    SHOAL_CHECK(loop.spawn(parent(&sink)).ok());
    loop.run_once();
  }
  std::printf("%-58s %8.1f ns\n", "spawn + run + finish (root, task, awaited child: 3 frames)",
              static_cast<double>(env.now_ns() - t0) / iterations);

  int fired = 0;
  t0 = env.now_ns();
  for (int i = 0; i < iterations; ++i) {
    SHOAL_CHECK(loop.add_timer(
                        0, [](void* c, uint64_t) { ++*static_cast<int*>(c); }, &fired)
                    .ok());
    loop.run_once();
  }
  std::printf("%-58s %8.1f ns\n", "timer add + fire (incl. one iteration)",
              static_cast<double>(env.now_ns() - t0) / iterations);
}

// A poller that drains one endpoint; each message carries its send time (Env ns), and the
// poller records now - send time for the sender to collect.
template <typename E>
struct StampPoller {
  E* ep;
  Env* env;
  std::atomic<uint64_t> lat_ns{0};  // 0: nothing arrived yet; else latency + 1
  static bool poll(void* self) {
    auto* p = static_cast<StampPoller*>(self);
    net::Completion c[16];
    auto n = p->ep->poll(c, 16);
    SHOAL_CHECK(n.ok());
    if (*n == 0) return false;
    const uint64_t now = p->env->now_ns();
    for (size_t i = 0; i < *n; ++i) {
      uint64_t sent_ns = 0;
      std::memcpy(&sent_ns, c[i].bytes.data(), sizeof(sent_ns));
      p->lat_ns.store(now - sent_ns + 1);
    }
    p->ep->release();
    return true;
  }
};

// with_fds: register the endpoint's wait fds (the loop sleeps until input); without, the
// loop cannot see input while asleep and sleeps in max_block_ns slices (the old behaviour).
template <typename E>
Status register_stamp_poller(EventLoop& loop, StampPoller<E>& p, bool with_fds) {
  PollerWake wake;
  if (with_fds) {
    wake.prepare = [](void* self, int fds[kMaxPollerFds]) {
      return arm_endpoint(*static_cast<StampPoller<E>*>(self)->ep, fds);
    };
    wake.end = [](void* self) { disarm_endpoint(*static_cast<StampPoller<E>*>(self)->ep); };
  }
  return loop.add_poller(&StampPoller<E>::poll, &p, nullptr, wake);
}

// The loop (CPU 0) serves endpoint b; the main thread (CPU 1) sends a timestamp on a every
// 2 ms, long after the loop's 50 us spin has ended, so every sample is a wake-up from sleep.
template <typename E>
void transport_wake(int samples, bool with_fds, const char* label) {
  auto link = E::pair();
  SHOAL_CHECK(link.ok());
  auto& [a, b] = *link;
  RealEnv env;
  EventLoop loop(env);
  StampPoller<E> p{&b, &env};
  SHOAL_CHECK(register_stamp_poller(loop, p, with_fds).ok());
  std::thread t([&] {
    pin_to(0);
    loop.run();
  });
  pin_to(1);
  std::vector<uint64_t> lat;
  for (int i = 0; i < samples; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    p.lat_ns.store(0);
    const uint64_t sent_ns = env.now_ns();
    SHOAL_CHECK(a.send(1, {reinterpret_cast<const uint8_t*>(&sent_ns), sizeof(sent_ns)}).ok());
    SHOAL_CHECK(a.flush().ok());
    while (p.lat_ns.load() == 0) {
    }
    lat.push_back(p.lat_ns.load() - 1);
  }
  loop.stop();
  t.join();
  report(label, lat);
  std::printf("  loop blocks %lu, fd wakes %lu, iterations %lu\n", loop.stats().blocks,
              loop.stats().fd_wakes, loop.stats().iterations);
}

// A loop serving one endpoint that never receives anything, for `seconds`; prints its own CPU
// time (run under /usr/bin/time -v to see the process's too).
template <typename E>
void transport_idle(int seconds, bool with_fds) {
  auto link = E::pair();
  SHOAL_CHECK(link.ok());
  RealEnv env;
  EventLoop loop(env);
  StampPoller<E> p{&link->second, &env};
  SHOAL_CHECK(register_stamp_poller(loop, p, with_fds).ok());
  std::thread t([&] {
    loop.run();
    rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    std::printf(
        "idle loop thread: %d s wall, user %.3f s, sys %.3f s, blocks %lu, iterations %lu\n",
        seconds, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
        ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, loop.stats().blocks,
        loop.stats().iterations);
  });
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  loop.stop();
  t.join();
}

}  // namespace
}  // namespace shoal::rt

int main(int argc, char** argv) {
  using namespace shoal::rt;
  if (argc > 2 && (std::strcmp(argv[1], "wake") == 0 || std::strcmp(argv[1], "idle") == 0)) {
    using shoal::net::ShmEndpoint;
    using shoal::net::TcpEndpoint;
    const bool wake = std::strcmp(argv[1], "wake") == 0;
    const bool shm = std::strcmp(argv[2], "shm") == 0;
    const int arg = argc > 3 ? std::atoi(argv[3]) : (wake ? 1000 : 2);
    const bool fds = !(argc > 4 && std::strcmp(argv[4], "slices") == 0);
    const char* label = fds ? "message -> loop asleep on the endpoint's wait fds"
                            : "message -> loop asleep in 1 ms slices";
    if (wake && shm) transport_wake<ShmEndpoint>(arg, fds, label);
    if (wake && !shm) transport_wake<TcpEndpoint>(arg, fds, label);
    if (!wake && shm) transport_idle<ShmEndpoint>(arg, fds);
    if (!wake && !shm) transport_idle<TcpEndpoint>(arg, fds);
    return 0;
  }
  const int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  single_thread_costs(n);
  one_way(1'000'000'000, n, 0, "post -> run, target loop spinning");
  one_way(0, n / 10, 100, "post -> run, target loop asleep (eventfd wake)");
  ping_pong(1'000'000'000, n, "ping-pong between 2 loops, both spinning");
  ping_pong(0, n / 10, "ping-pong between 2 loops, both blocking (spin_ns=0)");
  ping_pong(50'000, n, "ping-pong between 2 loops, default spin 50us");
  return 0;
}

// SimEnv: the deterministic simulator's environment and scheduler.
//
// Virtual time (starts at 0 ns), a seeded Rng, and one global event queue run in
// (time, sequence) order by the single thread that calls run_*(). Attached EventLoops (one per
// simulated core / node) are driven by run_once(): at every instant the scheduler first runs
// all loops until none has work, then jumps time to the earliest of the next queued event and
// the loops' next timer/poller deadline. Loops run in attach order, events in insertion order
// within an instant, so a run is a pure function of the seed and the code.
//
// Trace: trace(tag, a, b) mixes (now, tag, a, b) into a 64-bit hash; the network traces every
// send, delivery and drop, and protocols may add their own events. Two runs with the same seed
// must end with the same trace_hash() (the determinism tests check this).
//
// Replay: a failing test prints its seed (replay_hint()); SHOAL_SIM_SEED=<seed> makes
// seed_from_env() return it, so the test reruns exactly that run.
//
// Threads: single-threaded by design; everything here is owned by the thread that runs it.
// Bounds: run_until() stops after max_steps events (livelock guard) and each instant after
// kMaxRoundsPerInstant loop rounds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/base/env.h"
#include "src/runtime/event_loop.h"

namespace shoal::sim {

using EventFn = void (*)(void* ctx, uint64_t arg);

class SimEnv final : public Env {
 public:
  static constexpr uint32_t kMaxRoundsPerInstant = 100'000;

  explicit SimEnv(uint64_t seed);

  // Env
  uint64_t now_ns() override { return now_ns_; }
  uint64_t wall_us() override { return kWallOriginUs + now_ns_ / 1000; }
  // Runs the simulation for ns of virtual time. REQUIRES: not called from inside a run.
  void sleep_ns(uint64_t ns) override;
  uint64_t seed() override { return rng_.next(); }

  uint64_t run_seed() const { return seed_; }
  Rng& rng() { return rng_; }
  // "seed=N (replay: SHOAL_SIM_SEED=N)" for failure messages.
  std::string replay_hint() const;
  // The seed named by $SHOAL_SIM_SEED, or `fallback`.
  static uint64_t seed_from_env(uint64_t fallback);

  // Queues fn(ctx, arg) at time_ns (clamped to now). Single-threaded: no allocation once the
  // queue's vector has grown to its high-water mark.
  void at(uint64_t time_ns, EventFn fn, void* ctx, uint64_t arg = 0);
  void after(uint64_t delay_ns, EventFn fn, void* ctx, uint64_t arg = 0) {
    at(now_ns_ + delay_ns, fn, ctx, arg);
  }

  // Loops are driven in attach order. REQUIRES: the loop uses this SimEnv as its Env.
  void attach(rt::EventLoop& loop);
  void detach(rt::EventLoop& loop);

  // Runs until virtual time would pass deadline_ns, nothing is left to do, or max_steps
  // events ran. Aborted when a loop keeps reporting work at one instant (livelock) or the
  // step bound is hit.
  [[nodiscard]] Status run_until(uint64_t deadline_ns, uint64_t max_steps = 100'000'000);
  [[nodiscard]] Status run_for(uint64_t duration_ns) { return run_until(now_ns_ + duration_ns); }
  // Runs until done() is true (checked after each instant) or deadline_ns. Timeout if the
  // deadline passes first.
  template <typename Pred>
  [[nodiscard]] Status run_until_true(Pred done, uint64_t deadline_ns);

  void trace(uint64_t tag, uint64_t a = 0, uint64_t b = 0);
  uint64_t trace_hash() const { return trace_hash_; }
  uint64_t trace_events() const { return trace_events_; }
  uint64_t events_run() const { return events_run_; }

 private:
  static constexpr uint64_t kWallOriginUs = 1'700'000'000'000'000;  // 2023-11-14
  struct Event {
    uint64_t time_ns;
    uint64_t seq;
    EventFn fn;
    void* ctx;
    uint64_t arg;
  };
  // Runs attached loops until quiescent at this instant. False on livelock.
  bool settle_loops();
  // Earliest pending event or loop deadline; rt::kNever when idle.
  uint64_t next_time_ns();
  // One instant: settle loops, then advance to and run the next instant's events. Returns
  // false when idle or past deadline_ns.
  [[nodiscard]] Result<bool> step(uint64_t deadline_ns);

  uint64_t seed_;
  Rng rng_;
  uint64_t now_ns_ = 0;
  uint64_t next_seq_ = 0;
  std::vector<Event> events_;  // min-heap on (time_ns, seq)
  std::vector<rt::EventLoop*> loops_;
  bool running_ = false;
  uint64_t trace_hash_ = 0x84222325cbf29ce4ULL;
  uint64_t trace_events_ = 0;
  uint64_t events_run_ = 0;
  uint64_t step_budget_ = 0;
};

template <typename Pred>
Status SimEnv::run_until_true(Pred done, uint64_t deadline_ns) {
  SHOAL_ASSERT(!running_, "%s", "SimEnv::run_until_true re-entered");
  running_ = true;
  step_budget_ = 100'000'000;
  Status out = Status::Ok();
  while (!done()) {
    auto more = step(deadline_ns);
    if (!more.ok()) {
      out = more.status();
      break;
    }
    if (!*more && !done()) {
      out = Status::Timeout("simulation reached its deadline or went idle before the condition");
      break;
    }
  }
  running_ = false;
  return out;
}

}  // namespace shoal::sim

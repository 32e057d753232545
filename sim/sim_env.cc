#include "sim/sim_env.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

namespace shoal::sim {

namespace {
struct EventLater {
  template <typename E>
  bool operator()(const E& a, const E& b) const {
    return a.time_ns != b.time_ns ? a.time_ns > b.time_ns : a.seq > b.seq;
  }
};

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

SimEnv::SimEnv(uint64_t seed) : seed_(seed), rng_(seed) {
  events_.reserve(1024);
}

std::string SimEnv::replay_hint() const {
  return fmt::format("seed={} (replay: SHOAL_SIM_SEED={})", seed_, seed_);
}

uint64_t SimEnv::seed_from_env(uint64_t fallback) {
  const char* s = std::getenv("SHOAL_SIM_SEED");
  if (s == nullptr || *s == '\0') return fallback;
  return std::strtoull(s, nullptr, 0);
}

void SimEnv::sleep_ns(uint64_t ns) {
  Status s = run_until(now_ns_ + ns);
  SHOAL_ASSERT(s.ok(), "SimEnv::sleep_ns: %s", s.to_string().c_str());
}

void SimEnv::at(uint64_t time_ns, EventFn fn, void* ctx, uint64_t arg) {
  events_.push_back({std::max(time_ns, now_ns_), next_seq_++, fn, ctx, arg});
  std::push_heap(events_.begin(), events_.end(), EventLater{});
}

void SimEnv::attach(rt::EventLoop& loop) {
  SHOAL_ASSERT(&loop.env() == this, "%s", "attached loop must run on this SimEnv");
  loops_.push_back(&loop);
}

void SimEnv::detach(rt::EventLoop& loop) {
  std::erase(loops_, &loop);
}

void SimEnv::trace(uint64_t tag, uint64_t a, uint64_t b) {
  uint64_t h = trace_hash_;
  h = mix64(h ^ now_ns_);
  h = mix64(h ^ tag);
  h = mix64(h ^ a);
  h = mix64(h ^ b);
  trace_hash_ = h;
  ++trace_events_;
}

bool SimEnv::settle_loops() {
  for (uint32_t round = 0; round < kMaxRoundsPerInstant; ++round) {
    bool any = false;
    // Index loop: a loop's work may attach or detach loops (node restart).
    for (size_t i = 0; i < loops_.size(); ++i) any |= loops_[i]->run_once();
    if (!any) return true;
  }
  return false;
}

uint64_t SimEnv::next_time_ns() {
  uint64_t t = events_.empty() ? rt::kNever : events_.front().time_ns;
  for (rt::EventLoop* loop : loops_) t = std::min(t, loop->next_deadline_ns());
  return t;
}

Result<bool> SimEnv::step(uint64_t deadline_ns) {
  if (!settle_loops()) {
    return Status::Aborted(
        fmt::format("livelock: loops never quiesce at t={} ns, {}", now_ns_, replay_hint()));
  }
  const uint64_t next = next_time_ns();
  if (next == rt::kNever || next > deadline_ns) {
    if (deadline_ns != rt::kNever) now_ns_ = std::max(now_ns_, deadline_ns);  // time passes
    return false;
  }
  now_ns_ = std::max(now_ns_, next);
  while (!events_.empty() && events_.front().time_ns <= now_ns_) {
    std::pop_heap(events_.begin(), events_.end(), EventLater{});
    const Event e = events_.back();
    events_.pop_back();
    e.fn(e.ctx, e.arg);
    ++events_run_;
    if (--step_budget_ == 0) {
      return Status::Aborted(
          fmt::format("step bound reached at t={} ns, {}", now_ns_, replay_hint()));
    }
  }
  return true;
}

Status SimEnv::run_until(uint64_t deadline_ns, uint64_t max_steps) {
  SHOAL_ASSERT(!running_, "%s", "SimEnv::run_until re-entered (sleep_ns inside a simulated task?)");
  running_ = true;
  step_budget_ = max_steps;
  Status out = Status::Ok();
  for (;;) {
    auto more = step(deadline_ns);
    if (!more.ok()) {
      out = more.status();
      break;
    }
    if (!*more) break;
  }
  running_ = false;
  return out;
}

}  // namespace shoal::sim

// LeadBound: how far, in time, a leader's stream may run ahead of what its majority has chosen
// (docs/REPLICATION.md, "Flow control: the lead bound").
//
// The worker commits speculatively and seals entries; they wait to be proposed (the ratekeeper
// and the slot-lag bound may stop proposals) and then for a majority (the followers' accepts).
// A transaction is acknowledged only once its entry is chosen, so every millisecond an entry
// waits unchosen is commit latency. Without a bound on it, a stall (a follower starved of
// CPU, a replay-lag pause) lets the worker fill its whole log ring (16 entries of up to 1 MiB)
// and every transaction in it waits the stall out: commit p99 of 100-300 ms on two cores.
// LeadBound tracks the stream's entries sealed and not yet chosen, in order, and says the
// worker must hold (StreamAppender::set_lead_hold: no new batch opens) while the oldest
// unproposed one was sealed more than lead_ns ago, or the oldest in flight was proposed more
// than a majority's round trip plus lead_ns ago (hold()). The worker then stops within one batch of
// the stall instead of a ring's worth, and on a shared machine the CPU it leaves goes to the
// followers it waits for; queues stay short, so latency stays near batch age + round trip.
//
// Threads: owned by the leader's replication thread. Bounded: a ring of the appender's entry
// slots (at most that many are sealed and unchosen at a time); no allocation after construction.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/base/assert.h"

namespace shoal::repl {

class LeadBound {
 public:
  // lead_ns 0: never hold. rtt_ns: the round trip to the nearest majority (what a proposal
  // needs at best). capacity: the most entries sealed and unchosen at a time (the appender's
  // ring entries). REQUIRES: capacity >= 1.
  LeadBound(uint64_t lead_ns, uint64_t rtt_ns, uint32_t capacity)
      : lead_ns_(lead_ns), rtt_ns_(rtt_ns), ring_(capacity) {
    SHOAL_ASSERT(capacity >= 1, "%s", "a lead bound tracks at least one entry");
  }

  // An entry was sealed at sealed_ns (the replication thread took it from the appender).
  // REQUIRES: entries are noted in seal order; fewer than capacity are unchosen.
  void sealed(uint64_t sealed_ns) {
    SHOAL_ASSERT(tail_ - head_ < ring_.size(), "%s", "more entries unchosen than the ring holds");
    ring_[tail_++ % ring_.size()] = Entry{0, sealed_ns, 0};
  }
  // The oldest entry not yet proposed went out in `slot` at now_ns.
  // REQUIRES: such an entry exists; slots grow.
  void proposed(uint64_t slot, uint64_t now_ns) {
    SHOAL_ASSERT(proposed_ < tail_, "%s", "proposed an entry never sealed");
    Entry& e = ring_[proposed_++ % ring_.size()];
    e.slot = slot;
    e.proposed_ns = now_ns;
  }
  // Every slot at or below `slot` is chosen: their entries no longer count.
  void chosen_through(uint64_t slot) {
    while (head_ < proposed_ && ring_[head_ % ring_.size()].slot <= slot) ++head_;
  }
  // Entries noted so far that are chosen or forgotten (a count from the first one noted).
  uint64_t settled() const { return head_; }
  // The stream lost its leadership: what it proposed may never be chosen in those slots, so
  // it is not waited for (the entries not yet proposed still are).
  void forget_proposed() { head_ = proposed_; }

  // True while the oldest entry not yet proposed was sealed more than lead_ns ago (proposals
  // are stopped: the ratekeeper, a lagging follower, a full pipeline), or the oldest proposed
  // and unchosen one went out more than rtt_ns + lead_ns ago (the majority is slow to
  // accept). Each from its own start: entries that waited to be proposed do not hold the
  // worker for another round trip once they go out.
  bool hold(uint64_t now_ns) const { return why_hold(now_ns) != Hold::kNone; }
  // Which of the two holds (the first, when both).
  enum class Hold : uint8_t { kNone, kUnproposed, kUnchosen };
  Hold why_hold(uint64_t now_ns) const {
    if (lead_ns_ == 0) return Hold::kNone;
    if (proposed_ < tail_ && older(ring_[proposed_ % ring_.size()].sealed_ns, now_ns, lead_ns_)) {
      return Hold::kUnproposed;
    }
    if (head_ < proposed_ &&
        older(ring_[head_ % ring_.size()].proposed_ns, now_ns, rtt_ns_ + lead_ns_)) {
      return Hold::kUnchosen;
    }
    return Hold::kNone;
  }
  uint64_t unchosen() const { return tail_ - head_; }

 private:
  static bool older(uint64_t since_ns, uint64_t now_ns, uint64_t bound_ns) {
    return now_ns > since_ns && now_ns - since_ns > bound_ns;
  }
  struct Entry {
    uint64_t slot;  // once proposed
    uint64_t sealed_ns;
    uint64_t proposed_ns;  // once proposed
  };
  uint64_t lead_ns_, rtt_ns_;
  std::vector<Entry> ring_;  // sized once
  // Counts of entries: chosen (and dropped) < head_ <= proposed < proposed_ <= sealed < tail_.
  uint64_t head_ = 0, proposed_ = 0, tail_ = 0;
};

// The round trip to the nearest majority: the followers' one-way delays to us (as
// LeaderOptions::receive_shapes give them), the leader being one of the majority.
// REQUIRES: one_way_ns holds the followers only.
inline uint64_t majority_rtt_ns(uint32_t replicas, std::vector<uint64_t> one_way_ns) {
  const size_t needed = replicas / 2;  // followers a majority needs beside the leader
  if (needed == 0 || needed > one_way_ns.size()) return 0;
  std::nth_element(one_way_ns.begin(), one_way_ns.begin() + (needed - 1), one_way_ns.end());
  return 2 * one_way_ns[needed - 1];
}

// The ratekeeper's bound on the replay lag the leader sees from a follower
// (LeaderOptions::follower_replay_lag_ms_max): the bound for replay itself plus the round trip
// between us, which every lag the leader sees includes (the chosen index travels to the
// follower, its report back) and which is distance, not replay backlog. `one_way` is what the
// follower sends us (receive_shapes); links are symmetric, jitter taken at its mean.
// replay_lag_ms_max 0 (no ratekeeper) stays 0.
inline uint64_t ratekeeper_bound_ms(uint64_t replay_lag_ms_max, uint64_t one_way_delay_ns,
                                    uint64_t jitter_ns) {
  if (replay_lag_ms_max == 0) return 0;
  return replay_lag_ms_max + (2 * one_way_delay_ns + jitter_ns) / 1'000'000;
}

// While the ratekeeper has proposals stopped, the backlog (WatermarkHistory::backlog_ns) at or
// below which it resumes them before the follower has replayed everything (its lag, which
// only falls then, back within `bound_ms`). Two reasons, and the earlier resume wins:
// - Every transaction sealed during a stop waits it out, so a stop that lasts until the
//   follower has nothing left (the backlog's whole replay: at RTT 0, commit p99 of 72 and
//   148 ms in two runs of ten) is a latency tail. Resuming a gap of an eighth of the bound (at
//   least 1 ms) below it keeps a stop to that gap's replay, and leaves the stop-and-go a
//   hysteresis (RatekeeperGate).
// - Over a WAN the follower would otherwise sit idle while the pipeline refills: resumed now,
//   new entries are chosen a round trip later and the follower hears so a one-way delay after
//   that, and what the leader knows of its replay is a one-way delay old: two round trips,
//   at most the bound.
inline uint64_t ratekeeper_resume_ms(uint64_t bound_ms, uint64_t one_way_delay_ns,
                                     uint64_t jitter_ns) {
  const uint64_t gap_ms = std::max<uint64_t>(1, bound_ms / 8);
  const uint64_t below_bound_ms = bound_ms > gap_ms ? bound_ms - gap_ms : 0;
  const uint64_t refill_ms = 2 * (2 * one_way_delay_ns + jitter_ns) / 1'000'000;
  return std::max(below_bound_ms, std::min(bound_ms, refill_ms));
}

// The ratekeeper's stop-and-go on the designated successor's replay, with hysteresis. Going,
// it stops when the successor's lag passes the bound. Stopped, it goes again when the lag is
// back within the bound, or early, when the backlog is down to the resume threshold
// (ratekeeper_resume_ms). Resumed early, the lag stays above the bound for a while (it counts
// the stop's standstill until the successor has replayed past it), so it is not the lag but
// the backlog passing the bound again that stops it; without that state the next check saw
// the lag, stopped, and the one after resumed: a stop and a resume on every other proposal.
// Counts how long proposals were stopped in all.
//
// Threads: owned by the leader's replication thread.
class RatekeeperGate {
 public:
  // Whether proposals may go on at now_ns. REQUIRES: resume_ms <= bound_ms; now_ns does not go
  // backwards.
  bool admit(uint64_t lag_ms, uint64_t backlog_ms, uint64_t bound_ms, uint64_t resume_ms,
             uint64_t now_ns) {
    SHOAL_ASSERT(resume_ms <= bound_ms, "resume %lu above the bound %lu", resume_ms, bound_ms);
    if (lag_ms <= bound_ms) return go(now_ns);
    switch (state_) {
      case State::kGoing:
        return stop(now_ns);
      case State::kStopped:
        if (backlog_ms > resume_ms) return false;
        go(now_ns);
        state_ = State::kResumedEarly;
        return true;
      case State::kResumedEarly:
        return backlog_ms > bound_ms ? stop(now_ns) : true;
    }
    return true;
  }
  // No ratekeeper, or no successor to pace by: proposals go on.
  void release(uint64_t now_ns) { go(now_ns); }
  bool stopped() const { return state_ == State::kStopped; }
  uint64_t stopped_total_ns() const { return stopped_total_ns_; }

 private:
  enum class State { kGoing, kStopped, kResumedEarly };
  bool go(uint64_t now_ns) {
    if (state_ == State::kStopped) stopped_total_ns_ += now_ns - stopped_since_ns_;
    state_ = State::kGoing;
    return true;
  }
  bool stop(uint64_t now_ns) {
    state_ = State::kStopped;
    stopped_since_ns_ = now_ns;
    return false;
  }
  State state_ = State::kGoing;
  uint64_t stopped_since_ns_ = 0;
  uint64_t stopped_total_ns_ = 0;
};

// The ratekeeper's admission rate: FoundationDB's ratekeeper, on the designated successor's
// replay rather than storage queues (docs/REPLICATION.md, "The ratekeeper"). RatekeeperGate
// stops proposals once the successor's lag passes the bound, and every transaction sealed
// during a stop waits it out: at RTT 0, rounds with about 1 s of stops had a commit p99 of
// 36-45 ms against 12-16 ms in rounds without. This sets a rate instead, in transactions per
// second for the shard's workers (StreamAppender::set_pace_rate: a token bucket the worker
// sleeps on before it opens a batch), so that the lag settles well inside the bound and
// proposals need not stop; the gate stays as the hard limit beyond the bound.
//
// From the successor's reports (its replayed TID every tick, turned into a count of
// transactions by WatermarkHistory::txns_through) it measures:
// - the replay speed c (transactions per second) over windows of kWindowNs, smoothed. Only a
//   window through which the successor had a backlog (lag at or above release_lag_ms at every
//   reading) says how fast it can go; one that keeps up replays what comes, and its speed
//   only raises c (it can go at least that fast), at most to twice c per window (a window
//   that ends a silence counts the replay of the whole silence in it). A successor that
//   stops reporting measures 0, and c decays.
// - the backlog q: the transactions the leader has taken from its workers and the successor
//   has not replayed. The leader's count moves with the workers' pace at once (a batch's age
//   later), so the loop sees its own action within a batch and a report's age; the lag in
//   time would show a change of pace only a whole lag later (the replay reaches what was
//   committed at the new pace that much later), and a proportional rule on it oscillates.
// The rate is r = c + (q* - q) / horizon, q* = c x (target lag + round trip): the replay speed
// fed forward (at q = q* the workers go at the successor's pace) and the backlog's error
// worked off over the horizon, within [c/4, 2c]. The horizon is at least three times the
// loop's delay (a batch's age, the report's one-way delay and a tick; a round trip counted
// for it): a first-order loop with a delay of a third of its time constant or less settles
// without overshoot. q reads high by what the successor replayed since its report (and by
// what is in flight to it): the target counts the round trip for that.
// No rate (0) before the first measurement and while the lag is below engage_lag_ms (the
// successor keeps up); a limited rate ends once the lag is back below release_lag_ms.
//
// Threads: owned by the leader's replication thread. No allocation.
class RatekeeperRate {
 public:
  static constexpr uint64_t kWindowNs = 40'000'000;
  // Where the lag should be, from the gate's bound (ratekeeper_bound_ms: the replay bound plus
  // the round trip) and the round trip to the successor.
  struct Shape {
    uint64_t target_lag_ms = 0;   // the lag the rate holds: the round trip + half the replay bound
    uint64_t engage_lag_ms = 0;   // unlimited, a lag from here limits (+ a quarter)
    uint64_t release_lag_ms = 0;  // limited, a lag below here ends it (+ an eighth)
    uint64_t distance_ms = 0;     // the round trip: lag no replay speed removes
    uint64_t horizon_ms = 0;      // the backlog's error is worked off over this long
  };
  // REQUIRES: bound_ms > rtt_ms (the gate's bound includes the round trip).
  static Shape shape(uint64_t bound_ms, uint64_t rtt_ms) {
    SHOAL_ASSERT(bound_ms > rtt_ms, "bound %lu within the round trip %lu", bound_ms, rtt_ms);
    const uint64_t replay_ms = bound_ms - rtt_ms;
    Shape s;
    s.target_lag_ms = rtt_ms + replay_ms / 2;
    s.engage_lag_ms = rtt_ms + replay_ms / 4;
    s.release_lag_ms = rtt_ms + replay_ms / 8;
    s.distance_ms = rtt_ms;
    s.horizon_ms = std::max<uint64_t>(50, 3 * (rtt_ms + 15));
    return s;
  }
  struct Reading {
    uint64_t now_ns = 0;
    uint64_t lag_ms = 0;         // the successor's (WatermarkHistory::lag_ns)
    uint64_t taken_txns = 0;     // taken from the workers so far (running count)
    uint64_t replayed_txns = 0;  // of the chosen ones, replayed by the successor (running count)
    uint32_t successor = 0;      // which follower: another one starts a new measurement
  };

  // The workers' rate now, transactions per second; 0: unlimited.
  // REQUIRES: now_ns and the counts of one successor do not go backwards.
  uint64_t update(const Shape& shape, const Reading& r) {
    account(r.now_ns);
    measure(shape, r);
    const uint64_t threshold_ms = rate_ == 0 ? shape.engage_lag_ms : shape.release_lag_ms;
    if (replay_per_s_ <= 0 || r.lag_ms < threshold_ms) return rate_ = 0;
    const double backlog =
        r.taken_txns > r.replayed_txns ? static_cast<double>(r.taken_txns - r.replayed_txns) : 0;
    const double target =
        replay_per_s_ * static_cast<double>(shape.target_lag_ms + shape.distance_ms) / 1e3;
    const double rate =
        std::clamp(replay_per_s_ + (target - backlog) * 1e3 / static_cast<double>(shape.horizon_ms),
                   replay_per_s_ / 4, 2 * replay_per_s_);
    rate_ = std::max<uint64_t>(1, static_cast<uint64_t>(rate));
    return rate_;
  }
  // No ratekeeper, or no successor to pace by: unlimited (and the measurement starts over).
  void release(uint64_t now_ns) {
    account(now_ns);
    rate_ = 0;
    window_open_ = false;
  }

  uint64_t rate() const { return rate_; }
  double replay_per_s() const { return replay_per_s_; }
  // How long a rate was in force, and the transactions it admitted at most meanwhile (the
  // rate's integral): their ratio is the mean rate while limited.
  uint64_t limited_ns() const { return limited_ns_; }
  double limited_txns() const { return limited_txns_; }

 private:
  static constexpr double kSmoothing = 0.4;  // per window: a time constant of about 2 windows
  void account(uint64_t now_ns) {
    if (rate_ != 0 && now_ns > accounted_ns_) {
      limited_ns_ += now_ns - accounted_ns_;
      limited_txns_ +=
          static_cast<double>(rate_) * static_cast<double>(now_ns - accounted_ns_) / 1e9;
    }
    accounted_ns_ = std::max(accounted_ns_, now_ns);
  }
  void measure(const Shape& shape, const Reading& r) {
    const bool busy = r.lag_ms >= shape.release_lag_ms;
    if (!window_open_ || r.successor != window_successor_ || r.replayed_txns < window_txns_) {
      open_window(r, busy);
      return;
    }
    window_busy_ = window_busy_ && busy;
    if (r.now_ns - window_start_ns_ < kWindowNs) return;
    const double speed = static_cast<double>(r.replayed_txns - window_txns_) * 1e9 /
                         static_cast<double>(r.now_ns - window_start_ns_);
    if (replay_per_s_ > 0 && !window_busy_) {
      // At most doubled: a window that ends a silence (reports resumed, a stalled thread
      // woke) counts in it the replay of the whole silence.
      replay_per_s_ = std::clamp(speed, replay_per_s_, 2 * replay_per_s_);
    } else if (replay_per_s_ <= 0) {
      replay_per_s_ = speed;
    } else {
      replay_per_s_ += (speed - replay_per_s_) * kSmoothing;
    }
    open_window(r, busy);
  }
  void open_window(const Reading& r, bool busy) {
    window_open_ = true;
    window_successor_ = r.successor;
    window_start_ns_ = r.now_ns;
    window_txns_ = r.replayed_txns;
    window_busy_ = busy;
  }
  uint64_t rate_ = 0;
  double replay_per_s_ = 0;  // c; 0: not measured yet
  bool window_open_ = false, window_busy_ = false;
  uint32_t window_successor_ = 0;
  uint64_t window_start_ns_ = 0, window_txns_ = 0;
  uint64_t accounted_ns_ = 0, limited_ns_ = 0;
  double limited_txns_ = 0;
};

// The worker's side of the ratekeeper's rate: a token bucket of transactions. Before it opens
// a batch the worker charges what it logged since, and waits (sleeps) while the bucket is in
// debt; credit builds up at the rate for at most burst_ns, so a worker that paused does not
// then run at twice the rate. Unlimited (rate 0) empties the bucket.
//
// Threads: owned by the stream's worker. No allocation.
class TxnPacer {
 public:
  explicit TxnPacer(uint64_t burst_ns) : burst_ns_(burst_ns) {}
  // `txns` more were logged since the last call; the rate is `rate_per_s` (0: unlimited).
  // Returns how long to wait from now_ns before the next batch opens (0: at once).
  // REQUIRES: now_ns does not go backwards.
  uint64_t wait_ns(uint64_t rate_per_s, uint64_t txns, uint64_t now_ns) {
    if (rate_per_s == 0) {
      credit_ = 0;
      paced_ = false;
      return 0;
    }
    const double rate = static_cast<double>(rate_per_s);
    if (paced_ && now_ns > last_ns_) {
      credit_ = std::min(credit_ + rate * static_cast<double>(now_ns - last_ns_) / 1e9,
                         rate * static_cast<double>(burst_ns_) / 1e9);
    }
    paced_ = true;
    last_ns_ = now_ns;
    credit_ -= static_cast<double>(txns);
    return credit_ >= 0 ? 0 : static_cast<uint64_t>(-credit_ * 1e9 / rate) + 1;
  }

 private:
  uint64_t burst_ns_;
  double credit_ = 0;   // transactions; negative: in debt
  bool paced_ = false;  // last_ns_ is the previous paced call's
  uint64_t last_ns_ = 0;
};

// How long the shard watermark may stand still between two rises and still count whole in the
// ratekeeper's measure of a follower's backlog (WatermarkHistory::backlog_ns): a batch's age
// and the lead bound, and the tick that samples the watermark. A longer standstill means
// proposals stopped and the lead bound held the workers (within a batch of the stop): they
// committed nothing meanwhile that a follower would have to replay. Without a lead bound
// (lead_ms_max 0) the workers go on committing into their log rings while proposals stop, so
// every standstill counts (UINT64_MAX).
inline uint64_t watermark_rise_gap_max_ns(uint64_t lead_ms_max, uint64_t batch_age_ns_max,
                                          uint64_t tick_ns) {
  if (lead_ms_max == 0) return UINT64_MAX;
  return lead_ms_max * 1'000'000 + batch_age_ns_max + tick_ns;
}

}  // namespace shoal::repl

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

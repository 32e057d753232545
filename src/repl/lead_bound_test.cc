// LeadBound (src/repl/lead_bound.h): the worker is held while the oldest entry not yet
// proposed is older than the lead, or the oldest proposal not yet chosen is older than a
// majority's round trip plus the lead; and released as soon as that is no longer so. Driven by
// explicit times (a fake clock): nothing here depends on the machine.
#include "src/repl/lead_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/repl/watermark.h"

namespace shoal::repl {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(LeadBound, HoldsWhileProposalsStopAndReleasesWhenTheyGoOut) {
  LeadBound lead(10 * kMs, 0, 8);
  EXPECT_FALSE(lead.hold(100 * kMs));  // nothing sealed
  lead.sealed(100 * kMs);
  lead.sealed(104 * kMs);
  EXPECT_FALSE(lead.hold(110 * kMs));  // exactly the lead: not beyond it
  EXPECT_TRUE(lead.hold(110 * kMs + 1));
  EXPECT_EQ(lead.why_hold(110 * kMs + 1), LeadBound::Hold::kUnproposed);
  // Proposals resume at 130: the first goes out, the second (sealed at 104) is still old.
  lead.proposed(1, 130 * kMs);
  EXPECT_TRUE(lead.hold(130 * kMs));
  // Both out: released at once, although neither is chosen yet (they waited to be proposed;
  // they do not hold the worker for another round trip).
  lead.proposed(2, 130 * kMs);
  EXPECT_FALSE(lead.hold(130 * kMs));
  lead.chosen_through(2);
  EXPECT_EQ(lead.unchosen(), 0u);
  EXPECT_FALSE(lead.hold(1000 * kMs));
}

TEST(LeadBound, HoldsWhileTheMajorityIsSlowToChoose) {
  LeadBound lead(10 * kMs, 50 * kMs, 8);  // a 50 ms round trip to the nearest majority
  lead.sealed(100 * kMs);
  lead.proposed(1, 101 * kMs);
  lead.sealed(105 * kMs);
  lead.proposed(2, 105 * kMs);
  EXPECT_FALSE(lead.hold(161 * kMs));  // 60 ms in flight: the round trip and the lead
  EXPECT_TRUE(lead.hold(161 * kMs + 1));
  EXPECT_EQ(lead.why_hold(161 * kMs + 1), LeadBound::Hold::kUnchosen);
  lead.chosen_through(1);  // the oldest in flight now went out at 105
  EXPECT_FALSE(lead.hold(162 * kMs));
  EXPECT_TRUE(lead.hold(166 * kMs));
  lead.chosen_through(2);
  EXPECT_FALSE(lead.hold(500 * kMs));
}

TEST(LeadBound, ChosenSlotsSkipNoOpsAndTheRingIsReused) {
  LeadBound lead(5 * kMs, 0, 4);
  lead.sealed(10 * kMs);
  // A takeover's no-ops filled slots 3-6 first: the entry goes out in slot 7.
  lead.chosen_through(6);
  EXPECT_EQ(lead.unchosen(), 1u);
  lead.proposed(7, 11 * kMs);
  lead.chosen_through(6);
  EXPECT_TRUE(lead.hold(17 * kMs));
  lead.chosen_through(7);
  EXPECT_FALSE(lead.hold(17 * kMs));
  // More entries than the ring's capacity over time, at most 4 at once.
  for (uint64_t i = 0; i < 20; ++i) {
    lead.sealed((20 + i) * kMs);
    lead.proposed(8 + i, (20 + i) * kMs);
    if (i >= 3) lead.chosen_through(8 + i - 3);
    EXPECT_LE(lead.unchosen(), 4u);
  }
}

TEST(LeadBound, ALostLeadershipForgetsWhatWasProposedOnly) {
  LeadBound lead(5 * kMs, 0, 4);
  lead.sealed(10 * kMs);
  lead.sealed(12 * kMs);
  lead.proposed(1, 10 * kMs);
  lead.forget_proposed();  // slot 1 may never be chosen under this ballot
  EXPECT_EQ(lead.unchosen(), 1u);
  EXPECT_FALSE(lead.hold(17 * kMs));
  EXPECT_TRUE(lead.hold(17 * kMs + 1));  // the unproposed one, sealed at 12, still counts
  lead.proposed(3, 18 * kMs);
  lead.chosen_through(3);
  EXPECT_EQ(lead.unchosen(), 0u);
}

TEST(LeadBound, ZeroNeverHolds) {
  LeadBound lead(0, 0, 2);
  lead.sealed(1);
  EXPECT_FALSE(lead.hold(1'000 * kMs));
}

TEST(LeadBound, TheRoundTripIsToTheNearestMajority) {
  EXPECT_EQ(majority_rtt_ns(3, {0, 0}), 0u);
  // Three replicas: one follower besides the leader, the nearer one.
  EXPECT_EQ(majority_rtt_ns(3, {40 * kMs, 25 * kMs}), 50 * kMs);
  // Five: two followers, so the second nearest.
  EXPECT_EQ(majority_rtt_ns(5, {40 * kMs, 5 * kMs, 25 * kMs, 80 * kMs}), 50 * kMs);
  EXPECT_EQ(majority_rtt_ns(1, {}), 0u);
}

// The ratekeeper's bound adds the round trip to the follower: a follower 25 ms away whose
// replay keeps up is seen 50 ms behind at best, which must not count against 100 ms of replay.
TEST(RatekeeperBound, AddsTheRoundTripToTheReplayBound) {
  EXPECT_EQ(ratekeeper_bound_ms(100, 0, 0), 100u);
  EXPECT_EQ(ratekeeper_bound_ms(100, 25'000'000, 0), 150u);
  EXPECT_EQ(ratekeeper_bound_ms(100, 25'000'000, 4'000'000), 154u);
  EXPECT_EQ(ratekeeper_bound_ms(0, 25'000'000, 0), 0u);  // no ratekeeper stays none
}

// A stopped ratekeeper resumes an eighth of the bound below it, so that no stop lasts a
// whole catch-up (at RTT 0 it once did: p99 72-148 ms), or earlier, once the follower has
// left what it replays while the pipeline refills (two round trips, at most the bound).
TEST(RatekeeperBound, ResumesAGapBelowTheBoundOrWithTwoRoundTripsLeft) {
  EXPECT_EQ(ratekeeper_resume_ms(100, 0, 0), 88u);          // RTT 0: the gap
  EXPECT_EQ(ratekeeper_resume_ms(150, 25 * kMs, 0), 132u);  // the gap before two round trips
  EXPECT_EQ(ratekeeper_resume_ms(150, 50 * kMs, 0), 150u);  // two round trips, at most the bound
  EXPECT_EQ(ratekeeper_resume_ms(70, 25 * kMs, 0), 70u);
  EXPECT_EQ(ratekeeper_resume_ms(4, 0, 0), 3u);  // a gap of at least 1 ms
  EXPECT_EQ(ratekeeper_resume_ms(0, 0, 0), 0u);
}

// Stopped on the lag, resumed early on the backlog: the lag (which counts the stop) stays
// above the bound, and the gate goes on until the backlog itself passes the bound; once the
// lag is within the bound it is the lag again that stops it.
TEST(RatekeeperGate, AnEarlyResumeHoldsUntilTheBacklogPassesTheBound) {
  RatekeeperGate g;
  EXPECT_TRUE(g.admit(50, 50, 100, 80, 1 * kMs));
  EXPECT_FALSE(g.admit(120, 120, 100, 80, 2 * kMs));  // stops at 2 ms
  EXPECT_TRUE(g.stopped());
  EXPECT_FALSE(g.admit(125, 90, 100, 80, 5 * kMs));  // backlog still above the resume
  EXPECT_TRUE(g.admit(130, 80, 100, 80, 7 * kMs));   // resumed early at 7 ms
  EXPECT_FALSE(g.stopped());
  EXPECT_EQ(g.stopped_total_ns(), 5 * kMs);
  // The lag still above the bound does not stop it again (it did, every other check).
  for (uint64_t t = 8; t < 20; ++t) EXPECT_TRUE(g.admit(130, 85, 100, 80, t * kMs)) << t;
  EXPECT_FALSE(g.admit(140, 101, 100, 80, 20 * kMs));  // the backlog passed the bound
  EXPECT_TRUE(g.admit(90, 90, 100, 80, 23 * kMs));     // the lag within the bound: going
  EXPECT_EQ(g.stopped_total_ns(), 8 * kMs);
  EXPECT_FALSE(g.admit(101, 101, 100, 80, 24 * kMs));  // going, the lag stops it
}

// With no hysteresis to speak of (RTT 0: resume only at a backlog of 0), a stop lasts until
// the follower has replayed everything, and the release (no successor) ends it too.
TEST(RatekeeperGate, AReleaseEndsAStopAndCountsIt) {
  RatekeeperGate g;
  EXPECT_FALSE(g.admit(101, 101, 100, 0, 10 * kMs));
  EXPECT_FALSE(g.admit(150, 1, 100, 0, 30 * kMs));
  g.release(40 * kMs);
  EXPECT_FALSE(g.stopped());
  EXPECT_EQ(g.stopped_total_ns(), 30 * kMs);
  g.release(50 * kMs);  // going: nothing more to count
  EXPECT_EQ(g.stopped_total_ns(), 30 * kMs);
}

// A standstill of the watermark longer than a batch's age, the lead bound and a tick means
// the workers were held: the ratekeeper counts no more of it. Without a lead bound they were
// not: all of it counts.
TEST(RatekeeperBound, AStandstillBeyondTheLeadBoundIsNotBacklog) {
  EXPECT_EQ(watermark_rise_gap_max_ns(10, 4 * kMs, 2 * kMs), 16 * kMs);
  EXPECT_EQ(watermark_rise_gap_max_ns(0, 4 * kMs, 2 * kMs), UINT64_MAX);
}

// A leader, its worker and its designated successor on virtual time, 1 ms a step, for the
// ratekeeper's rate (RatekeeperRate). The worker commits worker_per_s, or the rate when one is
// set; the leader takes what it committed every batch_ms (the batch's age); a batch is chosen
// a round trip and a millisecond later (the watermark, sampled every 2 ms tick, with the
// count chosen); the successor hears so a one-way delay later and replays at replay_per_s
// while it has something; its replayed position reaches the leader at its next tick and a
// one-way delay later (or never, while it does not report). TIDs are the chosen counts.
struct Plant {
  double worker_per_s = 100'000, replay_per_s = 70'000;
  uint64_t rtt_ms = 0, batch_ms = 4, replay_bound_ms = 100;
  bool reporting = true;

  uint64_t bound_ms() const { return replay_bound_ms + rtt_ms; }
  uint64_t now_ms() const { return committed_.size() - 1; }
  // Runs until `until_ms`, recording each tick's lag and rate from `from_ms` on.
  void run(uint64_t until_ms, uint64_t from_ms = UINT64_MAX) {
    const RatekeeperRate::Shape shape = RatekeeperRate::shape(bound_ms(), rtt_ms);
    while (now_ms() < until_ms) {
      const uint64_t t = now_ms();
      const double pace = rate == 0 ? worker_per_s : std::min<double>(worker_per_s, rate);
      committed_.push_back(committed_.back() + pace / 1000);
      const uint64_t ow = rtt_ms / 2;
      const double available = chosen_at(t >= ow ? t - ow : 0);
      replayed_.push_back(std::min(available, replayed_.back() + replay_per_s / 1000));
      if (t % 2 != 0) continue;  // the leader's and the follower's ticks
      const auto chosen = static_cast<uint64_t>(chosen_at(t));
      history_.note(chosen + 1, t * kMs, chosen);
      if (reporting && t >= ow) report_ = static_cast<uint64_t>(replayed_[t - ow - (t - ow) % 2]);
      const uint64_t replayed_tid = report_ + 1;
      RatekeeperRate::Reading r;
      r.now_ns = t * kMs;
      r.lag_ms = history_.lag_ns(replayed_tid, r.now_ns) / kMs;
      r.taken_txns = static_cast<uint64_t>(taken_at(t));
      r.replayed_txns = history_.txns_through(replayed_tid);
      rate = keeper.update(shape, r);
      lag_max_ms = std::max(lag_max_ms, r.lag_ms);
      if (t >= from_ms) {
        lags_ms.push_back(r.lag_ms);
        rates.push_back(rate);
      }
    }
  }
  // The worker's mean pace over the last `ms` milliseconds.
  double pace_per_s(uint64_t ms) const {
    return (committed_.back() - committed_[committed_.size() - 1 - ms]) * 1000 / ms;
  }
  double taken_at(uint64_t t) const { return committed_[t - t % batch_ms]; }
  double chosen_at(uint64_t t) const { return t > rtt_ms ? taken_at(t - rtt_ms - 1) : 0; }

  RatekeeperRate keeper;
  uint64_t rate = 0, lag_max_ms = 0;
  std::vector<uint64_t> lags_ms, rates;

 private:
  std::vector<double> committed_{0}, replayed_{0};  // by millisecond
  WatermarkHistory history_;
  uint64_t report_ = 0;
};

uint64_t spread(const std::vector<uint64_t>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *hi - *lo;
}
double mean(const std::vector<uint64_t>& v) {
  double sum = 0;
  for (uint64_t x : v) sum += static_cast<double>(x);
  return sum / static_cast<double>(v.size());
}
// The means of successive runs of n ticks (the rate moves with each batch the leader takes
// and each window's measurement: the worker's token bucket sees its mean).
std::vector<uint64_t> means_of(const std::vector<uint64_t>& v, size_t n) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i + n <= v.size(); i += n) {
    out.push_back(static_cast<uint64_t>(mean({v.begin() + i, v.begin() + i + n})));
  }
  return out;
}

// The shape: the lag is held at the round trip plus half the replay bound, limited from a
// quarter, released below an eighth; the horizon is 50 ms or three times the round trip and
// 15 ms (a batch, the report's tick and one-way delay, within a round trip).
TEST(RatekeeperRate, ShapesTheTargetInsideTheBound) {
  const RatekeeperRate::Shape s0 = RatekeeperRate::shape(100, 0);
  EXPECT_EQ(s0.target_lag_ms, 50u);
  EXPECT_EQ(s0.engage_lag_ms, 25u);
  EXPECT_EQ(s0.release_lag_ms, 12u);
  EXPECT_EQ(s0.horizon_ms, 50u);
  const RatekeeperRate::Shape s50 = RatekeeperRate::shape(150, 50);
  EXPECT_EQ(s50.target_lag_ms, 100u);
  EXPECT_EQ(s50.engage_lag_ms, 75u);
  EXPECT_EQ(s50.release_lag_ms, 62u);
  EXPECT_EQ(s50.distance_ms, 50u);
  EXPECT_EQ(s50.horizon_ms, 195u);
}

// A worker faster than the successor's replay (100K against 70K a second): the lag rises to
// the target and settles there; the worker goes at the replay's pace; the lag never comes
// near the bound (the gate would never stop proposals).
TEST(RatekeeperRate, SettlesTheLagAtTheTargetAndTheWorkerAtTheReplaysPace) {
  Plant p;
  p.run(3000, 2000);
  EXPECT_LT(p.lag_max_ms, 70u);
  EXPECT_NEAR(mean(p.lags_ms), 50, 8);
  EXPECT_LE(spread(p.lags_ms), 10u);
  EXPECT_NEAR(p.pace_per_s(1000), 70'000, 1'000);
  for (uint64_t r : means_of(p.rates, 50)) EXPECT_NEAR(static_cast<double>(r), 70'000, 3'500);
  EXPECT_NEAR(p.keeper.replay_per_s(), 70'000, 3'000);
  EXPECT_GT(p.keeper.limited_ns(), 2800 * kMs);  // limited from the lag's first 25 ms on
  EXPECT_NEAR(p.keeper.limited_txns() / (static_cast<double>(p.keeper.limited_ns()) / 1e9), 70'000,
              3'000);
}

// A successor that keeps up (replay faster than the worker): never limited.
TEST(RatekeeperRate, AFastReplayIsNeverPaced) {
  Plant p;
  p.replay_per_s = 150'000;
  p.run(2000);
  EXPECT_EQ(p.keeper.limited_ns(), 0u);
  EXPECT_EQ(p.rate, 0u);
  EXPECT_LT(p.lag_max_ms, 12u);
}

// The replay slows to 50K a second, then speeds up to 90K: the lag stays inside the bound
// through the step and settles at the target again, the worker at the new pace; at 90K
// against a worker of 100K it does too, once the worker has built the backlog up again. (A slower
// replay cannot keep the lag below 50 ms x 70/50 = 70 ms however soon the rate follows: what the
// worker committed at the old pace over the last lag takes that long to replay at the new one.)
TEST(RatekeeperRate, FollowsAStepInTheReplaysSpeed) {
  Plant p;
  p.run(2000);
  p.replay_per_s = 50'000;
  p.run(4000, 3000);
  EXPECT_LT(p.lag_max_ms, 85u);  // the bound is 100
  EXPECT_NEAR(mean(p.lags_ms), 50, 8);
  EXPECT_LE(spread(p.lags_ms), 10u);
  EXPECT_NEAR(p.pace_per_s(1000), 50'000, 1'000);
  p.lags_ms.clear();
  p.lag_max_ms = 0;
  p.replay_per_s = 90'000;  // the lag falls to 0 (unlimited), and rises back at 10K a second
  p.run(7000, 6000);
  EXPECT_LT(p.lag_max_ms, 85u);
  EXPECT_NEAR(mean(p.lags_ms), 50, 8);
  EXPECT_LE(spread(p.lags_ms), 10u);
  EXPECT_NEAR(p.pace_per_s(1000), 90'000, 1'500);
}

// The successor stops reporting (hung, or its reports lost): its speed measures 0, the rate
// falls to a small fraction of what it was within a few windows, and its lag passes the bound
// (where the gate stops proposals: the rate is not the hard limit). Reporting again, the
// replay it did meanwhile shows, the lag falls and the rate goes (unlimited) or settles.
TEST(RatekeeperRate, ASuccessorThatStopsReportingIsPacedDownToTheGate) {
  Plant p;
  p.run(2000);
  p.reporting = false;
  p.run(2200, 2100);
  EXPECT_LT(p.rates.back(), 70'000u / 4);
  EXPECT_LT(p.keeper.replay_per_s(), 70'000.0 / 2);
  p.run(2500);
  EXPECT_GT(p.lag_max_ms, p.bound_ms());
  p.reporting = true;
  p.lags_ms.clear();
  p.run(5000, 4000);
  EXPECT_NEAR(mean(p.lags_ms), 50, 10);
  EXPECT_NEAR(p.pace_per_s(1000), 70'000, 2'000);
}

// Over a 50 ms round trip the successor's lag reads a round trip late; the rate works on the
// backlog in transactions (the leader's own count moves at once) over a horizon three times
// the loop's delay: the lag settles at the target (100 ms: the round trip and half the
// replay bound) without oscillating, well inside the bound of 150.
TEST(RatekeeperRate, OverAWanTheLateLagDoesNotMakeItOscillate) {
  Plant p;
  p.rtt_ms = 50;
  p.run(4000, 2000);
  EXPECT_LT(p.lag_max_ms, 140u);  // the bound is 150; the first approach from unlimited
  EXPECT_NEAR(mean(p.lags_ms), 100, 10);
  EXPECT_LE(spread(p.lags_ms), 12u);
  EXPECT_NEAR(p.pace_per_s(2000), 70'000, 1'000);
  for (uint64_t r : means_of(p.rates, 50)) EXPECT_NEAR(static_cast<double>(r), 70'000, 3'500);
}

// The worker's token bucket: at 1,000 a second, a batch of 10 waits 10 ms; credit builds up
// for at most the burst; unlimited waits never and forgets the debt.
TEST(TxnPacer, WaitsWhileInDebtAndBuildsCreditForAtMostTheBurst) {
  TxnPacer p(5 * kMs);
  EXPECT_EQ(p.wait_ns(1000, 0, 100 * kMs), 0u);
  const uint64_t w = p.wait_ns(1000, 10, 100 * kMs);
  EXPECT_NEAR(static_cast<double>(w), 10.0 * kMs, 2);
  EXPECT_GT(p.wait_ns(1000, 0, 105 * kMs), 0u);      // half paid
  EXPECT_EQ(p.wait_ns(1000, 0, 110 * kMs + 1), 0u);  // paid
  // Idle for a second: credit for 5 ms only (5 txns), the sixth waits.
  EXPECT_EQ(p.wait_ns(1000, 5, 1110 * kMs), 0u);
  EXPECT_GT(p.wait_ns(1000, 1, 1110 * kMs), 0u);
  // Unlimited: no wait, and the debt is gone when a rate comes back.
  EXPECT_EQ(p.wait_ns(0, 1000, 1111 * kMs), 0u);
  EXPECT_EQ(p.wait_ns(2000, 0, 1112 * kMs), 0u);
}

}  // namespace
}  // namespace shoal::repl

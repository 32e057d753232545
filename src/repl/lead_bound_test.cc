// LeadBound (src/repl/lead_bound.h): the worker is held while the oldest entry not yet
// proposed is older than the lead, or the oldest proposal not yet chosen is older than a
// majority's round trip plus the lead; and released as soon as that is no longer so. Driven by
// explicit times (a fake clock): nothing here depends on the machine.
#include "src/repl/lead_bound.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace shoal::repl

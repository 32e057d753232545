// Watermarks of one shard (docs/REPLICATION.md, "Watermarks and acknowledgement"): each stream's
// committed TID and the shard watermark, the minimum over the shard's streams.
//
// A stream's committed TID is the max_tid of the last entry of its chosen prefix. Entries are
// sealed in order and a worker's TIDs increase, so it only grows; an entry's max_tid is also a
// promise that the stream logs no later record at or below it (LogBatchBuilder::seal's floor).
// Hence every record with TID <= the shard watermark, on any stream, is chosen: that is what a
// leader may acknowledge and what a follower may expose.
//
// Idle streams: a stream without commits would hold the minimum back forever; its worker seals
// empty entries whose floor (max_tid) rises with the engine epoch (StreamAppender::tick), and
// after a run every stream is closed with a floor above every TID logged (finish()).
//
// Threads: owned by one thread (the replication thread on a leader, the replay loop on a
// follower); publish the result through an atomic where other threads read it.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/base/assert.h"

namespace shoal::repl {

class ShardWatermark {
 public:
  // REQUIRES: streams >= 1.
  explicit ShardWatermark(uint32_t streams) : streams_(streams, 0) {
    SHOAL_ASSERT(streams >= 1, "%s", "a shard has at least one stream");
  }

  // Stream `stream`'s chosen prefix now ends with an entry of max_tid `tid`. Returns the new
  // shard watermark. Lower values (an empty entry without a floor) change nothing.
  // REQUIRES: stream < streams().
  uint64_t advance(uint32_t stream, uint64_t tid) {
    SHOAL_ASSERT(stream < streams_.size(), "stream %u of %zu", stream, streams_.size());
    uint64_t& s = streams_[stream];
    if (tid <= s) return shard_;
    const bool was_min = s == shard_;
    s = tid;
    if (was_min) shard_ = *std::min_element(streams_.begin(), streams_.end());
    return shard_;
  }

  uint64_t stream(uint32_t stream) const { return streams_[stream]; }
  uint64_t shard() const { return shard_; }
  uint32_t streams() const { return static_cast<uint32_t>(streams_.size()); }

 private:
  std::vector<uint64_t> streams_;
  uint64_t shard_ = 0;
};

// When the shard watermark passed each value, for the last kSamples changes: turns a
// follower's replayed TID into how long ago the leader's watermark was there (its replay lag
// in time, lag_ns()), which is what bounds the backlog a promoted follower installs before it
// serves (LeaderOptions::follower_replay_lag_ms_max, the ratekeeper), and into how much of the
// workers' commit time it has yet to replay (backlog_ns()).
//
// The two differ while the watermark stands still: when proposals are stopped (the ratekeeper
// itself, a lagging follower), lag_ns() goes on growing until the follower has replayed
// everything, but no commit is added to its backlog, which shrinks as it replays. So a
// ratekeeper that waits for the lag to fall resumes only once the follower has nothing left,
// and over a WAN the follower then sits idle while the pipeline refills (a round trip before
// new entries are chosen, a one-way delay before it hears so); it resumes on the backlog
// instead (lead_bound.h, ratekeeper_resume_ms). backlog_ns() counts each interval between two
// rises at most rise_gap_max_ns: longer, the watermark stood still and the workers were held
// (the lead bound holds them within a batch of a stop).
//
// Each sample may also carry how many transactions were chosen by then (a running count):
// txns_through() turns a replayed TID into how many of them a follower has replayed, from
// which the ratekeeper's rate (lead_bound.h, RatekeeperRate) measures its replay speed and
// backlog in transactions.
//
// Threads: owned by the leader's replication thread.
class WatermarkHistory {
 public:
  static constexpr size_t kSamples = 4096;  // at one per tick (2 ms): about 8 s

  // rise_gap_max_ns: how much of a standstill between two rises counts in backlog_ns()
  // (UINT64_MAX: all of it, backlog_ns() is then lag_ns()). REQUIRES: > 0.
  explicit WatermarkHistory(uint64_t rise_gap_max_ns = UINT64_MAX)
      : rise_gap_max_ns_(rise_gap_max_ns) {
    SHOAL_ASSERT(rise_gap_max_ns > 0, "%s", "a watermark history counts some of each rise");
  }

  // The watermark is `tid` at `now_ns`, and `chosen_txns` transactions were chosen by then.
  // Lower or equal values change nothing (the watermark only grows). REQUIRES: now_ns and
  // chosen_txns do not go backwards.
  void note(uint64_t tid, uint64_t now_ns, uint64_t chosen_txns = 0) {
    if (count_ > 0 && tid <= at(count_ - 1).tid) return;
    const uint64_t rising_ns =
        count_ == 0 ? 0 : at(count_ - 1).rising_ns + capped_gap(at(count_ - 1).ns, now_ns);
    ring_[(first_ + count_) % kSamples] = Sample{tid, now_ns, rising_ns, chosen_txns};
    if (count_ < kSamples) {
      ++count_;
    } else {
      first_ = (first_ + 1) % kSamples;
    }
  }

  // How long ago the watermark first rose above `replayed_tid`: 0 when it never has (the
  // replica is level with it); the oldest sample's age when that is older than the history.
  uint64_t lag_ns(uint64_t replayed_tid, uint64_t now_ns) const {
    if (count_ == 0 || at(count_ - 1).tid <= replayed_tid) return 0;
    const uint64_t since = at(first_above(replayed_tid)).ns;
    return now_ns > since ? now_ns - since : 0;
  }
  // lag_ns() with every standstill of the watermark counted at most rise_gap_max_ns (the one
  // since its newest rise too): the commit time, from when the watermark first rose above
  // `replayed_tid`, that a replica there has yet to replay. Equal to lag_ns() while the
  // watermark rises at least every rise_gap_max_ns; stops growing while it stands still.
  uint64_t backlog_ns(uint64_t replayed_tid, uint64_t now_ns) const {
    if (count_ == 0 || at(count_ - 1).tid <= replayed_tid) return 0;
    const Sample& newest = at(count_ - 1);
    return newest.rising_ns - at(first_above(replayed_tid)).rising_ns +
           capped_gap(newest.ns, now_ns);
  }
  // The chosen transactions (as noted) of the newest sample at or below `replayed_tid`: what a
  // replica there has replayed, give or take the transactions of one sampling interval. The
  // oldest sample's count when even it is above (the replica trails the whole history); 0
  // before any sample.
  uint64_t txns_through(uint64_t replayed_tid) const {
    if (count_ == 0) return 0;
    if (at(count_ - 1).tid <= replayed_tid) return at(count_ - 1).txns;
    const size_t i = first_above(replayed_tid);
    return at(i == 0 ? 0 : i - 1).txns;
  }

 private:
  struct Sample {
    uint64_t tid = 0;
    uint64_t ns = 0;
    uint64_t rising_ns = 0;  // the intervals since the oldest sample ever noted, each capped
    uint64_t txns = 0;       // chosen by then (note's chosen_txns)
  };
  uint64_t capped_gap(uint64_t from_ns, uint64_t to_ns) const {
    return to_ns > from_ns ? std::min(to_ns - from_ns, rise_gap_max_ns_) : 0;
  }
  // The index of the first sample above `tid`. REQUIRES: the newest is above it.
  size_t first_above(uint64_t tid) const {
    size_t lo = 0, hi = count_ - 1;  // the first sample above tid lies in [lo, hi]
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (at(mid).tid > tid) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }
  const Sample& at(size_t i) const { return ring_[(first_ + i) % kSamples]; }
  uint64_t rise_gap_max_ns_;
  std::array<Sample, kSamples> ring_{};
  size_t first_ = 0, count_ = 0;
};

}  // namespace shoal::repl

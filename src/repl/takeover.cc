#include "src/repl/takeover.h"

#include <algorithm>

#include "src/base/assert.h"

namespace shoal::repl {

TakeoverTracker::TakeoverTracker(uint32_t streams, const ReplayApplier& applier)
    : streams_(streams), replayed_before_(applier.stats().txns) {
  SHOAL_ASSERT(streams == applier.watermark().streams(), "takeover of %u streams, applier of %u",
               streams, applier.watermark().streams());
}

bool TakeoverTracker::note(uint32_t stream, bool leading, uint64_t next_slot,
                           uint64_t chosen_index) {
  SHOAL_ASSERT(stream < streams_.size(), "stream %u of %zu", stream, streams_.size());
  Stream& s = streams_[stream];
  s.finished = false;
  if (!leading) return false;
  // The first time it leads, phase 1 has put every slot a majority may hold below next_slot.
  if (!s.led) {
    s.led = true;
    s.last_old_slot = next_slot - 1;
  }
  s.finished = chosen_index >= s.last_old_slot;
  return s.finished;
}

bool TakeoverTracker::done() const {
  return std::all_of(streams_.begin(), streams_.end(), [](const Stream& s) { return s.finished; });
}

TakeoverResult TakeoverTracker::result(ReplayApplier& applier) const {
  SHOAL_ASSERT(done(), "%s", "takeover result before every stream's old slots are chosen");
  applier.install_held();
  TakeoverResult r;
  r.final_tid = applier.applied_tid();
  for (uint32_t i = 0; i < streams_.size(); ++i) {
    r.floor_tid = std::max(r.floor_tid, applier.logged_tid(i));
  }
  r.replayed_txns = applier.stats().txns - replayed_before_;
  applier.for_each_queued_record([&](uint64_t tid) {
    SHOAL_ASSERT(tid > r.final_tid, "record %lx left below the final watermark %lx", tid,
                 r.final_tid);
    ++r.discarded_txns;
  });
  r.decisions = applier.decisions();
  r.observer = applier.observer();
  return r;
}

}  // namespace shoal::repl

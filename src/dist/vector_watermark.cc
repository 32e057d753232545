#include "src/dist/vector_watermark.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/base/assert.h"
#include "src/dist/coordinator.h"

namespace shoal::dist {
bool CoveredAwaiter::await_ready() {
  if (vw_->lost(*vector_)) [[unlikely]] {
    ++vw_->stats_.refused;
    status_ = Status::Aborted("the transaction depends on a version lost in a failover");
    return true;
  }
  return vw_->covers(*vector_);
}

bool CoveredAwaiter::await_suspend(std::coroutine_handle<> h) {
  handle_ = h;
  return vw_->park(this);
}

VectorWatermark::VectorWatermark(rt::EventLoop& loop, uint32_t shards, uint32_t waiters_max)
    : loop_(loop),
      waiters_max_(waiters_max),
      entries_(shards, 0),
      heaps_(shards),
      held_(shards, false) {
  SHOAL_ASSERT(shards >= 1 && shards <= DistTxn::kShardsMax, "%u shards", shards);
  SHOAL_ASSERT(waiters_max >= 1, "%s", "a vector watermark needs room for one waiter");
}

uint64_t VectorWatermark::get(uint32_t shard) const {
  SHOAL_ASSERT(shard < entries_.size(), "shard %u of %zu", shard, entries_.size());
  return entries_[shard];
}

bool VectorWatermark::covers(const txn::DepVec& vector) const {
  for (const txn::DepEntry& e : vector.entries()) {
    if (e.shard >= entries_.size() || entries_[e.shard] < e.ts) return false;
  }
  return true;
}

bool VectorWatermark::first_uncovered(const CoveredAwaiter& w, uint32_t* shard,
                                      uint64_t* ts) const {
  for (const txn::DepEntry& e : w.vector_->entries()) {
    if (e.shard >= entries_.size() || entries_[e.shard] < e.ts) {
      *shard = e.shard;
      *ts = e.ts;
      return true;
    }
  }
  return false;
}

void VectorWatermark::push(uint32_t shard, uint64_t ts, CoveredAwaiter* w) {
  std::vector<Parked>& heap = heaps_[shard];
  heap.push_back(Parked{ts, w});  // grows only up to waiters_max: no allocation once warm
  std::push_heap(heap.begin(), heap.end(), &VectorWatermark::later);
}

bool VectorWatermark::park(CoveredAwaiter* w) {
  uint32_t shard = 0;
  uint64_t ts = 0;
  if (!first_uncovered(*w, &shard, &ts)) return false;  // covered meanwhile: go on at once
  if (shard >= entries_.size()) {
    ++stats_.refused;
    w->status_ = Status::InvalidArgument(
        fmt::format("vector names shard {} of a {}-shard cluster", shard, entries_.size()));
    return false;
  }
  if (waiting_ >= waiters_max_) {
    ++stats_.refused;
    w->status_ = Status::Unavailable(
        fmt::format("{} transactions already wait for the vector watermark", waiters_max_));
    return false;
  }
  ++waiting_;
  ++stats_.parked;
  push(shard, ts, w);
  if (waiting_ == 1 && on_first_park_ != nullptr) on_first_park_(on_first_park_ctx_);
  return true;
}

Status VectorWatermark::raise(uint32_t shard, uint64_t watermark) {
  ++stats_.raises;
  if (shard >= entries_.size()) {
    return Status::InvalidArgument(
        fmt::format("watermark of shard {} in a {}-shard cluster", shard, entries_.size()));
  }
  if (watermark <= entries_[shard] || held_[shard]) return Status::Ok();
  ++stats_.rises;
  entries_[shard] = watermark;
  std::vector<Parked>& heap = heaps_[shard];
  while (!heap.empty() && heap.front().ts <= watermark) {
    std::pop_heap(heap.begin(), heap.end(), &VectorWatermark::later);
    CoveredAwaiter* w = heap.back().waiter;
    heap.pop_back();
    uint32_t next = 0;
    uint64_t ts = 0;
    if (first_uncovered(*w, &next, &ts)) {
      // Never `shard` again (its entry is covered now), so this heap only shrinks here.
      ++stats_.moves;
      push(next, ts, w);
      continue;
    }
    --waiting_;
    ++stats_.resumed;
    loop_.schedule(w->handle_);
  }
  return Status::Ok();
}

void VectorWatermark::release_all(const Status& why) {
  for (std::vector<Parked>& heap : heaps_) {
    for (const Parked& p : heap) {
      p.waiter->status_ = why;
      ++stats_.refused;
      loop_.schedule(p.waiter->handle_);
    }
    heap.clear();
  }
  waiting_ = 0;
}

std::string VectorWatermark::describe_waits() const {
  std::string text;
  for (uint32_t shard = 0; shard < heaps_.size(); ++shard) {  // bounded: shards()
    const std::vector<Parked>& heap = heaps_[shard];
    if (heap.empty()) continue;
    text += fmt::format("{}shard {}: {} waits for {:#x}, known {:#x}{}", text.empty() ? "" : "; ",
                        shard, heap.size(), heap.front().ts, entries_[shard],
                        held_[shard] ? " (held)" : "");
  }
  return text;
}

void VectorWatermark::hold(uint32_t shard) {
  SHOAL_ASSERT(shard < held_.size(), "hold: shard %u of %zu", shard, held_.size());
  held_[shard] = true;
}

bool VectorWatermark::lost(const txn::DepVec& vector) const {
  for (const LostRange& r : lost_) {  // bounded: kLostRangesMax
    const uint64_t ts = vector.get(r.shard);
    if (ts > r.above && ts <= r.through) return true;
  }
  return false;
}

bool VectorWatermark::stable(uint32_t shard, uint64_t ts) const {
  if (shard >= entries_.size() || entries_[shard] < ts) return false;
  for (const LostRange& r : lost_) {  // bounded: kLostRangesMax
    if (r.shard == shard && ts > r.above && ts <= r.through) return false;
  }
  return true;
}

Result<size_t> VectorWatermark::fence(uint32_t shard, uint64_t lost_above, uint64_t lost_through) {
  if (shard >= entries_.size() || lost_above >= lost_through) {
    return Status::InvalidArgument(
        fmt::format("fence of shard {} ({:#x}, {:#x}] in a {}-shard "
                    "cluster",
                    shard, lost_above, lost_through, entries_.size()));
  }
  if (lost_.size() >= kLostRangesMax) {
    return Status::Unavailable(
        fmt::format("{} failovers fenced: no room for another", kLostRangesMax));
  }
  lost_.push_back(LostRange{shard, lost_above, lost_through});
  held_[shard] = false;
  size_t ended = 0;
  for (std::vector<Parked>& heap : heaps_) {
    const auto keep = std::partition(heap.begin(), heap.end(),
                                     [&](const Parked& p) { return !lost(*p.waiter->vector_); });
    for (auto it = keep; it != heap.end(); ++it) {
      it->waiter->status_ = Status::Aborted(fmt::format(
          "the transaction depends on shard {}'s TID {:#x}, lost in its failover (final "
          "watermark {:#x})",
          shard, it->waiter->vector_->get(shard), lost_above));
      ++stats_.refused;
      ++ended;
      loop_.schedule(it->waiter->handle_);
    }
    heap.erase(keep, heap.end());
    std::make_heap(heap.begin(), heap.end(), &VectorWatermark::later);
  }
  waiting_ -= ended;
  return ended;
}

}  // namespace shoal::dist

// The periodic watermark exchange (docs/REPLICATION.md, "Vectorized watermark across shards"): what
// lets a coordinator learn a shard's watermark when no 2PC reply brings it (its transactions with
// that shard are done, or it never talked to it and a vector names it through a dependency).
//
// A WatermarkExchange runs on a coordinator's loop beside its VectorWatermark. Every period_ns:
// it raises its own shard's entry from the local source (the ReplicationLeader's watermark,
// if any), and, only while some transaction waits on the VectorWatermark, sends each linked
// shard one kWatermark message (16 bytes: our shard and its watermark) over that shard's
// ShardLink (an RpcLink: ShardLink::exchange_watermark). The participant answers with the watermark
// trailer every reply carries, which the link raises (rpc_link.h); a participant given the worker's
// VectorWatermark (ParticipantService::set_vector_watermark) raises ours in turn. So each message
// informs both sides, and a busy node has at most one message in flight per shard: a lost one
// times out and the next tick asks again. An idle node does not even tick: the timer runs only
// while some transaction waits or an ask is in flight, and the first wait to park re-arms it
// (VectorWatermark::set_on_first_park). Each tick is a wake-up of the worker's loop, and 500 of
// them a second were most of an idle shard server's wake-ups. Entries only grow
// (VectorWatermark::raise keeps the maximum), so late, duplicated or reordered answers are
// harmless.
//
// Our own entry does not wait for the tick when the source's writer says it rose (notify():
// the ReplicationLeader's chosen callback, through the shard server): one post to the loop
// raises it there. A durable reply then leaves about when its entry is chosen instead of up
// to period_ns later, and the post wakes a sleeping loop, whose idle hook seals the batch
// that waited for those entries to settle (repl::StreamAppender::idle). Notifications
// coalesce: at most one post is pending; the tick stays as the bound when a post is refused
// (the loop's post ring is full) or nobody notifies.
//
// Threads: owned by the loop of the VectorWatermark and the links; the source atomic may be
// written by any thread, and notify() called from any. Bounds: at most DistTxn::kShardsMax
// links, one call in flight each; one post pending.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "shoal/status.h"
#include "src/dist/coordinator.h"
#include "src/dist/vector_watermark.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/task.h"

namespace shoal::dist {

struct WatermarkExchangeOptions {
  uint32_t shard = 0;              // our shard: the entry `source` raises, named in messages
  uint64_t period_ns = 2'000'000;  // how often the source is read and waiters looked at
  // Our shard's watermark (ReplicationLeader::watermark()); nullptr: a node without a shard
  // of its own (messages then carry 0, which raises nothing).
  const std::atomic<uint64_t>* source = nullptr;
};

struct WatermarkExchangeStats {
  uint64_t ticks = 0;
  uint64_t sent = 0;
  uint64_t answered = 0;
  uint64_t failed = 0;           // timed out, refused, or no task room: asked again on a later tick
  uint64_t notified_raises = 0;  // notify() posts that ran (each reads the source once)
};

class WatermarkExchange {
 public:
  // REQUIRES: `watermark` (and options.source) outlive this object, on `loop`.
  WatermarkExchange(rt::EventLoop& loop, VectorWatermark& watermark,
                    WatermarkExchangeOptions options)
      : loop_(loop), watermark_(watermark), options_(options) {
    SHOAL_ASSERT(options_.period_ns > 0, "%s", "a watermark exchange needs a period");
  }
  ~WatermarkExchange() { stop(); }
  WatermarkExchange(const WatermarkExchange&) = delete;
  WatermarkExchange& operator=(const WatermarkExchange&) = delete;

  // Asks `shard` through `link`. REQUIRES: the link's options name `watermark` (so its
  // replies raise it), runs on this loop and outlives the exchange.
  [[nodiscard]] Status add_link(uint32_t shard, ShardLink& link) {
    if (shard >= watermark_.shards() || links_.size() >= DistTxn::kShardsMax) {
      return Status::InvalidArgument(fmt::format("watermark exchange: shard {} of {} ({} links)",
                                                 shard, watermark_.shards(), links_.size()));
    }
    links_.push_back(Linked{shard, &link});
    return Status::Ok();
  }
  // Asks `shard` through `link` from now on (its new leader after a failover); a call in flight
  // on the old link finishes there. InvalidArgument if `shard` has no link. REQUIRES: as
  // add_link; the old link outlives its call in flight.
  [[nodiscard]] Status replace_link(uint32_t shard, ShardLink& link) {
    for (Linked& l : links_) {
      if (l.shard != shard) continue;
      l.link = &link;
      return Status::Ok();
    }
    return Status::InvalidArgument(fmt::format("watermark exchange: no link to shard {}", shard));
  }
  void start() {
    running_ = true;
    watermark_.set_on_first_park(&first_park_thunk, this);
    arm();
  }
  void stop() {
    if (running_) watermark_.set_on_first_park(nullptr, nullptr);
    running_ = false;
    if (timer_armed_) loop_.cancel_timer(timer_);
    timer_armed_ = false;
  }
  // Any thread: the source rose. Raises our entry on the loop soon (one post, coalesced with
  // those already pending). REQUIRES: the exchange outlives its pending post (destroy it
  // only once nobody notifies and its loop runs no more).
  void notify() {
    notifies_.fetch_add(1, std::memory_order_relaxed);
    // acq_rel: the post's own exchange reads this, so it sees every source store before it.
    if (notify_pending_.exchange(true, std::memory_order_acq_rel)) return;
    if (!loop_.post(&notified_thunk, this).ok()) {
      notify_pending_.store(false, std::memory_order_release);  // ring full: the tick raises
    }
  }
  uint64_t notifies() const { return notifies_.load(std::memory_order_relaxed); }
  size_t in_flight() const { return in_flight_; }
  const WatermarkExchangeStats& stats() const { return stats_; }

 private:
  struct Linked {
    uint32_t shard;
    ShardLink* link;
    bool in_flight = false;
  };

  void arm() { arm_in(options_.period_ns); }
  void arm_in(uint64_t delay_ns) {
    if (!running_ || timer_armed_) return;
    auto t = loop_.add_timer(loop_.now_ns() + delay_ns, &tick_thunk, this);
    if (!t.ok()) return;  // timers full: the exchange stops (stats show no more ticks)
    timer_armed_ = true;
    timer_ = *t;
  }
  static void tick_thunk(void* self, uint64_t) { static_cast<WatermarkExchange*>(self)->tick(); }
  // Half a period: what a wait that parked at a random phase of a running tick waited on
  // average when the exchange ticked all the time.
  static void first_park_thunk(void* self) {
    auto* x = static_cast<WatermarkExchange*>(self);
    x->arm_in(x->options_.period_ns / 2);
  }
  static void notified_thunk(void* self) {
    auto* x = static_cast<WatermarkExchange*>(self);
    // Cleared before the source is read: a rise after this load posts again.
    x->notify_pending_.exchange(false, std::memory_order_acq_rel);
    ++x->stats_.notified_raises;
    x->raise_own();
  }
  // Our shard's entry from the source; what it read (0 without a source).
  uint64_t raise_own() {
    if (options_.source == nullptr) return 0;
    const uint64_t own = options_.source->load(std::memory_order_acquire);
    watermark_.raise(options_.shard, own).ignore();  // in range: checked by the caller's config
    return own;
  }
  void tick() {
    timer_armed_ = false;
    ++stats_.ticks;
    const uint64_t own = raise_own();
    for (size_t i = 0; watermark_.waiting() > 0 && i < links_.size(); ++i) {
      Linked& l = links_[i];
      if (l.in_flight) continue;
      l.in_flight = true;
      ++in_flight_;
      if (!loop_.spawn(ask(i, own)).ok()) {
        l.in_flight = false;  // no task room now: next tick
        --in_flight_;
        ++stats_.failed;
      }
    }
    // Nobody waits and nothing is asked: sleep until a wait parks (first_park_thunk). Our own
    // entry still rises with every notify(); a notification refused while we sleep is read by
    // the first tick after the next wait parks.
    if (watermark_.waiting() > 0 || in_flight_ > 0) arm();
  }
  rt::Task<void> ask(size_t i, uint64_t own) {
    ++stats_.sent;
    Status s = co_await links_[i].link->exchange_watermark(options_.shard, own);
    links_[i].in_flight = false;
    --in_flight_;
    if (s.ok()) {
      ++stats_.answered;
    } else {
      ++stats_.failed;
    }
  }

  rt::EventLoop& loop_;
  VectorWatermark& watermark_;
  WatermarkExchangeOptions options_;
  std::vector<Linked> links_;
  size_t in_flight_ = 0;
  bool running_ = false;
  bool timer_armed_ = false;
  uint64_t timer_ = 0;
  WatermarkExchangeStats stats_;
  std::atomic<bool> notify_pending_{false};  // a notify() post not yet run
  std::atomic<uint64_t> notifies_{0};
};

}  // namespace shoal::dist

// The vectorized watermark (docs/REPLICATION.md, "Vectorized watermark across shards"): per shard,
// the highest shard watermark known here. A shard's watermark W promises that every version on that
// shard with a TID <= W is chosen by its replication (repl/watermark.h). A transaction may be
// acknowledged ("committed") to its client once every entry of its dependency vector is at or
// below the matching entry here: then every version it wrote or depends on survives the loss of
// a region.
//
// Where entries come from: a shard's own entry from its ReplicationLeader's watermark(); other
// shards' from the 8-byte watermark every participant reply carries (RpcLink raises it, see
// rpc_link.h) and from the periodic exchange (watermark_exchange.h), which is what advances a
// shard that had no cross-shard traffic with us. A cluster without replication reports
// UINT64_MAX (everything covered).
//
// Invariants: entries only grow (raise() keeps the maximum), so stale, duplicated and reordered
// messages are harmless; a value learnt here was that shard's watermark at some point, so it
// never exceeds the shard's true watermark.
//
// Failover (the FVW; docs/REPLICATION.md, "Failover across shards"): when shard X fails over, every
// version X logged above its final watermark F (and at or below its new epoch's floor: everything
// the old leader logged) is lost, and so is every transaction whose vector names one of them,
// although X's watermark, as its new leader reports it, will pass those TIDs. fence(X, F, floor)
// records the lost range: a wait whose vector has an entry for X in (F, floor] ends at once with
// Aborted ("lost in a failover"), now and whenever it is asked again; such a transaction is never
// acknowledged. The server fences before it redials X's new leader (shard_server.h), so no
// entry learnt from the new leader can cover a lost TID first; and it holds the shard's entry
// (hold: raises ignored) from the moment its link to the old leader fails until that fence,
// because the new leader's watermark reaches us through its own requests before we learn
// the lost range.
//
// Waiting (wait_covered): a coroutine that needs its vector covered parks on the first entry of
// its vector that is not covered yet, in a per-shard min-heap ordered by the TID it waits for.
// raise(s, w) pops exactly the waiters of shard s with TID <= w; each moves on to its next
// uncovered entry or, when none is left, is scheduled on the loop (never resumed inside
// raise()). A waiter is thus touched at most once per entry of its vector: no polling. At most
// `waiters_max` coroutines wait at a time (the caller bounds its transactions in flight; beyond
// it the wait fails with Unavailable).
//
// Threads: owned by one event loop's thread; every method runs there (the loop that owns the
// coordinators waiting on it, their RpcLinks and the exchange's handler).
#pragma once

#include <coroutine>
#include <cstdint>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/runtime/event_loop.h"
#include "src/txn/depvec.h"

namespace shoal::dist {

struct VectorWatermarkStats {
  uint64_t raises = 0;  // raise() calls
  uint64_t rises = 0;   // raise() calls that moved an entry up
  uint64_t parked = 0;  // waits that suspended
  uint64_t moves = 0;   // a parked waiter moving on to its next uncovered entry
  uint64_t resumed = 0;
  uint64_t refused = 0;  // waits refused: waiters_max reached, or released
};

class VectorWatermark;

// What wait_covered() returns: co_await it for a Status (Ok once covered; Unavailable when
// waiters_max coroutines already wait or release_all() ended the wait).
class CoveredAwaiter {
 public:
  bool await_ready();
  bool await_suspend(std::coroutine_handle<> h);
  Status await_resume() { return std::move(status_); }

 private:
  friend class VectorWatermark;
  CoveredAwaiter(VectorWatermark* vw, const txn::DepVec* vector) : vw_(vw), vector_(vector) {}
  VectorWatermark* vw_;
  const txn::DepVec* vector_;
  std::coroutine_handle<> handle_;
  Status status_;
};

class VectorWatermark {
 public:
  // REQUIRES: 1 <= shards <= DistTxn::kShardsMax, waiters_max >= 1.
  VectorWatermark(rt::EventLoop& loop, uint32_t shards, uint32_t waiters_max);
  // Coroutines still waiting are abandoned, not resumed: destroy it only with (or after) the
  // loop whose tasks wait on it, or release_all() and run the loop first.
  ~VectorWatermark() = default;
  VectorWatermark(const VectorWatermark&) = delete;
  VectorWatermark& operator=(const VectorWatermark&) = delete;

  uint32_t shards() const { return static_cast<uint32_t>(entries_.size()); }
  // The highest watermark known for `shard`. REQUIRES: shard < shards().
  uint64_t get(uint32_t shard) const;
  // Learns that `shard`'s watermark reached `watermark`; lower values change nothing.
  // Resumes (schedules) every waiter now covered. InvalidArgument for a shard out of range (a
  // peer's message naming a shard this cluster does not have).
  [[nodiscard]] Status raise(uint32_t shard, uint64_t watermark);
  // True when every entry of `vector` is at or below the matching entry here (entries for
  // shards out of range are never covered).
  bool covers(const txn::DepVec& vector) const;
  // co_await wait_covered(v): resumes once covers(v). REQUIRES: v stays unchanged and alive
  // until the wait ends; called from a task on the owning loop.
  CoveredAwaiter wait_covered(const txn::DepVec& vector) { return CoveredAwaiter(this, &vector); }
  // Ends every wait with `why` (shutdown). Their coroutines are scheduled on the loop.
  void release_all(const Status& why);
  // Shard `shard` failed over: its TIDs in (lost_above, lost_through] are lost (see above).
  // Ends the waits whose vectors name one (Aborted) and refuses such waits from now on.
  // Returns how many waits it ended. InvalidArgument for a shard out of range or an empty
  // range; Unavailable beyond kLostRangesMax fences (the server then stops following).
  [[nodiscard]] Result<size_t> fence(uint32_t shard, uint64_t lost_above, uint64_t lost_through);
  // Ignores raises of `shard`'s entry until the next fence() of it (see above). REQUIRES:
  // shard < shards().
  void hold(uint32_t shard);
  bool held(uint32_t shard) const { return held_[shard]; }
  // Whether `vector` names a TID a fence declared lost.
  bool lost(const txn::DepVec& vector) const;
  // Whether every TID of `shard` at or below `ts` is durable for good: the entry is covered
  // here and ts lies in no fenced lost range of the shard. What a compact vector may leave
  // out (src/txn/depvec.h, where the argument is).
  bool stable(uint32_t shard, uint64_t ts) const;
  // This watermark as the base of compact vectors. REQUIRES: used on the owning loop's thread
  // (or while it is paused) and not after this watermark is destroyed.
  txn::DepBase base() const { return txn::DepBase{&stable_thunk, this}; }
  static constexpr size_t kLostRangesMax = 64;  // failovers one server follows
  static bool stable_thunk(const void* self, uint32_t shard, uint64_t ts) {
    return static_cast<const VectorWatermark*>(self)->stable(shard, ts);
  }

  size_t waiting() const { return waiting_; }
  // fn(ctx) runs (on the owning loop, inside the suspending wait) whenever a wait parks while
  // none did: what lets a periodic helper sleep while nobody waits (WatermarkExchange). nullptr
  // clears it. REQUIRES: ctx outlives the hook (clear it first).
  void set_on_first_park(void (*fn)(void*), void* ctx) {
    on_first_park_ = fn;
    on_first_park_ctx_ = ctx;
  }
  // What the waits wait for, for a log line: per shard with parked waiters, how many, the
  // lowest TID they need, the entry known here and whether it is held (hold()), e.g.
  // "shard 0: 4096 waits for 0x1c700008000, known 0x1c700007fff (held)". Empty when none wait.
  std::string describe_waits() const;
  uint32_t waiters_max() const { return waiters_max_; }
  const VectorWatermarkStats& stats() const { return stats_; }

 private:
  friend class CoveredAwaiter;
  struct LostRange {
    uint32_t shard;
    uint64_t above, through;
  };
  struct Parked {
    uint64_t ts;  // the vector entry it waits to see covered
    CoveredAwaiter* waiter;
  };
  // std::*_heap build max-heaps; this order puts the smallest ts on top.
  static bool later(const Parked& a, const Parked& b) { return a.ts > b.ts; }
  // The first entry of w's vector not covered; false when all are.
  bool first_uncovered(const CoveredAwaiter& w, uint32_t* shard, uint64_t* ts) const;
  // Suspends w on its first uncovered entry; false (w->status_ set) when waiters_max wait.
  bool park(CoveredAwaiter* w);
  void push(uint32_t shard, uint64_t ts, CoveredAwaiter* w);

  rt::EventLoop& loop_;
  uint32_t waiters_max_;
  std::vector<uint64_t> entries_;
  std::vector<std::vector<Parked>> heaps_;  // per shard, a min-heap by ts
  std::vector<LostRange> lost_;             // fence(): at most kLostRangesMax
  std::vector<bool> held_;                  // per shard: hold() until fence()
  size_t waiting_ = 0;
  void (*on_first_park_)(void*) = nullptr;
  void* on_first_park_ctx_ = nullptr;
  VectorWatermarkStats stats_;
};

}  // namespace shoal::dist

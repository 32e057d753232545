// The periodic watermark exchange (design section 4): what lets a shard learn another shard's
// watermark when no 2PC reply brought it (a shard with no cross-shard traffic to us, or idle).
//
//   WatermarkExchange  on a shard: every period_ns it reads the shard's own watermark (the
//                      ReplicationLeader's atomic) and sends it (wire::kWatermark, 16 bytes) to
//                      each peer that has not acknowledged that value yet. At most one call in
//                      flight per peer; a failed or timed-out call is simply sent again on a
//                      later tick. A peer that acknowledged the current value gets nothing: an
//                      idle cluster costs one timer per period and no messages. Optionally it
//                      also raises the shard's own entry of a local VectorWatermark each tick.
//   WatermarkService   on every node holding a VectorWatermark: decodes kWatermark requests
//                      and raises the named shard's entry. Malformed requests are refused
//                      (Corruption / InvalidArgument) and counted, never applied.
// Entries only grow (VectorWatermark::raise keeps the maximum), so a late, duplicated or
// reordered exchange message is harmless.
//
// Threads: each object belongs to one event loop; the source atomic may be written by any
// thread. Bounds: at most kPeersMax peers, one call in flight each.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "shoal/status.h"
#include "src/dist/rpc_link.h"
#include "src/dist/vector_watermark.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"
#include "src/runtime/task.h"

namespace shoal::dist {

class WatermarkService {
 public:
  explicit WatermarkService(VectorWatermark& watermark) : watermark_(watermark) {}
  WatermarkService(const WatermarkService&) = delete;
  WatermarkService& operator=(const WatermarkService&) = delete;

  // REQUIRES: rpc runs on the watermark's loop.
  template <net::TransportEndpoint E>
  void attach(rt::RpcEndpoint<E>& rpc) {
    rpc.handle_sync(wire::kWatermark, &serve_thunk, this);
  }
  // Decodes one request and raises the entry it names.
  [[nodiscard]] Status serve(std::span<const uint8_t> request) {
    uint32_t shard = 0;
    uint64_t w = 0;
    Status s = wire::decode_watermark(request, &shard, &w);
    if (s.ok()) s = watermark_.raise(shard, w);
    if (s.ok()) {
      ++received_;
    } else {
      ++malformed_;
    }
    return s;
  }
  static Status serve_thunk(void* self, rt::RpcRequest& r) {
    r.response->resize(0);
    return static_cast<WatermarkService*>(self)->serve(r.payload);
  }

  uint64_t received() const { return received_; }
  uint64_t malformed() const { return malformed_; }

 private:
  VectorWatermark& watermark_;
  uint64_t received_ = 0;
  uint64_t malformed_ = 0;
};

struct WatermarkExchangeOptions {
  uint32_t shard = 0;                     // the shard whose watermark this node sends
  uint64_t period_ns = 2'000'000;         // how often the source is read
  uint32_t session = 0;                   // the RPC session used on every peer endpoint
  uint64_t call_timeout_ns = 50'000'000;  // per call; a timed-out value is sent again later
  // Raised with the source each tick (the shard's own entry); nullptr: none.
  VectorWatermark* local = nullptr;
};

struct WatermarkExchangeStats {
  uint64_t ticks = 0;
  uint64_t sent = 0;
  uint64_t acked = 0;
  uint64_t failed = 0;  // timed out, refused, or no task room: sent again on a later tick
};

template <net::TransportEndpoint E>
class WatermarkExchange {
 public:
  static constexpr size_t kPeersMax = DistTxn::kShardsMax;

  // REQUIRES: `source` outlives this object.
  WatermarkExchange(rt::EventLoop& loop, const std::atomic<uint64_t>* source,
                    WatermarkExchangeOptions options)
      : loop_(loop), source_(source), options_(options) {
    SHOAL_ASSERT(source_ != nullptr && options_.period_ns > 0, "%s",
                 "a watermark exchange needs a source and a period");
  }
  ~WatermarkExchange() { stop(); }
  WatermarkExchange(const WatermarkExchange&) = delete;
  WatermarkExchange& operator=(const WatermarkExchange&) = delete;

  // A node to keep informed. REQUIRES: rpc runs on this loop and outlives the exchange.
  [[nodiscard]] Status add_peer(rt::RpcEndpoint<E>& rpc) {
    if (peers_.size() >= kPeersMax) {
      return Status::InvalidArgument(fmt::format("more than {} watermark peers", kPeersMax));
    }
    peers_.push_back(Peer{&rpc});
    return Status::Ok();
  }
  void start() {
    running_ = true;
    arm();
  }
  void stop() {
    running_ = false;
    if (timer_armed_) loop_.cancel_timer(timer_);
    timer_armed_ = false;
  }
  const WatermarkExchangeStats& stats() const { return stats_; }

 private:
  struct Peer {
    rt::RpcEndpoint<E>* rpc;
    uint64_t acked = 0;  // the highest value this peer acknowledged
    bool in_flight = false;
  };

  void arm() {
    if (!running_ || timer_armed_) return;
    auto t = loop_.add_timer(loop_.now_ns() + options_.period_ns, &tick_thunk, this);
    if (!t.ok()) return;  // timers full: the exchange stops (stats show no more ticks)
    timer_armed_ = true;
    timer_ = *t;
  }
  static void tick_thunk(void* self, uint64_t) { static_cast<WatermarkExchange*>(self)->tick(); }
  void tick() {
    timer_armed_ = false;
    ++stats_.ticks;
    const uint64_t w = source_->load(std::memory_order_acquire);
    if (options_.local != nullptr) options_.local->raise(options_.shard, w).ignore();
    for (size_t i = 0; i < peers_.size(); ++i) {
      Peer& p = peers_[i];
      if (p.in_flight || w <= p.acked) continue;
      p.in_flight = true;
      if (!loop_.spawn(send(i, w)).ok()) {
        p.in_flight = false;  // no task room now: next tick
        ++stats_.failed;
      }
    }
    arm();
  }
  rt::Task<void> send(size_t peer, uint64_t w) {
    rt::RpcEndpoint<E>& rpc = *peers_[peer].rpc;
    rt::MsgBuffer req = rpc.buffer(0);
    wire::encode_watermark(options_.shard, w, &req);
    ++stats_.sent;
    auto reply = co_await rpc.call(options_.session, wire::kWatermark, std::move(req),
                                   options_.call_timeout_ns);
    Peer& p = peers_[peer];
    p.in_flight = false;
    if (!reply.ok()) {
      ++stats_.failed;
      co_return;
    }
    rpc.recycle(std::move(*reply));
    ++stats_.acked;
    p.acked = std::max(p.acked, w);
  }

  rt::EventLoop& loop_;
  const std::atomic<uint64_t>* source_;
  WatermarkExchangeOptions options_;
  std::vector<Peer> peers_;
  bool running_ = false;
  bool timer_armed_ = false;
  uint64_t timer_ = 0;
  WatermarkExchangeStats stats_;
};

}  // namespace shoal::dist

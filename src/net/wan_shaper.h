// WanShaped<E>: wraps any transport endpoint and delays what it receives by a one-way WAN
// delay plus jitter, since the kernel here has no netem. Give each side of a link the shape of
// the direction it receives (WanMatrix::between(sender's region, receiver's region)).
//
// Delay is applied on the receiving side: poll() drains the inner endpoint at once, holds
// each completion in a bounded hold queue stamped due = now + delay + jitter, and hands out
// only completions that are due. So, as on a real WAN, what a sender wrote before it died still
// arrives (its death is reported after the held completions), a stale one-sided write is
// refused by the inner transport when it is written, and per-link order is kept (due times
// never decrease, so jitter does not reorder; reordering is the simulator's job).
//
// Sends go straight to the inner endpoint. Time comes from an Env (RealEnv, or the simulator's
// virtual clock); jitter from an Rng seeded by it. Nothing happens between calls: whoever owns
// the shaper must poll it at next_due_ns() (an EventLoop does, through the poller deadline).
//
// This is the project's only WAN shaper. An earlier sender-side one (src/runtime) was dropped:
// holding on the sending side loses what a sender wrote before it died, which a real WAN
// still delivers.
//
// Holding without a copy: over an inner endpoint that keeps received bytes in its receive
// ring past release() (KeepingEndpoint: shm, tcp with a receive ring, fabric), a held message
// stays where it arrived, kept by the inner endpoint (ring_holds.h), and is handed out from
// there; whoever polls it may keep parts of it in turn (keep_received(): a handle on the
// same hold, so a replication follower's store keeps a shaped link's entries as it keeps an
// unshaped one's). The ring's credit then goes back to the sender only as held messages are
// delivered and let go: the delay's bytes in flight come out of the receive ring, as on a
// real WAN link's window. Otherwise (the inner endpoint keeps nothing, or refuses: a message
// reassembled from fragments, too much of its ring held already), the message is copied into
// the hold slot's buffer and counted (copied_bytes(); the replication path's copy counters
// report it as shaper_hold).
//
// Bounds: at most max_held completions and max_held_bytes held; beyond, the shaper stops
// draining the inner endpoint, whose own credit then pushes back on the sender. Memory: each
// hold slot keeps its copy buffer across uses, those above 64 KiB only while the idle ones pin
// at most max_held_bytes in all, so steady traffic allocates nothing after warm-up (a
// replicated shard's 100 KB log entries through a shaped link used to cost an allocation,
// page faults and a zero fill each).
//
// Threads: owned by one thread, like the endpoint it wraps.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <concepts>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/base/env.h"
#include "src/net/transport.h"

namespace shoal::net {

struct LinkShape {
  uint64_t one_way_delay_ns = 0;
  uint64_t jitter_ns = 0;  // uniform extra delay in [0, jitter_ns]
};

// One-way delay and jitter per ordered region pair (the WAN's configuration side), regions
// optionally named. Within a region, and for pairs never set, the shape is zero.
// REQUIRES: region ids < regions() (asserted).
class WanMatrix {
 public:
  explicit WanMatrix(size_t regions) : regions_(regions), shapes_(regions * regions) {}
  explicit WanMatrix(std::vector<std::string> names)
      : regions_(names.size()), shapes_(regions_ * regions_), names_(std::move(names)) {}
  // Sets both directions between a and b.
  void set(size_t a, size_t b, LinkShape shape) {
    set_one_way(a, b, shape);
    set_one_way(b, a, shape);
  }
  void set_one_way(size_t from, size_t to, LinkShape shape) { shapes_[index(from, to)] = shape; }
  // The shape a receiver in `to` gives its WanShaped for traffic from `from`.
  LinkShape between(size_t from, size_t to) const { return shapes_[index(from, to)]; }
  size_t regions() const { return regions_; }
  // Region id of a name given at construction; NotFound otherwise.
  [[nodiscard]] Result<size_t> region(std::string_view name) const {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == name) return i;
    }
    return Status::NotFound(fmt::format("wan: unknown region '{}'", name));
  }
  std::string_view name(size_t region) const {
    return region < names_.size() ? std::string_view(names_[region]) : std::string_view();
  }

 private:
  size_t index(size_t from, size_t to) const {
    SHOAL_ASSERT(from < regions_ && to < regions_, "wan region pair (%zu, %zu) out of range", from,
                 to);
    return from * regions_ + to;
  }
  size_t regions_;
  std::vector<LinkShape> shapes_;
  std::vector<std::string> names_;
};

// Builds a WanMatrix from a cluster configuration without src/net depending on src/cluster:
// any Config with `regions[i].name` and `wan[i].{from, to, one_way_ms, jitter_ms}` (that is
// cluster::ClusterConfig; each link applies in both directions, as config.h documents).
// InvalidArgument naming the link when it names an unknown region or a negative delay.
template <typename Config>
[[nodiscard]] Result<WanMatrix> wan_matrix_from_config(const Config& config) {
  std::vector<std::string> names;
  names.reserve(config.regions.size());
  for (const auto& r : config.regions) names.emplace_back(r.name);
  WanMatrix m(std::move(names));
  for (size_t i = 0; i < config.wan.size(); ++i) {
    const auto& l = config.wan[i];
    auto from = m.region(l.from);
    auto to = m.region(l.to);
    if (!from.ok() || !to.ok() || !(l.one_way_ms >= 0) || !(l.jitter_ms >= 0)) {
      return Status::InvalidArgument(
          fmt::format("wan[{}] {} -> {}: unknown region or negative delay", i, l.from, l.to));
    }
    m.set(*from, *to,
          {static_cast<uint64_t>(l.one_way_ms * 1e6), static_cast<uint64_t>(l.jitter_ms * 1e6)});
  }
  return m;
}

// An endpoint that can keep received bytes where they are past release() (see the header).
template <typename E>
concept KeepingEndpoint = requires(E& e, const E& ce, std::span<const uint8_t> bytes,
                                   const void* p) {
  { e.keep_received(bytes) } -> std::same_as<std::shared_ptr<const uint64_t[]>>;
  { ce.in_receive_ring(p) } -> std::same_as<bool>;
  { ce.receive_held_bytes() } -> std::convertible_to<uint64_t>;
  { ce.receive_ring_bytes() } -> std::convertible_to<uint64_t>;
};

struct ShaperOptions {
  size_t max_held = 4096;
  size_t max_held_bytes = size_t{64} << 20;
};

template <TransportEndpoint E>
class WanShaped {
 public:
  // Both ends of an inner E::pair(), each delaying what it receives by `shape`. Real time.
  [[nodiscard]] static Result<std::pair<WanShaped, WanShaped>> pair(
      const EndpointOptions& options = {}, LinkShape shape = kTestShape) {
    auto inner = E::pair(options);
    if (!inner.ok()) return inner.status();
    return std::make_pair(WanShaped(std::move(inner->first), shape),
                          WanShaped(std::move(inner->second), shape));
  }
  // The shape pair() uses by default: small enough for tests, large enough to reorder nothing.
  static constexpr LinkShape kTestShape{200'000, 100'000};

  WanShaped(E inner, LinkShape shape, Env& env = RealEnv::instance(), ShaperOptions options = {})
      : inner_(std::move(inner)),
        shape_(shape),
        env_(&env),
        rng_(env.seed()),
        options_(options),
        held_(std::make_unique<Held[]>(options.max_held)) {}
  WanShaped(WanShaped&&) noexcept = default;
  WanShaped& operator=(WanShaped&&) noexcept = default;

  E& inner() { return inner_; }
  void close() { inner_.close(); }

  // ---- sending: straight through.
  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes) {
    return inner_.send(session, bytes);
  }
  [[nodiscard]] Status send_gather(uint32_t session, GatherList pieces) requires GatherEndpoint<E> {
    return inner_.send_gather(session, pieces);
  }
  uint64_t sent_copied_bytes() const requires GatherEndpoint<E> {
    return inner_.sent_copied_bytes();
  }
  // The inner endpoint's receive-side copies (the hold queue's copy is counted apart).
  uint64_t received_copied_bytes() const requires requires(const E& e) {
    e.received_copied_bytes();
  }
  { return inner_.received_copied_bytes(); }
  [[nodiscard]] Status write_with_imm(uint64_t epoch, uint32_t imm,
                                      std::span<const uint8_t> bytes) {
    return inner_.write_with_imm(epoch, imm, bytes);
  }
  [[nodiscard]] Status flush() { return inner_.flush(); }
  [[nodiscard]] Status set_fence_epoch(uint64_t epoch) { return inner_.set_fence_epoch(epoch); }
  [[nodiscard]] Status inject_raw_for_test(std::span<const uint8_t> bytes) {
    return inner_.inject_raw_for_test(bytes);
  }
  [[nodiscard]] Result<std::span<uint8_t>> reserve(size_t bytes) requires ZeroCopyEndpoint<E> {
    return inner_.reserve(bytes);
  }
  [[nodiscard]] Status commit_send(uint32_t session, size_t bytes) requires ZeroCopyEndpoint<E> {
    return inner_.commit_send(session, bytes);
  }
  [[nodiscard]] Status commit_write(uint64_t epoch, uint32_t imm,
                                    size_t bytes) requires ZeroCopyEndpoint<E> {
    return inner_.commit_write(epoch, imm, bytes);
  }
  void cancel() requires ZeroCopyEndpoint<E> { inner_.cancel(); }
  size_t max_message_bytes() const { return inner_.max_message_bytes(); }
  size_t max_write_bytes() const { return inner_.max_write_bytes(); }
  uint64_t fenced_drops() const { return inner_.fenced_drops(); }

  // ---- receiving: through the hold queue.
  [[nodiscard]] Result<size_t> poll(Completion* out, size_t max) {
    SHOAL_ASSERT(delivered_ == 0, "%s", "poll() before release() of the previous batch");
    SHOAL_TRY(ingest());
    const uint64_t now = env_->now_ns();
    size_t n = 0;
    while (n < max && n < count_ && at(n).due_ns <= now) {
      const Held& h = at(n);
      out[n++] = {h.kind, h.imm, h.epoch, {h.data, h.size}};
    }
    delivered_ = n;
    if (n == 0 && count_ == 0 && !deferred_.ok()) return deferred_;
    return n;
  }
  void release() {
    for (; delivered_ > 0; --delivered_) {
      Held& h = at(0);
      held_bytes_ -= h.size;
      h.kept.reset();  // the inner endpoint returns its credit once no other handle is left
      // Keep buffers for reuse: small ones always, large ones while they pin at most
      // max_held_bytes in all (so max_held slots cannot each pin a multi-megabyte message). A
      // replication stream's 100 KB entries otherwise cost an allocation, its page faults and
      // a zero fill each.
      if (h.capacity > kKeepBytes) {
        if (large_kept_bytes_ + h.capacity <= options_.max_held_bytes) {
          large_kept_bytes_ += h.capacity;
          h.large_kept = true;
        } else {
          h.bytes.reset();
          h.capacity = 0;
        }
      }
      head_ = (head_ + 1) % options_.max_held;
      --count_;
    }
  }
  // Keeps `bytes` (part of a message of the current poll batch) past release(): a handle on
  // the inner endpoint's hold of that message, or null (the caller copies them) when the
  // message was copied into the hold queue or `bytes` are empty or not 8-byte aligned.
  // REQUIRES: a batch is outstanding and `bytes` lie within one of its completions.
  std::shared_ptr<const uint64_t[]> keep_received(std::span<const uint8_t> bytes) requires
      KeepingEndpoint<E> {
    if (bytes.empty() || reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0) return nullptr;
    for (size_t i = 0; i < delivered_; ++i) {  // bounded by the batch
      const Held& h = at(i);
      if (bytes.data() >= h.data && bytes.data() + bytes.size() <= h.data + h.size) {
        if (!h.kept) return nullptr;
        return {h.kept, reinterpret_cast<const uint64_t*>(bytes.data())};
      }
    }
    SHOAL_ASSERT(false, "%s", "keep_received() of bytes outside the delivered batch");
    return nullptr;
  }
  bool in_receive_ring(const void* p) const requires KeepingEndpoint<E> {
    return inner_.in_receive_ring(p);
  }
  // The inner endpoint's: the held messages are part of what its ring holds back.
  uint64_t receive_held_bytes() const requires KeepingEndpoint<E> {
    return inner_.receive_held_bytes();
  }
  uint64_t receive_ring_bytes() const requires KeepingEndpoint<E> {
    return inner_.receive_ring_bytes();
  }
  // Bytes of received messages copied into the hold queue so far (those the inner endpoint
  // did not keep).
  uint64_t copied_bytes() const { return copied_bytes_; }

  // Ok when a held completion is due (or a failure is ready to report); otherwise waits for
  // the inner endpoint or the next due time, whichever comes first.
  [[nodiscard]] Status wait(uint64_t timeout_ns) {
    const uint64_t deadline = env_->now_ns() + timeout_ns;
    for (;;) {  // bounded by the deadline
      SHOAL_TRY(ingest());
      const uint64_t now = env_->now_ns();
      if ((count_ > 0 && at(0).due_ns <= now) || (count_ == 0 && !deferred_.ok())) {
        return Status::Ok();
      }
      if (now >= deadline) return Status::Timeout("");
      uint64_t until = deadline;
      if (count_ > 0) until = std::min(until, at(0).due_ns);
      Status s = inner_.wait(until - now);
      if (!s.ok() && s.code() != Code::kTimeout) deferred_ = std::move(s);
    }
  }
  // Event-loop integration. False (do not block) when a held completion is due or a failure
  // is ready to report; otherwise the inner endpoint decides, and the loop also wakes at
  // next_due_ns() (its poller deadline) for completions still held. Caveat: while the hold
  // queue is full, or a dead peer's failure waits behind held completions, the inner fds stay
  // readable and a loop polls until the next completion is due (bounded by the delay).
  int wait_fd() const requires BlockableEndpoint<E> { return inner_.wait_fd(); }
  int liveness_fd() const requires BlockableEndpoint<E> { return inner_.liveness_fd(); }
  [[nodiscard]] bool prepare_to_block() requires BlockableEndpoint<E> {
    if (count_ == 0 && !deferred_.ok()) return false;
    if (count_ > 0 && at(0).due_ns <= env_->now_ns()) return false;
    return inner_.prepare_to_block();
  }
  void end_block() requires BlockableEndpoint<E> { inner_.end_block(); }
  // When the next held completion becomes due (UINT64_MAX: none held). An event loop must
  // poll at that time even without input: give it as the poller's deadline (RpcEndpoint
  // does), which is also what drives the shaper under virtual time.
  uint64_t next_due_ns() const { return count_ > 0 ? at(0).due_ns : UINT64_MAX; }
  size_t held_messages() const { return count_; }

 private:
  static constexpr size_t kKeepBytes = 64 * 1024;
  struct Held {
    uint64_t due_ns = 0;
    Completion::Kind kind = Completion::Kind::kRecv;
    uint32_t imm = 0;
    uint64_t epoch = 0;
    size_t size = 0;
    const uint8_t* data = nullptr;           // the message: where `kept` holds it, or in `bytes`
    std::shared_ptr<const uint64_t[]> kept;  // the inner endpoint's hold, or null: copied
    std::unique_ptr<uint8_t[]> bytes;        // `capacity` bytes, kept across uses (see release())
    size_t capacity = 0;
    bool large_kept = false;  // counted in large_kept_bytes_
  };
  Held& at(size_t i) { return held_[(head_ + i) % options_.max_held]; }
  const Held& at(size_t i) const { return held_[(head_ + i) % options_.max_held]; }

  // Moves everything the inner endpoint has (within the hold bounds) into the hold queue.
  // A failure of the inner endpoint is kept until the held completions are delivered.
  [[nodiscard]] Status ingest() {
    Completion batch[32];
    while (deferred_.ok() && count_ < options_.max_held &&
           held_bytes_ < options_.max_held_bytes) {  // bounded by the hold limits
      const size_t room = std::min<size_t>(32, options_.max_held - count_);
      auto n = inner_.poll(batch, room);
      if (!n.ok()) {
        deferred_ = n.status();
        break;
      }
      if (*n == 0) break;
      const uint64_t now = env_->now_ns();
      for (size_t i = 0; i < *n; ++i) hold(batch[i], now);
      inner_.release();
    }
    return Status::Ok();
  }
  void hold(const Completion& c, uint64_t now) {
    const uint64_t jitter = shape_.jitter_ns == 0 ? 0 : rng_.uniform(0, shape_.jitter_ns);
    last_due_ns_ = std::max(last_due_ns_, now + shape_.one_way_delay_ns + jitter);
    Held& h = at(count_++);
    h.due_ns = last_due_ns_;
    h.kind = c.kind;
    h.imm = c.imm;
    h.epoch = c.epoch;
    h.size = c.bytes.size();
    held_bytes_ += h.size;
    h.kept = keep_in_inner(c.bytes);
    if (h.kept) {
      h.data = c.bytes.data();
      return;
    }
    if (h.large_kept) {  // back in use: no longer a kept idle buffer
      large_kept_bytes_ -= h.capacity;
      h.large_kept = false;
    }
    if (h.capacity < h.size) {  // grows once per slot and size; not zero-filled
      h.bytes.reset(new uint8_t[h.size]);
      h.capacity = h.size;
    }
    if (h.size != 0) std::memcpy(h.bytes.get(), c.bytes.data(), h.size);
    h.data = h.bytes.get();
    copied_bytes_ += h.size;
  }
  // The inner endpoint's hold on a message of its current poll batch, or null.
  std::shared_ptr<const uint64_t[]> keep_in_inner(std::span<const uint8_t> bytes) {
    if constexpr (KeepingEndpoint<E>) {
      if (!bytes.empty()) return inner_.keep_received(bytes);
    }
    return nullptr;
  }

  E inner_;
  LinkShape shape_;
  Env* env_;
  Rng rng_;
  ShaperOptions options_;
  std::unique_ptr<Held[]> held_;
  size_t head_ = 0;
  size_t count_ = 0;
  size_t delivered_ = 0;
  size_t held_bytes_ = 0;
  size_t large_kept_bytes_ = 0;  // capacity of idle buffers above kKeepBytes kept for reuse
  uint64_t last_due_ns_ = 0;
  uint64_t copied_bytes_ = 0;
  Status deferred_;
};

}  // namespace shoal::net

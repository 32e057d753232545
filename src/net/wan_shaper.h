// WanShaped<E>: wraps any transport endpoint and delays what it receives by a one-way WAN
// delay plus jitter, since the kernel here has no netem. Give each side of a link the shape of
// the direction it receives (WanMatrix::between(sender's region, receiver's region)).
//
// Delay is applied on the receiving side: poll() drains the inner endpoint at once, copies
// each completion into a bounded hold queue stamped due = now + delay + jitter, and hands out
// only completions that are due. So, as on a real WAN, what a sender wrote before it died still
// arrives (its death is reported after the held completions), a stale one-sided write is
// refused by the inner transport when it is written, and per-link order is kept (due times
// never decrease, so jitter does not reorder; reordering is the simulator's job).
//
// Sends go straight to the inner endpoint. Time comes from an Env (RealEnv, or the simulator's
// virtual clock); jitter from an Rng seeded by it.
//
// Bounds: at most max_held completions and max_held_bytes held; beyond, the shaper stops
// draining the inner endpoint, whose own credit then pushes back on the sender. Memory: each
// hold slot keeps a buffer of up to 64 KiB, so steady small-message traffic allocates nothing
// after warm-up (larger messages allocate per message: a WAN emulator is not a hot path).
//
// Threads: owned by one thread, like the endpoint it wraps.
#pragma once

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "src/base/env.h"
#include "src/net/transport.h"

namespace shoal::net {

struct LinkShape {
  uint64_t one_way_delay_ns = 0;
  uint64_t jitter_ns = 0;  // uniform extra delay in [0, jitter_ns]
};

// One-way delays between regions. REQUIRES: region ids < regions().
class WanMatrix {
 public:
  explicit WanMatrix(size_t regions) : regions_(regions), shapes_(regions * regions) {}
  // Sets both directions between a and b.
  void set(size_t a, size_t b, LinkShape shape) {
    shapes_[a * regions_ + b] = shape;
    shapes_[b * regions_ + a] = shape;
  }
  LinkShape between(size_t from, size_t to) const { return shapes_[from * regions_ + to]; }
  size_t regions() const { return regions_; }

 private:
  size_t regions_;
  std::vector<LinkShape> shapes_;
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
      out[n++] = {h.kind, h.imm, h.epoch, {h.bytes.data(), h.size}};
    }
    delivered_ = n;
    if (n == 0 && count_ == 0 && !deferred_.ok()) return deferred_;
    return n;
  }
  void release() {
    for (; delivered_ > 0; --delivered_) {
      Held& h = at(0);
      held_bytes_ -= h.size;
      // Keep small buffers for reuse; give back large ones so max_held slots cannot each pin
      // a multi-megabyte message.
      if (h.bytes.capacity() > kKeepBytes) std::vector<uint8_t>().swap(h.bytes);
      head_ = (head_ + 1) % options_.max_held;
      --count_;
    }
  }
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
  // Event-loop integration: block on the inner fds only when nothing is held (a held
  // completion needs a timer, which the loop's own deadline handling provides: next_due_ns).
  int wait_fd() const requires BlockableEndpoint<E> { return inner_.wait_fd(); }
  int liveness_fd() const requires BlockableEndpoint<E> { return inner_.liveness_fd(); }
  [[nodiscard]] bool prepare_to_block() requires BlockableEndpoint<E> {
    return count_ == 0 && deferred_.ok() && inner_.prepare_to_block();
  }
  void end_block() requires BlockableEndpoint<E> { inner_.end_block(); }
  // When the next held completion becomes due (UINT64_MAX: none held).
  uint64_t next_due_ns() const { return count_ > 0 ? at(0).due_ns : UINT64_MAX; }

 private:
  static constexpr size_t kKeepBytes = 64 * 1024;
  struct Held {
    uint64_t due_ns = 0;
    Completion::Kind kind = Completion::Kind::kRecv;
    uint32_t imm = 0;
    uint64_t epoch = 0;
    size_t size = 0;
    std::vector<uint8_t> bytes;  // capacity kept across uses
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
    if (h.bytes.size() < h.size) h.bytes.resize(h.size);  // grows once per slot and size
    if (h.size != 0) std::memcpy(h.bytes.data(), c.bytes.data(), h.size);
    held_bytes_ += h.size;
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
  uint64_t last_due_ns_ = 0;
  Status deferred_;
};

}  // namespace shoal::net

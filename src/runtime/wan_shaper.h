// WanShaper<E>: wraps any net::TransportEndpoint and delays its outgoing traffic by a one-way
// WAN delay plus jitter, since the kernel here has no netem. It satisfies TransportEndpoint
// itself, so RPC and replication code run over it unchanged (and it nests: shaper over sim).
//
// Delays come from a WanMatrix (one-way delay and jitter per ordered region pair); a shaper
// sits on the link from `local_region` to `peer_region`. send()/write_with_imm() copy the
// message into a bounded hold queue stamped with due = now + delay + uniform(0, jitter),
// clamped so it never precedes the previous message's due time (the wrapped transport is
// ordered and stays so: jitter delays, never reorders). Held messages go to the inner
// endpoint when due, from flush(), poll() or wait(); wait() never sleeps past the next due
// time. next_due_ns() lets an EventLoop wake for it (RpcEndpoint registers it as its poller
// deadline), which is what makes it work under virtual time.
//
// Time comes from an Env (real or simulated). Threads: the owner of the inner endpoint.
// Allocation: one std::vector per held message (a WAN message is already ~ms away, so the
// allocation is noise; a pool is an easy later change). Bound: max_held_bytes; beyond it a
// send returns Timeout (like a transport out of credit) and the message is not taken.
#pragma once

#include <deque>
#include <vector>

#include "src/base/env.h"
#include "src/net/transport.h"

namespace shoal::rt {

struct WanLink {
  uint64_t one_way_ns = 0;
  uint64_t jitter_ns = 0;
};

// One-way delays between regions; symmetric by default via set_both().
class WanMatrix {
 public:
  explicit WanMatrix(uint32_t regions) : regions_(regions), links_(size_t{regions} * regions) {}
  uint32_t regions() const { return regions_; }
  void set(uint32_t from, uint32_t to, WanLink link) { links_[index(from, to)] = link; }
  void set_both(uint32_t a, uint32_t b, WanLink link) {
    set(a, b, link);
    set(b, a, link);
  }
  const WanLink& get(uint32_t from, uint32_t to) const { return links_[index(from, to)]; }

 private:
  size_t index(uint32_t from, uint32_t to) const {
    SHOAL_ASSERT(from < regions_ && to < regions_, "region pair (%u, %u) out of range", from, to);
    return size_t{from} * regions_ + to;
  }
  uint32_t regions_;
  std::vector<WanLink> links_;
};

template <net::TransportEndpoint E>
class WanShaper {
 public:
  WanShaper(E& inner, Env& env, const WanMatrix& matrix, uint32_t local_region,
            uint32_t peer_region, size_t max_held_bytes = size_t{64} << 20)
      : inner_(inner),
        env_(env),
        link_(matrix.get(local_region, peer_region)),
        rng_(env.seed()),
        max_held_bytes_(max_held_bytes) {}

  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes) {
    return hold(false, session, 0, bytes);
  }
  [[nodiscard]] Status write_with_imm(uint64_t epoch, uint32_t imm,
                                      std::span<const uint8_t> bytes) {
    return hold(true, imm, epoch, bytes);
  }
  [[nodiscard]] Status set_fence_epoch(uint64_t epoch) { return inner_.set_fence_epoch(epoch); }
  [[nodiscard]] Status flush() {
    SHOAL_TRY(pump());
    return inner_.flush();
  }
  [[nodiscard]] Result<size_t> poll(net::Completion* out, size_t max) {
    Status s = pump();
    if (!s.ok()) return s;
    return inner_.poll(out, max);
  }
  void release() { inner_.release(); }
  [[nodiscard]] Status wait(uint64_t timeout_ns) {
    SHOAL_TRY(pump());
    const uint64_t due = next_due_ns();
    if (due != UINT64_MAX) {
      const uint64_t now = env_.now_ns();
      timeout_ns = std::min(timeout_ns, due > now ? due - now : 0);
    }
    Status s = inner_.wait(timeout_ns);
    if (s.code() == Code::kTimeout && due != UINT64_MAX) return pump();  // woke to release
    return s;
  }
  [[nodiscard]] Status inject_raw_for_test(std::span<const uint8_t> bytes) {
    return inner_.inject_raw_for_test(bytes);
  }
  size_t max_message_bytes() const { return inner_.max_message_bytes(); }
  size_t max_write_bytes() const { return inner_.max_write_bytes(); }

  // When the oldest held message is due (UINT64_MAX: nothing held).
  uint64_t next_due_ns() const { return held_.empty() ? UINT64_MAX : held_.front().due_ns; }
  size_t held_messages() const { return held_.size(); }
  E& inner() { return inner_; }

 private:
  struct Held {
    uint64_t due_ns;
    bool write;
    uint32_t imm;
    uint64_t epoch;
    std::vector<uint8_t> bytes;
  };

  Status hold(bool write, uint32_t imm, uint64_t epoch, std::span<const uint8_t> bytes) {
    if (link_.one_way_ns == 0 && link_.jitter_ns == 0 && held_.empty()) {
      return write ? inner_.write_with_imm(epoch, imm, bytes) : inner_.send(imm, bytes);
    }
    if (held_bytes_ + bytes.size() > max_held_bytes_) {
      SHOAL_TRY(pump());
      if (held_bytes_ + bytes.size() > max_held_bytes_) {
        return Status::Timeout("wan shaper: hold queue full");
      }
    }
    const uint64_t jitter = link_.jitter_ns == 0 ? 0 : rng_.uniform(0, link_.jitter_ns);
    uint64_t due = env_.now_ns() + link_.one_way_ns + jitter;
    due = std::max(due, last_due_ns_);  // FIFO: jitter never reorders
    last_due_ns_ = due;
    held_.push_back({due, write, imm, epoch, std::vector<uint8_t>(bytes.begin(), bytes.end())});
    held_bytes_ += bytes.size();
    return Status::Ok();
  }

  // Hands every due message to the inner endpoint. Bounded by the hold queue's length.
  Status pump() {
    if (held_.empty()) return Status::Ok();
    const uint64_t now = env_.now_ns();
    while (!held_.empty() && held_.front().due_ns <= now) {
      Held& m = held_.front();
      Status s =
          m.write ? inner_.write_with_imm(m.epoch, m.imm, m.bytes) : inner_.send(m.imm, m.bytes);
      if (s.code() == Code::kTimeout) return Status::Ok();  // out of credit: retry next pump
      held_bytes_ -= m.bytes.size();
      held_.pop_front();
      if (!s.ok() && s.code() != Code::kAborted) return s;  // Aborted: a fenced write, dropped
    }
    return Status::Ok();
  }

  E& inner_;
  Env& env_;
  WanLink link_;
  Rng rng_;
  size_t max_held_bytes_;
  size_t held_bytes_ = 0;
  uint64_t last_due_ns_ = 0;
  std::deque<Held> held_;
};

}  // namespace shoal::rt

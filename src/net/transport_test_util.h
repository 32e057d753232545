// Helpers shared by the transport tests (conformance suite and per-transport tests): test
// payloads, ring regions on the heap, receiving one completion with a deadline, and forked
// peers. Test code only.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/base/assert.h"
#include "src/base/env.h"
#include "src/net/ring.h"
#include "src/net/transport.h"

namespace shoal::net::test_util {

inline constexpr uint64_t kSecondNs = 1'000'000'000;
// A forked echo peer stops when it receives a message on this session.
inline constexpr uint32_t kQuitSession = 0xfffffff0;

// A heap region holding one ring, 64-byte aligned.
struct RingRegion {
  explicit RingRegion(size_t data_bytes) : bytes(ring_region_bytes(data_bytes)) {
    mem = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
    ring_init({mem, bytes}, data_bytes);
  }
  ~RingRegion() { std::free(mem); }
  RingRegion(const RingRegion&) = delete;
  RingRegion& operator=(const RingRegion&) = delete;
  std::span<uint8_t> span() { return {mem, bytes}; }
  size_t bytes;
  uint8_t* mem;
};

inline std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// n pseudo-random bytes determined by seed, so a receiver can check what it got.
inline std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  Rng rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng.next();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

struct Received {
  Completion::Kind kind;
  uint32_t imm;
  uint64_t epoch;
  std::vector<uint8_t> bytes;
};

// Waits for one completion and copies it out (then releases it).
template <typename E>
Status recv_one(E& ep, Received* out, uint64_t timeout_ns = 10 * kSecondNs) {
  const uint64_t deadline = mono_ns() + timeout_ns;
  for (;;) {  // bounded by the deadline
    Completion c;
    auto n = ep.poll(&c, 1);
    if (!n.ok()) return n.status();
    if (*n == 1) {
      *out = {c.kind, c.imm, c.epoch, {c.bytes.begin(), c.bytes.end()}};
      ep.release();
      return Status::Ok();
    }
    const uint64_t now = mono_ns();
    if (now >= deadline) return Status::Timeout("recv_one");
    Status s = ep.wait(deadline - now);
    if (!s.ok() && s.code() != Code::kTimeout) return s;
  }
}

// Forks a child that runs fn(child_end) and exits with its return value. The parent's copy of
// the child's end is closed so that the child's death is visible.
template <typename E, typename Fn>
pid_t spawn_peer(E& child_end, Fn fn) {
  const pid_t pid = fork();
  SHOAL_CHECK(pid >= 0);
  if (pid == 0) _exit(fn(child_end));
  child_end.close();
  return pid;
}

// The child's exit code, or 128 + the signal that killed it.
inline int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

// A squatter of another user on a rendezvous name (the same-uid rule's tests): forks a child
// that becomes nobody (uid 65534), listens with `listen()` (a Result of a listener) and
// accepts once. Returns its pid once it listens, -1 when it could not. Its exit code: 0 when
// that accept failed (the dialer was refused or refused it), 1 when it got an endpoint.
// REQUIRES: root.
template <typename Listen>
pid_t fork_squatter_as_nobody(Listen listen) {
  constexpr uid_t kNobody = 65534;
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  SHOAL_CHECK(pid >= 0);
  if (pid == 0) {
    ::close(ready[0]);
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(99);
    auto l = listen();
    const char ok = l.ok() ? 1 : 0;
    if (write(ready[1], &ok, 1) != 1 || !l.ok()) _exit(98);
    _exit(l->accept(10'000).ok() ? 1 : 0);
  }
  ::close(ready[1]);
  char ok = 0;
  const bool listening = read(ready[0], &ok, 1) == 1 && ok == 1;
  ::close(ready[0]);
  if (!listening) {
    wait_child(pid);
    return -1;
  }
  return pid;
}

// A forked peer's body: echoes up to 100 messages (each with send()) until kQuitSession.
template <typename E>
int echo_until_quit(E& ep) {
  for (int i = 0; i < 100; ++i) {
    Received r;
    if (!recv_one(ep, &r).ok()) return 1;
    if (r.imm == kQuitSession) return 0;
    if (!ep.send(r.imm, r.bytes).ok()) return 2;
    if (!ep.flush().ok()) return 3;
  }
  return 4;
}

// Whether every byte is `fill`; for a kept region (keep_received), its first `size` bytes (a
// null region: false).
inline bool all_of(std::span<const uint8_t> bytes, uint8_t fill) {
  return std::all_of(bytes.begin(), bytes.end(), [fill](uint8_t b) { return b == fill; });
}
inline bool all_of(const std::shared_ptr<const uint64_t[]>& kept, size_t size, uint8_t fill) {
  return kept && all_of({reinterpret_cast<const uint8_t*>(kept.get()), size}, fill);
}

// Keeps one message of p.round(0x5a), closes both ends and ends the receiver's endpoint, then
// checks the kept bytes: true when they are intact (the last handle unmaps them on return).
// For a pair of a keeping endpoint type (see keep_every_round) whose messages are `size` bytes.
template <typename Pair>
bool kept_bytes_outlive_both_ends(Pair& p, size_t size) {
  std::shared_ptr<const uint64_t[]> kept = p.rx.keep_received(p.round(0x5a));
  if (!kept) return false;
  p.rx.release();
  p.tx.close();
  p.rx = decltype(p.rx)();
  return all_of(kept, size, 0x5a);
}

// Sends `rounds` messages through p.round(fill) (fill = the round's number) and asks
// p.rx.keep_received() to keep each where it arrived: the keeps go to `kept`. Returns the
// keeps refused, or -1 when a round received nothing. For a pair of a keeping endpoint type
// (shm, tcp) with round(uint8_t) -> the polled message's bytes.
template <typename Pair>
int keep_every_round(Pair& p, int rounds, std::vector<std::shared_ptr<const uint64_t[]>>* kept) {
  int refused = 0;
  for (int i = 0; i < rounds; ++i) {
    const std::span<const uint8_t> b = p.round(static_cast<uint8_t>(i));
    if (b.empty()) return -1;
    if (auto k = p.rx.keep_received(b)) {
      kept->push_back(std::move(k));
    } else {
      ++refused;
    }
    p.rx.release();
  }
  return refused;
}

}  // namespace shoal::net::test_util

// The environment: every source of nondeterminism the protocol code may touch.
//
// Protocol and engine code asks an Env for time and seeds instead of calling the OS, so the
// same code runs against the real machine (RealEnv) or inside the deterministic simulator,
// which implements Env with virtual time and a seeded generator. Env methods are thread-safe
// in RealEnv; a simulated Env is driven by one thread.
#pragma once

#include <cstdint>

namespace shoal {

class Env {
 public:
  virtual ~Env() = default;
  // Monotonic time in nanoseconds since an arbitrary origin.
  virtual uint64_t now_ns() = 0;
  // Wall-clock time in microseconds since the Unix epoch (for records such as TPC-C dates).
  virtual uint64_t wall_us() = 0;
  // Blocks (real) or advances virtual time (simulated).
  virtual void sleep_ns(uint64_t ns) = 0;
  // A fresh seed for a generator; deterministic under simulation.
  virtual uint64_t seed() = 0;
};

// The real machine: CLOCK_MONOTONIC, CLOCK_REALTIME, nanosleep, and seeds from a base seed
// (so a benchmark can be rerun with the same inputs) mixed with a counter.
class RealEnv final : public Env {
 public:
  explicit RealEnv(uint64_t base_seed = 0x5eed5eed);
  uint64_t now_ns() override;
  uint64_t wall_us() override;
  void sleep_ns(uint64_t ns) override;
  uint64_t seed() override;

  // Process-wide default instance.
  static RealEnv& instance();

 private:
  uint64_t base_seed_;
  uint64_t counter_ = 0;
};

// xoshiro256** seeded by splitmix64: fast, small state, good enough for workloads and tests.
// Not thread-safe: one per thread.
class Rng {
 public:
  explicit Rng(uint64_t seed) { reseed(seed); }
  void reseed(uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [lo, hi], inclusive. REQUIRES: lo <= hi.
  uint64_t uniform(uint64_t lo, uint64_t hi) {
    const uint64_t span = hi - lo + 1;
    if (span == 0) return next();  // full 64-bit range
    return lo + static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * span) >> 64);
  }
  // Uniform double in [0, 1).
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace shoal

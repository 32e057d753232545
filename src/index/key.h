// Fixed-width index keys: K 64-bit words compared lexicographically, word 0 first.
//
// Workloads pack their composite keys into words so that word order is the key order they
// need (TPC-C packs warehouse, district and order ids into one word). Fixed widths keep the
// index's comparisons to a few integer compares; four words (32 bytes) cover every key
// TPC-C, YCSB and the microbenchmark use.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shoal {

template <size_t K>
struct Key {
  static_assert(K >= 1 && K <= 8, "keys are 1 to 8 words");
  static constexpr size_t kWords = K;
  std::array<uint64_t, K> w{};

  friend constexpr bool operator==(const Key&, const Key&) = default;
  friend constexpr std::strong_ordering operator<=>(const Key& a, const Key& b) {
    for (size_t i = 0; i < K; ++i) {
      if (a.w[i] != b.w[i]) return a.w[i] < b.w[i] ? std::strong_ordering::less
                                                   : std::strong_ordering::greater;
    }
    return std::strong_ordering::equal;
  }
  static constexpr Key min() { return Key{}; }
  static constexpr Key max() {
    Key k;
    k.w.fill(~uint64_t{0});
    return k;
  }
};

using Key1 = Key<1>;

inline constexpr Key<1> key1(uint64_t a) { return Key<1>{{a}}; }

// Packs a string into big-endian words so that word order equals byte (memcmp) order.
// Strings longer than 8 * words are cut; shorter ones are padded with zero bytes.
inline void pack_string(const char* s, size_t len, uint64_t* words, size_t nwords) {
  for (size_t i = 0; i < nwords; ++i) {
    uint64_t v = 0;
    for (size_t b = 0; b < 8; ++b) {
      const size_t at = i * 8 + b;
      const uint8_t c = at < len ? static_cast<uint8_t>(s[at]) : 0;
      v = (v << 8) | c;
    }
    words[i] = v;
  }
}

}  // namespace shoal

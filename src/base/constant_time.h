// Comparing a secret (a password) with what a client sent, in time that does not depend on
// where they first differ, so that timing the answer does not reveal a correct prefix.
// Threads: a pure function.
#pragma once

#include <cstddef>
#include <string_view>

namespace shoal {

// True when `given` equals `expected`. Reads every byte of `given` whatever the outcome (its
// length is the caller's, so the time tells nothing about `expected` but, at most, its
// length's equality); the accumulator is volatile so that the compiler cannot stop early.
inline bool constant_time_equal(std::string_view expected, std::string_view given) {
  volatile unsigned diff = static_cast<unsigned>(expected.size() ^ given.size());
  for (size_t i = 0; i < given.size(); ++i) {
    // Past expected's end (the lengths differ, diff is already set) any byte will do.
    const char want = i < expected.size() ? expected[i] : '\0';
    diff = diff | (static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(want));
  }
  return diff == 0;
}

}  // namespace shoal

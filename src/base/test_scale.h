// How much work a test does: full in release runs, less under the sanitizers.
//
// scripts/run-tests.sh sets SHOAL_TEST_SCALE=small for the ASan+UBSan and TSan runs, where code
// runs 3x to 20x slower; tests that loop or draw many random operations scale their counts
// with these so that the sanitizer runs stay inside the test command's 25 minutes. Tests only.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace shoal {

inline bool test_scale_small() {
  const char* s = std::getenv("SHOAL_TEST_SCALE");
  return s != nullptr && std::string_view(s) == "small";
}

// `n` in full runs, n / divisor (at least 1) under SHOAL_TEST_SCALE=small.
inline int scaled(int n, int divisor = 10) {
  return test_scale_small() ? std::max(1, n / divisor) : n;
}

}  // namespace shoal

// Always-on assertions for broken invariants (also in release builds).
//
// An assert firing means the program's own state is wrong: continuing could corrupt data, so
// the process prints where and why and aborts. Expected failures (bad input, conflicts, dead
// peers) use shoal::Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace shoal::detail {
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
}  // namespace shoal::detail

#define SHOAL_ASSERT(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::shoal::detail::assert_fail(#cond, __FILE__, __LINE__, __VA_ARGS__);              \
  } while (0)

#define SHOAL_CHECK(cond) SHOAL_ASSERT(cond, "%s", "")

// Debug-only checks for hot loops, where an always-on check would cost measurable time.
#ifdef NDEBUG
#define SHOAL_DCHECK(cond) \
  do {                     \
  } while (0)
#else
#define SHOAL_DCHECK(cond) SHOAL_CHECK(cond)
#endif

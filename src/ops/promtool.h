// Runs `promtool check metrics` (Debian package prometheus) on exposition text: the tests'
// judge of what /metrics serves. Blocking, spawns a process: tests and tools only, never a
// server thread.
#pragma once

#include <string>
#include <string_view>

#include "shoal/status.h"

namespace shoal::ops {

// "" when promtool exits 0 and prints nothing (clean), else what it printed and its exit
// status. NotFound when promtool is not on PATH; IOError when it cannot be run.
[[nodiscard]] Result<std::string> promtool_check_metrics(std::string_view text);

}  // namespace shoal::ops

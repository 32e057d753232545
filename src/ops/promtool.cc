#include "src/ops/promtool.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace shoal::ops {

namespace {

// The first promtool on PATH; empty if none.
std::string find_promtool() {
  const char* path = std::getenv("PATH");
  std::string_view rest = path != nullptr ? path : "/usr/bin:/bin";
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    const std::string candidate = (dir.empty() ? "." : dir) + "/promtool";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

}  // namespace

Result<std::string> promtool_check_metrics(std::string_view text) {
  const std::string promtool = find_promtool();
  if (promtool.empty()) return Status::NotFound("promtool is not on PATH");
  const std::string file = (std::filesystem::temp_directory_path() /
                            fmt::format("shoal-metrics-{}-{}.txt", getpid(), std::rand()))
                               .string();
  {
    std::ofstream out(file, std::ios::binary);
    out << text;
    if (!out) return Status::IOError("cannot write " + file);
  }
  const std::string command = fmt::format("'{}' check metrics < '{}' 2>&1", promtool, file);
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    std::filesystem::remove(file);
    return Status::IOError("cannot run " + command);
  }
  std::string output;
  char buf[4096];
  size_t n;
  constexpr size_t kOutputMax = 1 << 20;  // promtool prints a line per problem
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
    if (output.size() < kOutputMax) output.append(buf, n);
  }
  const int status = pclose(p);
  std::filesystem::remove(file);
  if (status == 0 && output.empty()) return std::string();
  return fmt::format("{}(promtool exit status {})", output,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

}  // namespace shoal::ops

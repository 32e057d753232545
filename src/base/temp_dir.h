// TempDir: a fresh directory under the system's temporary directory (TMPDIR or /tmp), removed
// with everything in it when the TempDir goes. For tests and tools that need scratch files.
//
// Threads: one owner. The directory's name is "<prefix>-XXXXXX" (mkdtemp); creating it must
// succeed (asserted: a test cannot go on without it).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "src/base/assert.h"

namespace shoal {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "shoal-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    SHOAL_ASSERT(mkdtemp(tmpl.data()) != nullptr, "mkdtemp %s failed", tmpl.c_str());
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace shoal

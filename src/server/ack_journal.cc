#include "src/server/ack_journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace shoal::server {

AckJournal::~AckJournal() {
  if (fd_ < 0) return;
  flush();
  if (fd_ >= 0) ::close(fd_);
}

Status AckJournal::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError(fmt::format("ack journal {}: {}", path, std::strerror(errno)));
  fd_ = fd;
  path_ = path;
  held_.reserve(kBufferedMax);
  return Status::Ok();
}

void AckJournal::note(const OrderKey& order) {
  if (fd_ < 0) return;
  held_.push_back(order);
  if (held_.size() >= kBufferedMax) flush();
}

void AckJournal::flush() {
  if (fd_ < 0 || held_.empty()) return;
  static_assert(sizeof(OrderKey) == 12, "the journal's record");
  const auto* p = reinterpret_cast<const char*>(held_.data());
  size_t left = held_.size() * sizeof(OrderKey);
  while (left > 0) {  // bounded: each pass writes >= 1 byte or fails
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::fprintf(stderr, "ack journal %s: write failed (%s); journal closed\n", path_.c_str(),
                   std::strerror(errno));
      ::close(fd_);
      fd_ = -1;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  written_ += held_.size();
  held_.clear();
}

Result<std::vector<OrderKey>> read_ack_journal(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status::IOError(fmt::format("ack journal {}: {}", path, std::strerror(errno)));
  }
  std::vector<OrderKey> out;
  OrderKey k;
  // Bounded by the file's size; a partial last record (torn) ends the loop.
  while (std::fread(&k, sizeof k, 1, f) == 1) out.push_back(k);
  std::fclose(f);
  return out;
}

}  // namespace shoal::server

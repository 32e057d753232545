#include "src/net/socket_util.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "src/net/transport.h"

namespace shoal::net {

Status socket_errno_status(const char* transport, const char* what, int err) {
  if (err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ECONNABORTED) {
    return Status::Unavailable(
        fmt::format("{} peer gone ({}: {})", transport, what, std::strerror(err)));
  }
  return Status::IOError(fmt::format("{}: {}", what, std::strerror(err)));
}

Result<sockaddr_in> parse_ipv4(const std::string& host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument(fmt::format("'{}' is not an IPv4 address", host));
  }
  return addr;
}

Result<int> dial_tcp(const sockaddr_in& addr, uint64_t timeout_ms, const char* transport) {
  const uint64_t deadline = mono_ns() + timeout_ms * 1'000'000;
  const std::string what = fmt::format("{} connect", transport);
  for (;;) {  // bounded by the deadline
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return socket_errno_status(transport, "socket", errno);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    const int err = errno;
    ::close(fd);
    if (err != ECONNREFUSED || mono_ns() >= deadline) {
      return socket_errno_status(transport, what.c_str(), err);
    }
    usleep(1000);
  }
}

}  // namespace shoal::net

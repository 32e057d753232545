#include "src/net/socket_util.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "src/net/auth.h"
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

Result<int> dial_tcp_proven(const sockaddr_in& addr, uint64_t timeout_ms, const char* transport,
                            const std::string& peer) {
  auto fd = dial_tcp(addr, timeout_ms, transport);
  if (!fd.ok()) return fd.status();
  if (const std::string& secret = cluster_secret(); !secret.empty()) {
    const Status s = prove_to_acceptor(*fd, secret, peer, std::max(kAuthTimeoutMs, timeout_ms));
    if (!s.ok()) {
      ::close(*fd);
      return s;
    }
  }
  return fd;
}

sockaddr_un abstract_unix_address(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 2);
  std::memcpy(addr.sun_path + 1, name.data(), n);  // sun_path[0] == 0: abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return addr;
}

Status check_peer_uid(int sock, const char* transport, const char* side) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return socket_errno_status(transport, "SO_PEERCRED", errno);
  }
  if (cred.uid != geteuid()) {
    return Status::PermissionDenied(fmt::format(
        "{} {}: refused pid {} of uid {}: the transport connects processes of uid {} only",
        transport, side, cred.pid, cred.uid, geteuid()));
  }
  return Status::Ok();
}

}  // namespace shoal::net

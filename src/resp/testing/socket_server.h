// TestServer: a minimal TCP host for Connections, so real Redis clients (redis-cli, hiredis)
// can be pointed at the command layer in tests before the real network server exists. One
// thread, poll(), non-blocking sockets on 127.0.0.1 and an ephemeral port; every connection
// shares one backend. Tests only.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "src/resp/connection.h"

namespace shoal::resp::testing {

class TestServer {
 public:
  TestServer(KvBackend& backend, Env& env) : backend_(backend), env_(env) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    SHOAL_CHECK(listen_fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    SHOAL_CHECK(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    SHOAL_CHECK(listen(listen_fd_, 64) == 0);
    socklen_t len = sizeof(addr);
    SHOAL_CHECK(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~TestServer() {
    stop_.store(true);
    thread_.join();
    for (auto& c : clients_) close(c.fd);
    close(listen_fd_);
  }
  int port() const { return port_; }

 private:
  struct Client {
    int fd;
    std::unique_ptr<Connection> conn;
  };

  void run() {
    while (!stop_.load()) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      int timeout_ms = 20;
      for (auto& c : clients_) {
        if (c.conn->has_work()) timeout_ms = 0;
        const short events = static_cast<short>((c.conn->wants_input() ? POLLIN : 0) |
                                                (c.conn->pending_output_bytes() ? POLLOUT : 0));
        fds.push_back({c.fd, events, 0});
      }
      if (poll(fds.data(), fds.size(), timeout_ms) < 0) continue;
      if (fds[0].revents & POLLIN) accept_one();
      for (size_t i = 0; i < clients_.size() && i + 1 < fds.size(); ++i) {
        if (!serve(clients_[i], fds[i + 1].revents)) {
          close(clients_[i].fd);
          clients_[i].fd = -1;
        }
      }
      std::erase_if(clients_, [](const Client& c) { return c.fd < 0; });
    }
  }

  void accept_one() {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK);
    if (fd < 0) return;
    ConnectionOptions options;
    options.session.client_id = next_id_++;
    clients_.push_back({fd, std::make_unique<Connection>(backend_, env_, options)});
  }

  // Reads, executes and writes what it can; false when the connection is to be closed.
  bool serve(Client& c, short revents) {
    if (revents & POLLIN) {
      auto space = c.conn->input_space();
      const ssize_t n = recv(c.fd, space.data(), space.size(), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return false;
      c.conn->commit_input(n > 0 ? static_cast<size_t>(n) : 0);
    }
    c.conn->process();
    if (c.conn->must_close_now()) return false;
    const std::string_view out = c.conn->sendable();
    if (!out.empty()) {
      const ssize_t n = send(c.fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN) return false;
      if (n > 0) c.conn->consume_output(static_cast<size_t>(n));
    }
    return !(c.conn->should_close() && c.conn->pending_output_bytes() == 0);
  }

  KvBackend& backend_;
  Env& env_;
  int listen_fd_ = -1;
  int port_ = 0;
  uint64_t next_id_ = 1;
  std::atomic<bool> stop_{false};
  std::vector<Client> clients_;
  std::thread thread_;
};

}  // namespace shoal::resp::testing

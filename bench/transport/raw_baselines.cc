#include "bench/transport/raw_baselines.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/transport/two_process.h"
#include "src/net/transport.h"

namespace shoal::bench::transport {
namespace {

using net::mono_ns;

// Spins until ready() or kRawTimeoutNs pass; reads the clock once per 1024 spins only, so the
// poll itself stays as cheap as a bare load.
template <typename Ready>
bool spin_until(Ready ready) {
  uint64_t deadline = 0;
  for (uint32_t spins = 0; !ready(); ++spins) {  // bounded by the deadline
    net::cpu_relax();
    if ((spins & 1023) != 1023) continue;
    const uint64_t now = mono_ns();
    if (deadline == 0) deadline = now + kRawTimeoutNs;
    if (now >= deadline) return false;
  }
  return true;
}

// One direction: slots of 64 KiB; a message takes ceil(bytes / 64 KiB) slots, each published
// with one release store of tail (so a large message streams: the consumer copies chunk k while
// the producer writes chunk k+1).
struct RawChannel {
  static constexpr uint64_t kSlots = 16;
  static constexpr size_t kSlotBytes = 64 * 1024;
  alignas(64) std::atomic<uint64_t> tail{0};
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) uint8_t slots[kSlots][kSlotBytes];
};

struct RawRings {
  RawChannel to_server;
  RawChannel to_client;
};

class RawPort {
 public:
  RawPort(RawChannel* tx, RawChannel* rx) : tx_(tx), rx_(rx) {}

  bool send(const uint8_t* msg, size_t bytes) {
    for (size_t off = 0; off < bytes; off += RawChannel::kSlotBytes) {
      if (tail_ - head_cache_ >= RawChannel::kSlots) {
        const bool got_credit = spin_until([&] {
          head_cache_ = tx_->head.load(std::memory_order_acquire);
          return tail_ - head_cache_ < RawChannel::kSlots;
        });
        if (!got_credit) return false;
      }
      const size_t n = std::min(RawChannel::kSlotBytes, bytes - off);
      std::memcpy(tx_->slots[tail_ % RawChannel::kSlots], msg + off, n);
      tx_->tail.store(++tail_, std::memory_order_release);
    }
    return true;
  }

  bool recv(uint8_t* msg, size_t bytes) {
    for (size_t off = 0; off < bytes; off += RawChannel::kSlotBytes) {
      if (!spin_until([&] { return rx_->tail.load(std::memory_order_acquire) != head_; })) {
        return false;
      }
      const size_t n = std::min(RawChannel::kSlotBytes, bytes - off);
      std::memcpy(msg + off, rx_->slots[head_ % RawChannel::kSlots], n);
      rx_->head.store(++head_, std::memory_order_release);
    }
    return true;
  }

 private:
  RawChannel* tx_;
  RawChannel* rx_;
  uint64_t tail_ = 0, head_cache_ = 0, head_ = 0;
};

// Times `iterations` round trips with exchange(), which sends one message and waits for the
// echo; false from it fails the run.
template <typename Exchange>
Result<LatencyUs> time_round_trips(int iterations, Exchange exchange) {
  auto h = std::make_unique<Histogram>();
  for (int i = 0; i < iterations; ++i) {
    const uint64_t t0 = mono_ns();
    if (!exchange()) return Status::Timeout("raw baseline: the echoing peer stopped");
    if (i >= first_recorded(iterations)) h->record(mono_ns() - t0);
  }
  return latency_of(*h);
}

// ---- TCP

bool send_all(int fd, const uint8_t* buf, size_t bytes) {
  for (size_t sent = 0; sent < bytes;) {  // bounded: each pass sends or fails
    const ssize_t r = send(fd, buf + sent, bytes - sent, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    sent += static_cast<size_t>(r);
  }
  return true;
}

// Busy-polls recv(MSG_DONTWAIT) until `bytes` arrived; false on EOF, error or timeout.
bool recv_all_polling(int fd, uint8_t* buf, size_t bytes) {
  size_t got = 0;
  bool failed = false;
  const bool done = spin_until([&] {
    const ssize_t r = recv(fd, buf + got, bytes - got, MSG_DONTWAIT);
    if (r > 0) got += static_cast<size_t>(r);
    failed = r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR);
    return failed || got == bytes;
  });
  return done && !failed;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// A connected loopback pair with TCP_NODELAY on both ends.
Status tcp_loopback_pair(Fd* server, Fd* client) {
  Fd listener(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener.get() < 0 || bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      listen(listener.get(), 1) != 0) {
    return Status::IOError(fmt::format("raw tcp listen: {}", std::strerror(errno)));
  }
  client->reset(socket(AF_INET, SOCK_STREAM, 0));
  if (client->get() < 0 ||
      connect(client->get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::IOError(fmt::format("raw tcp connect: {}", std::strerror(errno)));
  }
  server->reset(accept(listener.get(), nullptr, nullptr));
  if (server->get() < 0) return Status::IOError("raw tcp accept failed");
  const int one = 1;
  for (int fd : {server->get(), client->get()}) {
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return Status::Ok();
}

}  // namespace

Result<LatencyUs> raw_shm_pingpong(size_t message_bytes, int iterations) {
  SHOAL_ASSERT(message_bytes > 0 && message_bytes <= kRawMaxMessageBytes, "%s", "message size");
  Shared<RawRings> rings;
  if (!rings.ok()) return Status::IOError("raw shm: cannot map shared memory");
  std::vector<uint8_t> msg(message_bytes, 1);
  Result<LatencyUs> result = LatencyUs{};
  Status run = run_two_processes(
      "raw shm ping-pong",
      [&] {
        RawPort port(&rings->to_client, &rings->to_server);
        for (int i = 0; i < iterations; ++i) {
          if (!port.recv(msg.data(), message_bytes) || !port.send(msg.data(), message_bytes)) {
            return 1;
          }
        }
        return 0;
      },
      [&] {
        RawPort port(&rings->to_server, &rings->to_client);
        result = time_round_trips(iterations, [&] {
          return port.send(msg.data(), message_bytes) && port.recv(msg.data(), message_bytes);
        });
        return result.status();
      });
  if (!run.ok()) return run;
  return result;
}

Result<LatencyUs> raw_tcp_pingpong(size_t message_bytes, int iterations) {
  SHOAL_ASSERT(message_bytes > 0 && message_bytes <= kRawMaxMessageBytes, "%s", "message size");
  Fd server, client;
  SHOAL_TRY(tcp_loopback_pair(&server, &client));
  std::vector<uint8_t> msg(message_bytes, 1);
  Result<LatencyUs> result = LatencyUs{};
  Status run = run_two_processes(
      "raw tcp ping-pong",
      [&] {
        client.reset();
        for (int i = 0; i < iterations; ++i) {
          if (!recv_all_polling(server.get(), msg.data(), message_bytes) ||
              !send_all(server.get(), msg.data(), message_bytes)) {
            return 1;
          }
        }
        return 0;
      },
      [&] {
        server.reset();
        result = time_round_trips(iterations, [&] {
          return send_all(client.get(), msg.data(), message_bytes) &&
                 recv_all_polling(client.get(), msg.data(), message_bytes);
        });
        client.reset();  // the child sees EOF if it is still waiting
        return result.status();
      });
  if (!run.ok()) return run;
  return result;
}

}  // namespace shoal::bench::transport

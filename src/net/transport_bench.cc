// Transport microbenchmarks, two processes (fork), each pinned to its own core when the
// machine has two or more. Every transport number is printed beside a raw baseline measured
// in the same run:
//   - 64 B ping-pong round trip p50/p99: shm transport vs a bare SPSC shared-memory ring;
//     tcp transport vs bare blocking TCP (and bare busy-polling TCP); uring transport in each
//     ring mode vs the tcp transport.
//   - pipelined 64 B messages per second over shm (one producer core, one consumer core) vs
//     the bare SPSC ring.
// Usage: net_bench [scale [pipelined]]   (scale multiplies the iteration counts; default 1;
//        "pipelined" runs only the throughput part)
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "src/base/histogram.h"
#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"
#include "src/net/uring_transport.h"

namespace shoal::net {
namespace {

constexpr size_t kMsgBytes = 64;

void pin_to(int cpu) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs child() in a forked process pinned to CPU 1 and parent() here on CPU 0.
template <typename Child, typename Parent>
void two_processes(Child child, Parent parent) {
  const pid_t pid = fork();
  SHOAL_CHECK(pid >= 0);
  if (pid == 0) {
    pin_to(1);
    _exit(child());
  }
  pin_to(0);
  parent();
  const int rc = wait_child(pid);
  SHOAL_ASSERT(rc == 0, "benchmark child failed with %d", rc);
}

void print_latency(const char* name, const Histogram& h) {
  std::printf("  %-34s p50 %8.2f us   p99 %8.2f us   (n=%llu)\n", name,
              static_cast<double>(h.percentile(50)) / 1e3,
              static_cast<double>(h.percentile(99)) / 1e3,
              static_cast<unsigned long long>(h.count()));
}

// ---- bare SPSC ring in shared memory: the floor for any shared-memory transport.

struct alignas(64) RawRing {
  static constexpr uint64_t kSlots = 4096;
  alignas(64) std::atomic<uint64_t> tail{0};
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) uint8_t slots[kSlots][kMsgBytes];
};

struct RawPort {  // one side's view: sends on tx, receives on rx
  RawRing* tx;
  RawRing* rx;
  uint64_t tx_tail = 0, tx_head_cache = 0, rx_head = 0;
  void send(const uint8_t* msg) {
    while (tx_tail - tx_head_cache >= RawRing::kSlots) {
      tx_head_cache = tx->head.load(std::memory_order_acquire);
    }
    std::memcpy(tx->slots[tx_tail % RawRing::kSlots], msg, kMsgBytes);
    tx->tail.store(++tx_tail, std::memory_order_release);
  }
  void recv(uint8_t* msg) {
    while (rx->tail.load(std::memory_order_acquire) == rx_head) cpu_relax();
    std::memcpy(msg, rx->slots[rx_head % RawRing::kSlots], kMsgBytes);
    rx->head.store(++rx_head, std::memory_order_release);
  }
};

RawRing* map_raw_rings() {
  void* p =
      mmap(nullptr, 2 * sizeof(RawRing), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  SHOAL_CHECK(p != MAP_FAILED);
  auto* rings = static_cast<RawRing*>(p);
  new (&rings[0]) RawRing();
  new (&rings[1]) RawRing();
  return rings;
}

void raw_spsc_pingpong(int iters, Histogram* h) {
  RawRing* rings = map_raw_rings();
  two_processes(
      [&] {
        RawPort port{&rings[1], &rings[0]};
        uint8_t msg[kMsgBytes];
        for (int i = 0; i < iters; ++i) {
          port.recv(msg);
          port.send(msg);
        }
        return 0;
      },
      [&] {
        RawPort port{&rings[0], &rings[1]};
        uint8_t msg[kMsgBytes] = {1};
        for (int i = 0; i < iters; ++i) {
          const uint64_t t0 = mono_ns();
          port.send(msg);
          port.recv(msg);
          if (i >= iters / 10) h->record(mono_ns() - t0);
        }
      });
  munmap(rings, 2 * sizeof(RawRing));
}

double raw_spsc_pipelined(uint64_t count) {
  RawRing* rings = map_raw_rings();
  auto* result_ns = reinterpret_cast<std::atomic<uint64_t>*>(rings[1].slots[0]);
  two_processes(
      [&] {
        RawPort port{&rings[1], &rings[0]};
        uint8_t msg[kMsgBytes];
        port.recv(msg);
        const uint64_t t0 = mono_ns();
        for (uint64_t i = 1; i < count; ++i) port.recv(msg);
        result_ns->store(mono_ns() - t0);
        return 0;
      },
      [&] {
        RawPort port{&rings[0], &rings[1]};
        uint8_t msg[kMsgBytes] = {1};
        for (uint64_t i = 0; i < count; ++i) port.send(msg);
      });
  const double rate = static_cast<double>(count - 1) * 1e9 / static_cast<double>(result_ns->load());
  munmap(rings, 2 * sizeof(RawRing));
  return rate;
}

// ---- Shoal transports.

template <typename E>
int echo(E& ep, int iters) {
  Completion c;
  for (int i = 0; i < iters;) {
    auto n = ep.poll(&c, 1);
    if (!n.ok()) return 1;
    if (*n == 0) {
      if (Status s = ep.wait(1'000'000'000); !s.ok() && s.code() != Code::kTimeout) return 2;
      continue;
    }
    // Echo straight from the receive ring into the send ring: one copy.
    if (!ep.send(c.imm, c.bytes).ok() || !ep.flush().ok()) return 3;
    ep.release();
    ++i;
  }
  return 0;
}

template <typename E>
void transport_pingpong(std::pair<E, E>& link, int iters, Histogram* h) {
  two_processes([&] { return echo(link.second, iters); },
                [&] {
                  link.second.close();
                  E& ep = link.first;
                  uint8_t msg[kMsgBytes] = {1};
                  Completion c;
                  for (int i = 0; i < iters; ++i) {
                    const uint64_t t0 = mono_ns();
                    SHOAL_CHECK(ep.send(7, msg).ok());
                    for (;;) {
                      auto n = ep.poll(&c, 1);
                      SHOAL_CHECK(n.ok());
                      if (*n == 1) break;
                      ep.wait(1'000'000'000).ignore();
                    }
                    ep.release();
                    if (i >= iters / 10) h->record(mono_ns() - t0);
                  }
                });
}

double shm_pipelined(uint64_t count, size_t ring_bytes) {
  EndpointOptions options;
  options.ring_bytes = ring_bytes;
  auto link = ShmEndpoint::pair(options);
  SHOAL_CHECK(link.ok());
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* result_ns = new (shared) std::atomic<uint64_t>(0);
  two_processes(
      [&] {
        ShmEndpoint& ep = link->second;
        Completion batch[64];
        uint64_t got = 0, t0 = 0;
        while (got < count) {  // bounded: the producer sends exactly count
          auto n = ep.poll(batch, 64);
          if (!n.ok()) return 1;
          if (*n == 0) {
            ep.wait(1'000'000'000).ignore();
            continue;
          }
          if (got == 0) t0 = mono_ns();
          got += *n;
          ep.release();
        }
        result_ns->store(mono_ns() - t0);
        return 0;
      },
      [&] {
        link->second.close();
        uint8_t msg[kMsgBytes] = {1};
        for (uint64_t i = 0; i < count; ++i) {
          SHOAL_CHECK(link->first.send(1, msg).ok());
          // An event loop flushes once per turn; here, once per 32 messages.
          if ((i & 31) == 31) SHOAL_CHECK(link->first.flush().ok());
        }
        SHOAL_CHECK(link->first.flush().ok());
      });
  const double rate = static_cast<double>(count) * 1e9 / static_cast<double>(result_ns->load());
  munmap(shared, 4096);
  return rate;
}

// ---- bare TCP baselines.

std::pair<int, int> raw_tcp_pair() {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  SHOAL_CHECK(bind(l, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  getsockname(l, reinterpret_cast<sockaddr*>(&addr), &len);
  SHOAL_CHECK(listen(l, 1) == 0);
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  SHOAL_CHECK(connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  const int s = accept(l, nullptr, nullptr);
  close(l);
  const int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return {s, c};
}

// Reads exactly n bytes; busy-polls with MSG_DONTWAIT when spin is set.
bool read_full(int fd, uint8_t* buf, size_t n, bool spin) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = recv(fd, buf + got, n - got, spin ? MSG_DONTWAIT : 0);
    if (r > 0) got += static_cast<size_t>(r);
    if (r == 0) return false;
    if (r < 0 && errno != EAGAIN && errno != EINTR) return false;
  }
  return true;
}

void raw_tcp_pingpong(int iters, bool spin, Histogram* h) {
  auto [s, c] = raw_tcp_pair();
  two_processes(
      [&] {
        close(c);
        uint8_t msg[kMsgBytes];
        for (int i = 0; i < iters; ++i) {
          if (!read_full(s, msg, kMsgBytes, spin)) return 1;
          if (send(s, msg, kMsgBytes, MSG_NOSIGNAL) != kMsgBytes) return 2;
        }
        return 0;
      },
      [&] {
        uint8_t msg[kMsgBytes] = {1};
        for (int i = 0; i < iters; ++i) {
          const uint64_t t0 = mono_ns();
          SHOAL_CHECK(send(c, msg, kMsgBytes, MSG_NOSIGNAL) == kMsgBytes);
          SHOAL_CHECK(read_full(c, msg, kMsgBytes, spin));
          if (i >= iters / 10) h->record(mono_ns() - t0);
        }
      });
  close(s);
  close(c);
}

// The uring transport in each ring mode, beside the tcp transport: a default ring pays an
// inter-processor interrupt per completion, which DEFER_TASKRUN avoids.
void run_uring_pingpong(int iters, double tcp_p50, Histogram* h) {
  std::string why;
  if (!UringEndpoint::supported(&why)) {
    std::printf("  uring transport: skipped (%s)\n", why.c_str());
    return;
  }
  for (UringMode mode : {UringMode::kDeferTaskrun, UringMode::kCoopTaskrun, UringMode::kDefault}) {
    UringOptions u;
    u.mode = mode;
    auto link = UringEndpoint::pair({}, u);
    if (!link.ok()) {
      std::printf("  uring %s: %s\n", uring_mode_name(mode), link.status().to_string().c_str());
      continue;
    }
    h->reset();
    transport_pingpong(*link, iters, h);
    const std::string name = std::string("uring transport, ") + uring_mode_name(mode);
    print_latency(name.c_str(), *h);
    std::printf("  ratio (p50): uring/tcp-transport %.2fx\n",
                static_cast<double>(h->percentile(50)) / tcp_p50);
  }
}

void run_pingpong(int scale) {
  const int shm_iters = 200'000 * scale;
  const int tcp_iters = 30'000 * scale;
  std::printf("64 B ping-pong round trip (2 processes, %ld online CPUs)\n",
              sysconf(_SC_NPROCESSORS_ONLN));
  auto h = std::make_unique<Histogram>();
  raw_spsc_pingpong(shm_iters, h.get());
  print_latency("raw SPSC shared-memory ring", *h);
  const double raw_shm_p50 = static_cast<double>(h->percentile(50));
  h->reset();
  {
    auto link = ShmEndpoint::pair();
    SHOAL_CHECK(link.ok());
    transport_pingpong(*link, shm_iters, h.get());
  }
  print_latency("shm transport", *h);
  const double shm_p50 = static_cast<double>(h->percentile(50));
  h->reset();
  raw_tcp_pingpong(tcp_iters, false, h.get());
  print_latency("raw TCP, blocking recv", *h);
  const double raw_tcp_p50 = static_cast<double>(h->percentile(50));
  h->reset();
  raw_tcp_pingpong(tcp_iters, true, h.get());
  print_latency("raw TCP, busy-polled recv", *h);
  const double raw_tcp_spin_p50 = static_cast<double>(h->percentile(50));
  h->reset();
  {
    auto link = TcpEndpoint::pair();
    SHOAL_CHECK(link.ok());
    transport_pingpong(*link, tcp_iters, h.get());
  }
  print_latency("tcp transport", *h);
  const double tcp_p50 = static_cast<double>(h->percentile(50));
  std::printf(
      "  ratios (p50): shm/raw-spsc %.2fx   tcp/raw-blocking %.2fx   tcp/raw-polled %.2fx\n",
      shm_p50 / raw_shm_p50, tcp_p50 / raw_tcp_p50, tcp_p50 / raw_tcp_spin_p50);
  run_uring_pingpong(tcp_iters, tcp_p50, h.get());
}

int run(int scale, bool pipelined_only) {
  const uint64_t pipe_count = 20'000'000ULL * static_cast<uint64_t>(scale);
  if (!pipelined_only) run_pingpong(scale);
  std::printf("pipelined 64 B messages, one producer core -> one consumer core\n");
  const double raw_rate = raw_spsc_pipelined(pipe_count);
  std::printf("  %-34s %8.2f M msgs/s\n", "raw SPSC shared-memory ring", raw_rate / 1e6);
  for (size_t ring_kib : {64, 256, 1024}) {
    const double shm_rate = shm_pipelined(pipe_count, ring_kib * 1024);
    std::printf("  shm transport, %4zu KiB ring         %8.2f M msgs/s\n", ring_kib,
                shm_rate / 1e6);
  }
  return 0;
}

}  // namespace
}  // namespace shoal::net

int main(int argc, char** argv) {
  const int scale = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  const bool pipelined_only = argc > 2 && std::string_view(argv[2]) == "pipelined";
  return shoal::net::run(scale, pipelined_only);
}

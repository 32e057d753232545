// io_uring transport ping-pong beside raw blocking TCP and tcp_transport, two processes (fork),
// each pinned to its own core when there are two. 64 B messages; p50/p99 of the round trip per
// run, then the median over the runs.
//
// This file is linked into net_bench, whose main() is transport_bench.cc's; it runs instead of
// that main when SHOAL_URING_BENCH is set (a constructor, so neither file has to know the
// other):   SHOAL_URING_BENCH=1 [SHOAL_URING_BENCH_RUNS=3] [SHOAL_URING_BENCH_ITERS=20000]
// net_bench
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "src/base/histogram.h"
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
  int status = 0;
  waitpid(pid, &status, 0);
  SHOAL_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "bench child failed (%d)", status);
}

struct Sample {
  double p50_us;
  double p99_us;
};

Sample sample_of(const Histogram& h) {
  return {static_cast<double>(h.percentile(50)) / 1e3, static_cast<double>(h.percentile(99)) / 1e3};
}

bool read_full(int fd, uint8_t* buf, size_t n) {
  size_t got = 0;
  while (got < n) {  // bounded by n (EOF ends it)
    const ssize_t r = recv(fd, buf + got, n - got, 0);
    if (r == 0) return false;
    if (r < 0 && errno != EINTR) return false;
    if (r > 0) got += static_cast<size_t>(r);
  }
  return true;
}

Sample raw_tcp_pingpong(int iters) {
  auto link = TcpEndpoint::pair();  // borrow nothing from it but a connected loopback pair
  SHOAL_CHECK(link.ok());
  const int s = dup(link->first.wait_fd()), c = dup(link->second.wait_fd());
  link->first.close();
  link->second.close();
  for (int fd : {s, c}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  auto h = std::make_unique<Histogram>();
  two_processes(
      [&] {
        uint8_t msg[kMsgBytes];
        for (int i = 0; i < iters; ++i) {
          if (!read_full(s, msg, kMsgBytes)) return 1;
          if (send(s, msg, kMsgBytes, MSG_NOSIGNAL) != kMsgBytes) return 2;
        }
        return 0;
      },
      [&] {
        uint8_t msg[kMsgBytes] = {1};
        for (int i = 0; i < iters; ++i) {
          const uint64_t t0 = mono_ns();
          SHOAL_CHECK(send(c, msg, kMsgBytes, MSG_NOSIGNAL) == kMsgBytes);
          SHOAL_CHECK(read_full(c, msg, kMsgBytes));
          if (i >= iters / 10) h->record(mono_ns() - t0);
        }
      });
  close(s);
  close(c);
  return sample_of(*h);
}

template <typename E>
int echo(E& ep, int iters) {
  Completion c;
  for (int i = 0; i < iters;) {  // bounded by iters (a dead peer ends it with an error)
    auto n = ep.poll(&c, 1);
    if (!n.ok()) return 1;
    if (*n == 0) {
      if (Status s = ep.wait(1'000'000'000); !s.ok() && s.code() != Code::kTimeout) return 2;
      continue;
    }
    if (!ep.send(c.imm, c.bytes).ok() || !ep.flush().ok()) return 3;
    ep.release();
    ++i;
  }
  return 0;
}

template <typename E>
Sample transport_pingpong(std::pair<E, E>& link, int iters) {
  auto h = std::make_unique<Histogram>();
  two_processes([&] { return echo(link.second, iters); },
                [&] {
                  link.second.close();
                  E& ep = link.first;
                  uint8_t msg[kMsgBytes] = {1};
                  Completion c;
                  for (int i = 0; i < iters; ++i) {
                    const uint64_t t0 = mono_ns();
                    SHOAL_CHECK(ep.send(7, msg).ok());
                    for (;;) {  // bounded: the echo comes or the peer's death fails poll
                      auto n = ep.poll(&c, 1);
                      SHOAL_CHECK(n.ok());
                      if (*n == 1) break;
                      ep.wait(1'000'000'000).ignore();
                    }
                    ep.release();
                    if (i >= iters / 10) h->record(mono_ns() - t0);
                  }
                });
  return sample_of(*h);
}

Sample uring_pingpong(UringMode mode, int iters) {
  UringOptions u;
  u.mode = mode;
  auto link = UringEndpoint::pair({}, u);
  SHOAL_CHECK(link.ok());
  return transport_pingpong(*link, iters);
}

Sample tcp_transport_pingpong(int iters) {
  auto link = TcpEndpoint::pair();
  SHOAL_CHECK(link.ok());
  return transport_pingpong(*link, iters);
}

void report(const char* name, std::vector<Sample>& runs) {
  std::printf("  %-30s", name);
  for (const Sample& s : runs) std::printf("  %6.2f/%6.2f", s.p50_us, s.p99_us);
  auto by = [&](auto field) {
    std::vector<double> v;
    for (const Sample& s : runs) v.push_back(s.*field);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("   median p50 %6.2f us  p99 %6.2f us\n", by(&Sample::p50_us), by(&Sample::p99_us));
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

int run_uring_bench() {
  const int runs = env_int("SHOAL_URING_BENCH_RUNS", 3);
  const int iters = env_int("SHOAL_URING_BENCH_ITERS", 20000);
  std::string why;
  if (!UringEndpoint::supported(&why)) {
    std::printf("io_uring unavailable: %s\n", why.c_str());
    return 0;
  }
  std::printf("64 B ping-pong round trip, 2 processes, %ld CPUs, %d iterations x %d runs\n",
              sysconf(_SC_NPROCESSORS_ONLN), iters, runs);
  std::printf("  %-30s  per run p50/p99 (us)\n", "");
  struct Case {
    const char* name;
    int kind;  // 0 raw tcp, 1 tcp_transport, 2 uring
    UringMode mode;
  };
  const Case cases[] = {{"raw TCP, blocking recv", 0, UringMode::kAuto},
                        {"tcp transport", 1, UringMode::kAuto},
                        {"uring, DEFER_TASKRUN", 2, UringMode::kDeferTaskrun},
                        {"uring, COOP_TASKRUN", 2, UringMode::kCoopTaskrun},
                        {"uring, default ring", 2, UringMode::kDefault}};
  std::vector<std::vector<Sample>> results(std::size(cases));
  for (int r = 0; r < runs; ++r) {  // interleave the cases so drift hits them all alike
    for (size_t i = 0; i < std::size(cases); ++i) {
      const Case& c = cases[i];
      results[i].push_back(c.kind == 0   ? raw_tcp_pingpong(iters)
                           : c.kind == 1 ? tcp_transport_pingpong(iters)
                                         : uring_pingpong(c.mode, iters));
    }
  }
  for (size_t i = 0; i < std::size(cases); ++i) report(cases[i].name, results[i]);
  return 0;
}

__attribute__((constructor)) void maybe_run_uring_bench() {
  if (std::getenv("SHOAL_URING_BENCH") == nullptr) return;
  std::fflush(stdout);
  const int rc = run_uring_bench();
  std::fflush(stdout);
  _exit(rc);
}

}  // namespace
}  // namespace shoal::net

// Round trips against a running `shoal server` (docs/RESULTS.md, "Client library"): a
// single-key get through the client library (BM_ClientGet/0: ClientOptions::spin_us 0, it
// sleeps in recv() at once; /50: the default bounded poll of 50 us first), the same key's GET
// through hiredis on the server's Redis port, and raw TCP ping-pongs of 64 bytes with an echo
// thread in this process and nothing else in the way: BM_TcpPingPong/0 both sides block in
// recv() (two loopback hops and two wake-ups), /50 both sides poll recv(MSG_DONTWAIT) for up to
// 50 us before blocking (what the library and the server's event loop do). Each iteration is
// one blocking round trip, so the time per iteration is the latency.
// BM_ClientGetPipelined/D: D single-key gets sent (send_get), then collected (receive_get), per
// iteration; items_per_second is gets/s. With SHOAL_BENCH_SERVER_PID set, it also reports the
// server process's CPU seconds over the measured run (utime + stime, all its threads, from
// /proc; 10 ms resolution) and gets per server CPU second.
//
//   SHOAL_BENCH_CLIENT_PORT=P SHOAL_BENCH_RESP_PORT=Q [SHOAL_BENCH_SERVER_PID=S]
//     build/release/client_bench        (one command line)
//
// The key is written once first (through the library). Without a port the benchmarks that
// need it are skipped.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "shoal/client.h"

#if defined(SHOAL_HAVE_HIREDIS)
#include <hiredis/hiredis.h>
#endif

namespace shoal {
namespace {

constexpr const char* kKey = "bench-key";

uint16_t port_from_env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : static_cast<uint16_t>(std::atoi(v));
}

uint64_t mono_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// CPU seconds (user + system, every thread) of process `pid` so far; -1 when unreadable.
double process_cpu_seconds(int pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return -1;
  unsigned long long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) !=
      2) {
    return -1;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

void BM_ClientGet(benchmark::State& state) {
  const uint16_t port = port_from_env("SHOAL_BENCH_CLIENT_PORT");
  if (port == 0) {
    state.SkipWithError("SHOAL_BENCH_CLIENT_PORT not set");
    return;
  }
  ClientOptions options;
  options.spin_us = static_cast<int>(state.range(0));
  auto c = Client::connect("127.0.0.1", port, options);
  if (!c.ok() || !(*c)->put(kKey, "value-of-16-byte").ok()) {
    state.SkipWithError("cannot reach the client port");
    return;
  }
  std::string v;
  for (auto _ : state) {
    if (!(*c)->get(kKey, &v).ok()) {
      state.SkipWithError("get failed");
      break;
    }
    benchmark::DoNotOptimize(v.data());
  }
}
BENCHMARK(BM_ClientGet)->Arg(0)->Arg(50)->UseRealTime();

void BM_ClientGetPipelined(benchmark::State& state) {
  const uint16_t port = port_from_env("SHOAL_BENCH_CLIENT_PORT");
  if (port == 0) {
    state.SkipWithError("SHOAL_BENCH_CLIENT_PORT not set");
    return;
  }
  auto c = Client::connect("127.0.0.1", port);
  if (!c.ok() || !(*c)->put(kKey, "value-of-16-byte").ok()) {
    state.SkipWithError("cannot reach the client port");
    return;
  }
  const auto depth = static_cast<uint32_t>(state.range(0));
  const int server_pid = std::getenv("SHOAL_BENCH_SERVER_PID") == nullptr
                             ? 0
                             : std::atoi(std::getenv("SHOAL_BENCH_SERVER_PID"));
  const double cpu_before = server_pid > 0 ? process_cpu_seconds(server_pid) : -1;
  std::string v;
  for (auto _ : state) {
    bool ok = true;
    for (uint32_t i = 0; i < depth && ok; ++i) ok = (*c)->send_get(kKey, Durability::kDurable).ok();
    for (uint32_t i = 0; i < depth && ok; ++i) ok = (*c)->receive_get(&v).ok();
    if (!ok) {
      state.SkipWithError("pipelined get failed");
      break;
    }
    benchmark::DoNotOptimize(v.data());
  }
  const double gets = static_cast<double>(state.iterations()) * depth;
  state.SetItemsProcessed(static_cast<int64_t>(gets));
  if (server_pid > 0 && cpu_before >= 0) {
    const double cpu = process_cpu_seconds(server_pid) - cpu_before;
    state.counters["server_cpu_s"] = cpu;
    if (cpu > 0) state.counters["gets_per_server_cpu_s"] = gets / cpu;
  }
}
BENCHMARK(BM_ClientGetPipelined)->Arg(16)->Arg(64)->Arg(256)->UseRealTime();

#if defined(SHOAL_HAVE_HIREDIS)
void BM_HiredisGet(benchmark::State& state) {
  const uint16_t port = port_from_env("SHOAL_BENCH_RESP_PORT");
  if (port == 0) {
    state.SkipWithError("SHOAL_BENCH_RESP_PORT not set");
    return;
  }
  redisContext* ctx = redisConnect("127.0.0.1", port);
  if (ctx == nullptr || ctx->err != 0) {
    state.SkipWithError("cannot reach the redis port");
    if (ctx != nullptr) redisFree(ctx);
    return;
  }
  for (auto _ : state) {
    auto* reply = static_cast<redisReply*>(redisCommand(ctx, "GET %s", kKey));
    if (reply == nullptr) {
      state.SkipWithError("GET failed");
      break;
    }
    freeReplyObject(reply);
  }
  redisFree(ctx);
}
BENCHMARK(BM_HiredisGet)->UseRealTime();
#endif

// Receives exactly n bytes: polls recv(MSG_DONTWAIT) for up to spin_ns first (as the library
// and the server's loop do), then blocks. False on EOF or an error.
bool recv_exact(int fd, char* buf, size_t n, uint64_t spin_ns) {
  const uint64_t start = spin_ns > 0 ? mono_ns() : 0;
  size_t got = 0;
  while (got < n) {
    const bool spinning = spin_ns > 0 && mono_ns() - start < spin_ns;
    const ssize_t r = recv(fd, buf + got, n - got, spinning ? MSG_DONTWAIT : MSG_WAITALL);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      return false;
    } else if (errno != EINTR && !(spinning && (errno == EAGAIN || errno == EWOULDBLOCK))) {
      return false;
    }
  }
  return true;
}

// An echo thread on a loopback socket: the raw round trip. Arg: both sides' spin in us.
void BM_TcpPingPong(benchmark::State& state) {
  const uint64_t spin_ns = static_cast<uint64_t>(state.range(0)) * 1000;
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    state.SkipWithError("cannot listen");
    close(listener);
    return;
  }
  std::thread echo([listener, spin_ns] {
    const int fd = accept(listener, nullptr, nullptr);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char buf[64];
    for (;;) {  // ends when the client closes
      if (!recv_exact(fd, buf, sizeof(buf), spin_ns) ||
          send(fd, buf, sizeof(buf), 0) != sizeof(buf)) {
        break;
      }
    }
    close(fd);
  });
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    state.SkipWithError("cannot connect");
  } else {
    char buf[64] = {};
    for (auto _ : state) {
      if (send(fd, buf, sizeof(buf), 0) != sizeof(buf) ||
          !recv_exact(fd, buf, sizeof(buf), spin_ns)) {
        state.SkipWithError("echo failed");
        break;
      }
    }
  }
  close(fd);
  echo.join();
  close(listener);
}
BENCHMARK(BM_TcpPingPong)->Arg(0)->Arg(50)->UseRealTime();

}  // namespace
}  // namespace shoal

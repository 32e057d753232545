// Round trips against a running `shoal server` (docs/RESULTS.md, "Client library"): a
// single-key get through the client library, the same key's GET through hiredis on the
// server's Redis port, and a raw TCP ping-pong of 64 bytes with an echo thread in this
// process (the floor: two loopback hops and two wake-ups). Each iteration is one blocking
// round trip, so the time per iteration is the latency.
//
//   SHOAL_BENCH_CLIENT_PORT=P SHOAL_BENCH_RESP_PORT=Q build/release/client_bench
//
// The key is written once first (through the library). Without a port the benchmarks that
// need it are skipped.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <cstdlib>
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

void BM_ClientGet(benchmark::State& state) {
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
  std::string v;
  for (auto _ : state) {
    if (!(*c)->get(kKey, &v).ok()) {
      state.SkipWithError("get failed");
      break;
    }
    benchmark::DoNotOptimize(v.data());
  }
}
BENCHMARK(BM_ClientGet)->UseRealTime();

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

// An echo thread on a loopback socket: the raw round trip.
void BM_TcpPingPong(benchmark::State& state) {
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
  std::thread echo([listener] {
    const int fd = accept(listener, nullptr, nullptr);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char buf[64];
    for (;;) {  // ends when the client closes
      ssize_t got = recv(fd, buf, sizeof(buf), MSG_WAITALL);
      if (got != sizeof(buf) || send(fd, buf, sizeof(buf), 0) != sizeof(buf)) break;
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
          recv(fd, buf, sizeof(buf), MSG_WAITALL) != sizeof(buf)) {
        state.SkipWithError("echo failed");
        break;
      }
    }
  }
  close(fd);
  echo.join();
  close(listener);
}
BENCHMARK(BM_TcpPingPong)->UseRealTime();

}  // namespace
}  // namespace shoal

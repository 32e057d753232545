// RpcEndpoint over the real transports (shm and tcp pairs in one process, both ends on one
// RealEnv loop): echo on many sessions, header codec, and peer death -> Unavailable.
#include "src/runtime/rpc.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"

namespace shoal::rt {
namespace {

constexpr uint16_t kEcho = 1;
constexpr uint16_t kHang = 2;

TEST(RpcHeader, RoundTripAndRejects) {
  uint8_t buf[kRpcHeaderBytes + 3] = {};
  RpcHeader h{RpcKind::kResponse, kRpcFlagRetransmit, 513, Code::kTimeout, 77, 3, 1ULL << 40};
  encode_rpc_header(h, buf);
  auto d = decode_rpc_header({buf, sizeof(buf)});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->kind, RpcKind::kResponse);
  EXPECT_EQ(d->method, 513);
  EXPECT_EQ(d->code, Code::kTimeout);
  EXPECT_EQ(d->session, 77u);
  EXPECT_EQ(d->rpc_id, 1ULL << 40);
  EXPECT_EQ(decode_rpc_header({buf, sizeof(buf) - 1}).status().code(), Code::kCorruption);
  buf[0] ^= 1;
  EXPECT_EQ(decode_rpc_header({buf, sizeof(buf)}).status().code(), Code::kCorruption);
}

template <typename E>
void echo_and_peer_death(E client_ep, E server_ep) {
  RealEnv env;
  EventLoop loop(env);
  RpcOptions o;
  o.timeout_ns = 5'000'000'000ULL;
  RpcEndpoint<E> client(loop, client_ep, o);
  auto server = std::make_unique<RpcEndpoint<E>>(loop, server_ep, o);
  ASSERT_TRUE(client.start().ok());
  ASSERT_TRUE(server->start().ok());
  server->handle(kEcho, [](RpcRequest& r) -> Task<Status> {
    r.response->assign(r.payload);
    co_return Status::Ok();
  });
  server->handle(kHang, [&loop](RpcRequest&) -> Task<Status> {
    (void)co_await loop.sleep_for(60'000'000'000ULL);
    co_return Status::Ok();
  });

  constexpr int kCalls = 4000;
  int ok = 0;
  const uint64_t t0 = env.now_ns();
  for (uint32_t s = 0; s < 8; ++s) {
    ASSERT_TRUE(loop.spawn([](RpcEndpoint<E>* rpc, uint32_t session, int n, int* ok,
                              EventLoop* loop, int total) -> Task<void> {
                      for (int i = 0; i < n; ++i) {
                        MsgBuffer b = rpc->buffer(64);
                        std::memset(b.payload().data(), i & 0xff, 64);
                        auto r = co_await rpc->call(session, kEcho, std::move(b));
                        if (r.ok() && r->size() == 64 && r->payload()[63] == (i & 0xff)) ++*ok;
                        if (r.ok()) rpc->recycle(std::move(*r));
                      }
                      if (*ok == total) loop->stop();
                    }(&client, s, kCalls / 8, &ok, &loop, kCalls))
                    .ok());
  }
  loop.run();
  const uint64_t elapsed = env.now_ns() - t0;
  ASSERT_EQ(ok, kCalls);
  std::printf(
      "  %d echo calls (64 B, 8 sessions, window 8, one loop serving both ends): %.2f us "
      "per call\n",
      kCalls, static_cast<double>(elapsed) / kCalls / 1000.0);

  // Peer death: calls outstanding at the server, then the server process "dies".
  std::vector<Status> got(4, Status::Ok());
  int finished = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(loop.spawn([](RpcEndpoint<E>* rpc, Status* s, int* fin, EventLoop* loop,
                              int total) -> Task<void> {
                      auto r = co_await rpc->call(1, kHang, rpc->buffer(8));
                      *s = r.status();
                      if (++*fin == total) loop->stop();
                    }(&client, &got[i], &finished, &loop, static_cast<int>(got.size())))
                    .ok());
  }
  std::pair<std::unique_ptr<RpcEndpoint<E>>*, E*> victim{&server, &server_ep};
  ASSERT_TRUE(loop.add_timer(
                      env.now_ns() + 20'000'000,
                      [](void* ctx, uint64_t) {
                        // The server's RPC state goes first, then its transport (the process
                        // dies).
                        auto* v =
                            static_cast<std::pair<std::unique_ptr<RpcEndpoint<E>>*, E*>*>(ctx);
                        v->first->reset();
                        v->second->close();
                      },
                      &victim)
                  .ok());
  const uint64_t t1 = env.now_ns();
  loop.run();
  for (const Status& s : got) EXPECT_EQ(s.code(), Code::kUnavailable) << s.to_string();
  std::printf("  peer death reported to %zu outstanding calls %.1f ms after the kill\n", got.size(),
              static_cast<double>(env.now_ns() - t1 - 20'000'000) / 1e6);
  EXPECT_EQ(client.outstanding(), 0u);
}

TEST(RpcReal, ShmEchoAndPeerDeath) {
  auto pair = net::ShmEndpoint::pair();
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  echo_and_peer_death(std::move(pair->first), std::move(pair->second));
}

TEST(RpcReal, TcpEchoAndPeerDeath) {
  auto pair = net::TcpEndpoint::pair();
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  echo_and_peer_death(std::move(pair->first), std::move(pair->second));
}

// A synchronous handler answers like a coroutine one, its errors cross the wire, and
// registering either kind for a method replaces the other.
TEST(RpcReal, SyncHandlersAnswerAndReplaceCoroutineOnes) {
  auto pair = net::ShmEndpoint::pair();
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  RealEnv env;
  EventLoop loop(env);
  RpcEndpoint<net::ShmEndpoint> client(loop, pair->first);
  RpcEndpoint<net::ShmEndpoint> server(loop, pair->second);
  ASSERT_TRUE(client.start().ok());
  ASSERT_TRUE(server.start().ok());
  int calls_seen = 0;
  server.handle(kEcho, [](RpcRequest&) -> Task<Status> { co_return Status::Aborted("old"); });
  server.handle_sync(
      kEcho,
      [](void* ctx, RpcRequest& r) {
        ++*static_cast<int*>(ctx);
        r.response->assign(r.payload);
        return Status::Ok();
      },
      &calls_seen);
  server.handle_sync(
      kHang, [](void*, RpcRequest&) { return Status::InvalidArgument("refused"); }, nullptr);
  Status echo, refused;
  size_t echoed = 0;
  ASSERT_TRUE(loop.spawn([](RpcEndpoint<net::ShmEndpoint>* rpc, Status* echo, size_t* echoed,
                            Status* refused, EventLoop* loop) -> Task<void> {
                    MsgBuffer b = rpc->buffer(5);
                    std::memset(b.payload().data(), 7, 5);
                    auto r = co_await rpc->call(0, kEcho, std::move(b));
                    *echo = r.status();
                    if (r.ok()) *echoed = r->size();
                    *refused = (co_await rpc->call(0, kHang, rpc->buffer(1))).status();
                    loop->stop();
                  }(&client, &echo, &echoed, &refused, &loop))
                  .ok());
  loop.run();
  EXPECT_TRUE(echo.ok()) << echo.to_string();
  EXPECT_EQ(echoed, 5u);
  EXPECT_EQ(calls_seen, 1);
  EXPECT_EQ(refused.code(), Code::kInvalidArgument) << refused.to_string();
}

}  // namespace
}  // namespace shoal::rt

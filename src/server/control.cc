#include "src/server/control.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/base/assert.h"
#include "src/base/env.h"
#include "src/base/json_field.h"
#include "src/net/tcp_transport.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"

namespace shoal::server {

using Rpc = rt::RpcEndpoint<net::TcpEndpoint>;
constexpr uint64_t kConnectTimeoutMs = 1000;

Result<nlohmann::json> parse_control(std::string_view text) {
  if (text.size() > kControlBytesMax) {
    return Status::InvalidArgument(fmt::format("control payload of {} bytes", text.size()));
  }
  if (text.empty()) return nlohmann::json::object();
  return parse_peer_json(text, "control payload");
}

struct ControlClient::LoopHolder {
  // Short spin: the command line waits for one reply at a time and must not steal a core
  // from the servers it controls.
  rt::EventLoop loop{RealEnv::instance(), rt::LoopOptions{.spin_ns = 0}};
};

struct ControlClient::Conn {
  net::TcpEndpoint tcp;
  std::unique_ptr<Rpc> rpc;
};

ControlClient::ControlClient(const cluster::ClusterConfig& config)
    : config_(config),
      loop_(std::make_unique<LoopHolder>()),
      conns_(config.shards.size()),
      leaders_(config.shards.size(), 0) {}

ControlClient::~ControlClient() {
  for (auto& c : conns_) c.reset();  // RPC endpoints before the loop
}

std::string ControlClient::address(uint32_t shard) const {
  const cluster::Replica& r = config_.shards[shard].replicas.at(leaders_[shard]);
  return fmt::format("{}:{}", r.host, r.port);
}

void ControlClient::disconnect(uint32_t shard) {
  if (shard < conns_.size()) conns_[shard].reset();
}

void ControlClient::set_leader(uint32_t shard, uint32_t replica) {
  SHOAL_ASSERT(shard < conns_.size() && replica < config_.shards[shard].replicas.size(),
               "set_leader(%u, %u)", shard, replica);
  conns_[shard].reset();
  leaders_[shard] = replica;
}

Status ControlClient::connect(uint32_t shard, uint64_t timeout_ms) {
  if (shard >= conns_.size()) {
    return Status::InvalidArgument(fmt::format("shard {} not in the config", shard));
  }
  if (conns_[shard] != nullptr) return Status::Ok();
  const cluster::Replica& r = config_.shards[shard].replicas.at(leaders_[shard]);
  auto tcp = net::TcpEndpoint::connect(r.host, r.port, {}, timeout_ms);
  if (!tcp.ok()) {
    return Status::Unavailable(fmt::format("shard {} at {} unreachable: {}", shard, address(shard),
                                           tcp.status().to_string()));
  }
  auto conn = std::make_unique<Conn>();
  conn->tcp = std::move(*tcp);
  rt::RpcOptions o;
  o.max_sessions = 2;
  conn->rpc = std::make_unique<Rpc>(loop_->loop, conn->tcp, o);
  SHOAL_TRY(conn->rpc->start());
  conns_[shard] = std::move(conn);
  return Status::Ok();
}

namespace {

rt::Task<void> call_task(Rpc* rpc, rt::EventLoop* loop, uint16_t method, std::string request,
                         uint64_t timeout_ns, Result<std::string>* out) {
  rt::MsgBuffer req = rpc->buffer(request.size());
  req.assign({reinterpret_cast<const uint8_t*>(request.data()), request.size()});
  auto reply = co_await rpc->call(0, method, std::move(req), timeout_ns);
  if (reply.ok()) {
    auto p = reply->payload();
    *out = std::string(reinterpret_cast<const char*>(p.data()), p.size());
    rpc->recycle(std::move(*reply));
  } else {
    *out = reply.status();
  }
  loop->stop();
}

}  // namespace

Result<nlohmann::json> ControlClient::call(uint32_t shard, ControlMethod method,
                                           const nlohmann::json& request, uint64_t timeout_ms) {
  // Connecting is bounded on its own: a shard that is gone refuses at once, and a long call
  // (a scan) must not turn into a long wait for a dead shard.
  SHOAL_TRY(connect(shard, std::min<uint64_t>(timeout_ms, kConnectTimeoutMs)));
  Rpc* rpc = conns_[shard]->rpc.get();
  Result<std::string> reply = Status::Timeout("not run");
  SHOAL_TRY(loop_->loop.spawn(
      call_task(rpc, &loop_->loop, method, request.dump(), timeout_ms * 1'000'000, &reply)));
  loop_->loop.run();  // until call_task stops it; the call itself is bounded by timeout_ms
  if (!reply.ok()) {
    const Status& s = reply.status();
    if (s.code() == Code::kUnavailable || s.code() == Code::kCorruption) {
      disconnect(shard);
      return Status::Unavailable(
          fmt::format("shard {} at {} unavailable: {}", shard, address(shard), s.to_string()));
    }
    if (s.code() == Code::kTimeout) {
      return Status::Timeout(
          fmt::format("shard {} at {}: no answer within {} ms", shard, address(shard), timeout_ms));
    }
    return status_from_code(s.code(), fmt::format("shard {}: {}", shard, s.message()));
  }
  return parse_control(*reply);
}

}  // namespace shoal::server

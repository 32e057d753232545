#include "bench/transport/transport.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string_view>

#include <fmt/format.h>

#include "bench/transport/raw_baselines.h"
#include "src/net/fabric_transport.h"
#include "src/net/shm_transport.h"
#include "src/net/tcp_transport.h"
#include "src/net/uring_transport.h"
#include "src/runtime/rpc_message.h"

namespace shoal::bench::transport {
namespace {

constexpr size_t kSizesBytes[] = {64, 64 * 1024, 1024 * 1024};
constexpr size_t kSmallBytes = 64;

// Large messages take longer per round trip; fewer of them keep each size's run short.
int iterations_for(size_t bytes, int base) {
  const int divisor = bytes <= kSmallBytes ? 1 : bytes <= 64 * 1024 ? 8 : 64;
  return std::max(kMinIterations, base / divisor);
}

// Enough callers to keep both cores busy with small calls; for large requests a few suffice
// (and bound the bytes in flight to a few MiB).
uint32_t outstanding_for(size_t bytes) {
  return bytes <= kSmallBytes ? 128 : bytes <= 64 * 1024 ? 8 : 4;
}

Status in_context(const Status& s, std::string_view transport, size_t bytes, const char* what) {
  return status_from_code(
      s.code(), fmt::format("{} {} {}: {}", transport, size_label(bytes), what, s.message()));
}

// Runs every size over one transport: raw ping-pong, RPC ping-pong, RPC pipelined, each on
// a fresh connection. MakeLink: () -> Result<pair<E, E>>; Raw: (bytes, iterations) ->
// Result<LatencyUs>.
template <net::TransportEndpoint E, typename MakeLink, typename Raw>
Status measure(TransportResult* out, const Options& o, MakeLink make_link, Raw raw) {
  for (size_t bytes : kSizesBytes) {
    if (o.progress != nullptr) {
      fmt::print(o.progress, "transport bench: {} {} ...\n", out->name, size_label(bytes));
    }
    SizeResult r;
    r.bytes = bytes;
    r.iterations = iterations_for(bytes, o.iterations);
    r.outstanding = outstanding_for(bytes);
    r.response_bytes = std::min(bytes, kAckBytes);
    auto raw_latency = raw(bytes, r.iterations);
    if (!raw_latency.ok()) return in_context(raw_latency.status(), out->name, bytes, "raw");
    r.raw = *raw_latency;
    auto link = make_link();
    if (!link.ok()) return in_context(link.status(), out->name, bytes, "connect");
    auto rpc_latency = rpc_pingpong(*link, bytes, r.iterations);
    if (!rpc_latency.ok()) return in_context(rpc_latency.status(), out->name, bytes, "ping-pong");
    r.rpc = *rpc_latency;
    auto pipe_link = make_link();
    if (!pipe_link.ok()) return in_context(pipe_link.status(), out->name, bytes, "connect");
    auto pipelined = rpc_pipelined(*pipe_link, bytes, o.pipelined_seconds, r.outstanding);
    if (!pipelined.ok()) return in_context(pipelined.status(), out->name, bytes, "pipelined");
    r.pipelined = *pipelined;
    out->sizes.push_back(r);
  }
  return Status::Ok();
}

Status run_one(const std::string& name, const Options& o, TransportResult* out) {
  out->name = name;
  out->raw_baseline = name == "shm" ? "spsc_shm_ring" : "tcp_busy_poll";
  if (name == "shm") {
    return measure<net::ShmEndpoint>(
        out, o, [] { return net::ShmEndpoint::pair(); }, raw_shm_pingpong);
  }
  if (name == "tcp") {
    return measure<net::TcpEndpoint>(
        out, o, [] { return net::TcpEndpoint::pair(); }, raw_tcp_pingpong);
  }
  std::string why;
  if (name == "fabric") {
    // The provider in the name: figures from net (TCP) and from shm are not comparable.
    out->provider = net::FabricEndpoint::provider_name();
    if (!net::FabricEndpoint::supported(&why)) {
      out->skipped = "no libfabric provider with FI_RMA works: " + why;
      return Status::Ok();
    }
    return measure<net::FabricEndpoint>(
        out, o, [] { return net::FabricEndpoint::pair(); }, raw_tcp_pingpong);
  }
  if (!net::UringEndpoint::supported(&why)) {
    out->skipped = "io_uring unavailable: " + why;
    return Status::Ok();
  }
  return measure<net::UringEndpoint>(
      out, o, [] { return net::UringEndpoint::pair(); }, raw_tcp_pingpong);
}

Status validate(const Options& o) {
  if (o.transports.empty()) return Status::InvalidArgument("no transport selected");
  for (const std::string& t : o.transports) {
    if (std::find(std::begin(kTransportNames), std::end(kTransportNames), t) ==
        std::end(kTransportNames)) {
      return Status::InvalidArgument(fmt::format("unknown transport '{}'", t));
    }
  }
  if (o.iterations < kMinIterations || o.iterations > kMaxIterations) {
    return Status::InvalidArgument(fmt::format("iterations must be in [{}, {}], not {}",
                                               kMinIterations, kMaxIterations, o.iterations));
  }
  if (!(o.pipelined_seconds > 0)) return Status::InvalidArgument("seconds must be > 0");
  return Status::Ok();
}

Status write_json(const Report& report, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Status::IOError("cannot write JSON to " + path);
  out << report.to_json().dump(2) << "\n";
  if (!out) return Status::IOError("error writing JSON to " + path);
  return Status::Ok();
}

}  // namespace

std::string size_label(size_t bytes) {
  if (bytes >= (1u << 20)) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

Result<Report> run(const Options& options) {
  SHOAL_TRY(validate(options));
  if (!options.json_path.empty()) {  // fail before minutes of measuring, not after
    std::FILE* f = std::fopen(options.json_path.c_str(), "a");
    if (f == nullptr) return Status::IOError("cannot write JSON to " + options.json_path);
    std::fclose(f);
  }
  Report report;
  report.options = options;
  for (const std::string& name : options.transports) {
    TransportResult t;
    SHOAL_TRY(run_one(name, options, &t));
    report.transports.push_back(std::move(t));
  }
  if (!options.json_path.empty()) SHOAL_TRY(write_json(report, options.json_path));
  return report;
}

}  // namespace shoal::bench::transport

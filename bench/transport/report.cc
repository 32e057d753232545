// Report formatting for `shoal bench transport` (transport.h): the JSON document and the table.
#include <unistd.h>

#include <fmt/format.h>

#include "bench/transport/transport.h"

namespace shoal::bench::transport {
namespace {

constexpr double kShmTargetRatio = 2.0;
constexpr double kTcpTargetRatio = 1.25;
constexpr double kShmTargetRpcsPerSec = 2e6;
constexpr int kCoresUsed = 2;  // one client core, one server core

nlohmann::json latency_json(const LatencyUs& l) {
  return {{"p50_us", l.p50_us}, {"p99_us", l.p99_us}, {"samples", l.samples}};
}

nlohmann::json pipelined_json(const SizeResult& s) {
  const double rate = s.pipelined.rpcs_per_sec;
  return {{"rpcs_per_sec_per_core", rate},
          {"rpcs_per_sec", rate},
          {"cores", kCoresUsed},
          {"request_bytes", s.bytes},
          {"response_bytes", s.response_bytes},
          {"outstanding", s.outstanding},
          {"measured_rpcs", s.pipelined.measured_rpcs},
          {"measured_seconds", s.pipelined.measured_seconds},
          {"request_mbytes_per_sec", rate * static_cast<double>(s.bytes) / 1e6}};
}

nlohmann::json size_json(const SizeResult& s) {
  return {{"bytes", s.bytes},
          {"rpc", latency_json(s.rpc)},
          {"raw", latency_json(s.raw)},
          {"p50_ratio", s.p50_ratio()},
          {"pipelined", pipelined_json(s)}};
}

// {"raw_baseline", "rpc", "raw", "p50_ratio", "pipelined" (64 B), "large": {"65536": ...}}
nlohmann::json transport_json(const TransportResult& t) {
  nlohmann::json j;
  if (!t.provider.empty()) j["provider"] = t.provider;
  if (!t.skipped.empty()) {
    j["skipped"] = t.skipped;
    return j;
  }
  j["raw_baseline"] = t.raw_baseline;
  nlohmann::json large = nlohmann::json::object();
  for (const SizeResult& s : t.sizes) {
    if (s.bytes == t.sizes.front().bytes) {
      j.update(size_json(s));
    } else {
      large[std::to_string(s.bytes)] = size_json(s);
    }
  }
  j["large"] = std::move(large);
  return j;
}

const TransportResult* find(const std::vector<TransportResult>& ts, const std::string& name) {
  for (const TransportResult& t : ts) {
    if (t.name == name && t.skipped.empty() && !t.sizes.empty()) return &t;
  }
  return nullptr;
}

struct Target {
  std::string what;
  std::string value;
  bool met;
};

// The three targets, for the transports that ran.
std::vector<Target> targets(const std::vector<TransportResult>& ts) {
  std::vector<Target> out;
  if (const TransportResult* shm = find(ts, "shm")) {
    const SizeResult& s = shm->sizes.front();
    out.push_back({fmt::format("shm rpc p50 within {:.2g}x raw SPSC ring", kShmTargetRatio),
                   fmt::format("{:.2f}x", s.p50_ratio()), s.p50_ratio() <= kShmTargetRatio});
    out.push_back({"pipelined 64 B rpcs over shm >= 2 M/s/core",
                   fmt::format("{:.2f} M/s", s.pipelined.rpcs_per_sec / 1e6),
                   s.pipelined.rpcs_per_sec >= kShmTargetRpcsPerSec});
  }
  if (const TransportResult* tcp = find(ts, "tcp")) {
    const SizeResult& s = tcp->sizes.front();
    out.push_back({fmt::format("tcp rpc p50 within {:.3g}x raw busy-polled TCP", kTcpTargetRatio),
                   fmt::format("{:.2f}x", s.p50_ratio()), s.p50_ratio() <= kTcpTargetRatio});
  }
  return out;
}

std::string rate_text(double per_sec) {
  if (per_sec >= 1e6) return fmt::format("{:.2f} M", per_sec / 1e6);
  return fmt::format("{:.1f} k", per_sec / 1e3);
}

}  // namespace

nlohmann::json Report::to_json() const {
  nlohmann::json j;
  j["benchmark"] = "transport";
  j["transport"] = options.transports.size() == 1 ? options.transports.front() : "all";
  j["iterations"] = options.iterations;
  j["pipelined_seconds"] = options.pipelined_seconds;
  j["online_cpus"] = sysconf(_SC_NPROCESSORS_ONLN);
  for (const TransportResult& t : transports) j[t.name] = transport_json(t);
  // The top level carries the default transport's numbers (tcp), or the only one selected.
  const std::string top =
      options.transports.size() == 1 ? options.transports.front() : std::string(kDefaultTransport);
  if (const TransportResult* t = find(transports, top)) {
    j.update(transport_json(*t));
    j["top_level_transport"] = top;
  }
  nlohmann::json goals = nlohmann::json::array();
  for (const Target& g : targets(transports)) {
    goals.push_back({{"target", g.what}, {"measured", g.value}, {"met", g.met}});
  }
  j["targets"] = std::move(goals);
  return j;
}

std::string Report::to_table() const {
  std::string out = fmt::format(
      "RPCs through RpcEndpoint: server process on CPU 1, client on CPU 0 ({} CPUs online)\n"
      "raw = the same ping-pong without Shoal: shm vs a bare SPSC shared-memory ring, tcp, "
      "uring and fabric vs bare busy-polled TCP\n"
      "pipelined = one client core against one server core; request of <size>, 64 B reply\n\n",
      sysconf(_SC_NPROCESSORS_ONLN));
  out += fmt::format("{:<9} {:>7} {:>19} {:>19} {:>8} {:>16} {:>9}\n", "transport", "size",
                     "rpc p50/p99 us", "raw p50/p99 us", "ratio", "pipelined rpcs/s", "MB/s");
  for (const TransportResult& t : transports) {
    if (!t.skipped.empty()) {
      out += fmt::format("{:<9} skipped: {}\n", t.name, t.skipped);
      continue;
    }
    for (const SizeResult& s : t.sizes) {
      const double mbytes = s.pipelined.rpcs_per_sec * static_cast<double>(s.bytes) / 1e6;
      out += fmt::format(
          "{:<9} {:>7} {:>9.2f}/{:<9.2f} {:>9.2f}/{:<9.2f} {:>7.2f}x {:>14}/s {:>9.0f}\n", t.name,
          size_label(s.bytes), s.rpc.p50_us, s.rpc.p99_us, s.raw.p50_us, s.raw.p99_us,
          s.p50_ratio(), rate_text(s.pipelined.rpcs_per_sec), mbytes);
    }
  }
  for (const TransportResult& t : transports) {
    if (!t.provider.empty()) out += fmt::format("{}: libfabric provider {}\n", t.name, t.provider);
  }
  const std::vector<Target> goals = targets(transports);
  if (!goals.empty()) out += "\ntargets (64 B):\n";
  for (const Target& g : goals) {
    out += fmt::format("  {:<48} {:>10}  {}\n", g.what, g.value, g.met ? "met" : "NOT met");
  }
  return out;
}

}  // namespace shoal::bench::transport

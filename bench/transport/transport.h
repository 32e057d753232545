// `shoal bench transport`: RPC latency and throughput over each transport, each beside a raw
// baseline measured in the same run (issue 3, item 6).
//
// For every selected transport (shm, tcp, uring, fabric) and message size (64 B, 64 KiB, 1 MiB):
//   - ping-pong: round-trip p50/p99 of echo RPCs through rt::RpcEndpoint (rpc_runs.h), next to
//     the same ping-pong without Shoal (raw_baselines.h): a bare SPSC shared-memory ring for
//     shm, a bare busy-polled TCP connection for tcp, uring and fabric (whose provider,
//     net by default, runs over loopback TCP; the provider is in TransportResult::name).
//   - pipelined: RPCs per second with many calls outstanding (128 callers for 64 B, fewer for
//     large requests, which are answered with a 64 B ack).
// Server: a forked child on CPU 1; client: this process on CPU 0. "Per core" follows
// docs/TRANSPORTS.md: the rate one client core sustains against one server core (each side is
// one core); the JSON also gives `cores` (2) so a per-CPU figure is one division away.
//
// Errors: InvalidArgument (options), IOError (JSON path not writable, checked before running;
// fork/socket failures), or the first failed run's Status. A transport this machine cannot run
// (io_uring disabled, no libfabric provider with FI_RMA) is reported as skipped, with the
// reason, not as an error.
// Threads: call from a process with no other threads (the runs fork()).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/transport/latency.h"
#include "bench/transport/rpc_runs.h"
#include "shoal/status.h"

namespace shoal::bench::transport {

inline const char* const kTransportNames[] = {"shm", "tcp", "uring", "fabric"};
inline constexpr const char* kDefaultTransport = "tcp";  // whose numbers go to the JSON top level

struct Options {
  std::vector<std::string> transports;  // each one of kTransportNames, no duplicates
  int iterations = 20'000;              // 64 B round trips; 64 KiB: 1/8 of it, 1 MiB: 1/64
  double pipelined_seconds = 1;         // per transport and size; > 0
  std::string json_path;                // empty: no JSON
  std::FILE* progress = stderr;         // one line per run; nullptr: silent
};

inline constexpr int kMinIterations = 10;
inline constexpr int kMaxIterations = 100'000'000;

struct SizeResult {
  size_t bytes = 0;
  int iterations = 0;
  LatencyUs rpc;
  LatencyUs raw;
  uint32_t outstanding = 0;   // pipelined callers
  size_t response_bytes = 0;  // pipelined response size
  PipelinedResult pipelined;
  double p50_ratio() const { return raw.p50_us > 0 ? rpc.p50_us / raw.p50_us : 0; }
};

struct TransportResult {
  std::string name;
  std::string raw_baseline;       // "spsc_shm_ring" or "tcp_busy_poll"
  std::string skipped;            // non-empty: why this transport did not run
  std::string provider;           // fabric: the libfabric provider measured
  std::vector<SizeResult> sizes;  // 64 B first
};

struct Report {
  Options options;
  std::vector<TransportResult> transports;
  nlohmann::json to_json() const;
  std::string to_table() const;
};

[[nodiscard]] Result<Report> run(const Options& options);

// "64 B", "64 KiB", "1 MiB".
std::string size_label(size_t bytes);

}  // namespace shoal::bench::transport

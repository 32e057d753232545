// MetricsHttp: serves GET /metrics (Prometheus text format) over HTTP on one address, with
// libmicrohttpd (Debian libmicrohttpd-dev) doing the HTTP.
//
// Bounds: at most kConnectionsMax connections at once (more are refused by the library),
// kTimeoutS of idle time per connection, kConnectionMemoryBytes of request buffer each (a
// larger request header gets an error); requests carry no body we read. Other paths are 404,
// other methods 405.
//
// Threads: libmicrohttpd's one internal polling thread accepts, parses and calls `render`, so
// `render` runs on that thread, one scrape at a time, and must only read what other threads
// publish (atomics, snapshots under short locks): a scrape never waits for a worker.
// start()/the destructor on one controlling thread; the destructor stops the thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shoal/status.h"

struct MHD_Daemon;

namespace shoal::ops {

class MetricsHttp {
 public:
  static constexpr unsigned kConnectionsMax = 16;
  static constexpr unsigned kTimeoutS = 10;
  static constexpr size_t kConnectionMemoryBytes = 32 * 1024;

  using RenderFn = std::function<std::string()>;

  // Listens on host:port (host a numeric IPv4 address or a name resolving to one; port 0:
  // any free port, see port()). IOError naming the address when it cannot bind.
  // REQUIRES: render is set.
  [[nodiscard]] static Result<std::unique_ptr<MetricsHttp>> start(const std::string& host,
                                                                  uint16_t port, RenderFn render);
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  uint16_t port() const { return port_; }
  // Scrapes served so far (any thread; the polling thread writes).
  uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }

 private:
  explicit MetricsHttp(RenderFn render) : render_(std::move(render)) {}
  struct Handler;
  RenderFn render_;
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
  std::atomic<uint64_t> scrapes_{0};  // the polling thread adds
};

}  // namespace shoal::ops

// EtcdConfigManager: the ConfigManager contract (src/cluster/config_manager.h) over a real
// etcd 3.4 cluster, through its v3 JSON gateway (POST /v3/kv/range, /v3/kv/put,
// /v3/kv/deleterange, /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke on
// the client URL; keys and values base64; int64 fields as JSON strings, fields at their
// default value (false, 0, "") left out), sent by HttpClient (libcurl, src/cluster/http_client.h).
//
// Endpoints and failover: calls go to the endpoint that answered last; on a transport failure
// the next one is tried, all within one deadline of timeout_ms per call. Reads and lease
// calls fail over on any transport failure; a write only when it certainly was not sent (the
// connection was refused): a write that may have been applied is not sent again elsewhere
// (a txn would then report losing its own compare), it returns Unavailable ("outcome
// unknown") and the caller re-reads. When no endpoint answers: Unavailable naming each
// endpoint and what went wrong there. Errors etcd itself returns (gRPC codes) become NotFound
// (code 5, e.g. an unknown lease), InvalidArgument (3), Timeout (4), Unavailable (14), else
// IOError, with etcd's message; a reply that is not the JSON expected is Corruption.
//
// Leases: etcd grants whole seconds and at least its minimum TTL (1.5 x the election timeout,
// so 2 s at etcd's defaults); grant_lease rounds ttl_ms up and returns what was granted.
// wait_for_change polls get() every poll_interval_ms.
//
// Threads: any; calls serialize on one mutex and one keep-alive connection. Threads that must
// not wait for each other (a race test, independent components) use one instance each.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "src/cluster/config_manager.h"
#include "src/cluster/http_client.h"

namespace shoal::cluster {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "host:port" of client URLs (http)
  uint64_t timeout_ms = 1000;          // per call, all endpoints together
  uint64_t poll_interval_ms = 10;      // wait_for_change
};

class EtcdConfigManager final : public ConfigManager {
 public:
  // InvalidArgument for no endpoints, an endpoint that is not host:port, or a zero timeout.
  // Does not contact etcd (the first call does).
  [[nodiscard]] static Result<std::unique_ptr<EtcdConfigManager>> create(EtcdOptions options);

  Result<std::optional<Versioned>> get(std::string_view key) override;
  Result<std::vector<KeyValue>> range(std::string_view prefix) override;
  Result<int64_t> put(std::string_view key, std::string_view value, int64_t lease = 0) override;
  Result<bool> remove(std::string_view key) override;
  Result<TxnResult> txn(const std::vector<TxnCompare>& compares,
                        const std::vector<TxnPut>& puts) override;
  Result<Lease> grant_lease(uint64_t ttl_ms) override;
  Status keep_alive(int64_t lease) override;
  Status revoke(int64_t lease) override;

  const EtcdOptions& options() const { return options_; }

 protected:
  Env& env() override { return RealEnv::instance(); }
  uint64_t poll_interval_ms() const override { return options_.poll_interval_ms; }

 private:
  explicit EtcdConfigManager(EtcdOptions options) : options_(std::move(options)) {}
  // POSTs `request` to `path` ("/v3/kv/range") with failover; returns the JSON object an HTTP
  // 200 carried, or the Status above. `idempotent`: may be resent to another endpoint after
  // any transport failure.
  Result<nlohmann::json> call(const char* path, const nlohmann::json& request, bool idempotent);

  const EtcdOptions options_;
  std::mutex mu_;
  HttpClient http_;     // guarded by mu_
  size_t current_ = 0;  // guarded by mu_: the endpoint tried first
};

// Base64 (RFC 4648, with padding), as the gateway carries bytes. Decoding returns false on a
// character outside the alphabet or a bad length.
std::string base64_encode(std::string_view bytes);
bool base64_decode(std::string_view text, std::string* bytes);

}  // namespace shoal::cluster

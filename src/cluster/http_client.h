// HttpClient: blocking HTTP/1.1 requests to a cluster service (etcd's JSON gateway), every one
// bounded by a deadline.
//
// libcurl rather than a socket client of our own: it keeps the connection alive between
// requests and reconnects when the server restarted, decodes chunked replies (etcd's gateway
// streams some), and bounds connect and transfer time (CURLOPT_TIMEOUT_MS) without signals
// (CURLOPT_NOSIGNAL). Cold path only: configuration changes, not transactions.
//
// Threads: one HttpClient per thread at a time (a libcurl easy handle is not thread-safe);
// callers serialize (EtcdConfigManager holds a mutex around it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shoal/status.h"

namespace shoal::cluster {

struct HttpResponse {
  long status = 0;  // NOLINT(runtime/int): libcurl's type
  std::string body;
};

// What went wrong before a response arrived.
struct HttpFailure {
  std::string what;  // libcurl's description
  // True when the request certainly did not reach the server (no connection was made), so a
  // write may be sent to another server without risk of applying it twice.
  bool not_sent = false;
};

class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // POSTs `body` (JSON) to `url` ("http://127.0.0.1:2379/v3/kv/range"), or GETs it when body
  // is empty and get is set. Waits at most timeout_ms in all. On a transport failure returns
  // false and fills *failure; a response with any HTTP status is true.
  // REQUIRES: timeout_ms > 0.
  bool request(const std::string& url, std::string_view body, bool get, uint64_t timeout_ms,
               HttpResponse* response, HttpFailure* failure);

 private:
  void* curl_;  // CURL*
};

}  // namespace shoal::cluster

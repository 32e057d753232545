#include "src/ops/metrics_http.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include "src/base/assert.h"

namespace shoal::ops {

namespace {

constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

MHD_Result reply(MHD_Connection* connection, unsigned code, std::string_view body,
                 const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: the library closes the connection
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  const MHD_Result r = MHD_queue_response(connection, code, response);
  MHD_destroy_response(response);
  return r;
}

// host as an IPv4 address (numeric, or the first IPv4 address the name resolves to).
Result<in_addr> resolve_ipv4(const std::string& host) {
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return a;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status::IOError(fmt::format("metrics: cannot resolve host '{}': {}", host,
                                       rc != 0 ? gai_strerror(rc) : "no IPv4 address"));
  }
  a = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return a;
}

}  // namespace

struct MetricsHttp::Handler {
  static MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url,
                               const char* method, const char* /*version*/,
                               const char* /*upload_data*/, size_t* upload_data_size,
                               void** /*con_cls*/) {
    auto* self = static_cast<MetricsHttp*>(cls);
    if (*upload_data_size != 0) {
      *upload_data_size = 0;  // a body we do not read: dropped, the reply below follows it
      return MHD_YES;
    }
    const std::string_view m = method;
    if (m != MHD_HTTP_METHOD_GET && m != MHD_HTTP_METHOD_HEAD) {
      return reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n", "text/plain");
    }
    if (std::string_view(url) != "/metrics") {
      return reply(connection, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n", "text/plain");
    }
    const std::string text = self->render_();
    self->scrapes_.fetch_add(1, std::memory_order_relaxed);
    return reply(connection, MHD_HTTP_OK, text, kContentType);
  }
};

Result<std::unique_ptr<MetricsHttp>> MetricsHttp::start(const std::string& host, uint16_t port,
                                                        RenderFn render) {
  SHOAL_CHECK(render != nullptr);
  auto addr = resolve_ipv4(host);
  if (!addr.ok()) return addr.status();
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr = *addr;
  std::unique_ptr<MetricsHttp> self(new MetricsHttp(std::move(render)));
  // One internal thread polls every connection (poll/epoll, not select: no FD_SETSIZE limit);
  // the port is bound only to the configured address.
  self->daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, nullptr, nullptr, &Handler::on_request,
      self.get(), MHD_OPTION_SOCK_ADDR, reinterpret_cast<const sockaddr*>(&sa),
      MHD_OPTION_CONNECTION_LIMIT, kConnectionsMax, MHD_OPTION_CONNECTION_TIMEOUT, kTimeoutS,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemoryBytes, MHD_OPTION_END);
  if (self->daemon_ == nullptr) {
    return Status::IOError(fmt::format("metrics: cannot listen on {}:{} (in use?)", host, port));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(self->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  self->port_ = info != nullptr ? info->port : port;
  return self;
}

MetricsHttp::~MetricsHttp() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace shoal::ops

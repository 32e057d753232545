#include "src/cluster/http_client.h"

#include <curl/curl.h>

#include <mutex>

namespace shoal::cluster {
namespace {

size_t append_body(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

}  // namespace

HttpClient::HttpClient() {
  static std::once_flag global_init;
  std::call_once(global_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  SHOAL_ASSERT(curl_ != nullptr, "curl_easy_init failed");
}

HttpClient::~HttpClient() {
  curl_easy_cleanup(static_cast<CURL*>(curl_));
}

bool HttpClient::request(const std::string& url, std::string_view body, bool get,
                         uint64_t timeout_ms, HttpResponse* response, HttpFailure* failure) {
  SHOAL_ASSERT(timeout_ms > 0, "HttpClient::request: timeout_ms must be > 0");
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);  // keeps the connection cache
  response->status = 0;
  response->body.clear();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_ms));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &response->body);
  curl_easy_setopt(c, CURLOPT_PROXY, "");  // never through an http_proxy from the environment
  curl_slist* headers = nullptr;
  if (!get) {
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    failure->what = curl_easy_strerror(rc);
    // A timeout may have hit after the request went out (on a reused connection libcurl does
    // not tell), so only a refused or unresolvable connection counts as not sent.
    failure->not_sent = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST;
    return false;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response->status);
  return true;
}

}  // namespace shoal::cluster

#include "src/cluster/etcd_config_manager.h"

#include <charconv>
#include <nlohmann/json.hpp>

namespace shoal::cluster {
namespace {

using nlohmann::json;

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// An int64 field of a reply: a JSON string (proto3's mapping) or a number; absent is 0.
bool read_int64(const json& obj, const char* field, int64_t* out) {
  *out = 0;
  auto it = obj.find(field);
  if (it == obj.end()) return true;
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return true;
  }
  if (!it->is_string()) return false;
  const std::string& s = it->get_ref<const std::string&>();
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// A bytes field (base64); absent is empty.
bool read_bytes(const json& obj, const char* field, std::string* out) {
  out->clear();
  auto it = obj.find(field);
  if (it == obj.end()) return true;
  return it->is_string() && base64_decode(it->get_ref<const std::string&>(), out);
}

Status bad_reply(const char* path, std::string_view what) {
  return Status::Corruption(std::string("etcd ") + path +
                            ": unexpected reply: " + std::string(what));
}

Result<json> parse_reply(const char* path, const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad_reply(path, "not a JSON object");
  return j;
}

// The store revision of a reply's header.
Result<int64_t> header_revision(const char* path, const json& reply) {
  auto h = reply.find("header");
  int64_t revision = 0;
  if (h == reply.end() || !h->is_object() || !read_int64(*h, "revision", &revision)) {
    return bad_reply(path, "no header.revision");
  }
  return revision;
}

// The "kvs" of a RangeResponse.
Status read_kvs(const char* path, const json& range_reply, std::vector<KeyValue>* out) {
  auto kvs = range_reply.find("kvs");
  if (kvs == range_reply.end()) return Status::Ok();
  if (!kvs->is_array()) return bad_reply(path, "kvs is not an array");
  for (const json& kv : *kvs) {
    KeyValue item;
    if (!kv.is_object() || !read_bytes(kv, "key", &item.key) ||
        !read_bytes(kv, "value", &item.versioned.value) ||
        !read_int64(kv, "mod_revision", &item.versioned.mod_revision) ||
        !read_int64(kv, "lease", &item.versioned.lease)) {
      return bad_reply(path, "malformed key-value");
    }
    out->push_back(std::move(item));
  }
  return Status::Ok();
}

// The one key a single-key RangeResponse holds, or nullopt.
Result<std::optional<Versioned>> single_key(const char* path, const json& range_reply) {
  std::vector<KeyValue> kvs;
  SHOAL_TRY(read_kvs(path, range_reply, &kvs));
  if (kvs.size() > 1) return bad_reply(path, "several keys for one");
  if (kvs.empty()) return std::optional<Versioned>();
  return std::optional<Versioned>(std::move(kvs[0].versioned));
}

// etcd's gRPC status (in an error reply body) as ours.
Status etcd_error(const std::string& endpoint, const char* path, long http_status,
                  const std::string& body) {
  json j = json::parse(body, nullptr, false);
  int64_t code = -1;
  std::string message = "HTTP " + std::to_string(http_status);
  if (!j.is_discarded() && j.is_object()) {
    auto c = j.find("code");
    if (c != j.end() && c->is_number_integer()) code = c->get<int64_t>();
    auto m = j.find("message");
    if (m != j.end() && m->is_string()) message = m->get<std::string>();
  }
  std::string text = "etcd " + endpoint + path + ": " + message;
  switch (code) {
    case 3:
      return Status::InvalidArgument(std::move(text));
    case 4:
      return Status::Timeout(std::move(text));
    case 5:
      return Status::NotFound(std::move(text));
    case 14:
      return Status::Unavailable(std::move(text));
    default:
      return Status::IOError(std::move(text));
  }
}

json range_request(std::string_view key) {
  return json{{"key", base64_encode(key)}};
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t n = (uint32_t(uint8_t(bytes[i])) << 16) |
                       (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    out += kBase64[n >> 18];
    out += kBase64[(n >> 12) & 63];
    out += kBase64[(n >> 6) & 63];
    out += kBase64[n & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) n |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kBase64[n >> 18];
    out += kBase64[(n >> 12) & 63];
    out += rest == 2 ? kBase64[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string* bytes) {
  bytes->clear();
  if (text.size() % 4 != 0) return false;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return false;  // "x=y=": padding in the middle
    uint32_t n = 0;
    for (int k = 0; k < 4 - pad; ++k) {
      const int v = base64_value(text[i + k]);
      if (v < 0) return false;
      n |= uint32_t(v) << (18 - 6 * k);
    }
    bytes->push_back(char(n >> 16));
    if (pad < 2) bytes->push_back(char((n >> 8) & 0xff));
    if (pad < 1) bytes->push_back(char(n & 0xff));
  }
  return true;
}

Result<std::unique_ptr<EtcdConfigManager>> EtcdConfigManager::create(EtcdOptions options) {
  if (options.endpoints.empty()) return Status::InvalidArgument("etcd: no endpoints");
  for (const std::string& e : options.endpoints) {
    const size_t colon = e.rfind(':');
    uint32_t port = 0;
    const char* digits = e.data() + colon + 1;
    const auto [end, ec] = colon == std::string::npos
                               ? std::from_chars_result{digits, std::errc::invalid_argument}
                               : std::from_chars(digits, e.data() + e.size(), port);
    if (colon == 0 || ec != std::errc() || end != e.data() + e.size() || port == 0 ||
        port > 65535) {
      return Status::InvalidArgument("etcd endpoint '" + e + "' is not host:port");
    }
  }
  if (options.timeout_ms == 0) return Status::InvalidArgument("etcd: timeout_ms must be > 0");
  if (options.poll_interval_ms == 0) {
    return Status::InvalidArgument("etcd: poll_interval_ms must be > 0");
  }
  return std::unique_ptr<EtcdConfigManager>(new EtcdConfigManager(std::move(options)));
}

Result<json> EtcdConfigManager::call(const char* path, const json& request, bool idempotent) {
  const std::string body = request.dump();
  std::lock_guard lock(mu_);
  Env& clock = RealEnv::instance();
  const uint64_t deadline_ns = clock.now_ns() + options_.timeout_ms * 1'000'000ULL;
  const size_t n = options_.endpoints.size();
  std::string failures;
  for (size_t attempt = 0; attempt < n; ++attempt) {
    const size_t idx = (current_ + attempt) % n;
    const std::string& endpoint = options_.endpoints[idx];
    const uint64_t now_ns = clock.now_ns();
    if (!failures.empty()) failures += "; ";
    if (now_ns >= deadline_ns) {
      failures += endpoint + ": not tried, " + std::to_string(options_.timeout_ms) + " ms passed";
      continue;
    }
    const uint64_t remaining_ms = (deadline_ns - now_ns + 999'999) / 1'000'000;
    HttpResponse response;
    HttpFailure failure;
    if (!http_.request("http://" + endpoint + path, body, /*get=*/false, remaining_ms, &response,
                       &failure)) {
      failures += endpoint + ": " + failure.what;
      if (!idempotent && !failure.not_sent) {
        return Status::Unavailable("etcd " + failures + " (" + path +
                                   " may or may not have been applied)");
      }
      continue;
    }
    current_ = idx;
    if (response.status != 200) return etcd_error(endpoint, path, response.status, response.body);
    return parse_reply(path, response.body);
  }
  return Status::Unavailable("etcd unreachable: " + failures);
}

Result<std::optional<Versioned>> EtcdConfigManager::get(std::string_view key) {
  static constexpr const char* kPath = "/v3/kv/range";
  auto reply = call(kPath, range_request(key), true);
  if (!reply.ok()) return reply.status();
  return single_key(kPath, *reply);
}

Result<std::vector<KeyValue>> EtcdConfigManager::range(std::string_view prefix) {
  static constexpr const char* kPath = "/v3/kv/range";
  SHOAL_ASSERT(!prefix.empty(), "range: empty prefix");
  json request = range_request(prefix);
  const std::string end = prefix_range_end(prefix);
  request["range_end"] = base64_encode(end.empty() ? std::string_view("\0", 1) : end);
  auto reply = call(kPath, request, true);
  if (!reply.ok()) return reply.status();
  std::vector<KeyValue> out;
  SHOAL_TRY(read_kvs(kPath, *reply, &out));
  return out;
}

Result<int64_t> EtcdConfigManager::put(std::string_view key, std::string_view value,
                                       int64_t lease) {
  static constexpr const char* kPath = "/v3/kv/put";
  json request{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) request["lease"] = std::to_string(lease);
  auto reply = call(kPath, request, false);
  if (!reply.ok()) return reply.status();
  return header_revision(kPath, *reply);
}

Result<bool> EtcdConfigManager::remove(std::string_view key) {
  static constexpr const char* kPath = "/v3/kv/deleterange";
  auto reply = call(kPath, range_request(key), false);
  if (!reply.ok()) return reply.status();
  int64_t deleted = 0;
  if (!read_int64(*reply, "deleted", &deleted)) return bad_reply(kPath, "deleted");
  return deleted > 0;
}

Result<TxnResult> EtcdConfigManager::txn(const std::vector<TxnCompare>& compares,
                                         const std::vector<TxnPut>& puts) {
  static constexpr const char* kPath = "/v3/kv/txn";
  json compare = json::array();
  json failure = json::array();
  for (const TxnCompare& c : compares) {
    // A missing key's mod_revision compares as 0 in etcd, as in our contract.
    compare.push_back({{"key", base64_encode(c.key)},
                       {"target", "MOD"},
                       {"result", "EQUAL"},
                       {"mod_revision", std::to_string(c.expected_mod_revision)}});
    failure.push_back({{"request_range", range_request(c.key)}});
  }
  json success = json::array();
  for (const TxnPut& p : puts) {
    json put{{"key", base64_encode(p.key)}, {"value", base64_encode(p.value)}};
    if (p.lease != 0) put["lease"] = std::to_string(p.lease);
    success.push_back({{"request_put", std::move(put)}});
  }
  const json request{{"compare", compare}, {"success", success}, {"failure", failure}};
  auto reply = call(kPath, request, false);
  if (!reply.ok()) return reply.status();
  TxnResult out;
  auto revision = header_revision(kPath, *reply);
  if (!revision.ok()) return revision.status();
  out.revision = *revision;
  auto succeeded = reply->find("succeeded");
  if (succeeded != reply->end()) {
    if (!succeeded->is_boolean()) return bad_reply(kPath, "succeeded is not a boolean");
    out.succeeded = succeeded->get<bool>();
  }
  if (out.succeeded) return out;
  auto responses = reply->find("responses");
  if (responses == reply->end() || !responses->is_array() || responses->size() != compares.size()) {
    return bad_reply(kPath, "not one response per compare");
  }
  for (const json& r : *responses) {
    auto range = r.is_object() ? r.find("response_range") : r.end();
    if (range == r.end() || !range->is_object()) return bad_reply(kPath, "no response_range");
    auto current = single_key(kPath, *range);
    if (!current.ok()) return current.status();
    out.current.push_back(std::move(*current));
  }
  return out;
}

Result<Lease> EtcdConfigManager::grant_lease(uint64_t ttl_ms) {
  static constexpr const char* kPath = "/v3/lease/grant";
  SHOAL_ASSERT(ttl_ms > 0, "grant_lease: ttl_ms must be > 0");
  const uint64_t ttl_s = (ttl_ms + 999) / 1000;
  // Not idempotent in effect (a resent grant makes a second lease), but an extra lease is
  // harmless: it expires unused.
  auto reply = call(kPath, json{{"TTL", std::to_string(ttl_s)}}, true);
  if (!reply.ok()) return reply.status();
  Lease lease;
  int64_t granted_s = 0;
  if (!read_int64(*reply, "ID", &lease.id) || !read_int64(*reply, "TTL", &granted_s) ||
      lease.id == 0 || granted_s <= 0) {
    return bad_reply(kPath, "no lease ID and TTL");
  }
  lease.ttl_ms = uint64_t(granted_s) * 1000;
  return lease;
}

Status EtcdConfigManager::keep_alive(int64_t lease) {
  static constexpr const char* kPath = "/v3/lease/keepalive";
  // A streaming RPC behind the gateway: one request in the body gives one {"result": ...}
  // (or {"error": ...}) and the end of the stream.
  auto reply = call(kPath, json{{"ID", std::to_string(lease)}}, true);
  if (!reply.ok()) return reply.status();
  auto error = reply->find("error");
  if (error != reply->end()) return etcd_error("", kPath, 200, error->dump());
  auto result = reply->find("result");
  int64_t ttl_s = 0;
  if (result == reply->end() || !result->is_object() || !read_int64(*result, "TTL", &ttl_s)) {
    return bad_reply(kPath, "no result");
  }
  // etcd answers an unknown or expired lease with TTL 0 (left out).
  if (ttl_s <= 0) return Status::NotFound("etcd lease " + std::to_string(lease) + " not found");
  return Status::Ok();
}

Status EtcdConfigManager::revoke(int64_t lease) {
  static constexpr const char* kPath = "/v3/lease/revoke";
  auto reply = call(kPath, json{{"ID", std::to_string(lease)}}, false);
  if (!reply.ok()) return reply.status();
  return header_revision(kPath, *reply).status();
}

}  // namespace shoal::cluster

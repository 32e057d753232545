#include "src/cluster/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

// Configuration parsing is a cold path; toml++ is used header-only and without exceptions so
// that every error is a Status.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

namespace shoal::cluster {

std::string replica_dir(std::string_view root, uint32_t shard, uint32_t replica) {
  return fmt::format("{}/shard-{}-replica-{}", root, shard, replica);
}

std::string_view transport_name(TransportKind kind) {
  switch (kind) {
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kFabric:
      return "fabric";
  }
  return "?";
}

Result<TransportKind> transport_kind(std::string_view name) {
  for (TransportKind k : {TransportKind::kTcp, TransportKind::kShm, TransportKind::kFabric}) {
    if (transport_name(k) == name) return k;
  }
  return Status::InvalidArgument(fmt::format("transport '{}' is not tcp, shm or fabric", name));
}

const Shard* ClusterConfig::shard_for_partition(uint64_t key) const {
  for (const Shard& s : shards) {
    if (key >= s.partition_lo && key < s.partition_hi) return &s;
  }
  return nullptr;
}

const Region* ClusterConfig::find_region(std::string_view region_name) const {
  for (const Region& r : regions) {
    if (r.name == region_name) return &r;
  }
  return nullptr;
}

double ClusterConfig::one_way_ms(std::string_view a, std::string_view b) const {
  if (a == b) return 0;
  for (const WanLink& l : wan) {
    if ((l.from == a && l.to == b) || (l.from == b && l.to == a)) return l.one_way_ms;
  }
  return 0;
}

namespace {

Status field_error(const std::string& field, const std::string& what) {
  return Status::InvalidArgument(field + ": " + what);
}

Status validate_regions_and_wan(const ClusterConfig& c) {
  if (c.regions.empty()) return field_error("region", "at least one region is required");
  std::set<std::string> names;
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const std::string field = fmt::format("region[{}].name", i);
    if (c.regions[i].name.empty()) return field_error(field, "must not be empty");
    if (!names.insert(c.regions[i].name).second) {
      return field_error(field, "duplicate region '" + c.regions[i].name + "'");
    }
  }
  for (size_t i = 0; i < c.wan.size(); ++i) {
    const WanLink& l = c.wan[i];
    const std::string field = fmt::format("wan[{}]", i);
    if (!names.count(l.from))
      return field_error(field + ".from", "unknown region '" + l.from + "'");
    if (!names.count(l.to)) return field_error(field + ".to", "unknown region '" + l.to + "'");
    if (!(l.one_way_ms >= 0 && l.one_way_ms <= 10'000)) {
      return field_error(field + ".one_way_ms", "must be in [0, 10000]");
    }
    if (!(l.jitter_ms >= 0 && l.jitter_ms <= l.one_way_ms + 1e-9)) {
      return field_error(field + ".jitter_ms", "must be in [0, one_way_ms]");
    }
  }
  return Status::Ok();
}

Status validate_replica(const ClusterConfig& c, const std::string& field, const Replica& r,
                        std::set<std::pair<std::string, uint16_t>>* endpoints) {
  if (c.find_region(r.region) == nullptr) {
    return field_error(field + ".region", "unknown region '" + r.region + "'");
  }
  if (r.host.empty()) return field_error(field + ".host", "must not be empty");
  if (r.port == 0) return field_error(field + ".port", "must be in [1, 65535]");
  if (!endpoints->insert({r.host, r.port}).second) {
    return field_error(field, fmt::format("address {}:{} is used twice", r.host, r.port));
  }
  if (r.metrics_port != 0 && !endpoints->insert({r.host, r.metrics_port}).second) {
    return field_error(field + ".metrics_port",
                       fmt::format("address {}:{} is used twice", r.host, r.metrics_port));
  }
  if (r.resp_port != 0 && !endpoints->insert({r.host, r.resp_port}).second) {
    return field_error(field + ".resp_port",
                       fmt::format("address {}:{} is used twice", r.host, r.resp_port));
  }
  if (r.client_port != 0 && !endpoints->insert({r.host, r.client_port}).second) {
    return field_error(field + ".client_port",
                       fmt::format("address {}:{} is used twice", r.host, r.client_port));
  }
  return Status::Ok();
}

Status validate_shards(const ClusterConfig& c) {
  if (c.shards.empty()) return field_error("shard", "at least one shard is required");
  std::set<std::pair<std::string, uint16_t>> endpoints;
  std::vector<const Shard*> by_range;
  for (size_t i = 0; i < c.shards.size(); ++i) {
    const Shard& s = c.shards[i];
    const std::string field = fmt::format("shard[{}]", i);
    if (s.id != i)
      return field_error(field + ".id", fmt::format("must be {} (ids are 0..S-1 in order)", i));
    if (s.partition_lo >= s.partition_hi) {
      return field_error(field + ".partition", "partition_lo must be below partition_hi");
    }
    if (s.replicas.size() != c.replicas_per_shard) {
      return field_error(field + ".replica", fmt::format("has {} replicas, cluster.replicas is {}",
                                                         s.replicas.size(), c.replicas_per_shard));
    }
    std::set<std::string> regions;
    for (size_t r = 0; r < s.replicas.size(); ++r) {
      const std::string rf = fmt::format("{}.replica[{}]", field, r);
      SHOAL_TRY(validate_replica(c, rf, s.replicas[r], &endpoints));
      if (!regions.insert(s.replicas[r].region).second) {
        return field_error(rf + ".region",
                           "two replicas of one shard in region '" + s.replicas[r].region + "'");
      }
    }
    by_range.push_back(&s);
  }
  if (c.replicas_per_shard > 1) {
    // Every leader also listens on replication_port(): no other address may take it.
    for (size_t i = 0; i < c.shards.size(); ++i) {
      const Replica& leader = c.shards[i].replicas[0];
      const std::string field = fmt::format("shard[{}].replica[0].port", i);
      if (leader.port == 65535) {
        return field_error(field, "65535 leaves no replication port (port + 1)");
      }
      if (endpoints.count({leader.host, replication_port(leader)}) != 0) {
        return field_error(field, fmt::format("its replication port {}:{} (port + 1) is another "
                                              "replica's address",
                                              leader.host, replication_port(leader)));
      }
    }
  }
  std::sort(by_range.begin(), by_range.end(),
            [](const Shard* a, const Shard* b) { return a->partition_lo < b->partition_lo; });
  for (size_t i = 1; i < by_range.size(); ++i) {
    if (by_range[i]->partition_lo < by_range[i - 1]->partition_hi) {
      return field_error(fmt::format("shard[{}].partition", by_range[i]->id),
                         fmt::format("overlaps shard {}", by_range[i - 1]->id));
    }
  }
  return Status::Ok();
}

Status validate_kv_split_keys(const ClusterConfig& c) {
  if (c.kv_split_keys.size() + 1 != c.shards.size() && !c.shards.empty()) {
    return field_error("cluster.kv_split_keys",
                       fmt::format("{} split keys for {} shards: give shards - 1",
                                   c.kv_split_keys.size(), c.shards.size()));
  }
  for (size_t i = 0; i < c.kv_split_keys.size(); ++i) {
    const std::string& k = c.kv_split_keys[i];
    if (k.empty() || k.size() > kKvSplitKeyBytesMax) {
      return field_error(fmt::format("cluster.kv_split_keys[{}]", i),
                         fmt::format("must be 1 to {} bytes", kKvSplitKeyBytesMax));
    }
    // std::string compares as unsigned bytes (char_traits<char>::compare is memcmp).
    if (i > 0 && !(c.kv_split_keys[i - 1] < k)) {
      return field_error(fmt::format("cluster.kv_split_keys[{}]", i),
                         "split keys must be strictly ascending");
    }
  }
  return Status::Ok();
}

// [cluster] etcd: host:port members, a few. The host is not resolved here (the etcd client
// says which member it could not reach).
Status validate_etcd(const std::vector<std::string>& etcd) {
  if (etcd.size() > kEtcdEndpointsMax) {
    return field_error("cluster.etcd",
                       fmt::format("at most {} members, not {}", kEtcdEndpointsMax, etcd.size()));
  }
  for (size_t i = 0; i < etcd.size(); ++i) {
    const std::string& e = etcd[i];
    const size_t colon = e.rfind(':');
    uint32_t port = 0;
    const char* end = e.data() + e.size();
    const bool port_ok = colon != std::string::npos && colon + 1 < e.size() &&
                         std::from_chars(e.data() + colon + 1, end, port).ptr == end && port >= 1 &&
                         port <= 65535;
    if (colon == 0 || !port_ok || e.find_first_of(" /\"\\") != std::string::npos) {
      return field_error(fmt::format("cluster.etcd[{}]", i),
                         fmt::format("'{}': expected host:port (a port in [1, 65535])", e));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ClusterConfig::validate() const {
  if (name.empty()) return field_error("cluster.name", "must not be empty");
  if (fabric_provider.size() > 31 || fabric_provider.find_first_of("\"\\\n") != std::string::npos) {
    return field_error("cluster.fabric_provider",
                       "at most 31 bytes, without quotes, backslashes or line ends");
  }
  if (!fabric_provider.empty() && transport != TransportKind::kFabric) {
    return field_error("cluster.fabric_provider", "applies to transport = \"fabric\" only");
  }
  if (transport == TransportKind::kFabric) {
    // The software providers bind 127.0.0.1 and the rendezvous is an abstract unix socket.
    for (const Shard& sh : shards) {
      for (size_t r = 0; r < sh.replicas.size(); ++r) {
        if (!sh.replicas[r].host.starts_with("127.")) {
          return field_error(
              fmt::format("shard[{}].replica[{}].host", sh.id, r),
              fmt::format("'{}': transport fabric runs on one host (a loopback address) until an "
                          "RDMA provider is wired",
                          sh.replicas[r].host));
        }
      }
    }
  }
  if (workers_per_shard < 1 || workers_per_shard > 256) {
    return field_error("cluster.workers", "must be in [1, 256]");
  }
  if (replicas_per_shard < 1 || replicas_per_shard > 7) {
    return field_error("cluster.replicas", "must be in [1, 7]");
  }
  if (batch_txns < 1 || batch_txns > kBatchTxnsMax) {
    return field_error("cluster.batch_txns",
                       fmt::format("must be in [1, {}], not {}", kBatchTxnsMax, batch_txns));
  }
  if (!(batch_us > 0 && batch_us <= kBatchUsMax)) {
    return field_error("cluster.batch_us", fmt::format("must be in (0, 1e7], not {}", batch_us));
  }
  if (replay_lag_ms > kReplayLagMsMax) {
    return field_error("cluster.replay_lag_ms",
                       fmt::format("must be in [0, {}], not {}", kReplayLagMsMax, replay_lag_ms));
  }
  if (leader_timeout_ms < kLeaderTimeoutMsMin || leader_timeout_ms > kLeaderTimeoutMsMax) {
    return field_error("cluster.leader_timeout_ms",
                       fmt::format("must be in [{}, {}], not {}", kLeaderTimeoutMsMin,
                                   kLeaderTimeoutMsMax, leader_timeout_ms));
  }
  SHOAL_TRY(validate_etcd(etcd));
  SHOAL_TRY(validate_regions_and_wan(*this));
  SHOAL_TRY(validate_kv_split_keys(*this));
  return validate_shards(*this);
}

std::vector<std::string> default_kv_split_keys(uint32_t shards) {
  std::vector<std::string> keys;
  for (uint32_t i = 1; i < shards; ++i) {
    // Two letters: past 26 shards one runs out (more than 676 would repeat keys, which
    // validate() refuses).
    const uint64_t at = uint64_t{26} * 26 * i / shards;
    std::string k(1, static_cast<char>('a' + at / 26));
    if (at % 26 != 0) k.push_back(static_cast<char>('a' + at % 26));
    keys.push_back(std::move(k));
  }
  return keys;
}

uint32_t ClusterConfig::shard_for_kv_key(std::string_view key) const {
  // upper_bound: the first split key above `key`; keys equal to a split key go right.
  const auto it = std::upper_bound(
      kv_split_keys.begin(), kv_split_keys.end(), key,
      [](std::string_view k, const std::string& split) { return k < std::string_view(split); });
  return static_cast<uint32_t>(it - kv_split_keys.begin());
}

// ---- TOML ----

namespace {

using NodeView = toml::node_view<const toml::node>;

// Typos in a config should not silently fall back to defaults.
Status reject_unknown_keys(const toml::table& t, const std::string& where,
                           std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : t) {
    if (std::find(allowed.begin(), allowed.end(), key.str()) == allowed.end()) {
      return field_error(
          where.empty() ? std::string(key.str()) : where + "." + std::string(key.str()),
          "unknown key");
    }
  }
  return Status::Ok();
}

Status read_string(NodeView v, const std::string& field, std::string* out) {
  if (!v) return Status::Ok();
  auto s = v.value<std::string>();
  if (!s || !v.is_string()) return field_error(field, "expected a string");
  *out = *s;
  return Status::Ok();
}

Status read_uint(NodeView v, const std::string& field, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (!v) return Status::Ok();
  if (!v.is_integer()) return field_error(field, "expected an integer");
  const int64_t x = *v.value<int64_t>();
  if (x < 0 || static_cast<uint64_t>(x) < lo || static_cast<uint64_t>(x) > hi) {
    return field_error(field, fmt::format("must be in [{}, {}], not {}", lo, hi, x));
  }
  *out = static_cast<uint64_t>(x);
  return Status::Ok();
}

Status read_double(NodeView v, const std::string& field, double* out) {
  if (!v) return Status::Ok();
  if (!v.is_number()) return field_error(field, "expected a number");
  *out = *v.value<double>();
  return Status::Ok();
}

template <typename Fn>
Status for_each_table_in_array(NodeView v, const std::string& field, Fn&& fn) {
  if (!v) return Status::Ok();
  const toml::array* arr = v.as_array();
  if (arr == nullptr) return field_error(field, "expected an array of tables ([[" + field + "]])");
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::table* t = (*arr)[i].as_table();
    const std::string f = fmt::format("{}[{}]", field, i);
    if (t == nullptr) return field_error(f, "expected a table");
    SHOAL_TRY(fn(*t, f));
  }
  return Status::Ok();
}

Status parse_cluster_table(const toml::table& root, ClusterConfig* c) {
  const toml::table* t = root["cluster"].as_table();
  if (t == nullptr) return field_error("cluster", "missing [cluster] table");
  SHOAL_TRY(reject_unknown_keys(*t, "cluster",
                                {"name", "transport", "workers", "replicas", "batch_txns",
                                 "batch_us", "replay_lag_ms", "leader_timeout_ms", "kv_split_keys",
                                 "resp_password_file", "secret_file", "fabric_provider", "etcd"}));
  NodeView v{*t};
  SHOAL_TRY(read_string(v["name"], "cluster.name", &c->name));
  std::string transport = std::string(transport_name(c->transport));
  SHOAL_TRY(read_string(v["transport"], "cluster.transport", &transport));
  if (transport == "tcp")
    c->transport = TransportKind::kTcp;
  else if (transport == "shm")
    c->transport = TransportKind::kShm;
  else if (transport == "fabric")
    c->transport = TransportKind::kFabric;
  else if (transport == "uring")
    // Wired once (branch helper-fabric, 2026-12-03) and withdrawn: a uring send blocked on a
    // full socket stops receiving once its provided buffers are full (tcp keeps reading:
    // read_while_blocked), and a leader and a follower installing a load stalled each other
    // for send_timeout_ns in 2 of 4 runs. Refused rather than silently run over TCP.
    return field_error(
        "cluster.transport",
        "'uring' is not available to shard servers and replication (a blocked uring send stops "
        "receiving, which stalls replication: docs/TRANSPORTS.md; `shoal bench transport "
        "--transport uring` measures it); use tcp, shm or fabric");
  else if (transport == "sim")
    return field_error("cluster.transport",
                       "'sim' is the simulator's network (sim/), not a cluster's; use tcp, shm or "
                       "fabric");
  else
    return field_error("cluster.transport", "'" + transport + "' is not tcp, shm or fabric");
  SHOAL_TRY(read_string(v["fabric_provider"], "cluster.fabric_provider", &c->fabric_provider));
  uint64_t workers = c->workers_per_shard, replicas = c->replicas_per_shard;
  uint64_t batch_txns = c->batch_txns;
  SHOAL_TRY(read_uint(v["workers"], "cluster.workers", 1, 256, &workers));
  SHOAL_TRY(read_uint(v["replicas"], "cluster.replicas", 1, 7, &replicas));
  SHOAL_TRY(read_uint(v["batch_txns"], "cluster.batch_txns", 1, kBatchTxnsMax, &batch_txns));
  SHOAL_TRY(read_double(v["batch_us"], "cluster.batch_us", &c->batch_us));
  SHOAL_TRY(read_uint(v["replay_lag_ms"], "cluster.replay_lag_ms", 0, kReplayLagMsMax,
                      &c->replay_lag_ms));
  SHOAL_TRY(read_uint(v["leader_timeout_ms"], "cluster.leader_timeout_ms", kLeaderTimeoutMsMin,
                      kLeaderTimeoutMsMax, &c->leader_timeout_ms));
  SHOAL_TRY(
      read_string(v["resp_password_file"], "cluster.resp_password_file", &c->resp_password_file));
  SHOAL_TRY(read_string(v["secret_file"], "cluster.secret_file", &c->secret_file));
  if (v["kv_split_keys"]) {
    const toml::array* keys = v["kv_split_keys"].as_array();
    if (keys == nullptr)
      return field_error("cluster.kv_split_keys", "expected an array of strings");
    for (size_t i = 0; i < keys->size(); ++i) {
      std::string k;
      SHOAL_TRY(read_string(NodeView{(*keys)[i]}, fmt::format("cluster.kv_split_keys[{}]", i), &k));
      if (!(*keys)[i].is_string()) {
        return field_error(fmt::format("cluster.kv_split_keys[{}]", i), "expected a string");
      }
      c->kv_split_keys.push_back(std::move(k));
    }
  }
  if (v["etcd"]) {
    const toml::array* members = v["etcd"].as_array();
    if (members == nullptr) return field_error("cluster.etcd", "expected an array of host:port");
    for (size_t i = 0; i < members->size(); ++i) {
      if (!(*members)[i].is_string()) {
        return field_error(fmt::format("cluster.etcd[{}]", i), "expected a string host:port");
      }
      c->etcd.push_back(std::string(*(*members)[i].value<std::string_view>()));
    }
  }
  c->workers_per_shard = static_cast<uint32_t>(workers);
  c->replicas_per_shard = static_cast<uint32_t>(replicas);
  c->batch_txns = static_cast<uint32_t>(batch_txns);
  return Status::Ok();
}

Status parse_shard(const toml::table& t, const std::string& f, ClusterConfig* c) {
  SHOAL_TRY(reject_unknown_keys(t, f, {"id", "partition_lo", "partition_hi", "replica"}));
  NodeView v{t};
  Shard s;
  uint64_t id = c->shards.size();
  SHOAL_TRY(read_uint(v["id"], f + ".id", 0, 1 << 20, &id));
  if (!v["partition_lo"] || !v["partition_hi"]) {
    return field_error(f, "partition_lo and partition_hi are required");
  }
  SHOAL_TRY(read_uint(v["partition_lo"], f + ".partition_lo", 0, UINT64_MAX >> 1, &s.partition_lo));
  SHOAL_TRY(read_uint(v["partition_hi"], f + ".partition_hi", 0, UINT64_MAX >> 1, &s.partition_hi));
  s.id = static_cast<uint32_t>(id);
  SHOAL_TRY(for_each_table_in_array(
      v["replica"], f + ".replica", [&](const toml::table& rt, const std::string& rf) -> Status {
        SHOAL_TRY(reject_unknown_keys(
            rt, rf, {"region", "host", "port", "metrics_port", "resp_port", "client_port"}));
        NodeView rv{rt};
        Replica r;
        uint64_t port = 0, metrics_port = 0, resp_port = 0, client_port = 0;
        SHOAL_TRY(read_string(rv["region"], rf + ".region", &r.region));
        SHOAL_TRY(read_string(rv["host"], rf + ".host", &r.host));
        SHOAL_TRY(read_uint(rv["port"], rf + ".port", 1, 65535, &port));
        SHOAL_TRY(read_uint(rv["metrics_port"], rf + ".metrics_port", 1, 65535, &metrics_port));
        SHOAL_TRY(read_uint(rv["resp_port"], rf + ".resp_port", 1, 65535, &resp_port));
        SHOAL_TRY(read_uint(rv["client_port"], rf + ".client_port", 1, 65535, &client_port));
        r.port = static_cast<uint16_t>(port);
        r.metrics_port = static_cast<uint16_t>(metrics_port);
        r.resp_port = static_cast<uint16_t>(resp_port);
        r.client_port = static_cast<uint16_t>(client_port);
        s.replicas.push_back(std::move(r));
        return Status::Ok();
      }));
  c->shards.push_back(std::move(s));
  return Status::Ok();
}

Status parse_root(const toml::table& root, ClusterConfig* c) {
  SHOAL_TRY(reject_unknown_keys(root, "", {"cluster", "region", "wan", "shard"}));
  SHOAL_TRY(parse_cluster_table(root, c));
  NodeView v{root};
  SHOAL_TRY(for_each_table_in_array(
      v["region"], "region", [&](const toml::table& t, const std::string& f) -> Status {
        SHOAL_TRY(reject_unknown_keys(t, f, {"name"}));
        Region r;
        SHOAL_TRY(read_string(NodeView{t}["name"], f + ".name", &r.name));
        c->regions.push_back(std::move(r));
        return Status::Ok();
      }));
  SHOAL_TRY(for_each_table_in_array(
      v["wan"], "wan", [&](const toml::table& t, const std::string& f) -> Status {
        SHOAL_TRY(reject_unknown_keys(t, f, {"from", "to", "one_way_ms", "jitter_ms"}));
        NodeView wv{t};
        WanLink l;
        SHOAL_TRY(read_string(wv["from"], f + ".from", &l.from));
        SHOAL_TRY(read_string(wv["to"], f + ".to", &l.to));
        SHOAL_TRY(read_double(wv["one_way_ms"], f + ".one_way_ms", &l.one_way_ms));
        SHOAL_TRY(read_double(wv["jitter_ms"], f + ".jitter_ms", &l.jitter_ms));
        c->wan.push_back(std::move(l));
        return Status::Ok();
      }));
  return for_each_table_in_array(
      v["shard"], "shard",
      [&](const toml::table& t, const std::string& f) { return parse_shard(t, f, c); });
}

}  // namespace

Result<ClusterConfig> parse_config(std::string_view toml_text, std::string_view origin) {
  toml::parse_result parsed = toml::parse(toml_text, origin);
  if (!parsed) {
    const auto& err = parsed.error();
    return Status::InvalidArgument(fmt::format("{}:{}:{}: {}", origin, err.source().begin.line,
                                               err.source().begin.column, err.description()));
  }
  ClusterConfig c;
  Status s = parse_root(parsed.table(), &c);
  if (s.ok() && !parsed.table()["cluster"]["kv_split_keys"]) {
    c.kv_split_keys = default_kv_split_keys(static_cast<uint32_t>(c.shards.size()));
  }
  if (s.ok()) s = c.validate();
  if (!s.ok()) return Status::InvalidArgument(fmt::format("{}: {}", origin, s.message()));
  return c;
}

Result<ClusterConfig> load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("cannot read config file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  auto config = parse_config(text.str(), path);
  if (!config.ok()) return config;
  const size_t slash = path.rfind('/');
  for (std::string* file : {&config->resp_password_file, &config->secret_file}) {
    if (!file->empty() && (*file)[0] != '/' && slash != std::string::npos) {
      *file = path.substr(0, slash + 1) + *file;
    }
  }
  return config;
}

Result<std::string> read_password_file(const std::string& path, std::string_view field) {
  std::ifstream in(path);
  if (!in) return field_error(std::string(field), "cannot read '" + path + "'");
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty())
    return field_error(std::string(field), "'" + path + "' starts with an empty line");
  if (line.size() > kPasswordBytesMax) {
    return field_error(std::string(field),
                       fmt::format("'{}': longer than {} bytes", path, kPasswordBytesMax));
  }
  return line;
}

std::string ClusterConfig::to_toml() const {
  // fmt's "{}" is the shortest form that reads back to the same double.
  std::string out = fmt::format(
      "[cluster]\nname = \"{}\"\ntransport = \"{}\"\nworkers = {}\nreplicas = {}\n"
      "batch_txns = {}\nbatch_us = {}\nreplay_lag_ms = {}\nleader_timeout_ms = {}\n",
      name, transport_name(transport), workers_per_shard, replicas_per_shard, batch_txns, batch_us,
      replay_lag_ms, leader_timeout_ms);
  if (!kv_split_keys.empty()) {
    out += "kv_split_keys = [";
    for (size_t i = 0; i < kv_split_keys.size(); ++i) {
      out += i == 0 ? "\"" : ", \"";
      for (const char ch : kv_split_keys[i]) {  // TOML basic string escapes
        const auto b = static_cast<uint8_t>(ch);
        if (ch == '"' || ch == '\\') {
          out += '\\';
          out += ch;
        } else if (b < 0x20 || b == 0x7f) {
          out += fmt::format("\\u{:04x}", b);
        } else {
          out += ch;
        }
      }
      out += '"';
    }
    out += "]\n";
  }
  if (!resp_password_file.empty()) {
    out += fmt::format("resp_password_file = \"{}\"\n", resp_password_file);
  }
  if (!secret_file.empty()) out += fmt::format("secret_file = \"{}\"\n", secret_file);
  if (!etcd.empty()) out += fmt::format("etcd = [\"{}\"]\n", fmt::join(etcd, "\", \""));
  if (!fabric_provider.empty()) {
    out += fmt::format("fabric_provider = \"{}\"\n", fabric_provider);
  }
  for (const Region& r : regions) out += fmt::format("\n[[region]]\nname = \"{}\"\n", r.name);
  for (const WanLink& l : wan) {
    out += fmt::format("\n[[wan]]\nfrom = \"{}\"\nto = \"{}\"\none_way_ms = {}\njitter_ms = {}\n",
                       l.from, l.to, l.one_way_ms, l.jitter_ms);
  }
  for (const Shard& s : shards) {
    out += fmt::format("\n[[shard]]\nid = {}\npartition_lo = {}\npartition_hi = {}\n", s.id,
                       s.partition_lo, s.partition_hi);
    for (const Replica& r : s.replicas) {
      out += fmt::format("[[shard.replica]]\nregion = \"{}\"\nhost = \"{}\"\nport = {}\n", r.region,
                         r.host, r.port);
      if (r.metrics_port != 0) out += fmt::format("metrics_port = {}\n", r.metrics_port);
      if (r.resp_port != 0) out += fmt::format("resp_port = {}\n", r.resp_port);
      if (r.client_port != 0) out += fmt::format("client_port = {}\n", r.client_port);
    }
  }
  return out;
}

Result<ClusterConfig> make_local_config(uint32_t shards, uint32_t replicas, uint32_t workers,
                                        uint64_t partitions, uint16_t base_port) {
  if (shards == 0 || partitions < shards) {
    return Status::InvalidArgument(
        fmt::format("{} partitions cannot be split over {} shards", partitions, shards));
  }
  const uint32_t ports_per_replica = replicas > 1 ? 2 : 1;
  if (uint64_t{base_port} + uint64_t{shards} * replicas * ports_per_replica > 65535) {
    return Status::InvalidArgument("ports past 65535: lower the base port");
  }
  ClusterConfig c;
  c.name = "local";
  c.workers_per_shard = workers;
  c.replicas_per_shard = replicas;
  c.leader_timeout_ms = kLocalLeaderTimeoutMs;
  for (uint32_t r = 0; r < replicas; ++r) c.regions.push_back(Region{fmt::format("region-{}", r)});
  uint16_t port = base_port;
  for (uint32_t s = 0; s < shards; ++s) {
    Shard shard;
    shard.id = s;
    shard.partition_lo = 1 + partitions * s / shards;
    shard.partition_hi = 1 + partitions * (s + 1) / shards;
    for (uint32_t r = 0; r < replicas; ++r) {
      shard.replicas.push_back(Replica{c.regions[r].name, "127.0.0.1", port});
      port = static_cast<uint16_t>(port + ports_per_replica);
    }
    c.shards.push_back(std::move(shard));
  }
  c.kv_split_keys = default_kv_split_keys(shards);
  SHOAL_TRY(c.validate());
  return c;
}

}  // namespace shoal::cluster

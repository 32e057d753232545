// The checks of a TPC-C cluster that `shoal cluster check` and the benchmark controller
// (bench/dist_controller.cc) run over every shard (declared in cluster_ctl.h): TPC-C's
// consistency conditions with the cross-shard Payments, and the acknowledged NewOrders of the
// terminals' journals looked up in the stores.
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/base/json_field.h"
#include "src/server/cluster_ctl.h"
#include "src/server/control.h"
#include "src/server/dist_tpcc.h"

namespace shoal::server {
namespace {

constexpr uint64_t kAckCheckCallMs = 60'000;  // a shard looking up every journaled order

}  // namespace

std::vector<std::string> check_tpcc_cluster(ControlClient& client,
                                            const cluster::ClusterConfig& config,
                                            std::vector<nlohmann::json>* payments_out) {
  std::vector<std::string> failures;
  const WarehouseMap map(config);
  const auto n = static_cast<uint32_t>(config.shards.size());
  std::vector<nlohmann::json>& payments = *payments_out;
  payments.assign(n, nlohmann::json::array());
  for (uint32_t s = 0; s < n; ++s) {
    auto reply = client.call(s, kScan, {{"step", "payments"}}, 120'000);
    if (!reply.ok()) {
      failures.push_back(fmt::format("shard {}: {}", s, reply.status().to_string()));
      payments.clear();
      return failures;
    }
    auto list = json_field<nlohmann::json>(*reply, "payments");
    if (!list.ok() || !list->is_array()) {
      failures.push_back(
          fmt::format("shard {}: malformed payments: {}", s,
                      list.ok() ? std::string("'payments': not a list") : list.status().message()));
      payments.clear();
      return failures;
    }
    for (const auto& p : *list) {
      // [kind, key, amount]; anything else is no payment of ours (the owner's check fails).
      if (!p.is_array() || p.size() != 3 || !p[0].is_number_unsigned() ||
          !p[1].is_number_unsigned()) {
        continue;
      }
      const uint64_t key = p[1].get<uint64_t>();
      // Kind 0 keys are warehouse ids; the others pack the warehouse in their top 16 bits.
      const uint32_t w = static_cast<uint32_t>(p[0].get<uint64_t>() == 0 ? key : key >> 48);
      if (w >= 1 && w <= map.warehouses()) payments[map.shard_of(w)].push_back(p);
    }
  }
  for (uint32_t s = 0; s < n; ++s) {
    auto reply = client.call(s, kScan, {{"step", "check"}, {"payments", payments[s]}}, 600'000);
    if (!reply.ok()) {
      failures.push_back(fmt::format("shard {}: {}", s, reply.status().to_string()));
      continue;
    }
    std::vector<std::string> shard_failures;
    if (Status read = json_optional_field(*reply, "failures", &shard_failures); !read.ok()) {
      shard_failures = {"malformed check reply: " + read.message()};
    }
    for (const std::string& f : shard_failures)
      failures.push_back(fmt::format("shard {}: {}", s, f));
  }
  return failures;
}

std::string AckCheck::line() const {
  return fmt::format("acknowledged NewOrders (journaled by the terminals): {} checked, {} lost{}\n",
                     checked, missing, failures.empty() ? "" : " (" + failures + ")");
}

AckCheck check_acknowledged_orders(ControlClient& client, uint32_t shards, const std::string& dir) {
  nlohmann::json paths = nlohmann::json::array();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {  // bounded by the directory
    const std::string name = e.path().filename().string();
    if (name.starts_with("acks-") && name.ends_with(".bin")) paths.push_back(e.path().string());
  }
  AckCheck a;
  for (uint32_t s = 0; s < shards; ++s) {
    auto reply = client.call(s, kScan, {{"step", "acks"}, {"paths", paths}}, kAckCheckCallMs);
    if (!reply.ok()) {
      a.failures += fmt::format(" shard {}: {};", s, reply.status().to_string());
      continue;
    }
    uint64_t c = 0, m = 0;
    nlohmann::json first = nullptr;
    Status read = json_optional_field(*reply, "checked", &c);
    if (read.ok()) read = json_optional_field(*reply, "missing", &m);
    if (read.ok()) read = json_optional_field(*reply, "first_missing", &first);
    if (!read.ok()) {
      a.failures += fmt::format(" shard {}: malformed answer: {};", s, read.message());
      continue;
    }
    a.checked += c;
    a.missing += m;
    if (m != 0) a.failures += fmt::format(" shard {}: first missing {};", s, first.dump());
  }
  return a;
}

}  // namespace shoal::server

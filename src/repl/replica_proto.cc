#include "src/repl/replica_proto.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <fmt/format.h>

namespace shoal::repl {

Schema Schema::of(const txn::Engine& engine, std::string workload) {
  Schema s;
  for (const auto& t : engine.tables()) {
    s.tables.push_back({t->name(), static_cast<uint32_t>(t->key_words())});
  }
  s.workload = std::move(workload);
  return s;
}

nlohmann::json Schema::to_json() const {
  nlohmann::json tables = nlohmann::json::array();
  for (const TableSchema& t : this->tables) {
    tables.push_back({{"name", t.name}, {"key_words", t.key_words}});
  }
  return {{"tables", tables}, {"workload", workload}};
}

Result<Schema> Schema::from_json(const nlohmann::json& j) {
  Schema s;
  if (!j.is_object() || !j.contains("tables") || !j["tables"].is_array()) {
    return Status::Corruption("schema: no table list");
  }
  for (const auto& t : j["tables"]) {
    if (!t.contains("name") || !t.contains("key_words") || !t["name"].is_string() ||
        !t["key_words"].is_number_unsigned()) {
      return Status::Corruption("schema: a table without name or key_words");
    }
    s.tables.push_back({t["name"].get<std::string>(), t["key_words"].get<uint32_t>()});
  }
  s.workload = j.value("workload", "");
  return s;
}

Status Schema::create_tables(txn::Engine& engine) const {
  if (!engine.tables().empty()) return Status::InvalidArgument("schema: engine already has tables");
  for (const TableSchema& t : tables) {
    auto created = engine.create_table_with_key_words(t.name, t.key_words);
    if (!created.ok()) return created.status();
  }
  return Status::Ok();
}

nlohmann::json FollowerReport::to_json() const {
  return {{"type", "status"},
          {"replica", replica},
          {"applied_tid", applied_tid},
          {"digest_done", digest_done},
          {"digest", digest},
          {"checked", checked},
          {"check_failures", check_failures},
          {"replay_txns", replay_txns},
          {"replay_writes", replay_writes},
          {"replay_cpu_ns", replay_cpu_ns},
          {"wal_bytes", wal_bytes},
          {"recovered_slots", recovered_slots},
          {"chosen_slots", chosen_slots},
          {"reads", reads.to_json()}};
}

std::string FollowerReadStats::to_text() const {
  return fmt::format(
      "follower reads: {:.0f} read-only txn/s ({} txns, {} snapshots, {} torn), lag {:.2f} "
      "epochs mean / {} max, version chains {:.1f} MiB of {:.1f} MiB",
      transactions_per_sec(), transactions, snapshots, torn, lag_epochs_mean, lag_epochs_max,
      static_cast<double>(version_chain_bytes) / (1 << 20),
      static_cast<double>(engine_bytes) / (1 << 20));
}

nlohmann::json FollowerReadStats::to_json() const {
  return {{"threads", threads},
          {"transactions", transactions},
          {"snapshots", snapshots},
          {"torn", torn},
          {"first_violation", first_violation},
          {"seconds", seconds},
          {"lag_epochs_mean", lag_epochs_mean},
          {"lag_epochs_max", lag_epochs_max},
          {"version_chain_bytes", version_chain_bytes},
          {"engine_bytes", engine_bytes}};
}

FollowerReadStats FollowerReadStats::from_json(const nlohmann::json& j) {
  FollowerReadStats r;
  if (!j.is_object()) return r;
  r.threads = j.value("threads", 0u);
  r.transactions = j.value("transactions", uint64_t{0});
  r.snapshots = j.value("snapshots", uint64_t{0});
  r.torn = j.value("torn", uint64_t{0});
  r.first_violation = j.value("first_violation", std::string());
  r.seconds = j.value("seconds", 0.0);
  r.lag_epochs_mean = j.value("lag_epochs_mean", 0.0);
  r.lag_epochs_max = j.value("lag_epochs_max", uint64_t{0});
  r.version_chain_bytes = j.value("version_chain_bytes", uint64_t{0});
  r.engine_bytes = j.value("engine_bytes", uint64_t{0});
  return r;
}

FollowerReport FollowerReport::from_json(const nlohmann::json& j) {
  FollowerReport r;
  r.replica = j.value("replica", 0u);
  r.applied_tid = j.value("applied_tid", uint64_t{0});
  r.digest_done = j.value("digest_done", false);
  r.digest = j.value("digest", uint64_t{0});
  r.checked = j.value("checked", false);
  r.check_failures = j.value("check_failures", std::vector<std::string>{});
  r.replay_txns = j.value("replay_txns", uint64_t{0});
  r.replay_writes = j.value("replay_writes", uint64_t{0});
  r.replay_cpu_ns = j.value("replay_cpu_ns", uint64_t{0});
  r.wal_bytes = j.value("wal_bytes", uint64_t{0});
  r.recovered_slots = j.value("recovered_slots", uint64_t{0});
  r.chosen_slots = j.value("chosen_slots", uint64_t{0});
  if (j.contains("reads")) r.reads = FollowerReadStats::from_json(j["reads"]);
  return r;
}

uint64_t engine_digest(const txn::Engine& engine) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const auto& t : engine.tables()) {
    const uint32_t id = t->id();
    const size_t key_bytes = t->key_words() * 8;
    XXH3_64bits_update(&state, &id, sizeof id);
    t->scan_committed([&](const uint64_t* key, const void* value, uint32_t size, uint64_t) {
      XXH3_64bits_update(&state, key, key_bytes);
      XXH3_64bits_update(&state, &size, sizeof size);
      XXH3_64bits_update(&state, value, size);
      return true;
    });
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace shoal::repl

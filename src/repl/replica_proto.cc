#include "src/repl/replica_proto.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "src/base/json_field.h"

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
  auto fail = [](const Status& why) { return Status::Corruption("schema: " + why.message()); };
  auto tables = json_field<nlohmann::json>(j, "tables");
  if (!tables.ok()) return fail(tables.status());
  if (!tables->is_array()) return fail(Status::InvalidArgument("'tables': not a list"));
  for (const nlohmann::json& t : *tables) {
    auto name = json_field<std::string>(t, "name");
    if (!name.ok()) return fail(name.status());
    auto key_words = json_field<uint32_t>(t, "key_words");
    if (!key_words.ok()) return fail(key_words.status());
    s.tables.push_back({std::move(*name), *key_words});
  }
  if (Status st = json_optional_field(j, "workload", &s.workload); !st.ok()) return fail(st);
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
          {"reads", reads.to_json()},
          {"copies", copy_counts_json(copies)}};
}

nlohmann::json copy_counts_json(const CopyCounts& c) {
  nlohmann::json j = {{"entry_bytes_proposed", c.entry_bytes_proposed},
                      {"entry_bytes_received", c.entry_bytes_received}};
  for (size_t i = 0; i < kCopyHops; ++i) {
    j[std::string(copy_hop_name(static_cast<CopyHop>(i)))] = c.bytes[i];
  }
  return j;
}

Result<CopyCounts> parse_copy_counts(const nlohmann::json& j) {
  CopyCounts c;
  if (!j.is_object()) return Status::InvalidArgument("copies: not an object");
  SHOAL_TRY(json_optional_field(j, "entry_bytes_proposed", &c.entry_bytes_proposed));
  SHOAL_TRY(json_optional_field(j, "entry_bytes_received", &c.entry_bytes_received));
  for (size_t i = 0; i < kCopyHops; ++i) {
    SHOAL_TRY(
        json_optional_field(j, std::string(copy_hop_name(static_cast<CopyHop>(i))), &c.bytes[i]));
  }
  return c;
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

Result<FollowerReadStats> FollowerReadStats::parse(const nlohmann::json& j) {
  FollowerReadStats r;
  SHOAL_TRY(json_optional_field(j, "threads", &r.threads));
  SHOAL_TRY(json_optional_field(j, "transactions", &r.transactions));
  SHOAL_TRY(json_optional_field(j, "snapshots", &r.snapshots));
  SHOAL_TRY(json_optional_field(j, "torn", &r.torn));
  SHOAL_TRY(json_optional_field(j, "first_violation", &r.first_violation));
  SHOAL_TRY(json_optional_field(j, "seconds", &r.seconds));
  SHOAL_TRY(json_optional_field(j, "lag_epochs_mean", &r.lag_epochs_mean));
  SHOAL_TRY(json_optional_field(j, "lag_epochs_max", &r.lag_epochs_max));
  SHOAL_TRY(json_optional_field(j, "version_chain_bytes", &r.version_chain_bytes));
  SHOAL_TRY(json_optional_field(j, "engine_bytes", &r.engine_bytes));
  return r;
}

Result<FollowerReport> FollowerReport::parse(const nlohmann::json& j) {
  FollowerReport r;
  auto fail = [](const Status& why) {
    return Status::InvalidArgument("follower status: " + why.message());
  };
  // The replica id is the one field a report means nothing without.
  auto replica = json_field<uint32_t>(j, "replica");
  if (!replica.ok()) return fail(replica.status());
  r.replica = *replica;
  for (const Status& st :
       {json_optional_field(j, "applied_tid", &r.applied_tid),
        json_optional_field(j, "digest_done", &r.digest_done),
        json_optional_field(j, "digest", &r.digest), json_optional_field(j, "checked", &r.checked),
        json_optional_field(j, "check_failures", &r.check_failures),
        json_optional_field(j, "replay_txns", &r.replay_txns),
        json_optional_field(j, "replay_writes", &r.replay_writes),
        json_optional_field(j, "replay_cpu_ns", &r.replay_cpu_ns),
        json_optional_field(j, "wal_bytes", &r.wal_bytes),
        json_optional_field(j, "recovered_slots", &r.recovered_slots),
        json_optional_field(j, "chosen_slots", &r.chosen_slots)}) {
    if (!st.ok()) return fail(st);
  }
  nlohmann::json reads;
  if (Status st = json_optional_field(j, "reads", &reads); !st.ok()) return fail(st);
  if (!reads.is_null()) {
    auto parsed = FollowerReadStats::parse(reads);
    if (!parsed.ok()) return fail(Status::InvalidArgument("reads." + parsed.status().message()));
    r.reads = std::move(*parsed);
  }
  nlohmann::json copies;
  if (Status st = json_optional_field(j, "copies", &copies); !st.ok()) return fail(st);
  if (!copies.is_null()) {
    auto parsed = parse_copy_counts(copies);
    if (!parsed.ok()) return fail(Status::InvalidArgument("copies." + parsed.status().message()));
    r.copies = *parsed;
  }
  return r;
}

uint64_t engine_digest(const txn::Engine& engine) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const auto& t : engine.tables()) {
    const uint32_t id = t->id();
    const size_t key_words = t->key_words();
    XXH3_64bits_update(&state, &id, sizeof id);
    t->scan_committed([&](const uint64_t* key, const void* value, uint32_t size, uint64_t) {
      XXH3_64bits_update(&state, key, 8 * txn::untyped_key_words(key_words, key));
      XXH3_64bits_update(&state, &size, sizeof size);
      XXH3_64bits_update(&state, value, size);
      return true;
    });
  }
  return XXH3_64bits_digest(&state);
}

nlohmann::json CheckpointNote::to_json() const {
  return {
      {"type", "checkpoint"}, {"seq", seq}, {"bytes", bytes}, {"covered", covered}, {"kept", kept}};
}

Result<CheckpointNote> CheckpointNote::parse(const nlohmann::json& j, uint32_t streams) {
  CheckpointNote n;
  auto seq = json_field<uint64_t>(j, "seq");
  if (!seq.ok()) return seq.status();
  auto bytes = json_field<uint64_t>(j, "bytes");
  if (!bytes.ok()) return bytes.status();
  n.seq = *seq;
  n.bytes = *bytes;
  for (const char* name : {"covered", "kept"}) {
    const auto it = j.find(name);
    if (it == j.end() || !it->is_array() || it->size() != streams) {
      return Status::InvalidArgument(
          fmt::format("checkpoint note: \"{}\" must be an array of {} slots", name, streams));
    }
    std::vector<uint64_t>& out = std::string_view(name) == "covered" ? n.covered : n.kept;
    for (const auto& v : *it) {  // bounded by streams
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
        return Status::InvalidArgument(
            fmt::format("checkpoint note: \"{}\" holds a non-slot {}", name, v.dump()));
      }
      out.push_back(v.get<uint64_t>());
    }
  }
  for (uint32_t s = 0; s < streams; ++s) {
    if (n.kept[s] > n.covered[s]) {
      return Status::InvalidArgument(fmt::format(
          "checkpoint note: stream {} kept {} above covered {}", s, n.kept[s], n.covered[s]));
    }
  }
  if (n.seq == 0 || n.bytes == 0) {
    return Status::InvalidArgument("checkpoint note: seq and bytes must be positive");
  }
  return n;
}

void encode_checkpoint_chunk_header(uint64_t seq, uint64_t offset, uint64_t total,
                                    uint8_t out[kCheckpointChunkHeaderBytes]) {
  const uint32_t magic = kCheckpointChunkMagic, zero = 0;
  std::memcpy(out, &magic, 4);
  std::memcpy(out + 4, &zero, 4);
  std::memcpy(out + 8, &seq, 8);
  std::memcpy(out + 16, &offset, 8);
  std::memcpy(out + 24, &total, 8);
}

Result<CheckpointChunk> parse_checkpoint_chunk(std::span<const uint8_t> message, size_t max_bytes) {
  if (message.size() < kCheckpointChunkHeaderBytes) {
    return Status::InvalidArgument(
        fmt::format("checkpoint chunk: {} bytes, shorter than its {}-byte header", message.size(),
                    kCheckpointChunkHeaderBytes));
  }
  uint32_t magic = 0;
  std::memcpy(&magic, message.data(), 4);
  if (magic != kCheckpointChunkMagic) {
    return Status::InvalidArgument(fmt::format("checkpoint chunk: bad magic {:#x}", magic));
  }
  CheckpointChunk c;
  std::memcpy(&c.seq, message.data() + 8, 8);
  std::memcpy(&c.offset, message.data() + 16, 8);
  std::memcpy(&c.total, message.data() + 24, 8);
  c.bytes = message.subspan(kCheckpointChunkHeaderBytes);
  if (c.bytes.size() > max_bytes) {
    return Status::InvalidArgument(fmt::format(
        "checkpoint chunk: {} bytes, more than the {} asked for", c.bytes.size(), max_bytes));
  }
  if (c.offset > c.total || c.bytes.size() > c.total - c.offset) {
    return Status::InvalidArgument(
        fmt::format("checkpoint chunk: bytes [{}, {}) beyond the file's {} bytes", c.offset,
                    c.offset + c.bytes.size(), c.total));
  }
  return c;
}

}  // namespace shoal::repl

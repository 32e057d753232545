#include "src/cluster/cluster_state.h"

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>

namespace shoal::cluster {
namespace {

using nlohmann::json;

Status corrupt(const std::string& key, const std::string& what) {
  return Status::Corruption("config key '" + key + "': " + what);
}

// A stored value as a JSON object, or Corruption naming the key.
Result<json> parse_object(const std::string& key, const std::string& value) {
  json j = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corrupt(key, "not JSON");
  if (!j.is_object()) return corrupt(key, "not a JSON object");
  return j;
}

Status read_u64(const std::string& key, const json& obj, const char* field, uint64_t max,
                uint64_t* out) {
  auto it = obj.find(field);
  if (it == obj.end()) return corrupt(key, std::string("field '") + field + "' missing");
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max) {
    return corrupt(key, std::string("field '") + field + "' is not an unsigned integer of " +
                            (max == UINT32_MAX ? "32" : "64") + " bits");
  }
  *out = it->get<uint64_t>();
  return Status::Ok();
}

Status read_u32(const std::string& key, const json& obj, const char* field, uint32_t* out) {
  uint64_t v = 0;
  SHOAL_TRY(read_u64(key, obj, field, UINT32_MAX, &v));
  *out = static_cast<uint32_t>(v);
  return Status::Ok();
}

template <typename T>
Status read_array(const std::string& key, const json& obj, const char* field, std::vector<T>* out) {
  auto it = obj.find(field);
  if (it == obj.end()) return corrupt(key, std::string("field '") + field + "' missing");
  if (!it->is_array()) return corrupt(key, std::string("field '") + field + "' is not an array");
  out->clear();
  for (const json& e : *it) {
    if (!e.is_number_unsigned() || e.get<uint64_t>() > std::numeric_limits<T>::max()) {
      return corrupt(key, std::string("field '") + field + "' holds a non-integer or too large");
    }
    out->push_back(static_cast<T>(e.get<uint64_t>()));
  }
  return Status::Ok();
}

Status check_shard(const ShardState& s, uint32_t shard) {
  if (s.members.empty()) {
    return Status::InvalidArgument("shard " + std::to_string(shard) + ": no members");
  }
  if (std::find(s.members.begin(), s.members.end(), s.leader_replica) == s.members.end()) {
    return Status::InvalidArgument("shard " + std::to_string(shard) + ": leader replica " +
                                   std::to_string(s.leader_replica) + " is not a member");
  }
  return Status::Ok();
}

std::string encode_epoch(uint64_t epoch) {
  return json{{"epoch", epoch}}.dump();
}

std::string encode_shard(const ShardState& s) {
  return json{
      {"leader_replica", s.leader_replica}, {"members", s.members}, {"since_epoch", s.since_epoch}}
      .dump();
}

Result<uint64_t> decode_epoch(const std::string& key, const std::string& value) {
  auto j = parse_object(key, value);
  if (!j.ok()) return j.status();
  uint64_t epoch = 0;
  SHOAL_TRY(read_u64(key, *j, "epoch", UINT64_MAX, &epoch));
  if (epoch == 0) return corrupt(key, "epoch 0");
  return epoch;
}

Result<ShardState> decode_shard(const std::string& key, const Versioned& v) {
  auto j = parse_object(key, v.value);
  if (!j.ok()) return j.status();
  ShardState s;
  SHOAL_TRY(read_u32(key, *j, "leader_replica", &s.leader_replica));
  SHOAL_TRY(read_array(key, *j, "members", &s.members));
  SHOAL_TRY(read_u64(key, *j, "since_epoch", UINT64_MAX, &s.since_epoch));
  const Status valid = check_shard(s, 0);
  if (!valid.ok()) {
    return corrupt(key, "leader_replica " + std::to_string(s.leader_replica) +
                            " is not among the members (or there are none)");
  }
  s.mod_revision = v.mod_revision;
  return s;
}

}  // namespace

ClusterStateStore::ClusterStateStore(ConfigManager& manager, std::string cluster)
    : manager_(manager), prefix_("/shoal/" + cluster + "/") {
  SHOAL_ASSERT(!cluster.empty() && cluster.find('/') == std::string::npos,
               "ClusterStateStore: bad cluster name '%s'", cluster.c_str());
}

std::string ClusterStateStore::epoch_key() const {
  return prefix_ + "epoch";
}
std::string ClusterStateStore::shard_key(uint32_t shard) const {
  return prefix_ + "shards/" + std::to_string(shard);
}
std::string ClusterStateStore::final_watermark_key(uint64_t epoch, uint32_t shard) const {
  return prefix_ + "epochs/" + std::to_string(epoch) + "/final_watermark/" + std::to_string(shard);
}
std::string ClusterStateStore::epoch_floor_key(uint64_t epoch, uint32_t shard) const {
  return prefix_ + "epochs/" + std::to_string(epoch) + "/floor/" + std::to_string(shard);
}
std::string ClusterStateStore::fvw_key(uint64_t epoch) const {
  return prefix_ + "epochs/" + std::to_string(epoch) + "/fvw";
}
std::string ClusterStateStore::alive_key(uint32_t shard) const {
  return prefix_ + "alive/" + std::to_string(shard);
}

Result<bool> ClusterStateStore::initialize(const std::vector<ShardState>& shards) {
  if (shards.empty()) return Status::InvalidArgument("initialize: no shards");
  std::vector<TxnCompare> compares{{epoch_key(), 0}};
  std::vector<TxnPut> puts{{epoch_key(), encode_epoch(1), 0}};
  for (uint32_t s = 0; s < shards.size(); ++s) {
    SHOAL_TRY(check_shard(shards[s], s));
    ShardState first = shards[s];
    first.since_epoch = 1;
    puts.push_back({shard_key(s), encode_shard(first), 0});
  }
  auto r = manager_.txn(compares, puts);
  if (!r.ok()) return r.status();
  return r->succeeded;
}

Result<ClusterState> ClusterStateStore::load_state() {
  // One range over the prefix: the epoch and every shard at one revision of the store.
  auto kvs = manager_.range(prefix_);
  if (!kvs.ok()) return kvs.status();
  ClusterState state;
  const std::string epoch = epoch_key();
  const std::string shards = prefix_ + "shards/";
  std::vector<std::optional<ShardState>> found;
  for (const KeyValue& kv : *kvs) {
    if (kv.key == epoch) {
      auto e = decode_epoch(kv.key, kv.versioned.value);
      if (!e.ok()) return e.status();
      state.epoch = *e;
      state.epoch_revision = kv.versioned.mod_revision;
    } else if (kv.key.starts_with(shards)) {
      const std::string_view id_text = std::string_view(kv.key).substr(shards.size());
      uint32_t id = 0;
      auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
      if (ec != std::errc() || end != id_text.data() + id_text.size() || id >= 1'000'000) {
        return corrupt(kv.key, "not a shard number");
      }
      auto s = decode_shard(kv.key, kv.versioned);
      if (!s.ok()) return s.status();
      if (found.size() <= id) found.resize(id + 1);
      found[id] = std::move(*s);
    }
  }
  if (state.epoch == 0) {
    return Status::NotFound("config key '" + epoch + "' missing: cluster not initialized");
  }
  for (uint32_t s = 0; s < found.size(); ++s) {
    if (!found[s]) return corrupt(shard_key(s), "missing (shards are numbered from 0 on)");
    state.shards.push_back(std::move(*found[s]));
  }
  if (state.shards.empty()) return corrupt(shards, "no shards");
  return state;
}

Result<EpochChange> ClusterStateStore::begin_epoch_change(uint64_t expected_epoch, uint32_t shard,
                                                          uint32_t new_leader) {
  auto loaded = load_state();
  if (!loaded.ok()) return loaded.status();
  ClusterState& state = *loaded;
  if (state.epoch != expected_epoch) return EpochChange{false, std::move(state)};
  if (shard >= state.shards.size()) {
    return Status::InvalidArgument("begin_epoch_change: no shard " + std::to_string(shard));
  }
  ShardState next = state.shards[shard];
  next.leader_replica = new_leader;
  next.since_epoch = expected_epoch + 1;
  SHOAL_TRY(check_shard(next, shard));
  auto r = manager_.txn(
      {{epoch_key(), state.epoch_revision}, {shard_key(shard), state.shards[shard].mod_revision}},
      {{epoch_key(), encode_epoch(expected_epoch + 1), 0},
       {shard_key(shard), encode_shard(next), 0}});
  if (!r.ok()) return r.status();
  if (!r->succeeded) {
    auto now = load_state();
    if (!now.ok()) return now.status();
    return EpochChange{false, std::move(*now)};
  }
  state.epoch = expected_epoch + 1;
  state.epoch_revision = r->revision;
  next.mod_revision = r->revision;
  state.shards[shard] = std::move(next);
  return EpochChange{true, std::move(state)};
}

Result<EpochChange> ClusterStateStore::restart_in_epoch(uint64_t expected_epoch, uint64_t new_epoch,
                                                        const std::vector<uint32_t>& leaders) {
  SHOAL_ASSERT(new_epoch > expected_epoch, "restart_in_epoch: epoch %lu after %lu",
               static_cast<unsigned long>(new_epoch), static_cast<unsigned long>(expected_epoch));
  auto loaded = load_state();
  if (!loaded.ok()) return loaded.status();
  ClusterState& state = *loaded;
  if (state.epoch != expected_epoch) return EpochChange{false, std::move(state)};
  if (!leaders.empty() && leaders.size() != state.shards.size()) {
    return Status::InvalidArgument(fmt::format("restart_in_epoch: {} leaders for {} shards",
                                               leaders.size(), state.shards.size()));
  }
  std::vector<TxnCompare> compares{{epoch_key(), state.epoch_revision}};
  std::vector<TxnPut> puts{{epoch_key(), encode_epoch(new_epoch), 0}};
  for (uint32_t s = 0; s < state.shards.size(); ++s) {
    ShardState& next = state.shards[s];
    compares.push_back({shard_key(s), next.mod_revision});
    next.since_epoch = new_epoch;
    if (!leaders.empty()) {
      next.leader_replica = leaders[s];
      SHOAL_TRY(check_shard(next, s));
    }
    puts.push_back({shard_key(s), encode_shard(next), 0});
  }
  auto r = manager_.txn(compares, puts);
  if (!r.ok()) return r.status();
  if (!r->succeeded) {
    auto now = load_state();
    if (!now.ok()) return now.status();
    return EpochChange{false, std::move(*now)};
  }
  state.epoch = new_epoch;
  state.epoch_revision = r->revision;
  for (ShardState& sh : state.shards) sh.mod_revision = r->revision;
  return EpochChange{true, std::move(state)};
}

Result<std::string> ClusterStateStore::create_once(const std::string& key,
                                                   const std::string& value) {
  auto r = manager_.cas(key, 0, value);
  if (!r.ok()) return r.status();
  if (r->won) return value;
  // Written-once keys are never removed, so a lost create finds the winner's value.
  if (!r->current) return corrupt(key, "vanished after a create lost to it");
  return std::move(r->current->value);
}

Result<uint64_t> ClusterStateStore::create_u64_once(const std::string& key, const char* field,
                                                    uint64_t value) {
  auto stored = create_once(key, json{{field, value}}.dump());
  if (!stored.ok()) return stored.status();
  auto j = parse_object(key, *stored);
  if (!j.ok()) return j.status();
  uint64_t out = 0;
  SHOAL_TRY(read_u64(key, *j, field, UINT64_MAX, &out));
  return out;
}

Result<std::optional<uint64_t>> ClusterStateStore::get_u64(const std::string& key,
                                                           const char* field) {
  auto j = get_object(key);
  if (!j.ok()) return j.status();
  if (!*j) return std::optional<uint64_t>();
  uint64_t out = 0;
  SHOAL_TRY(read_u64(key, **j, field, UINT64_MAX, &out));
  return std::optional<uint64_t>(out);
}

Result<uint64_t> ClusterStateStore::publish_final_watermark(uint64_t epoch, uint32_t shard,
                                                            uint64_t watermark) {
  return create_u64_once(final_watermark_key(epoch, shard), "watermark", watermark);
}

Result<uint64_t> ClusterStateStore::publish_final_watermark_as_leader(
    uint64_t epoch, uint32_t shard, uint64_t watermark, uint32_t leader, uint64_t leader_epoch) {
  const std::string key = final_watermark_key(epoch, shard);
  constexpr int kAttemptsMax = 8;  // each lost only to a concurrent write of one of the two keys
  for (int attempt = 0; attempt < kAttemptsMax; ++attempt) {
    auto state = load_as_leader(epoch, shard, leader, leader_epoch);
    if (!state.ok()) return state.status();
    const ShardState& now = state->shards[shard];
    auto stored = final_watermark(epoch, shard);
    if (!stored.ok()) return stored.status();
    if (stored->has_value()) return **stored;  // an earlier attempt of ours published it
    auto r = manager_.txn({{key, 0}, {shard_key(shard), now.mod_revision}},
                          {{key, json{{"watermark", watermark}}.dump(), 0}});
    if (!r.ok()) return r.status();
    if (r->succeeded) return watermark;
  }
  return Status::Unavailable(fmt::format(
      "publish_final_watermark: {} lost {} times to concurrent writes", key, kAttemptsMax));
}

Result<ClusterState> ClusterStateStore::load_as_leader(uint64_t epoch, uint32_t shard,
                                                       uint32_t leader, uint64_t leader_epoch) {
  auto state = load_state();
  if (!state.ok()) return state.status();
  if (shard >= state->shards.size()) {
    return Status::InvalidArgument(fmt::format("publish_final_watermark: no shard {}", shard));
  }
  const ShardState& now = state->shards[shard];
  // An appointment after ours (even of the same replica again) is a later epoch.
  if (now.leader_replica != leader || now.since_epoch > leader_epoch) {
    return Status::Aborted(fmt::format(
        "deposed: shard {} is led by replica {} since epoch {}, not by replica {} since epoch "
        "{}; final watermark of epoch {} not published",
        shard, now.leader_replica, now.since_epoch, leader, leader_epoch, epoch));
  }
  return state;
}

Result<ClusterStateStore::TakeoverRecord> ClusterStateStore::publish_takeover(
    uint64_t epoch, uint32_t shard, uint64_t final_watermark, uint64_t floor, uint32_t leader,
    uint64_t leader_epoch) {
  auto state = load_as_leader(epoch, shard, leader, leader_epoch);
  if (!state.ok()) return state.status();
  TakeoverRecord ours{final_watermark, floor,
                      std::vector<uint64_t>(state->shards.size(), kInfiniteWatermark)};
  ours.fvw[shard] = final_watermark;
  const std::string fw_key = final_watermark_key(epoch, shard);
  const std::string floor_key = epoch_floor_key(epoch, shard);
  const std::string fvw = fvw_key(epoch);
  auto r = manager_.txn({{fw_key, 0},
                         {floor_key, 0},
                         {fvw, 0},
                         {shard_key(shard), state->shards[shard].mod_revision}},
                        {{fw_key, json{{"watermark", final_watermark}}.dump(), 0},
                         {floor_key, json{{"floor", floor}}.dump(), 0},
                         {fvw, json{{"fvw", ours.fvw}}.dump(), 0}});
  if (!r.ok()) return r.status();
  if (r->succeeded) return ours;
  // Lost: an earlier attempt stored some of it, or the shard's key moved. The three calls
  // check again and keep what is stored; the FVW follows the final watermark stored.
  TakeoverRecord stored;
  auto fw = publish_final_watermark_as_leader(epoch, shard, final_watermark, leader, leader_epoch);
  if (!fw.ok()) return fw.status();
  stored.final_watermark = *fw;
  auto fl = publish_epoch_floor(epoch, shard, floor);
  if (!fl.ok()) return fl.status();
  stored.floor = *fl;
  ours.fvw[shard] = stored.final_watermark;
  auto v = publish_fvw(epoch, ours.fvw);
  if (!v.ok()) return v.status();
  stored.fvw = std::move(*v);
  return stored;
}

Result<std::optional<uint64_t>> ClusterStateStore::final_watermark(uint64_t epoch, uint32_t shard) {
  return get_u64(final_watermark_key(epoch, shard), "watermark");
}

Result<uint64_t> ClusterStateStore::publish_epoch_floor(uint64_t epoch, uint32_t shard,
                                                        uint64_t floor) {
  return create_u64_once(epoch_floor_key(epoch, shard), "floor", floor);
}

Result<std::optional<uint64_t>> ClusterStateStore::epoch_floor(uint64_t epoch, uint32_t shard) {
  return get_u64(epoch_floor_key(epoch, shard), "floor");
}

Result<std::optional<json>> ClusterStateStore::get_object(const std::string& key) {
  auto v = manager_.get(key);
  if (!v.ok()) return v.status();
  if (!*v) return std::optional<json>();
  auto j = parse_object(key, (*v)->value);
  if (!j.ok()) return j.status();
  return std::optional<json>(std::move(*j));
}

Result<std::vector<uint64_t>> ClusterStateStore::publish_fvw(uint64_t epoch,
                                                             const std::vector<uint64_t>& fvw) {
  SHOAL_ASSERT(!fvw.empty(), "publish_fvw: empty vector");
  const std::string key = fvw_key(epoch);
  auto stored = create_once(key, json{{"fvw", fvw}}.dump());
  if (!stored.ok()) return stored.status();
  auto j = parse_object(key, *stored);
  if (!j.ok()) return j.status();
  std::vector<uint64_t> out;
  SHOAL_TRY(read_array(key, *j, "fvw", &out));
  return out;
}

Result<std::optional<std::vector<uint64_t>>> ClusterStateStore::load_fvw(uint64_t epoch) {
  const std::string key = fvw_key(epoch);
  auto j = get_object(key);
  if (!j.ok()) return j.status();
  if (!*j) return std::optional<std::vector<uint64_t>>();
  std::vector<uint64_t> out;
  SHOAL_TRY(read_array(key, **j, "fvw", &out));
  return std::optional<std::vector<uint64_t>>(std::move(out));
}

Status ClusterStateStore::announce_alive(uint32_t shard, uint32_t replica, int64_t lease) {
  return manager_.put(alive_key(shard), json{{"replica", replica}}.dump(), lease).status();
}

Result<std::optional<uint32_t>> ClusterStateStore::alive_replica(uint32_t shard) {
  const std::string key = alive_key(shard);
  auto j = get_object(key);
  if (!j.ok()) return j.status();
  if (!*j) return std::optional<uint32_t>();
  uint32_t replica = 0;
  SHOAL_TRY(read_u32(key, **j, "replica", &replica));
  return std::optional<uint32_t>(replica);
}

RestartLeaderPick pick_restart_leader(
    const std::vector<std::optional<std::vector<uint64_t>>>& reach, uint32_t named,
    uint64_t keep_lag_slots) {
  RestartLeaderPick pick;
  pick.leader = named;
  pick.named_can_lead = named < reach.size() && reach[named].has_value();
  // The furthest chosen index on each stream, over the replicas that can lead.
  std::vector<uint64_t> best;
  for (const auto& r : reach) {  // bounded by replicas x streams
    if (!r) continue;
    if (best.size() < r->size()) best.resize(r->size(), 0);
    for (size_t s = 0; s < r->size(); ++s) best[s] = std::max(best[s], (*r)[s]);
  }
  // The most r trails the furthest by on any stream, and the first stream where it does.
  const auto lag_of = [&](const std::vector<uint64_t>& r, uint32_t* stream) {
    uint64_t lag = 0;
    uint32_t where = 0;
    for (size_t s = 0; s < best.size(); ++s) {  // bounded by the streams
      const uint64_t behind = best[s] - (s < r.size() ? r[s] : 0);
      if (behind > lag) {
        lag = behind;
        where = static_cast<uint32_t>(s);
      }
    }
    if (stream != nullptr) *stream = where;
    return lag;
  };
  std::optional<uint64_t> least;  // the least lag of a replica that can lead
  for (uint32_t r = 0; r < reach.size(); ++r) {
    if (!reach[r]) continue;
    const uint64_t lag = lag_of(*reach[r], nullptr);
    if (!least || lag < *least) {
      least = lag;
      pick.leader = r;  // the lowest id of least lag
    }
  }
  if (!least) {  // nobody can lead
    pick.leader = named;
    return pick;
  }
  if (pick.named_can_lead) {
    pick.named_lag = lag_of(*reach[named], &pick.stream);
    if (pick.named_lag <= keep_lag_slots || pick.named_lag == *least) pick.leader = named;
    pick.ahead = pick.leader;
    const uint64_t top = pick.stream < best.size() ? best[pick.stream] : 0;
    const auto at = [&](uint32_t r) {
      return reach[r] && pick.stream < reach[r]->size() ? (*reach[r])[pick.stream] : 0;
    };
    for (uint32_t r = 0; r < reach.size() && at(pick.ahead) != top; ++r) {
      if (at(r) == top) pick.ahead = r;
    }
  } else {
    pick.ahead = pick.leader;
  }
  return pick;
}

}  // namespace shoal::cluster

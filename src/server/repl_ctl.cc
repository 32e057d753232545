#include "src/server/repl_ctl.h"

#include <time.h>

#include <fmt/format.h>

#include "src/base/env.h"
#include "src/base/json_field.h"
#include "src/server/process.h"

namespace shoal::server {
namespace {

constexpr uint64_t kReplCallTimeoutMs = 10'000;
constexpr uint64_t kReportWaitMs = 1000;  // per report call (the server bounds it too)

// One follower of a kRepl report, every field checked (a server's reply is peer input).
Result<ReplicaState> replica_of(const nlohmann::json& f) {
  ReplicaState r;
  uint64_t cpu_ns = 0;
  nlohmann::json failures, reads;
  for (const Status& st :
       {json_optional_field(f, "replica", &r.replica), json_optional_field(f, "lost", &r.lost),
        json_optional_field(f, "applied_tid", &r.applied_tid),
        json_optional_field(f, "digest", &r.digest), json_optional_field(f, "checked", &r.checked),
        json_optional_field(f, "check_failures", &failures),
        json_optional_field(f, "replay_txns", &r.replay_txns),
        json_optional_field(f, "replay_cpu_ns", &cpu_ns),
        json_optional_field(f, "wal_bytes", &r.wal_bytes),
        json_optional_field(f, "reads", &reads)}) {
    SHOAL_TRY(st);
  }
  if (!failures.is_null() && !failures.is_array()) {
    return Status::InvalidArgument("'check_failures': not a list");
  }
  for (const auto& c : failures) {
    r.check_failures.push_back(c.is_string() ? c.get<std::string>() : c.dump());
  }
  r.replay_txns_per_cpu_sec =
      cpu_ns == 0 ? 0 : static_cast<double>(r.replay_txns) * 1e9 / static_cast<double>(cpu_ns);
  if (!reads.is_null()) {
    auto parsed = repl::FollowerReadStats::parse(reads);
    if (!parsed.ok()) return Status::InvalidArgument("reads." + parsed.status().message());
    r.reads = std::move(*parsed);
  }
  return r;
}

// The fields of a finished kRepl report into *out.
Status read_report(const nlohmann::json& reply, ShardReplicaStates* out) {
  nlohmann::json followers = nlohmann::json::array();
  SHOAL_TRY(json_optional_field(reply, "floor", &out->floor));
  SHOAL_TRY(json_optional_field(reply, "leader_digest", &out->leader_digest));
  SHOAL_TRY(json_optional_field(reply, "leader_replica", &out->leader_replica));
  SHOAL_TRY(json_optional_field(reply, "followers", &followers));
  if (!followers.is_array()) return Status::InvalidArgument("'followers': not a list");
  for (const auto& f : followers) {
    auto r = replica_of(f);
    if (!r.ok()) return Status::InvalidArgument("followers[]." + r.status().message());
    out->followers.push_back(std::move(*r));
  }
  return Status::Ok();
}

// Polls kRepl "report" on one shard until it is done or the deadline passes.
void collect_shard(ControlClient& client, uint32_t s, const nlohmann::json& payments,
                   uint64_t deadline_ms, ShardReplicaStates* out) {
  nlohmann::json request = {{"step", "report"}, {"digest", true}, {"wait_ms", kReportWaitMs}};
  if (!payments.is_null()) {
    request["check"] = true;
    request["payments"] = payments;
  }
  std::string last = "no answer";
  for (;;) {  // bounded by the deadline
    auto reply = client.call(s, kRepl, request, kReplCallTimeoutMs);
    if (!reply.ok()) {
      out->error = reply.status().to_string();
      return;
    }
    bool done = false, closed = false;
    std::string lagging;
    Status read = json_optional_field(*reply, "done", &done);
    if (read.ok() && done) read = read_report(*reply, out);
    if (read.ok() && !done) read = json_optional_field(*reply, "closed", &closed);
    if (read.ok() && !done) read = json_optional_field(*reply, "lagging", &lagging);
    if (!read.ok()) {
      out->followers.clear();
      out->error = fmt::format("shard {}: malformed replication report: {}", s, read.message());
      return;
    }
    if (done) return;
    last = !lagging.empty() ? lagging : closed ? "busy" : "still closing";
    if (now_ms() >= deadline_ms) {
      out->error = "not quiesced in time: " + last;
      return;
    }
    sleep_ms(20);
  }
}

}  // namespace

std::vector<ShardReplicaStates> collect_replica_states(ControlClient& client,
                                                       const cluster::ClusterConfig& config,
                                                       const std::vector<nlohmann::json>& payments,
                                                       uint64_t timeout_ms) {
  const uint32_t n = static_cast<uint32_t>(config.shards.size());
  std::vector<ShardReplicaStates> out(n);
  for (uint32_t s = 0; s < n; ++s) {
    out[s].shard = s;
    auto closing = client.call(s, kRepl, {{"step", "close"}}, kReplCallTimeoutMs);
    if (!closing.ok()) out[s].error = closing.status().to_string();
  }
  const uint64_t deadline_ms = now_ms() + timeout_ms;
  for (uint32_t s = 0; s < n; ++s) {
    if (!out[s].error.empty()) continue;
    collect_shard(client, s, payments.empty() ? nlohmann::json() : payments[s], deadline_ms,
                  &out[s]);
  }
  return out;
}

namespace {

// One answering follower of `st`: its table line(s), its JSON fields into *j, and the first
// difference, failed check or torn snapshot into *differs (if still Ok).
void report_follower(const ShardReplicaStates& st, const ReplicaState& r, std::string* table,
                     nlohmann::json* j, Status* differs) {
  const bool equal = r.digest == st.leader_digest;
  const std::string consistency = !r.checked                 ? "not checked"
                                  : r.check_failures.empty() ? "ok"
                                                             : "FAILED";
  *table +=
      fmt::format("shard {} replica {}: digest {:016x} {}, consistency {}{}\n", st.shard, r.replica,
                  r.digest, equal ? "= leader" : "DIFFERS from the leader", consistency,
                  r.check_failures.empty() ? "" : ": " + r.check_failures.front());
  if (r.reads.threads > 0) *table += "  " + r.reads.to_text() + "\n";
  (*j)["digest"] = fmt::format("{:016x}", r.digest);
  (*j)["equal_to_leader"] = equal;
  (*j)["consistency"] = consistency == "FAILED" ? "failed" : consistency;
  (*j)["check_failures"] = r.check_failures;
  (*j)["applied_tid"] = r.applied_tid;
  (*j)["replay_txns"] = r.replay_txns;
  (*j)["replay_txns_per_cpu_sec"] = r.replay_txns_per_cpu_sec;
  (*j)["wal_bytes"] = r.wal_bytes;
  (*j)["follower_reads"] = r.reads.threads == 0 ? nlohmann::json(nullptr) : r.reads.to_json();
  if (!differs->ok()) return;  // the first one stands
  if (!equal) {
    *differs = Status::Corruption(
        fmt::format("shard {} replica {}: digest {:016x} differs from the leader's {:016x}",
                    st.shard, r.replica, r.digest, st.leader_digest));
  } else if (!r.check_failures.empty()) {
    *differs = Status::Corruption(fmt::format("shard {} replica {}: consistency check failed: {}",
                                              st.shard, r.replica, r.check_failures.front()));
  } else if (r.reads.torn > 0) {
    *differs = Status::Corruption(
        fmt::format("shard {} replica {}: {} torn snapshots in follower reads: {}", st.shard,
                    r.replica, r.reads.torn, r.reads.first_violation));
  }
}

}  // namespace

Status replica_verdict(const std::vector<ShardReplicaStates>& states, std::string* table,
                       nlohmann::json* json, bool* shard_unverified) {
  Status differs, missing;
  if (shard_unverified != nullptr) *shard_unverified = false;
  *json = nlohmann::json::array();
  for (const ShardReplicaStates& st : states) {
    if (!st.error.empty()) {
      if (shard_unverified != nullptr) *shard_unverified = true;
      *table += fmt::format("shard {}: replicas UNAVAILABLE: {}\n", st.shard, st.error);
      if (missing.ok())
        missing = Status::Unavailable(fmt::format("shard {}: {}", st.shard, st.error));
      json->push_back({{"shard", st.shard}, {"error", st.error}});
      continue;
    }
    *table += fmt::format("shard {} replica {}: digest {:016x} (leader), floor {:#x}\n", st.shard,
                          st.leader_replica, st.leader_digest, st.floor);
    json->push_back({{"shard", st.shard},
                     {"replica", st.leader_replica},
                     {"leader", true},
                     {"digest", fmt::format("{:016x}", st.leader_digest)},
                     {"equal_to_leader", true}});
    for (const ReplicaState& r : st.followers) {
      nlohmann::json j = {{"shard", st.shard}, {"replica", r.replica}};
      if (r.lost) {
        *table += fmt::format("shard {} replica {}: LOST (disconnected from its leader)\n",
                              st.shard, r.replica);
        j["lost"] = true;
        json->push_back(j);
        if (missing.ok()) {
          missing = Status::Unavailable(
              fmt::format("shard {} replica {}: disconnected", st.shard, r.replica));
        }
        continue;
      }
      report_follower(st, r, table, &j, &differs);
      json->push_back(j);
    }
  }
  return !differs.ok() ? differs : missing;
}

}  // namespace shoal::server

#include "src/server/cluster_ctl.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/base/env.h"
#include "src/base/json_field.h"
#include "src/base/memory_reserve.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/config.h"
#include "src/cluster/etcd_config_manager.h"
#include "src/net/tcp_transport.h"
#include "src/repl/acceptor_log.h"
#include "src/repl/follower.h"
#include "src/server/cluster_config.h"
#include "src/server/control.h"
#include "src/server/dist_micro.h"
#include "src/server/failover_run.h"
#include "src/server/process.h"
#include "src/server/repl_ctl.h"

namespace shoal::server {
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kPingTimeoutMs = 1000;
constexpr uint64_t kRestartReadyTimeoutMs = 600'000;
// A restart keeps the leader etcd names while its log trails the furthest replica's by at most
// this many chosen slots on every stream: a quarter of the 256 each acceptor retains
// (FollowerOptions::retain_chosen_slots), so its phase 1 completes, and a few slots of
// unsynced chosen hints never move the leadership.
constexpr uint64_t kRestartKeepLeaderLagSlots = 64;

std::string run_dir_of(const ClusterOptions& o, const cluster::ClusterConfig& c) {
  return o.run_dir.empty() ? fmt::format(".shoal/{}", c.name) : o.run_dir;
}

// Replica 0 is the shard server; r >= 1 its `shoal replica` followers.
std::string pid_path(const std::string& dir, uint32_t shard, uint32_t replica = 0) {
  return replica == 0 ? fmt::format("{}/shard-{}.pid", dir, shard)
                      : cluster::replica_dir(dir, shard, replica) + ".pid";
}

// `up`'s etcd (a replicated cluster started afresh): its pid, for `down`, and its client
// endpoint, for the tools that ask it which replica leads each shard.
std::string etcd_pid_path(const std::string& dir) {
  return dir + "/etcd.pid";
}
std::string etcd_endpoint_path(const std::string& dir) {
  return dir + "/etcd.endpoint";
}

// The pid in <dir>/etcd.pid if that process is still an etcd (not a reused pid).
pid_t live_etcd_pid(const std::string& dir) {
  std::ifstream in(etcd_pid_path(dir));
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return -1;
  std::ifstream comm(fmt::format("/proc/{}/comm", pid));
  std::string name;
  comm >> name;
  ServerProcess p;
  p.pid = static_cast<pid_t>(pid);
  return name == "etcd" && alive(p) ? p.pid : -1;
}

// Stops `up`'s etcd (not our child) as the servers are stopped: SIGTERM, SIGKILL after
// timeout_ms. Whether one was running.
bool stop_run_dir_etcd(const std::string& dir, uint64_t timeout_ms) {
  const pid_t pid = live_etcd_pid(dir);
  std::error_code ec;
  fs::remove(etcd_pid_path(dir), ec);
  fs::remove(etcd_endpoint_path(dir), ec);
  if (pid <= 0) return false;
  ServerProcess p;
  p.pid = pid;
  stop_servers({p}, timeout_ms);
  return true;
}

// The configuration manager of the cluster run from `dir`: the members the config names, else
// the etcd `up` started in `dir` if it still runs. Empty: none.
std::vector<std::string> cluster_etcd_endpoints(const cluster::ClusterConfig& config,
                                                const std::string& dir) {
  if (!config.etcd.empty()) return config.etcd;
  if (live_etcd_pid(dir) <= 0) return {};
  std::ifstream in(etcd_endpoint_path(dir));
  std::string endpoint;
  if (!(in >> endpoint)) return {};
  return {endpoint};
}

// The pid in a pid file, if that process is still a `shoal server` or a `shoal replica` (not
// a reused pid). Either may hold any replica's pid file: a follower is promoted in place, and a
// restart after a failover starts the leader etcd names as `shoal server`.
pid_t live_server_pid(const std::string& path) {
  std::ifstream in(path);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return -1;
  std::ifstream cmd(fmt::format("/proc/{}/cmdline", pid));
  std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  if (args.find(std::string("server\0--config", 15)) == std::string::npos &&
      args.find(std::string("replica\0--config", 16)) == std::string::npos) {
    return -1;
  }
  ServerProcess p;
  p.pid = static_cast<pid_t>(pid);
  return alive(p) ? p.pid : -1;
}

Result<cluster::ClusterConfig> load(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("--config: required");
  return load_cluster_config(path);
}

// What `up` started the cluster with (<run_dir>/up.json): a restart keeps it, in a new epoch.
struct UpRecord {
  uint64_t epoch = 1;
  std::string workload;
  uint32_t workers = 0;
  uint64_t keys_per_partition = 0;
  nlohmann::json settings = nlohmann::json::object();  // up_settings() of the up that wrote it
};

std::string up_record_path(const std::string& dir) {
  return dir + "/up.json";
}

// The record, or nullopt when the run directory has none.
Result<std::optional<UpRecord>> read_up_record(const std::string& dir) {
  std::ifstream in(up_record_path(dir));
  if (!in) return std::optional<UpRecord>();
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  UpRecord r;
  Status read = j.is_object() ? Status::Ok() : Status::InvalidArgument("not a JSON object");
  if (read.ok()) read = json_optional_field(j, "epoch", &r.epoch);
  if (read.ok()) read = json_optional_field(j, "workload", &r.workload);
  if (read.ok()) read = json_optional_field(j, "workers", &r.workers);
  if (read.ok()) read = json_optional_field(j, "keys_per_partition", &r.keys_per_partition);
  if (read.ok()) read = json_optional_field(j, "settings", &r.settings);
  if (read.ok() && !r.settings.is_object())
    read = Status::InvalidArgument("'settings': not an object");
  if (!read.ok() || r.epoch == 0 || r.workload.empty() || r.workers == 0) {
    return Status::Corruption(fmt::format("{}: unreadable ({}); `cluster up --fresh` starts over",
                                          up_record_path(dir), read.message()));
  }
  return std::optional<UpRecord>(r);
}

Status write_up_record(const std::string& dir, const UpRecord& r) {
  const std::string path = up_record_path(dir), tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << nlohmann::json{{"epoch", r.epoch},
                        {"workload", r.workload},
                        {"workers", r.workers},
                        {"keys_per_partition", r.keys_per_partition},
                        {"settings", r.settings}}
             .dump()
      << "\n";
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("cannot write " + path);
  }
  return Status::Ok();
}

// The flags of `up` that up.json records (its "settings", keyed by flag) and that a restart
// keeps unless given again. The load's own (workload, workers, keys) are the record's fields:
// a restart refuses others.
nlohmann::json up_settings(const ClusterOptions& o) {
  return {{"--fsync", o.fsync},
          {"--batch-txns", o.batch_txns},
          {"--batch-us", o.batch_us},
          {"--lead-ms-max", o.lead_ms_max},
          {"--serve-reads", o.serve_reads},
          {"--checkpoint-interval-ms", o.checkpoint_interval_ms},
          {"--memory-reserve-mb", o.memory_reserve_mb},
          {"--cpu-placement", o.cpu_placement},
          {"--no-read-only-hint", !o.tpcc_read_only_hint},
          {"--ack-journal", o.ack_journal}};
}

// *o with each setting in `recorded` whose flag was not given taken from it; *kept lists those
// that change what this `up` would have run with ("--fsync always", ...). A setting an older
// up.json lacks stays as given.
Status keep_recorded_settings(const nlohmann::json& recorded, ClusterOptions* o,
                              std::vector<std::string>* kept) {
  const nlohmann::json now = up_settings(*o);
  const auto keep = [&](const char* flag, auto* field) -> Status {
    if (o->flags_given.count(flag) != 0) return Status::Ok();
    SHOAL_TRY(json_optional_field(recorded, flag, field));
    const auto it = recorded.find(flag);
    if (it != recorded.end() && *it != now[flag]) {
      kept->push_back(
          it->is_boolean()
              ? std::string(flag)
              : fmt::format("{} {}", flag, it->is_string() ? it->get<std::string>() : it->dump()));
    }
    return Status::Ok();
  };
  bool no_read_only_hint = !o->tpcc_read_only_hint;
  SHOAL_TRY(keep("--fsync", &o->fsync));
  SHOAL_TRY(keep("--batch-txns", &o->batch_txns));
  SHOAL_TRY(keep("--batch-us", &o->batch_us));
  SHOAL_TRY(keep("--lead-ms-max", &o->lead_ms_max));
  SHOAL_TRY(keep("--serve-reads", &o->serve_reads));
  SHOAL_TRY(keep("--checkpoint-interval-ms", &o->checkpoint_interval_ms));
  SHOAL_TRY(keep("--memory-reserve-mb", &o->memory_reserve_mb));
  SHOAL_TRY(keep("--cpu-placement", &o->cpu_placement));
  SHOAL_TRY(keep("--no-read-only-hint", &no_read_only_hint));
  SHOAL_TRY(keep("--ack-journal", &o->ack_journal));
  o->tpcc_read_only_hint = !no_read_only_hint;
  return Status::Ok();
}

// The settings a restart takes from `rec` (up.json), or a Corruption naming the file.
Result<ClusterOptions> restart_options(const ClusterOptions& o, const std::string& dir,
                                       const UpRecord& rec) {
  ClusterOptions kept_options = o;
  std::vector<std::string> kept;
  if (Status s = keep_recorded_settings(rec.settings, &kept_options, &kept); !s.ok()) {
    return Status::Corruption(fmt::format("{}: settings: {}; `cluster up --fresh` starts over",
                                          up_record_path(dir), s.message()));
  }
  if (!kept.empty()) {
    fmt::print("as up.json recorded: {} (give a flag again to change it)\n", fmt::join(kept, ", "));
  }
  return kept_options;
}

bool any_replica_dir(const std::string& dir, const cluster::ClusterConfig& c) {
  std::error_code ec;
  for (uint32_t s = 0; s < c.shards.size(); ++s) {
    for (uint32_t r = 0; r < c.shards[s].replicas.size(); ++r) {
      if (fs::exists(cluster::replica_dir(dir, s, r), ec)) return true;
    }
  }
  return false;
}

// `up --fresh`, or the first `up`: what an earlier incarnation left goes (its WALs: a leader
// refuses to start a fresh log over one; its ack journals: they name orders of the old load).
void clear_run_dir(const std::string& dir, const cluster::ClusterConfig& c) {
  std::error_code ec;
  for (uint32_t s = 0; s < c.shards.size(); ++s) {
    for (uint32_t r = 0; r < c.shards[s].replicas.size(); ++r) {
      fs::remove_all(cluster::replica_dir(dir, s, r), ec);
    }
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {  // bounded by the directory
    const std::string name = e.path().filename().string();
    if (name.starts_with("acks-") && name.ends_with(".bin")) fs::remove(e.path(), ec);
  }
}

// How `up` starts: a restart from disk (Ok with *restart true and *rec the new epoch's record)
// or afresh. A restart keeps what the record says; flags given must agree with it.
Status plan_up(const ClusterOptions& o, const cluster::ClusterConfig& c, const std::string& dir,
               bool* restart, UpRecord* rec) {
  rec->workload = o.workload;
  rec->workers = o.workers != 0 ? o.workers : c.workers_per_shard;
  rec->keys_per_partition = o.keys_per_partition;
  *restart = false;
  auto recorded = read_up_record(dir);
  if (o.fresh || !any_replica_dir(dir, c)) {
    // Nothing to recover (one replica per shard without --fsync keeps no log): afresh, in
    // epoch 1 (the replica directories go, and with them every log of a later epoch).
    rec->epoch = 1;
    return Status::Ok();
  }
  if (!recorded.ok()) return recorded.status();
  if (!recorded->has_value()) {
    return Status::NotSupported(fmt::format(
        "{} holds replica directories but no up.json (an older shoal started that cluster): "
        "`cluster up --fresh` clears them and loads afresh",
        dir));
  }
  const UpRecord& was = **recorded;
  const auto differs = [&](bool given, const std::string& flag, const std::string& now,
                           const std::string& then) -> Status {
    if (!given || now == then) return Status::Ok();
    return Status::InvalidArgument(fmt::format(
        "{} {}: {} restarts the cluster it holds, which ran {} {} (up.json); drop the flag, or "
        "`--fresh` to load afresh",
        flag, now, dir, flag, then));
  };
  SHOAL_TRY(
      differs(o.flags_given.count("--workload") != 0, "--workload", o.workload, was.workload));
  SHOAL_TRY(
      differs(o.workers != 0, "--workers", std::to_string(o.workers), std::to_string(was.workers)));
  SHOAL_TRY(differs(o.flags_given.count("--keys-per-partition") != 0, "--keys-per-partition",
                    std::to_string(o.keys_per_partition), std::to_string(was.keys_per_partition)));
  *rec = was;
  rec->epoch = was.epoch + 1;
  *restart = true;
  return Status::Ok();
}

// Whether a replica directory holds a log a leader can rebuild its store from (a follower and
// a leader both write the schema into theirs).
bool holds_log(const std::string& replica_dir) {
  std::error_code ec;
  return fs::exists(replica_dir + "/schema.json", ec);
}

// Whether a replica directory carries a rejoin mark on some stream (repl::AcceptorLog::
// mark_rejoining): it lost its state and has not caught up, so it has no vote.
bool holds_rejoin_mark(const std::string& replica_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(replica_dir, ec)) {  // bounded by its files
    const std::string name = e.path().filename().string();
    if (name.starts_with("stream-") && name.ends_with(".rejoin")) return true;
  }
  return false;
}

// A restart needs each shard's leader (`leaders[s]`, replica 0 when empty) to hold a log: it
// rebuilds its store from it alone. One still rejoining after a lost directory cannot vote,
// so its phase 1 could not complete either.
Status check_leader_dirs(const cluster::ClusterConfig& c, const std::string& dir,
                         const std::vector<uint32_t>& leaders) {
  for (uint32_t s = 0; s < c.shards.size(); ++s) {
    const uint32_t r = s < leaders.size() ? leaders[s] : 0;
    const std::string leader = cluster::replica_dir(dir, s, r);
    if (!holds_log(leader)) {
      return Status::NotFound(fmt::format(
          "shard {}'s leader directory {} (replica {}) holds no log: the cluster cannot restart "
          "from disk (`cluster up --fresh` loads afresh)",
          s, leader, r));
    }
    if (holds_rejoin_mark(leader)) {
      return Status::InvalidArgument(fmt::format(
          "shard {}'s leader directory {} (replica {}) lost its log and had not caught up when "
          "it stopped (a stream-S.rejoin mark): it has no vote and cannot lead; the cluster "
          "cannot restart from disk with it as the leader",
          s, leader, r));
    }
  }
  return Status::Ok();
}

// Followers restarting in a cluster with history over a directory that holds no log (lost,
// or replaced by an empty disk) rejoin without a vote until they have caught up
// (repl::mark_replica_dir_rejoining; docs/REPLICATION.md, "A replica that lost its directory
// rejoins without a vote"): otherwise their empty promises could complete a new leader's
// phase 1 without the chosen entries they had accepted.
Status mark_lost_follower_dir(const std::string& dir, uint32_t shard, uint32_t replica) {
  const std::string rd = cluster::replica_dir(dir, shard, replica);
  if (holds_log(rd)) return Status::Ok();
  SHOAL_TRY(repl::mark_replica_dir_rejoining(rd));
  fmt::print(
      "shard {} replica {}: {} holds no log (lost?): it restarts as a follower without a vote "
      "until it has caught up from its leader\n",
      shard, replica, rd);
  return Status::Ok();
}

// The replica shard s restarts as its leader: `named` (etcd's) unless its log trails another
// replica's by more than kRestartKeepLeaderLagSlots chosen slots on some stream, then the
// replica whose log reaches furthest (cluster::pick_restart_leader over each
// directory's reach, read without writing anything: repl::read_acceptor_reach). A leader that
// lags beyond the chosen slots the other acceptors retain cannot complete its phase 1, and the
// restart would fail every time (docs/REPLICATION.md, "Restarting a whole cluster from
// disk"). Says so on stdout when it is not `named`.
uint32_t restart_leader_from_disk(const cluster::ClusterConfig& c, const std::string& dir,
                                  uint32_t s, uint32_t named, uint32_t streams) {
  const size_t replicas = c.shards[s].replicas.size();
  std::vector<std::optional<std::vector<uint64_t>>> reach(replicas);
  for (uint32_t r = 0; r < replicas; ++r) {  // bounded by replicas x streams
    const std::string rd = cluster::replica_dir(dir, s, r);
    if (!holds_log(rd)) continue;
    std::vector<uint64_t> chosen;
    for (uint32_t st = 0; st < streams; ++st) {
      auto got = repl::read_acceptor_reach(rd, st);
      // Not a candidate: an unreadable or older journal, or a stream with no vote yet.
      if (!got.ok() || got->rejoining) break;
      chosen.push_back(got->chosen);
    }
    if (chosen.size() == streams) reach[r] = std::move(chosen);
  }
  const cluster::RestartLeaderPick pick =
      cluster::pick_restart_leader(reach, named, kRestartKeepLeaderLagSlots);
  // A named leader whose directory lost its log is not replaced here: it would come back as an
  // acceptor that forgot what it accepted, and the new leader's phase 1 could count its empty
  // promise instead of the survivor's acceptance of the last chosen entries (check_leader_dirs
  // refuses; OPERATIONS.md "Restarting a cluster" says what to do).
  if (pick.leader == named || !pick.named_can_lead) return named;
  fmt::print(
      "shard {}: replica {} (named by etcd) lags replica {} by {} slots on stream {}; "
      "restarting with replica {} as the leader\n",
      s, named, pick.ahead, pick.named_lag, pick.stream, pick.leader);
  return pick.leader;
}

// A replicated cluster's configuration manager (three replicas or more; with two no follower
// stands), started by `up` in the run directory. Afresh: a new one in epoch 1, every shard led
// by replica 0. A restart: the one the cluster ran with, over its data (the epoch and the
// leaders its failovers appointed), moved to the restart's epoch, one above both up.json's
// and etcd's, so every leader takes over in an epoch no log has seen (*rec's epoch is raised
// to it), with each shard's leader kept unless its log lags (restart_leader_from_disk); a
// cluster that ran without one gets a new one. Sets so->etcd and so->leaders.
Result<std::unique_ptr<cluster::EtcdProcess>> start_up_etcd(const cluster::ClusterConfig& config,
                                                            const std::string& dir, bool restart,
                                                            UpRecord* rec, SpawnOptions* so) {
  std::unique_ptr<cluster::EtcdProcess> etcd;
  std::string where = dir + "/etcd";
  if (!config.etcd.empty()) {  // named in the config: it runs already, and stays ours to use
    so->etcd = config.etcd;
    where = fmt::format("etcd at {}", fmt::join(config.etcd, ","));
    if (Status s = initialize_cluster_state(config, so->etcd, /*fresh=*/!restart); !s.ok()) {
      return Status::Unavailable(
          fmt::format("the configuration manager named in the config ({}) "
                      "cannot be used: {}",
                      where, s.to_string()));
    }
  } else {
    std::error_code ec;
    if (!restart) fs::remove_all(dir + "/etcd", ec);
    auto started = start_local_etcd(config, dir, /*detach=*/true);
    if (!started.ok()) return started.status();
    etcd = std::move(*started);
    so->etcd = {etcd->endpoint()};
  }
  if (!restart) return etcd;
  cluster::EtcdOptions mo;
  mo.endpoints = so->etcd;
  auto manager = cluster::EtcdConfigManager::create(mo);
  if (!manager.ok()) return manager.status();
  cluster::ClusterStateStore store(**manager, config.name);
  auto state = store.load_state();
  if (!state.ok()) return state.status();
  if (state->shards.size() != config.shards.size()) {
    return Status::InvalidArgument(
        fmt::format("{} holds {} shards of cluster '{}', the config {}: another cluster's state "
                    "(`cluster up --fresh` starts over)",
                    where, state->shards.size(), config.name, config.shards.size()));
  }
  std::vector<uint32_t> leaders;
  for (uint32_t s = 0; s < config.shards.size(); ++s) {
    const uint32_t named = state->shards[s].leader_replica;
    if (named >= config.shards[s].replicas.size()) {
      return Status::InvalidArgument(
          fmt::format("{} names replica {} as shard {}'s leader; the config has {} replicas", where,
                      named, s, config.shards[s].replicas.size()));
    }
    leaders.push_back(restart_leader_from_disk(config, dir, s, named, rec->workers));
  }
  rec->epoch = std::max(rec->epoch, state->epoch + 1);
  // The leaders are recorded with the epoch in one compare-and-swap: a leader `up` starts is
  // the one etcd names in that epoch (`--recover-epoch` checks it), and `status`, `digest` and
  // a later restart read them there.
  auto moved = store.restart_in_epoch(state->epoch, rec->epoch, leaders);
  if (!moved.ok()) return moved.status();
  if (!moved->won) {  // nothing else runs in this directory (checked): someone else's etcd?
    return Status::Aborted(fmt::format("{} moved to epoch {} while `up` restarted the cluster",
                                       where, moved->state.epoch));
  }
  so->leaders = std::move(leaders);  // what the swap wrote
  return etcd;
}

void print_shard_line(uint32_t s, const cluster::ClusterConfig& c, const std::string& what,
                      uint32_t replica = 0) {
  const cluster::Replica& r = c.shards[s].replicas.at(replica);
  fmt::print("shard {:<3} {:<21} {}\n", s, fmt::format("{}:{}", r.host, r.port), what);
}

// What `up` started, and how long until it served.
void print_up_report(const cluster::ClusterConfig& config, const std::vector<ServerProcess>& procs,
                     const CpuPlacement& placement, bool restart, const UpRecord& rec,
                     double ready_s, const std::string& dir) {
  for (const auto& p : procs) {
    if (p.replica == 0) {
      print_shard_line(p.shard, config,
                       fmt::format("up  pid {}{}", p.pid, p.leader ? "" : " (a follower)"));
    } else {
      fmt::print("  replica {} {:<21} up  pid {}{}\n", p.replica,
                 fmt::format("({})", config.shards[p.shard].replicas[p.replica].region), p.pid,
                 p.leader ? " (the leader)" : "");
    }
  }
  fmt::print("cpu placement: {}\n", placement.describe());
  if (restart) {
    fmt::print(
        "restarted from disk in epoch {}: every replica recovered its store (workload {}, "
        "nothing loaded); serving {:.2f} s after the processes started\n",
        rec.epoch, rec.workload, ready_s);
  } else {
    fmt::print(
        "loaded afresh (workload {}, epoch {}); serving {:.2f} s after the processes "
        "started\n",
        rec.workload, rec.epoch, ready_s);
  }
  fmt::print("cluster '{}': {} shard{} x {} replica{} up; run dir {}\n", config.name,
             config.shards.size(), config.shards.size() == 1 ? "" : "s", config.replicas_per_shard,
             config.replicas_per_shard == 1 ? "" : "s", dir);
}

}  // namespace

struct ReplicaId {
  uint32_t shard = 0;
  uint32_t replica = 0;
};

// What every process `up` starts is given: the recorded workload, workers and keys, and the
// settings of `o` (this `up`'s flags; on a restart, restart_options()'s).
SpawnOptions up_spawn_options(const ClusterOptions& o, const std::string& dir,
                              const UpRecord& rec) {
  SpawnOptions so;
  so.config_path = fs::absolute(o.config_path).string();
  so.log_dir = dir;
  so.workers = rec.workers;
  so.keys_per_partition = rec.keys_per_partition;
  so.workload = rec.workload;
  if (o.ack_journal) so.ack_journal_dir = fs::absolute(dir).string();
  so.fsync = o.fsync;
  so.batch_txns = o.batch_txns;
  so.batch_us = o.batch_us;
  so.lead_ms_max = o.lead_ms_max;
  so.serve_reads = o.serve_reads;
  so.checkpoint_interval_ms = o.checkpoint_interval_ms;
  so.cpu_placement = o.cpu_placement;
  so.tpcc_read_only_hint = o.tpcc_read_only_hint;
  so.memory_reserve_mb = o.memory_reserve_mb;
  return so;
}

// `up` over a running cluster some of whose replicas are down (killed, crashed, deposed): each
// starts again over its own directory as a follower of the leader `up`'s etcd names, and
// catches up (docs/OPERATIONS.md, "When a follower dies"). Refused while a shard's leader is
// among them and not yet replaced: its followers are electing one.
Status rejoin_replicas(const ClusterOptions& o, const cluster::ClusterConfig& config,
                       const std::string& dir, const std::vector<ReplicaId>& down) {
  auto recorded = read_up_record(dir);
  if (!recorded.ok()) return recorded.status();
  if (!recorded->has_value()) return Status::NotFound(up_record_path(dir) + ": missing");
  const std::vector<std::string> endpoints = cluster_etcd_endpoints(config, dir);
  if (endpoints.empty()) return Status::NotFound(etcd_endpoint_path(dir) + ": no etcd");
  cluster::EtcdOptions mo;
  mo.endpoints = endpoints;
  auto manager = cluster::EtcdConfigManager::create(mo);
  if (!manager.ok()) return manager.status();
  auto state = cluster::ClusterStateStore(**manager, config.name).load_state();
  if (!state.ok()) return state.status();
  for (const ReplicaId& d : down) {
    if (d.shard < state->shards.size() && state->shards[d.shard].leader_replica == d.replica) {
      return Status::Unavailable(fmt::format(
          "shard {}'s leader (replica {}, epoch {}) is down and not replaced yet: its followers "
          "are electing a successor; run `up` again once `cluster status` shows it",
          d.shard, d.replica, state->epoch));
    }
  }
  auto kept = restart_options(o, dir, **recorded);  // as the cluster was started
  if (!kept.ok()) return kept.status();
  SpawnOptions so = up_spawn_options(*kept, dir, **recorded);
  so.etcd = endpoints;
  auto placement = plan_host_placement(config, so);
  if (!placement.ok()) return placement.status();
  for (const ReplicaId& d : down) {
    SHOAL_TRY(mark_lost_follower_dir(dir, d.shard, d.replica));
    auto p = spawn_follower(config, so, *placement, d.shard, d.replica);
    if (!p.ok()) return p.status();
    std::ofstream(pid_path(dir, d.shard, d.replica)) << p->pid << "\n";
    fmt::print("shard {} replica {}: restarted as a follower of replica {} (pid {}, log {})\n",
               d.shard, d.replica, state->shards[d.shard].leader_replica, p->pid, p->log_path);
  }
  // Until each caught up (connected, replaying within kRejoinedLagMs): a digest or a kill
  // right after `up` then finds a whole shard. Bounded by ready_timeout_ms.
  ControlClient client(config);
  for (uint32_t s = 0; s < config.shards.size(); ++s) {
    client.set_leader(s, state->shards[s].leader_replica);
  }
  const uint64_t start_ms = now_ms();
  for (const ReplicaId& d : down) {
    while (!followers_rejoined(client, config, d.shard)) {
      if (now_ms() - start_ms >= o.ready_timeout_ms) {
        return Status::Timeout(fmt::format(
            "shard {} replica {} did not catch up with its leader within {} ms (its log: {})",
            d.shard, d.replica, o.ready_timeout_ms,
            cluster::replica_dir(dir, d.shard, d.replica) + ".restarted.log"));
      }
      client.disconnect(d.shard);
      sleep_ms(100);
    }
  }
  fmt::print("cluster '{}': {} replica{} rejoined in epoch {} ({:.2f} s); the others ran on\n",
             config.name, down.size(), down.size() == 1 ? "" : "s", state->epoch,
             static_cast<double>(now_ms() - start_ms) / 1000.0);
  return Status::Ok();
}

Status cluster_up(const ClusterOptions& o) {
  // (A restart of a TPC-C cluster with these flags names --workload tpcc too, as recorded.)
  if (o.serve_reads > 0 && o.workload != "tpcc") {
    return Status::InvalidArgument(
        "--serve-reads: needs --workload tpcc (the only one with read-only transactions)");
  }
  if (o.ack_journal && o.workload != "tpcc") {
    return Status::InvalidArgument("--ack-journal: needs --workload tpcc (it journals NewOrders)");
  }
  auto config = load(o.config_path);
  if (!config.ok()) return config.status();
  if (o.serve_reads > 0 && config->replicas_per_shard == 1) {
    return Status::InvalidArgument(
        "--serve-reads: the config's shards have no followers (cluster.replicas is 1)");
  }
  const std::string dir = run_dir_of(o, *config);
  std::vector<ReplicaId> down;  // replicas with no live process
  std::string running;          // the first live one, for messages
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    for (uint32_t r = 0; r < config->shards[s].replicas.size(); ++r) {
      if (pid_t pid = live_server_pid(pid_path(dir, s, r)); pid > 0) {
        if (running.empty()) running = fmt::format("shard {} replica {} is pid {}", s, r, pid);
      } else {
        down.push_back({s, r});
      }
    }
  }
  if (!running.empty()) {
    if (down.empty() || cluster_etcd_endpoints(*config, dir).empty()) {
      return Status::AlreadyExists(fmt::format(
          "cluster '{}' already running ({}{}); run `shoal cluster down` first", config->name,
          running,
          down.empty()
              ? ""
              : fmt::format("; {} replicas down, which rejoin only under etcd", down.size())));
    }
    return rejoin_replicas(o, *config, dir, down);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError(fmt::format("run dir {}: {}", dir, ec.message()));
  bool restart = false;
  UpRecord rec;
  SHOAL_TRY(plan_up(o, *config, dir, &restart, &rec));
  ClusterOptions run = o;  // a restart runs with up.json's settings where no flag is given
  if (restart) {
    auto kept = restart_options(o, dir, rec);
    if (!kept.ok()) return kept.status();
    run = std::move(*kept);
  }
  if (run.checkpoint_interval_ms > 0 && config->replicas_per_shard == 1 && !restart &&
      o.flags_given.count("--fsync") == 0) {
    // A lone replica compacts the WAL it keeps only with --fsync (a restart has one): without
    // it the flag would do nothing, and is refused.
    return Status::InvalidArgument(
        "--checkpoint-interval-ms: the config's shards have one replica, which keeps a WAL to "
        "checkpoint only with --fsync batch|always");
  }
  rec.settings = up_settings(run);
  if (!run.tpcc_read_only_hint && rec.workload != "tpcc") {
    return Status::InvalidArgument(fmt::format(
        "--no-read-only-hint: the servers load {}, not tpcc (the hint is TPC-C's)", rec.workload));
  }
  if (run.memory_reserve_mb != 0) {  // every process on this host reserves as much
    uint32_t processes = 0;
    for (const auto& shard : config->shards)
      processes += static_cast<uint32_t>(shard.replicas.size());
    SHOAL_TRY(check_memory_reserves_fit(run.memory_reserve_mb << 20, processes));
  }
  if (!restart) clear_run_dir(dir, *config);
  // Written before anything starts: a failed restart is retried in a newer epoch still.
  SHOAL_TRY(write_up_record(dir, rec));
  // An etcd left by an `up` whose servers are all gone (no `down`) is stopped first.
  stop_run_dir_etcd(dir, o.stop_timeout_ms);
  SpawnOptions so = up_spawn_options(run, dir, rec);
  so.recover_epoch = restart ? rec.epoch : 0;
  // One replica per shard logs when asked to (or did, and restarts from it).
  so.lone_replica_log =
      config->replicas_per_shard == 1 && (restart || o.flags_given.count("--fsync") != 0);
  // A restart's leaders read their whole WALs before they serve or dial each other (seconds
  // per minute of load: docs/RESULTS.md): wait for that, not for a load's 60 s. A process that
  // exits meanwhile still ends the wait at once.
  const uint64_t ready_timeout_ms =
      restart ? std::max(o.ready_timeout_ms, kRestartReadyTimeoutMs) : o.ready_timeout_ms;
  if (restart) so.connect_timeout_ms = kRestartReadyTimeoutMs;
  auto placement = plan_host_placement(*config, so);
  if (!placement.ok()) return placement.status();
  // A replicated cluster gets its configuration manager, so that a dead leader is replaced
  // (docs/OPERATIONS.md, "Failover of a standing cluster"); a restart gets the one it ran
  // with, and its leaders (those failovers appointed) restart as leaders.
  std::unique_ptr<cluster::EtcdProcess> etcd;
  if (config->replicas_per_shard >= 3) {  // with two, no follower stands
    auto started = start_up_etcd(*config, dir, restart, &rec, &so);
    if (!started.ok()) return started.status();
    etcd = std::move(*started);
    so.recover_epoch = restart ? rec.epoch : 0;
    SHOAL_TRY(write_up_record(dir, rec));  // the epoch etcd moved to
  }
  if (restart) {
    SHOAL_TRY(check_leader_dirs(*config, dir, so.leaders));
    for (uint32_t s = 0; s < config->shards.size(); ++s) {
      const uint32_t leader = s < so.leaders.size() ? so.leaders[s] : 0;
      for (uint32_t r = 0; r < config->shards[s].replicas.size(); ++r) {
        if (r != leader) SHOAL_TRY(mark_lost_follower_dir(dir, s, r));
      }
    }
  }
  const uint64_t start_ns = RealEnv::instance().now_ns();
  auto procs = spawn_servers(*config, so, *placement);
  if (!procs.ok()) return procs.status();
  for (const auto& p : *procs) {
    std::ofstream(pid_path(dir, p.shard, p.replica)) << p.pid << "\n";
  }
  ControlClient client(*config);
  for (uint32_t s = 0; s < so.leaders.size(); ++s) client.set_leader(s, so.leaders[s]);
  if (Status s = wait_ready(client, *procs, ready_timeout_ms); !s.ok()) {
    stop_servers(*procs, o.stop_timeout_ms);
    for (const auto& p : *procs) fs::remove(pid_path(dir, p.shard, p.replica), ec);
    return s;  // etcd's destructor stops it
  }
  print_up_report(*config, *procs, *placement, restart, rec,
                  static_cast<double>(RealEnv::instance().now_ns() - start_ns) / 1e9, dir);
  if (so.lone_replica_log) {
    fmt::print(
        "durability: each shard's replica logs to its WAL under {} (--fsync {}); `up` "
        "restarts from it\n",
        dir, so.fsync);
  } else if (config->replicas_per_shard == 1) {
    fmt::print(
        "durability: none, memory only (with one replica per shard, `up --fsync batch` or "
        "`--fsync always` keeps a WAL)\n");
  }
  if (!config->etcd.empty() && config->replicas_per_shard >= 3) {
    fmt::print(
        "configuration manager: etcd at {} (named in the config; `down` leaves it running): a "
        "follower replaces a dead leader\n",
        fmt::join(config->etcd, ","));
  } else if (etcd != nullptr) {
    const std::string endpoint = etcd->endpoint();
    const pid_t pid = etcd->release();  // it outlives `up`; `down` stops it
    std::ofstream(etcd_pid_path(dir)) << pid << "\n";
    std::ofstream(etcd_endpoint_path(dir)) << endpoint << "\n";
    fmt::print(
        "configuration manager: etcd at {} (pid {}, log {}/etcd.log): a follower replaces a "
        "dead leader\n",
        endpoint, pid, dir);
  }
  return Status::Ok();
}

// Points `client` at the leaders that `up`'s etcd names (after a failover, not replica 0)
// and prints them; nothing when the run directory has no running etcd.
std::vector<std::string> follow_run_dir_leaders(const cluster::ClusterConfig& config,
                                                const std::string& dir, ControlClient* client) {
  const std::vector<std::string> endpoints = cluster_etcd_endpoints(config, dir);
  if (endpoints.empty()) return {};
  const std::string named = fmt::format("{}", fmt::join(endpoints, ","));
  cluster::EtcdOptions mo;
  mo.endpoints = endpoints;
  auto manager = cluster::EtcdConfigManager::create(mo);
  if (!manager.ok()) {
    fmt::print("etcd at {}: {} (asking replica 0 of every shard)\n", named,
               manager.status().to_string());
    return {};
  }
  auto state = cluster::ClusterStateStore(**manager, config.name).load_state();
  if (!state.ok()) {
    fmt::print("etcd at {}: {} (asking replica 0 of every shard)\n", named,
               state.status().to_string());
    return {};
  }
  std::string leaders;
  for (uint32_t s = 0; s < state->shards.size() && s < config.shards.size(); ++s) {
    const uint32_t r = state->shards[s].leader_replica;
    if (r < config.shards[s].replicas.size()) client->set_leader(s, r);
    leaders += fmt::format("{}shard {} replica {}", leaders.empty() ? "" : ", ", s, r);
  }
  fmt::print("etcd at {}: epoch {}; leaders: {}\n", named, state->epoch, leaders);
  return endpoints;
}

Status cluster_status(const ClusterOptions& o) {
  auto config = load(o.config_path);
  if (!config.ok()) return config.status();
  ControlClient client(*config);
  follow_run_dir_leaders(*config, run_dir_of(o, *config), &client);
  std::vector<uint32_t> down;
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    auto pong = client.call(s, kPing, nlohmann::json::object(), kPingTimeoutMs);
    if (!pong.ok()) {
      down.push_back(s);
      print_shard_line(s, *config, fmt::format("DOWN  {}", pong.status().to_string()),
                       client.leader(s));
      continue;
    }
    nlohmann::json lost = nlohmann::json::array();
    int64_t pid = 0;
    uint64_t workers = 0, keys_lo = 0, keys_hi = 0;
    bool running = false;
    Status st = json_optional_field(*pong, "unreachable", &lost);
    if (st.ok()) st = json_optional_field(*pong, "pid", &pid);
    if (st.ok()) st = json_optional_field(*pong, "workers", &workers);
    if (st.ok()) st = json_optional_field(*pong, "keys_lo", &keys_lo);
    if (st.ok()) st = json_optional_field(*pong, "keys_hi", &keys_hi);
    if (st.ok()) st = json_optional_field(*pong, "running", &running);
    if (!st.ok()) {  // a reply we cannot read: the shard answers, but not as a shard server
      down.push_back(s);
      print_shard_line(s, *config, fmt::format("BAD   its ping reply: {}", st.to_string()),
                       client.leader(s));
      continue;
    }
    std::string unreachable;
    if (lost.is_array()) {
      for (const auto& u : lost) {
        unreachable += fmt::format("{}{}", unreachable.empty() ? "" : ",", u.dump());
      }
    }
    const uint32_t leader = client.leader(s);
    print_shard_line(s, *config,
                     fmt::format("up    pid {} workers {} keys [{}, {}){}{}{}", pid, workers,
                                 keys_lo, keys_hi, running ? " running a load" : "",
                                 unreachable.empty() ? "" : "; lost shards " + unreachable,
                                 leader == 0 ? "" : fmt::format(" (leader: replica {})", leader)),
                     leader);
    // Followers: known here only by their pid files (they serve no control port).
    const std::string dir = run_dir_of(o, *config);
    for (uint32_t r = 0; r < config->shards[s].replicas.size(); ++r) {
      if (r == leader) continue;
      const pid_t pid = live_server_pid(pid_path(dir, s, r));
      fmt::print("  replica {} {:<21} {}\n", r,
                 fmt::format("({})", config->shards[s].replicas[r].region),
                 pid > 0 ? fmt::format("up    pid {}", pid)
                         : fmt::format("no live process in {}", pid_path(dir, s, r)));
    }
  }
  if (!down.empty()) {
    return Status::Unavailable(fmt::format("{} of {} shards not answering (first: shard {})",
                                           down.size(), config->shards.size(), down.front()));
  }
  return Status::Ok();
}

Status cluster_down(const ClusterOptions& o) {
  auto config = load(o.config_path);
  if (!config.ok()) return config.status();
  const std::string dir = run_dir_of(o, *config);
  std::vector<ServerProcess> procs;
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    for (uint32_t r = 0; r < config->shards[s].replicas.size(); ++r) {
      const pid_t pid = live_server_pid(pid_path(dir, s, r));
      if (pid <= 0) continue;
      ServerProcess p;
      p.shard = s;
      p.replica = r;
      p.pid = pid;
      procs.push_back(std::move(p));
    }
  }
  const size_t killed = stop_servers(procs, o.stop_timeout_ms);
  const bool etcd_stopped = stop_run_dir_etcd(dir, o.stop_timeout_ms);
  std::error_code ec;
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    for (uint32_t r = 0; r < config->shards[s].replicas.size(); ++r) {
      fs::remove(pid_path(dir, s, r), ec);
    }
  }
  fmt::print("cluster '{}': stopped {} process{}{}{}\n", config->name, procs.size(),
             procs.size() == 1 ? "" : "es",
             killed ? fmt::format(" ({} needed SIGKILL)", killed) : std::string(),
             etcd_stopped ? " and its etcd" : "");
  return Status::Ok();
}

namespace {

// `check` of a TPC-C cluster: its consistency conditions, and the acknowledged NewOrders of the
// run directory's journals (`up --ack-journal`) looked up.
Status check_tpcc_run(ControlClient& client, const cluster::ClusterConfig& config,
                      const std::string& dir) {
  std::vector<nlohmann::json> payments;
  const std::vector<std::string> failures = check_tpcc_cluster(client, config, &payments);
  for (const std::string& f : failures) fmt::print("consistency: {}\n", f);
  if (failures.empty()) {
    fmt::print("consistency: TPC-C conditions hold on all {} shard{}\n", config.shards.size(),
               config.shards.size() == 1 ? "" : "s");
  }
  const AckCheck acks =
      check_acknowledged_orders(client, static_cast<uint32_t>(config.shards.size()), dir);
  fmt::print("{}", acks.line());
  if (!failures.empty()) {
    return Status::Corruption(fmt::format("{} TPC-C condition{} failed (first: {})",
                                          failures.size(), failures.size() == 1 ? "" : "s",
                                          failures.front()));
  }
  if (!acks.failures.empty()) {
    return Status::Corruption("acknowledged transactions lost or not checked:" + acks.failures);
  }
  return Status::Ok();
}

}  // namespace

Status cluster_check(const ClusterOptions& o) {
  auto config = load(o.config_path);
  if (!config.ok()) return config.status();
  ControlClient client(*config);
  const std::string dir = run_dir_of(o, *config);
  follow_run_dir_leaders(*config, dir, &client);
  auto recorded = read_up_record(dir);
  if (recorded.ok() && recorded->has_value() && (*recorded)->workload == "tpcc") {
    return check_tpcc_run(client, *config, dir);
  }
  Status first;
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    auto scan = client.call(s, kScan, nlohmann::json::object(), 60'000);
    if (!scan.ok()) {
      print_shard_line(s, *config, fmt::format("DOWN  {}", scan.status().to_string()));
      if (first.ok()) first = scan.status();
      continue;
    }
    uint64_t bad = 0, keys = 0, counter_sum = 0;
    std::string first_unreadable;
    Status st = json_optional_field(*scan, "unreadable", &bad);
    if (st.ok()) st = json_optional_field(*scan, "keys", &keys);
    if (st.ok()) st = json_optional_field(*scan, "counter_sum", &counter_sum);
    if (st.ok()) st = json_optional_field(*scan, "first_unreadable", &first_unreadable);
    if (!st.ok()) {
      print_shard_line(s, *config, fmt::format("BAD   its scan reply: {}", st.to_string()));
      if (first.ok()) first = st;
      continue;
    }
    print_shard_line(s, *config,
                     fmt::format("{} keys, {} unreadable, counter sum {}{}", keys, bad, counter_sum,
                                 bad ? " (first: " + first_unreadable + ")" : ""));
    if (bad != 0 && first.ok()) {
      first = Status::Aborted(fmt::format("shard {}: {} keys unreadable", s, bad));
    }
  }
  return first;
}

Status cluster_digest(const ClusterOptions& o) {
  auto config = load(o.config_path);
  if (!config.ok()) return config.status();
  ControlClient client(*config);
  follow_run_dir_leaders(*config, run_dir_of(o, *config), &client);
  const std::vector<ShardReplicaStates> states =
      collect_replica_states(client, *config, {}, o.quiesce_timeout_ms);
  std::string table;
  nlohmann::json json;
  const Status verdict = replica_verdict(states, &table, &json);
  std::fputs(table.c_str(), stdout);
  fmt::print("{}\n", verdict.ok() ? "identical: every replica of every shard matches its leader"
                                  : verdict.to_string());
  return verdict;
}

}  // namespace shoal::server

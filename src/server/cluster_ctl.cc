#include "src/server/cluster_ctl.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "src/cluster/config.h"
#include "src/net/tcp_transport.h"
#include "src/server/cluster_config.h"
#include "src/server/control.h"
#include "src/server/dist_micro.h"
#include "src/server/process.h"
#include "src/server/repl_ctl.h"

namespace shoal::server {
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kPingTimeoutMs = 1000;

std::string run_dir_of(const ClusterOptions& o, const cluster::ClusterConfig& c) {
  return o.run_dir.empty() ? fmt::format(".shoal/{}", c.name) : o.run_dir;
}

// Replica 0 is the shard server; r >= 1 its `shoal replica` followers.
std::string pid_path(const std::string& dir, uint32_t shard, uint32_t replica = 0) {
  return replica == 0 ? fmt::format("{}/shard-{}.pid", dir, shard)
                      : cluster::replica_dir(dir, shard, replica) + ".pid";
}

// The pid in a pid file, if that process is still a `shoal server` (replica 0) or a
// `shoal replica` (not a reused pid).
pid_t live_server_pid(const std::string& path, uint32_t replica = 0) {
  std::ifstream in(path);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return -1;
  std::ifstream cmd(fmt::format("/proc/{}/cmdline", pid));
  std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  const std::string command =
      replica == 0 ? std::string("server\0--config", 15) : std::string("replica\0--config", 16);
  if (args.find(command) == std::string::npos) return -1;
  ServerProcess p;
  p.pid = static_cast<pid_t>(pid);
  return alive(p) ? p.pid : -1;
}

Result<cluster::ClusterConfig> load(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("--config: required");
  return load_cluster_config(path);
}

void print_shard_line(uint32_t s, const cluster::ClusterConfig& c, const std::string& what) {
  const cluster::Replica& r = c.shards[s].replicas.at(0);
  fmt::print("shard {:<3} {:<21} {}\n", s, fmt::format("{}:{}", r.host, r.port), what);
}

}  // namespace

Status cluster_up(const ClusterOptions& o) {
  if (o.serve_reads > 0 && o.workload != "tpcc") {
    return Status::InvalidArgument(
        "--serve-reads: needs --workload tpcc (the only one with read-only transactions)");
  }
  auto config = load(o.config_path);
  if (!config.ok()) return config.status();
  if (o.serve_reads > 0 && config->replicas_per_shard == 1) {
    return Status::InvalidArgument(
        "--serve-reads: the config's shards have no followers (cluster.replicas is 1)");
  }
  const std::string dir = run_dir_of(o, *config);
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    if (pid_t pid = live_server_pid(pid_path(dir, s)); pid > 0) {
      return Status::AlreadyExists(fmt::format(
          "cluster '{}' already running (shard {} is pid {}); run `shoal cluster down` first",
          config->name, s, pid));
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError(fmt::format("run dir {}: {}", dir, ec.message()));
  // Every `up` loads its data afresh and no replica recovers from its WAL yet (a leader
  // refuses to start over entries): the previous incarnation's WALs go.
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    for (uint32_t r = 0; r < config->shards[s].replicas.size() && config->replicas_per_shard > 1;
         ++r) {
      fs::remove_all(cluster::replica_dir(dir, s, r), ec);
    }
  }
  SpawnOptions so;
  so.config_path = fs::absolute(o.config_path).string();
  so.log_dir = dir;
  so.workers = o.workers;
  so.keys_per_partition = o.keys_per_partition;
  so.workload = o.workload;
  so.fsync = o.fsync;
  so.batch_txns = o.batch_txns;
  so.batch_us = o.batch_us;
  so.serve_reads = o.serve_reads;
  so.checkpoint_interval_ms = o.checkpoint_interval_ms;
  so.cpu_placement = o.cpu_placement;
  auto placement = plan_host_placement(*config, so);
  if (!placement.ok()) return placement.status();
  auto procs = spawn_servers(*config, so, *placement);
  if (!procs.ok()) return procs.status();
  for (const auto& p : *procs) {
    std::ofstream(pid_path(dir, p.shard, p.replica)) << p.pid << "\n";
  }
  ControlClient client(*config);
  if (Status s = wait_ready(client, *procs, o.ready_timeout_ms); !s.ok()) {
    stop_servers(*procs, o.stop_timeout_ms);
    for (const auto& p : *procs) fs::remove(pid_path(dir, p.shard, p.replica), ec);
    return s;
  }
  for (const auto& p : *procs) {
    if (p.replica == 0) {
      print_shard_line(p.shard, *config, fmt::format("up  pid {}", p.pid));
    } else {
      fmt::print("  replica {} {:<21} up  pid {}\n", p.replica,
                 fmt::format("({})", config->shards[p.shard].replicas[p.replica].region), p.pid);
    }
  }
  fmt::print("cpu placement: {}\n", placement->describe());
  fmt::print("cluster '{}': {} shard{} x {} replica{} up; run dir {}\n", config->name,
             config->shards.size(), config->shards.size() == 1 ? "" : "s",
             config->replicas_per_shard, config->replicas_per_shard == 1 ? "" : "s", dir);
  return Status::Ok();
}

Status cluster_status(const ClusterOptions& o) {
  auto config = load(o.config_path);
  if (!config.ok()) return config.status();
  ControlClient client(*config);
  std::vector<uint32_t> down;
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    auto pong = client.call(s, kPing, nlohmann::json::object(), kPingTimeoutMs);
    if (!pong.ok()) {
      down.push_back(s);
      print_shard_line(s, *config, fmt::format("DOWN  {}", pong.status().to_string()));
      continue;
    }
    std::string unreachable;
    for (const auto& u : pong->value("unreachable", nlohmann::json::array())) {
      unreachable += fmt::format("{}{}", unreachable.empty() ? "" : ",", u.dump());
    }
    print_shard_line(
        s, *config,
        fmt::format("up    pid {} workers {} keys [{}, {}){}{}", pong->value("pid", 0),
                    pong->value("workers", 0), pong->value("keys_lo", 0), pong->value("keys_hi", 0),
                    pong->value("running", false) ? " running a load" : "",
                    unreachable.empty() ? "" : "; lost shards " + unreachable));
    // Followers: known here only by their pid files (they serve no control port).
    const std::string dir = run_dir_of(o, *config);
    for (uint32_t r = 1; r < config->shards[s].replicas.size(); ++r) {
      const pid_t pid = live_server_pid(pid_path(dir, s, r), r);
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
      const pid_t pid = live_server_pid(pid_path(dir, s, r), r);
      if (pid > 0) procs.push_back(ServerProcess{s, r, pid, false, ""});
    }
  }
  const size_t killed = stop_servers(procs, o.stop_timeout_ms);
  std::error_code ec;
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    for (uint32_t r = 0; r < config->shards[s].replicas.size(); ++r) {
      fs::remove(pid_path(dir, s, r), ec);
    }
  }
  fmt::print("cluster '{}': stopped {} process{}{}\n", config->name, procs.size(),
             procs.size() == 1 ? "" : "es",
             killed ? fmt::format(" ({} needed SIGKILL)", killed) : std::string());
  return Status::Ok();
}

Status cluster_check(const ClusterOptions& o) {
  auto config = load(o.config_path);
  if (!config.ok()) return config.status();
  ControlClient client(*config);
  Status first;
  for (uint32_t s = 0; s < config->shards.size(); ++s) {
    auto scan = client.call(s, kScan, nlohmann::json::object(), 60'000);
    if (!scan.ok()) {
      print_shard_line(s, *config, fmt::format("DOWN  {}", scan.status().to_string()));
      if (first.ok()) first = scan.status();
      continue;
    }
    const uint64_t bad = scan->value("unreadable", uint64_t{0});
    print_shard_line(
        s, *config,
        fmt::format("{} keys, {} unreadable, counter sum {}{}", scan->value("keys", uint64_t{0}),
                    bad, scan->value("counter_sum", uint64_t{0}),
                    bad ? " (first: " + scan->value("first_unreadable", "") + ")" : ""));
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

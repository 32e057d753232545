#include "src/server/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <deque>
#include <fstream>

#include <fmt/format.h>

#include "src/base/env.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/etcd_config_manager.h"

namespace shoal::server {

void sleep_ms(uint64_t ms) {
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1'000'000)};
  nanosleep(&ts, nullptr);
}

uint64_t now_ms() {
  return RealEnv::instance().now_ns() / 1'000'000;
}

namespace {

// The child side of spawn: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(const char* exe, char* const* argv, const char* log, bool die_with,
                             pid_t parent, bool append_log) {
  if (die_with) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(126);  // the parent died before prctl took effect
    // Out of the terminal's foreground group: Ctrl-C goes to the bench alone, which reports
    // and then stops us (src/base/interrupt.h); we still die with it.
    setpgid(0, 0);
  } else {
    setsid();  // outlives `cluster up`; not in the terminal's process group
  }
  const int fd =
      open(log, O_WRONLY | O_CREAT | (append_log ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd >= 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  execv(exe, argv);
  _exit(127);
}

}  // namespace

Result<std::string> self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return Status::IOError(fmt::format("readlink /proc/self/exe: errno {}", errno));
  return std::string(buf, static_cast<size_t>(n));
}

std::string process_name(const ServerProcess& p) {
  if (p.leader && p.replica == 0) return fmt::format("shard {}", p.shard);
  return fmt::format("shard {} {}replica {}", p.shard, p.leader ? "leader " : "", p.replica);
}

namespace {

// Forks and execs `args` with its output in p->log_path (appended to with append_log: a
// restart keeps what the process logged before). IOError on a failed fork.
Status spawn_one(std::vector<std::string> args, bool die_with_parent, ServerProcess* p,
                 bool append_log = false) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  p->child = true;
  const pid_t parent = getpid();
  p->pid = fork();
  if (p->pid < 0)
    return Status::IOError(fmt::format("fork for {}: errno {}", process_name(*p), errno));
  if (p->pid == 0)
    exec_child(args[0].c_str(), argv.data(), p->log_path.c_str(), die_with_parent, parent,
               append_log);
  return Status::Ok();
}

void add_batch_args(const SpawnOptions& options, std::vector<std::string>* args) {
  if (options.batch_txns != 0) {
    args->insert(args->end(), {"--batch-txns", std::to_string(options.batch_txns)});
  }
  if (options.batch_us != 0) {
    args->insert(args->end(), {"--batch-us", fmt::format("{}", options.batch_us)});
  }
  if (options.lead_ms_max >= 0) {
    args->insert(args->end(), {"--lead-ms-max", std::to_string(options.lead_ms_max)});
  }
}

void add_memory_reserve_arg(const SpawnOptions& options, std::vector<std::string>* args) {
  if (options.memory_reserve_mb == 0) return;
  args->insert(args->end(), {"--memory-reserve-mb", std::to_string(options.memory_reserve_mb)});
}

void add_etcd_arg(const SpawnOptions& options, std::vector<std::string>* args) {
  if (!options.ack_journal_dir.empty()) {
    args->insert(args->end(), {"--ack-journal", options.ack_journal_dir});
  }
  if (options.etcd.empty()) return;
  std::string list;
  for (const std::string& e : options.etcd) list += (list.empty() ? "" : ",") + e;
  args->insert(args->end(), {"--etcd", list});
}

// Shard s's slice of the planned worker cpus (plan_host_placement gives every shard the same
// worker count: the config has one).
std::span<const int> shard_worker_cpus(const CpuPlacement& placement, size_t shards, uint32_t s) {
  SHOAL_ASSERT(placement.worker_cpus.size() % shards == 0, "%zu worker cpus for %zu shards",
               placement.worker_cpus.size(), shards);
  const size_t per_shard = placement.worker_cpus.size() / shards;
  return {placement.worker_cpus.data() + s * per_shard, per_shard};
}

std::vector<std::string> server_args(const std::string& exe, const cluster::ClusterConfig& config,
                                     const SpawnOptions& options, uint32_t s, uint32_t r,
                                     const std::string& data_dir, const CpuPlacement& placement) {
  std::vector<std::string> args = {exe,
                                   "server",
                                   "--config",
                                   options.config_path,
                                   "--shard",
                                   std::to_string(s),
                                   "--keys-per-partition",
                                   std::to_string(options.keys_per_partition),
                                   "--workload",
                                   options.workload};
  if (options.workers != 0) {
    args.push_back("--workers");
    args.push_back(std::to_string(options.workers));
  }
  if (options.unsafe_skip_read_validation) args.push_back("--unsafe-skip-read-validation");
  if (!options.tpcc_read_only_hint) args.push_back("--no-read-only-hint");
  if (options.connect_timeout_ms != 0) {
    args.insert(args.end(), {"--connect-timeout-ms", std::to_string(options.connect_timeout_ms)});
  }
  add_etcd_arg(options, &args);
  add_memory_reserve_arg(options, &args);
  if (placement.pinned()) {
    args.insert(args.end(), {"--worker-cpus",
                             format_cpu_list(shard_worker_cpus(placement, config.shards.size(), s)),
                             "--other-cpus", format_cpu_list(placement.other_cpus)});
  }
  if (r != 0) args.insert(args.end(), {"--replica", std::to_string(r)});
  if (config.shards[s].replicas.size() > 1 || options.lone_replica_log) {
    args.insert(args.end(),
                {"--data-dir", cluster::replica_dir(data_dir, s, r), "--fsync", options.fsync});
    add_batch_args(options, &args);
    if (options.checkpoint_interval_ms != 0) {
      args.insert(args.end(),
                  {"--checkpoint-interval-ms", std::to_string(options.checkpoint_interval_ms)});
    }
    if (options.recover_epoch != 0) {
      args.insert(args.end(), {"--recover-epoch", std::to_string(options.recover_epoch)});
    }
  }
  return args;
}

// `shoal replica` for replica r >= 1 of shard s: what it follows, and what it serves once
// promoted (the server's workload, workers, keys and batching).
std::vector<std::string> replica_args(const std::string& exe, const SpawnOptions& options,
                                      size_t config_shards, uint32_t s, uint32_t r,
                                      const std::string& data_dir, const CpuPlacement& placement) {
  std::vector<std::string> args = {exe,
                                   "replica",
                                   "--config",
                                   options.config_path,
                                   "--shard",
                                   std::to_string(s),
                                   "--replica",
                                   std::to_string(r),
                                   "--data-dir",
                                   cluster::replica_dir(data_dir, s, r),
                                   "--fsync",
                                   options.fsync,
                                   "--replay-nice",
                                   std::to_string(options.replica_nice),
                                   "--keys-per-partition",
                                   std::to_string(options.keys_per_partition),
                                   "--workload",
                                   options.workload};
  if (options.workers != 0) args.insert(args.end(), {"--workers", std::to_string(options.workers)});
  add_batch_args(options, &args);
  add_etcd_arg(options, &args);
  add_memory_reserve_arg(options, &args);
  if (options.serve_reads != 0) {
    args.insert(args.end(), {"--serve-reads", std::to_string(options.serve_reads)});
  }
  if (options.unsafe_snapshot_read_newest) args.push_back("--unsafe-snapshot-read-newest");
  if (options.checkpoint_interval_ms != 0) {
    args.insert(args.end(),
                {"--checkpoint-interval-ms", std::to_string(options.checkpoint_interval_ms)});
  }
  if (placement.pinned()) {
    args.insert(args.end(), {"--cpus", format_cpu_list(placement.other_cpus)});
    // Promoted, it runs its shard's workers where the leader's ran (the leader is gone).
    args.insert(args.end(),
                {"--worker-cpus", format_cpu_list(shard_worker_cpus(placement, config_shards, s))});
  }
  return args;
}

}  // namespace

Result<CpuPlacement> plan_host_placement(const cluster::ClusterConfig& config,
                                         const SpawnOptions& options) {
  const uint32_t per_shard = options.workers != 0 ? options.workers : config.workers_per_shard;
  return plan_cpu_placement_here(options.cpu_placement,
                                 per_shard * static_cast<uint32_t>(config.shards.size()));
}

Result<std::vector<ServerProcess>> spawn_servers(const cluster::ClusterConfig& config,
                                                 const SpawnOptions& options,
                                                 const CpuPlacement& placement) {
  auto exe = self_exe();
  if (!exe.ok()) return exe.status();
  const std::string data_dir = options.data_dir.empty() ? options.log_dir : options.data_dir;
  std::vector<ServerProcess> procs;
  for (uint32_t s = 0; s < config.shards.size(); ++s) {
    const uint32_t leader = s < options.leaders.size() ? options.leaders[s] : 0;
    SHOAL_ASSERT(leader < config.shards[s].replicas.size(), "shard %u led by replica %u", s,
                 leader);
    for (uint32_t r = 0; r < config.shards[s].replicas.size(); ++r) {
      ServerProcess p;
      p.shard = s;
      p.replica = r;
      p.leader = r == leader;
      p.log_path = r == 0 ? fmt::format("{}/shard-{}.log", options.log_dir, s)
                          : cluster::replica_dir(options.log_dir, s, r) + ".log";
      std::vector<std::string> args =
          p.leader ? server_args(*exe, config, options, s, r, data_dir, placement)
                   : replica_args(*exe, options, config.shards.size(), s, r, data_dir, placement);
      const bool restart = options.recover_epoch != 0;
      if (Status st = spawn_one(std::move(args), options.die_with_parent, &p, restart); !st.ok()) {
        stop_servers(procs, 2000);
        return st;
      }
      procs.push_back(std::move(p));
    }
  }
  return procs;
}

Result<ServerProcess> spawn_follower(const cluster::ClusterConfig& config,
                                     const SpawnOptions& options, const CpuPlacement& placement,
                                     uint32_t shard, uint32_t replica) {
  SHOAL_ASSERT(shard < config.shards.size() && replica < config.shards[shard].replicas.size(),
               "spawn_follower(%u, %u)", shard, replica);
  auto exe = self_exe();
  if (!exe.ok()) return exe.status();
  const std::string data_dir = options.data_dir.empty() ? options.log_dir : options.data_dir;
  ServerProcess p;
  p.shard = shard;
  p.replica = replica;
  // A restart appends to its log: what it did before stays readable.
  p.log_path =
      fmt::format("{}.restarted.log", cluster::replica_dir(options.log_dir, shard, replica));
  SHOAL_TRY(spawn_one(
      replica_args(*exe, options, config.shards.size(), shard, replica, data_dir, placement),
      options.die_with_parent, &p));
  return p;
}

std::string tail_file(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += (out.empty() ? "" : " | ") + l;
  return out;
}

bool alive(const ServerProcess& p) {
  if (p.pid <= 0) return false;
  if (p.child) {
    int status = 0;
    const pid_t r = waitpid(p.pid, &status, WNOHANG);
    return r == 0;  // r == pid: exited and reaped now; -1: already reaped
  }
  if (kill(p.pid, 0) != 0 && errno != EPERM) return false;
  // A zombie waiting for its (adoptive) parent to reap it has stopped running.
  std::ifstream stat(fmt::format("/proc/{}/stat", p.pid));
  std::string text;
  std::getline(stat, text);
  const size_t paren = text.rfind(')');
  return !(paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z');
}

Status wait_ready(ControlClient& client, const std::vector<ServerProcess>& procs,
                  uint64_t timeout_ms) {
  const uint64_t deadline = now_ms() + timeout_ms;
  std::vector<bool> ready(procs.size(), false);
  size_t ready_count = 0;
  for (size_t i = 0; i < procs.size(); ++i) {
    if (!procs[i].leader) {  // followers: only watched for exiting
      ready[i] = true;
      ++ready_count;
    }
  }
  Status last;
  while (ready_count < procs.size()) {
    for (size_t i = 0; i < procs.size(); ++i) {
      const ServerProcess& p = procs[i];
      if (!alive(p)) {
        return Status::Unavailable(fmt::format("{} (pid {}) exited during start-up; {}: {}",
                                               process_name(p), p.pid, p.log_path,
                                               tail_file(p.log_path, 3)));
      }
      if (ready[i]) continue;
      auto pong = client.call(p.shard, kPing, nlohmann::json::object(), 500);
      if (pong.ok()) {
        ready[i] = true;
        ++ready_count;
      } else {
        last = pong.status();
        client.disconnect(p.shard);  // not listening yet, or still dialing its peers
      }
    }
    if (ready_count == procs.size()) break;
    if (now_ms() >= deadline) {
      return Status::Timeout(fmt::format("{} of {} processes not ready after {} ms (last: {})",
                                         procs.size() - ready_count, procs.size(), timeout_ms,
                                         last.to_string()));
    }
    sleep_ms(50);
  }
  return Status::Ok();
}

size_t stop_servers(const std::vector<ServerProcess>& procs, uint64_t timeout_ms) {
  for (const auto& p : procs) {
    if (alive(p)) kill(p.pid, SIGTERM);
  }
  auto wait_all = [&procs](uint64_t ms) {
    const uint64_t deadline = now_ms() + ms;
    for (;;) {
      bool any = false;
      for (const auto& p : procs) any = any || alive(p);
      if (!any || now_ms() >= deadline) return any;
      sleep_ms(20);
    }
  };
  if (!wait_all(timeout_ms)) return 0;
  size_t killed = 0;
  for (const auto& p : procs) {
    if (alive(p)) {
      kill(p.pid, SIGKILL);
      ++killed;
    }
  }
  wait_all(5000);
  return killed;
}

Result<std::unique_ptr<cluster::EtcdProcess>> start_local_etcd(const cluster::ClusterConfig& config,
                                                               const std::string& dir,
                                                               bool detach) {
  cluster::EtcdProcessOptions eo;
  eo.data_dir = dir + "/etcd";
  eo.name = config.name;
  eo.log_path = dir + "/etcd.log";
  eo.detach = detach;
  auto etcd = cluster::EtcdProcess::start(eo);
  if (!etcd.ok()) {
    return Status::Unavailable(fmt::format("the configuration manager (etcd) did not start: {}",
                                           etcd.status().to_string()));
  }
  SHOAL_TRY(initialize_cluster_state(config, {(*etcd)->endpoint()}, /*fresh=*/false));
  return std::move(*etcd);
}

Status initialize_cluster_state(const cluster::ClusterConfig& config,
                                const std::vector<std::string>& endpoints, bool fresh) {
  cluster::EtcdOptions mo;
  mo.endpoints = endpoints;
  auto manager = cluster::EtcdConfigManager::create(mo);
  if (!manager.ok()) return manager.status();
  cluster::ClusterStateStore store(**manager, config.name);
  if (fresh) {  // bounded: the keys of the cluster's epochs (a few per shard and epoch)
    auto kvs = (*manager)->range(store.prefix());
    if (!kvs.ok()) return kvs.status();
    for (const cluster::KeyValue& kv : *kvs) {
      auto removed = (*manager)->remove(kv.key);
      if (!removed.ok()) return removed.status();
    }
  }
  std::vector<cluster::ShardState> shards;
  for (const cluster::Shard& sh : config.shards) {
    cluster::ShardState st;
    st.leader_replica = 0;
    for (uint32_t r = 0; r < sh.replicas.size(); ++r) st.members.push_back(r);
    shards.push_back(std::move(st));
  }
  auto created = store.initialize(shards);
  return created.ok() ? Status::Ok() : created.status();
}

}  // namespace shoal::server

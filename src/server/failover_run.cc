#include "src/server/failover_run.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "src/base/env.h"
#include "src/base/json_field.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/etcd_config_manager.h"

namespace shoal::server {
namespace {

constexpr uint64_t kStatsTimeoutMs = 1000;  // one sample's call: a busy server answers late

// The kill and what follows it, one step per sample.
class Failover {
 public:
  Failover(ControlClient& client, const cluster::ClusterConfig& config,
           const std::vector<ServerProcess>& procs, const KillPlan& plan, WatchedRun* out)
      : client_(client), config_(config), procs_(procs), plan_(plan), out_(out) {}

  [[nodiscard]] Status open_manager(const std::vector<std::string>& etcd) {
    if (etcd.empty()) {
      return Status::InvalidArgument(
          "--kill-leader-at: needs the configuration manager (a local run starts one)");
    }
    cluster::EtcdOptions eo;
    eo.endpoints = etcd;
    auto m = cluster::EtcdConfigManager::create(eo);
    if (!m.ok()) return m.status();
    manager_ = std::move(*m);
    store_ = std::make_unique<cluster::ClusterStateStore>(*manager_, config_.name);
    auto state = store_->load_state();
    if (!state.ok()) return state.status();
    if (plan_.shard >= state->shards.size()) {
      return Status::InvalidArgument(
          fmt::format("--kill-shard: {} not in the cluster", plan_.shard));
    }
    out_->old_leader = state->shards[plan_.shard].leader_replica;
    return Status::Ok();
  }

  // SIGKILL (or, to hang it, SIGSTOP) of the shard's leader process.
  [[nodiscard]] Status kill_leader() {
    for (const ServerProcess& p : procs_) {
      if (p.shard != plan_.shard || p.replica != out_->old_leader || !alive(p)) continue;
      const int sig = plan_.hang ? SIGSTOP : SIGKILL;
      if (::kill(p.pid, sig) != 0) {
        return Status::IOError(fmt::format("kill {}: {}", process_name(p), std::strerror(errno)));
      }
      fmt::print(stderr, "{} shard {}'s leader (replica {}, pid {}) with {}\n",
                 plan_.hang ? "hung" : "killed", plan_.shard, out_->old_leader, p.pid,
                 plan_.hang ? "SIGSTOP" : "SIGKILL");
      old_pid_ = p.pid;
      old_child_ = p.child;
      out_->hung = plan_.hang;
      out_->killed = true;
      out_->shard = plan_.shard;
      kill_ms_ = now_ms();
      kill_wall_us_ = RealEnv::instance().wall_us();
      client_.disconnect(plan_.shard);
      return Status::Ok();
    }
    return Status::InvalidArgument(
        fmt::format("--kill-leader-at: no live process of shard {} replica {} (a local run only)",
                    plan_.shard, out_->old_leader));
  }

  // After the kill: learns the new leader and starts the load there. True once it runs.
  bool step(const MicroParams& params, uint64_t end_ms) {
    if (running_) return true;
    if (!elected_) {
      auto state = store_->load_state();
      if (!state.ok() || state->shards[plan_.shard].leader_replica == out_->old_leader) {
        return false;
      }
      elected_ = true;
      out_->new_leader = state->shards[plan_.shard].leader_replica;
      out_->new_epoch = state->epoch;
      out_->leader_elected_ms = static_cast<double>(now_ms() - kill_ms_);
      client_.set_leader(plan_.shard, out_->new_leader);
    }
    // It answers once it took over (its takeover is part of its start-up).
    const uint64_t now = now_ms();
    if (now + 100 >= end_ms) return false;  // no time left to run anything
    MicroParams rest = params;
    rest.seconds = static_cast<double>(end_ms - now) / 1000.0;
    auto started = client_.call(plan_.shard, kStart, rest.to_json(), kStatsTimeoutMs);
    // AlreadyExists: an earlier call of ours started it and its answer was lost (timed out on
    // a loaded machine); the load runs. Any other error: not serving yet, next sample.
    if (!started.ok() && started.status().code() != Code::kAlreadyExists) return false;
    running_ = true;
    fmt::print(stderr,
               "shard {}: replica {} leads in epoch {}; load restarted there for {:.1f} s\n",
               plan_.shard, out_->new_leader, out_->new_epoch, rest.seconds);
    if (plan_.hang) resume_deposed();
    if (plan_.restart) {
      const Status st = plan_.restart(plan_.shard, out_->old_leader);
      out_->restarted = st.ok();
      if (!st.ok()) {
        fmt::print(stderr, "shard {}: restarting replica {} failed: {}\n", plan_.shard,
                   out_->old_leader, st.to_string());
      }
    }
    return true;
  }

  bool running() const { return running_; }
  uint64_t kill_wall_us() const { return kill_wall_us_; }

 private:
  // The hung leader, its successor serving: SIGCONT, then it must exit on its own (deposed).
  // Bounded by kDeposedExitTimeoutMs, after which it is killed (deposed_exit_code stays -1).
  void resume_deposed() {
    const pid_t pid = old_pid_;
    (void)::kill(pid, SIGCONT);
    const uint64_t start = now_ms();
    while (now_ms() - start < kDeposedExitTimeoutMs) {  // bounded
      int status = 0;
      const pid_t r = old_child_ ? ::waitpid(pid, &status, WNOHANG) : 0;
      const bool gone = old_child_ ? r == pid : (::kill(pid, 0) != 0 && errno == ESRCH);
      if (gone) {
        out_->deposed_exit_code = old_child_ && WIFEXITED(status) ? WEXITSTATUS(status)
                                                                           : -1;
        out_->deposed_exit_ms = static_cast<double>(now_ms() - start);
        fmt::print(stderr, "shard {}: the hung leader (pid {}) exited {} ms after SIGCONT ({})\n",
                   plan_.shard, pid, now_ms() - start,
                   out_->deposed_exit_code >= 0
                       ? fmt::format("status {}", out_->deposed_exit_code)
                       : std::string("killed by a signal or not our child"));
        return;
      }
      RealEnv::instance().sleep_ns(10'000'000);
    }
    fmt::print(stderr, "shard {}: the hung leader (pid {}) still runs {} ms after SIGCONT: killed\n",
               plan_.shard, pid, kDeposedExitTimeoutMs);
    (void)::kill(pid, SIGKILL);
    if (old_child_) (void)::waitpid(pid, nullptr, 0);
  }

  ControlClient& client_;
  const cluster::ClusterConfig& config_;
  const std::vector<ServerProcess>& procs_;
  KillPlan plan_;
  WatchedRun* out_;
  std::unique_ptr<cluster::EtcdConfigManager> manager_;
  std::unique_ptr<cluster::ClusterStateStore> store_;
  pid_t old_pid_ = 0;  // set by kill_leader()
  bool old_child_ = false;
  uint64_t kill_ms_ = 0, kill_wall_us_ = 0;
  bool elected_ = false, running_ = false;
};

}  // namespace

Status run_watched(ControlClient& client, const cluster::ClusterConfig& config,
                   const std::vector<ServerProcess>& procs, const std::vector<std::string>& etcd,
                   const MicroParams& params, const KillPlan& kill, const std::atomic<bool>* stop,
                   WatchedRun* out) {
  const auto shards = static_cast<uint32_t>(config.shards.size());
  Failover failover(client, config, procs, kill, out);
  if (kill.at_seconds > 0) SHOAL_TRY(failover.open_manager(etcd));
  for (uint32_t s = 0; s < shards; ++s) {
    auto started = client.call(s, kStart, params.to_json(), 5000);
    if (!started.ok()) return started.status();
  }
  const uint64_t start_ms = now_ms();
  const uint64_t end_ms = start_ms + static_cast<uint64_t>(params.seconds * 1000);
  out->committed_per_second.assign(static_cast<size_t>(std::ceil(params.seconds)), 0);
  std::vector<uint64_t> last(shards, 0);
  uint64_t last_rise_wall_us = 0;  // the kill target's, before the kill
  bool told_stop = false;
  for (uint64_t next_ms = start_ms; now_ms() < end_ms;) {  // bounded by end_ms
    const uint64_t now = now_ms();
    if (!told_stop && stop != nullptr && stop->load(std::memory_order_relaxed)) {
      told_stop = true;
      fmt::print(stderr,
                 "shoal: the shard servers cannot end a run early yet: {:.1f} s left, then the "
                 "report\n",
                 static_cast<double>(end_ms - now) / 1000);
    }
    if (kill.at_seconds > 0 && !out->killed && now >= start_ms + kill.at_seconds * 1000) {
      SHOAL_TRY(failover.kill_leader());
      out->killed_leader_committed = last[kill.shard];
      last[kill.shard] = 0;  // the new leader counts from 0
    }
    if (out->killed && !failover.running()) (void)failover.step(params, end_ms);
    for (uint32_t s = 0; s < shards; ++s) {
      if (out->killed && s == kill.shard && !failover.running()) continue;
      auto stats = client.call(s, kStats, nlohmann::json::object(), kStatsTimeoutMs);
      if (!stats.ok()) continue;  // a late answer: the next sample counts it
      uint64_t live = 0, first_us = 0;
      if (!json_optional_field(*stats, "live_committed", &live).ok() ||
          !json_optional_field(*stats, "first_commit_unix_us", &first_us).ok()) {
        continue;  // malformed: the next sample
      }
      const size_t second =
          std::min<size_t>((now - start_ms) / 1000, out->committed_per_second.size() - 1);
      if (live > last[s]) {
        out->committed_per_second[second] += live - last[s];
        if (s == kill.shard && !out->killed) last_rise_wall_us = RealEnv::instance().wall_us();
        last[s] = live;
      }
      if (out->killed && s == kill.shard && out->failover_ms < 0 && first_us != 0 &&
          last_rise_wall_us != 0) {
        out->failover_ms = static_cast<double>(first_us - last_rise_wall_us) / 1000.0;
        out->kill_to_commit_ms =
            (static_cast<double>(first_us) - static_cast<double>(failover.kill_wall_us())) / 1000.0;
      }
    }
    // Fine samples only where a kill is planned (failover_ms needs them): every sample is a
    // control call per shard that the servers answer beside their load.
    next_ms += kill.at_seconds > 0 ? kSampleMs : kSampleMsQuiet;
    const uint64_t after = now_ms();
    if (next_ms > after) RealEnv::instance().sleep_ns((next_ms - after) * 1'000'000);
  }
  if (out->killed && !failover.running()) {
    out->error = fmt::format("shard {}: no new leader served before the run ended", kill.shard);
  }
  return Status::Ok();
}

}  // namespace shoal::server

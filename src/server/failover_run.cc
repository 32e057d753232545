#include "src/server/failover_run.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "src/base/assert.h"
#include "src/base/env.h"
#include "src/base/json_field.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/etcd_config_manager.h"

namespace shoal::server {
namespace {

constexpr uint64_t kStatsTimeoutMs = 1000;  // one sample's call: a busy server answers late
constexpr uint64_t kStartTimeoutMs = 50;    // a new leader's kStart (late: AlreadyExists next)
// A kill delayed this close to the run's end is not made: its shard would end the run without
// a leader (an election, a takeover and the load's restart take about a second here).
constexpr uint64_t kKillTailMs = 2000;

// One kill and what follows it, one step per sample. The configuration manager's store is
// shared by the run's kills.
class Failover {
 public:
  // restart_deferred: the killed replica is not restarted here (a region kill restarts all
  // of its replicas together, RegionRestart).
  Failover(ControlClient& client, cluster::ClusterStateStore& store,
           const std::vector<ServerProcess>& procs, const KillPlan& plan, KillOutcome* out,
           bool restart_deferred = false)
      : client_(client),
        store_(store),
        procs_(procs),
        plan_(plan),
        out_(out),
        restart_deferred_(restart_deferred) {}

  // SIGKILL (or, to hang it, SIGSTOP) of the shard's current leader process (asked of the
  // configuration manager: an earlier kill may have moved it).
  [[nodiscard]] Status kill_leader(double run_s) {
    auto state = store_.load_state();
    if (!state.ok()) return state.status();
    if (out_->shard >= state->shards.size()) {
      return Status::InvalidArgument(
          fmt::format("--kill-shard: {} not in the cluster", out_->shard));
    }
    out_->old_leader = state->shards[out_->shard].leader_replica;
    for (const ServerProcess& p : procs_) {
      if (p.shard != out_->shard || p.replica != out_->old_leader || !alive(p)) continue;
      const int sig = plan_.hang ? SIGSTOP : SIGKILL;
      if (::kill(p.pid, sig) != 0) {
        return Status::IOError(fmt::format("kill {}: {}", process_name(p), std::strerror(errno)));
      }
      fmt::print(stderr, "{} shard {}'s leader (replica {}, pid {}) with {} at {:.1f} s\n",
                 plan_.hang ? "hung" : "killed", out_->shard, out_->old_leader, p.pid,
                 plan_.hang ? "SIGSTOP" : "SIGKILL", run_s);
      record_kill(p, run_s, now_ms(), RealEnv::instance().wall_us());
      return Status::Ok();
    }
    return Status::InvalidArgument(
        fmt::format("--kill-leader-at: no live process of shard {} replica {} (a local run only)",
                    out_->shard, out_->old_leader));
  }

  // `p`, the shard's leader, was just signalled (at kill_ms on the monotonic clock, wall_us on
  // the wall clock): the failover starts.
  void record_kill(const ServerProcess& p, double run_s, uint64_t kill_ms, uint64_t wall_us) {
    old_pid_ = p.pid;
    old_child_ = p.child;
    out_->hung = plan_.hang;
    start(p.replica, run_s, kill_ms, wall_us);
  }

  // A failover nobody planned: etcd names another leader than `old_leader`, whose last answer
  // came at kill_ms (wall_us on the wall clock, run_s into the run). Followed as a kill.
  void observe_failure(uint32_t old_leader, double run_s, uint64_t kill_ms, uint64_t wall_us) {
    out_->observed = true;
    start(old_leader, run_s, kill_ms, wall_us);
  }

  // After the kill: learns the new leader and starts the load there. True once it runs.
  bool step(const MicroParams& params, uint64_t end_ms) {
    if (running_) return true;
    const uint32_t shard = out_->shard;
    if (!elected_) {
      auto state = store_.load_state();
      if (!state.ok() || state->shards[shard].leader_replica == out_->old_leader) return false;
      elected_ = true;
      out_->new_leader = state->shards[shard].leader_replica;
      out_->new_epoch = state->epoch;
      out_->leader_elected_ms = static_cast<double>(now_ms() - kill_ms_);
      client_.set_leader(shard, out_->new_leader);
    }
    // It answers once it took over (its takeover is part of its start-up).
    const uint64_t now = now_ms();
    if (now + 100 >= end_ms) return false;  // no time left to run anything
    MicroParams rest = params;
    rest.seconds = static_cast<double>(end_ms - now) / 1000.0;
    // A short wait: a leader still starting (it dials the other shards' leaders) answers
    // nothing, and a region kill's other failovers are stepped after this call.
    auto started = client_.call(shard, kStart, rest.to_json(), kStartTimeoutMs);
    // AlreadyExists: an earlier call of ours started it and its answer was lost (timed out on
    // a loaded machine); the load runs. Any other error: not serving yet, next sample.
    if (!started.ok() && started.status().code() != Code::kAlreadyExists) return false;
    running_ = true;
    fmt::print(stderr,
               "shard {}: replica {} leads in epoch {}; load restarted there for {:.1f} s\n", shard,
               out_->new_leader, out_->new_epoch, rest.seconds);
    if (out_->observed) return true;  // not ours to resume or restart
    if (plan_.hang) resume_deposed();
    if (plan_.restart && !restart_deferred_) {
      const Status st = plan_.restart(shard, out_->old_leader);
      out_->restarted = st.ok();
      if (!st.ok()) {
        fmt::print(stderr, "shard {}: restarting replica {} failed: {}\n", shard, out_->old_leader,
                   st.to_string());
      }
    }
    return true;
  }

  bool running() const { return running_; }
  // Finished: the new leader committed (failover_ms measured, unless the shard had not
  // committed before the kill).
  bool finished() const { return running_ && first_commit_seen_; }
  void set_first_commit_seen() { first_commit_seen_ = true; }
  uint64_t kill_wall_us() const { return kill_wall_us_; }
  // The killed shard's last rise in committed count before the kill (wall clock, us; 0: none
  // seen): where failover_ms starts.
  void set_rise_before_us(uint64_t us) { rise_before_us_ = us; }
  uint64_t rise_before_us() const { return rise_before_us_; }
  const KillOutcome& outcome() const { return *out_; }
  KillOutcome& outcome() { return *out_; }

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
        out_->deposed_exit_code = old_child_ && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        out_->deposed_exit_ms = static_cast<double>(now_ms() - start);
        fmt::print(stderr, "shard {}: the hung leader (pid {}) exited {} ms after SIGCONT ({})\n",
                   out_->shard, pid, now_ms() - start,
                   out_->deposed_exit_code >= 0
                       ? fmt::format("status {}", out_->deposed_exit_code)
                       : std::string("killed by a signal or not our child"));
        return;
      }
      RealEnv::instance().sleep_ns(10'000'000);
    }
    fmt::print(stderr,
               "shard {}: the hung leader (pid {}) still runs {} ms after SIGCONT: killed\n",
               out_->shard, pid, kDeposedExitTimeoutMs);
    (void)::kill(pid, SIGKILL);
    if (old_child_) (void)::waitpid(pid, nullptr, 0);
  }

  void start(uint32_t old_leader, double run_s, uint64_t kill_ms, uint64_t wall_us) {
    out_->old_leader = old_leader;
    out_->killed = true;
    out_->killed_at_s = run_s;
    kill_ms_ = kill_ms;
    kill_wall_us_ = wall_us;
    out_->killed_unix_us = wall_us;
    client_.disconnect(out_->shard);
  }

  ControlClient& client_;
  cluster::ClusterStateStore& store_;
  const std::vector<ServerProcess>& procs_;  // grows as killed replicas restart
  const KillPlan& plan_;
  KillOutcome* out_;
  const bool restart_deferred_;
  pid_t old_pid_ = 0;  // set by record_kill()
  bool old_child_ = false;
  uint64_t kill_ms_ = 0, kill_wall_us_ = 0, rise_before_us_ = 0;
  bool elected_ = false, running_ = false, first_commit_seen_ = false;
};

// The configuration manager a run's kills ask (etcd: its endpoints).
struct KillManager {
  std::unique_ptr<cluster::EtcdConfigManager> manager;
  std::unique_ptr<cluster::ClusterStateStore> store;
};

Status open_kill_manager(const cluster::ClusterConfig& config, const std::vector<std::string>& etcd,
                         KillManager* out) {
  if (etcd.empty()) {
    return Status::InvalidArgument(
        "--kill-leader-at: needs the configuration manager (a local run starts one)");
  }
  cluster::EtcdOptions eo;
  eo.endpoints = etcd;
  auto m = cluster::EtcdConfigManager::create(eo);
  if (!m.ok()) return m.status();
  out->manager = std::move(*m);
  out->store = std::make_unique<cluster::ClusterStateStore>(*out->manager, config.name);
  return Status::Ok();
}

// A region kill (plan.region): SIGKILL to every live process of the region at once, as a
// region fails, then one Failover per shard whose leader was among them (in shard order, its
// restart deferred to restart_region), appended to *made.
Status kill_region(ControlClient& client, cluster::ClusterStateStore& store,
                   const cluster::ClusterConfig& config, const std::vector<ServerProcess>& procs,
                   const KillPlan& plan, double run_s, WatchedRun* out,
                   std::vector<std::unique_ptr<Failover>>* made) {
  auto targets = region_replicas(config, plan.region);
  if (!targets.ok()) return targets.status();
  auto state = store.load_state();  // who leads: asked before the kill, which changes it
  if (!state.ok()) return state.status();
  std::vector<const ServerProcess*> victims;
  for (const RegionReplica& t : *targets) {
    for (const ServerProcess& p : procs) {
      if (p.shard == t.shard && p.replica == t.replica && alive(p)) victims.push_back(&p);
    }
  }
  const uint64_t kill_ms = now_ms();
  const uint64_t wall_us = RealEnv::instance().wall_us();
  for (const ServerProcess* p : victims) {  // signals first: the region dies at one instant
    if (::kill(p->pid, SIGKILL) != 0) {
      return Status::IOError(fmt::format("kill {}: {}", process_name(*p), std::strerror(errno)));
    }
  }
  RegionKillOutcome& r = out->region_kill;
  r.killed = true;
  r.killed_at_s = run_s;
  r.killed_unix_us = wall_us;
  std::string named;
  size_t leaders = 0;
  for (const ServerProcess* p : victims) {
    const bool leader = state->shards[p->shard].leader_replica == p->replica;
    r.processes.push_back({p->shard, p->replica, static_cast<int>(p->pid), leader, false});
    leaders += leader ? 1 : 0;
    named += fmt::format("{}shard {} replica {} ({}, pid {})", named.empty() ? "" : ", ", p->shard,
                         p->replica, leader ? "leader" : "follower", p->pid);
  }
  fmt::print(stderr, "killed region {} with SIGKILL at {:.1f} s: {}\n", plan.region, run_s,
             named.empty() ? std::string("no live process there") : named);
  if (victims.empty()) r.error = "no live process in the region to kill";
  out->kills.assign(leaders, KillOutcome{});  // sized before any Failover points into it
  size_t k = 0;
  for (size_t i = 0; i < victims.size(); ++i) {
    if (!r.processes[i].leader) continue;
    KillOutcome& o = out->kills[k++];
    o.planned_at_s = r.planned_at_s;
    o.shard = victims[i]->shard;
    auto f = std::make_unique<Failover>(client, store, procs, plan, &o, true);
    f->record_kill(*victims[i], run_s, kill_ms, wall_us);
    made->push_back(std::move(f));
  }
  return Status::Ok();
}

// Every shard the region kill failed over serves: every killed replica starts again (as a
// follower), the region comes back. Restarting them one shard at a time instead would spend
// the machine's cores on WAL recovery while other shards still elect.
void restart_region(const KillPlan& plan, double run_s, WatchedRun* out) {
  if (!plan.restart) return;  // they stay down
  RegionKillOutcome& r = out->region_kill;
  std::string failed;
  for (RegionKillOutcome::Process& p : r.processes) {
    const Status st = plan.restart(p.shard, p.replica);
    p.restarted = st.ok();
    if (!st.ok())
      failed += fmt::format(" shard {} replica {}: {};", p.shard, p.replica, st.to_string());
    for (KillOutcome& k : out->kills) {
      if (k.shard == p.shard && k.old_leader == p.replica) k.restarted = p.restarted;
    }
  }
  r.restarted_at_s = run_s;
  fmt::print(stderr, "region {}: its {} replicas restarted at {:.1f} s{}\n", r.region,
             r.processes.size(), run_s, failed.empty() ? "" : "; failed:" + failed);
  if (!failed.empty() && r.error.empty()) r.error = "restarting its replicas failed:" + failed;
}

// The per-shard counters of the watch (kStats {"latency": true}): committed and conflict counts
// since the baseline, into the run's per-second totals, and latency counts into the series.
class LiveSampler {
 public:
  LiveSampler(uint32_t shards, LatencySeries* latency, uint32_t* malformed_shards)
      : committed_(shards, 0),
        conflicts_(shards, 0),
        latency_said_(shards, false),
        latency_(latency),
        malformed_shards_(malformed_shards) {}

  // What `shard` counted before the run (see run_watched).
  void baseline(ControlClient& client, uint32_t shard) {
    auto stats = client.call(shard, kStats, request(true), kStatsTimeoutMs);
    if (!stats.ok()) return;
    uint64_t committed = 0, conflicts = 0;
    if (!json_optional_field(*stats, "live_committed", &committed).ok() ||
        !json_optional_field(*stats, "live_conflicts", &conflicts).ok()) {
      return;
    }
    committed_[shard] = committed;
    conflicts_[shard] = conflicts;
    LatencySample sample;
    if (parse_latency_sample(*stats, &sample).ok()) latency_->set_baseline(shard, sample);
  }

  // One sample of `shard` in `second` of the run: its differences into *out's seconds and the
  // latency series; *first_us the new leader's first commit (0: none yet). True when its
  // committed count rose. Errors: the call failed or its counts are malformed (nothing
  // counted: the next sample counts it). Malformed latency alone is said once per shard and
  // leaves the latency out.
  Result<bool> sample(ControlClient& client, uint32_t shard, size_t second, bool with_latency,
                      WatchedRun* out, uint64_t* first_us) {
    auto stats = client.call(shard, kStats, request(with_latency), kStatsTimeoutMs);
    if (!stats.ok()) return stats.status();
    uint64_t committed = 0, conflicts = 0;
    SHOAL_TRY(json_optional_field(*stats, "live_committed", &committed));
    SHOAL_TRY(json_optional_field(*stats, "live_conflicts", &conflicts));
    SHOAL_TRY(json_optional_field(*stats, "first_commit_unix_us", first_us));
    if (conflicts > conflicts_[shard]) {
      out->aborts_per_second[second] += conflicts - conflicts_[shard];
      conflicts_[shard] = conflicts;
    }
    LatencySample sample;
    if (!with_latency) {
      // counted by the next sample with it
    } else if (const Status parsed = parse_latency_sample(*stats, &sample); parsed.ok()) {
      latency_->add(shard, second, sample);
    } else if (!latency_said_[shard]) {
      latency_said_[shard] = true;
      ++*malformed_shards_;
      fmt::print(stderr,
                 "shard {}: its latency counts are unreadable ({}): left out of the series\n",
                 shard, parsed.to_string());
    }
    if (committed <= committed_[shard]) return false;
    out->committed_per_second[second] += committed - committed_[shard];
    committed_[shard] = committed;
    return true;
  }

  // `shard`'s leader was killed: its successor counts from zero.
  void reset(uint32_t shard) {
    committed_[shard] = 0;
    conflicts_[shard] = 0;
    latency_->reset(shard);
  }
  // `shard`'s committed count as last sampled.
  uint64_t committed(uint32_t shard) const { return committed_[shard]; }

 private:
  static nlohmann::json request(bool with_latency) { return {{"latency", with_latency}}; }

  std::vector<uint64_t> committed_, conflicts_;  // per shard: as last sampled
  std::vector<bool> latency_said_;               // per shard: its malformed latency was said
  LatencySeries* latency_;
  uint32_t* malformed_shards_;
};

}  // namespace

bool followers_rejoined(ControlClient& client, const cluster::ClusterConfig& config,
                        uint32_t shard) {
  const auto followers = static_cast<uint32_t>(config.shards[shard].replicas.size()) - 1;
  auto pong = client.call(shard, kPing, nlohmann::json::object(), kStatsTimeoutMs);
  uint32_t connected = 0, reported = 0;
  double lag_ms = 0;
  return pong.ok() && json_optional_field(*pong, "followers_connected", &connected).ok() &&
         json_optional_field(*pong, "followers_replay_reported", &reported).ok() &&
         json_optional_field(*pong, "followers_replay_lag_ms_max", &lag_ms).ok() &&
         connected >= followers && reported >= followers && lag_ms <= kRejoinedLagMs;
}

Result<std::vector<KillAt>> make_kill_schedule(const std::vector<double>& at_seconds,
                                               const std::vector<uint32_t>& shards,
                                               uint32_t shard_count) {
  std::vector<KillAt> out;
  if (at_seconds.empty()) {
    if (!shards.empty()) return Status::InvalidArgument("--kill-shard: needs --kill-leader-at");
    return out;
  }
  if (at_seconds.size() > kKillsMax) {
    return Status::InvalidArgument(
        fmt::format("--kill-leader-at: {} kills, at most {}", at_seconds.size(), kKillsMax));
  }
  if (shards.size() > 1 && shards.size() != at_seconds.size()) {
    return Status::InvalidArgument(fmt::format(
        "--kill-shard: {} shards for {} kill times (--kill-leader-at): give one shard per time "
        "or one for all",
        shards.size(), at_seconds.size()));
  }
  for (size_t i = 0; i < at_seconds.size(); ++i) {
    const double t = at_seconds[i];
    if (!(t > 0)) {
      return Status::InvalidArgument(fmt::format("--kill-leader-at: {} is not > 0", t));
    }
    if (i > 0 && !(t > at_seconds[i - 1])) {
      return Status::InvalidArgument(
          fmt::format("--kill-leader-at: times must increase ({} after {})", t, at_seconds[i - 1]));
    }
    const uint32_t shard = shards.empty() ? 0 : shards.size() == 1 ? shards[0] : shards[i];
    if (shard >= shard_count) {
      return Status::InvalidArgument(
          fmt::format("--kill-shard: not a shard of the run ({}; the run has {} shard{})", shard,
                      shard_count, shard_count == 1 ? "" : "s"));
    }
    out.push_back({t, shard});
  }
  return out;
}

Result<std::vector<RegionReplica>> region_replicas(const cluster::ClusterConfig& config,
                                                   std::string_view region) {
  if (config.find_region(region) == nullptr) {
    std::string known;
    for (const cluster::Region& r : config.regions) known += (known.empty() ? "" : ", ") + r.name;
    return Status::InvalidArgument(
        fmt::format("--kill-region: no region '{}' in the run (its regions: {})", region, known));
  }
  std::vector<RegionReplica> out;
  for (uint32_t s = 0; s < config.shards.size(); ++s) {
    const auto& replicas = config.shards[s].replicas;
    uint32_t there = 0;
    for (uint32_t r = 0; r < replicas.size(); ++r) {
      if (replicas[r].region != region) continue;
      ++there;
      out.push_back({s, r});
    }
    if (there > 0 && 2 * there >= replicas.size()) {
      return Status::InvalidArgument(fmt::format(
          "--kill-region: region '{}' holds {} of shard {}'s {} replicas: the rest are no "
          "majority, no failover possible",
          region, there, s, replicas.size()));
    }
  }
  if (out.empty()) {
    return Status::InvalidArgument(
        fmt::format("--kill-region: region '{}' holds no replica: nothing to kill", region));
  }
  return out;
}

Status check_region_kill(const std::vector<double>& at_seconds, bool kill_shard_given, bool hang,
                         const cluster::ClusterConfig& layout, std::string_view region) {
  if (at_seconds.size() != 1) {
    return Status::InvalidArgument(
        fmt::format("--kill-region: needs one --kill-leader-at time (when the region dies), not {}",
                    at_seconds.size()));
  }
  if (kill_shard_given) {
    return Status::InvalidArgument(
        "--kill-region: not with --kill-shard (it kills every shard's replica in the region)");
  }
  if (hang) return Status::InvalidArgument("--kill-region: not with --hang-leader (it SIGKILLs)");
  return region_replicas(layout, region).status();
}

uint64_t WatchedRun::killed_leaders_committed() const {
  uint64_t sum = 0;
  for (const KillOutcome& k : kills) sum += k.killed_leader_committed;
  for (const KillOutcome& k : observed) sum += k.killed_leader_committed;
  return sum;
}

// Ctrl-C: every shard's load ends now (kStop). A shard that does not answer (its leader
// killed, not yet replaced) ends at its run's end; what it committed is collected as always.
static void stop_every_load(ControlClient& client, uint32_t shards) {
  fmt::print(stderr, "shoal: interrupted: ending the run on every shard\n");
  for (uint32_t s = 0; s < shards; ++s) {
    auto stopped = client.call(s, kStop, nlohmann::json::object(), 2000);
    if (!stopped.ok()) {
      fmt::print(stderr, "shoal: shard {} not stopped early: {}\n", s,
                 stopped.status().to_string());
    }
  }
}

Status run_watched(ControlClient& client, const cluster::ClusterConfig& config,
                   const std::vector<ServerProcess>& procs, const std::vector<std::string>& etcd,
                   const MicroParams& params, const KillPlan& plan, const std::atomic<bool>* stop,
                   WatchedRun* out) {
  const auto shards = static_cast<uint32_t>(config.shards.size());
  const bool kills = !plan.kills.empty();
  SHOAL_ASSERT(plan.kills.size() <= kKillsMax, "%zu kills planned", plan.kills.size());
  KillManager km;
  if (kills || !etcd.empty()) SHOAL_TRY(open_kill_manager(config, etcd, &km));
  const bool region = !plan.region.empty();
  SHOAL_ASSERT(!region || (plan.kills.size() == 1 && !plan.hang), "region kill: %zu kills",
               plan.kills.size());
  // A region kill's outcomes are its failovers, known once it is made (kill_region).
  out->kills.assign(region ? 0 : plan.kills.size(), KillOutcome{});
  out->has_region_kill = region;
  if (region) {
    out->region_kill.region = plan.region;
    out->region_kill.planned_at_s = plan.kills[0].at_seconds;
  }
  for (size_t k = 0; k < out->kills.size(); ++k) {
    out->kills[k].planned_at_s = plan.kills[k].at_seconds;
    out->kills[k].shard = plan.kills[k].shard;
    if (plan.kills[k].shard >= shards) {
      return Status::InvalidArgument(
          fmt::format("--kill-shard: {} not in the cluster", plan.kills[k].shard));
    }
  }
  std::vector<std::unique_ptr<Failover>> failovers;  // one per kill made, in order
  const size_t seconds = std::max<size_t>(static_cast<size_t>(std::ceil(params.seconds)), 1);
  LatencySeries latency(shards, seconds);
  LiveSampler sampler(shards, &latency, &out->latency_malformed_shards);
  // What each shard counted before this load (a cluster's earlier runs): the baseline. One
  // that does not answer, or answers malformed, counts from zero (its first sample may then
  // include what it did before).
  for (uint32_t s = 0; s < shards; ++s) sampler.baseline(client, s);
  for (uint32_t s = 0; s < shards; ++s) {
    auto started = client.call(s, kStart, params.to_json(), 5000);
    if (!started.ok()) return started.status();
  }
  const uint64_t start_ms = now_ms();
  const uint64_t end_ms = start_ms + static_cast<uint64_t>(params.seconds * 1000);
  out->committed_per_second.assign(seconds, 0);
  out->aborts_per_second.assign(seconds, 0);
  // Per shard, before its latest kill: when its count last rose (the start of failover_ms).
  std::vector<uint64_t> last_rise_wall_us(shards, 0);
  // Per shard, the latest kill made of it (an index of failovers), or -1.
  std::vector<int> current(shards, -1);
  uint64_t ended_ms = end_ms;
  uint64_t next_latency_ms = start_ms;
  // A kill made: its shard's count starts again at its successor.
  const auto adopt = [&](std::unique_ptr<Failover> f) {
    const uint32_t shard = f->outcome().shard;
    f->outcome().killed_leader_committed = sampler.committed(shard);
    f->set_rise_before_us(last_rise_wall_us[shard]);
    sampler.reset(shard);  // the new leader counts from 0
    current[shard] = static_cast<int>(failovers.size());
    failovers.push_back(std::move(f));
  };
  // Per shard, its leader's last answer (monotonic ms, wall us, run s): where an observed
  // failover starts.
  struct Answer {
    uint64_t ms = 0, wall_us = 0;
    double run_s = 0;
  };
  std::vector<Answer> last_answer(shards, Answer{start_ms, RealEnv::instance().wall_us(), 0});
  out->observed.reserve(kObservedFailoversMax);  // Failovers point into it
  uint64_t next_watch_ms = start_ms + kWatchLeadersMs;
  // Per shard: until when its leader is suspected (a sample failed to reach it) and left
  // unsampled: a call to a dead leader retries the refused connection for kStatsTimeoutMs,
  // which would stall every other shard's samples and the failover's own steps.
  std::vector<uint64_t> suspect_until_ms(shards, 0);
  // Every kWatchLeadersMs (every sample while a leader is suspected): a shard whose leader etcd
  // changed with no failover of ours under way.
  const auto observe = [&](uint64_t now) {
    if (km.store == nullptr || now < next_watch_ms) return;
    const bool suspicion = std::any_of(suspect_until_ms.begin(), suspect_until_ms.end(),
                                       [now](uint64_t until) { return until > now; });
    next_watch_ms = now + (suspicion ? kSampleMs : kWatchLeadersMs);
    auto state = km.store->load_state();
    if (!state.ok()) return;  // etcd busy or gone: asked again next time
    for (uint32_t s = 0; s < shards && s < state->shards.size(); ++s) {
      if (state->shards[s].leader_replica == client.leader(s)) continue;
      if (current[s] >= 0 && !failovers[current[s]]->running()) continue;  // ours, under way
      if (out->observed.size() >= kObservedFailoversMax) continue;
      KillOutcome& o = out->observed.emplace_back();
      o.shard = s;
      o.planned_at_s = last_answer[s].run_s;
      auto f = std::make_unique<Failover>(client, *km.store, procs, plan, &o, true);
      f->observe_failure(client.leader(s), last_answer[s].run_s, last_answer[s].ms,
                         last_answer[s].wall_us);
      fmt::print(stderr,
                 "shard {}: its leader (replica {}) was replaced, not by this run: etcd names "
                 "replica {} in epoch {}; following it\n",
                 s, o.old_leader, state->shards[s].leader_replica, state->epoch);
      suspect_until_ms[s] = 0;
      adopt(std::move(f));
    }
  };
  size_t kills_made = 0;  // of plan.kills
  bool region_restarted = false;
  std::string waiting;                                     // why the next kill waits, once said
  for (uint64_t next_ms = start_ms; now_ms() < end_ms;) {  // bounded by end_ms
    const uint64_t now = now_ms();
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
      ended_ms = now;
      out->interrupted = true;
      stop_every_load(client, shards);
      break;
    }
    const size_t next_kill = kills_made;
    const double run_s = static_cast<double>(now - start_ms) / 1000.0;
    const bool due =
        next_kill < plan.kills.size() &&
        now >= start_ms + static_cast<uint64_t>(plan.kills[next_kill].at_seconds * 1000);
    if (due && region) {
      std::vector<std::unique_ptr<Failover>> made;
      SHOAL_TRY(kill_region(client, *km.store, config, procs, plan, run_s, out, &made));
      for (auto& f : made) adopt(std::move(f));
      ++kills_made;
    } else if (due) {
      const uint32_t shard = plan.kills[next_kill].shard;
      // Kills run one after the other (see the header): why this one must wait, if it must.
      // A delayed kill that reached the run's last kKillTailMs is given up for good (checked
      // first: the other reasons come and go).
      std::string why;
      if (!waiting.empty() && now + kKillTailMs > end_ms) {
        why = fmt::format("less than {:.1f} s of the run left for its failover",
                          static_cast<double>(kKillTailMs) / 1000);
      } else if (!failovers.empty() && !failovers.back()->finished()) {
        const KillOutcome& prev = failovers.back()->outcome();
        why = fmt::format("the failover of shard {} (killed at {:.1f} s) had not finished",
                          prev.shard, prev.killed_at_s);
      } else if (current[shard] >= 0 && failovers[current[shard]]->outcome().restarted &&
                 !followers_rejoined(client, config, shard)) {
        why = fmt::format(
            "shard {}'s replica restarted after the kill at {:.1f} s had not rejoined (connected, "
            "replaying within {:.0f} ms)",
            shard, failovers[current[shard]]->outcome().killed_at_s, kRejoinedLagMs);
      }
      if (!why.empty() && why != waiting) {
        fmt::print(stderr, "kill {} (shard {} at {:.1f} s) waits: {}\n", next_kill + 1, shard,
                   plan.kills[next_kill].at_seconds, why);
      }
      waiting = why;
      if (why.empty()) {
        auto f = std::make_unique<Failover>(client, *km.store, procs, plan, &out->kills[next_kill]);
        SHOAL_TRY(f->kill_leader(run_s));
        adopt(std::move(f));
        ++kills_made;
      }
    }
    observe(now);
    bool all_running = true;  // (a region kill's failovers run at once; leader kills in turn)
    for (const auto& f : failovers) {
      if (!f->running()) all_running = f->step(params, end_ms) && all_running;
    }
    if (out->region_kill.killed && !region_restarted && all_running) {
      restart_region(plan, static_cast<double>(now_ms() - start_ms) / 1000.0, out);
      region_restarted = true;
    }
    // Latency (and conflicts) at most every kLatencySampleMs: a call with them took ~0.2 ms
    // more than one without (2.5 KB of JSON against 108 B; docs/OPERATIONS.md), which every
    // 20 ms would cost the shard's control loop and this thread 1% of a core each.
    const bool with_latency = now >= next_latency_ms;
    if (with_latency) next_latency_ms = now + kLatencySampleMs;
    for (uint32_t s = 0; s < shards; ++s) {
      Failover* f = current[s] >= 0 ? failovers[current[s]].get() : nullptr;
      if (f != nullptr && !f->running()) continue;  // no leader to ask yet
      if (now < suspect_until_ms[s]) continue;      // its leader may be dead: etcd will say
      const size_t second = std::min<size_t>((now - start_ms) / 1000, seconds - 1);
      uint64_t first_us = 0;
      auto rose = sampler.sample(client, s, second, with_latency, out, &first_us);
      if (!rose.ok()) {  // a late or malformed answer: the next sample counts it
        const Code c = rose.status().code();
        if (km.store != nullptr && (c == Code::kUnavailable || c == Code::kIOError)) {
          suspect_until_ms[s] = now_ms() + kSuspectMs;
          next_watch_ms = now_ms();
        }
        continue;
      }
      last_answer[s] = {now_ms(), RealEnv::instance().wall_us(),
                        static_cast<double>(now_ms() - start_ms) / 1000.0};
      if (*rose) last_rise_wall_us[s] = RealEnv::instance().wall_us();
      KillOutcome* k = f != nullptr ? &f->outcome() : nullptr;
      if (k != nullptr && !f->finished() && first_us != 0) {
        f->set_first_commit_seen();
        k->kill_to_commit_ms =
            (static_cast<double>(first_us) - static_cast<double>(f->kill_wall_us())) / 1000.0;
        if (f->rise_before_us() != 0) {
          k->failover_ms = static_cast<double>(first_us - f->rise_before_us()) / 1000.0;
        }
      }
    }
    // Fine samples only where a failover may come (failover_ms needs them: a kill planned, or
    // one we may observe): every sample is a control call per shard that the servers answer
    // beside their load.
    next_ms += kills || km.store != nullptr ? kSampleMs : kSampleMsQuiet;
    const uint64_t after = now_ms();
    if (next_ms > after) RealEnv::instance().sleep_ns((next_ms - after) * 1'000'000);
  }
  out->measured_s = static_cast<double>(std::min(ended_ms, now_ms()) - start_ms) / 1000.0;
  out->latency = latency.finish();
  if (out->interrupted) {  // the seconds after the stop measured nothing
    const size_t measured =
        std::min(seconds, std::max<size_t>(static_cast<size_t>(std::ceil(out->measured_s)), 1));
    out->committed_per_second.resize(measured);
    out->aborts_per_second.resize(measured);
    out->latency.resize(measured);
  }
  for (const auto& f : failovers) {
    if (!f->running()) {
      f->outcome().error =
          fmt::format("shard {}: no new leader served before the run ended", f->outcome().shard);
    }
  }
  for (size_t k = kills_made; k < out->kills.size() && !region; ++k) {
    // Due but not made: it waited to the end. Not due: the run ended first (no error).
    const double due_s = plan.kills[k].at_seconds;
    if (k == kills_made && !waiting.empty() && due_s < params.seconds) {
      out->kills[k].error = fmt::format("not made before the run ended: {}", waiting);
    }
  }
  return Status::Ok();
}

}  // namespace shoal::server

#include "bench/runner_repl.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "src/base/spawn.h"
#include "src/cluster/config.h"
#include "src/repl/bootstrap.h"

namespace shoal::bench {
namespace {

std::string tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (last.size() > lines) last.erase(last.begin());
  }
  std::string out;
  for (const auto& l : last) out += "\n    " + l;
  return out;
}

}  // namespace

Result<std::unique_ptr<ReplicatedRun>> ReplicatedRun::start(workload::Workload& workload,
                                                            txn::Engine& engine,
                                                            const RunOptions& options,
                                                            ReplicationResult* result) {
  std::unique_ptr<ReplicatedRun> run(new ReplicatedRun());
  run->replicas_ = options.replicas;
  result->enabled = true;
  result->replicas = options.replicas;
  result->wan_rtt_ms = options.wan_rtt_ms;
  result->batch_txns = options.batch_txns;
  result->batch_us = options.batch_us;
  result->fsync = options.fsync;
  result->transport = options.replica_transport;

  if (options.replica_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = fmt::format("{}/shoal-repl-XXXXXX", tmp != nullptr ? tmp : "/tmp");
    if (::mkdtemp(pattern.data()) == nullptr) {
      return Status::IOError("cannot create a directory for the replicas under " + pattern);
    }
    run->dir_ = pattern;
    run->remove_dir_ = !options.keep_replica_dir;
  } else {
    run->dir_ = options.replica_dir;
    std::error_code ec;
    std::filesystem::create_directories(run->dir_, ec);
    if (ec) return Status::IOError("cannot create " + run->dir_ + ": " + ec.message());
  }

  const uint64_t rtt_ns = static_cast<uint64_t>(options.wan_rtt_ms * 1e6);
  repl::LeaderOptions lo;
  lo.shard = 0;
  lo.streams = options.workers;
  lo.replicas = options.replicas;
  lo.receive_shapes.assign(options.replicas, net::LinkShape{rtt_ns / 2, 0});
  lo.receive_shapes[0] = {};
  auto kind = cluster::transport_kind(options.replica_transport);
  if (!kind.ok()) return kind.status();
  switch (*kind) {
    case cluster::TransportKind::kTcp:
      lo.link = repl::LinkKind::kTcp;
      break;
    case cluster::TransportKind::kShm:
      lo.link = repl::LinkKind::kShm;
      break;
    case cluster::TransportKind::kFabric:
      lo.link = repl::LinkKind::kFabric;
      break;
  }
  lo.appender.limits.batch_txns_max = options.batch_txns;
  lo.appender.limits.batch_age_ns_max = static_cast<uint64_t>(options.batch_us * 1e3);
  lo.lead_ms_max = options.lead_ms_max;
  if (options.replay_lag_ms >= 0) {
    lo.follower_replay_lag_ms_max = static_cast<uint64_t>(options.replay_lag_ms);
  }
  lo.wal_dir = run->dir_ + "/replica-0";
  std::error_code ec;
  std::filesystem::create_directories(lo.wal_dir, ec);
  if (ec) return Status::IOError("cannot create " + lo.wal_dir + ": " + ec.message());
  auto fsync = repl::parse_fsync(options.fsync, "--fsync");
  if (!fsync.ok()) return fsync.status();
  lo.fsync = *fsync;
  lo.paxos = repl::paxos_options_for_rtt(rtt_ns);
  lo.schema = repl::Schema::of(engine, workload.name());
  lo.checkpoint_fetch_interval_ms = options.checkpoint_interval_ms;
  lo.checkpoint_dir = lo.wal_dir;
  auto leader = repl::ReplicationLeader::start(lo, engine);
  if (!leader.ok()) return leader.status();
  run->leader_ = std::move(*leader);
  SHOAL_TRY(run->spawn_followers(options));
  // In slices, so that a follower that exited (it never comes back: without a configuration
  // manager a follower whose connection ends stops) fails the start at once.
  constexpr uint64_t kLeadingMs = 30'000;
  for (uint64_t waited_ms = 0;; waited_ms += kFollowerCheckMs) {  // bounded by kLeadingMs
    const Status alive = run->followers_alive();
    if (!alive.ok()) {
      return Status::Unavailable(alive.message() + "; follower logs:" + run->follower_logs());
    }
    const Status led = run->leader_->wait_leading(kFollowerCheckMs);
    if (led.ok()) break;
    if (waited_ms + kFollowerCheckMs >= kLeadingMs) {
      return Status::Unavailable(fmt::format("{} (waited {} ms in all); follower logs:{}",
                                             led.message(), kLeadingMs, run->follower_logs()));
    }
  }
  SHOAL_TRY(run->bootstrap(engine, result));
  return run;
}

Status ReplicatedRun::spawn_followers(const RunOptions& options) {
  // The followers' view of the shard: a local config with our listening port as replica 0
  // and every cross-region link at half the round trip.
  auto config = cluster::make_local_config(1, options.replicas, options.workers, 1, 20000);
  if (!config.ok()) return config.status();
  config->name = "bench";
  auto kind = cluster::transport_kind(options.replica_transport);
  if (!kind.ok()) return kind.status();
  config->transport = *kind;
  // Followers dial cluster::replication_port(replica 0) = its port + 1.
  config->shards[0].replicas[0].port = static_cast<uint16_t>(leader_->port() - 1);
  for (uint32_t a = 0; a < options.replicas; ++a) {
    for (uint32_t b = a + 1; b < options.replicas; ++b) {
      config->wan.push_back(
          {config->regions[a].name, config->regions[b].name, options.wan_rtt_ms / 2, 0});
    }
  }
  const std::string config_path = dir_ + "/cluster.toml";
  {
    std::ofstream out(config_path, std::ios::trunc);
    out << config->to_toml();
    if (!out) return Status::IOError("cannot write " + config_path);
  }
  std::string exe = options.replica_exe;
  if (exe.empty()) {
    std::error_code ec;
    exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) return Status::IOError("cannot find this executable: " + ec.message());
  }
  for (uint32_t r = 1; r < options.replicas; ++r) {
    std::vector<std::string> args = {exe,
                                     "replica",
                                     "--config",
                                     config_path,
                                     "--shard",
                                     "0",
                                     "--replica",
                                     std::to_string(r),
                                     "--data-dir",
                                     fmt::format("{}/replica-{}", dir_, r),
                                     "--fsync",
                                     options.fsync,
                                     "--replay-nice",
                                     std::to_string(options.replica_nice),
                                     "--serve-reads",
                                     std::to_string(options.follower_reads)};
    if (options.unsafe_follower_read_newest) args.emplace_back("--unsafe-snapshot-read-newest");
    if (options.memory_reserve_mb != 0) {
      args.insert(args.end(), {"--memory-reserve-mb", std::to_string(options.memory_reserve_mb)});
    }
    if (options.checkpoint_interval_ms != 0) {
      args.insert(args.end(),
                  {"--checkpoint-interval-ms", std::to_string(options.checkpoint_interval_ms)});
    }
    // Not fork(): it would write-protect every page of the loaded store, and the worker
    // would then take a page fault on its first write to each during the run
    // (src/base/spawn.h). Followers die with the bench, and are out of the terminal's
    // foreground group: Ctrl-C goes to the bench alone, which reports and then stops them
    // (src/base/interrupt.h).
    auto pid = spawn_child(args, {.die_with_parent = true,
                                  .own_process_group = true,
                                  .log_path = fmt::format("{}/replica-{}.log", dir_, r)});
    if (!pid.ok()) return pid.status();
    children_.push_back(*pid);
  }
  return Status::Ok();
}

std::string ReplicatedRun::follower_logs() const {
  std::string out;
  for (uint32_t r = 1; r < replicas_; ++r) {
    out += fmt::format("\n  replica {} ({}/replica-{}.log):{}", r, dir_, r,
                       tail(fmt::format("{}/replica-{}.log", dir_, r), 5));
  }
  return out;
}

Status ReplicatedRun::followers_alive() const {
  for (size_t i = 0; i < children_.size(); ++i) {
    siginfo_t info{};
    // WNOWAIT: the child stays a zombie for the destructor to reap.
    if (::waitid(P_PID, static_cast<id_t>(children_[i]), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid == 0) {
      continue;  // still running
    }
    const std::string how = info.si_code == CLD_EXITED
                                ? fmt::format("exit status {}", info.si_status)
                                : fmt::format("signal {}", info.si_status);
    return Status::Unavailable(
        fmt::format("replication: follower {} (pid {}) exited ({})", i + 1, children_[i], how));
  }
  return Status::Ok();
}

Status ReplicatedRun::bootstrap(txn::Engine& engine, ReplicationResult* result) {
  // bootstrap_followers waits for *every* follower to install the load. A follower that
  // exited meanwhile (e.g. it lost its link under load: "shm peer closed the link or died")
  // never will, and the wait used to sit out its whole timeout (300 s, longer than the
  // callers' own timeouts: it looked like a hang). A watcher stops the wait when a follower
  // process ends.
  std::atomic<bool> follower_gone{false};
  std::jthread watcher([&](std::stop_token stop) {
    while (!stop.stop_requested()) {  // until bootstrap_followers returned
      if (!followers_alive().ok()) {
        follower_gone.store(true, std::memory_order_release);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(kFollowerCheckMs));
    }
  });
  auto done = repl::bootstrap_followers(*leader_, engine, 300'000, &follower_gone);
  watcher.request_stop();
  watcher.join();
  if (!done.ok()) {
    const Status alive = followers_alive();
    const std::string why = alive.ok()
                                ? done.status().message()
                                : fmt::format("{} while the followers installed the load ({})",
                                              alive.message(), done.status().message());
    return Status::Unavailable(why + "; follower logs:" + follower_logs());
  }
  snapshot_tid_ = done->snapshot_tid;
  // The workers have not started: the main thread may read their appenders.
  for (uint32_t s = 0; s < leader_->streams(); ++s) {
    logged_at_bootstrap_ += leader_->appender(s).stats();
  }
  result->bootstrap_records = done->records;
  result->bootstrap_s = static_cast<double>(done->ns) / kNsPerSec;
  return Status::Ok();
}

uint64_t ReplicatedRun::close_streams() {
  const uint64_t floor = repl::closing_floor(*leader_, snapshot_tid_);
  for (uint32_t s = 0; s < leader_->streams(); ++s) {
    // The bench's appenders have no stop flag, so nothing can stop them.
    const Status closed = leader_->appender(s).finish(floor);
    SHOAL_ASSERT(closed.ok(), "closing stream %u: %s", s, closed.to_string().c_str());
  }
  final_tid_ = floor;
  return floor;
}

Status ReplicatedRun::finish(txn::Engine& engine, bool check, ReplicationResult* result) {
  Env& env = engine.env();
  const uint64_t start_ns = env.now_ns();
  // skip_lost: a follower whose connection ended (its process then exits) never reports;
  // without it the wait would sit out its whole timeout.
  auto reports = leader_->collect_reports(final_tid_, true, check, 300'000, nullptr,
                                          /*skip_lost=*/true);
  if (!reports.ok()) {
    return Status::Unavailable(reports.status().message() + "; follower logs:" + follower_logs());
  }
  for (const repl::FollowerReport& r : *reports) {
    if (!r.lost) continue;
    const Status alive = followers_alive();
    return Status::Unavailable(
        fmt::format("replication: follower {} lost its connection during the run{}; follower "
                    "logs:{}",
                    r.replica, alive.ok() ? "" : " (" + alive.message() + ")", follower_logs()));
  }
  result->quiesce_s = static_cast<double>(env.now_ns() - start_ns) / kNsPerSec;
  result->final_tid = final_tid_;
  result->leader_digest = repl::engine_digest(engine);
  repl::AppenderStats all;
  for (uint32_t s = 0; s < leader_->streams(); ++s) all += leader_->appender(s).stats();
  const repl::AppenderStats logged = all - logged_at_bootstrap_;
  const repl::LeaderStats leader_stats = leader_->stats();
  result->retransmits = leader_stats.retransmits;
  result->catchup_entries = leader_stats.catchup_entries;
  result->catchup_bytes = leader_stats.catchup_bytes;
  result->entries += logged.entries;
  result->log_bytes += logged.bytes;
  result->logged_txns += logged.txns;
  result->floor_entries += logged.floor_entries;
  result->buffer_waits += logged.buffer_waits;
  result->buffer_wait_ns += logged.buffer_wait_ns;
  result->lead_hold_wait_ns += logged.lead_hold_wait_ns;
  result->backlog_wait_ns += logged.backlog_wait_ns;
  result->lead_waits += logged.lead_waits;
  result->idle_seals += logged.idle_seals;
  result->retained_shed = leader_stats.retained_shed;
  result->lag_waits = leader_stats.lag_waits;
  result->replay_lag_waits = leader_stats.replay_lag_waits;
  result->replay_lag_ms_max = leader_stats.replay_lag_ms_max;
  result->replay_lag_stop_ms = leader_stats.replay_lag_stop_ms;
  result->lead_holds = leader_stats.lead_holds;
  result->lead_hold_unproposed_ns = leader_stats.lead_hold_unproposed_ns;
  result->lead_hold_unchosen_ns = leader_stats.lead_hold_unchosen_ns;
  result->pace_limited_ns = leader_stats.pace_limited_ns;
  result->pace_limited_txns = leader_stats.pace_limited_txns;
  result->pace_replay_per_s = leader_stats.pace_replay_per_s;
  result->pace_waits += logged.pace_waits;
  result->pace_wait_ns += logged.pace_wait_ns;
  for (const repl::FollowerReport& r : *reports) {
    FollowerResult f;
    f.replica = r.replica;
    f.digest = r.digest;
    f.digest_match = r.digest == result->leader_digest;
    f.checked = r.checked;
    f.check_failures = r.check_failures;
    f.replay_txns = r.replay_txns;
    f.replay_writes = r.replay_writes;
    f.replay_cpu_s = static_cast<double>(r.replay_cpu_ns) / kNsPerSec;
    f.replay_txns_per_cpu_sec = r.replay_txns_per_cpu_sec();
    f.wal_bytes = r.wal_bytes;
    f.reads = r.reads;
    result->follower_copies += r.copies;
    result->followers.push_back(std::move(f));
  }
  result->leader_copies = repl::copy_counts();
  result->copies_per_byte = repl::copies_per_byte(result->leader_copies, result->follower_copies);
  return Status::Ok();
}

ReplicatedRun::~ReplicatedRun() {
  if (leader_) leader_->stop();
  // Followers exit when the leader's connection closes; SIGKILL whoever is still there.
  for (pid_t pid : children_) {
    int status = 0;
    for (int i = 0; i < 200 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) ::usleep(10'000);
    if (::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
  if (remove_dir_ && !dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

}  // namespace shoal::bench

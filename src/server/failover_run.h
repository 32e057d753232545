// The measured part of a distributed benchmark run, watched: every shard's committed count is
// sampled every kSampleMs with a kill planned or the configuration manager known (a failover
// may be observed), kSampleMsQuiet otherwise, its conflict count and
// latency counts (kStats {"latency": true}: live_latency.h) with the first sample after every
// kLatencySampleMs (the per-second series the report prints and the JSON's "series"), from a
// baseline taken before the load starts (a cluster's servers count over every load they ran),
// and with kills planned (`bench --kill-leader-at T1,T2,... --kill-shard S1,S2,...`) a shard's
// leader process is SIGKILLed at each time. The replicas then agree on its replacement
// (through the configuration manager, replica_cli.h); the controller learns it from the same
// place, points its control client at the new leader and starts the load there for the time
// left. failover_ms is measured as the issue defines it: from the failed shard's last commit
// before the kill (the last sample whose count rose, so up to kSampleMs early) to the new
// leader's first commit (its own wall clock; this host).
//
// Kills run one after the other: a kill waits until the previous failover finished (its new
// leader committed) and, when it kills the same shard again, until the replica the previous
// kill restarted has rejoined as a follower (else the shard may lack the majority to elect
// another leader); its outcome says when it really happened. A kill still waiting when the run
// ends, or delayed into the run's last 2 s (no time left for a failover), says why in its
// error.
//
// A region kill (`--kill-leader-at T --kill-region NAME`, one time) SIGKILLs every process of
// region NAME at once: each shard's replica there, leader or follower. Each shard whose leader
// was among them fails over as above (a KillOutcome per shard, in shard order), all at once;
// once every one of them serves (at once when none led there), every killed replica is
// started again (the region comes back) so that the end-of-run checks cover it too.
//
// Threads: the calling thread only (ControlClient is single-threaded).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"
#include "src/cluster/config.h"
#include "src/server/control.h"
#include "src/server/dist_micro.h"
#include "src/server/live_latency.h"
#include "src/server/process.h"

namespace shoal::server {

inline constexpr uint64_t kSampleMs = 20;          // a failover may come
inline constexpr uint64_t kSampleMsQuiet = 250;    // none: the per-second series only
inline constexpr uint64_t kLatencySampleMs = 100;  // latency and conflicts: at most this often
inline constexpr uint64_t kDeposedExitTimeoutMs = 5000;

inline constexpr size_t kKillsMax = 16;  // kills one run may plan
// Failovers one run follows without having planned them, and how often it asks the
// configuration manager who leads.
inline constexpr size_t kObservedFailoversMax = 16;
inline constexpr uint64_t kWatchLeadersMs = 100;
// A leader a sample could not reach is left unsampled this long, or until etcd names another.
inline constexpr uint64_t kSuspectMs = 3000;

// One planned kill: shard `shard`'s leader, `at_seconds` into the run.
struct KillAt {
  double at_seconds = 0;
  uint32_t shard = 0;
};

// The kills of `--kill-leader-at T1,T2,... --kill-shard S1,S2,...`: one shard per time, or one
// shard for all (none: shard 0). InvalidArgument naming the flag: lists of unequal length,
// times not increasing or not > 0, a shard not below shard_count, more than kKillsMax.
[[nodiscard]] Result<std::vector<KillAt>> make_kill_schedule(const std::vector<double>& at_seconds,
                                                             const std::vector<uint32_t>& shards,
                                                             uint32_t shard_count);

// One replica a region kill stops: shard `shard`'s replica `replica` lives in the region.
struct RegionReplica {
  uint32_t shard = 0;
  uint32_t replica = 0;
};

// The replicas of region `region` in `config` (shard order; a shard without one there is left
// out). InvalidArgument naming --kill-region: an unknown region (the known ones listed), a
// region without replicas, or one holding half or more of some shard's replicas (the rest
// are no majority: that shard could not elect a successor).
[[nodiscard]] Result<std::vector<RegionReplica>> region_replicas(
    const cluster::ClusterConfig& config, std::string_view region);

// `--kill-region NAME` beside the other kill flags, before anything starts: exactly one
// --kill-leader-at time, no --kill-shard (every shard of the region is killed), no
// --hang-leader, and region_replicas(layout, region) ok. `layout`: the run's config (a
// local run's make_local_config layout).
[[nodiscard]] Status check_region_kill(const std::vector<double>& at_seconds, bool kill_shard_given,
                                       bool hang, const cluster::ClusterConfig& layout,
                                       std::string_view region);

struct KillPlan {
  std::vector<KillAt> kills;  // times increasing (make_kill_schedule); empty: no kill
  // Non-empty: the one kill (kills[0], its shard unused) is of every process of this region
  // (check_region_kill); hang is false.
  std::string region;
  // SIGSTOP instead of SIGKILL: the leader hangs with its connections open, so only its
  // followers' heartbeat timeout can tell (repl::FollowerOptions::leader_timeout_ms). Once its
  // successor serves it gets SIGCONT and must find itself deposed and exit
  // (kExitDeposed, DepositionWatch) within kDeposedExitTimeoutMs.
  bool hang = false;
  // Restarts the killed replica once its successor serves (it rejoins as a follower); null:
  // it stays down.
  std::function<Status(uint32_t shard, uint32_t replica)> restart;
};

// What happened to one planned kill.
struct KillOutcome {
  double planned_at_s = 0;
  uint32_t shard = 0;
  bool killed = false;
  double killed_at_s = -1;      // when it happened (after planned_at_s if it waited)
  uint64_t killed_unix_us = 0;  // the same on the wall clock (to match server records)
  uint32_t old_leader = 0, new_leader = 0;
  uint64_t new_epoch = 0;
  double failover_ms = -1;        // -1: no new leader committed before the run ended
  double kill_to_commit_ms = -1;  // the SIGKILL to the new leader's first commit (a lower bound)
  double leader_elected_ms = -1;  // kill to the configuration manager naming the new leader
  // The killed leader's commits as last sampled (its final statistics died with it).
  uint64_t killed_leader_committed = 0;
  bool restarted = false;  // the killed replica was started again (as a follower)
  // Not a kill of ours: a failover seen in the configuration manager (an operator's kill -9
  // of a `--cluster` run's leader, a crash); killed_at_s is the leader's last answer.
  bool observed = false;
  // A hang (KillPlan::hang): the old leader's exit status after SIGCONT (-1: it did not exit
  // in time and was killed) and how long after the SIGCONT it exited.
  bool hung = false;
  int deposed_exit_code = -1;
  double deposed_exit_ms = -1;
  // Why the kill was not made although due, or why its failover did not complete.
  std::string error;
};

// What happened to a region kill (the failovers it caused are WatchedRun::kills).
struct RegionKillOutcome {
  std::string region;
  double planned_at_s = 0;
  bool killed = false;
  double killed_at_s = -1;
  uint64_t killed_unix_us = 0;
  struct Process {
    uint32_t shard = 0, replica = 0;
    int pid = -1;
    bool leader = false;     // it led its shard when killed
    bool restarted = false;  // started again (as a follower)
  };
  std::vector<Process> processes;  // every process SIGKILLed, shard order
  // When every killed replica was started again (the run's clock; -1: not, see error).
  double restarted_at_s = -1;
  std::string error;  // why the kill or the restarts were not (all) made
};

struct WatchedRun {
  std::vector<uint64_t> committed_per_second;  // all shards, by second of the run
  std::vector<uint64_t> aborts_per_second;     // conflict aborts, the same way
  // The same seconds' latency percentiles over every shard (live_latency.h). A shard whose
  // samples are malformed (or of a server without them) counts in committed_per_second only.
  std::vector<LatencySecond> latency;
  uint32_t latency_malformed_shards = 0;  // shards whose latency was unreadable at least once
  // One per planned kill, in order; a region kill: one per shard whose leader it killed.
  std::vector<KillOutcome> kills;
  // Failovers nobody planned, seen in the configuration manager and followed as kills are
  // (at most kObservedFailoversMax), in the order seen.
  std::vector<KillOutcome> observed;
  bool has_region_kill = false;  // a region kill was planned: region_kill says what it did
  RegionKillOutcome region_kill;
  double measured_s = 0;     // from the start to the run's end (or the stop)
  bool interrupted = false;  // `stop` ended the run early (kStop sent)

  // Over every kill: the killed leaders' commits as last sampled.
  uint64_t killed_leaders_committed() const;
};

// True when every follower of `shard` is connected to its leader (the one `client` calls),
// has reported its replay and replays within kRejoinedLagMs of its watermark (kPing); false
// when not or when the leader does not answer. Connected is not enough: a restarted replica
// connects before it has caught up, and one elected then (the next kill) took over with
// seconds of log to learn (a test's takeover timed out, leaving the shard without a leader).
inline constexpr double kRejoinedLagMs = 500;
[[nodiscard]] bool followers_rejoined(ControlClient& client, const cluster::ClusterConfig& config,
                                      uint32_t shard);

// Starts the load on every shard (params) and watches it to its end (see above). `etcd`:
// the configuration manager's endpoints (required with a kill). With them, a failover nobody
// planned (a leader killed by hand under `bench --cluster`) is followed too: every
// kWatchLeadersMs the run asks who leads, and a shard whose leader changed while no kill of
// ours was under way gets the same treatment as a kill (the load restarted at its new leader
// for the time left; failover_ms from the old leader's last rise), reported in
// WatchedRun::observed; its old leader is not restarted. Errors: a shard that cannot be
// started, or a kill without a process to kill or a manager to ask (a kill that must wait past
// the run's end is no error: its KillOutcome says why).
// `stop` (Ctrl-C, may be null): ends the run early: every shard's leader is told kStop (its
// clients finish what they hold and stop) and the watch ends; kills not yet made are not made.
[[nodiscard]] Status run_watched(ControlClient& client, const cluster::ClusterConfig& config,
                                 const std::vector<ServerProcess>& procs,
                                 const std::vector<std::string>& etcd, const MicroParams& params,
                                 const KillPlan& kill, const std::atomic<bool>* stop,
                                 WatchedRun* out);

}  // namespace shoal::server

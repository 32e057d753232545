// The measured part of a distributed benchmark run, watched: every shard's committed count is
// sampled every kSampleMs with a kill planned, kSampleMsQuiet without (the per-second series
// the report prints), and with a kill planned
// (`bench --kill-leader-at T`) one shard's leader process is SIGKILLed T seconds in. The
// replicas then agree on its replacement (through the configuration manager, replica_cli.h);
// the controller learns it from the same place, points its control client at the new leader
// and starts the load there for the time left. failover_ms is measured as the issue defines
// it: from the failed shard's last commit before the kill (the last sample whose count rose,
// so up to kSampleMs early) to the new leader's first commit (its own wall clock; this host).
//
// Threads: the calling thread only (ControlClient is single-threaded).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/cluster/config.h"
#include "src/server/control.h"
#include "src/server/dist_micro.h"
#include "src/server/process.h"

namespace shoal::server {

inline constexpr uint64_t kSampleMs = 20;        // with a kill planned
inline constexpr uint64_t kSampleMsQuiet = 250;  // without: the per-second series only
inline constexpr uint64_t kDeposedExitTimeoutMs = 5000;

struct KillPlan {
  double at_seconds = 0;  // 0: no kill
  uint32_t shard = 0;
  // SIGSTOP instead of SIGKILL: the leader hangs with its connections open, so only its
  // followers' heartbeat timeout can tell (repl::FollowerOptions::leader_timeout_ms). Once its
  // successor serves it gets SIGCONT and must find itself deposed and exit
  // (kExitDeposed, DepositionWatch) within kDeposedExitTimeoutMs.
  bool hang = false;
  // Restarts the killed replica once its successor serves (it rejoins as a follower); null:
  // it stays down.
  std::function<Status(uint32_t shard, uint32_t replica)> restart;
};

struct WatchedRun {
  std::vector<uint64_t> committed_per_second;  // all shards, by second of the run
  // The kill, when planned: what happened to it.
  bool killed = false;
  uint32_t shard = 0;
  uint32_t old_leader = 0, new_leader = 0;
  uint64_t new_epoch = 0;
  double failover_ms = -1;        // -1: no new leader committed before the run ended
  double kill_to_commit_ms = -1;  // the SIGKILL to the new leader's first commit (a lower bound)
  double leader_elected_ms = -1;  // kill to the configuration manager naming the new leader
  // The killed leader's commits as last sampled (its final statistics died with it).
  uint64_t killed_leader_committed = 0;
  bool restarted = false;  // the killed replica was started again (as a follower)
  // A hang (KillPlan::hang): the old leader's exit status after SIGCONT (-1: it did not exit
  // in time and was killed) and how long after the SIGCONT it exited.
  bool hung = false;
  int deposed_exit_code = -1;
  double deposed_exit_ms = -1;
  std::string error;       // why the failover did not complete, if it did not
};

// Starts the load on every shard (params) and watches it to its end (see above). `etcd`:
// the configuration manager's endpoints (required with a kill). Errors: a shard that cannot be
// started, or a kill without a process to kill or a manager to ask.
// `stop` (Ctrl-C, may be null): the shard servers cannot end a run early yet (no control
// method for it), so a stop is acknowledged once with the time left and the run goes on.
[[nodiscard]] Status run_watched(ControlClient& client, const cluster::ClusterConfig& config,
                                 const std::vector<ServerProcess>& procs,
                                 const std::vector<std::string>& etcd, const MicroParams& params,
                                 const KillPlan& kill, const std::atomic<bool>* stop,
                                 WatchedRun* out);

}  // namespace shoal::server

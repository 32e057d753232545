// The replication side of `shoal bench ... --replicas R` (bench/runner.cc): a
// ReplicationLeader in this process (one stream per worker), R-1 follower processes started
// as children (`shoal replica --config <dir>/cluster.toml --shard 0 --replica r`, killed if we
// die), the initial state shipped through the log, and at the end digests and checks from
// every follower.
//
// Bootstrap and close: src/repl/bootstrap.h (shared with the shard servers). The run starts
// once every follower has installed the initial state, so bootstrap replay does not overlap
// the measurement.
//
// Threads: the runner's main thread, except leader() which workers use.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/runner.h"
#include "src/repl/leader.h"
#include "src/workload/workload.h"

namespace shoal::bench {

class ReplicatedRun {
 public:
  [[nodiscard]] static Result<std::unique_ptr<ReplicatedRun>> start(workload::Workload& workload,
                                                                    txn::Engine& engine,
                                                                    const RunOptions& options,
                                                                    ReplicationResult* result);
  ~ReplicatedRun();  // stops the leader, reaps the followers, removes a temporary directory
  repl::ReplicationLeader& leader() { return *leader_; }
  // The follower processes (children of this one).
  const std::vector<pid_t>& children() const { return children_; }
  // After the workers stopped: closes every stream with a floor above every committed TID;
  // returns that TID (the watermark the run must reach).
  uint64_t close_streams();
  // Waits for every follower to apply everything, then compares digests and collects checks.
  [[nodiscard]] Status finish(txn::Engine& engine, bool check, ReplicationResult* result);

 private:
  ReplicatedRun() = default;
  [[nodiscard]] Status spawn_followers(const RunOptions& options);
  [[nodiscard]] Status bootstrap(txn::Engine& engine, ReplicationResult* result);
  std::string follower_logs() const;
  // Unavailable naming the first follower process that exited (it stays unreaped); Ok while
  // every one runs.
  [[nodiscard]] Status followers_alive() const;
  // How often start-up waits look for a follower process that exited.
  static constexpr uint64_t kFollowerCheckMs = 50;

  std::unique_ptr<repl::ReplicationLeader> leader_;
  std::vector<pid_t> children_;
  std::string dir_;
  bool remove_dir_ = false;
  uint32_t replicas_ = 0;
  uint64_t snapshot_tid_ = 0;
  uint64_t final_tid_ = 0;
  // The streams' appender counts once the bootstrap was installed: finish() reports the run's
  // own (the bootstrap's records, bytes and buffer waits left out).
  repl::AppenderStats logged_at_bootstrap_;
};

}  // namespace shoal::bench

// DepositionWatch: a leader's check that the configuration manager still names it (design
// section 5, fencing).
//
// A leader that hung (SIGSTOP, a long stall) or was cut off while its followers suspected it
// (repl::FollowerOptions::leader_timeout_ms) has been replaced: etcd names another replica for
// its shard in a later epoch. Its followers already follow the successor, whose streams run at
// a higher ballot, so nothing it logs from then on can be chosen and nothing it commits is
// acknowledged; but it would go on executing transactions and answering its clients'
// connections as if it led. The watch reads the shard's entry every poll_ms and, once
// another replica leads it, calls on_deposed once (the server prints why and exits at once,
// as a crash would: it restarts as a follower of the new leader).
//
// The same look tells the server when another shard's leader changed (a failover there): with
// DepositionWatchOptions::leaders set, on_leader_change(shard, replica, epoch) is called once
// per change, in the order seen, so that the server's workers redial that shard's new leader
// and carry the new epoch (shard_server.h, "Failover of another shard").
//
// etcd unreachable: the watch keeps polling and says so once (a leader cut off from etcd and
// from its followers cannot be told, and cannot acknowledge anything either).
//
// Threads: one thread of its own, started by start() and joined by the destructor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/status.h"
#include "src/cluster/config_manager.h"

namespace shoal::server {

struct DepositionWatchOptions {
  std::string cluster;  // the cluster's name in the config
  uint32_t shard = 0;
  uint32_t replica = 0;  // this process
  uint64_t epoch = 0;    // the epoch it leads in
  uint64_t poll_ms = 100;
  // Per shard, the leader replica the server dialed; empty: other shards are not watched.
  std::vector<uint32_t> leaders;
};

// Who replaced us: the epoch and the replica the configuration manager names now.
using DeposedFn = std::function<void(uint64_t epoch, uint32_t leader_replica)>;
// Another shard is led by another replica since `epoch` (the epoch its new leader took over in).
using LeaderChangeFn = std::function<void(uint32_t shard, uint32_t leader_replica, uint64_t epoch)>;

class DepositionWatch {
 public:
  // REQUIRES: manager outlives this; poll_ms > 0.
  DepositionWatch(cluster::ConfigManager& manager, const DepositionWatchOptions& options,
                  DeposedFn on_deposed, LeaderChangeFn on_leader_change = nullptr);
  ~DepositionWatch();  // stops and joins the thread
  DepositionWatch(const DepositionWatch&) = delete;
  DepositionWatch& operator=(const DepositionWatch&) = delete;

  void start();
  // One look (the thread's step; tests call it directly): true when deposed.
  [[nodiscard]] bool check_once();

 private:
  void thread_main();

  cluster::ConfigManager& manager_;
  const DepositionWatchOptions options_;
  DeposedFn on_deposed_;
  LeaderChangeFn on_leader_change_;
  std::vector<uint32_t> leaders_;  // the watch thread: the other shards' leaders as last told
  bool unreachable_said_ = false;  // the watch thread
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace shoal::server

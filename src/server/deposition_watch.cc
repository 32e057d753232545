#include "src/server/deposition_watch.h"

#include <cstdio>

#include "src/base/assert.h"
#include "src/cluster/cluster_state.h"

namespace shoal::server {

DepositionWatch::DepositionWatch(cluster::ConfigManager& manager,
                                 const DepositionWatchOptions& options, DeposedFn on_deposed,
                                 LeaderChangeFn on_leader_change)
    : manager_(manager),
      options_(options),
      on_deposed_(std::move(on_deposed)),
      on_leader_change_(std::move(on_leader_change)),
      leaders_(options.leaders) {
  SHOAL_ASSERT(options_.poll_ms > 0, "%s", "DepositionWatch: poll_ms > 0");
}

DepositionWatch::~DepositionWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DepositionWatch::start() {
  thread_ = std::thread([this] { thread_main(); });
}

bool DepositionWatch::check_once() {
  cluster::ClusterStateStore store(manager_, options_.cluster);
  auto state = store.load_state();
  if (!state.ok()) {
    if (!unreachable_said_) {
      unreachable_said_ = true;
      std::fprintf(stderr,
                   "shoal server: shard %u replica %u: cannot read the cluster state (%s); "
                   "still leading, still asking\n",
                   options_.shard, options_.replica, state.status().to_string().c_str());
    }
    return false;
  }
  unreachable_said_ = false;
  if (options_.shard >= state->shards.size()) return false;  // not ours to judge
  // Other shards first: a server deposed right after exits anyway.
  for (uint32_t sh = 0; sh < state->shards.size() && sh < leaders_.size(); ++sh) {
    const uint32_t now = state->shards[sh].leader_replica;
    if (sh == options_.shard || now == leaders_[sh]) continue;
    leaders_[sh] = now;
    if (on_leader_change_) on_leader_change_(sh, now, state->shards[sh].since_epoch);
  }
  const cluster::ShardState& s = state->shards[options_.shard];
  if (s.leader_replica == options_.replica) return false;
  on_deposed_(state->epoch, s.leader_replica);
  return true;
}

void DepositionWatch::thread_main() {
  // Bounded: one look per poll_ms until stopped or deposed.
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_ms), [&] { return stop_; });
      if (stop_) return;
    }
    if (check_once()) return;
  }
}

}  // namespace shoal::server

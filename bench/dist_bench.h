// `shoal bench micro|tpcc|bank --shards N | --cluster F`: the controller of the benchmarks
// across shard processes (bench/dist_controller.cc), a driver over the shard servers; the flow
// (start, collect, check, report) is described in src/server/cluster_ctl.h beside the options.
//
// Threads: the calling (main) thread; it forks shard servers but starts no threads.
#pragma once

#include "shoal/status.h"
#include "src/server/cluster_ctl.h"

namespace shoal::server {

// Exit-code-shaped outcome: Ok; Unavailable (a shard went away or transactions failed: the
// report says which); Corruption (consistency check failed on a leader or a follower, or a
// follower's digest differs from its leader's); other errors from setup. Replicated shards
// (local --replicas or a config with replicas > 1) are quiesced after the run and every
// replica's digest and check reported (repl_ctl.h).
[[nodiscard]] Status run_dist_bench(const DistBenchOptions& options);

}  // namespace shoal::server

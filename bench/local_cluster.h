// A local cluster owned by one benchmark run (`shoal bench micro|tpcc|bank|kv --shards N`):
// its servers started on free loopback ports in a temporary directory, as children that die
// with this process (PR_SET_PDEATHSIG), stopped and the directory removed by destruction, on
// every exit path. dist_controller.cc defines it; bench_kv.cc starts its clusters with it too.
//
// Threads: the calling thread only (it forks; see process.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/base/cpu_placement.h"
#include "src/cluster/config.h"
#include "src/cluster/etcd_process.h"
#include "src/server/cluster_ctl.h"
#include "src/server/process.h"

namespace shoal::server {

struct LocalCluster {
  std::string dir;
  cluster::ClusterConfig config;
  std::vector<ServerProcess> procs;
  std::unique_ptr<cluster::EtcdProcess> etcd;  // replicated: the configuration manager
  std::vector<std::string> etcd_endpoints;
  SpawnOptions spawn;  // how procs were started (a killed replica restarts the same way)
  CpuPlacement placement;
  bool keep_dir = false;  // keep the logs (the replicas' WAL directories are removed anyway)
  LocalCluster() = default;
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;
  ~LocalCluster();
};

// Writes the config of o.shards x o.replicas on free loopback ports (with client ports when
// o.client_ports) into a fresh directory and spawns its servers and followers (and, when
// replicated, an etcd as the configuration manager). Does not wait for them: wait_ready.
[[nodiscard]] Status start_local(const DistBenchOptions& o, LocalCluster* lc);

}  // namespace shoal::server

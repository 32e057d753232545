// How every process of a cluster (shard servers, followers, `cluster` commands, the bench
// against a running cluster) loads its config: parse and validate it, and, when it names a
// secret_file, make that secret the process's (src/net/auth.h), so that each TCP connection
// it opens or accepts proves it.
// Threads: call it at start-up, before other threads dial or accept.
#pragma once

#include <string>

#include "shoal/status.h"
#include "src/cluster/config.h"

namespace shoal::server {

[[nodiscard]] Result<cluster::ClusterConfig> load_cluster_config(const std::string& path);

}  // namespace shoal::server

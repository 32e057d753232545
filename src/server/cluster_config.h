// How every process of a cluster (shard servers, followers, `cluster` commands, the bench
// against a running cluster) loads its config: parse and validate it, and, when it names a
// secret_file, make that secret the process's (src/net/auth.h), so that each TCP connection
// it opens or accepts proves it. Also what the config's transport means for the replication
// links (replication_link, fabric_options): one mapping for servers and followers.
// Threads: call load_cluster_config at start-up, before other threads dial or accept; the
// mappings are pure functions.
#pragma once

#include <string>

#include "shoal/status.h"
#include "src/cluster/config.h"
#include "src/net/fabric_transport.h"
#include "src/repl/peer_link.h"

namespace shoal::server {

[[nodiscard]] Result<cluster::ClusterConfig> load_cluster_config(const std::string& path);

// How a replicated shard's followers reach its leader under this config's transport (the
// config's transport is the host's: shm and fabric mean every replica runs here).
repl::LinkKind replication_link(const cluster::ClusterConfig& config);
// The fabric transport's options under this config (its fabric_provider, if any).
net::FabricOptions fabric_options(const cluster::ClusterConfig& config);

}  // namespace shoal::server

#include "src/server/cluster_config.h"

#include "src/net/auth.h"

namespace shoal::server {

Result<cluster::ClusterConfig> load_cluster_config(const std::string& path) {
  auto config = cluster::load_config_file(path);
  if (!config.ok()) return config;
  if (!config->secret_file.empty()) {
    auto secret = cluster::read_password_file(config->secret_file, "cluster.secret_file");
    if (!secret.ok()) return secret.status();
    net::set_cluster_secret(std::move(*secret));
  }
  return config;
}

repl::LinkKind replication_link(const cluster::ClusterConfig& config) {
  switch (config.transport) {
    case cluster::TransportKind::kTcp:
      return repl::LinkKind::kTcp;
    case cluster::TransportKind::kShm:
      return repl::LinkKind::kShm;
    case cluster::TransportKind::kFabric:
      return repl::LinkKind::kFabric;
  }
  return repl::LinkKind::kTcp;
}

net::FabricOptions fabric_options(const cluster::ClusterConfig& config) {
  net::FabricOptions o;
  o.provider = config.fabric_provider;  // empty: SHOAL_FABRIC_PROVIDER, else the default
  return o;
}

}  // namespace shoal::server

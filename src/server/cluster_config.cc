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

}  // namespace shoal::server

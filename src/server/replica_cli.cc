#include "src/server/replica_cli.h"

#include <filesystem>

#include <fmt/format.h>

#include "bench/tpcc/tpcc.h"
#include "src/cluster/config.h"
#include "src/repl/follower.h"
#include "src/repl/leader.h"

namespace shoal::server {

Status run_replica(const ReplicaOptions& options) {
  auto config = cluster::load_config_file(options.config_path);
  if (!config.ok()) return config.status();
  if (options.shard >= config->shards.size()) {
    return Status::InvalidArgument(
        fmt::format("--shard {}: the config has {} shards", options.shard, config->shards.size()));
  }
  const cluster::Shard& shard = config->shards[options.shard];
  if (options.replica == 0 || options.replica >= shard.replicas.size()) {
    return Status::InvalidArgument(
        fmt::format("--replica {}: shard {} has replicas 1..{} besides its leader (0)",
                    options.replica, options.shard, shard.replicas.size() - 1));
  }
  if (options.fsync != "none" && options.fsync != "batch" && options.fsync != "always") {
    return Status::InvalidArgument("--fsync must be none, batch or always, not " + options.fsync);
  }
  const cluster::Replica& leader = shard.replicas[0];
  const cluster::Replica& me = shard.replicas[options.replica];
  const double one_way_ms = config->one_way_ms(leader.region, me.region);
  const auto one_way_ns = static_cast<uint64_t>(one_way_ms * 1e6);

  repl::FollowerOptions fo;
  fo.shard = options.shard;
  fo.replica = options.replica;
  fo.replicas = static_cast<uint32_t>(shard.replicas.size());
  fo.leader_host = leader.host;
  fo.leader_port = leader.port;
  fo.receive_shape = {one_way_ns, 0};
  fo.data_dir = options.data_dir.empty() ? fmt::format(".shoal/{}/shard-{}-replica-{}",
                                                       config->name, options.shard, options.replica)
                                         : options.data_dir;
  std::error_code ec;
  std::filesystem::create_directories(fo.data_dir, ec);
  if (ec) return Status::IOError("cannot create " + fo.data_dir + ": " + ec.message());
  fo.fsync = options.fsync == "none"     ? repl::FsyncPolicy::kNone
             : options.fsync == "always" ? repl::FsyncPolicy::kAlways
                                         : repl::FsyncPolicy::kBatch;
  fo.paxos = repl::paxos_options_for_rtt(2 * one_way_ns);
  fo.paxos.max_message_bytes =
      repl::replication_message_bytes(fo.paxos, repl::BatchLimits{}.batch_bytes_max);
  fo.check = [](txn::Engine& engine, const std::string& workload) -> std::vector<std::string> {
    if (workload == "tpcc") return bench::check_tpcc_conditions(engine, /*after_load=*/false);
    return {};  // other workloads have no conditions over a bare engine; digests cover them
  };
  fo.replay_nice = options.replay_nice;
  auto follower = repl::Follower::open(fo);
  if (!follower.ok()) return follower.status();
  std::fprintf(stderr, "replica %u of shard %u: following %s:%u from %s (one-way %.1f ms)\n",
               options.replica, options.shard, leader.host.c_str(), leader.port, me.region.c_str(),
               one_way_ms);
  const Status s = (*follower)->run();
  std::fprintf(stderr, "replica %u: leader gone (%s); applied up to TID %lu\n", options.replica,
               s.to_string().c_str(), (*follower)->applied_tid());
  return s;
}

}  // namespace shoal::server

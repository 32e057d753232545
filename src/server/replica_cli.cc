#include "src/server/replica_cli.h"

#include <filesystem>

#include <fmt/format.h>

#include "bench/tpcc/tpcc.h"
#include "bench/tpcc/tpcc_follower_reads.h"
#include "src/base/cpu_placement.h"
#include "src/cluster/config.h"
#include "src/repl/bootstrap.h"
#include "src/repl/follower.h"
#include "src/repl/leader.h"
#include "src/server/payments_json.h"

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
  auto fsync = repl::parse_fsync(options.fsync, "--fsync");
  if (!fsync.ok()) return fsync.status();
  if (!options.cpus.empty()) {
    auto cpus = parse_cpu_list(options.cpus, "--cpus");
    if (!cpus.ok()) return cpus.status();
    SHOAL_TRY(confine_threads(0, *cpus));  // before any thread starts: they all inherit it
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
  fo.leader_port = cluster::replication_port(leader);
  fo.receive_shape = {one_way_ns, 0};
  // The config's transport is the host's: shm means every replica runs here.
  fo.link = config->transport == cluster::TransportKind::kShm ? repl::LinkKind::kShm
                                                              : repl::LinkKind::kTcp;
  fo.data_dir = options.data_dir.empty()
                    ? cluster::replica_dir(".shoal/" + config->name, options.shard, options.replica)
                    : options.data_dir;
  std::error_code ec;
  std::filesystem::create_directories(fo.data_dir, ec);
  if (ec) return Status::IOError("cannot create " + fo.data_dir + ": " + ec.message());
  fo.fsync = *fsync;
  fo.paxos = repl::paxos_options_for_rtt(2 * one_way_ns);
  fo.paxos.max_message_bytes =
      repl::replication_message_bytes(fo.paxos, repl::BatchLimits{}.batch_bytes_max);
  // TPC-C across shards: the leader passes the payments other shards hold for this shard's
  // customers (the cluster-wide check, as on the shard servers: dist_tpcc.h).
  fo.check = [](txn::Engine& engine, const std::string& workload,
                const nlohmann::json& args) -> std::vector<std::string> {
    if (workload != "tpcc") return {};  // no conditions over a bare engine; digests cover it
    bench::ForeignPayments foreign;
    const Status parsed = payments_from_json(
        args.is_object() ? args.value("payments", nlohmann::json()) : nlohmann::json(),
        "check_args.payments", &foreign);
    if (!parsed.ok()) return {parsed.to_string()};
    return bench::check_tpcc_conditions(engine, /*after_load=*/false, &foreign);
  };
  fo.replay_nice = options.replay_nice;
  fo.checkpoint_interval_ms = options.checkpoint_interval_ms;
  fo.serve_reads = options.serve_reads;
  fo.unsafe_snapshot_read_newest = options.unsafe_snapshot_read_newest;
  fo.read_rounds = [](txn::Engine& engine,
                      const std::string& workload) -> Result<repl::ReadRoundFn> {
    if (workload != "tpcc") {
      return Status::NotSupported("--serve-reads: workload " + workload +
                                  " has no read-only transactions (tpcc has)");
    }
    bench::tpcc::Tables tables;
    if (!bench::tpcc::find_tables(engine, &tables)) {
      return Status::Corruption("--serve-reads: the follower's engine lacks TPC-C tables");
    }
    return repl::ReadRoundFn(
        [tables](txn::SnapshotReader& reader, Rng& rng, txn::ReadRoundResult* out) {
          return bench::tpcc::snapshot_read_round(reader, tables, rng, out);
        });
  };
  fo.connect_timeout_ms = options.connect_timeout_ms;
  auto follower = repl::Follower::open(fo);
  if (!follower.ok()) return follower.status();
  std::fprintf(stderr, "replica %u of shard %u: following %s:%u from %s (one-way %.1f ms)\n",
               options.replica, options.shard, leader.host.c_str(), fo.leader_port,
               me.region.c_str(), one_way_ms);
  const Status s = (*follower)->run();
  std::fprintf(stderr, "replica %u: leader gone (%s); applied up to TID %lu\n", options.replica,
               s.to_string().c_str(), (*follower)->applied_tid());
  return s;
}

}  // namespace shoal::server

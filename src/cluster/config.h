// Cluster configuration: which shards exist, which workload partition keys each owns, where
// their replicas run (region, address), the transport, and the WAN delays between regions.
//
// Loaded once at start-up from a TOML file (docs/OPERATIONS.md, "The config") and then read-only,
// so any thread may read it. Every check that can fail on user input returns InvalidArgument naming
// the field ("shard[1].replica[0].region: unknown region 'eu'"); a ClusterConfig that exists
// has passed validate().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"

namespace shoal::cluster {

// What shard servers (2PC between them) and replication (leader <-> followers) run over:
// tcp; shm (one host); or fabric (libfabric RMA, net/fabric_transport.h; one host until a real
// RDMA provider: the rendezvous is an abstract unix socket and the software provider binds
// 127.0.0.1). Control connections (the bench's controller, `cluster` commands) are tcp
// whatever this says. uring is refused (see parse_config: its blocked send stops receiving).
enum class TransportKind : uint8_t { kTcp, kShm, kFabric };
std::string_view transport_name(TransportKind kind);
// The kind a name (transport_name's) stands for: the bench flags' --transport tcp|shm|fabric.
// InvalidArgument naming the choices otherwise.
[[nodiscard]] Result<TransportKind> transport_kind(std::string_view name);

struct Region {
  std::string name;
};

// One-way delay between two regions (applied in both directions) by the WAN shaper.
struct WanLink {
  std::string from;
  std::string to;
  double one_way_ms = 0;
  double jitter_ms = 0;
};

struct Replica {
  std::string region;
  std::string host;
  uint16_t port = 0;
  // Where its process serves GET /metrics (Prometheus text, docs/OPERATIONS.md "Metrics"), on
  // `host` too; 0: no metrics endpoint. validate() keeps it apart from every other address.
  uint16_t metrics_port = 0;
  // Where its process serves the Redis protocol (docs/RESP.md), on `host` too; 0: none.
  // validate() keeps it apart from every other address, as metrics_port.
  uint16_t resp_port = 0;
  // Where its process serves the Shoal client protocol (docs/CLIENT.md), on `host` too; 0:
  // none. validate() keeps it apart from every other address, as resp_port.
  uint16_t client_port = 0;
};

// Where a shard's leader listens for its followers (src/repl/leader.h) when the shard has
// replicas: the port after its own. validate() keeps that port free of other addresses.
inline uint16_t replication_port(const Replica& leader) {
  return static_cast<uint16_t>(leader.port + 1);
}

// Where replica `replica` of shard `shard` keeps its files under `root`: its WAL directory is
// this path, its log and pid files this path plus ".log" / ".pid". One name for the servers,
// the followers and `cluster up`, which clears these directories.
std::string replica_dir(std::string_view root, uint32_t shard, uint32_t replica);

// A shard owns the workload partition keys [partition_lo, partition_hi) (TPC-C: warehouse
// ids). Replica 0 is the leader at start.
struct Shard {
  uint32_t id = 0;
  uint64_t partition_lo = 0;
  uint64_t partition_hi = 0;
  std::vector<Replica> replicas;
};

// Replication batching bounds ([cluster] batch_txns, batch_us; the same as the one-shard
// bench's --batch-txns/--batch-us): a log entry holds at most 65535 transactions, and a
// batch waits at most 10 s for more.
inline constexpr uint32_t kBatchTxnsMax = 65'535;
inline constexpr double kBatchUsMax = 1e7;
inline constexpr uint64_t kReplayLagMsMax = 600'000;
// Several of the leader's heartbeats (every 10 ms, repl::paxos_options_for_rtt) at least.
inline constexpr uint64_t kLeaderTimeoutMsMin = 30;
inline constexpr uint64_t kLeaderTimeoutMsMax = 600'000;
// make_local_config's: a whole replicated cluster on one shared machine (the bench's local
// runs, tests). A leader's replication thread is single and its sends block while a follower
// catching up from the WAL drains them; on two loaded cores that silenced it for more than
// 100 ms, and the other follower deposed a healthy leader (a CI run under other builds saw
// 500 ms exceeded too).
inline constexpr uint64_t kLocalLeaderTimeoutMs = 1000;

// The Redis-protocol key space is range-partitioned across shards by split keys ([cluster]
// kv_split_keys): shard 0 owns keys below split[0], shard i keys in [split[i-1], split[i]),
// the last shard the rest. Each split key is 1 to 8192 bytes; they are strictly ascending
// (unsigned byte order) and number shards - 1.
inline constexpr size_t kKvSplitKeyBytesMax = 8192;
// [cluster] etcd: at most this many members named (etcd clusters are 3, 5 or 7).
inline constexpr size_t kEtcdEndpointsMax = 7;
// The split keys a config without kv_split_keys gets: lower-case letters cutting 'a'..'z'
// into equal parts ("n" for two shards), so keys written by hand spread over the shards.
std::vector<std::string> default_kv_split_keys(uint32_t shards);

struct ClusterConfig {
  std::string name = "shoal";
  TransportKind transport = TransportKind::kTcp;
  // transport fabric: the libfabric provider ([cluster] fabric_provider, e.g. "net",
  // "tcp;ofi_rxm"); empty: the environment's SHOAL_FABRIC_PROVIDER, else the net module's
  // default (kDefaultFabricProvider, "net"). At most 31 bytes (it travels in the hello).
  std::string fabric_provider;
  uint32_t workers_per_shard = 1;
  uint32_t replicas_per_shard = 1;
  // Replicated shards: a worker's stream seals its log entry after batch_txns transactions
  // (Mako's 400 for TPC-C) or once its first transaction is batch_us old, whichever comes
  // first. Each in [1, kBatchTxnsMax] and (0, kBatchUsMax]; `shoal server` flags override.
  uint32_t batch_txns = 400;
  double batch_us = 4000;
  // The ratekeeper's bound ([cluster] replay_lag_ms, repl::LeaderOptions::
  // follower_replay_lag_ms_max): a leader stops proposing while a follower's replay trails
  // its watermark by more than this, which bounds the backlog a promoted follower installs
  // before it serves. In [0, kReplayLagMsMax]; 0: unbounded.
  uint64_t replay_lag_ms = 100;
  // Failure detection ([cluster] leader_timeout_ms): a follower suspects its leader after
  // this long without a message from it (plus the round trip between their regions), and
  // the configuration manager then names a successor. Mako uses 35 ms inside a data center.
  // In [kLeaderTimeoutMsMin, kLeaderTimeoutMsMax].
  uint64_t leader_timeout_ms = 100;
  // The configuration manager ([cluster] etcd = ["host:port", ...]): an etcd cluster that
  // exists already (in a geo deployment, three members in three regions), reached through its
  // JSON gateway; `cluster up` then starts none and `down` leaves it alone. Empty: `cluster up`
  // runs one of its own in the run directory (three replicas or more). At most
  // kEtcdEndpointsMax, each host:port with a port in [1, 65535].
  std::vector<std::string> etcd;
  std::vector<Region> regions;
  std::vector<WanLink> wan;
  std::vector<Shard> shards;
  // shards - 1 split keys (see kKvSplitKeyBytesMax); a parsed config without them gets
  // default_kv_split_keys().
  std::vector<std::string> kv_split_keys;
  // The Redis port's password (Redis's requirepass; [cluster] resp_password_file): a file
  // holding it on its first line; empty: no password. A relative path is taken from the config
  // file's directory (load_config_file). read_password_file() reads it.
  std::string resp_password_file;
  // The cluster secret ([cluster] secret_file, net/auth.h): a file holding it on its first
  // line, which every process of the cluster reads; each TCP connection between them proves
  // it. Empty: no authentication. Relative paths as resp_password_file's.
  std::string secret_file;

  // The shard owning a Redis-protocol key (kv_split_keys).
  uint32_t shard_for_kv_key(std::string_view key) const;
  // The shard owning a partition key; nullptr if none does.
  const Shard* shard_for_partition(uint64_t key) const;
  const Region* find_region(std::string_view name) const;
  // One-way delay in ms between two regions (0 within a region or when not configured).
  double one_way_ms(std::string_view a, std::string_view b) const;

  // Checks every cross-field rule; the first violation, naming its field.
  [[nodiscard]] Status validate() const;
  // TOML text that parse() reads back to an equal config.
  std::string to_toml() const;
};

// Parses TOML text (`origin` names it in messages, e.g. the file path) and validates it.
[[nodiscard]] Result<ClusterConfig> parse_config(std::string_view toml_text,
                                                 std::string_view origin = "config");
[[nodiscard]] Result<ClusterConfig> load_config_file(const std::string& path);

// A password or secret kept in a file: its first line, without the line end. InvalidArgument
// naming `field` when the file cannot be read, the line is empty, or longer than
// kPasswordBytesMax.
inline constexpr size_t kPasswordBytesMax = 4096;
[[nodiscard]] Result<std::string> read_password_file(const std::string& path,
                                                     std::string_view field);

// A local cluster on 127.0.0.1: `shards` shards, each with `replicas` replicas in as many
// regions (region-0 holds every leader), partition keys 1..partitions split evenly, ports
// from base_port up (two per replica when replicas > 1: its own and replication_port()),
// default_kv_split_keys(shards); no metrics or RESP ports.
[[nodiscard]] Result<ClusterConfig> make_local_config(uint32_t shards, uint32_t replicas,
                                                      uint32_t workers, uint64_t partitions,
                                                      uint16_t base_port);

}  // namespace shoal::cluster

// `shoal server`: one process per shard: its leader replica. Followers are `shoal replica`
// processes (replica_cli.h).
//
// Start-up, in order: load and validate the config; build the Engine and load this shard's
// data (the micro table, KeyLayout in dist_micro.h, the bank's accounts, dist_bank.h, or its TPC-C
// warehouses, dist_tpcc.h); listen on the shard's configured address; from each
// worker, dial every other shard (refused connections are retried until connect_timeout_ms,
// so shards may start in any order: a dial completes in the peer's listen backlog before it
// accepts); then start the worker threads and accept connections. A shard answers kPing only
// once all of this is done, which is what "ready" means to `shoal cluster up`.
//
// Per worker thread: one EventLoop running everything of that worker: its Participant and
// ParticipantService (serving remote coordinators over every connection it was handed), its
// Coordinator with one RpcLink per other shard (over connections it dialed itself) and a
// LocalLink to its own participant, the control handlers, and, after kStart, the load:
// `inflight` coroutine transactions. No helper thread does transaction work; the main thread
// only accepts connections (hands each to a worker, round robin) and watches for SIGTERM/INT.
// Idle loops block in ppoll on their sockets (TcpEndpoint is a BlockableEndpoint).
//
// Replication (when the config gives the shard more than one replica; docs/REPLICATION.md):
// the process owns one repl::ReplicationLeader listening on cluster::replication_port() of
// replica 0, one stream per worker. Each worker installs its stream's commit hook on both
// places its engine commits: the TPC-C terminals' txn::Worker and its 2PC Participant (the
// installs of every coordinator's transactions, remote and its own, served on that worker's
// loop), and ticks the stream from a timer (1 ms while transactions commit, 50 ms idle). After
// the load, before "ready": the initial state ships to the followers and the server waits
// until every follower installed it (src/repl/bootstrap.h). Control kRepl closes the streams
// after a run and reports every follower's digest and TPC-C check (control.h).
//
// Peer death: when a worker's link to shard X fails for good (Unavailable: the process is
// gone), its coordinator fails every transaction needing X with Unavailable naming X, and its
// participant releases every transaction X coordinated (Participant::abort_coordinated_by,
// rule F6 there: presumed abort, safe with 2 shards; see that comment for >= 3). When X's
// replicas follow failovers, prepared halves are kept instead and resolved at X's new leader
// after the redial (rule F11, Participant::resolve).
//
// Failover of another shard (with etcd; docs/REPLICATION.md, "Failover across shards"): the
// DepositionWatch tells the server that shard X has a new leader; the watch thread waits for
// X's published final watermark and epoch floor, dials the new leader once per worker and
// posts each connection to its worker, which fences X's lost TIDs off its vector watermark
// (never acknowledged), takes the new epoch (its coordinator sends it, its participant refuses
// older ones), and replaces its link to X (the old one is failed, kept 10 s for calls still in
// it). Meanwhile transactions needing X fail with Unavailable, installed nothing, and their
// clients retry them. A promoted leader publishes that record before its workers start.
// Before the redial the watch thread pauses every worker and undoes what depends on X's lost
// TIDs (discard_journal.h: each worker journals its commits not yet covered by its vector
// watermark), as writes logged on stream 0.
//
// Threads: run_server() is called on the main thread and returns after SIGTERM/SIGINT.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/repl/leader.h"

namespace shoal::server {

struct ServerOptions {
  std::string config_path;
  uint32_t shard = 0;
  uint32_t workers = 0;  // 0: the config's workers_per_shard
  // What the shard loads and runs: "micro" (Mako's microbenchmark; partitions are key ranges
  // of keys_per_partition keys), "tpcc" (partitions are warehouses; dist_tpcc.h) or "bank"
  // (accounts laid out as micro's keys, transactions recorded for the checker; dist_bank.h).
  std::string workload = "micro";
  uint64_t keys_per_partition = 1'000'000;
  uint64_t connect_timeout_ms = 30'000;  // dialing the other shards at start-up
  // Exit when the parent process dies (servers owned by a `shoal bench` run).
  bool die_with_parent = false;
  // Test only: EngineOptions::unsafe_skip_read_validation (a planted bug the bank's checker
  // must catch). Never for real use: transactions are no longer serializable.
  bool unsafe_skip_read_validation = false;
  // Workload tpcc: TpccOptions::read_only_hint (ITEM and the customer-name index read-only).
  bool tpcc_read_only_hint = true;
  // Test only (workload micro, replicated): after the followers installed the load, change one
  // record here without logging it, so `shoal cluster digest` must report a difference.
  bool unsafe_plant_divergence = false;
  // Replication. data_dir holds this replica's WAL; empty: .shoal/<cluster name>/shard-<N>-
  // replica-0. A shard of one replica logs only when given one: it is then a stream of one
  // acceptor, each write durable per `fsync` before it is acknowledged, and it restarts from
  // there (--recover-epoch). Without one it keeps nothing on disk.
  std::string data_dir;
  std::string fsync = "batch";  // none, batch or always
  // Log batching (cluster::ClusterConfig::batch_txns, batch_us): seal a stream's entry after
  // this many transactions or when its first is this old. 0: the config's. Values outside
  // the config's bounds are refused (InvalidArgument naming --batch-txns / --batch-us).
  uint32_t batch_txns = 0;
  double batch_us = 0;
  // The lead bound (repl::LeaderOptions::lead_ms_max, src/repl/lead_bound.h; 0: unbounded).
  uint64_t lead_ms_max = 10;
  uint64_t replication_timeout_ms = 120'000;  // followers connecting and installing the load
  // Chosen slots the leader keeps in memory per stream (LeaderOptions::retain_chosen_slots;
  // healthy followers are waited for at three quarters of it). Tests make it small so that a
  // short run leaves a stopped follower beyond it (caught up from the WAL then).
  uint64_t retain_slots = 256;
  // Replicated shards: fetch a follower's newest checkpoint at most this often into the data
  // directory and truncate this leader's WAL behind it (LeaderOptions::
  // checkpoint_fetch_interval_ms). 0: never (the WAL grows without bound).
  uint64_t checkpoint_interval_ms = 0;
  // CPU placement (`--worker-cpus`, `--other-cpus`; spawn_servers plans them for every server
  // and follower of a host, src/base/cpu_placement.h): worker i's thread is pinned to the i-th
  // CPU of worker_cpus, every other thread of the process is confined to other_cpus. Both
  // empty: nothing pinned. Both or neither; worker_cpus lists one CPU per worker, none of them
  // in other_cpus (InvalidArgument otherwise; a failed confinement fails the start, a worker
  // that cannot pin itself says so on stderr and runs unpinned).
  std::string worker_cpus;
  std::string other_cpus;
  // The configuration manager (etcd client endpoints, "host:port"); empty: none. Followers
  // (replica_cli.h) use it to agree on a failed leader's replacement.
  std::vector<std::string> etcd;
  // TPC-C: every acknowledged NewOrder's key is appended to a file per worker here
  // (src/server/ack_journal.h), for the benchmark's acknowledged-lost check. Empty: none.
  std::string ack_journal_dir;
  // GET /metrics (Prometheus text, docs/OPERATIONS.md "Metrics") on this replica's host and
  // this port (`--metrics-port`); 0: the config's metrics_port for this replica (0 there: none).
  uint16_t metrics_port = 0;
  // The Redis protocol (docs/RESP.md, "In the shard server") on this replica's host: -1: the
  // config's resp_port for this replica (0 there: none); 0: a free port (printed); else this.
  int32_t resp_port = -1;
  // Reply to a RESP write at its speculative commit instead of once it is durable (the
  // vectorized watermark covers it). Faster; a reply may then name a write that a failover
  // takes back.
  bool resp_reply_at_speculative_commit = false;
  uint32_t resp_max_connections = 10'000;  // clients at once on the RESP port (all workers)
  // The Shoal client protocol (docs/CLIENT.md) on this replica's host: -1: the config's
  // client_port for this replica (0 there: none); 0: a free port (printed); else this. Its
  // commits are durable or speculative as each client asks.
  int32_t client_port = -1;
  uint32_t client_max_connections = 10'000;  // clients at once on the client port
};

// A follower of this shard promoted in place (replica_cli.cc; docs/REPLICATION.md, "Failover"): the
// server runs over the follower's engine and acceptor state instead of loading. Its replication
// takes over (repl::ReplicationLeader with a Takeover): phase 1 on every stream, the old slots
// installed up to the final watermark, an epoch start sealed on every stream, and only then
// the workers, dialing every other shard's current leader.
struct Promotion {
  uint32_t replica = 0;           // this process, the shard's new leader
  uint64_t epoch = 0;             // the new epoch
  std::vector<uint32_t> leaders;  // per shard: its leader replica now (this one's included)
  // Per shard: the epoch its leader took over in (ShardState::since_epoch), and the epoch our
  // predecessor took over in. Another shard whose leader changed after that (a region's
  // shards failing together) may have lost TIDs that our store, replayed from a predecessor
  // that died before it followed that change, depends on: the server follows that change
  // as a survivor does (shard_server.h). Empty: none is followed.
  std::vector<uint64_t> since_epochs;
  uint64_t predecessor_since_epoch = 0;
  std::unique_ptr<txn::Engine> engine;
  repl::Takeover takeover;
};

// The exit status of a leader that found itself replaced (DepositionWatch): it stopped serving
// at once, as a crash would.
inline constexpr int kExitDeposed = 4;

// Runs the shard until SIGTERM or SIGINT. Errors: InvalidArgument (config, naming the field;
// shard out of range), Unavailable (a peer never accepted, naming it), IOError (listen),
// Timeout (a promotion whose takeover found no majority).
[[nodiscard]] Status run_server(const ServerOptions& options, Promotion* promotion = nullptr);

}  // namespace shoal::server

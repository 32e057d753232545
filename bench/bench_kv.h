// `shoal bench kv`: YCSB's core workloads through the client library (include/shoal/client.h)
// over the network, against a local cluster this run starts (--shards N --replicas R: the
// other benches' start, local_cluster.h, with client ports) or a running one (--cluster F),
// with the live line, report and JSON of the other benches (bench/runner.h, bench/live.h).
//
// Workloads: A 50% read / 50% update, B 95/5, C read only, F 50% read / 50% read-modify-
// write. A read is Client::get and an update Client::put (single-key transactions, one round
// trip each); a read-modify-write is Client::run of a get and a put of the same key (three
// round trips: get, put, commit; its conflicts retried by run() and counted as aborts).
// Keys: record i is "<2 letters>user<i, 10 digits>", the letters from fnv1a64(i), so that
// records spread evenly over "aa".."zz" and so over shards split by letters (the default
// kv_split_keys); the report counts the records each shard owns under the config's splits.
// Key choice: scrambled Zipfian (src/workload/ycsb's generator, theta 0.99 by default) or uniform.
// Load: before the measurement every record is written through the client library, single-key
// speculative puts spread over the connections (the byte-key table has no server-side bulk
// load path); the load's time is reported apart.
// Connections: one Client per thread (a Client is blocking, one request at a time); thread i
// talks to shard (i mod shards)'s leader, so every server coordinates transactions.
// Durability: every operation returns once durable (the vectorized watermark covers it) unless
// `speculative` (at the commit point); a cluster without replication has no watermark, so
// there every commit is speculative (CommitResult::durable false: counted in the JSON).
// Latency: per operation as the client sees it (retries included): the JSON's latency_us and
// commit_latency_us are the same histogram (a commit here returns when it is durable).
//
// Check (`check`): after the measurement, bank transfers through the same clients for
// check_seconds: accounts spread over the shards, each value "balance seq writer" (seq the
// account's version, writer the id of the attempt that wrote it), every transfer a run() of
// two gets and two puts, every fifth transaction a read-only audit of 4 accounts. Each thread
// records its committed attempts (reads with the version and writer they saw, writes with the
// new version) in a client-side history that the project's checker (src/check/serializability.h)
// checks after the run, with the balances summed in one transaction (money conserved). A
// transaction whose outcome is unknown (the connection broke at its commit) is counted as not
// recorded, and what read from it is left out of the check (drop_unrecorded_readers).
//
// Threads: run_kv_bench runs on the calling thread, starts `connections` threads per phase
// and joins them; per-thread state is owned by its thread until joined.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "shoal/status.h"
#include "src/server/cluster_ctl.h"

namespace shoal::server {

inline constexpr uint32_t kKvBenchConnectionsMax = 1024;

struct KvBenchOptions {
  char workload = 'A';  // A, B, C or F
  uint32_t connections = 4;
  uint64_t keys = 100'000;     // records; REQUIRES: >= 2
  uint32_t value_bytes = 100;  // YCSB's 10 fields of 10 bytes
  bool zipfian = true;         // else uniform
  double theta = 0.99;         // Zipfian skew in [0, 1)
  double seconds = 10;
  bool speculative = false;  // return at the commit point instead of once durable
  bool check = false;
  double check_seconds = 2;
  uint64_t seed = 1;
  std::string json_path;
  // Non-empty: run against this running cluster; else start `local` (its shards, replicas,
  // workers per shard, fsync, cpu_placement and the test-only unsafe flag are used).
  std::string cluster_path;
  DistBenchOptions local;
  // Ctrl-C (src/base/interrupt.h): ends the measurement (and the check) early; the report
  // covers what was measured.
  const std::atomic<bool>* stop = nullptr;
};

// Runs the load, the measurement and (check) the bank check, prints the report to stdout and
// writes the JSON. Ok; InvalidArgument for bad options or a cluster without client ports;
// Unavailable when the cluster cannot be reached or operations failed (reported first);
// Corruption when the check failed (reported first); IOError for an unwritable JSON file.
[[nodiscard]] Status run_kv_bench(const KvBenchOptions& options);

}  // namespace shoal::server

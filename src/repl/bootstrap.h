// Bootstrap and close of a shard's replication, shared by every process that leads a shard:
// the bench's in-process leader (bench/runner_repl.cc) and the shard server
// (src/server/shard_server.cc).
//
// Bootstrap: a follower starts empty; after the load, stream 0 logs every live record as an
// insert at the snapshot TID S (below any TID a transaction can still get) and every stream
// seals a floor entry at S, so the initial state reaches followers through Paxos and their
// WALs like everything else (a restarted follower recovers it from its WAL). The caller
// starts transactions only once every follower has installed it (bootstrap_followers returns),
// so bootstrap replay never overlaps a measurement.
//
// Close: after a run (no transaction running anywhere in the cluster), every stream seals a
// floor entry above every TID any stream committed; followers that applied up to that floor
// hold exactly the leader's store (compared by engine_digest).
//
// Threads: the thread that owns the appenders (every worker stopped or not yet started), except
// where noted.
#pragma once

#include <cstdint>
#include <string>

#include "shoal/status.h"
#include "src/repl/leader.h"

namespace shoal::repl {

// "none", "batch" or "always"; InvalidArgument naming `field` otherwise.
[[nodiscard]] Result<FsyncPolicy> parse_fsync(const std::string& text, const std::string& field);

struct BootstrapResult {
  uint64_t snapshot_tid = 0;
  uint64_t records = 0;  // log records of up to 64 rows
  uint64_t ns = 0;       // shipping plus every follower installing it
};

// Ships the engine's committed state on stream 0 at S = (epoch << 32) - 1, seals a floor at S
// on every stream, then waits (up to timeout_ms) until every follower applied S.
// REQUIRES: the leader leads (wait_leading); no transaction has committed on the engine and
// none runs meanwhile; the caller owns every appender.
[[nodiscard]] Result<BootstrapResult> bootstrap_followers(ReplicationLeader& leader,
                                                          txn::Engine& engine, uint64_t timeout_ms);

// The floor a closed shard needs: above every TID any of its streams committed (and at least
// `at_least`, the snapshot TID). REQUIRES: the caller owns every appender (workers stopped).
uint64_t closing_floor(ReplicationLeader& leader, uint64_t at_least);

}  // namespace shoal::repl

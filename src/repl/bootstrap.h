// Bootstrap and close of a shard's replication, shared by every process that leads a shard:
// the bench's in-process leader (bench/runner_repl.cc) and the shard server
// (src/server/shard_replication.cc).
//
// Bootstrap: a follower starts empty; after the load, stream 0 logs every live record as
// inserts in records of distinct, increasing TIDs just below the snapshot TID S (S itself is
// below any TID a transaction can still get), and every stream then seals a floor entry at S
// flagged kLogFlagBootstrapEnd. So every entry keeps the stream's promise (its max_tid is above
// every record before it and below every record after it), a follower's applied TID (its
// shard watermark) reaches S exactly when it has installed the whole load, and the flag tells
// the follower which TID that is (its snapshot readers start there, src/repl/follower.h). The
// initial state reaches followers through Paxos and their WALs like everything else (a
// restarted follower recovers it, flag included, from its WAL). The caller starts transactions
// only once every follower has installed it (bootstrap_followers returns), so bootstrap replay
// never overlaps a measurement.
//
// Close: after a run (no transaction running anywhere in the cluster), every stream seals a
// floor entry above every TID any stream committed; followers that applied up to that floor
// hold exactly the leader's store (compared by engine_digest).
//
// Threads: the thread that owns the appenders (every worker stopped or not yet started), except
// where noted.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "shoal/status.h"
#include "src/repl/leader.h"

namespace shoal::repl {

// "none", "batch" or "always"; InvalidArgument naming `field` otherwise.
[[nodiscard]] Result<FsyncPolicy> parse_fsync(const std::string& text, const std::string& field);

// Bootstrap records take TIDs in (S - kBootstrapTidSpan, S): below S, and above the version
// Table::load writes (epoch 1, sequence 0) once the engine is past epoch 1, as S is then too
// (a patch replayed onto a bootstrapped row needs the row at or above the leader's version).
inline constexpr uint64_t kBootstrapTidSpan = uint64_t{1} << 31;

struct BootstrapResult {
  uint64_t snapshot_tid = 0;
  uint64_t records = 0;  // log records of up to 64 rows
  uint64_t ns = 0;       // shipping plus every follower installing it
};

// Ships the engine's committed state on stream 0 below S = (epoch << 32) - 1, seals a
// bootstrap-end floor at S on every stream, then waits (up to timeout_ms) until every follower
// applied S, i.e. installed all of it. Timeout when that takes longer; Unavailable when *stop
// is set meanwhile (checked at least every 200 ms) or an appender stopped (its stop flag).
// REQUIRES: the leader leads (wait_leading); no transaction has committed on the engine and
// none runs meanwhile; the caller owns every appender.
[[nodiscard]] Result<BootstrapResult> bootstrap_followers(ReplicationLeader& leader,
                                                          txn::Engine& engine, uint64_t timeout_ms,
                                                          const std::atomic<bool>* stop = nullptr);

// The floor a closed shard needs: above every TID any of its streams committed (and at least
// `at_least`, the snapshot TID). REQUIRES: the caller owns every appender (workers stopped).
uint64_t closing_floor(ReplicationLeader& leader, uint64_t at_least);

}  // namespace shoal::repl

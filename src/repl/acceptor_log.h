// AcceptorLog: the durable state of one Paxos acceptor of one stream on one replica, i.e.
// what PaxosAcceptorStore must not forget across a crash (docs/REPLICATION.md "Durability").
//
// Two files in the replica's directory:
//  - stream-<s>.wal: the accepted log entries, byte for byte (src/repl/wal.h, with
//    allow_rewrites: a slot accepted again in a higher ballot appears again, last copy wins);
//  - stream-<s>.acc: a journal of fixed 48-byte records: promise(ballot), accept(slot, ballot,
//    entry checksum) and chosen(index). Each record carries its own XXH3, so a torn tail is
//    detected and cut.
// Why a journal beside the WAL rather than ballots inside it: the entry bytes must stay
// identical on every replica (checksummed, replayed as they are), while the ballot an acceptor
// accepted them in is that acceptor's own fact.
//
// Recovery pairs each slot's latest accept record with the WAL copy whose checksum it names;
// a WAL copy without its record (crash between the two writes) was never acknowledged and is
// dropped, as is a record without its copy. The acceptor answers only after both writes (and,
// by FsyncPolicy, both syncs), so what it acknowledged is what recovery restores. chosen(index)
// records are hints written without a sync: losing them costs a re-learn from the leader.
//
// Threads: owned by the stream's thread (the replica's event loop); hooks() run there.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shoal/status.h"
#include "src/repl/paxos_stream.h"
#include "src/repl/wal.h"

namespace shoal::repl {

struct AcceptorRecovery {
  Ballot promised = 0;
  uint64_t slots = 0;         // accepted slots restored into the store
  uint64_t chosen_index = 0;  // from the chosen hints (slots marked chosen in the store)
  uint64_t dropped = 0;       // WAL copies or records without their partner
  uint64_t wal_bytes = 0;
};

class AcceptorLog {
 public:
  // Opens (creating) <dir>/stream-<stream>.{wal,acc}. REQUIRES: dir exists.
  // accept_sync_elsewhere: the accept hook never syncs (nor marks dirty); the owner syncs
  // with sync_from_any_thread() on its own schedule (a leader's syncer thread, with
  // PaxosOptions::defer_self_ack). Promises still sync in the hook.
  [[nodiscard]] static Result<std::unique_ptr<AcceptorLog>> open(
      const std::string& dir, uint32_t stream, FsyncPolicy fsync,
      bool accept_sync_elsewhere = false);
  ~AcceptorLog();
  AcceptorLog(const AcceptorLog&) = delete;
  AcceptorLog& operator=(const AcceptorLog&) = delete;

  // Rebuilds `store` (fresh) from the files: promise, accepted slots with their ballots, and
  // chosen slots up to the persisted hint. Cuts torn tails of both files.
  // REQUIRES: once, before hooks() are installed and before any append.
  [[nodiscard]] Result<AcceptorRecovery> recover(PaxosAcceptorStore& store);

  // The PersistHooks to install on the store (they capture this object).
  PersistHooks hooks();
  // Records that slots <= index are chosen (no sync: a hint). Call after delivery.
  void note_chosen(uint64_t index);
  // Group commit (FsyncPolicy::kBatch): hooks append without syncing and leave the log dirty;
  // the owner calls sync() before anything can reveal those acceptances (a follower before it
  // sends the replies of a batch of messages, a leader before it handles any reply to its
  // proposals). One fdatasync per file per group instead of two per entry. kAlways syncs in
  // the hook; kNone never.
  [[nodiscard]] Status sync();
  bool dirty() const { return dirty_; }
  // fdatasync of both files, safe from another thread than the appender's: it covers every
  // append that returned before the call. Leaves dirty() alone (the owner's flag).
  [[nodiscard]] Status sync_from_any_thread() const;

  uint64_t wal_bytes() const { return wal_->end_offset(); }

 private:
  AcceptorLog(std::unique_ptr<Wal> wal, int journal_fd, std::string journal_path,
              FsyncPolicy fsync, bool accept_sync_elsewhere)
      : wal_(std::move(wal)),
        journal_fd_(journal_fd),
        journal_path_(std::move(journal_path)),
        fsync_(fsync),
        accept_sync_elsewhere_(accept_sync_elsewhere) {}
  [[nodiscard]] Status append_record(uint32_t kind, uint64_t slot, Ballot ballot,
                                     uint64_t checksum, bool sync);

  std::unique_ptr<Wal> wal_;
  int journal_fd_ = -1;
  std::string journal_path_;
  FsyncPolicy fsync_;
  bool accept_sync_elsewhere_ = false;
  uint64_t journal_end_ = 0;
  uint64_t chosen_noted_ = 0;
  bool dirty_ = false;
};

}  // namespace shoal::repl

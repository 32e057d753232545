// TakeoverTracker: when a promoted replica's takeover of its shard's streams is over, and what
// it ended with (docs/REPLICATION.md, "Failover").
//
// The replica appointed to lead after a failure campaigns on every stream; each stream's
// phase 1 re-proposes what a majority may hold above the candidate's chosen index and fills
// holes with no-ops, and the chosen callback hands those old slots to the replica's
// ReplayApplier. The takeover is over once every stream leads and its chosen index reached
// its last old slot: the one below next_slot() the first time the stream led (phase 1 put
// there every slot a majority may hold, and nothing new is proposed before the takeover is
// over). Then the applier's watermark is the shard's final watermark F of the old epochs.
//
// Deterministic and clock-free: ReplicationLeader feeds it from its replication thread, the
// simulator (sim/epoch_change_sim_test.cc) from its virtual-time loop. Threads: one owner.
// Bounds: O(streams) state; result() walks the applier's queued records once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/repl/replay.h"

namespace shoal::repl {

// How a takeover ended (ReplicationLeader::wait_takeover).
struct TakeoverResult {
  // The shard's final watermark of the epochs before: every record at or below it is chosen
  // and installed in the new leader's store; every record above it is discarded everywhere.
  uint64_t final_tid = 0;
  // Above every TID logged before the takeover: the new epoch's first floor.
  uint64_t floor_tid = 0;
  uint64_t replayed_txns = 0;   // records the takeover installed (chosen since the hand-over)
  uint64_t discarded_txns = 0;  // records above final_tid, never installed
  uint64_t elapsed_ns = 0;      // start() to the last stream's old slots chosen
  // The old epochs' committed distributed transactions that survived (at or below
  // final_tid): what the shard's coordinator decided, for the shards holding their halves.
  std::shared_ptr<const DecisionLog> decisions;
  // What saw the replayed writes of records naming other shards (ReplayApplier::set_observer),
  // if anything did: the journal whose entries the first FVW discard undoes like the
  // workers' own (src/server/discard_journal.h, ReplayJournal).
  std::shared_ptr<ReplayObserver> observer;
};

class TakeoverTracker {
 public:
  // `applier` is the promoted replica's, as handed over (its install count so far is the
  // baseline of TakeoverResult::replayed_txns). REQUIRES: streams == applier's streams.
  TakeoverTracker(uint32_t streams, const ReplayApplier& applier);

  // Stream `stream` now: whether it leads, its next slot and chosen index. Returns whether
  // its old slots are all chosen (it leads and its chosen index reached its last old slot).
  // The first call in which it leads fixes that last old slot (next_slot - 1).
  // REQUIRES: stream < streams; no entry proposed on the stream but phase 1's until done().
  bool note(uint32_t stream, bool leading, uint64_t next_slot, uint64_t chosen_index);
  // Every stream's latest note() said its old slots are chosen.
  bool done() const;
  // The last old slot of `stream`, 0 until it first led (or if it held none).
  uint64_t last_old_slot(uint32_t stream) const { return streams_[stream].last_old_slot; }

  // The final watermark F (the applier's watermark), the floor (the highest max_tid any
  // stream delivered, so above every old TID), what the applier installed since
  // the hand-over, and the records it holds above F (never installed: discarded). elapsed_ns
  // is left to the caller (it owns the clock). Aborts if a held record is at or below F (the
  // watermark would have installed it). REQUIRES: done(); `applier` is the one given above.
  // First installs what the applier holds at or below its watermark out of log order
  // (ReplayApplier::install_held), so F is the watermark.
  TakeoverResult result(ReplayApplier& applier) const;

 private:
  struct Stream {
    bool led = false;  // has led since the takeover began: last_old_slot is fixed
    uint64_t last_old_slot = 0;
    bool finished = false;  // as of the latest note()
  };
  std::vector<Stream> streams_;
  uint64_t replayed_before_ = 0;  // applier's installs at the hand-over
};

}  // namespace shoal::repl

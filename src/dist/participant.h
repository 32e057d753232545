// The participant side of Shoal's distributed transactions: one per shard worker. It serves a
// remote coordinator's reads, takes its buffered writes, and runs the shard's part of
// certification on a txn::Txn of its own per remote transaction (docs/ARCHITECTURE.md, "Across
// shards").
//
// Protocol, per transaction and participant:
//   read*            execution: served from this shard, recorded for validation
//   lock(writes)     stages the writes, locks them, proposes this shard's TID (timestamp)
//   validate         checks every read this shard served; only after every participant locked.
//                    Ok is this shard's "yes" vote: from then on the context is *prepared*.
//   install(vector)  installs at the vector's entry for this shard, unlocks: visible at once
//   abort            at any point before install: releases whatever is held
// A read-only participant gets validate and is finished by it (nothing to install).
//
// Fault rules (the network may delay, lose, duplicate and reorder; RPC retransmits):
//   F1 Tombstones. Every transaction that ends here (aborted, installed, finished read-only,
//      expired) leaves a tombstone for `tombstone_ns` (bounded: `tombstones_max`, oldest
//      evicted first). A later read/lock/validate for a tombstoned id is refused (Aborted), so
//      a late or duplicated request never re-creates a context or takes a lock. An abort for
//      an id never seen here also leaves a tombstone: an abort that overtakes the lock it
//      chases wins.
//   F2 Idempotent ends. abort() is a no-op on an ended id. install() on an id installed
//      before (tombstone "committed", which keeps the installed TID) answers Ok again with
//      that TID, so a coordinator may retry installs until one is acknowledged.
//   F3 Prepared contexts never end on their own. After a successful validate with writes the
//      locks stay until the coordinator's install or abort; only the coordinator knows whether
//      every other shard voted yes. (A coordinator that dies leaves them in doubt until its
//      shard's failover resolves them: F11.)
//   F4 Leases. A context that is not prepared (executing, or locked but not yet validated) and
//      has heard nothing from its coordinator for `lease_ns` is aborted by expire_idle(). This
//      is safe because the coordinator cannot commit without this shard's validate vote, which
//      it will now refuse (F1). It bounds what a vanished coordinator or a lost abort holds.
//   F5 install of an id with no context and no tombstone answers NotFound ("unknown"):
//      prepared contexts only end by install or by the coordinator's abort (F3), and a
//      coordinator never sends both for one id, so such an id was most likely installed and
//      its tombstone has since expired (or was evicted), but the TID it was installed and
//      logged at (F10) is gone with it. Ok would let the coordinator keep its own, possibly
//      lower, TID in the vector and acknowledge before the logged TID is covered; the error
//      makes it report the install in doubt (coordinator.h C2) and never acknowledge. The
//      same answer for an install that was done but not logged (the stream stopped at
//      shutdown: its tombstone keeps no TID), and Unavailable for such a validate_install.
//   F7 Last agent. validate_install() is validate() and install() in one step, for the
//      participant that votes last: every other participant already voted yes, so its own
//      vote decides the transaction, and it installs at once (one round trip instead of two,
//      and the coordinator's own locks are held for that one round trip). Idempotent like
//      install: a repeat for an id it installed answers Ok with the same TID (kept in the
//      tombstone); for an id it aborted, Aborted.
//   F9 Pinned prepare. An exec that locks (proposed_tid given) and is asked to (`prepared`
//      given) also validates at once when every read of the context is a row it now holds
//      locked and it read no index nodes: nothing it read can change before its install or
//      abort, so the vote cannot go stale while the other shards lock later (coordinator.h
//      C6). The context is then prepared (F3) and the coordinator skips its validate. A
//      context with any other read stays locked and votes at validate as usual.
//   F10 Installs above the stream. On a replicated shard server a worker's transactions and its
//      participant's installs share one log stream, whose entries promise that no later record
//      is at or below their max_tid (src/repl/appender.h). A context proposes above that
//      promise, and the proposal is a reservation (lowest_reserved_tid): the stream promises
//      nothing at or above a reserved TID until the context ends, even when the worker logs
//      higher TIDs meanwhile (an engine epoch tick, many commits). So the install lands at
//      exactly max(the coordinator's TID, the proposal), as the transaction's vector says.
//      This matters because the first shard to install (the coordinator's, C6, or the last
//      agent, C4) showed versions whose vectors name this shard's entry, and readers of those
//      inherit it: the entry must not be covered by this shard's watermark (nor by the final
//      watermark of its failover) before the install is logged, or a failover could keep and
//      acknowledge a reader above a lost install (docs/REPLICATION.md, known gap 2). The
//      proposal leads the highest TID the stream logged by kProposalLeadTids, and is above
//      every earlier proposal (set_proposal_floor), so that the worker's own commits until the
//      install stay below it, the hold bites only when they would pass it (an epoch tick, or
//      more commits than the lead), and no two installs share a TID. A context held prepared holds
//      the stream's promise, and so the shard's acknowledgements, until its coordinator decides
//      (F3, F11); a failover that cannot get the decision drops the reservation (drop_reservation)
//      and leaves the context prepared: its install may then land above the entry.
//   F8 One-shot last agent. validate_install() may carry a fragment: the participant runs it
//      (starting the context if this is the transaction's first contact), locks what it
//      wrote, then validates and installs as F7: a remote shard's whole part of a
//      transaction in one round trip, when the procedure needs nothing back from it. Only
//      for a transaction no other participant validated before (its locks come last:
//      coordinator.h C5). A fragment that fails ends the context here (Aborted / UserAbort /
//      its error).
//   F11 The decision outlives the coordinator. A coordinator logs its own half of a
//      cross-shard transaction first, with the transaction's id (coordinator.h C6), before any
//      other shard installs. When its process dies, the shards holding prepared halves keep
//      them (abort_coordinated_by with keep_prepared) until its shard's new leader, which
//      replayed that log up to the final watermark, answers decision(): committed there
//      (install here at the vector it logged) or not (abort: its half was lost, so nothing of
//      the transaction survives). resolve() applies the answer. A survivor gives the aborts
//      before its FVW discard (abort_undecided): their locks would hide rows from it.
//
// Epochs: every request carries the coordinator's epoch; read/lock/validate from an older
// epoch than the participant's are refused (Aborted, "stale epoch"), so a deposed coordinator
// cannot start or certify work after a failover; and from a newer one too (Aborted, retried),
// until the participant's shard server has learnt that epoch and fenced and discarded what
// its failover lost (shard_server.h): else a new leader's transaction could read a lost
// version here, and its vector's entry for the new leader's shard, a new-epoch TID, would
// hide that dependency (vectors keep one TID per shard, the largest). install and abort are not
// epoch-checked: an install completes a decision already taken, an abort only releases.
//
// Threads: owned by one worker thread; every call runs there. Bounds: at most `inflight_max`
// live contexts (Aborted "busy" beyond: the coordinator retries; not Unavailable, which means
// the shard is gone), at most `tombstones_max` tombstones. Time comes from the engine's Env.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "shoal/status.h"
#include "src/txn/engine.h"

namespace shoal::dist {

// Globally unique: coordinator shard (16 bits) | coordinator worker (8) | sequence (40).
using TxnId = uint64_t;
inline TxnId make_txn_id(uint32_t shard, uint32_t worker, uint64_t seq) {
  return (uint64_t{shard} << 48) | (uint64_t{worker & 0xff} << 40) | (seq & ((1ULL << 40) - 1));
}

// The low byte of the epoch of the leader whose coordinator numbered `id` (its sequence starts
// at (epoch & 0xff) << 32: server CoordinatorOptions::first_seq).
inline uint32_t txn_leader_epoch_byte(TxnId id) {
  return static_cast<uint32_t>((id >> 32) & 0xff);
}
// No epoch spared (abort_coordinated_by and the like below).
inline constexpr uint64_t kSpareNoEpoch = UINT64_MAX;

// A fragment: a piece of a stored procedure that runs on the shard owning its rows, inside the
// transaction's context there (its reads are validated and its writes buffered like any
// other). The workload registers a table of them on every shard; the coordinator names one by
// id and ships its arguments as bytes (no pointers: they may cross processes). `ctx` is the
// table's context (e.g. the shard's TPC-C tables). On Ok *out_size <= out.size() bytes of out
// are the result. Fragments run to completion without suspending.
using Fragment = Status (*)(txn::Txn& txn, const void* ctx, std::span<const uint8_t> args,
                            std::span<uint8_t> out, uint32_t* out_size);
inline constexpr uint32_t kFragmentsMax = 16;
// Arguments and results, each: a Redis front end's put carries a key (8 KiB) and a value
// (1 MiB plus its header), src/server/kv_fragments.h. A caller sizes its result buffer to
// what it expects (the reply message is as large), not to this bound.
inline constexpr uint32_t kFragmentBytesMax = (1u << 20) + (16u << 10);
// The result buffer of a fragment whose result nobody reads (exec_at_commit, F8).
inline constexpr uint32_t kUnreadFragmentResultBytesMax = 8192;
// Fragments by id; ctx_of[i], when set, is fragment i's context instead of ctx (workloads
// sharing one table: TPC-C's fragments and the Redis front end's on one shard server).
struct FragmentTable {
  const void* ctx = nullptr;
  Fragment fns[kFragmentsMax] = {};
  const void* ctx_of[kFragmentsMax] = {};
};
// A fragment to run, with its arguments (F8).
struct FragmentCall {
  uint32_t fragment = 0;
  std::span<const uint8_t> args;
};

// F9: what an exec that locked may also have done: validated its reads, because every one of
// them is a row it holds locked (txn::Txn::reads_pinned). Then the context is prepared (its
// yes vote is in) and `deps` is what validate() would have returned.
struct ExecPrepared {
  bool prepared = false;
  txn::DepVec deps;
};

// One buffered write, as the coordinator ships it with lock().
struct StagedWrite {
  uint32_t table_id = 0;
  uint32_t key_word_count = 0;
  uint64_t key[8] = {};
  txn::WriteKind kind = txn::WriteKind::kPut;
  const void* value = nullptr;  // valid for the duration of the lock() call
  uint32_t size_bytes = 0;
};

struct ParticipantOptions {
  uint32_t inflight_max = 1024;
  // F4: a context that is not prepared expires after this long without coordinator contact.
  // Must exceed what a live coordinator may spend between two messages to this shard
  // (locking the other shards: a few RPC timeouts).
  uint64_t lease_ns = 500'000'000;
  // F1: how long ended ids are remembered. Must exceed the longest a request can live in the
  // network and in RPC retransmission (the RPC deadline plus the network's delay bound).
  uint64_t tombstone_ns = 10'000'000'000;
  uint32_t tombstones_max = 1 << 16;
};

struct ParticipantStats {
  uint64_t refused_ended = 0;       // late read/lock/validate for a tombstoned id (F1)
  uint64_t early_aborts = 0;        // aborts for ids never seen here (F1)
  uint64_t repeated_installs = 0;   // F2 / F5 / F7
  uint64_t unknown_installs = 0;    // F5: repeats answered NotFound (installed TID not known)
  uint64_t unlogged_installs = 0;   // installed, but the commit hook failed (stream stopped)
  uint64_t expired = 0;             // leases run out (F4)
  uint64_t orphaned = 0;            // aborted because their coordinator's shard died (F6)
  uint64_t resolved_committed = 0;  // prepared halves installed on a new leader's word (F11)
  uint64_t resolved_aborted = 0;    // prepared halves aborted on a new leader's word (F11)
  uint64_t tombstones_evicted = 0;
  uint64_t reservations_dropped = 0;  // F10: prepared contexts left without a decision
};

class Participant {
 public:
  Participant(txn::Engine& engine, uint32_t shard_id, ParticipantOptions options);
  Participant(txn::Engine& engine, uint32_t shard_id, uint32_t inflight_max = 1024)
      : Participant(engine, shard_id, ParticipantOptions{.inflight_max = inflight_max}) {}
  ~Participant();

  uint32_t shard_id() const { return shard_id_; }
  uint64_t epoch() const { return epoch_; }
  // Epochs only move forward.
  void advance_epoch(uint64_t epoch);
  // A promoted leader whose predecessor may have died before following another shard's
  // failover (a region failing: both shards' leaders at once) starts in an epoch that already
  // covers that failover, but has not yet fenced and discarded what it lost. Until it has
  // (followed_failover_of), a transaction touching that shard's new leader could read a lost
  // version here and hide the dependency behind its new-epoch TID there, as check_epoch's newer
  // epochs could: so read, exec, lock and validate are refused (Aborted, retried) while any
  // shard is awaited, whichever coordinator asks (ours included, through its self link).
  void await_failover_of(uint32_t shard);
  // Returns whether `shard` was awaited.
  bool followed_failover_of(uint32_t shard);
  bool awaits_failovers() const { return !awaited_failovers_.empty(); }

  // Reads a key for transaction `id` (starting its context on first contact).
  [[nodiscard]] Status read(TxnId id, uint64_t epoch, uint32_t table_id, const uint64_t* key,
                            uint32_t key_word_count, void* out, uint32_t out_bytes,
                            uint32_t* size_out);
  // Runs fragment `fragment` of the registered table on the context of `id` (starting it on
  // first contact). *wrote tells whether the context now holds writes (the coordinator then
  // sends lock, even with no writes of its own for this shard). An error leaves the context
  // to the coordinator's abort, as a failed read does. InvalidArgument for an unknown fragment
  // or oversized arguments. With `proposed_tid` (the coordinator will not execute here again)
  // a fragment that wrote also locks at once, as lock() with no further writes would, saving
  // the coordinator a round trip; on a failed lock nothing is held and the transaction is
  // ended here. With `prepared` as well, F9: a locked context whose reads are pinned is
  // validated too (Aborted, everything released and the transaction ended, if that fails).
  [[nodiscard]] Status exec(TxnId id, uint64_t epoch, uint32_t fragment,
                            std::span<const uint8_t> args, std::span<uint8_t> out,
                            uint32_t* out_size, bool* wrote, uint64_t* proposed_tid = nullptr,
                            ExecPrepared* prepared = nullptr);
  // Called on the participant's thread right after each install (install, validate_install)
  // with the Txn that installed, before it ends: a replicated shard server's stream logs the
  // transaction there (src/repl/appender.h), as the worker's own commits through
  // txn::Worker::set_commit_hook. nullptr removes it. REQUIRES: as txn::CommitHook. A hook
  // that fails (the stream stopped) fails the install with Unavailable ("installed but not
  // logged"): the coordinator then never acknowledges the transaction.
  // Every context's Txn then keeps what its puts overwrite, so the hook can log patches.
  void set_commit_hook(txn::CommitHook hook, void* ctx) {
    commit_hook_ = hook;
    commit_hook_ctx_ = ctx;
  }
  // Inside the commit hook of an install: the transaction being logged; 0 elsewhere.
  TxnId logging_id() const { return logging_id_; }
  // F10: installs go above *floor (a replicated shard server's stream promise, shared with
  // the worker's own transactions: repl::StreamAppender::promised_tid), and every context's
  // proposals too. nullptr: none. REQUIRES: *floor outlives the participant; set before the
  // first transaction.
  void set_tid_floor(const uint64_t* floor) { tid_floor_ = floor; }
  // F10: proposals go kProposalLeadTids above *floor, the highest TID the stream logged
  // (repl::StreamAppender::logged_floor_tid), which a reservation may hold the promise below:
  // a proposal, and the install at it, then takes no TID a record of the worker took.
  // nullptr: the tid floor (set_tid_floor). REQUIRES: as set_tid_floor.
  void set_proposal_floor(const uint64_t* floor) { proposal_floor_ = floor; }
  // F10: how far a proposal leads the stream's logged floor: 2^20 cross-shard installs per worker
  // and 40 ms TID epoch still fit the epoch's 2^32 sequence numbers.
  static constexpr uint64_t kProposalLeadTids = uint64_t{1} << 12;
  // F10: the lowest TID a live context proposed (locked, not yet installed or aborted, its
  // reservation not dropped); UINT64_MAX when none. The stream sharing this participant's
  // worker promises below it (repl::StreamAppender::set_reservations). O(1) unless the lowest
  // one just ended.
  uint64_t lowest_reserved_tid() const;
  // F10, bounded life: a prepared context whose decision a failover could not get (F11, no
  // answer) stops holding the stream's promise; it stays prepared. Else the shard's watermark,
  // and every acknowledgement waiting on it, would wait for that answer. No-op for an id that
  // is not live. Counted (reservations_dropped).
  void drop_reservation(TxnId id);

  // The fragments exec() runs. REQUIRES: `table` outlives the participant.
  void set_fragments(const FragmentTable* table) { fragments_ = table; }

  // Stages the writes, locks them, and proposes this shard's TID. On error nothing is held
  // and the transaction is ended here.
  [[nodiscard]] Status lock(TxnId id, uint64_t epoch, const StagedWrite* writes, size_t count,
                            uint64_t* proposed_tid);
  // Validates the reads served here; on Ok *deps holds what they depend on and a context with
  // writes is prepared (F3). A participant that only served reads is finished by it. On error
  // the transaction is ended here.
  [[nodiscard]] Status validate(TxnId id, uint64_t epoch, txn::DepVec* deps);
  // Installs at `tid` with the transaction's vector and ends the transaction. Idempotent (F2,
  // F5). InvalidArgument if the transaction is not prepared here or `tid` is below the TID
  // this shard proposed (protocol violations: refused, never asserted).
  // *installed_tid (if given): where it installed, max(tid, floor + 1) (F10); a repeat answers
  // with the TID kept in the tombstone, and NotFound once that expired (F5); 0 on any error.
  // Unavailable when installed but not logged (commit hook failed).
  [[nodiscard]] Status install(TxnId id, uint64_t epoch, uint64_t tid, const txn::DepVec& vector,
                               uint64_t* installed_tid = nullptr);
  // F7: validates the reads served here and, if they hold, installs at
  // *tid = max(vector[this shard], the proposed TID) with `vector` merged with what the reads
  // depend on (returned in *deps). REQUIRES of the coordinator: every other participant voted
  // yes. Aborted (with everything released) when validation fails; InvalidArgument when the
  // context is not locked.
  // With `fragment` (F8) it first runs the fragment and locks its writes.
  [[nodiscard]] Status validate_install(TxnId id, uint64_t epoch, const txn::DepVec& vector,
                                        txn::DepVec* deps, uint64_t* tid,
                                        const FragmentCall* fragment = nullptr);
  // Releases everything held for `id` and tombstones it (F1). Idempotent.
  void abort(TxnId id);

  // F4: aborts contexts that are not prepared and idle for lease_ns. Returns how many.
  size_t expire_idle();
  // abort(), except that a context that voted yes (prepared) waits for its decision (F3).
  void abort_unless_prepared(TxnId id);
  // F6 (coordinator death). Aborts every context whose TxnId names `coordinator_shard` as its
  // coordinator; with keep_prepared, prepared ones stay (locks held) for resolve() below.
  // Without keep_prepared (presumed abort: no failover will follow, so nothing better can be
  // known) a prepared context of a transaction its coordinator decided and installed
  // elsewhere is broken here: safe with two shards when the coordinator installs itself
  // last, not otherwise. Returns how many ended.
  // spare_epoch (here and in abort_undecided, prepared_coordinated_by): contexts numbered by
  // the leader of that epoch (txn_leader_epoch_byte) are left alone: the new leader's own,
  // which reach us before we follow its failover when two shards failed over at once.
  size_t abort_coordinated_by(uint32_t coordinator_shard, bool keep_prepared = false,
                              uint64_t spare_epoch = kSpareNoEpoch);
  // F11 before a survivor's discard: ends every context `coordinator_shard` coordinated except
  // the prepared ones in `committed` (sorted: the ids its new leader's log holds, which stay
  // for resolve()). What it ends cannot commit: an unprepared one never voted (coordinator.h
  // C1), a prepared one is what resolve() would abort. Their locks are released, so the
  // records under them can be judged (server/discard_journal.h). Returns how many prepared
  // ones it aborted (counted as resolved_aborted).
  size_t abort_undecided(uint32_t coordinator_shard, std::span<const TxnId> committed,
                         uint64_t spare_epoch = kSpareNoEpoch);
  // The prepared contexts coordinated by `coordinator_shard`, in id order.
  void prepared_coordinated_by(uint32_t coordinator_shard, std::vector<TxnId>* out,
                               uint64_t spare_epoch = kSpareNoEpoch) const;
  // F11 (the decision outlives its coordinator). After the coordinator's shard failed over,
  // its new leader knows from its log which of the old leader's transactions committed (the
  // coordinator logs its own half first, with the id: coordinator.h C6): resolve ends a
  // prepared context with that answer: installs it (Ok, at the coordinator's vector; *tid is
  // where) or aborts it (Aborted: the coordinator's half did not survive, so nothing of it
  // did). NotFound when `id` is not prepared here. REQUIRES: the answer came from the
  // coordinator shard's leader of a later epoch.
  [[nodiscard]] Status resolve(TxnId id, bool committed, const txn::DepVec& vector, uint64_t* tid);
  // What this shard's log says of a transaction its own coordinator ran before a failover
  // (the lookup set below): Ok with the commit TID here and the vector, NotFound when it did
  // not commit (or is older than the lookup remembers), Unavailable without a lookup (this
  // replica did not take over from a log).
  using DecisionLookup = bool (*)(const void* ctx, TxnId id, uint64_t* tid, txn::DepVec* vector);
  void set_decision_lookup(DecisionLookup lookup, const void* ctx) {
    decision_lookup_ = lookup;
    decision_lookup_ctx_ = ctx;
  }
  [[nodiscard]] Status decision(TxnId id, uint64_t* tid, txn::DepVec* vector) const;
  // The earliest time expire_idle() could end something; UINT64_MAX when nothing can expire.
  uint64_t next_expiry_ns() const;

  size_t active() const { return active_.size(); }
  size_t tombstones() const { return tombstones_.size(); }
  const ParticipantStats& stats() const { return stats_; }
  const ParticipantOptions& options() const { return options_; }

 private:
  txn::CommitHook commit_hook_ = nullptr;
  void* commit_hook_ctx_ = nullptr;
  enum class Phase : uint8_t { kExecuting, kLocked, kPrepared };
  enum class Ended : uint8_t { kAborted, kCommitted };
  struct Slot {
    std::unique_ptr<txn::Txn> txn;
    Phase phase = Phase::kExecuting;
    bool in_use = false;
    uint64_t last_contact_ns = 0;
    uint64_t proposed_tid = 0;  // install must not go below it (Txn::install_and_unlock)
    bool reserved = false;      // F10: proposed_tid holds the stream's promise below it
  };
  struct Tombstone {
    Ended how;
    uint64_t expires_ns;
    uint64_t tid = 0;  // the installed TID (F7 repeats answer with it)
  };
  [[nodiscard]] Status check_epoch(uint64_t epoch) const;
  // Runs the commit hook on an installed Txn; Unavailable (counted) when it failed.
  [[nodiscard]] Status log_commit(const txn::Txn& txn);
  // Refuses ended ids (F1).
  [[nodiscard]] Status check_not_ended(TxnId id);
  // The context of `id`, started if `start` and absent; nullptr with *status set otherwise.
  Slot* slot_for(TxnId id, bool start, Status* status);
  // Locks the context's write set and proposes its TID; on failure nothing is held and the
  // transaction is ended here.
  [[nodiscard]] Status lock_context(TxnId id, Slot* slot, uint64_t* proposed_tid);
  // What a yes vote returns (validate, validate_install, F9): the reads' dependencies.
  void vote_deps(const Slot& slot, txn::DepVec* out) const;
  // F9 for a locked context whose reads are pinned: validates it into the prepared phase.
  [[nodiscard]] Status prepare_pinned(TxnId id, Slot* slot, ExecPrepared* prepared);
  // Ends the context (releasing nothing: the caller did) and tombstones the id.
  void finish(TxnId id, Slot* slot, Ended how, uint64_t tid = 0);
  void bury(TxnId id, Ended how, uint64_t tid = 0);
  void drop_expired_tombstones(uint64_t now_ns);
  [[nodiscard]] Status stage(txn::Txn& txn, const StagedWrite& w);
  uint64_t now_ns() { return engine_.env().now_ns(); }
  uint64_t floor_tid() const { return tid_floor_ != nullptr ? *tid_floor_ : 0; }
  // F10: releases the slot's reservation (its context ended).
  void release_reservation(Slot* slot);
  // SHOAL_RESERVATION_TRACE=1: logs reservations held over a second (participant.cc).
  void trace_reservations() const;
  bool trace_reservations_ = false;
  mutable uint64_t trace_next_ns_ = 0;

  txn::Engine& engine_;
  uint32_t shard_id_;
  ParticipantOptions options_;
  uint64_t epoch_ = 1;
  std::vector<uint32_t> awaited_failovers_;  // shards; at most one entry each
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::unordered_map<TxnId, uint32_t> active_;
  // F1: id -> outcome, with a FIFO of (id, expiry) to age them out; an id buried twice has
  // two FIFO entries and only the one matching its current expiry removes it.
  std::unordered_map<TxnId, Tombstone> tombstones_;
  std::deque<std::pair<TxnId, uint64_t>> tombstone_fifo_;
  std::vector<TxnId> scratch_ids_;
  const FragmentTable* fragments_ = nullptr;
  const uint64_t* tid_floor_ = nullptr;       // F10
  const uint64_t* proposal_floor_ = nullptr;  // F10: set_proposal_floor
  uint64_t last_proposed_tid_ = 0;            // F10: proposals only grow
  // F10: lowest_reserved_tid(), recomputed from active_ when the lowest one ended.
  mutable uint64_t reserved_min_ = UINT64_MAX;
  mutable bool reserved_min_stale_ = false;
  DecisionLookup decision_lookup_ = nullptr;  // F11
  const void* decision_lookup_ctx_ = nullptr;
  TxnId logging_id_ = 0;              // logging_id()
  std::vector<uint8_t> scratch_out_;  // F8 fragments' results
  ParticipantStats stats_;
};

}  // namespace shoal::dist

// The coordinator side of Shoal's distributed transactions: runs a stored procedure as a
// coroutine, sends its reads to the shards that own the keys, buffers its writes, and
// certifies across shards (docs/ARCHITECTURE.md, "Across shards"):
//   1. lock     every shard with writes (remote ones first, the coordinator's own last);
//               each proposes its TID. A fragment run with last_on_shard locks in its own
//               round trip, one deferred with exec_at_commit before all others (C5).
//   2. validate every shard touched, only after all locks are held (locking and validating
//               shard by shard would let write skew slip between shards); ours first
//   3. install  at each shard's entry of the vector = max(read dependencies, proposals);
//               the writes are visible at once (speculatively: replication comes later).
//               Our own shard installs first when it writes (C6); else the last remote shard
//               with writes validates and installs in one step (C4).
// Any failure before the decision aborts every participant. Conflicts (Aborted) and lost
// messages (Timeout) retry the procedure with a new transaction id, bounded by max_retries.
//
// Fault rules on the coordinator side (the participant's are in participant.h):
//   C1 The decision to commit is taken when every validate answered Ok, never earlier. Before
//      it, any failure (Aborted, Timeout: the request may or may not have run, Unavailable:
//      the shard is gone) aborts the transaction on every shard it touched or meant to write,
//      including shards whose request timed out (their lock may have been taken).
//   C2 After the decision the transaction is committed: every written shard gets its install
//      (the link retries it until acknowledged; installs are idempotent by id), and no abort
//      is ever sent for it. If a shard cannot be reached for its install (Unavailable, or the
//      link's retries run out) the outcome there is in doubt: run() returns Unavailable saying
//      so (doubtful_shards() names them), the other shards are installed, and resolving the
//      in-doubt shard is recovery's job: its new leader's log says whether the half survived
//      (src/server/discard_journal.h), and the caller settles the transaction
//      (settle_doubt).
//   C4 Last agent (participant.h F7), only when our own shard has no writes. The last remote
//      shard with writes does not get validate + install but one validate_install, sent after
//      every other participant voted yes: its vote decides, and it installs at once. Ok:
//      decided, the others install (C2). Aborted: not decided (C1). No answer (Unavailable, or
//      Timeout after the link's retries): the outcome there is unknown. When its shard is gone
//      (Unavailable) and fails over, the others stay prepared until its new leader answers
//      from its log (F11's question, asked the other way): decided there (the others install)
//      or not (they abort). Otherwise (a Timeout, no new leader within in_doubt_wait_ns, no
//      answer) the others are released and run() returns Unavailable saying the transaction
//      is in doubt. One round trip less per such commit.
//   C5 A fragment deferred with exec_at_commit locks before any shard validates, as every
//      write must (step 2). Sent with the last agent's validate_install (F8) it would lock
//      after the other shards validated, and a transaction committing in between could
//      overwrite a row they validated and write one the fragment reads: a cycle. So when the
//      transaction touched another shard, commit runs it first with exec (locking at once)
//      and its shard becomes an ordinary last agent (F7); only a transaction touching no other
//      shard gets the one-shot F8.
//   C6 Our own vote decides whenever our shard writes: every remote writer votes first (at
//      validate, or in its exec reply when its reads are all rows it locked: participant.h
//      F9, pinned votes, which need no validate round trip), then our shard validates and
//      installs first, logging the transaction with its id (docs/LOG_FORMAT.md, DIST_TXN),
//      then the others install at a vector naming the TID our shard logged. Our own locks
//      (TPC-C's warehouse and district rows) are held for no round trip after the votes. If
//      this process dies after installing here and before the remote installs, the survivors
//      keep their prepared halves until our shard's new leader tells them whether our half
//      survived the failover (participant.h F11): the decision outlives its coordinator. If
//      it dies before, nothing of the transaction was logged here and they abort. The price:
//      a remote writer that cannot vote early takes a validate and an install round trip
//      where C4's last agent took one validate_install.
//   C3 Each attempt uses a fresh TxnId, so requests of an aborted attempt (late, duplicated)
//      can never be mistaken for the retry's: participants refuse them (tombstones).
//
// Non-blocking: a transaction waiting on a shard suspends its coroutine; the worker's loop runs
// other transactions meanwhile (as many as the caller spawns: the bound is the caller's).
// Threads: a Coordinator and its DistTxns belong to one worker loop.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "shoal/status.h"
#include "src/base/arena.h"
#include "src/dist/participant.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/task.h"
#include "src/txn/depvec.h"

namespace shoal::dist {

// How a coordinator reaches one shard's participant: in-process (LocalLink, for the simulator
// and for the coordinator's own shard) or over RPC (RpcLink). A virtual call per message is
// noise next to the message itself; the transport below stays free of virtual calls.
// Contract for implementations:
//   read/lock/validate: sent at most once; Timeout means the outcome is unknown (it may have
//     run), Unavailable means the shard is unreachable for good; otherwise the participant's
//     own Status.
//   install/abort: retried by the link until acknowledged (participants make both idempotent);
//     Ok only once the participant answered, Unavailable when the shard is gone, Timeout when
//     the link's bounded retries ran out.
class ShardLink {
 public:
  virtual ~ShardLink() = default;
  // Pointers passed in stay valid until the returned task completes.
  virtual rt::Task<Status> read(TxnId id, uint64_t epoch, uint32_t table_id, const uint64_t* key,
                                uint32_t key_word_count, void* out, uint32_t out_bytes,
                                uint32_t* size_out) = 0;
  // Runs a registered fragment there (Participant::exec, locking at once when proposed_tid is
  // given, and preparing a pinned context when `prepared` is given too: F9); sent at most
  // once, like read.
  virtual rt::Task<Status> exec(TxnId id, uint64_t epoch, uint32_t fragment,
                                std::span<const uint8_t> args, std::span<uint8_t> out,
                                uint32_t* out_size, bool* wrote, uint64_t* proposed_tid,
                                ExecPrepared* prepared) = 0;
  virtual rt::Task<Status> lock(TxnId id, uint64_t epoch, const StagedWrite* writes, size_t count,
                                uint64_t* proposed_tid) = 0;
  virtual rt::Task<Status> validate(TxnId id, uint64_t epoch, txn::DepVec* deps) = 0;
  // *installed_tid: where it installed (>= tid: above the shard's stream promise, F10). A
  // participant that no longer knows (F5) answers NotFound, never Ok with a TID it forgot.
  virtual rt::Task<Status> install(TxnId id, uint64_t epoch, uint64_t tid,
                                   const txn::DepVec& vector, uint64_t* installed_tid) = 0;
  virtual rt::Task<Status> abort(TxnId id, uint64_t epoch) = 0;
  // F7 (participant.h): validate and, if the reads hold, install. Retried by the link until
  // answered, like install (the participant makes repeats idempotent): Ok (*tid is where it
  // installed), Aborted (it voted no: nothing installed), Unavailable or Timeout (the outcome
  // there is unknown).
  // With `fragment` (F8) the participant first runs it and locks its writes.
  virtual rt::Task<Status> validate_install(TxnId id, uint64_t epoch, const txn::DepVec& vector,
                                            txn::DepVec* deps, uint64_t* tid,
                                            const FragmentCall* fragment) = 0;
  // F11 (participant.h): asks a coordinator shard's new leader what its log says of `id`, a
  // transaction the shard's old leader coordinated: Ok (committed: *tid is its TID there,
  // *vector what it logged), NotFound (not committed), else the outcome is not known yet.
  // Retried by the link until answered, like install. Links without it: NotSupported.
  virtual rt::Task<Status> decision(TxnId id, uint64_t* tid, txn::DepVec* vector) {
    (void)id;
    (void)tid;
    (void)vector;
    co_return Status::NotSupported("this shard link cannot ask for decisions");
  }
  // The watermark exchange (watermark_exchange.h): tells the shard ours and learns its
  // watermark (the link raises its VectorWatermark). Sent at most once, like read. Links
  // that carry no watermarks (in process) answer NotSupported.
  virtual rt::Task<Status> exchange_watermark(uint32_t own_shard, uint64_t own_watermark) {
    (void)own_shard;
    (void)own_watermark;
    co_return Status::NotSupported("this shard link carries no watermarks");
  }
};

class Coordinator;

// A transaction's handle inside a procedure. Keys name their shard explicitly: the workload
// knows its partitioning (TPC-C by warehouse, the microbenchmark by key range).
class DistTxn {
 public:
  static constexpr uint32_t kShardsMax = 1024;
  static constexpr uint32_t kWritesMax = 4096;

  rt::Task<Status> get(uint32_t shard, uint32_t table_id, const uint64_t* key,
                       uint32_t key_word_count, void* out, uint32_t out_bytes,
                       uint32_t* size_out = nullptr);
  // Runs fragment `fragment` (registered on every shard, see FragmentTable) on `shard`, with
  // `args` as its input; its result lands in `out` (*out_size bytes). Its reads are validated
  // and its writes installed with the rest of the transaction. Buffered writes (put/insert/
  // remove) to the rows a fragment touches are not merged with the fragment's: a procedure
  // uses one style per shard. `last_on_shard` promises that the transaction does nothing more
  // on `shard`: the participant then locks the fragment's writes at once (one round trip
  // instead of two; locking before execution ends is safe under OCC, only validation must
  // wait for every lock).
  rt::Task<Status> exec(uint32_t shard, uint32_t fragment, std::span<const uint8_t> args,
                        std::span<uint8_t> out, uint32_t* out_size = nullptr,
                        bool last_on_shard = false);
  template <typename Args, typename Out>
  rt::Task<Status> exec(uint32_t shard, uint32_t fragment, const Args& args, Out* out,
                        bool last_on_shard = false) {
    static_assert(std::is_trivially_copyable_v<Args> && std::is_trivially_copyable_v<Out>);
    uint32_t size = 0;
    Status s =
        co_await exec(shard, fragment, {reinterpret_cast<const uint8_t*>(&args), sizeof(Args)},
                      {reinterpret_cast<uint8_t*>(out), sizeof(Out)}, &size, last_on_shard);
    if (s.ok() && size != sizeof(Out)) {
      s = Status::Corruption("fragment result of unexpected size");
    }
    co_return s;
  }
  // Runs `fragment` on `shard` at commit, for a remote part the procedure needs nothing back
  // from: before the other shards' locks, locking at once, and that shard then validates and
  // installs in one message as the last agent (C5). A transaction that touched no other shard
  // gets it all in one round trip (participant.h F8). At most one per transaction; `shard`
  // must not be touched otherwise. `args` are copied.
  Status exec_at_commit(uint32_t shard, uint32_t fragment, std::span<const uint8_t> args);
  template <typename Args>
  Status exec_at_commit(uint32_t shard, uint32_t fragment, const Args& args) {
    static_assert(std::is_trivially_copyable_v<Args>);
    return exec_at_commit(shard, fragment, {reinterpret_cast<const uint8_t*>(&args), sizeof(Args)});
  }
  Status put(uint32_t shard, uint32_t table_id, const uint64_t* key, uint32_t key_word_count,
             const void* value, uint32_t size_bytes) {
    return buffer(shard, table_id, key, key_word_count, txn::WriteKind::kPut, value, size_bytes);
  }
  Status insert(uint32_t shard, uint32_t table_id, const uint64_t* key, uint32_t key_word_count,
                const void* value, uint32_t size_bytes) {
    return buffer(shard, table_id, key, key_word_count, txn::WriteKind::kInsert, value, size_bytes);
  }
  Status remove(uint32_t shard, uint32_t table_id, const uint64_t* key, uint32_t key_word_count) {
    return buffer(shard, table_id, key, key_word_count, txn::WriteKind::kRemove, nullptr, 0);
  }

  TxnId id() const { return id_; }
  uint64_t epoch() const { return epoch_; }  // the cluster epoch it began in
  // After run() failed: whether some shard may have installed it (C2, C4: its outcome is in
  // doubt). A transaction that failed and is not in doubt installed nothing: it may be retried.
  bool in_doubt() const { return in_doubt_; }
  // In doubt after the decision (C2): the shards whose install went unanswered.
  const std::vector<uint32_t>& doubtful_shards() const { return doubtful_; }
  // A failover settled the doubt (the caller asked the shards' new leaders, src/server):
  // committed, its half at each doubtful shard kept at tids[i] (raised into vector()), or not
  // (nothing of it remains: it may be retried).
  void settle_doubt(bool committed, std::span<const uint64_t> tids);
  // After a commit: the transaction's dependency vector (one entry per shard it wrote, plus
  // what its reads depended on).
  const txn::DepVec& vector() const { return vector_; }
  // Shards this transaction touched so far.
  const std::vector<uint32_t>& shards() const { return touched_; }
  // After a commit: the shards it installed writes on (its vector's entry for each is the TID
  // it installed there). Before acknowledging, a client waits until the vectorized watermark
  // covers vector() (vector_watermark.h).
  const std::vector<uint32_t>& written_shards() const { return written_; }

 private:
  friend class Coordinator;
  struct Buffered {
    uint32_t shard;
    StagedWrite write;
  };
  Status buffer(uint32_t shard, uint32_t table_id, const uint64_t* key, uint32_t key_word_count,
                txn::WriteKind kind, const void* value, uint32_t size_bytes);
  Buffered* find_buffered(uint32_t shard, uint32_t table_id, const uint64_t* key,
                          uint32_t key_word_count);
  void touch(uint32_t shard);
  void reset(TxnId id, uint64_t epoch);
  // An exec on `shard` locked (at proposed `tid`), maybe prepared too (F9).
  void note_locked_early(uint32_t shard, uint64_t tid, const ExecPrepared& prepared);
  bool prepared_early(uint32_t shard) const;

  Coordinator* coordinator_ = nullptr;
  TxnId id_ = 0;
  uint64_t epoch_ = 0;
  bool in_doubt_ = false;
  std::vector<uint32_t> doubtful_;  // C2: installs unanswered
  std::vector<uint32_t> touched_;
  std::vector<uint32_t> fragment_written_;  // shards whose fragments left writes
  std::vector<uint32_t> locked_early_;      // of those, shards locked by their exec
  std::vector<uint32_t> prepared_early_;    // of those, shards that voted yes then (F9)
  std::vector<Buffered> writes_;
  Arena values_;
  txn::DepVec vector_;
  std::vector<uint32_t> written_;         // filled at commit by order_written_shards
  uint32_t last_agent_ = UINT32_MAX;      // C4: the shard that decides (UINT32_MAX: we do)
  uint32_t deferred_shard_ = UINT32_MAX;  // exec_at_commit's (UINT32_MAX: none)
  FragmentCall deferred_;                 // its args live in values_
};

using DistProcedure = rt::Task<Status> (*)(DistTxn& txn, const void* args, void* result);

struct CoordinatorOptions {
  uint32_t shard_id = 0;  // the coordinator's own shard (ids in TxnIds)
  uint32_t worker_id = 0;
  uint32_t max_retries = 100;
  // Optional backoff after a conflict (Aborted) attempt: sleep on `backoff_loop` for a
  // pseudo-random time in [d/2, d], d = min(backoff_max_ns, backoff_min_ns << attempt).
  // Without it a retry re-reads the same keys at once, and a lock held for network round
  // trips burns through max_retries in a few milliseconds. Off (nullptr) by default.
  rt::EventLoop* backoff_loop = nullptr;
  // The first transaction sequence number (40 bits in the TxnId). A shard's new leader starts
  // above every id its predecessor may have used (participants keep tombstones of those, F1):
  // the epoch in the top bits of the sequence.
  uint64_t first_seq = 1;
  uint64_t backoff_min_ns = 20'000;
  uint64_t backoff_max_ns = 2'000'000;
  // C4: how long a transaction whose last agent's shard is gone waits for that shard's new
  // leader (its other participants stay prepared meanwhile). Needs backoff_loop; 0: no wait.
  uint64_t in_doubt_wait_ns = 10'000'000'000;
};

struct CoordinatorStats {
  uint64_t committed = 0;
  uint64_t conflict_aborts = 0;
  uint64_t user_aborts = 0;
  uint64_t failed = 0;
  uint64_t cross_shard = 0;  // committed transactions that touched more than one shard
  uint64_t timeouts = 0;     // attempts lost to a Timeout (then retried, C1)
  uint64_t unavailable = 0;  // transactions failed because a shard was gone
  uint64_t in_doubt = 0;     // committed, but an install was not acknowledged (C2)
  uint64_t own_decided = 0;  // cross-shard commits decided by our own vote (C6)
};

class Coordinator {
 public:
  // links[s] reaches shard s. `epoch` is the cluster epoch as this worker knows it.
  Coordinator(CoordinatorOptions options, std::vector<ShardLink*> links, const uint64_t* epoch);

  // Runs `proc` to commit: Ok, UserAbort, Aborted (retries exhausted), Unavailable (a shard is
  // gone; message names it and says whether the outcome is in doubt, C2), or the procedure's
  // own error. `txn` is caller-owned so many can be in flight.
  rt::Task<Status> run(DistTxn& txn, DistProcedure proc, const void* args, void* result);

  // Interactive transactions, for a client that decides step by step (the Redis front end,
  // src/server/dist_kv.h): begin(txn), then txn's get/exec calls, then finish(txn) to commit
  // (on a failure before the decision it aborts every shard touched, C1, and returns the
  // failure: Aborted/Timeout are worth a retry from begin()) or abort(txn) to give up. No
  // retries and no backoff here: the caller owns the loop run() would be.
  void begin(DistTxn& txn);
  rt::Task<Status> finish(DistTxn& txn);
  rt::Task<void> abort(DistTxn& txn);

  const CoordinatorStats& stats() const { return stats_; }
  size_t shard_count() const { return links_.size(); }
  // Points shard `shard` at another link (its new leader after a failover). A transaction
  // suspended in the old link finishes there (with the old link's error, typically): the old
  // link must outlive every call already made through it. REQUIRES: shard < shard_count(),
  // link != nullptr, called on the coordinator's loop.
  void set_link(uint32_t shard, ShardLink* link);

 private:
  friend class DistTxn;
  // Sets *decided once the commit decision is taken (C1); from then on never abort.
  rt::Task<Status> commit(DistTxn& txn, bool* decided);
  rt::Task<Status> install_all(DistTxn& txn);
  rt::Task<Status> lock_all(DistTxn& txn);
  // The shards with writes (buffered or a fragment's), remote ones first and our own last.
  void order_written_shards(DistTxn& txn);
  rt::Task<void> abort_all(DistTxn& txn);
  // C4, the last agent gone (Unavailable): waits (bounded by in_doubt_wait_ns, on
  // backoff_loop) for its shard's new leader (set_link), whose log says whether it decided:
  // Ok with its TID and vector, NotFound (it did not: abort), or another error (in doubt).
  rt::Task<Status> ask_new_leader(DistTxn& txn, uint32_t shard, uint64_t* tid, txn::DepVec* vector);

  CoordinatorOptions options_;
  std::vector<ShardLink*> links_;
  std::vector<uint64_t> link_generation_;  // per shard: set_link calls
  const uint64_t* epoch_;
  uint64_t next_seq_ = 1;
  CoordinatorStats stats_;
};

}  // namespace shoal::dist

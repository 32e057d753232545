// A bank across shard processes, for checking serializability over real multi-process runs
// (`shoal bench bank --shards N`): the account layout, the distributed stored procedure, how a
// transaction picks its accounts, the per-worker history log, and the controller's checks.
//
// Accounts: the micro layout (KeyLayout in dist_micro.h: shard s owns the keys of its config
// partitions, keys_per_partition per partition; one table, id 0), each starting with
// kBankInitialBalance. A value is {balance, seq, writer}: seq is the account's version (every
// committed write is a read-modify-write of seq + 1) and writer the DistTxn id of the attempt
// that wrote it (0: the load), so every read knows the version it saw and who wrote it
// (src/check/history.h's model).
// Transactions: a transfer moves 1..20 from one account to another (with probability
// cross_shard_pct % the two are on different shards: the 2PC path); kBankAuditPct % are
// read-only audits of 4 accounts (2 + 2 on two shards when cross).
// History: each worker appends the committed attempt of every transaction (its reads as
// (key, seq, writer), its writes as (key, new seq)) to a BankHistory, capped at
// kBankHistoryMax transactions per worker; later ones are counted as dropped. A local run's
// workers also append them to history files in the run directory (bank_history_file.h), which
// survive a killed leader; the controller reads those (or, for a cluster elsewhere, pages the
// logs out: kHistory, control.h), drops what reads from unrecorded transactions
// (drop_unrecorded_readers), runs the Adya checker (src/check/serializability.h) and checks that
// the balances over all shards still sum to accounts x kBankInitialBalance.
//
// Threads: a BankHistory is written by its worker's loop thread and read only after that
// worker published the end of its load (an acquire of Worker::done); the functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shoal/status.h"
#include "src/base/env.h"
#include "src/check/history.h"
#include "src/dist/coordinator.h"
#include "src/server/bank_history_file.h"
#include "src/server/dist_micro.h"

namespace shoal::server {

inline constexpr uint32_t kBankTableId = 0;
static_assert(kBankTableId == kMicroTableId, "the shard server loads either in the same slot");
inline constexpr int64_t kBankInitialBalance = 1000;
inline constexpr uint32_t kBankAuditPct = 20;
inline constexpr uint32_t kBankAuditKeys = 4;
inline constexpr size_t kBankHistoryMax = 200'000;  // transactions per worker
// Transaction types in MicroStats::committed_by_type.
inline constexpr uint32_t kBankTransfer = 0;
inline constexpr uint32_t kBankAudit = 1;

struct BankAccount {
  int64_t balance;
  uint64_t seq;     // version: +1 per committed write
  uint64_t writer;  // DistTxn id of the attempt that wrote this version; 0: the load
};
static_assert(sizeof(BankAccount) == 24);

struct BankArgs {
  uint64_t keys[kBankAuditKeys];
  uint32_t shards[kBankAuditKeys];
  uint32_t count = 0;  // 2: a transfer keys[0] -> keys[1]; 4: an audit
  bool audit = false;
  int64_t amount = 0;
};

// What one committed attempt did (the procedure's result).
struct BankTxnRecord {
  uint64_t id = 0;  // DistTxn::id() of the committed attempt: unique in the cluster
  uint32_t reads = 0;
  uint32_t writes = 0;
  uint64_t read_key[kBankAuditKeys], read_seq[kBankAuditKeys], read_writer[kBankAuditKeys];
  uint64_t write_key[2], write_seq[2];
};

// Picks one transaction coordinated by `home` (see the header comment).
// REQUIRES: every shard owns >= 4 accounts; cross only when shard_count() > 1.
void pick_bank_txn(const KeyLayout& layout, uint32_t home, bool cross, Rng& rng, BankArgs* out);

// The stored procedure: args is a BankArgs, result a BankTxnRecord (rewritten per attempt).
rt::Task<Status> dist_bank(dist::DistTxn& txn, const void* args, void* result);

// One worker's log of committed transactions, bounded; with a file open (open_file: a local
// run's bank, bank_history_file.h) every transaction it takes is also appended there, where it
// outlives a SIGKILL of the process.
class BankHistory {
 public:
  explicit BankHistory(size_t cap = kBankHistoryMax) : cap_(cap) {}
  // Empties the log and closes the last load's file (flushing it).
  void clear() {
    txns_.clear();
    dropped_ = 0;
    file_.close();
  }
  // Starts this load's file (after clear()). IOError naming it: the log stays in memory only.
  [[nodiscard]] Status open_file(const std::string& path, const BankHistoryFileHeader& header) {
    return file_.open(path, header);
  }
  void add(const BankTxnRecord& r) {
    file_.add(
        {r.id, r.reads, r.writes, r.read_key, r.read_seq, r.read_writer, r.write_key, r.write_seq});
    if (txns_.size() < cap_) {
      txns_.push_back(r);
    } else {
      ++dropped_;
    }
  }
  // A committed transaction left out: on a replicated cluster only acknowledged ones are
  // recorded (a failover may discard the others, shard_load.cc bank_client); the file gets
  // its marker. `id`: the committed attempt's.
  void add_unrecorded(uint64_t id) {
    ++dropped_;
    file_.add_unacknowledged(id);
  }
  // Writes what the file holds (the worker's replication tick and the load's end call it).
  void flush() { file_.flush(); }
  size_t size() const { return txns_.size(); }
  uint64_t dropped() const { return dropped_; }  // full, or add_unrecorded
  // Appends transactions from index `from` to `out` as a JSON list body (no brackets) of flat
  // lists [id, R, key, seq, writer (R times), W, key, seq (W times)], stopping before `out`
  // would exceed max_bytes. Returns the index after the last one appended.
  size_t page(size_t from, size_t max_bytes, std::string* out) const;

 private:
  size_t cap_;
  std::vector<BankTxnRecord> txns_;
  uint64_t dropped_ = 0;
  BankHistoryWriter file_;
};

// Controller side: appends the transactions of one page's "txns" list to `out`.
// InvalidArgument on a malformed entry.
[[nodiscard]] Status parse_bank_page(const nlohmann::json& txns,
                                     std::vector<check::TxnRecord>* out);

// Removes every transaction that read a version whose writer is not in the history (its log
// was full), then those that read theirs, transitively. What is left is checked soundly: an
// edge between two kept transactions stands for a path in the full history, so no cycle is
// invented (some may be missed). Returns how many were removed.
size_t drop_unrecorded_readers(check::History* history);

// Adds a stand-in for every transaction that recorded transactions read from but that is not
// recorded itself: a transaction of the writes read from it (each (key, version) once), no
// reads. Sound like drop_unrecorded_readers, but keeps the readers: the graph gains only
// edges of the full history (the stand-in's reads and unread writes are missing, so some
// cycles may be missed; none is invented). A stand-in for a transaction a failover discarded
// meets the version's later writer: two committed writers of one version (Impossible), as it
// should, since a recorded transaction read it. Returns how many were added.
size_t add_stand_ins(check::History* history);

// How check_bank_history's report names what it could not record and the transactions.
struct BankHistoryNotes {
  std::string unrecorded;  // why transactions went unrecorded, for the report's line
  // Transactions may have gone unrecorded beyond `unrecorded` (a killed process's last
  // acknowledgements): readers of unrecorded versions are left out even when it is 0.
  bool unrecorded_unknown = false;
  // Instead of leaving out the readers of unrecorded transactions (add_stand_ins): on a hot
  // bank one unrecorded write leaves out nearly everything after it (readers of readers).
  bool stand_in_unrecorded = false;
  std::string id_legend;  // how to read the transaction ids of a witness
  std::string (*readable_ids)(const std::string& text) = nullptr;  // nullptr: ids as they are
};

// The Adya check (src/check/serializability.h) of a bank history of committed transactions, of
// which `unrecorded` more committed (or may have) without being recorded: the transactions
// that read from those are dropped first (drop_unrecorded_readers; also when
// notes.unrecorded_unknown). Adds the report's lines
// to *text, the fields serializable, history_txns, history_edges, history_not_recorded,
// history_left_out, anomalies and anomaly_counts to *json, and one failure per anomaly kind
// found to *failures.
void check_bank_history(check::History history, uint64_t unrecorded, const BankHistoryNotes& notes,
                        std::vector<std::string>* failures, std::string* text,
                        nlohmann::json* json);

// "T<id>" in a checker explanation rewritten as "T<shard>.<worker>.<seq>" (dist::make_txn_id).
std::string readable_txn_ids(const std::string& text);

}  // namespace shoal::server

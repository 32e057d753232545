// Recorded transaction histories, the input of the serializability checker.
//
// Model: a history is a list of transactions, each with a unique non-zero id, committed or
// aborted, and its operations in program order. An operation reads or writes one version of a
// key; a version is a per-key sequence number that totally orders that key's versions. Version
// 0 of every key is written by a virtual initial transaction (id kInitialTxn) before the
// history starts. Workloads make versions recoverable by always read-modify-writing a sequence
// number kept in the value (new version = read version + 1) and storing the writer's id there
// too, so a read also knows who wrote what it saw (Op::writer).
//
// Recording: HistoryRecorder gives every thread its own ThreadLog; a thread appends only to its
// own log, so recording needs no locks and no atomics. merge() concatenates the logs once all
// threads have stopped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "src/base/assert.h"

namespace shoal::check {

using TxnId = uint64_t;

// The virtual transaction that wrote version 0 of every key.
inline constexpr TxnId kInitialTxn = 0;
// Op::writer of a read whose writer is not known (only the version is).
inline constexpr TxnId kUnknownWriter = ~TxnId{0};

enum class OpKind : uint8_t { kRead, kWrite };

struct Op {
  OpKind kind;
  uint64_t key;
  uint64_t version;
  // Reads only: the id the value carried as its writer, or kUnknownWriter. Lets the checker
  // tell which of two transactions claiming the same version was actually seen.
  TxnId writer = kUnknownWriter;
};

struct TxnRecord {
  TxnId id = kInitialTxn;
  bool committed = true;
  std::vector<Op> ops;

  void read(uint64_t key, uint64_t version, TxnId writer = kUnknownWriter) {
    ops.push_back(Op{OpKind::kRead, key, version, writer});
  }
  void write(uint64_t key, uint64_t version) {
    ops.push_back(Op{OpKind::kWrite, key, version, kUnknownWriter});
  }
};

struct History {
  std::vector<TxnRecord> txns;
};

// Per-thread history logs merged at the end. Thread-safe by construction: thread i touches only
// thread_log(i), and each log is cache-line aligned so neighbours do not false-share.
class HistoryRecorder {
 public:
  class alignas(64) ThreadLog {
   public:
    // A fresh id, unique across all logs of this recorder and never kInitialTxn: ids are dealt
    // round-robin (thread i gets i+1, i+1+threads, ...) so they stay small and readable.
    TxnId next_txn_id() { return txn_count_++ * threads_ + thread_index_ + 1; }
    void append(TxnRecord txn) { txns_.push_back(std::move(txn)); }
    size_t size() const { return txns_.size(); }

   private:
    friend class HistoryRecorder;
    ThreadLog(size_t thread_index, size_t threads)
        : thread_index_(thread_index), threads_(threads) {}
    uint64_t thread_index_;
    uint64_t threads_;
    uint64_t txn_count_ = 0;
    std::vector<TxnRecord> txns_;
  };

  explicit HistoryRecorder(size_t threads) {
    SHOAL_ASSERT(threads > 0, "a recorder needs at least one thread log");
    for (size_t i = 0; i < threads; ++i)
      logs_.push_back(std::unique_ptr<ThreadLog>(new ThreadLog(i, threads)));
  }

  // REQUIRES: thread_index < threads; only one thread uses a given log at a time.
  ThreadLog& thread_log(size_t thread_index) {
    SHOAL_ASSERT(thread_index < logs_.size(), "thread %zu of %zu", thread_index, logs_.size());
    return *logs_[thread_index];
  }

  // Moves every log's transactions into one history (log order, then append order); the logs
  // are left empty. REQUIRES: no thread is appending.
  History merge() {
    History h;
    size_t total = 0;
    for (const auto& log : logs_) total += log->txns_.size();
    h.txns.reserve(total);
    for (auto& log : logs_) {
      for (TxnRecord& t : log->txns_) h.txns.push_back(std::move(t));
      log->txns_.clear();
    }
    return h;
  }

 private:
  std::vector<std::unique_ptr<ThreadLog>> logs_;
};

}  // namespace shoal::check

// EngineKvBackend: the Redis command layer's KvBackend (src/resp/kv_backend.h) over a local
// engine's BytesTable (src/txn/bytes_table.h). It depends on resp and txn; neither depends on
// it.
//
// Each KvTxn (one per session) owns a txn::Txn and runs its transactions on the caller's thread
// (every call's task completes inline, never suspending):
// begin() -> Txn::begin, get/put/del/scan -> the Txn's byte-key calls, commit() -> Silo's
// commit (certify + install), abort() -> Txn::abort. Serializable as any engine transaction:
// reads and scanned ranges are validated at commit. CommitInfo::durable_token is the commit TID
// of a transaction that wrote, and the newest version read by one that did not (0 if none).
// No commit hook runs: transactions through this backend are not replicated (a replicated
// server drives the Txn calls from its workers, where the stream's appender lives).
//
// Threads: open() and count_keys() from any thread; each KvTxn on one thread at a time, which
// quiesces EBR (src/base/ebr.h) every 64 transactions and backs off after a conflict as a
// Worker does.
// REQUIRES: the engine and the table outlive the backend and every KvTxn it opened.
#pragma once

#include <memory>

#include "src/resp/kv_backend.h"
#include "src/txn/engine.h"

namespace shoal::kv {

class EngineKvBackend final : public resp::KvBackend {
 public:
  EngineKvBackend(txn::Engine& engine, txn::BytesTable& table) : engine_(engine), table_(table) {}
  std::unique_ptr<resp::KvTxn> open() override;
  // Records in the table: live keys, and in-flight inserts' placeholders while they last.
  rt::Task<Result<uint64_t>> count_keys() override { co_return table_.record_count(); }

 private:
  txn::Engine& engine_;
  txn::BytesTable& table_;
};

// A backend that owns its engine and table ("kv"), for tests, benchmarks and tools.
class OwnedEngineKvBackend final : public resp::KvBackend {
 public:
  explicit OwnedEngineKvBackend(txn::EngineOptions options = {});
  std::unique_ptr<resp::KvTxn> open() override { return backend_->open(); }
  rt::Task<Result<uint64_t>> count_keys() override { return backend_->count_keys(); }
  txn::Engine& engine() { return *engine_; }
  txn::BytesTable& table() { return *table_; }

 private:
  std::unique_ptr<txn::Engine> engine_;
  txn::BytesTable* table_;
  std::unique_ptr<EngineKvBackend> backend_;
};

}  // namespace shoal::kv

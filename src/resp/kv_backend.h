// KvBackend / KvTxn: the narrow interface the Redis command layer (commands.h) drives. The
// storage engine implements it; tests implement it over a std::map (testing/mem_backend.h).
//
// Data model: an ordered space of byte-string keys (1 B to 8 KiB; compared as unsigned bytes,
// memcmp order) to byte-string values (stored values are the command layer's encoding,
// value_format.h: at most kMaxStoredValueBytes). The backend never interprets them.
//
// Transactions. The command layer runs every data command as one transaction, and every EXEC
// as one transaction holding all its queued commands:
//     txn.begin(); get/put/del/scan ...; txn.commit()   (or txn.abort())
// and retries the whole transaction, from begin(), when an operation or commit() returns
// Aborted. The contract the engine must meet:
//   - Serializable: a committed transaction's reads and writes take effect at one point in a
//     total order of committed transactions (Silo OCC: the read set validated at commit).
//   - Reads see the transaction's own earlier writes (get and scan after put/del).
//   - put/del are buffered: nothing is visible to others before commit() returns committed,
//     and nothing at all after abort() or a failed commit.
//   - Versions: get() reports a version for the key as read (found or not). A committed write
//     of the key (put or del, even of an equal value) must change it: Silo's record TID. An
//     absent key may report kAbsentVersion, or a tombstone's TID while one exists; so a key
//     absent at WATCH and absent again at EXEC may compare equal although it was created and
//     deleted in between (Redis would abort that EXEC; documented difference).
//   - WATCH maps onto this: WATCH key runs a read-only transaction that get()s the key and
//     remembers (version, live). EXEC begins its transaction, get()s every watched key first
//     and compares; a difference aborts the transaction (abort()) and EXEC replies a null
//     array. Because those reads are in the EXEC transaction's read set, commit() validates
//     that the watched keys are still at the versions WATCH saw at the commit point, so "no
//     watched key changed between WATCH and EXEC" holds atomically with EXEC's writes.
//   - Scans are in key order and are part of the transaction (an engine that validates the
//     scanned range's nodes prevents phantoms; one that only validates the records returned
//     gives SCAN Redis's weaker guarantee, which is all SCAN promises).
//   - commit() of a transaction that wrote nothing may skip validation for a single get (a
//     one-read transaction is trivially serializable).
//   - Errors: Aborted (from any call) means "conflict: abort() and retry"; any other error is
//     reported to the client as "-ERR <message>" after abort().
// Durability: commit() returns once the transaction is committed (serialized); its
// CommitInfo::durable_token names what must be durable before the reply may leave (0:
// nothing). A read-only transaction that read a version not yet durable must return a token
// too (covering the newest version it read): otherwise a client could be shown a value that a
// crash then takes back. The connection holds replies behind the token (connection.h); the
// server decides when a token is durable (the vectorized watermark) or treats every token as
// durable when started to reply at the speculative commit.
// Threads: a KvTxn belongs to one session (one connection thread) and is reused for its
// transactions one after another; KvBackend::open() is thread-safe.
// Coroutines: every call that may wait returns an rt::Task (src/runtime/task.h), so a server
// hosts sessions on its event loop: a cross-shard transaction's call suspends its session's
// coroutine for the round trip while the loop serves others. A backend whose data is at hand
// answers with a ready task (rt::Task<T>::ready: no coroutine frame; the shard server's local
// keys) or completes the task inline without suspending (MemBackend): the caller's co_await
// then costs a call, or a pooled coroutine frame and a call. A ready task's call has taken
// effect when it returns (a put is staged even if its task is dropped unawaited); a coroutine's
// only once awaited. Tasks are awaited at once, one at a time per KvTxn; the pointers and views
// passed stay valid until the task completes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"
#include "src/runtime/task.h"

namespace shoal::resp {

inline constexpr size_t kMaxKeyBytes = 8 * 1024;
inline constexpr size_t kMaxValueBytes = 1 << 20;  // a Redis string value
inline constexpr uint64_t kAbsentVersion = 0;

struct KeyValue {
  std::string key;
  std::string value;
};

// Keys k with start <= k (start < k when !start_inclusive) and, unless end is empty, k < end.
struct ScanRange {
  std::string_view start;
  bool start_inclusive = true;
  std::string_view end;
};

struct CommitInfo {
  uint64_t durable_token = 0;  // 0: the reply need not wait
};

class KvTxn {
 public:
  virtual ~KvTxn() = default;

  // Starts a transaction. REQUIRES: none open (the previous one committed or aborted).
  virtual void begin() = 0;
  // Ok and *value (replaced) when the key exists, NotFound when not; *version set in both
  // cases. REQUIRES: a transaction is open; 1 <= key.size() <= kMaxKeyBytes.
  virtual rt::Task<Status> get(std::string_view key, std::string* value, uint64_t* version) = 0;
  // Buffers a write. REQUIRES: as get; value.size() <= kMaxStoredValueBytes (value_format.h).
  virtual rt::Task<Status> put(std::string_view key, std::string_view value) = 0;
  // Buffers a delete; deleting an absent key is not an error.
  virtual rt::Task<Status> del(std::string_view key) = 0;
  // Appends to *out up to `limit` keys of `range` in ascending order with their values, each
  // cut to its first value_prefix_bytes bytes (SCAN reads only the value's header, so a scan
  // batch costs keys, not megabyte values). Fewer than `limit` appended means the range is
  // exhausted. REQUIRES: a transaction is open; 1 <= limit <= 100000.
  virtual rt::Task<Status> scan(const ScanRange& range, size_t limit, size_t value_prefix_bytes,
                                std::vector<KeyValue>* out) = 0;
  // Ok: committed. Aborted: a conflict, nothing installed, retry. Other: failed, nothing
  // installed. Either way the transaction is closed.
  virtual rt::Task<Result<CommitInfo>> commit() = 0;
  // Closes the open transaction, installing nothing (a distributed backend releases what the
  // shards hold for it before the task completes). No-op when none is open.
  virtual rt::Task<void> abort() = 0;
};

class KvBackend {
 public:
  virtual ~KvBackend() = default;
  // A transaction context for one session, reused for all its transactions.
  virtual std::unique_ptr<KvTxn> open() = 0;
  // A transaction context whose transactions may stay open while its session waits for its
  // client between requests (the client protocol's interactive transactions, where the Redis
  // layer's never do): it must not hold anything other sessions need meanwhile. A backend
  // whose open() contexts already share nothing returns one of those.
  virtual std::unique_ptr<KvTxn> open_interactive() { return open(); }
  // Keys stored (DBSIZE). Not transactional; it may include keys whose expiry has passed
  // (as Redis's DBSIZE does until they are reclaimed).
  virtual rt::Task<Result<uint64_t>> count_keys() = 0;
};

}  // namespace shoal::resp

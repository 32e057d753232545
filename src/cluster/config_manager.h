// ConfigManager: the linearizable store that holds what recovery must agree on
// (docs/REPLICATION.md, "Failover"; Mako's configuration manager): the epoch, each shard's leader
// and members, each shard's final watermark of an old epoch and the finalized vector watermark
// (FVW). The typed view of those keys is ClusterStateStore (src/cluster/cluster_state.h); this file
// is the key/value layer underneath, with two implementations of one contract:
//
//   InMemoryConfigManager  one process, time from an Env (runs under the simulator);
//   EtcdConfigManager      a real etcd 3.4 cluster (src/cluster/etcd_config_manager.h).
//
// The contract (etcd's, so both behave alike and one conformance suite tests both):
//   - One global revision counter, starting at 1 for an empty store; every successful write
//     (put, remove of an existing key, a txn that puts, a lease expiry or revoke that removes
//     keys) moves it up by exactly one, and the written keys get it as their mod_revision.
//     Revisions never go down.
//   - A compare on mod_revision 0 means "the key does not exist".
//   - txn(): if every compare holds, every put is applied, all at one revision; otherwise none
//     is, and the current value of every compared key comes back.
//   - A put attached to a lease disappears when the lease expires (its TTL passes without a
//     keep_alive) or is revoked. The server may round a TTL up (etcd: whole seconds, and at
//     least its minimum); grant_lease returns the TTL granted.
//   - wait_for_change() polls get() (bounded by timeout_ms; the poll period is the
//     implementation's) rather than using etcd's watch stream: recovery waits for rare events
//     and a few gets per second per waiter are nothing to the store.
//
// Errors: no exceptions. A store that cannot be reached is Unavailable naming where it was
// looked for; a lease that no longer exists is NotFound; every call returns within its bound
// (EtcdOptions::timeout_ms for etcd, at once in memory; wait_for_change: its timeout_ms plus
// one call).
//
// Threads: both implementations are safe to call from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"
#include "src/base/env.h"

namespace shoal::cluster {

// A stored value and the revision that last wrote it.
struct Versioned {
  std::string value;
  int64_t mod_revision = 0;
  int64_t lease = 0;  // 0: not attached to a lease
};

struct KeyValue {
  std::string key;
  Versioned versioned;
};

// Holds when `key`'s mod_revision equals expected_mod_revision (0: the key does not exist).
struct TxnCompare {
  std::string key;
  int64_t expected_mod_revision = 0;
};

struct TxnPut {
  std::string key;
  std::string value;
  int64_t lease = 0;  // 0: none
};

struct TxnResult {
  bool succeeded = false;
  // Succeeded with puts: the revision they were written at. Otherwise the store's revision.
  int64_t revision = 0;
  // Failed: the current value of each compared key, in the order of the compares.
  std::vector<std::optional<Versioned>> current;
};

// cas(): won, or lost with what is there now (so the caller can retry against it).
struct CasResult {
  bool won = false;
  int64_t mod_revision = 0;          // won: the new value's revision
  std::optional<Versioned> current;  // lost: the key now (nullopt: absent)
};

struct Lease {
  int64_t id = 0;
  uint64_t ttl_ms = 0;  // as granted (may be more than asked)
};

// wait_for_change(): whether the key moved past after_revision, and the key now.
struct Change {
  bool changed = false;
  std::optional<Versioned> current;
};

class ConfigManager {
 public:
  virtual ~ConfigManager() = default;

  // The key, or nullopt when it does not exist.
  [[nodiscard]] virtual Result<std::optional<Versioned>> get(std::string_view key) = 0;
  // Every key starting with `prefix`, in key order. REQUIRES: !prefix.empty().
  [[nodiscard]] virtual Result<std::vector<KeyValue>> range(std::string_view prefix) = 0;
  // Writes unconditionally; returns the new revision. NotFound if `lease` is set and unknown.
  [[nodiscard]] virtual Result<int64_t> put(std::string_view key, std::string_view value,
                                            int64_t lease = 0) = 0;
  // Removes the key; true if it existed.
  [[nodiscard]] virtual Result<bool> remove(std::string_view key) = 0;
  // All compares, then (if all hold) all puts, atomically. REQUIRES: puts name distinct keys.
  [[nodiscard]] virtual Result<TxnResult> txn(const std::vector<TxnCompare>& compares,
                                              const std::vector<TxnPut>& puts) = 0;

  // REQUIRES: ttl_ms > 0.
  [[nodiscard]] virtual Result<Lease> grant_lease(uint64_t ttl_ms) = 0;
  // Restarts the lease's TTL. NotFound if it expired or was revoked.
  [[nodiscard]] virtual Status keep_alive(int64_t lease) = 0;
  // Ends the lease now, removing its keys. NotFound if it is already gone.
  [[nodiscard]] virtual Status revoke(int64_t lease) = 0;

  // Compare-and-swap on one key: writes `value` if the key's mod_revision is
  // expected_mod_revision (0: the key must not exist). A txn of one compare and one put.
  [[nodiscard]] Result<CasResult> cas(std::string_view key, int64_t expected_mod_revision,
                                      std::string_view value, int64_t lease = 0);

  // Returns once the key changed after after_revision (now present with a larger
  // mod_revision, or absent when after_revision > 0 said it existed), or when timeout_ms has
  // passed (changed = false). Polls get() every poll_interval_ms(), sleeping through env().
  [[nodiscard]] Result<Change> wait_for_change(std::string_view key, int64_t after_revision,
                                               uint64_t timeout_ms);

 protected:
  virtual Env& env() = 0;
  virtual uint64_t poll_interval_ms() const = 0;
};

// The smallest key that sorts after every key starting with `prefix` (etcd's range_end), or
// "" when there is none (a prefix of 0xff bytes only).
std::string prefix_range_end(std::string_view prefix);

// The store in this process: a map, a revision counter and leases whose expiry is read from
// `env` (so under SimEnv they expire in virtual time). Leases are expired lazily, at the start
// of every call, each expiry (like etcd's revoke) removing its keys at one new revision.
// Under SimEnv, wait_for_change sleeps through SimEnv::sleep_ns, which runs the simulation:
// call it from the test's driving code, never from inside a simulated task.
class InMemoryConfigManager final : public ConfigManager {
 public:
  // REQUIRES: env outlives this; poll_interval_ms > 0.
  explicit InMemoryConfigManager(Env& env, uint64_t poll_interval_ms = 1);

  Result<std::optional<Versioned>> get(std::string_view key) override;
  Result<std::vector<KeyValue>> range(std::string_view prefix) override;
  Result<int64_t> put(std::string_view key, std::string_view value, int64_t lease = 0) override;
  Result<bool> remove(std::string_view key) override;
  Result<TxnResult> txn(const std::vector<TxnCompare>& compares,
                        const std::vector<TxnPut>& puts) override;
  Result<Lease> grant_lease(uint64_t ttl_ms) override;
  Status keep_alive(int64_t lease) override;
  Status revoke(int64_t lease) override;

  // The store's current revision (tests).
  int64_t revision();

 protected:
  Env& env() override { return env_; }
  uint64_t poll_interval_ms() const override { return poll_interval_ms_; }

 private:
  struct LeaseState {
    uint64_t ttl_ms = 0;
    uint64_t expires_ns = 0;
  };
  // REQUIRES: mu_ held.
  void expire_leases_locked();
  void drop_lease_locked(int64_t lease);
  std::optional<Versioned> lookup_locked(const std::string& key) const;

  Env& env_;
  const uint64_t poll_interval_ms_;
  std::mutex mu_;
  std::map<std::string, Versioned, std::less<>> kv_;
  std::map<int64_t, LeaseState> leases_;
  int64_t revision_ = 1;  // etcd's empty store is at revision 1
  int64_t next_lease_ = 1;
};

}  // namespace shoal::cluster

// ClusterStateStore: the typed view of what recovery keeps in the configuration manager (a
// ConfigManager, src/cluster/config_manager.h), as JSON values under /shoal/<cluster>/
// (docs/OPERATIONS.md, "The configuration manager"):
//
//   epoch                               {"epoch": E}                      the current epoch
//   shards/<s>                          {"leader_replica": r, "members": [..], "since_epoch": E}
//   epochs/<E>/final_watermark/<s>      {"watermark": w}   shard s's last watermark in epoch E
//                                                          (kInfiniteWatermark: healthy shard)
//   epochs/<E>/fvw                      {"fvw": [w0, w1, ..]}  the finalized vector watermark
//   epochs/<E>/floor/<s>                {"floor": f}       shard s failed over at the end of
//                                                          epoch E: every TID it logged until
//                                                          then is <= f, every later one > f
//   alive/<s>                           {"replica": r}     on the leader's lease: vanishes when
//                                                          the leader stops renewing it
//
// Every change is a compare-and-swap, so racing callers agree: begin_epoch_change moves the
// epoch and one shard's leader in one txn conditioned on the epoch key's revision (exactly
// one of two racing callers wins; the loser gets the winner's state); a final watermark and
// the FVW of an epoch are written once (the first publisher wins, later ones get what is
// stored), so they are final.
//
// Everything read is validated: a value that is not the JSON expected (malformed, a field
// missing or of the wrong type, a leader that is not a member, shard keys with gaps) is
// Corruption naming the key, never a crash.
//
// Threads: as the ConfigManager underneath (any); the store itself holds no mutable state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shoal/status.h"
#include "src/cluster/config_manager.h"

namespace shoal::cluster {

// A healthy shard's final watermark: it lost nothing, so it bounds nothing.
inline constexpr uint64_t kInfiniteWatermark = UINT64_MAX;

struct ShardState {
  uint32_t leader_replica = 0;
  std::vector<uint32_t> members;  // replica ids; holds leader_replica
  uint64_t since_epoch = 0;       // the epoch in which leader_replica took over
  int64_t mod_revision = 0;       // of the shard's key (read only)
};

struct ClusterState {
  uint64_t epoch = 0;
  int64_t epoch_revision = 0;      // of the epoch key (read only)
  std::vector<ShardState> shards;  // shards[s] is shard s
};

struct EpochChange {
  bool won = false;
  ClusterState state;  // after the change: ours if we won, else what is stored now
};

class ClusterStateStore {
 public:
  // REQUIRES: `manager` outlives this; cluster is non-empty and holds no '/'.
  ClusterStateStore(ConfigManager& manager, std::string cluster);

  const std::string& prefix() const { return prefix_; }  // "/shoal/<cluster>/"
  std::string epoch_key() const;
  std::string shard_key(uint32_t shard) const;
  std::string final_watermark_key(uint64_t epoch, uint32_t shard) const;
  std::string fvw_key(uint64_t epoch) const;
  std::string epoch_floor_key(uint64_t epoch, uint32_t shard) const;
  std::string alive_key(uint32_t shard) const;

  // Creates epoch 1 with these shards (their since_epoch is set to 1) unless an epoch exists:
  // true if we created it, false if it was there (left unchanged). InvalidArgument for no
  // shards, a shard without members or a leader not among its members.
  [[nodiscard]] Result<bool> initialize(const std::vector<ShardState>& shards);

  // NotFound when the cluster was never initialized.
  [[nodiscard]] Result<ClusterState> load_state();

  // Moves the cluster from expected_epoch to expected_epoch + 1 with new_leader leading
  // `shard`, if the stored epoch is still expected_epoch. Lost (won = false) if another change
  // came first. InvalidArgument for an unknown shard or a new_leader not among its members.
  [[nodiscard]] Result<EpochChange> begin_epoch_change(uint64_t expected_epoch, uint32_t shard,
                                                       uint32_t new_leader);

  // A whole cluster restarting from disk (`cluster up` over its run directory, every process
  // down): moves the cluster from expected_epoch to new_epoch with every shard's since_epoch
  // set to new_epoch (each leader takes over again in it) and its leader kept or, when
  // `leaders` is given (one per shard), set to leaders[s] (`cluster up` restarts a shard with
  // the replica whose log reaches furthest: pick_restart_leader), in one txn conditioned on the
  // epoch key and every shard key, if the stored epoch is still expected_epoch. Lost (won =
  // false) if another change came first. InvalidArgument when `leaders` is not empty and does
  // not name one member of each shard (nothing written).
  // REQUIRES: new_epoch > expected_epoch.
  [[nodiscard]] Result<EpochChange> restart_in_epoch(uint64_t expected_epoch, uint64_t new_epoch,
                                                     const std::vector<uint32_t>& leaders = {});

  // Records shard's final watermark for `epoch` unless one is recorded; returns the stored
  // one (ours, or the earlier publisher's).
  [[nodiscard]] Result<uint64_t> publish_final_watermark(uint64_t epoch, uint32_t shard,
                                                         uint64_t watermark);
  // As publish_final_watermark, by the leader `leader` of `shard` in `leader_epoch`, and only
  // while etcd still names it (no appointment after leader_epoch; the shard's key unchanged
  // since it was read, in the same transaction as the write). Aborted ("deposed") once another
  // replica was appointed or the epoch moved the shard on: a leader that hung before publishing
  // must not fence an epoch after its successor's replicas read the fences (docs/REPLICATION.md,
  // "Failover").
  [[nodiscard]] Result<uint64_t> publish_final_watermark_as_leader(uint64_t epoch, uint32_t shard,
                                                                   uint64_t watermark,
                                                                   uint32_t leader,
                                                                   uint64_t leader_epoch);
  [[nodiscard]] Result<std::optional<uint64_t>> final_watermark(uint64_t epoch, uint32_t shard);

  // Everything a new leader of `shard` records of the failover that ended `epoch`, as
  // publish_final_watermark_as_leader, publish_epoch_floor and publish_fvw (with every other
  // shard healthy) would, but in one txn when none of the three is stored yet: a failover waits
  // for these writes, and each etcd write is a consensus round and an fsync. When some are
  // stored (an earlier attempt of ours), it falls back to the three calls, which keep what is
  // stored. Returns what is stored afterwards; Aborted ("deposed") as
  // publish_final_watermark_as_leader.
  struct TakeoverRecord {
    uint64_t final_watermark = 0;
    uint64_t floor = 0;
    std::vector<uint64_t> fvw;
  };
  [[nodiscard]] Result<TakeoverRecord> publish_takeover(uint64_t epoch, uint32_t shard,
                                                        uint64_t final_watermark, uint64_t floor,
                                                        uint32_t leader, uint64_t leader_epoch);

  // Records the floor of shard's TIDs at the end of `epoch` (its failover: see the keys above)
  // unless one is recorded; returns the stored one. With the final watermark F it bounds what
  // the failover lost: shard's TIDs in (F, floor].
  [[nodiscard]] Result<uint64_t> publish_epoch_floor(uint64_t epoch, uint32_t shard,
                                                     uint64_t floor);
  [[nodiscard]] Result<std::optional<uint64_t>> epoch_floor(uint64_t epoch, uint32_t shard);

  // Records the FVW of `epoch` unless one is recorded; returns the stored one.
  // REQUIRES: !fvw.empty().
  [[nodiscard]] Result<std::vector<uint64_t>> publish_fvw(uint64_t epoch,
                                                          const std::vector<uint64_t>& fvw);
  [[nodiscard]] Result<std::optional<std::vector<uint64_t>>> load_fvw(uint64_t epoch);

  // Says `replica` leads `shard` while `lease` lives (ConfigManager::grant_lease/keep_alive).
  [[nodiscard]] Status announce_alive(uint32_t shard, uint32_t replica, int64_t lease);
  // The replica whose liveness key for `shard` is there, or nullopt once its lease is gone.
  [[nodiscard]] Result<std::optional<uint32_t>> alive_replica(uint32_t shard);

 private:
  // Writes `value` at `key` if absent; returns the value stored there afterwards.
  Result<std::string> create_once(const std::string& key, const std::string& value);
  // create_once of {field: value}; returns the number stored there afterwards.
  Result<uint64_t> create_u64_once(const std::string& key, const char* field, uint64_t value);
  // The number in {field: n} at `key`, nullopt if absent.
  Result<std::optional<uint64_t>> get_u64(const std::string& key, const char* field);
  // The state, checked to name `leader` as `shard`'s leader appointed in leader_epoch:
  // Aborted ("deposed") otherwise, InvalidArgument for an unknown shard.
  Result<ClusterState> load_as_leader(uint64_t epoch, uint32_t shard, uint32_t leader,
                                      uint64_t leader_epoch);
  // The JSON object stored at `key`, nullopt if absent, Corruption naming the key if not one.
  Result<std::optional<nlohmann::json>> get_object(const std::string& key);

  ConfigManager& manager_;
  const std::string prefix_;
};

// The replica a shard restarting from disk should restart as its leader. reach[r]: how far
// replica r's log reaches on each stream (its chosen index per stream, read from its directory:
// repl::read_acceptor_reach), nullopt when r cannot lead (its directory holds no log). A
// replica's lag is the most it trails the furthest replica on any stream; a candidate lagging
// beyond the chosen slots the other acceptors retain cannot complete phase 1 (promises do not
// page from the WAL), while any replica that completes it is a safe leader. Rule: keep `named`
// (etcd's) while it can lead and lags by at most keep_lag_slots; else the replica of least
// lag, `named` if it is one of them, else the lowest id. With no replica able to lead, `named`
// (the caller refuses to restart). Pure: no I/O.
struct RestartLeaderPick {
  uint32_t leader = 0;
  bool named_can_lead = true;
  uint64_t named_lag = 0;  // the slots `named` trails by on `stream` (when it can lead)
  uint32_t stream = 0;     // where it trails most
  uint32_t ahead = 0;      // a replica furthest on that stream (`leader` when it is one)
};
[[nodiscard]] RestartLeaderPick pick_restart_leader(
    const std::vector<std::optional<std::vector<uint64_t>>>& reach, uint32_t named,
    uint64_t keep_lag_slots);

}  // namespace shoal::cluster

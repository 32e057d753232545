#include "src/server/server_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "src/repl/follower.h"
#include "src/repl/leader.h"

namespace shoal::server {

namespace {

uint64_t load(const std::atomic<uint64_t>& a) {
  return a.load(std::memory_order_relaxed);
}

template <typename A, typename B>
void copy_counts(const A& from, B* to) {
  for (size_t i = 0; i < from.size(); ++i) (*to)[i] = load(from[i]);
}

template <typename A>
void add_counts(const A& from, A* to) {
  for (size_t i = 0; i < from.size(); ++i) (*to)[i] += from[i];
}

}  // namespace

void WorkerMetrics::committed(uint32_t type, bool cross, bool user_abort, uint64_t latency_ns) {
  type = std::min(type, kTypesMax - 1);
  bump(cross ? committed_cross_[type] : committed_local_[type], 1);
  if (user_abort) bump(user_aborts_[type], 1);
  (cross ? speculative_cross_ : speculative_local_).observe(latency_ns);
}

void WorkerMetrics::failed(uint32_t type, Failure why) {
  type = std::min(type, kTypesMax - 1);
  Counts& c = why == Failure::kUnavailable ? failed_unavailable_
              : why == Failure::kTimeout   ? failed_timeout_
                                           : failed_other_;
  bump(c[type], 1);
}

void WorkerMetrics::set_coordinator(uint64_t conflict_aborts, uint64_t timeouts,
                                    uint64_t in_doubt) {
  coordinator_conflicts_.store(conflict_aborts, std::memory_order_relaxed);
  coordinator_timeouts_.store(timeouts, std::memory_order_relaxed);
  in_doubt_.store(in_doubt, std::memory_order_relaxed);
}

void WorkerMetrics::set_connections(uint64_t incoming, uint64_t peers_up) {
  incoming_.store(incoming, std::memory_order_relaxed);
  peers_up_.store(peers_up, std::memory_order_relaxed);
}

void WorkerMetrics::set_vector_watermark(uint32_t shard, uint64_t watermark) {
  if (shard < kShardsMax) vector_watermark_[shard].store(watermark, std::memory_order_relaxed);
}

void WorkerMetrics::set_peer_rpc(uint32_t shard, uint64_t calls, uint64_t timeouts,
                                 uint64_t retransmits) {
  if (shard >= kShardsMax) return;
  peer_calls_[shard].store(calls, std::memory_order_relaxed);
  peer_timeouts_[shard].store(timeouts, std::memory_order_relaxed);
  peer_retransmits_[shard].store(retransmits, std::memory_order_relaxed);
}

WorkerMetrics::Totals WorkerMetrics::totals() const {
  Totals t;
  copy_counts(committed_local_, &t.committed_local);
  copy_counts(committed_cross_, &t.committed_cross);
  copy_counts(user_aborts_, &t.user_aborts);
  copy_counts(failed_unavailable_, &t.failed_unavailable);
  copy_counts(failed_timeout_, &t.failed_timeout);
  copy_counts(failed_other_, &t.failed_other);
  copy_counts(vector_watermark_, &t.vector_watermark);
  copy_counts(peer_calls_, &t.peer_calls);
  copy_counts(peer_timeouts_, &t.peer_timeouts);
  copy_counts(peer_retransmits_, &t.peer_retransmits);
  t.conflicts = conflicts_total();
  t.timeouts = load(coordinator_timeouts_);
  t.in_doubt = load(in_doubt_);
  t.unacknowledged = load(unacknowledged_);
  t.incoming = load(incoming_);
  t.peers_up = load(peers_up_);
  t.speculative_local = speculative_local_.snapshot();
  t.speculative_cross = speculative_cross_.snapshot();
  t.commit_latency = commit_latency_.snapshot();
  return t;
}

void WorkerMetrics::Totals::add(const Totals& o) {
  add_counts(o.committed_local, &committed_local);
  add_counts(o.committed_cross, &committed_cross);
  add_counts(o.user_aborts, &user_aborts);
  add_counts(o.failed_unavailable, &failed_unavailable);
  add_counts(o.failed_timeout, &failed_timeout);
  add_counts(o.failed_other, &failed_other);
  add_counts(o.peer_calls, &peer_calls);
  add_counts(o.peer_timeouts, &peer_timeouts);
  add_counts(o.peer_retransmits, &peer_retransmits);
  conflicts += o.conflicts;
  timeouts += o.timeouts;
  in_doubt += o.in_doubt;
  unacknowledged += o.unacknowledged;
  incoming += o.incoming;
  peers_up += o.peers_up;
  // A transaction is acknowledged on the worker that ran it, by that worker's view: the
  // shard's view is the least advanced worker's.
  for (size_t s = 0; s < vector_watermark.size(); ++s) {
    vector_watermark[s] = std::min(vector_watermark[s], o.vector_watermark[s]);
  }
  speculative_local += o.speculative_local;
  speculative_cross += o.speculative_cross;
  commit_latency += o.commit_latency;
}

std::vector<std::string_view> txn_type_names(std::string_view workload) {
  if (workload == "tpcc") {
    return {"new_order", "payment", "order_status", "delivery", "stock_level"};
  }
  if (workload == "bank") return {"transfer", "audit"};
  return {"txn"};
}

namespace {

using Counts = WorkerMetrics::Totals::Counts;

// One sample per transaction type of `c`, labelled type and then `label`=`value`.
void per_type(ops::MetricsText* m, std::string_view name,
              const std::vector<std::string_view>& types, const Counts& c, std::string_view label,
              std::string_view value) {
  for (size_t t = 0; t < types.size() && t < c.size(); ++t) {
    if (label.empty()) {
      m->sample(name, {{"type", types[t]}}, c[t]);
    } else {
      m->sample(name, {{"type", types[t]}, {label, value}}, c[t]);
    }
  }
}

void render_txns(const ServerMetricsView& v, const WorkerMetrics::Totals& t, ops::MetricsText* m) {
  m->family("shoal_txn_committed_total", "counter",
            "Transactions committed (speculatively: visible), by type and scope (local: one "
            "shard; cross: 2PC). Rollbacks a procedure chose are included.");
  per_type(m, "shoal_txn_committed_total", v.type_names, t.committed_local, "scope", "local");
  per_type(m, "shoal_txn_committed_total", v.type_names, t.committed_cross, "scope", "cross");
  m->family("shoal_txn_rollbacks_total", "counter",
            "Transactions the procedure itself rolled back (TPC-C's 1% NewOrder), by type.");
  per_type(m, "shoal_txn_rollbacks_total", v.type_names, t.user_aborts, {}, {});
  m->family("shoal_txn_aborted_total", "counter",
            "Attempts aborted and retried, by reason (conflict: validation or lock; timeout: a "
            "2PC round trip timed out).");
  m->sample("shoal_txn_aborted_total", {{"reason", "conflict"}}, t.conflicts);
  m->sample("shoal_txn_aborted_total", {{"reason", "timeout"}}, t.timeouts);
  m->family("shoal_txn_failed_total", "counter",
            "Transactions that gave up, by type and reason (unavailable: a shard is gone).");
  per_type(m, "shoal_txn_failed_total", v.type_names, t.failed_unavailable, "reason",
           "unavailable");
  per_type(m, "shoal_txn_failed_total", v.type_names, t.failed_timeout, "reason", "timeout");
  per_type(m, "shoal_txn_failed_total", v.type_names, t.failed_other, "reason", "other");
  m->counter("shoal_txn_in_doubt_total",
             "Cross-shard transactions committed whose install was not acknowledged by a shard.",
             t.in_doubt);
  m->counter("shoal_txn_unacknowledged_total",
             "Committed transactions never acknowledged (the vectorized watermark did not cover "
             "them before the run's grace period ended).",
             t.unacknowledged);
  m->family("shoal_txn_speculative_latency_seconds", "histogram",
            "Start to visible (committed, not yet replicated), by scope; retries included.");
  m->histogram("shoal_txn_speculative_latency_seconds", {{"scope", "local"}}, t.speculative_local);
  m->histogram("shoal_txn_speculative_latency_seconds", {{"scope", "cross"}}, t.speculative_cross);
  m->family("shoal_txn_commit_latency_seconds", "histogram",
            "Start to acknowledged: the vectorized watermark covers the transaction's dependency "
            "vector (replicated clusters only).");
  m->histogram("shoal_txn_commit_latency_seconds", {}, t.commit_latency);
  uint64_t cross = 0;
  for (size_t i = 0; i < t.committed_cross.size(); ++i) cross += t.committed_cross[i];
  m->counter("shoal_2pc_committed_total",
             "Cross-shard transactions this shard coordinated and committed by two-phase commit.",
             cross);
}

// Per connection to another shard (summed over the workers, each has its own).
void render_peers(const ServerMetricsView& v, const WorkerMetrics::Totals& t, ops::MetricsText* m) {
  const auto per_peer = [&](std::string_view name, std::string_view help,
                            const std::array<uint64_t, WorkerMetrics::kShardsMax>& c) {
    m->family(name, "counter", help);
    for (uint32_t s = 0; s < v.shards && s < c.size(); ++s) {
      if (s != v.shard) m->sample(name, {{"peer_shard", std::to_string(s)}}, c[s]);
    }
  };
  per_peer("shoal_2pc_round_trips_total",
           "Requests to another shard's participant (reads, fragments, lock, validate, install): "
           "one round trip each, by peer shard.",
           t.peer_calls);
  per_peer("shoal_2pc_timeouts_total", "Requests to another shard that timed out, by peer shard.",
           t.peer_timeouts);
  per_peer("shoal_2pc_retransmits_total", "Requests to another shard sent again, by peer shard.",
           t.peer_retransmits);
}

void render_positions(const repl::ReplicationPositions& p, uint32_t me, ops::MetricsText* m) {
  const auto per_stream = [&](std::string_view name, std::string_view type, std::string_view help,
                              uint64_t repl::StreamPosition::*field) {
    m->family(name, type, help);
    for (size_t s = 0; s < p.streams.size(); ++s) {
      const std::string id = std::to_string(s);
      m->sample(name, {{"stream", id}}, p.streams[s].*field);
    }
  };
  per_stream("shoal_repl_proposed_slot", "gauge", "The highest slot proposed, per stream.",
             &repl::StreamPosition::proposed);
  per_stream("shoal_repl_chosen_slot", "gauge",
             "Every slot at or below it is chosen (on a majority), per stream.",
             &repl::StreamPosition::chosen);
  per_stream("shoal_repl_persisted_slot", "gauge",
             "This replica's acceptances are durable (fsynced) up to this slot, per stream.",
             &repl::StreamPosition::persisted);
  per_stream("shoal_repl_wal_bytes", "gauge", "This replica's WAL size in bytes, per stream.",
             &repl::StreamPosition::wal_bytes);
  per_stream("shoal_repl_batch_bytes_total", "counter",
             "Bytes of the log entries (batches) chosen, per stream.",
             &repl::StreamPosition::chosen_bytes);
  per_stream("shoal_repl_batches_total", "counter",
             "Log entries (batches) chosen, per stream; bytes / batches is the batch size.",
             &repl::StreamPosition::chosen_entries);
  m->family("shoal_repl_follower_chosen_slot", "gauge",
            "The chosen slot each follower last reported, per stream and replica.");
  for (size_t s = 0; s < p.streams.size(); ++s) {
    for (uint32_t r = 0; r < p.followers.size(); ++r) {
      if (r == me) continue;
      m->sample("shoal_repl_follower_chosen_slot",
                {{"stream", std::to_string(s)}, {"replica", std::to_string(r)}},
                p.streams[s].peer_chosen[r]);
    }
  }
}

void render_followers(const repl::ReplicationPositions& p, uint32_t me, ops::MetricsText* m) {
  m->family("shoal_repl_follower_connected", "gauge", "1 while the follower is connected.");
  for (uint32_t r = 0; r < p.followers.size(); ++r) {
    if (r != me) {
      m->sample("shoal_repl_follower_connected", {{"replica", std::to_string(r)}},
                uint64_t{p.followers[r].connected});
    }
  }
  m->family("shoal_repl_follower_replayed_tid", "gauge",
            "The TID the follower has replayed up to, as it last reported.");
  for (uint32_t r = 0; r < p.followers.size(); ++r) {
    if (r != me) {
      m->sample("shoal_repl_follower_replayed_tid", {{"replica", std::to_string(r)}},
                p.followers[r].replayed_tid);
    }
  }
  m->family("shoal_repl_lag_seconds", "gauge",
            "How long ago the shard watermark passed what the follower has replayed.");
  for (uint32_t r = 0; r < p.followers.size(); ++r) {
    if (r != me) {
      m->sample("shoal_repl_lag_seconds", {{"replica", std::to_string(r)}},
                static_cast<double>(p.followers[r].replay_lag_ns) / 1e9);
    }
  }
  // Bytes behind: the slots a follower has not yet learnt chosen, at each stream's mean
  // batch size (the leader keeps no per-slot sizes once entries are trimmed).
  m->family("shoal_repl_lag_bytes", "gauge",
            "Estimated log bytes chosen that the follower has not yet learnt (slots behind x "
            "mean batch bytes, summed over streams).");
  for (uint32_t r = 0; r < p.followers.size(); ++r) {
    if (r == me) continue;
    double bytes = 0;
    for (const repl::StreamPosition& s : p.streams) {
      if (s.chosen_entries == 0 || s.peer_chosen[r] >= s.chosen) continue;
      bytes += static_cast<double>(s.chosen - s.peer_chosen[r]) *
               (static_cast<double>(s.chosen_bytes) / static_cast<double>(s.chosen_entries));
    }
    m->sample("shoal_repl_lag_bytes", {{"replica", std::to_string(r)}}, std::round(bytes));
  }
}

void render_leader(const ServerMetricsView& v, ops::MetricsText* m) {
  repl::ReplicationLeader& l = *v.replication;
  m->gauge("shoal_watermark", "The shard watermark: every record at or below this TID is chosen.",
           static_cast<double>(l.watermark()));
  m->gauge("shoal_repl_followers_connected", "Followers connected to this leader.",
           l.followers_connected());
  const repl::LeaderStats st = l.stats();
  m->counter("shoal_repl_retransmits_total", "Paxos accepts sent again.", st.retransmits);
  m->counter("shoal_repl_sent_bytes_total", "Bytes sent to the followers.", st.bytes_sent);
  m->counter("shoal_repl_elections_total", "Paxos elections started.", st.elections);
  m->family("shoal_repl_ratekeeper_waits_total", "counter",
            "Times proposals paused for a lagging follower, by what lagged.");
  m->sample("shoal_repl_ratekeeper_waits_total", {{"lag", "slots"}}, st.lag_waits);
  m->sample("shoal_repl_ratekeeper_waits_total", {{"lag", "replay"}}, st.replay_lag_waits);
  m->counter("shoal_repl_catchup_entries_total", "Chosen entries sent to followers catching up.",
             st.catchup_entries);
  // A leader's checkpoints: fetched from a follower, or (a lone replica) compacted from its own
  // WAL; either lets it delete WAL behind them.
  m->family("shoal_checkpoints_total", "counter",
            "Checkpoints this leader took (fetched from a follower, or compacted from its own "
            "WAL), by outcome.");
  m->sample("shoal_checkpoints_total", {{"outcome", "fetched"}}, st.checkpoints_fetched);
  m->sample("shoal_checkpoints_total", {{"outcome", "compacted"}}, st.checkpoints_compacted);
  m->sample("shoal_checkpoints_total", {{"outcome", "failed"}},
            st.checkpoint_fetches_failed + st.compactions_failed);
  const repl::ReplicationPositions p = l.positions();
  render_positions(p, v.replica, m);
  render_followers(p, v.replica, m);
  m->family("shoal_repl_batch_size_bytes", "histogram",
            "Sizes of the log entries (batches) chosen, over every stream.");
  m->histogram("shoal_repl_batch_size_bytes", {}, l.batch_bytes());
  m->family("shoal_repl_fsync_latency_seconds", "histogram",
            "Latency of this replica's WAL group fdatasyncs.");
  m->histogram("shoal_repl_fsync_latency_seconds", {}, l.fsync_latency());
}

// The checkpoint files' bytes in `dir` (repl/checkpoint.h names them *.ckpt; a follower
// keeps two). Bounded: at most kEntriesMax directory entries are looked at.
uint64_t checkpoint_bytes(const std::string& dir) {
  constexpr size_t kEntriesMax = 4096;
  std::error_code ec;
  uint64_t bytes = 0;
  size_t seen = 0;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end && seen < kEntriesMax;
       it.increment(ec), ++seen) {
    if (it->path().extension() != ".ckpt") continue;
    const uint64_t size = it->file_size(ec);
    if (!ec) bytes += size;
    ec.clear();
  }
  return bytes;
}

void render_info(std::string_view role, uint32_t shard, uint32_t replica, ops::MetricsText* m) {
  m->family("shoal_info", "gauge", "Always 1: which shard and replica this process is, its role.");
  const std::string s = std::to_string(shard), r = std::to_string(replica);
  m->sample("shoal_info", {{"shard", s}, {"replica", r}, {"role", role}}, uint64_t{1});
}

}  // namespace

void render_server_metrics(const ServerMetricsView& v, ops::MetricsText* m) {
  render_info("leader", v.shard, v.replica, m);
  m->gauge("shoal_epoch", "The epoch this leader serves in.", static_cast<double>(v.epoch));
  WorkerMetrics::Totals t;
  t.vector_watermark.fill(~uint64_t{0});
  for (const WorkerMetrics* w : v.workers) t.add(w->totals());
  render_txns(v, t, m);
  render_peers(v, t, m);
  m->family("shoal_connections", "gauge",
            "Open connections, by kind (incoming: remote coordinators and control; peer: this "
            "shard's links to the other shards, over every worker).");
  m->sample("shoal_connections", {{"kind", "incoming"}}, t.incoming);
  m->sample("shoal_connections", {{"kind", "peer"}}, t.peers_up);
  if (v.replicated_cluster && !v.workers.empty()) {
    m->family("shoal_vector_watermark", "gauge",
              "The vectorized watermark: each shard's watermark as this shard knows it (least "
              "advanced worker).");
    for (uint32_t s = 0; s < v.shards && s < WorkerMetrics::kShardsMax; ++s) {
      m->sample("shoal_vector_watermark", {{"shard", std::to_string(s)}}, t.vector_watermark[s]);
    }
  }
  if (v.replication != nullptr) render_leader(v, m);
  m->gauge("shoal_process_resident_bytes", "Resident set size of the process.",
           static_cast<double>(v.rss_bytes));
}

void render_follower_metrics(const FollowerMetricsView& v, ops::MetricsText* m) {
  render_info("follower", v.shard, v.replica, m);
  m->gauge("shoal_process_resident_bytes", "Resident set size of the process.",
           static_cast<double>(v.rss_bytes));
  if (v.follower == nullptr) return;
  const repl::Follower& f = *v.follower;
  m->gauge("shoal_repl_applied_tid", "Every record at or below this TID is replayed here.",
           static_cast<double>(f.applied_tid()));
  m->counter("shoal_repl_replayed_txns_total", "Transactions replayed into this replica's store.",
             f.replayed_txns());
  m->gauge("shoal_repl_replay_backlog_entries", "Chosen entries queued for replay.",
           static_cast<double>(f.replay_backlog()));
  const std::vector<repl::FollowerStreamPosition> p = f.positions();
  const auto per_stream = [&](std::string_view name, std::string_view help,
                              uint64_t repl::FollowerStreamPosition::*field) {
    m->family(name, "gauge", help);
    for (size_t s = 0; s < p.size(); ++s)
      m->sample(name, {{"stream", std::to_string(s)}}, p[s].*field);
  };
  per_stream("shoal_repl_received_slot", "The highest slot accepted or learnt here, per stream.",
             &repl::FollowerStreamPosition::received);
  per_stream("shoal_repl_chosen_slot",
             "Every slot at or below it is known chosen here, per stream.",
             &repl::FollowerStreamPosition::chosen);
  per_stream("shoal_repl_wal_bytes", "This replica's WAL size in bytes, per stream.",
             &repl::FollowerStreamPosition::wal_bytes);
  m->family("shoal_repl_fsync_latency_seconds", "histogram",
            "Latency of this replica's WAL fdatasyncs before it acknowledges.");
  m->histogram("shoal_repl_fsync_latency_seconds", {}, f.fsync_latency());
  const repl::CheckpointCounters c = f.checkpoints();
  m->family("shoal_checkpoints_total", "counter", "Checkpoints of the replayed store, by outcome.");
  m->sample("shoal_checkpoints_total", {{"outcome", "written"}}, c.written);
  m->sample("shoal_checkpoints_total", {{"outcome", "failed"}}, c.failed);
  m->counter("shoal_checkpoint_wal_deleted_bytes_total", "WAL bytes deleted behind checkpoints.",
             c.wal_bytes_deleted);
  m->gauge("shoal_checkpoint_bytes", "Bytes of the checkpoint files kept in the data directory.",
           static_cast<double>(checkpoint_bytes(v.data_dir)));
  m->gauge("shoal_checkpoint_pause_seconds", "The last checkpoint's pause of replay.",
           static_cast<double>(c.pause_ns_last) / 1e9);
}

}  // namespace shoal::server

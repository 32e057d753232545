// WAL truncation on the leader (leader.h, docs/REPLICATION.md "WAL truncation on the leader"):
// a follower's checkpoint fetched in chunks, verified and published in the leader's directory,
// then every stream's log rotated and the segments no replica needs deleted. Everything here
// runs on the replication thread, except the body of publish_thread_ (verify and fsync a
// fetched file off the loop, or a lone replica's compaction: compaction.h), which hands its
// result back under publish_mu_.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "src/repl/checkpoint.h"
#include "src/repl/compaction.h"
#include "src/repl/leader.h"

namespace shoal::repl {

std::vector<uint64_t> leader_wal_truncation_cut(
    uint32_t streams, const std::vector<std::vector<uint64_t>>& own_kept,
    const std::vector<std::optional<std::vector<uint64_t>>>& follower_kept, uint32_t self) {
  std::vector<uint64_t> cut(streams, 0);
  // With one checkpoint a refused file would leave the leader the WAL alone: keep all of it.
  if (own_kept.size() < 2) return cut;
  const std::vector<uint64_t>& older = own_kept[own_kept.size() - 2];
  SHOAL_ASSERT(older.size() == streams, "own checkpoint of %zu streams, %u expected", older.size(),
               streams);
  cut = older;
  for (uint32_t r = 0; r < follower_kept.size(); ++r) {  // bounded by the replicas
    if (r == self) continue;
    if (!follower_kept[r]) return std::vector<uint64_t>(streams, 0);  // unknown: may need all
    SHOAL_ASSERT(follower_kept[r]->size() == streams, "replica %u kept %zu streams, %u expected", r,
                 follower_kept[r]->size(), streams);
    for (uint32_t s = 0; s < streams; ++s) cut[s] = std::min(cut[s], (*follower_kept[r])[s]);
  }
  return cut;
}

void ReplicationLeader::init_checkpoints() {
  follower_checkpoints_.assign(options_.replicas, std::nullopt);
  if (options_.checkpoint_dir.empty()) return;
  // Files already here (a restarted leader's, or a promoted follower's own) are not counted
  // as held: truncation starts once two checkpoints were fetched in this life, and the older
  // files go then. A .tmp is a fetch a crash interrupted.
  auto seqs = list_checkpoints(options_.checkpoint_dir);
  if (seqs.ok() && !seqs->empty()) next_checkpoint_seq_ = seqs->back() + 1;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(options_.checkpoint_dir, ec)) {
    if (e.path().string().ends_with(".ckpt.tmp")) std::filesystem::remove(e.path(), ec);
  }
}

void ReplicationLeader::note_follower_checkpoint(uint32_t from, const nlohmann::json& j) {
  auto note = CheckpointNote::parse(j, options_.streams);
  if (!note.ok()) {
    std::fprintf(stderr, "replication: follower %u: dropped a malformed checkpoint note: %s\n",
                 from, note.status().to_string().c_str());
    return;
  }
  if (from < follower_checkpoints_.size()) follower_checkpoints_[from] = std::move(*note);
}

void ReplicationLeader::maybe_fetch_checkpoint(uint64_t now_ns) {
  if (options_.checkpoint_fetch_interval_ms == 0 || options_.checkpoint_dir.empty()) return;
  finish_fetched_checkpoint();
  if (options_.replicas == 1) {  // nobody to fetch from: its own, from its directory
    maybe_compact(now_ns);
    return;
  }
  if (fetch_) {
    if (now_ns - fetch_->last_ns > options_.checkpoint_fetch_timeout_ms * 1'000'000) {
      abandon_fetch(fmt::format("nothing received for {} ms", options_.checkpoint_fetch_timeout_ms),
                    /*failure=*/true);
    }
    return;
  }
  // Not while a takeover installs its slots (the chosen indexes still move up to the old
  // leader's), nor while a fetched file is being published.
  if (publishing_ || takeover_applier_) return;
  if (last_fetch_end_ns_ != 0 &&
      now_ns < last_fetch_end_ns_ + options_.checkpoint_fetch_interval_ms * 1'000'000) {
    return;
  }
  // The connected follower with the furthest checkpoint that is newer than ours on some
  // stream, older on none, and within what this leader knows chosen.
  const HeldCheckpoint* newest = held_checkpoints_.empty() ? nullptr : &held_checkpoints_.back();
  uint32_t best = kPaxosReplicasMax;
  uint64_t best_sum = 0;
  for (uint32_t r = 0; r < follower_checkpoints_.size(); ++r) {  // bounded by the replicas
    if (r == options_.replica || !peers_[r] || peers_[r]->dead || !follower_checkpoints_[r]) {
      continue;
    }
    const CheckpointNote& note = *follower_checkpoints_[r];
    bool usable = true, newer = newest == nullptr;
    uint64_t sum = 0;
    for (uint32_t s = 0; s < options_.streams; ++s) {
      usable = usable && note.covered[s] <= streams_[s]->paxos->chosen_index();
      if (newest != nullptr) {
        usable = usable && note.covered[s] >= newest->covered[s];
        newer = newer || note.covered[s] > newest->covered[s];
      }
      sum += note.covered[s];
    }
    if (usable && newer && (best == kPaxosReplicasMax || sum > best_sum)) {
      best = r;
      best_sum = sum;
    }
  }
  if (best == kPaxosReplicasMax) return;
  const CheckpointNote& note = *follower_checkpoints_[best];
  Fetch f;
  f.from = best;
  f.follower_seq = note.seq;
  f.total = note.bytes;
  f.covered = note.covered;
  f.seq = next_checkpoint_seq_++;
  f.tmp = checkpoint_path(options_.checkpoint_dir, f.seq) + ".tmp";
  f.last_ns = now_ns;
  f.fd = ::open(f.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  fetch_ = std::move(f);
  if (fetch_->fd < 0) {
    abandon_fetch(fmt::format("cannot create {}: {}", fetch_->tmp, std::strerror(errno)), true);
    return;
  }
  request_chunk();
}

void ReplicationLeader::request_chunk() {
  // One chunk in flight: the follower's network thread reads and sends one piece per request,
  // never more than its connection holds, so its Paxos replies never queue behind a file.
  fetch_->requested = std::min<uint64_t>(
      {kCheckpointChunkBytesMax, options_.paxos.max_message_bytes, fetch_->total - fetch_->offset});
  send_control(fetch_->from, {{"type", "ckpt_get"},
                              {"seq", fetch_->follower_seq},
                              {"offset", fetch_->offset},
                              {"max", fetch_->requested}});
}

void ReplicationLeader::abandon_fetch(const std::string& why, bool failure) {
  if (!fetch_) return;
  if (fetch_->fd >= 0) ::close(fetch_->fd);
  std::remove(fetch_->tmp.c_str());
  if (failure) {
    std::fprintf(stderr, "replication: checkpoint %lu of follower %u not fetched: %s\n",
                 fetch_->follower_seq, fetch_->from, why.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.checkpoint_fetches_failed;
  }
  fetch_.reset();
  // A failure waits an interval; a checkpoint the follower replaced is followed at once.
  last_fetch_end_ns_ = failure ? loop_->now_ns() : 0;
}

void ReplicationLeader::on_checkpoint_chunk(uint32_t from, std::span<const uint8_t> bytes) {
  if (!fetch_ || from != fetch_->from) return;  // a late chunk of an abandoned fetch
  auto c = parse_checkpoint_chunk(bytes, fetch_->requested);
  if (!c.ok()) {
    abandon_fetch(c.status().to_string(), /*failure=*/true);
    return;
  }
  if (c->seq != fetch_->follower_seq || c->offset != fetch_->offset || c->total != fetch_->total ||
      c->bytes.empty()) {
    abandon_fetch(fmt::format("got {} bytes at offset {} of checkpoint {} ({} bytes), asked for "
                              "offset {} of checkpoint {} ({} bytes)",
                              c->bytes.size(), c->offset, c->seq, c->total, fetch_->offset,
                              fetch_->follower_seq, fetch_->total),
                  /*failure=*/true);
    return;
  }
  size_t done = 0;
  while (done < c->bytes.size()) {  // bounded: each pass writes >= 1 byte or fails
    const ssize_t n = ::pwrite(fetch_->fd, c->bytes.data() + done, c->bytes.size() - done,
                               static_cast<off_t>(fetch_->offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      abandon_fetch(fmt::format("write {}: {}", fetch_->tmp, std::strerror(errno)), true);
      return;
    }
    done += static_cast<size_t>(n);
  }
  fetch_->offset += done;
  fetch_->last_ns = loop_->now_ns();
  if (fetch_->offset < fetch_->total) {
    request_chunk();
    return;
  }
  // Whole: verify (checksum over every byte) and make it durable off the loop.
  ::close(fetch_->fd);
  fetch_->fd = -1;
  if (publish_thread_.joinable()) publish_thread_.join();  // finished: publishing_ is false
  publishing_ = true;
  publish_thread_ = std::thread([this, f = std::move(*fetch_)] {
    Published p;
    p.held = HeldCheckpoint{f.seq, f.covered};
    p.bytes = f.total;
    auto cut = verify_checkpoint_cut(f.tmp, options_.streams);
    if (!cut.ok()) p.status = cut.status();
    for (uint32_t s = 0; p.status.ok() && s < options_.streams; ++s) {
      if (cut->streams[s].next_slot - 1 != f.covered[s]) {
        p.status = Status::InvalidArgument(fmt::format(
            "checkpoint {}: stream {} covers slots up to {}, follower {} announced {}; refused",
            f.tmp, s, cut->streams[s].next_slot - 1, f.from, f.covered[s]));
      }
    }
    if (p.status.ok())
      p.status = publish_checkpoint(f.tmp, checkpoint_path(options_.checkpoint_dir, f.seq));
    if (!p.status.ok()) std::remove(f.tmp.c_str());
    std::lock_guard<std::mutex> lock(publish_mu_);
    published_ = std::move(p);
  });
  fetch_.reset();
}

void ReplicationLeader::finish_fetched_checkpoint() {
  std::optional<Published> p;
  {
    std::lock_guard<std::mutex> lock(publish_mu_);
    p.swap(published_);
  }
  if (!p) return;
  publishing_ = false;
  last_fetch_end_ns_ = loop_->now_ns();
  if (!p->status.ok()) {
    std::fprintf(stderr, "replication: %s: %s\n",
                 p->compacted ? "compaction failed" : "fetched checkpoint refused",
                 p->status.to_string().c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++(p->compacted ? stats_.compactions_failed : stats_.checkpoint_fetches_failed);
    return;
  }
  if (!p->said.empty()) std::fprintf(stderr, "%s\n", p->said.c_str());
  held_checkpoints_.push_back(std::move(p->held));
  if (held_checkpoints_.size() > kHeldCheckpoints)
    held_checkpoints_.erase(held_checkpoints_.begin());
  // Files older than the older held one: a restart never needs them (it loads the newest
  // that verifies, and the held ones are the two newest).
  if (auto seqs = list_checkpoints(options_.checkpoint_dir); seqs.ok()) {
    for (const uint64_t seq : *seqs) {
      if (seq < held_checkpoints_.front().seq) {
        std::remove(checkpoint_path(options_.checkpoint_dir, seq).c_str());
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (p->compacted) {
      ++stats_.checkpoints_compacted;
    } else {
      ++stats_.checkpoints_fetched;
      stats_.checkpoint_bytes_fetched += p->bytes;
    }
  }
  truncate_wal(/*rotate=*/!p->compacted);
}

void ReplicationLeader::maybe_compact(uint64_t now_ns) {
  // Not while a takeover installs its slots (a restart's: they are not all chosen yet), nor
  // while the last compaction runs or waits to be registered (finish_fetched_checkpoint).
  if (publishing_ || takeover_applier_) return;
  if (last_fetch_end_ns_ != 0 &&
      now_ns < last_fetch_end_ns_ + options_.checkpoint_fetch_interval_ms * 1'000'000) {
    return;
  }
  uint64_t wal_bytes = 0;
  for (const auto& s : streams_) {
    if (s->log == nullptr) return;  // no WAL: nothing to compact (nor to restart from)
    wal_bytes += s->log->wal_bytes();
  }
  // As a follower's checkpoints: an idle shard still logs floor entries, so without a
  // transaction since the last one another full copy waits until those add up.
  if (chosen_txns_ == compacted_txns_ &&
      wal_bytes < compacted_wal_bytes_ + kIdleCompactionWalBytes) {
    last_fetch_end_ns_ = now_ns;  // look again one interval from now
    return;
  }
  compacted_txns_ = chosen_txns_;
  // The cut: every stream's active segment closes here (synced, sealed); the rebuild reads
  // the closed segments only, which nothing writes any more, while the log goes on in the next.
  CompactionInput in;
  in.dir = options_.checkpoint_dir;
  in.schema = options_.schema;
  in.shard = options_.shard;
  in.streams = options_.streams;
  in.seq = next_checkpoint_seq_++;
  in.stop = &stop_;
  for (auto& s : streams_) {
    const Status rotated = s->log->rotate();
    SHOAL_ASSERT(rotated.ok(), "replication: WAL rotation failed: %s", rotated.to_string().c_str());
    in.through_segment.push_back(s->log->active_segment() - 1);
  }
  compacted_wal_bytes_ = 0;
  for (const auto& s : streams_) compacted_wal_bytes_ += s->log->wal_bytes();
  if (publish_thread_.joinable()) publish_thread_.join();  // finished: publishing_ is false
  publishing_ = true;
  const int nice = options_.compaction_nice;
  publish_thread_ = std::thread([this, nice, in = std::move(in)] {
    if (nice != 0) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice);
    const uint64_t start_ns = RealEnv::instance().now_ns();
    auto r = compact_replica_dir(in);
    Published p;
    p.compacted = true;
    if (!r.ok()) {
      p.status = r.status();
    } else {
      p.held = HeldCheckpoint{in.seq, r->covered};
      p.bytes = r->bytes;
      p.said = fmt::format(
          "replication: compacted the WAL into {} (TID {}: {} rows, {} bytes), from {} and {} "
          "slots in {:.0f} ms",
          checkpoint_path(in.dir, in.seq), r->applied_tid, r->rows, r->bytes,
          r->base_seq == 0 ? std::string("the WAL alone")
                           : fmt::format("checkpoint {}", r->base_seq),
          r->slots, static_cast<double>(RealEnv::instance().now_ns() - start_ns) / 1e6);
    }
    std::lock_guard<std::mutex> lock(publish_mu_);
    published_ = std::move(p);
  });
}

void ReplicationLeader::truncate_wal(bool rotate) {
  std::vector<std::vector<uint64_t>> own;
  for (const HeldCheckpoint& h : held_checkpoints_) own.push_back(h.covered);
  std::vector<std::optional<std::vector<uint64_t>>> kept(options_.replicas);
  for (uint32_t r = 0; r < options_.replicas; ++r) {
    if (follower_checkpoints_[r]) kept[r] = follower_checkpoints_[r]->kept;
  }
  const std::vector<uint64_t> cut =
      leader_wal_truncation_cut(options_.streams, own, kept, options_.replica);
  uint64_t freed = 0;
  for (uint32_t s = 0; s < options_.streams; ++s) {
    AcceptorLog* log = streams_[s]->log.get();
    if (log == nullptr) continue;
    // A new segment per fetched checkpoint, so a later cut can delete this one whole. The
    // closed segment keeps serving catch-up until it is deleted.
    if (rotate) {
      const Status rotated = log->rotate();
      SHOAL_ASSERT(rotated.ok(), "replication: WAL rotation failed: %s",
                   rotated.to_string().c_str());
    }
    if (cut[s] == 0) continue;
    auto dropped = log->drop_covered_segments(cut[s]);
    if (!dropped.ok()) {  // the files stay: more disk, nothing lost
      std::fprintf(stderr, "replication: stream %u: %s\n", s, dropped.status().to_string().c_str());
      continue;
    }
    freed += *dropped;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.wal_bytes_deleted += freed;
}

}  // namespace shoal::repl

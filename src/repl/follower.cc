#include "src/repl/follower.h"

#include "src/repl/checkpoint.h"
#include "src/repl/leader.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "src/base/json_field.h"

namespace shoal::repl {

class Follower::Transport final : public PaxosTransport {
 public:
  Transport(Follower* self, uint32_t stream) : self_(self), stream_(stream) {}
  void send(uint32_t to, std::span<const std::byte> message) override {
    // A star: only the leader is connected.
    if (to == self_->leader_replica_) self_->send(stream_, message);
  }

 private:
  Follower* self_;
  uint32_t stream_;
};

struct Follower::Stream {
  uint32_t id = 0;
  PaxosAcceptorStore store;
  std::unique_ptr<AcceptorLog> log;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<PaxosStream> paxos;
  explicit Stream(uint64_t retain) : store(retain) {}
};

namespace {

std::string schema_path(const std::string& dir) {
  return dir + "/schema.json";
}

// The replica directory's layout: 1 (no marker) one WAL file per stream; 2 WAL segments and
// checkpoints (docs/REPLICATION.md "Checkpoints and WAL truncation"); 3 acceptor journals of
// format 2, without a record per accepted entry (a WAL copy's ballot comes from its position,
// src/repl/acceptor_log.h). A binary refuses a directory of another layout rather than
// misreading it: older binaries refuse 3 (newer than theirs), this one refuses 1 and 2.
constexpr uint32_t kDirLayout = 3;

bool holds_replica_files(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {  // bounded by the entries
    if (e.path().filename().string().starts_with("stream-")) return true;
  }
  return false;
}

Status check_dir_layout(const std::string& dir) {
  const std::string path = dir + "/layout";
  const auto refuse_older = [&](uint32_t version) {
    return Status::NotSupported(fmt::format(
        "follower: {}: directory layout {}, this binary reads layout {}; move the directory "
        "away and start the replica on an empty one (it bootstraps from its leader)",
        path, version, kDirLayout));
  };
  std::ifstream in(path);
  if (in) {
    std::string word;
    uint32_t version = 0;
    if (!(in >> word >> version) || word != "shoal-replica-dir") {
      return Status::Corruption(fmt::format(
          "follower: {}: not a layout marker (want 'shoal-replica-dir <version>')", path));
    }
    if (version > kDirLayout) {
      return Status::NotSupported(
          fmt::format("follower: {}: directory layout {}, this binary reads up to {}; refused",
                      path, version, kDirLayout));
    }
    if (version == kDirLayout) return Status::Ok();
    return refuse_older(version);
  }
  if (holds_replica_files(dir)) return refuse_older(1);  // a binary that wrote no marker
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << "shoal-replica-dir " << kDirLayout << "\n";
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("follower: cannot write " + path);
  }
  return Status::Ok();
}

Status make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::IOError(fmt::format("cannot create {}: {}", dir, std::strerror(errno)));
  }
  return Status::Ok();
}

}  // namespace

Status write_replica_schema(const std::string& dir, const Schema& schema, uint32_t streams) {
  const std::string path = schema_path(dir);
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << nlohmann::json{{"schema", schema.to_json()}, {"streams", streams}}.dump() << "\n";
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("replica directory: cannot write " + path);
  }
  return Status::Ok();
}

namespace {
std::string dir_rejoin_mark(const std::string& dir) {
  return dir + "/rejoin";
}
}  // namespace

Status mark_replica_dir_rejoining(const std::string& dir) {
  SHOAL_TRY(make_dir(dir));
  const std::string path = dir_rejoin_mark(dir);
  std::ofstream out(path, std::ios::trunc);
  out << "this replica's directory lost its state in a cluster with history: the streams "
         "whose log is absent rejoin without a vote (docs/REPLICATION.md)\n";
  out.close();
  if (!out) return Status::IOError("cannot write " + path);
  return sync_dir(dir);
}

Status prepare_replica_dir(const std::string& dir) {
  SHOAL_TRY(make_dir(dir));
  return check_dir_layout(dir);
}

namespace {

// identity.json's content for `id`, and whether `dir` has one that differs (an error naming
// both) or none (Ok, *absent set).
Status compare_identity(const std::string& dir, const ReplicaIdentity& id, bool* absent) {
  const std::string path = dir + "/identity.json";
  const nlohmann::json want = {
      {"cluster", id.cluster}, {"shard", id.shard}, {"replica", id.replica}};
  std::ifstream in(path);
  *absent = !in;
  if (*absent) return Status::Ok();
  std::stringstream text;
  text << in.rdbuf();
  const auto have = nlohmann::json::parse(text.str(), nullptr, false);
  if (have.is_discarded() || !have.is_object()) {
    return Status::Corruption(fmt::format("{}: unreadable (not JSON); refused", path));
  }
  if (have != want) {
    return Status::InvalidArgument(fmt::format(
        "{} belongs to {}, not to cluster '{}' shard {} replica {}; refused, nothing written "
        "(a --data-dir of another cluster, shard or replica?)",
        dir, have.dump(), id.cluster, id.shard, id.replica));
  }
  return Status::Ok();
}

}  // namespace

Status check_replica_dir_to_recover(const std::string& dir, const ReplicaIdentity& id) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(fmt::format("{}: no replica directory to recover from", dir));
  }
  bool absent = false;
  SHOAL_TRY(compare_identity(dir, id, &absent));  // an older directory has none
  if (!std::filesystem::exists(schema_path(dir), ec) ||
      !std::filesystem::exists(dir + "/layout", ec)) {
    return Status::NotFound(fmt::format(
        "{}: holds no replica to recover from (no schema.json or layout: it never led or "
        "followed a shard)",
        dir));
  }
  return check_dir_layout(dir);  // reads the marker there; writes nothing
}

Status check_replica_identity(const std::string& dir, const ReplicaIdentity& id) {
  bool absent = false;
  SHOAL_TRY(compare_identity(dir, id, &absent));
  if (!absent) return Status::Ok();
  // A new directory, or one written before identities (it is adopted as what it is used as).
  const std::string path = dir + "/identity.json", tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << nlohmann::json{{"cluster", id.cluster}, {"shard", id.shard}, {"replica", id.replica}}
             .dump()
      << "\n";
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("replica directory: cannot write " + path);
  }
  return Status::Ok();
}

Follower::Follower(const FollowerOptions& options)
    : options_(options), leader_replica_(options.leader_replica) {
  txn::EngineOptions eo;
  eo.epoch_ticker = false;  // a follower installs the leader's TIDs; it never makes its own
  eo.shard_id = options.shard;
  // Snapshot reads walk older versions; chains cost a copy per install, so only when serving.
  eo.keep_version_chains = options.serve_reads > 0;
  engine_ = std::make_unique<txn::Engine>(eo);
  if (options.serve_reads > 0) snapshots_ = std::make_unique<txn::SnapshotRegistry>(*engine_);
}

Follower::~Follower() {
  // run() stops both on every normal return; an early error return may leave them running.
  stop_readers();
  stop_replay();
}

Result<std::unique_ptr<Follower>> Follower::open(const FollowerOptions& options) {
  // A lone replica names itself: it is opened only to recover its store and lead (run()
  // refuses it).
  const bool lone = options.replicas == 1;
  if ((options.replica == options.leader_replica && !lone) || options.replica >= options.replicas ||
      options.leader_replica >= options.replicas || options.replicas > kPaxosReplicasMax) {
    return Status::InvalidArgument(fmt::format("follower: replica {} of {} (leader {})",
                                               options.replica, options.replicas,
                                               options.leader_replica));
  }
  if (options.data_dir.empty()) return Status::InvalidArgument("follower: no data directory");
  if (options.serve_reads > kReadThreadsMax) {
    return Status::InvalidArgument(fmt::format("--serve-reads: must be in [0, {}], not {}",
                                               kReadThreadsMax, options.serve_reads));
  }
  if (options.serve_reads > 0 && !options.read_rounds) {
    return Status::InvalidArgument("--serve-reads: this replica has no read-only transactions");
  }
  const ReplicaIdentity identity{options.cluster_name, options.shard, options.replica};
  if (!options.cluster_name.empty()) {  // before anything is written there
    bool absent = false;
    SHOAL_TRY(compare_identity(options.data_dir, identity, &absent));
  }
  SHOAL_TRY(prepare_replica_dir(options.data_dir));
  if (!options.cluster_name.empty()) SHOAL_TRY(check_replica_identity(options.data_dir, identity));
  std::unique_ptr<Follower> f(new Follower(options));
  std::ifstream in(schema_path(options.data_dir));
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    auto j = nlohmann::json::parse(text.str(), nullptr, false);
    auto fields = j.is_discarded() ? Result<nlohmann::json>(Status::InvalidArgument("not JSON"))
                                   : json_field<nlohmann::json>(j, "schema");
    auto streams = fields.ok() ? json_field<uint32_t>(j, "streams") : Result<uint32_t>(0u);
    if (!fields.ok() || !streams.ok()) {
      return Status::Corruption(
          fmt::format("follower: unreadable {}: {}", schema_path(options.data_dir),
                      (!fields.ok() ? fields.status() : streams.status()).message()));
    }
    auto schema = Schema::from_json(*fields);
    if (!schema.ok()) return schema.status();
    SHOAL_TRY(f->set_schema(*schema, *streams, /*persist=*/false));
  }
  return f;
}

Status Follower::set_schema(const Schema& schema, uint32_t streams, bool persist) {
  if (schema_) return Status::Ok();  // known (restart): the leader's copy is the same
  if (streams == 0 || streams > 1024) {
    return Status::Corruption(fmt::format("follower: {} streams", streams));
  }
  if (persist) SHOAL_TRY(write_replica_schema(options_.data_dir, schema, streams));
  const uint64_t start_ns = RealEnv::instance().now_ns();
  SHOAL_TRY(schema.create_tables(*engine_));
  std::optional<ReplayCut> cut;
  if (!persist) SHOAL_TRY(load_newest_checkpoint(schema, streams, &cut));
  schema_ = schema;
  schema_ready_.store(true, std::memory_order_release);  // reader threads may start
  applier_ = std::make_unique<ReplayApplier>(*engine_, streams);
  applier_->set_observer(options_.replay_observer);
  if (cut) {
    applier_->restore(*cut);
    kept_covered_.clear();
    for (const StreamCut& sc : cut->streams) kept_covered_.push_back(sc.next_slot - 1);
  }
  for (const EpochFence& f : options_.fences) applier_->learn_fence(f);  // before the WAL
  std::error_code ec;
  const bool dir_marked = std::filesystem::exists(dir_rejoin_mark(options_.data_dir), ec);
  for (uint32_t s = 0; s < streams; ++s) {
    auto st = std::make_unique<Stream>(options_.retain_chosen_slots);
    st->id = s;
    // A stream without a log where the schema survived (a restart), or in a directory marked
    // as lost, lost its acceptor state: marked rejoining before its first file exists.
    auto held = AcceptorLog::holds_stream_log(options_.data_dir, s);
    if (!held.ok()) return held.status();
    if (!*held && (!persist || dir_marked)) {
      SHOAL_TRY(AcceptorLog::mark_rejoining(options_.data_dir, s));
      std::fprintf(stderr,
                   "replica %u: %s holds no log of stream %u (%s): it rejoins without a vote "
                   "until it has caught up from its leader\n",
                   options_.replica, options_.data_dir.c_str(), s,
                   dir_marked ? "its directory was lost" : "lost files: its schema.json survived");
    }
    auto log = AcceptorLog::open(options_.data_dir, s, options_.fsync);
    if (!log.ok()) return log.status();
    st->log = std::move(*log);
    st->store.set_rejoining(st->log->rejoining());
    // Slots a checkpoint covers stay on disk (until truncation) but not in memory.
    auto rec = st->log->recover(st->store, cut ? cut->streams[s].next_slot - 1 : 0);
    if (!rec.ok()) return rec.status();
    recovered_slots_ += rec->slots;
    // Replay the chosen prefix now: the stream will not deliver it again.
    for (uint64_t slot = st->store.first_slot(); slot <= st->store.chosen_index(); ++slot) {
      const PaxosSlot* p = st->store.find(slot);
      SHOAL_ASSERT(p != nullptr && !p->value.empty(), "recovered chosen slot %lu missing", slot);
      applier_->on_chosen(s, p->value.span());
    }
    st->store.set_hooks(st->log->hooks());
    st->transport = std::make_unique<Transport>(this, s);
    PaxosOptions po = options_.paxos;
    po.shard = options_.shard;
    po.stream = s;
    po.replica_id = options_.replica;
    po.replica_count = options_.replicas;
    po.may_lead = false;  // only the leader process proposes (PaxosOptions::may_lead)
    Stream* raw = st.get();
    st->paxos = std::make_unique<PaxosStream>(RealEnv::instance(), *st->transport, st->store, po,
                                              [this, raw](uint64_t slot, const EntryBuffer& e) {
                                                raw->log->note_chosen(slot);
                                                hand_to_replay(raw->id, e.share());
                                              });
    st->store.trim();
    streams_.push_back(std::move(st));
  }
  if (dir_marked) {  // every stream carries its own mark now
    if (std::remove(dir_rejoin_mark(options_.data_dir).c_str()) != 0 && errno != ENOENT) {
      return Status::IOError("cannot delete " + dir_rejoin_mark(options_.data_dir));
    }
    SHOAL_TRY(sync_dir(options_.data_dir));
  }
  publish_replay();
  if (wal_head_missing()) {
    std::fprintf(stderr,
                 "replica %u: no checkpoint loaded and the WAL of %s lost its head to truncation: "
                 "the slots before it must come from the leader's WAL\n",
                 options_.replica, options_.data_dir.c_str());
  }
  if (!options_.quiet && (recovered_slots_ > 0 || cut)) {
    std::fprintf(stderr,
                 "replica %u: recovered %lu slots from %s%s; replayed up to TID %lu (%lu txns) "
                 "in %.0f ms\n",
                 options_.replica, recovered_slots_, options_.data_dir.c_str(),
                 cut ? " after its checkpoint" : "", applier_->applied_tid(),
                 applier_->stats().txns,
                 static_cast<double>(RealEnv::instance().now_ns() - start_ns) / 1e6);
  }
  return Status::Ok();
}

void Follower::reset_engine() {
  snapshots_.reset();  // it refers to the engine
  txn::EngineOptions eo = engine_->options();
  engine_ = std::make_unique<txn::Engine>(eo);
  if (options_.serve_reads > 0) snapshots_ = std::make_unique<txn::SnapshotRegistry>(*engine_);
}

Status Follower::load_newest_checkpoint(const Schema& schema, uint32_t streams,
                                        std::optional<ReplayCut>* cut) {
  auto seqs = list_checkpoints(options_.data_dir);
  if (!seqs.ok()) return seqs.status();
  if (!seqs->empty()) next_checkpoint_seq_ = seqs->back() + 1;
  std::error_code ec;  // a crash while one was written leaves its .tmp: never loaded
  for (const auto& e : std::filesystem::directory_iterator(options_.data_dir, ec)) {
    if (e.path().string().ends_with(".ckpt.tmp")) std::filesystem::remove(e.path(), ec);
  }
  // Newest first; a refused one (torn, corrupted, newer format) is reported and the one
  // before it tried. With none left the whole WAL is replayed; slots it no longer holds
  // (truncated) are then learned from the leader, whose WAL serves catch-up.
  for (auto it = seqs->rbegin(); it != seqs->rend(); ++it) {
    const std::string path = checkpoint_path(options_.data_dir, *it);
    const uint64_t start_ns = RealEnv::instance().now_ns();
    auto loaded = load_checkpoint(path, *engine_, streams);
    if (loaded.ok()) {
      std::lock_guard<std::mutex> lock(checkpoint_mu_);
      checkpoint_counters_.loaded_seq = *it;
      kept_seq_ = *it;
      if (!options_.quiet) {
        std::fprintf(stderr, "replica %u: loaded %s (TID %lu) in %.0f ms\n", options_.replica,
                     path.c_str(), loaded->applied_tid,
                     static_cast<double>(RealEnv::instance().now_ns() - start_ns) / 1e6);
      }
      // The leader may fetch it at once; what it may delete waits for this follower's next
      // checkpoint (kept: zeros), after which two are kept again.
      CheckpointNote note;
      note.seq = *it;
      std::error_code size_ec;
      note.bytes = std::filesystem::file_size(path, size_ec);
      for (const StreamCut& sc : loaded->streams) note.covered.push_back(sc.next_slot - 1);
      note.kept.assign(streams, 0);
      if (!size_ec) checkpoint_note_ = std::move(note);
      *cut = std::move(*loaded);
      return Status::Ok();
    }
    std::fprintf(stderr, "replica %u: %s; %s\n", options_.replica,
                 loaded.status().to_string().c_str(),
                 it + 1 != seqs->rend() ? "trying the previous checkpoint"
                                        : "recovering from the WAL alone");
    {
      std::lock_guard<std::mutex> lock(checkpoint_mu_);
      ++checkpoint_counters_.refused;
    }
    // Verification refuses before any row is installed; a checksum-valid file whose rows do
    // not fit the schema may have installed some: start again from an empty engine.
    reset_engine();
    SHOAL_TRY(schema.create_tables(*engine_));
  }
  return Status::Ok();
}

bool Follower::wal_head_missing() const {
  if (checkpoints().loaded_seq != 0) return false;
  for (const auto& s : streams_) {
    if (s->log->first_segment() > 0) return true;
  }
  return false;
}

uint32_t Follower::rejoining_streams() const {
  uint32_t n = 0;
  for (const auto& s : streams_) n += s->store.rejoining() ? 1 : 0;
  return n;
}

CheckpointCounters Follower::checkpoints() const {
  std::lock_guard<std::mutex> lock(checkpoint_mu_);
  return checkpoint_counters_;
}

void Follower::take_checkpoint() {
  checkpoint_requested_.store(false, std::memory_order_release);
  const uint64_t start_ns = RealEnv::instance().now_ns();
  const ReplayCut cut = applier_->cut();
  DoneCheckpoint done;
  done.seq = next_checkpoint_seq_;
  for (const StreamCut& sc : cut.streams) done.covered.push_back(sc.next_slot - 1);
  const std::string path = checkpoint_path(options_.data_dir, done.seq);
  const std::string tmp = path + ".tmp";
  auto written = write_checkpoint(tmp, *engine_, cut);
  const uint64_t pause_ns = RealEnv::instance().now_ns() - start_ns;
  {
    std::lock_guard<std::mutex> lock(checkpoint_mu_);
    checkpoint_counters_.pause_ns_last = pause_ns;
    checkpoint_counters_.pause_ns_max = std::max(checkpoint_counters_.pause_ns_max, pause_ns);
  }
  if (!written.ok()) {
    std::remove(tmp.c_str());
    done.status = written.status();
    std::lock_guard<std::mutex> lock(checkpoint_mu_);
    checkpoint_done_ = std::move(done);
    return;
  }
  ++next_checkpoint_seq_;
  if (!options_.quiet) {
    std::fprintf(stderr,
                 "replica %u: checkpoint %lu at TID %lu: %lu rows, %lu bytes; replay paused "
                 "%.1f ms\n",
                 options_.replica, done.seq, cut.applied_tid, written->rows, written->bytes,
                 static_cast<double>(pause_ns) / 1e6);
  }
  // The fsyncs happen off the replay thread (it goes on replaying meanwhile).
  if (checkpoint_sync_thread_.joinable()) checkpoint_sync_thread_.join();
  checkpoint_sync_thread_ = std::thread([this, tmp, path, done = std::move(done)]() mutable {
    done.status = publish_checkpoint(tmp, path);
    if (!done.status.ok()) std::remove(tmp.c_str());
    std::lock_guard<std::mutex> lock(checkpoint_mu_);
    checkpoint_done_ = std::move(done);
  });
}

void Follower::maybe_request_checkpoint(uint64_t now_ns) {
  finish_checkpoint();
  if (checkpoint_busy_ ||
      now_ns < last_checkpoint_ns_ + options_.checkpoint_interval_ms * 1'000'000) {
    return;
  }
  // An idle shard still logs floor entries (20 a second per stream): without a transaction
  // replayed since the last checkpoint, another full copy is worth it only once those have
  // added kIdleCheckpointWalBytes to the WAL.
  uint64_t wal_bytes = 0;
  for (const auto& s : streams_) wal_bytes += s->log->wal_bytes();
  const uint64_t txns = replay_txns_.load(std::memory_order_acquire);
  if (txns == txns_at_checkpoint_ &&
      wal_bytes < wal_bytes_at_checkpoint_ + kIdleCheckpointWalBytes) {
    last_checkpoint_ns_ = now_ns;  // look again one interval from now
    return;
  }
  txns_at_checkpoint_ = txns;
  wal_bytes_at_checkpoint_ = wal_bytes;
  checkpoint_busy_ = true;
  {
    std::lock_guard<std::mutex> lock(replay_mu_);
    checkpoint_requested_.store(true, std::memory_order_release);
  }
  replay_cv_.notify_one();
}

void Follower::finish_checkpoint() {
  std::optional<DoneCheckpoint> done;
  {
    std::lock_guard<std::mutex> lock(checkpoint_mu_);
    done.swap(checkpoint_done_);
  }
  if (!done) return;
  checkpoint_busy_ = false;
  last_checkpoint_ns_ = loop_->now_ns();
  if (!done->status.ok()) {
    std::fprintf(stderr, "replica %u: checkpoint %lu failed: %s\n", options_.replica, done->seq,
                 done->status.to_string().c_str());
    std::lock_guard<std::mutex> lock(checkpoint_mu_);
    ++checkpoint_counters_.failed;
    return;
  }
  // Durable: every stream starts a new segment, and the segments the older kept checkpoint
  // covers go (two checkpoints are kept, so a refused newest one falls back to the previous
  // with the WAL it needs still here).
  uint64_t freed = 0;
  for (size_t s = 0; s < streams_.size(); ++s) {
    Status st = streams_[s]->log->rotate();
    auto dropped = st.ok() && !kept_covered_.empty()
                       ? streams_[s]->log->drop_covered_segments(kept_covered_[s])
                       : Result<uint64_t>(uint64_t{0});
    if (!st.ok() || !dropped.ok()) {
      failed_ = st.ok() ? dropped.status() : st;  // the WAL is unusable: stop following
      return;
    }
    freed += *dropped;
  }
  if (auto seqs = list_checkpoints(options_.data_dir); seqs.ok()) {
    for (const uint64_t seq : *seqs) {
      if (seq < kept_seq_) std::remove(checkpoint_path(options_.data_dir, seq).c_str());
    }
  }
  // What the leader learns: this checkpoint, and (kept) the older one's cut: a restart that
  // refuses the newest falls back to it and may need the leader's WAL above it.
  CheckpointNote note;
  note.seq = done->seq;
  std::error_code size_ec;
  note.bytes = std::filesystem::file_size(checkpoint_path(options_.data_dir, done->seq), size_ec);
  note.covered = done->covered;
  note.kept =
      kept_covered_.empty() ? std::vector<uint64_t>(done->covered.size(), 0) : kept_covered_;
  if (!size_ec) {
    checkpoint_note_ = std::move(note);
    send_checkpoint_note();
  }
  kept_covered_ = done->covered;
  kept_seq_ = done->seq;
  wal_bytes_at_checkpoint_ = 0;
  for (const auto& s : streams_) wal_bytes_at_checkpoint_ += s->log->wal_bytes();
  std::lock_guard<std::mutex> lock(checkpoint_mu_);
  ++checkpoint_counters_.written;
  checkpoint_counters_.wal_bytes_deleted += freed;
}

void Follower::send(uint32_t session, std::span<const std::byte> bytes) {
  if (!ep_ || !failed_.ok()) return;
  if (holding_) {
    // Group commit: replies wait until the batch's acceptances are synced (release_held).
    held_index_.push_back({session, held_bytes_.size(), bytes.size()});
    held_bytes_.insert(held_bytes_.end(), bytes.begin(), bytes.end());
    return;
  }
  Status s = ep_->send(session, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  if (!s.ok()) failed_ = std::move(s);
}

void Follower::release_held() {
  holding_ = false;
  for (auto& s : streams_) {
    if (!s->log->dirty()) continue;
    const uint64_t start_ns = loop_->now_ns();
    Status st = s->log->sync();
    if (options_.fsync != FsyncPolicy::kNone) fsync_latency_.observe(loop_->now_ns() - start_ns);
    if (!st.ok()) {
      failed_ = std::move(st);  // nothing unsynced is ever acknowledged
      held_index_.clear();
      held_bytes_.clear();
      return;
    }
  }
  for (const Held& h : held_index_) send(h.session, {held_bytes_.data() + h.offset, h.bytes});
  held_index_.clear();
  held_bytes_.clear();
  if (ep_) (void)ep_->flush();  // the replies leave before we spend time replaying
}

EntryBuffer Follower::RingKeeper::keep(std::span<const std::byte> bytes) {
  if (!self_->ep_) return {};
  std::shared_ptr<const uint64_t[]> held =
      self_->ep_->keep_received({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  if (!held) return {};
  return EntryBuffer::adopt(std::move(held), bytes.size());
}

void Follower::shed_for_ring() {
  for (auto& s : streams_) retained_shed_ += s->store.shed_chosen(/*keep_copies=*/false);
  ep_->release();  // no batch is out: returns what the dropped slots held, if that was all
  if (!ep_->receive_short()) return;
  // Still short: what is left is held by accepted slots not known to be chosen yet (the
  // leader's pipeline: 64 bootstrap entries of 1 MiB outgrow the ring, and the leader,
  // waiting for credit, would never send the chosen index that lets them go) and entries
  // waiting for replay (a replay far behind). All copied out of the ring; only the entry in
  // the replay thread's hands stays, and it goes when applied.
  const auto in_ring = [this](std::span<const std::byte> b) { return ep_->in_receive_ring(b); };
  for (auto& s : streams_) ring_copied_ += s->store.copy_out(in_ring);
  std::lock_guard<std::mutex> lock(replay_mu_);
  for (auto& item : replay_items_) {  // bounded: kReplayQueueMax
    EntryBuffer& entry = item.second;
    if (!ep_->in_receive_ring(entry.span())) continue;
    entry = acceptor_copy(entry.span());
    ++ring_copied_;
  }
}

void Follower::on_message(uint32_t session, std::span<const uint8_t> bytes) {
  if (session == kControlSession) {
    handle_control(bytes);
  } else if (session < streams_.size()) {
    // Catch-up could fill the replay queue (the poller then stops reading, the leader's
    // heartbeats go unheard and this replica would stand for election): past half of it,
    // learn messages are dropped, and the leader sends them again after a retransmit period.
    if (replay_pending_.load(std::memory_order_acquire) >= kReplayQueueMax / 2 &&
        PaxosStream::is_learn_message(std::as_bytes(bytes))) {
      ++learns_deferred_;
      return;
    }
    streams_[session]->paxos->on_message(leader_replica_, std::as_bytes(bytes), &keeper_);
  }
  // Other sessions (a stream before the schema arrived): dropped; Paxos retransmits.
}

// A leader's malformed control message is dropped (said once per run: a broken or hostile
// peer must not flood the log or crash us).
void Follower::note_malformed_control(const std::string& why) {
  if (malformed_control_said_) return;
  malformed_control_said_ = true;
  std::fprintf(stderr, "replica %u: dropped a malformed control message from the leader: %s\n",
               options_.replica, why.c_str());
}

void Follower::handle_control(std::span<const uint8_t> bytes) {
  auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  std::string type;
  if (j.is_discarded() || !json_optional_field(j, "type", &type).ok()) {
    note_malformed_control("not a JSON object with a string 'type'");
    return;
  }
  if (type == "schema") {
    // A leader that announces its start-up says whether it is still starting; absent: serving.
    if (Status st = json_optional_field(j, "starting", &leader_starting_); !st.ok()) {
      note_malformed_control("schema: " + st.message());
    }
    // Without a schema nothing can be replayed: a malformed one ends the run.
    auto fields = json_field<nlohmann::json>(j, "schema");
    auto streams = json_field<uint32_t>(j, "streams");
    auto schema = fields.ok() ? Schema::from_json(*fields) : Result<Schema>(fields.status());
    Status s = !schema.ok()    ? schema.status()
               : !streams.ok() ? streams.status()
                               : set_schema(*schema, *streams, /*persist=*/true);
    if (!s.ok()) failed_ = Status::InvalidArgument("the leader's schema: " + s.message());
  } else if (type == "successor") {
    auto replica = json_field<uint32_t>(j, "replica");
    if (!replica.ok() || *replica >= options_.replicas) {
      note_malformed_control("successor: " + (replica.ok() ? std::string("no such replica")
                                                           : replica.status().message()));
      return;
    }
    successor_hint_.store(*replica, std::memory_order_release);
  } else if (type == "serving") {  // its start-up is over: leader_timeout_ms applies
    leader_starting_ = false;
  } else if (type == "ckpt_get") {
    serve_checkpoint_chunk(j);
  } else if (type == "bye") {  // the leader stops (not a crash): run() returns
    leader_stopped_ = true;
    failed_ = Status::Unavailable("the leader stopped");
  } else if (type == "report") {
    uint64_t target = 0;
    bool digest = false, check = false;
    nlohmann::json args;
    if (Status st = [&]() -> Status {
          SHOAL_TRY(json_optional_field(j, "target", &target));
          SHOAL_TRY(json_optional_field(j, "digest", &digest));
          SHOAL_TRY(json_optional_field(j, "check", &check));
          return json_optional_field(j, "check_args", &args);
        }();
        !st.ok()) {
      note_malformed_control("report request: " + st.message());
      return;
    }
    const bool ready = applied_tid() >= target;
    FollowerReport r = report(ready && digest, ready && check, args);
    const std::string text = r.to_json().dump();
    send(kControlSession, std::as_bytes(std::span(text.data(), text.size())));
  }
}

FollowerReport Follower::report(bool digest, bool check, const nlohmann::json& check_args) {
  FollowerReport r;
  r.replica = options_.replica;
  r.applied_tid = applied_tid();
  r.recovered_slots = recovered_slots_;
  r.replay_txns = replay_txns_.load(std::memory_order_acquire);
  r.replay_writes = replay_writes_.load(std::memory_order_acquire);
  r.replay_cpu_ns = replay_cpu_ns_.load(std::memory_order_acquire);
  r.copies = copy_counts();
  // The engine is only read while the replay thread has nothing to do (no entry queued or in
  // hand): at quiesce, when the leader asks for digests.
  const bool idle = replay_pending_.load(std::memory_order_acquire) == 0;
  digest = digest && idle;
  check = check && idle;
  for (const auto& s : streams_) {
    r.wal_bytes += s->log->wal_bytes();
    r.chosen_slots += s->paxos->chosen_index();
  }
  if (digest) {
    if (digest_tid_ != r.applied_tid) {
      digest_ = engine_digest(*engine_);
      digest_tid_ = r.applied_tid;
    }
    r.digest_done = true;
    r.digest = digest_;
  }
  if (snapshots_) {
    FollowerReadStats& rd = r.reads;
    rd.threads = options_.serve_reads;
    rd.transactions = read_txns_.load(std::memory_order_acquire);
    rd.snapshots = read_snapshots_.load(std::memory_order_acquire);
    rd.torn = torn_snapshots_.load(std::memory_order_acquire);
    const uint64_t first = reads_first_ns_.load(std::memory_order_acquire);
    const uint64_t last = reads_last_ns_.load(std::memory_order_acquire);
    rd.seconds = last > first ? static_cast<double>(last - first) / 1e9 : 0;
    rd.lag_epochs_mean = rd.snapshots == 0 ? 0
                                           : static_cast<double>(lag_epochs_sum_.load()) /
                                                 static_cast<double>(rd.snapshots);
    rd.lag_epochs_max = lag_epochs_max_.load(std::memory_order_acquire);
    rd.version_chain_bytes = engine_->version_chain_bytes();
    rd.engine_bytes = engine_->memory_bytes();
    std::lock_guard<std::mutex> lock(violation_mu_);
    rd.first_violation = first_violation_;
  }
  if (check) {
    if (check_tid_ != r.applied_tid) {
      check_failures_ = options_.check
                            ? options_.check(*engine_, schema_ ? schema_->workload : "", check_args)
                            : std::vector<std::string>{"no consistency checker in this replica"};
      check_tid_ = r.applied_tid;
    }
    r.checked = true;
    r.check_failures = check_failures_;
  }
  return r;
}

void Follower::hand_to_replay(uint32_t stream, EntryBuffer entry_buffer) {
  const std::span<const std::byte> entry = entry_buffer.span();
  if (!replay_thread_.joinable()) {  // restart recovery, before run(): install at once
    applier_->on_chosen(stream, entry);
    publish_replay();
    return;
  }
  replay_pending_.fetch_add(1, std::memory_order_acq_rel);
  // The entry's max TID: the leader's head as far as we know (lag).
  const uint64_t entry_tid = entry_max_tid(entry.data());
  if (entry_tid > max_received_tid_.load(std::memory_order_relaxed)) {
    max_received_tid_.store(entry_tid, std::memory_order_relaxed);
  }
  {
    std::lock_guard<std::mutex> lock(replay_mu_);
    replay_items_.emplace_back(stream, std::move(entry_buffer));
  }
  replay_cv_.notify_one();
}

void Follower::publish_replay() {
  const ReplayStats& st = applier_->stats();
  replay_txns_.store(st.txns, std::memory_order_release);
  replay_writes_.store(st.writes, std::memory_order_release);
  replay_cpu_ns_.store(st.cpu_ns, std::memory_order_release);
  applied_.store(applier_->applied_tid(), std::memory_order_release);
  replayed_watermark_.store(applier_->watermark().shard(), std::memory_order_release);
  if (applier_->bootstrap_installed()) bootstrap_installed_.store(true, std::memory_order_release);
  // Every record at or below it is installed, and once the whole bootstrap is (the applied
  // TID reached its end marker's S) the store there is one the leader had: snapshots may be
  // taken from then on. Before, a snapshot could see part of the load.
  if (snapshots_ && applier_->bootstrap_installed()) {
    snapshots_->publish_applied(applier_->applied_tid());
  }
}

void Follower::start_replay() {
  if (applier_) publish_replay();
  replay_stop_ = false;
  replay_thread_ = std::thread([this] {
    // Replay yields the CPU to the leader's workers where they share a machine; the network
    // thread keeps its priority, so acknowledgements stay prompt while replay catches up.
    if (options_.replay_nice != 0) {
      (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), options_.replay_nice);
    }
    for (;;) {  // until stopped with nothing left
      std::pair<uint32_t, EntryBuffer> item;
      {
        std::unique_lock<std::mutex> lock(replay_mu_);
        replay_cv_.wait(lock, [&] {
          return replay_stop_ || !replay_items_.empty() ||
                 checkpoint_requested_.load(std::memory_order_acquire);
        });
        if (!replay_items_.empty()) {
          item = std::move(replay_items_.front());
          replay_items_.pop_front();
        } else if (!checkpoint_requested_.load(std::memory_order_acquire)) {
          return;
        }
      }
      if (!item.second.empty()) {
        applier_->on_chosen(item.first, item.second.span());
        publish_replay();
        replay_pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
      // Between two entries the store is exactly the applier's cut.
      if (checkpoint_requested_.load(std::memory_order_acquire)) take_checkpoint();
    }
  });
}

void Follower::stop_replay() {
  if (!replay_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(replay_mu_);
    replay_stop_ = true;
  }
  replay_cv_.notify_one();
  replay_thread_.join();
  if (checkpoint_sync_thread_.joinable()) checkpoint_sync_thread_.join();
  // A checkpoint made durable meanwhile is kept; its truncation waits for the next run.
  std::lock_guard<std::mutex> lock(checkpoint_mu_);
  checkpoint_done_.reset();
  checkpoint_busy_ = false;
}

void Follower::start_readers() {
  readers_stop_.store(false, std::memory_order_release);
  for (uint32_t i = 0; i < options_.serve_reads; ++i) {
    readers_.emplace_back([this, i] { read_loop(i); });
  }
}

void Follower::stop_readers() {
  readers_stop_.store(true, std::memory_order_release);
  for (auto& t : readers_) t.join();
  readers_.clear();
}

void Follower::read_loop(uint32_t index) {
  // Readers share the machine like replay does (same nice level). Five levels below replay
  // they served a third of the reads with no less replay lag (docs/REPLICATION.md).
  if (options_.replay_nice != 0) {
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), options_.replay_nice);
  }
  // Bounded by stop: each pass is one snapshot round or a 1 ms wait for the schema / the
  // bootstrap. The registry's applied TID stays 0 until the whole bootstrap is installed
  // (publish_replay), so the first snapshot is at or after its end.
  auto waiting = [this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return !readers_stop_.load(std::memory_order_acquire);
  };
  while (!schema_ready_.load(std::memory_order_acquire) || snapshots_->applied_tid() == 0) {
    if (!waiting()) return;
  }
  auto round_fn = options_.read_rounds(*engine_, schema_->workload);
  if (!round_fn.ok()) {
    std::fprintf(stderr, "replica %u: reader %u: %s\n", options_.replica, index,
                 round_fn.status().to_string().c_str());
    return;
  }
  txn::SnapshotReader reader(*snapshots_,
                             {.unsafe_read_newest = options_.unsafe_snapshot_read_newest});
  Rng rng(0x5eed0000ULL + options_.replica * 64 + index);
  while (!readers_stop_.load(std::memory_order_acquire)) {
    if (!reader.begin().ok()) {  // every snapshot slot taken: cannot happen with our bound
      if (!waiting()) return;
      continue;
    }
    const uint64_t head_epoch = txn::Tid::epoch(max_received_tid_.load(std::memory_order_relaxed));
    const uint64_t snapshot_epoch = txn::Tid::epoch(reader.snapshot_tid());
    const uint64_t lag = head_epoch > snapshot_epoch ? head_epoch - snapshot_epoch : 0;
    txn::ReadRoundResult round;
    const Status s = (*round_fn)(reader, rng, &round);
    reader.end();
    if (!s.ok()) {
      std::fprintf(stderr, "replica %u: reader %u stops: %s\n", options_.replica, index,
                   s.to_string().c_str());
      return;
    }
    note_read_round(round, lag);
  }
}

void Follower::note_read_round(const txn::ReadRoundResult& round, uint64_t lag_epochs) {
  const uint64_t now = RealEnv::instance().now_ns();
  uint64_t zero = 0;
  reads_first_ns_.compare_exchange_strong(zero, now, std::memory_order_acq_rel);
  reads_last_ns_.store(now, std::memory_order_release);
  read_txns_.fetch_add(round.transactions, std::memory_order_acq_rel);
  lag_epochs_sum_.fetch_add(lag_epochs, std::memory_order_relaxed);
  uint64_t seen = lag_epochs_max_.load(std::memory_order_relaxed);
  // Bounded: each failed exchange saw a larger maximum.
  while (seen < lag_epochs &&
         !lag_epochs_max_.compare_exchange_weak(seen, lag_epochs, std::memory_order_acq_rel)) {
  }
  if (round.torn) {
    torn_snapshots_.fetch_add(1, std::memory_order_acq_rel);
    std::lock_guard<std::mutex> lock(violation_mu_);
    if (first_violation_.empty()) {
      first_violation_ = round.violation;
      std::fprintf(stderr, "replica %u: torn snapshot: %s\n", options_.replica,
                   round.violation.c_str());
    }
  }
  read_snapshots_.fetch_add(1, std::memory_order_acq_rel);
}

void Follower::set_leader(uint32_t replica, const std::string& host, uint16_t port) {
  SHOAL_ASSERT(replica != options_.replica && replica < options_.replicas && !loop_,
               "set_leader(%u) on replica %u of %u", replica, options_.replica, options_.replicas);
  leader_replica_ = replica;
  successor_hint_.store(kNoReplica, std::memory_order_release);  // the new leader names its own
  options_.leader_host = host;
  options_.leader_port = port;
}

void Follower::learn_fences(const std::vector<EpochFence>& fences) {
  SHOAL_ASSERT(!loop_ && !replay_thread_.joinable(), "%s", "learn_fences() while running");
  for (const EpochFence& f : fences) {
    const bool known = std::any_of(options_.fences.begin(), options_.fences.end(),
                                   [&](const EpochFence& k) { return k.epoch == f.epoch; });
    if (!known) options_.fences.push_back(f);  // for set_schema, if the schema is to come
    if (applier_) applier_->learn_fence(f);    // the same fence twice is kept once
  }
}

Result<Takeover> Follower::hand_over(std::unique_ptr<txn::Engine>* engine) {
  SHOAL_ASSERT(!loop_ && !replay_thread_.joinable(), "%s", "hand_over() while running");
  if (!schema_ || !applier_) {
    return Status::InvalidArgument(fmt::format(
        "replica {}: cannot take over: it never received its shard's schema", options_.replica));
  }
  stop_readers();
  snapshots_.reset();  // it refers to the engine
  Takeover t;
  for (auto& st : streams_) {
    st->paxos.reset();  // it refers to the store
    t.stores.push_back(std::make_unique<PaxosAcceptorStore>(std::move(st->store)));
    t.logs.push_back(std::move(st->log));
  }
  streams_.clear();
  t.applier = std::move(applier_);
  *engine = std::move(engine_);
  return t;
}

void Follower::note_positions() {
  std::lock_guard<std::mutex> lock(positions_mu_);
  positions_.resize(streams_.size());
  for (size_t i = 0; i < streams_.size(); ++i) {
    const Stream& s = *streams_[i];
    positions_[i] = {s.store.last_slot(), s.store.chosen_index(), s.log->wal_bytes()};
  }
}

std::vector<FollowerStreamPosition> Follower::positions() const {
  std::lock_guard<std::mutex> lock(positions_mu_);
  return positions_;
}

uint64_t Follower::applied_tid() const {
  return applied_.load(std::memory_order_acquire);
}

void Follower::on_tick(void* self, uint64_t) {
  auto* f = static_cast<Follower*>(self);
  for (auto& s : f->streams_) s->paxos->tick();
  static const bool debug = std::getenv("SHOAL_REPL_DEBUG") != nullptr;
  const uint64_t now = f->loop_->now_ns();
  if (debug && now - f->last_debug_ns_ >= 1'000'000'000 && !f->streams_.empty()) {
    f->last_debug_ns_ = now;
    const PaxosStream& p = *f->streams_[0]->paxos;
    std::fprintf(
        stderr,
        "replica %u: stream 0 chosen %lu role %d ballot %lx, applied %lx, queued %zu, "
        "received %lu malformed %lu bad %lu window %lu txns %lu learns deferred %lu kept %lu "
        "shed %lu copied %lu\n",
        f->options_.replica, p.chosen_index(), static_cast<int>(p.role()), p.ballot(),
        f->applied_tid(), f->replay_pending_.load(), p.stats().messages_received,
        p.stats().malformed, p.stats().bad_entries, p.stats().out_of_window, f->replay_txns_.load(),
        f->learns_deferred_, p.stats().entries_kept, f->retained_shed_, f->ring_copied_);
  }
  if (f->options_.checkpoint_interval_ms > 0 && f->applier_) f->maybe_request_checkpoint(now);
  f->note_positions();
  f->report_replayed();
  f->check_leader_heard(now);
  if ((f->stop_ != nullptr && f->stop_->load(std::memory_order_acquire)) || !f->failed_.ok()) {
    f->loop_->stop();
    return;
  }
  f->schedule_tick(f->next_tick_ns(f->loop_->now_ns()));
}

void Follower::schedule_tick(uint64_t due_ns) {
  auto id = loop_->add_timer(due_ns, &on_tick, this);
  SHOAL_ASSERT(id.ok(), "replica %u: tick timer: %s", options_.replica,
               id.status().to_string().c_str());
  tick_timer_ = *id;
  tick_due_ns_ = due_ns;
}

// A quiet follower's tick: it sends nothing by itself (heartbeats leave with our answers to
// the leader's), so it only looks at timeouts and positions.
constexpr uint64_t kFollowerQuietTickNs = 25'000'000;

uint64_t Follower::next_tick_ns(uint64_t now_ns) const {
  bool quiet = replay_pending_.load(std::memory_order_acquire) == 0 &&
               replayed_watermark_.load(std::memory_order_acquire) == replayed_sent_;
  for (const auto& s : streams_) quiet = quiet && s->paxos->quiet();
  if (!quiet) return now_ns + kTickNs;
  // Our heartbeats leave with our answers to the leader's (the poller), so a quiet tick only
  // looks at timeouts and positions. A tick more than half the leader timeout after the last
  // counts as our own stall (which excuses the leader's silence): stay well below that. And
  // check_leader_heard() declares the leader silent at the first tick past the timeout: that
  // tick must come no later than the 2 ms ticks would have brought it.
  const uint64_t timeout_ns = options_.leader_timeout_ms * 1'000'000;
  if (timeout_ns == 0) return now_ns + kFollowerQuietTickNs;
  const uint64_t period_ns = std::clamp(timeout_ns / 4, kTickNs, kFollowerQuietTickNs);
  return std::min(now_ns + period_ns, std::max(now_ns, last_heard_ns_ + timeout_ns) + kTickNs);
}

void Follower::send_checkpoint_note() {
  if (!checkpoint_note_) return;
  const std::string text = checkpoint_note_->to_json().dump();
  send(kControlSession, std::as_bytes(std::span(text.data(), text.size())));
}

void Follower::serve_checkpoint_chunk(const nlohmann::json& request) {
  auto seq = json_field<uint64_t>(request, "seq");
  auto offset = json_field<uint64_t>(request, "offset");
  auto max = json_field<uint64_t>(request, "max");
  if (!seq.ok() || !offset.ok() || !max.ok()) {
    note_malformed_control("ckpt_get: " + (!seq.ok()      ? seq.status().message()
                                           : !offset.ok() ? offset.status().message()
                                                          : max.status().message()));
    return;
  }
  const std::string path = checkpoint_path(options_.data_dir, *seq);
  // Opened per chunk: the file may be deleted between two requests (a newer checkpoint
  // replaced it), which the leader then learns instead of reading a moved-on descriptor.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || *offset >= static_cast<uint64_t>(st.st_size)) {
    if (fd >= 0) ::close(fd);
    const std::string gone = nlohmann::json{{"type", "ckpt_gone"}, {"seq", *seq}}.dump();
    send(kControlSession, std::as_bytes(std::span(gone.data(), gone.size())));
    return;
  }
  const auto total = static_cast<uint64_t>(st.st_size);
  // Bounded by what the leader asked, the protocol's chunk size and our message size.
  const size_t want = static_cast<size_t>(std::min<uint64_t>(
      {*max, kCheckpointChunkBytesMax, options_.paxos.max_message_bytes, total - *offset}));
  chunk_buf_.resize(kCheckpointChunkHeaderBytes + want);
  size_t have = 0;
  while (have < want) {  // bounded: each pass reads >= 1 byte or stops
    const ssize_t n = ::pread(fd, chunk_buf_.data() + kCheckpointChunkHeaderBytes + have,
                              want - have, static_cast<off_t>(*offset + have));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  if (have == 0) return;  // the leader's fetch times out and tries again later
  encode_checkpoint_chunk_header(*seq, *offset, total, chunk_buf_.data());
  send(kCheckpointSession,
       std::as_bytes(std::span(chunk_buf_.data(), kCheckpointChunkHeaderBytes + have)));
}

// The leader's ratekeeper (LeaderOptions::follower_replay_lag_ms_max) paces the shard by
// these reports: one small message a tick at most, only when replay moved. What it bounds is
// the backlog a takeover replays, so the report is the replay's watermark: records held
// below it (a participant's reserved install behind the worker's higher TIDs, replay.h) wait
// for the stream's promise, which a prepared transaction may hold for a failover's length;
// reporting applied_tid() then would stop the shard's proposals, and with them the worker that
// must pause to settle that failover.
void Follower::report_replayed() {
  const uint64_t applied = replayed_watermark_.load(std::memory_order_acquire);
  if (applied == replayed_sent_) return;
  replayed_sent_ = applied;
  const std::string text = nlohmann::json{{"type", "replayed"}, {"tid", applied}}.dump();
  send(kControlSession, std::as_bytes(std::span(text.data(), text.size())));
  if (ep_) (void)ep_->flush();
}

void Follower::check_leader_heard(uint64_t now_ns) {
  const uint64_t timeout_ns = options_.leader_timeout_ms * 1'000'000;
  const bool own_stall = now_ns - last_tick_ns_ > timeout_ns / 2 ||
                         replay_pending_.load(std::memory_order_acquire) >= kReplayQueueMax;
  last_tick_ns_ = now_ns;
  const bool serving = leader_spoke_ && !leader_starting_;
  if (serving != leader_serving_.load(std::memory_order_relaxed)) {
    leader_serving_.store(serving, std::memory_order_release);
  }
  if (timeout_ns == 0 || !bootstrap_installed_.load(std::memory_order_acquire)) return;
  if (own_stall) {
    last_heard_ns_ = now_ns;
    return;
  }
  // A leader not serving yet (silent since we connected, or starting) gets the connect
  // timeout: its start-up may stall it longer than the leader timeout, and it serves nobody
  // meanwhile. The leader timeout applies from the tick that sees it serve.
  const uint64_t silence_max_ns = serving ? timeout_ns : options_.connect_timeout_ms * 1'000'000;
  if (now_ns - last_heard_ns_ <= silence_max_ns || !failed_.ok()) return;
  leader_silent_ = true;
  failed_ = Status::Unavailable(
      fmt::format("replica {}: nothing from leader {} for {} ms{}", options_.replica,
                  leader_replica_, (now_ns - last_heard_ns_) / 1'000'000,
                  serving ? "" : (leader_spoke_ ? " (it was starting)" : " since we connected")));
}

Status Follower::run(const std::atomic<bool>* stop) {
  if (options_.replicas == 1) {
    return Status::InvalidArgument("follower: a lone replica has no leader to follow");
  }
  stop_ = stop;
  leader_stopped_ = false;
  leader_unreachable_ = false;
  replayed_sent_ = 0;  // a new connection: the leader has not heard any
  leader_silent_ = false;
  malformed_control_said_ = false;
  net::EndpointOptions eo;
  eo.max_message_bytes = options_.paxos.max_message_bytes + 4096;
  eo.tcp_buffer_bytes = tcp_buffer_bytes_for(eo.max_message_bytes);
  if (options_.link == LinkKind::kShm) {
    eo.ring_bytes = shm_ring_bytes_for(eo.max_message_bytes);
    auto ep =
        net::ShmEndpoint::connect(replication_shm_name(options_.leader_host, options_.leader_port),
                                  eo, options_.connect_timeout_ms);
    if (!ep.ok()) {
      leader_unreachable_ = true;
      return ep.status();
    }
    ep_.emplace(std::move(*ep), options_.receive_shape);
  } else if (options_.link == LinkKind::kFabric) {
    eo.ring_bytes = shm_ring_bytes_for(eo.max_message_bytes);
    auto ep = net::FabricEndpoint::connect_local(
        replication_fabric_name(options_.leader_host, options_.leader_port), eo, options_.fabric,
        options_.connect_timeout_ms);
    if (!ep.ok()) {
      leader_unreachable_ = true;
      return ep.status();
    }
    ep_.emplace(std::move(*ep), options_.receive_shape);
  } else {
    // Received entries stay in the receive ring until chosen and replayed (RingKeeper): as
    // large as the shared-memory ring, for the same reasons (peer_link.h).
    eo.tcp_receive_ring_bytes = shm_ring_bytes_for(eo.max_message_bytes);
    auto ep = net::TcpEndpoint::connect(options_.leader_host, options_.leader_port, eo,
                                        options_.connect_timeout_ms);
    if (!ep.ok()) {
      leader_unreachable_ = true;
      return ep.status();
    }
    ep_.emplace(std::move(*ep), options_.receive_shape);
  }
  failed_ = Status::Ok();
  const std::string hello = nlohmann::json{{"type", "hello"}, {"replica", options_.replica}}.dump();
  send(kControlSession, std::as_bytes(std::span(hello.data(), hello.size())));
  send_checkpoint_note();  // a new connection, maybe a new leader: it knows nothing yet
  SHOAL_TRY(ep_->flush());
  rt::LoopOptions lo;
  lo.spin_ns = 5'000;  // followers share the machine with the leader's workers
  loop_ = std::make_unique<rt::EventLoop>(RealEnv::instance(), lo);
  last_checkpoint_ns_ = loop_->now_ns();  // the first checkpoint one interval from now
  last_heard_ns_ = last_tick_ns_ = loop_->now_ns();
  leader_spoke_ = leader_starting_ = false;  // a new connection: not heard yet
  leader_serving_.store(false, std::memory_order_release);
  rt::PollerWake wake;
  wake.prepare = [](void* ctx, int fds[rt::kMaxPollerFds]) {
    auto* f = static_cast<Follower*>(ctx);
    if (!f->failed_.ok()) return false;
    // Backpressured (the poller does not read): sleep until the next tick instead of spinning
    // on a readable socket, which would starve the (lower-priority) replay thread we wait for.
    if (f->replay_pending_.load(std::memory_order_acquire) >= kReplayQueueMax) return true;
    return f->ep_->arm(fds);
  };
  wake.end = [](void* ctx) { static_cast<Follower*>(ctx)->ep_->end_block(); };
  SHOAL_TRY(loop_->add_poller(
      [](void* ctx) {
        auto* f = static_cast<Follower*>(ctx);
        if (!f->failed_.ok()) return false;
        // Replay far behind: stop reading, so TCP pushes back on the leader (bounded memory).
        if (f->replay_pending_.load(std::memory_order_acquire) >= kReplayQueueMax) return false;
        net::Completion c[16];
        bool any = false;
        // Bounded: at most 4 batches per call.
        for (int round = 0; round < 4; ++round) {
          auto n = f->ep_->poll(c, 16);
          if (!n.ok()) {
            f->failed_ = n.status();
            return false;
          }
          if (*n == 0) break;
          any = true;
          f->last_heard_ns_ = f->loop_->now_ns();
          f->leader_spoke_ = true;
          f->holding_ = true;
          for (size_t i = 0; i < *n; ++i) {
            if (c[i].imm < kControlSession) f->ep_->count_receive(c[i].bytes.size());
            f->on_message(c[i].imm, c[i].bytes);
          }
          f->ep_->release();
          // Our heartbeat goes with this batch's answers when it would be due soon anyway:
          // one wake-up per leader heartbeat instead of two.
          for (auto& s : f->streams_)
            s->paxos->heartbeat_if_due_within(s->paxos->heartbeat_ns() / 2);
          f->release_held();
          if (f->ep_->receive_short()) f->shed_for_ring();
        }
        // Entries to replay (not just heartbeats): back to kTickNs ticks at once (reports to
        // the ratekeeper, the backpressured poller's wake-up) rather than after a quiet one.
        const uint64_t now = f->loop_->now_ns();
        if (any && f->tick_due_ns_ > now + kTickNs &&
            f->replay_pending_.load(std::memory_order_acquire) > 0) {
          f->loop_->cancel_timer(f->tick_timer_);
          f->schedule_tick(now + kTickNs);
        }
        return any;
      },
      this, [](void* ctx) { return static_cast<Follower*>(ctx)->ep_->next_due_ns(); }, wake));
  start_replay();
  start_readers();
  schedule_tick(loop_->now_ns() + kTickNs);
  loop_->run();
  loop_->remove_poller(this);
  stop_readers();
  stop_replay();
  loop_.reset();
  ep_->close();
  Status why = std::move(failed_);
  failed_ = Status::Ok();
  ep_.reset();
  // The leader going away ends a follower's run normally (the bench stops its followers so).
  if (why.ok() || why.code() == Code::kUnavailable) return Status::Ok();
  return why;
}

}  // namespace shoal::repl

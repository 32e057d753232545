#include "src/repl/acceptor_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include <fmt/format.h>

namespace shoal::repl {
namespace {

constexpr uint32_t kJournalMagic = 0x4a414853;  // "SHAJ"
constexpr size_t kRecordBytes = 48;
enum : uint32_t { kPromise = 1, kAccept = 2, kChosen = 3, kLearned = 4 };

// Record layout: magic u32, kind u32, slot u64, ballot u64, entry checksum u64, reserved u64,
// XXH3-64 of the first 40 bytes.
void encode(std::byte* r, uint32_t kind, uint64_t slot, Ballot ballot, uint64_t checksum) {
  std::memset(r, 0, kRecordBytes);
  store_u32(r, kJournalMagic);
  store_u32(r + 4, kind);
  store_u64(r + 8, slot);
  store_u64(r + 16, ballot);
  store_u64(r + 24, checksum);
  store_u64(r + 40, XXH3_64bits(r, 40));
}

Status io_error(const std::string& what, const std::string& path) {
  return Status::IOError(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

}  // namespace

namespace {

// The segment numbers of stream `stream` in dir, ascending (segment 0: the unnumbered files).
Result<std::vector<uint64_t>> list_segments(const std::string& dir, uint32_t stream) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return io_error("cannot list", dir);
  std::vector<uint64_t> out;
  const std::string plain = fmt::format("stream-{}.wal", stream);
  const std::string prefix = fmt::format("stream-{}.", stream);
  while (const dirent* e = ::readdir(d)) {  // bounded by the directory's entries
    const std::string name = e->d_name;
    if (name == plain) {
      out.push_back(0);
    } else if (name.starts_with(prefix) && name.ends_with(".wal")) {
      const std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - 4);
      if (!mid.empty() && mid.find_first_not_of("0123456789") == std::string::npos &&
          mid.size() < 19) {
        out.push_back(std::stoull(mid));
      }
    }
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

WalOptions acceptor_wal_options(FsyncPolicy fsync, bool accept_sync_elsewhere) {
  WalOptions wo;
  // pwrite, not io_uring: the appender here is the replication thread, not a worker, and on a
  // busy machine io_uring's buffered writes wait for an io-wq thread to be scheduled (the
  // append waits for its completion), which showed as commit latency. Measured in
  // docs/REPLICATION.md.
  wo.use_io_uring = false;
  wo.fsync = fsync == FsyncPolicy::kAlways && !accept_sync_elsewhere ? FsyncPolicy::kAlways
                                                                     : FsyncPolicy::kNone;
  wo.allow_rewrites = true;
  return wo;
}

Status sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return io_error("cannot sync", dir);
  return Status::Ok();
}

}  // namespace

std::string AcceptorLog::wal_path(uint64_t segment) const {
  return segment == 0 ? fmt::format("{}/stream-{}.wal", dir_, stream_)
                      : fmt::format("{}/stream-{}.{}.wal", dir_, stream_, segment);
}

std::string AcceptorLog::journal_path(uint64_t segment) const {
  return segment == 0 ? fmt::format("{}/stream-{}.acc", dir_, stream_)
                      : fmt::format("{}/stream-{}.{}.acc", dir_, stream_, segment);
}

Status AcceptorLog::open_segment(uint64_t number) {
  auto wal = Wal::open(wal_path(number), acceptor_wal_options(fsync_, accept_sync_elsewhere_));
  if (!wal.ok()) return wal.status();
  const std::string jpath = journal_path(number);
  const int fd = ::open(jpath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open", jpath);
  if (journal_fd_ >= 0) ::close(journal_fd_);
  wal_ = std::move(*wal);
  journal_fd_ = fd;
  journal_path_ = jpath;
  journal_end_ = 0;
  active_ = number;
  active_max_slot_ = 0;
  return Status::Ok();
}

Result<std::unique_ptr<AcceptorLog>> AcceptorLog::open(const std::string& dir, uint32_t stream,
                                                       FsyncPolicy fsync,
                                                       bool accept_sync_elsewhere) {
  std::unique_ptr<AcceptorLog> log(new AcceptorLog(dir, stream, fsync, accept_sync_elsewhere));
  auto segments = list_segments(dir, stream);
  if (!segments.ok()) return segments.status();
  for (size_t i = 0; i + 1 < segments->size(); ++i) log->closed_.push_back({(*segments)[i], 0, 0});
  SHOAL_TRY(log->open_segment(segments->empty() ? 0 : segments->back()));
  return log;
}

AcceptorLog::~AcceptorLog() {
  if (journal_fd_ >= 0) ::close(journal_fd_);
}

struct AcceptorLog::JournalState {
  struct Want {
    Ballot ballot = 0;
    uint64_t checksum = 0;
    bool learned = false;  // a chosen value stored by catch-up
  };
  std::map<uint64_t, Want> want;  // each slot's latest record
  Ballot promised = 0;
  uint64_t chosen_hint = 0;
};

// Reads one segment's journal into `want` (later records win), the promise and the chosen
// hint; cuts a torn tail (of the active segment's journal, the only one written last).
Status AcceptorLog::read_journal(uint64_t segment, JournalState* state, uint64_t* max_slot) {
  auto& want = state->want;
  const std::string path = journal_path(segment);
  const bool active = segment == active_;
  const int fd = active ? journal_fd_ : ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  // A closed segment whose journal is gone (a crash while drop_covered_segments deleted it,
  // journal first): its WAL copies pair with nothing and are dropped; they were covered.
  if (fd < 0 && errno == ENOENT) return Status::Ok();
  if (fd < 0) return io_error("cannot open", path);
  struct Closer {
    int fd;
    bool own;
    ~Closer() {
      if (own) ::close(fd);
    }
  } closer{fd, !active};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("cannot stat", path);
  std::vector<std::byte> journal(static_cast<size_t>(st.st_size));
  size_t have = 0;
  while (have < journal.size()) {  // bounded by the file size
    const ssize_t n =
        ::pread(fd, journal.data() + have, journal.size() - have, static_cast<off_t>(have));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("cannot read", path);
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  size_t good = 0;
  for (; good + kRecordBytes <= have; good += kRecordBytes) {
    const std::byte* r = journal.data() + good;
    if (load_u32(r) != kJournalMagic || load_u64(r + 40) != XXH3_64bits(r, 40)) break;
    const uint32_t kind = load_u32(r + 4);
    const uint64_t slot = load_u64(r + 8);
    const Ballot ballot = load_u64(r + 16);
    if (kind == kPromise) {
      state->promised = std::max(state->promised, ballot);
    } else if (kind == kAccept) {
      want[slot] = JournalState::Want{ballot, load_u64(r + 24), false};
      *max_slot = std::max(*max_slot, slot);
    } else if (kind == kLearned) {
      want[slot] = JournalState::Want{0, load_u64(r + 24), true};
      *max_slot = std::max(*max_slot, slot);
    } else if (kind == kChosen) {
      state->chosen_hint = std::max(state->chosen_hint, slot);
    } else {
      break;
    }
  }
  if (good != static_cast<size_t>(st.st_size)) {
    std::fprintf(stderr, "acceptor journal %s: cutting %zu bytes at offset %zu\n", path.c_str(),
                 static_cast<size_t>(st.st_size) - good, good);
    if (::ftruncate(fd, static_cast<off_t>(good)) != 0 || ::fdatasync(fd) != 0) {
      return io_error("cannot truncate", path);
    }
  }
  if (active) journal_end_ = good;
  return Status::Ok();
}

struct AcceptorLog::Copies {
  std::map<uint64_t, EntryBuffer> bytes;  // each slot's copy named by its latest record
  std::map<uint64_t, SlotCopy> where;     // of those, the ones in the active segment
};

// The WALs, oldest segment first: the last copy of each slot above `covered` whose checksum
// its latest record names. Only the active segment's copies are indexed for reads (offsets
// are within its file).
Status AcceptorLog::read_copies(uint64_t covered, const JournalState& journal, Copies* copies,
                                AcceptorRecovery* out) {
  auto scan = [&](Wal& wal, bool active, uint64_t* max_slot) -> Result<WalRecovery> {
    uint64_t offset = 0;  // entries lie back to back from offset 0
    return wal.recover([&](const LogEntryView& e) {
      const uint64_t slot = e.id().sequence;
      *max_slot = std::max(*max_slot, slot);
      auto it = journal.want.find(slot);
      if (slot <= covered) {
        // Applied through the checkpoint: not needed in memory.
      } else if (it != journal.want.end() && it->second.checksum == e.checksum()) {
        copies->bytes[slot] = EntryBuffer(e.bytes());
        if (active) copies->where[slot] = SlotCopy{offset, e.checksum(), e.entry_bytes()};
      } else {
        ++out->dropped;
      }
      offset += e.entry_bytes();
      return Status::Ok();
    });
  };
  const WalOptions closed_options = acceptor_wal_options(fsync_, accept_sync_elsewhere_);
  for (Segment& seg : closed_) {
    // Every copy a segment holds has its record in the same segment's journal (written
    // together; a copy without one is dropped anyway), so a segment whose records are all
    // covered has nothing to restore: its WAL is not even read.
    if (seg.max_slot <= covered) {
      struct stat st {};
      seg.bytes =
          ::stat(wal_path(seg.number).c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
      closed_bytes_ += seg.bytes;
      continue;
    }
    auto wal = Wal::open(wal_path(seg.number), closed_options);
    if (!wal.ok()) return wal.status();
    auto rec = scan(**wal, false, &seg.max_slot);
    if (!rec.ok()) return rec.status();
    seg.bytes = rec->bytes_kept;
    closed_bytes_ += seg.bytes;
  }
  auto rec = scan(*wal_, true, &active_max_slot_);
  if (!rec.ok()) return rec.status();
  out->wal_bytes = rec->bytes_kept + closed_bytes_;
  return Status::Ok();
}

Result<AcceptorRecovery> AcceptorLog::recover(PaxosAcceptorStore& store, uint64_t covered) {
  AcceptorRecovery out;
  // 1. The journals, oldest segment first: the promise, each slot's latest (ballot, checksum),
  // the chosen hint.
  JournalState journal;
  for (Segment& seg : closed_) SHOAL_TRY(read_journal(seg.number, &journal, &seg.max_slot));
  SHOAL_TRY(read_journal(active_, &journal, &active_max_slot_));
  out.promised = journal.promised;
  // 2. The WAL copies the journal names.
  group_base_ = covered / kIndexGroupSlots;
  recent_base_ = 1 + kIndexGroupSlots * group_base_;
  Copies copies;
  SHOAL_TRY(read_copies(covered, journal, &copies, &out));

  // 3. Into the store (no hooks yet: nothing is written back).
  if (covered > 0) store.start_after(covered);
  if (out.promised != 0) SHOAL_TRY(store.promise(out.promised));
  promised_ = out.promised;
  for (auto& [slot, copy] : copies.bytes) {
    const JournalState::Want& w = journal.want.at(slot);
    SHOAL_TRY(w.learned ? store.learn(slot, copy.span())
                        : store.accept(slot, w.ballot, copy.span()));
    if (auto it = copies.where.find(slot); it != copies.where.end()) index_copy(slot, it->second);
    ++out.slots;
  }
  for (const auto& [slot, w] : journal.want) {
    if (slot > covered && copies.bytes.count(slot) == 0) ++out.dropped;
  }
  for (uint64_t s = covered + 1; s <= journal.chosen_hint; ++s) {
    if (store.find(s) == nullptr || store.find(s)->value.empty()) break;
    store.mark_chosen(s);
  }
  out.chosen_index = store.advance();
  chosen_noted_ = out.chosen_index;
  seal_groups(chosen_noted_);
  return out;
}

Status AcceptorLog::rotate() {
  SHOAL_ASSERT(!accept_sync_elsewhere_, "%s", "rotate() on a log synced from another thread");
  // Nothing unsynced may stay behind in the closed segment: a later group commit syncs only
  // the active files.
  SHOAL_TRY(wal_->sync());
  if (::fdatasync(journal_fd_) != 0) return io_error("cannot sync", journal_path_);
  closed_.push_back(Segment{active_, active_max_slot_, wal_->end_offset()});
  closed_bytes_ += wal_->end_offset();
  SHOAL_TRY(open_segment(active_ + 1));
  SHOAL_TRY(wal_->recover([](const LogEntryView&) { return Status::Ok(); }).status());
  if (promised_ != 0) SHOAL_TRY(append_record(kPromise, 0, promised_, 0, /*sync=*/false));
  if (chosen_noted_ != 0) SHOAL_TRY(append_record(kChosen, chosen_noted_, 0, 0, false));
  if (::fdatasync(journal_fd_) != 0) return io_error("cannot sync", journal_path_);
  SHOAL_TRY(sync_dir(dir_));
  dirty_ = false;
  // The index: copies of sealed groups and of unsealed slots lie in the closed segment now.
  group_base_ += groups_.size();
  groups_.clear();
  irregular_.clear();
  for (SlotCopy& c : recent_) c = SlotCopy{};
  cursor_slot_ = 0;
  return Status::Ok();
}

Result<uint64_t> AcceptorLog::drop_covered_segments(uint64_t covered) {
  uint64_t freed = 0;
  auto keep = closed_.begin();
  for (auto it = closed_.begin(); it != closed_.end(); ++it) {  // bounded by the segments
    if (it->max_slot > covered) {
      *keep++ = *it;
      continue;
    }
    // The journal first: a WAL copy without its record is dropped by recovery, while a record
    // without its copy would be too; either way nothing above `covered` is lost.
    if (::unlink(journal_path(it->number).c_str()) != 0 && errno != ENOENT) {
      return io_error("cannot delete", journal_path(it->number));
    }
    if (::unlink(wal_path(it->number).c_str()) != 0 && errno != ENOENT) {
      return io_error("cannot delete", wal_path(it->number));
    }
    freed += it->bytes;
    closed_bytes_ -= it->bytes;
  }
  closed_.erase(keep, closed_.end());
  return freed;
}

Status AcceptorLog::append_record(uint32_t kind, uint64_t slot, Ballot ballot, uint64_t checksum,
                                  bool sync) {
  alignas(8) std::byte r[kRecordBytes];
  encode(r, kind, slot, ballot, checksum);
  size_t done = 0;
  while (done < kRecordBytes) {  // bounded: each pass writes >= 1 byte or fails
    const ssize_t n = ::pwrite(journal_fd_, r + done, kRecordBytes - done,
                               static_cast<off_t>(journal_end_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error("cannot write", journal_path_);
    done += static_cast<size_t>(n);
  }
  journal_end_ += kRecordBytes;
  if (sync && fsync_ != FsyncPolicy::kNone && ::fdatasync(journal_fd_) != 0) {
    return io_error("cannot sync", journal_path_);
  }
  return Status::Ok();
}

PersistHooks AcceptorLog::hooks() {
  PersistHooks h;
  h.on_promise = [this](Ballot b) {
    SHOAL_TRY(append_record(kPromise, 0, b, 0, /*sync=*/true));
    promised_ = std::max(promised_, b);
    return Status::Ok();
  };
  h.on_accept = [this](uint64_t slot, Ballot b, std::span<const std::byte> entry, bool new_bytes) {
    return persist_accept(slot, b, entry, new_bytes);
  };
  h.on_learn = [this](uint64_t slot, std::span<const std::byte> entry) {
    return persist_learn(slot, entry);
  };
  return h;
}

Status AcceptorLog::persist_accept(uint64_t slot, Ballot b, std::span<const std::byte> entry,
                                   bool new_bytes) {
  // The bytes were validated by the stream before it accepts them. Only a new value goes to
  // the WAL; a higher ballot for bytes already logged needs only its record.
  const uint64_t checksum = load_u64(entry.data() + 56);
  const uint64_t offset = wal_->end_offset();
  note_slot(slot);
  if (new_bytes) SHOAL_TRY(wal_->append(entry));
  if (accept_sync_elsewhere_) {
    SHOAL_TRY(append_record(kAccept, slot, b, checksum, false));
  } else {
    SHOAL_TRY(append_record(kAccept, slot, b, checksum, fsync_ == FsyncPolicy::kAlways));
    if (fsync_ == FsyncPolicy::kBatch) dirty_ = true;
  }
  if (new_bytes) index_copy(slot, SlotCopy{offset, checksum, entry.size()});
  return Status::Ok();
}

Status AcceptorLog::persist_learn(uint64_t slot, std::span<const std::byte> entry) {
  // A chosen value counts towards nothing: no sync of its own; the next group commit (or the
  // leader's syncer) covers it, and a copy lost in a crash is learned again.
  const uint64_t checksum = load_u64(entry.data() + 56);
  const uint64_t offset = wal_->end_offset();
  note_slot(slot);
  SHOAL_TRY(wal_->append(entry));
  SHOAL_TRY(append_record(kLearned, slot, 0, checksum, /*sync=*/false));
  if (fsync_ != FsyncPolicy::kNone && !accept_sync_elsewhere_) dirty_ = true;
  index_copy(slot, SlotCopy{offset, checksum, entry.size()});
  return Status::Ok();
}

Status AcceptorLog::sync() {
  if (!dirty_) return Status::Ok();
  SHOAL_TRY(wal_->sync());
  if (::fdatasync(journal_fd_) != 0) return io_error("cannot sync", journal_path_);
  dirty_ = false;
  return Status::Ok();
}

Status AcceptorLog::sync_from_any_thread() const {
  if (::fdatasync(wal_->fd()) != 0) return io_error("cannot sync", wal_->path());
  if (::fdatasync(journal_fd_) != 0) return io_error("cannot sync", journal_path_);
  return Status::Ok();
}

void AcceptorLog::note_chosen(uint64_t index) {
  // No sync: a lost hint only lengthens the re-learn from the leader after a restart.
  if (index <= chosen_noted_) return;
  chosen_noted_ = index;
  append_record(kChosen, index, 0, 0, /*sync=*/false).ignore();
  seal_groups(index);
}

// ---- serving chosen slots from the WAL --------------------------------------------------------

void AcceptorLog::index_copy(uint64_t slot, const SlotCopy& copy) {
  // A sealed slot is chosen and never written again; a slot absurdly far above the chosen
  // index (beyond any acceptance window) is not indexed, hence never served.
  if (slot < recent_base_ || slot - recent_base_ >= kRecentSlotsMax) return;
  const uint64_t i = slot - recent_base_;
  if (i >= recent_.size()) recent_.resize(i + 1);
  recent_[i] = copy;
}

void AcceptorLog::seal_groups(uint64_t chosen_index) {
  // Bounded by the groups the chosen index passed since the last call.
  while (recent_base_ + kIndexGroupSlots - 1 <= chosen_index) {
    Group g;
    bool complete = recent_.size() >= kIndexGroupSlots;
    bool back_to_back = true;
    for (uint32_t k = 0; complete && k < kIndexGroupSlots; ++k) {
      if (recent_[k].offset == kNoOffset) {
        complete = false;
      } else if (k > 0 && recent_[k].offset != recent_[k - 1].offset + recent_[k - 1].bytes) {
        back_to_back = false;
      }
    }
    if (complete) {
      g.offset = recent_[0].offset;
      if (!back_to_back) {
        g.irregular = static_cast<uint32_t>(irregular_.size());
        irregular_.emplace_back();
        for (uint32_t k = 0; k < kIndexGroupSlots; ++k) irregular_.back()[k] = recent_[k].offset;
      }
    }
    groups_.push_back(g);
    const size_t drop = std::min<size_t>(recent_.size(), kIndexGroupSlots);
    recent_.erase(recent_.begin(), recent_.begin() + static_cast<ptrdiff_t>(drop));
    recent_base_ += kIndexGroupSlots;
  }
}

size_t AcceptorLog::index_bytes() const {
  return recent_.size() * sizeof(SlotCopy) + groups_.size() * sizeof(Group) +
         irregular_.size() * sizeof(irregular_[0]);
}

Status AcceptorLog::pread_exact(std::byte* dst, size_t bytes, uint64_t offset) const {
  size_t done = 0;
  while (done < bytes) {  // bounded: each pass reads >= 1 byte or fails
    const ssize_t n =
        ::pread(wal_->fd(), dst + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("cannot read", wal_->path());
    if (n == 0) {
      return Status::Corruption(fmt::format("acceptor WAL {}: ends at offset {} inside an entry",
                                            wal_->path(), offset + done));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<uint64_t> AcceptorLog::read_entry_size(uint64_t slot, uint64_t offset) const {
  alignas(8) std::byte head[kLogHeaderBytes];
  SHOAL_TRY(pread_exact(head, sizeof head, offset));
  auto size = LogEntryView::peek_entry_bytes({head, sizeof head}, offset);
  if (!size.ok()) {
    return Status::Corruption(
        fmt::format("acceptor WAL {}: slot {}: {}", wal_->path(), slot, size.status().message()));
  }
  return uint64_t{*size};
}

Result<AcceptorLog::Location> AcceptorLog::locate(uint64_t slot) {
  if (slot >= recent_base_) {
    const uint64_t i = slot - recent_base_;
    if (i < recent_.size() && recent_[i].offset != kNoOffset) {
      return Location{recent_[i].offset, recent_[i].checksum};
    }
  } else if ((slot - 1) / kIndexGroupSlots < group_base_) {
    // An older segment's slot (or one a checkpoint covers): not served from here.
  } else if (const Group& g = groups_[(slot - 1) / kIndexGroupSlots - group_base_];
             g.offset != kNoOffset) {
    const uint32_t k = static_cast<uint32_t>((slot - 1) % kIndexGroupSlots);
    if (g.irregular != kRegularGroup) return Location{irregular_[g.irregular][k], 0};
    if (k != 0 && cursor_slot_ == slot) return Location{cursor_offset_, 0};
    uint64_t offset = g.offset;
    for (uint32_t i = 0; i < k; ++i) {  // bounded: hops over < kIndexGroupSlots headers
      auto size = read_entry_size(slot - k + i, offset);
      if (!size.ok()) return size.status();
      offset += *size;
    }
    return Location{offset, 0};
  }
  return Status::NotFound(
      fmt::format("acceptor WAL {}: slot {} is not in the log", wal_->path(), slot));
}

// Reads and validates the entry of `slot` at `at` into dst (at most `room` bytes).
Status AcceptorLog::read_one(uint64_t slot, const Location& at, size_t room, std::byte* dst,
                             uint64_t* entry_bytes) const {
  auto size = read_entry_size(slot, at.offset);
  if (!size.ok()) return size.status();
  *entry_bytes = *size;
  if (*size > room) {
    return Status::InvalidArgument(fmt::format(
        "acceptor WAL {}: slot {} holds {} bytes, more than the {} bytes left in this read",
        wal_->path(), slot, *size, room));
  }
  SHOAL_TRY(pread_exact(dst, *size, at.offset));
  auto view = LogEntryView::parse({dst, *size}, at.offset);
  std::string problem;
  if (!view.ok()) {
    problem = view.status().message();
  } else if (view->id().sequence != slot) {
    problem = fmt::format("entry at offset {} has sequence {}", at.offset, view->id().sequence);
  } else if (at.checksum != 0 && view->checksum() != at.checksum) {
    problem = fmt::format("entry at offset {} has checksum {:#x}, the journal names {:#x}",
                          at.offset, view->checksum(), at.checksum);
  }
  if (problem.empty()) return Status::Ok();
  return Status::Corruption(
      fmt::format("acceptor WAL {}: slot {}: {}; not served", wal_->path(), slot, problem));
}

Status AcceptorLog::read(uint64_t from_slot, uint64_t to_slot, uint32_t max_entries,
                         size_t max_bytes, std::vector<ChosenEntry>* out) {
  out->clear();
  if (from_slot == 0 || from_slot > chosen_noted_) {
    return Status::NotFound(fmt::format("acceptor WAL {}: slot {} is not chosen here (chosen {})",
                                        wal_->path(), from_slot, chosen_noted_));
  }
  to_slot = std::min(to_slot, chosen_noted_);
  if (read_buf_bytes_ < max_bytes) {  // grows to the caller's message size once
    read_buf_.reset(new uint64_t[(max_bytes + 7) / 8]);
    read_buf_bytes_ = max_bytes;
  }
  std::byte* buf = reinterpret_cast<std::byte*>(read_buf_.get());
  size_t used = 0;
  // Bounded by max_entries. After the first entry a problem ends the read with what was good;
  // the next read starts at the bad slot and reports it.
  for (uint64_t slot = from_slot; slot <= to_slot && out->size() < max_entries; ++slot) {
    auto at = locate(slot);
    uint64_t size = 0;
    Status st = at.ok() ? read_one(slot, *at, max_bytes - used, buf + used, &size) : at.status();
    if (!st.ok() && !out->empty()) break;
    SHOAL_TRY(st);
    out->push_back({slot, {buf + used, size}});
    used += size;
    cursor_slot_ = slot + 1;
    cursor_offset_ = at->offset + size;
  }
  return Status::Ok();
}

}  // namespace shoal::repl

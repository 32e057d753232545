#include "src/repl/acceptor_log.h"

#include "src/repl/copy_count.h"

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
// Journal format 1 (no format record) had a record per accepted entry (kind 2) and per
// learned entry (kind 4); format 2 has neither (see the header comment).
constexpr uint64_t kJournalFormat = 2;
enum : uint32_t { kPromise = 1, kChosen = 3, kFormat = 5, kSealed = 6 };

// Record layout: magic u32, kind u32, value u64 (format: the version; chosen: the index;
// sealed: the segment's highest slot), ballot u64 (promise), wal_offset u64 (the active WAL's
// end offset when the record was written), reserved u64, XXH3-64 of the first 40 bytes.
void encode(std::byte* r, uint32_t kind, uint64_t value, Ballot ballot, uint64_t wal_offset) {
  std::memset(r, 0, kRecordBytes);
  store_u32(r, kJournalMagic);
  store_u32(r + 4, kind);
  store_u64(r + 8, value);
  store_u64(r + 16, ballot);
  store_u64(r + 24, wal_offset);
  store_u64(r + 40, XXH3_64bits(r, 40));
}

// Whether the 48 bytes at r are a whole record (its magic and its own checksum): a torn or
// flipped one is not.
bool whole_record(const std::byte* r) {
  return load_u32(r) == kJournalMagic && load_u64(r + 40) == XXH3_64bits(r, 40);
}

// A journal opens with format(kJournalFormat); one of format 1 has no format record.
Status check_format_record(const std::byte* r, const std::string& path) {
  if (load_u32(r + 4) != kFormat) {
    return Status::NotSupported(fmt::format(
        "acceptor journal {}: format 1 (a record per accepted entry), this binary reads format "
        "{}; move the directory away and start the replica on an empty one (a follower "
        "bootstraps from its leader)",
        path, kJournalFormat));
  }
  if (load_u64(r + 8) != kJournalFormat) {
    return Status::NotSupported(fmt::format(
        "acceptor journal {}: format record {} at offset 0, this binary reads format {} only", path,
        load_u64(r + 8), kJournalFormat));
  }
  return Status::Ok();
}

Status io_error(const std::string& what, const std::string& path) {
  return Status::IOError(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

struct SegmentFiles {
  std::vector<uint64_t> wals;      // segment numbers with a WAL, ascending
  std::vector<uint64_t> journals;  // segment numbers with a journal
};

// Parses "stream-<s>.wal" (segment 0) or "stream-<s>.<n>.wal" for the suffix given.
bool parse_segment_name(const std::string& name, uint32_t stream, const char* suffix,
                        uint64_t* number) {
  const std::string plain = fmt::format("stream-{}.{}", stream, suffix);
  const std::string prefix = fmt::format("stream-{}.", stream);
  const std::string tail = fmt::format(".{}", suffix);
  if (name == plain) {
    *number = 0;
    return true;
  }
  if (!name.starts_with(prefix) || !name.ends_with(tail)) return false;
  const std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - tail.size());
  if (mid.empty() || mid.find_first_not_of("0123456789") != std::string::npos || mid.size() >= 19) {
    return false;
  }
  *number = std::stoull(mid);
  return true;
}

// The segments of stream `stream` in dir (segment 0: the unnumbered files).
Result<SegmentFiles> list_segments(const std::string& dir, uint32_t stream) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return io_error("cannot list", dir);
  SegmentFiles out;
  while (const dirent* e = ::readdir(d)) {  // bounded by the directory's entries
    uint64_t n = 0;
    if (parse_segment_name(e->d_name, stream, "wal", &n)) out.wals.push_back(n);
    if (parse_segment_name(e->d_name, stream, "acc", &n)) out.journals.push_back(n);
  }
  ::closedir(d);
  std::sort(out.wals.begin(), out.wals.end());
  return out;
}

// <dir>/stream-<s>.<suffix> (segment 0) or <dir>/stream-<s>.<n>.<suffix>.
std::string segment_path(const std::string& dir, uint32_t stream, uint64_t segment,
                         const char* suffix) {
  return segment == 0 ? fmt::format("{}/stream-{}.{}", dir, stream, suffix)
                      : fmt::format("{}/stream-{}.{}.{}", dir, stream, segment, suffix);
}

WalOptions acceptor_wal_options(FsyncPolicy policy) {
  WalOptions wo;
  // kAlways syncs every group of entries, however small: its syncs should carry data only.
  wo.preallocate_with_zeros = policy == FsyncPolicy::kAlways;
  // pwrite, not io_uring: the appender here is the replication thread, not a worker, and on a
  // busy machine io_uring's buffered writes wait for an io-wq thread to be scheduled (the
  // append waits for its completion), which showed as commit latency (commit 9cfa0af). The
  // WAL's own figures: docs/RESULTS.md, "Log format and WAL" (io_uring frees the caller's
  // CPU, pwrite finishes sooner on two busy cores).
  wo.use_io_uring = false;
  // The WAL never syncs by itself: kBatch and kAlways both group commit (AcceptorLog::sync,
  // or the leader's syncer when accept_sync_elsewhere). An fdatasync per entry bought no
  // guarantee (no reply or choice counts an acceptance before its sync either way) and made a
  // stream of small entries (group commit on the workers: StreamAppender::idle) cost a sync each.
  wo.fsync = FsyncPolicy::kNone;
  wo.allow_rewrites = true;
  return wo;
}

}  // namespace

std::string AcceptorLog::wal_path(uint64_t segment) const {
  return segment_path(dir_, stream_, segment, "wal");
}

std::string AcceptorLog::journal_path(uint64_t segment) const {
  return segment_path(dir_, stream_, segment, "acc");
}

Status AcceptorLog::open_segment(uint64_t number) {
  auto wal = Wal::open(wal_path(number), acceptor_wal_options(fsync_));
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
  segment_promised_ = false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("cannot stat", jpath);
  // A new journal opens with its format record (recover() writes it for one found empty).
  if (st.st_size == 0) SHOAL_TRY(append_record(kFormat, kJournalFormat, 0, 0, /*sync=*/false));
  return Status::Ok();
}

Result<std::unique_ptr<AcceptorLog>> AcceptorLog::open(const std::string& dir, uint32_t stream,
                                                       FsyncPolicy fsync,
                                                       bool accept_sync_elsewhere) {
  std::unique_ptr<AcceptorLog> log(new AcceptorLog(dir, stream, fsync, accept_sync_elsewhere));
  auto segments = list_segments(dir, stream);
  if (!segments.ok()) return segments.status();
  const std::vector<uint64_t>& wals = segments->wals;
  const uint64_t newest = wals.empty() ? 0 : wals.back();
  // A journal without its WAL below the newest segment: drop_covered_segments() deleted the
  // WAL and crashed before the journal. Finish the deletion.
  for (uint64_t n : segments->journals) {
    if (n < newest && !std::binary_search(wals.begin(), wals.end(), n)) {
      if (::unlink(log->journal_path(n).c_str()) != 0 && errno != ENOENT) {
        return io_error("cannot delete", log->journal_path(n));
      }
    }
  }
  for (size_t i = 0; i + 1 < wals.size(); ++i) {
    Segment seg;
    seg.number = wals[i];
    log->closed_.push_back(seg);  // the rest is filled by recover()
  }
  struct stat mark {};
  log->rejoining_ = ::stat(rejoin_mark_path(dir, stream).c_str(), &mark) == 0;
  SHOAL_TRY(log->open_segment(newest));
  return log;
}

std::string AcceptorLog::rejoin_mark_path(const std::string& dir, uint32_t stream) {
  return fmt::format("{}/stream-{}.rejoin", dir, stream);
}

Result<bool> AcceptorLog::holds_stream_log(const std::string& dir, uint32_t stream) {
  auto segments = list_segments(dir, stream);
  if (!segments.ok()) return segments.status();
  // A journal without any WAL holds no acceptance: the WAL was lost (its promises alone
  // would make a voter that forgot what it accepted).
  return !segments->wals.empty();
}

Status AcceptorLog::mark_rejoining(const std::string& dir, uint32_t stream) {
  const std::string path = rejoin_mark_path(dir, stream);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", tmp);
  const std::string text = fmt::format(
      "stream {} of this replica lost its acceptor log in a cluster with history: it answers no "
      "prepare and its acceptances count for nothing until it has caught up from a leader; "
      "then this file is deleted (docs/REPLICATION.md)\n",
      stream);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  ::close(fd);
  if (!written) return io_error("cannot write", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return io_error("cannot rename", tmp);
  return sync_dir(dir);
}

Status AcceptorLog::finish_rejoin() {
  if (!rejoining_) return Status::Ok();
  SHOAL_TRY(wal_->sync());  // every copy the vote will stand on, before the mark goes
  dirty_ = false;
  const std::string path = rejoin_mark_path(dir_, stream_);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return io_error("cannot delete", path);
  SHOAL_TRY(sync_dir(dir_));
  rejoining_ = false;
  return Status::Ok();
}

AcceptorLog::~AcceptorLog() {
  if (journal_fd_ >= 0) ::close(journal_fd_);
  for (const Segment& seg : closed_) {
    if (seg.read_fd >= 0) ::close(seg.read_fd);
  }
}

struct AcceptorLog::JournalFile {
  struct Promise {
    uint64_t wal_offset = 0;
    Ballot ballot = 0;
    uint64_t pos = 0;  // the record's offset in the journal
  };
  struct Hint {
    uint64_t wal_offset = 0;
    uint64_t chosen_index = 0;
    uint64_t pos = 0;
  };
  std::string path;
  std::vector<Promise> promises;  // in journal order: offsets and ballots never decrease
  std::vector<Hint> hints;        // likewise
  bool sealed = false;
  uint64_t sealed_max_slot = 0;

  Ballot promised() const { return promises.empty() ? 0 : promises.back().ballot; }
  // The highest chosen hint written when the WAL ended at or below wal_end: only those name
  // slots whose last copies all lie in a WAL prefix that survived.
  uint64_t chosen_hint(uint64_t wal_end) const {
    uint64_t index = 0;
    for (const Hint& h : hints) {  // bounded by the journal's records
      if (h.wal_offset <= wal_end) index = std::max(index, h.chosen_index);
    }
    return index;
  }
};

// Decodes one record at `pos` of the journal into jf; false when the record is torn.
Result<bool> AcceptorLog::decode_record(const std::byte* r, uint64_t pos, JournalFile* jf) {
  if (!whole_record(r)) return false;
  const uint32_t kind = load_u32(r + 4);
  const uint64_t value = load_u64(r + 8);
  const uint64_t wal_offset = load_u64(r + 24);
  if (pos == 0) SHOAL_TRY(check_format_record(r, jf->path));
  if (kind == kFormat && pos != 0) {
    return Status::NotSupported(fmt::format(
        "acceptor journal {}: format record {} at offset {}, this binary reads format {} only",
        jf->path, value, pos, kJournalFormat));
  }
  if (kind == kPromise) {
    jf->promises.push_back({wal_offset, load_u64(r + 16), pos});
  } else if (kind == kChosen) {
    jf->hints.push_back({wal_offset, value, pos});
  } else if (kind == kSealed) {
    jf->sealed = true;
    jf->sealed_max_slot = value;
  } else if (kind != kFormat) {
    return Status::Corruption(fmt::format(
        "acceptor journal {}: unknown record kind {} at offset {}", jf->path, kind, pos));
  }
  return true;
}

// Reads one segment's journal into jf and cuts a torn tail (the active segment's, the only
// one written last; a closed one was synced whole).
Status AcceptorLog::load_journal(uint64_t segment, JournalFile* jf) {
  jf->path = journal_path(segment);
  const bool active = segment == active_;
  const int fd = active ? journal_fd_ : ::open(jf->path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open", jf->path);
  struct Closer {
    int fd;
    bool own;
    ~Closer() {
      if (own) ::close(fd);
    }
  } closer{fd, !active};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("cannot stat", jf->path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  constexpr size_t kChunkRecords = 1024;
  std::vector<std::byte> chunk(kChunkRecords * kRecordBytes);
  uint64_t good = 0;
  bool torn = false;
  while (!torn && good + kRecordBytes <= size) {  // bounded by the file size
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), size - good));
    size_t have = 0;
    while (have < want) {
      const ssize_t n =
          ::pread(fd, chunk.data() + have, want - have, static_cast<off_t>(good + have));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("cannot read", jf->path);
      if (n == 0) break;
      have += static_cast<size_t>(n);
    }
    if (have < kRecordBytes) break;
    for (size_t at = 0; at + kRecordBytes <= have; at += kRecordBytes) {
      auto ok = decode_record(chunk.data() + at, good, jf);
      if (!ok.ok()) return ok.status();
      if (!*ok) {
        torn = true;
        break;
      }
      good += kRecordBytes;
    }
  }
  if (good != size) {
    std::fprintf(stderr, "acceptor journal %s: cutting %zu bytes at offset %zu\n", jf->path.c_str(),
                 static_cast<size_t>(size - good), static_cast<size_t>(good));
    if (::ftruncate(fd, static_cast<off_t>(good)) != 0 || ::fdatasync(fd) != 0) {
      return io_error("cannot truncate", jf->path);
    }
  }
  if (active) {
    journal_end_ = good;
    if (good == 0) SHOAL_TRY(append_record(kFormat, kJournalFormat, 0, 0, /*sync=*/false));
  }
  return Status::Ok();
}

struct AcceptorLog::Copies {
  struct Copy {
    EntryBuffer bytes;
    Ballot ballot = 0;  // 0: learned before any promise (a chosen value)
  };
  std::map<uint64_t, Copy> last;       // each slot's last copy above the covered slots
  std::map<uint64_t, SlotCopy> where;  // where those lie (global offsets)
  uint64_t superseded = 0;
};

// One segment's WAL, in order: each copy paired with the ballot of the last promise record at
// or below its offset; the last copy of a slot wins.
Result<WalRecovery> AcceptorLog::scan_copies(Wal& wal, const JournalFile& jf, uint64_t covered,
                                             uint64_t base, uint64_t* max_slot, Copies* copies) {
  uint64_t offset = 0;  // entries lie back to back from offset 0
  size_t below = 0;     // promise records at or below `offset`
  return wal.recover([&](const LogEntryView& e) -> Status {
    while (below < jf.promises.size() && jf.promises[below].wal_offset <= offset) ++below;
    const uint64_t slot = e.id().sequence;
    const uint64_t at = offset;
    offset += e.entry_bytes();
    *max_slot = std::max(*max_slot, slot);
    if (below == 0) {
      return Status::Corruption(fmt::format(
          "acceptor WAL {}: the copy of slot {} at offset {} lies below the first promise record "
          "of {} (its ballot is lost); move the directory away and start the replica on an "
          "empty one (a follower bootstraps from its leader)",
          wal.path(), slot, at, jf.path));
    }
    if (slot <= covered) return Status::Ok();  // applied through the checkpoint
    Copies::Copy& c = copies->last[slot];
    if (!c.bytes.empty()) ++copies->superseded;
    c = Copies::Copy{EntryBuffer(e.bytes()), jf.promises[below - 1].ballot};
    copies->where[slot] = SlotCopy{base + at, e.checksum(), e.entry_bytes()};
    return Status::Ok();
  });
}

// After a WAL lost a suffix its journal's records were written over (only without syncs:
// kNone and an OS crash), cuts the journal before the first record beyond the WAL's end and
// writes the promise again at that end: records keep offsets at or below the WAL's end, so
// copies appended from there on pair with the promise they are accepted in.
Status AcceptorLog::repair_journal(JournalFile* jf, uint64_t wal_end) {
  uint64_t cut = journal_end_;
  for (const auto& p : jf->promises) {
    if (p.wal_offset > wal_end) cut = std::min(cut, p.pos);
  }
  for (const auto& h : jf->hints) {
    if (h.wal_offset > wal_end) cut = std::min(cut, h.pos);
  }
  if (cut == journal_end_) return Status::Ok();
  const Ballot promised = jf->promised();
  std::fprintf(stderr,
               "acceptor journal %s: cutting %zu bytes at offset %zu (records beyond the end of "
               "its WAL at %zu)\n",
               jf->path.c_str(), static_cast<size_t>(journal_end_ - cut), static_cast<size_t>(cut),
               static_cast<size_t>(wal_end));
  if (::ftruncate(journal_fd_, static_cast<off_t>(cut)) != 0 || ::fdatasync(journal_fd_) != 0) {
    return io_error("cannot truncate", jf->path);
  }
  journal_end_ = cut;
  std::erase_if(jf->promises, [&](const auto& p) { return p.pos >= cut; });
  std::erase_if(jf->hints, [&](const auto& h) { return h.pos >= cut; });
  if (promised != jf->promised()) {
    jf->promises.push_back({wal_end, promised, journal_end_});
    SHOAL_TRY(append_record(kPromise, 0, promised, wal_end, /*sync=*/true));
  }
  return Status::Ok();
}

// One segment: its journal, then (unless a checkpoint covers every slot it holds) its WAL.
// seg: the closed segment's entry, nullptr for the active segment.
Status AcceptorLog::recover_segment(uint64_t number, Segment* seg, uint64_t covered, Copies* copies,
                                    RecoveryScan* scan) {
  JournalFile jf;
  SHOAL_TRY(load_journal(number, &jf));
  scan->promised = std::max(scan->promised, jf.promised());
  if (seg != nullptr) {
    seg->base = closed_bytes_;
    seg->path = wal_path(number);
    if (jf.sealed && jf.sealed_max_slot <= covered) {
      // Every copy is covered: the WAL is not even read.
      struct stat st {};
      seg->max_slot = jf.sealed_max_slot;
      seg->bytes = ::stat(wal_path(number).c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
      closed_bytes_ += seg->bytes;
      scan->chosen_hint = std::max(scan->chosen_hint, jf.chosen_hint(UINT64_MAX));
      return Status::Ok();
    }
    auto wal = Wal::open(wal_path(number), acceptor_wal_options(fsync_));
    if (!wal.ok()) return wal.status();
    auto rec = scan_copies(**wal, jf, covered, seg->base, &seg->max_slot, copies);
    if (!rec.ok()) return rec.status();
    seg->bytes = rec->bytes_kept;
    // Its copies above the cut are indexed: a leader serves them to a follower catching up.
    seg->read_fd = ::open(seg->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (seg->read_fd < 0) return io_error("cannot open", seg->path);
    closed_bytes_ += seg->bytes;
    scan->chosen_hint = std::max(scan->chosen_hint, jf.chosen_hint(rec->bytes_kept));
    return Status::Ok();
  }
  active_base_ = closed_bytes_;
  auto rec = scan_copies(*wal_, jf, covered, active_base_, &active_max_slot_, copies);
  if (!rec.ok()) return rec.status();
  SHOAL_TRY(repair_journal(&jf, rec->bytes_kept));
  segment_promised_ = !jf.promises.empty();
  scan->chosen_hint = std::max(scan->chosen_hint, jf.chosen_hint(rec->bytes_kept));
  scan->wal_bytes = rec->bytes_kept;
  return Status::Ok();
}

Result<AcceptorRecovery> AcceptorLog::recover(PaxosAcceptorStore& store, uint64_t covered) {
  AcceptorRecovery out;
  group_base_ = covered / kIndexGroupSlots;
  recent_base_ = 1 + kIndexGroupSlots * group_base_;
  // 1. Every segment, oldest first: the promise, each slot's last copy with its ballot, the
  // chosen hint.
  Copies copies;
  RecoveryScan scan;
  for (Segment& seg : closed_)
    SHOAL_TRY(recover_segment(seg.number, &seg, covered, &copies, &scan));
  if (wal_ != nullptr) SHOAL_TRY(recover_segment(active_, nullptr, covered, &copies, &scan));
  out.promised = scan.promised;
  out.superseded = copies.superseded;
  out.wal_bytes = scan.wal_bytes + closed_bytes_;

  // 2. Into the store (no hooks yet: nothing is written back).
  if (covered > 0) store.start_after(covered);
  if (out.promised != 0) SHOAL_TRY(store.promise(out.promised));
  promised_ = out.promised;
  for (auto& [slot, copy] : copies.last) {
    // A copy before any promise can only have been learned: a chosen value.
    SHOAL_TRY(copy.ballot == 0 ? store.learn(slot, copy.bytes.span())
                               : store.accept(slot, copy.ballot, copy.bytes.span()));
    if (auto it = copies.where.find(slot); it != copies.where.end()) index_copy(slot, it->second);
    ++out.slots;
  }
  for (uint64_t s = covered + 1; s <= scan.chosen_hint; ++s) {
    if (store.find(s) == nullptr || store.find(s)->value.empty()) break;
    store.mark_chosen(s);
  }
  out.chosen_index = store.advance();
  chosen_noted_ = out.chosen_index;
  seal_groups(chosen_noted_);
  return out;
}

Result<AcceptorRecovery> AcceptorLog::recover_closed(const std::string& dir, uint32_t stream,
                                                     uint64_t through, PaxosAcceptorStore& store,
                                                     uint64_t covered) {
  // kNone: nothing opened here preallocates or syncs.
  AcceptorLog log(dir, stream, FsyncPolicy::kNone, /*accept_sync_elsewhere=*/false);
  auto segments = list_segments(dir, stream);
  if (!segments.ok()) return segments.status();
  for (const uint64_t n : segments->wals) {  // bounded by the directory's segments
    if (n > through) break;
    Segment seg;
    seg.number = n;
    log.closed_.push_back(seg);
  }
  log.active_ = through + 1;  // never opened (wal_ stays null): recover() skips it
  return log.recover(store, covered);
}

Status AcceptorLog::rotate() {
  // Nothing unsynced may stay behind in the closed segment: a later group commit syncs only
  // the active WAL. The sealed record names the segment's highest slot, so recovery with a
  // checkpoint covering it need not read its WAL. Its preallocated zeros go first (durable
  // with the sync): a closed segment's size is its logical end, which later segments' global
  // offsets and a restart's (stat() of a covered segment) count on.
  SHOAL_TRY(wal_->trim_preallocation());
  SHOAL_TRY(wal_->sync());
  SHOAL_TRY(append_record(kSealed, active_max_slot_, 0, wal_->end_offset(), /*sync=*/false));
  if (::fdatasync(journal_fd_) != 0) return io_error("cannot sync", journal_path_);
  Segment closing{active_, active_max_slot_, wal_->end_offset(), active_base_, -1, wal_->path()};
  // Its copies stay indexed (global offsets) and served until the segment is deleted.
  closing.read_fd = ::open(closing.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (closing.read_fd < 0) return io_error("cannot open", closing.path);
  {
    // The syncer thread of a leader may be in sync_from_any_thread(): not while wal_ changes.
    // Appends before this point were synced above, so its later syncs need only the new WAL.
    std::lock_guard<std::mutex> lock(swap_mu_);
    const Status opened = open_segment(active_ + 1);
    if (!opened.ok()) {
      ::close(closing.read_fd);
      return opened;
    }
  }
  closed_.push_back(closing);
  closed_bytes_ += closing.bytes;
  active_base_ += closing.bytes;
  SHOAL_TRY(wal_->recover([](const LogEntryView&) { return Status::Ok(); }).status());
  // The new journal opens with the promise at offset 0: every copy the new WAL will hold lies
  // at or above it. The chosen hint at 0 names slots whose copies lie in synced segments.
  if (promised_ != 0) {
    SHOAL_TRY(append_record(kPromise, 0, promised_, 0, /*sync=*/false));
    segment_promised_ = true;
  }
  if (chosen_noted_ != 0) SHOAL_TRY(append_record(kChosen, chosen_noted_, 0, 0, false));
  if (::fdatasync(journal_fd_) != 0) return io_error("cannot sync", journal_path_);
  SHOAL_TRY(sync_dir(dir_));
  dirty_ = false;
  return Status::Ok();
}

Result<uint64_t> AcceptorLog::drop_covered_segments(uint64_t covered) {
  uint64_t freed = 0;
  uint64_t deleted_max_slot = 0;
  auto keep = closed_.begin();
  for (auto it = closed_.begin(); it != closed_.end(); ++it) {  // bounded by the segments
    if (it->max_slot > covered) {
      *keep++ = *it;
      continue;
    }
    // The WAL first: a WAL without its journal would hold copies without ballots, while a
    // journal without its WAL is deleted by the next open().
    if (::unlink(wal_path(it->number).c_str()) != 0 && errno != ENOENT) {
      return io_error("cannot delete", wal_path(it->number));
    }
    if (::unlink(journal_path(it->number).c_str()) != 0 && errno != ENOENT) {
      return io_error("cannot delete", journal_path(it->number));
    }
    if (it->read_fd >= 0) ::close(it->read_fd);
    it->read_fd = -1;
    deleted_max_slot = std::max(deleted_max_slot, it->max_slot);
    freed += it->bytes;
    closed_bytes_ -= it->bytes;
  }
  closed_.erase(keep, closed_.end());
  // The index forgets the groups whose slots all lie at or below the deleted segments' highest
  // slot (groups [0, that / kIndexGroupSlots)): it is as long as the WAL kept, not the log's
  // whole history. A slot of a kept group whose copy was deleted resolves to NotFound.
  // Bounded by the groups sealed since the last call.
  while (!groups_.empty() && group_base_ < deleted_max_slot / kIndexGroupSlots) {
    if (groups_.front().irregular != kRegularGroup) {
      SHOAL_ASSERT(groups_.front().irregular == irregular_base_ && !irregular_.empty(),
                   "irregular group %lu, base %lu", groups_.front().irregular, irregular_base_);
      irregular_.pop_front();
      ++irregular_base_;
    }
    groups_.pop_front();
    ++group_base_;
  }
  if (cursor_slot_ <= deleted_max_slot) cursor_slot_ = 0;
  return freed;
}

Status AcceptorLog::append_record(uint32_t kind, uint64_t value, Ballot ballot, uint64_t wal_offset,
                                  bool sync) {
  alignas(8) std::byte r[kRecordBytes];
  encode(r, kind, value, ballot, wal_offset);
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
    if (b <= promised_ && segment_promised_) return Status::Ok();  // already on record
    return persist_promise(std::max(b, promised_));
  };
  h.on_accept = [this](uint64_t slot, Ballot b, std::span<const std::byte> entry, bool) {
    return persist_accept(slot, b, entry);
  };
  h.on_learn = [this](uint64_t slot, std::span<const std::byte> entry) {
    return persist_learn(slot, entry);
  };
  h.on_rejoined = [this] { return finish_rejoin(); };
  return h;
}

Status AcceptorLog::sync_elsewhere_from_now_on() {
  SHOAL_ASSERT(fsync_ != FsyncPolicy::kNone, "%s", "a log synced elsewhere must sync");
  SHOAL_TRY(sync());
  accept_sync_elsewhere_ = true;
  return Status::Ok();
}

Status AcceptorLog::persist_promise(Ballot b) {
  // The WAL durable up to the record's offset first (rare: elections), so a promise record
  // never names an offset beyond what survives a crash. kNone: no syncs at all.
  if (fsync_ != FsyncPolicy::kNone && (accept_sync_elsewhere_ || dirty_)) {
    SHOAL_TRY(wal_->sync());
    dirty_ = false;
  }
  SHOAL_TRY(append_record(kPromise, 0, b, wal_->end_offset(), /*sync=*/true));
  promised_ = std::max(promised_, b);
  segment_promised_ = true;
  return Status::Ok();
}

Status AcceptorLog::persist_accept(uint64_t slot, Ballot b, std::span<const std::byte> entry) {
  // The bytes were validated by the stream before it accepts them. They are appended even
  // when the slot holds them already in a lower ballot (a leader re-proposing them): the
  // copy's offset is what carries its ballot.
  SHOAL_ASSERT(b >= promised_, "accept of slot %lu in ballot %lu below the promise %lu", slot, b,
               promised_);
  if (b > promised_ || !segment_promised_) SHOAL_TRY(persist_promise(b));
  const uint64_t offset = active_base_ + wal_->end_offset();
  note_slot(slot);
  SHOAL_TRY(wal_->append(entry));
  count_copy(CopyHop::kWalWrite, entry.size());  // pwrite: the kernel's copy into its cache
  if (fsync_ != FsyncPolicy::kNone && !accept_sync_elsewhere_) dirty_ = true;
  index_copy(slot, SlotCopy{offset, load_u64(entry.data() + 56), entry.size()});
  return Status::Ok();
}

Status AcceptorLog::persist_learn(uint64_t slot, std::span<const std::byte> entry) {
  // A chosen value counts towards nothing: no sync of its own; the next group commit (or the
  // leader's syncer) covers it, and a copy lost in a crash is learned again. Before any
  // promise it is written under a promise record of ballot 0 (recovery: chosen).
  if (!segment_promised_) SHOAL_TRY(persist_promise(promised_));
  const uint64_t offset = active_base_ + wal_->end_offset();
  note_slot(slot);
  SHOAL_TRY(wal_->append(entry));
  count_copy(CopyHop::kWalWrite, entry.size());  // pwrite: the kernel's copy into its cache
  if (fsync_ != FsyncPolicy::kNone && !accept_sync_elsewhere_) dirty_ = true;
  index_copy(slot, SlotCopy{offset, load_u64(entry.data() + 56), entry.size()});
  return Status::Ok();
}

Status AcceptorLog::sync() {
  if (!dirty_) return Status::Ok();
  SHOAL_TRY(wal_->sync());
  dirty_ = false;
  return Status::Ok();
}

Status AcceptorLog::sync_from_any_thread() const {
  std::lock_guard<std::mutex> lock(swap_mu_);
  if (::fdatasync(wal_->fd()) != 0) return io_error("cannot sync", wal_->path());
  return Status::Ok();
}

void AcceptorLog::note_chosen(uint64_t index) {
  // No sync: a lost hint only lengthens the re-learn from the leader after a restart. Its WAL
  // offset: recovery trusts it only if the WAL kept every copy written before it.
  if (index <= chosen_noted_) return;
  chosen_noted_ = index;
  append_record(kChosen, index, 0, wal_->end_offset(), /*sync=*/false).ignore();
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
    // A group whose copies straddle a rotation is kept per slot: hopping from its first copy
    // would read a deleted segment once the older one goes.
    if (complete && back_to_back &&
        segment_base_of(recent_[0].offset) ==
            segment_base_of(recent_[kIndexGroupSlots - 1].offset)) {
      g.offset = recent_[0].offset;
    } else {
      // Irregular, or some slots missing (the group straddles a checkpoint's cut after a
      // restart: the covered slots were never read): one offset per slot, kNoOffset where none.
      const size_t have = std::min<size_t>(recent_.size(), kIndexGroupSlots);
      bool any = false;
      for (size_t k = 0; k < have; ++k) any = any || recent_[k].offset != kNoOffset;
      if (any) {
        g.offset = 0;  // not kNoOffset: the group holds some slots, irregular_ says which
        g.irregular = irregular_base_ + irregular_.size();
        irregular_.emplace_back();
        irregular_.back().fill(kNoOffset);
        for (size_t k = 0; k < have; ++k) irregular_.back()[k] = recent_[k].offset;
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

uint64_t AcceptorLog::segment_base_of(uint64_t global_offset) const {
  if (global_offset >= active_base_) return active_base_;
  auto it = std::upper_bound(closed_.begin(), closed_.end(), global_offset,
                             [](uint64_t off, const Segment& seg) { return off < seg.base; });
  return it == closed_.begin() ? 0 : (it - 1)->base;
}

Result<AcceptorLog::FileAt> AcceptorLog::resolve(uint64_t global_offset, uint64_t bytes) const {
  if (global_offset >= active_base_) {
    return FileAt{wal_->fd(), global_offset - active_base_, &wal_->path()};
  }
  // The closed segment whose range holds it (closed_ is in base order).
  auto it = std::upper_bound(closed_.begin(), closed_.end(), global_offset,
                             [](uint64_t off, const Segment& seg) { return off < seg.base; });
  if (it == closed_.begin()) {
    return Status::NotFound(
        fmt::format("acceptor WAL of stream {} in {}: offset {} lies in a "
                    "deleted segment (truncated)",
                    stream_, dir_, global_offset));
  }
  const Segment& seg = *(it - 1);
  if (global_offset + bytes > seg.base + seg.bytes || seg.read_fd < 0) {
    return Status::NotFound(
        fmt::format("acceptor WAL {}: offset {} (+{} bytes) is not served "
                    "from this segment",
                    seg.path, global_offset - seg.base, bytes));
  }
  return FileAt{seg.read_fd, global_offset - seg.base, &seg.path};
}

Status AcceptorLog::pread_exact(std::byte* dst, size_t bytes, uint64_t offset) const {
  auto at = resolve(offset, bytes);
  if (!at.ok()) return at.status();
  size_t done = 0;
  while (done < bytes) {  // bounded: each pass reads >= 1 byte or fails
    const ssize_t n =
        ::pread(at->fd, dst + done, bytes - done, static_cast<off_t>(at->offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("cannot read", *at->path);
    if (n == 0) {
      return Status::Corruption(fmt::format("acceptor WAL {}: ends at offset {} inside an entry",
                                            *at->path, at->offset + done));
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
    if (g.irregular != kRegularGroup) {
      const uint64_t offset = irregular_[g.irregular - irregular_base_][k];
      if (offset != kNoOffset) return Location{offset, 0};
      return Status::NotFound(
          fmt::format("acceptor WAL {}: slot {} is not in the log", wal_->path(), slot));
    }
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
    problem = fmt::format("entry at offset {} has checksum {:#x}, the index holds {:#x}", at.offset,
                          view->checksum(), at.checksum);
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

// ---- the reach of a directory, read-only (read_acceptor_reach) --------------------------------

namespace {

struct ReadOnlyFile {
  int fd = -1;
  uint64_t size = 0;
  ~ReadOnlyFile() {
    if (fd >= 0) ::close(fd);
  }
};

Status open_read_only(const std::string& path, ReadOnlyFile* f) {
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) return io_error("cannot open", path);
  struct stat st {};
  if (::fstat(f->fd, &st) != 0) return io_error("cannot stat", path);
  f->size = static_cast<uint64_t>(st.st_size);
  return Status::Ok();
}

// Up to n bytes at offset: fewer only at the file's end.
Result<size_t> read_at(int fd, std::byte* dst, size_t n, uint64_t offset, const std::string& path) {
  size_t have = 0;
  while (have < n) {  // bounded: each pass reads at least a byte, or ends
    const ssize_t r = ::pread(fd, dst + have, n - have, static_cast<off_t>(offset + have));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error("cannot read", path);
    if (r == 0) break;
    have += static_cast<size_t>(r);
  }
  return have;
}

// Copies of slots above a chosen hint C may lie before the hint's own offset (accepted, not
// yet chosen, when it was written), but not before a hint of index C - this: an acceptor
// accepts no slot beyond its chosen index + its acceptance window (PaxosOptions::
// accept_window_slots), and its chosen index at any append before a hint of index i was
// below i. Twice the default window, for margin.
const uint64_t kReachScanBackSlots = 2 * uint64_t{PaxosOptions{}.accept_window_slots};

struct JournalTail {
  bool hint_found = false;
  uint64_t chosen = 0;      // the hint's index
  uint64_t wal_offset = 0;  // and the WAL offset it names
  // Where the WAL's copies of slots above `chosen` begin (the offset of a hint at least
  // kReachScanBackSlots below it, or 0 at the journal's start); not exact when the journal's
  // bytes read ended first (then the oldest hint's offset seen).
  uint64_t scan_from = 0;
  bool scan_from_exact = true;
  uint64_t torn_bytes = 0;  // at the end: what recovery would cut
};

// The last chosen hint of one journal whose WAL offset lies within wal_bytes (hints never
// decrease in journal order, so the last one is the highest), the torn tail after it, and
// where the copies above it begin; read backwards from the end over at most
// kReachJournalBytesMax. Hints are the common record (one per chosen slot), so this normally
// reads one chunk. A record torn in the middle of a journal (corruption, not a crash) is
// skipped here, while recovery would cut there.
Status read_journal_tail(const std::string& path, uint64_t wal_bytes, JournalTail* out) {
  ReadOnlyFile f;
  SHOAL_TRY(open_read_only(path, &f));
  const uint64_t records = f.size / kRecordBytes;
  out->torn_bytes = f.size - records * kRecordBytes;
  if (records == 0) return Status::Ok();
  alignas(8) std::byte first[kRecordBytes];
  auto got = read_at(f.fd, first, kRecordBytes, 0, path);
  if (!got.ok()) return got.status();
  if (*got < kRecordBytes || !whole_record(first)) {  // recovery would cut all of it
    out->torn_bytes = f.size;
    return Status::Ok();
  }
  SHOAL_TRY(check_format_record(first, path));
  constexpr uint64_t kChunkRecords = 1024;
  std::vector<std::byte> chunk(kChunkRecords * kRecordBytes);
  const uint64_t span = kReachJournalBytesMax / kRecordBytes;
  const uint64_t lowest = records > span ? records - span : 0;
  bool at_tail = true;  // no whole record yet, reading back from the end
  bool done = false;    // the hint and where its copies begin are found
  uint64_t end = records;
  // Bounded by kReachJournalBytesMax: records [lo, end) per pass, end decreasing.
  while (end > lowest && !done) {
    const uint64_t lo = std::max(lowest, end > kChunkRecords ? end - kChunkRecords : 0);
    const size_t bytes = static_cast<size_t>((end - lo) * kRecordBytes);
    got = read_at(f.fd, chunk.data(), bytes, lo * kRecordBytes, path);
    if (!got.ok()) return got.status();
    if (*got < bytes) break;  // cut meanwhile by a recovering replica: what was read stands
    for (uint64_t i = end - lo; i-- > 0 && !done;) {
      const std::byte* r = chunk.data() + i * kRecordBytes;
      if (!whole_record(r)) {
        if (at_tail) out->torn_bytes += kRecordBytes;
        continue;
      }
      at_tail = false;
      if (load_u32(r + 4) != kChosen) continue;
      const uint64_t index = load_u64(r + 8), wal_offset = load_u64(r + 24);
      if (!out->hint_found) {
        if (wal_offset > wal_bytes) continue;  // names WAL bytes that are gone: not trusted
        out->hint_found = true;
        out->chosen = index;
        out->wal_offset = out->scan_from = wal_offset;
      } else {
        out->scan_from = wal_offset;
        done = index + kReachScanBackSlots <= out->chosen;
      }
    }
    end = lo;
  }
  if (!done && end > 0) {
    out->scan_from_exact = false;  // the bound (or a cut) ended the read first
  } else if (!done) {
    out->scan_from = 0;  // the journal's start: every copy of the segment
  }
  return Status::Ok();
}

// A closed segment's highest slot: its journal's last record, sealed(highest slot), written
// and synced when the segment was closed (AcceptorLog::rotate). 0 when it is not there.
Result<uint64_t> sealed_max_slot(const std::string& path) {
  ReadOnlyFile f;
  SHOAL_TRY(open_read_only(path, &f));
  if (f.size < kRecordBytes) return uint64_t{0};
  alignas(8) std::byte r[kRecordBytes];
  const uint64_t last = (f.size / kRecordBytes - 1) * kRecordBytes;
  auto got = read_at(f.fd, r, kRecordBytes, last, path);
  if (!got.ok()) return got.status();
  if (*got < kRecordBytes || !whole_record(r) || load_u32(r + 4) != kSealed) return uint64_t{0};
  return load_u64(r + 8);
}

// The highest slot of the WAL's entries from `offset` (an entry boundary) on, each parsed whole
// (its checksum included), up to the first that is not an entry (the preallocated zeros of
// the log's end, or a torn tail) or until max_bytes were read (*exact false then).
Status scan_wal_slots(const std::string& path, uint64_t offset, uint64_t max_bytes,
                      uint64_t* highest, bool* exact) {
  ReadOnlyFile f;
  SHOAL_TRY(open_read_only(path, &f));
  std::vector<uint64_t> buf(kLogHeaderBytes / 8);  // 8-aligned for LogEntryView
  uint64_t scanned = 0;
  // Bounded by max_bytes: every pass reads one entry of at least kLogHeaderBytes.
  while (offset + kLogHeaderBytes <= f.size) {
    auto* bytes = reinterpret_cast<std::byte*>(buf.data());
    auto got = read_at(f.fd, bytes, kLogHeaderBytes, offset, path);
    if (!got.ok()) return got.status();
    if (*got < kLogHeaderBytes) break;
    auto size = LogEntryView::peek_entry_bytes({bytes, kLogHeaderBytes}, offset);
    if (!size.ok() || offset + *size > f.size) break;
    if (scanned + *size > max_bytes) {
      *exact = false;
      break;
    }
    if (buf.size() * 8 < *size) buf.resize((*size + 7) / 8);
    bytes = reinterpret_cast<std::byte*>(buf.data());
    got = read_at(f.fd, bytes, *size, offset, path);
    if (!got.ok()) return got.status();
    if (*got < *size) break;
    auto entry = LogEntryView::parse({bytes, *size}, offset);
    if (!entry.ok()) break;
    *highest = std::max(*highest, entry->id().sequence);
    offset += *size;
    scanned += *size;
  }
  return Status::Ok();
}

}  // namespace

Result<AcceptorReach> read_acceptor_reach(const std::string& dir, uint32_t stream,
                                          uint64_t scan_bytes_max) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::NotFound(fmt::format("{}: no replica directory", dir));
  }
  auto segments = list_segments(dir, stream);
  if (!segments.ok()) return segments.status();
  const std::vector<uint64_t>& wals = segments->wals;
  AcceptorReach out;
  out.segments = wals.size();
  out.rejoining = ::stat(AcceptorLog::rejoin_mark_path(dir, stream).c_str(), &st) == 0;
  if (wals.empty()) return out;
  std::vector<uint64_t> wal_bytes(wals.size(), 0);
  for (size_t i = 0; i < wals.size(); ++i) {  // bounded by the segments
    if (::stat(segment_path(dir, stream, wals[i], "wal").c_str(), &st) == 0) {
      wal_bytes[i] = static_cast<uint64_t>(st.st_size);
    }
    out.wal_bytes += wal_bytes[i];
  }
  const size_t active = wals.size() - 1;
  // The chosen hint: the newest journal that holds one (a new segment's journal repeats it
  // at offset 0, so normally the active one's).
  uint64_t scan_from = 0;                   // where the active WAL's copies above the hint begin
  for (size_t i = wals.size(); i-- > 0;) {  // bounded by the segments
    const std::string journal = segment_path(dir, stream, wals[i], "acc");
    if (::stat(journal.c_str(), &st) != 0) continue;  // the active one before its first record
    JournalTail tail;
    SHOAL_TRY(read_journal_tail(journal, wal_bytes[i], &tail));
    if (i == active) out.journal_bytes_torn = tail.torn_bytes;
    if (tail.hint_found) {
      out.chosen = tail.chosen;
      if (i == active) {
        scan_from = tail.scan_from;
        out.highest_exact = tail.scan_from_exact;
      }
      break;
    }
  }
  out.highest_slot = out.chosen;
  for (size_t i = 0; i < active; ++i) {  // bounded by the segments
    auto sealed = sealed_max_slot(segment_path(dir, stream, wals[i], "acc"));
    if (sealed.ok()) out.highest_slot = std::max(out.highest_slot, *sealed);
  }
  SHOAL_TRY(scan_wal_slots(segment_path(dir, stream, wals[active], "wal"), scan_from,
                           scan_bytes_max, &out.highest_slot, &out.highest_exact));
  return out;
}

}  // namespace shoal::repl

#include "src/repl/acceptor_log.h"

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
enum : uint32_t { kPromise = 1, kAccept = 2, kChosen = 3 };

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

Result<std::unique_ptr<AcceptorLog>> AcceptorLog::open(const std::string& dir, uint32_t stream,
                                                       FsyncPolicy fsync,
                                                       bool accept_sync_elsewhere) {
  WalOptions wo;
  // pwrite, not io_uring: the appender here is the replication thread, not a worker, and on a
  // busy machine io_uring's buffered writes wait for an io-wq thread to be scheduled (the
  // append waits for its completion), which showed as commit latency. Measured in
  // docs/REPLICATION.md.
  wo.use_io_uring = false;
  wo.fsync = fsync == FsyncPolicy::kAlways && !accept_sync_elsewhere ? FsyncPolicy::kAlways
                                                                      : FsyncPolicy::kNone;
  wo.allow_rewrites = true;
  auto wal = Wal::open(fmt::format("{}/stream-{}.wal", dir, stream), wo);
  if (!wal.ok()) return wal.status();
  const std::string jpath = fmt::format("{}/stream-{}.acc", dir, stream);
  const int fd = ::open(jpath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open", jpath);
  return std::unique_ptr<AcceptorLog>(
      new AcceptorLog(std::move(*wal), fd, jpath, fsync, accept_sync_elsewhere));
}

AcceptorLog::~AcceptorLog() {
  if (journal_fd_ >= 0) ::close(journal_fd_);
}

Result<AcceptorRecovery> AcceptorLog::recover(PaxosAcceptorStore& store) {
  AcceptorRecovery out;
  // 1. The journal: the promise, each slot's latest (ballot, checksum), the chosen hint.
  struct Want {
    Ballot ballot = 0;
    uint64_t checksum = 0;
  };
  std::map<uint64_t, Want> want;
  struct stat st {};
  if (::fstat(journal_fd_, &st) != 0) return io_error("cannot stat", journal_path_);
  std::vector<std::byte> journal(static_cast<size_t>(st.st_size));
  size_t have = 0;
  while (have < journal.size()) {  // bounded by the file size
    const ssize_t n = ::pread(journal_fd_, journal.data() + have, journal.size() - have,
                              static_cast<off_t>(have));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("cannot read", journal_path_);
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  size_t good = 0;
  uint64_t chosen_hint = 0;
  for (; good + kRecordBytes <= have; good += kRecordBytes) {
    const std::byte* r = journal.data() + good;
    if (load_u32(r) != kJournalMagic || load_u64(r + 40) != XXH3_64bits(r, 40)) break;
    const uint32_t kind = load_u32(r + 4);
    const uint64_t slot = load_u64(r + 8);
    const Ballot ballot = load_u64(r + 16);
    if (kind == kPromise) {
      out.promised = std::max(out.promised, ballot);
    } else if (kind == kAccept) {
      want[slot] = Want{ballot, load_u64(r + 24)};
    } else if (kind == kChosen) {
      chosen_hint = std::max(chosen_hint, slot);
    } else {
      break;
    }
  }
  if (good != static_cast<size_t>(st.st_size)) {
    std::fprintf(stderr, "acceptor journal %s: cutting %zu bytes at offset %zu\n",
                 journal_path_.c_str(), static_cast<size_t>(st.st_size) - good, good);
    if (::ftruncate(journal_fd_, static_cast<off_t>(good)) != 0 || ::fdatasync(journal_fd_) != 0) {
      return io_error("cannot truncate", journal_path_);
    }
  }
  journal_end_ = good;

  // 2. The WAL: the last copy of each slot whose checksum its record names.
  std::map<uint64_t, EntryBuffer> copies;
  auto rec = wal_->recover([&](const LogEntryView& e) {
    const uint64_t slot = e.id().sequence;
    auto it = want.find(slot);
    if (it != want.end() && it->second.checksum == e.checksum()) {
      copies[slot] = EntryBuffer(e.bytes());
    } else {
      ++out.dropped;
    }
    return Status::Ok();
  });
  if (!rec.ok()) return rec.status();
  out.wal_bytes = rec->bytes_kept;

  // 3. Into the store (no hooks yet: nothing is written back).
  if (out.promised != 0) SHOAL_TRY(store.promise(out.promised));
  for (auto& [slot, copy] : copies) {
    SHOAL_TRY(store.accept(slot, want[slot].ballot, copy.span()));
    ++out.slots;
  }
  out.dropped += want.size() - copies.size();
  for (uint64_t s = 1; s <= chosen_hint; ++s) {
    if (store.find(s) == nullptr || store.find(s)->value.empty()) break;
    store.mark_chosen(s);
  }
  out.chosen_index = store.advance();
  chosen_noted_ = out.chosen_index;
  return out;
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
  h.on_promise = [this](Ballot b) { return append_record(kPromise, 0, b, 0, /*sync=*/true); };
  h.on_accept = [this](uint64_t slot, Ballot b, std::span<const std::byte> entry,
                       bool new_bytes) -> Status {
    // The bytes were validated by the stream before it accepts them. Only a new value goes to
    // the WAL; a higher ballot for bytes already logged needs only its record.
    const uint64_t checksum = load_u64(entry.data() + 56);
    if (new_bytes) SHOAL_TRY(wal_->append(entry));
    if (accept_sync_elsewhere_) return append_record(kAccept, slot, b, checksum, false);
    SHOAL_TRY(append_record(kAccept, slot, b, checksum, fsync_ == FsyncPolicy::kAlways));
    if (fsync_ == FsyncPolicy::kBatch) dirty_ = true;
    return Status::Ok();
  };
  return h;
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
}

}  // namespace shoal::repl

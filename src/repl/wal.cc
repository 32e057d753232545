#include "src/repl/wal.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace shoal::repl {

namespace {

Status io_error(std::string_view what, const std::string& path, int err) {
  return Status::IOError(fmt::format("{} {}: {}", what, path, strerror(err)));
}

}  // namespace

Status sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("open directory", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return io_error("sync directory", dir, err);
  return Status::Ok();
}

Status sync_parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  return sync_dir(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash));
}

namespace {

// A read window over the file for recovery: entries are fetched by (offset, length) and read
// in large chunks, so a log of many small entries costs few syscalls. Bytes handed out stay
// valid until the next fetch. The buffer is made of u64 words: views decode it in place.
class ScanWindow {
 public:
  static constexpr size_t kChunkBytes = 1 << 20;
  ScanWindow(int fd, uint64_t file_bytes) : fd_(fd), file_bytes_(file_bytes) {}

  // Bytes [off, off + n) of the file, or fewer if the file ends first. Errors are I/O errors.
  // REQUIRES: off is 8-aligned (every entry size is a multiple of 8).
  Result<std::span<const std::byte>> fetch(uint64_t off, size_t n) {
    if (off >= base_ && off + n <= base_ + len_) return span_at(off, n);
    const size_t keep = (off >= base_ && off < base_ + len_) ? base_ + len_ - off : 0;
    std::byte* data = bytes();
    if (keep != 0) std::memmove(data, data + (off - base_), keep);
    base_ = off;
    len_ = keep;
    const size_t want = std::max(n, kChunkBytes);
    const size_t avail = off >= file_bytes_ ? 0 : file_bytes_ - off;
    const size_t target = std::min(want, avail);
    if (words_.size() * 8 < target) words_.resize((target + 7) / 8);  // grows to one entry
    data = bytes();
    while (len_ < target) {
      const ssize_t got =
          ::pread(fd_, data + len_, target - len_, static_cast<off_t>(base_ + len_));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        return Status::IOError(fmt::format("read at {}: {}", base_ + len_, strerror(errno)));
      if (got == 0) break;
      len_ += static_cast<size_t>(got);
    }
    return span_at(off, std::min<size_t>(n, len_));
  }

 private:
  std::byte* bytes() { return reinterpret_cast<std::byte*>(words_.data()); }
  std::span<const std::byte> span_at(uint64_t off, size_t n) {
    return {bytes() + (off - base_), n};
  }

  int fd_;
  uint64_t file_bytes_;
  std::vector<uint64_t> words_;
  uint64_t base_ = 0;
  size_t len_ = 0;
};

// The offset of the first non-zero byte in [from, file_bytes), or file_bytes when they are all
// zeros (a preallocated tail). Bounded by the file: chunks of the scan window.
// REQUIRES: from is 8-aligned or file_bytes.
Result<uint64_t> first_nonzero(ScanWindow& window, uint64_t from, uint64_t file_bytes) {
  while (from < file_bytes) {
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>(ScanWindow::kChunkBytes, file_bytes - from));
    Result<std::span<const std::byte>> got = window.fetch(from, want);
    if (!got.ok()) return got.status();
    if (got->empty()) return Status::IOError(fmt::format("the WAL ends before {}", file_bytes));
    const auto nz =
        std::find_if(got->begin(), got->end(), [](std::byte b) { return b != std::byte{0}; });
    if (nz != got->end()) return from + static_cast<uint64_t>(nz - got->begin());
    from += got->size();
  }
  return file_bytes;
}

// Why a valid entry may not follow the ones before it, or "" if it may.
std::string order_problem(const LogEntryView& e, const WalRecovery& r, const LogEntryId& first,
                          bool allow_rewrites) {
  if (r.entries_kept == 0) return "";
  const LogEntryId id = e.id();
  if (id.shard != first.shard || id.stream != first.stream) {
    return fmt::format("entry of shard {} stream {} in the log of shard {} stream {}", id.shard,
                       id.stream, first.shard, first.stream);
  }
  if (allow_rewrites) return id.sequence == 0 ? "sequence 0" : "";
  if (id.sequence <= r.last_sequence) {
    return fmt::format("sequence {} does not follow {}", id.sequence, r.last_sequence);
  }
  if (id.epoch < r.last_epoch) {
    return fmt::format("epoch {} after epoch {}", id.epoch, r.last_epoch);
  }
  return "";
}

}  // namespace

// ---- io_uring ---------------------------------------------------------------------------------

struct Wal::Ring {
  io_uring ring;
  ~Ring() { io_uring_queue_exit(&ring); }
};

Wal::Wal(std::string path, int fd, const WalOptions& options)
    : path_(std::move(path)), fd_(fd), options_(options) {}

Wal::~Wal() {
  ring_.reset();  // before the fd: the ring holds it as a fixed file
  if (fd_ < 0) return;
  // Unlock explicitly: the kernel tears an io_uring down asynchronously and its file reference
  // (which keeps the flock) can outlive close(), so a reopen right after could be refused.
  (void)::flock(fd_, LOCK_UN);
  ::close(fd_);
}

Result<std::unique_ptr<Wal>> Wal::open(const std::string& path, const WalOptions& options) {
  SHOAL_ASSERT(options.ring_entries >= 2 && options.ring_entries <= 4096, "ring_entries %u",
               options.ring_entries);
  SHOAL_ASSERT(options.preallocate_bytes <= (256u << 20), "preallocate_bytes %lu",
               options.preallocate_bytes);
  struct stat st;
  const bool existed = ::stat(path.c_str(), &st) == 0;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("open WAL", path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Status::Unavailable(fmt::format("WAL {} is open in another process", path));
    }
    return io_error("lock WAL", path, err);
  }
  // A new WAL's name must be durable before anything synced into it counts.
  if (!existed) {
    if (Status synced = sync_parent_dir(path); !synced.ok()) {
      ::close(fd);
      return synced;
    }
  }
  std::unique_ptr<Wal> wal(new Wal(path, fd, options));
  if (options.use_io_uring) wal->setup_ring();
  return wal;
}

void Wal::setup_ring() {
  auto r = std::make_unique<Ring>();
  int rc = io_uring_queue_init(options_.ring_entries, &r->ring, 0);
  if (rc < 0) {
    fmt::print(stderr, "wal {}: io_uring unavailable ({}); using pwrite\n", path_, strerror(-rc));
    return;
  }
  rc = io_uring_register_files(&r->ring, &fd_, 1);
  if (rc < 0) {
    fmt::print(stderr, "wal {}: io_uring cannot register the file ({}); using pwrite\n", path_,
               strerror(-rc));
    return;  // ~Ring exits the queue
  }
  ring_ = std::move(r);
}

Status Wal::register_buffers(std::span<const iovec> buffers) {
  SHOAL_ASSERT(registered_.empty(), "register_buffers() called twice");
  if (!ring_ || buffers.empty()) return Status::Ok();
  const int rc = io_uring_register_buffers(&ring_->ring, buffers.data(),
                                           static_cast<unsigned>(buffers.size()));
  if (rc < 0) {
    // Typically RLIMIT_MEMLOCK: appends still work, with plain WRITE instead of WRITE_FIXED.
    if (!options_.quiet) {
      fmt::print(stderr,
                 "wal {}: cannot register {} buffers ({}); appends copy through the "
                 "page cache without fixed buffers\n",
                 path_, buffers.size(), strerror(-rc));
    }
    return Status::Ok();
  }
  registered_.assign(buffers.begin(), buffers.end());
  return Status::Ok();
}

// ---- Recovery ---------------------------------------------------------------------------------

Result<WalRecovery> Wal::recover(const ReplayFn& replay) {
  SHOAL_ASSERT(!recovered_, "recover() called twice");
  struct stat st;
  if (::fstat(fd_, &st) != 0) return io_error("stat WAL", path_, errno);
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  ScanWindow window(fd_, file_bytes);
  WalRecovery report;
  LogEntryId first;
  uint64_t off = 0;
  std::string reason;
  bool zero_tail = false;
  while (off < file_bytes) {
    Result<std::span<const std::byte>> head = window.fetch(off, kLogHeaderBytes);
    if (!head.ok()) return head.status();
    // No entry starts with a zero byte (the magic): zeros here are preallocated, or a torn
    // write's, and only zeros to the end of the file are the clean end.
    if (head->front() == std::byte{0}) {
      Result<uint64_t> data_at = first_nonzero(window, off, file_bytes);
      if (!data_at.ok()) return data_at.status();
      zero_tail = *data_at == file_bytes;
      if (!zero_tail) {
        reason = fmt::format("zeros at offset {} followed by data at offset {}", off, *data_at);
      }
      break;
    }
    Result<size_t> size = LogEntryView::peek_entry_bytes(*head, off, options_.entry_bytes_max);
    if (!size.ok() && size.status().code() == Code::kNotSupported) return size.status();
    if (!size.ok()) {
      reason = size.status().message();
      break;
    }
    Result<std::span<const std::byte>> bytes = window.fetch(off, *size);
    if (!bytes.ok()) return bytes.status();
    Result<LogEntryView> entry = LogEntryView::parse(*bytes, off, options_.entry_bytes_max);
    if (!entry.ok() && entry.status().code() == Code::kNotSupported) return entry.status();
    if (!entry.ok()) {
      reason = entry.status().message();
      break;
    }
    reason = order_problem(*entry, report, first, options_.allow_rewrites);
    if (!reason.empty()) {
      reason = fmt::format("log entry at offset {}: {}", off, reason);
      break;
    }
    SHOAL_TRY(replay(*entry));
    if (report.entries_kept == 0) first = entry->id();
    ++report.entries_kept;
    report.last_sequence = entry->id().sequence;
    report.last_epoch = entry->id().epoch;
    off += *size;
  }
  report.bytes_kept = off;
  if (zero_tail) {
    report.bytes_preallocated = file_bytes - off;
  } else if (off < file_bytes) {
    SHOAL_TRY(cut_tail(off, file_bytes, reason, &report));
  }
  end_offset_ = off;
  allocated_end_ = zero_tail ? file_bytes : off;
  recovered_ = true;
  return report;
}

Status Wal::cut_tail(uint64_t good_end, uint64_t file_bytes, const std::string& reason,
                     WalRecovery* report) {
  report->bytes_cut = file_bytes - good_end;
  report->cut_reason = reason;
  if (!options_.quiet) {
    fmt::print(stderr, "wal {}: cutting {} bytes at offset {} ({}); kept {} entries, {} bytes\n",
               path_, report->bytes_cut, good_end, reason, report->entries_kept, good_end);
  }
  if (::ftruncate(fd_, static_cast<off_t>(good_end)) != 0) {
    return io_error("truncate WAL", path_, errno);
  }
  // The cut must be durable before new entries land after it, or a crash could resurrect the
  // bad tail behind them.
  if (::fdatasync(fd_) != 0) return io_error("sync WAL", path_, errno);
  return Status::Ok();
}

// ---- Appends ----------------------------------------------------------------------------------

Status Wal::append(std::span<const WalWrite> group) {
  SHOAL_ASSERT(recovered_, "append() before recover()");
  if (!failed_.ok()) return failed_;
  uint64_t group_bytes = 0;
  for (const WalWrite& w : group) {
    SHOAL_ASSERT(w.bytes.size() >= kLogHeaderBytes && w.bytes.size() % 8 == 0,
                 "not a sealed entry (%zu bytes)", w.bytes.size());
    SHOAL_DCHECK(load_u32(w.bytes.data()) == kLogMagic);
    group_bytes += w.bytes.size();
  }
  preallocate(end_offset_ + group_bytes);
  Status s = ring_ ? append_uring(group) : append_pwrite(group);
  if (!s.ok()) {
    failed_ = s;
    return s;
  }
  drop_cached_pages();
  return s;
}

void Wal::drop_cached_pages() {
  const uint64_t keep = options_.cache_keep_bytes;
  // One call per `keep` bytes appended: the syscall and the page frees are batched.
  if (keep == 0 || end_offset_ < cache_dropped_until_ + 2 * keep) return;
  // Ranges end on a 2 MiB boundary: the page cache may hold large folios (up to 2 MiB,
  // naturally aligned), and DONTNEED skips a folio that sticks out of the range, which no later
  // range would cover.
  constexpr uint64_t kFolioBytesMax = 2u << 20;
  const uint64_t until = (end_offset_ - keep) / kFolioBytesMax * kFolioBytesMax;
  if (until <= cache_dropped_until_) return;
  // Advice only: a failure costs memory, never data, so it is not an error of the append.
  (void)::posix_fadvise(fd_, static_cast<off_t>(cache_dropped_until_),
                        static_cast<off_t>(until - cache_dropped_until_), POSIX_FADV_DONTNEED);
  cache_dropped_until_ = until;
}

void Wal::preallocate(uint64_t needed_end) {
  if (options_.preallocate_bytes == 0 || needed_end <= allocated_end_) return;
  uint64_t step = std::min(options_.preallocate_bytes, std::max(kPreallocateMinBytes, end_offset_));
  if (options_.preallocate_with_zeros) step = std::min(step, kZeroStepBytesMax);
  constexpr uint64_t kPageBytes = 4096;  // whole blocks: the last one is never half data
  const uint64_t to = (needed_end + step + kPageBytes - 1) / kPageBytes * kPageBytes;
  int rc = -1;
  int err = 0;
  if (options_.preallocate_with_zeros) {
    err = write_zeros(allocated_end_, to);
    rc = err == 0 ? 0 : -1;
  }
  for (int attempt = 0; attempt < 4 && rc != 0 && err == 0; ++attempt) {  // bounded: EINTR only
    rc = ::fallocate(fd_, 0, static_cast<off_t>(allocated_end_),
                     static_cast<off_t>(to - allocated_end_));
    err = rc == 0 ? 0 : errno;
    if (err != EINTR) break;
  }
  if (rc != 0) {
    if (!options_.quiet) {
      fmt::print(stderr, "wal {}: cannot preallocate ({}); appends grow the file from now on\n",
                 path_, strerror(err));
    }
    options_.preallocate_bytes = 0;
    struct stat st;  // partly allocated: trim_preallocation() still cuts it
    if (::fstat(fd_, &st) == 0) allocated_end_ = std::max(allocated_end_, uint64_t(st.st_size));
    return;
  }
  allocated_end_ = to;
}

int Wal::write_zeros(uint64_t from, uint64_t to) {
  static constexpr std::array<std::byte, 64u << 10> kZeros{};
  // Bounded: each pass writes at least a byte or fails; EINTR retries at most a few times.
  for (int interrupted = 0; from < to;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(to - from, kZeros.size()));
    const ssize_t w = ::pwrite(fd_, kZeros.data(), n, static_cast<off_t>(from));
    if (w < 0 && errno == EINTR && ++interrupted < 4) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    from += static_cast<uint64_t>(w);
  }
  // Synced now, so the appends that overwrite these blocks find them written and allocated,
  // and their own syncs carry data only.
  return ::fdatasync(fd_) == 0 ? 0 : errno;
}

Status Wal::trim_preallocation() {
  SHOAL_ASSERT(recovered_, "trim_preallocation() before recover()");
  if (allocated_end_ <= end_offset_) return Status::Ok();
  if (::ftruncate(fd_, static_cast<off_t>(end_offset_)) != 0) {
    return io_error("truncate WAL", path_, errno);
  }
  allocated_end_ = end_offset_;
  return Status::Ok();
}

Status Wal::sync() {
  if (::fdatasync(fd_) != 0) return io_error("sync WAL", path_, errno);
  return Status::Ok();
}

namespace {

constexpr uint64_t kUringSyncTag = ~uint64_t{0};

Status pwrite_all(int fd, const std::byte* p, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    const ssize_t rc = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return io_error("write WAL", path, errno);
    p += rc;
    n -= static_cast<size_t>(rc);
    off += static_cast<uint64_t>(rc);
  }
  return Status::Ok();
}

}  // namespace

Status Wal::append_pwrite(std::span<const WalWrite> group) {
  for (const WalWrite& w : group) {
    SHOAL_TRY(pwrite_all(fd_, w.bytes.data(), w.bytes.size(), end_offset_, path_));
    end_offset_ += w.bytes.size();
    if (options_.fsync == FsyncPolicy::kAlways) SHOAL_TRY(sync());
  }
  if (options_.fsync == FsyncPolicy::kBatch && !group.empty()) SHOAL_TRY(sync());
  return Status::Ok();
}

// Submits the group in chunks that fit the ring: each entry is one WRITE (WRITE_FIXED from a
// registered buffer) on the fixed file; kAlways links an fdatasync after each write, kBatch
// puts one drained fdatasync after the group's last write. Completions carry the entry index.
Status Wal::append_uring(std::span<const WalWrite> group) {
  io_uring* ring = &ring_->ring;
  const bool always = options_.fsync == FsyncPolicy::kAlways;
  const size_t per_chunk = std::max<size_t>(1, (options_.ring_entries - 1) / (always ? 2 : 1));
  for (size_t begin = 0; begin < group.size(); begin += per_chunk) {
    const size_t end = std::min(group.size(), begin + per_chunk);
    const bool last_chunk = end == group.size();
    unsigned submitted = 0;
    uint64_t off = end_offset_;
    for (size_t i = begin; i < end; ++i) {
      const WalWrite& w = group[i];
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      SHOAL_ASSERT(sqe != nullptr, "io_uring submission queue full");
      const bool fixed =
          w.buffer_index >= 0 && static_cast<size_t>(w.buffer_index) < registered_.size();
      if (fixed) {
        io_uring_prep_write_fixed(sqe, 0, w.bytes.data(), static_cast<unsigned>(w.bytes.size()),
                                  off, w.buffer_index);
      } else {
        io_uring_prep_write(sqe, 0, w.bytes.data(), static_cast<unsigned>(w.bytes.size()), off);
      }
      sqe->flags |= IOSQE_FIXED_FILE | (always ? IOSQE_IO_LINK : 0);
      io_uring_sqe_set_data64(sqe, i);
      ++submitted;
      off += w.bytes.size();
      if (always || (last_chunk && i + 1 == end && options_.fsync == FsyncPolicy::kBatch)) {
        io_uring_sqe* s = io_uring_get_sqe(ring);
        SHOAL_ASSERT(s != nullptr, "io_uring submission queue full");
        io_uring_prep_fsync(s, 0, IORING_FSYNC_DATASYNC);
        s->flags |= IOSQE_FIXED_FILE | (always ? 0 : IOSQE_IO_DRAIN);
        io_uring_sqe_set_data64(s, kUringSyncTag);
        ++submitted;
      }
    }
    SHOAL_TRY(reap(group, begin, end_offset_, submitted));
    end_offset_ = off;
  }
  return Status::Ok();
}

// Submits what append_uring queued and waits for all `count` completions (all of them, even
// after an error, so the ring is empty for the next group). A short write is finished with
// pwrite; regular files rarely do that, but the kernel is allowed to.
Status Wal::reap(std::span<const WalWrite> group, size_t begin, uint64_t base_off, unsigned count) {
  io_uring* ring = &ring_->ring;
  int rc;
  do {
    rc = io_uring_submit_and_wait(ring, count);
  } while (rc == -EINTR);
  if (rc < 0) return io_error("io_uring submit for WAL", path_, -rc);
  Status first_error;
  bool short_write = false;
  for (unsigned done = 0; done < count; ++done) {
    io_uring_cqe* cqe = nullptr;
    do {
      rc = io_uring_wait_cqe(ring, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) return io_error("io_uring wait for WAL", path_, -rc);
    const uint64_t tag = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    if (res < 0) {
      if (first_error.ok() && res != -ECANCELED) first_error = io_error("write WAL", path_, -res);
      continue;
    }
    if (tag == kUringSyncTag) continue;
    const WalWrite& w = group[tag];
    if (static_cast<size_t>(res) == w.bytes.size()) continue;
    uint64_t off = base_off;  // rare path: find the entry's offset
    for (size_t i = begin; i < tag; ++i) off += group[i].bytes.size();
    const size_t written = static_cast<size_t>(res);
    SHOAL_TRY(
        pwrite_all(fd_, w.bytes.data() + written, w.bytes.size() - written, off + written, path_));
    short_write = true;
  }
  if (!first_error.ok()) return first_error;
  if (short_write && options_.fsync != FsyncPolicy::kNone) SHOAL_TRY(sync());
  return Status::Ok();
}

}  // namespace shoal::repl

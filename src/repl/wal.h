// Write-ahead log of one replication stream on one replica: a single file holding sealed log
// entries (src/repl/log_format.h) back to back, byte for byte as they were built or received.
//
// Appends take the very buffers the builder or the transport filled (no copy, no re-encoding)
// and write them with io_uring: a fixed file and, when the caller registered its buffer pool,
// WRITE_FIXED on registered buffers. Where io_uring cannot be set up (a container or kernel
// without it) the WAL says so once on stderr and uses pwrite; the file is the same.
//
// Durability is set by FsyncPolicy: kNone (the OS decides; a crash may lose a suffix), kBatch
// (one fdatasync after each appended group), kAlways (an fdatasync after every entry).
//
// Preallocation (WalOptions::preallocate_bytes): the file is kept allocated ahead of its
// logical end with fallocate(), so an append rarely changes the file's size. An append that
// grows the file has ext4 journal the new size, and the fdatasync after it waits for that
// journal commit (on this project's VM about 7x the cost of a sync of data alone; measured in
// docs/RESULTS.md). fallocate()d blocks are unwritten extents, which read as zeros: the first
// write into each 4 KiB block converts it, journaled too, so entries smaller than a block pay
// that commit only when they reach a new block. Writing zeros ahead instead spares even that,
// but writes every byte of the log twice (TPC-C at 3 replicas ran at 0.44-0.84x of no
// preallocation), so it is an option (preallocate_with_zeros) for fsync-always acceptors. When an
// append would pass the allocated end, the WAL allocates from there to a step beyond the append's
// end, in whole blocks (the step doubles with the file, from kPreallocateMinBytes up to
// preallocate_bytes). So the file holds at most one step past its last entry, and end_offset() is
// the logical end, not the file's size. An owner closing the file for good (AcceptorLog::rotate)
// cuts the tail with trim_preallocation(). A failed fallocate only turns preallocation off for this
// Wal (said once on stderr): it costs latency, never data.
//
// Recovery (recover(), once, before any append) scans from offset 0, validates each entry, and
// stops at the first one that is truncated, corrupted, or out of order (shard/stream differ
// from the first entry, sequence not increasing, epoch decreasing). Where the next entry would
// begin, zeros up to the end of the file are the preallocated tail: the clean end of the log,
// kept as it is (appends overwrite it), reported in bytes_preallocated and not as a cut. Zeros
// followed by any non-zero byte are not: the file is cut there like a bad entry. A cut
// truncates the file (the new end is fsynced), prints offset and reason on stderr, and reports
// what was kept and cut. A bad entry is never delivered. One exception: an entry of a newer
// format version stops recovery with NotSupported and the file is left untouched, so an older
// binary never destroys a newer binary's log.
//
// Threads: a Wal is owned by its stream's worker thread; no method is thread-safe. One process
// holds the file at a time (flock).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/repl/log_format.h"

namespace shoal::repl {

enum class FsyncPolicy : uint8_t { kNone, kBatch, kAlways };

struct WalOptions {
  FsyncPolicy fsync = FsyncPolicy::kBatch;
  bool use_io_uring = true;                      // false: pwrite always (tests, or to compare)
  uint32_t ring_entries = 64;                    // io_uring submission queue depth
  uint32_t entry_bytes_max = kLogEntryBytesMax;  // recovery refuses larger entries as corrupt
  bool quiet = false;                            // no stderr lines (tests that expect a cut)
  // Page cache the WAL keeps: once the file grew this far past what was last dropped, the
  // pages of everything but its last cache_keep_bytes (and up to 2 MiB more: ranges end on a
  // large folio's boundary) are dropped.
  // (posix_fadvise DONTNEED, once per range: the kernel drops only clean pages, so with
  // FsyncPolicy::kNone, whose pages are usually still dirty then, most stay cached.) Why: a
  // WAL is written once and read back only by recovery and catch-up, and letting it fill the
  // page cache makes every new page a fresh allocation (on this project's VM: host faults and
  // page zeroing, a whole vCPU of two after ~12 s of three WALs; docs/REPLICATION.md, "The WAL
  // leaves the page cache"). 0: never drop.
  uint64_t cache_keep_bytes = 16u << 20;
  // An acceptor's WAL: a slot may appear again (accepted again in a higher ballot, possibly
  // with another value before it was chosen), so recovery accepts any sequence >= 1 after any
  // other; the last copy of a slot wins (AcceptorLog pairs it with its ballot record).
  bool allow_rewrites = false;
  // The most a preallocation step allocates ahead of the logical end (see the header
  // comment); 0: no preallocation, every append grows the file. REQUIRES: <= 256 MiB.
  uint64_t preallocate_bytes = 1u << 20;
  // Preallocate by writing zeros (and syncing them) instead of fallocate(): appends then
  // overwrite blocks already written, so the fdatasync after each one flushes data only, with
  // no unwritten extent to convert and no journal commit to wait for (measured in
  // docs/RESULTS.md: faster and cheaper per sync). It writes the log
  // twice, so it pays only where syncs are many and bytes few: FsyncPolicy::kAlways acceptors
  // (AcceptorLog). Steps are at most kZeroStepBytesMax: the append that takes one waits for it.
  bool preallocate_with_zeros = false;
};

// The most one zero-writing preallocation step writes (WalOptions::preallocate_with_zeros).
inline constexpr uint64_t kZeroStepBytesMax = 256u << 10;

// The first preallocation step of a file; later steps double with the file's size up to
// WalOptions::preallocate_bytes, so a small WAL (a fresh segment, a test's) stays small.
inline constexpr uint64_t kPreallocateMinBytes = 64u << 10;

// One entry to append: its sealed bytes and, if they lie in a buffer registered with
// register_buffers(), that buffer's index (-1: not registered).
struct WalWrite {
  std::span<const std::byte> bytes;
  int buffer_index = -1;
};

struct WalRecovery {
  uint64_t entries_kept = 0;
  uint64_t bytes_kept = 0;
  uint64_t bytes_cut = 0;           // 0 when the file ended cleanly
  uint64_t bytes_preallocated = 0;  // the zero tail after the last entry (kept, not cut)
  uint64_t last_sequence = 0;       // of the last kept entry (0 when none)
  uint64_t last_epoch = 0;
  std::string cut_reason;  // empty when nothing was cut
};

class Wal {
 public:
  // Opens (creating if absent) the WAL file at `path` and takes an exclusive lock on it.
  [[nodiscard]] static Result<std::unique_ptr<Wal>> open(const std::string& path,
                                                         const WalOptions& options);
  ~Wal();
  Wal(const Wal&) = delete;
  Wal& operator=(const Wal&) = delete;

  // Replays every valid entry in order through `replay` (the view points into a scan buffer
  // and is valid only during the call), cuts a bad tail, and makes the WAL appendable. A
  // non-ok status from `replay` stops recovery and is returned; nothing is truncated then.
  // REQUIRES: called once, before append().
  using ReplayFn = std::function<Status(const LogEntryView&)>;
  [[nodiscard]] Result<WalRecovery> recover(const ReplayFn& replay);

  // Registers the caller's buffer pool with io_uring so appends from it use WRITE_FIXED.
  // A no-op returning Ok on the pwrite path. REQUIRES: at most once; the memory outlives the Wal.
  [[nodiscard]] Status register_buffers(std::span<const iovec> buffers);

  // Appends a group of sealed entries at the end of the file, in order, and returns when they
  // are written (and, by policy, synced). A failure leaves the Wal failed: later appends return
  // the same error; the torn tail is cut by recovery at the next open.
  // REQUIRES: recover() done; each entry a sealed entry (size a multiple of 8, >= 64 bytes).
  [[nodiscard]] Status append(std::span<const WalWrite> group);
  [[nodiscard]] Status append(std::span<const std::byte> entry, int buffer_index = -1) {
    const WalWrite w{entry, buffer_index};
    return append({&w, 1});
  }

  // fdatasync now, whatever the policy.
  [[nodiscard]] Status sync();

  // Cuts the preallocated zeros after the last entry (ftruncate to end_offset()), so the
  // file's size is its logical end (a segment being closed). Durable with the next sync();
  // appends after it preallocate again.
  [[nodiscard]] Status trim_preallocation();

  bool uses_io_uring() const { return ring_ != nullptr; }
  // For an fdatasync from another thread (it covers every append that returned before it).
  int fd() const { return fd_; }
  uint64_t end_offset() const { return end_offset_; }
  // The file's size: end_offset() plus the preallocated zeros after it.
  uint64_t allocated_end() const { return allocated_end_; }
  const std::string& path() const { return path_; }

 private:
  struct Ring;  // io_uring state; nullptr on the pwrite path
  Wal(std::string path, int fd, const WalOptions& options);
  void setup_ring();
  Status append_pwrite(std::span<const WalWrite> group);
  Status append_uring(std::span<const WalWrite> group);
  Status reap(std::span<const WalWrite> group, size_t begin, uint64_t base_off, unsigned count);
  void drop_cached_pages();
  void preallocate(uint64_t needed_end);
  // Writes zeros over [from, to) and syncs them (preallocate_with_zeros); errno on failure.
  int write_zeros(uint64_t from, uint64_t to);
  Status cut_tail(uint64_t good_end, uint64_t file_bytes, const std::string& reason,
                  WalRecovery* report);

  std::string path_;
  int fd_ = -1;
  WalOptions options_;
  std::unique_ptr<Ring> ring_;
  std::vector<iovec> registered_;
  uint64_t end_offset_ = 0;
  uint64_t allocated_end_ = 0;        // the file's size: end_offset_ + the zeros ahead of it
  uint64_t cache_dropped_until_ = 0;  // pages below it were dropped (drop_cached_pages)
  bool recovered_ = false;
  Status failed_;  // ok until an append fails
};

// Makes the entries of directory `dir` durable (a file created, renamed or deleted in it):
// open + fsync of the directory. IOError naming the directory and the failing step.
[[nodiscard]] Status sync_dir(const std::string& dir);
// sync_dir of the directory that holds `path` ("." for a bare file name).
[[nodiscard]] Status sync_parent_dir(const std::string& path);

}  // namespace shoal::repl

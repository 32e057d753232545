// AckJournal: what a shard server's TPC-C terminals were told "committed", written where it
// outlives the process, so that a benchmark that kills a leader can count the acknowledged
// transactions the cluster lost afterwards (`acknowledged_lost`, which must be 0).
//
// A terminal acknowledges a NewOrder once the vectorized watermark covers its vector (design
// section 3 step 8); the journal then holds its order key (w, d, o_id), appended to a per-worker
// file with write(2): once write returns, the bytes survive a SIGKILL of the process (they are
// the kernel's). What a worker acknowledged but had not yet written (at most kBufferedMax
// orders, and at most one flush period) was never seen outside the process, and is not counted:
// the journal is the client's record of what it was told.
//
// File format: little-endian records of 12 bytes (w_id u32, d_id u32, o_id u32), appended; a
// torn tail (a partial record) is ignored by the reader.
//
// Threads: one journal per worker, used on its loop thread only. The reader runs anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/status.h"

namespace shoal::server {

struct OrderKey {
  uint32_t w_id = 0, d_id = 0, o_id = 0;
};

class AckJournal {
 public:
  static constexpr size_t kBufferedMax = 1024;  // orders held before a write

  AckJournal() = default;
  ~AckJournal();
  AckJournal(const AckJournal&) = delete;
  AckJournal& operator=(const AckJournal&) = delete;

  // Opens (creating, appending) `path`. IOError naming it.
  [[nodiscard]] Status open(const std::string& path);
  bool is_open() const { return fd_ >= 0; }
  // Records an acknowledged order; writes when kBufferedMax are held. REQUIRES: is_open().
  void note(const OrderKey& order);
  // Writes what is held (the worker's tick calls it). A failed write is reported on stderr
  // once and the journal closes (the benchmark then reports fewer acknowledgements checked).
  void flush();
  uint64_t written() const { return written_; }

 private:
  int fd_ = -1;
  std::string path_;
  std::vector<OrderKey> held_;
  uint64_t written_ = 0;
};

// Every order key of a journal file (a torn last record is dropped). IOError if unreadable.
[[nodiscard]] Result<std::vector<OrderKey>> read_ack_journal(const std::string& path);

}  // namespace shoal::server

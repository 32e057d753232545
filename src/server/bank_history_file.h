// Bank history files: what a shard server's bank workers acknowledged, written where it
// outlives the process, so that the history a SIGKILLed leader's coordinators acknowledged
// reaches the serializability check (`shoal bench bank --kill-leader-at`).
//
// A worker appends every transaction it acknowledges (the vectorized watermark covered its
// vector: the point a client would be told "committed"; on a cluster without replicas, its
// commit) to a file of its own with write(2): once write returns, the bytes survive a SIGKILL
// of the process (they are the kernel's). The writer holds at most kBufferedBytesMax between
// writes and its worker flushes it every replication tick (1 ms busy), so a kill loses at most
// the last few milliseconds of acknowledgements, which no client outside the process saw. A
// transaction that committed but was never acknowledged (its vector not covered when a
// failover cut the wait short) goes in as a marker (its id only): the controller counts it but
// checks nothing about it.
//
// The file: a 32-byte header (kBankHistoryMagic, the run's id, shard, replica, worker, load:
// little-endian u64, u64, u32 x 4), then records, each:
//   u8 reads, u8 writes, u64 id, u64 time (wall clock, us since the epoch, when the worker
//   took it: for people tracing a failover), reads x (u64 key, u64 seq, u64 writer),
//   writes x (u64 key, u64 seq)
// reads == writes == 0 is the never-acknowledged marker; otherwise 1 <= reads <= 4 and
// writes <= 2. A file ends in a whole record unless its process died mid-write: the reader
// drops a torn last record (and says so), refuses a file whose header names another run, and
// calls anything else malformed (Corruption).
//
// Threads: a writer belongs to its worker's loop thread. The reader runs anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "src/check/history.h"

namespace shoal::server {

inline constexpr char kBankHistoryMagic[8] = {'S', 'H', 'B', 'A', 'N', 'K', 'H', '1'};
inline constexpr size_t kBankHistoryHeaderBytes = 32;
// Records one file takes (the writer counts the rest as dropped): 2 M x ~100 bytes bounds a
// worker's file at ~200 MiB.
inline constexpr uint64_t kBankHistoryFileTxnsMax = 2'000'000;
inline constexpr size_t kBankHistoryFilesMax = 4096;  // files one run directory may hold

// The header: which run and which worker's load wrote the file.
struct BankHistoryFileHeader {
  uint64_t run = 0;  // the controller's id of the run (MicroParams::history_run), never 0
  uint32_t shard = 0, replica = 0, worker = 0, load = 0;
};

// One record as the writer takes it (dist_bank.h's BankTxnRecord has this shape).
struct BankHistoryRecord {
  uint64_t id = 0;
  uint32_t reads = 0, writes = 0;
  const uint64_t* read_key = nullptr;  // reads each
  const uint64_t* read_seq = nullptr;
  const uint64_t* read_writer = nullptr;
  const uint64_t* write_key = nullptr;  // writes each
  const uint64_t* write_seq = nullptr;
};

class BankHistoryWriter {
 public:
  static constexpr size_t kBufferedBytesMax = 64 << 10;  // held before a write

  BankHistoryWriter() = default;
  ~BankHistoryWriter() { close(); }
  BankHistoryWriter(const BankHistoryWriter&) = delete;
  BankHistoryWriter& operator=(const BankHistoryWriter&) = delete;

  // Creates `path` (truncating) and writes its header. IOError naming it.
  // REQUIRES: header.run != 0.
  [[nodiscard]] Status open(const std::string& path, const BankHistoryFileHeader& header);
  bool is_open() const { return fd_ >= 0; }
  // Appends an acknowledged transaction. REQUIRES: 1 <= reads <= 4, writes <= 2.
  void add(const BankHistoryRecord& r);
  // Appends the marker of a transaction that committed without being acknowledged.
  void add_unacknowledged(uint64_t id);
  // Writes what is held. A failed write is reported on stderr and the file closes (the
  // controller then finds fewer transactions recorded and says so).
  void flush();
  // Flushes and closes; a no-op when closed.
  void close();
  uint64_t records() const { return records_; }  // taken, flushed or not
  uint64_t dropped() const { return dropped_; }  // over kBankHistoryFileTxnsMax

 private:
  void put_u64(uint64_t v);

  int fd_ = -1;
  std::string path_;
  std::string held_;  // at most kBufferedBytesMax + one record
  uint64_t records_ = 0;
  uint64_t dropped_ = 0;
};

// "bank-history-shard-S-replica-R-pid-P-worker-W-load-L.bin" under `dir`: one per worker and
// load of a process (a replica restarted after a kill gets a new pid, so a new file).
std::string bank_history_path(const std::string& dir, const BankHistoryFileHeader& header,
                              uint64_t pid);

// What one file held.
struct BankHistoryFileContents {
  BankHistoryFileHeader header;
  std::vector<check::TxnRecord> txns;  // the acknowledged transactions, in file order
  uint64_t unacknowledged = 0;         // markers
  uint64_t torn_bytes = 0;             // a torn last record (or header), dropped
};

// Reads one file. Errors: IOError (unreadable), InvalidArgument (not a bank history file, or
// one of a run other than `run`: refused), Corruption (a malformed record before the end).
[[nodiscard]] Result<BankHistoryFileContents> read_bank_history_file(const std::string& path,
                                                                     uint64_t run);

// Every bank history file of `dir`, merged.
struct BankHistoryFiles {
  std::vector<check::TxnRecord> txns;
  uint64_t files = 0;
  uint64_t unacknowledged = 0;
  uint64_t torn_files = 0;          // files whose torn last record was dropped
  std::vector<std::string> errors;  // a file refused or unreadable, naming it
};
// Reads every "bank-history-*.bin" in `dir` (at most kBankHistoryFilesMax; more is an error).
[[nodiscard]] BankHistoryFiles read_bank_history_files(const std::string& dir, uint64_t run);

}  // namespace shoal::server

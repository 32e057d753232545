#include "src/server/bank_history_file.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "src/base/assert.h"

namespace shoal::server {
namespace {

constexpr uint32_t kHistoryReadsMax = 4;
constexpr uint32_t kHistoryWritesMax = 2;
constexpr size_t kRecordFixedBytes = 18;  // reads, writes, id, time

// The wall clock in microseconds since the epoch: when a record was taken.
uint64_t wall_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

// Writes all of [p, p + n) to fd. False on an error (errno set).
bool history_write_all(int fd, const char* p, size_t n) {
  while (n > 0) {  // bounded: each pass writes >= 1 byte or fails
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

uint64_t history_u64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint32_t history_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

Status BankHistoryWriter::open(const std::string& path, const BankHistoryFileHeader& header) {
  SHOAL_ASSERT(header.run != 0, "bank history %s: no run id", path.c_str());
  close();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::IOError(fmt::format("bank history {}: {}", path, std::strerror(errno)));
  char h[kBankHistoryHeaderBytes] = {};
  std::memcpy(h, kBankHistoryMagic, 8);
  std::memcpy(h + 8, &header.run, 8);
  std::memcpy(h + 16, &header.shard, 4);
  std::memcpy(h + 20, &header.replica, 4);
  std::memcpy(h + 24, &header.worker, 4);
  std::memcpy(h + 28, &header.load, 4);
  if (!history_write_all(fd, h, sizeof h)) {
    const Status st =
        Status::IOError(fmt::format("bank history {}: {}", path, std::strerror(errno)));
    ::close(fd);
    return st;
  }
  fd_ = fd;
  path_ = path;
  held_.clear();
  held_.reserve(kBufferedBytesMax + 128);
  records_ = dropped_ = 0;
  return Status::Ok();
}

void BankHistoryWriter::put_u64(uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  held_.append(b, 8);
}

void BankHistoryWriter::add(const BankHistoryRecord& r) {
  SHOAL_ASSERT(r.reads >= 1 && r.reads <= kHistoryReadsMax && r.writes <= kHistoryWritesMax,
               "bank history record: %u reads, %u writes", r.reads, r.writes);
  if (fd_ < 0) return;
  if (records_ >= kBankHistoryFileTxnsMax) {
    ++dropped_;
    return;
  }
  held_.push_back(static_cast<char>(r.reads));
  held_.push_back(static_cast<char>(r.writes));
  put_u64(r.id);
  put_u64(wall_us());
  for (uint32_t i = 0; i < r.reads; ++i) {
    put_u64(r.read_key[i]);
    put_u64(r.read_seq[i]);
    put_u64(r.read_writer[i]);
  }
  for (uint32_t i = 0; i < r.writes; ++i) {
    put_u64(r.write_key[i]);
    put_u64(r.write_seq[i]);
  }
  ++records_;
  if (held_.size() >= kBufferedBytesMax) flush();
}

void BankHistoryWriter::add_unacknowledged(uint64_t id) {
  if (fd_ < 0) return;
  if (records_ >= kBankHistoryFileTxnsMax) {
    ++dropped_;
    return;
  }
  held_.push_back(0);
  held_.push_back(0);
  put_u64(id);
  put_u64(wall_us());
  ++records_;
  if (held_.size() >= kBufferedBytesMax) flush();
}

void BankHistoryWriter::flush() {
  if (fd_ < 0 || held_.empty()) return;
  if (!history_write_all(fd_, held_.data(), held_.size())) {
    std::fprintf(stderr, "bank history %s: write failed (%s); file closed\n", path_.c_str(),
                 std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
  }
  held_.clear();
}

void BankHistoryWriter::close() {
  if (fd_ < 0) return;
  flush();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string bank_history_path(const std::string& dir, const BankHistoryFileHeader& header,
                              uint64_t pid) {
  return fmt::format("{}/bank-history-shard-{}-replica-{}-pid-{}-worker-{}-load-{}.bin", dir,
                     header.shard, header.replica, pid, header.worker, header.load);
}

Result<BankHistoryFileContents> read_bank_history_file(const std::string& path, uint64_t run) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IOError(fmt::format("bank history {}: cannot open", path));
  // Bounded: the writer stops at kBankHistoryFileTxnsMax records.
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return Status::IOError(fmt::format("bank history {}: read failed", path));
  BankHistoryFileContents out;
  const size_t magic_seen = std::min(bytes.size(), sizeof kBankHistoryMagic);
  if (std::memcmp(bytes.data(), kBankHistoryMagic, magic_seen) != 0) {
    return Status::InvalidArgument(fmt::format("bank history {}: not a bank history file", path));
  }
  if (bytes.size() < kBankHistoryHeaderBytes) {  // died writing its header: nothing recorded
    out.torn_bytes = bytes.size();
    return out;
  }
  const char* h = bytes.data();
  out.header = {history_u64(h + 8), history_u32(h + 16), history_u32(h + 20), history_u32(h + 24),
                history_u32(h + 28)};
  if (out.header.run != run) {
    return Status::InvalidArgument(
        fmt::format("bank history {}: from another run (run id {:016x}, this run's {:016x}): "
                    "refused",
                    path, out.header.run, run));
  }
  size_t at = kBankHistoryHeaderBytes;
  while (at < bytes.size()) {  // bounded: each pass consumes a record or ends
    if (bytes.size() - at < kRecordFixedBytes) break;  // torn: counts, id, time not all there
    const auto reads = static_cast<uint8_t>(bytes[at]);
    const auto writes = static_cast<uint8_t>(bytes[at + 1]);
    const bool marker = reads == 0 && writes == 0;
    if (!marker && (reads == 0 || reads > kHistoryReadsMax || writes > kHistoryWritesMax)) {
      return Status::Corruption(
          fmt::format("bank history {}: malformed record at byte {} ({} reads, {} writes)", path,
                      at, unsigned{reads}, unsigned{writes}));
    }
    const size_t size = kRecordFixedBytes + 24 * size_t{reads} + 16 * size_t{writes};
    if (bytes.size() - at < size) break;  // torn
    const char* p = bytes.data() + at + 2;
    const uint64_t id = history_u64(p);
    p += 16;  // the id, then the time (for people reading the file; the check needs no clock)
    at += size;
    if (marker) {
      ++out.unacknowledged;
      continue;
    }
    check::TxnRecord rec;
    rec.id = id;
    for (uint32_t i = 0; i < reads; ++i, p += 24) {
      rec.read(history_u64(p), history_u64(p + 8), history_u64(p + 16));
    }
    for (uint32_t i = 0; i < writes; ++i, p += 16) rec.write(history_u64(p), history_u64(p + 8));
    out.txns.push_back(std::move(rec));
  }
  out.torn_bytes = bytes.size() - at;
  return out;
}

BankHistoryFiles read_bank_history_files(const std::string& dir, uint64_t run) {
  namespace fs = std::filesystem;
  BankHistoryFiles out;
  std::vector<std::string> paths;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("bank-history-") || !name.ends_with(".bin")) continue;
    if (paths.size() == kBankHistoryFilesMax) {
      out.errors.push_back(
          fmt::format("{}: more than {} bank history files", dir, kBankHistoryFilesMax));
      return out;
    }
    paths.push_back(it->path().string());
  }
  if (ec) {
    out.errors.push_back(fmt::format("{}: {}", dir, ec.message()));
    return out;
  }
  std::sort(paths.begin(), paths.end());  // a stable order for the report and the checker
  for (const std::string& p : paths) {
    auto file = read_bank_history_file(p, run);
    if (!file.ok()) {
      out.errors.push_back(file.status().to_string());
      continue;
    }
    ++out.files;
    out.unacknowledged += file->unacknowledged;
    if (file->torn_bytes != 0) ++out.torn_files;
    for (check::TxnRecord& t : file->txns) out.txns.push_back(std::move(t));
  }
  return out;
}

}  // namespace shoal::server

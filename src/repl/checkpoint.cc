#include "src/repl/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack (streaming hash)
#include <xxhash.h>

#include <fmt/format.h>

#include "src/base/ebr.h"
#include "src/repl/log_format.h"
#include "src/repl/wal.h"

namespace shoal::repl {
namespace {

// Layout (docs/LOG_FORMAT.md "Checkpoint files"), little-endian, every part 8-aligned:
//   header 64: magic u32, version u32, streams u32, tables u32, applied_tid u64,
//              bootstrap_tid u64, fence count u32 (version 2; 0 in version 1), zeros
//   per stream 24: next_slot u64, stream_tid u64, next_record u32, zero u32
//   per fence 16 (version 2): epoch u64, final_tid u64
//   per table 8: table id u32, key words u32
//   rows: table id u32, value bytes u32, tid u64, key words (version 3: a table of 0 key
//         words, a BytesTable, has packed byte keys: length u64, bytes padded to 8), value
//         padded to 8
//   end row: table id kEndTable, 0, row count; then the trailer (not hashed):
//   trailer 16: bytes before the trailer u64, XXH3-64 of those bytes u64
constexpr size_t kHeaderBytes = 64;
constexpr size_t kStreamBytes = 24;
constexpr size_t kTrailerBytes = 16;
constexpr uint32_t kEndTable = UINT32_MAX;
constexpr uint32_t kStreamsMax = 1024;
constexpr uint32_t kTablesMax = 1024;
constexpr uint32_t kRowsPerGuard = 4096;  // rows installed under one ebr::Guard

Status write_all(int fd, const std::byte* p, size_t n, const std::string& path) {
  while (n > 0) {  // bounded: each pass writes >= 1 byte or fails
    const ssize_t rc = ::write(fd, p, n);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return Status::IOError(fmt::format("write {}: {}", path, std::strerror(errno)));
    p += rc;
    n -= static_cast<size_t>(rc);
  }
  return Status::Ok();
}

// Buffers appends and writes them in kCheckpointChunkBytes pieces, hashing as it goes.
class ChunkWriter {
 public:
  ChunkWriter(int fd, std::string path)
      : fd_(fd), path_(std::move(path)), words_(kCheckpointChunkBytes / 8) {
    XXH3_64bits_reset(&hash_);
  }
  Status put(const void* p, size_t n) {
    const auto* src = static_cast<const std::byte*>(p);
    while (n > 0) {  // bounded: each pass copies >= 1 byte, flushing a full chunk first
      if (used_ == kCheckpointChunkBytes) SHOAL_TRY(flush());
      const size_t take = std::min(n, kCheckpointChunkBytes - used_);
      std::memcpy(bytes() + used_, src, take);
      used_ += take;
      src += take;
      n -= take;
    }
    return Status::Ok();
  }
  Status put_u32(uint32_t v) { return put(&v, 4); }
  Status put_u64(uint64_t v) { return put(&v, 8); }
  Status put_zeros(size_t n) {
    static constexpr std::byte kZeros[8] = {};
    return put(kZeros, n);
  }
  Status flush() {
    XXH3_64bits_update(&hash_, bytes(), used_);
    SHOAL_TRY(write_all(fd_, bytes(), used_, path_));
    written_ += used_;
    used_ = 0;
    return Status::Ok();
  }
  // Flushes and appends the trailer; returns the file size.
  Result<uint64_t> finish() {
    SHOAL_TRY(flush());
    alignas(8) std::byte trailer[kTrailerBytes];
    store_u64(trailer, written_);
    store_u64(trailer + 8, XXH3_64bits_digest(&hash_));
    SHOAL_TRY(write_all(fd_, trailer, sizeof trailer, path_));
    return written_ + kTrailerBytes;
  }

 private:
  std::byte* bytes() { return reinterpret_cast<std::byte*>(words_.data()); }
  int fd_;
  std::string path_;
  std::vector<uint64_t> words_;
  size_t used_ = 0;
  uint64_t written_ = 0;
  XXH3_state_t hash_;
};

// Sequential reads of [0, limit) through one kCheckpointChunkBytes buffer.
class ChunkReader {
 public:
  ChunkReader(int fd, uint64_t limit, std::string path)
      : fd_(fd), limit_(limit), path_(std::move(path)), words_(kCheckpointChunkBytes / 8) {}
  // Copies the next n bytes; Corruption if the content ends first.
  Status read(void* dst, size_t n) {
    auto* out = static_cast<std::byte*>(dst);
    while (n > 0) {  // bounded: each pass consumes buffered bytes or refills
      if (pos_ == len_) SHOAL_TRY(refill());
      const size_t take = std::min(n, len_ - pos_);
      std::memcpy(out, bytes() + pos_, take);
      pos_ += take;
      out += take;
      n -= take;
    }
    return Status::Ok();
  }
  Result<uint64_t> read_u64() {
    uint64_t v = 0;
    SHOAL_TRY(read(&v, 8));
    return v;
  }
  uint64_t offset() const { return file_off_ - (len_ - pos_); }

 private:
  std::byte* bytes() { return reinterpret_cast<std::byte*>(words_.data()); }
  Status refill() {
    if (file_off_ >= limit_) {
      return Status::Corruption(fmt::format(
          "checkpoint {}: content ends inside a row at offset {}; refused", path_, file_off_));
    }
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>(kCheckpointChunkBytes, limit_ - file_off_));
    size_t got = 0;
    while (got < want) {  // bounded by want
      const ssize_t n =
          ::pread(fd_, bytes() + got, want - got, static_cast<off_t>(file_off_ + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::IOError(fmt::format("read {}: {}", path_, std::strerror(errno)));
      if (n == 0) {
        return Status::Corruption(
            fmt::format("checkpoint {}: ends at offset {}; refused", path_, file_off_ + got));
      }
      got += static_cast<size_t>(n);
    }
    file_off_ += got;
    pos_ = 0;
    len_ = got;
    return Status::Ok();
  }
  int fd_;
  uint64_t limit_;
  std::string path_;
  std::vector<uint64_t> words_;
  size_t pos_ = 0, len_ = 0;
  uint64_t file_off_ = 0;
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status refuse(const std::string& path, const std::string& what) {
  return Status::Corruption(fmt::format("checkpoint {}: {}; refused", path, what));
}

Status write_header(ChunkWriter& w, const txn::Engine& engine, const ReplayCut& cut) {
  SHOAL_TRY(w.put_u32(kCheckpointMagic));
  SHOAL_TRY(w.put_u32(kCheckpointVersion));
  SHOAL_TRY(w.put_u32(static_cast<uint32_t>(cut.streams.size())));
  SHOAL_TRY(w.put_u32(static_cast<uint32_t>(engine.tables().size())));
  SHOAL_TRY(w.put_u64(cut.applied_tid));
  SHOAL_TRY(w.put_u64(cut.bootstrap_tid));
  SHOAL_TRY(w.put_u32(static_cast<uint32_t>(cut.fences.size())));
  SHOAL_TRY(w.put_u32(0));
  for (int i = 0; i < 3; ++i) SHOAL_TRY(w.put_u64(0));
  for (const StreamCut& s : cut.streams) {
    SHOAL_TRY(w.put_u64(s.next_slot));
    SHOAL_TRY(w.put_u64(s.stream_tid));
    SHOAL_TRY(w.put_u32(s.next_record));
    SHOAL_TRY(w.put_u32(0));
  }
  for (const EpochFence& f : cut.fences) {
    SHOAL_TRY(w.put_u64(f.epoch));
    SHOAL_TRY(w.put_u64(f.final_tid));
  }
  for (const auto& t : engine.tables()) {
    SHOAL_TRY(w.put_u32(t->id()));
    SHOAL_TRY(w.put_u32(static_cast<uint32_t>(t->key_words())));
  }
  return Status::Ok();
}

}  // namespace

std::string checkpoint_path(const std::string& dir, uint64_t seq) {
  return fmt::format("{}/checkpoint-{:012}.ckpt", dir, seq);
}

Result<std::vector<uint64_t>> list_checkpoints(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return Status::IOError(fmt::format("cannot list {}: {}", dir, std::strerror(errno)));
  }
  std::vector<uint64_t> seqs;
  while (const dirent* e = ::readdir(d)) {  // bounded by the directory's entries
    unsigned long long seq = 0;
    int end = 0;
    if (std::sscanf(e->d_name, "checkpoint-%llu.ckpt%n", &seq, &end) == 1 &&
        e->d_name[end] == '\0') {
      seqs.push_back(seq);
    }
  }
  ::closedir(d);
  std::sort(seqs.begin(), seqs.end());
  return seqs;
}

Result<CheckpointStats> write_checkpoint(const std::string& tmp_path, const txn::Engine& engine,
                                         const ReplayCut& cut) {
  Fd f{::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) {
    return Status::IOError(fmt::format("create {}: {}", tmp_path, std::strerror(errno)));
  }
  ChunkWriter w(f.fd, tmp_path);
  SHOAL_TRY(write_header(w, engine, cut));
  CheckpointStats stats;
  Status failed;
  for (const auto& t : engine.tables()) {
    const uint32_t id = t->id();
    const size_t key_words = t->key_words();
    t->scan_committed([&](const uint64_t* key, const void* value, uint32_t size, uint64_t tid) {
      failed = w.put_u32(id);
      if (failed.ok()) failed = w.put_u32(size);
      if (failed.ok()) failed = w.put_u64(tid);
      if (failed.ok()) failed = w.put(key, 8 * txn::untyped_key_words(key_words, key));
      if (failed.ok()) failed = w.put(value, size);
      if (failed.ok()) failed = w.put_zeros(pad8(size) - size);
      ++stats.rows;
      return failed.ok();
    });
    SHOAL_TRY(failed);
  }
  SHOAL_TRY(w.put_u32(kEndTable));
  SHOAL_TRY(w.put_u32(0));
  SHOAL_TRY(w.put_u64(stats.rows));
  auto bytes = w.finish();
  if (!bytes.ok()) return bytes.status();
  stats.bytes = *bytes;
  return stats;
}

Status publish_checkpoint(const std::string& tmp_path, const std::string& path) {
  {
    Fd f{::open(tmp_path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0 || ::fsync(f.fd) != 0) {
      return Status::IOError(fmt::format("sync {}: {}", tmp_path, std::strerror(errno)));
    }
  }
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    return Status::IOError(
        fmt::format("rename {} to {}: {}", tmp_path, path, std::strerror(errno)));
  }
  return sync_parent_dir(path);
}

namespace {

// Opens `path` and checks everything but the rows: returns the fd and the content length.
Status verify_open(const std::string& path, Fd* f, uint64_t* content_bytes) {
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) return Status::IOError(fmt::format("open {}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(f->fd, &st) != 0) {
    return Status::IOError(fmt::format("stat {}: {}", path, std::strerror(errno)));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes + kTrailerBytes) {
    return refuse(path, fmt::format("{} bytes, shorter than a header and trailer", size));
  }
  ChunkReader head(f->fd, size, path);
  alignas(8) std::byte h[kHeaderBytes];
  SHOAL_TRY(head.read(h, sizeof h));
  if (load_u32(h) != kCheckpointMagic) return refuse(path, "not a checkpoint (bad magic)");
  const uint32_t version = load_u32(h + 4);
  if (version > kCheckpointVersion) {
    return Status::NotSupported(
        fmt::format("checkpoint {}: format version {}, this binary reads up to {}; refused", path,
                    version, kCheckpointVersion));
  }
  if (version == 0) return refuse(path, "format version 0");
  alignas(8) std::byte trailer[kTrailerBytes];
  if (::pread(f->fd, trailer, sizeof trailer, static_cast<off_t>(size - kTrailerBytes)) !=
      static_cast<ssize_t>(kTrailerBytes)) {
    return Status::IOError(fmt::format("read {}: {}", path, std::strerror(errno)));
  }
  *content_bytes = size - kTrailerBytes;
  if (load_u64(trailer) != *content_bytes) {
    return refuse(path, fmt::format("the trailer says {} bytes of content, the file has {} "
                                    "(torn or truncated)",
                                    load_u64(trailer), *content_bytes));
  }
  XXH3_state_t hash;
  XXH3_64bits_reset(&hash);
  ChunkReader all(f->fd, *content_bytes, path);
  std::vector<uint64_t> chunk(kCheckpointChunkBytes / 8);
  for (uint64_t off = 0; off < *content_bytes;) {  // bounded by the file size
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(chunk.size() * 8, *content_bytes - off));
    SHOAL_TRY(all.read(chunk.data(), n));
    XXH3_64bits_update(&hash, chunk.data(), n);
    off += n;
  }
  if (XXH3_64bits_digest(&hash) != load_u64(trailer + 8)) {
    return refuse(path, "checksum mismatch (corrupted)");
  }
  return Status::Ok();
}

// Reads the header and the stream cuts after verification; *tables: the table count.
Result<ReplayCut> read_cut(ChunkReader& r, const std::string& path, uint32_t streams,
                           uint32_t* tables) {
  alignas(8) std::byte h[kHeaderBytes];
  SHOAL_TRY(r.read(h, sizeof h));
  const uint32_t file_streams = load_u32(h + 8);
  *tables = load_u32(h + 12);
  if (file_streams != streams || file_streams > kStreamsMax) {
    return Status::InvalidArgument(
        fmt::format("checkpoint {}: written for {} streams, this shard has {}; refused", path,
                    file_streams, streams));
  }
  ReplayCut cut;
  cut.applied_tid = load_u64(h + 16);
  cut.bootstrap_tid = load_u64(h + 24);
  const uint32_t fences = load_u32(h + 32);
  if (fences > kEpochFencesMax) return refuse(path, fmt::format("{} epoch fences", fences));
  cut.streams.resize(streams);
  for (StreamCut& s : cut.streams) {
    alignas(8) std::byte b[kStreamBytes];
    SHOAL_TRY(r.read(b, sizeof b));
    s.next_slot = load_u64(b);
    s.stream_tid = load_u64(b + 8);
    s.next_record = load_u32(b + 16);
    if (s.next_slot == 0) return refuse(path, "a stream's next slot is 0");
  }
  for (uint32_t i = 0; i < fences; ++i) {
    alignas(8) std::byte b[16];
    SHOAL_TRY(r.read(b, sizeof b));
    const EpochFence f{load_u64(b), load_u64(b + 8)};
    if (!cut.fences.empty() && f.epoch <= cut.fences.back().epoch) {
      return refuse(path, "epoch fences out of order");
    }
    cut.fences.push_back(f);
  }
  return cut;
}

// Reads the header, stream cuts and table list after verification.
Result<ReplayCut> read_layout(ChunkReader& r, const std::string& path, const txn::Engine& engine,
                              uint32_t streams) {
  uint32_t file_tables = 0;
  auto cut = read_cut(r, path, streams, &file_tables);
  if (!cut.ok()) return cut.status();
  if (file_tables != engine.tables().size() || file_tables > kTablesMax) {
    return Status::InvalidArgument(
        fmt::format("checkpoint {}: holds {} tables, the schema has {}; refused", path, file_tables,
                    engine.tables().size()));
  }
  for (const auto& t : engine.tables()) {
    alignas(8) std::byte b[8];
    SHOAL_TRY(r.read(b, sizeof b));
    if (load_u32(b) != t->id() || load_u32(b + 4) != t->key_words()) {
      return Status::InvalidArgument(fmt::format(
          "checkpoint {}: table {} has {} key words, the schema's table {} has {}; refused", path,
          load_u32(b), load_u32(b + 4), t->id(), t->key_words()));
    }
  }
  return cut;
}

// Reads a row's key into key: key_words words, or (0) a packed byte key, whose length is
// checked before its bytes are read.
Status read_key(ChunkReader& r, const std::string& path, size_t key_words, uint64_t* key) {
  if (key_words != 0) return r.read(key, key_words * 8);
  SHOAL_TRY(r.read(key, 8));
  if (key[0] < 1 || key[0] > txn::kBytesKeyBytesMax) {
    return refuse(path, fmt::format("byte key of {} bytes at offset {}", key[0], r.offset() - 8));
  }
  return r.read(key + 1, 8 * (txn::packed_key_words(key[0]) - 1));
}

Status load_rows(ChunkReader& r, const std::string& path, txn::Engine& engine,
                 uint64_t content_bytes) {
  const auto& tables = engine.tables();
  std::vector<uint64_t> value;  // sized by the largest row so far
  std::vector<uint64_t> key(txn::kPackedKeyWordsMax);
  uint64_t rows = 0;
  for (;;) {  // bounded by the verified length: every row consumes >= 16 bytes
    ebr::Guard guard;
    for (uint32_t i = 0; i < kRowsPerGuard; ++i) {
      alignas(8) std::byte h[16];
      SHOAL_TRY(r.read(h, sizeof h));
      const uint32_t table = load_u32(h);
      const uint32_t size = load_u32(h + 4);
      const uint64_t tid = load_u64(h + 8);
      if (table == kEndTable) {
        if (tid != rows || r.offset() != content_bytes) {
          return refuse(path, fmt::format("ends after {} rows, its end row says {}", rows, tid));
        }
        return Status::Ok();
      }
      const bool bytes_key = table < tables.size() && tables[table]->key_words() == 0;
      const uint32_t value_max =
          bytes_key ? txn::kBytesValueBytesMax : txn::TableBase::kValueBytesMax;
      if (table >= tables.size() || size > value_max || tid == 0) {
        return refuse(path, fmt::format("row {} at offset {}: table {}, {} bytes, TID {}", rows,
                                        r.offset() - 16, table, size, tid));
      }
      txn::TableBase& t = *tables[table];
      SHOAL_TRY(read_key(r, path, t.key_words(), key.data()));
      if (value.size() * 8 < pad8(size)) value.resize(pad8(size) / 8);
      SHOAL_TRY(r.read(value.data(), pad8(size)));
      if (!t.apply_replicated(key.data(), txn::WriteKind::kInsert, value.data(), size, tid)) {
        return refuse(path, fmt::format("row {}: key held twice in table {}", rows, table));
      }
      ++rows;
    }
  }
}

}  // namespace

Status verify_checkpoint(const std::string& path) {
  Fd f;
  uint64_t content_bytes = 0;
  return verify_open(path, &f, &content_bytes);
}

Result<ReplayCut> verify_checkpoint_cut(const std::string& path, uint32_t streams) {
  Fd f;
  uint64_t content_bytes = 0;
  SHOAL_TRY(verify_open(path, &f, &content_bytes));
  ChunkReader r(f.fd, content_bytes, path);
  uint32_t tables = 0;
  return read_cut(r, path, streams, &tables);
}

Result<ReplayCut> load_checkpoint(const std::string& path, txn::Engine& engine, uint32_t streams) {
  Fd f;
  uint64_t content_bytes = 0;
  SHOAL_TRY(verify_open(path, &f, &content_bytes));
  ChunkReader r(f.fd, content_bytes, path);
  auto cut = read_layout(r, path, engine, streams);
  if (!cut.ok()) return cut.status();
  SHOAL_TRY(load_rows(r, path, engine, content_bytes));
  return cut;
}

}  // namespace shoal::repl

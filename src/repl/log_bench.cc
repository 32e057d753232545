// Log format and WAL throughput with TPC-C-like records (about 10 writes of 70-300 bytes, keys
// of 1-3 words, 1-3 dependency entries per transaction).
//   build/repl/repl_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "src/repl/log_format.h"
#include "src/repl/wal.h"

namespace shoal::repl {
namespace {

struct TxnData {
  uint64_t tid;
  std::vector<txn::DepEntry> deps;
  std::vector<std::vector<uint64_t>> keys;
  std::vector<std::vector<std::byte>> values;
  std::vector<TxnWrite> writes;  // views into keys/values
};

// 1024 pre-generated transactions, so the benchmarks time encoding, not generation.
const std::vector<TxnData>& tpcc_like_txns() {
  static const std::vector<TxnData> txns = [] {
    Rng rng(42);
    std::vector<TxnData> out(1024);
    for (size_t i = 0; i < out.size(); ++i) {
      TxnData& t = out[i];
      t.tid = (7ULL << 32) | i;
      for (uint64_t d = 0, n = rng.uniform(1, 3); d < n; ++d) {
        t.deps.push_back({static_cast<uint32_t>(d * 3), rng.next() >> 8});
      }
      const size_t nwrites = rng.uniform(8, 12);
      t.keys.resize(nwrites);
      t.values.resize(nwrites);
      for (size_t w = 0; w < nwrites; ++w) {
        t.keys[w].resize(rng.uniform(1, 3), rng.next());
        t.values[w].resize(rng.uniform(70, 300), static_cast<std::byte>(w));
      }
      for (size_t w = 0; w < nwrites; ++w) {
        t.writes.push_back({static_cast<uint32_t>(w % 9), WriteOp::kPut, t.keys[w], t.values[w]});
      }
    }
    return out;
  }();
  return txns;
}

std::span<std::byte> as_bytes(std::vector<uint64_t>& words) {
  return {reinterpret_cast<std::byte*>(words.data()), words.size() * 8};
}

// Fills `buf` with one entry of up to `txns_max` transactions starting at txns[*next].
std::span<const std::byte> build_entry(std::span<std::byte> buf, uint32_t txns_max,
                                       uint64_t sequence, size_t* next, int64_t* txn_count) {
  const auto& txns = tpcc_like_txns();
  LogBatchBuilder b;
  b.reset(buf, {1, 0, 7, sequence}, BatchLimits{txns_max, static_cast<uint32_t>(buf.size()), 1});
  for (;;) {
    const TxnData& t = txns[*next % txns.size()];
    if (b.append(t.tid, t.deps, t.writes) != AppendResult::kOk) break;
    ++*next;
    ++*txn_count;
  }
  return b.seal();
}

void BM_Encode(benchmark::State& state) {
  const auto txns_max = static_cast<uint32_t>(state.range(0));
  std::vector<uint64_t> words(4 << 17);  // 4 MiB
  size_t next = 0;
  int64_t txn_count = 0, bytes = 0, seq = 0;
  for (auto _ : state) {
    const auto e = build_entry(as_bytes(words), txns_max, ++seq, &next, &txn_count);
    benchmark::DoNotOptimize(e.data());
    bytes += static_cast<int64_t>(e.size());
  }
  state.SetItemsProcessed(txn_count);
  state.SetBytesProcessed(bytes);
  state.counters["entry_bytes"] =
      static_cast<double>(bytes) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_Encode)->Arg(16)->Arg(400);

// encode_patch on a TPC-C STOCK-like row (arg = row bytes): a new order changes 4 small fields
// (quantity, ytd, order count, remote count) near the front and leaves the rest alone.
void BM_EncodePatch(benchmark::State& state) {
  const auto row_bytes = static_cast<size_t>(state.range(0));
  std::vector<std::byte> old_row(row_bytes), new_row(row_bytes), out(row_bytes);
  for (size_t i = 0; i < row_bytes; ++i) old_row[i] = static_cast<std::byte>(i * 131 + 7);
  uint64_t round = 0;
  for (auto _ : state) {
    new_row = old_row;
    ++round;
    for (size_t field = 0; field < 4; ++field) {  // 4-byte fields at 0, 8, 16, 24
      std::memcpy(new_row.data() + field * 8, &round, 4);
    }
    uint16_t ranges = 0;
    benchmark::DoNotOptimize(encode_patch(old_row, new_row, round, out, &ranges));
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_EncodePatch)->Arg(320)->Arg(680);

// parse() = magic/version/lengths + xxh3 checksum + structural walk; Arg(1) also iterates every
// write and reads its key and value, as replay does.
void BM_Decode(benchmark::State& state) {
  const bool iterate = state.range(0) != 0;
  std::vector<std::vector<uint64_t>> bufs(16, std::vector<uint64_t>(4 << 17));
  std::vector<std::span<const std::byte>> entries;
  size_t next = 0;
  int64_t per_round = 0;
  for (auto& b : bufs) entries.push_back(build_entry(as_bytes(b), 400, 1, &next, &per_round));
  int64_t txn_count = 0, bytes = 0;
  size_t i = 0;
  for (auto _ : state) {
    const auto& e = entries[i++ % entries.size()];
    auto v = LogEntryView::parse(e);
    if (!v.ok()) state.SkipWithError(v.status().to_string().c_str());
    if (iterate) {
      uint64_t sum = 0;
      v->for_each_record([&](const RecordView& r) {
        r.for_each_write([&](const WriteView& w) { sum += w.key_word(0) + w.value.size(); });
      });
      benchmark::DoNotOptimize(sum);
    }
    txn_count += v->record_count();
    bytes += static_cast<int64_t>(e.size());
  }
  state.SetItemsProcessed(txn_count);
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_Decode)->Arg(0)->Arg(1);

// WAL appends of pre-built entries: args = txns per entry, fsync policy (0 none, 1 batch),
// io_uring (1) or pwrite (0), entries per group. The file is in /tmp and restarted every
// 256 MiB so the page cache and disk use stay bounded.
void BM_WalAppend(benchmark::State& state) {
  const auto txns_max = static_cast<uint32_t>(state.range(0));
  const FsyncPolicy policy = state.range(1) == 0 ? FsyncPolicy::kNone : FsyncPolicy::kBatch;
  const bool uring = state.range(2) != 0;
  const auto group_size = static_cast<size_t>(state.range(3));
  std::vector<std::vector<uint64_t>> bufs(group_size, std::vector<uint64_t>(4 << 17));
  std::vector<WalWrite> group;
  size_t next = 0;
  int64_t per_group = 0;
  for (auto& b : bufs) group.push_back({build_entry(as_bytes(b), txns_max, 0, &next, &per_group)});
  int64_t group_bytes = 0;
  for (const auto& w : group) group_bytes += static_cast<int64_t>(w.bytes.size());

  const std::string path = "/tmp/shoal_wal_bench." + std::to_string(::getpid());
  std::unique_ptr<Wal> wal;
  int64_t written = 0, txn_count = 0, bytes = 0;
  for (auto _ : state) {
    if (!wal || written > (256 << 20)) {
      state.PauseTiming();
      wal.reset();
      std::filesystem::remove(path);
      wal = std::move(*Wal::open(path, WalOptions{policy, uring}));
      if (!wal->recover([](const LogEntryView&) { return Status::Ok(); }).ok()) std::abort();
      written = 0;
      state.ResumeTiming();
    }
    if (!wal->append(group).ok()) state.SkipWithError("append failed");
    written += group_bytes;
    bytes += group_bytes;
    txn_count += per_group;
  }
  state.counters["uring"] = wal && wal->uses_io_uring();
  wal.reset();
  std::filesystem::remove(path);
  state.SetItemsProcessed(txn_count);
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_WalAppend)
    ->ArgNames({"txns", "fsync", "uring", "group"})
    ->Args({400, 0, 1, 1})
    ->Args({400, 0, 0, 1})
    ->Args({400, 1, 1, 1})
    ->Args({400, 1, 0, 1})
    ->Args({16, 0, 1, 8})
    ->Args({16, 0, 0, 8})
    ->Args({16, 1, 1, 8})
    ->Args({16, 1, 0, 8})
    ->UseRealTime();

// One synced append at a time (FsyncPolicy::kBatch, pwrite, one entry per group: a durable
// write at -P 1), with and without preallocation: args = txns per entry, preallocate_bytes in
// KiB (0: every append grows the file, and its fdatasync waits for a journal commit). Reports
// the mean (real time per iteration) and p50/p99 of the append, in microseconds.
void BM_WalSyncedAppend(benchmark::State& state) {
  const auto txns_max = static_cast<uint32_t>(state.range(0));
  WalOptions o{FsyncPolicy::kBatch, false};
  o.preallocate_bytes = static_cast<uint64_t>(state.range(1)) << 10;
  std::vector<uint64_t> words(4 << 17);
  size_t next = 0;
  int64_t txn_count = 0;
  const std::span<const std::byte> entry =
      build_entry(as_bytes(words), txns_max, 0, &next, &txn_count);
  const std::string path = "/tmp/shoal_wal_sync_bench." + std::to_string(::getpid());
  std::filesystem::remove(path);
  auto wal = std::move(*Wal::open(path, o));
  if (!wal->recover([](const LogEntryView&) { return Status::Ok(); }).ok()) std::abort();
  std::vector<double> us;
  us.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!wal->append(entry).ok()) state.SkipWithError("append failed");
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  wal.reset();
  std::filesystem::remove(path);
  std::sort(us.begin(), us.end());
  state.counters["entry_bytes"] = static_cast<double>(entry.size());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[us.size() * 99 / 100];
}
BENCHMARK(BM_WalSyncedAppend)
    ->ArgNames({"txns", "prealloc_kib"})
    ->Args({1, 0})
    ->Args({1, 1024})
    ->Args({8, 0})
    ->Args({8, 1024})
    ->Iterations(2000)
    ->UseRealTime();

}  // namespace
}  // namespace shoal::repl

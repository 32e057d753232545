// Single-thread microbenchmarks of byte-key transactions through the engine (Worker::run, Silo
// commit included), beside the same transactions on a fixed-key Table<2> in the same run:
//   Get       one get per transaction (read-only commit: validation only)
//   Put       one overwrite per transaction
//   Incr      get then put of the same key (the Redis INCR shape)
//   Scan10    a 10-entry range scan per transaction (value prefixes of 16 bytes for Bytes)
// over 200k keys of 16 bytes ("user:<11 digits>"; Table<2>: the same bytes as two big-endian
// words) with values of range(0) bytes. Put/Incr on Bytes also run with 64 KiB values (records
// past the fixed tables' 4 KiB limit; 1,000 keys).
//
// Run (one line): build/release/txn_bench --benchmark_min_time=0.2 --benchmark_repetitions=5
//   --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/txn/engine.h"

namespace shoal::txn {
namespace {

// Keys per store: with 100-byte values, enough that the indexes are much larger than the
// caches; with 64 KiB values, 64 MiB of records.
uint64_t keys_for(size_t value_bytes) {
  return value_bytes <= 4096 ? 200'000 : 1'000;
}

std::string key_bytes(uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "user:%011llu", static_cast<unsigned long long>(i));
  return buf;
}

Key<2> fixed_key(const std::string& k) {
  Key<2> out;
  for (int w = 0; w < 2; ++w) {
    uint64_t v = 0;
    std::memcpy(&v, k.data() + 8 * w, 8);
    out.w[w] = __builtin_bswap64(v);
  }
  return out;
}

// One engine per value size, loaded once and shared by the benchmarks that use it.
struct Store {
  explicit Store(size_t value_bytes) : value(value_bytes, 'v'), keys(keys_for(value_bytes)) {
    EngineOptions o;
    o.track_dependencies = false;
    engine = std::make_unique<Engine>(o);
    bytes = engine->create_bytes_table("kv");
    fixed = engine->create_table<2>("fixed");
    for (uint64_t i = 0; i < keys; ++i) {
      const std::string k = key_bytes(i);
      SHOAL_ASSERT(bytes->load(k, value).ok(), "%s", "load");
      if (value_bytes <= TableBase::kValueBytesMax) {
        SHOAL_ASSERT(
            fixed->load(fixed_key(k), value.data(), static_cast<uint32_t>(value_bytes)).ok(), "%s",
            "load");
      }
    }
    worker = engine->make_worker();
  }
  std::string value;
  uint64_t keys;
  std::unique_ptr<Engine> engine;
  BytesTable* bytes;
  Table<2>* fixed;
  Worker* worker;
};

Store& store(size_t value_bytes) {
  static std::unique_ptr<Store> small, large;
  std::unique_ptr<Store>& s = value_bytes <= 4096 ? small : large;
  if (s == nullptr || s->value.size() != value_bytes) s = std::make_unique<Store>(value_bytes);
  return *s;
}

enum class Op { kGet, kPut, kIncr, kScan };

struct Args {
  Store* s;
  std::string key;
  std::string* out;
};

template <Op kOp>
Status bytes_txn(Txn& txn, const void* a, void*) {
  const auto& args = *static_cast<const Args*>(a);
  uint64_t version = 0;
  switch (kOp) {
    case Op::kGet:
      return txn.get(*args.s->bytes, args.key, args.out, &version);
    case Op::kPut:
      return txn.put(*args.s->bytes, args.key, args.s->value);
    case Op::kIncr:
      SHOAL_TRY(txn.get(*args.s->bytes, args.key, args.out, &version));
      return txn.put(*args.s->bytes, args.key, *args.out);
    case Op::kScan: {
      BytesScan scan;
      scan.start = args.key;
      scan.limit = 10;
      scan.value_prefix_bytes = 16;
      size_t n = 0;
      return txn.scan(*args.s->bytes, scan, [&](const BytesEntry& e) {
        n += e.value.size();
        return true;
      });
    }
  }
  return Status::Ok();
}

template <Op kOp>
Status fixed_txn(Txn& txn, const void* a, void*) {
  const auto& args = *static_cast<const Args*>(a);
  Table<2>& t = *args.s->fixed;
  const Key<2> k = fixed_key(args.key);
  const auto size = static_cast<uint32_t>(args.s->value.size());
  switch (kOp) {
    case Op::kGet:
      return txn.get(t, k, args.out->data(), size);
    case Op::kPut:
      return txn.put(t, k, args.s->value.data(), size);
    case Op::kIncr:
      SHOAL_TRY(txn.get(t, k, args.out->data(), size));
      return txn.put(t, k, args.out->data(), size);
    case Op::kScan: {
      Key<2> hi;
      hi.w = {~uint64_t{0}, ~uint64_t{0}};
      size_t n = 0;
      return txn.scan(t, k, hi, 10, [&](const Key<2>&, const void*, uint32_t size) {
        n += size;
        return true;
      });
    }
  }
  return Status::Ok();
}

template <Procedure kProc>
void run(benchmark::State& state) {
  Store& s = store(static_cast<size_t>(state.range(0)));
  std::string out(s.value.size(), '\0');
  Args args{&s, {}, &out};
  Rng rng(7);
  for (auto _ : state) {
    args.key = key_bytes(rng.uniform(0, s.keys - 1));
    const Status st = s.worker->run(kProc, &args);
    if (!st.ok()) state.SkipWithError(st.to_string().c_str());
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(run<bytes_txn<Op::kGet>>)->Name("Bytes/Get")->Arg(100);
BENCHMARK(run<fixed_txn<Op::kGet>>)->Name("Fixed/Get")->Arg(100);
BENCHMARK(run<bytes_txn<Op::kPut>>)->Name("Bytes/Put")->Arg(100)->Arg(65536);
BENCHMARK(run<fixed_txn<Op::kPut>>)->Name("Fixed/Put")->Arg(100);
BENCHMARK(run<bytes_txn<Op::kIncr>>)->Name("Bytes/Incr")->Arg(100)->Arg(65536);
BENCHMARK(run<fixed_txn<Op::kIncr>>)->Name("Fixed/Incr")->Arg(100);
BENCHMARK(run<bytes_txn<Op::kScan>>)->Name("Bytes/Scan10")->Arg(100);
BENCHMARK(run<fixed_txn<Op::kScan>>)->Name("Fixed/Scan10")->Arg(100);

}  // namespace
}  // namespace shoal::txn

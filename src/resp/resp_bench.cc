// Parse + execute cost of pipelined GET/SET (redis-benchmark -P 16 style) against the
// in-memory test backend, against a backend that stores nothing (the layer's own cost), and
// the parser alone. Prints ns/command as "ns_per_cmd" (Google Benchmark prints an inverted
// rate with an "s" suffix: "ns_per_cmd=250s" reads 250 ns per command, CPU time).
//   build/release/resp_bench
#include <benchmark/benchmark.h>

#include <string>

#include "src/resp/resp_parser.h"
#include "src/resp/testing/mem_backend.h"
#include "src/resp/testing/test_client.h"

namespace shoal::resp {
namespace {

constexpr int kPipeline = 16;
constexpr int kKeys = 10000;

// kPipeline commands, half SET key:<i> <16 B>, half GET key:<i>, with keys from `seed`.
std::string pipeline(int seed) {
  std::string out;
  for (int i = 0; i < kPipeline; ++i) {
    const std::string key = "key:" + std::to_string((seed * kPipeline + i) * 7919 % kKeys);
    if (i % 2 == 0) {
      out += testing::encode_command({"SET", key, "0123456789abcdef"});
    } else {
      out += testing::encode_command({"GET", key});
    }
  }
  return out;
}

void set_rate(benchmark::State& state, int commands_per_iteration) {
  state.SetItemsProcessed(state.iterations() * commands_per_iteration);
  // The inverse of a rate is seconds per command; counting 1e-9 per command makes it ns.
  state.counters["ns_per_cmd"] = benchmark::Counter(
      static_cast<double>(commands_per_iteration) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_PipelinedGetSet(benchmark::State& state) {
  testing::MemBackend backend;
  testing::ManualEnv env;
  Connection conn(backend, env);
  std::vector<std::string> batches;
  for (int i = 0; i < 64; ++i) batches.push_back(pipeline(i));
  size_t at = 0;
  for (auto _ : state) {
    conn.feed(batches[at++ % batches.size()]);
    const std::string_view out = conn.sendable();
    benchmark::DoNotOptimize(out.data());
    conn.consume_output(out.size());
  }
  set_rate(state, kPipeline);
}
BENCHMARK(BM_PipelinedGetSet);

// The protocol and command layer alone: a backend that stores nothing (GET finds nothing,
// SET is accepted), so the figure is what the layer adds to an engine's own cost.
class NullTxn final : public KvTxn {
 public:
  void begin() override {}
  rt::Task<Status> get(std::string_view, std::string*, uint64_t* version) override {
    *version = kAbsentVersion;
    co_return Status::NotFound();
  }
  rt::Task<Status> put(std::string_view, std::string_view) override { co_return Status::Ok(); }
  rt::Task<Status> del(std::string_view) override { co_return Status::Ok(); }
  rt::Task<Status> scan(const ScanRange&, size_t, size_t, std::vector<KeyValue>*) override {
    co_return Status::Ok();
  }
  rt::Task<Result<CommitInfo>> commit() override { co_return CommitInfo{}; }
  rt::Task<void> abort() override { co_return; }
};

class NullBackend final : public KvBackend {
 public:
  std::unique_ptr<KvTxn> open() override { return std::make_unique<NullTxn>(); }
  rt::Task<Result<uint64_t>> count_keys() override { co_return uint64_t{0}; }
};

void BM_PipelinedGetSetLayerOnly(benchmark::State& state) {
  NullBackend backend;
  testing::ManualEnv env;
  Connection conn(backend, env);
  const std::string batch = pipeline(3);
  for (auto _ : state) {
    conn.feed(batch);
    const std::string_view out = conn.sendable();
    benchmark::DoNotOptimize(out.data());
    conn.consume_output(out.size());
  }
  set_rate(state, kPipeline);
}
BENCHMARK(BM_PipelinedGetSetLayerOnly);

void BM_ParseOnly(benchmark::State& state) {
  const std::string buf = pipeline(1);
  RequestParser parser;
  for (auto _ : state) {
    std::string_view rest = buf;
    for (int i = 0; i < kPipeline; ++i) {
      auto r = parser.parse(rest);
      benchmark::DoNotOptimize(parser.args().data());
      rest.remove_prefix(*r);
    }
  }
  set_rate(state, kPipeline);
}
BENCHMARK(BM_ParseOnly);

}  // namespace
}  // namespace shoal::resp

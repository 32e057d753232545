// How long the serializability checker takes over a large history: the figure the test
// LargeHistoryIsCheckedAndPlantedStaleReadsFound only prints. A bank-like serial history:
// each transaction read-modify-writes two of `keys` accounts in turn, so the checker's graph
// has an edge per read and per overwrite.
#include <benchmark/benchmark.h>

#include <vector>

#include "src/base/env.h"  // Rng
#include "src/check/serializability.h"

namespace shoal::check {
namespace {

History transfers(size_t txns, uint64_t keys, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint64_t> version(keys, 0);
  std::vector<TxnId> writer(keys, kInitialTxn);
  History h;
  h.txns.reserve(txns);
  for (TxnId id = 1; id <= txns; ++id) {
    TxnRecord t{id, true, {}};
    const uint64_t a = rng.uniform(0, keys - 1);
    const uint64_t b = (a + 1 + rng.uniform(0, keys - 2)) % keys;  // another account
    for (uint64_t k : {a, b}) {
      t.read(k, version[k], writer[k]);
      t.write(k, ++version[k]);
      writer[k] = id;
    }
    h.txns.push_back(std::move(t));
  }
  return h;
}

void BM_CheckLargeHistory(benchmark::State& state) {
  const History h = transfers(static_cast<size_t>(state.range(0)), 1000, 42);
  for (auto _ : state) {
    const CheckReport r = check_report(h);
    if (!r.serializable()) state.SkipWithError("a serial history was found not serializable");
    benchmark::DoNotOptimize(r.edges);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_CheckLargeHistory)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace shoal::check

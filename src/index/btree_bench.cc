// Single-thread microbenchmarks of the index against std::map and absl::btree_map on the same
// 1M uint64 keys: point lookups, sequential and random inserts, and 10-entry scans. The
// BasicBTree rows with other node sizes are how BTree<1>'s node size was chosen.
//
// Run: build/idx-release/index_bench --benchmark_min_time=1
#include <absl/container/btree_map.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "src/base/ebr.h"
#include "src/base/env.h"
#include "src/index/btree.h"

namespace shoal {
namespace {

constexpr size_t kKeys = 1'000'000;

void* as_value(uint64_t v) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(v + 1));
}

// Distinct random keys, in random order.
const std::vector<uint64_t>& random_keys() {
  static const std::vector<uint64_t> keys = [] {
    Rng rng(42);
    std::vector<uint64_t> k(kKeys);
    for (auto& x : k) x = rng.next() >> 1;
    std::sort(k.begin(), k.end());
    k.erase(std::unique(k.begin(), k.end()), k.end());
    while (k.size() < kKeys) k.push_back(k.back() + 1);
    for (size_t i = k.size() - 1; i > 0; --i) std::swap(k[i], k[rng.uniform(0, i)]);
    return k;
  }();
  return keys;
}

// Uniform interface over the three containers.
template <class Tree>
struct OlcIndex {
  Tree tree;
  void insert(uint64_t k) { tree.insert_if_absent(key1(k), as_value(k), nullptr, nullptr); }
  void* find(uint64_t k) const { return tree.get(key1(k), nullptr); }
  uint64_t scan(uint64_t k, size_t n) const {
    uint64_t sum = 0;
    size_t seen = 0;
    tree.scan(
        key1(k), key1(~uint64_t{0}),
        [&](const Key1& key, void*) { return sum += key.w[0], ++seen < n; },
        [](typename Tree::NodeRef) {});
    return sum;
  }
};

template <class Map>
struct StdIndex {
  Map map;
  void insert(uint64_t k) { map.emplace(k, as_value(k)); }
  void* find(uint64_t k) const {
    auto it = map.find(k);
    return it == map.end() ? nullptr : it->second;
  }
  uint64_t scan(uint64_t k, size_t n) const {
    uint64_t sum = 0;
    size_t seen = 0;
    for (auto it = map.lower_bound(k); it != map.end() && seen < n; ++it, ++seen) sum += it->first;
    return sum;
  }
};

using Olc = OlcIndex<BTree<1>>;
using Olc256 = OlcIndex<BasicBTree<1, 256, 256>>;
using Olc1024 = OlcIndex<BasicBTree<1, 1024, 1024>>;
using StdMap = StdIndex<std::map<uint64_t, void*>>;
using AbslMap = StdIndex<absl::btree_map<uint64_t, void*>>;

template <class Index>
void BM_Lookup(benchmark::State& state) {
  ebr::Guard guard;  // the engine holds one per transaction, not per operation
  const auto& keys = random_keys();
  auto index = std::make_unique<Index>();
  for (uint64_t k : keys) index->insert(k);
  Rng rng(7);
  for (auto _ : state) {
    benchmark::DoNotOptimize(index->find(keys[rng.uniform(0, kKeys - 1)]));
  }
  state.SetItemsProcessed(state.iterations());
}

template <class Index>
void BM_InsertRandom(benchmark::State& state) {
  ebr::Guard guard;
  const auto& keys = random_keys();
  for (auto _ : state) {
    auto index = std::make_unique<Index>();
    for (uint64_t k : keys) index->insert(k);
    state.PauseTiming();
    index.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kKeys);
}

template <class Index>
void BM_InsertSequential(benchmark::State& state) {
  ebr::Guard guard;
  for (auto _ : state) {
    auto index = std::make_unique<Index>();
    for (uint64_t k = 0; k < kKeys; ++k) index->insert(k);
    state.PauseTiming();
    index.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kKeys);
}

template <class Index>
void BM_Scan10(benchmark::State& state) {
  ebr::Guard guard;
  const auto& keys = random_keys();
  auto index = std::make_unique<Index>();
  for (uint64_t k : keys) index->insert(k);
  Rng rng(9);
  for (auto _ : state) {
    benchmark::DoNotOptimize(index->scan(keys[rng.uniform(0, kKeys - 1)], 10));
  }
  state.SetItemsProcessed(state.iterations());
}

#define SHOAL_INDEX_BENCH(fn, unit)            \
  BENCHMARK_TEMPLATE(fn, Olc)->Unit(unit);     \
  BENCHMARK_TEMPLATE(fn, Olc256)->Unit(unit);  \
  BENCHMARK_TEMPLATE(fn, Olc1024)->Unit(unit); \
  BENCHMARK_TEMPLATE(fn, StdMap)->Unit(unit);  \
  BENCHMARK_TEMPLATE(fn, AbslMap)->Unit(unit)

SHOAL_INDEX_BENCH(BM_Lookup, benchmark::kNanosecond);
SHOAL_INDEX_BENCH(BM_Scan10, benchmark::kNanosecond);
SHOAL_INDEX_BENCH(BM_InsertRandom, benchmark::kMillisecond);
SHOAL_INDEX_BENCH(BM_InsertSequential, benchmark::kMillisecond);

}  // namespace
}  // namespace shoal

// Single-thread microbenchmarks of BytesTree against the fixed-key BTree<K> on the same keys,
// in the same run: point lookups, random inserts and 10-entry scans over 1M keys of
//   8B      8 random bytes                  (BTree<1>: TPC-C's and YCSB's one-word keys)
//   32B     32 random bytes                 (BTree<4>)
//   32Bpre  32 bytes, 3 words of small ids  (BTree<4>: TPC-C-style composite keys whose first
//           bytes are shared by many keys, so BytesTree goes 3-4 layers deep)
//   Var     16..63 bytes, "user:<id>:<field>..." with shared prefixes (BTree<8> on the keys
//           zero-padded to 64 bytes, which is how a fixed-word index would hold them)
// Each pair is the same keys in the same order; compare the BytesTree row with the BTree row
// of the same key set.
//
// Run (one line): build/release/index_bench --benchmark_filter=Bytes --benchmark_min_time=0.2
//   --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "src/base/ebr.h"
#include "src/base/env.h"
#include "src/index/btree.h"
#include "src/index/bytes_tree.h"

namespace shoal {
namespace {

constexpr size_t kKeys = 1'000'000;

enum class Shape { k8, k32, k32Prefixed, kVar };

void put_be(uint64_t x, std::string* out) {
  for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>(x >> (8 * i)));
}

std::string make_key(Shape shape, Rng& rng) {
  std::string k;
  switch (shape) {
    case Shape::k8:
      put_be(rng.next(), &k);
      break;
    case Shape::k32:
      for (int i = 0; i < 4; ++i) put_be(rng.next(), &k);
      break;
    case Shape::k32Prefixed:
      put_be(rng.uniform(1, 10), &k);    // warehouse
      put_be(rng.uniform(1, 10), &k);    // district
      put_be(rng.uniform(1, 3000), &k);  // customer
      put_be(rng.uniform(1, 1000), &k);  // order
      break;
    case Shape::kVar: {
      k = "user:" + std::to_string(rng.uniform(0, 200'000)) + ":";
      static const char* kFields[] = {"name", "email", "address:line1", "address:city", "o"};
      k += kFields[rng.uniform(0, 4)];
      const size_t len = rng.uniform(16, 63);
      while (k.size() < len) k.push_back(static_cast<char>('a' + rng.uniform(0, 25)));
      k.resize(std::min<size_t>(k.size(), 63));
      break;
    }
  }
  return k;
}

// kKeys distinct keys of one shape, in random order.
const std::vector<std::string>& keys_of(Shape shape) {
  static std::vector<std::string> sets[4];
  std::vector<std::string>& keys = sets[static_cast<int>(shape)];
  if (keys.empty()) {
    Rng rng(42 + static_cast<uint64_t>(shape));
    std::set<std::string> seen;
    while (seen.size() < kKeys) seen.insert(make_key(shape, rng));
    keys.assign(seen.begin(), seen.end());
    for (size_t i = keys.size() - 1; i > 0; --i) std::swap(keys[i], keys[rng.uniform(0, i)]);
  }
  return keys;
}

void* as_value(size_t i) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1) << 2);  // aligned, as records
}

template <size_t K>
struct FixedIndex {
  BTree<K> tree;
  std::vector<Key<K>> keys;
  explicit FixedIndex(const std::vector<std::string>& s) : keys(s.size()) {
    for (size_t i = 0; i < s.size(); ++i)
      pack_string(s[i].data(), s[i].size(), keys[i].w.data(), K);
  }
  void insert(size_t i) { tree.insert_if_absent(keys[i], as_value(i), nullptr, nullptr); }
  void* find(size_t i) const { return tree.get(keys[i], nullptr); }
  size_t scan(size_t i, size_t n) const {
    size_t seen = 0;
    tree.scan(
        keys[i], Key<K>::max(), [&](const Key<K>&, void*) { return ++seen < n; },
        [](typename BTree<K>::NodeRef) {});
    return seen;
  }
};

// The keys in one flat array with FixedIndex's stride (the key size; 64 bytes for the
// variable keys, whose length is in the slot's last byte), so that fetching a key costs
// the same in both: one cache miss in an array of the same size.
struct BytesIndex {
  BytesTree tree;
  size_t stride = 0;
  bool fixed = true;
  std::vector<char> slots;
  explicit BytesIndex(const std::vector<std::string>& s) {
    for (const std::string& k : s) {
      fixed = fixed && k.size() == s[0].size();
      stride = std::max(stride, k.size());
    }
    if (!fixed) stride = 64;
    slots.resize(s.size() * stride);
    for (size_t i = 0; i < s.size(); ++i) {
      SHOAL_CHECK(fixed || s[i].size() < 64);
      std::memcpy(&slots[i * stride], s[i].data(), s[i].size());
      if (!fixed) slots[i * stride + 63] = static_cast<char>(s[i].size());
    }
  }
  std::string_view key(size_t i) const {
    const char* slot = &slots[i * stride];
    return {slot, fixed ? stride : static_cast<uint8_t>(slot[63])};
  }
  void insert(size_t i) { tree.insert_if_absent(key(i), as_value(i), nullptr, nullptr, nullptr); }
  void* find(size_t i) const {
    void* v = nullptr;
    tree.get(key(i), &v, nullptr);
    return v;
  }
  size_t scan(size_t i, size_t n) const {
    size_t seen = 0;
    tree.scan(
        key(i), std::nullopt, [&](std::string_view, void*) { return ++seen < n; },
        [](BytesTree::NodeRef) {});
    return seen;
  }
};

// Loaded once per process and kept, so that repetitions (interleaved with the other rows by
// --benchmark_enable_random_interleaving) measure reads, not loads.
template <class Index, Shape S>
const Index& loaded() {
  static const Index* index = [] {
    ebr::Guard guard;
    auto* fresh = new Index(keys_of(S));
    for (size_t i = 0; i < kKeys; ++i) fresh->insert(i);
    return fresh;
  }();
  return *index;
}

template <class Index, Shape S>
void BM_BytesGet(benchmark::State& state) {
  ebr::Guard guard;  // the engine holds one per transaction, not per operation
  const Index& index = loaded<Index, S>();
  Rng rng(7);
  for (auto _ : state) benchmark::DoNotOptimize(index.find(rng.uniform(0, kKeys - 1)));
  state.SetItemsProcessed(state.iterations());
}

template <class Index, Shape S>
void BM_BytesInsert(benchmark::State& state) {
  ebr::Guard guard;
  keys_of(S);
  for (auto _ : state) {
    state.PauseTiming();
    auto index = std::make_unique<Index>(keys_of(S));
    state.ResumeTiming();
    for (size_t i = 0; i < kKeys; ++i) index->insert(i);
    state.PauseTiming();
    index.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kKeys);
}

template <class Index, Shape S>
void BM_BytesScan10(benchmark::State& state) {
  ebr::Guard guard;
  const Index& index = loaded<Index, S>();
  Rng rng(9);
  for (auto _ : state) benchmark::DoNotOptimize(index.scan(rng.uniform(0, kKeys - 1), 10));
  state.SetItemsProcessed(state.iterations());
}

#define SHOAL_BYTES_BENCH(fn, unit)                                      \
  BENCHMARK_TEMPLATE(fn, FixedIndex<1>, Shape::k8)->Unit(unit);          \
  BENCHMARK_TEMPLATE(fn, BytesIndex, Shape::k8)->Unit(unit);             \
  BENCHMARK_TEMPLATE(fn, FixedIndex<4>, Shape::k32)->Unit(unit);         \
  BENCHMARK_TEMPLATE(fn, BytesIndex, Shape::k32)->Unit(unit);            \
  BENCHMARK_TEMPLATE(fn, FixedIndex<4>, Shape::k32Prefixed)->Unit(unit); \
  BENCHMARK_TEMPLATE(fn, BytesIndex, Shape::k32Prefixed)->Unit(unit);    \
  BENCHMARK_TEMPLATE(fn, FixedIndex<8>, Shape::kVar)->Unit(unit);        \
  BENCHMARK_TEMPLATE(fn, BytesIndex, Shape::kVar)->Unit(unit)

SHOAL_BYTES_BENCH(BM_BytesGet, benchmark::kNanosecond);
SHOAL_BYTES_BENCH(BM_BytesScan10, benchmark::kNanosecond);
SHOAL_BYTES_BENCH(BM_BytesInsert, benchmark::kMillisecond);

}  // namespace
}  // namespace shoal

#include "src/index/btree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "src/base/ebr.h"
#include "src/base/env.h"

namespace shoal {
namespace {

void* as_value(uint64_t v) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(v));
}
uint64_t from_value(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

template <size_t K>
Key<K> make_key(uint64_t x) {
  Key<K> k;
  k.w[K - 1] = x;
  return k;
}

// Keys for the randomized tests: for K > 1 the words vary independently over small sets, so
// that comparisons are decided in every word, and the extremes min()/max() show up.
template <size_t K>
Key<K> random_key(Rng& rng, uint64_t universe) {
  Key<K> k;
  if (rng.uniform(0, 200) == 0) return rng.uniform(0, 1) ? Key<K>::min() : Key<K>::max();
  if constexpr (K == 1) {
    k.w[0] = rng.uniform(0, universe);
  } else {
    for (size_t i = 0; i + 1 < K; ++i) k.w[i] = rng.uniform(0, 2) * (i % 2 ? ~uint64_t{0} / 3 : 1);
    k.w[K - 1] = rng.uniform(0, universe / 8);
  }
  return k;
}

// Tiny nodes give deep trees and frequent splits and merges from few keys.
using TinyTree1 = BasicBTree<1, 128, 96>;
using TinyTree4 = BasicBTree<4, 256, 256>;

template <class Tree>
class BTreeModelTest : public ::testing::Test {};
using TreeTypes = ::testing::Types<BTree<1>, BTree<4>, TinyTree1, TinyTree4>;
TYPED_TEST_SUITE(BTreeModelTest, TreeTypes);

template <class Tree>
using ModelMap = std::map<typename Tree::KeyT, uint64_t>;

// Runs one scan (or rscan) with random bounds and limit and compares it with the model.
template <class Tree>
void check_random_scan(const Tree& tree, const ModelMap<Tree>& model, Rng& rng, uint64_t universe,
                       bool reverse) {
  using KeyT = typename Tree::KeyT;
  KeyT lo = random_key<Tree::KeyT::kWords>(rng, universe);
  KeyT hi = random_key<Tree::KeyT::kWords>(rng, universe);
  if (hi < lo) std::swap(lo, hi);
  const size_t limit = rng.uniform(0, 3) == 0 ? 400 : rng.uniform(1, 40);
  std::vector<std::pair<KeyT, uint64_t>> got;
  size_t leaves = 0;
  bool leaf_before_entry = true;
  auto on_entry = [&](const KeyT& k, void* v) {
    leaf_before_entry = leaf_before_entry && leaves > 0;
    got.emplace_back(k, from_value(v));
    return got.size() < limit;
  };
  auto on_leaf = [&](typename Tree::NodeRef ref) {
    ++leaves;
    EXPECT_EQ(Tree::leaf_version(ref.leaf), ref.version);
  };
  std::vector<std::pair<KeyT, uint64_t>> want;
  if (reverse) {
    tree.rscan(hi, lo, on_entry, on_leaf);
    for (auto it = model.upper_bound(hi); it != model.begin() && want.size() < limit;) {
      --it;
      if (it->first < lo) break;
      want.emplace_back(it->first, it->second);
    }
  } else {
    tree.scan(lo, hi, on_entry, on_leaf);
    for (auto it = model.lower_bound(lo); it != model.end() && !(hi < it->first); ++it) {
      if (want.size() >= limit) break;
      want.emplace_back(it->first, it->second);
    }
  }
  EXPECT_TRUE(leaf_before_entry);
  ASSERT_EQ(got.size(), want.size()) << (reverse ? "rscan" : "scan");
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i] == want[i]) << "entry " << i << (reverse ? " of rscan" : " of scan");
  }
}

template <class Tree>
void random_ops_against_map(uint64_t seed, uint64_t universe, int ops) {
  using KeyT = typename Tree::KeyT;
  constexpr size_t K = KeyT::kWords;
  Rng rng(seed);
  ModelMap<Tree> model;
  Tree tree;
  uint64_t next_value = 1;
  for (int i = 0; i < ops; ++i) {
    ebr::Guard guard;
    const KeyT k = random_key<K>(rng, universe);
    const auto it = model.find(k);
    const bool present = it != model.end();
    const uint64_t op = rng.uniform(0, 99);
    if (op < 35) {
      const uint64_t v = next_value++;
      typename Tree::NodeRef before{};
      uint64_t after = 0;
      void* old = tree.insert_if_absent(k, as_value(v), &before, &after);
      if (present) {
        ASSERT_EQ(from_value(old), it->second);
        EXPECT_EQ(after, before.version);
      } else {
        ASSERT_EQ(old, nullptr);
        model.emplace(k, v);
        EXPECT_NE(after, before.version);
        EXPECT_EQ(Tree::leaf_version(before.leaf), after);
      }
    } else if (op < 60) {
      typename Tree::NodeRef ref{};
      void* v = tree.get(k, &ref);
      ASSERT_EQ(from_value(v), present ? it->second : 0);
      EXPECT_EQ(Tree::leaf_version(ref.leaf), ref.version);
    } else if (op < 70) {
      const uint64_t v = next_value++;
      ASSERT_EQ(tree.update(k, as_value(v)), present);
      if (present) it->second = v;
    } else if (op < 90) {
      const bool right_value = rng.uniform(0, 4) != 0;
      const uint64_t expected = present && right_value ? it->second : next_value + 1;
      ASSERT_EQ(tree.remove(k, as_value(expected)), present && right_value);
      if (present && right_value) model.erase(it);
    } else {
      check_random_scan(tree, model, rng, universe, op >= 95);
    }
    if (i % 512 == 0) {
      ASSERT_EQ(tree.size(), model.size());
    }
  }
  ASSERT_EQ(tree.size(), model.size());
  ebr::quiesce();
}

TYPED_TEST(BTreeModelTest, RandomOpsMatchStdMapDense) {
  random_ops_against_map<TypeParam>(1, 300, 60000);
}

TYPED_TEST(BTreeModelTest, RandomOpsMatchStdMapSparse) {
  random_ops_against_map<TypeParam>(2, 1'000'000, 40000);
}

// Grows to many keys, then shrinks to none: exercises splits at every level and then the
// unlinking of emptied leaves and inner chains.
TYPED_TEST(BTreeModelTest, FillThenDrainReleasesNodes) {
  using KeyT = typename TypeParam::KeyT;
  constexpr size_t K = KeyT::kWords;
  ebr::Guard guard;
  TypeParam tree;
  const size_t empty_bytes = tree.memory_bytes();
  constexpr uint64_t kKeys = 20000;
  std::vector<uint64_t> order(kKeys);
  for (uint64_t i = 0; i < kKeys; ++i) order[i] = i * 7 % kKeys;  // 7 is coprime to kKeys
  for (uint64_t x : order)
    ASSERT_EQ(tree.insert_if_absent(make_key<K>(x), as_value(x + 1), nullptr, nullptr), nullptr);
  ASSERT_EQ(tree.size(), kKeys);
  const size_t full_bytes = tree.memory_bytes();
  for (uint64_t i = 0; i < kKeys; ++i) {
    const uint64_t x = order[(i * 13) % kKeys];
    ASSERT_TRUE(tree.remove(make_key<K>(x), as_value(x + 1))) << x;
  }
  EXPECT_EQ(tree.size(), 0u);
  int entries = 0;
  tree.scan(
      KeyT::min(), KeyT::max(), [&](const KeyT&, void*) { return ++entries, true; },
      [](typename TypeParam::NodeRef) {});
  EXPECT_EQ(entries, 0);
  // What stays is a root-to-leaf chain per level at most, not the full tree.
  EXPECT_LT(tree.memory_bytes(), empty_bytes + full_bytes / 20);
  for (uint64_t x = 0; x < 1000; ++x) {
    ASSERT_EQ(tree.insert_if_absent(make_key<K>(x), as_value(x + 1), nullptr, nullptr), nullptr);
  }
  for (uint64_t x = 0; x < 1000; ++x)
    ASSERT_EQ(from_value(tree.get(make_key<K>(x), nullptr)), x + 1);
}

// TPC-C's NEW-ORDER table: insert at the tail, delete at the head. Memory must stay bounded.
TEST(BTreeTest, QueuePatternKeepsMemoryBounded) {
  TinyTree1 tree;
  size_t peak = 0;
  for (uint64_t x = 0; x < 200000; ++x) {
    ebr::Guard guard;
    tree.insert_if_absent(key1(x), as_value(x + 1), nullptr, nullptr);
    if (x >= 100) {
      ASSERT_TRUE(tree.remove(key1(x - 100), as_value(x - 99)));
    }
    if (x == 1000) peak = tree.memory_bytes();
    if (x > 1000 && x % 1000 == 0) {
      ASSERT_LE(tree.memory_bytes(), 2 * peak) << x;
    }
  }
  ebr::Guard guard;
  uint64_t first = 0;
  tree.scan(
      key1(0), key1(~0ull), [&](const Key1& k, void*) { return first = k.w[0], false; },
      [](TinyTree1::NodeRef) {});
  EXPECT_EQ(first, 200000u - 100);
}

// --- node-version semantics ---

TEST(BTreeVersionTest, InsertChangesLeafVersionSeenByGetOfMissingKey) {
  ebr::Guard guard;
  BTree<1> tree;
  Rng rng(3);
  for (int i = 0; i < 20000; ++i) {
    const Key1 k = key1(rng.uniform(0, 1'000'000));
    BTree<1>::NodeRef ref{};
    const bool missing = tree.get(k, &ref) == nullptr;
    BTree<1>::NodeRef before{};
    uint64_t after = 0;
    tree.insert_if_absent(k, as_value(i + 1), &before, &after);
    if (!missing) continue;
    ASSERT_NE(BTree<1>::leaf_version(ref.leaf), ref.version);
    // Either no split: the same leaf and version, or a split: a version nobody recorded.
    if (before.version == ref.version) {
      ASSERT_EQ(before.leaf, ref.leaf);
    }
    if (before.leaf != ref.leaf) {
      ASSERT_NE(BTree<1>::leaf_version(ref.leaf), ref.version);
    }
    ASSERT_EQ(BTree<1>::leaf_version(before.leaf), after);
  }
}

TEST(BTreeVersionTest, UpdateKeepsVersionRemoveChangesIt) {
  ebr::Guard guard;
  BTree<1> tree;
  for (uint64_t x = 1; x <= 100; ++x) tree.insert_if_absent(key1(x), as_value(x), nullptr, nullptr);
  BTree<1>::NodeRef ref{};
  ASSERT_EQ(tree.get(key1(50), &ref), as_value(50));
  ASSERT_TRUE(tree.update(key1(50), as_value(5000)));
  EXPECT_EQ(BTree<1>::leaf_version(ref.leaf), ref.version);
  EXPECT_EQ(tree.get(key1(50), nullptr), as_value(5000));
  EXPECT_FALSE(tree.remove(key1(50), as_value(50)));  // wrong expected value
  EXPECT_EQ(BTree<1>::leaf_version(ref.leaf), ref.version);
  ASSERT_TRUE(tree.remove(key1(50), as_value(5000)));
  EXPECT_NE(BTree<1>::leaf_version(ref.leaf), ref.version);
}

// A scan's reported leaves must detect any later insert or remove in the covered range.
template <bool kReverse, bool kRemove>
void check_scan_detects_phantoms() {
  Rng rng(kReverse * 2 + kRemove + 10);
  for (int round = 0; round < 300; ++round) {
    ebr::Guard guard;
    TinyTree1 tree;
    for (uint64_t x = 10; x <= 5000; x += 10)
      tree.insert_if_absent(key1(x), as_value(x), nullptr, nullptr);
    uint64_t lo = rng.uniform(0, 5100), hi = rng.uniform(0, 5100);
    if (hi < lo) std::swap(lo, hi);
    const size_t limit = rng.uniform(1, 60);
    std::vector<TinyTree1::NodeRef> refs;
    size_t delivered = 0;
    uint64_t last = 0;
    auto on_entry = [&](const Key1& k, void*) { return last = k.w[0], ++delivered < limit; };
    auto on_leaf = [&](TinyTree1::NodeRef r) { refs.push_back(r); };
    if (kReverse) {
      tree.rscan(key1(hi), key1(lo), on_entry, on_leaf);
    } else {
      tree.scan(key1(lo), key1(hi), on_entry, on_leaf);
    }
    // The range the scan vouches for.
    uint64_t from = lo, to = hi;
    if (delivered == limit) (kReverse ? from : to) = last;
    uint64_t x = rng.uniform(from, to);
    if (kRemove) {
      x = x / 10 * 10;
      if (x < from || x == 0) x += 10;
      if (x > to || x > 5000) continue;
      ASSERT_TRUE(tree.remove(key1(x), as_value(x)));
    } else {
      if (x % 10 == 0) continue;
      ASSERT_EQ(tree.insert_if_absent(key1(x), as_value(x), nullptr, nullptr), nullptr);
    }
    bool changed = false;
    for (const auto& r : refs) changed = changed || TinyTree1::leaf_version(r.leaf) != r.version;
    ASSERT_TRUE(changed) << "round " << round << " [" << from << ", " << to << "] key " << x;
  }
}

TEST(BTreeVersionTest, ScanLeavesDetectPhantomInsert) {
  check_scan_detects_phantoms<false, false>();
}
TEST(BTreeVersionTest, ScanLeavesDetectRemove) {
  check_scan_detects_phantoms<false, true>();
}
TEST(BTreeVersionTest, RscanLeavesDetectPhantomInsert) {
  check_scan_detects_phantoms<true, false>();
}
TEST(BTreeVersionTest, RscanLeavesDetectRemove) {
  check_scan_detects_phantoms<true, true>();
}

TEST(BTreeVersionTest, ScanOfEmptyRangeReportsCoveringLeaf) {
  ebr::Guard guard;
  TinyTree1 tree;
  for (uint64_t x = 0; x < 1000; x += 100)
    tree.insert_if_absent(key1(x), as_value(x + 1), nullptr, nullptr);
  std::vector<TinyTree1::NodeRef> refs;
  int entries = 0;
  tree.scan(
      key1(301), key1(399), [&](const Key1&, void*) { return ++entries, true; },
      [&](TinyTree1::NodeRef r) { refs.push_back(r); });
  EXPECT_EQ(entries, 0);
  ASSERT_FALSE(refs.empty());
  tree.insert_if_absent(key1(350), as_value(1), nullptr, nullptr);
  bool changed = false;
  for (const auto& r : refs) changed = changed || TinyTree1::leaf_version(r.leaf) != r.version;
  EXPECT_TRUE(changed);
}

// --- concurrency (also run under TSan) ---

constexpr int kThreads = 4;

// Each thread owns the keys congruent to its id (so threads share leaves) and checks every
// result against its own exact model; scans check the owner's keys and global order.
template <class Tree>
void concurrent_disjoint(int ops_per_thread, uint64_t universe) {
  Tree tree;
  std::vector<std::map<uint64_t, uint64_t>> models(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(100 + t);
      auto& model = models[t];
      for (int i = 0; i < ops_per_thread; ++i) {
        ebr::Guard guard;
        const uint64_t x = rng.uniform(0, universe) * kThreads + t;
        const auto it = model.find(x);
        const uint64_t op = rng.uniform(0, 99);
        const uint64_t v = (static_cast<uint64_t>(i) << 8) | (t + 1);
        if (op < 40) {
          void* old = tree.insert_if_absent(key1(x), as_value(v), nullptr, nullptr);
          ASSERT_EQ(from_value(old), it != model.end() ? it->second : 0);
          if (it == model.end()) model.emplace(x, v);
        } else if (op < 65) {
          ASSERT_EQ(from_value(tree.get(key1(x), nullptr)), it != model.end() ? it->second : 0);
        } else if (op < 70) {
          ASSERT_EQ(tree.update(key1(x), as_value(v)), it != model.end());
          if (it != model.end()) it->second = v;
        } else if (op < 95) {
          ASSERT_EQ(tree.remove(key1(x), as_value(it != model.end() ? it->second : 1)),
                    it != model.end());
          if (it != model.end()) model.erase(it);
        } else {
          const uint64_t lo = rng.uniform(0, universe * kThreads);
          const uint64_t hi = lo + rng.uniform(0, 400);
          std::vector<std::pair<uint64_t, uint64_t>> mine;
          uint64_t prev = 0;
          bool first = true, sorted = true;
          tree.scan(
              key1(lo), key1(hi),
              [&](const Key1& k, void* val) {
                sorted = sorted && (first || prev < k.w[0]);
                first = false;
                prev = k.w[0];
                if (k.w[0] % kThreads == static_cast<uint64_t>(t))
                  mine.emplace_back(k.w[0], from_value(val));
                return true;
              },
              [](typename Tree::NodeRef) {});
          ASSERT_TRUE(sorted);
          std::vector<std::pair<uint64_t, uint64_t>> want(model.lower_bound(lo),
                                                          model.upper_bound(hi));
          ASSERT_EQ(mine, want);
        }
        if (i % 256 == 0) ebr::quiesce();
      }
    });
  }
  for (auto& th : threads) th.join();
  ebr::Guard guard;
  std::map<uint64_t, uint64_t> all;
  for (const auto& m : models) all.insert(m.begin(), m.end());
  std::map<uint64_t, uint64_t> got;
  tree.scan(
      key1(0), key1(~0ull),
      [&](const Key1& k, void* v) { return got.emplace(k.w[0], from_value(v)), true; },
      [](typename Tree::NodeRef) {});
  EXPECT_EQ(got, all);
  EXPECT_EQ(tree.size(), all.size());
}

TEST(BTreeTest, ConcurrentDisjointKeys) {
  concurrent_disjoint<BTree<1>>(40000, 5000);
}
TEST(BTreeTest, ConcurrentDisjointKeysTinyNodes) {
  concurrent_disjoint<TinyTree1>(40000, 2000);
}

// All threads fight over the same keys. insert_if_absent only succeeds on an absent key and
// remove only with the remover's own value, so each thread knows exactly which keys it owns.
template <class Tree>
void concurrent_overlapping(int ops_per_thread, uint64_t universe) {
  Tree tree;
  std::vector<std::set<uint64_t>> owned(kThreads);
  std::vector<std::thread> threads;
  auto value_of = [](uint64_t x, int t) { return (x << 8) | static_cast<uint64_t>(t + 1); };
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(200 + t);
      for (int i = 0; i < ops_per_thread; ++i) {
        ebr::Guard guard;
        const uint64_t x = rng.uniform(0, universe);
        const uint64_t op = rng.uniform(0, 99);
        if (op < 40) {
          void* old = tree.insert_if_absent(key1(x), as_value(value_of(x, t)), nullptr, nullptr);
          if (old == nullptr) {
            owned[t].insert(x);
          } else {
            ASSERT_EQ(from_value(old) >> 8, x);
            ASSERT_EQ(from_value(old) == value_of(x, t), owned[t].count(x) != 0);
          }
        } else if (op < 80) {
          const bool mine = owned[t].count(x) != 0;
          ASSERT_EQ(tree.remove(key1(x), as_value(value_of(x, t))), mine);
          owned[t].erase(x);
        } else if (op < 95) {
          void* v = tree.get(key1(x), nullptr);
          if (v != nullptr) {
            ASSERT_EQ(from_value(v) >> 8, x);
          }
          if (owned[t].count(x) != 0) {
            ASSERT_EQ(from_value(v), value_of(x, t));
          }
        } else {
          const uint64_t lo = rng.uniform(0, universe);
          uint64_t prev = 0;
          bool first = true;
          tree.rscan(
              key1(lo + 200), key1(lo),
              [&](const Key1& k, void* v) {
                EXPECT_TRUE(first || k.w[0] < prev);
                EXPECT_EQ(from_value(v) >> 8, k.w[0]);
                first = false;
                prev = k.w[0];
                return true;
              },
              [](typename Tree::NodeRef) {});
        }
        if (i % 256 == 0) ebr::quiesce();
      }
    });
  }
  for (auto& th : threads) th.join();
  ebr::Guard guard;
  std::set<uint64_t> all;
  for (const auto& s : owned) all.insert(s.begin(), s.end());
  std::set<uint64_t> got;
  tree.scan(
      key1(0), key1(~0ull), [&](const Key1& k, void*) { return got.insert(k.w[0]), true; },
      [](typename Tree::NodeRef) {});
  EXPECT_EQ(got, all);
}

TEST(BTreeTest, ConcurrentOverlappingKeys) {
  concurrent_overlapping<BTree<1>>(40000, 3000);
}
TEST(BTreeTest, ConcurrentOverlappingKeysTinyNodes) {
  concurrent_overlapping<TinyTree1>(40000, 1000);
}

// Steps of one prefetching descent to `x` (BasicBTree::prefetch_step), bounded.
template <class Tree>
size_t prefetch_steps(const Tree& tree, uint64_t x) {
  ebr::Guard guard;
  BTreePrefetch p;
  const uint64_t words[1] = {x};
  tree.prefetch_start(words, &p);
  size_t steps = 1;
  while (tree.prefetch_step(&p)) {
    ++steps;
    if (steps > btree_detail::kMaxHeight + 1) break;
  }
  EXPECT_EQ(p.node, nullptr);
  return steps;
}

// A descent reads one node per step, root to leaf, whether the key is there or not: as many
// steps as the tree has levels (the leaf's step also prefetches the value and ends it).
TEST(BTreeTest, PrefetchDescentTakesOneStepPerLevel) {
  TinyTree1 tree;
  EXPECT_EQ(prefetch_steps(tree, 7), 1u);  // the root is a leaf
  {
    ebr::Guard guard;
    for (uint64_t x = 0; x < 20000; x += 2)
      tree.insert_if_absent(key1(x), as_value(x + 1), nullptr, nullptr);
  }
  const size_t levels = prefetch_steps(tree, 0);
  EXPECT_GE(levels, 4u);  // tiny nodes: a deep tree
  for (uint64_t x : {uint64_t{1}, uint64_t{9998}, uint64_t{19999}, uint64_t{50000}}) {
    EXPECT_EQ(prefetch_steps(tree, x), levels) << x;
  }
}

// Keys 0, step, 2 step, ... below end, each with value x + 1. REQUIRES: a guard held.
void insert_every(TinyTree1& tree, uint64_t step, uint64_t end) {
  for (uint64_t x = 0; x < end; x += step)
    tree.insert_if_absent(key1(x), as_value(x + 1), nullptr, nullptr);
}

// The leaf a descent to `x` ends at (BTreePrefetch::leaf), and its value; steps in *steps.
template <class Tree>
BTreePrefetch descend(const Tree& tree, uint64_t x, const void* finger, size_t* steps) {
  BTreePrefetch p;
  const uint64_t words[1] = {x};
  tree.prefetch_start(words, &p);
  if (finger != nullptr) tree.prefetch_jump(&p, finger);
  *steps = 1;
  while (tree.prefetch_step(&p) && *steps <= btree_detail::kMaxHeight) ++*steps;
  return p;
}

// A descent to a neighbour of an earlier one's key jumps to the earlier one's leaf and ends in
// one step with the same answer a descent from the root gives; a finger that does not cover
// the key (another leaf, or a leaf split since) leaves the descent at the root.
TEST(BTreeTest, PrefetchJumpsToAFingerOnlyWhenItCoversTheKey) {
  TinyTree1 tree;
  ebr::Guard guard;
  insert_every(tree, 2, 20000);
  size_t levels = 0;
  const BTreePrefetch at_100 = descend(tree, 100, nullptr, &levels);
  ASSERT_GE(levels, 4u);
  ASSERT_NE(at_100.leaf, nullptr);
  EXPECT_EQ(at_100.value, as_value(101));
  size_t steps = 0;
  const BTreePrefetch at_102 = descend(tree, 102, at_100.leaf, &steps);
  if (at_102.leaf == at_100.leaf) {  // 100 and 102 share a leaf (not at a leaf boundary)
    EXPECT_EQ(steps, 1u);
  }
  EXPECT_EQ(at_102.value, as_value(103));
  const BTreePrefetch at_101 = descend(tree, 101, at_100.leaf, &steps);  // absent
  EXPECT_EQ(at_101.value, nullptr);
  EXPECT_NE(at_101.leaf, nullptr);
  // Far away: the finger does not cover it, the descent runs from the root and finds it.
  const BTreePrefetch far = descend(tree, 15000, at_100.leaf, &steps);
  EXPECT_EQ(steps, levels);
  EXPECT_EQ(far.value, as_value(15001));
  // The leaf splits under the finger (inserts fill it): every key still gets its own value.
  for (uint64_t x = 101; x < 160; x += 2)
    tree.insert_if_absent(key1(x), as_value(x + 1), nullptr, nullptr);
  for (uint64_t x = 90; x < 170; ++x) {
    const BTreePrefetch p = descend(tree, x, at_100.leaf, &steps);
    const bool present = x % 2 == 0 || (x >= 101 && x < 160);
    EXPECT_EQ(p.value, present ? as_value(x + 1) : nullptr) << x;
    EXPECT_EQ(p.value, tree.get(key1(x), nullptr)) << x;
  }
}

// insert_if_absent_at() with the right leaf, a wrong one, a full one or none inserts where the
// key belongs: every key is found by get and in order by scan, present keys are refused.
TEST(BTreeTest, InsertIfAbsentAtUsesAHintOnlyWhereTheKeyBelongs) {
  TinyTree1 tree;
  ebr::Guard guard;
  insert_every(tree, 4, 4000);
  size_t steps = 0;
  const void* left = descend(tree, 8, nullptr, &steps).leaf;
  const void* right = descend(tree, 3000, nullptr, &steps).leaf;
  ASSERT_NE(left, right);
  Rng rng(11);
  for (uint64_t x = 1; x < 4000; ++x) {
    if (x % 4 == 0) continue;
    const void* hints[] = {left, right, nullptr, descend(tree, x, nullptr, &steps).leaf};
    ASSERT_EQ(tree.insert_if_absent_at(key1(x), as_value(x + 1), hints[rng.uniform(0, 3)]), nullptr)
        << x;
  }
  EXPECT_EQ(tree.insert_if_absent_at(key1(8), as_value(1), left), as_value(9));
  EXPECT_EQ(tree.insert_if_absent_at(key1(3000), as_value(1), left), as_value(3001));
  EXPECT_EQ(tree.size(), 4000u);
  uint64_t expect = 0;
  tree.scan(
      key1(0), key1(UINT64_MAX),
      [&](const Key<1>& k, void* v) {
        EXPECT_EQ(k.w[0], expect);
        EXPECT_EQ(v, as_value(expect + 1));
        ++expect;
        return true;
      },
      [](const TinyTree1::NodeRef&) {});
  EXPECT_EQ(expect, 4000u);
}

// Descents meet nodes that split, shrink and get unlinked under them: each still ends, within
// the height bound, and reads only through validated pointers (TSan and ASan run this).
TEST(BTreeTest, ConcurrentPrefetchDescentsDuringChurn) {
  TinyTree1 tree;
  constexpr uint64_t kRange = 4000;
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      Rng rng(300 + w);
      for (int i = 0; !stop.load(std::memory_order_relaxed) && i < 200000; ++i) {
        ebr::Guard guard;
        const uint64_t x = rng.uniform(0, kRange);
        if (rng.uniform(0, 1)) {
          tree.insert_if_absent(key1(x), as_value(x + 1), nullptr, nullptr);
        } else {
          tree.remove(key1(x), as_value(x + 1));
        }
        if (i % 256 == 0) ebr::quiesce();
      }
    });
  }
  Rng rng(7);
  for (int i = 0; i < 200000; ++i) {
    EXPECT_LE(prefetch_steps(tree, rng.uniform(0, kRange)), btree_detail::kMaxHeight + 1);
    if (i % 256 == 0) ebr::quiesce();
  }
  // Fingers kept across descents of one guard, while leaves split and get unlinked: a jump
  // reads only a leaf the guard keeps, and a finished descent's value is one the key held.
  for (int round = 0; round < 2000; ++round) {
    ebr::Guard guard;
    const void* finger = nullptr;
    uint64_t x = rng.uniform(0, kRange);
    for (int i = 0; i < 32; ++i, ++x) {
      size_t steps = 0;
      const BTreePrefetch p = descend(tree, x, finger, &steps);
      EXPECT_LE(steps, btree_detail::kMaxHeight + 1);
      EXPECT_TRUE(p.value == nullptr || p.value == as_value(x + 1)) << x;
      if (p.leaf != nullptr) finger = p.leaf;
    }
  }
  stop.store(true);
  for (auto& t : writers) t.join();
}

// Hinted inserts of fresh keys from one thread while others churn the same range: each key
// inserted once is found afterwards (never lost to a stale hint, never in a wrong leaf).
TEST(BTreeTest, ConcurrentHintedInsertsDuringChurn) {
  TinyTree1 tree;
  constexpr uint64_t kChurn = 4000;  // odd keys below, churned
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    Rng rng(301);
    for (int i = 0; !stop.load(std::memory_order_relaxed) && i < 400000; ++i) {
      ebr::Guard guard;
      const uint64_t x = rng.uniform(0, kChurn / 2) * 2 + 1;
      if (rng.uniform(0, 1)) {
        tree.insert_if_absent(key1(x), as_value(x + 1), nullptr, nullptr);
      } else {
        tree.remove(key1(x), as_value(x + 1));
      }
      if (i % 256 == 0) ebr::quiesce();
    }
  });
  for (uint64_t x = 0; x < kChurn; x += 2) {  // even keys, in runs of neighbours
    ebr::Guard guard;
    size_t steps = 0;
    const void* hint = descend(tree, x, nullptr, &steps).leaf;
    ASSERT_EQ(tree.insert_if_absent_at(key1(x), as_value(x + 1), hint), nullptr) << x;
    if (x % 64 == 0) ebr::quiesce();
  }
  stop.store(true);
  churn.join();
  ebr::Guard guard;
  for (uint64_t x = 0; x < kChurn; x += 2) EXPECT_EQ(tree.get(key1(x), nullptr), as_value(x + 1));
}

// Writers churn odd keys (causing splits and leaf unlinks) while readers check that the even
// keys, which never change, are always found by get, scan and rscan; and that whenever a
// re-read disagrees with an earlier read, the recorded leaf versions say so (Silo's check).
TEST(BTreeTest, ConcurrentReadersSeeStableKeysAndDetectChanges) {
  TinyTree1 tree;
  constexpr uint64_t kRange = 4000;
  {
    ebr::Guard guard;
    for (uint64_t x = 0; x < kRange; x += 2)
      tree.insert_if_absent(key1(x), as_value(x + 1), nullptr, nullptr);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      Rng rng(300 + w);
      for (int i = 0; i < 60000; ++i) {
        ebr::Guard guard;
        // Runs of adjacent odd keys empty whole leaves.
        const uint64_t base = rng.uniform(0, kRange / 64) * 64 + 1;
        for (uint64_t x = base; x < base + 64; x += 2) {
          if (w == 0) tree.insert_if_absent(key1(x), as_value(x + 1), nullptr, nullptr);
          if (w == 1) tree.remove(key1(x), as_value(x + 1));
        }
        if (i % 64 == 0) ebr::quiesce();
        if (stop.load(std::memory_order_relaxed)) break;
      }
    });
  }
  std::atomic<uint64_t> detected{0};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Rng rng(400 + r);
      for (int i = 0; i < 3000; ++i) {
        ebr::Guard guard;
        const uint64_t lo = rng.uniform(0, kRange);
        const uint64_t hi = lo + rng.uniform(0, 300);
        auto read = [&](std::vector<uint64_t>* keys, std::vector<TinyTree1::NodeRef>* refs) {
          auto on_entry = [&](const Key1& k, void*) { return keys->push_back(k.w[0]), true; };
          auto on_leaf = [&](TinyTree1::NodeRef ref) { refs->push_back(ref); };
          if (r == 0) {
            tree.scan(key1(lo), key1(hi), on_entry, on_leaf);
          } else {
            tree.rscan(key1(hi), key1(lo), on_entry, on_leaf);
            std::reverse(keys->begin(), keys->end());
          }
        };
        std::vector<uint64_t> first, second;
        std::vector<TinyTree1::NodeRef> refs, unused;
        read(&first, &refs);
        ASSERT_TRUE(std::is_sorted(first.begin(), first.end()));
        std::vector<uint64_t> evens;
        for (uint64_t x : first) {
          if (x % 2 == 0) evens.push_back(x);
        }
        ASSERT_EQ(evens.size(), (std::min(hi, kRange - 1) / 2 - (lo + 1) / 2 + 1))
            << lo << ".." << hi;
        ASSERT_EQ(tree.get(key1(lo / 2 * 2 % kRange), nullptr), as_value(lo / 2 * 2 % kRange + 1));
        read(&second, &unused);
        if (first != second) {
          bool changed = false;
          for (const auto& ref : refs)
            changed = changed || TinyTree1::leaf_version(ref.leaf) != ref.version;
          ASSERT_TRUE(changed) << "a change in [" << lo << ", " << hi << "] went unnoticed";
          detected.fetch_add(1);
        }
        if (i % 64 == 0) ebr::quiesce();
      }
    });
  }
  for (size_t i = 2; i < threads.size(); ++i) threads[i].join();
  stop.store(true);
  threads[0].join();
  threads[1].join();
  ebr::Guard guard;
  for (uint64_t x = 0; x < kRange; x += 2) ASSERT_EQ(tree.get(key1(x), nullptr), as_value(x + 1));
}

}  // namespace
}  // namespace shoal

#include "src/index/bytes_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/base/ebr.h"
#include "src/base/env.h"
#include "src/base/test_scale.h"

namespace shoal {
namespace bytes_tree_test {  // named, not anonymous: unique in a unity build

using Result = BytesTree::Result;
using NodeRef = BytesTree::NodeRef;
using Model = std::map<std::string, uint64_t>;
using Entries = std::vector<std::pair<std::string, uint64_t>>;

// Values are 4-byte aligned, as records are (BytesTree tags the low bits of its entries).
void* as_value(uint64_t v) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(v << 2));
}
uint64_t from_value(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) >> 2;
}

// Keys with shared prefixes of lengths around the 8-byte slices, embedded zero bytes, keys
// that are prefixes of each other (a small alphabet makes them common), and now and then a
// key of kKeyBytesMax bytes.
std::string random_key(Rng& rng) {
  static const std::string kPrefixes[] = {
      "",
      "a",
      "user:",
      "aaaaaaaa",
      "aaaaaaaab",
      std::string(8, '\0'),
      "aaaaaaaa"
      "bbbbbbbb"
      "cc",
      std::string(24, 'a'),
      std::string(40, '\xff'),
  };
  static const char kAlphabet[] = {'\0', '\1', 'a', 'b', '\xff'};
  std::string k;
  if (rng.uniform(0, 400) == 0) {
    k.assign(BytesTree::kKeyBytesMax - rng.uniform(0, 3) * 8 - rng.uniform(0, 2), 'k');
    for (size_t i = 0; i < 3; ++i) k[k.size() - 1 - i] = kAlphabet[rng.uniform(0, 4)];
    return k;
  }
  k = kPrefixes[rng.uniform(0, std::size(kPrefixes) - 1)];
  const size_t extra = rng.uniform(0, 9) == 0 ? rng.uniform(0, 300 - k.size()) : rng.uniform(0, 12);
  for (size_t i = 0; i < extra; ++i) k.push_back(kAlphabet[rng.uniform(0, 4)]);
  if (k.empty()) k.push_back(kAlphabet[rng.uniform(0, 4)]);
  return k;
}

struct ScanOut {
  Entries entries;
  std::vector<NodeRef> refs;
  bool leaf_before_entry = true;
};

// Scans [lo, hi] (hi nullopt: to the end) delivering at most `limit` entries.
ScanOut scan(const BytesTree& tree, std::string_view lo, std::optional<std::string_view> hi,
             size_t limit) {
  ScanOut out;
  const Result r = tree.scan(
      lo, hi,
      [&](std::string_view k, void* v) {
        out.leaf_before_entry = out.leaf_before_entry && !out.refs.empty();
        out.entries.emplace_back(std::string(k), from_value(v));
        return out.entries.size() < limit;
      },
      [&](NodeRef ref) { out.refs.push_back(ref); });
  EXPECT_EQ(r, Result::kOk);
  return out;
}

Entries model_scan(const Model& model, const std::string& lo, std::optional<std::string> hi,
                   size_t limit) {
  Entries want;
  for (auto it = model.lower_bound(lo); it != model.end() && want.size() < limit; ++it) {
    if (hi && *hi < it->first) break;
    want.emplace_back(it->first, it->second);
  }
  return want;
}

bool any_changed(const std::vector<NodeRef>& refs) {
  for (const NodeRef& r : refs) {
    if (BytesTree::leaf_version(r.leaf) != r.version) return true;
  }
  return false;
}

void check_random_scan(const BytesTree& tree, const Model& model, Rng& rng) {
  std::string lo = rng.uniform(0, 9) == 0 ? std::string() : random_key(rng);
  std::optional<std::string> hi;
  if (rng.uniform(0, 4) != 0) hi = random_key(rng);
  if (hi && *hi < lo) std::swap(lo, *hi);
  const size_t limit = rng.uniform(0, 3) == 0 ? 100000 : rng.uniform(1, 40);
  const ScanOut got =
      scan(tree, lo, hi ? std::optional<std::string_view>(*hi) : std::nullopt, limit);
  EXPECT_TRUE(got.leaf_before_entry);
  for (const NodeRef& r : got.refs) EXPECT_EQ(BytesTree::leaf_version(r.leaf), r.version);
  const Entries want = model_scan(model, lo, hi, limit);
  ASSERT_EQ(got.entries.size(), want.size()) << "lo " << lo.size() << " B";
  for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(got.entries[i] == want[i]) << i;
}

void random_ops_against_map(uint64_t seed, int ops) {
  Rng rng(seed);
  Model model;
  BytesTree tree;
  uint64_t next_value = 1;
  for (int i = 0; i < ops; ++i) {
    ebr::Guard guard;
    const std::string k = random_key(rng);
    const auto it = model.find(k);
    const bool present = it != model.end();
    const uint64_t op = rng.uniform(0, 99);
    if (op < 35) {
      const uint64_t v = next_value++;
      NodeRef before{};
      uint64_t after = 0;
      void* old = nullptr;
      const Result r = tree.insert_if_absent(k, as_value(v), &old, &before, &after);
      ASSERT_EQ(r, present ? Result::kExists : Result::kOk);
      if (present) {
        ASSERT_EQ(from_value(old), it->second);
        EXPECT_EQ(after, before.version);
      } else {
        model.emplace(k, v);
        EXPECT_NE(after, before.version);
      }
      EXPECT_EQ(BytesTree::leaf_version(before.leaf), after);
    } else if (op < 60) {
      NodeRef ref{};
      void* v = nullptr;
      ASSERT_EQ(tree.get(k, &v, &ref), present ? Result::kOk : Result::kNotFound);
      if (present) {
        ASSERT_EQ(from_value(v), it->second);
      }
      EXPECT_EQ(BytesTree::leaf_version(ref.leaf), ref.version);
    } else if (op < 70) {
      const uint64_t v = next_value++;
      ASSERT_EQ(tree.update(k, as_value(v)), present ? Result::kOk : Result::kNotFound);
      if (present) it->second = v;
    } else if (op < 90) {
      const bool right_value = rng.uniform(0, 4) != 0;
      const uint64_t expected = present && right_value ? it->second : next_value + 1;
      const bool removes = present && right_value;
      ASSERT_EQ(tree.remove(k, as_value(expected)), removes ? Result::kOk : Result::kNotFound);
      if (removes) model.erase(it);
    } else {
      check_random_scan(tree, model, rng);
    }
    if (i % 512 == 0) {
      ASSERT_EQ(tree.size(), model.size());
    }
  }
  ASSERT_EQ(tree.size(), model.size());
  ebr::Guard guard;
  const ScanOut all = scan(tree, "", std::nullopt, ~size_t{0});
  ASSERT_EQ(all.entries, Entries(model.begin(), model.end()));
}

// A third of the operations under the sanitizers (19 s each under ASan at -O0 in full).
TEST(BytesTreeTest, RandomOpsMatchStdMap) {
  random_ops_against_map(1, scaled(60000, 3));
}
TEST(BytesTreeTest, RandomOpsMatchStdMapOtherSeed) {
  random_ops_against_map(2, scaled(60000, 3));
}

// Byte order: memcmp, then the shorter first; zero bytes and 0xff are ordinary bytes.
TEST(BytesTreeTest, OrdersPrefixesAndZeroBytes) {
  using namespace std::string_literals;
  const std::vector<std::string> keys = {"a"s,
                                         "ab"s,
                                         "ab\0"s,
                                         "ab\0\0"s,
                                         "ab\0\0\0\0\0\0"s,
                                         "ab\0\0\0\0\0\0\0"s,
                                         "ab\0\0\0\0\0\0\0x"s,
                                         "abc"s,
                                         "abcdefgh"s,
                                         "abcdefgh\0"s,
                                         "abcdefghi"s,
                                         "abcdefghij"s,
                                         "abcdefghijklmnop"s,
                                         "abcdefghijklmnopq"s,
                                         "b"s,
                                         "\xff"s,
                                         "\xff\xff\xff\xff\xff\xff\xff\xff\xff"s,
                                         "\0"s,
                                         "\0\0\0\0\0\0\0\0\0"s};
  ebr::Guard guard;
  BytesTree tree;
  Model model;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(tree.insert_if_absent(keys[i], as_value(i + 1), nullptr, nullptr, nullptr),
              Result::kOk)
        << i;
    model.emplace(keys[i], i + 1);
  }
  EXPECT_EQ(scan(tree, "", std::nullopt, 1000).entries, Entries(model.begin(), model.end()));
  for (size_t i = 0; i < keys.size(); ++i) {
    void* v = nullptr;
    ASSERT_EQ(tree.get(keys[i], &v, nullptr), Result::kOk) << i;
    EXPECT_EQ(from_value(v), i + 1);
  }
  // Bounds that are not keys, and bounds that cut a shared slice.
  for (const auto& [lo, hi] : std::vector<std::pair<std::string, std::string>>{
           {"ab\0"s, "abcdefgh\0"s}, {"abcdefgh\0\0"s, "abcdefghijk"s}, {"\0\0"s, "ab\0\0\0"s}}) {
    EXPECT_EQ(scan(tree, lo, hi, 1000).entries, model_scan(model, lo, hi, 1000)) << lo;
  }
}

TEST(BytesTreeTest, RefusesEmptyAndOversizedKeys) {
  ebr::Guard guard;
  BytesTree tree;
  const std::string too_long(BytesTree::kKeyBytesMax + 1, 'x');
  const std::string longest(BytesTree::kKeyBytesMax, 'x');
  for (const std::string& bad : {std::string(), too_long}) {
    void* v = nullptr;
    EXPECT_EQ(tree.get(bad, &v, nullptr), Result::kBadKey);
    EXPECT_EQ(tree.insert_if_absent(bad, as_value(1), nullptr, nullptr, nullptr), Result::kBadKey);
    EXPECT_EQ(tree.update(bad, as_value(1)), Result::kBadKey);
    EXPECT_EQ(tree.remove(bad, as_value(1)), Result::kBadKey);
  }
  auto ignore = [](std::string_view, void*) { return true; };
  auto no_leaf = [](NodeRef) {};
  EXPECT_EQ(tree.scan(too_long, std::nullopt, ignore, no_leaf), Result::kBadKey);
  EXPECT_EQ(tree.scan("a", std::string_view(too_long), ignore, no_leaf), Result::kBadKey);
  EXPECT_EQ(tree.size(), 0u);
  EXPECT_EQ(tree.insert_if_absent(longest, as_value(1), nullptr, nullptr, nullptr), Result::kOk);
  EXPECT_EQ(tree.scan("", std::string_view(longest), ignore, no_leaf), Result::kOk);
}

// Keys of 8 KiB that share all but their last bytes make chains of 1,023 sub-layers.
TEST(BytesTreeTest, LongestKeysSharingPrefixes) {
  ebr::Guard guard;
  BytesTree tree;
  Model model;
  const std::string base(BytesTree::kKeyBytesMax, 'k');
  std::vector<std::string> keys = {base, base.substr(0, base.size() - 1),
                                   base.substr(0, base.size() - 8)};
  for (size_t at : {size_t{0}, size_t{4000}, base.size() - 9, base.size() - 1}) {
    for (char c : {'\0', 'a', '\xff'}) {
      std::string k = base;
      k[at] = c;
      keys.push_back(k);
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(tree.insert_if_absent(keys[i], as_value(i + 1), nullptr, nullptr, nullptr),
              Result::kOk);
    model.emplace(keys[i], i + 1);
  }
  EXPECT_EQ(scan(tree, "", std::nullopt, 1000).entries, Entries(model.begin(), model.end()));
  EXPECT_EQ(scan(tree, keys[1], keys[0], 1000).entries, model_scan(model, keys[1], keys[0], 1000));
  for (size_t i = 0; i < keys.size(); i += 2) {
    ASSERT_EQ(tree.remove(keys[i], as_value(i + 1)), Result::kOk);
    model.erase(keys[i]);
  }
  EXPECT_EQ(scan(tree, "", std::nullopt, 1000).entries, Entries(model.begin(), model.end()));
  EXPECT_EQ(tree.size(), model.size());
}

// --- versions ---

// update() leaves every version alone, also for a key kept as a suffix; remove() changes one.
TEST(BytesTreeVersionTest, UpdateKeepsVersionsRemoveChangesThem) {
  ebr::Guard guard;
  BytesTree tree;
  const std::vector<std::string> keys = {"short", "exactly8", "a much longer key, a suffix",
                                         "a much longer key, in a sub-layer",
                                         "a much longer key, in a sub-layer too"};
  for (size_t i = 0; i < keys.size(); ++i)
    tree.insert_if_absent(keys[i], as_value(i + 1), nullptr, nullptr, nullptr);
  for (size_t i = 0; i < keys.size(); ++i) {
    NodeRef ref{};
    void* v = nullptr;
    ASSERT_EQ(tree.get(keys[i], &v, &ref), Result::kOk);
    ASSERT_EQ(tree.update(keys[i], as_value(100 + i)), Result::kOk);
    EXPECT_EQ(BytesTree::leaf_version(ref.leaf), ref.version) << keys[i];
    EXPECT_EQ(tree.remove(keys[i], as_value(i + 1)), Result::kNotFound);  // the old value
    EXPECT_EQ(BytesTree::leaf_version(ref.leaf), ref.version) << keys[i];
    ASSERT_EQ(tree.remove(keys[i], as_value(100 + i)), Result::kOk);
    EXPECT_NE(BytesTree::leaf_version(ref.leaf), ref.version) << keys[i];
  }
}

// A get of a missing key records a leaf whose version any insert of that key changes, also
// when the insert turns another key's suffix into a sub-layer; and insert_if_absent's
// before/after let the inserter move its own record forward (Txn::note_own_insert).
TEST(BytesTreeVersionTest, InsertChangesVersionSeenByGetOfMissingKey) {
  ebr::Guard guard;
  BytesTree tree;
  Rng rng(3);
  for (int i = 0; i < 20000; ++i) {
    const std::string k = random_key(rng);
    NodeRef ref{};
    const bool missing = tree.get(k, nullptr, &ref) == Result::kNotFound;
    NodeRef before{};
    uint64_t after = 0;
    tree.insert_if_absent(k, as_value(i + 1), nullptr, &before, &after);
    ASSERT_EQ(BytesTree::leaf_version(before.leaf), after);
    if (!missing) continue;
    ASSERT_NE(BytesTree::leaf_version(ref.leaf), ref.version) << i;
    // Nobody else ran: the inserter changed the leaf the get recorded, at the version it
    // recorded, unless a split came first (then before.version is one nobody recorded).
    if (before.version == ref.version) {
      ASSERT_EQ(before.leaf, ref.leaf);
    }
  }
}

// A scan's reported leaves must detect any later insert or remove in the range it vouches
// for ([lo, last delivered] when the limit stopped it), in whichever layer it lands.
void check_scan_detects(bool remove) {
  Rng rng(remove ? 11 : 10);
  for (int round = 0; round < 300; ++round) {
    ebr::Guard guard;
    BytesTree tree;
    Model model;
    for (int i = 0; i < 400; ++i) {
      const std::string k = random_key(rng);
      if (tree.insert_if_absent(k, as_value(i + 1), nullptr, nullptr, nullptr) == Result::kOk)
        model.emplace(k, i + 1);
    }
    std::string lo = random_key(rng), hi = random_key(rng);
    if (hi < lo) std::swap(lo, hi);
    const size_t limit = rng.uniform(1, 60);
    const ScanOut out = scan(tree, lo, hi, limit);
    const std::string to = out.entries.size() == limit ? out.entries.back().first : hi;
    std::optional<std::string> change;  // a key in [lo, to]: absent to insert, present to remove
    for (int attempt = 0; attempt < 200 && !change; ++attempt) {
      std::string k = random_key(rng);
      if (remove) {
        auto it = model.lower_bound(k);
        if (it == model.end()) continue;
        k = it->first;
      }
      if (k < lo || to < k || (model.count(k) != 0) != remove) continue;
      change = k;
    }
    if (!change) continue;
    if (remove) {
      ASSERT_EQ(tree.remove(*change, as_value(model[*change])), Result::kOk);
    } else {
      ASSERT_EQ(tree.insert_if_absent(*change, as_value(1), nullptr, nullptr, nullptr),
                Result::kOk);
    }
    ASSERT_TRUE(any_changed(out.refs)) << "round " << round << " key of " << change->size() << " B";
  }
}

TEST(BytesTreeVersionTest, ScanLeavesDetectPhantomInsert) {
  check_scan_detects(false);
}
TEST(BytesTreeVersionTest, ScanLeavesDetectRemove) {
  check_scan_detects(true);
}

// The empty range between two keys that share a suffix entry: an insert there turns the
// entry into a sub-layer and must change the version the scan recorded.
TEST(BytesTreeVersionTest, SuffixToSubLayerChangesScannedVersion) {
  ebr::Guard guard;
  BytesTree tree;
  ASSERT_EQ(tree.insert_if_absent("prefix00-m", as_value(1), nullptr, nullptr, nullptr),
            Result::kOk);
  const ScanOut out = scan(tree, "prefix00-a", std::string_view("prefix00-z"), 100);
  ASSERT_EQ(out.entries.size(), 1u);
  ASSERT_FALSE(any_changed(out.refs));
  NodeRef before{};
  uint64_t after = 0;
  ASSERT_EQ(tree.insert_if_absent("prefix00-q", as_value(2), nullptr, &before, &after),
            Result::kOk);
  EXPECT_TRUE(any_changed(out.refs));
  EXPECT_EQ(before.leaf, out.refs.front().leaf);  // the swap happened in the scanned leaf
  EXPECT_EQ(before.version, out.refs.front().version);
  EXPECT_EQ(scan(tree, "prefix00-a", std::string_view("prefix00-z"), 100).entries.size(), 2u);
}

// Keys whose slices are equal after padding share one entry (a bucket): adding a shorter or
// longer one between the scan's bounds changes the entry, and must change the version.
TEST(BytesTreeVersionTest, KeysSharingASliceChangeScannedVersion) {
  using namespace std::string_literals;
  for (const std::string& added :
       {"ab\0"s, "ab\0\0\0\0\0\0"s, "ab\0\0\0\0\0\0\0"s, "ab\0\0\0\0\0\0\0\1"s}) {
    ebr::Guard guard;
    BytesTree tree;
    ASSERT_EQ(tree.insert_if_absent("ab", as_value(1), nullptr, nullptr, nullptr), Result::kOk);
    ASSERT_EQ(tree.insert_if_absent("ab\1", as_value(2), nullptr, nullptr, nullptr), Result::kOk);
    const ScanOut out = scan(tree, "ab", std::string_view("ab\1"), 100);
    ASSERT_EQ(out.entries.size(), 2u);
    ASSERT_EQ(tree.insert_if_absent(added, as_value(3), nullptr, nullptr, nullptr), Result::kOk);
    EXPECT_TRUE(any_changed(out.refs)) << added.size();
    EXPECT_EQ(scan(tree, "ab", std::string_view("ab\1"), 100).entries.size(), 3u);
    const ScanOut again = scan(tree, "ab", std::string_view("ab\1"), 100);
    ASSERT_EQ(tree.remove(added, as_value(3)), Result::kOk);
    EXPECT_TRUE(any_changed(again.refs)) << added.size();
  }
}

// --- concurrency (also run under TSan) ---

constexpr int kThreads = 4;

// Keys from numbers: x and x ^ 1 share all but their last bytes, so that the insert of an
// odd key turns its even neighbor's suffix entry into a sub-layer while others read it. The
// families' prefixes end at, inside and beyond the 8-byte slices.
std::string family_key(uint64_t x) {
  static const std::string kFamilies[] = {"", "table:00", std::string(16, '\0'), "t:"};
  std::string k = kFamilies[(x / 2) % 4];
  const std::string digits = std::to_string(x / 2);
  k.append(8 - std::min<size_t>(8, digits.size()), '0');
  k += digits;
  k += x % 2 ? "-v" : "-s";
  return k;
}

// Writers insert and remove odd-numbered keys (each owns a residue, so it knows exactly what
// it holds); readers scan and check that the even keys, which nobody changes, are all there,
// in order, and that a re-read differing from the first read is caught by the recorded
// versions.
TEST(BytesTreeTest, ConcurrentScansSeeStableKeysAndDetectChanges) {
  constexpr uint64_t kRange = 3000;
  BytesTree tree;
  std::map<std::string, uint64_t> stable;
  {
    ebr::Guard guard;
    for (uint64_t x = 0; x < kRange; x += 2) {
      tree.insert_if_absent(family_key(x), as_value(x + 1), nullptr, nullptr, nullptr);
      stable.emplace(family_key(x), x + 1);
    }
  }
  // Whole-range scans of 1,500 keys dominate; TSan runs them 7x slower (27 s at full scale).
  const int writes = scaled(40000, 4), scans = scaled(2000, 4);
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      Rng rng(300 + w);
      std::set<uint64_t> mine;
      for (int i = 0; i < writes; ++i) {
        ebr::Guard guard;
        const uint64_t x = rng.uniform(0, kRange / 4) * 4 + 1 + 2 * w;
        const bool had = mine.count(x) != 0;
        if (rng.uniform(0, 1)) {
          const Result r =
              tree.insert_if_absent(family_key(x), as_value(x + 1), nullptr, nullptr, nullptr);
          ASSERT_EQ(r, had ? Result::kExists : Result::kOk);
          mine.insert(x);
        } else {
          ASSERT_EQ(tree.remove(family_key(x), as_value(x + 1)),
                    had ? Result::kOk : Result::kNotFound);
          mine.erase(x);
        }
        if (i % 256 == 0) ebr::quiesce();
      }
    });
  }
  std::atomic<uint64_t> detected{0};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Rng rng(400 + r);
      for (int i = 0; i < scans; ++i) {
        ebr::Guard guard;
        // Half the ranges are narrow (x and x + 8m share a family), so that one writer's
        // change is often the only one between the two reads.
        const uint64_t x = rng.uniform(0, kRange);
        std::string lo = family_key(x);
        std::string hi = family_key(i % 2 ? x + 8 * rng.uniform(0, 3) : rng.uniform(0, kRange));
        if (hi < lo) std::swap(lo, hi);
        const ScanOut first = scan(tree, lo, hi, ~size_t{0});
        std::vector<std::string> keys;
        Entries evens;
        for (const auto& e : first.entries) {
          keys.push_back(e.first);
          if (stable.count(e.first) != 0) evens.push_back(e);
        }
        ASSERT_TRUE(std::adjacent_find(keys.begin(), keys.end(), std::greater_equal<>()) ==
                    keys.end());
        const Entries want(stable.lower_bound(lo), stable.upper_bound(hi));
        ASSERT_EQ(evens, want);
        const ScanOut second = scan(tree, lo, hi, ~size_t{0});
        if (first.entries != second.entries) {
          ASSERT_TRUE(any_changed(first.refs)) << "a change in [" << lo << ", " << hi << "]";
          detected.fetch_add(1);
        }
        if (i % 64 == 0) ebr::quiesce();
      }
    });
  }
  for (auto& t : threads) t.join();
  ebr::Guard final_guard;
  for (const auto& [k, want] : stable) {
    void* v = nullptr;
    ASSERT_EQ(tree.get(k, &v, nullptr), Result::kOk) << k;
    ASSERT_EQ(from_value(v), want);
  }
}

// All threads fight over the same few hundred keys, most of them sharing padded slices
// (buckets) or slices (suffixes turning into sub-layers). insert_if_absent succeeds only on an
// absent key and remove only with the remover's own value, so each thread knows exactly which
// keys it owns; the end state must be their union.
TEST(BytesTreeTest, ConcurrentOverlappingKeysSharingSlices) {
  std::vector<std::string> universe;
  {
    Rng rng(77);
    std::set<std::string> distinct;
    while (distinct.size() < 300) distinct.insert(random_key(rng));
    universe.assign(distinct.begin(), distinct.end());
  }
  BytesTree tree;
  std::vector<std::set<size_t>> owned(kThreads);
  auto value_of = [](size_t x, int t) {
    return as_value(x * kThreads + static_cast<size_t>(t) + 1);  // never null
  };
  auto key_of = [](const void* v) { return (from_value(v) - 1) / kThreads; };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(500 + t);
      for (int i = 0; i < 200000; ++i) {
        ebr::Guard guard;
        const size_t x = rng.uniform(0, universe.size() - 1);
        const std::string& k = universe[x];
        const bool mine = owned[t].count(x) != 0;
        const uint64_t op = rng.uniform(0, 99);
        if (op < 45) {
          void* old = nullptr;
          const Result r = tree.insert_if_absent(k, value_of(x, t), &old, nullptr, nullptr);
          if (r == Result::kOk) {
            ASSERT_FALSE(mine);
            owned[t].insert(x);
          } else {
            ASSERT_EQ(r, Result::kExists);
            ASSERT_EQ(key_of(old), x);
            ASSERT_EQ(old == value_of(x, t), mine);
          }
        } else if (op < 90) {
          ASSERT_EQ(tree.remove(k, value_of(x, t)), mine ? Result::kOk : Result::kNotFound);
          owned[t].erase(x);
        } else {
          void* v = nullptr;
          const Result r = tree.get(k, &v, nullptr);
          if (mine) {
            ASSERT_EQ(r, Result::kOk);
            ASSERT_EQ(v, value_of(x, t));
          } else if (r == Result::kOk) {
            ASSERT_EQ(key_of(v), x);
          }
        }
        if (i % 256 == 0) ebr::quiesce();
      }
    });
  }
  for (auto& th : threads) th.join();
  ebr::Guard guard;
  Entries want;
  for (int t = 0; t < kThreads; ++t) {
    for (size_t x : owned[t]) want.emplace_back(universe[x], from_value(value_of(x, t)));
  }
  std::sort(want.begin(), want.end());
  EXPECT_EQ(scan(tree, "", std::nullopt, ~size_t{0}).entries, want);
  EXPECT_EQ(tree.size(), want.size());
}

}  // namespace bytes_tree_test
}  // namespace shoal

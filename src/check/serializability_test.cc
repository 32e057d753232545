#include "src/check/serializability.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include "src/base/env.h"

namespace shoal::check {
namespace {

Op R(uint64_t key, uint64_t version, TxnId writer = kUnknownWriter) {
  return Op{OpKind::kRead, key, version, writer};
}
Op W(uint64_t key, uint64_t version) {
  return Op{OpKind::kWrite, key, version, kUnknownWriter};
}

TxnRecord txn(TxnId id, std::vector<Op> ops, bool committed = true) {
  return TxnRecord{id, committed, std::move(ops)};
}

std::set<AnomalyKind> kinds(const CheckReport& r) {
  std::set<AnomalyKind> out;
  for (size_t k = 0; k < CheckReport::kKindCount; ++k) {
    if (r.counts[k] > 0) out.insert(static_cast<AnomalyKind>(k));
  }
  return out;
}

const Anomaly* find(const CheckReport& r, AnomalyKind kind) {
  for (const Anomaly& a : r.anomalies) {
    if (a.kind == kind) return &a;
  }
  return nullptr;
}

TEST(Serializability, EmptyHistoryIsSerializable) {
  const CheckReport r = check_report(History{});
  EXPECT_TRUE(r.serializable());
  EXPECT_TRUE(check(History{}).empty());
}

TEST(Serializability, DirtyWriteIsG0) {
  // x: T1 then T2; y: T2 then T1.
  History h{{txn(1, {W(1, 1), W(2, 2)}), txn(2, {W(1, 2), W(2, 1)})}};
  const CheckReport r = check_report(h);
  EXPECT_EQ(kinds(r), std::set{AnomalyKind::kG0}) << r.to_string();
  const Anomaly* a = find(r, AnomalyKind::kG0);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->cycle.size(), 2u);
  EXPECT_EQ(a->explanation, "T1 -ww(k=1,v=1)-> T2 -ww(k=2,v=1)-> T1");
}

TEST(Serializability, ReadOfAbortedWriteIsG1a) {
  History h{{txn(1, {R(7, 0), W(7, 1)}, /*committed=*/false), txn(2, {R(7, 1)})}};
  const CheckReport r = check_report(h);
  EXPECT_EQ(kinds(r), std::set{AnomalyKind::kG1a}) << r.to_string();
  EXPECT_EQ(find(r, AnomalyKind::kG1a)->cycle, (std::vector<TxnId>{1, 2}));
}

TEST(Serializability, G1aUsesTheRecordedWriterWhenVersionsCollide) {
  // T1 (aborted) and T3 (committed) both wrote (7, 1); T2 saw T1's value.
  History h{{txn(1, {W(7, 1)}, false), txn(3, {W(7, 1)}), txn(2, {R(7, 1, 1)})}};
  EXPECT_EQ(kinds(check_report(h)), std::set{AnomalyKind::kG1a});
}

TEST(Serializability, ReadOfIntermediateVersionIsG1b) {
  // T2 saw T1's first write of key 3 but not its second: besides G1b that is also a cycle,
  // T1 -wr-> T2 -rw-> T1 (T2 must come both after and before T1).
  History h{{txn(1, {W(3, 1), W(3, 2)}), txn(2, {R(3, 1)})}};
  const CheckReport r = check_report(h);
  EXPECT_EQ(kinds(r), (std::set{AnomalyKind::kG1b, AnomalyKind::kGSingle})) << r.to_string();
  EXPECT_EQ(find(r, AnomalyKind::kG1b)->cycle, (std::vector<TxnId>{1, 2}));
}

TEST(Serializability, CircularInformationFlowIsG1c) {
  // Each reads what the other wrote.
  History h{{txn(1, {W(1, 1), R(2, 1)}), txn(2, {W(2, 1), R(1, 1)})}};
  const CheckReport r = check_report(h);
  EXPECT_EQ(kinds(r), std::set{AnomalyKind::kG1c}) << r.to_string();
  EXPECT_EQ(find(r, AnomalyKind::kG1c)->cycle.size(), 2u);
}

TEST(Serializability, ReadSkewIsGSingle) {
  // T2 writes x and y; T1 sees the old x but the new y.
  History h{{txn(1, {R(1, 0), R(2, 1)}), txn(2, {R(1, 0), W(1, 1), R(2, 0), W(2, 1)})}};
  const CheckReport r = check_report(h);
  EXPECT_EQ(kinds(r), std::set{AnomalyKind::kGSingle}) << r.to_string();
  EXPECT_EQ(find(r, AnomalyKind::kGSingle)->explanation, "T1 -rw(k=1,v=0)-> T2 -wr(k=2,v=1)-> T1");
}

TEST(Serializability, LostUpdateWithDistinctVersionsIsGSingle) {
  // Both read x0; T1 installs x1, T2 installs x2 over it without having seen it.
  History h{{txn(1, {R(5, 0), W(5, 1)}), txn(2, {R(5, 0), W(5, 2)})}};
  const CheckReport r = check_report(h);
  EXPECT_EQ(kinds(r), std::set{AnomalyKind::kGSingle}) << r.to_string();
  EXPECT_EQ(find(r, AnomalyKind::kGSingle)->explanation, "T1 -ww(k=5,v=1)-> T2 -rw(k=5,v=0)-> T1");
}

TEST(Serializability, LostUpdateInReadModifyWriteFormIsCaught) {
  // Sequence-number workloads write read+1, so a lost update shows as two committed writers of
  // one version (impossible), and the two readers anti-depend on each other (G2).
  History h{{txn(1, {R(5, 0), W(5, 1)}), txn(2, {R(5, 0), W(5, 1)})}};
  const CheckReport r = check_report(h);
  EXPECT_EQ(kinds(r), (std::set{AnomalyKind::kG2, AnomalyKind::kImpossible})) << r.to_string();
}

TEST(Serializability, WriteSkewIsG2) {
  History h{{txn(1, {R(1, 0), R(2, 0), W(1, 1)}), txn(2, {R(1, 0), R(2, 0), W(2, 1)})}};
  const CheckReport r = check_report(h);
  EXPECT_EQ(kinds(r), std::set{AnomalyKind::kG2}) << r.to_string();
  EXPECT_EQ(find(r, AnomalyKind::kG2)->cycle.size(), 2u);
}

TEST(Serializability, LongerG2CycleIsReportedMinimal) {
  // A three-way write skew (each reads its successor's key) plus a serial tail.
  History h{{txn(1, {R(1, 0), R(2, 0), W(1, 1)}), txn(2, {R(2, 0), R(3, 0), W(2, 1)}),
             txn(3, {R(3, 0), R(1, 0), W(3, 1)}), txn(4, {R(1, 1), W(1, 2)})}};
  const CheckReport r = check_report(h);
  EXPECT_EQ(kinds(r), std::set{AnomalyKind::kG2}) << r.to_string();
  const Anomaly* a = find(r, AnomalyKind::kG2);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->cycle.size(), 3u);
}

TEST(Serializability, ImpossibleHistories) {
  {
    History h{{txn(1, {R(1, 4)})}};  // nobody wrote version 4
    EXPECT_EQ(kinds(check_report(h)), std::set{AnomalyKind::kImpossible});
  }
  {
    History h{{txn(1, {W(1, 1)}), txn(2, {R(1, 1, /*writer=*/9)})}};  // T9 did not write it
    EXPECT_EQ(kinds(check_report(h)), std::set{AnomalyKind::kImpossible});
  }
  {
    History h{{txn(1, {W(1, 1)}), txn(2, {W(1, 1)})}};  // two committed writers
    EXPECT_EQ(kinds(check_report(h)), std::set{AnomalyKind::kImpossible});
  }
  {
    History h{{txn(1, {W(1, 1)}), txn(1, {R(2, 0)})}};  // duplicate id
    EXPECT_EQ(kinds(check_report(h)), std::set{AnomalyKind::kImpossible});
  }
  {
    History h{{txn(1, {W(1, 0)})}};  // overwriting the initial version
    EXPECT_EQ(kinds(check_report(h)), std::set{AnomalyKind::kImpossible});
  }
}

TEST(Serializability, AbortedTxnsAreIgnoredUnlessRead) {
  // An aborted txn's anomalies (it read garbage, collided on a version) do not matter.
  History h{{txn(1, {R(1, 0), W(1, 1)}), txn(2, {R(1, 0), W(1, 1), R(9, 77)}, false),
             txn(3, {R(1, 1, 1), W(1, 2)})}};
  EXPECT_TRUE(check_report(h).serializable());
}

TEST(Serializability, WitnessCountIsBoundedButAllAreCounted) {
  History h;
  for (TxnId i = 0; i < 20; ++i) {  // 10 independent write skews
    const uint64_t k = i / 2 * 2;
    h.txns.push_back(txn(i + 1, {R(k, 0), R(k + 1, 0), W(k + i % 2, 1)}));
  }
  const CheckReport r = check_report(h, CheckOptions{.witnesses_per_kind_max = 3});
  EXPECT_EQ(r.counts[static_cast<size_t>(AnomalyKind::kG2)], 10u);
  EXPECT_EQ(r.anomalies.size(), 3u);
}

// ---- Random serial histories ----

struct SerialOptions {
  size_t txns = 2000;
  uint64_t keys = 50;
  double abort_fraction = 0.05;
  double read_only_fraction = 0.2;
  uint64_t seed = 1;
};

// Executes random transactions one after another over a map of key -> (version, writer), so the
// history is serializable by construction. Aborted txns read and "write" but change nothing.
History serial_history(const SerialOptions& o) {
  Rng rng(o.seed);
  struct Cell {
    uint64_t version = 0;
    TxnId writer = kInitialTxn;
  };
  std::vector<Cell> state(o.keys);
  History h;
  h.txns.reserve(o.txns);
  for (TxnId id = 1; id <= o.txns; ++id) {
    TxnRecord t{id, rng.uniform01() >= o.abort_fraction, {}};
    std::vector<uint64_t> keys;
    const size_t reads = rng.uniform(1, 4);
    while (keys.size() < std::min<uint64_t>(reads, o.keys)) {
      const uint64_t k = rng.uniform(0, o.keys - 1);
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    const bool read_only = rng.uniform01() < o.read_only_fraction;
    // The first `writes` keys are written: read-modify-write, plus an occasional blind write of
    // a key not read.
    size_t writes = read_only ? 0 : std::min<size_t>(keys.size(), rng.uniform(1, 2));
    for (const uint64_t k : keys) t.read(k, state[k].version, state[k].writer);
    if (!read_only && rng.uniform(0, 9) == 0) {
      const uint64_t k = rng.uniform(0, o.keys - 1);
      if (std::find(keys.begin(), keys.end(), k) == keys.end())
        keys.insert(keys.begin() + writes++, k);
    }
    for (size_t i = 0; i < writes; ++i) t.write(keys[i], state[keys[i]].version + 1);
    if (t.committed) {
      for (size_t i = 0; i < writes; ++i) state[keys[i]] = Cell{state[keys[i]].version + 1, id};
    }
    h.txns.push_back(std::move(t));
  }
  return h;
}

TEST(Serializability, RandomSerialHistoriesAreClean) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    History h = serial_history(SerialOptions{.txns = 3000, .keys = 5 + seed * 3, .seed = seed});
    // The recorded order is irrelevant to the checker.
    Rng rng(seed);
    for (size_t i = h.txns.size(); i > 1; --i)
      std::swap(h.txns[i - 1], h.txns[rng.uniform(0, i - 1)]);
    const CheckReport r = check_report(h);
    ASSERT_TRUE(r.serializable()) << "seed " << seed << "\n" << r.to_string();
    EXPECT_GT(r.edges, h.txns.size());
  }
}

// Plants one reordering: a committed txn that read-modify-wrote key k from version v now reads
// the version before v, as if its read had run before v's writer; its write stays after.
// That is a lost update: txn -rw-> writer of v -ww-> txn. Returns (txn, writer of v).
std::pair<TxnId, TxnId> plant_stale_read(History* h, Rng& rng) {
  for (;;) {
    TxnRecord& t = h->txns[rng.uniform(0, h->txns.size() - 1)];
    if (!t.committed) continue;
    for (Op& op : t.ops) {
      if (op.kind != OpKind::kRead || op.version < 1) continue;
      const bool writes_next = std::any_of(t.ops.begin(), t.ops.end(), [&](const Op& w) {
        return w.kind == OpKind::kWrite && w.key == op.key && w.version == op.version + 1;
      });
      if (!writes_next) continue;
      const TxnId overwritten_writer = op.writer;
      // Who wrote version - 1: find it among the committed writers.
      TxnId older = kInitialTxn;
      for (const TxnRecord& u : h->txns) {
        for (const Op& w : u.ops) {
          if (u.committed && w.kind == OpKind::kWrite && w.key == op.key &&
              w.version == op.version - 1) {
            older = u.id;
          }
        }
      }
      op.version -= 1;
      op.writer = older;
      return {t.id, overwritten_writer};
    }
  }
}

TEST(Serializability, PlantedReorderingIsCaught) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    History h = serial_history(SerialOptions{.txns = 2000, .keys = 30, .seed = seed});
    Rng rng(seed * 7);
    const auto [planted, overwritten_writer] = plant_stale_read(&h, rng);
    const CheckReport r = check_report(h);
    ASSERT_FALSE(r.serializable()) << "seed " << seed;
    const Anomaly* a = find(r, AnomalyKind::kGSingle);
    ASSERT_NE(a, nullptr) << r.to_string();
    EXPECT_EQ(a->cycle.size(), 2u) << a->explanation;
    EXPECT_TRUE(std::find(a->cycle.begin(), a->cycle.end(), planted) != a->cycle.end())
        << a->explanation;
    EXPECT_TRUE(std::find(a->cycle.begin(), a->cycle.end(), overwritten_writer) != a->cycle.end())
        << a->explanation;
  }
}

double check_seconds(const History& h, CheckReport* out) {
  const auto start = std::chrono::steady_clock::now();
  *out = check_report(h);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A large history is checked, and 100 planted stale reads in it are found. How long the check
// takes is printed here and measured by sim_bench (BM_CheckLargeHistory), not asserted.
TEST(Serializability, LargeHistoryIsCheckedAndPlantedStaleReadsFound) {
  History h = serial_history(SerialOptions{.txns = 100'000, .keys = 1000, .seed = 42});
  CheckReport r;
  const double clean_s = check_seconds(h, &r);
  EXPECT_TRUE(r.serializable()) << r.to_string();
  std::printf("check(): %zu txns, %zu edges, clean: %.3f s\n", h.txns.size(), r.edges, clean_s);
  Rng rng(3);
  for (int i = 0; i < 100; ++i) plant_stale_read(&h, rng);
  const double dirty_s = check_seconds(h, &r);
  EXPECT_FALSE(r.serializable());
  std::printf("check(): 100 planted stale reads: %.3f s\n%s", dirty_s, r.to_string().c_str());
}

TEST(Serializability, RecorderMergesPerThreadLogs) {
  constexpr size_t kThreads = 4;
  constexpr size_t kPerThread = 1000;
  HistoryRecorder recorder(kThreads);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&recorder, t] {
      HistoryRecorder::ThreadLog& log = recorder.thread_log(t);
      for (size_t i = 0; i < kPerThread; ++i) {
        TxnRecord rec{log.next_txn_id(), true, {}};
        rec.read(t, 0, kInitialTxn);
        log.append(std::move(rec));
      }
    });
  }
  for (auto& th : threads) th.join();
  const History h = recorder.merge();
  ASSERT_EQ(h.txns.size(), kThreads * kPerThread);
  std::set<TxnId> ids;
  for (const TxnRecord& t : h.txns) ids.insert(t.id);
  EXPECT_EQ(ids.size(), h.txns.size());
  EXPECT_EQ(ids.count(kInitialTxn), 0u);
  EXPECT_TRUE(check_report(h).serializable());
}

}  // namespace
}  // namespace shoal::check

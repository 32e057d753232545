#include "src/repl/decision_log.h"

#include <gtest/gtest.h>

#include <vector>

namespace shoal::repl {
namespace decision_log_test {

// One entry of records, record i with dist id ids[i] (0: none) at TID 100 + i and `deps`
// dependency entries (shards 10, 11, ...).
std::vector<std::byte> entry_of(const std::vector<uint64_t>& ids, uint32_t deps) {
  std::vector<std::byte> buf(1 << 16);
  LogBatchBuilder b;
  b.reset(buf, {0, 0, 1, 1}, {});
  const uint64_t key[1] = {1};
  const TxnWrite w{0, WriteOp::kRemove, key, {}};
  std::vector<txn::DepEntry> dep;
  for (uint32_t i = 0; i < deps; ++i) dep.push_back({10 + i, 1000 + i});
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(b.append(100 + i, dep, {&w, 1}, ids[i]), AppendResult::kOk);
  }
  const auto sealed = b.seal();
  buf.resize(sealed.size());
  return buf;
}

void note_all(DecisionLog* log, const std::vector<std::byte>& entry) {
  auto view = LogEntryView::parse(entry);
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  view->for_each_record([&](const RecordView& r) { log->note(r); });
}

TEST(DecisionLog, KeepsTheLatestDecisionsUpToItsCapacity) {
  DecisionLog log(3);
  note_all(&log, entry_of({7, 0, 8, 9, 10}, 1));  // 0: a record of no distributed transaction
  EXPECT_EQ(log.size(), 3u);
  uint64_t tid = 0;
  txn::DepVec v;
  EXPECT_FALSE(log.find(7, 2, &tid, &v));  // the oldest, forgotten
  ASSERT_TRUE(log.find(9, 2, &tid, &v));
  EXPECT_EQ(tid, 103u);
  EXPECT_EQ(v.get(2), 103u);
  EXPECT_EQ(v.get(10), 1000u);
  EXPECT_TRUE(log.find(8, 2, &tid, &v));
  EXPECT_TRUE(log.find(10, 2, &tid, &v));
  EXPECT_FALSE(log.find(0, 2, &tid, &v));
}

TEST(DecisionLog, ALongVectorKeepsItsFirstEntriesAndIsCounted) {
  DecisionLog log;
  note_all(&log, entry_of({5}, kDecisionDepsMax + 3));
  EXPECT_EQ(log.truncated(), 1u);
  uint64_t tid = 0;
  txn::DepVec v;
  ASSERT_TRUE(log.find(5, 0, &tid, &v));
  EXPECT_EQ(v.size(), kDecisionDepsMax + 1);  // the kept entries and the shard's own
  EXPECT_EQ(v.get(10 + kDecisionDepsMax - 1), 1000u + kDecisionDepsMax - 1);
}

}  // namespace decision_log_test
}  // namespace shoal::repl

#include "src/repl/replay.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "src/repl/log_format.h"
#include "src/txn/engine.h"

namespace shoal::repl {
namespace {

struct Row {
  uint64_t a = 0, b = 0;
};

// One stream's entry: each record writes (op, key, {tid, key}) for every key given.
struct EntryMaker {
  std::vector<uint64_t> words = std::vector<uint64_t>(1 << 16);
  LogBatchBuilder builder;
  std::span<const std::byte> make(uint64_t slot, uint64_t first_tid, WriteOp op,
                                  const std::vector<uint64_t>& keys, uint32_t stream = 0,
                                  uint64_t epoch = 1) {
    BatchLimits limits;
    limits.batch_txns_max = 1 << 20;  // one entry for all the keys
    builder.reset({reinterpret_cast<std::byte*>(words.data()), words.size() * 8},
                  LogEntryId{0, stream, epoch, slot}, limits);
    std::vector<Row> rows(keys.size());
    std::vector<TxnWrite> writes(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      rows[i] = Row{first_tid, keys[i]};
      writes[i] =
          TxnWrite{0, op, {&keys[i], 1}, {reinterpret_cast<const std::byte*>(&rows[i]), 16}};
    }
    // Two writes per record, so prefetches run across records too.
    for (size_t i = 0; i < keys.size(); i += 2) {
      const size_t n = std::min<size_t>(2, keys.size() - i);
      EXPECT_EQ(builder.append(first_tid + i, {}, std::span(writes).subspan(i, n)),
                AppendResult::kOk);
    }
    return builder.seal();
  }
};

// Installing puts on keys the store holds: the prefetch descents hand most installs their
// record (no second lookup), and every value ends as the log says.
TEST(ReplayApplier, PutsOnHeldKeysUseThePrefetchedRecords) {
  txn::Engine engine;
  txn::Table<1>* table = engine.create_table<1>("t");
  ReplayApplier applier(engine, 1);
  EntryMaker maker;
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 5000; ++k) keys.push_back(k * 7919 % 100003);
  const uint64_t tid0 = uint64_t{2} << 32;
  applier.on_chosen(0, maker.make(1, tid0, WriteOp::kInsert, keys));
  EXPECT_EQ(applier.stats().known_writes, 0u);  // nothing to find yet
  applier.on_chosen(0, maker.make(2, tid0 + 10000, WriteOp::kPut, keys));
  EXPECT_EQ(applier.stats().writes, 10000u);
  EXPECT_EQ(applier.stats().skipped_writes, 0u);
  // Every descent has 7 steps before its write; only the first few writes start late.
  EXPECT_GE(applier.stats().known_writes, 5000u - 10);
  for (size_t i = 0; i < keys.size(); ++i) {
    Row r;
    ASSERT_TRUE(table->peek(txn::Table<1>::KeyT{{keys[i]}}, &r, sizeof r).ok());
    EXPECT_EQ(r.a, tid0 + 10000) << i;
    EXPECT_EQ(r.b, keys[i]);
  }
}

// An epoch change (design section 5): stream 0 got further than stream 1 before the leader
// failed, so the old epoch's final watermark F is stream 1's last TID. Stream 0's records above
// F were never acknowledged (the watermark never covered them) and are discarded when the new
// epoch's start entries let the watermark pass them; the new epoch's records are installed.
// A checkpoint's cut carries the fence, so a restart from it discards the same records.
TEST(ReplayApplier, AnEpochStartDiscardsTheOldEpochAboveItsFinalWatermark) {
  txn::Engine engine;
  txn::Table<1>* table = engine.create_table<1>("t");
  ReplayApplier applier(engine, 2);
  EntryMaker m0, m1;
  const uint64_t t = uint64_t{2} << 32;
  applier.on_chosen(0, m0.make(1, t + 10, WriteOp::kInsert, {1, 2, 3, 4}, 0));  // TIDs 10, 12
  applier.on_chosen(1, m1.make(1, t + 20, WriteOp::kInsert, {5, 6}, 1));        // TID 20
  applier.on_chosen(0, m0.make(2, t + 30, WriteOp::kInsert, {7, 8}, 0));        // above F
  const uint64_t final_tid = t + 20;
  EXPECT_EQ(applier.applied_tid(), final_tid);
  // Epoch 2 starts on every stream with the fence, then commits above the floor.
  const uint64_t floor = t + 40;
  for (uint32_t s = 0; s < 2; ++s) {
    EntryMaker& m = s == 0 ? m0 : m1;
    BatchLimits limits;
    m.builder.reset({reinterpret_cast<std::byte*>(m.words.data()), m.words.size() * 8},
                    LogEntryId{0, s, 2, s == 0 ? 3u : 2u}, limits);
    const auto bytes = m.builder.seal(kLogFlagEpochStart, floor, final_tid);
    ASSERT_TRUE(LogEntryView::parse(bytes).ok());
    applier.on_chosen(s, bytes);
  }
  applier.on_chosen(0, m0.make(4, t + 50, WriteOp::kInsert, {9}, 0, 2));
  applier.on_chosen(1, m1.make(3, t + 60, WriteOp::kInsert, {10}, 1, 2));
  EXPECT_EQ(applier.stats().discarded_txns, 1u);  // the record of keys 7 and 8
  Row r;
  for (uint64_t k : {1, 2, 3, 4, 5, 6, 9}) {
    EXPECT_TRUE(table->peek(txn::Table<1>::KeyT{{k}}, &r, sizeof r).ok()) << k;
  }
  for (uint64_t k : {7, 8}) {
    EXPECT_FALSE(table->peek(txn::Table<1>::KeyT{{k}}, &r, sizeof r).ok()) << k;
  }
  ASSERT_EQ(applier.fences().size(), 1u);
  EXPECT_EQ(applier.fences()[0].epoch, 2u);
  EXPECT_EQ(applier.fences()[0].final_tid, final_tid);
  EXPECT_EQ(applier.cut().fences.size(), 1u);
}

// An epoch-start entry carries its fence in min_tid; records never ride on it, and formats
// before 4 do not know the flag.
TEST(ReplayApplier, EpochStartEntriesAreCheckedOnParse) {
  std::vector<uint64_t> words(64);
  LogBatchBuilder b;
  BatchLimits limits;
  b.reset({reinterpret_cast<std::byte*>(words.data()), words.size() * 8}, LogEntryId{0, 0, 3, 1},
          limits);
  const auto bytes = b.seal(kLogFlagEpochStart, 500, 400);
  auto view = LogEntryView::parse(bytes);
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  EXPECT_EQ(view->min_tid(), 400u);
  EXPECT_EQ(view->max_tid(), 500u);
  EXPECT_EQ(view->epoch(), 3u);
  EXPECT_EQ(log_flags_known(3) & kLogFlagEpochStart, 0);
  EXPECT_NE(log_flags_known(4) & kLogFlagEpochStart, 0);
}

}  // namespace
}  // namespace shoal::repl

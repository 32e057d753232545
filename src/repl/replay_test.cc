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
                                  const std::vector<uint64_t>& keys) {
    BatchLimits limits;
    limits.batch_txns_max = 1 << 20;  // one entry for all the keys
    builder.reset({reinterpret_cast<std::byte*>(words.data()), words.size() * 8},
                  LogEntryId{0, 0, 1, slot}, limits);
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

}  // namespace
}  // namespace shoal::repl

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
                                  uint64_t epoch = 1, uint64_t first_dist_txn_id = 0,
                                  uint64_t promise_cap = UINT64_MAX) {
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
      // With first_dist_txn_id, each record is a coordinator's half of a distributed
      // transaction (ids first_dist_txn_id + i), naming shard 1 in its vector.
      const txn::DepEntry dep{1, first_tid + i + 1};
      const uint64_t id = first_dist_txn_id == 0 ? 0 : first_dist_txn_id + i;
      EXPECT_EQ(builder.append(first_tid + i, {&dep, id == 0 ? 0u : 1u},
                               std::span(writes).subspan(i, n), id),
                AppendResult::kOk);
    }
    return builder.seal(0, 0, 0, promise_cap);
  }
};

// Every key holds the row EntryMaker wrote at `tid`.
void expect_rows(const txn::Table<1>& table, const std::vector<uint64_t>& keys, uint64_t tid) {
  for (size_t i = 0; i < keys.size(); ++i) {
    Row r;
    ASSERT_TRUE(table.peek(txn::Table<1>::KeyT{{keys[i]}}, &r, sizeof r).ok());
    EXPECT_EQ(r.a, tid) << i;
    EXPECT_EQ(r.b, keys[i]);
  }
}

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
  expect_rows(*table, keys, tid0 + 10000);
}

// Runs of neighbouring keys (an order's lines): after a run's first descent the others jump to
// its leaf (finger_jumps), inserts go into the leaf their descent found, and every key ends as
// the log says, across leaf splits.
TEST(ReplayApplier, NeighbouringWritesJumpToTheLeafOfAnEarlierOne) {
  txn::Engine engine;
  txn::Table<1>* table = engine.create_table<1>("t");
  ReplayApplier applier(engine, 1);
  EntryMaker maker;
  std::vector<uint64_t> keys;
  for (uint64_t run = 0; run < 500; ++run) {
    const uint64_t base = (run * 7919 % 1009) * 1000;
    for (uint64_t line = 0; line < 10; ++line) keys.push_back(base + line);
  }
  const uint64_t tid0 = uint64_t{2} << 32;
  applier.on_chosen(0, maker.make(1, tid0, WriteOp::kInsert, keys));
  const uint64_t jumps_inserting = applier.stats().finger_jumps;
  EXPECT_GE(jumps_inserting, 2500u);
  applier.on_chosen(0, maker.make(2, tid0 + 10000, WriteOp::kPut, keys));
  EXPECT_GE(applier.stats().finger_jumps - jumps_inserting, 2500u);
  EXPECT_EQ(applier.stats().skipped_writes, 0u);
  EXPECT_EQ(table->record_count(), keys.size());
  expect_rows(*table, keys, tid0 + 10000);
}

// An epoch change (docs/REPLICATION.md, "Failover"): stream 0 got further than stream 1 before the
// leader failed, so the old epoch's final watermark F is stream 1's last TID. Stream 0's records
// above F were never acknowledged (the watermark never covered them) and are discarded when the new
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

// A 2PC participant's install is logged at the TID it reserved, after the worker's higher
// TIDs on the same stream (participant.h F10): the entry holding those is flagged
// kLogFlagPromiseHeld, its max_tid below them. The install (at or below the watermark) waits
// behind them in log order, and applied_tid() stays below it meanwhile, so the store is
// exactly the records at or below applied_tid(); a checkpoint's cut and a restore say the
// same. A takeover installs it out of order (install_held), so F is the watermark.
TEST(ReplayApplier, AReservedInstallLoggedAfterHigherTidsHoldsTheAppliedTid) {
  for (const bool takeover : {false, true}) {
    SCOPED_TRACE(takeover ? "takeover" : "replay");
    txn::Engine engine;
    txn::Table<1>* table = engine.create_table<1>("t");
    ReplayApplier applier(engine, 2);
    EntryMaker m0, m1;
    const uint64_t t = uint64_t{2} << 32;
    const auto held = m0.make(1, t + 100, WriteOp::kInsert, {1}, 0, 1, 0, /*promise_cap=*/t + 49);
    ASSERT_TRUE(LogEntryView::parse(held).ok());
    ASSERT_NE(load_u16(held.data() + 6) & kLogFlagPromiseHeld, 0);
    applier.on_chosen(0, held);
    applier.on_chosen(1, m1.make(1, t + 60, WriteOp::kInsert, {2}, 1));
    applier.on_chosen(0, m0.make(2, t + 50, WriteOp::kInsert, {3}, 0));  // the install
    EXPECT_EQ(applier.watermark().shard(), t + 50);
    EXPECT_EQ(applier.applied_tid(), t + 49);
    Row r;
    EXPECT_FALSE(table->peek(txn::Table<1>::KeyT{{3}}, &r, sizeof r).ok());
    EXPECT_EQ(applier.logged_tid(0), t + 100);  // a new epoch's floor goes above the record
    const ReplayCut cut = applier.cut();
    EXPECT_EQ(cut.applied_tid, t + 49);
    EXPECT_EQ(cut.streams[0].next_slot, 1u);
    if (takeover) {
      applier.install_held();
      EXPECT_EQ(applier.applied_tid(), t + 50);
      EXPECT_TRUE(table->peek(txn::Table<1>::KeyT{{3}}, &r, sizeof r).ok());
      std::vector<uint64_t> left;
      applier.for_each_queued_record([&](uint64_t tid) { left.push_back(tid); });
      EXPECT_EQ(left, (std::vector<uint64_t>{t + 100, t + 60}));
      continue;
    }
    // Floors past everything: all of it installs, in log order.
    for (uint32_t s = 0; s < 2; ++s) {
      EntryMaker& m = s == 0 ? m0 : m1;
      m.builder.reset({reinterpret_cast<std::byte*>(m.words.data()), m.words.size() * 8},
                      LogEntryId{0, s, 1, s == 0 ? 3u : 2u}, BatchLimits{});
      applier.on_chosen(s, m.builder.seal(0, t + 200));
    }
    EXPECT_EQ(applier.applied_tid(), t + 200);
    for (uint64_t k : {1, 2, 3}) {
      EXPECT_TRUE(table->peek(txn::Table<1>::KeyT{{k}}, &r, sizeof r).ok()) << k;
    }
    // A restore from the earlier cut claims only the cut's TID until every stream delivered.
    txn::Engine engine2;
    engine2.create_table<1>("t");
    ReplayApplier restored(engine2, 2);
    restored.restore(cut);
    EXPECT_EQ(restored.applied_tid(), t + 49);
  }
}

// The decisions a new leader answers the other shards from (participant.h F11): a
// coordinator's halves it installed, not the ones the epoch fence discarded.
TEST(ReplayApplier, DecisionsAreTheInstalledRecordsOfDistributedTransactions) {
  txn::Engine engine;
  engine.create_table<1>("t");
  ReplayApplier applier(engine, 2);
  EntryMaker m0, m1;
  const uint64_t t = uint64_t{2} << 32;
  applier.on_chosen(0, m0.make(1, t + 10, WriteOp::kInsert, {1, 2, 3, 4}, 0, 1, 100));  // 10, 12
  applier.on_chosen(1, m1.make(1, t + 20, WriteOp::kInsert, {5, 6}, 1));                // 20
  applier.on_chosen(0, m0.make(2, t + 30, WriteOp::kInsert, {7, 8}, 0, 1, 200));        // above F
  EXPECT_EQ(applier.applied_tid(), t + 20);
  for (uint32_t s = 0; s < 2; ++s) {
    EntryMaker& m = s == 0 ? m0 : m1;
    m.builder.reset({reinterpret_cast<std::byte*>(m.words.data()), m.words.size() * 8},
                    LogEntryId{0, s, 2, s == 0 ? 3u : 2u}, BatchLimits{});
    applier.on_chosen(s, m.builder.seal(kLogFlagEpochStart, t + 40, t + 20));
  }
  EXPECT_EQ(applier.stats().discarded_txns, 1u);
  const DecisionLog& d = *applier.decisions();
  EXPECT_EQ(d.size(), 2u);
  uint64_t tid = 0;
  txn::DepVec vector;
  ASSERT_TRUE(d.find(102, 0, &tid, &vector));
  EXPECT_EQ(tid, t + 12);
  EXPECT_EQ(vector.get(0), t + 12);  // the shard's own entry: where it committed
  EXPECT_EQ(vector.get(1), t + 13);  // as logged
  EXPECT_TRUE(d.find(100, 0, &tid, &vector));
  EXPECT_FALSE(d.find(200, 0, &tid, &vector));  // discarded with the failed epoch's tail
  EXPECT_FALSE(d.find(101, 0, &tid, &vector));  // never logged
}

// A hole a new leader's phase 1 filled with a no-op (the failed leader's entry there is lost)
// holds its stream's watermark before the hole: the old entries recovered after it do not
// prove that every record at or below their max_tid is chosen (the lost entry's TID 15 is
// below stream 0's 30). Without the hold, stream 1's records 20 and 25 would be installed
// here while a replica that saw the epoch start first discards them (found by
// sim/epoch_change_sim_test.cc). A checkpoint cut taken meanwhile restarts at the no-op.
TEST(ReplayApplier, AHoleFilledByANoopHoldsItsStreamUntilTheEpochStarts) {
  txn::Engine engine;
  txn::Table<1>* table = engine.create_table<1>("t");
  ReplayApplier applier(engine, 2);
  EntryMaker m0, m1;
  const uint64_t t = uint64_t{2} << 32;
  applier.on_chosen(0, m0.make(1, t + 10, WriteOp::kInsert, {1}, 0));
  const auto seal_empty = [](EntryMaker& m, uint32_t stream, uint64_t epoch, uint64_t slot,
                             uint16_t flags, uint64_t floor, uint64_t final_tid) {
    m.builder.reset({reinterpret_cast<std::byte*>(m.words.data()), m.words.size() * 8},
                    LogEntryId{0, stream, epoch, slot}, BatchLimits{});
    return m.builder.seal(flags, floor, final_tid);
  };
  applier.on_chosen(0, seal_empty(m0, 0, 2, 2, kLogFlagNoop, 0, 0));   // TID 15 lost
  applier.on_chosen(0, m0.make(3, t + 30, WriteOp::kInsert, {3}, 0));  // recovered
  applier.on_chosen(1, m1.make(1, t + 20, WriteOp::kInsert, {2}, 1));
  applier.on_chosen(1, m1.make(2, t + 25, WriteOp::kInsert, {4}, 1));
  EXPECT_EQ(applier.applied_tid(), t + 10);  // not 25: stream 0 is held at its hole
  EXPECT_EQ(applier.logged_tid(0), t + 30);
  const ReplayCut cut = applier.cut();
  EXPECT_EQ(cut.streams[0].next_slot, 2u);  // a restart delivers the no-op again
  EXPECT_EQ(cut.streams[0].stream_tid, t + 10);
  // The takeover's F is that watermark; the epoch starts discard everything above it.
  const uint64_t final_tid = applier.applied_tid(), floor = t + 40;
  applier.on_chosen(0, seal_empty(m0, 0, 2, 4, kLogFlagEpochStart, floor, final_tid));
  applier.on_chosen(1, seal_empty(m1, 1, 2, 3, kLogFlagEpochStart, floor, final_tid));
  EXPECT_EQ(applier.applied_tid(), floor);
  EXPECT_EQ(applier.stats().discarded_txns, 3u);
  Row r;
  EXPECT_TRUE(table->peek(txn::Table<1>::KeyT{{1}}, &r, sizeof r).ok());
  for (uint64_t k : {2, 3, 4}) {
    EXPECT_FALSE(table->peek(txn::Table<1>::KeyT{{k}}, &r, sizeof r).ok()) << k;
  }
}

// Epoch 2's leader failed after its epoch start was chosen on stream 0 only; epoch 3 started
// on both streams. A replica catching up may get stream 1's epoch-3 start before stream 0's
// epoch-2 start: both fences are kept, in epoch order (this asserted before).
TEST(ReplayApplier, EpochStartsMayArriveOutOfEpochOrderAcrossStreams) {
  txn::Engine engine;
  engine.create_table<1>("t");
  ReplayApplier applier(engine, 2);
  EntryMaker m0, m1;
  const uint64_t t = uint64_t{2} << 32;
  applier.on_chosen(0, m0.make(1, t + 10, WriteOp::kInsert, {1}, 0));
  applier.on_chosen(1, m1.make(1, t + 20, WriteOp::kInsert, {2}, 1));
  const auto seal_start = [](EntryMaker& m, uint32_t stream, uint64_t epoch, uint64_t slot,
                             uint64_t floor, uint64_t final_tid) {
    m.builder.reset({reinterpret_cast<std::byte*>(m.words.data()), m.words.size() * 8},
                    LogEntryId{0, stream, epoch, slot}, BatchLimits{});
    return m.builder.seal(kLogFlagEpochStart, floor, final_tid);
  };
  applier.on_chosen(1, seal_start(m1, 1, 3, 2, t + 30, t + 20));
  applier.on_chosen(0, seal_start(m0, 0, 2, 2, t + 20, t + 10));
  applier.on_chosen(0, seal_start(m0, 0, 3, 3, t + 30, t + 20));
  ASSERT_EQ(applier.fences().size(), 2u);
  EXPECT_EQ(applier.fences()[0].epoch, 2u);
  EXPECT_EQ(applier.fences()[1].epoch, 3u);
  EXPECT_EQ(applier.applied_tid(), t + 30);
}

// EpochChangeSim seed 14809 with learns held back (issue 14), as one replica saw the log.
// Epoch 2's leader computed F2 = TID 20 (stream 1 ended there), sealed its epoch start,
// chosen on stream 0 (slot 3) only, and crashed; epoch 3's leader revived at stream 1's slot 2,
// where the lost start was, an old entry (TID 40) only the first leader held. A replica whose
// learns for stream 0 lag gets stream 1's slot 2 before stream 0's slot 3: from the log
// alone the watermark passes TID 30 (above F2) with no fence known and installs it. Known
// from the configuration manager first (learn_fence), the fence discards both.
TEST(ReplayApplier, APublishedFenceDiscardsWhatAStartMissingOnAStreamWouldLetThrough) {
  const uint64_t t = uint64_t{1} << 32;
  const uint64_t f2 = t + 20;
  const auto seal_start = [](EntryMaker& m, uint32_t stream, uint64_t epoch, uint64_t slot,
                             uint64_t floor, uint64_t final_tid) {
    m.builder.reset({reinterpret_cast<std::byte*>(m.words.data()), m.words.size() * 8},
                    LogEntryId{0, stream, epoch, slot}, BatchLimits{});
    return m.builder.seal(kLogFlagEpochStart, floor, final_tid);
  };
  for (const bool published : {false, true}) {
    SCOPED_TRACE(published ? "fence published" : "fences from the log only");
    txn::Engine engine;
    txn::Table<1>* table = engine.create_table<1>("t");
    ReplayApplier applier(engine, 2);
    if (published) applier.learn_fence({2, f2});
    EntryMaker m0, m1;
    applier.on_chosen(0, m0.make(1, t + 10, WriteOp::kInsert, {1}, 0));
    applier.on_chosen(0, m0.make(2, t + 30, WriteOp::kInsert, {3}, 0));  // above F2
    applier.on_chosen(1, m1.make(1, t + 20, WriteOp::kInsert, {2}, 1));
    applier.on_chosen(1, m1.make(2, t + 40, WriteOp::kInsert, {4}, 1));  // revived, above F2
    Row r;
    EXPECT_EQ(table->peek(txn::Table<1>::KeyT{{3}}, &r, sizeof r).ok(), !published);
    // Then stream 0's epoch-2 start (the same F2: no assert) and epoch 3's start on both.
    applier.on_chosen(0, seal_start(m0, 0, 2, 3, t + 50, f2));
    applier.on_chosen(0, seal_start(m0, 0, 3, 4, t + 60, t + 30));
    applier.on_chosen(1, seal_start(m1, 1, 3, 3, t + 60, t + 30));
    EXPECT_EQ(applier.applied_tid(), t + 60);
    for (uint64_t k : {1, 2}) EXPECT_TRUE(table->peek(txn::Table<1>::KeyT{{k}}, &r, sizeof r).ok());
    if (published) {
      for (uint64_t k : {3, 4}) {
        EXPECT_FALSE(table->peek(txn::Table<1>::KeyT{{k}}, &r, sizeof r).ok()) << k;
      }
      EXPECT_EQ(applier.stats().discarded_txns, 2u);
    }
    ASSERT_EQ(applier.fences().size(), 2u);
    EXPECT_EQ(applier.fences()[0].final_tid, f2);
  }
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

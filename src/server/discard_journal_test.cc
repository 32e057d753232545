// DiscardJournal and discard_lost: shard 1 survives a failover of shard 0 that lost shard 0's
// TIDs in (F, floor]. Shard 1's participant installed halves of cross-shard transactions, some
// naming lost TIDs, and a local transaction read one of those; after the discard, shard 1 holds
// exactly the transactions that name no lost TID. Skipping the discard (the planted bug) leaves
// a state the same check rejects.
#include "src/server/discard_journal.h"

#include <gtest/gtest.h>

#include <map>

#include "src/dist/participant.h"
#include "src/index/key.h"
#include "src/repl/log_format.h"
#include "src/repl/takeover.h"

namespace shoal::server {
namespace {

constexpr uint32_t kShard = 1;
constexpr uint64_t kFinal = (uint64_t{1} << 32) | 100;  // shard 0's final watermark F
constexpr uint64_t kFloor = (uint64_t{1} << 32) | 200;  // its old TIDs' floor
constexpr uint64_t kCoveredUpTo = kFinal - 50;          // shard 0's entry in our watermark

struct Survivor {
  Survivor() : engine(options()), journal(kShard), participant(engine, kShard, 16) {
    table = engine.create_table<1>("t");
    for (uint64_t k = 1; k <= 4; ++k) EXPECT_TRUE(table->load(key1(k), uint64_t{k}).ok());
    participant.set_commit_hook(&Survivor::hook, this);
    local = engine.make_worker();
    local->set_commit_hook(&Survivor::hook, this);
    compensator = engine.make_worker();
  }
  static txn::EngineOptions options() {
    txn::EngineOptions o;
    o.shard_id = kShard;
    o.epoch_ticker = false;
    o.track_dependencies = true;
    return o;
  }
  static Status hook(void* self, const txn::Txn& txn) {
    auto* s = static_cast<Survivor*>(self);
    const dist::TxnId logging = s->participant.logging_id();
    const bool ours = logging != 0 && (logging >> 48) == kShard;
    s->journal.record(txn, ours, [](uint32_t shard, uint64_t ts) {
      return shard == kShard || ts <= kCoveredUpTo;
    });
    return Status::Ok();
  }
  // A remote coordinator's transaction: its writes here, installed with shard 0's entry
  // `remote_ts` in its vector.
  // Returns the TID it installed at (0 on failure).
  uint64_t cross(dist::TxnId id, std::vector<std::pair<uint64_t, uint64_t>> puts,
                 uint64_t insert_key, uint64_t remote_ts, uint64_t remove_key = 0) {
    std::vector<dist::StagedWrite> writes;
    std::vector<uint64_t> values;
    values.reserve(puts.size() + 1);
    for (auto [k, v] : puts) {
      values.push_back(v);
      dist::StagedWrite w;
      w.key_word_count = 1;
      w.key[0] = k;
      w.value = &values.back();
      w.size_bytes = sizeof(uint64_t);
      writes.push_back(w);
    }
    if (insert_key != 0) {
      values.push_back(insert_key * 10);
      dist::StagedWrite w;
      w.key_word_count = 1;
      w.key[0] = insert_key;
      w.kind = txn::WriteKind::kInsert;
      w.value = &values.back();
      w.size_bytes = sizeof(uint64_t);
      writes.push_back(w);
    }
    if (remove_key != 0) {
      dist::StagedWrite w;
      w.key_word_count = 1;
      w.key[0] = remove_key;
      w.kind = txn::WriteKind::kRemove;
      writes.push_back(w);
    }
    uint64_t proposed = 0, installed = 0;
    txn::DepVec deps, vector;
    EXPECT_TRUE(participant.lock(id, 1, writes.data(), writes.size(), &proposed).ok());
    EXPECT_TRUE(participant.validate(id, 1, &deps).ok());
    vector.raise(kShard, proposed);
    vector.raise(0, remote_ts);
    EXPECT_TRUE(participant.install(id, 1, proposed, vector, &installed).ok());
    return installed;
  }
  // A local transaction: reads `from`, writes its value + 1000 to `to`.
  void local_copy(uint64_t from, uint64_t to) {
    struct Args {
      txn::Table<1>* table;
      uint64_t from, to;
    } args{table, from, to};
    Status s = local->run(
        [](txn::Txn& t, const void* a, void*) -> Status {
          const auto* in = static_cast<const Args*>(a);
          uint64_t v = 0;
          SHOAL_TRY(t.get(*in->table, key1(in->from), &v));
          return t.put(*in->table, key1(in->to), v + 1000);
        },
        &args);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  std::map<uint64_t, uint64_t> state() {
    std::map<uint64_t, uint64_t> out;
    table->for_each(key1(0), Key1::max(), [&](const Key1& k, const void* v, uint32_t) {
      out[k.w[0]] = *static_cast<const uint64_t*>(v);
      return true;
    });
    return out;
  }

  txn::Engine engine;
  DiscardJournal journal;
  dist::Participant participant;
  txn::Table<1>* table = nullptr;
  txn::Worker* local = nullptr;
  txn::Worker* compensator = nullptr;
};

// The run: A kept (shard 0's TID at or below F), B lost (above F: it put key 2 and inserted
// key 50), C local and reading B's key 2 (so lost too), D a blind write of key 4 on top of
// nothing lost, E lost again on key 2 (over B). Returns the state after the discard (or
// without it: the planted bug).
std::map<uint64_t, uint64_t> survive_failover(bool skip_discard, DiscardResult* result) {
  Survivor s;
  s.cross(1, {{1, 101}}, 0, kFinal - 5);   // A: kept
  s.cross(2, {{2, 202}}, 50, kFinal + 3);  // B: lost
  s.local_copy(2, 3);                      // C: read B: lost
  s.cross(3, {{4, 404}}, 0, kFinal - 1);   // D: kept
  s.cross(4, {{2, 252}}, 0, kFinal + 4);   // E: lost
  EXPECT_EQ(s.journal.size(), 6u);         // A, B (2 writes), C, D, E
  if (!skip_discard) {
    DiscardJournal* journals[] = {&s.journal};
    auto r = discard_lost(journals, s.engine, *s.compensator, LostRange{0, kFinal, kFloor});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) *result = *r;
  }
  return s.state();
}

// What shard 1 must hold: the load, with only the kept transactions A and D.
const std::map<uint64_t, uint64_t> kSurvivingState = {{1, 101}, {2, 2}, {3, 3}, {4, 404}};

TEST(DiscardJournal, ALostTransactionIsWhollyOutAndTheRestStays) {
  DiscardResult r;
  EXPECT_EQ(survive_failover(/*skip_discard=*/false, &r), kSurvivingState);
  EXPECT_EQ(r.lost_writes, 4u);  // B's two, C's, E's
  EXPECT_EQ(r.restored, 2u);     // key 2 (to the load, under E and B), key 3
  EXPECT_EQ(r.removed, 1u);      // key 50
  EXPECT_EQ(r.not_discarded, 0u);
  EXPECT_EQ(r.unknown, 0u);
}

// The planted bug: without the discard the survivor keeps B, C and E.
TEST(DiscardJournal, SkippingTheDiscardIsCaught) {
  DiscardResult r;
  EXPECT_NE(survive_failover(/*skip_discard=*/true, &r), kSurvivingState);
}

// C6: our own shard installed first, naming shard 0's proposal (at or below F); shard 0
// installed above it (F10), past F, and lost it. The final vector decides. And a transaction
// whose install at shard 0 went unanswered (in doubt) is presumed lost once shard 0 fails over.
TEST(DiscardJournal, OwnFirstInstallsAreJudgedByTheirFinalVectorAndDoubtByTheFailover) {
  Survivor s;
  // Ours (coordinated here), naming shard 0's proposals, which its watermark already passed:
  // journaled anyway, pending until the outcome.
  const uint64_t c6 = s.cross(dist::make_txn_id(kShard, 0, 1), {{1, 101}}, 0, kCoveredUpTo - 2);
  txn::DepVec final_vector;
  final_vector.raise(0, kFinal + 7);
  s.journal.update(c6, final_vector, {}, dist::make_txn_id(kShard, 0, 1));
  const uint64_t doubtful =
      s.cross(dist::make_txn_id(kShard, 0, 2), {{2, 202}}, 0, kCoveredUpTo - 3);
  txn::DepVec proposal;
  proposal.raise(0, kCoveredUpTo - 3);
  const uint32_t unanswered[] = {0};
  s.journal.update(doubtful, proposal, unanswered, dist::make_txn_id(kShard, 0, 2));
  s.cross(3, {{3, 303}}, 0, kFinal - 4);  // another shard's, at or below F: kept
  EXPECT_EQ(s.journal.size(), 3u);
  DiscardJournal* journals[] = {&s.journal};
  auto r = discard_lost(journals, s.engine, *s.compensator, LostRange{0, kFinal, kFloor});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->restored, 2u);
  const std::map<uint64_t, uint64_t> expected = {{1, 1}, {2, 2}, {3, 303}, {4, 4}};
  EXPECT_EQ(s.state(), expected);
  // Settled once judged: the in-doubt entry no longer blocks trimming, and its coordinator
  // learns it was lost.
  s.journal.settle(0, {});
  EXPECT_EQ(s.journal.outcome(dist::make_txn_id(kShard, 0, 2), 0).verdict,
            DiscardJournal::Verdict::kLost);
  EXPECT_EQ(s.journal.outcome(dist::make_txn_id(kShard, 0, 1), 0).verdict,
            DiscardJournal::Verdict::kPending);  // never in doubt
  s.journal.trim([](uint32_t, uint64_t ts) { return ts <= kFinal + 7; });
  EXPECT_EQ(s.journal.size(), 0u);
}

// With reservations (participant.h F10) a worker's journal is not in TID order: A locked
// first, so its install lands below B's, but after it. The update of B, ours and in doubt at
// shard 0, must still reach B's entry behind A's lower one.
TEST(DiscardJournal, AnUpdateReachesItsEntryBehindALowerInstall) {
  Survivor s;
  uint64_t floor = kCoveredUpTo - 100;
  s.participant.set_tid_floor(&floor);
  const dist::TxnId a = 7, b = dist::make_txn_id(kShard, 0, 9);
  uint64_t value_a = 111, value_b = 222;
  dist::StagedWrite wa, wb;
  wa.key_word_count = wb.key_word_count = 1;
  wa.key[0] = 1;
  wb.key[0] = 2;
  wa.value = &value_a;
  wb.value = &value_b;
  wa.size_bytes = wb.size_bytes = sizeof(uint64_t);
  uint64_t pa = 0, pb = 0, at_a = 0, at_b = 0;
  txn::DepVec deps, va, vb;
  ASSERT_TRUE(s.participant.lock(a, 1, &wa, 1, &pa).ok());
  ASSERT_TRUE(s.participant.lock(b, 1, &wb, 1, &pb).ok());
  ASSERT_LT(pa, pb);
  ASSERT_TRUE(s.participant.validate(a, 1, &deps).ok());
  ASSERT_TRUE(s.participant.validate(b, 1, &deps).ok());
  vb.raise(kShard, pb);
  vb.raise(0, kFinal - 20);
  ASSERT_TRUE(s.participant.install(b, 1, pb, vb, &at_b).ok());
  va.raise(kShard, pa);
  va.raise(0, kFinal + 20);
  ASSERT_TRUE(s.participant.install(a, 1, pa, va, &at_a).ok());
  ASSERT_EQ(at_b, pb);
  ASSERT_EQ(at_a, pa);  // below B's, journaled after it
  const uint32_t unanswered[] = {0};
  s.journal.update(at_b, vb, unanswered, b);
  std::vector<uint64_t> ids;
  s.journal.in_doubt_ids(0, &ids);
  EXPECT_EQ(ids, std::vector<uint64_t>{b});
}

// A lost transaction with a write that cannot be undone (here: under a blind write that
// stays) is kept whole: its other write is not undone either.
TEST(DiscardJournal, ALostTransactionIsUndoneWhollyOrNotAtAll) {
  Survivor s;
  s.cross(1, {{1, 111}, {2, 222}}, 0, kFinal + 1);  // lost
  s.cross(2, {{2, 999}}, 0, kFinal - 1);            // kept, blindly over key 2
  DiscardJournal* journals[] = {&s.journal};
  auto r = discard_lost(journals, s.engine, *s.compensator, LostRange{0, kFinal, kFloor});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->kept_txns, 1u);
  EXPECT_EQ(r->blocked_under, 1u);
  EXPECT_EQ(r->not_discarded, 2u);
  EXPECT_EQ(r->restored, 0u);
  const std::map<uint64_t, uint64_t> expected = {{1, 111}, {2, 999}, {3, 3}, {4, 4}};
  EXPECT_EQ(s.state(), expected);
}

// A lost remove is undone by putting its row back (TPC-C's Delivery removes NEW-ORDER rows),
// also under a lost put of the same row and under a lost insert of the removed key; a kept
// remove stays.
TEST(DiscardJournal, LostRemovesPutTheirRowBack) {
  Survivor s;
  s.cross(1, {{1, 111}}, 0, kFinal + 1);  // lost put of key 1 ...
  s.cross(2, {}, 0, kFinal + 2, 1);       // ... then a lost remove of it
  s.cross(3, {}, 0, kFinal + 3, 2);       // lost remove of key 2 ...
  s.cross(4, {}, 2, kFinal + 4);          // ... and a lost insert of key 2 again
  s.cross(5, {}, 0, kFinal - 1, 4);       // kept remove of key 4
  EXPECT_EQ(s.state(), (std::map<uint64_t, uint64_t>{{2, 20}, {3, 3}}));
  DiscardJournal* journals[] = {&s.journal};
  auto r = discard_lost(journals, s.engine, *s.compensator, LostRange{0, kFinal, kFloor});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->kept_txns, 0u);
  EXPECT_EQ(r->blocked_removes, 0u);
  EXPECT_EQ(r->restored, 2u);
  const std::map<uint64_t, uint64_t> expected = {{1, 1}, {2, 2}, {3, 3}};
  EXPECT_EQ(s.state(), expected);
}

// An in-doubt transaction whose half the failed shard's new leader holds (resolve) stays, with
// a committed verdict; one it does not hold is undone and judged lost; one kept whole (a write
// under a version that stays) is judged kept.
TEST(DiscardJournal, InDoubtTransactionsAreJudgedByWhatTheNewLeaderHolds) {
  Survivor s;
  const uint32_t unanswered[] = {0};
  const dist::TxnId held = dist::make_txn_id(kShard, 0, 1), gone = dist::make_txn_id(kShard, 0, 2),
                    whole = dist::make_txn_id(kShard, 0, 3);
  txn::DepVec proposal;
  proposal.raise(0, kFinal - 10);  // at or below F: only the question decides
  s.journal.update(s.cross(held, {{1, 101}}, 0, kFinal - 10), proposal, unanswered, held);
  s.journal.update(s.cross(gone, {{2, 202}}, 0, kFinal - 10), proposal, unanswered, gone);
  s.journal.update(s.cross(whole, {{3, 303}}, 0, kFinal - 10), proposal, unanswered, whole);
  s.cross(4, {{3, 333}}, 0, kFinal - 2);  // kept, blindly over key 3
  std::vector<uint64_t> ids;
  s.journal.in_doubt_ids(0, &ids);
  EXPECT_EQ(ids, (std::vector<uint64_t>{held, gone, whole}));
  s.journal.resolve(held, 0, kFinal - 7);
  DiscardJournal* journals[] = {&s.journal};
  auto r = discard_lost(journals, s.engine, *s.compensator, LostRange{0, kFinal, kFloor});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->kept.size(), 1u);
  const uint64_t kept_tid = r->kept[0].second;
  s.journal.settle(0, {&kept_tid, 1});
  const std::map<uint64_t, uint64_t> expected = {{1, 101}, {2, 2}, {3, 333}, {4, 4}};
  EXPECT_EQ(s.state(), expected);
  const auto o = s.journal.outcome(held, 0);
  EXPECT_EQ(o.verdict, DiscardJournal::Verdict::kCommitted);
  EXPECT_EQ(o.tid, kFinal - 7);
  EXPECT_EQ(s.journal.outcome(gone, 0).verdict, DiscardJournal::Verdict::kLost);
  EXPECT_EQ(s.journal.outcome(whole, 0).verdict, DiscardJournal::Verdict::kKept);
  ids.clear();
  s.journal.in_doubt_ids(0, &ids);
  EXPECT_TRUE(ids.empty());
}

// Issue 14 (bank, one leader kill, money off): shard 0's old leader coordinated a transfer
// that read a lost version here and left its half prepared, holding the record's lock, when it
// died. The discard cannot read the record under the lock, so it kept the lost transaction
// whole while its other half went with shard 0. Ending first the contexts whose decision shard
// 0's new leader does not hold (ShardServer::release_undecided, F11's answer given before the
// discard) frees the record, and the lost transaction is undone wholly.
TEST(DiscardJournal, ARecordLockedByAnUndecidedHalfIsJudgedOnceTheHalfEnds) {
  for (const bool release : {false, true}) {
    SCOPED_TRACE(release ? "undecided halves ended first" : "the discard meets the lock");
    Survivor s;
    s.cross(1, {{1, 111}, {2, 222}}, 0, kFinal + 1);  // lost
    const dist::TxnId reader = dist::make_txn_id(0, 0, 9), decided = dist::make_txn_id(0, 0, 10);
    const uint64_t k1 = 1, k4 = 4;
    uint64_t v = 0, proposed = 0;
    uint32_t size = 0;
    txn::DepVec deps;
    ASSERT_TRUE(s.participant.read(reader, 1, 0, &k1, 1, &v, sizeof v, &size).ok());
    EXPECT_EQ(v, 111u);  // the lost version
    v += 1;
    dist::StagedWrite w{.key_word_count = 1, .key = {k1}, .value = &v, .size_bytes = sizeof v};
    ASSERT_TRUE(s.participant.lock(reader, 1, &w, 1, &proposed).ok());
    ASSERT_TRUE(s.participant.validate(reader, 1, &deps).ok());  // prepared: holds key 1
    // A prepared half the new leader's log holds (decided at or below F) stays prepared.
    uint64_t v4 = 440;
    dist::StagedWrite w4{.key_word_count = 1, .key = {k4}, .value = &v4, .size_bytes = sizeof v4};
    ASSERT_TRUE(s.participant.lock(decided, 1, &w4, 1, &proposed).ok());
    ASSERT_TRUE(s.participant.validate(decided, 1, &deps).ok());
    if (release) {
      const dist::TxnId committed[] = {decided};
      EXPECT_EQ(s.participant.abort_undecided(0, committed), 1u);
      std::vector<dist::TxnId> left;
      s.participant.prepared_coordinated_by(0, &left);
      EXPECT_EQ(left, std::vector<dist::TxnId>{decided});
    }
    DiscardJournal* journals[] = {&s.journal};
    auto r = discard_lost(journals, s.engine, *s.compensator, LostRange{0, kFinal, kFloor});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    s.participant.abort(decided);
    if (!release) {
      EXPECT_EQ(r->kept_txns, 1u);
      EXPECT_EQ(r->blocked_locked, 1u);
      EXPECT_EQ(r->blocked_under, 0u);
      EXPECT_EQ(r->restored, 0u);
      s.participant.abort(reader);
      EXPECT_EQ(s.state(), (std::map<uint64_t, uint64_t>{{1, 111}, {2, 222}, {3, 3}, {4, 4}}));
    } else {
      EXPECT_EQ(r->kept_txns, 0u);
      EXPECT_EQ(r->restored, 2u);
      EXPECT_EQ(s.state(), (std::map<uint64_t, uint64_t>{{1, 1}, {2, 2}, {3, 3}, {4, 4}}));
    }
  }
}

// Issue 14 item 6 (a region kill: two shards fail over at once): shard 0's new leader, promoted
// in epoch 3, already coordinates transactions here when this shard follows its failover. Its
// prepared halves are not the failed leader's: ending them would leave its own halves
// committed alone (an install refused here: "install of transaction ..., aborted").
TEST(DiscardJournal, TheNewLeadersOwnHalvesSurviveTheRelease) {
  Survivor s;
  const dist::TxnId old_half = dist::make_txn_id(0, 0, (uint64_t{1} << 32) + 7);
  const dist::TxnId new_half = dist::make_txn_id(0, 0, (uint64_t{3} << 32) + 1);
  EXPECT_EQ(dist::txn_leader_epoch_byte(new_half), 3u);
  uint64_t proposed = 0;
  txn::DepVec deps;
  for (const auto& [id, key] :
       {std::pair{old_half, uint64_t{1}}, std::pair{new_half, uint64_t{2}}}) {
    uint64_t v = 10 * key;
    dist::StagedWrite w{.key_word_count = 1, .key = {key}, .value = &v, .size_bytes = sizeof v};
    ASSERT_TRUE(s.participant.lock(id, 1, &w, 1, &proposed).ok());
    ASSERT_TRUE(s.participant.validate(id, 1, &deps).ok());
  }
  std::vector<dist::TxnId> asked;
  s.participant.prepared_coordinated_by(0, &asked, 3);
  EXPECT_EQ(asked, std::vector<dist::TxnId>{old_half});
  EXPECT_EQ(s.participant.abort_undecided(0, {}, 3), 1u);
  s.participant.prepared_coordinated_by(0, &asked);
  EXPECT_EQ(asked, std::vector<dist::TxnId>{new_half});  // still prepared, installable
  EXPECT_EQ(s.participant.abort_coordinated_by(0, false, 3), 0u);
  EXPECT_EQ(s.participant.abort_coordinated_by(0, false), 1u);  // no epoch spared: all
}

// Issue 14 (bank, one leader kill: acknowledged transactions undone): a read-only audit this
// shard's worker coordinated read W's version here and a version of shard 0 that the failover
// lost. Its vector's entry for our shard is W's TID; applying its outcome to the entries at
// that TID (what the worker did) gave W the audit's dependency on the lost TID, and the discard
// undid W although W, acknowledged, depended on nothing lost. The outcome applies only to a
// transaction's own writes here.
TEST(DiscardJournal, AReadersOutcomeDoesNotJudgeTheWriterItRead) {
  for (const bool planted : {true, false}) {
    SCOPED_TRACE(planted ? "outcome applied at the TID read (the bug)" : "own writes only");
    Survivor s;
    const uint64_t w = s.cross(1, {{1, 101}}, 0, kFinal - 5);  // W: journaled, not lost
    txn::DepVec audit;  // read W here and a lost version of shard 0; wrote nothing here
    audit.raise(kShard, w);
    audit.raise(0, kFinal + 3);
    const uint32_t written_elsewhere[] = {0};
    const dist::TxnId audit_id = dist::make_txn_id(kShard, 0, 7);
    if (planted) {
      s.journal.update(audit.get(kShard), audit, {}, audit_id);
    } else {
      s.journal.note_outcome(/*settled=*/true, written_elsewhere, audit, {}, audit_id);
    }
    DiscardJournal* journals[] = {&s.journal};
    auto r = discard_lost(journals, s.engine, *s.compensator, LostRange{0, kFinal, kFloor});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const uint64_t key1 = s.state()[1];
    if (planted) {
      EXPECT_EQ(key1, 1u);  // W undone
      EXPECT_EQ(r->restored, 1u);
    } else {
      EXPECT_EQ(key1, 101u);  // W stays
      EXPECT_EQ(r->lost_writes, 0u);
    }
  }
  // A transaction that wrote here still gets its final vector.
  Survivor s;
  const uint64_t mine = s.cross(dist::make_txn_id(kShard, 0, 1), {{2, 202}}, 0, kCoveredUpTo - 2);
  txn::DepVec final_vector;
  final_vector.raise(kShard, mine);
  final_vector.raise(0, kFinal + 7);
  const uint32_t written[] = {0, kShard};
  s.journal.note_outcome(/*settled=*/true, written, final_vector, {},
                         dist::make_txn_id(kShard, 0, 1));
  DiscardJournal* journals[] = {&s.journal};
  auto r = discard_lost(journals, s.engine, *s.compensator, LostRange{0, kFinal, kFloor});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(s.state()[2], 2u);  // lost with shard 0's half
}

TEST(DiscardJournal, CoveredEntriesAreForgotten) {
  Survivor s;
  s.cross(1, {{1, 101}}, 0, kFinal + 3);
  s.cross(2, {{2, 202}}, 0, kCoveredUpTo - 1);  // covered at once: never journaled
  EXPECT_EQ(s.journal.size(), 1u);
  s.journal.trim([](uint32_t, uint64_t) { return true; });  // everything covered now
  EXPECT_EQ(s.journal.size(), 0u);
  EXPECT_EQ(s.journal.stats().trimmed, 1u);
}

// ---- What a promoted follower replayed (ReplayJournal; docs/REPLICATION.md, "A region fails")

// Shard 1's new leader was a follower: its store holds, through replay, halves of cross-shard
// transactions whose shard-0 halves a failover of shard 0 lost at the same time (a region:
// both leaders killed at once). Its workers committed none of them, so only its replay's
// journal can undo them. The log (one stream, as shard 1's failed leader wrote it): A names
// shard 0 at or below F (kept); B names a lost TID (puts key 2, inserts key 50); C read B
// (its vector inherits B's entry) and put key 3; D names no other shard; E (lost) puts key 2
// over B; F (lost) removes key 1 over A. Returns shard 1's state after the takeover and the
// first discard, with or without the journal on the follower's replay.
std::map<uint64_t, uint64_t> promoted_after_discard(bool journal_replay, DiscardResult* result) {
  txn::Engine engine(Survivor::options());
  txn::Table<1>* table = engine.create_table<1>("t");
  for (uint64_t k = 1; k <= 4; ++k) EXPECT_TRUE(table->load(key1(k), uint64_t{k}).ok());
  repl::ReplayApplier applier(engine, 1);
  if (journal_replay) applier.set_observer(std::make_shared<ReplayJournal>(kShard));

  const uint64_t t = uint64_t{2} << 32;  // shard 1's TIDs in its failed leader's epoch
  std::vector<uint64_t> words(1 << 12);
  repl::LogBatchBuilder builder;
  builder.reset({reinterpret_cast<std::byte*>(words.data()), words.size() * 8},
                repl::LogEntryId{kShard, 0, 1, 1}, repl::BatchLimits{});
  struct Write {
    repl::WriteOp op;
    uint64_t key, value;
  };
  const auto append = [&](uint64_t tid, uint64_t dep_ts, std::vector<Write> writes) {
    std::vector<repl::TxnWrite> w;
    for (const Write& x : writes) {
      w.push_back(repl::TxnWrite{0,
                                 x.op,
                                 {&x.key, 1},
                                 x.op == repl::WriteOp::kRemove
                                     ? std::span<const std::byte>()
                                     : std::as_bytes(std::span(&x.value, 1))});
    }
    const txn::DepEntry dep{0, dep_ts};
    EXPECT_EQ(builder.append(tid, {&dep, dep_ts == 0 ? 0u : 1u}, w), repl::AppendResult::kOk);
  };
  using enum repl::WriteOp;
  append(t + 1, kFinal - 5, {{kPut, 1, 101}});                      // A: kept
  append(t + 2, kFinal + 3, {{kPut, 2, 202}, {kInsert, 50, 500}});  // B: lost
  append(t + 3, kFinal + 3, {{kPut, 3, 1202}});                     // C: read B, lost
  append(t + 4, 0, {{kPut, 4, 404}});                               // D: shard 1 alone
  append(t + 5, kFinal + 4, {{kPut, 2, 252}});                      // E: lost
  append(t + 6, kFinal + 4, {{kRemove, 1, 0}});                     // F: lost
  applier.on_chosen(0, builder.seal());

  // The takeover: the stream's old slot (1) is chosen and installed; F of shard 1 is t + 6.
  repl::TakeoverTracker tracker(1, applier);
  EXPECT_TRUE(tracker.note(0, /*leading=*/true, /*next_slot=*/2, /*chosen_index=*/1));
  const repl::TakeoverResult taken = tracker.result(applier);
  EXPECT_EQ(taken.final_tid, t + 6);
  const auto journal = std::dynamic_pointer_cast<ReplayJournal>(taken.observer);
  EXPECT_EQ(journal != nullptr, journal_replay);
  txn::EngineOptions leading = Survivor::options();
  engine.start_leading((taken.floor_tid >> 32) + 64, &leading);
  std::vector<DiscardJournal*> journals;
  if (journal != nullptr) {
    EXPECT_EQ(journal->journal().size(), 6u);  // A, B (2 writes), C, E, F; not D
    // The versions A, C and E (B's key 2 is under E, F's key 1 absent) get their vectors.
    EXPECT_EQ(journal->journal().restore_version_deps(engine), 3u);
    journals.push_back(&journal->journal());
  }

  // The new leader's worker, before it learns what shard 0 lost: G reads key 2 (E's, lost)
  // and puts its value + 1000 into key 4. Its journal, like a worker's, keeps what names a
  // shard its vectorized watermark does not cover (shard 0 up to kCoveredUpTo here).
  DiscardJournal worker_journal(kShard);
  txn::Worker* worker = engine.make_worker();
  struct Hook {
    DiscardJournal* journal;
    static Status record(void* self, const txn::Txn& txn) {
      static_cast<Hook*>(self)->journal->record(txn, false, [](uint32_t shard, uint64_t ts) {
        return shard == kShard || ts <= kCoveredUpTo;
      });
      return Status::Ok();
    }
  } hook{&worker_journal};
  worker->set_commit_hook(&Hook::record, &hook);
  const Status g = worker->run(
      [](txn::Txn& txn, const void* args, void*) -> Status {
        auto* t = static_cast<txn::Table<1>*>(const_cast<void*>(args));
        uint64_t v = 0;
        SHOAL_TRY(txn.get(*t, key1(2), &v));
        return txn.put(*t, key1(4), v + 1000);
      },
      table);
  EXPECT_TRUE(g.ok()) << g.to_string();
  // G names E's lost TID only if E's version carries its vector.
  EXPECT_EQ(worker_journal.size(), journal_replay ? 1u : 0u);
  journals.push_back(&worker_journal);

  // Shard 0's failover lost its TIDs in (kFinal, kFloor]: the first discard.
  txn::Worker* compensator = engine.make_worker();
  auto r = discard_lost(journals, engine, *compensator, LostRange{0, kFinal, kFloor});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (r.ok()) *result = *r;
  std::map<uint64_t, uint64_t> out;
  table->for_each(key1(0), Key1::max(), [&](const Key1& k, const void* v, uint32_t) {
    out[k.w[0]] = *static_cast<const uint64_t*>(v);
    return true;
  });
  return out;
}

TEST(DiscardJournal, AReplayedHalfWhoseOtherHalfIsLostIsUndoneAtTheTakeover) {
  DiscardResult r;
  // A and D stay; B, C, E, F and G are undone: key 1 back to A's value, key 2 and 3 to the
  // load, key 4 to D's, key 50 (B's insert) gone.
  const std::map<uint64_t, uint64_t> expected = {{1, 101}, {2, 2}, {3, 3}, {4, 404}};
  EXPECT_EQ(promoted_after_discard(/*journal_replay=*/true, &r), expected);
  EXPECT_EQ(r.lost_writes, 6u);  // B's two, C's, E's, F's, G's
  EXPECT_EQ(r.restored, 4u);     // keys 1, 2 (under E and B), 3 and 4
  EXPECT_EQ(r.removed, 1u);      // key 50
  EXPECT_EQ(r.not_discarded, 0u);
  EXPECT_EQ(r.kept_txns, 0u);
}

// The gap this closes: without a journal of its replay the promoted leader keeps B, C, E, F
// and G, which read E.
TEST(DiscardJournal, WithoutTheReplayJournalThePromotedLeaderKeepsTheLostHalves) {
  DiscardResult r;
  const std::map<uint64_t, uint64_t> kept = {{2, 252}, {3, 1202}, {4, 1252}, {50, 500}};
  EXPECT_EQ(promoted_after_discard(/*journal_replay=*/false, &r), kept);
  EXPECT_EQ(r.lost_writes, 0u);
}

// A follower knows no vectorized watermark to trim by: a full journal forgets its oldest
// writes (counted) and keeps the newest, entries and old values both bounded.
TEST(DiscardJournal, AFollowersJournalKeepsItsNewestWrites) {
  DiscardJournal journal(kShard);
  const txn::DepEntry dep{0, kFinal + 1};
  std::vector<uint8_t> old(2048, 7);
  const size_t writes = DiscardJournal::kEntriesMax + 100;
  for (size_t i = 0; i < writes; ++i) {
    const uint64_t key = i;
    ReplayedWrite w;
    w.tid = (uint64_t{2} << 32) + i + 1;
    w.deps = {&dep, 1};
    w.key_words = {&key, 1};
    w.has_old_value = true;
    w.old_value = old;
    w.base_tid = 1;
    journal.push_replayed(w);
  }
  // 2 KiB old values: the byte ring (8 MiB) holds 4,096 of them.
  EXPECT_EQ(journal.size(), DiscardJournal::kBytesMax / old.size());
  EXPECT_EQ(journal.stats().forgotten, writes - journal.size());
  EXPECT_EQ(journal.at(journal.size() - 1).tid, (uint64_t{2} << 32) + writes);
  EXPECT_TRUE(journal.at(0).undoable);
  EXPECT_EQ(journal.at(0).key[0], writes - journal.size());
  // Inserts keep no old value: the entries' bound.
  for (size_t i = 0; i < DiscardJournal::kEntriesMax; ++i) {
    const uint64_t key = writes + i;
    ReplayedWrite w;
    w.tid = (uint64_t{3} << 32) + i + 1;
    w.deps = {&dep, 1};
    w.key_words = {&key, 1};
    w.kind = txn::WriteKind::kInsert;
    journal.push_replayed(w);
  }
  EXPECT_EQ(journal.size(), DiscardJournal::kEntriesMax);
  EXPECT_EQ(journal.stats().forgotten, writes);
  EXPECT_EQ(journal.at(0).kind, txn::WriteKind::kInsert);
}

}  // namespace
}  // namespace shoal::server

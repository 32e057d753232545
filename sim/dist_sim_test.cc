// Distributed transactions under the deterministic simulator: several shards (each its own
// Engine and Participant) in one process, coordinators running many transactions at once as
// coroutines on one event loop, every message hop delayed by a seeded random amount. After
// each run: money is conserved, every committed audit saw the invariant total, no locks or
// participant contexts are left, and the recorded history is serializable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sim/forwarding_link.h"
#include "sim/sim_env.h"
#include "src/check/history.h"
#include "src/check/serializability.h"
#include "src/dist/coordinator.h"
#include "src/dist/local_link.h"
#include "src/runtime/event_loop.h"

namespace shoal::sim {
namespace dist_sim_test {  // named, not anonymous: unique in a unity build

struct Account {
  uint64_t seq;     // per-key version number, for the history checker
  uint64_t writer;  // history id of the transaction that wrote this version
  int64_t balance;
};

constexpr uint32_t kTableId = 0;
constexpr int64_t kInitial = 1000;

struct Cluster {
  Cluster(uint64_t seed, uint32_t shards, uint64_t keys_per_shard, bool skip_validation)
      : env(seed),
        loop(env, rt::LoopOptions{}),
        rng(seed * 7919 + 1),
        keys_per_shard(keys_per_shard) {
    env.attach(loop);
    for (uint32_t s = 0; s < shards; ++s) {
      txn::EngineOptions o;
      o.epoch_ticker = false;
      o.lock_wait_spins_max = 16;  // locks live for round trips here: fail fast, retry
      o.shard_id = s;
      o.unsafe_skip_read_validation = skip_validation;
      o.keep_version_chains = true;  // the dominance check below finds the versions read
      engines.push_back(std::make_unique<txn::Engine>(o, &env));
      auto* table = engines.back()->create_table<1>("accounts");
      for (uint64_t k = 0; k < keys_per_shard; ++k) {
        Status st = table->load(key1(global_key(s, k)), Account{0, check::kInitialTxn, kInitial});
        SHOAL_ASSERT(st.ok(), "%s", st.to_string().c_str());
      }
      participants.push_back(std::make_unique<dist::Participant>(*engines.back(), s, 256));
    }
    for (uint32_t s = 0; s < shards; ++s) {
      links.push_back(
          std::make_unique<dist::LocalLink>(*participants[s], loop, rng, 1'000, 40'000));
    }
  }
  ~Cluster() { env.detach(loop); }
  uint64_t global_key(uint32_t shard, uint64_t k) const { return shard * keys_per_shard + k; }
  uint32_t shard_of(uint64_t key) const { return static_cast<uint32_t>(key / keys_per_shard); }
  std::vector<dist::ShardLink*> link_ptrs() {
    std::vector<dist::ShardLink*> out;
    for (auto& l : links) out.push_back(l.get());
    return out;
  }

  SimEnv env;
  rt::EventLoop loop;
  Rng rng;
  uint64_t keys_per_shard;
  uint64_t epoch = 1;
  std::vector<std::unique_ptr<txn::Engine>> engines;
  std::vector<std::unique_ptr<dist::Participant>> participants;
  std::vector<std::unique_ptr<dist::LocalLink>> links;
};

// A transfer between two accounts, or a read-only audit of several; both record what they saw.
struct TxnArgs {
  Cluster* cluster;
  uint64_t keys[4];
  uint32_t key_count;
  bool audit;
  int64_t amount;
  check::TxnId history_id;
};
struct TxnResult {
  check::TxnRecord record;
  int64_t audited_sum = 0;
};

rt::Task<Status> bank_txn(dist::DistTxn& txn, const void* args_ptr, void* result_ptr) {
  const auto& a = *static_cast<const TxnArgs*>(args_ptr);
  auto& r = *static_cast<TxnResult*>(result_ptr);
  r.record = check::TxnRecord{};
  r.record.id = a.history_id;
  r.audited_sum = 0;
  Account acc[4];
  for (uint32_t i = 0; i < a.key_count; ++i) {
    const uint64_t k = a.keys[i];
    Status s = co_await txn.get(a.cluster->shard_of(k), kTableId, &k, 1, &acc[i], sizeof(Account));
    if (!s.ok()) co_return s;
    r.record.read(k, acc[i].seq, acc[i].writer);
    r.audited_sum += acc[i].balance;
  }
  if (a.audit) co_return Status::Ok();
  acc[0].balance -= a.amount;
  acc[1].balance += a.amount;
  for (uint32_t i = 0; i < 2; ++i) {
    const uint64_t k = a.keys[i];
    acc[i].seq += 1;
    acc[i].writer = a.history_id;
    SHOAL_CO_TRY(txn.put(a.cluster->shard_of(k), kTableId, &k, 1, &acc[i], sizeof(Account)));
    r.record.write(k, acc[i].seq);
  }
  co_return Status::Ok();
}

// A committed transaction's reads (key, seq) and its final dependency vector.
struct CommittedVector {
  std::vector<std::pair<uint64_t, uint64_t>> reads;
  txn::DepVec vector;
};

struct RunTotals {
  std::vector<CommittedVector> vectors;
  uint64_t committed = 0;
  uint64_t cross_shard = 0;
  uint64_t conflicts = 0;
  uint64_t bad_audits = 0;
};

// One client: `count` transactions in sequence through a coordinator.
rt::Task<void> client(Cluster* c, dist::Coordinator* coord, check::HistoryRecorder::ThreadLog* log,
                      uint64_t seed, int count, RunTotals* totals) {
  Rng rng(seed);
  dist::DistTxn txn;
  const uint64_t keys = c->keys_per_shard * c->engines.size();
  for (int i = 0; i < count; ++i) {
    TxnArgs args{};
    args.cluster = c;
    args.audit = rng.uniform(0, 9) == 0;
    args.key_count = args.audit ? 4 : 2;
    for (uint32_t k = 0; k < args.key_count; ++k) {
      bool fresh = false;
      while (!fresh) {
        args.keys[k] = rng.uniform(0, keys - 1);
        fresh = true;
        for (uint32_t j = 0; j < k; ++j) fresh = fresh && args.keys[j] != args.keys[k];
      }
    }
    args.amount = static_cast<int64_t>(rng.uniform(1, 20));
    args.history_id = log->next_txn_id();
    TxnResult result;
    Status s = co_await coord->run(txn, &bank_txn, &args, &result);
    if (!s.ok()) continue;
    CommittedVector cv;
    for (const check::Op& op : result.record.ops) {
      if (op.kind == check::OpKind::kRead) cv.reads.emplace_back(op.key, op.version);
    }
    cv.vector = txn.vector();
    totals->vectors.push_back(std::move(cv));
    log->append(std::move(result.record));
    totals->committed++;
  }
}

// Every committed transaction's vector must dominate every version it read: that version's
// TID on its shard, and the version's own dependency vector (docs/ARCHITECTURE.md, "Across
// shards"). Returns how many reads it does not dominate. (Only validation makes a read's version
// and the vector it merged belong together, so a build that skips it may miss some: the planted-bug
// test counts those as caught.)
uint64_t vectors_missing_reads(Cluster& c, const std::vector<CommittedVector>& vectors) {
  uint64_t checked = 0, checked_deps = 0, missing = 0;
  for (const CommittedVector& cv : vectors) {
    for (const auto& [key, seq] : cv.reads) {
      const uint32_t shard = c.shard_of(key);
      auto* table = static_cast<txn::Table<1>*>(c.engines[shard]->find_table("accounts"));
      bool found = false;
      auto visit = [&](const void* data, uint64_t word, const txn::DepVec* deps) {
        if (found || static_cast<const Account*>(data)->seq != seq) return;
        found = true;
        if (cv.vector.get(shard) < txn::Tid::version(word)) ++missing;
        if (deps != nullptr) {
          if (!cv.vector.dominates(*deps)) ++missing;
          ++checked_deps;
        }
        ++checked;
      };
      Status st = table->peek_chain_for_tests(key1(key), visit);
      EXPECT_TRUE(st.ok());
      EXPECT_TRUE(found) << "version " << seq << " of key " << key << " not in its chain";
    }
  }
  EXPECT_GT(checked, 0u);
  EXPECT_GT(checked_deps, 0u) << "no version read carried a cross-shard vector";
  return missing;
}

struct SimRunResult {
  RunTotals totals;
  check::History history;
  int64_t total_balance = 0;
  size_t participants_active = 0;
  uint64_t vectors_missing = 0;  // reads a committed transaction's vector does not dominate
};

constexpr uint64_t kKeysPerShard = 16;

SimRunResult run_cluster(uint64_t seed, bool skip_validation, uint32_t shards = 3,
                         int clients_per_coordinator = 4, int txns_per_client = 25) {
  Cluster c(seed, shards, kKeysPerShard, skip_validation);
  check::HistoryRecorder recorder(shards * clients_per_coordinator);
  std::vector<std::unique_ptr<dist::Coordinator>> coords;
  SimRunResult out;
  for (uint32_t s = 0; s < shards; ++s) {
    dist::CoordinatorOptions o;
    o.shard_id = s;
    o.worker_id = 0;
    o.max_retries = 1000;
    coords.push_back(std::make_unique<dist::Coordinator>(o, c.link_ptrs(), &c.epoch));
    for (int i = 0; i < clients_per_coordinator; ++i) {
      auto* log = &recorder.thread_log(s * clients_per_coordinator + i);
      Status st = c.loop.spawn(client(&c, coords.back().get(), log, seed * 1000 + s * 100 + i,
                                      txns_per_client, &out.totals));
      SHOAL_ASSERT(st.ok(), "%s", st.to_string().c_str());
    }
  }
  Status st = c.env.run_until_true([&] { return c.loop.live_tasks() == 0; },
                                   /*deadline_ns=*/60'000'000'000ULL);
  EXPECT_TRUE(st.ok()) << st.to_string() << " " << c.env.replay_hint();
  for (auto& coord : coords) {
    out.totals.cross_shard += coord->stats().cross_shard;
    out.totals.conflicts += coord->stats().conflict_aborts;
  }
  for (uint32_t s = 0; s < shards; ++s) {
    out.participants_active += c.participants[s]->active();
    auto* table = static_cast<txn::Table<1>*>(c.engines[s]->find_table("accounts"));
    table->for_each(key1(0), Key1::max(), [&](const Key1&, const void* v, uint32_t) {
      out.total_balance += static_cast<const Account*>(v)->balance;
      return true;
    });
  }
  out.vectors_missing = vectors_missing_reads(c, out.totals.vectors);
  out.history = recorder.merge();
  return out;
}

TEST(DistSim, TransfersAcrossShardsAreSerializableOverManySeeds) {
  const uint64_t base = SimEnv::seed_from_env(1);
  // 500 seeds by default; SHOAL_TEST_SCALE=small (sanitizer builds) runs 20.
  const char* scale = std::getenv("SHOAL_TEST_SCALE");
  const bool small = scale != nullptr && std::string(scale) == "small";
  const int seeds = std::getenv("SHOAL_SIM_SEED") != nullptr ? 1 : (small ? 20 : 500);
  uint64_t committed = 0, cross = 0, conflicts = 0;
  for (int i = 0; i < seeds; ++i) {
    const uint64_t seed = base + i;
    SimRunResult r = run_cluster(seed, /*skip_validation=*/false);
    ASSERT_EQ(r.total_balance, 3 * kKeysPerShard * kInitial)
        << "money not conserved, seed=" << seed;
    ASSERT_EQ(r.participants_active, 0u) << "participant contexts leaked, seed=" << seed;
    ASSERT_EQ(r.vectors_missing, 0u) << "a vector misses a read version, seed=" << seed;
    auto anomalies = check::check(r.history);
    ASSERT_TRUE(anomalies.empty()) << "seed=" << seed << " (replay: SHOAL_SIM_SEED=" << seed
                                   << "): " << anomalies.front().explanation;
    committed += r.totals.committed;
    cross += r.totals.cross_shard;
    conflicts += r.totals.conflicts;
  }
  // The workload must really exercise the protocol: many cross-shard commits and conflicts.
  EXPECT_GT(cross, committed / 3);
  EXPECT_GT(conflicts, 0u);
  std::printf("dist sim: %d seeds, %llu committed (%llu cross-shard), %llu conflict retries\n",
              seeds, static_cast<unsigned long long>(committed),
              static_cast<unsigned long long>(cross), static_cast<unsigned long long>(conflicts));
}

TEST(DistSim, SameSeedSameRun) {
  SimRunResult a = run_cluster(77, false);
  SimRunResult b = run_cluster(77, false);
  ASSERT_EQ(a.history.txns.size(), b.history.txns.size());
  for (size_t i = 0; i < a.history.txns.size(); ++i) {
    ASSERT_EQ(a.history.txns[i].ops.size(), b.history.txns[i].ops.size());
    for (size_t j = 0; j < a.history.txns[i].ops.size(); ++j) {
      ASSERT_EQ(a.history.txns[i].ops[j].key, b.history.txns[i].ops[j].key);
      ASSERT_EQ(a.history.txns[i].ops[j].version, b.history.txns[i].ops[j].version);
    }
  }
  EXPECT_EQ(a.totals.conflicts, b.totals.conflicts);
}

// Without read validation at the participants, the checker must see the damage.
TEST(DistSim, SkippedValidationIsCaught) {
  bool caught = false;
  for (uint64_t seed = 1; seed <= 20 && !caught; ++seed) {
    SimRunResult r = run_cluster(seed, /*skip_validation=*/true);
    caught = !check::check(r.history).empty() || r.total_balance != 3 * kKeysPerShard * kInitial ||
             r.vectors_missing != 0;
  }
  EXPECT_TRUE(caught);
}

// One transfer from shard 0's key 0 to shard 1's key 0, run to its end; its status and id.
Status run_one_transfer(Cluster& c, dist::Coordinator& coord, check::TxnId* id = nullptr) {
  Status result = Status::Timeout("not run");
  TxnArgs args{&c, {c.global_key(0, 0), c.global_key(1, 0)}, 2, false, 1, 1};
  TxnResult r;
  dist::DistTxn txn;
  auto task = [](dist::Coordinator* co, dist::DistTxn* t, TxnArgs* a, TxnResult* out,
                 Status* st) -> rt::Task<void> { *st = co_await co->run(*t, &bank_txn, a, out); };
  Status spawned = c.loop.spawn(task(&coord, &txn, &args, &r, &result));
  if (!spawned.ok()) return spawned;
  Status ran = c.env.run_until_true([&] { return c.loop.live_tasks() == 0; },
                                    c.env.now_ns() + 10'000'000'000ULL);
  if (!ran.ok())
    return Status::Timeout(fmt::format("{} ({} tasks live, result {})", ran.to_string(),
                                       c.loop.live_tasks(), result.to_string()));
  if (id != nullptr) *id = txn.id();
  return result;
}

// A failover of shard 1 as the shard servers handle it (shard_server.h, "Failover of another
// shard"): its new leader's participant serves the same store in epoch 2; the other shard's
// coordinator is pointed at it (set_link) and carries epoch 2 once it learned it. Old-epoch
// requests are refused in both directions: the survivor's coordinator until it learns the
// epoch, and the deposed leader's coordinator at the survivor's participant.
TEST(DistSim, RedialedShardServesTheNewEpochAndFencesTheOld) {
  Cluster c(5, 2, kKeysPerShard, false);
  uint64_t survivor_epoch = 1, deposed_epoch = 1;
  dist::CoordinatorOptions o;
  o.max_retries = 5;
  dist::Coordinator survivor(o, c.link_ptrs(), &survivor_epoch);
  o.shard_id = 1;
  dist::Coordinator deposed(o, c.link_ptrs(), &deposed_epoch);
  ASSERT_TRUE(run_one_transfer(c, survivor).ok());
  // Shard 1 fails over: a new participant (the promoted replica's) in epoch 2.
  dist::Participant promoted(*c.engines[1], 1, 256);
  promoted.advance_epoch(2);
  dist::LocalLink to_promoted(promoted, c.loop, c.rng, 1'000, 40'000);
  survivor.set_link(1, &to_promoted);
  // Before the survivor learns epoch 2, the new leader refuses its transactions (retried,
  // every attempt refused: nothing installed).
  const Status stale = run_one_transfer(c, survivor);
  EXPECT_TRUE(stale.is_aborted()) << stale.to_string();
  EXPECT_EQ(promoted.active(), 0u);
  // It learns it (the deposition watch) and fences its own participant too.
  survivor_epoch = 2;
  c.participants[0]->advance_epoch(2);
  EXPECT_TRUE(run_one_transfer(c, survivor).ok());
  // The deposed leader's coordinator still runs in epoch 1: the survivor refuses it.
  const Status fenced = run_one_transfer(c, deposed);
  EXPECT_TRUE(fenced.is_aborted()) << fenced.to_string();
  EXPECT_EQ(c.participants[0]->active(), 0u);
  // A new leader's coordinator numbers its transactions above its predecessor's.
  dist::CoordinatorOptions no;
  no.shard_id = 1;
  no.first_seq = (uint64_t{2} << 32) + 1;
  uint64_t new_epoch = 2;
  dist::Coordinator successor(no, {c.links[0].get(), &to_promoted}, &new_epoch);
  check::TxnId id = 0;
  ASSERT_TRUE(run_one_transfer(c, successor, &id).ok());
  EXPECT_GE(id & ((uint64_t{1} << 40) - 1), uint64_t{2} << 32);
}

// A region failing: shard 0 failed over in epoch 2, then shard 1 in epoch 3, its new leader
// promoted over a store that may hold halves of shard 0's lost transactions. Until that leader
// has followed shard 0's failover (discarded what it lost), it serves no transaction in its own
// epoch, neither shard 0's new leader's (which would hide the lost dependency behind its own
// new-epoch TID) nor its own coordinator's (through its self link); refused ones installed
// nothing, and once it followed, both run.
TEST(DistSim, APromotedLeaderServesNothingUntilItFollowedTheEarlierFailover) {
  Cluster c(5, 2, kKeysPerShard, false);
  dist::Participant promoted(*c.engines[1], 1, 256);
  promoted.advance_epoch(3);
  promoted.await_failover_of(0);
  promoted.await_failover_of(0);  // once per shard
  EXPECT_TRUE(promoted.awaits_failovers());
  dist::LocalLink to_promoted(promoted, c.loop, c.rng, 1'000, 40'000);
  c.participants[0]->advance_epoch(3);  // shard 0's new leader followed shard 1 already
  uint64_t epoch = 3;
  dist::CoordinatorOptions o;
  o.max_retries = 5;
  o.first_seq = (uint64_t{2} << 32) + 1;
  dist::Coordinator shard0_leader(o, {c.links[0].get(), &to_promoted}, &epoch);
  o.shard_id = 1;
  o.first_seq = (uint64_t{3} << 32) + 1;
  dist::Coordinator own(o, {c.links[0].get(), &to_promoted}, &epoch);
  for (dist::Coordinator* coordinator : {&shard0_leader, &own}) {
    const Status refused = run_one_transfer(c, *coordinator);
    EXPECT_TRUE(refused.is_aborted()) << refused.to_string();
    EXPECT_EQ(promoted.active(), 0u);
    EXPECT_EQ(c.participants[0]->active(), 0u);
  }
  EXPECT_FALSE(promoted.followed_failover_of(1));  // never awaited
  EXPECT_TRUE(promoted.awaits_failovers());
  EXPECT_TRUE(promoted.followed_failover_of(0));
  EXPECT_FALSE(promoted.awaits_failovers());
  EXPECT_TRUE(run_one_transfer(c, shard0_leader).ok());
  EXPECT_TRUE(run_one_transfer(c, own).ok());
}

// C4 with the last agent's shard gone: shard 1 (the first remote writer, coordinator.cc) decided
// (installed) but its answer was lost with its process. Its new leader's log holds the decision
// (or, in the second run, not); the coordinator (shard 0, no writes of its own) keeps shard 2
// prepared until it asks, then installs there (or aborts).
class AnswerLostLink final : public ForwardingLink {
 public:
  using ForwardingLink::ForwardingLink;
  rt::Task<Status> validate_install(check::TxnId id, uint64_t epoch, const txn::DepVec& vector,
                                    txn::DepVec* deps, uint64_t* tid,
                                    const dist::FragmentCall* fragment) override {
    decided = co_await inner_.validate_install(id, epoch, vector, &logged, &logged_tid, fragment);
    logged.raise(1, logged_tid);
    (void)deps;
    (void)tid;
    co_return Status::Unavailable("shard 1 unreachable: its process died");
  }
  Status decided = Status::Timeout("not asked");
  txn::DepVec logged;
  uint64_t logged_tid = 0;
};

struct Decided {
  const AnswerLostLink* link;
  bool kept;  // whether the new leader's log holds it
};

bool lookup_decided(const void* ctx, check::TxnId id, uint64_t* tid, txn::DepVec* vector) {
  (void)id;
  const auto* d = static_cast<const Decided*>(ctx);
  if (!d->kept || !d->link->decided.ok()) return false;
  *tid = d->link->logged_tid;
  *vector = d->link->logged;
  return true;
}

Status last_agent_lost(bool kept, int64_t* shard2_balance, size_t* active_at_2) {
  Cluster c(11, 3, kKeysPerShard, false);
  AnswerLostLink dying(*c.links[1]);
  uint64_t epoch = 1;
  dist::CoordinatorOptions o;
  o.max_retries = 1;
  o.backoff_loop = &c.loop;
  dist::Coordinator coord(o, {c.links[0].get(), &dying, c.links[2].get()}, &epoch);
  // Shard 1's new leader: the same store, answering from the log it replayed.
  dist::Participant promoted(*c.engines[1], 1, 256);
  Decided decided{&dying, kept};
  promoted.set_decision_lookup(&lookup_decided, &decided);
  dist::LocalLink to_promoted(promoted, c.loop, c.rng, 1'000, 40'000);
  Status result = Status::Timeout("not run");
  TxnArgs args{&c, {c.global_key(1, 0), c.global_key(2, 0)}, 2, false, 5, 1};
  TxnResult r;
  dist::DistTxn txn;
  auto run = [](dist::Coordinator* co, dist::DistTxn* t, TxnArgs* a, TxnResult* out,
                Status* st) -> rt::Task<void> { *st = co_await co->run(*t, &bank_txn, a, out); };
  auto fail_over = [](Cluster* cl, dist::Coordinator* co, dist::ShardLink* link,
                      const AnswerLostLink* d) -> rt::Task<void> {
    while (!d->decided.ok()) (co_await cl->loop.sleep_for(1'000'000)).ignore();  // bounded
    (co_await cl->loop.sleep_for(50'000'000)).ignore();  // the failover takes a while
    co->set_link(1, link);
  };
  SHOAL_TRY(c.loop.spawn(run(&coord, &txn, &args, &r, &result)));
  SHOAL_TRY(c.loop.spawn(fail_over(&c, &coord, &to_promoted, &dying)));
  const Status ran = c.env.run_until_true([&] { return c.loop.live_tasks() == 0; },
                                          c.env.now_ns() + 10'000'000'000ULL);
  SHOAL_TRY(ran);
  SHOAL_TRY(dying.decided);
  Account acc{};
  txn::Txn t(c.engines[2].get(), 1);
  t.begin();
  auto* table = static_cast<txn::Table<1>*>(c.engines[2]->find_table("accounts"));
  SHOAL_TRY(t.get(*table, key1(c.global_key(2, 0)), &acc));
  t.abort();
  *shard2_balance = acc.balance;
  *active_at_2 = c.participants[2]->active();
  EXPECT_FALSE(txn.in_doubt());
  return result;
}

TEST(DistSim, LastAgentGoneWaitsForItsNewLeadersWord) {
  int64_t balance = 0;
  size_t active = 0;
  const Status committed = last_agent_lost(/*kept=*/true, &balance, &active);
  EXPECT_TRUE(committed.ok()) << committed.to_string();
  EXPECT_EQ(balance, kInitial + 5);  // shard 2 installed, not released
  EXPECT_EQ(active, 0u);
  const Status lost = last_agent_lost(/*kept=*/false, &balance, &active);
  EXPECT_EQ(lost.code(), Code::kUnavailable) << lost.to_string();
  EXPECT_EQ(balance, kInitial);  // aborted there
  EXPECT_EQ(active, 0u);
}

}  // namespace dist_sim_test
}  // namespace shoal::sim

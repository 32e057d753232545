// Distributed transactions over real RPC on the simulated network. Three shard nodes (each its
// own event loop, Engine, Participant and ParticipantService) and three coordinator nodes
// (each its own loop, Coordinator and one RpcLink per shard) talk through RpcEndpoint over
// SimNetwork with loss, duplication, reordering and temporary partitions. A bank workload
// (transfers and audits across shards) records its history. After each run: the history is
// serializable, money is conserved, no participant context is left and every record is
// readable by a fresh transaction (no lock left behind), and a run is a pure function of its
// seed (trace hash). Also: the wire codec refuses malformed messages without crashing, a
// planted bug (no read validation) is caught, and a shard crash fails the transactions that
// need it with Unavailable while the surviving shards keep no locks.
// Every failure names its seed; SHOAL_SIM_SEED=<seed> reruns just that seed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sim/dist_cluster_test_util.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"
#include "src/check/history.h"
#include "src/check/serializability.h"
#include "src/dist/coordinator.h"
#include "src/dist/participant.h"
#include "src/dist/rpc_link.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"

namespace shoal::sim {
namespace dist_rpc_sim_test {  // named, not anonymous: unique in a unity build

constexpr uint64_t kKeysPerShard = 64;
constexpr uint32_t kTableId = 0;
constexpr int64_t kInitial = 1000;
constexpr int64_t kTotal = int64_t{kShards} * kKeysPerShard * kInitial;
constexpr uint64_t kTraceTxn = 0xd157;

uint32_t shard_of(uint64_t key) {
  return static_cast<uint32_t>(key / kKeysPerShard);
}

struct RunConfig : ClusterRunConfig {
  uint64_t crash_at_ns = 0;  // 0: no crash
  uint32_t crash_shard = 2;
};

// A shard: an engine with one table of accounts, and its participant (declared after the
// engine, so it releases what it holds before the engine goes).
struct BankShard {
  std::unique_ptr<txn::Engine> engine;
  std::unique_ptr<dist::Participant> participant;
};

std::unique_ptr<BankShard> make_shard(SimEnv& env, uint32_t s, bool skip_validation,
                                      const dist::ParticipantOptions& po) {
  auto sh = std::make_unique<BankShard>();
  sh->engine = std::make_unique<txn::Engine>(sim_engine_options(s, skip_validation), &env);
  auto* table = sh->engine->create_table<1>("accounts");
  for (uint64_t k = 0; k < kKeysPerShard; ++k) {
    Status st = table->load(key1(s * kKeysPerShard + k), Account{0, check::kInitialTxn, kInitial});
    SHOAL_CHECK(st.ok());
  }
  sh->participant = std::make_unique<dist::Participant>(*sh->engine, s, po);
  return sh;
}

struct RpcCluster : SimCluster<BankShard> {
  RpcCluster(uint64_t seed, const RunConfig& cfg)
      : SimCluster(seed, cfg.faults,
                   [&](SimEnv& env, uint32_t s, const dist::ParticipantOptions& po) {
                     return make_shard(env, s, cfg.skip_validation, po);
                   }) {}
};

// ---- workload ----

struct TxnArgs {
  uint64_t keys[4];
  uint32_t key_count;
  bool audit;
  int64_t amount;
  check::TxnId history_id;
};
struct TxnResult {
  check::TxnRecord record;
};

// A transfer between two accounts, or a read-only audit of four; both record what they saw.
rt::Task<Status> bank_txn(dist::DistTxn& txn, const void* args_ptr, void* result_ptr) {
  const auto& a = *static_cast<const TxnArgs*>(args_ptr);
  auto& r = *static_cast<TxnResult*>(result_ptr);
  r.record = check::TxnRecord{};
  r.record.id = a.history_id;
  Account acc[4];
  for (uint32_t i = 0; i < a.key_count; ++i) {
    const uint64_t k = a.keys[i];
    SHOAL_CO_TRY(co_await txn.get(shard_of(k), kTableId, &k, 1, &acc[i], sizeof(Account)));
    r.record.read(k, acc[i].seq, acc[i].writer);
  }
  if (a.audit) co_return Status::Ok();
  acc[0].balance -= a.amount;
  acc[1].balance += a.amount;
  for (uint32_t i = 0; i < 2; ++i) {
    const uint64_t k = a.keys[i];
    acc[i].seq += 1;
    acc[i].writer = a.history_id;
    SHOAL_CO_TRY(txn.put(shard_of(k), kTableId, &k, 1, &acc[i], sizeof(Account)));
    r.record.write(k, acc[i].seq);
  }
  co_return Status::Ok();
}

struct Outcomes {
  uint64_t committed = 0;
  uint64_t unavailable = 0;
  uint64_t unavailable_unnamed = 0;  // Unavailable whose message does not name the shard
  uint64_t other_failures = 0;
  std::string first_other;
  int clients_done = 0;
};

TxnArgs make_args(Rng& rng, check::HistoryRecorder::ThreadLog* log) {
  TxnArgs args{};
  args.audit = rng.uniform(0, 9) == 0;
  args.key_count = args.audit ? 4 : 2;
  for (uint32_t k = 0; k < args.key_count; ++k) {
    bool fresh = false;
    while (!fresh) {  // bounded in practice: 48 keys, at most 4 drawn
      args.keys[k] = rng.uniform(0, kShards * kKeysPerShard - 1);
      fresh = true;
      for (uint32_t j = 0; j < k; ++j) fresh = fresh && args.keys[j] != args.keys[k];
    }
  }
  args.amount = static_cast<int64_t>(rng.uniform(1, 20));
  args.history_id = log->next_txn_id();
  return args;
}

rt::Task<void> client(RpcCluster* c, dist::Coordinator* coord,
                      check::HistoryRecorder::ThreadLog* log, uint64_t seed, int count,
                      uint32_t crash_shard, Outcomes* out) {
  Rng rng(seed);
  dist::DistTxn txn;
  for (int i = 0; i < count; ++i) {
    TxnArgs args = make_args(rng, log);
    TxnResult result;
    Status s = co_await coord->run(txn, &bank_txn, &args, &result);
    c->env.trace(kTraceTxn, args.history_id, static_cast<uint64_t>(s.code()));
    if (s.ok()) {
      log->append(std::move(result.record));
      out->committed++;
    } else if (s.code() == Code::kUnavailable) {
      out->unavailable++;
      if (s.message().find(fmt::format("shard {}", crash_shard)) == std::string::npos) {
        out->unavailable_unnamed++;
      }
    } else {
      if (out->other_failures++ == 0) out->first_other = s.to_string();
    }
  }
  out->clients_done++;
}

// total_balance, contexts_left and unreadable count the live shards only.
struct RunResult : ClusterRunResult {
  Outcomes outcomes;
  dist::ParticipantStats part;  // summed over live shards
  uint64_t retransmits = 0;
};

void sum_participant(const dist::ParticipantStats& s, dist::ParticipantStats* out) {
  out->refused_ended += s.refused_ended;
  out->early_aborts += s.early_aborts;
  out->repeated_installs += s.repeated_installs;
  out->expired += s.expired;
}

// Reads every record of shard s with a fresh local transaction: a lock left behind fails it.
size_t unreadable_records(RpcCluster& c, uint32_t s) {
  txn::Engine& engine = *c.shards[s]->engine;
  ReadBack rb(engine);
  for (uint64_t k = 0; k < kKeysPerShard; ++k) {
    rb.read<Account>(*engine.tables()[kTableId], s * kKeysPerShard + k);
  }
  return rb.failed();
}

void collect(RpcCluster& c, const RunConfig& cfg, RunResult* out) {
  for (uint32_t s = 0; s < kShards; ++s) {
    if (cfg.crash_at_ns != 0 && s == cfg.crash_shard) continue;
    out->contexts_left += c.shards[s]->participant->active();
    out->unreadable += unreadable_records(c, s);
    sum_participant(c.shards[s]->participant->stats(), &out->part);
    out->total_balance += balance_sum(*c.shards[s]->engine->find_table("accounts"));
  }
  for (auto& conn : c.conns) out->retransmits += conn->rpc[0]->stats().retransmits;
}

RunResult run_bank(uint64_t seed, const RunConfig& cfg) {
  RpcCluster c(seed, cfg);
  RunResult out;
  c.spawn_clients(cfg.clients_per_coordinator, seed,
                  [&](uint32_t co, check::HistoryRecorder::ThreadLog* log, uint64_t client_seed) {
                    return client(&c, c.coords[co].get(), log, client_seed, cfg.txns_per_client,
                                  cfg.crash_shard, &out.outcomes);
                  });
  c.start_chaos();
  if (cfg.crash_at_ns != 0) {
    c.env.at(
        cfg.crash_at_ns,
        [](void* cl, uint64_t s) { static_cast<RpcCluster*>(cl)->crash_shard(uint32_t(s)); }, &c,
        cfg.crash_shard);
  }
  if (!c.run_until_quiet(out.outcomes.clients_done, &out.hint)) return out;
  out.finished = true;
  collect(c, cfg, &out);
  c.record_run(&out);
  return out;
}

// A healthy run, in which no transaction failed; false (with gtest failures) otherwise.
bool check_run(const RunResult& r, uint64_t seed) {
  expect_healthy_run(r, seed, kTotal);
  if (!r.finished) return false;
  EXPECT_EQ(r.outcomes.other_failures + r.outcomes.unavailable, 0u)
      << "transactions failed (first: " << r.outcomes.first_other << "); " << r.hint;
  return !::testing::Test::HasFailure();
}

TEST(DistRpcSim, BankOverFaultyNetworkIsSerializableOverManySeeds) {
  const uint64_t base = SimEnv::seed_from_env(1);
  // The 500 seeds; readers of records locked by a prepared remote transaction fail
  // fast (EngineOptions::lock_wait_spins_max) instead of spinning, which keeps this in budget.
  const int seeds = seed_count(500, 20);
  const auto t0 = std::chrono::steady_clock::now();
  RunResult sum;
  for (int i = 0; i < seeds; ++i) {
    const uint64_t seed = base + i;
    RunResult r = run_bank(seed, RunConfig{});
    if (!check_run(r, seed)) {
      std::fprintf(stderr, "dist rpc sim failed: %s\n", r.hint.c_str());
      return;
    }
    sum.outcomes.committed += r.outcomes.committed;
    sum_coordinator(r.coord, &sum.coord);
    sum_participant(r.part, &sum.part);
    sum.retransmits += r.retransmits;
    sum.net.lost += r.net.lost;
    sum.net.duplicated += r.net.duplicated;
    sum.net.partition_drops += r.net.partition_drops;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The workload must really exercise the protocol and the faults.
  EXPECT_GT(sum.coord.cross_shard, sum.outcomes.committed / 3);
  EXPECT_GT(sum.coord.conflict_aborts, 0u);
  EXPECT_GT(sum.coord.timeouts, 0u);
  std::printf(
      "dist rpc sim: %d seeds in %.1f s; %llu committed (%llu cross-shard), %llu conflict "
      "retries, %llu timeout retries; participants: %llu late requests refused, %llu early "
      "aborts, %llu repeated installs, %llu leases expired; net: %llu lost, %llu duplicated, "
      "%llu partition drops, %llu rpc retransmits\n",
      seeds, secs, (unsigned long long)sum.outcomes.committed,
      (unsigned long long)sum.coord.cross_shard, (unsigned long long)sum.coord.conflict_aborts,
      (unsigned long long)sum.coord.timeouts, (unsigned long long)sum.part.refused_ended,
      (unsigned long long)sum.part.early_aborts, (unsigned long long)sum.part.repeated_installs,
      (unsigned long long)sum.part.expired, (unsigned long long)sum.net.lost,
      (unsigned long long)sum.net.duplicated, (unsigned long long)sum.net.partition_drops,
      (unsigned long long)sum.retransmits);
}

TEST(DistRpcSim, SameSeedSameTrace) {
  RunResult a, b;
  auto run = [](uint64_t seed) { return run_bank(seed, RunConfig{}); };
  if (!expect_same_seed_same_trace(SimEnv::seed_from_env(4242), run, &a, &b)) return;
  EXPECT_EQ(a.outcomes.committed, b.outcomes.committed);
}

// Without read validation at the participants, the checker must see the damage.
TEST(DistRpcSim, SkippedValidationIsCaught) {
  expect_planted_bug_caught([](uint64_t seed) {
    RunConfig cfg;
    cfg.skip_validation = true;
    RunResult r = run_bank(seed, cfg);
    return !r.finished || !check::check(r.history).empty() || r.total_balance != kTotal;
  });
}

// A shard crashes mid-run: transactions that need it fail with Unavailable naming it; the
// survivors keep no locks and no contexts for them.
TEST(DistRpcSim, ShardCrashFailsAffectedTransactionsAndSurvivorsKeepNoLocks) {
  const int seeds = seed_count(20, 5);
  uint64_t unavailable = 0, committed = 0, in_doubt = 0;
  for (int i = 0; i < seeds; ++i) {
    const uint64_t seed = SimEnv::seed_from_env(900) + i;
    RunConfig cfg;
    cfg.crash_at_ns = 15 * kMs;
    cfg.crash_shard = 2;
    RunResult r = run_bank(seed, cfg);
    ASSERT_TRUE(r.finished) << r.hint;
    EXPECT_GT(r.outcomes.unavailable, 0u) << r.hint;
    EXPECT_EQ(r.outcomes.unavailable_unnamed, 0u) << "Unavailable without the shard; " << r.hint;
    EXPECT_EQ(r.outcomes.other_failures, 0u) << r.outcomes.first_other << "; " << r.hint;
    EXPECT_EQ(r.contexts_left, 0u) << "surviving shards leaked contexts; " << r.hint;
    EXPECT_EQ(r.unreadable, 0u) << "surviving shards kept locks; " << r.hint;
    if (::testing::Test::HasFailure()) return;
    unavailable += r.outcomes.unavailable;
    committed += r.outcomes.committed;
    in_doubt += r.coord.in_doubt;
  }
  std::printf("shard crash: %d seeds, %llu committed, %llu failed Unavailable (%llu in doubt)\n",
              seeds, (unsigned long long)committed, (unsigned long long)unavailable,
              (unsigned long long)in_doubt);
}

// ---- malformed messages ----

struct OneShard {
  OneShard() : env(7), loop(env) {
    env.attach(loop);
    engine = std::make_unique<txn::Engine>(sim_engine_options(0, false), &env);
    auto* table = engine->create_table<1>("accounts");
    for (uint64_t k = 0; k < kKeysPerShard; ++k) {
      SHOAL_CHECK(table->load(key1(k), Account{0, check::kInitialTxn, kInitial}).ok());
    }
    dist::ParticipantOptions po;
    po.lease_ns = kLeaseNs;
    participant = std::make_unique<dist::Participant>(*engine, 0, po);
    service = std::make_unique<dist::ParticipantService>(*participant, loop);
  }
  ~OneShard() {
    service.reset();
    env.detach(loop);
  }
  SimEnv env;
  rt::EventLoop loop;
  std::unique_ptr<txn::Engine> engine;
  std::unique_ptr<dist::Participant> participant;
  std::unique_ptr<dist::ParticipantService> service;
};

// Valid requests of every method for transaction `id` (a read, a lock of one write, ...).
std::vector<WireRequest> valid_requests(check::TxnId id) {
  std::vector<WireRequest> out;
  rt::MsgBuffer b;
  const uint64_t key = 3;
  SHOAL_CHECK(dist::wire::encode_read(id, 1, kTableId, &key, 1, sizeof(Account), true, &b).ok());
  out.emplace_back(dist::wire::kRead, payload_of(b));
  const Account acc{1, 1, 7};
  dist::StagedWrite w;
  w.key_word_count = 1;
  w.key[0] = key;
  w.value = &acc;
  w.size_bytes = sizeof acc;
  SHOAL_CHECK(dist::wire::encode_lock(id, 1, &w, 1, &b).ok());
  out.emplace_back(dist::wire::kLock, payload_of(b));
  dist::wire::encode_txn_only(id, 1, &b);
  out.emplace_back(dist::wire::kValidate, payload_of(b));
  txn::DepVec v;
  v.raise(0, 5);
  v.raise(2, 9);
  SHOAL_CHECK(dist::wire::encode_install(id, 1, 5, v, &b).ok());
  out.emplace_back(dist::wire::kInstall, payload_of(b));
  dist::wire::encode_txn_only(id, 1, &b);
  out.emplace_back(dist::wire::kAbort, payload_of(b));
  return out;
}

TEST(DistRpcWire, TruncatedAndOverlongRequestsAreRefused) {
  OneShard sh;
  expect_truncated_and_overlong_refused(*sh.service, valid_requests(42), is_refusal);
  rt::MsgBuffer resp;
  EXPECT_EQ(sh.service->serve(7, {}, &resp).code(), Code::kNotSupported);
  EXPECT_EQ(sh.participant->active(), 0u) << "a refused request started a context";
}

TEST(DistRpcWire, OutOfRangeFieldsAreInvalidArgument) {
  OneShard sh;
  rt::MsgBuffer resp;
  auto reqs = valid_requests(43);
  auto patched = [&](size_t which, size_t offset, std::vector<uint8_t> bytes) {
    std::vector<uint8_t> m = reqs[which].second;
    std::memcpy(m.data() + offset, bytes.data(), bytes.size());
    return sh.service->serve(reqs[which].first, m, &resp);
  };
  // read: key_words 9, out_bytes beyond the value limit, unknown flags.
  EXPECT_EQ(patched(0, 20, {9, 0, 0, 0}).code(), Code::kInvalidArgument);
  EXPECT_EQ(patched(0, 24, {0xff, 0xff, 0, 0}).code(), Code::kInvalidArgument);
  EXPECT_EQ(patched(0, 28, {2, 0, 0, 0}).code(), Code::kInvalidArgument);
  // lock: a huge count, key_words 0, kind 7, a value beyond the limit.
  EXPECT_EQ(patched(1, 16, {0xff, 0xff, 0xff, 0xff}).code(), Code::kInvalidArgument);
  EXPECT_EQ(patched(1, 24, {0}).code(), Code::kInvalidArgument);
  EXPECT_EQ(patched(1, 25, {7}).code(), Code::kInvalidArgument);
  EXPECT_EQ(patched(1, 28, {0, 0x20, 0, 0}).code(), Code::kInvalidArgument);
  // install: a vector with 2^32-1 entries.
  EXPECT_EQ(patched(3, 24, {0xff, 0xff, 0xff, 0xff}).code(), Code::kInvalidArgument);
  // Replies on the coordinator's side.
  Account acc{};
  uint64_t tid = 0;
  txn::DepVec deps;
  const uint8_t big_read[4] = {0, 0x20, 0, 0};
  EXPECT_EQ(dist::wire::decode_read_reply(big_read, &acc, sizeof acc, nullptr).code(),
            Code::kInvalidArgument);
  const uint8_t short_read[6] = {24, 0, 0, 0, 1, 2};
  EXPECT_EQ(dist::wire::decode_read_reply(short_read, &acc, sizeof acc, nullptr).code(),
            Code::kCorruption);
  const uint8_t seven[7] = {};
  EXPECT_EQ(dist::wire::decode_lock_reply(seven, &tid).code(), Code::kCorruption);
  const uint8_t huge_vec[4] = {0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(dist::wire::decode_validate_reply(huge_vec, &deps).code(), Code::kInvalidArgument);
  const uint8_t short_vec[4 + 12] = {2};
  EXPECT_EQ(dist::wire::decode_validate_reply(short_vec, &deps).code(), Code::kCorruption);
  EXPECT_EQ(dist::wire::decode_empty_reply(seven).code(), Code::kCorruption);
  EXPECT_EQ(sh.participant->active(), 0u);
}

// Random corruption of valid requests (txn header kept, so every id can be aborted after):
// never a crash; afterwards aborts and leases leave no context and no lock.
TEST(DistRpcWire, FuzzedRequestsNeverCrashAndLeaveNothingBehind) {
  OneShard sh;
  Rng rng(SimEnv::seed_from_env(99));
  rt::MsgBuffer resp;
  uint64_t refused = 0;
  const int rounds = seed_count(3000, 300);
  for (int i = 0; i < rounds; ++i) {
    const auto [method, msg] = fuzzed_request(rng, valid_requests);
    Status s = sh.service->serve(method, msg, &resp);
    refused += is_refusal(s) ? 1 : 0;
  }
  for (check::TxnId id = kFuzzFirstId; id < kFuzzFirstId + kFuzzIds; ++id)
    sh.participant->abort(id);
  ASSERT_TRUE(sh.env.run_for(2 * kLeaseNs).ok());
  EXPECT_GT(refused, 0u);
  EXPECT_EQ(sh.participant->active(), 0u);
  txn::Txn t(sh.engine.get(), 1);
  t.begin();
  for (uint64_t k = 0; k < kKeysPerShard; ++k) {
    Account a{};
    EXPECT_TRUE(sh.engine->tables()[kTableId]->txn_get(t, &k, &a, sizeof a, nullptr).ok()) << k;
  }
  t.abort();
  t.end();
}

// A put of `acc` (which must outlive the write) to account `key`.
dist::StagedWrite staged_put(uint64_t key, const Account& acc) {
  dist::StagedWrite w;
  w.key_word_count = 1;
  w.key[0] = key;
  w.value = &acc;
  w.size_bytes = sizeof acc;
  return w;
}

// The participant's fault rules (participant.h F1-F5), one by one.
TEST(DistRpcWire, ParticipantFaultRules) {
  OneShard sh;
  dist::Participant& p = *sh.participant;
  const uint64_t key = 3;
  const Account acc{1, 1, 7};
  const dist::StagedWrite w = staged_put(key, acc);
  uint64_t tid = 0;
  Account got{};
  txn::DepVec deps;
  // F1: an abort that overtakes its lock wins; late reads are refused too.
  p.abort(1);
  EXPECT_TRUE(p.lock(1, 1, &w, 1, &tid).is_aborted());
  EXPECT_TRUE(p.read(1, 1, kTableId, &key, 1, &got, sizeof got, nullptr).is_aborted());
  EXPECT_EQ(p.active(), 0u);
  // F4: executing and locked-unvalidated contexts expire after the lease; prepared ones don't.
  ASSERT_TRUE(p.read(2, 1, kTableId, &key, 1, &got, sizeof got, nullptr).ok());
  const uint64_t key2 = 4, key3 = 5;
  dist::StagedWrite w2 = w, w3 = w;
  w2.key[0] = key2;
  w3.key[0] = key3;
  ASSERT_TRUE(p.lock(3, 1, &w2, 1, &tid).ok());
  ASSERT_TRUE(p.lock(4, 1, &w3, 1, &tid).ok());
  ASSERT_TRUE(p.validate(4, 1, &deps).ok());  // prepared
  ASSERT_TRUE(sh.env.run_for(kLeaseNs + kMs).ok());
  EXPECT_EQ(p.expire_idle(), 2u);
  EXPECT_EQ(p.active(), 1u);
  EXPECT_TRUE(p.validate(3, 1, &deps).is_aborted()) << "an expired context must vote no";
  // F2: installs are idempotent; F5: unknown ids answer NotFound (installed TID not known);
  // installing an aborted id is refused.
  EXPECT_TRUE(p.install(4, 1, tid, deps).ok());
  EXPECT_TRUE(p.install(4, 1, tid, deps).ok());
  EXPECT_EQ(p.install(999, 1, tid, deps).code(), Code::kNotFound);
  EXPECT_EQ(p.install(3, 1, tid, deps).code(), Code::kInvalidArgument);
  EXPECT_EQ(p.active(), 0u);
  // A late abort never downgrades a commit.
  p.abort(4);
  EXPECT_TRUE(p.install(4, 1, tid, deps).ok());
  // Install below the proposed TID is refused, not asserted.
  ASSERT_TRUE(p.lock(5, 1, &w, 1, &tid).ok());
  ASSERT_TRUE(p.validate(5, 1, &deps).ok());
  EXPECT_EQ(p.install(5, 1, tid - 1, deps).code(), Code::kInvalidArgument);
  p.abort(5);
  // Stale epochs are refused.
  p.advance_epoch(3);
  EXPECT_TRUE(p.read(6, 2, kTableId, &key, 1, &got, sizeof got, nullptr).is_aborted());
  EXPECT_EQ(p.active(), 0u);
  EXPECT_GE(p.stats().refused_ended, 2u);
}

// F10: with a stream floor, a context proposes kProposalLeadTids above it (the worker's
// commits until the install stay below) and reserves the proposal until it ends:
// lowest_reserved_tid() is the lowest live proposal (what the stream may not promise), and it
// moves on when that context installs or aborts, or when a failover drops it.
TEST(DistRpcWire, ProposalsAreReservedUntilTheirContextEnds) {
  OneShard sh;
  dist::Participant& p = *sh.participant;
  uint64_t floor = uint64_t{5} << 32;
  p.set_tid_floor(&floor);
  EXPECT_EQ(p.lowest_reserved_tid(), UINT64_MAX);
  const Account acc{1, 1, 7};  // the staged writes point at it
  const dist::StagedWrite w1 = staged_put(3, acc), w2 = staged_put(4, acc), w3 = staged_put(5, acc);
  uint64_t first = 0, second = 0, third = 0, installed = 0;
  txn::DepVec deps;
  ASSERT_TRUE(p.lock(1, 1, &w1, 1, &first).ok());
  EXPECT_EQ(first, floor + dist::Participant::kProposalLeadTids);
  EXPECT_EQ(p.lowest_reserved_tid(), first);
  // The worker commits meanwhile, some above the reservation (an epoch tick), but the
  // stream's promise (the floor) stays below it (repl::StreamAppender::set_reservations).
  floor += 7;
  ASSERT_TRUE(p.lock(2, 1, &w2, 1, &second).ok());
  EXPECT_EQ(second, floor + dist::Participant::kProposalLeadTids);
  EXPECT_EQ(p.lowest_reserved_tid(), first);
  // Proposals never repeat, nor fall to the held promise: with the stream's logged floor set,
  // they go above it, and above every earlier proposal (else two installs share one TID).
  uint64_t logged = floor;
  p.set_proposal_floor(&logged);
  const dist::StagedWrite w4 = staged_put(6, acc), w5 = staged_put(7, acc);
  uint64_t fourth = 0, fifth = 0;
  ASSERT_TRUE(p.lock(4, 1, &w4, 1, &fourth).ok());
  EXPECT_EQ(fourth, second + 1);
  logged = floor + dist::Participant::kProposalLeadTids + 100;  // the worker logged past them
  ASSERT_TRUE(p.lock(5, 1, &w5, 1, &fifth).ok());
  EXPECT_EQ(fifth, logged + dist::Participant::kProposalLeadTids);
  p.abort(4);
  p.abort(5);
  p.set_proposal_floor(nullptr);
  ASSERT_TRUE(p.validate(1, 1, &deps).ok());
  ASSERT_TRUE(p.install(1, 1, first + 5, deps, &installed).ok());
  EXPECT_EQ(installed, first + 5);  // exactly where the coordinator's vector says
  EXPECT_EQ(p.lowest_reserved_tid(), second);
  floor = installed;  // logged
  p.abort(2);
  EXPECT_EQ(p.lowest_reserved_tid(), UINT64_MAX);
  // A prepared context whose decision a failover could not get stays prepared but holds the
  // promise no more; its later install goes above the stream as before.
  ASSERT_TRUE(p.lock(3, 1, &w3, 1, &third).ok());
  ASSERT_TRUE(p.validate(3, 1, &deps).ok());
  EXPECT_EQ(p.lowest_reserved_tid(), third);
  p.drop_reservation(3);
  EXPECT_EQ(p.lowest_reserved_tid(), UINT64_MAX);
  EXPECT_EQ(p.stats().reservations_dropped, 1u);
  EXPECT_EQ(p.active(), 1u);
  floor = third + 10;
  ASSERT_TRUE(p.install(3, 1, third, deps, &installed).ok());
  EXPECT_EQ(installed, floor + 1);
  p.drop_reservation(3);  // ended: a no-op
  EXPECT_EQ(p.stats().reservations_dropped, 1u);
}

// F10: with a stream floor, a context proposes and installs above it and says where; a
// repeated install answers with the same TID.
TEST(DistRpcWire, InstallsGoAboveTheStreamFloorAndReportIt) {
  OneShard sh;
  dist::Participant& p = *sh.participant;
  uint64_t floor = 0;
  p.set_tid_floor(&floor);
  const uint64_t key = 3;
  const Account acc{1, 1, 7};
  const dist::StagedWrite w = staged_put(key, acc);
  uint64_t proposed = 0, installed = 0, again = 0;
  txn::DepVec deps;
  floor = uint64_t{5} << 32;
  ASSERT_TRUE(p.lock(1, 1, &w, 1, &proposed).ok());
  EXPECT_GT(proposed, floor);
  ASSERT_TRUE(p.validate(1, 1, &deps).ok());
  floor = proposed + 100;  // the worker logged more commits than the lead meanwhile
  ASSERT_TRUE(p.install(1, 1, proposed, deps, &installed).ok());
  EXPECT_EQ(installed, floor + 1);
  ASSERT_TRUE(p.install(1, 1, proposed, deps, &again).ok());
  EXPECT_EQ(again, installed);
  // F5: once the tombstone expired the installed TID is gone: the repeat must not answer Ok
  // (with 0, the coordinator kept its own TID, below the logged one) but NotFound.
  ASSERT_TRUE(sh.env.run_for(p.options().tombstone_ns + kMs).ok());
  again = 12345;
  const Status late = p.install(1, 1, proposed, deps, &again);
  EXPECT_EQ(late.code(), Code::kNotFound) << late.to_string();
  EXPECT_NE(late.to_string().find("unknown"), std::string::npos) << late.to_string();
  EXPECT_EQ(again, 0u);
  EXPECT_EQ(p.stats().unknown_installs, 1u);
  // The wire: the install reply is that TID, exactly 8 bytes.
  uint64_t tid = 0;
  const uint64_t v = 77;
  std::vector<uint8_t> reply(8);
  std::memcpy(reply.data(), &v, 8);
  ASSERT_TRUE(dist::wire::decode_install_reply(reply, &tid).ok());
  EXPECT_EQ(tid, 77u);
  EXPECT_EQ(dist::wire::decode_install_reply({reply.data(), 7}, &tid).code(), Code::kCorruption);
  reply.push_back(0);
  EXPECT_EQ(dist::wire::decode_install_reply(reply, &tid).code(), Code::kCorruption);
}

// Over real RPC: garbage for every method gets an error reply, and the link keeps working.
TEST(DistRpcWire, GarbageOverRpcIsAnsweredAndTheLinkKeepsWorking) {
  RunConfig cfg;
  cfg.faults = false;
  RpcCluster c(5, cfg);
  Rpc& rpc = *c.conns[0]->rpc[0];  // coordinator 0 -> shard 0
  std::vector<Status> got;
  Status committed;
  SHOAL_CHECK(c.loops[coord_node(0)]
                  ->spawn([](Rpc* rpc, dist::Coordinator* coord, std::vector<Status>* got,
                             Status* committed) -> rt::Task<void> {
                    for (uint16_t m = dist::wire::kMethodFirst; m <= dist::wire::kMethodLast; ++m) {
                      rt::MsgBuffer b = rpc->buffer(5);
                      std::memset(b.payload().data(), 0xab, 5);
                      got->push_back((co_await rpc->call(0, m, std::move(b))).status());
                    }
                    check::HistoryRecorder rec(1);
                    Rng rng(1);
                    TxnArgs args = make_args(rng, &rec.thread_log(0));
                    TxnResult result;
                    dist::DistTxn txn;
                    *committed = co_await coord->run(txn, &bank_txn, &args, &result);
                  }(&rpc, c.coords[0].get(), &got, &committed))
                  .ok());
  ASSERT_TRUE(c.env.run_for(1'000 * kMs).ok());
  const size_t methods = dist::wire::kMethodLast - dist::wire::kMethodFirst + 1;
  ASSERT_EQ(got.size(), methods);
  for (const Status& s : got) EXPECT_EQ(s.code(), Code::kCorruption) << s.to_string();
  EXPECT_TRUE(committed.ok()) << committed.to_string();
  EXPECT_EQ(c.services[0]->malformed(), methods);
}

}  // namespace dist_rpc_sim_test
}  // namespace shoal::sim

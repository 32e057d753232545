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
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sim/history.h"
#include "sim/serializability.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"
#include "src/dist/coordinator.h"
#include "src/dist/participant.h"
#include "src/dist/rpc_link.h"
#include "src/runtime/event_loop.h"
#include "src/runtime/rpc.h"

namespace shoal::sim {
namespace {

using Rpc = rt::RpcEndpoint<SimEndpoint>;
using Link = dist::RpcLink<SimEndpoint>;

constexpr uint64_t kMs = 1'000'000;
constexpr uint32_t kShards = 3;
constexpr uint32_t kCoordinators = 3;
constexpr uint64_t kKeysPerShard = 64;
constexpr uint32_t kTableId = 0;
constexpr int64_t kInitial = 1000;
constexpr int64_t kTotal = int64_t{kShards} * kKeysPerShard * kInitial;
constexpr uint64_t kLeaseNs = 400 * kMs;
constexpr uint64_t kTraceTxn = 0xd157;

NodeId shard_node(uint32_t s) {
  return s;
}
NodeId coord_node(uint32_t c) {
  return kShards + c;
}
uint32_t shard_of(uint64_t key) {
  return static_cast<uint32_t>(key / kKeysPerShard);
}

struct Account {
  uint64_t seq;     // per-key version number, for the history checker
  uint64_t writer;  // history id of the transaction that wrote this version
  int64_t balance;
};

struct RunConfig {
  bool faults = true;
  bool skip_validation = false;
  int clients_per_coordinator = 4;
  int txns_per_client = 25;
  uint64_t crash_at_ns = 0;  // 0: no crash
  uint32_t crash_shard = 2;
};

rt::RpcOptions rpc_options() {
  rt::RpcOptions o;
  o.max_sessions = 16;
  o.window = 8;
  o.retransmit_ns = 2 * kMs;
  o.max_retransmit_ns = 16 * kMs;
  o.timeout_ns = 50 * kMs;
  return o;
}

// One RPC connection between a coordinator node (side 0) and a shard node (side 1).
struct Conn {
  SimEndpoint ep[2];
  std::unique_ptr<Rpc> rpc[2];
};

// Members are declared so that destruction runs coordinators, links, RPC endpoints, services,
// participants (which release what they hold), engines, then loops.
struct RpcCluster {
  RpcCluster(uint64_t seed, const RunConfig& cfg)
      : env(seed), net(env, kShards + kCoordinators, network_options(cfg)) {
    for (uint32_t n = 0; n < kShards + kCoordinators; ++n) {
      loops.push_back(std::make_unique<rt::EventLoop>(env));
      env.attach(*loops.back());
      attached.push_back(true);
    }
    for (uint32_t s = 0; s < kShards; ++s) add_shard(s, cfg);
    for (uint32_t c = 0; c < kCoordinators; ++c) {
      std::vector<dist::ShardLink*> shard_links;
      for (uint32_t s = 0; s < kShards; ++s) shard_links.push_back(connect(c, s));
      dist::CoordinatorOptions o;
      o.shard_id = c;  // TxnIds: unique per coordinator
      o.max_retries = 1000;
      coords.push_back(std::make_unique<dist::Coordinator>(o, shard_links, &epoch));
    }
  }
  ~RpcCluster() {
    for (size_t n = 0; n < loops.size(); ++n) {
      if (attached[n]) env.detach(*loops[n]);
    }
  }
  static NetworkOptions network_options(const RunConfig& cfg) {
    NetworkOptions o;
    if (cfg.faults) {
      o.faults.loss = 0.05;
      o.faults.duplicate = 0.05;
      o.faults.reorder = 0.05;
    }
    return o;
  }
  void add_shard(uint32_t s, const RunConfig& cfg) {
    txn::EngineOptions o;
    o.epoch_ticker = false;
    o.lock_wait_spins_max = 16;  // locks live for round trips here: fail fast, retry
    o.shard_id = s;
    o.unsafe_skip_read_validation = cfg.skip_validation;
    engines.push_back(std::make_unique<txn::Engine>(o, &env));
    auto* table = engines.back()->create_table<1>("accounts");
    for (uint64_t k = 0; k < kKeysPerShard; ++k) {
      Status st = table->load(key1(s * kKeysPerShard + k), Account{0, kInitialTxn, kInitial});
      SHOAL_CHECK(st.ok());
    }
    dist::ParticipantOptions po;
    po.inflight_max = 256;
    po.lease_ns = kLeaseNs;
    participants.push_back(std::make_unique<dist::Participant>(*engines.back(), s, po));
    services.push_back(
        std::make_unique<dist::ParticipantService>(*participants.back(), *loops[shard_node(s)]));
  }
  dist::ShardLink* connect(uint32_t c, uint32_t s) {
    auto pair = net.connect(coord_node(c), shard_node(s));
    SHOAL_CHECK(pair.ok());
    auto conn = std::make_unique<Conn>();
    conn->ep[0] = std::move(pair->first);
    conn->ep[1] = std::move(pair->second);
    conn->rpc[0] = std::make_unique<Rpc>(*loops[coord_node(c)], conn->ep[0], rpc_options());
    conn->rpc[1] = std::make_unique<Rpc>(*loops[shard_node(s)], conn->ep[1], rpc_options());
    SHOAL_CHECK(conn->rpc[0]->start().ok());
    SHOAL_CHECK(conn->rpc[1]->start().ok());
    services[s]->attach(*conn->rpc[1]);
    dist::RpcLinkOptions lo;
    lo.shard = s;
    lo.call_timeout_ns = 50 * kMs;
    lo.end_attempts_max = 400;  // 20 s of virtual time: longer than any partition here
    links.push_back(std::make_unique<Link>(*conn->rpc[0], lo));
    conns.push_back(std::move(conn));
    return links.back().get();
  }
  void crash_shard(uint32_t s) {
    net.crash(shard_node(s));
    env.detach(*loops[shard_node(s)]);  // the crashed node's core stops
    attached[shard_node(s)] = false;
  }

  SimEnv env;
  SimNetwork net;
  uint64_t epoch = 1;
  std::vector<std::unique_ptr<rt::EventLoop>> loops;  // per node
  std::vector<bool> attached;
  std::vector<std::unique_ptr<txn::Engine>> engines;  // per shard
  std::vector<std::unique_ptr<dist::Participant>> participants;
  std::vector<std::unique_ptr<dist::ParticipantService>> services;
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<std::unique_ptr<Link>> links;
  std::vector<std::unique_ptr<dist::Coordinator>> coords;
};

// ---- workload ----

struct TxnArgs {
  uint64_t keys[4];
  uint32_t key_count;
  bool audit;
  int64_t amount;
  TxnId history_id;
};
struct TxnResult {
  TxnRecord record;
};

// A transfer between two accounts, or a read-only audit of four; both record what they saw.
rt::Task<Status> bank_txn(dist::DistTxn& txn, const void* args_ptr, void* result_ptr) {
  const auto& a = *static_cast<const TxnArgs*>(args_ptr);
  auto& r = *static_cast<TxnResult*>(result_ptr);
  r.record = TxnRecord{};
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

TxnArgs make_args(Rng& rng, HistoryRecorder::ThreadLog* log) {
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

rt::Task<void> client(RpcCluster* c, dist::Coordinator* coord, HistoryRecorder::ThreadLog* log,
                      uint64_t seed, int count, uint32_t crash_shard, Outcomes* out) {
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

// Temporary partitions between random coordinator/shard pairs, and now and then a shard cut
// off from everyone, until `until_ns`.
struct Chaos {
  SimNetwork* net;
  Rng rng;
  bool on = true;
  static void tick(void* self, uint64_t) {
    auto* c = static_cast<Chaos*>(self);
    if (!c->on) return;
    const uint64_t dice = c->rng.uniform(0, 9);
    if (dice < 4) {
      c->net->partition(coord_node(static_cast<uint32_t>(c->rng.uniform(0, kCoordinators - 1))),
                        shard_node(static_cast<uint32_t>(c->rng.uniform(0, kShards - 1))));
    } else if (dice == 4) {
      c->net->isolate({shard_node(static_cast<uint32_t>(c->rng.uniform(0, kShards - 1)))});
    } else if (dice < 8) {
      c->net->heal_all();
    }
    c->net->env().after(c->rng.uniform(2, 30) * kMs, &Chaos::tick, self);
  }
};

struct RunResult {
  bool finished = false;
  std::string hint;
  Outcomes outcomes;
  dist::CoordinatorStats coord;  // summed
  dist::ParticipantStats part;   // summed over live shards
  History history;
  int64_t total_balance = 0;
  size_t contexts_left = 0;  // live shards
  size_t unreadable = 0;     // records a fresh transaction cannot read (live shards)
  uint64_t trace_hash = 0;
  uint64_t virtual_ms = 0;
  NetworkStats net;
  uint64_t retransmits = 0;
};

void sum_coordinator(const dist::CoordinatorStats& s, dist::CoordinatorStats* out) {
  out->committed += s.committed;
  out->conflict_aborts += s.conflict_aborts;
  out->failed += s.failed;
  out->cross_shard += s.cross_shard;
  out->timeouts += s.timeouts;
  out->unavailable += s.unavailable;
  out->in_doubt += s.in_doubt;
}
void sum_participant(const dist::ParticipantStats& s, dist::ParticipantStats* out) {
  out->refused_ended += s.refused_ended;
  out->early_aborts += s.early_aborts;
  out->repeated_installs += s.repeated_installs;
  out->expired += s.expired;
}

// Reads every record of shard s with a fresh local transaction: a lock left behind fails it.
size_t unreadable_records(RpcCluster& c, uint32_t s) {
  txn::Txn t(c.engines[s].get(), 1);
  t.begin();
  size_t bad = 0;
  for (uint64_t k = 0; k < kKeysPerShard; ++k) {
    const uint64_t key = s * kKeysPerShard + k;
    Account a{};
    if (!c.engines[s]->tables()[kTableId]->txn_get(t, &key, &a, sizeof a, nullptr).ok()) ++bad;
  }
  t.abort();
  t.end();
  return bad;
}

void collect(RpcCluster& c, const RunConfig& cfg, RunResult* out) {
  for (auto& coord : c.coords) sum_coordinator(coord->stats(), &out->coord);
  for (uint32_t s = 0; s < kShards; ++s) {
    if (cfg.crash_at_ns != 0 && s == cfg.crash_shard) continue;
    out->contexts_left += c.participants[s]->active();
    out->unreadable += unreadable_records(c, s);
    sum_participant(c.participants[s]->stats(), &out->part);
    auto* table = static_cast<txn::Table<1>*>(c.engines[s]->find_table("accounts"));
    table->for_each(key1(0), Key1::max(), [&](const Key1&, const void* v, uint32_t) {
      out->total_balance += static_cast<const Account*>(v)->balance;
      return true;
    });
  }
  for (auto& conn : c.conns) out->retransmits += conn->rpc[0]->stats().retransmits;
  out->net = c.net.stats();
  out->virtual_ms = c.env.now_ns() / kMs;
}

RunResult run_bank(uint64_t seed, const RunConfig& cfg) {
  RpcCluster c(seed, cfg);
  RunResult out;
  HistoryRecorder recorder(kCoordinators * cfg.clients_per_coordinator);
  for (uint32_t co = 0; co < kCoordinators; ++co) {
    for (int i = 0; i < cfg.clients_per_coordinator; ++i) {
      auto* log = &recorder.thread_log(co * cfg.clients_per_coordinator + i);
      SHOAL_CHECK(c.loops[coord_node(co)]
                      ->spawn(client(&c, c.coords[co].get(), log, seed * 1000 + co * 100 + i,
                                     cfg.txns_per_client, cfg.crash_shard, &out.outcomes))
                      .ok());
    }
  }
  Chaos chaos{&c.net, Rng(seed ^ 0xc4a05), cfg.faults};
  if (cfg.faults) c.env.after(5 * kMs, &Chaos::tick, &chaos);
  if (cfg.crash_at_ns != 0) {
    c.env.at(
        cfg.crash_at_ns,
        [](void* cl, uint64_t s) { static_cast<RpcCluster*>(cl)->crash_shard(uint32_t(s)); }, &c,
        cfg.crash_shard);
  }
  const int clients = static_cast<int>(kCoordinators) * cfg.clients_per_coordinator;
  Status st =
      c.env.run_until_true([&] { return out.outcomes.clients_done == clients; }, 600'000 * kMs);
  out.hint = c.env.replay_hint();
  if (!st.ok()) return out;
  // Quiesce: stop the chaos, heal, and give aborts, retried installs and leases time to end
  // everything still open.
  chaos.on = false;
  c.net.heal_all();
  if (!c.env.run_for(2 * kLeaseNs).ok()) return out;
  out.finished = true;
  collect(c, cfg, &out);
  out.history = recorder.merge();
  out.trace_hash = c.env.trace_hash();
  return out;
}

int seed_count(int normal, int small) {
  if (std::getenv("SHOAL_SIM_SEED") != nullptr) return 1;
  const char* scale = std::getenv("SHOAL_TEST_SCALE");
  return scale != nullptr && std::string(scale) == "small" ? small : normal;
}

// The checks every healthy run must pass; false (with gtest failures) otherwise.
bool check_run(const RunResult& r, uint64_t seed) {
  EXPECT_TRUE(r.finished) << "run did not finish; " << r.hint;
  if (!r.finished) return false;
  EXPECT_EQ(r.total_balance, kTotal) << "money not conserved; " << r.hint;
  EXPECT_EQ(r.contexts_left, 0u) << "participant contexts leaked; " << r.hint;
  EXPECT_EQ(r.unreadable, 0u) << "locks left behind; " << r.hint;
  EXPECT_EQ(r.outcomes.other_failures + r.outcomes.unavailable, 0u)
      << "transactions failed (first: " << r.outcomes.first_other << "); " << r.hint;
  EXPECT_EQ(r.coord.in_doubt, 0u) << r.hint;
  auto anomalies = check(r.history);
  EXPECT_TRUE(anomalies.empty()) << "not serializable, seed=" << seed
                                 << " (replay: SHOAL_SIM_SEED=" << seed << "): "
                                 << (anomalies.empty() ? "" : anomalies.front().explanation);
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
  const uint64_t seed = SimEnv::seed_from_env(4242);
  const RunResult a = run_bank(seed, RunConfig{});
  const RunResult b = run_bank(seed, RunConfig{});
  const RunResult other = run_bank(seed + 1, RunConfig{});
  ASSERT_TRUE(a.finished && b.finished && other.finished) << a.hint;
  EXPECT_EQ(a.trace_hash, b.trace_hash) << "same seed, different run: " << a.hint;
  EXPECT_EQ(a.outcomes.committed, b.outcomes.committed);
  EXPECT_EQ(a.coord.conflict_aborts, b.coord.conflict_aborts);
  EXPECT_EQ(a.virtual_ms, b.virtual_ms);
  EXPECT_NE(a.trace_hash, other.trace_hash) << a.hint;
}

// Without read validation at the participants, the checker must see the damage.
TEST(DistRpcSim, SkippedValidationIsCaught) {
  RunConfig cfg;
  cfg.skip_validation = true;
  bool caught = false;
  uint64_t seed = 1;
  for (; seed <= 30 && !caught; ++seed) {
    RunResult r = run_bank(seed, cfg);
    caught = !r.finished || !check(r.history).empty() || r.total_balance != kTotal;
  }
  EXPECT_TRUE(caught);
  std::printf("planted bug (no read validation) caught at seed %llu\n",
              (unsigned long long)(seed - 1));
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
    txn::EngineOptions o;
    o.epoch_ticker = false;
    o.lock_wait_spins_max = 16;  // locks live for round trips here: fail fast, retry
    engine = std::make_unique<txn::Engine>(o, &env);
    auto* table = engine->create_table<1>("accounts");
    for (uint64_t k = 0; k < kKeysPerShard; ++k) {
      SHOAL_CHECK(table->load(key1(k), Account{0, kInitialTxn, kInitial}).ok());
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

std::vector<uint8_t> bytes_of(const rt::MsgBuffer& b) {
  return {b.payload().begin(), b.payload().end()};
}

// Valid requests of every method for transaction `id` (a read, a lock of one write, ...).
std::vector<std::pair<uint16_t, std::vector<uint8_t>>> valid_requests(TxnId id) {
  std::vector<std::pair<uint16_t, std::vector<uint8_t>>> out;
  rt::MsgBuffer b;
  const uint64_t key = 3;
  SHOAL_CHECK(dist::wire::encode_read(id, 1, kTableId, &key, 1, sizeof(Account), true, &b).ok());
  out.emplace_back(dist::wire::kRead, bytes_of(b));
  const Account acc{1, 1, 7};
  dist::StagedWrite w;
  w.key_word_count = 1;
  w.key[0] = key;
  w.value = &acc;
  w.size_bytes = sizeof acc;
  SHOAL_CHECK(dist::wire::encode_lock(id, 1, &w, 1, &b).ok());
  out.emplace_back(dist::wire::kLock, bytes_of(b));
  dist::wire::encode_txn_only(id, 1, &b);
  out.emplace_back(dist::wire::kValidate, bytes_of(b));
  txn::DepVec v;
  v.raise(0, 5);
  v.raise(2, 9);
  SHOAL_CHECK(dist::wire::encode_install(id, 1, 5, v, &b).ok());
  out.emplace_back(dist::wire::kInstall, bytes_of(b));
  dist::wire::encode_txn_only(id, 1, &b);
  out.emplace_back(dist::wire::kAbort, bytes_of(b));
  return out;
}

bool is_refusal(const Status& s) {
  return s.code() == Code::kCorruption || s.code() == Code::kInvalidArgument;
}

TEST(DistRpcWire, TruncatedAndOverlongRequestsAreRefused) {
  OneShard sh;
  rt::MsgBuffer resp;
  for (const auto& [method, msg] : valid_requests(42)) {
    for (size_t n = 0; n < msg.size(); ++n) {  // every strict prefix
      Status s = sh.service->serve(method, {msg.data(), n}, &resp);
      EXPECT_TRUE(is_refusal(s)) << "method " << method << " prefix " << n << ": " << s.to_string();
    }
    std::vector<uint8_t> longer = msg;
    longer.push_back(0);
    Status s = sh.service->serve(method, longer, &resp);
    EXPECT_TRUE(is_refusal(s)) << "method " << method << " + 1 byte: " << s.to_string();
  }
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
    const TxnId id = 1000 + static_cast<TxnId>(rng.uniform(0, 63));
    auto reqs = valid_requests(id);
    auto [method, msg] = reqs[rng.uniform(0, reqs.size() - 1)];
    const uint64_t mutation = rng.uniform(0, 2);
    if (mutation == 0) {
      msg.resize(dist::wire::kTxnHeaderBytes + rng.uniform(0, msg.size() + 8));
    }
    for (uint64_t flips = rng.uniform(1, 4); flips > 0 && msg.size() > 16; --flips) {
      msg[rng.uniform(16, msg.size() - 1)] = static_cast<uint8_t>(rng.next());
    }
    Status s = sh.service->serve(method, msg, &resp);
    refused += is_refusal(s) ? 1 : 0;
  }
  for (TxnId id = 1000; id < 1064; ++id) sh.participant->abort(id);
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

// The participant's fault rules (participant.h F1-F5), one by one.
TEST(DistRpcWire, ParticipantFaultRules) {
  OneShard sh;
  dist::Participant& p = *sh.participant;
  const uint64_t key = 3;
  const Account acc{1, 1, 7};
  dist::StagedWrite w;
  w.key_word_count = 1;
  w.key[0] = key;
  w.value = &acc;
  w.size_bytes = sizeof acc;
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
  // F2: installs are idempotent; F5: unknown ids answer Ok; installing an aborted id is refused.
  EXPECT_TRUE(p.install(4, 1, tid, deps).ok());
  EXPECT_TRUE(p.install(4, 1, tid, deps).ok());
  EXPECT_TRUE(p.install(999, 1, tid, deps).ok());
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
                    HistoryRecorder rec(1);
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

}  // namespace
}  // namespace shoal::sim

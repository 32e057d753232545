// Acknowledgement by dependency vector over the simulated network (docs/REPLICATION.md, "Vectorized
// watermark across shards").
//
// The RPC cluster of dist_cluster_test_util.h (3 shards, 3 coordinators, 5% loss, duplication
// and reordering, temporary partitions) runs a bank workload; each coordinator has a
// VectorWatermark that its RpcLinks raise with every participant reply's watermark trailer,
// and a WatermarkExchange that asks every shard while a client waits. Shard watermarks advance
// by a simulated replication: a transaction's install on shard s is "chosen" a per-shard,
// per-seed delay (1-30 ms, plus jitter) after its coordinator committed it, and shard s's
// watermark is the highest chosen TID (monotone). A client is acknowledged only when its
// coordinator's vector watermark covers the transaction's vector.
//
// Checked over many seeds: at the moment of every acknowledgement, each entry of the
// transaction's vector is at or below the shard's true watermark (nothing acknowledged before
// what it depends on is replicated), and every committed transaction is acknowledged (each
// client waits for its acknowledgement before the next transaction, so a run only finishes
// once all are). A planted bug (acknowledging on the coordinator's own shard's entry only)
// must be caught. Every failure names its seed; SHOAL_SIM_SEED=<seed> reruns just that seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "sim/dist_cluster_test_util.h"
#include "src/dist/vector_watermark.h"
#include "src/dist/watermark_exchange.h"
#include "src/txn/engine.h"

namespace shoal::sim {
namespace dist_watermark_sim_test {  // named, not anonymous: unique in a unity build

constexpr uint64_t kKeysPerShard = 32;
constexpr uint32_t kTableId = 0;
constexpr int64_t kInitial = 1000;
constexpr int64_t kTotal = int64_t{kShards} * kKeysPerShard * kInitial;
constexpr uint64_t kTraceAck = 0xac4;
constexpr uint64_t kReplicationTickNs = 1 * kMs;

uint32_t shard_of(uint64_t key) {
  return static_cast<uint32_t>(key / kKeysPerShard);
}

// A shard and its simulated replication: `watermark` is what its ReplicationLeader would
// publish (the participant's replies and the exchange read it), `pending` the installs not
// chosen yet, in the order they will be.
struct ReplicatedShard {
  std::unique_ptr<txn::Engine> engine;
  std::unique_ptr<dist::Participant> participant;
  std::atomic<uint64_t> watermark{0};
  std::deque<std::pair<uint64_t, uint64_t>> pending;  // (chosen at ns, TID)
  uint64_t delay_ns = 0;
  uint64_t last_chosen_ns = 0;
};

std::unique_ptr<ReplicatedShard> make_shard(SimEnv& env, uint32_t s,
                                            const dist::ParticipantOptions& po) {
  auto sh = std::make_unique<ReplicatedShard>();
  sh->engine = std::make_unique<txn::Engine>(sim_engine_options(s, false), &env);
  auto* table = sh->engine->create_table<1>("accounts");
  for (uint64_t k = 0; k < kKeysPerShard; ++k) {
    SHOAL_CHECK(
        table->load(key1(s * kKeysPerShard + k), Account{0, check::kInitialTxn, kInitial}).ok());
  }
  sh->participant = std::make_unique<dist::Participant>(*sh->engine, s, po);
  // The loaded state is replicated at bootstrap (REPLICATION.md): loads are at TID (1, 0).
  sh->watermark = txn::Tid::make(1, 0);
  return sh;
}

struct RunConfig {
  bool faults = true;
  bool bug_own_shard_only = false;  // planted: wait for the coordinator's own entry only
  bool exchange = true;             // run the coordinators' WatermarkExchange
  uint64_t deadline_ns = 600'000 * kMs;
  int clients_per_coordinator = 3;
  int txns_per_client = 15;
};

struct Outcomes {
  uint64_t committed = 0;
  uint64_t failed = 0;
  uint64_t acked = 0;
  uint64_t ack_refused = 0;
  uint64_t early_acks = 0;  // acknowledged with an entry above the shard's true watermark
  std::string first_early;
  uint64_t ack_wait_ns_max = 0;
  int clients_done = 0;
};

struct WmCluster : SimCluster<ReplicatedShard> {
  WmCluster(uint64_t seed, const RunConfig& cfg)
      : SimCluster(seed, cfg.faults, &make_shard, /*coordinator_backoff=*/false,
                   /*vector_watermarks=*/true),
        rng(seed ^ 0x3a7e) {
    for (uint32_t s = 0; s < kShards; ++s) {
      ReplicatedShard& sh = *shards[s];
      sh.delay_ns = rng.uniform(1, 30) * kMs;
      services[s]->set_watermark_source(&sh.watermark);
      env.after(kReplicationTickNs, &WmCluster::replication_tick, this, s);
    }
    for (uint32_t co = 0; co < kCoordinators; ++co) {
      dist::WatermarkExchangeOptions o;
      o.shard = co;  // a coordinator node: no watermark of its own (source nullptr)
      o.period_ns = 2 * kMs;
      auto ex =
          std::make_unique<dist::WatermarkExchange>(*loops[coord_node(co)], *watermarks[co], o);
      for (uint32_t s = 0; s < kShards; ++s) {
        SHOAL_CHECK(ex->add_link(s, *links[co * kShards + s]).ok());
      }
      if (cfg.exchange) ex->start();
      exchanges.push_back(std::move(ex));
    }
  }

  // The installs of a committed transaction enter their shards' replication.
  void replicate(const dist::DistTxn& txn) {
    for (uint32_t s : txn.written_shards()) {
      ReplicatedShard& sh = *shards[s];
      const uint64_t jitter = rng.uniform(0, sh.delay_ns / 4);
      sh.last_chosen_ns = std::max(sh.last_chosen_ns, env.now_ns() + sh.delay_ns + jitter);
      sh.pending.emplace_back(sh.last_chosen_ns, txn.vector().get(s));
    }
  }
  static void replication_tick(void* self, uint64_t s) {
    auto* c = static_cast<WmCluster*>(self);
    ReplicatedShard& sh = *c->shards[s];
    uint64_t w = sh.watermark.load();
    while (!sh.pending.empty() && sh.pending.front().first <= c->env.now_ns()) {
      w = std::max(w, sh.pending.front().second);
      sh.pending.pop_front();
    }
    sh.watermark.store(w);
    if (!c->stopped) c->env.after(kReplicationTickNs, &WmCluster::replication_tick, self, s);
  }
  void stop() {
    stopped = true;
    for (auto& ex : exchanges) ex->stop();
  }

  Rng rng;
  bool stopped = false;
  std::vector<std::unique_ptr<dist::WatermarkExchange>> exchanges;
};

struct TxnArgs {
  uint64_t keys[3];
  bool audit;
  int64_t amount;
};

// A transfer between two accounts, or a read-only audit of three.
rt::Task<Status> bank_txn(dist::DistTxn& txn, const void* args_ptr, void*) {
  const auto& a = *static_cast<const TxnArgs*>(args_ptr);
  Account acc[3];
  const uint32_t n = a.audit ? 3 : 2;
  for (uint32_t i = 0; i < n; ++i) {
    SHOAL_CO_TRY(
        co_await txn.get(shard_of(a.keys[i]), kTableId, &a.keys[i], 1, &acc[i], sizeof(Account)));
  }
  if (a.audit) co_return Status::Ok();
  acc[0].balance -= a.amount;
  acc[1].balance += a.amount;
  for (uint32_t i = 0; i < 2; ++i) {
    acc[i].seq += 1;
    SHOAL_CO_TRY(txn.put(shard_of(a.keys[i]), kTableId, &a.keys[i], 1, &acc[i], sizeof(Account)));
  }
  co_return Status::Ok();
}

TxnArgs make_args(Rng& rng) {
  TxnArgs args{};
  args.audit = rng.uniform(0, 4) == 0;
  const uint32_t n = args.audit ? 3 : 2;
  for (uint32_t k = 0; k < n; ++k) {
    bool fresh = false;
    while (!fresh) {  // bounded in practice: 96 keys, at most 3 drawn
      args.keys[k] = rng.uniform(0, kShards * kKeysPerShard - 1);
      fresh = std::find(args.keys, args.keys + k, args.keys[k]) == args.keys + k;
    }
  }
  args.amount = static_cast<int64_t>(rng.uniform(1, 20));
  return args;
}

// Checks an acknowledgement against the shards' true watermarks at this instant.
void check_ack(WmCluster& c, const dist::DistTxn& txn, Outcomes* out) {
  for (const txn::DepEntry& e : txn.vector().entries()) {
    const uint64_t truth = c.shards[e.shard]->watermark.load();
    if (e.ts <= truth) continue;
    if (out->early_acks++ == 0) {
      out->first_early = fmt::format(
          "txn {:#x} acknowledged at {} ns with shard {} at {:#x}, "
          "whose watermark is {:#x}",
          txn.id(), c.env.now_ns(), e.shard, e.ts, truth);
    }
  }
}

rt::Task<void> client(WmCluster* c, uint32_t co, uint64_t seed, RunConfig cfg, Outcomes* out) {
  Rng rng(seed);
  dist::DistTxn txn;
  dist::VectorWatermark& vw = *c->watermarks[co];
  for (int i = 0; i < cfg.txns_per_client; ++i) {
    TxnArgs args = make_args(rng);
    Status s = co_await c->coords[co]->run(txn, &bank_txn, &args, nullptr);
    if (!s.ok()) {
      ++out->failed;
      continue;
    }
    ++out->committed;
    c->replicate(txn);
    txn::DepVec wait = txn.vector();
    if (cfg.bug_own_shard_only) {
      wait.clear();
      wait.raise(co, txn.vector().get(co));
    }
    const uint64_t t0 = c->env.now_ns();
    Status ack = co_await vw.wait_covered(wait);
    if (!ack.ok()) {
      ++out->ack_refused;
      continue;
    }
    ++out->acked;
    out->ack_wait_ns_max = std::max(out->ack_wait_ns_max, c->env.now_ns() - t0);
    c->env.trace(kTraceAck, txn.id(), c->env.now_ns());
    check_ack(*c, txn, out);
  }
  ++out->clients_done;
}

struct RunResult {
  bool finished = false;
  std::string hint;
  Outcomes outcomes;
  dist::CoordinatorStats coord;
  uint64_t piggybacked_rises = 0;  // raises by replies and exchange that moved an entry
  uint64_t exchange_answered = 0;
  uint64_t exchange_in_flight = 0;
  uint64_t malformed = 0;
  NetworkStats net;
  int64_t total_balance = 0;
  size_t waiting_left = 0;
};

RunResult run(uint64_t seed, const RunConfig& cfg) {
  WmCluster c(seed, cfg);
  RunResult out;
  int clients = 0;
  for (uint32_t co = 0; co < kCoordinators; ++co) {
    for (int i = 0; i < cfg.clients_per_coordinator; ++i, ++clients) {
      SHOAL_CHECK(c.loops[coord_node(co)]
                      ->spawn(client(&c, co, seed * 1000 + co * 100 + i, cfg, &out.outcomes))
                      .ok());
    }
  }
  c.start_chaos();
  Status st =
      c.env.run_until_true([&] { return out.outcomes.clients_done == clients; }, cfg.deadline_ns);
  out.hint = c.env.replay_hint();
  c.chaos.on = false;
  c.net.heal_all();
  c.stop();
  // Let in-flight exchange calls and retried installs end before the cluster goes.
  if (!c.env.run_for(2 * kLeaseNs).ok() || !st.ok()) return out;
  out.finished = true;
  out.net = c.net.stats();
  for (auto& coord : c.coords) sum_coordinator(coord->stats(), &out.coord);
  for (uint32_t co = 0; co < kCoordinators; ++co) {
    out.piggybacked_rises += c.watermarks[co]->stats().rises;
    out.waiting_left += c.watermarks[co]->waiting();
    out.exchange_answered += c.exchanges[co]->stats().answered;
    out.exchange_in_flight += c.exchanges[co]->in_flight();
  }
  for (uint32_t s = 0; s < kShards; ++s) {
    out.total_balance += balance_sum(*c.shards[s]->engine->find_table("accounts"));
    out.malformed += c.services[s]->malformed();
  }
  return out;
}

TEST(DistWatermarkSim, NoAckBeforeItsVectorIsReplicatedAndEveryCommitIsAcked) {
  const uint64_t base = SimEnv::seed_from_env(1);
  const int seeds = seed_count(100, 10);
  RunResult sum;
  for (int i = 0; i < seeds; ++i) {
    const uint64_t seed = base + i;
    RunResult r = run(seed, RunConfig{});
    ASSERT_TRUE(r.finished) << "run did not finish (seed " << seed << "); " << r.hint;
    const Outcomes& o = r.outcomes;
    ASSERT_EQ(o.early_acks, 0u) << o.first_early << "; " << r.hint;
    ASSERT_EQ(o.acked, o.committed) << "committed but never acknowledged; " << r.hint;
    ASSERT_EQ(o.ack_refused, 0u) << r.hint;
    ASSERT_EQ(r.waiting_left, 0u) << r.hint;
    ASSERT_EQ(r.coord.in_doubt, 0u) << r.hint;
    ASSERT_EQ(r.malformed, 0u) << r.hint;
    ASSERT_EQ(r.exchange_in_flight, 0u) << r.hint;
    ASSERT_EQ(r.total_balance, kTotal) << "money not conserved; " << r.hint;
    sum.outcomes.committed += o.committed;
    sum.outcomes.failed += o.failed;
    sum.outcomes.ack_wait_ns_max = std::max(sum.outcomes.ack_wait_ns_max, o.ack_wait_ns_max);
    sum.piggybacked_rises += r.piggybacked_rises;
    sum.exchange_answered += r.exchange_answered;
    sum_coordinator(r.coord, &sum.coord);
    sum.net.lost += r.net.lost;
    sum.net.duplicated += r.net.duplicated;
    sum.net.partition_drops += r.net.partition_drops;
  }
  // The workload must really cross shards and the exchange must really carry watermarks.
  EXPECT_GT(sum.coord.cross_shard, sum.outcomes.committed / 3);
  EXPECT_GT(sum.exchange_answered, 0u);
  EXPECT_GT(sum.coord.timeouts, 0u);
  EXPECT_GT(sum.net.lost + sum.net.duplicated + sum.net.partition_drops, 0u);
  std::printf(
      "dist watermark sim: %d seeds; %llu committed and acknowledged (%llu cross-shard), %llu "
      "failed, %llu timeout retries; %llu entry rises, %llu exchange messages; longest ack wait "
      "%.1f ms; net: %llu lost, %llu duplicated, %llu partition drops\n",
      seeds, (unsigned long long)sum.outcomes.committed, (unsigned long long)sum.coord.cross_shard,
      (unsigned long long)sum.outcomes.failed, (unsigned long long)sum.coord.timeouts,
      (unsigned long long)sum.piggybacked_rises, (unsigned long long)sum.exchange_answered,
      sum.outcomes.ack_wait_ns_max / 1e6, (unsigned long long)sum.net.lost,
      (unsigned long long)sum.net.duplicated, (unsigned long long)sum.net.partition_drops);
}

// Piggybacking alone does not finish: a coordinator's last transaction waits for a watermark
// that only a later reply from that shard would bring, and none comes. The exchange is what
// acknowledges it (the test above).
TEST(DistWatermarkSim, WithoutTheExchangeTheLastTransactionsWaitForever) {
  RunConfig cfg;
  cfg.faults = false;
  cfg.exchange = false;
  cfg.deadline_ns = 5'000 * kMs;  // far beyond any replication delay here (<= 38 ms)
  RunResult r = run(SimEnv::seed_from_env(77), cfg);
  EXPECT_FALSE(r.finished) << "every transaction was acknowledged without the exchange";
}

// Acknowledging when only the coordinator's own shard's entry is covered must be caught.
TEST(DistWatermarkSim, AckOnOwnShardOnlyIsCaught) {
  bool found = false;
  uint64_t seed = 1;
  for (; seed <= 30 && !found; ++seed) {
    RunConfig cfg;
    cfg.bug_own_shard_only = true;
    RunResult r = run(seed, cfg);
    found = r.finished && r.outcomes.early_acks > 0;
  }
  EXPECT_TRUE(found);
  std::printf("planted bug (ack on own shard only) caught at seed %llu\n",
              (unsigned long long)(seed - 1));
}

}  // namespace dist_watermark_sim_test
}  // namespace shoal::sim
